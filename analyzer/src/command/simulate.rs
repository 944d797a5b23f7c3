//! `simulate`: a trace's requests replayed under another GPU size or
//! allocator setting (see [`crate::simulate`]).

use super::Warning;
use crate::Error;
use crate::input::Input;
use crate::progress::Progress;
use crate::simulate::{
    self, Extracted, Fidelity, ScenarioResult, SimOptions, extract, scenarios, sweep,
};
use crate::units;
use serde::Serialize;
use vramtrace_format::EventSource;
use vramtrace_recorder::allocator::AllocatorConfig;

/// What `simulate` runs.
#[derive(Clone, Debug, Default)]
pub struct SimulateOptions {
    /// Device memory; unlimited when `None`.
    pub capacity: Option<u64>,
    /// Settings to simulate, besides (or, when none, instead of) the
    /// recorded ones.
    pub settings: Vec<AllocatorConfig>,
    /// Also the standard policies ([`simulate::Scenario::standard`]).
    pub standard_policies: bool,
    /// Find each policy's smallest capacity without an OOM.
    pub min_capacity: bool,
    /// Time buckets of memory over time for a chart (0: none).
    pub chart_buckets: usize,
}

/// Where a simulated run first ran out of memory, described.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OomDescription {
    /// Allocated bytes then.
    pub allocated_bytes: u64,
    /// The index of the trace event that made the request.
    pub event_index: u64,
    /// Free bytes after flushing the cache.
    pub free_bytes: u64,
    /// The phase path open then.
    pub phase: String,
    /// Whether the recorded run ran out of memory here too.
    pub recorded: bool,
    /// The failed request.
    pub requested_bytes: u64,
    /// Reserved bytes then.
    pub reserved_bytes: u64,
    /// How many more bytes the request needed.
    pub shortfall_bytes: u64,
    /// The requesting site.
    pub site: String,
    /// The request's stream.
    pub stream: u64,
    /// Its time since the trace start.
    pub time_ns: u64,
}

/// One policy's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyResult {
    /// The run and its smallest capacity.
    #[serde(flatten)]
    pub scenario: ScenarioResult,
    /// The first OOM, described.
    pub oom: Option<OomDescription>,
    /// The smallest capacity that fits, when asked for.
    pub min_capacity_bytes: Option<u64>,
}

/// What the recorded run did.
#[derive(Clone, Debug, Serialize)]
pub struct Recorded {
    /// Its settings, as `PYTORCH_CUDA_ALLOC_CONF`, when readable.
    pub alloc_conf: Option<String>,
    /// Its out-of-memory events.
    pub ooms: u64,
    /// Its peak of allocated bytes.
    pub peak_allocated_bytes: u64,
    /// Its peak of reserved bytes.
    pub peak_reserved_bytes: u64,
}

/// A simulation of every policy asked for. The first policy's figures are
/// repeated at the top level. Its JSON keys are in alphabetical order, as
/// `simulate --json` has always printed them.
#[derive(Clone, Debug, Serialize)]
pub struct SimulateResult {
    /// The first policy's allocation retries.
    pub alloc_retries: u64,
    /// The first policy's cache flushes.
    pub cache_flushes: u64,
    /// The device memory simulated (unlimited when absent).
    pub capacity_bytes: Option<u64>,
    /// Events read.
    pub events: u64,
    /// How exactly the recorded settings reproduce the recording, when they
    /// can be read.
    pub fidelity: Option<Fidelity>,
    /// The first policy's fragmentation at its peak.
    pub fragmentation: f64,
    /// The first policy's smallest capacity, when asked for.
    pub min_capacity_bytes: Option<u64>,
    /// What the reader should know about how the requests were read.
    pub notes: Vec<String>,
    /// The first policy's first OOM.
    pub oom: Option<OomDescription>,
    /// The input's path.
    pub path: String,
    /// The first policy's peak allocated bytes.
    pub peak_allocated_bytes: u64,
    /// The first policy's peak reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Every policy, in order.
    pub policies: Vec<PolicyResult>,
    /// The first policy's name.
    pub policy: String,
    /// What the recorded run did.
    pub recorded: Recorded,
    /// Requests replayed.
    pub requests: usize,
    /// What reading the input found worth a warning.
    #[serde(skip)]
    pub warnings: Vec<Warning>,
    /// How long reading and simulating took, in seconds, and the bytes the
    /// requests took.
    #[serde(skip)]
    pub timing: Timing,
}

/// How long a simulation took, for the performance notes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timing {
    /// Seconds reading the requests.
    pub read_s: f64,
    /// Seconds simulating.
    pub simulate_s: f64,
    /// Simulations run (without the bisections of the smallest capacity).
    pub runs: usize,
    /// Bytes of the request list.
    pub list_bytes: usize,
}

/// Reads an input's requests once, then simulates every policy asked for
/// (in parallel), and the recorded settings' fidelity beside them.
pub fn simulate(
    input: &Input,
    options: &SimulateOptions,
    progress: &dyn Progress,
) -> Result<SimulateResult, Error> {
    let started = std::time::Instant::now();
    let mut events = input.events()?;
    let meter = progress.begin(input.pass_work(&events));
    let extracted =
        extract(&mut events, &*meter).map_err(|e| super::pass_error(input.path(), e))?;
    drop(meter);
    let mut warnings = Vec::new();
    if let Some(t) = extracted.info.truncation {
        warnings.push(Warning::Truncated(t));
    }
    let recorded = match &extracted.recorded_config {
        Ok((config, _)) => Ok(config.clone()),
        Err(e) => Err(e.clone()),
    };
    let scenarios = scenarios(
        &recorded,
        options.settings.clone(),
        options.standard_policies,
    )
    .map_err(|source| Error::Simulate {
        path: input.path().to_owned(),
        source,
    })?;
    let sim = SimOptions {
        capacity: options.capacity,
        samples: options.chart_buckets,
        ..Default::default()
    };
    if let Err(e) = &recorded {
        warnings.push(Warning::UnreadableSettings(e.to_string()));
    }
    let recorded = recorded.ok();
    let list = &extracted.list;
    let read_s = started.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    let (results, fidelity) = rayon::join(
        || sweep(list, &scenarios, &sim, options.min_capacity),
        || {
            recorded
                .as_ref()
                .map(|c| simulate::fidelity(list, c, extracted.recorded_capacity))
        },
    );
    let timing = Timing {
        read_s,
        simulate_s: started.elapsed().as_secs_f64(),
        runs: scenarios.len() + usize::from(fidelity.is_some()),
        list_bytes: list.memory_bytes(),
    };
    let symbols = events.symbols();
    let policies: Vec<PolicyResult> = results
        .into_iter()
        .map(|r| PolicyResult {
            oom: describe_oom(&r, &extracted, symbols),
            min_capacity_bytes: r.min_capacity.map(|m| m.bytes),
            scenario: r,
        })
        .collect();
    let first = &policies[0];
    Ok(SimulateResult {
        alloc_retries: first.scenario.result.alloc_retries,
        cache_flushes: first.scenario.result.cache_flushes,
        capacity_bytes: options.capacity,
        events: list.events,
        fidelity,
        fragmentation: first.scenario.result.fragmentation,
        min_capacity_bytes: first.min_capacity_bytes,
        notes: notes(&extracted),
        oom: first.oom.clone(),
        path: input.path().display().to_string(),
        peak_allocated_bytes: first.scenario.result.peak_allocated_bytes,
        peak_reserved_bytes: first.scenario.result.peak_reserved_bytes,
        policy: first.scenario.policy.clone(),
        recorded: Recorded {
            alloc_conf: recorded.as_ref().map(|c| c.to_conf_string()),
            ooms: list.recorded_ooms,
            peak_allocated_bytes: list.recorded_peak_allocated,
            peak_reserved_bytes: list.recorded_peak_reserved,
        },
        requests: list.requests.len(),
        policies,
        warnings,
        timing,
    })
}

fn describe_oom(
    r: &ScenarioResult,
    extracted: &Extracted,
    symbols: &vramtrace_format::SymbolTable,
) -> Option<OomDescription> {
    let o = r.result.first_oom.as_ref()?;
    Some(OomDescription {
        allocated_bytes: o.allocated_bytes,
        event_index: o.event_index,
        free_bytes: o.free_bytes,
        phase: extracted.state.phase_path(o.phase, symbols),
        recorded: o.recorded,
        requested_bytes: o.requested_bytes,
        reserved_bytes: o.reserved_bytes,
        shortfall_bytes: o.shortfall_bytes,
        site: extracted.state.sites().name(o.site, symbols),
        stream: o.stream,
        time_ns: o.time_ns,
    })
}

/// What the reader should know about how the requests were read.
fn notes(e: &Extracted) -> Vec<String> {
    let l = &e.list;
    let mut notes = Vec::new();
    if l.inferred_empty_cache > 0 {
        notes.push(format!(
            "{} empty_cache() calls inferred from bursts of segment frees not followed by an OOM (the trace records none)",
            l.inferred_empty_cache
        ));
    }
    if l.recorded_ooms > 0 {
        notes.push(format!(
            "the recorded run ran out of memory {} times; those requests are tried again, and freed at once where they fit, since the program went on without them",
            l.recorded_ooms
        ));
    }
    if !l.initial_segments.is_empty() {
        notes.push(format!(
            "the trace starts mid-run: the simulation starts from its {} segments ({} reserved) at their recorded sizes and layout, with {} live blocks ({})",
            l.initial_segments.len(),
            units::bytes(l.initial_reserved),
            l.initial_live_blocks,
            units::bytes(l.initial_live_bytes)
        ));
    }
    notes
}
