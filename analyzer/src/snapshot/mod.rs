//! Importing PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`) as
//! vramtrace traces, so that every analysis reads one data model: the events go
//! straight to an analysis through a [`TraceReceiver`], or into a trace file.
//!
//! The pickle is read as a stream ([`pickle`]): trace entries become events as they
//! are read, frames are interned by their memo identity, and peak memory stays far
//! below the file size. The state at the first event is rebuilt from the end state
//! (`segments`) and written as the trace's initial state; replaying the events from it
//! must land on `segments` again, and any difference is reported in the
//! [`ImportReport`].

mod convert;
mod log;
pub mod pickle;
mod rebuild;

use crate::replay::plausible::MAX_BYTES;
use convert::{Collected, Collector};
use log::{Action, LogEntry};
use pickle::{Heap, ObjKind, PickleError, StrId, Val};
use rebuild::{DeviceReplay, EndBlock, EndSegment};
use rustc_hash::FxHashMap as FxMap;
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use vramtrace_allocator::{AllocatorConfig, ObservedBlocks};
use vramtrace_format::{
    BlockEvent, BlockState, BlockStatus, DeviceInfo, Event, EventData, FormatError, Frame, FrameId,
    Header, InitialState, KindCounts, OomEvent, ReceiverGone, SegmentEvent, SegmentState, StackId,
    StringId, TraceChannel, TraceReceiver, TraceSender, TraceWriter, WriterOptions,
};

/// Device indices a snapshot may use, from 0: tables are kept per device, so
/// an index from a damaged or hostile file must not size them.
pub const MAX_DEVICES: u32 = 1024;

/// The most values one allocator setting (its key or value) may hold once
/// built: settings are a few values each.
const MAX_SETTING_VALUES: usize = 4096;

/// Why a snapshot could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The input is not a readable pickle (the error names the byte offset).
    #[error(transparent)]
    Pickle(#[from] PickleError),
    /// The pickle is fine but is not a PyTorch memory snapshot.
    #[error("not a PyTorch memory snapshot: {0}")]
    NotASnapshot(String),
    /// Writing the converted trace failed.
    #[error("writing the converted trace: {0}")]
    Format(#[from] FormatError),
}

/// A snapshot converted into a vramtrace trace held in memory.
#[derive(Debug)]
pub struct ImportedSnapshot {
    /// The trace, as [`TraceWriter`] wrote it: read it with `TraceReader::new(&trace[..])`.
    pub trace: Vec<u8>,
    /// What the import found, converted, and could not reconcile.
    pub report: ImportReport,
}

/// What an import found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Things the user should know: missing fields of older snapshots, unknown actions,
    /// and every difference between the replayed and the recorded end state.
    pub warnings: Vec<String>,
    /// Trace entries by `action`, as found in the pickle (unknown actions included).
    pub counts_by_action: BTreeMap<String, u64>,
    /// Events written, by kind.
    pub event_counts: KindCounts,
    /// Entries of `device_traces` per device.
    pub entries_per_device: Vec<u64>,
    /// Whether replaying the events from the rebuilt initial state reproduces `segments`.
    pub end_state_matches: bool,
    /// Segments in the rebuilt initial state (non-zero when the ring buffer began mid-run).
    pub initial_segments: usize,
    /// Allocated or pending-free blocks in the rebuilt initial state.
    pub initial_blocks: usize,
    /// External annotations turned into phase events.
    pub phase_events: usize,
    /// Distinct frame objects and stacks in the pickle.
    pub frames: usize,
    /// Distinct stacks.
    pub stacks: usize,
    /// The pickle's protocol.
    pub pickle_protocol: u8,
    /// Bytes of pickle read.
    pub pickle_bytes: u64,
}

/// Imports a snapshot pickle (uncompressed: see [`crate::input`] for compressed files).
/// `progress` is called with the number of pickle bytes read so far, every MiB or so.
pub fn import(read: impl Read, progress: &dyn Fn(u64)) -> Result<ImportedSnapshot, ImportError> {
    let (trace, report) = Arc::new(parse(read, progress)?).write_trace(Vec::new())?;
    Ok(ImportedSnapshot { trace, report })
}

/// Reads a snapshot pickle (see [`import`]) and works out the trace it makes, short of
/// making its events: [`ParsedSnapshot::stream`] sends them to a reader as they are
/// made, and [`ParsedSnapshot::write_trace`] writes them to a file.
pub fn parse(read: impl Read, progress: &dyn Fn(u64)) -> Result<ParsedSnapshot, ImportError> {
    parse_with(pickle::Parser::new(read, progress))
}

/// [`parse`] over a whole pickle in memory (a mapped file, say), read where it lies
/// rather than copied through a buffer. `progress` is called with the number of bytes
/// consumed so far, every 2 MiB or so: the parse never reads them again.
pub fn parse_bytes(bytes: &[u8], progress: &dyn Fn(u64)) -> Result<ParsedSnapshot, ImportError> {
    parse_with(pickle::Parser::over_bytes(bytes, progress))
}

fn parse_with<R: Read>(mut parser: pickle::Parser<'_, R>) -> Result<ParsedSnapshot, ImportError> {
    let mut collector = Collector::new(parser.heap_mut());
    let root = parser.run(&mut collector)?;
    let protocol = parser.protocol();
    let pickle_bytes = parser.offset();
    let mut heap = parser.into_heap();
    heap.release_memo();
    collector.finish_parsing();
    let snapshot = Snapshot::read(&heap, &collector, root)?;
    let mut report = ImportReport {
        pickle_protocol: protocol,
        pickle_bytes,
        frames: collector.frames.len(),
        stacks: collector.stacks.len(),
        ..Default::default()
    };
    let list_replays = std::mem::take(&mut collector.replays);
    let plan = Plan::new(&heap, &collector, list_replays, &snapshot, &mut report);
    Ok(ParsedSnapshot {
        heap,
        collected: collector.into_collected(),
        snapshot,
        plan,
        report,
    })
}

/// A snapshot read and checked, with its events still to make.
pub struct ParsedSnapshot {
    heap: Heap,
    collected: Collected,
    snapshot: Snapshot,
    plan: Plan,
    report: ImportReport,
}

impl std::fmt::Debug for ParsedSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParsedSnapshot")
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

impl ParsedSnapshot {
    /// What the import found: all of it but the counts of events the trace holds
    /// (`event_counts`), which [`ParsedSnapshot::write_trace`] adds.
    pub fn report(&self) -> &ImportReport {
        &self.report
    }

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
}

// The parts of the snapshot other than the trace entries.
struct Snapshot {
    // The list objects of device_traces, by device index.
    device_lists: Vec<u32>,
    // Consumed entries per device list.
    entries_per_device: Vec<u64>,
    has_segments: bool,
    end_segments: Vec<EndSegment>,
    end_blocks: Vec<FxMap<u64, EndBlock>>,
    settings: BTreeMap<String, String>,
    // (time_us, is START, name)
    annotations: Option<Vec<(i64, bool, String)>>,
    warnings: Vec<String>,
    // Segments and blocks of `segments` left out for impossible values.
    impossible_segments: u64,
    impossible_blocks: u64,
}

/// An address and a size from a pickle as an allocator could have recorded
/// them: neither negative, the size at most [`MAX_BYTES`], the end within
/// 64 bits.
fn plausible_range(addr: i128, size: i128) -> Option<(u64, u64)> {
    let addr = u64::try_from(addr).ok()?;
    let size = u64::try_from(size).ok().filter(|&s| s <= MAX_BYTES)?;
    addr.checked_add(size)?;
    Some((addr, size))
}

fn int(heap: &Heap, v: Option<Val>) -> Option<i128> {
    heap.int(v?)
}

/// ` (the container at byte N)` for a container, else nothing.
fn at_byte(heap: &Heap, v: Val) -> String {
    match v {
        Val::Obj(o) => format!(" (the container at byte {})", heap.obj(o).offset()),
        _ => String::new(),
    }
}

impl Snapshot {
    fn read(heap: &Heap, c: &Collector, root: Val) -> Result<Snapshot, ImportError> {
        let Val::Obj(root) = root else {
            return Err(ImportError::NotASnapshot(
                "the top-level value is not a dict".into(),
            ));
        };
        if heap.obj(root).kind != ObjKind::Dict {
            return Err(ImportError::NotASnapshot(
                "the top-level value is not a dict".into(),
            ));
        }
        let get = |key: &str| heap.dict_get_str(root, key);
        let traces = get("device_traces");
        let segments = get("segments");
        if traces.is_none() && segments.is_none() {
            return Err(ImportError::NotASnapshot(
                "the top-level dict has neither `device_traces` nor `segments`".into(),
            ));
        }
        let mut s = Snapshot {
            device_lists: Vec::new(),
            entries_per_device: Vec::new(),
            has_segments: segments.is_some(),
            end_segments: Vec::new(),
            end_blocks: Vec::new(),
            settings: BTreeMap::new(),
            annotations: None,
            warnings: Vec::new(),
            impossible_segments: 0,
            impossible_blocks: 0,
        };
        match traces {
            Some(Val::Obj(t)) if heap.obj(t).kind == ObjKind::List => {
                let lists = &heap.obj(t).items;
                // Tables are kept per device, and every analysis goes over the
                // devices: past the limit `segments` has, the rest is skipped.
                if lists.len() > MAX_DEVICES as usize {
                    s.warnings.push(format!(
                        "`device_traces` (the list at byte {}) holds {} lists, one per device: only devices 0 to {} are read, the rest skipped",
                        heap.obj(t).offset(),
                        lists.len(),
                        MAX_DEVICES - 1
                    ));
                }
                for v in lists.iter().take(MAX_DEVICES as usize) {
                    let Val::Obj(l) = *v else {
                        return Err(ImportError::NotASnapshot(format!(
                            "an item of `device_traces` (the list at byte {}) is not a list",
                            heap.obj(t).offset()
                        )));
                    };
                    let o = heap.obj(l);
                    if !o.items.is_empty() {
                        s.warnings.push(format!(
                            "device {}: {} trace entries were not recognized (no `action`) and were skipped",
                            s.device_lists.len(),
                            o.items.len()
                        ));
                    }
                    s.device_lists.push(l);
                    s.entries_per_device.push(o.consumed);
                }
            }
            Some(v) => {
                return Err(ImportError::NotASnapshot(format!(
                    "`device_traces` is not a list{}",
                    at_byte(heap, v)
                )));
            }
            None => s
                .warnings
                .push("no `device_traces`: the snapshot holds no events".into()),
        }
        match segments {
            Some(Val::Obj(l)) => {
                for &seg in &heap.obj(l).items {
                    s.read_segment(heap, c, seg)?;
                }
            }
            Some(v) => {
                return Err(ImportError::NotASnapshot(format!(
                    "`segments` is not a list{}",
                    at_byte(heap, v)
                )));
            }
            None => s.warnings.push(
                "no `segments`: the end state is unknown, so the initial state holds only what the events imply and cannot be checked"
                    .into(),
            ),
        }
        if let Some(Val::Obj(d)) = get("allocator_settings") {
            let items = &heap.obj(d).items;
            let setting = |v| {
                heap.to_value(v, MAX_SETTING_VALUES).map_err(|e| {
                    ImportError::NotASnapshot(format!(
                        "an allocator setting (in the dict at byte {}): {e}",
                        heap.obj(d).offset()
                    ))
                })
            };
            for kv in items.chunks_exact(2) {
                let key = setting(kv[0])?;
                let value = setting(kv[1])?;
                s.settings.insert(setting_text(&key), setting_text(&value));
            }
        }
        match get("external_annotations") {
            Some(Val::Obj(l)) => {
                let mut out = Vec::new();
                for &a in &heap.obj(l).items {
                    let Val::Obj(a) = a else { continue };
                    let stage = match heap.dict_get_str(a, "stage") {
                        Some(Val::Str(x)) => heap.str(x).into_owned(),
                        _ => continue,
                    };
                    let name = match heap.dict_get_str(a, "name") {
                        Some(Val::Str(x)) => heap.str(x).into_owned(),
                        _ => String::new(),
                    };
                    let Some(t) = int(heap, heap.dict_get_str(a, "time_us")) else {
                        continue;
                    };
                    let begin = match stage.as_str() {
                        "START" => true,
                        "END" => false,
                        _ => continue,
                    };
                    out.push((t as i64, begin, name));
                }
                // One annotation is recorded once per device: keep one.
                out.sort_by(|a, b| (a.0, !a.1, &a.2).cmp(&(b.0, !b.1, &b.2)));
                out.dedup();
                s.annotations = Some(out);
            }
            _ => s.warnings.push(
                "no `external_annotations` (PyTorch before 2.5?): the trace has no phases".into(),
            ),
        }
        Ok(s)
    }

    fn read_segment(&mut self, heap: &Heap, c: &Collector, seg: Val) -> Result<(), ImportError> {
        let Val::Obj(seg) = seg else {
            return Err(ImportError::NotASnapshot(
                "an item of `segments` is not a dict".into(),
            ));
        };
        let bad = |what: &str| {
            ImportError::NotASnapshot(format!(
                "the segment at byte {} {what}",
                heap.obj(seg).offset()
            ))
        };
        let g = |k: &str| heap.dict_get_str(seg, k);
        let device = int(heap, g("device")).unwrap_or(0);
        let device = u32::try_from(device)
            .ok()
            .filter(|&d| d < MAX_DEVICES)
            .ok_or_else(|| {
                bad(&format!(
                    "is on device {device}, not one of 0 to {}",
                    MAX_DEVICES - 1
                ))
            })?;
        let addr = int(heap, g("address")).ok_or_else(|| bad("has no `address`"))?;
        let size = int(heap, g("total_size")).ok_or_else(|| bad("has no `total_size`"))?;
        let Some((addr, size)) = plausible_range(addr, size) else {
            self.impossible_segments += 1;
            return Ok(());
        };
        let stream = int(heap, g("stream")).unwrap_or(0) as u64;
        let expandable = int(heap, g("is_expandable")).unwrap_or(0) != 0;
        self.end_segments.push(EndSegment {
            device,
            addr,
            size,
            stream,
            expandable,
        });
        while self.end_blocks.len() <= device as usize {
            self.end_blocks.push(FxMap::default());
        }
        let Some(Val::Obj(blocks)) = g("blocks") else {
            return Ok(());
        };
        let mut at = addr;
        for &b in &heap.obj(blocks).items {
            let Val::Obj(b) = b else { continue };
            let g = |k: &str| heap.dict_get_str(b, k);
            let baddr = int(heap, g("address")).unwrap_or(at as i128);
            let bsize = int(heap, g("size")).unwrap_or(0);
            let requested = int(heap, g("requested_size")).unwrap_or(0);
            let (Some((baddr, bsize)), Some(requested)) = (
                plausible_range(baddr, bsize),
                u64::try_from(requested).ok().filter(|&r| r <= MAX_BYTES),
            ) else {
                self.impossible_blocks += 1;
                continue;
            };
            at = baddr + bsize;
            let status = match g("state") {
                Some(Val::Str(s)) => match heap.str_bytes(s) {
                    b"active_allocated" => BlockStatus::Allocated,
                    b"active_pending_free" => BlockStatus::PendingFree,
                    _ => continue,
                },
                _ => continue,
            };
            let stack = match g("frames") {
                Some(Val::Custom {
                    kind: convert::CUSTOM_STACK,
                    id,
                }) => c.stack_id(id),
                _ => 0,
            };
            self.end_blocks[device as usize].insert(
                baddr,
                EndBlock {
                    size: bsize,
                    requested,
                    status,
                    stack,
                },
            );
        }
        Ok(())
    }
}

// Settings as PYTORCH_CUDA_ALLOC_CONF writes them: True/False, `[1:0,2:0]` for dicts.
fn setting_text(v: &pickle::Value) -> String {
    use pickle::Value as V;
    match v {
        V::None => "None".into(),
        V::Bool(true) => "True".into(),
        V::Bool(false) => "False".into(),
        V::Int(i) => i.to_string(),
        V::Float(f) => format!("{f:?}"),
        V::Str(s) => s.clone(),
        V::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        V::List(x) | V::Tuple(x) | V::Set(x) => {
            let parts: Vec<String> = x.iter().map(setting_text).collect();
            format!("[{}]", parts.join(","))
        }
        V::Dict(kv) => {
            let parts: Vec<String> = kv
                .iter()
                .map(|(k, v)| format!("{}:{}", setting_text(k), setting_text(v)))
                .collect();
            format!("[{}]", parts.join(","))
        }
        V::Custom { .. } | V::Consumed => String::new(),
    }
}

/// What writing the trace needs beyond the snapshot: the state at the first event, the
/// sizes of blocks, the time base.
struct Plan {
    config: AllocatorConfig,
    // Device index by the list object of its entries.
    device_of: FxMap<u32, u32>,
    devices: usize,
    // Per device.
    start: Vec<Vec<rebuild::StartSegment>>,
    // Block sizes of allocs still live at the end, by log index.
    live_sizes: FxMap<u64, u64>,
    mismatches: u64,
    // The time (in µs) that becomes 0, and whether it is since the epoch.
    t0: i64,
    epoch_based: bool,
}

impl Plan {
    /// Rebuilds the start state, checks the end state and reports what it finds.
    fn new(
        heap: &Heap,
        c: &Collector,
        list_replays: Vec<(u32, DeviceReplay)>,
        s: &Snapshot,
        report: &mut ImportReport,
    ) -> Plan {
        report.warnings.extend(s.warnings.iter().cloned());
        report.entries_per_device = s.entries_per_device.clone();
        let mut unknown = Vec::new();
        for (&action, &n) in &c.action_counts {
            let name = heap.str(action).into_owned();
            if !Action::is_known(&name) {
                unknown.push(format!("{name} ({n})"));
            }
            report.counts_by_action.insert(name, n);
        }
        if !unknown.is_empty() {
            report.warnings.push(format!(
                "unknown trace actions skipped: {}",
                unknown.join(", ")
            ));
        }
        if c.entries_without_time > 0 {
            report.warnings.push(format!(
            "{} trace entries have no `time_us` (PyTorch before 2.2?): their times are sequence numbers, in ns",
            c.entries_without_time
        ));
        }
        if c.entries_without_frames > 0 {
            report.warnings.push(format!(
                "{} trace entries have no `frames` (recorded without context?): they have no stack",
                c.entries_without_frames
            ));
        }
        if s.impossible_segments + s.impossible_blocks + c.entries_impossible > 0 {
            report.warnings.push(format!(
                "{} segments, {} blocks and {} trace entries with impossible values (negative, sizes past 2^50 bytes, address ranges past 2^64, times past 2^63 µs) left out",
                s.impossible_segments, s.impossible_blocks, c.entries_impossible
            ));
        }
        if c.entries_out_of_order > 0 {
            report.warnings.push(format!(
            "{} events were earlier than an event before them on their device; their times were raised to keep the trace ordered",
            c.entries_out_of_order
        ));
        }

        // Block sizes follow the allocator's policy (rounding, and whether a cached block
        // is split or handed out whole), which the snapshot's settings change; the end
        // state only gives the sizes of the blocks still live.
        let config = match AllocatorConfig::from_settings(&s.settings) {
            Ok((config, _ignored)) => config,
            Err(e) => {
                report.warnings.push(format!(
                "allocator_settings could not be read ({e}): block sizes follow the default policy, and may not be exact"
            ));
                AllocatorConfig::default()
            }
        };

        // Devices: the position in device_traces.
        let device_of: FxMap<u32, u32> = s
            .device_lists
            .iter()
            .enumerate()
            .map(|(i, &l)| (l, i as u32))
            .collect();
        let devices = s.device_lists.len().max(s.end_blocks.len());
        let mut replays: Vec<DeviceReplay> =
            (0..devices).map(|_| DeviceReplay::default()).collect();
        let empty_blocks = FxMap::default();
        let end_blocks = |d: usize| s.end_blocks.get(d).unwrap_or(&empty_blocks);
        // The end segments by device, in one pass (not one per device).
        let mut end_segments: Vec<Vec<EndSegment>> = vec![Vec::new(); devices];
        for seg in &s.end_segments {
            if let Some(segs) = end_segments.get_mut(seg.device as usize) {
                segs.push(seg.clone());
            }
        }

        // The replays (done while parsing) find the first touches and check the end.
        for (list, r) in list_replays {
            if let Some(&d) = device_of.get(&list) {
                replays[d as usize] = r;
            }
        }
        let mut live_sizes: FxMap<u64, u64> = FxMap::default();
        let mut start = Vec::new();
        let (mut uncertain_blocks, mut uncertain_bytes) = (0, 0);
        for (d, r) in replays.iter_mut().enumerate() {
            let segs = std::mem::take(&mut end_segments[d]);
            if s.has_segments {
                live_sizes.extend(r.check_end(d as u32, end_blocks(d), &segs));
            }
            let state = r.start_state(d as u32, end_blocks(d), &segs, &config);
            uncertain_blocks += state.uncertain_blocks;
            uncertain_bytes += state.uncertain_bytes;
            start.push(state.segments);
        }
        if uncertain_blocks > 0 {
            report.warnings.push(format!(
                "{uncertain_blocks} blocks live when the history began and freed later may each have been handed out whole, larger than their requested size: allocated figures may be up to {} low while they were live",
                crate::units::bytes(uncertain_bytes)
            ));
        }
        let mut mismatches = 0;
        for (d, r) in replays.iter().enumerate() {
            mismatches += r.inconsistency_count;
            for m in &r.inconsistencies {
                report.warnings.push(format!("device {d}: {m}"));
            }
            if r.inconsistency_count > r.inconsistencies.len() as u64 {
                report.warnings.push(format!(
                    "device {d}: {} more inconsistencies not listed",
                    r.inconsistency_count - r.inconsistencies.len() as u64
                ));
            }
        }
        report.end_state_matches = s.has_segments && mismatches == 0;
        report.initial_segments = start.iter().map(Vec::len).sum();
        report.initial_blocks = start.iter().flatten().map(|seg| seg.blocks.len()).sum();
        report.phase_events = s.annotations.as_ref().map_or(0, Vec::len);

        // Times: relative to the first event or annotation.
        let first_times = c
            .log
            .runs
            .iter()
            .filter_map(|r| c.log.run(r).next().and_then(|e| e.time_us));
        let annotations = s.annotations.as_deref().unwrap_or(&[]);
        let t0 = first_times
            .chain(annotations.first().map(|a| a.0))
            .min()
            .unwrap_or(0);
        // Microseconds since the epoch after 2001 are epoch times; smaller ones are not.
        let epoch_based = t0 > 1_000_000_000_000_000;
        Plan {
            config,
            device_of,
            devices,
            start,
            live_sizes,
            mismatches,
            t0,
            epoch_based,
        }
    }
}

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
    /// The trace's header, symbols and initial state, in a channel to open.
    /// The header of the trace this snapshot is imported as.
    pub fn header(&self) -> Header {
        let (c, s, plan) = (&self.collected, &self.snapshot, &self.plan);
        let report = &self.report;
        let mut header = Header {
            producer: IMPORTED_BY.into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            start_unix_ns: if plan.epoch_based {
                plan.t0 as u64 * 1000
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
        m.insert("torch.trace_entries".into(), c.log.len().to_string());
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

        // Symbols: local frames and stacks to the trace's ids.
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
        let mut cursors: Vec<_> = c
            .log
            .runs
            .iter()
            .filter_map(|r| {
                let d = *plan.device_of.get(&r.list)?;
                let mut it = c.log.run(r);
                let next = it.next()?;
                Some((d, r.first_index, it, next))
            })
            .collect();
        let mut phase_i = 0;
        let mut last_ns = 0u64;
        let t0 = plan.t0;
        let to_ns = |t: i64| (t.saturating_sub(t0).max(0) as u64).saturating_mul(1000);
        // The runs by their next entry, the first on top: a device's entries
        // are one run each in CPython's pickles, but a hand-made pickle may
        // interleave its lists into as many runs as entries.
        let key = |i: usize, index: u64, e: &LogEntry| {
            std::cmp::Reverse((e.time_us.unwrap_or(i64::MAX), index, i))
        };
        let mut queue: std::collections::BinaryHeap<_> = cursors
            .iter()
            .enumerate()
            .map(|(i, (_, index, _, e))| key(i, *index, e))
            .collect();
        loop {
            let best = queue.peek().map(|k| k.0.2);
            let next_time = best.and_then(|i| cursors[i].3.time_us);
            // Phases starting at an event's time come before it, ends after it.
            while let Some(&(t, begin, name)) = begun.phases.get(phase_i) {
                let due = match (best, next_time) {
                    (None, _) => true,
                    (Some(_), Some(nt)) => t < nt || (t == nt && begin),
                    (Some(_), None) => false,
                };
                if !due {
                    break;
                }
                let ns = to_ns(t).max(last_ns);
                last_ns = ns;
                // A snapshot's phases are the program's: its main thread's.
                let data = if begin {
                    EventData::PhaseBegin { name, thread: 0 }
                } else {
                    EventData::PhaseEnd { name, thread: 0 }
                };
                phase_i += 1;
                tx.push(Event { time_ns: ns, data })?;
            }
            let Some(i) = best else { break };
            queue.pop();
            let (d, index, it, e) = &mut cursors[i];
            let (device, idx, entry) = (*d, *index, *e);
            *index += 1;
            if let Some(n) = it.next() {
                *e = n;
                queue.push(key(i, *index, e));
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
        }
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
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
    let segment = SegmentEvent {
        addr: e.addr,
        size: e.size,
        stream: e.stream,
        device,
        stack,
        thread: 0,
    };
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
    };
    Event { time_ns, data }
}
