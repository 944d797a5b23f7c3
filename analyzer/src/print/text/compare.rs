//! The comparison of two runs as text.

use super::full_stacks;
use crate::analysis::categories::CategoryDelta;
use crate::analysis::compare::{Comparison, GateResult, Presence, RunInfo, Unit};
use crate::command::compare::CompareResult;
use crate::print::labels::{self, format_delta, format_percent, format_value, repetitions};
use crate::print::table::{Align, Table};
use crate::sites::SiteDescription;
use crate::units;

/// One run's line: its role, name, duration and repetitions.
fn run_line(role: &str, run: &RunInfo, c: &Comparison) -> String {
    let duration = c
        .metric("duration")
        .map(|m| {
            if role == "baseline" {
                m.change.base
            } else {
                m.change.new
            }
        })
        .unwrap_or(0.0);
    let iterations = match &run.iterations {
        Some(it) => format!(", {} repetitions of {}", units::count(it.count), it.phase),
        None => String::new(),
    };
    let per = if c.per_iteration {
        " per iteration"
    } else {
        ""
    };
    // Both names padded alike, so the details line up.
    let width = c.base.name.chars().count().max(c.new.name.chars().count());
    format!(
        "{role:<10}{:<width$}  ({}{per}{iterations})\n",
        run.name,
        format_value(Unit::Nanoseconds, duration)
    )
}

/// The comparison and its gate as text, `top` sites and phases; `full`:
/// sites are whole stacks, listed below the table.
pub fn compare(result: &CompareResult, top: usize, full: bool) -> String {
    let (c, gate) = (&result.comparison, &result.gate);
    let mut text = run_line("baseline", &c.base, c);
    text.push_str(&run_line("new", &c.new, c));
    text.push('\n');
    text.push_str(&headline(c));
    text.push_str(&categories(c));
    text.push_str(&sites(c, top, full));
    text.push_str(&phases(c, top));
    text.push_str(&gate_checks(c, gate));
    text
}

/// The headline figures of both runs, as a table.
fn headline(c: &Comparison) -> String {
    let mut t = Table::new(&[
        ("", Align::Left),
        ("baseline", Align::Right),
        ("new", Align::Right),
        ("change", Align::Right),
        ("%", Align::Right),
    ]);
    for m in &c.headline {
        let ch = &m.change;
        t.row([
            m.label.clone(),
            format_value(m.unit, ch.base),
            format_value(m.unit, ch.new),
            format_delta(m.unit, ch.delta),
            if m.unit == Unit::Ratio {
                String::new()
            } else {
                format_percent(ch)
            },
        ]);
    }
    t.render(0)
}

/// The sites that changed, largest change first, at most `top` (`full`:
/// their whole stacks below the table).
fn sites(c: &Comparison, top: usize, full: bool) -> String {
    let mut text = String::new();
    let changed: Vec<_> = c.sites.iter().filter(|s| s.changed()).collect();
    let matched_by = match (c.ignore_lines, full) {
        (false, false) => "function, file and line",
        (true, false) => "function and file",
        (false, true) => "whole stack",
        (true, true) => "whole stack without lines",
    };
    let across = c
        .sites
        .iter()
        .filter(|s| s.matched_by_path_suffix.is_some())
        .count();
    let across = if across > 0 {
        format!(
            "; {} matched across folders by the end of their paths",
            units::count(across as u64)
        )
    } else {
        String::new()
    };
    text.push_str(&format!(
        "\nsites (matched by {matched_by}{across}): {} of {} changed{}\n",
        units::count(changed.len() as u64),
        units::count(c.sites.len() as u64),
        if changed.is_empty() {
            ""
        } else {
            ", largest change at the peak or at the end first"
        }
    ));
    if !changed.is_empty() {
        let per = if c.per_iteration { "/iter" } else { "" };
        let allocs = format!("allocs{per}");
        let allocated = format!("allocated{per}");
        let mut t = Table::new(&[
            ("at peak", Align::Right),
            ("change", Align::Right),
            ("%", Align::Right),
            ("retained", Align::Right),
            (allocs.as_str(), Align::Right),
            (allocated.as_str(), Align::Right),
            ("site", Align::Left),
        ]);
        for s in changed.iter().take(top) {
            let marker = match s.presence {
                Presence::New => "[new] ",
                Presence::Gone => "[gone] ",
                Presence::Both => "",
            };
            t.row([
                format_value(Unit::Bytes, s.at_peak.new),
                format_delta(Unit::Bytes, s.at_peak.delta),
                format_percent(&s.at_peak),
                format_delta(Unit::Bytes, s.retained.delta),
                format_delta(Unit::Count, s.allocations.delta),
                format_delta(Unit::Bytes, s.allocated_bytes.delta),
                format!("{marker}{}", labels::site_label(&s.site)),
            ]);
        }
        text.push_str(&t.render(2));
        more(&mut text, changed.len(), top);
        let renamed: Vec<_> = changed
            .iter()
            .take(top)
            .filter_map(|s| Some((s, s.matched_by_path_suffix.as_ref()?)))
            .collect();
        if !renamed.is_empty() {
            text.push_str(
                "  matched across folders (same function and line, the longest common end of the path):\n",
            );
            for (s, base) in renamed {
                text.push_str(&format!(
                    "    {} = {} in the baseline\n",
                    labels::site_label(&s.site),
                    labels::site_label(base)
                ));
            }
        }
        if full {
            text.push_str("\n  stacks:\n");
            let sites: Vec<SiteDescription> = changed
                .iter()
                .take(top)
                .map(|s| SiteDescription {
                    site: s.site.clone(),
                    frames: s.frames.clone(),
                })
                .collect();
            text.push_str(&full_stacks(&sites, 4));
        }
    }
    text
}

/// The phases that changed, at most `top`.
fn phases(c: &Comparison, top: usize) -> String {
    let mut text = String::new();
    let phases: Vec<_> = c.phases.iter().filter(|p| p.changed()).collect();
    if !c.phases.is_empty() {
        text.push_str(&format!(
            "\nphases: {} of {} changed\n",
            units::count(phases.len() as u64),
            units::count(c.phases.len() as u64)
        ));
    }
    if !phases.is_empty() {
        let retained = if c.per_iteration {
            "retained/rep"
        } else {
            "retained"
        };
        let mut t = Table::new(&[
            ("peak", Align::Right),
            ("change", Align::Right),
            ("%", Align::Right),
            (retained, Align::Right),
            ("leak/rep", Align::Right),
            ("repetitions", Align::Right),
            ("phase", Align::Left),
        ]);
        for p in phases.iter().take(top) {
            let marker = match p.presence {
                Presence::New => "[new] ",
                Presence::Gone => "[gone] ",
                Presence::Both => "",
            };
            t.row([
                format_value(Unit::Bytes, p.peak.new),
                format_delta(Unit::Bytes, p.peak.delta),
                format_percent(&p.peak),
                format_delta(Unit::Bytes, p.retained.delta),
                format_delta(Unit::Bytes, p.leak_per_repetition.delta),
                repetitions(&p.repetitions),
                format!("{marker}{}", p.phase),
            ]);
        }
        text.push_str(&t.render(2));
        more(&mut text, phases.len(), top);
    }
    text
}

/// The gate's verdict and each threshold checked (nothing without
/// thresholds).
fn gate_checks(c: &Comparison, gate: &GateResult) -> String {
    let mut text = String::new();
    if !gate.checks.is_empty() {
        let failed = gate.failed.len();
        text.push_str(&format!(
            "\ngate: {} ({} of {} thresholds crossed)\n",
            if gate.passed { "passed" } else { "FAILED" },
            failed,
            gate.checks.len()
        ));
        let mut t = Table::new(&[
            ("", Align::Left),
            ("threshold", Align::Left),
            ("change", Align::Right),
            ("%", Align::Right),
            ("", Align::Left),
        ]);
        for check in &gate.checks {
            let metric = c.metric(check.metric.name());
            let (unit, label) = metric.map_or((Unit::Count, ""), |m| (m.unit, m.label.as_str()));
            let ch = &check.change;
            t.row([
                if check.failed { "FAILED" } else { "ok" }.to_string(),
                check.threshold.clone(),
                format_delta(unit, ch.delta),
                if unit == Unit::Ratio {
                    String::new()
                } else {
                    format_percent(ch)
                },
                format!(
                    "{label}: {} -> {}",
                    format_value(unit, ch.base),
                    format_value(unit, ch.new)
                ),
            ]);
        }
        // The header row of this table says nothing the rows do not.
        for line in t.render(2).lines().skip(1) {
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

/// What the blocks hold in both runs: a line naming what changed at the
/// peak ("activations +1.2 GiB; everything else equal"), and the table.
fn categories(c: &Comparison) -> String {
    let cat = &c.categories;
    let rows: Vec<(&CategoryDelta, &CategoryDelta)> = (cat.at_peak.iter().zip(&cat.at_end))
        .filter(|(p, e)| p.base + p.new + e.base + e.new > 0)
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let changes: Vec<String> = (cat.at_peak.iter())
        .filter(|d| d.change() != 0)
        .map(|d| {
            format!(
                "{} {}",
                d.category.label(),
                format_delta(Unit::Bytes, d.change() as f64)
            )
        })
        .collect();
    let line = match (changes.is_empty(), changes.len() == rows.len()) {
        (true, _) => "every category equal".to_string(),
        (false, true) => changes.join(", "),
        (false, false) => format!("{}; everything else equal", changes.join(", ")),
    };
    let how = if cat.base_source == cat.new_source {
        crate::print::labels::category_source(cat.new_source).to_string()
    } else {
        format!(
            "baseline: {}; new: {}",
            crate::print::labels::category_source(cat.base_source),
            crate::print::labels::category_source(cat.new_source)
        )
    };
    let mut text = format!(
        "
by category at the allocated peak: {line}
  ({how})
"
    );
    let mut t = Table::new(&[
        ("", Align::Left),
        ("peak, baseline", Align::Right),
        ("new", Align::Right),
        ("change", Align::Right),
        ("end, baseline", Align::Right),
        ("new", Align::Right),
        ("change", Align::Right),
    ]);
    for (p, e) in rows {
        t.row([
            p.category.label().to_string(),
            units::bytes(p.base),
            units::bytes(p.new),
            format_delta(Unit::Bytes, p.change() as f64),
            units::bytes(e.base),
            units::bytes(e.new),
            format_delta(Unit::Bytes, e.change() as f64),
        ]);
    }
    text.push_str(&t.render(2));
    text
}

/// Says how many of `changed` rows a table of `top` left out, if any.
fn more(text: &mut String, changed: usize, top: usize) {
    if changed > top {
        text.push_str(&format!(
            "  ... {} more (--top shows more, --json lists all)\n",
            units::count((changed - top) as u64)
        ));
    }
}
