//! Memory by pool (trace format 1.6): what CUDA graphs' private pools, pools
//! graphs share and `MemPool`s hold, at the allocated peak and at the end.
//! Every figure is exact: replayed from the segments the trace puts in each
//! pool and the blocks inside them. How many graphs use a pool, and whether
//! its users let it go, come from `pool` events; a trace without them (a
//! snapshot, or a recorder before 1.6) says only which segments are whose
//! ([`PoolsReport::followed`]).

use crate::replay::{PoolKind, PoolTally};
use serde::Serialize;

/// One private pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PoolSummary {
    /// PyTorch's `MempoolId_t`.
    pub id: (u64, u64),
    /// What made it.
    pub kind: Option<PoolKind>,
    /// Captures (CUDA graphs) into it.
    pub captures: u32,
    /// `use_mem_pool` blocks that allocated from it.
    pub uses: u32,
    /// Its segments' bytes at the allocated peak.
    pub reserved_at_peak_bytes: u64,
    /// Bytes in use in it at the allocated peak.
    pub live_at_peak_bytes: u64,
    /// The most its segments held.
    pub peak_reserved_bytes: u64,
    /// Its segments' bytes at the end.
    pub reserved_at_end_bytes: u64,
    /// Bytes in use in it at the end.
    pub live_at_end_bytes: u64,
    /// Whether every user let it go by the end (its free segments could
    /// return to the device).
    pub released: bool,
    /// Whether `pool` events say how it is used.
    pub followed: bool,
}

impl PoolSummary {
    /// Free bytes of its segments at the allocated peak: memory the default
    /// pools could not use.
    pub fn free_at_peak_bytes(&self) -> u64 {
        self.reserved_at_peak_bytes
            .saturating_sub(self.live_at_peak_bytes)
    }
}

/// Memory by pool, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PoolsReport {
    /// Each private pool, in the order the trace met them.
    pub pools: Vec<PoolSummary>,
    /// All private pools' segments at the allocated peak.
    pub reserved_at_peak_bytes: u64,
    /// Bytes in use in them at the allocated peak.
    pub live_at_peak_bytes: u64,
    /// Captures (CUDA graphs) into any of them.
    pub captures: u32,
    /// Whether `pool` events follow every pool (else the number of graphs
    /// and users are unknown for those that have none).
    pub followed: bool,
}

impl PoolsReport {
    /// The report from each pool's tally at the allocated peak and at the
    /// end; `None` without private pools.
    pub fn of(at_peak: &[PoolTally], at_end: &[PoolTally]) -> Option<PoolsReport> {
        if at_end.is_empty() {
            return None;
        }
        let pools: Vec<PoolSummary> = at_end
            .iter()
            .enumerate()
            .map(|(i, end)| {
                let peak = at_peak.get(i).copied().unwrap_or_default();
                PoolSummary {
                    id: (end.id.0, end.id.1),
                    kind: end.followed.then(|| end.kind()),
                    captures: end.captures,
                    uses: end.uses,
                    reserved_at_peak_bytes: peak.reserved,
                    live_at_peak_bytes: peak.live.min(peak.reserved),
                    peak_reserved_bytes: end.peak_reserved,
                    reserved_at_end_bytes: end.reserved,
                    live_at_end_bytes: end.live.min(end.reserved),
                    released: end.released,
                    followed: end.followed,
                }
            })
            .collect();
        Some(PoolsReport {
            reserved_at_peak_bytes: pools.iter().map(|p| p.reserved_at_peak_bytes).sum(),
            live_at_peak_bytes: pools.iter().map(|p| p.live_at_peak_bytes).sum(),
            captures: pools.iter().map(|p| p.captures).sum(),
            followed: pools.iter().all(|p| p.followed),
            pools,
        })
    }

    /// Free bytes of the private pools at the allocated peak.
    pub fn free_at_peak_bytes(&self) -> u64 {
        self.reserved_at_peak_bytes
            .saturating_sub(self.live_at_peak_bytes)
    }
}

#[cfg(test)]
mod tests {
    use crate::analysis::summary::tests::summarize;
    use crate::analysis::window::Window;
    use crate::testing::{Serving, serving_run_with_pools};

    /// The summary's pools are what the allocator that made the trace holds
    /// in them: at the end, byte for byte, with the graphs counted.
    #[test]
    fn pools_at_the_end_are_the_allocators() {
        for shared_pool in [true, false] {
            let (bytes, usage) = serving_run_with_pools(&Serving {
                shared_pool,
                ..Serving::default()
            });
            let r = summarize(&bytes, Window::default());
            let pools = r.pools.expect("pools");
            assert_eq!(pools.captures, 4);
            assert!(pools.followed);
            assert_eq!(pools.pools.len(), usage.len());
            for (ours, theirs) in pools.pools.iter().zip(&usage) {
                assert_eq!(ours.id, (theirs.id.0, theirs.id.1));
                assert_eq!(ours.reserved_at_end_bytes, theirs.reserved, "{ours:?}");
                assert_eq!(
                    ours.reserved_at_end_bytes - ours.live_at_end_bytes,
                    theirs.cached_free,
                    "{ours:?}"
                );
            }
            // The first graph let its pool go: with a pool each, that pool
            // is released (and emptied); in the shared pool three graphs
            // still hold it.
            assert_eq!(pools.pools[0].released, !shared_pool);
            let line = crate::print::labels::pools_line(&pools);
            if shared_pool {
                assert!(line.contains("held by 4 graphs sharing one pool"), "{line}");
            } else {
                assert!(line.contains("held by 4 graphs, a pool each"), "{line}");
            }
            assert!(line.ends_with("at the allocated peak (exact)"), "{line}");
        }
    }
}
