//! Emitting the trace a parsed snapshot makes: its header and initial state,
//! then the devices' logs merged into events, streamed to a reader or written
//! to a file.

use super::log::{Action, EventLog, LogEntry, LogIter, Run};
use super::pickle::{Heap, StrId};
use super::{ImportError, ImportReport, ParsedSnapshot};
use rustc_hash::FxHashMap as FxMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;
use std::sync::Arc;
use vramtrace_allocator::ObservedBlocks;
use vramtrace_format::{
    BlockEvent, BlockState, Category, DeviceInfo, Event, EventData, FormatError, Frame, FrameId,
    Header, InitialState, OomEvent, ReceiverGone, SegmentPoolEvent, SegmentState, StackId,
    StringId, TagEvent, TraceChannel, TraceReceiver, TraceSender, TraceWriter, UserTagEvent,
    WriterOptions,
};

/// Batches of events that may wait for the reader of a streamed snapshot:
/// two of 16,384 events hold as many as eight of 4,096 did, with a quarter
/// of the hand-offs between the merging thread and the replay.
const QUEUE_BATCHES: usize = 2;

/// What the events of a trace being streamed need from its beginning.
struct Begun {
    /// Trace stack ids by the collector's stack ids.
    stacks: Vec<StackId>,
    /// Each device's segments and blocks in use, from the initial state on:
    /// the size of each block allocated follows from them (see
    /// [`ObservedBlocks`]), where the snapshot gives requested sizes only.
    blocks: Vec<ObservedBlocks>,
    /// The annotations: (time_us, is START, name).
    phases: Vec<(i64, bool, StringId)>,
}

/// The producer a trace made from a PyTorch snapshot names in its header.
pub const IMPORTED_BY: &str = "vramtrace import";

impl ParsedSnapshot {
    /// Sends the trace through a channel: a thread of its own merges the devices'
    /// logs into events while the receiver reads them, with no encoding in between.
    /// The snapshot stays shared, so it can be streamed again.
    pub fn stream(self: &Arc<Self>) -> TraceReceiver {
        let (channel, begun) = self.begin();
        let (mut tx, rx) = channel.open(QUEUE_BATCHES);
        let parsed = Arc::clone(self);
        std::thread::spawn(move || {
            // A receiver gone early (a pass that stopped at its window) is not an
            // error; a panic drops `tx` unfinished, which the receiver reports.
            if parsed.send_events(begun, &mut tx).is_ok() {
                tx.finish();
            }
        });
        rx
    }

    /// Writes the trace to `out`; returns the output and the complete report.
    /// The devices' logs are merged into events on the calling thread while a
    /// thread of its own encodes them.
    pub fn write_trace<W: std::io::Write + Send>(
        self: &Arc<Self>,
        out: W,
    ) -> Result<(W, ImportReport), ImportError> {
        let mut report = self.report.clone();
        let (channel, begun) = self.begin();
        let (mut tx, rx) = channel.open(QUEUE_BATCHES);
        let options = WriterOptions {
            chunk_interval: None,
            ..WriterOptions::default()
        };
        let (out, counts) = std::thread::scope(|scope| {
            let writer = scope.spawn(move || {
                let mut w = TraceWriter::with_options(out, rx.header().clone(), options)?;
                rx.write_to(&mut w)?;
                let counts = *w.counts();
                Ok::<_, FormatError>((w.finish()?, counts))
            });
            // A writer that failed dropped its receiver: sending stops, and
            // its error is the one reported.
            if self.send_events(begun, &mut tx).is_ok() {
                tx.finish();
            } else {
                drop(tx);
            }
            writer
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })?;
        report.event_counts = counts;
        Ok((out, report))
    }

    /// The trace's header, symbols and initial state, in a channel to open.
    /// The header of the trace this snapshot is imported as.
    pub fn header(&self) -> Header {
        let (c, s, plan) = (&self.collected, &self.snapshot, &self.plan);
        let report = &self.report;
        let mut header = Header {
            producer: IMPORTED_BY.into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            start_unix_ns: if plan.epoch_based {
                (plan.t0 as u64).saturating_mul(1000)
            } else {
                0
            },
            devices: (0..plan.devices)
                .map(|i| DeviceInfo {
                    index: i as u32,
                    name: format!("cuda:{i}"),
                    total_memory: 0,
                })
                .collect(),
            allocator_settings: s.settings.clone(),
            ..Header::default()
        };
        let m = &mut header.metadata;
        m.insert("source".into(), "torch-snapshot".into());
        m.insert(
            "torch.pickle_protocol".into(),
            report.pickle_protocol.to_string(),
        );
        m.insert(
            "torch.trace_entries".into(),
            (c.log.len() - plan.host_entries).to_string(),
        );
        m.insert(
            "torch.time_base".into(),
            if plan.epoch_based {
                "epoch"
            } else {
                "relative"
            }
            .into(),
        );
        m.insert(
            "torch.end_state_check".into(),
            if report.end_state_matches {
                "ok".into()
            } else if !s.has_segments {
                "no segments".into()
            } else {
                format!("{} differences", plan.mismatches)
            },
        );
        header
    }

    fn begin(&self) -> (TraceChannel, Begun) {
        let (heap, c, s, plan) = (&self.heap, &self.collected, &self.snapshot, &self.plan);
        let mut channel = TraceChannel::new(self.header());

        // Symbols: local frames and stacks to the trace's ids. Each frame
        // names two strings at most, and every stack is one.
        channel.reserve_symbols(2 * c.frames.len(), c.frames.len(), c.stacks.len());
        let mut strings = FxMap::default();
        let mut string = |ch: &mut TraceChannel, id: StrId| {
            *strings
                .entry(id)
                .or_insert_with(|| ch.intern_string(&heap.str(id)))
        };
        let frames: Vec<FrameId> = c
            .frames
            .iter()
            .map(|f| {
                let frame = Frame::Symbol {
                    function: string(&mut channel, f.name),
                    file: string(&mut channel, f.file),
                    line: f.line,
                };
                channel.intern_frame(frame)
            })
            .collect();
        let mut buf = Vec::new();
        let stacks: Vec<StackId> = (0..c.stacks.len() as u32)
            .map(|i| {
                buf.clear();
                buf.extend(c.stacks.get(i).iter().map(|&f| frames[f as usize]));
                channel.intern_stack(&buf)
            })
            .collect();

        // The initial state, and each device's blocks seeded with it.
        let mut initial = InitialState::default();
        let mut blocks: Vec<ObservedBlocks> = (0..plan.devices)
            .map(|_| ObservedBlocks::new(plan.config.clone()))
            .collect();
        for (d, segs) in plan.start.iter().enumerate() {
            for seg in segs {
                let mut seg_blocks = Vec::new();
                let mut at = seg.addr;
                for &(addr, b) in &seg.blocks {
                    if addr > at {
                        seg_blocks.push(BlockState::free(at, addr - at));
                    }
                    seg_blocks.push(BlockState {
                        addr,
                        size: b.size,
                        requested: b.requested,
                        status: b.status,
                        stack: stacks[b.stack as usize],
                    });
                    // A hostile snapshot's sizes may pass 2^64: saturate.
                    at = addr.saturating_add(b.size);
                }
                let end = seg.addr.saturating_add(seg.size);
                if at < end {
                    seg_blocks.push(BlockState::free(at, end - at));
                }
                let segment = SegmentState {
                    device: d as u32,
                    addr: seg.addr,
                    size: seg.size,
                    stream: seg.stream,
                    expandable: seg.expandable,
                    blocks: seg_blocks,
                    pool: seg.pool,
                };
                blocks[d].load_segment(&segment);
                initial.segments.push(segment);
            }
        }
        channel.set_initial_state(initial);
        let phases = s
            .annotations
            .as_deref()
            .unwrap_or(&[])
            .iter()
            .map(|a| (a.0, a.1, channel.intern_string(&a.2)))
            .collect();
        (
            channel,
            Begun {
                stacks,
                blocks,
                phases,
            },
        )
    }

    /// Sends the events: the devices' logs merged by time, with the phases.
    /// Stops early, without an error, once the receiver is gone.
    fn send_events(&self, mut begun: Begun, tx: &mut TraceSender) -> Result<(), ReceiverGone> {
        let (heap, c, plan) = (&self.heap, &self.collected, &self.plan);
        let mut pools = plan.segment_pools.clone();
        let extras = &c.extras;
        // The category each device's `user_metadata` names, as it changes
        // (judged once per change, not per alloc).
        let mut metadata: Vec<Option<Named>> = vec![None; plan.devices];
        let runs = c.log.runs.iter().filter_map(|r| {
            let d = *plan.device_of.get(&r.list)?;
            Some((d, r))
        });
        let merged = Merged::new(&c.log, runs);
        let mut phase_i = 0;
        let mut last_ns = 0u64;
        let t0 = plan.t0;
        let to_ns = |t: i64| (t.saturating_sub(t0).max(0) as u64).saturating_mul(1000);
        // A snapshot's phases are the program's: its main thread's.
        let phase = |(t, begin, name): (i64, bool, StringId), last_ns: &mut u64| {
            let ns = to_ns(t).max(*last_ns);
            *last_ns = ns;
            let data = if begin {
                EventData::PhaseBegin { name, thread: 0 }
            } else {
                EventData::PhaseEnd { name, thread: 0 }
            };
            Event { time_ns: ns, data }
        };
        // The time of the next phase left (none: never reached), so that an
        // entry before it costs one comparison.
        let phase_time =
            |phases: &[(i64, bool, StringId)], i: usize| phases.get(i).map_or(i64::MAX, |p| p.0);
        let mut next_phase = phase_time(&begun.phases, 0);
        for (device, idx, entry) in merged {
            // Phases starting at an event's time come before it, ends after it.
            if let Some(nt) = entry.time_us
                && nt >= next_phase
            {
                while let Some(&p) = begun.phases.get(phase_i)
                    && (p.0 < nt || (p.0 == nt && p.1))
                {
                    phase_i += 1;
                    tx.push(phase(p, &mut last_ns))?;
                }
                next_phase = phase_time(&begun.phases, phase_i);
            }
            let ns = match entry.time_us {
                Some(t) => to_ns(t),
                None => idx,
            };
            // Out of order (counted while logging): raised.
            last_ns = ns.max(last_ns);
            let event = to_event(
                device,
                idx,
                last_ns,
                &entry,
                &begun.stacks,
                &plan.live_sizes,
                &mut begun.blocks[device as usize],
                heap,
                tx,
            );
            tx.push(event)?;
            // The pool a segment_alloc names (`pool_id`, PyTorch 2.12 and
            // later) follows it.
            let mut pool_named = false;
            if !extras.pools.is_empty()
                && let EventData::SegmentAlloc(seg) = &event.data
                && let Some(&pool) = extras.pools.get(&idx)
            {
                pool_named = true;
                tx.push(Event {
                    time_ns: event.time_ns,
                    data: EventData::SegmentPool(SegmentPoolEvent {
                        addr: seg.addr,
                        pool,
                        device,
                        thread: 0,
                    }),
                })?;
            }
            // The program's metadata (`_set_memory_metadata`): where it
            // changes, a note unless it names a category; at an alloc, its
            // block's category when it names one.
            if !extras.metadata.is_empty() {
                if let Some(&text) = extras.metadata.get(&idx) {
                    let text = if text == 0 {
                        String::new()
                    } else {
                        heap.str(text).into_owned()
                    };
                    let named = Named::of(&text, tx);
                    metadata[device as usize] = named;
                    if named.is_none() && !text.is_empty() {
                        let data = EventData::Annotation {
                            key: tx.intern_string("torch.user_metadata"),
                            value: tx.intern_string(&text),
                        };
                        tx.push(Event {
                            time_ns: event.time_ns,
                            data,
                        })?;
                    }
                }
                if entry.action == Action::Alloc
                    && let Some(named) = metadata[device as usize]
                {
                    tx.push(Event {
                        time_ns: event.time_ns,
                        data: named.tag(device, entry.addr),
                    })?;
                }
            }
            // Else the last segment_alloc at the address of a segment the
            // end state puts in a private pool reserved that segment: its
            // pool follows it.
            if let EventData::SegmentAlloc(seg) = &event.data
                && let Some((pool, n)) = pools.get_mut(&(device, seg.addr))
            {
                *n = n.saturating_sub(1);
                if *n == 0 && !pool_named {
                    tx.push(Event {
                        time_ns: event.time_ns,
                        data: EventData::SegmentPool(SegmentPoolEvent {
                            addr: seg.addr,
                            pool: *pool,
                            device,
                            thread: 0,
                        }),
                    })?;
                }
            }
        }
        // After the last event, the phases left.
        for &p in begun.phases.get(phase_i..).unwrap_or_default() {
            tx.push(phase(p, &mut last_ns))?;
        }
        Ok(())
    }
}

/// The devices' runs of the log merged by time, then log index: the order
/// of the trace's events.
///
/// A device's entries are one run each in CPython's pickles, and most
/// snapshots are of one device: the single run is read straight through,
/// with none of the heap's comparisons and moves (a fifth of the merging
/// thread's instructions). A hand-made pickle may interleave its lists into
/// as many runs as entries: those go through a heap of the runs by their
/// next entry.
enum Merged<'a> {
    /// One run: its device, the log index of its next entry, and its entries.
    One(u32, u64, LogIter<'a>),
    /// Several: each run's device, next entry's log index, entries and next
    /// entry, and the runs by their next entry, the first on top.
    Many(
        Vec<(u32, u64, LogIter<'a>, LogEntry)>,
        BinaryHeap<Reverse<(i64, u64, usize)>>,
    ),
}

impl<'a> Merged<'a> {
    /// The runs of `log`, each with its device.
    fn new(log: &'a EventLog, runs: impl Iterator<Item = (u32, &'a Run)>) -> Merged<'a> {
        let runs: Vec<_> = runs.filter(|(_, r)| r.len > 0).collect();
        if let [(d, r)] = runs[..] {
            return Merged::One(d, r.first_index, log.run(r));
        }
        let cursors: Vec<_> = (runs.into_iter())
            .filter_map(|(d, r)| {
                let mut it = log.run(r);
                let next = it.next()?;
                Some((d, r.first_index, it, next))
            })
            .collect();
        let queue = (cursors.iter().enumerate())
            .map(|(i, (_, index, _, e))| Self::key(i, *index, e))
            .collect();
        Merged::Many(cursors, queue)
    }

    /// A run's place in the heap: its next entry's time (none last), log
    /// index, and the run.
    fn key(i: usize, index: u64, e: &LogEntry) -> Reverse<(i64, u64, usize)> {
        Reverse((e.time_us.unwrap_or(i64::MAX), index, i))
    }
}

impl Iterator for Merged<'_> {
    /// The device, the log index and the entry.
    type Item = (u32, u64, LogEntry);

    #[inline(always)]
    fn next(&mut self) -> Option<(u32, u64, LogEntry)> {
        match self {
            Merged::One(d, index, it) => {
                let e = it.next()?;
                *index += 1;
                Some((*d, *index - 1, e))
            }
            Merged::Many(cursors, queue) => {
                // The top run's entry is taken and its next put in its place,
                // sifted down once (`PeekMut`), instead of a pop and a push.
                let mut top = queue.peek_mut()?;
                let i = top.0.2;
                let (d, index, it, e) = &mut cursors[i];
                let out = (*d, *index, *e);
                *index += 1;
                match it.next() {
                    Some(n) => {
                        *e = n;
                        *top = Self::key(i, *index, e);
                    }
                    None => {
                        PeekMut::pop(top);
                    }
                }
                Some(out)
            }
        }
    }
}

// One call site, in `send_events`' loop: out of line (as the compiler left it
// after unrelated changes) it cost 17 M instructions of a 400 k-event
// snapshot's summary in argument passing and reloads.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn to_event(
    device: u32,
    index: u64,
    time_ns: u64,
    e: &LogEntry,
    stacks: &[StackId],
    live_sizes: &FxMap<u64, u64>,
    blocks: &mut ObservedBlocks,
    heap: &Heap,
    tx: &mut TraceSender,
) -> Event {
    let round_size = |blocks: &ObservedBlocks, requested| blocks.config().round_size(requested);
    let stack = stacks
        .get(e.stack as usize)
        .copied()
        .unwrap_or(StackId::NONE);
    let block = |size| BlockEvent {
        addr: e.addr,
        size,
        requested: e.size,
        stream: e.stream,
        device,
        stack,
        thread: 0,
    };
    let segment = block(e.size).segment();
    let data = match e.action {
        Action::Alloc => {
            // The end state has the size of a block still live then: where it
            // could differ from the inferred one, it is the record.
            let inferred = blocks.alloc(e.addr, e.size);
            EventData::Alloc(block(live_sizes.get(&index).copied().unwrap_or(inferred)))
        }
        Action::FreeRequested => {
            let size = blocks
                .size(e.addr)
                .unwrap_or_else(|| round_size(blocks, e.size));
            EventData::FreeRequested(block(size))
        }
        Action::FreeCompleted => {
            let size = blocks
                .free(e.addr)
                .unwrap_or_else(|| round_size(blocks, e.size));
            EventData::FreeCompleted(block(size))
        }
        Action::SegmentAlloc => {
            blocks.reserve(e.addr, e.size, false);
            EventData::SegmentAlloc(segment)
        }
        Action::SegmentFree => {
            blocks.release(e.addr, e.size);
            EventData::SegmentFree(segment)
        }
        Action::SegmentMap => {
            blocks.reserve(e.addr, e.size, true);
            EventData::SegmentMap(segment)
        }
        Action::SegmentUnmap => {
            blocks.release(e.addr, e.size);
            EventData::SegmentUnmap(segment)
        }
        Action::Oom => EventData::Oom(OomEvent {
            requested: e.size,
            free_bytes: e.addr,
            stream: e.stream,
            device,
            stack,
            thread: 0,
        }),
        Action::Snapshot => EventData::Annotation {
            key: tx.intern_string("torch.snapshot"),
            value: tx.intern_string(&format!("device {device}")),
        },
        Action::UserDefined => EventData::Annotation {
            key: tx.intern_string("torch.user_defined"),
            value: if e.size == 0 {
                StringId::EMPTY
            } else {
                tx.intern_string(&heap.str(e.size as StrId))
            },
        },
        Action::Annotate => {
            let text = if e.size == 0 {
                String::new()
            } else {
                heap.str(e.size as StrId).into_owned()
            };
            match category_event(device, e.addr, &text, tx) {
                Some(data) => data,
                // A note that names no category stays a note, of its block.
                None => EventData::Annotation {
                    key: tx.intern_string("torch.annotate"),
                    value: tx.intern_string(&format!("0x{:x}: {text}", e.addr)),
                },
            }
        }
    };
    Event { time_ns, data }
}

/// A category a text names (see [`annotated_category`]), ready to tag
/// blocks with: a built-in one's code, or the program's own name, interned.
#[derive(Clone, Copy, Debug)]
enum Named {
    Builtin(u8),
    Own(StringId),
}

impl Named {
    fn of(text: &str, tx: &mut TraceSender) -> Option<Named> {
        Some(match annotated_category(text)? {
            Annotated::Builtin(category) => Named::Builtin(category.code()),
            Annotated::Own(name) => Named::Own(tx.intern_string(&name)),
        })
    }

    /// The event that tags the block at `addr`.
    fn tag(self, device: u32, addr: u64) -> EventData {
        match self {
            Named::Builtin(code) => EventData::Tag(TagEvent {
                addr,
                device,
                thread: 0,
                code,
            }),
            Named::Own(name) => EventData::UserTag(UserTagEvent {
                addr,
                device,
                thread: 0,
                name,
            }),
        }
    }
}

/// The tag of the block at `addr` that `text` names, if it names one.
fn category_event(device: u32, addr: u64, text: &str, tx: &mut TraceSender) -> Option<EventData> {
    Some(Named::of(text, tx)?.tag(device, addr))
}

/// What an `annotate` entry's text names.
#[derive(Debug, PartialEq, Eq)]
enum Annotated {
    Builtin(Category),
    Own(String),
}

/// The category an `annotate` entry's text names: a JSON object's
/// `"category"` (PyTorch serializes dict metadata as JSON), or the text
/// itself when it is one word that could name one (see
/// [`vramtrace_format::user_category_name_ok`]); a built-in category's name
/// is that category. `None` for other notes (free text, other JSON).
fn annotated_category(text: &str) -> Option<Annotated> {
    let text = text.trim();
    let name = if text.starts_with('{') {
        let value: serde_json::Value = serde_json::from_str(text).ok()?;
        value.get("category")?.as_str()?.to_owned()
    } else if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/'))
    {
        // One word (`kv_cache`) names a category; free text is a note.
        text.to_owned()
    } else {
        return None;
    };
    if let Some(c) = Category::ALL.into_iter().find(|c| c.name() == name) {
        return Some(Annotated::Builtin(c));
    }
    vramtrace_format::user_category_name_ok(&name).then_some(Annotated::Own(name))
}

#[cfg(test)]
mod annotate_tests {
    use super::*;

    #[test]
    fn an_annotation_names_a_category_by_word_or_json_key() {
        let own = |s: &str| Some(Annotated::Own(s.to_string()));
        assert_eq!(annotated_category("kv_cache"), own("kv_cache"));
        assert_eq!(annotated_category(" lora.A "), own("lora.A"));
        assert_eq!(
            annotated_category(r#"{"category": "draft kv", "layer": 3}"#),
            own("draft kv")
        );
        assert_eq!(
            annotated_category("activations"),
            Some(Annotated::Builtin(Category::Activation))
        );
        assert_eq!(annotated_category("retained by autograd: layer 3"), None);
        assert_eq!(annotated_category(r#"{"layer": 3}"#), None);
        assert_eq!(annotated_category("{not json"), None);
        assert_eq!(annotated_category(""), None);
        assert_eq!(annotated_category(&"x".repeat(65)), None);
    }
}

#[cfg(test)]
mod merge_tests {
    use super::*;
    use proptest::prelude::*;

    /// The merge as it was first written: of the runs with entries left, the
    /// one whose next entry has the least (time, none last; log index).
    fn merged_naively(log: &EventLog, runs: &[(u32, &Run)]) -> Vec<(u32, u64, LogEntry)> {
        let mut cursors: Vec<(u32, u64, Vec<LogEntry>)> = (runs.iter())
            .map(|&(d, r)| (d, r.first_index, log.run(r).collect()))
            .collect();
        let mut out = Vec::new();
        loop {
            let best = (cursors.iter().enumerate())
                .filter(|(_, c)| !c.2.is_empty())
                .min_by_key(|(_, c)| (c.2[0].time_us.unwrap_or(i64::MAX), c.1))
                .map(|(i, _)| i);
            let Some(i) = best else { return out };
            let c = &mut cursors[i];
            out.push((c.0, c.1, c.2.remove(0)));
            c.1 += 1;
        }
    }

    fn log_of(entries: &[(u32, Option<i64>)]) -> EventLog {
        let mut log = EventLog::default();
        for (i, &(list, time_us)) in entries.iter().enumerate() {
            log.push(&LogEntry {
                action: Action::Alloc,
                list,
                time_us,
                addr: i as u64 * 512,
                size: 512,
                stream: 0,
                stack: 0,
            });
        }
        log
    }

    proptest! {
        // Lists interleaved into many runs, out-of-order and missing times,
        // runs of lists no device has: in the order of the naive merge, on
        // the one-run path as on the heap's.
        #[test]
        fn the_merge_takes_the_runs_in_order(
            entries in prop::collection::vec(
                (0u32..4, prop::option::weighted(0.9, 0i64..50)),
                0..200,
            ),
            dropped in 0u32..5,
        ) {
            let log = log_of(&entries);
            let runs: Vec<(u32, &Run)> = (log.runs.iter())
                .filter(|r| r.list != dropped)
                .map(|r| (r.list * 10, r))
                .collect();
            let merged: Vec<_> = Merged::new(&log, runs.iter().copied()).collect();
            prop_assert_eq!(merged, merged_naively(&log, &runs));
        }
    }

    #[test]
    fn one_run_is_read_straight_through() {
        // Out of order within the run: kept in log order.
        let log = log_of(&[(7, Some(5)), (7, Some(1)), (7, None), (7, Some(3))]);
        let runs = [(2, &log.runs[0])];
        let merged = Merged::new(&log, runs.iter().copied());
        assert!(matches!(merged, Merged::One(..)));
        let order: Vec<_> = merged.map(|(d, i, e)| (d, i, e.time_us)).collect();
        assert_eq!(
            order,
            [
                (2, 0, Some(5)),
                (2, 1, Some(1)),
                (2, 2, None),
                (2, 3, Some(3))
            ]
        );
        assert_eq!(Merged::new(&log, std::iter::empty()).count(), 0);
    }
}
