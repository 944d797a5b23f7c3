//! The event chunk codec: a column per field, dictionaries for addresses and
//! sizes, delta-encoded times.
//!
//! A training loop reuses the same few hundred addresses and sizes over and
//! over, so a chunk stores each distinct address and (size, requested) pair
//! once and events refer to them by index (one or two bytes). Streams,
//! devices and threads rarely change and are run-length encoded. Layout:
//!
//! ```text
//! varint events | varint first_time | varint last_time - first_time
//! u8 kinds-present | (u8 kind code, u8 field mask) per kind
//! varint addresses | first address, then ascending deltas
//! varint size pairs | (varint size, zigzag varint size - requested) per pair
//! 9 columns, each: varint byte length | bytes
//!   kind (u8 per event) | time (zigzag deltas) | address index | size index
//!   stream (RLE) | device (RLE) | thread (RLE) | stack id | extra values
//! ```
//!
//! The field mask of each kind is stored in the chunk, so a reader can skip
//! the fields of an event kind it does not know.
//!
//! Since format 1.4 the payload ends with the chunk's place in the trace,
//! after the columns, where readers of 1.0 to 1.3 (which stop after the
//! ninth column) never look:
//!
//! ```text
//! varint sequence | varint first_event | u8 byte length of the two varints
//! ```
//!
//! `sequence` counts chunks from 0 and `first_event` is the number of
//! events in the chunks before this one, so a reader tells a swapped,
//! repeated or missing chunk, and how many events are missing, without
//! decoding anything. The length byte comes last so the trailer is read from
//! the payload's end in constant time, and may grow in a later version.

use super::FormatError;
use super::event::{
    BlockEvent, DeviceMemoryEvent, DroppedEvents, EmptyCacheEvent, Event, EventData, LimitEvent,
    OomEvent, PoolEvent, PoolId, SegmentEvent, SegmentPoolEvent, TagEvent, UserTagEvent,
};
use super::event::{EventKind, KindCounts};
use super::symbols::{StackId, StringId};
use super::varint::{self, Cursor, OutOfData};
use rustc_hash::FxHashMap as HashMap;

const ADDR: u8 = 1;
const SIZE: u8 = 1 << 1;
const STREAM: u8 = 1 << 2;
const DEVICE: u8 = 1 << 3;
const THREAD: u8 = 1 << 4;
const STACK: u8 = 1 << 5;
const EXTRA1: u8 = 1 << 6;
const EXTRA2: u8 = 1 << 7;

const BLOCK_FIELDS: u8 = ADDR | SIZE | STREAM | DEVICE | THREAD | STACK;

/// The fields each kind stores, by kind code.
fn fields_of(kind: EventKind) -> u8 {
    match kind {
        EventKind::Alloc
        | EventKind::FreeRequested
        | EventKind::FreeCompleted
        | EventKind::SegmentAlloc
        | EventKind::SegmentFree
        | EventKind::SegmentMap
        | EventKind::SegmentUnmap => BLOCK_FIELDS,
        EventKind::Oom => SIZE | STREAM | DEVICE | THREAD | STACK | EXTRA1,
        EventKind::EmptyCache => DEVICE | THREAD | STACK,
        // Format 1.1 added the thread: 1.0 readers skip it (they read the
        // fields a chunk's mask names), and a 1.0 trace's phases read as
        // the main thread's.
        EventKind::PhaseBegin | EventKind::PhaseEnd => THREAD | EXTRA1,
        EventKind::Annotation => EXTRA1 | EXTRA2,
        // Format 1.2: older readers skip tags whole.
        EventKind::Tag => ADDR | DEVICE | THREAD | EXTRA1,
        // Format 1.3: older readers skip both whole.
        EventKind::Limit | EventKind::DeviceMemory => DEVICE | THREAD | EXTRA1 | EXTRA2,
        // Format 1.5: older readers skip the marker whole (and so read a
        // trace with a gap as before).
        EventKind::EventsDropped => EXTRA1 | EXTRA2,
        // Format 1.6: older readers skip both whole, and read every segment
        // as the default pools' (as they did). A pool event's address
        // column holds its action's code; the extras, its pool's two ids.
        EventKind::Pool => ADDR | STREAM | DEVICE | THREAD | STACK | EXTRA1 | EXTRA2,
        EventKind::SegmentPool => ADDR | DEVICE | THREAD | EXTRA1 | EXTRA2,
        // Format 1.7: older readers skip user tags whole (and count the
        // block in its inferred category, as they did).
        EventKind::UserTag => ADDR | DEVICE | THREAD | EXTRA1,
    }
}

/// The flattened fields of one event, as the columns hold them.
#[derive(Clone, Copy, Default)]
struct Fields {
    addr: u64,
    size: u64,
    requested: u64,
    stream: u64,
    device: u32,
    thread: u32,
    stack: u32,
    extra1: u64,
    extra2: u64,
}

impl Fields {
    fn of(data: &EventData) -> Fields {
        let block = |b: &BlockEvent| Fields {
            addr: b.addr,
            size: b.size,
            requested: b.requested,
            stream: b.stream,
            device: b.device,
            thread: b.thread,
            stack: b.stack.0,
            ..Fields::default()
        };
        let segment = |s: &SegmentEvent| Fields {
            addr: s.addr,
            size: s.size,
            requested: s.size,
            stream: s.stream,
            device: s.device,
            thread: s.thread,
            stack: s.stack.0,
            ..Fields::default()
        };
        match data {
            EventData::Alloc(b) | EventData::FreeRequested(b) | EventData::FreeCompleted(b) => {
                block(b)
            }
            EventData::SegmentAlloc(s)
            | EventData::SegmentFree(s)
            | EventData::SegmentMap(s)
            | EventData::SegmentUnmap(s) => segment(s),
            EventData::Oom(o) => Fields {
                size: o.requested,
                requested: o.requested,
                stream: o.stream,
                device: o.device,
                thread: o.thread,
                stack: o.stack.0,
                extra1: o.free_bytes,
                ..Fields::default()
            },
            EventData::EmptyCache(e) => Fields {
                device: e.device,
                thread: e.thread,
                stack: e.stack.0,
                ..Fields::default()
            },
            EventData::PhaseBegin { name, thread } | EventData::PhaseEnd { name, thread } => {
                Fields {
                    thread: *thread,
                    extra1: name.0 as u64,
                    ..Fields::default()
                }
            }
            EventData::Annotation { key, value } => Fields {
                extra1: key.0 as u64,
                extra2: value.0 as u64,
                ..Fields::default()
            },
            EventData::Tag(t) => Fields {
                addr: t.addr,
                device: t.device,
                thread: t.thread,
                extra1: t.code as u64,
                ..Fields::default()
            },
            EventData::Limit(l) => Fields {
                device: l.device,
                thread: l.thread,
                extra1: l.limit_bytes,
                extra2: l.total_bytes,
                ..Fields::default()
            },
            EventData::DeviceMemory(m) => Fields {
                device: m.device,
                thread: m.thread,
                extra1: m.free_bytes,
                extra2: m.total_bytes,
                ..Fields::default()
            },
            EventData::EventsDropped(d) => Fields {
                extra1: d.count,
                extra2: d.from_ns,
                ..Fields::default()
            },
            EventData::Pool(p) => Fields {
                addr: p.code as u64,
                stream: p.stream,
                device: p.device,
                thread: p.thread,
                stack: p.stack.0,
                extra1: p.pool.0,
                extra2: p.pool.1,
                ..Fields::default()
            },
            EventData::SegmentPool(s) => Fields {
                addr: s.addr,
                device: s.device,
                thread: s.thread,
                extra1: s.pool.0,
                extra2: s.pool.1,
                ..Fields::default()
            },
            EventData::UserTag(t) => Fields {
                addr: t.addr,
                device: t.device,
                thread: t.thread,
                extra1: t.name.0 as u64,
                ..Fields::default()
            },
        }
    }

    fn into_data(self, kind: EventKind) -> EventData {
        let parts = BlockEvent {
            addr: self.addr,
            size: self.size,
            requested: self.requested,
            stream: self.stream,
            device: self.device,
            stack: StackId(self.stack),
            thread: self.thread,
        };
        if let Some(data) = EventData::from_parts(kind, parts) {
            return data;
        }
        match kind {
            EventKind::Alloc
            | EventKind::FreeRequested
            | EventKind::FreeCompleted
            | EventKind::SegmentAlloc
            | EventKind::SegmentFree
            | EventKind::SegmentMap
            | EventKind::SegmentUnmap => unreachable!("made from its parts above"),
            EventKind::Oom => EventData::Oom(OomEvent {
                requested: self.requested,
                free_bytes: self.extra1,
                stream: self.stream,
                device: self.device,
                stack: StackId(self.stack),
                thread: self.thread,
            }),
            EventKind::EmptyCache => EventData::EmptyCache(EmptyCacheEvent {
                device: self.device,
                stack: StackId(self.stack),
                thread: self.thread,
            }),
            EventKind::PhaseBegin => EventData::PhaseBegin {
                name: StringId(self.extra1 as u32),
                thread: self.thread,
            },
            EventKind::PhaseEnd => EventData::PhaseEnd {
                name: StringId(self.extra1 as u32),
                thread: self.thread,
            },
            EventKind::Annotation => EventData::Annotation {
                key: StringId(self.extra1 as u32),
                value: StringId(self.extra2 as u32),
            },
            EventKind::Tag => EventData::Tag(TagEvent {
                addr: self.addr,
                device: self.device,
                thread: self.thread,
                // A code past what a byte holds is one this version does
                // not know either: kept unknown, never wrapped into a known one.
                code: u8::try_from(self.extra1).unwrap_or(u8::MAX),
            }),
            EventKind::Limit => EventData::Limit(LimitEvent {
                device: self.device,
                thread: self.thread,
                limit_bytes: self.extra1,
                total_bytes: self.extra2,
            }),
            EventKind::DeviceMemory => EventData::DeviceMemory(DeviceMemoryEvent {
                device: self.device,
                thread: self.thread,
                free_bytes: self.extra1,
                total_bytes: self.extra2,
            }),
            EventKind::EventsDropped => EventData::EventsDropped(DroppedEvents {
                count: self.extra1,
                from_ns: self.extra2,
            }),
            EventKind::Pool => EventData::Pool(PoolEvent {
                pool: PoolId(self.extra1, self.extra2),
                stream: self.stream,
                device: self.device,
                thread: self.thread,
                stack: StackId(self.stack),
                // As a tag's code: one past a byte stays unknown.
                code: u8::try_from(self.addr).unwrap_or(u8::MAX),
            }),
            EventKind::SegmentPool => EventData::SegmentPool(SegmentPoolEvent {
                addr: self.addr,
                pool: PoolId(self.extra1, self.extra2),
                device: self.device,
                thread: self.thread,
            }),
            EventKind::UserTag => EventData::UserTag(UserTagEvent {
                addr: self.addr,
                device: self.device,
                thread: self.thread,
                // A name id past 32 bits names no string: kept as one the
                // symbol table lacks, never wrapped onto one it has.
                name: StringId(u32::try_from(self.extra1).unwrap_or(u32::MAX)),
            }),
        }
    }
}

/// Run-length encoder for a column whose value rarely changes.
struct RunLengthWriter {
    out: Vec<u8>,
    value: u64,
    run: u64,
}

impl RunLengthWriter {
    fn new() -> Self {
        RunLengthWriter {
            out: Vec::new(),
            value: 0,
            run: 0,
        }
    }

    fn push(&mut self, value: u64) {
        if self.run > 0 && value == self.value {
            self.run += 1;
            return;
        }
        self.finish_run();
        self.value = value;
        self.run = 1;
    }

    fn finish_run(&mut self) {
        if self.run > 0 {
            varint::put(&mut self.out, self.value);
            varint::put(&mut self.out, self.run);
        }
    }

    fn into_bytes(mut self) -> Vec<u8> {
        self.finish_run();
        self.out
    }
}

struct RunLengthReader<'a> {
    cursor: Cursor<'a>,
    value: u64,
    left: u64,
}

impl<'a> RunLengthReader<'a> {
    fn new(data: &'a [u8]) -> Self {
        RunLengthReader {
            cursor: Cursor::new(data),
            value: 0,
            left: 0,
        }
    }

    #[inline(always)]
    fn next(&mut self) -> Result<u64, OutOfData> {
        if self.left == 0 {
            self.value = self.cursor.varint()?;
            self.left = self.cursor.varint()?;
            if self.left == 0 {
                return Err(OutOfData);
            }
        }
        self.left -= 1;
        Ok(self.value)
    }
}

/// Encodes `events` (in time order) as a chunk payload, appended to `out`.
pub fn encode(events: &[Event], out: &mut Vec<u8>) {
    // One pass over the events builds every column but the address one: the
    // address dictionary is sorted only once all addresses are known, so the
    // pass records each address's id in first-seen order, and the column is
    // written from those ids once the sort has given each its rank. Every
    // dictionary lookup thus happens once per event.
    let mut present = [false; EventKind::COUNT];
    // Room for the thousands of distinct addresses and sizes of a large
    // model's chunk, so the dictionaries do not grow by rehashing; a chunk
    // of fewer events cannot have more.
    let distinct = events.len().min(8192);
    let mut addr_index: HashMap<u64, u32> =
        HashMap::with_capacity_and_hasher(distinct, Default::default());
    let mut addrs: Vec<u64> = Vec::with_capacity(distinct);
    let mut first_seen_addr: Vec<u32> = Vec::with_capacity(events.len());
    let mut size_index: HashMap<(u64, u64), u32> =
        HashMap::with_capacity_and_hasher(distinct, Default::default());
    let mut sizes: Vec<(u64, u64)> = Vec::with_capacity(distinct);

    let first_time = events.first().map_or(0, |e| e.time_ns);
    let last_time = events.last().map_or(0, |e| e.time_ns);
    let mut kind_col = Vec::with_capacity(events.len());
    let mut time_col = Vec::with_capacity(events.len() * 2);
    let mut size_col = Vec::with_capacity(events.len() * 2);
    let mut stack_col = Vec::with_capacity(events.len());
    let mut extra_col = Vec::new();
    let mut stream_col = RunLengthWriter::new();
    let mut device_col = RunLengthWriter::new();
    let mut thread_col = RunLengthWriter::new();
    let mut prev_time = first_time;
    for e in events {
        let kind = e.kind();
        present[kind as usize] = true;
        let mask = fields_of(kind);
        let f = Fields::of(&e.data);
        kind_col.push(kind.code());
        varint::put(
            &mut time_col,
            varint::zigzag(e.time_ns.wrapping_sub(prev_time) as i64),
        );
        prev_time = e.time_ns;
        if mask & ADDR != 0 {
            let id = *addr_index.entry(f.addr).or_insert_with(|| {
                addrs.push(f.addr);
                (addrs.len() - 1) as u32
            });
            first_seen_addr.push(id);
        }
        if mask & SIZE != 0 {
            let id = *size_index.entry((f.size, f.requested)).or_insert_with(|| {
                sizes.push((f.size, f.requested));
                (sizes.len() - 1) as u32
            });
            varint::put(&mut size_col, id as u64);
        }
        if mask & STREAM != 0 {
            stream_col.push(f.stream);
        }
        if mask & DEVICE != 0 {
            device_col.push(f.device as u64);
        }
        if mask & THREAD != 0 {
            thread_col.push(f.thread as u64);
        }
        if mask & STACK != 0 {
            varint::put(&mut stack_col, f.stack as u64);
        }
        if mask & EXTRA1 != 0 {
            varint::put(&mut extra_col, f.extra1);
        }
        if mask & EXTRA2 != 0 {
            varint::put(&mut extra_col, f.extra2);
        }
    }

    // Addresses sorted, so the dictionary itself is small ascending deltas.
    let mut by_addr: Vec<(u64, u32)> = addrs.iter().zip(0..).map(|(&a, id)| (a, id)).collect();
    by_addr.sort_unstable();
    let mut rank = vec![0u32; addrs.len()];
    for (r, &(_, id)) in by_addr.iter().enumerate() {
        rank[id as usize] = r as u32;
    }
    let mut addr_col = Vec::with_capacity(first_seen_addr.len() * 2);
    for &id in &first_seen_addr {
        varint::put(&mut addr_col, rank[id as usize] as u64);
    }

    varint::put(out, events.len() as u64);
    varint::put(out, first_time);
    varint::put(out, last_time.wrapping_sub(first_time));
    let kinds: Vec<EventKind> = EventKind::ALL
        .into_iter()
        .filter(|k| present[*k as usize])
        .collect();
    out.push(kinds.len() as u8);
    for k in &kinds {
        out.push(k.code());
        out.push(fields_of(*k));
    }
    varint::put(out, by_addr.len() as u64);
    let mut prev = 0u64;
    for &(a, _) in &by_addr {
        varint::put(out, a - prev);
        prev = a;
    }
    varint::put(out, sizes.len() as u64);
    for &(size, requested) in &sizes {
        varint::put(out, size);
        varint::put(out, varint::zigzag(size.wrapping_sub(requested) as i64));
    }
    for col in [
        &kind_col,
        &time_col,
        &addr_col,
        &size_col,
        &stream_col.into_bytes(),
        &device_col.into_bytes(),
        &thread_col.into_bytes(),
        &stack_col,
        &extra_col,
    ] {
        varint::put(out, col.len() as u64);
        out.extend_from_slice(col);
    }
}

/// The most events a chunk may hold: writers cut chunks at this size, and
/// a reader takes a chunk that claims more for damage (decoding one costs
/// memory in proportion).
pub const MAX_CHUNK_EVENTS: u64 = 1 << 22;

/// Appends a chunk's place in the trace (format 1.4) to its encoded payload.
pub fn put_order(out: &mut Vec<u8>, sequence: u64, first_event: u64) {
    let start = out.len();
    varint::put(out, sequence);
    varint::put(out, first_event);
    let len = (out.len() - start) as u8;
    out.push(len);
}

/// Reads the place in the trace from the end of a 1.4 chunk payload.
fn order_of(payload: &[u8]) -> Result<(u64, u64), &'static str> {
    let damaged = "chunk order trailer is damaged";
    let (&len, rest) = payload.split_last().ok_or(damaged)?;
    let len = len as usize;
    if len > rest.len() {
        return Err(damaged);
    }
    let mut cur = Cursor::new(&rest[rest.len() - len..]);
    let sequence = cur.varint().map_err(|_| damaged)?;
    let first_event = cur.varint().map_err(|_| damaged)?;
    Ok((sequence, first_event))
}

/// An event chunk as read from a trace, not yet decoded.
///
/// Chunks decode independently of each other (events carry only ids), so a
/// batch of them can be decoded on all cores.
#[derive(Clone, Debug)]
pub struct RawChunk {
    offset: u64,
    payload: Vec<u8>,
    events: u64,
    first_time_ns: u64,
    last_time_ns: u64,
    /// The sequence number and first event's index (format 1.4).
    order: Option<(u64, u64)>,
}

impl RawChunk {
    /// Reads the chunk's leading counts; the columns are checked on decode.
    /// The chunk is taken as one without a place in the trace (as formats
    /// 1.0 to 1.3 write them, or as their readers read any).
    pub(crate) fn parse(offset: u64, payload: Vec<u8>) -> Result<RawChunk, FormatError> {
        let mut cur = Cursor::new(&payload);
        let bad = |_| FormatError::corrupt(offset, "chunk header is incomplete");
        let events = cur.varint().map_err(bad)?;
        let first_time_ns = cur.varint().map_err(bad)?;
        let span = cur.varint().map_err(bad)?;
        if events > MAX_CHUNK_EVENTS {
            return Err(FormatError::corrupt(
                offset,
                format!("a chunk of {events} events, over the {MAX_CHUNK_EVENTS} a chunk may hold"),
            ));
        }
        Ok(RawChunk {
            offset,
            events,
            first_time_ns,
            last_time_ns: first_time_ns.wrapping_add(span),
            payload,
            order: None,
        })
    }

    /// As [`parse`](Self::parse), for a chunk of format 1.4 or later, which
    /// ends with its sequence number and first event's index.
    pub(crate) fn parse_ordered(offset: u64, payload: Vec<u8>) -> Result<RawChunk, FormatError> {
        let order = order_of(&payload).map_err(|r| FormatError::corrupt(offset, r))?;
        let mut chunk = Self::parse(offset, payload)?;
        chunk.order = Some(order);
        Ok(chunk)
    }

    /// The chunk's sequence number: 0 for a trace's first chunk, then one
    /// more for each (format 1.4; `None` in older traces).
    pub fn sequence(&self) -> Option<u64> {
        self.order.map(|o| o.0)
    }

    /// The number of events in the chunks before this one: the index of
    /// its first event in the trace (format 1.4; `None` in older traces).
    pub fn first_event(&self) -> Option<u64> {
        self.order.map(|o| o.1)
    }

    /// The byte offset of the chunk's record in the trace.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The number of events in the chunk.
    pub fn event_count(&self) -> u64 {
        self.events
    }

    /// The time of the chunk's first event.
    pub fn first_time_ns(&self) -> u64 {
        self.first_time_ns
    }

    /// The time of the chunk's last event.
    pub fn last_time_ns(&self) -> u64 {
        self.last_time_ns
    }

    /// The size of the encoded chunk in bytes.
    pub fn encoded_len(&self) -> usize {
        self.payload.len()
    }

    /// The size of the chunk's record in the trace, framing included.
    pub fn record_len(&self) -> u64 {
        (super::record::RECORD_OVERHEAD + self.payload.len()) as u64
    }

    /// Decodes the chunk's events.
    pub fn decode(&self) -> Result<Vec<Event>, FormatError> {
        let mut out = Vec::new();
        self.decode_into(&mut out)?;
        Ok(out)
    }

    /// Decodes the chunk's events, appending them to `out`. Events of kinds
    /// this version does not know are skipped and counted in the result.
    pub fn decode_into(&self, out: &mut Vec<Event>) -> Result<u64, FormatError> {
        let start = out.len();
        decode_payload(&self.payload, out).map_err(|reason| {
            out.truncate(start);
            FormatError::corrupt(self.offset, reason)
        })
    }

    /// Counts the chunk's events by kind without building them.
    pub fn count_kinds(&self) -> Result<KindCounts, FormatError> {
        let bad = |reason: &str| FormatError::corrupt(self.offset, format!("chunk: {reason}"));
        let layout = Layout::parse(&self.payload).map_err(bad)?;
        let mut counts = KindCounts::default();
        for &code in layout.kinds {
            if let Some(kind) = EventKind::from_code(code) {
                counts.add(kind);
            }
        }
        Ok(counts)
    }
}

/// The dictionaries and columns of a chunk payload.
struct Layout<'a> {
    events: usize,
    first_time: u64,
    masks: [Option<u8>; 256],
    addrs: Vec<u64>,
    sizes: Vec<(u64, u64)>,
    kinds: &'a [u8],
    time: &'a [u8],
    addr: &'a [u8],
    size: &'a [u8],
    stream: &'a [u8],
    device: &'a [u8],
    thread: &'a [u8],
    stack: &'a [u8],
    extra: &'a [u8],
}

impl<'a> Layout<'a> {
    fn parse(payload: &'a [u8]) -> Result<Layout<'a>, &'static str> {
        let short = |_| "ends early";
        let mut cur = Cursor::new(payload);
        let events = cur.varint().map_err(short)? as usize;
        let first_time = cur.varint().map_err(short)?;
        let _span = cur.varint().map_err(short)?;
        let mut masks = [None; 256];
        for _ in 0..cur.byte().map_err(short)? {
            let code = cur.byte().map_err(short)?;
            masks[code as usize] = Some(cur.byte().map_err(short)?);
        }
        let n_addrs = cur.varint().map_err(short)? as usize;
        if n_addrs > payload.len() {
            return Err("address dictionary larger than the chunk");
        }
        let mut addrs = Vec::with_capacity(n_addrs);
        let mut prev = 0u64;
        for _ in 0..n_addrs {
            prev = prev.wrapping_add(cur.varint().map_err(short)?);
            addrs.push(prev);
        }
        let n_sizes = cur.varint().map_err(short)? as usize;
        if n_sizes > payload.len() {
            return Err("size dictionary larger than the chunk");
        }
        let mut sizes = Vec::with_capacity(n_sizes);
        for _ in 0..n_sizes {
            let size = cur.varint().map_err(short)?;
            let diff = varint::unzigzag(cur.varint().map_err(short)?);
            sizes.push((size, size.wrapping_sub(diff as u64)));
        }
        let mut column = || -> Result<&'a [u8], &'static str> {
            let len = cur.varint().map_err(short)? as usize;
            cur.bytes(len).map_err(short)
        };
        let layout = Layout {
            events,
            first_time,
            masks,
            addrs,
            sizes,
            kinds: column()?,
            time: column()?,
            addr: column()?,
            size: column()?,
            stream: column()?,
            device: column()?,
            thread: column()?,
            stack: column()?,
            extra: column()?,
        };
        if layout.kinds.len() != events {
            return Err("kind column length differs from the event count");
        }
        Ok(layout)
    }
}

/// Read positions in the columns of one chunk.
struct Columns<'a> {
    addrs: &'a [u64],
    sizes: &'a [(u64, u64)],
    time: Cursor<'a>,
    addr: Cursor<'a>,
    size: Cursor<'a>,
    stack: Cursor<'a>,
    extra: Cursor<'a>,
    stream: RunLengthReader<'a>,
    device: RunLengthReader<'a>,
    thread: RunLengthReader<'a>,
}

/// Why a chunk could not be decoded (a static message: the hot loop must not
/// build strings).
type DecodeError = &'static str;

impl<'a> Columns<'a> {
    fn new(layout: &'a Layout<'a>) -> Self {
        Columns {
            addrs: &layout.addrs,
            sizes: &layout.sizes,
            time: Cursor::new(layout.time),
            addr: Cursor::new(layout.addr),
            size: Cursor::new(layout.size),
            stack: Cursor::new(layout.stack),
            extra: Cursor::new(layout.extra),
            stream: RunLengthReader::new(layout.stream),
            device: RunLengthReader::new(layout.device),
            thread: RunLengthReader::new(layout.thread),
        }
    }

    #[inline(always)]
    fn time_delta(&mut self) -> Result<u64, DecodeError> {
        let v = self.time.varint().map_err(|_| "time column ends early")?;
        Ok(varint::unzigzag(v) as u64)
    }

    #[inline(always)]
    fn addr(&mut self) -> Result<u64, DecodeError> {
        let i = self
            .addr
            .varint()
            .map_err(|_| "address column ends early")?;
        self.addrs
            .get(i as usize)
            .copied()
            .ok_or("address index out of range")
    }

    #[inline(always)]
    fn size(&mut self) -> Result<(u64, u64), DecodeError> {
        let i = self.size.varint().map_err(|_| "size column ends early")?;
        self.sizes
            .get(i as usize)
            .copied()
            .ok_or("size index out of range")
    }

    #[inline(always)]
    fn stream(&mut self) -> Result<u64, DecodeError> {
        self.stream.next().map_err(|_| "stream column ends early")
    }

    #[inline(always)]
    fn device(&mut self) -> Result<u32, DecodeError> {
        Ok(self.device.next().map_err(|_| "device column ends early")? as u32)
    }

    #[inline(always)]
    fn thread(&mut self) -> Result<u32, DecodeError> {
        Ok(self.thread.next().map_err(|_| "thread column ends early")? as u32)
    }

    #[inline(always)]
    fn stack(&mut self) -> Result<u32, DecodeError> {
        Ok(self.stack.varint().map_err(|_| "stack column ends early")? as u32)
    }

    #[inline(always)]
    fn extra(&mut self) -> Result<u64, DecodeError> {
        self.extra.varint().map_err(|_| "extra column ends early")
    }

    /// The fields of a block or segment event.
    #[inline(always)]
    fn block(&mut self) -> Result<BlockEvent, DecodeError> {
        let addr = self.addr()?;
        let (size, requested) = self.size()?;
        Ok(BlockEvent {
            addr,
            size,
            requested,
            stream: self.stream()?,
            device: self.device()?,
            thread: self.thread()?,
            stack: StackId(self.stack()?),
        })
    }

    /// The fields named by `mask`, for kinds without a path of their own.
    fn fields(&mut self, mask: u8) -> Result<Fields, DecodeError> {
        let mut f = Fields::default();
        if mask & ADDR != 0 {
            f.addr = self.addr()?;
        }
        if mask & SIZE != 0 {
            (f.size, f.requested) = self.size()?;
        }
        if mask & STREAM != 0 {
            f.stream = self.stream()?;
        }
        if mask & DEVICE != 0 {
            f.device = self.device()?;
        }
        if mask & THREAD != 0 {
            f.thread = self.thread()?;
        }
        if mask & STACK != 0 {
            f.stack = self.stack()?;
        }
        if mask & EXTRA1 != 0 {
            f.extra1 = self.extra()?;
        }
        if mask & EXTRA2 != 0 {
            f.extra2 = self.extra()?;
        }
        Ok(f)
    }
}

fn decode_payload(payload: &[u8], out: &mut Vec<Event>) -> Result<u64, String> {
    let layout = Layout::parse(payload).map_err(|r| format!("chunk {r}"))?;
    out.reserve(layout.events);
    // Kind and field mask by code, resolved once per chunk rather than per event.
    let mut table: [Option<(Option<EventKind>, u8)>; 256] = [None; 256];
    for (code, mask) in layout.masks.iter().enumerate() {
        table[code] = mask.map(|m| (EventKind::from_code(code as u8), m));
    }
    let mut columns = Columns::new(&layout);
    let mut now = layout.first_time;
    let mut skipped = 0;
    for &code in layout.kinds {
        let (kind, mask) = table[code as usize]
            .ok_or_else(|| format!("chunk: event kind {code} is missing from the kind table"))?;
        let result = decode_event(&mut columns, kind, mask);
        let data = result.map_err(|e| format!("chunk {e}"))?;
        now = now.wrapping_add(data.0);
        match data.1 {
            Some(data) => out.push(Event { time_ns: now, data }),
            None => skipped += 1,
        }
    }
    Ok(skipped)
}

/// Decodes one event: its time delta, and its data (`None` for a kind this
/// version does not know, whose fields are consumed and dropped).
#[inline(always)]
fn decode_event(
    c: &mut Columns<'_>,
    kind: Option<EventKind>,
    mask: u8,
) -> Result<(u64, Option<EventData>), DecodeError> {
    let delta = c.time_delta()?;
    // Block and segment events are nearly every event: they get a path that
    // reads exactly their fields, without the per-field mask tests.
    let data = match (kind, mask) {
        (Some(kind), BLOCK_FIELDS) if kind.is_block_or_segment() => {
            EventData::from_parts(kind, c.block()?)
        }
        (Some(kind), mask) => Some(c.fields(mask)?.into_data(kind)),
        (None, mask) => {
            c.fields(mask)?;
            None
        }
    };
    Ok((delta, data))
}

#[cfg(test)]
mod tests;
