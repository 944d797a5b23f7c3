//! `summary`: the first thing to run on a trace.

use super::{Replay, ReplayOptions, Warning};
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
    /// The summary.
    #[serde(flatten)]
    pub summary: SummaryReport,
    /// What the pass found worth a warning.
    #[serde(skip)]
    pub warnings: Vec<Warning>,
}

/// Summarizes an input in one pass.
pub fn summary(
    input: &Input,
    options: &SummaryOptions,
    progress: &dyn Progress,
) -> Result<SummaryResult, Error> {
    let replay = Replay::new(input, &options.replay, progress)?;
    let mut summary = Summary::new(options.top);
    let pass = replay.run(&mut [&mut summary])?;
    Ok(SummaryResult {
        path: input.path().display().to_string(),
        summary: replay.result(summary.into_report())?,
        warnings: pass.warnings,
    })
}
