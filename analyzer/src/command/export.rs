//! `export`: a trace in other tools' formats.
//!
//! - **Perfetto** (the Chrome trace-event JSON that Perfetto's UI and
//!   `chrome://tracing` open): per device, counter tracks of allocated and
//!   reserved memory and of allocated memory by category, slices for
//!   phases, instant events for out-of-memory errors and `empty_cache()`.
//!   Timestamps are microseconds of Unix time (the trace's start plus each
//!   event's offset), under the recorded process id, so that a
//!   `torch.profiler` trace of the same run opened beside it lines up on
//!   wall-clock time.
//! - **pprof** (`profile.proto`, gzip-compressed): the memory live at the
//!   allocated peak by stack, as `go tool pprof` and speedscope read it.

use super::flamegraph::{FlameGraph, Moment, flamegraph};
use super::{ByDevice, Replay, ReplayOptions, Warning};
use crate::Error;
use crate::analysis::timeline::{GroupBy, TimelineAnalysis, TimelineOptions};
use crate::analysis::{Analysis, AnalysisError, Flow, Step};
use crate::input::Input;
use crate::progress::Progress;
use crate::replay::ReplayState;
use serde_json::{Value, json};
use vramtrace_format::EventData;

/// Counter samples per device in a Perfetto export: each column keeps its
/// lowest and highest moment, so peaks survive exactly.
pub const PERFETTO_COLUMNS: usize = 20_000;

/// The times of `empty_cache()` calls, for instant events.
#[derive(Debug, Default)]
struct EmptyCacheTimes(Vec<u64>);

/// At most this many `empty_cache()` markers are kept per device.
const KEPT_EMPTY_CACHES: usize = 10_000;

impl Analysis for EmptyCacheTimes {
    fn event(&mut self, step: &Step<'_>, _state: &ReplayState) -> Result<Flow, AnalysisError> {
        if matches!(step.event.data, EventData::EmptyCache(_)) && self.0.len() < KEPT_EMPTY_CACHES {
            self.0.push(step.event.time_ns);
        }
        Ok(Flow::Continue)
    }
}

/// A Perfetto export and what its pass found worth a warning.
#[derive(Debug)]
pub struct PerfettoExport {
    /// The trace-event JSON document.
    pub document: Value,
    /// Counter samples written, over every device.
    pub samples: usize,
    /// Phase slices written.
    pub slices: usize,
    /// What the pass found worth a warning.
    pub warnings: Vec<Warning>,
}

/// Microseconds since `base_unix_ns` of an offset from the trace's start
/// (which is at `start_unix_ns`).
/// Negative before the base (a recording begun before the profiler).
fn micros(start_unix_ns: u64, base_unix_ns: u64, time_ns: u64) -> f64 {
    (i128::from(start_unix_ns) + i128::from(time_ns) - i128::from(base_unix_ns)) as f64 / 1000.0
}

/// Replays an input once (each device apart) into a Perfetto trace whose
/// timestamps are microseconds since `base_unix_ns` (0: Unix time; a
/// `torch.profiler` trace's `baseTimeNanoseconds` to join it, see
/// [`print::perfetto::join_profiler_trace`](crate::print::perfetto::join_profiler_trace)).
pub fn perfetto(
    input: &Input,
    options: &ReplayOptions,
    base_unix_ns: u64,
    progress: &dyn Progress,
) -> Result<PerfettoExport, Error> {
    let replay = Replay::new(input, options, progress)?;
    let (devices, pass) = replay.run(|_| {
        (
            TimelineAnalysis::new(TimelineOptions {
                columns: PERFETTO_COLUMNS,
                group_by: GroupBy::Category,
                top: 8,
            }),
            EmptyCacheTimes::default(),
        )
    })?;
    let start = pass.header.start_unix_ns;
    let pid = pass.header.process.pid;
    let mut events = vec![json!({
        "ph": "M", "name": "process_name", "pid": pid,
        "args": {"name": format!("vramtrace: {}", super::file_name(input.path()))},
    })];
    let (mut samples, mut slices) = (0, 0);
    for d in devices {
        let device = d.device;
        let (timeline, empty_caches) = d.analyses;
        let timeline = replay.result(timeline.into_report())?;
        // One thread per device: its phases nest as slices on it. In 64
        // bits: a device id past 4,293,967,295 would overflow 32.
        let tid = 1_000_000 + u64::from(device);
        events.push(json!({
            "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
            "args": {"name": format!("GPU {device} memory (vramtrace)")},
        }));
        for s in &timeline.samples {
            let ts = micros(start, base_unix_ns, s.time_ns);
            events.push(json!({
                "ph": "C", "pid": pid, "tid": tid, "ts": ts,
                "name": format!("GPU {device} memory"),
                "args": {"allocated": s.allocated, "reserved": s.reserved},
            }));
            let by_category: serde_json::Map<String, Value> = timeline
                .categories
                .iter()
                .zip(&s.values)
                .map(|(name, bytes)| (name.clone(), json!(bytes)))
                .collect();
            events.push(json!({
                "ph": "C", "pid": pid, "tid": tid, "ts": ts,
                "name": format!("GPU {device} allocated by category"),
                "args": by_category,
            }));
            samples += 1;
        }
        for p in &timeline.phases {
            events.push(json!({
                "ph": "X", "pid": pid, "tid": tid, "name": p.name,
                "ts": micros(start, base_unix_ns, p.start_ns),
                "dur": p.end_ns.saturating_sub(p.start_ns) as f64 / 1000.0,
                "cat": "phase",
            }));
            slices += 1;
        }
        for oom in &timeline.ooms {
            events.push(json!({
                "ph": "i", "s": "t", "pid": pid, "tid": tid, "cat": "oom",
                "name": "out of memory", "ts": micros(start, base_unix_ns, oom.time_ns),
                "args": {"requested_bytes": oom.bytes, "site": oom.category},
            }));
        }
        for &t in &empty_caches.0 {
            events.push(json!({
                "ph": "i", "s": "t", "pid": pid, "tid": tid, "cat": "allocator",
                "name": "empty_cache()", "ts": micros(start, base_unix_ns, t),
            }));
        }
    }
    let document = json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": "vramtrace",
            "source": input.path().display().to_string(),
            "start_unix_ns": start,
            "base_unix_ns": base_unix_ns,
            "timestamps": "microseconds since base_unix_ns (0: Unix time)",
        },
    });
    Ok(PerfettoExport {
        document,
        samples,
        slices,
        warnings: pass.warnings,
    })
}

/// What a pprof profile is made of: the memory live at the allocated peak on
/// each device, by stack, and the time the trace started. The printer
/// (`print::pprof::profile`) builds the profile from it.
#[derive(Clone, Debug)]
pub struct PprofExport {
    /// Each device's live memory by stack at its allocated peak (the
    /// passes' warnings are taken out, into `warnings`).
    pub graphs: ByDevice<FlameGraph>,
    /// When the trace started, in Unix nanoseconds: the profile's time.
    pub start_unix_ns: u64,
    /// What the passes found worth a warning.
    pub warnings: Vec<Warning>,
}

/// The memory live at the allocated peak on each device, by stack, for a
/// pprof profile, with what the passes found worth a warning.
pub fn pprof(
    input: &Input,
    options: &ReplayOptions,
    progress: &dyn Progress,
) -> Result<PprofExport, Error> {
    let mut graphs: ByDevice<FlameGraph> =
        flamegraph(input, options, Moment::AllocatedPeak, progress)?;
    let warnings = std::mem::take(&mut graphs.warnings)
        .into_iter()
        .map(|w| w.warning)
        .collect();
    Ok(PprofExport {
        graphs,
        start_unix_ns: input.header().start_unix_ns,
        warnings,
    })
}
