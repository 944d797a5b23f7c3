//! `flamegraph`: memory live at one moment (the allocated peak, the first
//! out-of-memory error, or a time), by the full stack that allocated it.
//!
//! At a time, one pass: each device folds when its first event past the
//! time comes. At the peak or an OOM, two: the first finds the moment on
//! each device (the allocated peak as `summary` finds it, or the first
//! OOM), the second replays every device at once, each folding just after
//! its own moment.

use super::{ByDevice, InputWarning, OnDevice, Replay, ReplayOptions, Warning};
use crate::Error;
use crate::analysis::flame::{FirstOom, FoldAt, FoldedStacks, LiveStacks};
use crate::analysis::window::Window;
use crate::analysis::{Devices, run_device_pass};
use crate::input::Input;
use crate::progress::Progress;
use crate::replay::ReplayState;
use crate::replay::categories::CategoryOptions;
use crate::sites::SiteFolder;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use vramtrace_format::EventSource;

/// The moment whose live memory a flame graph shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Moment {
    /// The allocated peak (inside the window), as `summary` reports it.
    #[default]
    AllocatedPeak,
    /// Just after the first out-of-memory event (inside the window).
    FirstOom,
    /// The last event at or before this time (ns).
    Time(u64),
}

/// Where a flame graph's moment fell on one device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MomentFound {
    /// The moment asked for.
    pub moment: Moment,
    /// The index of the last event replayed (`None`: the trace's starting
    /// state, before any event).
    pub index: Option<u64>,
    /// The time then (ns).
    pub time_ns: u64,
}

/// The live memory of one device at the moment, by stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlameGraph {
    /// The input's path.
    pub path: String,
    /// When.
    pub at: MomentFound,
    /// What was live, by stack: exact (block sizes, as `allocated` counts
    /// them; `total_bytes` at the allocated peak is the peak).
    #[serde(flatten)]
    pub stacks: FoldedStacks,
}

/// Where an allocated peak is folded: the starting state when the peak was
/// there, else just after the event that reached it.
pub fn fold_at_peak(peak: &crate::analysis::summary::Peak) -> FoldAt {
    if peak.replayed_events == 0 {
        FoldAt::Start
    } else {
        FoldAt::After(peak.index)
    }
}

/// Replays an input to the moment on each device (or the one the options
/// name) and folds its live memory by stack. A device without the moment
/// (no OOM on it) is left out; an error when none has it.
pub fn flamegraph(
    input: &Input,
    options: &ReplayOptions,
    moment: Moment,
    progress: &dyn Progress,
) -> Result<ByDevice<FlameGraph>, Error> {
    // The first pass, where the moment must be found: each device's.
    let found: Option<FxHashMap<u32, FoldAt>> = match moment {
        Moment::Time(_) => None,
        Moment::AllocatedPeak => {
            let replay = Replay::new(input, options, progress)?.without_categories();
            let (devices, _) = replay.run(|_| ())?;
            let mut found = FxHashMap::default();
            for d in devices {
                let peaks = replay.result(d.peaks.into_report(d.device))?;
                found.insert(d.device, fold_at_peak(&peaks.peak_allocated));
            }
            Some(found)
        }
        Moment::FirstOom => {
            let replay = Replay::new(input, options, progress)?.without_categories();
            let (devices, _) = replay.run(|_| (FirstOom::default(),))?;
            Some(
                devices
                    .into_iter()
                    .map(|d| {
                        let (oom,) = d.analyses;
                        let at = oom
                            .into_report()
                            .map_or(FoldAt::Never, |(index, _)| FoldAt::After(index));
                        (d.device, at)
                    })
                    .collect(),
            )
        }
    };
    let graphs = fold(
        input,
        options,
        options.devices(),
        |device| match (&found, moment) {
            (None, Moment::Time(t)) => FoldAt::AtTime(t),
            (found, _) => found
                .as_ref()
                .and_then(|f| f.get(&device).copied())
                .unwrap_or(FoldAt::Never),
        },
        moment,
        progress,
    )?;
    if graphs.devices.is_empty() && moment == Moment::FirstOom {
        return Err(Error::NoMoment {
            path: input.path().to_owned(),
            what: "out-of-memory event",
        });
    }
    Ok(graphs)
}

/// Replays an input once from its start, every device in `devices` at once,
/// and folds each device's live memory by stack at `at(device)`: the
/// devices whose moment came, with their peaks up to it. `moment` is what
/// the points were found as.
pub fn fold(
    input: &Input,
    options: &ReplayOptions,
    devices: Devices,
    at: impl Fn(u32) -> FoldAt + Sync,
    moment: Moment,
    progress: &dyn Progress,
) -> Result<ByDevice<FlameGraph>, Error> {
    let mut events = input.events()?;
    let meter = progress.begin(input.pass_work(&events));
    let folder = SiteFolder::new(options.fold.clone(), options.full_stacks);
    let categories = CategoryOptions {
        infer: false,
        ..CategoryOptions::of_header(events.header())
    };
    let state = ReplayState::new(folder)
        .with_phase_thread(options.phase_thread)
        .with_categories(categories);
    // A moment is an event's index or time from the trace's start,
    // whatever the window it was found in.
    let window = Window::ALL;
    let passes = run_device_pass(
        &mut events,
        state,
        devices,
        |device| (LiveStacks::new(at(device)),),
        &window,
        &*meter,
    )
    .map_err(|e| super::pass_error(input.path(), e))?;
    // A time past the last event would fold the end state, which was not
    // asked for. (A pass stopped early saw an event past the time.)
    if let Moment::Time(t) = moment
        && passes.info.first_time_ns.is_some()
        && !passes.info.stopped_early
        && t > passes.info.last_time_ns
    {
        return Err(Error::MomentPastEnd {
            path: input.path().to_owned(),
            at_ns: t,
            end_ns: passes.info.last_time_ns,
        });
    }
    let mut graphs = Vec::new();
    for pass in passes.devices {
        let (live,) = pass.analyses;
        let Some((last, stacks)) = live.into_report() else {
            continue;
        };
        let peaks = pass
            .peaks
            .into_report(pass.device)
            .map_err(|source| Error::Analysis {
                path: input.path().to_owned(),
                source,
            })?;
        graphs.push(OnDevice {
            peaks,
            result: FlameGraph {
                path: input.path().display().to_string(),
                at: MomentFound {
                    moment,
                    index: last.map(|(index, _)| index),
                    time_ns: match moment {
                        Moment::Time(t) if last.is_none() => t,
                        _ => last.map_or(0, |(_, time)| time),
                    },
                },
                stacks,
            },
        });
    }
    Ok(ByDevice {
        devices: graphs,
        rank: super::ranks::header_rank(events.header()),
        warnings: InputWarning::of_input(input, Warning::of_pass(&passes.info, &window)),
    })
}
