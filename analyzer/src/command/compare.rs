//! `compare`: did a change make memory worse, where, and by how much. Both
//! runs are replayed at once (one thread each, on top of the decoding each
//! pass spreads over the cores), then matched by
//! [`analysis::compare`](crate::analysis::compare).

use super::{Replay, ReplayOptions, Warning, file_name};
use crate::Error;
use crate::analysis::compare::{
    CompareOptions, Comparison, GateResult, RunFigures, Threshold, compare as match_runs, gate,
};
use crate::analysis::leaks::Leaks;
use crate::analysis::phase_totals::PhaseTotals;
use crate::analysis::site_totals::SiteTotals;
use crate::analysis::summary::Summary;
use crate::analysis::timeline::{GroupBy, Timeline, TimelineAnalysis, TimelineOptions};
use crate::input::Input;
use crate::progress::Progress;
use serde::Serialize;
use std::path::PathBuf;

/// What `compare` computes.
#[derive(Clone, Debug, Default)]
pub struct CompareCommandOptions {
    /// The window (in both runs) and site folding.
    pub replay: ReplayOptions,
    /// How sites and figures are matched.
    pub matching: CompareOptions,
    /// The thresholds of the gate (none: the gate passes).
    pub thresholds: Vec<Threshold>,
}

/// The comparison of two runs and its gate.
#[derive(Clone, Debug, Serialize)]
pub struct CompareResult {
    /// The comparison.
    #[serde(flatten)]
    pub comparison: Comparison,
    /// The thresholds checked.
    pub gate: GateResult,
    /// The baseline's memory over time, for the chart.
    #[serde(skip)]
    pub base_timeline: Timeline,
    /// The new run's memory over time, for the chart.
    #[serde(skip)]
    pub new_timeline: Timeline,
    /// What each run's pass found worth a warning, with its path.
    #[serde(skip)]
    pub warnings: Vec<(PathBuf, Warning)>,
}

/// A run measured for a comparison, with its timeline for the chart.
#[derive(Clone, Debug)]
pub struct Measured {
    /// The figures compared.
    pub figures: RunFigures,
    /// Allocated and reserved memory over time.
    pub timeline: Timeline,
    /// What the pass found worth a warning.
    pub warnings: Vec<Warning>,
}

/// Replays one run with everything a comparison needs, in one pass.
pub fn measure(
    input: &Input,
    options: &ReplayOptions,
    progress: &dyn Progress,
) -> Result<Measured, Error> {
    let replay = Replay::new(input, options, progress)?;
    // Every site at the peak, not the top few: a site can only be matched
    // if both runs list it.
    let mut summary = Summary::new(usize::MAX);
    let mut leaks = Leaks::new();
    let mut sites = SiteTotals::new();
    let mut phases = PhaseTotals::new();
    let mut timeline = TimelineAnalysis::new(TimelineOptions {
        group_by: GroupBy::None,
        ..TimelineOptions::default()
    });
    let pass = replay.run(&mut [
        &mut summary,
        &mut leaks,
        &mut sites,
        &mut phases,
        &mut timeline,
    ])?;
    Ok(Measured {
        figures: RunFigures {
            name: file_name(input.path()),
            summary: replay.result(summary.into_report())?,
            leaks: replay.result(leaks.into_report())?,
            sites: replay.result(sites.into_report())?,
            phases: replay.result(phases.into_report())?,
        },
        timeline: replay.result(timeline.into_report())?,
        warnings: pass.warnings,
    })
}

/// Compares two runs, each replayed once, side by side.
pub fn compare(
    base: &Input,
    new: &Input,
    options: &CompareCommandOptions,
    progress: &dyn Progress,
) -> Result<CompareResult, Error> {
    let (b, n) = rayon::join(
        || measure(base, &options.replay, progress),
        || measure(new, &options.replay, progress),
    );
    let (b, n) = (b?, n?);
    let comparison = match_runs(&b.figures, &n.figures, options.matching)?;
    let gate = gate(&comparison, &options.thresholds)?;
    let warnings = (b.warnings.into_iter().map(|w| (base.path().to_owned(), w)))
        .chain(n.warnings.into_iter().map(|w| (new.path().to_owned(), w)))
        .collect();
    Ok(CompareResult {
        comparison,
        gate,
        base_timeline: b.timeline,
        new_timeline: n.timeline,
        warnings,
    })
}
