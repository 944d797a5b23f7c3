//! The library's error: what went wrong, and with which input.

use crate::analysis::AnalysisError;
use crate::analysis::compare::CompareError;
use crate::analysis::window::WindowError;
use crate::input::InputError;
use crate::simulate::SimulateError;
use std::path::PathBuf;
use vramtrace_format::FormatError;

/// Why a command of the library could not give its result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An input could not be opened.
    #[error(transparent)]
    Input(#[from] InputError),
    /// An input could not be read to its end (a truncated trace is not an
    /// error: its readable part is analyzed, with a warning).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The input.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: FormatError,
    },
    /// An analysis failed on an input.
    #[error("{path}: {source}")]
    Analysis {
        /// The input.
        path: PathBuf,
        /// Why the analysis failed.
        #[source]
        source: AnalysisError,
    },
    /// A window's phases are not in an input.
    #[error("{path}: {source}")]
    Window {
        /// The input.
        path: PathBuf,
        /// What is missing.
        #[source]
        source: WindowError,
    },
    /// The device asked for has no event in an input.
    #[error("{path}: device {device} has no event in it (its devices: {})", list_devices(.seen))]
    NoSuchDevice {
        /// The input.
        path: PathBuf,
        /// The device asked for.
        device: u32,
        /// The devices it has.
        seen: Vec<u32>,
    },
    /// The moment asked for never comes in an input (no OOM in it).
    #[error("{}: the trace has no {what} (inside the window)", .path.display())]
    NoMoment {
        /// The input.
        path: PathBuf,
        /// What it lacks.
        what: &'static str,
    },
    /// A moment asked for by time lies past the input's last event: its
    /// state there would be the end's, which was not asked for.
    #[error("{}: the trace ends at {}; {} is past its end", .path.display(), crate::units::duration_ns(*.end_ns), crate::units::duration_ns(*.at_ns))]
    MomentPastEnd {
        /// The input.
        path: PathBuf,
        /// The time asked for (ns, on the trace's clock).
        at_ns: u64,
        /// The input's last event's time (ns).
        end_ns: u64,
    },
    /// Two runs have different numbers of devices: which to compare is unclear.
    #[error("the runs have different devices (base: {}; new: {}): compare one of each", list_devices(.base), list_devices(.new))]
    DevicesDiffer {
        /// The baseline's devices.
        base: Vec<u32>,
        /// The new run's devices.
        new: Vec<u32>,
    },
    /// Two rank sets have different ranks: which to compare is unclear.
    #[error("the rank sets differ (base ranks: {}; new: {}): give each run's traces of the same ranks", list_devices(.base), list_devices(.new))]
    RanksDiffer {
        /// The baseline's ranks.
        base: Vec<u32>,
        /// The new run's ranks.
        new: Vec<u32>,
    },
    /// Two runs cannot be compared as asked.
    #[error(transparent)]
    Compare(#[from] CompareError),
    /// A plan cannot be made from the runs given.
    #[error(transparent)]
    Plan(#[from] crate::simulate::plan::PlanError),
    /// A simulation cannot be run as asked.
    #[error("{path}: {source}")]
    Simulate {
        /// The input.
        path: PathBuf,
        /// What is missing.
        #[source]
        source: SimulateError,
    },
    /// Parts of several recordings (or rings), none with the most parts:
    /// which to join is not for a guess.
    #[error(
        "the parts are not parts of one recording: {detail}; join each recording's parts apart"
    )]
    JoinMixed {
        /// The recordings, and their parts.
        detail: String,
    },
    /// No part of a ring can be joined: each part, and why not.
    #[error("no part can be joined: {}", .left_out.join("; "))]
    NothingToJoin {
        /// `PART: why`, for each part given.
        left_out: Vec<String>,
    },
}

fn list_devices(seen: &[u32]) -> String {
    if seen.is_empty() {
        return "none".to_string();
    }
    let names: Vec<String> = seen.iter().map(u32::to_string).collect();
    names.join(", ")
}
