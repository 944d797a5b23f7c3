//! `simulate`'s sentences: the verdict on the first policy (on a device,
//! under a cap, or what it needs), how far it can be trusted, and the notes
//! on how the requests were read. The JSON keys that carry them
//! (`verdict.line`, `verdict.basis_note`, `notes`) are written here too.

use crate::command::simulate::{Judged, Note, OomDescription, Verdict, VerdictBasis};
use crate::print::labels::site_label;
use crate::simulate::{self, Fidelity, Reserve, gpus};
use crate::units;
use serde::{Serialize, Serializer};

/// The verdict in one line: the text printer prints exactly this, and JSON
/// carries it as `verdict.line`. An estimate's begins so.
pub fn verdict(v: &Verdict) -> String {
    let line = judged(v);
    match v.basis {
        VerdictBasis::Exact => line,
        VerdictBasis::Estimate => format!("estimate: {line}"),
    }
}

/// The verdict's sentence, before its basis.
fn judged(v: &Verdict) -> String {
    let needs = v.needs_bytes;
    match &v.judged {
        Judged::Needs {
            found,
            peak_reserved_bytes,
            reserve,
        } => {
            let needs = needs.unwrap_or(0);
            let what = if *found {
                format!("needs {} of device memory", units::capacity(needs))
            } else {
                format!(
                    "takes {} at its peak ({} reserved by the allocator, {} for {})",
                    units::capacity(needs),
                    units::capacity(*peak_reserved_bytes),
                    units::capacity(reserve.bytes),
                    reserve_words(reserve)
                )
            };
            let cards = match gpus::smallest_holding(needs) {
                Some(g) => format!("fits on {} and larger", g.name),
                None => "more than any GPU listed (--gpu)".into(),
            };
            format!("{what}: {cards}")
        }
        Judged::FitsOnDevice {
            device,
            reserve,
            survived_failures,
        } => format!(
            "fits on {device} with {} to spare ({} kept for {}){}",
            units::capacity(v.spare_bytes.unwrap_or(0)),
            units::capacity(reserve.bytes),
            reserve_words(reserve),
            survived(*survived_failures)
        ),
        Judged::OomOnDevice { device, oom } => {
            let free = oom.free_bytes + oom.cached_free_bytes;
            // Enough free memory in all, but in pieces: memory the allocator
            // has not reserved is not fragmented, so the two parts are told
            // apart.
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
            let remedy = match (&v.fits_with, needs) {
                (Some(policy), _) => format!("; {policy} fits"),
                (None, Some(min)) => format!(
                    "; no other policy tried fits, and it needs {} of device memory (the reserve included)",
                    units::capacity(min)
                ),
                (None, None) => "; no other policy tried fits".into(),
            };
            format!(
                "runs out of memory on {device}{}, at {}, asking for {} {why}{remedy}",
                at_phase(oom),
                site_label(&oom.site),
                units::bytes(oom.requested_bytes)
            )
        }
        Judged::FitsUnderCap {
            cap,
            survived_failures,
        } => format!(
            "fits under its {} with {} to spare (the cap bounds reserved memory only){}",
            cap.noun(),
            units::capacity(v.spare_bytes.unwrap_or(0)),
            survived(*survived_failures)
        ),
        Judged::OomUnderCap { cap, oom } => {
            let free = oom.free_bytes + oom.cached_free_bytes;
            // Unreserved, not "never reserved": the allocator may have
            // reserved and released it before.
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
            let mut remedy = String::new();
            if let Some(policy) = &v.fits_with {
                remedy.push_str(&format!("; {policy} fits under the same cap"));
            }
            if let Some(needs) = needs {
                remedy.push_str(&format!(
                    "; it needs a cap of {} (smallest without an OOM, to 2 MiB)",
                    units::capacity(needs)
                ));
            }
            format!(
                "runs out of memory under its {}{}, at {}, asking for {} {why}{remedy}",
                cap.noun(),
                at_phase(oom),
                site_label(&oom.site),
                units::bytes(oom.requested_bytes)
            )
        }
    }
}

/// Why the verdict is exact or an estimate: `basis_note` in JSON.
pub fn basis(v: &Verdict) -> String {
    basis_of(v.fidelity.as_ref())
}

/// The basis in words, from the replay of the recorded run (none: the trace
/// does not say its settings).
pub fn basis_of(fidelity: Option<&Fidelity>) -> String {
    match fidelity {
        Some(f) if f.exact => format!(
            "exact: the recorded run replays to the byte ({} device actions, reserved peak {})",
            units::count(f.recorded_segment_actions as u64),
            units::bytes(f.recorded_peak_reserved_bytes)
        ),
        Some(f) => format!(
            "estimate: the replay of the recorded run is not exact ({} device actions against {} recorded, reserved peak {} against {})",
            units::count(f.simulated_segment_actions as u64),
            units::count(f.recorded_segment_actions as u64),
            units::bytes(f.simulated_peak_reserved_bytes),
            units::bytes(f.recorded_peak_reserved_bytes)
        ),
        None => "estimate: the trace does not say its allocator settings, so the replay of the recorded run cannot be checked".into(),
    }
}

/// `; 36 times a convolution's workspace ...`: the failures a run
/// survives, when there are any.
pub fn survived(failures: u64) -> String {
    if failures == 0 {
        return String::new();
    }
    format!(
        "; {} a convolution's cuDNN workspace cannot be allocated, and cuDNN falls back to algorithms that need less (slower)",
        units::counted(failures, "time", "times")
    )
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
pub fn reserve_words(reserve: &Reserve) -> &'static str {
    if reserve.source == simulate::ReserveSource::Measured {
        return "memory outside the allocator (measured)";
    }
    match (reserve.stated, reserve.nccl) {
        (true, _) => "the stated reserve",
        (false, true) => "the CUDA context and NCCL",
        (false, false) => "the CUDA context",
    }
}

/// A note on how the requests were read, in words.
pub fn note(note: &Note) -> String {
    match note {
        Note::InferredEmptyCache(calls) => format!(
            "{calls} empty_cache() calls inferred from bursts of segment frees not followed by an OOM (the trace records none)"
        ),
        Note::RecordedOoms(ooms) => format!(
            "the recorded run ran out of memory {}; those requests are tried again, and freed at once where they fit, since the program went on without them",
            units::counted(*ooms, "time", "times")
        ),
        Note::MidRun {
            segments,
            reserved_bytes,
            live_blocks,
            live_bytes,
        } => format!(
            "the trace starts mid-run: the simulation starts from its {segments} segments ({} reserved) at their recorded sizes and layout, with {live_blocks} live blocks ({})",
            units::bytes(*reserved_bytes),
            units::bytes(*live_bytes)
        ),
    }
}

/// As JSON: the verdict's figures with its sentence, `line`, and its
/// basis's, `basis_note`.
impl Serialize for Verdict {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            outcome: crate::command::simulate::Outcome,
            line: String,
            spare_bytes: Option<u64>,
            needs_bytes: Option<u64>,
            fits_with: &'a Option<String>,
            basis: VerdictBasis,
            basis_note: String,
        }
        View {
            outcome: self.outcome,
            line: verdict(self),
            spare_bytes: self.spare_bytes,
            needs_bytes: self.needs_bytes,
            fits_with: &self.fits_with,
            basis: self.basis,
            basis_note: basis(self),
        }
        .serialize(s)
    }
}

/// As JSON: the note's sentence.
impl Serialize for Note {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&note(self))
    }
}
