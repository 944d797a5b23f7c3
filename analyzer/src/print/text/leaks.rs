//! The leaks as text.

use super::{full_stacks, site_cell};
use crate::analysis::leaks::{LeaksReport, Trend};
use crate::command::leaks::LeaksResult;
use crate::print::labels::site_label;
use crate::print::table::{Align, Table};
use crate::units;

/// The leaks as text, `top` rows per table; `full`: sites are whole stacks.
pub fn leaks(out: &LeaksResult, top: usize, full: bool) -> String {
    let r = &out.report;
    let mut text = format!("trace     {}\n", out.path);
    text.push_str(&leak_table(r, top, full));
    text.push_str(&repeated_phases(r));
    text.push_str(&retained_by_phase(r, top));
    text.push_str(&never_freed(r, top, full));
    text
}

/// The leaks found: the sites whose live memory grows with every repetition.
fn leak_table(r: &LeaksReport, top: usize, full: bool) -> String {
    let mut text = String::new();
    if r.leaks.is_empty() {
        text.push_str(
            "\nleaks: none (no site's live memory grows across the repetitions of a phase that goes on repeating)\n",
        );
    } else {
        text.push_str("\nleaks: sites whose live memory grows at the end of every repetition\n");
        let mut t = Table::new(&[
            ("growth/rep", Align::Right),
            ("of", Align::Left),
            ("steadiness", Align::Right),
            ("retained", Align::Right),
            ("category", Align::Left),
            ("site", Align::Left),
        ]);
        for l in r.leaks.iter().take(top) {
            let g = &l.growth;
            t.row([
                units::bytes_delta(g.bytes_per_repetition as i128),
                l.phase.clone(),
                units::percent(g.steadiness),
                units::bytes(g.retained_bytes),
                g.category.map_or("", |c| c.label()).to_string(),
                site_cell(&g.site),
            ]);
        }
        text.push_str(&t.render(2));
        if full {
            text.push_str(&full_stacks(
                r.leaks.iter().take(top).map(|l| &l.growth.site),
                4,
            ));
        }
    }
    text
}

/// The phases that repeat, with the trend of their memory at each end, and
/// those that grow with no site growing steadily.
fn repeated_phases(r: &LeaksReport) -> String {
    let mut text = String::new();
    text.push_str("\nrepeated phases: allocated memory at the end of each repetition\n");
    if r.repeated_phases.is_empty() {
        text.push_str("  no phase repeats three times or more\n");
    } else {
        let mut t = Table::new(&[
            ("phase", Align::Left),
            ("reps", Align::Right),
            ("warm-up", Align::Right),
            ("cut short", Align::Right),
            ("growth/rep", Align::Right),
            ("steadiness", Align::Right),
            ("at last end", Align::Right),
            ("trend", Align::Left),
        ]);
        for g in &r.repeated_phases {
            t.row([
                g.phase.clone(),
                units::count(g.repetitions),
                units::count(g.warmup_repetitions),
                units::count(g.cut_short_repetitions.len() as u64),
                match g.trend {
                    Trend::Grows | Trend::Shrinks => {
                        units::bytes_delta(g.bytes_per_repetition as i128)
                    }
                    _ => "-".into(),
                },
                match g.trend {
                    Trend::Grows | Trend::Shrinks => units::percent(g.steadiness),
                    _ => "-".into(),
                },
                units::bytes(g.live_bytes_at_end.last().copied().unwrap_or(0)),
                g.trend.word().to_string(),
            ]);
        }
        text.push_str(&t.render(2));
        text.push_str("  steady: the same at every end; grows, shrinks: by about the same amount each time;\n  varies: neither (batch or sequence sizes that change); cut short: by an out-of-memory error\n");
        for g in &r.repeated_phases {
            if g.trend == Trend::Grows && !r.leaks.iter().any(|l| nested(&l.phase, &g.phase)) {
                text.push_str(&format!(
                    "  {} grows by {} per repetition, but no single site grows steadily\n",
                    g.phase,
                    units::bytes(g.bytes_per_repetition.unsigned_abs())
                ));
            }
        }
    }
    text
}

/// The phase instances that retained the most at their end.
fn retained_by_phase(r: &LeaksReport, top: usize) -> String {
    let mut text = String::new();
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
                    format!("{} ({})", site_label(&s.site.site), units::bytes(s.bytes))
                }),
            ]);
        }
        text.push_str(&t.render(2));
    }
    text
}

/// The memory never freed by the end, by site (less what a gap in the
/// trace leaves in doubt).
fn never_freed(r: &LeaksReport, top: usize, full: bool) -> String {
    let mut text = String::new();
    text.push_str(&format!(
        "\nnever freed by the end: {} in {} blocks\n",
        units::bytes(r.never_freed_bytes),
        units::count(r.never_freed_blocks)
    ));
    if let Some(d) = &r.dropped_events {
        text.push_str(&format!(
            "  {d}; left out: {} in {} blocks live at a gap (their free may have been dropped)\n",
            units::bytes(r.in_doubt_bytes),
            units::count(r.in_doubt_blocks)
        ));
    }
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
                site_cell(&s.site),
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

/// Whether one phase path is the other or holds it.
fn nested(a: &str, b: &str) -> bool {
    let within = |inner: &str, outer: &str| {
        inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    within(a, b) || within(b, a)
}
