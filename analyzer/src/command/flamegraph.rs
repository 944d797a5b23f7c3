//! `flamegraph`: memory live at one moment (the allocated peak, the first
//! out-of-memory error, or a time), by the full stack that allocated it.
//!
//! Two passes per input: the first finds the moment on each device (the
//! allocated peak as `summary` finds it, or the first OOM), the second
//! replays each device up to it and folds the live blocks by stack.

use super::{ByDevice, OnDevice, Replay, ReplayOptions, Warning};
use crate::Error;
use crate::analysis::flame::{FirstOom, FoldAt, FoldedStacks, LiveStacks};
use crate::analysis::peaks::DevicePeaks;
use crate::analysis::window::Window;
use crate::analysis::{Devices, run_device_pass};
use crate::input::Input;
use crate::progress::Progress;
use crate::replay::ReplayState;
use crate::replay::categories::CategoryOptions;
use crate::sites::SiteFolder;
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

/// Where to fold one device's live memory: a moment found on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoldPoint {
    /// The starting state (at this time).
    Start(u64),
    /// After the event with this index (at this time).
    After(u64, u64),
    /// After the last event at or before this time.
    AtTime(u64),
}

impl FoldPoint {
    /// The moment of an allocated peak.
    pub fn of_peak(peak: &crate::analysis::summary::Peak) -> FoldPoint {
        if peak.replayed_events == 0 {
            FoldPoint::Start(peak.time_ns)
        } else {
            FoldPoint::After(peak.index, peak.time_ns)
        }
    }
}

/// The moment on one device, found by the first pass.
enum Found {
    At(FoldPoint),
    /// The moment never came on this device (no OOM).
    Never,
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
    let replay = Replay::new(input, options, progress)?.without_categories();
    // Pass 1: where the moment falls on each device.
    let found: Vec<(u32, Found)> = match moment {
        Moment::Time(t) => {
            let (devices, _) = replay.run(|_| ())?;
            devices
                .into_iter()
                .map(|d| (d.device, Found::At(FoldPoint::AtTime(t))))
                .collect()
        }
        Moment::AllocatedPeak => {
            let (devices, _) = replay.run(|_| ())?;
            devices
                .into_iter()
                .map(|d| {
                    let peak = replay.result(d.peaks.into_report(d.device))?.peak_allocated;
                    Ok((d.device, Found::At(FoldPoint::of_peak(&peak))))
                })
                .collect::<Result<_, Error>>()?
        }
        Moment::FirstOom => {
            let (devices, _) = replay.run(|_| (FirstOom::default(),))?;
            devices
                .into_iter()
                .map(|d| {
                    let (oom,) = d.analyses;
                    let found = match oom.into_report() {
                        Some((index, time)) => Found::At(FoldPoint::After(index, time)),
                        None => Found::Never,
                    };
                    (d.device, found)
                })
                .collect()
        }
    };
    if found.iter().all(|(_, f)| matches!(f, Found::Never)) {
        return Err(Error::NoMoment {
            path: input.path().to_owned(),
            what: "out-of-memory event",
        });
    }
    // Pass 2, per device: replay to the moment and fold.
    let mut devices = Vec::new();
    let mut warnings = Vec::new();
    for (device, found) in found {
        let Found::At(point) = found else { continue };
        let (graph, peaks, pass_warnings) =
            fold_at(input, options, device, point, moment, progress)?;
        if warnings.is_empty() {
            warnings = pass_warnings;
        }
        devices.push(OnDevice {
            peaks,
            result: graph,
        });
    }
    Ok(ByDevice {
        devices,
        rank: super::ranks::header_rank(input.events()?.header()),
        warnings,
    })
}

/// Replays one device of an input from its start to `point` and folds its
/// live memory by stack; with the device's peaks up to there and what the
/// pass found worth a warning. `moment` is what `point` was found as.
pub fn fold_at(
    input: &Input,
    options: &ReplayOptions,
    device: u32,
    point: FoldPoint,
    moment: Moment,
    progress: &dyn Progress,
) -> Result<(FlameGraph, DevicePeaks, Vec<Warning>), Error> {
    let (window, at, index, time_ns) = match point {
        FoldPoint::Start(time) => (Window::ALL, FoldAt::Begin, None, time),
        FoldPoint::After(index, time) => (
            Window {
                to_index: Some(index),
                ..Window::ALL
            },
            FoldAt::End,
            Some(index),
            time,
        ),
        FoldPoint::AtTime(t) => (
            Window {
                to_ns: Some(t),
                ..Window::ALL
            },
            FoldAt::End,
            None,
            t,
        ),
    };
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
    let mut passes = run_device_pass(
        &mut events,
        state,
        Devices::Only(device),
        |_| (LiveStacks::new(at),),
        &window,
        &*meter,
    )
    .map_err(|e| super::pass_error(input.path(), e))?;
    let warnings = Warning::of_pass(&passes.info, &window);
    let graph = |index, time_ns, stacks| FlameGraph {
        path: input.path().display().to_string(),
        at: MomentFound {
            moment,
            index,
            time_ns,
        },
        stacks,
    };
    let Some(pass) = passes.devices.pop() else {
        // No event of the device before the moment, and no starting state
        // on it: nothing of it was live.
        let peaks = DevicePeaks {
            device,
            ..Default::default()
        };
        return Ok((
            graph(None, time_ns, FoldedStacks::default()),
            peaks,
            warnings,
        ));
    };
    let (index, time_ns) = match (index, found_time(&passes.info, at)) {
        (Some(i), _) => (Some(i), time_ns),
        // At a time: the last event replayed, if any.
        (None, Some((i, t))) => (Some(i), t),
        (None, None) => (None, time_ns),
    };
    let peaks = pass
        .peaks
        .into_report(device)
        .map_err(|source| Error::Analysis {
            path: input.path().to_owned(),
            source,
        })?;
    let (live,) = pass.analyses;
    Ok((graph(index, time_ns, live.into_report()), peaks, warnings))
}

/// The last event a pass folded after, for a moment given as a time.
fn found_time(info: &crate::analysis::PassInfo, at: FoldAt) -> Option<(u64, u64)> {
    (at == FoldAt::End && info.events_in_window > 0)
        .then(|| (info.events_replayed.saturating_sub(1), info.last_time_ns))
}
