//! `vramtrace info`: what a trace holds, without replaying it.

use super::{open_input_with_report, print_json, warn};
use crate::input::Input;
use crate::units;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace_format::EventKind;
use vramtrace_format::EventSource;

/// Arguments of `vramtrace info`.
#[derive(clap::Args)]
pub struct Args {
    /// The trace to describe.
    trace: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let opened = open_input_with_report(&args.trace)?;
    let mut input = opened.input;
    let scan = input.scan()?;
    let counts = scan.counts;
    let (first_time, last_time) = scan.times.unwrap_or((0, 0));
    let duration = last_time.saturating_sub(first_time);
    // The trace's bytes, or the snapshot's pickle.
    let bytes = match (&input, &opened.import_report) {
        (Input::Trace(r), _) => r.bytes_read(),
        (Input::Snapshot(_), report) => report.as_ref().map_or(0, |r| r.pickle_bytes),
    };
    let events = counts.total();
    let bytes_per_event = if events > 0 {
        bytes as f64 / events as f64
    } else {
        0.0
    };
    let header = input.header();
    let symbols = input.symbols();
    let initial = input.initial_state();
    let status = match (input.truncation(), input.is_complete()) {
        (Some(t), _) => {
            warn(t);
            "truncated"
        }
        (None, true) => "complete",
        (None, false) => {
            warn("the trace has no footer: the recording process did not close it (killed?)");
            "unfinished"
        }
    };

    if args.json {
        let counts_json: serde_json::Map<String, serde_json::Value> = counts
            .nonzero()
            .map(|(k, n)| (k.name().to_string(), json!(n)))
            .collect();
        print_json(&json!({
            "path": args.trace.display().to_string(),
            "format_version": format!("{}.{}", header.version_major, header.version_minor),
            "producer": header.producer,
            "producer_version": header.producer_version,
            "start_unix_ns": header.start_unix_ns,
            "process": {
                "pid": header.process.pid,
                "hostname": header.process.hostname,
                "rank": header.process.rank,
                "local_rank": header.process.local_rank,
                "world_size": header.process.world_size,
            },
            "devices": header.devices.iter().map(|d| json!({
                "index": d.index, "name": d.name, "total_memory": d.total_memory,
            })).collect::<Vec<_>>(),
            "allocator_settings": header.allocator_settings,
            "metadata": header.metadata,
            "duration_ns": duration,
            "events": events,
            "counts": counts_json,
            "chunks": scan.chunks,
            "bytes": bytes,
            "bytes_per_event": bytes_per_event,
            "strings": symbols.string_count(),
            "frames": symbols.frame_count(),
            "stacks": symbols.stack_count(),
            "initial_segments": initial.map_or(0, |s| s.segments.len()),
            "status": status,
        }));
        return Ok(ExitCode::SUCCESS);
    }

    let mut lines: Vec<(&str, String)> = vec![
        ("trace", args.trace.display().to_string()),
        (
            "format",
            format!(
                "vramtrace {}.{}, written by {} {}",
                header.version_major,
                header.version_minor,
                header.producer,
                header.producer_version
            ),
        ),
    ];
    if header.start_unix_ns > 0 {
        lines.push(("started", units::utc_datetime(header.start_unix_ns)));
    }
    let p = &header.process;
    if p.pid != 0 || !p.hostname.is_empty() {
        let mut process = format!("pid {} on {}", p.pid, p.hostname);
        if let (Some(rank), Some(world)) = (p.rank, p.world_size) {
            process.push_str(&format!(", rank {rank} of {world}"));
        }
        lines.push(("process", process));
    }
    for d in &header.devices {
        let memory = match d.total_memory {
            0 => "memory size not recorded".to_string(),
            n => units::bytes(n),
        };
        lines.push(("device", format!("{}: {}, {memory}", d.index, d.name)));
    }
    if !header.allocator_settings.is_empty() {
        let settings: Vec<String> = header
            .allocator_settings
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        lines.push(("allocator", settings.join(",")));
    }
    for (k, v) in &header.metadata {
        lines.push(("note", format!("{k} = {v}")));
    }
    lines.push(("duration", units::duration_ns(duration)));
    let stored = match scan.chunks {
        Some(chunks) => format!(
            "in {} chunks, {}",
            units::count(chunks),
            units::bytes(bytes)
        ),
        None => format!("from {} of pickle", units::bytes(bytes)),
    };
    lines.push((
        "events",
        format!(
            "{} {stored} ({bytes_per_event:.1} bytes per event)",
            units::count(events),
        ),
    ));
    for kind in EventKind::ALL {
        let n = counts.get(kind);
        if n > 0 {
            lines.push(("", format!("{:<15}{:>14}", kind.name(), units::count(n))));
        }
    }
    lines.push((
        "symbols",
        format!(
            "{} strings, {} frames, {} stacks",
            units::count(symbols.string_count() as u64),
            units::count(symbols.frame_count() as u64),
            units::count(symbols.stack_count() as u64)
        ),
    ));
    if let Some(state) = initial {
        let reserved: u64 = state.segments.iter().map(|s| s.size).sum();
        lines.push((
            "initial",
            format!(
                "{} segments, {} reserved when recording began",
                state.segments.len(),
                units::bytes(reserved)
            ),
        ));
    }
    lines.push(("status", status.to_string()));
    for (label, value) in lines {
        println!("{label:<10}{value}");
    }
    Ok(ExitCode::SUCCESS)
}
