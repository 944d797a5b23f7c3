//! The explorer built once the pass is over: the phases, the allocation
//! records and the checkpoints as the page shows them, their stacks,
//! frames, sites and phase paths interned.

use super::{
    AllocationRecord, Checkpoint, CheckpointBlock, CheckpointKind, CheckpointSegment, Explorer,
    ExplorerAnalysis, PhaseMark, RawCheckpoint, Series,
};
use crate::replay::{PhaseId, ReplayState};
use crate::sites::SiteId;
use rustc_hash::FxHashMap;
use vramtrace_format::{StackId, SymbolTable};

impl ExplorerAnalysis {
    /// The explorer, once the pass is over.
    pub(super) fn build(&mut self, state: &ReplayState, symbols: &SymbolTable) -> Explorer {
        let first_index = self.first_index.unwrap_or(state.events_applied());
        let idle = self.pauses.finish();
        let (phases, phases_left_out) = self.phase_marks(state, symbols, first_index);
        // Interning of stacks, frames, sites and phase paths: in order of
        // first use, the allocations' first.
        let mut interner = Interner::default();
        let allocations = self.allocation_records(&mut interner, state, symbols);
        let merged = self.merged_checkpoints(state);
        let kept = &self.kept;
        let record_of = |seq: u64| {
            kept.binary_search_by_key(&seq, |k| k.seq)
                .ok()
                .map(|i| i as u32)
        };
        let checkpoints = merged
            .into_iter()
            .map(|c| page_checkpoint(c, &mut interner, &record_of, state, symbols))
            .collect();

        Explorer {
            first_index,
            events: self.events,
            start_ns: self.start_ns,
            end_ns: self.last_ns,
            series: Series {
                bucket_events: self.bucket_events,
                buckets: std::mem::take(&mut self.buckets),
                has_pools: state.has_pools(),
            },
            idle,
            phases,
            phases_left_out,
            allocations,
            allocation_threshold: self.threshold,
            allocations_total: self.allocations_total,
            stacks: interner.stacks,
            frames: interner.frames,
            sites: interner.sites,
            phase_paths: interner.phase_paths,
            checkpoints,
        }
    }

    /// The phases begun in the window, the outermost first up to the budget
    /// (then in order of beginning), and how many were left out.
    fn phase_marks(
        &self,
        state: &ReplayState,
        symbols: &SymbolTable,
        first_index: u64,
    ) -> (Vec<PhaseMark>, u64) {
        let end_index = first_index + self.events.saturating_sub(1);
        let instances = state.phases();
        let mut order: Vec<usize> = (0..instances.len())
            .filter(|&p| instances[p].begin_index >= first_index)
            .collect();
        order.sort_by_key(|&p| (instances[p].depth, p));
        let phases_left_out = order.len().saturating_sub(self.options.phase_budget) as u64;
        order.truncate(self.options.phase_budget);
        order.sort_unstable();
        let phases = order
            .iter()
            .map(|&p| {
                let inst = &instances[p];
                let end = self
                    .phase_end_index
                    .get(p)
                    .copied()
                    .filter(|&e| e != u64::MAX)
                    .unwrap_or(end_index);
                PhaseMark {
                    name: symbols.string_or_unknown(inst.name).to_string(),
                    depth: inst.depth,
                    begin_index: inst.begin_index,
                    end_index: end,
                    begin_ns: inst.begin_ns,
                    end_ns: inst.end_ns.unwrap_or(self.last_ns),
                }
            })
            .collect();
        (phases, phases_left_out)
    }

    /// The allocations kept, their stacks, sites and phases interned.
    fn allocation_records(
        &self,
        interner: &mut Interner,
        state: &ReplayState,
        symbols: &SymbolTable,
    ) -> Vec<AllocationRecord> {
        self.kept
            .iter()
            .map(|k| AllocationRecord {
                alloc_index: k.alloc_index,
                initial: k.initial,
                alloc_ns: k.alloc_ns,
                free_index: k.free.map(|f| f.0),
                free_ns: k.free.map(|f| f.1),
                size: k.size,
                requested: k.requested,
                addr: k.addr,
                stack: interner.stack(k.stack, k.site, state, symbols),
                site: interner.site(k.site, state, symbols),
                phase: interner.phase(k.phase, state, symbols),
                category: k.class.category,
                exact: k.class.exact,
            })
            .collect()
    }

    /// The checkpoints in event order, with the one at the end, merged
    /// where two reasons meet at one event.
    fn merged_checkpoints(&mut self, state: &ReplayState) -> Vec<RawCheckpoint> {
        let mut raw: Vec<RawCheckpoint> = Vec::new();
        raw.extend(self.allocated_peak.take());
        raw.extend(self.reserved_peak.take());
        raw.append(&mut self.ooms);
        raw.append(&mut self.even);
        if self.events > 0 {
            raw.push(self.capture(CheckpointKind::End, state));
        }
        raw.sort_by_key(|c| c.index);
        let mut merged: Vec<RawCheckpoint> = Vec::new();
        for c in raw {
            match merged.last_mut() {
                Some(last) if last.index == c.index => {
                    last.kinds.extend(c.kinds);
                    last.kinds.sort_unstable();
                    last.kinds.dedup();
                }
                _ => merged.push(c),
            }
        }
        merged
    }
}

/// A checkpoint as the page shows it: each kept block under its segment,
/// its stack interned and its allocation's record found by `record_of`.
fn page_checkpoint(
    c: RawCheckpoint,
    interner: &mut Interner,
    record_of: &impl Fn(u64) -> Option<u32>,
    state: &ReplayState,
    symbols: &SymbolTable,
) -> Checkpoint {
    let mut blocks = c.blocks.iter().peekable();
    let segments = c
        .segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            while blocks.peek().is_some_and(|b| b.0 < s.start) {
                blocks.next();
            }
            let mut kept = Vec::new();
            while let Some(b) = blocks.peek().filter(|b| b.0 < s.end) {
                kept.push(CheckpointBlock {
                    offset: b.0 - s.start,
                    size: b.1,
                    pending_free: b.2,
                    stack: interner.stack(b.3, b.5, state, symbols),
                    allocation: b.4.and_then(record_of),
                });
                blocks.next();
            }
            CheckpointSegment {
                addr: s.start,
                size: s.size(),
                expandable: s.expandable,
                used_bytes: c.used[i].0,
                used_blocks: c.used[i].1,
                largest_free: c.largest_free[i],
                blocks: kept,
            }
        })
        .collect();
    Checkpoint {
        kinds: c.kinds,
        index: c.index,
        time_ns: c.time_ns,
        allocated: c.allocated,
        pending_free: c.active.saturating_sub(c.allocated),
        reserved: c.reserved,
        external_fragmentation: c.free.external_fragmentation(),
        free: c.free,
        segments,
        blocks_left_out: c.blocks_left_out,
        segments_left_out: c.segments_left_out,
    }
}

/// Gives stacks, frames, sites and phase paths small indices, in order of
/// first use.
#[derive(Default)]
struct Interner {
    stack_ids: FxHashMap<StackId, u32>,
    stacks: Vec<Vec<u32>>,
    frame_ids: FxHashMap<u32, u32>,
    frames: Vec<String>,
    site_ids: FxHashMap<SiteId, u32>,
    sites: Vec<String>,
    phase_ids: FxHashMap<PhaseId, Option<u32>>,
    path_ids: FxHashMap<String, u32>,
    phase_paths: Vec<String>,
}

impl Interner {
    fn stack(
        &mut self,
        stack: StackId,
        site: SiteId,
        state: &ReplayState,
        symbols: &SymbolTable,
    ) -> u32 {
        if let Some(&i) = self.stack_ids.get(&stack) {
            return i;
        }
        // The frames inside the allocator (before the site's telling frame)
        // are left out: they are the same for every allocation.
        let all = symbols.stack(stack);
        let skip = state
            .sites()
            .info(site)
            .frame
            .and_then(|telling| all.iter().position(|&f| f == telling))
            .unwrap_or(0);
        let frames = all
            .iter()
            .skip(skip)
            .map(|&f| {
                let next = self.frames.len() as u32;
                *self.frame_ids.entry(f.0).or_insert_with(|| {
                    self.frames.push(symbols.describe_frame(f));
                    next
                })
            })
            .collect();
        let i = self.stacks.len() as u32;
        self.stacks.push(frames);
        self.stack_ids.insert(stack, i);
        i
    }

    fn site(&mut self, site: SiteId, state: &ReplayState, symbols: &SymbolTable) -> u32 {
        let next = self.sites.len() as u32;
        *self.site_ids.entry(site).or_insert_with(|| {
            self.sites.push(state.sites().name(site, symbols));
            next
        })
    }

    fn phase(&mut self, phase: PhaseId, state: &ReplayState, symbols: &SymbolTable) -> Option<u32> {
        if phase.is_none() {
            return None;
        }
        if let Some(&i) = self.phase_ids.get(&phase) {
            return i;
        }
        let path = state.phase_path(phase, symbols);
        let next = self.phase_paths.len() as u32;
        let i = *self.path_ids.entry(path.clone()).or_insert_with(|| {
            self.phase_paths.push(path);
            next
        });
        self.phase_ids.insert(phase, Some(i));
        Some(i)
    }
}
