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
use crate::sites::SiteDescription;
use crate::units::{self, UnitError};
use serde::{Serialize, Serializer};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

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

/// How two runs are matched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompareOptions {
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
    options: CompareOptions,
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

/// The key two runs' sites are matched by.
pub fn site_key(site: &SiteDescription, full_stacks: bool, ignore_lines: bool) -> String {
    let frames: &[String] = if full_stacks {
        &site.frames
    } else {
        std::slice::from_ref(&site.site)
    };
    frames
        .iter()
        .map(|f| {
            if ignore_lines {
                without_line(f)
            } else {
                f.clone()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `function (file:line)` without its line: `function (file)`; a site
/// named `USER via LIBRARY` loses both lines. A frame of another shape (a
/// native `module+0x1f`) is kept whole.
pub fn without_line(frame: &str) -> String {
    let via = format!("){}", crate::sites::VIA);
    if let Some(at) = frame.find(&via) {
        let (user, library) = (&frame[..=at], &frame[at + via.len()..]);
        return format!(
            "{}{}{}",
            frame_without_line(user),
            crate::sites::VIA,
            frame_without_line(library)
        );
    }
    frame_without_line(frame)
}

fn frame_without_line(frame: &str) -> String {
    if let Some((head, line)) = frame.strip_suffix(')').and_then(|f| f.rsplit_once(':'))
        && !line.is_empty()
        && line.bytes().all(|c| c.is_ascii_digit())
        && head.contains(" (")
    {
        return format!("{head})");
    }
    frame.to_string()
}

#[derive(Clone, Debug, Default)]
struct SiteFigures {
    description: Option<SiteDescription>,
    at_peak: u64,
    retained: u64,
    allocations: u64,
    allocated_bytes: u64,
}

fn site_figures(run: &RunFigures, options: CompareOptions) -> BTreeMap<String, SiteFigures> {
    let mut map: BTreeMap<String, SiteFigures> = BTreeMap::new();
    fn entry<'m>(
        map: &'m mut BTreeMap<String, SiteFigures>,
        site: &SiteDescription,
        options: CompareOptions,
    ) -> &'m mut SiteFigures {
        let key = site_key(site, options.full_stacks, options.ignore_lines);
        let figures = map.entry(key).or_default();
        figures.description.get_or_insert_with(|| site.clone());
        figures
    }
    // Sites that fold to one key add up: saturating, as the sums of a
    // trace with absurd sizes may pass 2^64.
    for s in &run.summary.top_sites_at_peak {
        let f = entry(&mut map, &s.site, options);
        f.at_peak = f.at_peak.saturating_add(s.bytes);
    }
    for s in &run.leaks.never_freed {
        let f = entry(&mut map, &s.site, options);
        f.retained = f.retained.saturating_add(s.bytes);
    }
    for s in &run.sites.sites {
        let f = entry(&mut map, &s.site, options);
        f.allocations += s.allocations;
        f.allocated_bytes = f.allocated_bytes.saturating_add(s.allocated_bytes);
    }
    map
}

fn sites(
    base: &RunFigures,
    new: &RunFigures,
    options: CompareOptions,
    (db, dn): (f64, f64),
) -> Vec<SiteDelta> {
    let b = site_figures(base, options);
    let n = site_figures(new, options);
    let keys: BTreeSet<&String> = b.keys().chain(n.keys()).collect();
    let empty = SiteFigures::default();
    let mut out: Vec<SiteDelta> = keys
        .into_iter()
        .map(|key| {
            let (fb, fn_) = (b.get(key), n.get(key));
            let description = fn_
                .and_then(|f| f.description.clone())
                .or_else(|| fb.and_then(|f| f.description.clone()))
                .unwrap_or_else(|| SiteDescription {
                    site: key.clone(),
                    frames: vec![key.clone()],
                });
            let (x, y) = (fb.unwrap_or(&empty), fn_.unwrap_or(&empty));
            SiteDelta {
                site: description.site,
                frames: description.frames,
                key: key.clone(),
                presence: Presence::of(fb.is_some(), fn_.is_some()),
                at_peak: Change::of_u64(x.at_peak, y.at_peak),
                retained: Change::of_u64(x.retained, y.retained),
                allocations: Change::of(x.allocations as f64 / db, y.allocations as f64 / dn),
                allocated_bytes: Change::of(
                    x.allocated_bytes as f64 / db,
                    y.allocated_bytes as f64 / dn,
                ),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.rank_delta()
            .abs()
            .total_cmp(&a.rank_delta().abs())
            .then_with(|| {
                b.allocated_bytes
                    .delta
                    .abs()
                    .total_cmp(&a.allocated_bytes.delta.abs())
            })
            .then_with(|| a.site.cmp(&b.site))
    });
    out
}

fn phases(base: &RunFigures, new: &RunFigures, per_iteration: bool) -> Vec<PhaseDelta> {
    let totals = |r: &RunFigures| {
        r.phases
            .phases
            .iter()
            .map(|p| (p.phase.clone(), p.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    let growth = |r: &RunFigures| {
        r.leaks
            .repeated_phases
            .iter()
            .map(|g| {
                let leaked = g.leaking_sites.iter().map(|s| s.bytes_per_repetition).sum();
                (g.phase.clone(), leaked)
            })
            .collect::<BTreeMap<_, i64>>()
    };
    let (tb, tn) = (totals(base), totals(new));
    let (gb, gn) = (growth(base), growth(new));
    let keys: BTreeSet<&String> = tb.keys().chain(tn.keys()).collect();
    let mut out: Vec<PhaseDelta> = keys
        .into_iter()
        .map(|key| {
            let (x, y) = (tb.get(key), tn.get(key));
            let field = |p: Option<&super::phase_totals::PhaseTotal>,
                         f: fn(&super::phase_totals::PhaseTotal) -> u64| {
                p.map_or(0.0, |p| f(p) as f64)
            };
            let retained = |p: Option<&super::phase_totals::PhaseTotal>| {
                p.map_or(0.0, |p| {
                    if per_iteration {
                        p.retained_bytes as f64 / p.instances.max(1) as f64
                    } else {
                        p.retained_bytes as f64
                    }
                })
            };
            let g = |m: &BTreeMap<String, i64>| m.get(key).copied().unwrap_or(0) as f64;
            PhaseDelta {
                phase: key.clone(),
                presence: Presence::of(x.is_some(), y.is_some()),
                repetitions: Change::of(field(x, |p| p.instances), field(y, |p| p.instances)),
                peak: Change::of(
                    field(x, |p| p.peak_allocated_bytes),
                    field(y, |p| p.peak_allocated_bytes),
                ),
                retained: Change::of(retained(x), retained(y)),
                leak_per_repetition: Change::of(g(&gb), g(&gn)),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.rank_delta()
            .total_cmp(&a.rank_delta())
            .then_with(|| a.phase.cmp(&b.phase))
    });
    out
}

/// A figure `--fail-on` can check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateMetric {
    /// Peak allocated bytes.
    PeakAllocated,
    /// Peak reserved bytes.
    PeakReserved,
    /// Peak requested bytes.
    PeakRequested,
    /// Cached free bytes at the allocated peak.
    CachedFree,
    /// External fragmentation at the allocated peak.
    Fragmentation,
    /// Leak growth per repetition of the worst phase.
    Leak,
    /// Out-of-memory events.
    Ooms,
    /// Duration (per iteration with `--per-iteration`).
    Duration,
    /// Events (per iteration with `--per-iteration`).
    Events,
}

impl GateMetric {
    /// Every metric, in the order the documentation lists them.
    pub const ALL: [GateMetric; 9] = [
        GateMetric::PeakAllocated,
        GateMetric::PeakReserved,
        GateMetric::PeakRequested,
        GateMetric::CachedFree,
        GateMetric::Fragmentation,
        GateMetric::Leak,
        GateMetric::Ooms,
        GateMetric::Duration,
        GateMetric::Events,
    ];

    /// Its name in thresholds, and its key among the comparison's headline
    /// figures (which are made from [`GateMetric::ALL`]).
    pub fn name(self) -> &'static str {
        match self {
            GateMetric::PeakAllocated => "peak_allocated",
            GateMetric::PeakReserved => "peak_reserved",
            GateMetric::PeakRequested => "peak_requested",
            GateMetric::CachedFree => "cached_free",
            GateMetric::Fragmentation => "fragmentation",
            GateMetric::Leak => "leak",
            GateMetric::Ooms => "ooms",
            GateMetric::Duration => "duration",
            GateMetric::Events => "events",
        }
    }

    /// Its label in tables: `peak allocated`, `duration per iteration`.
    pub fn label(self, per_iteration: bool) -> String {
        let suffix = if per_iteration { " per iteration" } else { "" };
        match self {
            GateMetric::PeakAllocated => "peak allocated".into(),
            GateMetric::PeakReserved => "peak reserved".into(),
            GateMetric::PeakRequested => "peak requested".into(),
            GateMetric::CachedFree => "cached free at the peak".into(),
            GateMetric::Fragmentation => "external fragmentation at the peak".into(),
            GateMetric::Leak => "leak growth per repetition".into(),
            GateMetric::Ooms => "out-of-memory events".into(),
            GateMetric::Duration => format!("duration{suffix}"),
            GateMetric::Events => format!("events{suffix}"),
        }
    }

    /// Its change from `base` to `new`; cumulative figures are divided by
    /// each run's `divisors` (their iterations, or 1).
    pub fn change(self, base: &RunFigures, new: &RunFigures, (db, dn): (f64, f64)) -> Change {
        let (b, n) = (&base.summary, &new.summary);
        let per = |base: u64, new: u64| Change::of(base as f64 / db, new as f64 / dn);
        match self {
            GateMetric::PeakAllocated => {
                Change::of_u64(b.peak_allocated_bytes, n.peak_allocated_bytes)
            }
            GateMetric::PeakReserved => {
                Change::of_u64(b.peak_reserved_bytes, n.peak_reserved_bytes)
            }
            GateMetric::PeakRequested => {
                Change::of_u64(b.peak_requested_bytes, n.peak_requested_bytes)
            }
            GateMetric::CachedFree => {
                Change::of_u64(b.at_peak.cached_free_bytes, n.at_peak.cached_free_bytes)
            }
            GateMetric::Fragmentation => Change::of(
                b.at_peak.external_fragmentation.unwrap_or(0.0),
                n.at_peak.external_fragmentation.unwrap_or(0.0),
            ),
            GateMetric::Leak => Change::of(
                base.leak_per_repetition() as f64,
                new.leak_per_repetition() as f64,
            ),
            GateMetric::Ooms => Change::of_u64(b.oom_count, n.oom_count),
            GateMetric::Duration => per(b.duration_ns, n.duration_ns),
            GateMetric::Events => per(b.events, n.events),
        }
    }

    /// What its values count.
    pub fn unit(self) -> Unit {
        match self {
            GateMetric::PeakAllocated
            | GateMetric::PeakReserved
            | GateMetric::PeakRequested
            | GateMetric::CachedFree
            | GateMetric::Leak => Unit::Bytes,
            GateMetric::Fragmentation => Unit::Ratio,
            GateMetric::Ooms | GateMetric::Events => Unit::Count,
            GateMetric::Duration => Unit::Nanoseconds,
        }
    }
}

/// How much change a threshold allows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// A change relative to the baseline, in percent (signed).
    Percent(f64),
    /// A change in the metric's unit: bytes, a count, nanoseconds, or a
    /// fraction for fragmentation (signed).
    Amount(f64),
}

/// One `--fail-on` threshold: `metric:+5%`, `metric:+100MiB`, `metric:-1`.
///
/// A `+` threshold fails when the metric grew by at least that much; a
/// `-` threshold when it fell by at least that much (`+0` fails on any
/// increase).
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    /// The metric checked.
    pub metric: GateMetric,
    /// The change that fails.
    pub limit: Limit,
    /// Whether the limit is a decrease (`-`).
    pub decrease: bool,
    /// The threshold as written.
    pub text: String,
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A threshold that cannot be read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("bad threshold '{text}': {problem}")]
pub struct ThresholdError {
    /// The threshold as written.
    pub text: String,
    /// What is wrong with it.
    pub problem: ThresholdProblem,
}

/// What is wrong with a threshold.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ThresholdProblem {
    /// Not `METRIC:CHANGE`.
    #[error("write METRIC:CHANGE, e.g. peak_allocated:+5%")]
    Form,
    /// A metric no [`GateMetric`] names.
    #[error("unknown metric '{0}' (one of {names})", names = GateMetric::ALL.map(GateMetric::name).join(", "))]
    UnknownMetric(String),
    /// A change without `+` or `-`.
    #[error("the change '{0}' needs a sign: +{0} catches an increase, -{0} a decrease")]
    NoSign(String),
    /// A percentage or count that is not a non-negative number.
    #[error("'{0}' is not a number")]
    NotANumber(String),
    /// An amount that is not a size or a time.
    #[error(transparent)]
    Amount(#[from] UnitError),
    /// A fragmentation amount without `pp`.
    #[error("fragmentation takes percentage points ('{0}pp') or a percentage")]
    PercentagePoints(String),
    /// An empty item in a list.
    #[error("empty threshold")]
    Empty,
}

impl FromStr for Threshold {
    type Err = ThresholdError;

    fn from_str(text: &str) -> Result<Self, ThresholdError> {
        let text = text.trim();
        let bad = |problem: ThresholdProblem| ThresholdError {
            text: text.to_string(),
            problem,
        };
        let (name, value) = text
            .split_once(':')
            .ok_or_else(|| bad(ThresholdProblem::Form))?;
        let name = name.trim();
        let metric = GateMetric::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| bad(ThresholdProblem::UnknownMetric(name.to_string())))?;
        let value = value.trim();
        let (decrease, magnitude) = match value.as_bytes().first() {
            Some(b'+') => (false, &value[1..]),
            Some(b'-') => (true, &value[1..]),
            _ => return Err(bad(ThresholdProblem::NoSign(value.to_string()))),
        };
        let magnitude = magnitude.trim();
        let limit = if let Some(number) = magnitude.strip_suffix('%') {
            Limit::Percent(parse_number(number).map_err(bad)?)
        } else {
            Limit::Amount(parse_amount(metric.unit(), magnitude).map_err(bad)?)
        };
        let signed = |v: f64| if decrease { -v } else { v };
        Ok(Threshold {
            metric,
            limit: match limit {
                Limit::Percent(p) => Limit::Percent(signed(p)),
                Limit::Amount(a) => Limit::Amount(signed(a)),
            },
            decrease,
            text: text.to_string(),
        })
    }
}

fn parse_number(text: &str) -> Result<f64, ThresholdProblem> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(ThresholdProblem::NotANumber(text.trim().to_string())),
    }
}

fn parse_amount(unit: Unit, text: &str) -> Result<f64, ThresholdProblem> {
    match unit {
        Unit::Bytes => Ok(units::parse_bytes(text)? as f64),
        Unit::Count => parse_number(text),
        Unit::Nanoseconds => Ok(units::parse_duration_ns(text)? as f64),
        Unit::Ratio => text
            .strip_suffix("pp")
            .ok_or_else(|| ThresholdProblem::PercentagePoints(text.to_string()))
            .and_then(parse_number)
            .map(|pp| pp / 100.0),
    }
}

/// Parses a comma-separated list of thresholds.
pub fn parse_thresholds(list: &str) -> Result<Vec<Threshold>, ThresholdError> {
    let parts: Vec<&str> = list.split(',').map(str::trim).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(ThresholdError {
            text: list.to_string(),
            problem: ThresholdProblem::Empty,
        });
    }
    parts.into_iter().map(str::parse).collect()
}

/// One threshold checked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GateCheck {
    /// The threshold as written.
    pub threshold: String,
    /// The metric.
    pub metric: GateMetric,
    /// Whether it failed.
    pub failed: bool,
    /// The metric's change.
    pub change: Change,
}

/// The result of `--fail-on`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GateResult {
    /// Whether every threshold held.
    pub passed: bool,
    /// The thresholds that failed, as written.
    pub failed: Vec<String>,
    /// Every threshold, in the order given.
    pub checks: Vec<GateCheck>,
}

/// Checks a comparison against thresholds: an error, never a pass, when a
/// threshold's metric is missing from the comparison.
pub fn gate(comparison: &Comparison, thresholds: &[Threshold]) -> Result<GateResult, CompareError> {
    // Percentages are computed in floating point: 5% of a round number may
    // come out a hair below 5.
    const EPSILON: f64 = 1e-9;
    let checks: Vec<GateCheck> = thresholds
        .iter()
        .map(|t| {
            let change = comparison
                .metric(t.metric.name())
                .ok_or(CompareError::MissingMetric(t.metric.name()))?
                .change;
            let (observed, limit) = match t.limit {
                // An increase from 0 is infinite.
                Limit::Percent(p) => (
                    change
                        .percent
                        .unwrap_or(change.delta.signum() * f64::INFINITY),
                    p,
                ),
                Limit::Amount(a) => (change.delta, a),
            };
            let failed = if t.decrease {
                observed < 0.0 && observed <= limit + limit.abs() * EPSILON
            } else {
                observed > 0.0 && observed >= limit - limit.abs() * EPSILON
            };
            Ok(GateCheck {
                threshold: t.text.clone(),
                metric: t.metric,
                failed,
                change,
            })
        })
        .collect::<Result<_, CompareError>>()?;
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| c.failed)
        .map(|c| c.threshold.clone())
        .collect();
    Ok(GateResult {
        passed: failed.is_empty(),
        failed,
        checks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::leaks::{PhaseGrowth, SiteBytes, SiteGrowth, SiteLeak, Trend};
    use crate::analysis::phase_totals::PhaseTotal;
    use crate::analysis::site_totals::SiteTotal;
    use crate::analysis::summary::SiteShare;

    fn site(name: &str) -> SiteDescription {
        SiteDescription {
            site: name.into(),
            frames: vec![name.into(), "main (train.py:1)".into()],
        }
    }

    fn run(name: &str, peak: u64, leak: i64, sites: &[(&str, u64, u64)]) -> RunFigures {
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
        let c = compare(&a, &a, CompareOptions::default()).unwrap();
        assert!(c.headline.iter().all(|m| m.change.is_zero()));
        assert!(c.headline.iter().all(|m| m.change.percent == Some(0.0)));
        assert!(c.sites.iter().all(|s| !s.changed()));
        assert!(c.phases.iter().all(|p| !p.changed()));
        let thresholds = parse_thresholds("peak_allocated:+0%,leak:+0,ooms:+0").unwrap();
        assert!(gate(&c, &thresholds).unwrap().passed);
    }

    #[test]
    fn sites_rank_by_change_and_are_marked_new_or_gone() {
        let a = run(
            "a",
            1000,
            0,
            &[("f (a.py:1)", 600, 0), ("g (a.py:2)", 400, 0)],
        );
        let b = run(
            "b",
            1300,
            100,
            &[("f (a.py:1)", 600, 0), ("leak (a.py:9)", 700, 1000)],
        );
        let c = compare(&a, &b, CompareOptions::default()).unwrap();
        let names: Vec<(&str, Presence)> = c
            .sites
            .iter()
            .map(|s| (s.site.as_str(), s.presence))
            .collect();
        assert_eq!(
            names,
            [
                ("leak (a.py:9)", Presence::New),
                ("g (a.py:2)", Presence::Gone),
                ("f (a.py:1)", Presence::Both)
            ]
        );
        assert_eq!(c.sites[0].retained.delta, 1000.0);
        assert_eq!(c.sites[0].rank_delta(), 1000.0);
        let peak = c.metric("peak_allocated").unwrap().change;
        assert_eq!((peak.delta, peak.percent), (300.0, Some(30.0)));
        let leak = c.metric("leak").unwrap().change;
        assert_eq!((leak.delta, leak.percent), (100.0, None));
    }

    #[test]
    fn ignoring_lines_matches_moved_code() {
        let a = run("a", 1000, 0, &[("f (a.py:1)", 600, 0)]);
        let b = run("b", 1000, 0, &[("f (a.py:5)", 600, 0)]);
        let strict = compare(&a, &b, CompareOptions::default()).unwrap();
        assert_eq!(strict.sites.len(), 2);
        let loose = compare(
            &a,
            &b,
            CompareOptions {
                ignore_lines: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(loose.sites.len(), 1);
        assert!(!loose.sites[0].changed());
        assert_eq!(loose.sites[0].site, "f (a.py:5)");
        assert_eq!(without_line("f (a.py:12)"), "f (a.py)");
        assert_eq!(
            without_line("step (t.py:9) via forward (m.py:41)"),
            "step (t.py) via forward (m.py)"
        );
        assert_eq!(without_line("libtorch.so+0x1f"), "libtorch.so+0x1f");
        assert_eq!(
            without_line("operator() (x.cpp:7)"),
            "operator() (x.cpp)",
            "only the location's colon counts"
        );
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
            CompareOptions {
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
                CompareOptions {
                    per_iteration: true,
                    ..Default::default()
                }
            ),
            Err(CompareError::NoIterations(name)) if name == "a"
        ));
    }

    #[test]
    fn thresholds_parse_and_check() {
        let a = run("a", 1000, 0, &[]);
        let b = run("b", 1050, 1 << 20, &[]);
        let c = compare(&a, &b, CompareOptions::default()).unwrap();
        let check = |spec: &str| gate(&c, &parse_thresholds(spec).unwrap()).unwrap();
        assert!(check("peak_allocated:+5%").failed == ["peak_allocated:+5%"]);
        assert!(check("peak_allocated:+5.1%").passed);
        assert!(check("peak_allocated:+50B").failed.len() == 1);
        assert!(
            parse_thresholds("peak_allocated:+50").is_err(),
            "a size needs its unit"
        );
        assert!(check("leak:+1MiB").failed == ["leak:+1MiB"]);
        assert!(check("leak:+2MiB").passed);
        assert!(check("leak:+100%").failed.len() == 1, "any growth from 0");
        assert!(check("peak_allocated:-1%").passed, "it did not fall");
        assert!(check("ooms:+1, duration:+1s").passed);
        let r = check("leak:+1MiB,peak_allocated:+1%,ooms:+0");
        assert_eq!(r.failed, ["leak:+1MiB", "peak_allocated:+1%"]);
        assert!(!r.passed);

        let err = |spec: &str| parse_thresholds(spec).unwrap_err().to_string();
        assert!(err("peak:+5%").contains("unknown metric 'peak'"));
        assert!(err("leak:1MiB").contains("needs a sign"));
        assert!(err("leak+1MiB").contains("METRIC:CHANGE"));
        assert!(err("leak:+1 parsec").contains("parsec"));
        assert!(err("peak_allocated:+x%").contains("'x'"));
        assert!(err("leak:+1MiB,").contains("empty"));
        assert!(err("fragmentation:+5").contains("pp"));
        assert_eq!(
            parse_thresholds("fragmentation:+5pp").unwrap()[0].limit,
            Limit::Amount(0.05)
        );
        assert_eq!(
            parse_thresholds("duration:-2s").unwrap()[0].limit,
            Limit::Amount(-2e9)
        );
    }

    #[test]
    fn every_gate_metric_is_a_headline_figure() {
        let a = run("a", 1000, 0, &[]);
        let c = compare(&a, &a, CompareOptions::default()).unwrap();
        for metric in GateMetric::ALL {
            assert!(c.metric(metric.name()).is_some(), "{}", metric.name());
        }
        let mut drifted = c.clone();
        drifted.headline.retain(|m| m.metric != "leak");
        let leak = parse_thresholds("leak:+1MiB").unwrap();
        assert_eq!(
            gate(&drifted, &leak),
            Err(CompareError::MissingMetric("leak"))
        );
    }

    #[test]
    fn json_numbers_are_integers_when_whole() {
        let json = serde_json::to_string(&Change::of(1.0, 2.5)).unwrap();
        assert_eq!(json, r#"{"base":1,"new":2.5,"delta":1.5,"percent":150.0}"#);
    }
}
