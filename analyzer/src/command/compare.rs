//! `compare`: did a change make memory worse, where, and by how much. Both
//! runs are replayed at once (one thread each, on top of the decoding each
//! pass spreads over the cores), then matched by
//! [`analysis::compare`](crate::analysis::compare).

use super::{ByDevice, OnDevice, Replay, ReplayOptions, file_name};
use crate::Error;
use crate::analysis::compare::{
    Comparison, GateResult, MatchOptions, RunFigures, Threshold, compare as match_runs, gate,
};
use crate::analysis::leaks::Leaks;
use crate::analysis::phase_totals::PhaseTotals;
use crate::analysis::site_totals::SiteTotals;
use crate::analysis::summary::Summary;
use crate::analysis::timeline::{GroupBy, Timeline, TimelineAnalysis, TimelineOptions};
use crate::input::Input;
use crate::progress::Progress;
use serde::Serialize;

/// What `compare` computes.
#[derive(Clone, Debug, Default)]
pub struct CompareCommandOptions {
    /// The window (in both runs) and site folding.
    pub replay: ReplayOptions,
    /// How sites and figures are matched.
    pub matching: MatchOptions,
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
}

/// A run measured for a comparison, with its timeline for the chart.
#[derive(Clone, Debug)]
pub struct Measured {
    /// The figures compared.
    pub figures: RunFigures,
    /// Allocated and reserved memory over time.
    pub timeline: Timeline,
}

/// Replays one run with everything a comparison needs, in one pass, each
/// device apart.
pub fn measure(
    input: &Input,
    options: &ReplayOptions,
    progress: &dyn Progress,
) -> Result<ByDevice<Measured>, Error> {
    let replay = Replay::new(input, options, progress)?;
    replay.by_device(
        |_| {
            (
                // Every site at the peak, not the top few: a site can only be
                // matched if both runs list it.
                Summary::new(usize::MAX),
                Leaks::new(),
                SiteTotals::new(),
                PhaseTotals::new(),
                TimelineAnalysis::new(TimelineOptions {
                    group_by: GroupBy::None,
                    ..TimelineOptions::default()
                }),
            )
        },
        |(summary, leaks, sites, phases, timeline), _| {
            Ok(Measured {
                figures: RunFigures {
                    name: file_name(input.path()),
                    summary: replay.result(summary.into_report())?,
                    leaks: replay.result(leaks.into_report())?,
                    sites: replay.result(sites.into_report())?,
                    phases: replay.result(phases.into_report())?,
                },
                timeline: replay.result(timeline.into_report())?,
            })
        },
    )
}

/// A device of a baseline and the device of a new run compared with it.
pub type DevicePair<'a, B, N> = (&'a OnDevice<B>, &'a OnDevice<N>);

/// Pairs the devices of two runs: by index when both have the same ones,
/// else in order when they have as many (rank 1 on device 1 against a rerun
/// on device 0), else an error.
pub fn pair_devices<'a, B, N>(
    base: &'a ByDevice<B>,
    new: &'a ByDevice<N>,
) -> Result<Vec<DevicePair<'a, B, N>>, Error> {
    if base.devices.len() != new.devices.len() {
        return Err(Error::DevicesDiffer {
            base: base.devices.iter().map(|d| d.peaks.device).collect(),
            new: new.devices.iter().map(|d| d.peaks.device).collect(),
        });
    }
    Ok(base.devices.iter().zip(&new.devices).collect())
}

/// Compares two runs, each replayed once, side by side: each device of the
/// new run against the same device of the baseline.
pub fn compare(
    base: &Input,
    new: &Input,
    options: &CompareCommandOptions,
    progress: &dyn Progress,
) -> Result<ByDevice<CompareResult>, Error> {
    let (b, n) = rayon::join(
        || measure(base, &options.replay, progress),
        || measure(new, &options.replay, progress),
    );
    let (b, n) = (b?, n?);
    let devices = pair_devices(&b, &n)?
        .into_iter()
        .map(|(b, n)| {
            let comparison = match_runs(&b.result.figures, &n.result.figures, options.matching)?;
            let gate = gate(&comparison, &options.thresholds)?;
            Ok(OnDevice {
                peaks: n.peaks.clone(),
                result: CompareResult {
                    comparison,
                    gate,
                    base_timeline: b.result.timeline.clone(),
                    new_timeline: n.result.timeline.clone(),
                },
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let mut warnings = b.warnings.clone();
    warnings.extend(n.warnings.iter().cloned());
    let result = ByDevice {
        devices,
        rank: n.rank,
        warnings,
    };
    Ok(result)
}
