//! The commands of the `vramtrace` CLI, as library functions: each takes
//! opened [inputs](crate::input::Input) and its options, runs the passes it
//! needs, and returns one serializable result. None of them prints or
//! writes a file: the [printers](crate::print) turn results into text,
//! JSON, SVG and HTML, and the binary picks one.
//!
//! Each input is read once per command: `summary`, `leaks`, `timeline`,
//! `report` and `compare` make one replay pass over it. Two things add a
//! decode-only scan of the same opened input before the pass: a window
//! bounded by a phase name (whose events are unknown until read), and the
//! time span `fragmentation` cuts its buckets from.

pub mod compare;
pub mod export;
pub mod flamegraph;
pub mod fragmentation;
pub mod import;
pub mod info;
pub mod join;
pub mod leaks;
pub mod plan;
pub mod ranks;
pub mod report;
pub mod simulate;
pub mod summary;
pub mod synth;
pub mod timeline;

pub use crate::analysis::warning::Warning;

use crate::Error;
use crate::analysis::peaks::DevicePeaks;
use crate::analysis::window::{Window, WindowSpec};
use crate::analysis::{
    AnalysisError, AnalysisSet, DevicePass, Devices, PassError, PassInfo, run_device_pass,
};
use crate::input::Input;
use crate::progress::Progress;
use crate::replay::ReplayState;
use crate::replay::categories::CategoryOptions;
use crate::sites::{FoldRules, SiteFolder};
use std::path::Path;
use vramtrace_format::{EventSource, Header};

/// How a command replays its inputs: the window, and how stacks fold to sites.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// The part of each input analyzed.
    pub window: WindowSpec,
    /// The frames site folding looks past.
    pub fold: FoldRules,
    /// Sites are whole stacks instead of their most telling frame.
    pub full_stacks: bool,
    /// The thread whose phases are followed (each thread's phases nest
    /// among themselves): [`MAIN_THREAD`](crate::replay::MAIN_THREAD) by default.
    pub phase_thread: u32,
    /// The one device analyzed; `None`: each device in turn.
    pub device: Option<u32>,
}

impl ReplayOptions {
    /// Which devices a pass replays.
    pub fn devices(&self) -> Devices {
        self.device.map_or(Devices::Apart, Devices::Only)
    }
}

/// The time span of `window` in `input`, from the chunks' times (read
/// without decoding), when it is known before the pass: not for a window
/// bounded by phases, whose times are known only once replayed. A series of
/// exactly N buckets needs it (one free-space sweep a bucket instead of one
/// per bucket of every width an adaptive series passes through).
pub fn known_span(input: &Input, window: &Window) -> Result<Option<(u64, u64)>, Error> {
    if window.from_index.is_some() || window.to_index.is_some() {
        return Ok(None);
    }
    Ok(input.scan()?.times.and_then(|(first, last)| {
        let start = first.max(window.from_ns.unwrap_or(0));
        let end = last.min(window.to_ns.unwrap_or(u64::MAX));
        (start <= end).then_some((start, end))
    }))
}

/// The x axis a chart of this input has unless told otherwise, before its
/// pauses are known (a table's buckets are chosen before the pass): busy
/// time for a PyTorch snapshot, whose history reaches back across long
/// pauses (on a time axis its work would be squeezed into a sliver), time
/// for a trace. Charts drawn after the pass use [`chart_axis`].
pub fn default_axis(input: &Input) -> crate::analysis::pauses::XAxis {
    use crate::analysis::pauses::XAxis;
    match input.kind() {
        crate::input::InputKind::TorchSnapshot => XAxis::Busy,
        crate::input::InputKind::Trace => XAxis::Time,
    }
}

/// The x axis a chart of this input's `timeline` opens on: busy time for a
/// PyTorch snapshot, and for a trace whose idle gaps (imports and CUDA
/// start-up before the first step, pauses) take a quarter of the charted
/// span or more, so that its steps fill the width instead of its last few
/// percent ([`IdleGaps::squeeze`](crate::analysis::pauses::IdleGaps::squeeze));
/// else time. The chart's axis title says which.
pub fn chart_axis(
    input: &Input,
    timeline: &crate::analysis::timeline::Timeline,
) -> crate::analysis::pauses::XAxis {
    use crate::analysis::pauses::XAxis;
    let span = match (timeline.samples.first(), timeline.samples.last()) {
        (Some(a), Some(b)) => b.time_ns.saturating_sub(a.time_ns),
        _ => 0,
    };
    match default_axis(input) {
        XAxis::Time if timeline.idle.squeeze(span) => XAxis::Busy,
        axis => axis,
    }
}

/// An opened input with its window resolved, ready for replay passes.
pub struct Replay<'a> {
    input: &'a Input,
    options: &'a ReplayOptions,
    window: Window,
    progress: &'a dyn Progress,
    categories: bool,
}

/// What a replay pass read, and what it found worth a warning.
#[derive(Clone, Debug)]
pub struct Pass {
    /// What the pass read.
    pub info: PassInfo,
    /// The input's header.
    pub header: Header,
    /// Whether the input shows NCCL (a distributed run), whose buffers a
    /// what-if keeps off the allocator.
    pub shows_nccl: bool,
    /// Truncation, a missing footer, an empty window.
    pub warnings: Vec<Warning>,
}

impl<'a> Replay<'a> {
    /// Resolves the window against the input: a decode-only scan when a bound
    /// is a phase name.
    pub fn new(
        input: &'a Input,
        options: &'a ReplayOptions,
        progress: &'a dyn Progress,
    ) -> Result<Self, Error> {
        let window = match options.window.times() {
            Some(window) => window,
            None => options
                .window
                .resolve(&mut input.events()?, options.phase_thread)
                .map_err(|source| Error::Window {
                    path: input.path().to_owned(),
                    source,
                })?,
        };
        Ok(Replay {
            input,
            options,
            window,
            progress,
            categories: true,
        })
    }

    /// Replays without telling categories apart: for a command that shows
    /// none (its devices' peaks then have no categories).
    pub fn without_categories(mut self) -> Self {
        self.categories = false;
        self
    }

    /// The input.
    pub fn input(&self) -> &'a Input {
        self.input
    }

    /// The resolved window.
    pub fn window(&self) -> &Window {
        &self.window
    }

    /// Replays the input from its start, once, each device into its own
    /// state with its own analyses from `make` (or only the device the
    /// options name), feeding them the window's events. An error when the
    /// device asked for has no event.
    pub fn run<A: AnalysisSet>(
        &self,
        make: impl FnMut(u32) -> A + Send,
    ) -> Result<(Vec<DevicePass<A>>, Pass), Error> {
        let mut events = self.input.events()?;
        let meter = self.progress.begin(self.input.pass_work(&events));
        let folder = SiteFolder::new(self.options.fold.clone(), self.options.full_stacks);
        let categories = CategoryOptions {
            infer: self.categories,
            ..CategoryOptions::of_header(events.header())
        };
        let state = ReplayState::new(folder)
            .with_phase_thread(self.options.phase_thread)
            .with_categories(categories);
        let devices = self.options.devices();
        let passes = run_device_pass(&mut events, state, devices, make, &self.window, &*meter)
            .map_err(|e| pass_error(self.input.path(), e))?;
        if let Devices::Only(device) = devices
            && passes.devices.is_empty()
        {
            return Err(Error::NoSuchDevice {
                path: self.input.path().to_owned(),
                device,
                seen: passes.seen,
            });
        }
        let pass = Pass {
            warnings: Warning::of_pass(&passes.info, &self.window),
            header: events.header().clone(),
            shows_nccl: crate::simulate::shows_nccl(events.header(), events.symbols()),
            info: passes.info,
        };
        Ok((passes.devices, pass))
    }

    /// Replays the input once (see [`run`](Self::run)) and makes each
    /// device's result from its finished analyses with `result`.
    pub fn by_device<A: AnalysisSet, T>(
        &self,
        make: impl FnMut(u32) -> A + Send,
        mut result: impl FnMut(A, &Pass) -> Result<T, Error>,
    ) -> Result<ByDevice<T>, Error> {
        let (devices, pass) = self.run(make)?;
        let devices = devices
            .into_iter()
            .map(|d| {
                Ok(OnDevice {
                    peaks: self.result(d.peaks.into_report(d.device))?,
                    result: result(d.analyses, &pass)?,
                })
            })
            .collect::<Result<_, Error>>()?;
        Ok(ByDevice {
            devices,
            rank: ranks::header_rank(&pass.header),
            warnings: InputWarning::of_input(self.input, pass.warnings),
        })
    }

    /// An analysis's result, or the error naming this input.
    pub fn result<T>(&self, result: Result<T, AnalysisError>) -> Result<T, Error> {
        result.map_err(|source| Error::Analysis {
            path: self.input.path().to_owned(),
            source,
        })
    }
}

/// The version of the JSON the commands print: every document's first key,
/// `schema_version` (see docs/json.md), which `print::json` writes. It grows when a field is renamed,
/// moved or removed, or changes meaning; added fields keep it.
///
/// - 1 (no `schema_version` key): a result of one device was that result
///   alone, and several were `{devices, by_device}`.
/// - 2: one shape whatever the number of devices (`{rank, warnings,
///   devices, by_device}`); `end`'s byte totals end in `_bytes`; a phase path
///   outside phases is `null`, not `""`.
pub const JSON_SCHEMA_VERSION: u32 = 2;

/// A command's result on each device of an input, in device order.
///
/// As JSON it has one shape whatever the number of devices (docs/json.md):
/// `{"rank": N|null, "warnings": [...], "devices": [each device's peaks],
/// "by_device": [{"device": N, ...its result}]}` (its `Serialize` is in
/// `print`, beside the other JSON shapes).
#[derive(Clone, Debug)]
pub struct ByDevice<T> {
    /// Each device's peaks and result.
    pub devices: Vec<OnDevice<T>>,
    /// The rank of the process that recorded the input, when its header says.
    pub rank: Option<u32>,
    /// What the passes found worth a warning, each with its input (one pass
    /// for every device; a comparison's two runs each have theirs). Kept
    /// here only, never in a device's result.
    pub warnings: Vec<InputWarning>,
}

/// A [`Warning`] about one input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputWarning {
    /// The input.
    pub path: std::path::PathBuf,
    /// What was found.
    pub warning: Warning,
}

impl InputWarning {
    /// An input's warnings: what converting it found, then its pass's.
    pub fn of_input(input: &Input, pass: Vec<Warning>) -> Vec<InputWarning> {
        let conversion = (input.import_report().into_iter())
            .flat_map(|report| report.warnings.iter().cloned())
            .map(Warning::Conversion);
        InputWarning::all(input.path(), conversion.chain(pass))
    }

    /// The warnings of one input's pass.
    pub fn all(path: &Path, warnings: impl IntoIterator<Item = Warning>) -> Vec<InputWarning> {
        (warnings.into_iter())
            .map(|warning| InputWarning {
                path: path.to_owned(),
                warning,
            })
            .collect()
    }
}

/// A command's result on one device.
#[derive(Clone, Debug)]
pub struct OnDevice<T> {
    /// The device's peaks (its index among them).
    pub peaks: DevicePeaks,
    /// The command's result on the device.
    pub result: T,
}

impl<T> ByDevice<T> {
    /// The device shown where one is shown (a chart, a report): the one
    /// asked for, else the one with the highest allocated peak (the first
    /// of equals). `None` only without devices.
    pub fn shown(&self) -> Option<&OnDevice<T>> {
        self.devices
            .iter()
            .rev()
            .max_by_key(|d| d.peaks.peak_allocated.bytes)
    }

    /// Each device's peaks.
    pub fn peaks(&self) -> Vec<DevicePeaks> {
        self.devices.iter().map(|d| d.peaks.clone()).collect()
    }
}

/// A pass's failure as the library's error, naming the input.
fn pass_error(path: &Path, e: PassError) -> Error {
    match e {
        PassError::Read(source) => Error::Read {
            path: path.to_owned(),
            source,
        },
        PassError::Analysis(source) => Error::Analysis {
            path: path.to_owned(),
            source,
        },
    }
}

/// The last component of a path, as titles and comparisons name a run.
pub fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
