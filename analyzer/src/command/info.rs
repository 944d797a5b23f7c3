//! `info`: what an input holds, without replaying it.

use crate::Error;
use crate::input::{EventStream, Input};
use serde::Serialize;
use std::collections::BTreeMap;
use vramtrace_format::{DeviceInfo, EventSource, KindCounts, ProcessInfo, Truncation};

/// Whether a trace was closed cleanly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// It has its footer.
    Complete,
    /// It was cut short.
    Truncated,
    /// It has no footer: the recording process did not close it.
    Unfinished,
    /// Part of it was damaged and skipped, or it disagrees with its footer.
    Damaged,
}

/// What an input holds. Its JSON keys are in alphabetical order, as `info
/// --json` has always printed them.
#[derive(Clone, Debug, Serialize)]
pub struct InfoResult {
    /// The allocator's recorded settings.
    pub allocator_settings: BTreeMap<String, String>,
    /// Bytes of the trace, or of a snapshot's pickle.
    pub bytes: u64,
    /// `bytes` per event.
    pub bytes_per_event: f64,
    /// Event chunks of a trace (none for a snapshot).
    pub chunks: Option<u64>,
    /// Events by kind name.
    pub counts: BTreeMap<String, u64>,
    /// The devices the process used.
    pub devices: Vec<DeviceInfo>,
    /// Time from the first to the last event.
    pub duration_ns: u64,
    /// Events, all kinds.
    pub events: u64,
    /// The format's version, `major.minor`.
    pub format_version: String,
    /// Frames in the symbol table.
    pub frames: usize,
    /// Segments reserved when recording began.
    pub initial_segments: usize,
    /// Free-form facts about the trace's origin.
    pub metadata: BTreeMap<String, String>,
    /// The input's path.
    pub path: String,
    /// The recorded process.
    pub process: ProcessInfo,
    /// The program that wrote the trace.
    pub producer: String,
    /// Its version.
    pub producer_version: String,
    /// Wall-clock time of the trace's start (0 when unknown).
    pub start_unix_ns: u64,
    /// Stacks in the symbol table.
    pub stacks: usize,
    /// Whether the trace was closed cleanly.
    pub status: Status,
    /// Strings in the symbol table.
    pub strings: usize,
    /// What was skipped as damaged, or found amiss, one line each.
    pub damage: Vec<String>,
    /// Events by kind, in kind order.
    #[serde(skip)]
    pub kind_counts: KindCounts,
    /// Bytes reserved when recording began, when the trace has an initial state.
    #[serde(skip)]
    pub initial_reserved_bytes: Option<u64>,
    /// Where a truncated trace was cut.
    #[serde(skip)]
    pub truncation: Option<Truncation>,
}

/// Describes an input: its header and symbols, and its events counted from
/// the chunk headers of a trace (nothing is decoded) or from a snapshot's
/// events.
pub fn info(input: &Input) -> Result<InfoResult, Error> {
    let mut events = input.events()?;
    let scan = events.scan().map_err(|source| Error::Read {
        path: input.path().to_owned(),
        source,
    })?;
    let (first_time, last_time) = scan.times.unwrap_or((0, 0));
    // The trace's bytes, or the snapshot's pickle.
    let bytes = match (&events, input.import_report()) {
        (EventStream::Snapshot(_), Some(report)) => report.pickle_bytes,
        _ => scan.bytes.unwrap_or(0),
    };
    let total = scan.counts.total();
    let header = events.header();
    let symbols = events.symbols();
    // Sums over the starting state count only what an allocator could hold.
    let (initial, left_out) = match events.initial_state() {
        Some(initial) => {
            let (kept, left_out) = crate::replay::plausible::plausible_initial(initial);
            (Some(kept), left_out)
        }
        None => (None, 0),
    };
    let initial = initial.as_deref();
    let truncation = events.truncation().copied();
    let mut damage: Vec<String> = events.damage().iter().map(ToString::to_string).collect();
    let unlisted = events.damage_count() - damage.len() as u64;
    if unlisted > 0 {
        damage.push(format!("{unlisted} more damaged places were skipped"));
    }
    if left_out > 0 {
        let values = crate::replay::plausible::ImpossibleValues {
            initial_segments: left_out,
            ..Default::default()
        };
        damage.push(values.to_string());
    }
    let status = match (truncation, events.is_complete()) {
        _ if !damage.is_empty() => Status::Damaged,
        (Some(_), _) => Status::Truncated,
        (None, true) => Status::Complete,
        (None, false) => Status::Unfinished,
    };
    Ok(InfoResult {
        allocator_settings: header.allocator_settings.clone(),
        bytes,
        bytes_per_event: if total > 0 {
            bytes as f64 / total as f64
        } else {
            0.0
        },
        chunks: scan.chunks,
        counts: scan
            .counts
            .nonzero()
            .map(|(k, n)| (k.name().to_string(), n))
            .collect(),
        devices: header.devices.clone(),
        duration_ns: last_time.saturating_sub(first_time),
        events: total,
        format_version: format!("{}.{}", header.version_major, header.version_minor),
        frames: symbols.frame_count(),
        initial_segments: initial.map_or(0, |s| s.segments.len()),
        metadata: header.metadata.clone(),
        path: input.path().display().to_string(),
        process: header.process.clone(),
        producer: header.producer.clone(),
        producer_version: header.producer_version.clone(),
        start_unix_ns: header.start_unix_ns,
        stacks: symbols.stack_count(),
        status,
        strings: symbols.string_count(),
        damage,
        kind_counts: scan.counts,
        initial_reserved_bytes: initial.map(|s| s.segments.iter().map(|s| s.size).sum()),
        truncation,
    })
}
