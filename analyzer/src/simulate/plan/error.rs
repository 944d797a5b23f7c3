//! Why a plan cannot be made from the runs given: the planner's errors, in
//! the library's terms (the binary words those about flags).

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
