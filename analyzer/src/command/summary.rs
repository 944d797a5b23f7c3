//! `summary`: the first thing to run on a trace.

use super::{ByDevice, InputWarning, Pass, Replay, ReplayOptions, Warning};
use crate::Error;
use crate::analysis::summary::{Summary, SummaryReport};
use crate::input::Input;
use crate::progress::Progress;
use serde::Serialize;

/// What `summary` computes.
#[derive(Clone, Debug, Default)]
pub struct SummaryOptions {
    /// The window and site folding.
    pub replay: ReplayOptions,
    /// How many sites to list at the peak.
    pub top: usize,
}

/// The summary of one input.
#[derive(Clone, Debug, Serialize)]
pub struct SummaryResult {
    /// The input's path.
    pub path: String,
    /// The device summarized.
    pub device: u32,
    /// The rank of the process that recorded it, when its header says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The summary.
    #[serde(flatten)]
    pub summary: SummaryReport,
    /// Threads other than the one followed that began phases, which are
    /// hidden (most likely the autograd engine's backward-pass phases):
    /// each with how many it began. Told once, in the summary's header,
    /// rather than as a warning of every command.
    pub hidden_phases: Vec<ThreadPhases>,
}

/// Phases a thread began that the summary does not show.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThreadPhases {
    /// The thread, as the trace numbers threads.
    pub thread: u32,
    /// The phases it began.
    pub phases: u64,
}

/// A pass's summary, with no peak when its window holds no event.
pub(crate) fn of_window(summary: SummaryReport, pass: &Pass) -> SummaryReport {
    if pass.warnings.contains(&Warning::EmptyWindow) {
        summary.of_empty_window()
    } else {
        summary
    }
}

/// The threads whose phases a pass did not follow.
fn hidden_phases(pass: &Pass) -> Vec<ThreadPhases> {
    pass.warnings
        .iter()
        .flat_map(|w| match w {
            Warning::OtherThreadPhases { others, .. } => others.as_slice(),
            _ => &[],
        })
        .map(|&(thread, phases)| ThreadPhases { thread, phases })
        .collect()
}

/// Summarizes each device of an input, in one pass.
pub fn summary(
    input: &Input,
    options: &SummaryOptions,
    progress: &dyn Progress,
) -> Result<ByDevice<SummaryResult>, Error> {
    let replay = Replay::new(input, &options.replay, progress)?;
    let result = replay.by_device(
        |_| (Summary::new(options.top),),
        |(summary,), pass| {
            Ok(SummaryResult {
                path: input.path().display().to_string(),
                device: 0,
                rank: super::ranks::header_rank(&pass.header),
                summary: of_window(replay.result(summary.into_report())?, pass),
                hidden_phases: hidden_phases(pass),
            })
        },
    )?;
    let mut result = result;
    for d in &mut result.devices {
        d.result.device = d.peaks.device;
        let warnings = std::mem::take(&mut d.result.summary.limit_warnings);
        result.warnings.extend(InputWarning::all(
            input.path(),
            warnings.into_iter().map(Warning::Memory),
        ));
    }
    Ok(result)
}
