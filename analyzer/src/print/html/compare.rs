//! The comparison section of the report.

use super::escape;
use crate::analysis::compare::{Comparison, PhaseDelta, Presence, SiteDelta, Unit};
use crate::print::labels::{format_delta, format_percent, format_value, repetitions};

/// The comparison as an HTML section for the report: the chart inline, the
/// headline figures, and the sites and phases that changed most.
/// `fits`: the plan from the two runs, when they were recorded at different
/// batch sizes (or sequence lengths): its answer leads the section.
pub fn section(
    comparison: &Comparison,
    chart: &str,
    top: usize,
    fits: Option<&crate::command::plan::FitsUpTo>,
) -> String {
    use std::fmt::Write as _;
    let mut html = String::new();
    if let Some(f) = fits {
        let _ = write!(
            html,
            "<p><strong>Fits up to:</strong> {} <span class=\"muted\">(vramtrace plan, from the two runs)</span></p>",
            escape(&f.line)
        );
    }
    let _ = write!(
        html,
        "<p>Baseline <code>{}</code> against this run, <code>{}</code>{}.</p>",
        escape(&comparison.base.name),
        escape(&comparison.new.name),
        if comparison.per_iteration {
            ", per iteration"
        } else {
            ""
        }
    );
    let _ = write!(
        html,
        "<figure>{chart}<figcaption>Above: allocated memory of both runs (solid) and reserved memory (dashed), the peaks marked. Below: the sites whose memory changed most; red grew, green shrank. Hover for exact values.</figcaption></figure>"
    );
    html.push_str("<table><tr><th>figure</th><th class=\"num\">baseline</th><th class=\"num\">this run</th><th class=\"num\">change</th><th class=\"num\">%</th></tr>");
    for m in &comparison.headline {
        let c = &m.change;
        let style =
            if c.delta > 0.0 && m.unit != Unit::Nanoseconds && !m.metric.starts_with("events") {
                " style=\"color: var(--alert)\""
            } else {
                ""
            };
        // Event kinds sit under the event total.
        let indent = if m.metric.starts_with("events.") {
            " style=\"padding-left: 28px\""
        } else {
            ""
        };
        let _ = write!(
            html,
            "<tr><td{indent}>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\"{style}>{}</td><td class=\"num\">{}</td></tr>",
            escape(m.label.trim()),
            format_value(m.unit, c.base),
            format_value(m.unit, c.new),
            format_delta(m.unit, c.delta),
            if m.unit == Unit::Ratio {
                String::new()
            } else {
                format_percent(c)
            }
        );
    }
    html.push_str("</table>");
    let changed: Vec<&SiteDelta> = comparison.sites.iter().filter(|s| s.changed()).collect();
    let _ = write!(
        html,
        "<h3>Sites</h3><p class=\"muted\">{} of {} sites changed; the {} that changed most, by bytes live at the peak (or retained at the end if that moved more).</p>",
        changed.len(),
        comparison.sites.len(),
        changed.len().min(top)
    );
    if !changed.is_empty() {
        html.push_str("<table><tr><th class=\"num\">at peak: change</th><th class=\"num\">%</th><th class=\"num\">retained: change</th><th class=\"num\">allocations: change</th><th>site</th></tr>");
        for s in changed.iter().take(top) {
            let marker = match s.presence {
                Presence::New => "<strong>new</strong> ",
                Presence::Gone => "<strong>gone</strong> ",
                Presence::Both => "",
            };
            let _ = write!(
                html,
                "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{marker}<details><summary><code>{}</code></summary><pre>{}</pre></details></td></tr>",
                format_delta(Unit::Bytes, s.at_peak.delta),
                format_percent(&s.at_peak),
                format_delta(Unit::Bytes, s.retained.delta),
                format_delta(Unit::Count, s.allocations.delta),
                escape(&s.site),
                escape(&s.frames.join("\n"))
            );
        }
        html.push_str("</table>");
    }
    let phases: Vec<&PhaseDelta> = comparison.phases.iter().filter(|p| p.changed()).collect();
    if !phases.is_empty() {
        let _ = write!(
            html,
            "<h3>Phases</h3><table><tr><th class=\"num\">peak: change</th><th class=\"num\">%</th><th class=\"num\">retained: change</th><th class=\"num\">leak per repetition: change</th><th class=\"num\">repetitions</th><th>phase</th></tr>"
        );
        for p in phases.iter().take(top) {
            let _ = write!(
                html,
                "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td><code>{}</code>{}</td></tr>",
                format_delta(Unit::Bytes, p.peak.delta),
                format_percent(&p.peak),
                format_delta(Unit::Bytes, p.retained.delta),
                format_delta(Unit::Bytes, p.leak_per_repetition.delta),
                repetitions(&p.repetitions),
                escape(&p.phase),
                match p.presence {
                    Presence::New => " (new)",
                    Presence::Gone => " (gone)",
                    Presence::Both => "",
                }
            );
        }
        html.push_str("</table>");
    }
    html
}
