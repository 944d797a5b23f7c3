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
    /// Where the run ran out of memory (an OOM it did not survive): the
    /// fixes tried, each replayed, as `simulate` and the report offer them.
    /// Absent without such an OOM, for a window, or past the events a
    /// replay of every request takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixes: Option<crate::simulate::fixes::FixesTried>,
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
                fixes: None,
            })
        },
    )?;
    let mut result = result;
    // The fixes need every request replayed: a second pass, only for a run
    // that died of an out-of-memory error, so that summaries of the others
    // cost what they did.
    let failed = result
        .devices
        .iter()
        .any(|d| d.result.summary.fatal_ooms().next().is_some());
    if failed && replay.window().is_all() {
        let header = input.header().clone();
        let config =
            vramtrace_allocator::AllocatorConfig::from_settings(&header.allocator_settings)
                .ok()
                .map(|(config, _)| config);
        let fixes = Replay::new(input, &options.replay, progress)?.by_device(
            |device| {
                let capacity = crate::simulate::device_capacity(&header.devices, device);
                (crate::simulate::bounded::BoundedRequests::new(
                    capacity,
                    config.clone(),
                ),)
            },
            |(mut requests,), _| Ok(requests.take_fixes()),
        )?;
        for d in &mut result.devices {
            if let Some(f) = fixes
                .devices
                .iter()
                .find(|f| f.peaks.device == d.peaks.device)
            {
                d.result.fixes = f.result.clone();
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::NoProgress;

    /// Issue #44: `summary` of a run that died of an out-of-memory error
    /// gives the fixes `simulate` and the report give (issue #28's run,
    /// scaled down: a cap, kept 6 MiB tensors, a large request).
    #[test]
    fn a_run_that_ran_out_of_memory_has_its_fixes_in_the_summary() {
        const MIB: u64 = 1 << 20;
        let bytes = crate::testing::capped_run(
            80 * 1024 * MIB,
            Some(1024 * MIB),
            500 * MIB,
            150,
            MIB,
            400 * MIB,
        );
        let input = Input::from_bytes(bytes, &NoProgress).unwrap();
        let options = SummaryOptions {
            top: 5,
            ..SummaryOptions::default()
        };
        let r = summary(&input, &options, &NoProgress).unwrap();
        let d = &r.devices[0].result;
        assert_eq!(d.summary.fatal_ooms().count(), 1);
        let fixes = d.fixes.as_ref().expect("fixes were tried");
        assert!(!fixes.passed.is_empty(), "{fixes:#?}");
        let text = crate::print::text::summary(d, false);
        assert!(
            text.contains("fixes tried for the out-of-memory error"),
            "{text}"
        );
        let json = serde_json::to_value(d).unwrap();
        assert!(json["fixes"]["passed"].is_array(), "{json:#}");
    }

    #[test]
    fn a_run_without_an_oom_has_no_fixes() {
        let mut b = crate::testing::TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.segment(0, 1 << 20).alloc(0, 512, 512, s).free(0, 512);
        let input = Input::from_bytes(b.finish(), &NoProgress).unwrap();
        let r = summary(&input, &SummaryOptions::default(), &NoProgress).unwrap();
        assert!(r.devices[0].result.fixes.is_none());
        let json = serde_json::to_value(&r.devices[0].result).unwrap();
        assert!(json.get("fixes").is_none());
    }
}
