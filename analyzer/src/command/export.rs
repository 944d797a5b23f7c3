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
/// [`join_profiler_trace`]).
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

/// A `torch.profiler` trace (`export_chrome_trace`) that a Perfetto export
/// cannot join.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProfilerTraceError(String);

/// A `torch.profiler` trace (`export_chrome_trace`), read without building
/// its events: its bytes, where each top-level field lies in them, its
/// time base and the span of its events. Memory is the file's size, not
/// twenty times it (a document of values).
#[derive(Debug)]
pub struct ProfilerTrace {
    bytes: Vec<u8>,
    /// Each top-level field but `traceEvents`: its name and its value's bytes.
    fields: Vec<(String, std::ops::Range<usize>)>,
    /// The `traceEvents` array's bytes.
    events: std::ops::Range<usize>,
    /// Where its timestamps count from: its `baseTimeNanoseconds` (Unix
    /// time, in ns; its events' `ts` are microseconds after it), or 0 when
    /// it has none (they are Unix time).
    pub base_unix_ns: u64,
    /// The earliest `ts` of its events and the latest `ts + dur`, in its
    /// microseconds; `None` when no event has a time.
    pub span_us: Option<(f64, f64)>,
}

impl ProfilerTrace {
    /// Reads a trace-event document from its bytes.
    pub fn read(bytes: Vec<u8>) -> Result<ProfilerTrace, ProfilerTraceError> {
        use serde_json::value::RawValue;
        let not_a_document = || {
            ProfilerTraceError(
                "not a trace-event document (no traceEvents array): give the JSON file torch.profiler's export_chrome_trace writes".into(),
            )
        };
        let top: Vec<(String, std::ops::Range<usize>)> = {
            let map: std::collections::BTreeMap<String, &RawValue> = serde_json::from_slice(&bytes)
                .map_err(|e| ProfilerTraceError(format!("not a JSON trace ({e})")))?;
            let origin = bytes.as_ptr() as usize;
            map.into_iter()
                .map(|(k, v)| {
                    let start = v.get().as_ptr() as usize - origin;
                    (k, start..start + v.get().len())
                })
                .collect()
        };
        let mut events = None;
        let mut fields = Vec::new();
        let mut base_unix_ns = 0;
        for (name, range) in top {
            let raw = &bytes[range.clone()];
            match name.as_str() {
                "traceEvents" => {
                    if raw.first() != Some(&b'[') {
                        return Err(not_a_document());
                    }
                    events = Some(range);
                }
                "baseTimeNanoseconds" => {
                    base_unix_ns = serde_json::from_slice::<Option<u64>>(raw)
                        .map_err(|_| {
                            ProfilerTraceError(format!(
                                "its baseTimeNanoseconds ({}) is not a time in ns",
                                String::from_utf8_lossy(raw)
                            ))
                        })?
                        .unwrap_or(0);
                    fields.push((name, range));
                }
                _ => fields.push((name, range)),
            }
        }
        let events = events.ok_or_else(not_a_document)?;
        let spans: Vec<EventSpan> = serde_json::from_slice(&bytes[events.clone()])
            .map_err(|e| ProfilerTraceError(format!("its traceEvents cannot be read ({e})")))?;
        let span_us = spans
            .iter()
            .filter_map(|s| {
                let ts = s.ts.as_ref()?.value()?;
                let dur = s.dur.as_ref().and_then(Number::value).unwrap_or(0.0);
                Some((ts, ts + dur.max(0.0)))
            })
            .reduce(|(a, b), (c, d)| (a.min(c), b.max(d)));
        Ok(ProfilerTrace {
            bytes,
            fields,
            events,
            base_unix_ns,
            span_us,
        })
    }
}

/// An event's time and length, all else of it skipped.
#[derive(serde::Deserialize)]
struct EventSpan {
    #[serde(default)]
    ts: Option<Number>,
    #[serde(default)]
    dur: Option<Number>,
}

/// A number, or anything else (a string, say), which is no time.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Number {
    Float(f64),
    Other(serde::de::IgnoredAny),
}

impl Number {
    fn value(&self) -> Option<f64> {
        match self {
            Number::Float(x) if x.is_finite() => Some(*x),
            _ => None,
        }
    }
}

/// A Perfetto export joined to a `torch.profiler` trace: the document's
/// bytes, and why its times may not line up.
#[derive(Debug)]
pub struct JoinedProfilerTrace {
    /// The profiler's trace with the memory tracks added, on its clock.
    pub bytes: Vec<u8>,
    /// Set when the two traces' events do not overlap in time (another
    /// run's trace, or a clock far off): the span of each.
    pub apart: Option<String>,
}

/// Adds an export's events (made with the profiler trace's time base,
/// [`ProfilerTrace::base_unix_ns`]) to a `torch.profiler` trace: one
/// document, whose memory tracks line up with the profiler's kernels and
/// ranges. Its fields are copied as they are, never parsed into values.
pub fn join_profiler_trace(
    trace: ProfilerTrace,
    export: PerfettoExport,
) -> Result<JoinedProfilerTrace, ProfilerTraceError> {
    let Value::Object(mut ours) = export.document else {
        return Err(ProfilerTraceError("the export is not a document".into()));
    };
    let Some(Value::Array(events)) = ours.remove("traceEvents") else {
        return Err(ProfilerTraceError("the export has no events".into()));
    };
    let our_span = events
        .iter()
        .filter_map(|e| {
            let ts = e["ts"].as_f64()?;
            Some((ts, ts + e["dur"].as_f64().unwrap_or(0.0)))
        })
        .reduce(|(a, b), (c, d)| (a.min(c), b.max(d)));
    let apart = match (trace.span_us, our_span) {
        (Some((a, b)), Some((c, d))) if b < c || d < a => Some(format!(
            "the torch.profiler trace's events ({} to {}) and the memory trace's ({} to {}) do not overlap in time: another run's trace, or clocks apart; the tracks will not line up",
            unix_time(trace.base_unix_ns, a),
            unix_time(trace.base_unix_ns, b),
            unix_time(trace.base_unix_ns, c),
            unix_time(trace.base_unix_ns, d)
        )),
        _ => None,
    };
    let json = |v: &Value| serde_json::to_vec(v).map_err(|e| ProfilerTraceError(e.to_string()));
    let mut out = Vec::with_capacity(trace.bytes.len() + 64 * events.len() + 4096);
    out.push(b'{');
    for (name, range) in &trace.fields {
        // The export's own data replaces a field of that name.
        if name == "vramtrace" && ours.contains_key("otherData") {
            continue;
        }
        out.extend(json(&Value::String(name.clone()))?);
        out.push(b':');
        out.extend(&trace.bytes[range.clone()]);
        out.push(b',');
    }
    if let Some(other) = ours.remove("otherData") {
        out.extend(b"\"vramtrace\":");
        out.extend(json(&other)?);
        out.push(b',');
    }
    out.extend(b"\"traceEvents\":");
    // Theirs without the closing bracket, then ours.
    let theirs = trace.bytes[trace.events.clone()].trim_ascii();
    let inner = theirs[1..theirs.len() - 1].trim_ascii();
    out.push(b'[');
    out.extend(inner);
    for (i, e) in events.iter().enumerate() {
        if i > 0 || !inner.is_empty() {
            out.push(b',');
        }
        out.extend(json(e)?);
    }
    out.extend(b"]}");
    Ok(JoinedProfilerTrace { bytes: out, apart })
}

/// A profiler timestamp (µs after `base_unix_ns`) as Unix time, for a
/// message.
fn unix_time(base_unix_ns: u64, us: f64) -> String {
    let s = base_unix_ns as f64 / 1e9 + us / 1e6;
    format!("{s:.3} s of Unix time")
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
