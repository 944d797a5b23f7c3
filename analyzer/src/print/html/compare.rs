//! The comparison section of the report: a baseline run against this one.

use super::Stack;
use crate::analysis::compare::{Comparison as Compared, PhaseDelta, Presence, SiteDelta, Unit};
use crate::command::plan::FitsUpTo;
use crate::print::labels::{format_delta, format_percent, format_value, repetitions};
use askama::Template;

/// The comparison as an HTML section for the report: the chart inline, the
/// headline figures, and the sites and phases that changed most. When the
/// two runs were recorded at different batch sizes (or sequence lengths),
/// the plan from them leads it.
#[derive(Template)]
#[template(path = "compare.html", config = "src/print/html/askama.toml")]
pub struct Comparison<'a> {
    /// What the plan says fits, from the two runs.
    fits: Option<String>,
    /// The baseline's name.
    pub base: &'a str,
    /// This run's name.
    new: &'a str,
    /// Whether the figures are per iteration.
    per_iteration: bool,
    /// The chart of both runs (SVG).
    chart: &'a str,
    headline: Vec<Figure<'a>>,
    /// How many sites changed, of how many.
    sites_changed: usize,
    sites: usize,
    /// The sites that changed most, and the phases.
    sites_shown: Vec<Site>,
    phases_shown: Vec<Phase<'a>>,
}

/// A headline figure of both runs.
struct Figure<'a> {
    label: &'a str,
    base: String,
    new: String,
    change: String,
    /// The change in percent (none for a ratio).
    percent: String,
    /// Whether it grew where growing is worse (said in red).
    worse: bool,
    /// An event kind, set under the event total.
    event_kind: bool,
}

/// A site that changed.
struct Site {
    at_peak: String,
    at_peak_percent: String,
    retained: String,
    allocations: String,
    presence: Presence,
    stack: Stack,
}

/// A phase that changed.
struct Phase<'a> {
    peak: String,
    peak_percent: String,
    retained: String,
    leak_per_repetition: String,
    repetitions: String,
    name: &'a str,
    presence: Presence,
}

impl<'a> Comparison<'a> {
    /// The section for `comparison`, its chart drawn, the `top` sites and
    /// phases that changed most shown.
    pub fn new(
        comparison: &'a Compared,
        chart: &'a str,
        top: usize,
        fits: Option<&'a FitsUpTo>,
    ) -> Comparison<'a> {
        let changed: Vec<&SiteDelta> = comparison.sites.iter().filter(|s| s.changed()).collect();
        let phases: Vec<&PhaseDelta> = comparison.phases.iter().filter(|p| p.changed()).collect();
        Comparison {
            fits: fits.map(crate::print::words::plan::fits_up_to),
            base: &comparison.base.name,
            new: &comparison.new.name,
            per_iteration: comparison.per_iteration,
            chart,
            headline: comparison
                .headline
                .iter()
                .map(|m| {
                    let c = &m.change;
                    Figure {
                        label: m.label.trim(),
                        base: format_value(m.unit, c.base),
                        new: format_value(m.unit, c.new),
                        change: format_delta(m.unit, c.delta),
                        percent: if m.unit == Unit::Ratio {
                            String::new()
                        } else {
                            format_percent(c)
                        },
                        worse: c.delta > 0.0
                            && m.unit != Unit::Nanoseconds
                            && !m.metric.starts_with("events"),
                        event_kind: m.metric.starts_with("events."),
                    }
                })
                .collect(),
            sites_changed: changed.len(),
            sites: comparison.sites.len(),
            sites_shown: changed
                .iter()
                .take(top)
                .map(|s| Site {
                    at_peak: format_delta(Unit::Bytes, s.at_peak.delta),
                    at_peak_percent: format_percent(&s.at_peak),
                    retained: format_delta(Unit::Bytes, s.retained.delta),
                    allocations: format_delta(Unit::Count, s.allocations.delta),
                    presence: s.presence,
                    // Sites are compared by their names as labelled.
                    stack: Stack {
                        site: s.site.clone(),
                        frames: s.frames.join("\n"),
                    },
                })
                .collect(),
            phases_shown: phases
                .iter()
                .take(top)
                .map(|p| Phase {
                    peak: format_delta(Unit::Bytes, p.peak.delta),
                    peak_percent: format_percent(&p.peak),
                    retained: format_delta(Unit::Bytes, p.retained.delta),
                    leak_per_repetition: format_delta(Unit::Bytes, p.leak_per_repetition.delta),
                    repetitions: repetitions(&p.repetitions),
                    name: &p.phase,
                    presence: p.presence,
                })
                .collect(),
        }
    }
}
