//! `plan --kv-cache`'s sentences: the answer (the largest KV cache, or
//! with a KV cache given, the CUDA graphs that fit beside it), where it is
//! for, and how far it can be trusted; written into JSON here too
//! (`line`, `place`, `basis_note`).

use crate::command::plan::{CapturePlan, KvPlace, KvPlanResult};
use crate::simulate::kv::KvCacheAllocation;
use crate::units;
use serde::{Serialize, Serializer};

/// Where the plan is for: `on H100 80GB`, `under a cap of 4 GiB`.
pub fn place(place: &KvPlace) -> String {
    match place {
        KvPlace::Device(name) => format!("on {name}"),
        KvPlace::Cap(cap) => format!("under a cap of {}", units::bytes(*cap)),
        KvPlace::RecordedCard => "on the recorded card".to_string(),
    }
}

/// Why the answer is exact or an estimate: `basis_note` in JSON.
pub fn basis(r: &KvPlanResult) -> String {
    let f = &r.fidelity;
    if f.exact {
        "exact: the recorded run replays to the byte, its CUDA graphs in their pools".to_string()
    } else {
        format!(
            "estimate: the replay of the recorded run is not exact ({} device actions against {} recorded)",
            f.simulated_segment_actions, f.recorded_segment_actions
        )
    }
}

/// Bytes, in blocks too when a block's size is given.
fn in_blocks(r: &KvPlanResult, bytes: u64) -> String {
    match r.block_bytes {
        Some(b) => format!(
            "{} ({})",
            units::bytes(bytes),
            units::counted(bytes / b, "block", "blocks")
        ),
        None => units::bytes(bytes),
    }
}

/// The answer in one line: the text printer prints exactly this, and JSON
/// carries it as `line`.
pub fn answer(r: &KvPlanResult) -> String {
    if let Some(c) = &r.captures {
        return captures(r, c);
    }
    let place = place(&r.place);
    let fit = &r.fit;
    let kv: &KvCacheAllocation = &r.kv_cache;
    let mut line = match fit.largest_bytes {
        Some(largest) => format!(
            "the largest KV cache that fits {place} is {}, with the recorded CUDA graphs in their pools (recorded: {}{})",
            in_blocks(r, largest),
            in_blocks(r, kv.recorded_bytes),
            if fit.recorded_fits {
                ""
            } else {
                ", which does not fit"
            }
        ),
        None => format!("no KV cache fits {place}: the rest of the run alone runs out of memory"),
    };
    if let (Some(_), Some(site)) = (fit.largest_bytes, &r.next_oom_site) {
        let more = match r.block_bytes {
            Some(_) => "a block".to_string(),
            None => units::bytes(fit.unit_bytes),
        };
        line.push_str(&format!("; {more} more runs out at {site}"));
    }
    if r.basis == "estimate" {
        line = format!("estimate: {line}");
    }
    line
}

/// The answer to the inverse question: how many graphs fit beside a KV
/// cache given.
fn captures(r: &KvPlanResult, c: &CapturePlan) -> String {
    let place = place(&r.place);
    let fit = &c.fit;
    let kv_text = in_blocks(r, c.kv_bytes);
    let kept = |k: usize| c.batches.as_ref().map(|b| &b[b.len() - k..]);
    let mut line = match fit.kept {
        None => format!(
            "estimate: a KV cache of {kv_text} does not fit {place} even with no CUDA graph captured"
        ),
        Some(k) if k == fit.captures => format!(
            "estimate: all {} recorded CUDA graphs fit {place} beside a KV cache of {kv_text}",
            fit.captures
        ),
        Some(0) => format!(
            "estimate: beside a KV cache of {kv_text}, no CUDA graph fits {place}: serve eagerly, or give the KV cache less"
        ),
        Some(k) => {
            let which = match (c.largest_batch, kept(k)) {
                (Some(n), Some(b)) => format!(
                    "capture batch sizes up to {n} ({} of the {} recorded: {})",
                    k,
                    fit.captures,
                    b.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
                ),
                _ => format!(
                    "capture the last {k} of the {} recorded graphs (the smallest batches, when captured largest first)",
                    fit.captures
                ),
            };
            format!("estimate: beside a KV cache of {kv_text} {place}, {which}")
        }
    };
    if let (Some(k), Some(site)) = (fit.kept, &c.next_oom_site)
        && k < fit.captures
    {
        line.push_str(&format!("; one graph more runs out at {site}"));
    }
    line
}

/// As JSON: the result's figures with its sentences (`line`,
/// `basis_note`, `place`).
impl Serialize for KvPlanResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            path: &'a str,
            line: String,
            basis: &'static str,
            basis_note: String,
            kv_cache: &'a KvCacheAllocation,
            site: &'a str,
            block_bytes: Option<u64>,
            recorded_blocks: Option<u64>,
            fit: &'a crate::simulate::kv::KvCacheFit,
            largest_blocks: Option<u64>,
            next_oom_site: &'a Option<String>,
            place: String,
            pools: usize,
            #[serde(skip_serializing_if = "Option::is_none")]
            captures: &'a Option<CapturePlan>,
        }
        View {
            path: &self.path,
            line: answer(self),
            basis: self.basis,
            basis_note: basis(self),
            kv_cache: &self.kv_cache,
            site: &self.site,
            block_bytes: self.block_bytes,
            recorded_blocks: self.recorded_blocks,
            fit: &self.fit,
            largest_blocks: self.largest_blocks,
            next_oom_site: &self.next_oom_site,
            place: place(&self.place),
            pools: self.pools,
            captures: &self.captures,
        }
        .serialize(s)
    }
}
