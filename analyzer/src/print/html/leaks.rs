//! The leaks section: the growth chart of the leaking (or most repeated)
//! phase, the repeated phases and their trends, the sites that leak, and
//! the memory never freed.

use super::{ReportInput, Stack};
use crate::analysis::leaks::Trend;
use crate::units;
use askama::Template;

/// The leaking sites and never-freed sites the tables show at most.
const SHOWN: usize = 10;

/// The section's content.
#[derive(Template)]
#[template(path = "leaks.html", config = "src/print/html/askama.toml")]
pub struct Leaks<'a> {
    /// The growth chart (SVG), when a phase repeats.
    chart: Option<&'a str>,
    /// Whether the chart draws a fitted line (its caption says so only then).
    fitted: bool,
    phases: Vec<Phase>,
    leaks: Vec<Leak>,
    /// Blocks and bytes never freed, when any were.
    never_freed: Option<(String, String)>,
    never_freed_sites: Vec<NeverFreed>,
}

/// A repeated phase and the trend of memory across its repetitions.
struct Phase {
    name: String,
    repetitions: u64,
    /// Growth per repetition and steadiness (`–` unless it grows or shrinks).
    growth: String,
    steadiness: String,
    trend: &'static str,
}

/// A site whose memory grows across the repetitions of a phase.
struct Leak {
    per_repetition: String,
    phase: String,
    steadiness: String,
    retained: String,
    stack: Stack,
}

/// A site holding memory never freed.
struct NeverFreed {
    bytes: String,
    blocks: String,
    stack: Stack,
}

impl<'a> Leaks<'a> {
    /// The section of one report.
    pub fn new(input: &'a ReportInput<'a>) -> Leaks<'a> {
        let leaks = &input.report.leaks;
        Leaks {
            chart: input.charts.leaks.as_deref(),
            fitted: leaks
                .chart_phase()
                .is_some_and(crate::print::svg::leaks::draws_fit),
            phases: leaks
                .repeated_phases
                .iter()
                .map(|p| {
                    let measured = matches!(p.trend, Trend::Grows | Trend::Shrinks);
                    Phase {
                        name: p.phase.clone(),
                        repetitions: p.repetitions,
                        growth: if measured {
                            units::bytes_delta(p.bytes_per_repetition as i128)
                        } else {
                            "–".into()
                        },
                        steadiness: if measured {
                            units::percent(p.steadiness)
                        } else {
                            "–".into()
                        },
                        trend: p.trend.word(),
                    }
                })
                .collect(),
            leaks: leaks
                .leaks
                .iter()
                .take(SHOWN)
                .map(|l| Leak {
                    per_repetition: units::bytes_delta(l.growth.bytes_per_repetition as i128),
                    phase: l.phase.clone(),
                    steadiness: units::percent(l.growth.steadiness),
                    retained: units::bytes(l.growth.retained_bytes),
                    stack: Stack::new(&l.growth.site.site, &l.growth.site.frames),
                })
                .collect(),
            never_freed: (!leaks.never_freed.is_empty()).then(|| {
                (
                    units::count(leaks.never_freed_blocks),
                    units::bytes(leaks.never_freed_bytes),
                )
            }),
            never_freed_sites: leaks
                .never_freed
                .iter()
                .take(SHOWN)
                .map(|b| NeverFreed {
                    bytes: units::bytes(b.bytes),
                    blocks: units::count(b.count),
                    stack: Stack::new(&b.site.site, &b.site.frames),
                })
                .collect(),
        }
    }
}
