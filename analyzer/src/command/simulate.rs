//! `simulate`: a trace's requests replayed under another GPU size or
//! allocator setting (see [`crate::simulate`]).

use super::{ByDevice, OnDevice, Warning};
use crate::Error;
use crate::analysis::Devices;
use crate::analysis::categories::CategoryTable;
use crate::analysis::limits::Limit;
use crate::input::EventStream;
use crate::input::Input;
use crate::progress::Progress;
use crate::simulate::fixes::FixesTried;
use crate::simulate::gpus::{self, GpuPreset};
use crate::simulate::{
    self, Extracted, Fidelity, Reserve, Scenario, ScenarioResult, SimulateError, Target, extract,
    scenarios, what_if,
};
use crate::sites::site_label;
use crate::units;
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

/// The device a what-if runs on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Device {
    /// Its name in verdicts: a preset's (`H100 80GB`), or its memory.
    pub name: String,
    /// Its memory, as a process sees it.
    pub total_bytes: u64,
    /// Where that figure comes from, for a preset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl Device {
    /// A device of `total_bytes`, named by its memory.
    pub fn of_size(total_bytes: u64) -> Device {
        Device {
            name: units::capacity(total_bytes),
            total_bytes,
            source: None,
        }
    }

    /// A preset GPU.
    pub fn preset(gpu: &GpuPreset) -> Device {
        Device {
            name: gpu.name.to_string(),
            total_bytes: gpu.usable_bytes,
            source: Some(gpu.source.to_string()),
        }
    }
}

/// How a what-if ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The run fits on the device.
    Fits,
    /// It runs out of memory there.
    OutOfMemory,
    /// No device was given: what it needs.
    Needs,
}

/// The answer in one line, and the figures behind it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// How it ends.
    pub outcome: Outcome,
    /// The verdict as one line of text: the text printer prints exactly this.
    pub line: String,
    /// Device memory left over at the peak, when it fits.
    pub spare_bytes: Option<u64>,
    /// The device memory the run needs, the reserve included: its smallest
    /// capacity when found, else (no device given) its peak reserved.
    pub needs_bytes: Option<u64>,
    /// The first other policy that fits where the first runs out.
    pub fits_with: Option<String>,
    /// Whether the answer is exact: the recorded settings replay the
    /// recorded run's every device action and its reserved peak to the
    /// byte. Otherwise it is an estimate, and its line begins so.
    pub basis: VerdictBasis,
    /// Why, in words.
    pub basis_note: String,
}

/// How far a verdict can be trusted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictBasis {
    /// The replay of the recorded run is exact.
    Exact,
    /// The replay of the recorded run differs from it, or cannot be
    /// checked.
    #[default]
    Estimate,
}

/// The verdict's basis: exact where the recorded run replays exactly.
fn basis_of(fidelity: Option<&Fidelity>) -> (VerdictBasis, String) {
    match fidelity {
        Some(f) if f.exact => (
            VerdictBasis::Exact,
            format!(
                "exact: the recorded run replays to the byte ({} device actions, reserved peak {})",
                units::count(f.recorded_segment_actions as u64),
                units::bytes(f.recorded_peak_reserved_bytes)
            ),
        ),
        Some(f) => (
            VerdictBasis::Estimate,
            format!(
                "estimate: the replay of the recorded run is not exact ({} device actions against {} recorded, reserved peak {} against {})",
                units::count(f.simulated_segment_actions as u64),
                units::count(f.recorded_segment_actions as u64),
                units::bytes(f.simulated_peak_reserved_bytes),
                units::bytes(f.recorded_peak_reserved_bytes)
            ),
        ),
        None => (
            VerdictBasis::Estimate,
            "estimate: the trace does not say its allocator settings, so the replay of the recorded run cannot be checked".into(),
        ),
    }
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
    /// Bytes still cached free in segments then.
    pub cached_free_bytes: u64,
    /// The largest of those cached free blocks.
    pub largest_free_block: u64,
    /// The phase path open then (JSON `null` outside phases).
    #[serde(with = "crate::analysis::summary::open_phase")]
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
    /// What the allocated memory held then, by category.
    pub categories: CategoryTable,
}

/// One policy's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyResult {
    /// The run and its smallest capacity.
    #[serde(flatten)]
    pub scenario: ScenarioResult,
    /// The first OOM, described.
    pub oom: Option<OomDescription>,
    /// The smallest device memory that fits, the reserve included, when
    /// asked for.
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
    let mut warnings = device_warnings(extracted);
    let (scenarios, recorded) =
        policies(options, extracted, &mut warnings).map_err(simulate_error)?;
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
    let (policies, verdict) = judge(options, &reserve, target, &mut runs, extracted, symbols);
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

/// The policies to simulate, and the recorded settings when readable (a
/// warning says why not).
fn policies(
    options: &SimulateOptions,
    extracted: &Extracted,
    warnings: &mut Vec<Warning>,
) -> Result<(Vec<Scenario>, Option<AllocatorConfig>), SimulateError> {
    let recorded = match &extracted.recorded_config {
        Ok((config, _)) => Ok(config.clone()),
        Err(e) => Err(e.clone()),
    };
    let scenarios = scenarios(
        &recorded,
        options.settings.clone(),
        options.standard_policies,
    )?;
    if let Err(e) = &recorded {
        warnings.push(Warning::UnreadableSettings(e.to_string()));
    }
    Ok((scenarios, recorded.ok()))
}

/// What reading one device's requests found worth a warning.
fn device_warnings(extracted: &Extracted) -> Vec<Warning> {
    let mut warnings = Vec::new();
    if let Some(t) = extracted.info.truncation {
        warnings.push(Warning::Truncated(t));
    }
    if extracted.info.skipped_devices > 0 {
        warnings.push(Warning::TooManyDevices {
            devices: extracted.info.skipped_devices,
            events: extracted.info.skipped_events,
        });
    }
    warnings
}

/// Each policy's outcome described (its run taken out of `runs`), and the
/// verdict on the first: under the cap, or on the device (or none) asked
/// for, exact or an estimate.
fn judge(
    options: &SimulateOptions,
    reserve: &Reserve,
    target: Target,
    runs: &mut what_if::Runs,
    extracted: &Extracted,
    symbols: &vramtrace_format::SymbolTable,
) -> (Vec<PolicyResult>, Verdict) {
    let policies: Vec<PolicyResult> = std::mem::take(&mut runs.results)
        .into_iter()
        .map(|r| PolicyResult {
            oom: describe_oom(&r, extracted, symbols),
            min_capacity_bytes: r
                .min_capacity
                .map(|m| m.bytes.saturating_add(reserve.bytes)),
            scenario: r,
        })
        .collect();
    let mut verdict = match target.cap {
        Some(cap) => cap_verdict(&cap, &policies, &runs.others, runs.cap_needs),
        None => verdict(
            options.device.as_ref(),
            reserve,
            &policies,
            &runs.others,
            runs.needed,
        ),
    };
    (verdict.basis, verdict.basis_note) = basis_of(runs.fidelity.as_ref());
    if verdict.basis == VerdictBasis::Estimate {
        verdict.line = format!("estimate: {}", verdict.line);
    }
    (policies, verdict)
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

/// The verdict on the first policy: does it fit, and if not, where and why
/// it fails, and which other policy fits.
fn verdict(
    device: Option<&Device>,
    reserve: &Reserve,
    policies: &[PolicyResult],
    others: &[ScenarioResult],
    needed: Option<u64>,
) -> Verdict {
    let first = &policies[0];
    let peak_reserved = first.scenario.result.peak_reserved_bytes;
    let min = first.min_capacity_bytes.or(needed);
    let Some(device) = device else {
        // A measured reserve is the trace's word: saturate.
        let needs = min.unwrap_or(peak_reserved.saturating_add(reserve.bytes));
        let what = if min.is_some() {
            format!("needs {} of device memory", units::capacity(needs))
        } else {
            format!(
                "takes {} at its peak ({} reserved by the allocator, {} for {})",
                units::capacity(needs),
                units::capacity(peak_reserved),
                units::capacity(reserve.bytes),
                reserve_words(reserve)
            )
        };
        let cards = match gpus::smallest_holding(needs) {
            Some(g) => format!("fits on {} and larger", g.name),
            None => "more than any GPU listed (--gpu)".into(),
        };
        return Verdict {
            outcome: Outcome::Needs,
            line: format!("{what}: {cards}"),
            spare_bytes: None,
            needs_bytes: Some(needs),
            fits_with: None,
            basis: VerdictBasis::Estimate,
            basis_note: String::new(),
        };
    };
    let capacity = device.total_bytes.saturating_sub(reserve.bytes);
    let Some(oom) = &first.oom else {
        let spare = capacity.saturating_sub(peak_reserved);
        return Verdict {
            outcome: Outcome::Fits,
            line: format!(
                "fits on {} with {} to spare ({} kept for {}){}",
                device.name,
                units::capacity(spare),
                units::capacity(reserve.bytes),
                reserve_words(reserve),
                survived_words(first.scenario.result.survived_failures)
            ),
            spare_bytes: Some(spare),
            needs_bytes: min,
            fits_with: None,
            basis: VerdictBasis::Estimate,
            basis_note: String::new(),
        };
    };
    let free = oom.free_bytes + oom.cached_free_bytes;
    // Enough free memory in all, but in pieces: memory the allocator has
    // not reserved is not fragmented, so the two parts are told apart.
    let why = if free >= oom.requested_bytes {
        format!(
            "with {} free in pieces: {} unreserved on the device and {} cached (largest cached block {})",
            units::bytes(free),
            units::bytes(oom.free_bytes),
            units::bytes(oom.cached_free_bytes),
            units::bytes(oom.largest_free_block)
        )
    } else {
        format!("with {} free", units::bytes(free))
    };
    let fits_with = first_fitting(policies, others);
    let remedy = match (&fits_with, min) {
        (Some(policy), _) => format!("; {policy} fits"),
        (None, Some(min)) => format!(
            "; no other policy tried fits, and it needs {} of device memory (the reserve included)",
            units::capacity(min)
        ),
        (None, None) => "; no other policy tried fits".into(),
    };
    let phase = at_phase(oom);
    Verdict {
        outcome: Outcome::OutOfMemory,
        line: format!(
            "runs out of memory on {}{phase}, at {}, asking for {} {why}{remedy}",
            device.name,
            site_label(&oom.site),
            units::bytes(oom.requested_bytes)
        ),
        spare_bytes: None,
        needs_bytes: min,
        fits_with,
        basis: VerdictBasis::Estimate,
        basis_note: String::new(),
    }
}

/// The verdict on the first policy under the recorded (or inferred) cap:
/// does the run fit under it, and if not, where it fails and what it needs.
fn cap_verdict(
    cap: &Limit,
    policies: &[PolicyResult],
    others: &[ScenarioResult],
    needs: Option<u64>,
) -> Verdict {
    let first = &policies[0];
    let under = format!("its {}", cap.noun());
    let Some(oom) = &first.oom else {
        let spare = cap
            .bytes
            .saturating_sub(first.scenario.result.peak_reserved_bytes);
        return Verdict {
            outcome: Outcome::Fits,
            line: format!(
                "fits under {under} with {} to spare (the cap bounds reserved memory only){}",
                units::capacity(spare),
                survived_words(first.scenario.result.survived_failures)
            ),
            spare_bytes: Some(spare),
            needs_bytes: first.min_capacity_bytes,
            fits_with: None,
            basis: VerdictBasis::Estimate,
            basis_note: String::new(),
        };
    };
    let free = oom.free_bytes + oom.cached_free_bytes;
    // Unreserved, not "never reserved": the allocator may have reserved
    // and released it before.
    let why = format!(
        "with {} unreserved under the cap and {} cached free{} (largest cached block {})",
        units::bytes(oom.free_bytes),
        units::bytes(oom.cached_free_bytes),
        if free >= oom.requested_bytes {
            ", enough in all but in pieces"
        } else {
            ""
        },
        units::bytes(oom.largest_free_block)
    );
    let fits_with = first_fitting(policies, others);
    let mut remedy = String::new();
    if let Some(policy) = &fits_with {
        remedy.push_str(&format!("; {policy} fits under the same cap"));
    }
    if let Some(needs) = needs {
        remedy.push_str(&format!(
            "; it needs a cap of {} (smallest without an OOM, to 2 MiB)",
            units::capacity(needs)
        ));
    }
    let phase = at_phase(oom);
    Verdict {
        outcome: Outcome::OutOfMemory,
        line: format!(
            "runs out of memory under {under}{phase}, at {}, asking for {} {why}{remedy}",
            site_label(&oom.site),
            units::bytes(oom.requested_bytes)
        ),
        spare_bytes: None,
        needs_bytes: needs,
        fits_with,
        basis: VerdictBasis::Estimate,
        basis_note: String::new(),
    }
}

/// `; 36 times a convolution's workspace ...`: the failures a run
/// survives, when there are any.
pub(super) fn survived_words(failures: u64) -> String {
    if failures == 0 {
        return String::new();
    }
    format!(
        "; {} a convolution's cuDNN workspace cannot be allocated, and cuDNN falls back to algorithms that need less (slower)",
        units::counted(failures, "time", "times")
    )
}

/// The first other policy (named or standard) that runs without an OOM.
fn first_fitting(policies: &[PolicyResult], others: &[ScenarioResult]) -> Option<String> {
    policies[1..]
        .iter()
        .map(|p| &p.scenario)
        .chain(others)
        .find(|s| s.result.ooms == 0)
        .map(|s| s.policy.clone())
}

/// ` at iter1/backward`, or nothing outside phases.
fn at_phase(oom: &OomDescription) -> String {
    if oom.phase.is_empty() {
        String::new()
    } else {
        format!(" at {}", oom.phase)
    }
}

/// What a reserve covers, for a sentence: `the CUDA context`.
fn reserve_words(reserve: &Reserve) -> &'static str {
    if reserve.source == simulate::ReserveSource::Measured {
        return "memory outside the allocator (measured)";
    }
    match (reserve.stated, reserve.nccl) {
        (true, _) => "the stated reserve",
        (false, true) => "the CUDA context and NCCL",
        (false, false) => "the CUDA context",
    }
}

fn describe_oom(
    r: &ScenarioResult,
    extracted: &Extracted,
    symbols: &vramtrace_format::SymbolTable,
) -> Option<OomDescription> {
    let o = r.result.first_oom.as_ref()?;
    Some(describe(o, &extracted.state, symbols))
}

/// A simulated OOM described with its site's and phase's names (`state`:
/// the replay state after the pass that read the requests).
pub(super) fn describe(
    o: &simulate::OomAt,
    state: &crate::replay::ReplayState,
    symbols: &vramtrace_format::SymbolTable,
) -> OomDescription {
    OomDescription {
        allocated_bytes: o.allocated_bytes,
        event_index: o.event_index,
        free_bytes: o.free_bytes,
        cached_free_bytes: o.cached_free_bytes,
        largest_free_block: o.largest_free_block,
        phase: state.phase_path(o.phase, symbols),
        recorded: o.recorded,
        requested_bytes: o.requested_bytes,
        reserved_bytes: o.reserved_bytes,
        shortfall_bytes: o.shortfall_bytes,
        site: state.sites().name(o.site, symbols),
        stream: o.stream,
        time_ns: o.time_ns,
        categories: o.categories.clone(),
    }
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
            "the recorded run ran out of memory {}; those requests are tried again, and freed at once where they fit, since the program went on without them",
            units::counted(l.recorded_ooms, "time", "times")
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
