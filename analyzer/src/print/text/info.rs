//! What an input holds, as text.

use crate::command::info::InfoResult;
use crate::units;
use vramtrace_format::EventKind;

/// An input's header, events and symbols as labelled lines.
pub fn info(r: &InfoResult) -> String {
    let mut lines: Vec<(&str, String)> = vec![
        ("trace", r.path.clone()),
        (
            "format",
            format!(
                "vramtrace {}, written by {} {}",
                r.format_version, r.producer, r.producer_version
            ),
        ),
    ];
    if r.start_unix_ns > 0 {
        lines.push(("started", units::utc_datetime(r.start_unix_ns)));
    }
    let p = &r.process;
    if p.pid != 0 || !p.hostname.is_empty() {
        let mut process = format!("pid {} on {}", p.pid, p.hostname);
        if let (Some(rank), Some(world)) = (p.rank, p.world_size) {
            process.push_str(&format!(", rank {rank} of {world}"));
        }
        lines.push(("process", process));
    }
    for d in &r.devices {
        let memory = match d.total_memory {
            0 => "memory size not recorded".to_string(),
            n => units::bytes(n),
        };
        lines.push(("device", format!("{}: {}, {memory}", d.index, d.name)));
    }
    if !r.allocator_settings.is_empty() {
        let settings: Vec<String> = r
            .allocator_settings
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        // A snapshot's settings run to hundreds of characters: a few a line,
        // under the label's column.
        let wrapped = super::wrapped(&settings.join(", "), 90, &" ".repeat(10));
        lines.push(("allocator", wrapped.trim().to_string()));
    }
    for (k, v) in &r.metadata {
        lines.push(("note", format!("{k} = {v}")));
    }
    lines.push(("duration", units::duration_ns(r.duration_ns)));
    let stored = match r.chunks {
        Some(chunks) => format!(
            "in {} chunks, {}",
            units::count(chunks),
            units::bytes(r.bytes)
        ),
        None => format!("from {} of pickle", units::bytes(r.bytes)),
    };
    lines.push((
        "events",
        format!(
            "{} {stored} ({:.1} bytes per event)",
            units::count(r.events),
            r.bytes_per_event
        ),
    ));
    for kind in EventKind::ALL {
        let n = r.kind_counts.get(kind);
        if n > 0 {
            lines.push(("", format!("{:<15}{:>14}", kind.name(), units::count(n))));
        }
    }
    lines.push((
        "symbols",
        format!(
            "{} strings, {} frames, {} stacks",
            units::count(r.strings as u64),
            units::count(r.frames as u64),
            units::count(r.stacks as u64)
        ),
    ));
    if let Some(reserved) = r.initial_reserved_bytes {
        lines.push((
            "initial",
            format!(
                "{} segments, {} reserved when recording began",
                r.initial_segments,
                units::bytes(reserved)
            ),
        ));
    }
    lines.push((
        "status",
        match r.status {
            crate::command::info::Status::Complete => "complete",
            crate::command::info::Status::Truncated => "truncated",
            crate::command::info::Status::Unfinished => "unfinished",
            crate::command::info::Status::Damaged => "damaged (the rest was read)",
        }
        .to_string(),
    ));
    let mut text = String::new();
    for (label, value) in lines {
        text.push_str(&format!("{label:<10}{value}\n"));
    }
    text
}
