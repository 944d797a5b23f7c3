//! The largest KV cache an inference server fits (issue #43): the recorded
//! run replayed with its KV cache resized, block by block, everything else
//! as recorded: the weights, the profiling pass, the CUDA graphs in their
//! pools (replayed, not summed) and the decode steps between replays.
//!
//! The KV cache is one allocation of the recording: the one the caller
//! names by its site, or else the largest allocation made outside every
//! capture and private pool (a server allocates its cache once, and it
//! dwarfs every other tensor). Its size is searched in whole blocks when the block's bytes
//! are known (a multiple of them, from 0 to the capacity), else in MiB.

use super::requests::{Op, RequestList};
use super::{Edits, Insert, OomAt, SimOptions, simulate_edited};
use crate::sites::SiteId;
use serde::Serialize;
use vramtrace_allocator::AllocatorConfig;

/// Which allocation is the KV cache, and how that is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct KvCacheAllocation {
    /// Its id in the request list.
    pub id: u32,
    /// Its site.
    #[serde(skip)]
    pub site: SiteId,
    /// The bytes the recording asked for.
    pub recorded_bytes: u64,
    /// `named` (the caller gave its site) or `inferred` (the largest
    /// allocation outside captures and private pools).
    pub basis: KvBasis,
}

/// How the KV cache's allocation was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KvBasis {
    /// The caller named its site.
    Named,
    /// The largest allocation made outside every capture and private
    /// pool.
    Inferred,
}

/// The KV cache's allocation: the largest at `site` when given, else the
/// largest made outside every capture and private pool. `None` when there
/// is no such allocation.
pub fn find_kv_cache(list: &RequestList, site: Option<SiteId>) -> Option<KvCacheAllocation> {
    let mut made = vec![false; list.allocs.len()];
    let mut captured = vec![false; list.allocs.len()];
    let mut capturing = 0u32;
    for r in &list.requests {
        let id = r.id as usize;
        match r.op {
            Op::Alloc => {
                made[id] = true;
                captured[id] = capturing > 0;
            }
            Op::PoolBegin => capturing += 1,
            Op::PoolEnd => capturing = capturing.saturating_sub(1),
            _ => {}
        }
    }
    let candidates = (0..list.allocs.len()).filter(|&id| {
        made[id]
            && match site {
                Some(site) => list.allocs[id].site == site,
                None => !captured[id] && list.pool_of(id).is_default(),
            }
    });
    let id = candidates.max_by_key(|&id| (list.allocs[id].requested, std::cmp::Reverse(id)))?;
    Some(KvCacheAllocation {
        id: id as u32,
        site: list.allocs[id].site,
        recorded_bytes: list.allocs[id].requested,
        basis: if site.is_some() {
            KvBasis::Named
        } else {
            KvBasis::Inferred
        },
    })
}

/// The largest KV cache that fits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KvCacheFit {
    /// The unit searched: a block's bytes (given), else 1 MiB.
    pub unit_bytes: u64,
    /// The largest KV cache that fits, in bytes (a whole number of units);
    /// `None` when even none fits (the rest of the run does not).
    pub largest_bytes: Option<u64>,
    /// Where one unit more runs out of memory.
    pub next_oom: Option<OomAt>,
    /// Whether the recorded size fits.
    pub recorded_fits: bool,
    /// Simulations run.
    pub runs: u32,
}

/// The recorded requests with one allocation resized, and some left out.
struct Resized {
    id: usize,
    bytes: u64,
    /// By allocation id: left out (empty: none).
    dropped: Vec<bool>,
    oom: bool,
}

impl Edits for Resized {
    fn before(&self, _: usize) -> Option<&Insert> {
        None
    }
    fn dropped(&self, id: usize) -> bool {
        self.dropped.get(id).copied().unwrap_or(false)
    }
    fn size(&self, id: usize, requested: u64) -> u64 {
        if id == self.id { self.bytes } else { requested }
    }
    fn after(&mut self, _: usize, oom: bool, _: u64, _: u64) {
        self.oom |= oom;
    }
}

/// Replays `list` with allocation `id` resized to `bytes` and the
/// allocations `dropped` says left out: its first OOM, if any (failures the
/// program survives, a cuDNN workspace's, are not).
fn first_oom(
    list: &RequestList,
    config: &AllocatorConfig,
    options: &SimOptions,
    id: usize,
    bytes: u64,
    dropped: Vec<bool>,
) -> Option<OomAt> {
    let mut edits = Resized {
        id,
        bytes,
        dropped,
        oom: false,
    };
    let options = SimOptions {
        stop_at_first_oom: true,
        ..options.clone()
    };
    simulate_edited(list, config, &options, &mut edits).first_oom
}

/// The largest size of allocation `kv.id` (a whole number of `unit_bytes`)
/// with which the run replays without running out of memory on the device
/// and cap of `options`: a bisection, each step a replay.
pub fn largest_kv_cache(
    list: &RequestList,
    config: &AllocatorConfig,
    options: &SimOptions,
    kv: &KvCacheAllocation,
    unit_bytes: u64,
) -> KvCacheFit {
    let unit = unit_bytes.max(1);
    let id = kv.id as usize;
    let mut runs = 0u32;
    let mut oom_at = |units: u64| {
        runs += 1;
        first_oom(
            list,
            config,
            options,
            id,
            units.saturating_mul(unit),
            Vec::new(),
        )
    };
    let recorded_fits = oom_at(kv.recorded_bytes.div_ceil(unit)).is_none();
    // The most units worth trying: all the memory there is.
    let bound = options
        .cap
        .or(options.capacity)
        .unwrap_or(kv.recorded_bytes.saturating_mul(4).max(1 << 40))
        / unit
        + 1;
    if oom_at(0).is_some() {
        return KvCacheFit {
            unit_bytes: unit,
            largest_bytes: None,
            next_oom: None,
            recorded_fits,
            runs,
        };
    }
    // Fits at `lo`, runs out at `hi`.
    let (mut lo, mut hi) = (0u64, bound);
    let mut next = oom_at(hi);
    if next.is_none() {
        return KvCacheFit {
            unit_bytes: unit,
            largest_bytes: Some(hi.saturating_mul(unit)),
            next_oom: None,
            recorded_fits,
            runs,
        };
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match oom_at(mid) {
            None => lo = mid,
            Some(o) => {
                hi = mid;
                next = Some(o);
            }
        }
    }
    KvCacheFit {
        unit_bytes: unit,
        largest_bytes: Some(lo * unit),
        next_oom: next,
        recorded_fits,
        runs,
    }
}

/// The CUDA graphs a run captured, in order: the capture each allocation
/// was made in (`usize::MAX`: none), and how many there were.
pub fn captures(list: &RequestList) -> (Vec<usize>, usize) {
    let mut of = vec![usize::MAX; list.allocs.len()];
    let (mut open, mut count) = (None, 0usize);
    for r in &list.requests {
        match r.op {
            Op::PoolBegin => {
                open = Some(count);
                count += 1;
            }
            Op::PoolEnd => open = None,
            Op::Alloc | Op::FailedAlloc => {
                if let (Some(c), Some(slot)) = (open, of.get_mut(r.id as usize)) {
                    *slot = c;
                }
            }
            _ => {}
        }
    }
    (of, count)
}

/// The most CUDA graphs a server can capture beside a KV cache of a given
/// size: the run replayed with its KV cache that size and its first
/// captures left out (servers capture the largest batch first, so the
/// graphs kept are the smallest batches).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CaptureFit {
    /// The graphs the recording captured.
    pub captures: usize,
    /// The most graphs that fit, kept from the last captured back; `None`
    /// when even none fits (the KV cache and the rest do not).
    pub kept: Option<usize>,
    /// Where one graph more runs out of memory.
    pub next_oom: Option<OomAt>,
    /// Simulations run.
    pub runs: u32,
}

/// The most graphs (the last `kept` of those recorded) that fit with the KV
/// cache `kv` at `kv_bytes`, on the device and cap of `options`: a
/// bisection over the count, each step a replay. An estimate: a graph left
/// out allocates nothing in its pool, but its eager warm-up stays in the
/// replay.
pub fn most_captures(
    list: &RequestList,
    config: &AllocatorConfig,
    options: &SimOptions,
    kv: &KvCacheAllocation,
    kv_bytes: u64,
) -> CaptureFit {
    let (of, count) = captures(list);
    let mut runs = 0u32;
    let id = kv.id as usize;
    let mut oom_keeping = |kept: usize| {
        runs += 1;
        let first_kept = count - kept;
        let dropped = of
            .iter()
            .map(|&c| c != usize::MAX && c < first_kept)
            .collect();
        first_oom(list, config, options, id, kv_bytes, dropped)
    };
    if oom_keeping(0).is_some() {
        return CaptureFit {
            captures: count,
            kept: None,
            next_oom: None,
            runs,
        };
    }
    let mut next = oom_keeping(count);
    if next.is_none() {
        return CaptureFit {
            captures: count,
            kept: Some(count),
            next_oom: None,
            runs,
        };
    }
    // Fits keeping `lo`, runs out keeping `hi`.
    let (mut lo, mut hi) = (0usize, count);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match oom_keeping(mid) {
            None => lo = mid,
            Some(o) => {
                hi = mid;
                next = Some(o);
            }
        }
    }
    CaptureFit {
        captures: count,
        kept: Some(lo),
        next_oom: next,
        runs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Serving, serving_run};

    const MIB: u64 = 1 << 20;

    fn extracted(bytes: &[u8]) -> super::super::Extracted {
        let mut reader = vramtrace_format::TraceReader::new(bytes).unwrap();
        super::super::extract(
            &mut reader,
            crate::analysis::Devices::Apart,
            &crate::progress::NoProgress,
        )
        .unwrap()
        .devices
        .remove(0)
    }

    /// The planner's answer, recorded: a server with that KV cache fits
    /// under the cap, one with a block more runs out (the graphs' shared
    /// pool replayed, as the recording of each run would have it).
    #[test]
    fn the_largest_kv_cache_fits_and_one_block_more_does_not() {
        let cap = 4 << 30;
        let e = extracted(&serving_run(&Serving::default()));
        let kv = find_kv_cache(&e.list, None).unwrap();
        assert_eq!(kv.recorded_bytes, 1 << 30);
        assert_eq!(kv.basis, KvBasis::Inferred);
        let options = SimOptions {
            cap: Some(cap),
            ..SimOptions::default()
        };
        let fit = largest_kv_cache(&e.list, &AllocatorConfig::default(), &options, &kv, 2 * MIB);
        let largest = fit.largest_bytes.unwrap();
        assert!(fit.recorded_fits);
        assert!(largest > kv.recorded_bytes && largest.is_multiple_of(2 * MIB));
        assert!(fit.next_oom.is_some());
        // Recorded again with those sizes: the planner's verdicts hold.
        let run = |kv_cache| {
            let e = extracted(&serving_run(&Serving {
                kv_cache,
                cap: Some(cap),
                ..Serving::default()
            }));
            e.list.recorded_ooms
        };
        assert_eq!(run(largest), 0);
        assert!(run(largest + 2 * MIB) > 0);
    }

    /// The inverse: with the KV cache grown, fewer graphs fit, the smallest
    /// batches kept; a recording that captures only those fits, one that
    /// captures one more does not.
    #[test]
    fn the_most_graphs_beside_a_given_kv_cache_fit_and_one_more_does_not() {
        let cap = 4 << 30;
        let batches = vec![64, 32, 16, 8, 4, 2, 1];
        let serving = |kv_cache, batches: Vec<u64>| Serving {
            kv_cache,
            cap: Some(cap),
            batches,
            shared_pool: true,
            ..Serving::default()
        };
        let e = extracted(&serving_run(&serving(1 << 30, batches.clone())));
        assert_eq!(captures(&e.list).1, batches.len());
        let kv = find_kv_cache(&e.list, None).unwrap();
        let options = SimOptions {
            cap: Some(cap),
            ..SimOptions::default()
        };
        let config = AllocatorConfig::default();
        // With the recorded KV cache every graph fits.
        let all = most_captures(&e.list, &config, &options, &kv, 1 << 30);
        assert_eq!(all.kept, Some(batches.len()));
        // Find a KV cache size where only some graphs fit.
        let fit = largest_kv_cache(&e.list, &config, &options, &kv, MIB);
        let tight = fit.largest_bytes.unwrap() + 64 * MIB;
        let some = most_captures(&e.list, &config, &options, &kv, tight);
        let kept = some.kept.expect("the smallest graphs fit");
        assert!(kept < batches.len(), "{some:?}");
        assert!(some.next_oom.is_some());
        // Recorded with only the kept batches (and one more), at that size.
        let run = |keep: usize| {
            let kept_batches = batches[batches.len() - keep..].to_vec();
            extracted(&serving_run(&serving(tight, kept_batches)))
                .list
                .recorded_ooms
        };
        assert_eq!(run(kept), 0);
        assert!(run(kept + 1) > 0);
    }
}
