//! The leaks as text.

use super::{full_stacks, site_cell};
use crate::command::leaks::LeaksResult;
use crate::print::table::{Align, Table};
use crate::units;

/// The leaks as text, `top` rows per table; `full`: sites are whole stacks.
pub fn leaks(out: &LeaksResult, top: usize, full: bool) -> String {
    let r = &out.report;
    let mut text = format!("trace     {}\n", out.path);

    text.push_str("\ngrowth across repetitions of a phase:\n");
    if r.repeated_phases.is_empty() {
        text.push_str("  no phase repeats three times or more\n");
    } else {
        let mut t = Table::new(&[
            ("phase", Align::Left),
            ("reps", Align::Right),
            ("warm-up", Align::Right),
            ("growth/rep", Align::Right),
            ("steady", Align::Right),
            ("live at last end", Align::Right),
            ("verdict", Align::Left),
        ]);
        for g in &r.repeated_phases {
            t.row([
                g.phase.clone(),
                units::count(g.repetitions),
                units::count(g.warmup_repetitions),
                units::bytes_delta(g.bytes_per_repetition as i128),
                units::percent(g.steadiness),
                units::bytes(g.live_bytes_at_end.last().copied().unwrap_or(0)),
                if g.growing { "LEAK" } else { "steady" }.to_string(),
            ]);
        }
        text.push_str(&t.render(2));
    }
    for g in &r.growth {
        text.push_str(&format!(
            "\n  {} grows by {} per repetition; growing sites:\n",
            g.phase,
            units::bytes_delta(g.bytes_per_repetition as i128)
        ));
        let mut t = Table::new(&[
            ("growth/rep", Align::Right),
            ("live at last end", Align::Right),
            ("site", Align::Left),
        ]);
        for s in g.sites.iter().take(top) {
            t.row([
                units::bytes_delta(s.bytes_per_repetition as i128),
                units::bytes(s.live_bytes_at_last_end),
                site_cell(&s.site, full),
            ]);
        }
        if t.is_empty() {
            text.push_str("    (no single site grows steadily)\n");
        } else {
            text.push_str(&t.render(4));
            if full {
                text.push_str(&full_stacks(g.sites.iter().take(top).map(|s| &s.site), 4));
            }
        }
    }

    text.push_str(&format!(
        "\nretained at the end of a phase instance ({} instances ended):\n",
        units::count(r.phase_instances)
    ));
    if r.retained_by_phase.is_empty() {
        text.push_str("  none\n");
    } else {
        let mut t = Table::new(&[
            ("phase", Align::Left),
            ("retained", Align::Right),
            ("blocks", Align::Right),
            ("top site", Align::Left),
        ]);
        for p in r.retained_by_phase.iter().take(top) {
            t.row([
                p.phase.clone(),
                units::bytes(p.retained_bytes),
                units::count(p.retained_blocks),
                p.sites.first().map_or(String::new(), |s| {
                    format!("{} ({})", s.site.site, units::bytes(s.bytes))
                }),
            ]);
        }
        text.push_str(&t.render(2));
    }

    text.push_str(&format!(
        "\nnever freed by the end: {} in {} blocks\n",
        units::bytes(r.never_freed_bytes),
        units::count(r.never_freed_blocks)
    ));
    if !r.never_freed.is_empty() {
        let mut t = Table::new(&[
            ("bytes", Align::Right),
            ("blocks", Align::Right),
            ("site", Align::Left),
        ]);
        for s in r.never_freed.iter().take(top) {
            t.row([
                units::bytes(s.bytes),
                units::count(s.count),
                site_cell(&s.site, full),
            ]);
        }
        text.push_str(&t.render(2));
        if full {
            text.push_str("\n  stacks:\n");
            text.push_str(&full_stacks(
                r.never_freed.iter().take(top).map(|s| &s.site),
                4,
            ));
        }
    }
    text
}
