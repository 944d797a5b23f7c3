//! What `plan` answers, and `plan --kv-cache`: their result types (their
//! errors are [`PlanError`](crate::simulate::plan::PlanError)).

use super::law::LawKind;
use super::{Found, Range, Varied};
use crate::analysis::categories::CategoryTable;
use crate::analysis::limits::Limit;
use crate::simulate::Fidelity;
use crate::simulate::Reserve;
use crate::simulate::kv::{CaptureFit, KvCacheAllocation, KvCacheFit};
use crate::simulate::verdict::{Device, OomDescription};
use serde::Serialize;

/// Where a plan is for, as its sentences name it
/// ([`print::words::plan`](crate::print::words::plan)).
#[derive(Clone, Debug, PartialEq)]
pub enum Place {
    /// On a device (its name).
    Device(String),
    /// Under the cap the runs recorded.
    Limit(Limit),
    /// Under a cap named.
    Cap(u64),
    /// In this much memory.
    Capacity(u64),
}

/// What a plan's sentences frame its figures with: what the runs vary,
/// where the figures come from, the values recorded, and where the plan is
/// for.
#[derive(Clone, Debug, PartialEq)]
pub struct Framing {
    /// What the runs vary.
    pub varied: Varied,
    /// Where the figures come from.
    pub basis: Basis,
    /// The lowest and highest value recorded.
    pub recorded: (u64, u64),
    /// Where the plan is for.
    pub place: Place,
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

/// The answer. As JSON (its `Serialize` is in
/// [`print::words::plan`](crate::print::words::plan)) it carries its
/// sentence as `line`, which the text printer prints exactly.
#[derive(Clone, Debug)]
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
    /// The run at `largest`.
    pub fits: Option<Point>,
    /// The run at the next value, which fails.
    pub next: Option<Point>,
    /// When the program makes cuDNN workspaces: the search with every
    /// workspace asked for at its fitted size (`largest` leaves them out, as
    /// when cuDNN falls back to algorithms without one).
    pub with_workspaces: Option<Found>,
    /// Simulations the search ran.
    pub simulations: u32,
    /// What its sentence frames the figures with.
    pub framing: Framing,
}

impl Answer {
    /// The largest value that fits with every cuDNN workspace asked for.
    pub fn largest_with_workspaces(&self) -> Option<u64> {
        self.with_workspaces.and_then(|f| f.largest)
    }
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

/// The full simulated result at one value. As JSON (its `Serialize` is in
/// [`print::words::plan`](crate::print::words::plan)) it ends with its
/// sentence, `line`.
#[derive(Clone, Debug)]
pub struct AtValue {
    /// The run.
    pub point: Point,
    /// What the live allocations held at the peak of allocated memory.
    pub categories: CategoryTable,
    /// Bytes of each law live at that peak.
    pub laws: Vec<(LawKind, u64)>,
    /// What its sentence frames the figures with.
    pub framing: Framing,
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
    /// What the reader should know (each a sentence in JSON).
    pub notes: Vec<Note>,
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

/// What a plan's reader should know, worded by
/// [`print::words::plan::note`](crate::print::words::plan::note) (and so
/// in JSON: its `Serialize` is there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// One run only: activations and temporaries assumed to scale.
    OneRun(Varied),
    /// Two runs: a law that changes outside them is not seen.
    TwoRuns(Varied),
    /// A run whose allocations have no partner in the run replayed.
    Unmatched {
        /// The run's path.
        path: String,
        /// Its allocations without a partner.
        unmatched: usize,
        /// The reference run's allocations without one in it.
        reference_unmatched: usize,
    },
    /// The cuDNN workspaces left out of the answer.
    Workspaces(usize),
    /// The replayed run starts mid-run.
    MidRun,
    /// Many allocations follow no law: one more run at `next` fits them.
    Loose {
        /// What the runs vary.
        varied: Varied,
        /// Allocations that follow no law.
        loose: usize,
        /// All allocations.
        total: usize,
        /// The value of the run to record.
        next: u64,
    },
    /// Two runs: a third, inside what fits, would show a size that stops
    /// growing.
    ThirdRun {
        /// What the runs vary.
        varied: Varied,
        /// The value of the run to record.
        value: u64,
    },
    /// The reserve stated is not taken off the recorded cap.
    ReserveOffCap,
}

/// A report's line on how far the varied value can go, planned from the
/// run and its baseline recorded at another value. As JSON (its
/// `Serialize` is in [`print::words::plan`](crate::print::words::plan)):
/// `varied`, `largest`, and `line`, the answer's sentence or why there is
/// none.
#[derive(Clone, Debug)]
pub struct FitsUpTo {
    /// What the runs vary, when planned.
    pub varied: Option<Varied>,
    /// The largest value that fits, when found.
    pub largest: Option<u64>,
    /// The plan's answer, or why there is none.
    pub planned: Result<Box<Answer>, String>,
}

/// How many of the recorded CUDA graphs fit beside a given KV cache.
#[derive(Clone, Debug, Serialize)]
pub struct CapturePlan {
    /// The KV cache planned for, in bytes.
    pub kv_bytes: u64,
    /// The search.
    pub fit: CaptureFit,
    /// The batch size of each recorded capture, in capture order, when
    /// given.
    pub batches: Option<Vec<u64>>,
    /// The largest batch size among the graphs that fit, when the batch
    /// sizes were given and one fits.
    pub largest_batch: Option<u64>,
    /// `estimate`: a graph left out allocates nothing in its pool, but its
    /// eager warm-up stays in the replay.
    pub basis: &'static str,
    /// Where one graph more runs out of memory: its site.
    #[serde(skip)]
    pub next_oom_site: Option<String>,
}

/// Where a KV cache is planned for, as its sentences name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvPlace {
    /// On a device (its name).
    Device(String),
    /// Under a cap.
    Cap(u64),
    /// On the card the run was recorded on.
    RecordedCard,
}

/// The largest KV cache that fits, and how it is known. As JSON (its
/// `Serialize` is in [`print::words::kv`](crate::print::words::kv)) it
/// carries its answer, `line`, why it is exact or an estimate,
/// `basis_note`, and where it is for, `place`, in words.
#[derive(Clone, Debug)]
pub struct KvPlanResult {
    /// The input's path.
    pub path: String,
    /// `exact` when the recorded run replays to the byte with the settings
    /// planned for, else `estimate`.
    pub basis: &'static str,
    /// The recorded run replayed under its own card and cap, which decides
    /// the basis.
    pub fidelity: Fidelity,
    /// The allocation taken for the KV cache.
    pub kv_cache: KvCacheAllocation,
    /// Its site.
    pub site: String,
    /// A KV block's bytes, when given.
    pub block_bytes: Option<u64>,
    /// The KV cache the recording allocated, in blocks (when given).
    pub recorded_blocks: Option<u64>,
    /// The search.
    pub fit: KvCacheFit,
    /// The largest KV cache that fits, in blocks (when given).
    pub largest_blocks: Option<u64>,
    /// Where one unit more runs out of memory: its site.
    pub next_oom_site: Option<String>,
    /// Where the plan is for.
    pub place: KvPlace,
    /// The private pools replayed (CUDA graphs' and `MemPool`s').
    pub pools: usize,
    /// The inverse question, for a given KV cache: how many graphs fit.
    pub captures: Option<CapturePlan>,
}
