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
//!
//! [`TraceReceiver`]: vramtrace_format::TraceReceiver

mod convert;
mod emit;
mod layout;
mod log;
pub mod pickle;
mod plan;
mod rebuild;

pub use emit::IMPORTED_BY;
use layout::Snapshot;
use plan::Plan;

use convert::{Collected, Collector, Pace, ReadAhead, worth_reading_ahead};
use pickle::{Heap, PickleError};
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use vramtrace_format::{FormatError, KindCounts};

pub use crate::bounds::MAX_DEVICES;

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
    ///
    /// [`TraceWriter`]: vramtrace_format::TraceWriter
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
    /// What the snapshot holds that the import does not read, by where it
    /// is (`trace.compile_context`, `frames.fx_node_op`, `host_traces`, ...),
    /// with how many entries, items or frames hold it; also in `warnings`.
    pub unread: BTreeMap<String, u64>,
    /// Trace entries the allocator tagged as its own work, by tag
    /// (`internal_metadata`, PyTorch 2.15 and later, or 2.13 and 2.14's
    /// `mallocWithAddress` in `user_metadata`): replayed as any other entry,
    /// and named in `warnings`.
    pub internal_tags: BTreeMap<String, u64>,
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
    parse_with(pickle::Parser::new(read, progress), None)
}

/// [`parse`] over a whole pickle in memory (a mapped file, say), read where it lies
/// rather than copied through a buffer. `progress` is called with the number of bytes
/// consumed so far, every 2 MiB or so: the parse never reads them again.
///
/// A large pickle's trace entries are read by two threads where a core is free
/// for the second (see `convert::ahead`).
pub fn parse_bytes(bytes: &[u8], progress: &dyn Fn(u64)) -> Result<ParsedSnapshot, ImportError> {
    if !worth_reading_ahead(bytes.len()) {
        return parse_with(pickle::Parser::over_bytes(bytes, progress), None);
    }
    std::thread::scope(|scope| {
        let ahead = ReadAhead::start(scope, bytes, Pace::DEFAULT);
        parse_with(pickle::Parser::over_bytes(bytes, progress), Some(ahead))
    })
}

fn parse_with<R: Read>(
    mut parser: pickle::Parser<'_, R>,
    ahead: Option<ReadAhead>,
) -> Result<ParsedSnapshot, ImportError> {
    let mut collector = Collector::new(parser.heap_mut());
    if let Some(ahead) = ahead {
        collector.read_ahead(ahead);
    }
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
}
