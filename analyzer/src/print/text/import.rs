//! An import's outcome as text.

use crate::command::import::ImportResult;
use crate::units;
use vramtrace_format::EventKind;

/// What an import read and wrote.
pub fn import(r: &ImportResult) -> String {
    let mut text = format!(
        "imported {} events from {} ({} of pickle, protocol {}) into {} ({}, {:.1} bytes per event)\n",
        units::count(r.events),
        r.snapshot,
        units::bytes(r.pickle_bytes),
        r.pickle_protocol,
        r.output,
        units::bytes(r.trace_bytes as u64),
        r.trace_bytes as f64 / r.events.max(1) as f64,
    );
    for kind in EventKind::ALL {
        let n = r.event_counts.get(kind);
        if n > 0 {
            text.push_str(&format!("  {:<15}{:>14}\n", kind.name(), units::count(n)));
        }
    }
    text.push_str(&format!(
        "  {} distinct frames, {} stacks, {} phase events\n",
        units::count(r.frames as u64),
        units::count(r.stacks as u64),
        units::count(r.phase_events as u64)
    ));
    if r.initial_segments > 0 {
        text.push_str(&format!(
            "  the snapshot's ring buffer began mid-run: {} segments and {} live blocks existed before its first entry\n",
            r.initial_segments, r.initial_blocks
        ));
    }
    text.push_str(&format!(
        "  end state {}\n",
        if r.end_state_matches {
            "matches the snapshot's segments"
        } else {
            "differs from the snapshot's segments (see the warnings)"
        }
    ));
    text
}
