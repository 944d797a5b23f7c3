//! A waterfall's sentences: its limit in words (`limit_line` in JSON) and
//! its notes, written into JSON here too.

use crate::analysis::limits::Known;
use crate::analysis::summary::OomReport;
use crate::analysis::waterfall::{CardState, Fragmentation, Note, SumsTo, Term, Waterfall};
use crate::units;
use serde::{Serialize, Serializer};

/// The limit in words (`12.00 GiB cap from
/// set_per_process_memory_fraction(0.1411)`), or `unknown`.
pub fn limit_line(w: &Waterfall) -> String {
    w.limit
        .map_or_else(|| "unknown".to_string(), |l| l.describe())
}

/// Under which limit an OOM failed: `under the recorded 12.00 GiB cap
/// ...`, or where the card itself was the limit, its free memory then
/// (`measured` says how that figure is known).
pub fn under_limit(o: &OomReport, measured: &str) -> String {
    let w = &o.waterfall;
    match w.limit_source {
        "cap" | "inferred_cap" => format!("under the {}", limit_line(w)),
        "card" => format!(
            "on {}, with {} free on the device ({measured})",
            limit_line(w),
            units::bytes(o.device_free_bytes)
        ),
        _ => "(the limit is unknown)".to_string(),
    }
}

/// A waterfall's note in words.
pub fn note(note: &Note) -> String {
    match *note {
        Note::OverReserved {
            over_bytes,
            reserved_bytes,
        } => format!(
            "blocks and empty segments add up to {} more than the {} reserved (blocks outside segments, or a trace without segment events): the sum is taken over them",
            units::bytes(over_bytes),
            units::bytes(reserved_bytes)
        ),
        Note::CategoriesOff {
            categories_bytes,
            allocated_bytes,
        } => format!(
            "the categories add up to {}, not the {} allocated",
            units::bytes(categories_bytes),
            units::bytes(allocated_bytes)
        ),
        Note::CardAsLimit { total_bytes } => format!(
            "no limit was recorded: the limit is the card's total as sampled ({})",
            units::bytes(total_bytes)
        ),
        Note::SampleFree { free_bytes } => format!(
            "free on the device is the card's total less reserved memory and what lay outside the allocator at the last sample; the sample itself said {} free",
            units::bytes(free_bytes)
        ),
        Note::NoSamples => "the trace samples no device memory: free on the device includes what others (the CUDA context, other processes) held".into(),
        Note::CardBinding {
            card_free_bytes,
            cap_free_bytes,
        } => format!(
            "the card had {} free, less than the {} the cap still allowed: the card, not the cap, was the binding limit",
            units::bytes(card_free_bytes),
            units::bytes(cap_free_bytes)
        ),
        Note::LimitLowered {
            reserved_bytes,
            limit_bytes,
        } => format!(
            "reserved memory ({}) is above the limit ({}): the limit was lowered after it was reserved; the terms sum to reserved memory",
            units::bytes(reserved_bytes),
            units::bytes(limit_bytes)
        ),
        Note::UnknownLimit => "the limit is unknown (the trace records no limit, and no out-of-memory error shows a cap): the terms sum to reserved memory".into(),
        Note::Fragmented {
            cached_bytes,
            segments,
            requested_bytes,
            largest_free_block,
        } => {
            let segments = segments.map_or_else(String::new, |n| {
                format!(" in {}", units::counted(n, "segment", "segments"))
            });
            format!(
                "fragmented: {} cached free{segments} that hold live blocks, more than the {} asked for, but the largest free block is {}",
                units::bytes(cached_bytes),
                units::bytes(requested_bytes),
                units::bytes(largest_free_block)
            )
        }
    }
}

/// A waterfall's notes in words.
pub fn notes(w: &Waterfall) -> Vec<String> {
    w.notes.iter().map(note).collect()
}

/// As JSON: the waterfall's figures, its limit in words (`limit_line`)
/// and its notes as sentences.
impl Serialize for Waterfall {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            limit_bytes: Option<u64>,
            limit_source: &'static str,
            limit_known: Option<Known>,
            limit_line: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            limit_range: Option<(u64, u64)>,
            sums_to: SumsTo,
            total_bytes: u64,
            terms: &'a [Term],
            beside: &'a [Term],
            fragmentation: &'a Fragmentation,
            card: &'a Option<CardState>,
            notes: &'a [Note],
        }
        View {
            limit_bytes: self.limit_bytes,
            limit_source: self.limit_source,
            limit_known: self.limit_known,
            limit_line: limit_line(self),
            limit_range: self.limit_range,
            sums_to: self.sums_to,
            total_bytes: self.total_bytes,
            terms: &self.terms,
            beside: &self.beside,
            fragmentation: &self.fragmentation,
            card: &self.card,
            notes: &self.notes,
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
