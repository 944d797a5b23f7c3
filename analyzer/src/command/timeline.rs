//! `timeline`: memory over time, stacked by site, phase or category.

use super::{ByDevice, Replay, ReplayOptions, Warning};
use crate::Error;
use crate::analysis::timeline::{GroupBy, Timeline, TimelineAnalysis, TimelineOptions};
use crate::input::Input;
use crate::progress::Progress;
use serde::Serialize;

/// What `timeline` computes.
#[derive(Clone, Debug, Default)]
pub struct TimelineCommandOptions {
    /// The window and site folding.
    pub replay: ReplayOptions,
    /// What the stacked areas are split by.
    pub group_by: GroupBy,
    /// Groups (sites, phases) shown by name; the rest are summed as `other`.
    pub top: usize,
}

/// The timeline of one input.
#[derive(Clone, Debug, Serialize)]
pub struct TimelineResult {
    /// The input's path.
    #[serde(skip)]
    pub path: String,
    /// The timeline.
    #[serde(flatten)]
    pub timeline: Timeline,
    /// What the pass found worth a warning.
    #[serde(skip)]
    pub warnings: Vec<Warning>,
}

/// Replays an input into the timeline of each of its devices.
pub fn timeline(
    input: &Input,
    options: &TimelineCommandOptions,
    progress: &dyn Progress,
) -> Result<ByDevice<TimelineResult>, Error> {
    let mut replay = Replay::new(input, &options.replay, progress)?;
    if options.group_by != GroupBy::Category {
        replay = replay.without_categories();
    }
    // The devices' memory, from the header (a stream's comes first).
    let devices = input.header().devices.clone();
    let mut result = replay.by_device(
        |_| {
            (TimelineAnalysis::new(TimelineOptions {
                group_by: options.group_by,
                top: options.top,
                ..TimelineOptions::default()
            }),)
        },
        |(analysis,), _| {
            Ok(TimelineResult {
                path: input.path().display().to_string(),
                timeline: replay.result(analysis.into_report())?,
                warnings: Vec::new(),
            })
        },
    )?;
    for d in &mut result.devices {
        d.result.timeline.capacity_bytes =
            crate::simulate::device_capacity(&devices, d.peaks.device);
    }
    Ok(result)
}
