//! Regression comparison of two runs: did a change make memory worse, where,
//! and by how much.
//!
//! Each run is measured on its own (one replay pass: summary, leaks, site
//! and phase totals) into [`RunFigures`]; [`compare`] matches the two runs
//! symbolically and [`gate`] checks the result against `--fail-on`
//! thresholds. Nothing is matched by address: addresses differ between any
//! two runs, while a line of user code is the same site in both.
//!
//! - **Sites** are matched by their frames as text, `function (file:line)`:
//!   the telling frame of a folded site, every frame with `--full-stacks`.
//!   With `ignore_lines` the line numbers are dropped, so an edit that moves
//!   code down a few lines does not turn every site below it into a "gone"
//!   and a "new" one; sites that then share a key are summed.
//! - **Phases** are matched by their path with numbers normalized
//!   (`iter#/forward`).
//! - **Per iteration**: runs of different lengths are compared per
//!   repetition of their most repeated phase; cumulative figures (duration,
//!   events, allocations, retained bytes) are divided by it, peaks are not.

use super::categories::{CategoryDelta, CategoryReport};
use super::leaks::LeaksReport;
use super::phase_totals::PhaseTotalsReport;
use super::site_totals::SiteTotalsReport;
use super::summary::SummaryReport;
use crate::replay::categories::CategorySource;
use serde::{Serialize, Serializer};
use std::collections::BTreeSet;

mod gate;
mod matching;

pub use gate::{
    GateCheck, GateMetric, GateResult, Limit, Threshold, ThresholdError, ThresholdProblem, gate,
    parse_thresholds,
};
use matching::{phases, sites};
pub use matching::{site_key, without_line};

/// Everything a comparison needs from one run, measured in one pass.
#[derive(Clone, Debug, Default)]
pub struct RunFigures {
    /// The run's name (its file name), as tables and charts show it.
    pub name: String,
    /// The summary, with every site live at the peak (not only the top ones).
    pub summary: SummaryReport,
    /// The leak analysis.
    pub leaks: LeaksReport,
    /// Allocations per site.
    pub sites: SiteTotalsReport,
    /// Peaks and retention per phase.
    pub phases: PhaseTotalsReport,
}

/// The phase a run repeats most: its iterations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Iterations {
    /// The normalized phase path (`iter#`).
    pub phase: String,
    /// Its repetitions.
    pub count: u64,
}

impl RunFigures {
    /// The run's iterations: the phase with the most repetitions (three at
    /// least), the outermost on a tie, since `iter#` and `iter#/forward`
    /// repeat equally and the loop body is the outer one.
    pub fn iterations(&self) -> Option<Iterations> {
        self.phases
            .phases
            .iter()
            .filter(|p| p.instances >= 3)
            .max_by(|a, b| {
                a.instances
                    .cmp(&b.instances)
                    .then_with(|| depth(&b.phase).cmp(&depth(&a.phase)))
                    .then_with(|| b.phase.cmp(&a.phase))
            })
            .map(|p| Iterations {
                phase: p.phase.clone(),
                count: p.instances,
            })
    }

    /// The leak: the growth per repetition of the fastest-leaking site, 0
    /// without one.
    pub fn leak_per_repetition(&self) -> i64 {
        self.leaks.fastest_leak().max(0)
    }
}

fn depth(path: &str) -> usize {
    path.matches('/').count()
}

/// How two runs are matched (`analysis::compare::matching`): which parts of
/// a site name the match, and whether cumulative figures are per iteration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatchOptions {
    /// Match sites by function and file only.
    pub ignore_lines: bool,
    /// Compare cumulative figures per repetition of each run's iterations.
    pub per_iteration: bool,
    /// Sites are whole stacks (`--full-stacks`): match every frame.
    pub full_stacks: bool,
}

/// What a figure counts, for formatting and for parsing thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Bytes.
    Bytes,
    /// A number of things.
    Count,
    /// Nanoseconds.
    Nanoseconds,
    /// A fraction in [0, 1].
    Ratio,
}

/// One figure in both runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Change {
    /// The baseline's value.
    #[serde(serialize_with = "number")]
    pub base: f64,
    /// The new run's value.
    #[serde(serialize_with = "number")]
    pub new: f64,
    /// `new - base`.
    #[serde(serialize_with = "number")]
    pub delta: f64,
    /// The delta in percent of the baseline; `None` when the baseline is 0
    /// and the new value is not (an infinite increase).
    pub percent: Option<f64>,
}

impl Change {
    /// The change from `base` to `new`.
    pub fn of(base: f64, new: f64) -> Self {
        let delta = new - base;
        let percent = if base != 0.0 {
            Some(delta / base.abs() * 100.0)
        } else if delta == 0.0 {
            Some(0.0)
        } else {
            None
        };
        Change {
            base,
            new,
            delta,
            percent,
        }
    }

    /// The change between two byte or event counts.
    pub fn of_u64(base: u64, new: u64) -> Self {
        Self::of(base as f64, new as f64)
    }

    /// Whether nothing changed.
    pub fn is_zero(&self) -> bool {
        self.delta == 0.0
    }
}

/// Whole numbers go to JSON as integers (byte counts read better as
/// `1048576` than `1048576.0`); fractions (per-iteration figures, ratios)
/// as floats.
fn number<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

/// A headline figure of both runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricDelta {
    /// Its key: `peak_allocated`, `events.alloc`, ... (the names `--fail-on`
    /// uses, for those it accepts).
    pub metric: String,
    /// What it is, for people.
    pub label: String,
    /// What it counts.
    pub unit: Unit,
    /// Its values.
    #[serde(flatten)]
    pub change: Change,
}

/// Whether a site or phase appears in both runs or in one only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Presence {
    /// In both runs.
    Both,
    /// Only in the new run.
    New,
    /// Only in the baseline.
    Gone,
}

impl Presence {
    fn of(in_base: bool, in_new: bool) -> Self {
        match (in_base, in_new) {
            (true, false) => Presence::Gone,
            (false, true) => Presence::New,
            _ => Presence::Both,
        }
    }
}

/// A site in both runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteDelta {
    /// The site's name in the new run (in the baseline for a gone site).
    pub site: String,
    /// Its frames, innermost first.
    pub frames: Vec<String>,
    /// The text the two runs were matched by.
    pub key: String,
    /// Whether it allocated in both runs.
    pub presence: Presence,
    /// Bytes live from the site at the allocated peak.
    pub at_peak: Change,
    /// Bytes live from the site at the end: retained.
    pub retained: Change,
    /// Blocks the site allocated (per iteration with `per_iteration`).
    pub allocations: Change,
    /// Bytes the site allocated (per iteration with `per_iteration`).
    pub allocated_bytes: Change,
    /// The baseline's name for the site when its text differs from the new
    /// run's: the two were matched by function (and line) and the longest
    /// common suffix of their files' paths, as two checkouts of one
    /// program in different folders name the same code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matched_by_path_suffix: Option<String>,
}

impl SiteDelta {
    /// The change the site is ranked by: at the peak or retained at the
    /// end, whichever moved more. Total allocated bytes are not: churn that
    /// is freed at once costs time, not memory.
    pub fn rank_delta(&self) -> f64 {
        if self.retained.delta.abs() > self.at_peak.delta.abs() {
            self.retained.delta
        } else {
            self.at_peak.delta
        }
    }

    /// Whether any figure of the site changed.
    pub fn changed(&self) -> bool {
        self.presence != Presence::Both
            || !(self.at_peak.is_zero()
                && self.retained.is_zero()
                && self.allocations.is_zero()
                && self.allocated_bytes.is_zero())
    }
}

/// A phase in both runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseDelta {
    /// The normalized phase path.
    pub phase: String,
    /// Whether it ran in both runs.
    pub presence: Presence,
    /// Its repetitions (instances).
    pub repetitions: Change,
    /// The most allocated bytes while it was open.
    pub peak: Change,
    /// Bytes its instances left allocated at their ends, summed (the mean
    /// per repetition with `per_iteration`).
    pub retained: Change,
    /// The leak: the growth per repetition of the leaking sites the leak
    /// analysis reports under the phase, 0 without one (a total that varies
    /// is not a leak).
    pub leak_per_repetition: Change,
}

impl PhaseDelta {
    /// Whether any figure of the phase changed.
    pub fn changed(&self) -> bool {
        self.presence != Presence::Both
            || !(self.repetitions.is_zero()
                && self.peak.is_zero()
                && self.retained.is_zero()
                && self.leak_per_repetition.is_zero())
    }

    fn rank_delta(&self) -> f64 {
        self.peak
            .delta
            .abs()
            .max(self.retained.delta.abs())
            .max(self.leak_per_repetition.delta.abs())
    }
}

/// A run as the comparison names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunInfo {
    /// Its name.
    pub name: String,
    /// Its iterations, if a phase repeats.
    pub iterations: Option<Iterations>,
}

/// The comparison of two runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// The baseline.
    pub base: RunInfo,
    /// The new run.
    pub new: RunInfo,
    /// Whether cumulative figures are per iteration.
    pub per_iteration: bool,
    /// Whether sites were matched without line numbers.
    pub ignore_lines: bool,
    /// The headline figures, in a fixed order.
    pub headline: Vec<MetricDelta>,
    /// Every site of either run, the largest change first.
    pub sites: Vec<SiteDelta>,
    /// Every phase of either run, the largest change first.
    pub phases: Vec<PhaseDelta>,
    /// What the blocks hold, in both runs.
    pub categories: CategoryComparison,
}

/// Memory by category in two runs: at the allocated peak and at the end.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CategoryComparison {
    /// Where the baseline's categories come from.
    pub base_source: CategorySource,
    /// Where the new run's come from.
    pub new_source: CategorySource,
    /// Each category at each run's allocated peak.
    pub at_peak: Vec<CategoryDelta>,
    /// Each category at each run's end.
    pub at_end: Vec<CategoryDelta>,
}

impl CategoryComparison {
    fn of(base: &CategoryReport, new: &CategoryReport) -> Self {
        CategoryComparison {
            base_source: base.source,
            new_source: new.source,
            at_peak: new.at_allocated_peak.delta(&base.at_allocated_peak),
            at_end: new.at_end.delta(&base.at_end),
        }
    }
}

impl Comparison {
    /// A headline figure by key.
    pub fn metric(&self, key: &str) -> Option<&MetricDelta> {
        self.headline.iter().find(|m| m.metric == key)
    }
}

/// Why two runs cannot be compared as asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompareError {
    /// A comparison per iteration, with a run that repeats no phase.
    #[error(
        "a comparison per iteration needs a phase repeated three times or more in both runs; {0} has none"
    )]
    NoIterations(String),
    /// A threshold's metric is not among the comparison's figures.
    #[error("the comparison has no figure '{0}' to check")]
    MissingMetric(&'static str),
}

/// Compares two runs.
pub fn compare(
    base: &RunFigures,
    new: &RunFigures,
    options: MatchOptions,
) -> Result<Comparison, CompareError> {
    let (base_iters, new_iters) = (base.iterations(), new.iterations());
    let divisors = if options.per_iteration {
        let b = base_iters
            .as_ref()
            .ok_or_else(|| CompareError::NoIterations(base.name.clone()))?;
        let n = new_iters
            .as_ref()
            .ok_or_else(|| CompareError::NoIterations(new.name.clone()))?;
        (b.count as f64, n.count as f64)
    } else {
        (1.0, 1.0)
    };
    Ok(Comparison {
        base: RunInfo {
            name: base.name.clone(),
            iterations: base_iters,
        },
        new: RunInfo {
            name: new.name.clone(),
            iterations: new_iters,
        },
        per_iteration: options.per_iteration,
        ignore_lines: options.ignore_lines,
        headline: headline(base, new, options.per_iteration, divisors),
        sites: sites(base, new, options, divisors),
        phases: phases(base, new, options.per_iteration),
        categories: CategoryComparison::of(&base.summary.categories, &new.summary.categories),
    })
}

fn headline(
    base: &RunFigures,
    new: &RunFigures,
    per_iteration: bool,
    divisors: (f64, f64),
) -> Vec<MetricDelta> {
    let mut out: Vec<MetricDelta> = GateMetric::ALL
        .into_iter()
        .map(|metric| MetricDelta {
            metric: metric.name().to_string(),
            label: metric.label(per_iteration),
            unit: metric.unit(),
            change: metric.change(base, new, divisors),
        })
        .collect();
    let (b, n) = (&base.summary, &new.summary);
    let (db, dn) = divisors;
    let kinds: BTreeSet<&String> = b.counts.keys().chain(n.counts.keys()).collect();
    for kind in kinds {
        let count = |r: &SummaryReport| r.counts.get(kind).copied().unwrap_or(0);
        out.push(MetricDelta {
            metric: format!("events.{kind}"),
            label: format!("  {kind}"),
            unit: Unit::Count,
            change: Change::of(count(b) as f64 / db, count(n) as f64 / dn),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::leaks::{PhaseGrowth, SiteBytes, SiteGrowth, SiteLeak, Trend};
    use crate::analysis::phase_totals::PhaseTotal;
    use crate::analysis::site_totals::SiteTotal;
    use crate::analysis::summary::SiteShare;
    use crate::sites::SiteDescription;

    fn site(name: &str) -> SiteDescription {
        SiteDescription {
            site: name.into(),
            frames: vec![name.into(), "main (train.py:1)".into()],
        }
    }

    pub(super) fn run(name: &str, peak: u64, leak: i64, sites: &[(&str, u64, u64)]) -> RunFigures {
        let mut r = RunFigures {
            name: name.into(),
            ..Default::default()
        };
        r.summary.peak_allocated_bytes = peak;
        r.summary.events = 100;
        r.summary.counts.insert("alloc".into(), 50);
        for &(s, at_peak, retained) in sites {
            r.summary.top_sites_at_peak.push(SiteShare {
                site: site(s),
                bytes: at_peak,
                count: 1,
                share: 0.0,
                category: None,
            });
            if retained > 0 {
                r.leaks.never_freed.push(SiteBytes {
                    site: site(s),
                    bytes: retained,
                    count: 1,
                });
            }
            r.sites.sites.push(SiteTotal {
                site: site(s),
                allocations: 10,
                allocated_bytes: 10 * at_peak,
            });
        }
        r.phases.phases.push(PhaseTotal {
            phase: "iter#".into(),
            instances: 10,
            peak_allocated_bytes: peak,
            retained_bytes: leak.max(0) as u64 * 10,
            max_retained_bytes: leak.max(0) as u64,
        });
        let leaking = SiteGrowth {
            site: site("leak (a.py:9)"),
            bytes_per_repetition: leak,
            steadiness: 1.0,
            repetitions: 10,
            retained_bytes: leak.max(0) as u64 * 10,
            category: None,
        };
        let growth = PhaseGrowth {
            phase: "iter#".into(),
            repetitions: 10,
            warmup_repetitions: 0,
            cut_short_repetitions: vec![],
            bytes_per_repetition: leak,
            steadiness: 1.0,
            trend: if leak > 0 {
                Trend::Grows
            } else {
                Trend::Steady
            },
            sampled_repetitions: vec![],
            live_bytes_at_end: vec![],
            end_ns: vec![],
            leaking_sites: if leak > 0 {
                vec![leaking.clone()]
            } else {
                vec![]
            },
        };
        r.leaks.repeated_phases.push(growth);
        if leak > 0 {
            r.leaks.leaks.push(SiteLeak {
                phase: "iter#".into(),
                growth: leaking,
            });
        }
        r
    }

    #[test]
    fn a_run_against_itself_changes_nothing() {
        let a = run(
            "a",
            1000,
            0,
            &[("f (a.py:1)", 600, 0), ("g (a.py:2)", 400, 0)],
        );
        let c = compare(&a, &a, MatchOptions::default()).unwrap();
        assert!(c.headline.iter().all(|m| m.change.is_zero()));
        assert!(c.headline.iter().all(|m| m.change.percent == Some(0.0)));
        assert!(c.sites.iter().all(|s| !s.changed()));
        assert!(c.phases.iter().all(|p| !p.changed()));
        let thresholds = parse_thresholds("peak_allocated:+0%,leak:+0,ooms:+0").unwrap();
        assert!(gate(&c, &thresholds).unwrap().passed);
    }

    #[test]
    fn per_iteration_divides_cumulative_figures() {
        let a = run("a", 1000, 0, &[("f (a.py:1)", 600, 0)]);
        let mut b = run("b", 1000, 0, &[("f (a.py:1)", 600, 0)]);
        b.phases.phases[0].instances = 20;
        b.summary.events = 200;
        b.sites.sites[0].allocations = 20;
        let c = compare(
            &a,
            &b,
            MatchOptions {
                per_iteration: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(c.metric("events").unwrap().change.is_zero());
        assert!(c.sites[0].allocations.is_zero());
        assert_eq!(
            c.metric("events.alloc").unwrap().change.percent,
            Some(-50.0)
        );
        let mut none = a.clone();
        none.phases.phases.clear();
        assert!(matches!(
            compare(
                &none,
                &b,
                MatchOptions {
                    per_iteration: true,
                    ..Default::default()
                }
            ),
            Err(CompareError::NoIterations(name)) if name == "a"
        ));
    }

    #[test]
    fn json_numbers_are_integers_when_whole() {
        let json = serde_json::to_string(&Change::of(1.0, 2.5)).unwrap();
        assert_eq!(json, r#"{"base":1,"new":2.5,"delta":1.5,"percent":150.0}"#);
    }
}
