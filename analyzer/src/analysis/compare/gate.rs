//! The gate: thresholds on a comparison's headline figures (`metric:+5%`,
//! `metric:+100MiB`), parsed, and checked to pass or fail a change.

use super::{Change, CompareError, Comparison, RunFigures, Unit};
use crate::units::{self, UnitError};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

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
    use super::super::tests::run;
    use super::*;
    use crate::analysis::compare::{MatchOptions, compare};

    #[test]
    fn thresholds_parse_and_check() {
        let a = run("a", 1000, 0, &[]);
        let b = run("b", 1050, 1 << 20, &[]);
        let c = compare(&a, &b, MatchOptions::default()).unwrap();
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
        let c = compare(&a, &a, MatchOptions::default()).unwrap();
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
}
