//! What `plan` answers: its result types and its errors.

use crate::analysis::categories::CategoryTable;
use crate::analysis::limits::Limit;
use crate::command::simulate::{Device, OomDescription};
use crate::simulate::Reserve;
use crate::simulate::plan::law::LawKind;
use crate::simulate::plan::{Range, Varied};
use serde::Serialize;

/// Why a plan cannot be made from the runs given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The KV cache's site was named, and no allocation comes from it.
    #[error("{path}: no allocation comes from a site matching '{site}'")]
    NoKvSite {
        /// The run.
        path: String,
        /// The site asked for.
        site: String,
    },
    /// No allocation can be the KV cache.
    #[error(
        "{path}: no allocation was made outside the CUDA graph captures and private pools, so none can be the KV cache: name its site"
    )]
    NoKvCache {
        /// The run.
        path: String,
    },
    /// A KV block of 0 bytes.
    #[error("a KV block of 0 bytes: give its size with its unit (1MiB)")]
    ZeroBlock,
    /// The batch sizes given for the captures are not one per capture.
    #[error(
        "{path}: the run captured {captures} CUDA graphs, and {given} batch sizes were given: give one per capture, in capture order"
    )]
    CaptureCount {
        /// The run.
        path: String,
        /// Graphs the run captured.
        captures: usize,
        /// Batch sizes given.
        given: usize,
    },
    /// Graphs to plan for, in a run that captured none.
    #[error("{path}: the run captured no CUDA graph, so there are no captures to plan")]
    NoCaptures {
        /// The run.
        path: String,
    },
    /// A run says neither its batch size nor its sequence length.
    #[error(
        "{path} does not say its batch size or sequence length (it has no `batch` or `seq` annotation): give each run's value"
    )]
    NoValue {
        /// The run.
        path: String,
    },
    /// A run's value is not a whole number above 0.
    #[error("{path}: its `{key}` annotation, '{value}', is not a whole number above 0")]
    BadValue {
        /// The run.
        path: String,
        /// The annotation's key.
        key: String,
        /// Its value.
        value: String,
    },
    /// A value given for a run that its own note contradicts.
    #[error(
        "{path} says its {key} was {noted} (its `{key}` annotation), but {given} was given for it: give the runs' values in their order, or leave them to the annotations"
    )]
    ValueContradicts {
        /// The run.
        path: String,
        /// The annotation's key.
        key: String,
        /// What the run noted.
        noted: u64,
        /// What was given for it.
        given: u64,
    },
    /// As many values as runs are needed.
    #[error("{values} values for {runs} runs: give one value per run, in the runs' order")]
    ValueCount {
        /// Values given.
        values: usize,
        /// Runs given.
        runs: usize,
    },
    /// The runs vary both the batch size and the sequence length.
    #[error(
        "the runs differ in both their batch size and their sequence length: plan over one of them, with the other the same in every run"
    )]
    BothVary,
    /// Two runs were recorded at the same value.
    #[error("two runs were recorded at {varied} {value}: plan from runs at different values")]
    SameValue {
        /// What varies.
        varied: &'static str,
        /// The value.
        value: u64,
    },
    /// The runs were recorded on different GPUs.
    #[error(
        "the runs were recorded on different GPUs ({first}; {other}): plan from runs on one kind"
    )]
    DifferentGpus {
        /// The first run's GPU.
        first: String,
        /// Another's.
        other: String,
    },
    /// A run holds several devices and none was picked.
    #[error("{path} holds devices {seen}: pick the one to plan for")]
    SeveralDevices {
        /// The run.
        path: String,
        /// Its devices.
        seen: String,
    },
    /// The runs made different numbers of optimizer steps.
    #[error(
        "the runs made different numbers of optimizer steps ({counts}): record the same number of steps at each value"
    )]
    StepsDiffer {
        /// Each run's count, in words.
        counts: String,
    },
    /// A run ran out of memory: what came after is not the program's own
    /// path.
    #[error(
        "{path} ran out of memory ({at}): plan from runs that finished (the planner finds where the next value fails)"
    )]
    RecordedOom {
        /// The run.
        path: String,
        /// Where.
        at: String,
    },
    /// Two runs do not line up: different programs or code paths.
    #[error(
        "{path} does not line up with {reference}: {unmatched} of its {allocations} allocations have no partner there, and {reference_unmatched} of the {reference_allocations} there none here; the first difference at {at} (different programs, or code paths that change with the value)"
    )]
    NotLinedUp {
        /// The run.
        path: String,
        /// The run it was lined up with.
        reference: String,
        /// Its allocations without a partner there.
        unmatched: usize,
        /// Its allocations.
        allocations: usize,
        /// The reference's allocations without a partner in the run.
        reference_unmatched: usize,
        /// The reference's allocations.
        reference_allocations: usize,
        /// Where they first differ.
        at: String,
    },
    /// Nothing says how much memory to plan for.
    #[error(
        "nothing to plan for: the runs record no cap on the allocator nor their device's memory, and no device or cap is named"
    )]
    NoCapacity,
    /// The step is 0.
    #[error("the step between values must be at least 1")]
    ZeroStep,
}

/// One recorded run, and how the model reproduces it.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    /// The input's path.
    pub path: String,
    /// Its value.
    pub value: u64,
    /// Events read.
    pub events: u64,
    /// Its allocations.
    pub allocations: usize,
    /// Those without a partner in the reference run.
    pub unmatched: usize,
    /// Optimizer steps it made.
    pub steps: u64,
    /// Its recorded peak of reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Its recorded peak of allocated bytes.
    pub peak_allocated_bytes: u64,
    /// Its own requests simulated without a limit: peak reserved.
    pub simulated_peak_reserved_bytes: u64,
    /// And peak allocated.
    pub simulated_peak_allocated_bytes: u64,
    /// The model at its value, simulated without a limit: peak reserved.
    pub model_peak_reserved_bytes: u64,
    /// And peak allocated.
    pub model_peak_allocated_bytes: u64,
    /// Whether the model gives its own simulated peaks back, to the byte.
    pub reproduced: bool,
    /// Whether its requests are the ones replayed (the largest value).
    pub reference: bool,
}

/// A value simulated in full.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// The value.
    pub value: u64,
    /// Whether it runs without an OOM.
    pub fits: bool,
    /// Where it lies against the recorded values.
    pub range: Range,
    /// Its peak reserved bytes (up to the OOM, when it fails).
    pub peak_reserved_bytes: u64,
    /// Its peak allocated bytes.
    pub peak_allocated_bytes: u64,
    /// The memory planned for left over at the peak of reserved memory.
    pub spare_bytes: u64,
    /// Reserved memory holding no allocation at the peak.
    pub cached_at_peak_bytes: u64,
    /// That, as a share of the peak.
    pub fragmentation: f64,
    /// Where it first runs out of memory.
    pub oom: Option<OomDescription>,
    /// Allocations that failed but that the program survives (cuDNN
    /// workspaces: it falls back to algorithms that need less).
    pub survived_failures: u64,
}

/// The answer.
#[derive(Clone, Debug, Serialize)]
pub struct Answer {
    /// The largest value that fits (`None`: not even the step fits, or
    /// memory does not grow; see `unbounded`).
    pub largest: Option<u64>,
    /// Memory does not grow with the value: any value fits.
    pub unbounded: bool,
    /// The search stopped at its ceiling with the value still fitting.
    pub at_ceiling: bool,
    /// Where `largest` lies against the recorded values.
    pub range: Option<Range>,
    /// The answer in one line: the text printer prints exactly this.
    pub line: String,
    /// The run at `largest`.
    pub fits: Option<Point>,
    /// The run at the next value, which fails.
    pub next: Option<Point>,
    /// When the program makes cuDNN workspaces: the largest value that fits
    /// with every workspace asked for at its fitted size (`largest` leaves
    /// them out, as when cuDNN falls back to algorithms without one).
    pub largest_with_workspaces: Option<u64>,
    /// Simulations the search ran.
    pub simulations: u32,
}

/// The allocations of one law.
#[derive(Clone, Debug, Serialize)]
pub struct LawRow {
    /// The law.
    pub law: LawKind,
    /// It in words.
    pub words: &'static str,
    /// Allocations before the end of the first optimizer step (set-up).
    pub setup_allocations: usize,
    /// Allocations after it (the steady state).
    pub steady_allocations: usize,
    /// Bytes its allocations hold at the peak of allocated memory of the
    /// largest value that fits (or of the reference run).
    pub bytes: u64,
}

/// A site whose allocations follow no simple law.
#[derive(Clone, Debug, Serialize)]
pub struct NoLawSite {
    /// The site.
    pub site: String,
    /// Its allocations without a law.
    pub allocations: usize,
    /// The first one's size in each run, by value.
    pub sizes: Vec<(u64, u64)>,
}

/// The full simulated result at one value.
#[derive(Clone, Debug, Serialize)]
pub struct AtValue {
    /// The run.
    #[serde(flatten)]
    pub point: Point,
    /// What the live allocations held at the peak of allocated memory.
    pub categories: CategoryTable,
    /// Bytes of each law live at that peak.
    pub laws: Vec<(LawKind, u64)>,
    /// The result in one line.
    pub line: String,
}

/// Another allocator setting's answer.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyAnswer {
    /// Its name.
    pub policy: String,
    /// Its settings as `PYTORCH_CUDA_ALLOC_CONF`.
    pub alloc_conf: String,
    /// Its largest fitting value.
    pub largest: Option<u64>,
    /// Memory does not grow with the value.
    pub unbounded: bool,
}

/// Whether the figures come from runs fitted, or from one run and an
/// assumption.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Two or more runs, every size fitted exactly.
    Runs,
    /// One run: activations and temporaries assumed to scale.
    OneRun,
}

/// A plan.
#[derive(Clone, Debug, Serialize)]
pub struct PlanResult {
    /// What the runs vary.
    pub varied: Varied,
    /// Where the figures come from.
    pub basis: Basis,
    /// How the figures are to be taken: `inferred` (from laws fitted
    /// exactly through two or more runs) or `estimate` (one run).
    pub figures: &'static str,
    /// The runs, in the order given.
    pub runs: Vec<RunSummary>,
    /// The device planned for, named or the one recorded (none under a
    /// cap).
    pub device: Option<Device>,
    /// The memory the allocator gets.
    pub capacity_bytes: u64,
    /// The allocator's cap planned for, when one is.
    pub cap_bytes: Option<u64>,
    /// The cap recorded by the runs, when it is the one planned for.
    pub limit: Option<Limit>,
    /// The memory kept off the device (only with a device).
    pub reserve: Option<Reserve>,
    /// The policy planned for.
    pub policy: String,
    /// Its settings as `PYTORCH_CUDA_ALLOC_CONF`.
    pub alloc_conf: String,
    /// Values are multiples of this.
    pub step: u64,
    /// The answer.
    pub answer: Answer,
    /// Every value simulated in full, ascending.
    pub points: Vec<Point>,
    /// The allocations of each law.
    pub laws: Vec<LawRow>,
    /// The sites whose allocations follow no simple law, most first.
    pub no_law: Vec<NoLawSite>,
    /// The value asked for in full.
    pub at: Option<AtValue>,
    /// Other settings' answers.
    pub other_policies: Vec<PolicyAnswer>,
    /// What the reader should know.
    pub notes: Vec<String>,
    /// How long reading and planning took.
    #[serde(skip)]
    pub timing: PlanTiming,
}

/// How long a plan took, for the performance notes.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlanTiming {
    /// Seconds reading the runs.
    pub read_s: f64,
    /// Seconds lining up and fitting.
    pub fit_s: f64,
    /// Seconds simulating.
    pub simulate_s: f64,
}

/// A report's line on how far the varied value can go, planned from the
/// run and its baseline recorded at another value.
#[derive(Clone, Debug, Serialize)]
pub struct FitsUpTo {
    /// What the runs vary, when planned.
    pub varied: Option<Varied>,
    /// The largest value that fits, when found.
    pub largest: Option<u64>,
    /// The plan's answer in one line, or why there is none.
    pub line: String,
}
