//! A what-if's verdict: each policy's run described (its first OOM named
//! by site and phase), and the judgement on the first policy: it fits on
//! the device or under the cap, or runs out of memory there (and which
//! other policy fits, what it needs), or, with no device given, what it
//! needs; exact where the recorded run replays to the byte; and the notes
//! on how the requests were read. The verdict and the notes hold facts; [`print::words::simulate`](crate::print::words::simulate)
//! words them.

use super::gpus::GpuPreset;
use super::{Extracted, Fidelity, Reserve, ScenarioResult, Target, what_if};
use crate::analysis::categories::CategoryTable;
use crate::analysis::limits::Limit;
use crate::units;
use serde::Serialize;

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

/// The answer on the first policy, and the figures behind it. As JSON (its
/// `Serialize` is in [`print::words::simulate`](crate::print::words::simulate))
/// it carries its sentence, `line`, which the text printer prints exactly,
/// and the basis's, `basis_note`.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// How it ends.
    pub outcome: Outcome,
    /// What was judged, with the facts its sentence tells.
    pub judged: Judged,
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
    /// The replay of the recorded run that decides the basis, when the
    /// trace says its settings.
    pub fidelity: Option<Fidelity>,
}

/// What a verdict judged: the run on a device, under a cap, or (no device
/// given) what it needs.
#[derive(Clone, Debug, PartialEq)]
pub enum Judged {
    /// No device given: what the run takes ([`Verdict::needs_bytes`]).
    Needs {
        /// Whether that is the smallest capacity found, rather than the
        /// peak reserved with the reserve.
        found: bool,
        /// The run's peak of reserved bytes.
        peak_reserved_bytes: u64,
        /// The memory kept off the device.
        reserve: Reserve,
    },
    /// It fits on the device ([`Verdict::spare_bytes`] to spare).
    FitsOnDevice {
        /// The device's name.
        device: String,
        /// The memory kept off it.
        reserve: Reserve,
        /// The failures the run survives (cuDNN workspaces).
        survived_failures: u64,
    },
    /// It runs out of memory on the device.
    OomOnDevice {
        /// The device's name.
        device: String,
        /// Where.
        oom: Box<OomDescription>,
    },
    /// It fits under the cap.
    FitsUnderCap {
        /// The cap.
        cap: Limit,
        /// The failures the run survives (cuDNN workspaces).
        survived_failures: u64,
    },
    /// It runs out of memory under the cap.
    OomUnderCap {
        /// The cap.
        cap: Limit,
        /// Where.
        oom: Box<OomDescription>,
    },
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

/// Each policy's outcome described (its run taken out of `runs`), and the
/// verdict on the first: under the cap, or on the device (or none) asked
/// for, exact or an estimate.
pub fn judge(
    device: Option<&Device>,
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
    let fits_with = first_fitting(&policies, &runs.others);
    let (outcome, judged, spare_bytes, needs_bytes) = match target.cap {
        Some(cap) => cap_verdict(cap, &policies[0], runs.cap_needs),
        None => verdict(device, reserve, &policies[0], runs.needed),
    };
    let exact = runs.fidelity.as_ref().is_some_and(|f| f.exact);
    let verdict = Verdict {
        outcome,
        judged,
        spare_bytes,
        needs_bytes,
        fits_with: fits_with.filter(|_| outcome == Outcome::OutOfMemory),
        basis: if exact {
            VerdictBasis::Exact
        } else {
            VerdictBasis::Estimate
        },
        fidelity: runs.fidelity.clone(),
    };
    (policies, verdict)
}

/// A verdict's outcome, what it judged, the bytes to spare and those
/// needed.
type Judgement = (Outcome, Judged, Option<u64>, Option<u64>);

/// The verdict on the first policy on `device` (none: what it needs): does
/// it fit, and if not, where it fails.
fn verdict(
    device: Option<&Device>,
    reserve: &Reserve,
    first: &PolicyResult,
    needed: Option<u64>,
) -> Judgement {
    let peak_reserved = first.scenario.result.peak_reserved_bytes;
    let min = first.min_capacity_bytes.or(needed);
    let Some(device) = device else {
        // A measured reserve is the trace's word: saturate.
        let needs = min.unwrap_or(peak_reserved.saturating_add(reserve.bytes));
        let judged = Judged::Needs {
            found: min.is_some(),
            peak_reserved_bytes: peak_reserved,
            reserve: reserve.clone(),
        };
        return (Outcome::Needs, judged, None, Some(needs));
    };
    let device_name = device.name.clone();
    match &first.oom {
        None => {
            let capacity = device.total_bytes.saturating_sub(reserve.bytes);
            let judged = Judged::FitsOnDevice {
                device: device_name,
                reserve: reserve.clone(),
                survived_failures: first.scenario.result.survived_failures,
            };
            let spare = capacity.saturating_sub(peak_reserved);
            (Outcome::Fits, judged, Some(spare), min)
        }
        Some(oom) => {
            let judged = Judged::OomOnDevice {
                device: device_name,
                oom: Box::new(oom.clone()),
            };
            (Outcome::OutOfMemory, judged, None, min)
        }
    }
}

/// The verdict on the first policy under the recorded (or inferred) cap:
/// does the run fit under it, and if not, where it fails and what it needs.
fn cap_verdict(cap: Limit, first: &PolicyResult, needs: Option<u64>) -> Judgement {
    match &first.oom {
        None => {
            let spare = cap
                .bytes
                .saturating_sub(first.scenario.result.peak_reserved_bytes);
            let judged = Judged::FitsUnderCap {
                cap,
                survived_failures: first.scenario.result.survived_failures,
            };
            (Outcome::Fits, judged, Some(spare), first.min_capacity_bytes)
        }
        Some(oom) => {
            let judged = Judged::OomUnderCap {
                cap,
                oom: Box::new(oom.clone()),
            };
            (Outcome::OutOfMemory, judged, None, needs)
        }
    }
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
pub fn describe(
    o: &super::OomAt,
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

/// What the reader should know about how the requests were read, worded by
/// [`print::words::simulate::note`](crate::print::words::simulate::note)
/// (and so in JSON: its `Serialize` is there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// `empty_cache()` calls inferred from bursts of segment frees.
    InferredEmptyCache(u64),
    /// The recorded run ran out of memory this many times.
    RecordedOoms(u64),
    /// The trace starts mid-run.
    MidRun {
        /// Its segments at the start.
        segments: usize,
        /// Their reserved bytes.
        reserved_bytes: u64,
        /// Its live blocks at the start.
        live_blocks: u64,
        /// Their bytes.
        live_bytes: u64,
    },
}

/// What the reader should know about how the requests were read.
pub fn notes(e: &Extracted) -> Vec<Note> {
    let l = &e.list;
    let mut notes = Vec::new();
    if l.inferred_empty_cache > 0 {
        notes.push(Note::InferredEmptyCache(l.inferred_empty_cache));
    }
    if l.recorded_ooms > 0 {
        notes.push(Note::RecordedOoms(l.recorded_ooms));
    }
    if !l.initial_segments.is_empty() {
        notes.push(Note::MidRun {
            segments: l.initial_segments.len(),
            reserved_bytes: l.initial_reserved,
            live_blocks: l.initial_live_blocks,
            live_bytes: l.initial_live_bytes,
        });
    }
    notes
}
