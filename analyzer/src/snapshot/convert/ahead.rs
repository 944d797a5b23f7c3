//! Trace entries read ahead of the parser, on a second thread.
//!
//! A pickle is read from its first opcode on: a memo reference names what the
//! opcodes before it stored, so a second parser cannot start halfway through. A
//! trace entry in the usual layout (see `entry`), though, needs the memo only to
//! name its action's str, its `user_metadata`'s and its frames: the rest is in its
//! own bytes. The read-ahead thread reads such entries a stretch ahead of the
//! parser, keeping those memo indices as they are, and hands them over in chunks.
//! When the parser meets an entry at exactly the offset where one was read ahead,
//! it looks the indices up in its memo and makes the entry's memo stores, a tenth
//! of the work of reading it; any other entry it reads itself. So whether an entry
//! was read ahead never changes what the parser makes of it: it is what
//! `entry::decode` reads from the same bytes with the same memo.
//!
//! The thread learns the layout (the bytes of the keys' memo references, which
//! name the same keys while the memo's epoch stays the same) from an entry the
//! parser read, and finds entries by their first bytes. An offset it takes for an
//! entry's but is not one (the same bytes inside a str) is never met by the
//! parser, so it costs only the thread's time. Each chunk begins a stretch ahead
//! of the parser, which reads the bytes in between itself meanwhile: the two share
//! the parse, and the stretch grows when the parser catches up with the thread.
//!
//! The thread pays where a third core is free for it. On two, though the
//! logging thread leaves half a core idle, the three threads sharing them
//! measured no faster (see [`worth_it`]).

use super::entry::{NA, Shape, USUAL, ends_entry, single_batch};
use super::frames_cache::FramesCache;
use super::{CUSTOM_STACK, Collector, EntryFields, F_ADDR, F_SIZE, F_STREAM, F_TIME};
use crate::snapshot::pickle::{OpReader, Val, op};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::thread::Scope;
use std::time::Duration;

/// How the read-ahead thread keeps pace with the parser, in bytes of pickle.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pace {
    /// How far ahead of the parser a chunk begins at first.
    pub first_lead: usize,
    /// The most that grows to.
    pub max_lead: usize,
    /// How far ahead of the parser the thread may get before it waits: the
    /// entries it holds for the parser take about half as many bytes of
    /// memory, and the file's pages it has read but the parser not yet, as
    /// many.
    pub max_ahead: usize,
    /// The bytes of pickle a chunk covers.
    pub chunk: usize,
}

impl Pace {
    /// For a snapshot of hundreds of MB: chunks of about a thousand entries,
    /// begun at least half a MB ahead of the parser (a millisecond of its
    /// reading), so that the thread's being scheduled out for a while does not
    /// let the parser catch it up, and at most 3 MB ahead, so that what it holds
    /// (the entries, and the file's pages it read) stays a few MB. (Measured on
    /// a 389 MB snapshot: larger chunks and leads were no faster, and held more.)
    pub const DEFAULT: Pace = Pace {
        first_lead: 512 << 10,
        max_lead: 2 << 20,
        max_ahead: 3 << 20,
        chunk: 128 << 10,
    };
}

/// Pickles smaller than this are parsed without reading ahead: starting the
/// thread would cost more than it saves.
const MIN_BYTES: usize = 4 << 20;

/// The fewest cores to read ahead on. On two, the parser busy all the time
/// and the logging thread about half of it, the read-ahead thread moved work
/// off the parser but the whole run measured no faster (a 3 M-event snapshot on two pinned cores of an H200 host: 0.91 s either
/// way, medians of 9, with 8 MB more memory; on another, 0.825 s against
/// 0.840 s, medians of 14, with 9 MiB more), while on four it took 0.75 s
/// instead of 1.07 s (medians of 5). Run on idle time only (`SCHED_IDLE`),
/// it took 0.93 and 1.01 times the wall time on two H200 hosts and 1.04 to
/// 1.09 times on the dev CPU, with 10 MiB more (13 and 30 pairs).
const MIN_CORES: usize = 3;

/// Whether to read ahead while parsing a pickle of `len` bytes held in memory:
/// a large one, with a core to spare (as this process may use: its CPU
/// affinity and quota).
pub(crate) fn worth_it(len: usize) -> bool {
    len >= MIN_BYTES
        && std::thread::available_parallelism().is_ok_and(|cores| cores.get() >= MIN_CORES)
}

/// What the thread needs to read entries: the keys of the usual layout, as the
/// parser learned them (see `entry::Shape`), at the memo epoch they hold for.
struct Layout {
    shape: Shape,
    // The offset the thread begins its search at: after the entry the
    // layout was learned from.
    from: u64,
}

/// A trace entry read ahead, its memo references unresolved.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ahead {
    // The offsets of the byte after its EMPTY_DICT (where `Hook::decode_dict`
    // begins) and of the byte after its SETITEMS.
    start: u64,
    end: u64,
    // The number fields, as `EntryFields::set_int` left them.
    time_us: Option<i64>,
    addr: u64,
    size: u64,
    stream: u64,
    impossible: bool,
    // The memo indices of the strs of `action` and `user_metadata`.
    action: u32,
    text: u32,
    frames: Frames,
}

/// An entry's `frames`, read ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frames {
    /// A list of its own, of one batch of memo references: the id the thread
    /// gave its bytes ([`NO_LIST`]: none, past the bytes it keeps).
    List(u32),
    /// A memo reference to a list read before (its memo index).
    Shared(u32),
}

/// [`Frames::List`] of a list the thread did not give an id.
const NO_LIST: u32 = u32::MAX;

/// What the thread and the parser share.
struct Shared {
    // The offset of the entry the parser reads, or last read.
    parser_at: AtomicU64,
    stop: AtomicBool,
}

/// The parser's end of the read-ahead thread: the entries read ahead, and the
/// stack handles of the frames lists the thread named.
pub(crate) struct ReadAhead {
    shared: Arc<Shared>,
    // Until the layout is sent.
    layout: Option<SyncSender<Layout>>,
    chunks: Receiver<Vec<Ahead>>,
    // Chunks emptied, for the thread to fill again.
    emptied: Sender<Vec<Ahead>>,
    chunk: Vec<Ahead>,
    next: usize,
    // The memo epoch of the layout sent: entries read ahead hold for it only.
    epoch: Option<u64>,
    // Stack handles by the thread's list ids, as the parser read them.
    handles: Vec<Option<u32>>,
    /// Entries taken from the thread.
    pub taken: u64,
}

/// What [`take`] did.
pub(super) enum Taken {
    /// The entry was read ahead: its fields are filled in and the reader is
    /// past it.
    Read,
    /// Read it yourself, then tell [`ReadAhead::learned`] its stack for this list id.
    Learn(u32),
    /// Read it yourself.
    No,
    /// Its memo stores failed: it is not a usual entry (nor would `decode` read it).
    Fail,
}

impl ReadAhead {
    /// Starts the thread, over the whole pickle `bytes`. It waits for a layout,
    /// and stops when the returned end is dropped.
    pub(crate) fn start<'s>(scope: &'s Scope<'s, '_>, bytes: &'s [u8], pace: Pace) -> ReadAhead {
        let shared = Arc::new(Shared {
            parser_at: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let (layout_tx, layout_rx) = sync_channel(1);
        let (chunks_tx, chunks) = channel();
        let (emptied, emptied_rx) = channel();
        let thread_shared = Arc::clone(&shared);
        scope.spawn(move || {
            if let Ok(layout) = layout_rx.recv() {
                read_ahead(bytes, &thread_shared, layout, pace, chunks_tx, emptied_rx);
            }
        });
        ReadAhead {
            shared,
            layout: Some(layout_tx),
            chunks,
            emptied,
            chunk: Vec::new(),
            next: 0,
            epoch: None,
            handles: Vec::new(),
            taken: 0,
        }
    }

    /// The chunks the thread would read over the whole of `bytes`, read
    /// beforehand on this thread for the layout a parse of `bytes` sends it:
    /// every entry it can read is there when the parser comes to it.
    #[cfg(test)]
    pub(super) fn prefilled(bytes: &[u8]) -> ReadAhead {
        use crate::snapshot::pickle::Parser;
        let end = |layout| {
            let shared = Arc::new(Shared {
                parser_at: AtomicU64::new(0),
                stop: AtomicBool::new(false),
            });
            let (chunks_tx, chunks) = channel();
            let (emptied, emptied_rx) = channel();
            let (layout_tx, layout_rx) = sync_channel(1);
            let epoch = match layout {
                Some(layout) => {
                    let Layout { shape, .. } = layout;
                    let epoch = shape.epoch();
                    let pace = Pace {
                        first_lead: 0,
                        max_lead: 0,
                        max_ahead: usize::MAX,
                        chunk: 4096,
                    };
                    let layout = Layout { shape, from: 0 };
                    read_ahead(bytes, &shared, layout, pace, chunks_tx, emptied_rx);
                    Some(epoch)
                }
                None => None,
            };
            let ahead = ReadAhead {
                shared,
                layout: epoch.is_none().then_some(layout_tx),
                chunks,
                emptied,
                chunk: Vec::new(),
                next: 0,
                epoch,
                handles: Vec::new(),
                taken: 0,
            };
            (ahead, layout_rx)
        };
        // A parse with nothing read ahead, for the layout it sends.
        let (probe, offered) = end(None);
        let mut parser = Parser::over_bytes(bytes, &|_| {});
        let mut c = Collector::new(parser.heap_mut());
        c.read_ahead(probe);
        let _ = parser.run(&mut c);
        c.finish_parsing();
        end(offered.try_recv().ok()).0
    }

    /// Whether the thread still waits for a layout.
    #[inline]
    pub(super) fn wants_layout(&self) -> bool {
        self.layout.is_some()
    }

    /// Hands the thread `shape`, learned from the entry the parser just read
    /// with `ops` (from position 0), if the thread reads that entry the same
    /// way: the same bytes, to the same end.
    pub(super) fn offer_layout(&mut self, shape: &Shape, ops: &OpReader<'_>) {
        if !shape.is_exactly_usual() {
            return;
        }
        let mut lists = Lists::new(shape.epoch());
        let read = read_entry(ops.buf(), 0, shape, &mut lists);
        if read.is_none_or(|e| e.end != ops.pos() as u64) {
            return;
        }
        let Some(to_thread) = self.layout.take() else {
            return;
        };
        self.epoch = Some(shape.epoch());
        let from = ops.offset() + ops.pos() as u64;
        self.shared.parser_at.store(from, Ordering::Relaxed);
        let _ = to_thread.send(Layout {
            shape: shape.clone(),
            from,
        });
    }

    /// Notes `stack`, the handle the parser read for the list the thread
    /// named `list`.
    pub(super) fn learned(&mut self, list: u32, stack: u32) {
        let i = list as usize;
        if self.handles.len() <= i {
            self.handles.resize(i + 1, None);
        }
        self.handles[i] = Some(stack);
    }

    /// The entry read ahead at `offset` (after its EMPTY_DICT), if any. Entries
    /// before it will never be met: they are dropped.
    #[inline]
    fn at(&mut self, offset: u64) -> Option<Ahead> {
        loop {
            if let Some(e) = self.chunk.get(self.next) {
                if e.start > offset {
                    return None;
                }
                self.next += 1;
                if e.start == offset {
                    return Some(*e);
                }
                continue;
            }
            let chunk = self.chunks.try_recv().ok()?;
            let mut done = std::mem::replace(&mut self.chunk, chunk);
            done.clear();
            let _ = self.emptied.send(done);
            self.next = 0;
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}

/// The entry whose EMPTY_DICT `ops` begins after, if it was read ahead: its
/// fields go into `f` (empty before) and its memo stores are made, as
/// `entry::decode` would (see the module's comment).
#[inline]
pub(super) fn take(c: &mut Collector, ops: &mut OpReader<'_>, f: &mut EntryFields) -> Taken {
    let Some(ahead) = c.ahead.as_mut() else {
        return Taken::No;
    };
    let offset = ops.offset();
    ahead.shared.parser_at.store(offset, Ordering::Relaxed);
    let Some(e) = ahead.at(offset) else {
        return Taken::No;
    };
    if ahead.epoch != Some(ops.memo_epoch()) {
        return Taken::No;
    }
    let (Some(action), Some(text)) = (
        ops.memo_str(e.action as usize),
        ops.memo_str(e.text as usize),
    ) else {
        return Taken::No;
    };
    let (stack, list) = match e.frames {
        Frames::List(NO_LIST) => return Taken::No,
        Frames::List(id) => match ahead.handles.get(id as usize).copied().flatten() {
            Some(stack) => (stack, true),
            None => return Taken::Learn(id),
        },
        Frames::Shared(idx) => match ops.memo_custom(idx as usize, CUSTOM_STACK) {
            Some(stack) => (stack, false),
            None => return Taken::No,
        },
    };
    // The entry's memo stores, in the order of its opcodes: the dict, the "N/A"
    // of `compile_context`, the frames list. The first refused, nothing is
    // stored and `decode` would refuse it too; a later one, `decode` would give up
    // there.
    if ops.memo_push(Val::Consumed).is_none() {
        return Taken::No;
    }
    let na = c.k.not_applicable;
    let stored = ops.memo_push(Val::Str(na)).and_then(|()| {
        if list {
            ops.memo_push(Val::Custom {
                kind: CUSTOM_STACK,
                id: stack,
            })
        } else {
            Some(())
        }
    });
    if stored.is_none() {
        return Taken::Fail;
    }
    f.action = Some(action);
    f.e.time_us = e.time_us;
    f.e.addr = e.addr;
    f.e.size = e.size;
    f.e.stream = e.stream;
    f.impossible = e.impossible;
    f.compile_context = Some(na);
    f.has_frames = true;
    f.e.stack = stack;
    // As `entry::usual_value` keeps `user_metadata`: only a non-empty str.
    if text != c.k.empty && !ops.heap().str_bytes(text).is_empty() {
        f.text = text;
        f.special = true;
    }
    ops.seek((e.end - offset) as usize);
    ahead.taken += 1;
    Taken::Read
}

/// The thread's names for frames lists: ids by their bytes (see `FramesCache`).
struct Lists {
    ids: FramesCache,
    next: u32,
    epoch: u64,
}

impl Lists {
    fn new(epoch: u64) -> Lists {
        Lists {
            ids: FramesCache::default(),
            next: 0,
            epoch,
        }
    }

    // The id of the list whose content (its MARK) begins at `buf[at]`, and the
    // position after its APPENDS, if it is one batch of memo references ending the
    // list (as `entry::frames_list` caches).
    #[inline]
    fn id(&mut self, buf: &[u8], at: usize) -> Option<(u32, usize)> {
        if let Some(found) = self.ids.by_prefix(buf, at) {
            return Some(found);
        }
        let (refs, end) = single_batch(buf, at)?;
        let id = match self.ids.get(refs, self.epoch) {
            Some(id) => {
                self.ids.remember_prefix(refs, id);
                id
            }
            None if self.next < NO_LIST => {
                let id = self.next;
                self.next += 1;
                self.ids.insert(refs, id, self.epoch);
                // Kept only while the cache has room: otherwise a new id for
                // every list of these bytes, each read by the parser once.
                id
            }
            None => NO_LIST,
        };
        Some((id, end))
    }
}

/// Reads the trace entry whose EMPTY_DICT is at `buf[at - 1]`, if it has the
/// usual layout `shape` holds exactly: `} MEMOIZE (`, each key's memo reference
/// as the shape has it with the value `entry::usual_value` reads at once (an int,
/// a memo reference to a str, "N/A" and its MEMOIZE, a frames list of one batch
/// of memo references after its EMPTY_LIST and MEMOIZE, or a reference to one),
/// then SETITEMS and an opcode that may follow an entry. The offsets are `buf`'s.
#[inline]
fn read_entry(buf: &[u8], at: usize, shape: &Shape, lists: &mut Lists) -> Option<Ahead> {
    debug_assert!(shape.is_exactly_usual());
    if buf.get(at..at + 2)? != [op::MEMOIZE, op::MARK] {
        return None;
    }
    let mut p = at + 2;
    // Key `i` of the shape, whose field is `USUAL[i]`, and its value: one step
    // each, with no field dispatched on at run time.
    macro_rules! key {
        ($i:literal) => {{
            let (_, field, len) = shape.key($i, buf, p)?;
            debug_assert_eq!(field, USUAL[$i]);
            p += len;
        }};
    }
    let mut f = EntryFields::default();
    macro_rules! int {
        ($field:expr) => {{
            let (v, len) = OpReader::int_at(buf, p + 1, *buf.get(p)?)?;
            f.set_int($field, v.into());
            p += 1 + len;
        }};
    }
    macro_rules! memo_ref {
        () => {{
            let (idx, next) = OpReader::memo_ref_at(buf, p)?;
            p = next;
            u32::try_from(idx).ok()?
        }};
    }
    key!(0);
    let action = memo_ref!();
    key!(1);
    int!(F_ADDR);
    key!(2);
    int!(F_SIZE);
    key!(3);
    int!(F_STREAM);
    key!(4);
    int!(F_TIME);
    key!(5);
    if buf.get(p..p + NA.len())? != NA {
        return None;
    }
    p += NA.len();
    key!(6);
    let text = memo_ref!();
    key!(7);
    let frames = if buf.get(p..p + 2) == Some(&[op::EMPTY_LIST, op::MEMOIZE]) {
        let (id, end) = lists.id(buf, p + 2)?;
        p = end;
        Frames::List(id)
    } else {
        Frames::Shared(memo_ref!())
    };
    if *buf.get(p)? != op::SETITEMS {
        return None;
    }
    p += 1;
    if !ends_entry(buf, p)? {
        return None;
    }
    Some(Ahead {
        start: at as u64,
        end: p as u64,
        time_us: f.e.time_us,
        addr: f.e.addr,
        size: f.e.size,
        stream: f.e.stream,
        impossible: f.impossible,
        action,
        text,
        frames,
    })
}

/// The first bytes of every entry of `shape`: EMPTY_DICT, MEMOIZE, MARK and the
/// memo reference of its first key (`action`).
fn entry_head(shape: &Shape) -> Vec<u8> {
    let mut head = vec![op::EMPTY_DICT, op::MEMOIZE, op::MARK];
    head.extend_from_slice(&shape.reference(0));
    head
}

/// The read-ahead thread: reads entries of `layout` in chunks, each beginning a
/// lead ahead of the parser, until the parser stops it or the pickle ends.
fn read_ahead(
    bytes: &[u8],
    shared: &Shared,
    layout: Layout,
    pace: Pace,
    chunks: Sender<Vec<Ahead>>,
    emptied: Receiver<Vec<Ahead>>,
) {
    let shape = &layout.shape;
    let head = entry_head(shape);
    let finder = memchr::memmem::Finder::new(&head);
    let mut lists = Lists::new(shape.epoch());
    let mut lead = pace.first_lead;
    // Where the last chunk ended.
    let mut resume = usize::try_from(layout.from).unwrap_or(usize::MAX);
    while !shared.stop.load(Ordering::Relaxed) {
        let parser =
            usize::try_from(shared.parser_at.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        if resume > parser.saturating_add(pace.max_ahead) {
            // Far enough ahead: what is read now would wait, holding memory.
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let mut at = resume.max(parser.saturating_add(lead));
        let until = at.saturating_add(pace.chunk);
        let mut chunk = emptied.try_recv().unwrap_or_default();
        let mut ended = false;
        while at < until {
            // The next entry begins where the last ended, nearly always.
            let found = if bytes.get(at..at + head.len()) == Some(&head[..]) {
                Some(0)
            } else {
                bytes.get(at..).and_then(|rest| finder.find(rest))
            };
            let Some(found) = found else {
                ended = true;
                break;
            };
            let start = at + found + 1;
            match read_entry(bytes, start, shape, &mut lists) {
                Some(e) => {
                    at = e.end as usize;
                    chunk.push(e);
                }
                None => at = start,
            }
        }
        resume = at;
        if let Some(first) = chunk.first().map(|e| e.start) {
            if chunks.send(chunk).is_err() {
                return;
            }
            // The parser was there before the chunk was: begin the next further
            // ahead. Else a little nearer, so that the parser reads less itself.
            if shared.parser_at.load(Ordering::Relaxed) >= first {
                lead = (lead * 2).min(pace.max_lead);
            } else {
                lead = (lead - lead / 8).max(pace.first_lead / 4);
            }
        }
        if ended {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
