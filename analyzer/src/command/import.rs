//! `import`: a PyTorch snapshot converted into a trace once, so that later
//! analyses skip the pickle.

use crate::Error;
use crate::input::Input;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use vramtrace_format::KindCounts;

/// What an import wrote. Its JSON keys are in alphabetical order, as `import
/// --json` has always printed them.
#[derive(Clone, Debug, Serialize)]
pub struct ImportResult {
    /// Trace entries by `action`, as found in the pickle.
    pub actions: BTreeMap<String, u64>,
    /// The snapshot file's compression.
    pub compression: &'static str,
    /// Events written, by kind name.
    pub counts: BTreeMap<String, u64>,
    /// Devices with trace entries.
    pub devices: usize,
    /// Whether replaying the events reproduces the snapshot's segments.
    pub end_state_matches: bool,
    /// Events written.
    pub events: u64,
    /// Distinct frames.
    pub frames: usize,
    /// Live blocks when the snapshot's ring buffer began.
    pub initial_blocks: usize,
    /// Segments when the snapshot's ring buffer began.
    pub initial_segments: usize,
    /// Trace entries the allocator tagged as its own work, by tag (absent
    /// when none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub internal_tags: BTreeMap<String, u64>,
    /// Where the trace is written.
    pub output: String,
    /// Annotations turned into phase events.
    pub phase_events: usize,
    /// Bytes of pickle read.
    pub pickle_bytes: u64,
    /// The pickle's protocol.
    pub pickle_protocol: u8,
    /// The snapshot's path.
    pub snapshot: String,
    /// Distinct stacks.
    pub stacks: usize,
    /// Bytes of the trace.
    pub trace_bytes: usize,
    /// What the snapshot holds that is not read, by where it is, with how
    /// many times (absent when nothing).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unread: BTreeMap<String, u64>,
    /// What the user should know about the conversion.
    pub warnings: Vec<String>,
    /// Events written, by kind, in kind order.
    #[serde(skip)]
    pub event_counts: KindCounts,
    /// The trace.
    #[serde(skip)]
    pub trace: Vec<u8>,
}

/// Converts an opened snapshot into a trace held in memory, to be written to
/// `output` (which names it in the result).
pub fn import(input: &Input, output: &Path) -> Result<ImportResult, Error> {
    let (trace, report) = input.write_trace(Vec::new())?;
    Ok(ImportResult {
        actions: report.counts_by_action,
        compression: input.compression().name(),
        counts: report
            .event_counts
            .nonzero()
            .map(|(k, n)| (k.name().to_string(), n))
            .collect(),
        devices: report.entries_per_device.len(),
        end_state_matches: report.end_state_matches,
        events: report.event_counts.total(),
        frames: report.frames,
        initial_blocks: report.initial_blocks,
        internal_tags: report.internal_tags,
        initial_segments: report.initial_segments,
        output: output.display().to_string(),
        phase_events: report.phase_events,
        pickle_bytes: report.pickle_bytes,
        pickle_protocol: report.pickle_protocol,
        snapshot: input.path().display().to_string(),
        stacks: report.stacks,
        trace_bytes: trace.len(),
        unread: report.unread,
        warnings: report.warnings,
        event_counts: report.event_counts,
        trace,
    })
}
