//! A Perfetto export joined to a `torch.profiler` trace: the profiler's
//! document read without building its events, and the export's events
//! added to it, on its clock, as bytes (the export itself is
//! [`crate::command::export::perfetto`]'s).

use crate::command::export::PerfettoExport;
use serde_json::Value;

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
