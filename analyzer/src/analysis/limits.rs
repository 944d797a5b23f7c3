//! The allocator's limit and the memory outside it.
//!
//! A format 1.3 trace records the most the allocator may reserve on its
//! device (`limit` events: `torch.cuda.set_per_process_memory_fraction`, or
//! the limit in force when recording began) and samples the device's memory
//! as the driver reports it (`device_memory` events, `cudaMemGetInfo`).
//! [`LimitWatch`] follows both through a pass:
//!
//! - the [`Limit`] in force at each moment, and the one analyses take as the
//!   recorded capacity ([`LimitReport::capacity`]): the limit in force at the
//!   first out-of-memory error, else the last one recorded;
//! - without a recorded limit, a cap **inferred** from out-of-memory errors
//!   that happened while the device had room for the segment the allocator
//!   tried to add (a PyTorch snapshot records the device's free memory at an
//!   OOM, never the fraction): the cap lies between the most reserved memory
//!   seen up to the OOM and reserved memory at the OOM plus that segment;
//! - the memory **outside** the allocator, measured: the device's used
//!   memory (total − free) at each sample less the bytes the allocator had
//!   reserved then. It holds the CUDA context, NCCL's buffers, cuBLAS
//!   workspaces and other processes on the card. It is known only at
//!   samples, so between them it is a step.
//!
//! Bad samples (a limit of 0, a limit above the device's total, free memory
//! above the total) are left out and reported as warnings.

use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::ReplayState;
use crate::units;
use serde::Serialize;
use vramtrace_allocator::{AllocatorConfig, allocation_size};
use vramtrace_format::{DeviceMemoryEvent, EventData, LimitEvent, SymbolTable};

/// How a figure a user sees is known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Known {
    /// Replayed from the recorded events, to the byte.
    #[default]
    Exact,
    /// Deduced from what was recorded, not recorded itself.
    Inferred,
    /// An estimate (a typical figure, not this run's).
    Estimate,
    /// Sampled from the driver (`cudaMemGetInfo`) at recorded moments.
    Measured,
    /// Partly exact (tagged), partly inferred.
    PartlyExact,
}

impl Known {
    /// The word text shows beside a figure.
    pub fn word(self) -> &'static str {
        match self {
            Known::Exact => "exact",
            Known::Inferred => "inferred",
            Known::Estimate => "estimate",
            Known::Measured => "measured",
            Known::PartlyExact => "partly exact",
        }
    }
}

/// Where a [`Limit`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitSource {
    /// A recorded cap below the card's memory
    /// (`set_per_process_memory_fraction`).
    Cap,
    /// A recorded limit equal to the card's memory: no cap, the card itself.
    Card,
    /// A cap inferred from out-of-memory errors while the device had room.
    InferredCap,
}

/// The most the allocator may reserve on a device.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Limit {
    /// The figure analyses use, in bytes: the recorded limit, or for an
    /// inferred cap its low end ([`low_bytes`](Self::low_bytes): the most
    /// the run was seen to reserve, which reproduces the run).
    pub bytes: u64,
    /// Where it comes from.
    pub source: LimitSource,
    /// How it is known: exact when recorded, inferred otherwise.
    pub known: Known,
    /// The fraction of the card's memory, when recorded with the card's total.
    pub fraction: Option<f64>,
    /// The card's total memory, when recorded.
    pub card_total_bytes: Option<u64>,
    /// For an inferred cap: the least it can be (the most reserved memory
    /// seen up to the OOM).
    pub low_bytes: Option<u64>,
    /// For an inferred cap: the most it can be (reserved memory at the OOM
    /// plus the segment the allocator tried to add, less one byte).
    pub high_bytes: Option<u64>,
}

impl Limit {
    /// A recorded limit; `None` (with why) when the event cannot be one.
    pub fn of_event(e: &LimitEvent) -> Result<Limit, String> {
        if e.limit_bytes == 0 {
            return Err("a limit event of 0 bytes was left out".into());
        }
        if e.total_bytes > 0 && e.limit_bytes > e.total_bytes {
            return Err(format!(
                "a limit event of {} above the device's total {} was left out",
                units::bytes(e.limit_bytes),
                units::bytes(e.total_bytes)
            ));
        }
        let card = e.total_bytes > 0 && e.limit_bytes == e.total_bytes;
        Ok(Limit {
            bytes: e.limit_bytes,
            source: if card {
                LimitSource::Card
            } else {
                LimitSource::Cap
            },
            known: Known::Exact,
            fraction: (e.total_bytes > 0).then(|| e.fraction()),
            card_total_bytes: (e.total_bytes > 0).then_some(e.total_bytes),
            low_bytes: None,
            high_bytes: None,
        })
    }

    /// No cap: the card itself, its total as a device-memory sample
    /// measured it (a run that recorded no limit event).
    pub fn sampled_card(total: u64) -> Limit {
        Limit {
            bytes: total,
            source: LimitSource::Card,
            known: Known::Measured,
            fraction: Some(1.0),
            card_total_bytes: Some(total),
            low_bytes: None,
            high_bytes: None,
        }
    }

    /// The label of the line a chart draws at [`bytes`](Self::bytes): a
    /// recorded cap as it is (`cap 12 GiB`), an inferred one as what it is,
    /// a range (`cap inferred: 9.34 GiB to 12.1 GiB`), since the line sits
    /// at its low end, the most the run was seen to reserve.
    pub fn chart_label(&self) -> String {
        match (self.source, self.low_bytes, self.high_bytes) {
            (LimitSource::InferredCap, Some(low), Some(high)) => format!(
                "cap inferred: {} to {}",
                units::capacity(low),
                units::capacity(high)
            ),
            (LimitSource::InferredCap, _, _) => {
                format!("cap inferred: {}", units::capacity(self.bytes))
            }
            (LimitSource::Card, _, _) => format!("card {}", units::capacity(self.bytes)),
            (LimitSource::Cap, _, _) => format!("cap {}", units::capacity(self.bytes)),
        }
    }

    /// A cap inferred to lie in `low..=high`; its figure is `low`.
    pub fn inferred(low: u64, high: u64) -> Limit {
        Limit {
            bytes: low,
            source: LimitSource::InferredCap,
            known: Known::Inferred,
            fraction: None,
            card_total_bytes: None,
            low_bytes: Some(low),
            high_bytes: Some(high),
        }
    }

    /// Whether it caps the allocator below the card (recorded or inferred).
    pub fn is_cap(&self) -> bool {
        self.source != LimitSource::Card
    }

    /// The limit in words: `12.00 GiB cap from
    /// set_per_process_memory_fraction(0.1411)`, `the card's 79.18 GiB (no
    /// cap)`, `cap of 9.31 GiB to 9.33 GiB, inferred (...)`.
    pub fn describe(&self) -> String {
        match self.source {
            LimitSource::Cap => match self.fraction {
                Some(f) => format!(
                    "{} cap from set_per_process_memory_fraction({f:.4})",
                    units::capacity(self.bytes)
                ),
                None => format!("{} cap (recorded)", units::capacity(self.bytes)),
            },
            LimitSource::Card => {
                format!("the card's {} (no cap)", units::capacity(self.bytes))
            }
            LimitSource::InferredCap => format!(
                "cap of {} to {}, inferred (the device had room when the allocator failed)",
                units::capacity(self.low_bytes.unwrap_or(self.bytes)),
                units::capacity(self.high_bytes.unwrap_or(self.bytes))
            ),
        }
    }

    /// The limit as a noun after "its" or "the": `recorded 12.00 GiB cap
    /// from set_per_process_memory_fraction(0.1411)`, `inferred cap of
    /// 1.95 GiB to 7.35 GiB (...)`, `card's 79.18 GiB (no cap)`.
    pub fn noun(&self) -> String {
        match self.source {
            LimitSource::Cap => format!("recorded {}", self.describe()),
            LimitSource::Card => self.describe().trim_start_matches("the ").to_string(),
            LimitSource::InferredCap => format!(
                "inferred cap of {} to {} (the device had room when the allocator failed)",
                units::capacity(self.low_bytes.unwrap_or(self.bytes)),
                units::capacity(self.high_bytes.unwrap_or(self.bytes))
            ),
        }
    }
}

/// Memory outside the allocator, measured at the device-memory samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OutsideReport {
    /// At the first sample.
    pub at_start_bytes: u64,
    /// At the allocated peak (the last sample before it), when a sample
    /// came before it; filled by the summary.
    pub at_peak_bytes: Option<u64>,
    /// The most seen at any sample.
    pub max_bytes: u64,
    /// At the last sample.
    pub at_end_bytes: u64,
    /// Samples read.
    pub samples: u64,
    /// Always [`Known::Measured`].
    pub known: Known,
}

/// Memory outside the allocator at one sample: the device's used memory
/// less the allocator's reserved bytes then (never below 0).
pub fn outside_bytes(sample: &DeviceMemoryEvent, reserved: u64) -> u64 {
    sample.used_bytes().saturating_sub(reserved)
}

/// The segment the allocator adds for a request of `requested` bytes
/// (PyTorch's default rounding; a bound on what any setting adds).
pub fn segment_for(requested: u64) -> u64 {
    allocation_size(AllocatorConfig::default().round_size(requested))
}

/// What [`LimitWatch`] found over a pass.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LimitReport {
    /// The limit analyses take as the recorded capacity: the one in force
    /// at the first OOM, else the last recorded, else an inferred cap.
    pub limit: Option<Limit>,
    /// Recorded limits that differ from the one before (the first included).
    pub changes: u64,
    /// Memory outside the allocator, when the trace samples the device.
    pub outside: Option<OutsideReport>,
    /// The last device-memory sample.
    #[serde(skip)]
    pub last_sample: Option<DeviceMemoryEvent>,
    /// Bad limits and samples, left out, and a limit that changed.
    pub warnings: Vec<String>,
}

impl LimitReport {
    /// The capacity a simulation of the recorded run uses: the limit's bytes.
    pub fn capacity(&self) -> Option<u64> {
        self.limit.map(|l| l.bytes)
    }

    /// The recorded or inferred cap, when there is one below the card.
    pub fn cap(&self) -> Option<Limit> {
        self.limit.filter(Limit::is_cap)
    }
}

/// The most warnings kept; the rest are counted in the last.
const MAX_WARNINGS: usize = 8;

/// Follows the limit, the device-memory samples and the inferred cap
/// through a pass (see the module's documentation).
#[derive(Clone, Debug, Default)]
pub struct LimitWatch {
    in_force: Option<Limit>,
    at_first_oom: Option<Limit>,
    oom_seen: bool,
    last_recorded: Option<Limit>,
    changes: u64,
    // Inferred cap bounds over every OOM, low and high.
    inferred: Option<(u64, u64)>,
    inferred_conflict: bool,
    reserved_peak: u64,
    outside_now: Option<u64>,
    outside: Option<OutsideReport>,
    last_sample: Option<DeviceMemoryEvent>,
    warnings: Vec<String>,
    left_out: u64,
    report: Option<LimitReport>,
}

impl LimitWatch {
    /// A watch with nothing seen.
    pub fn new() -> Self {
        LimitWatch::default()
    }

    /// The recorded limit in force now.
    pub fn in_force(&self) -> Option<Limit> {
        self.in_force
    }

    /// Memory outside the allocator at the last sample (a step until the
    /// next), when one came.
    pub fn outside_now(&self) -> Option<u64> {
        self.outside_now
    }

    /// The last valid device-memory sample.
    pub fn last_sample(&self) -> Option<DeviceMemoryEvent> {
        self.last_sample
    }

    /// The limit at an OOM now (the event already seen by [`Analysis::event`]):
    /// the recorded one in force, else a cap inferred from this OOM alone,
    /// when the device had room for the segment the allocator tried to add.
    pub fn limit_at_oom(&self, requested: u64, device_free: u64, reserved: u64) -> Option<Limit> {
        self.in_force.or_else(|| {
            let segment = segment_for(requested);
            (device_free >= segment).then(|| {
                let high = reserved.saturating_add(segment).saturating_sub(1);
                Limit::inferred(self.reserved_peak.min(high), high)
            })
        })
    }

    /// The limit for a moment outside an OOM: the recorded one in force,
    /// else the cap inferred from the OOMs seen so far.
    pub fn limit_now(&self) -> Option<Limit> {
        self.in_force
            .or_else(|| self.inferred.map(|(low, high)| Limit::inferred(low, high)))
    }

    fn warn(&mut self, why: String) {
        if self.warnings.len() < MAX_WARNINGS {
            self.warnings.push(why);
        } else {
            self.left_out += 1;
        }
    }

    /// Takes the report, once the pass is over.
    pub fn into_report(self) -> Result<LimitReport, AnalysisError> {
        self.report.ok_or(AnalysisError::NoResult("limits"))
    }

    /// The report so far (the summary takes it at its own end).
    pub fn report_now(&self) -> LimitReport {
        let mut warnings = self.warnings.clone();
        if self.left_out > 0 {
            warnings.push(format!(
                "{} more bad limit or device-memory events were left out",
                self.left_out
            ));
        }
        if self.changes > 1 {
            let used = match self.at_first_oom.or(self.last_recorded) {
                Some(l) if self.oom_seen && self.at_first_oom.is_some() => {
                    format!(
                        "the one in force at the first out-of-memory error, {}",
                        l.describe()
                    )
                }
                Some(l) => format!("the last one, {}", l.describe()),
                None => "none".into(),
            };
            warnings.push(format!(
                "the allocator's limit changed {} during the run; analyses that need one capacity use {used}",
                units::counted(self.changes - 1, "time", "times")
            ));
        }
        if self.inferred_conflict {
            warnings.push(
                "the caps inferred from several out-of-memory errors do not agree (the cap changed?); the last one is used".into(),
            );
        }
        let limit = if self.at_first_oom.is_some() {
            self.at_first_oom
        } else {
            self.last_recorded
                .or_else(|| self.inferred.map(|(low, high)| Limit::inferred(low, high)))
        };
        LimitReport {
            limit,
            changes: self.changes,
            outside: self.outside,
            last_sample: self.last_sample,
            warnings,
        }
    }
}

impl LimitWatch {
    /// What [`Analysis::event`] does for the few events that matter here:
    /// device actions, limits, samples and OOMs.
    #[inline(never)]
    fn rare_event(&mut self, step: &Step<'_>, state: &ReplayState) {
        let reserved = state.totals().reserved;
        match &step.event.data {
            // Reserved memory rises only here: the rest of the events (most
            // of them) cost a match.
            EventData::SegmentAlloc(_) | EventData::SegmentMap(_) => {
                self.reserved_peak = self.reserved_peak.max(reserved);
            }
            EventData::Limit(e) => match Limit::of_event(e) {
                Ok(limit) => {
                    if self.last_recorded.map(|l| l.bytes) != Some(limit.bytes) {
                        self.changes += 1;
                    }
                    self.in_force = Some(limit);
                    self.last_recorded = Some(limit);
                }
                Err(why) => self.warn(format!("{why} (event {})", step.index)),
            },
            EventData::DeviceMemory(m) => {
                if m.free_bytes > m.total_bytes {
                    self.warn(format!(
                        "a device-memory sample with {} free of {} in all was left out (event {})",
                        units::bytes(m.free_bytes),
                        units::bytes(m.total_bytes),
                        step.index
                    ));
                } else {
                    let outside = outside_bytes(m, reserved);
                    self.outside_now = Some(outside);
                    self.last_sample = Some(*m);
                    let o = self.outside.get_or_insert(OutsideReport {
                        at_start_bytes: outside,
                        known: Known::Measured,
                        ..Default::default()
                    });
                    o.max_bytes = o.max_bytes.max(outside);
                    o.at_end_bytes = outside;
                    o.samples += 1;
                }
            }
            EventData::Oom(o) => {
                if !self.oom_seen {
                    self.oom_seen = true;
                    self.at_first_oom = self.in_force;
                }
                if self.in_force.is_none() {
                    let segment = segment_for(o.requested);
                    if o.free_bytes >= segment {
                        let high = reserved.saturating_add(segment).saturating_sub(1);
                        let low = self.reserved_peak.min(high);
                        self.inferred = Some(match self.inferred {
                            None => (low, high),
                            Some((l, h)) => {
                                let (l, h) = (l.max(low), h.min(high));
                                if l > h {
                                    self.inferred_conflict = true;
                                    (low, high)
                                } else {
                                    (l, h)
                                }
                            }
                        });
                    }
                }
            }
            _ => {}
        }
    }
}

impl Analysis for LimitWatch {
    fn begin(&mut self, state: &ReplayState, _symbols: &SymbolTable) {
        self.reserved_peak = self.reserved_peak.max(state.totals().reserved);
    }

    #[inline]
    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError> {
        // Blocks, phases, tags and annotations (nearly every event) change
        // nothing here: the rest is out of line, so that they cost a branch.
        if !matches!(
            step.event.data,
            EventData::Alloc(_)
                | EventData::FreeRequested(_)
                | EventData::FreeCompleted(_)
                | EventData::PhaseBegin { .. }
                | EventData::PhaseEnd { .. }
                | EventData::Tag(_)
                | EventData::Annotation { .. }
        ) {
            self.rare_event(step, state);
        }
        Ok(Flow::Continue)
    }

    fn finish(
        &mut self,
        _state: &ReplayState,
        _symbols: &SymbolTable,
    ) -> Result<(), AnalysisError> {
        self.report = Some(self.report_now());
        Ok(())
    }
}
