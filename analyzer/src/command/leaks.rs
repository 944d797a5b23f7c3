//! `leaks`: memory retained by phases, growth across repetitions, and
//! blocks never freed.

use super::{ByDevice, Replay, ReplayOptions, Warning};
use crate::Error;
use crate::analysis::leaks::{Leaks, LeaksReport};
use crate::input::Input;
use crate::progress::Progress;
use serde::Serialize;

/// The leak analysis of one input.
#[derive(Clone, Debug, Serialize)]
pub struct LeaksResult {
    /// The input's path.
    pub path: String,
    /// The leaks.
    #[serde(flatten)]
    pub report: LeaksReport,
    /// What the pass found worth a warning.
    #[serde(skip)]
    pub warnings: Vec<Warning>,
}

/// Finds the leaks of each device of an input, in one pass.
pub fn leaks(
    input: &Input,
    options: &ReplayOptions,
    progress: &dyn Progress,
) -> Result<ByDevice<LeaksResult>, Error> {
    let replay = Replay::new(input, options, progress)?;
    replay.by_device(
        |_| (Leaks::new(),),
        |(leaks,), _| {
            Ok(LeaksResult {
                path: input.path().display().to_string(),
                report: replay.result(leaks.into_report())?,
                warnings: Vec::new(),
            })
        },
    )
}
