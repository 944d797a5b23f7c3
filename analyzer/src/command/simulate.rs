//! `simulate`: a trace's requests replayed under another GPU size or
//! allocator setting (see [`crate::simulate`]).

use super::{ByDevice, OnDevice, Warning};
use crate::Error;
use crate::analysis::Devices;
use crate::analysis::limits::Limit;
use crate::input::EventStream;
use crate::input::Input;
use crate::progress::Progress;
use crate::simulate::fixes::FixesTried;
pub use crate::simulate::verdict::{
    Device, Judged, Note, OomDescription, Outcome, PolicyResult, Verdict, VerdictBasis, describe,
    judge, notes,
};
use crate::simulate::{self, Extracted, Fidelity, Reserve, Target, extract, what_if};
use serde::Serialize;
use vramtrace_allocator::AllocatorConfig;
use vramtrace_format::EventSource;

/// What `simulate` runs.
#[derive(Clone, Debug, Default)]
pub struct SimulateOptions {
    /// The device: its memory; unlimited when `None`.
    pub device: Option<Device>,
    /// Memory kept off the allocator's device (the CUDA context, NCCL);
    /// estimated when `None` (see [`Reserve::estimate`]).
    pub reserve: Option<u64>,
    /// Settings to simulate, besides (or, when none, instead of) the
    /// recorded ones.
    pub settings: Vec<AllocatorConfig>,
    /// Also the standard policies ([`simulate::Scenario::standard`]).
    pub standard_policies: bool,
    /// Find each policy's smallest capacity without an OOM.
    pub min_capacity: bool,
    /// Time buckets of memory over time for a chart (0: none).
    pub chart_buckets: usize,
    /// The one recorded device simulated; `None`: each in turn.
    pub recorded_device: Option<u32>,
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
    /// The memory the allocator was given: the device's less the reserve
    /// (unlimited when absent).
    pub capacity_bytes: Option<u64>,
    /// The device (none: unlimited).
    pub device: Option<Device>,
    /// Events read.
    pub events: u64,
    /// How exactly the recorded settings reproduce the recording, when they
    /// can be read.
    pub fidelity: Option<Fidelity>,
    /// Where the first policy runs out of memory: the fixes tried, each
    /// replayed, those that got past the failure first.
    pub fixes: Option<FixesTried>,
    /// The first policy's fragmentation at its peak.
    pub fragmentation: f64,
    /// The allocator's recorded limit (or a cap inferred from an OOM), when
    /// known: without `--capacity` or `--gpu`, a cap is the capacity
    /// simulated, with no reserve taken off (it bounds reserved memory only).
    pub limit: Option<Limit>,
    /// The first policy's smallest device memory, the reserve included,
    /// when asked for.
    pub min_capacity_bytes: Option<u64>,
    /// What the reader should know about how the requests were read (each
    /// a sentence in JSON).
    pub notes: Vec<Note>,
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
    /// The memory kept off the allocator's device.
    pub reserve: Reserve,
    /// Does it fit, and if not, where it fails, in one line.
    pub verdict: Verdict,
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

/// Reads an input's requests once, each device's apart, then simulates
/// every policy asked for (in parallel) on each device in turn, and the
/// recorded settings' fidelity beside them: a capacity is one GPU's.
pub fn simulate(
    input: &Input,
    options: &SimulateOptions,
    progress: &dyn Progress,
) -> Result<ByDevice<SimulateResult>, Error> {
    let started = std::time::Instant::now();
    let mut events = input.events()?;
    let meter = progress.begin(input.pass_work(&events));
    let devices = options
        .recorded_device
        .map_or(Devices::Apart, Devices::Only);
    let extracted =
        extract(&mut events, devices, &*meter).map_err(|e| super::pass_error(input.path(), e))?;
    drop(meter);
    if let (Some(device), true) = (options.recorded_device, extracted.devices.is_empty()) {
        return Err(Error::NoSuchDevice {
            path: input.path().to_owned(),
            device,
            seen: extracted.seen,
        });
    }
    let read_s = started.elapsed().as_secs_f64();
    let mut result = ByDevice {
        devices: Vec::new(),
        rank: super::ranks::header_rank(events.header()),
        warnings: Vec::new(),
    };
    for extracted in extracted.devices {
        let peaks = extracted.peaks.clone();
        let one = simulate_device(input, options, &extracted, &events, read_s)?;
        result.devices.push(OnDevice { peaks, result: one });
    }
    Ok(result)
}

/// Simulates one device's requests: the policies and the capacity decided
/// here, the runs in [`simulate::what_if::run`], the answer in words by
/// [`judge`].
fn simulate_device(
    input: &Input,
    options: &SimulateOptions,
    extracted: &Extracted,
    events: &EventStream,
    read_s: f64,
) -> Result<SimulateResult, Error> {
    let simulate_error = |source| Error::Simulate {
        path: input.path().to_owned(),
        source,
    };
    let mut warnings = what_if::read_warnings(extracted);
    let (scenarios, recorded) = what_if::policies(
        extracted,
        &options.settings,
        options.standard_policies,
        &mut warnings,
    )
    .map_err(simulate_error)?;
    let symbols = events.symbols();
    let nccl = simulate::shows_nccl(events.header(), symbols);
    let limits = &extracted.limits;
    warnings.extend(limits.warnings.iter().cloned().map(Warning::Memory));
    let device_bytes = options.device.as_ref().map(|d| d.total_bytes);
    let measured = limits.outside.map(|o| o.max_bytes);
    let (reserve, too_large) = Reserve::for_device(
        options.reserve,
        measured,
        nccl,
        device_bytes.unwrap_or(u64::MAX),
    );
    warnings.extend(too_large.map(Warning::Memory));
    let target = Target::resolve(device_bytes, &reserve, limits.cap()).map_err(simulate_error)?;
    let asked = what_if::Asked {
        scenarios: &scenarios,
        recorded: recorded.as_ref(),
        target,
        reserve: &reserve,
        samples: options.chart_buckets,
        standard_policies: options.standard_policies,
        min_capacity: options.min_capacity,
    };
    let mut runs = what_if::run(extracted, symbols, &asked);
    let timing = Timing {
        read_s,
        simulate_s: runs.simulate_s,
        runs: runs.runs,
        list_bytes: extracted.list.memory_bytes(),
    };
    let (policies, verdict) = judge(
        options.device.as_ref(),
        &reserve,
        target,
        &mut runs,
        extracted,
        symbols,
    );
    let found = Found {
        policies,
        verdict,
        fixes: runs.fixes,
        fidelity: runs.fidelity,
        target,
        reserve,
        recorded,
        warnings,
        timing,
    };
    Ok(found.into_result(input, options, extracted))
}

/// What one device's simulation found, before it is laid out as a
/// [`SimulateResult`].
struct Found {
    policies: Vec<PolicyResult>,
    verdict: Verdict,
    fixes: Option<FixesTried>,
    fidelity: Option<Fidelity>,
    target: Target,
    reserve: Reserve,
    recorded: Option<AllocatorConfig>,
    warnings: Vec<Warning>,
    timing: Timing,
}

impl Found {
    /// The result, the first policy's figures repeated at its top level.
    fn into_result(
        self,
        input: &Input,
        options: &SimulateOptions,
        extracted: &Extracted,
    ) -> SimulateResult {
        let list = &extracted.list;
        let first = &self.policies[0];
        SimulateResult {
            alloc_retries: first.scenario.result.alloc_retries,
            cache_flushes: first.scenario.result.cache_flushes,
            capacity_bytes: self.target.capacity,
            device: options.device.clone(),
            events: list.events,
            fidelity: self.fidelity,
            fixes: self.fixes,
            fragmentation: first.scenario.result.fragmentation,
            limit: extracted.limits.limit,
            min_capacity_bytes: first.min_capacity_bytes,
            notes: notes(extracted),
            oom: first.oom.clone(),
            path: input.path().display().to_string(),
            peak_allocated_bytes: first.scenario.result.peak_allocated_bytes,
            peak_reserved_bytes: first.scenario.result.peak_reserved_bytes,
            policy: first.scenario.policy.clone(),
            recorded: Recorded {
                alloc_conf: self.recorded.as_ref().map(|c| c.to_conf_string()),
                ooms: list.recorded_ooms,
                peak_allocated_bytes: list.recorded_peak_allocated,
                peak_reserved_bytes: list.recorded_peak_reserved,
            },
            requests: list.requests.len(),
            reserve: self.reserve,
            verdict: self.verdict,
            policies: self.policies,
            warnings: self.warnings,
            timing: self.timing,
        }
    }
}
