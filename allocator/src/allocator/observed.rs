//! [`ObservedBlocks`]: the block sizes of an allocator known only through
//! the events it reports.
//!
//! PyTorch's trace entries give an allocation's address and the size the
//! caller asked for, not the size of the block it got: a request is rounded
//! ([`AllocatorConfig::round_size`]), and a cached block only a little larger
//! than the rounded request is handed out whole rather than split
//! ([`AllocatorConfig::should_split`]). Peaks of allocated memory count
//! block sizes, so they need the real ones.
//!
//! The block an allocation gets starts at the free block the allocator
//! picked, and that free block runs from the address to the next block in
//! use or the end of its segment: the allocator merges a block returning to
//! its cache with free neighbours, so two free blocks are never adjacent
//! within a segment. (Blocks freed but still in use on another stream are
//! not free, and are kept here until their `free_completed`.) Whether it was
//! split follows from that size and the policy, so the block size is known
//! exactly from the reported segments and blocks alone.
//!
//! A block of the small pool (at most [`SMALL_SIZE`]) needs none of this: its
//! rounded size is a multiple of 512 bytes, so what a free block has beyond it
//! is a whole block, always split off; and small blocks lie in segments of
//! their own. They are kept apart, in a hash map, which no free-space query
//! reads.

use super::config::{AllocatorConfig, SMALL_SIZE};
use super::reserved::ReservedRanges;
use crate::format::{BlockStatus, InitialState, SegmentState};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Segments and blocks in use of an observed allocator, rebuilt from its
/// events, to tell the size of each block it hands out: a block starts at
/// the free run the allocator picked, which runs to the next block in use
/// or the end of its segment, and whether it was split follows from that
/// run's size and the policy (`allocator/observed.rs` says why that is
/// exact).
#[derive(Clone, Debug)]
pub struct ObservedBlocks {
    config: AllocatorConfig,
    /// Reserved ranges by start address.
    reserved: ReservedRanges<()>,
    /// Large blocks not in the cache (allocated, or freed and waiting for
    /// other streams) by start address, with their sizes.
    blocks: BTreeMap<u64, u64>,
    /// The same for small blocks, whose sizes are their rounded ones.
    small: FxHashMap<u64, u64>,
}

impl ObservedBlocks {
    /// An allocator with nothing reserved, under the policy of `config`.
    pub fn new(config: AllocatorConfig) -> Self {
        ObservedBlocks {
            config,
            reserved: ReservedRanges::new(),
            blocks: BTreeMap::new(),
            small: FxHashMap::default(),
        }
    }

    /// Starts from `state`: its segments reserved (an expandable one as
    /// mapped pages), its allocated and pending blocks in use.
    pub fn load(&mut self, state: &InitialState) {
        for segment in &state.segments {
            self.load_segment(segment);
        }
    }

    /// Adds one segment of an initial state, with its blocks in use (see
    /// [`load`](Self::load)).
    pub fn load_segment(&mut self, segment: &SegmentState) {
        self.reserve(segment.addr, segment.size, segment.expandable);
        for block in &segment.blocks {
            if block.status != BlockStatus::Free {
                self.insert(block.addr, block.size);
            }
        }
    }

    /// The settings the policy is applied with.
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// A segment of `size` bytes at `addr` was reserved (`mapped`: pages
    /// mapped into an expandable segment, merged with mapped pages they
    /// touch; else a segment of its own, never merged: two segments that
    /// happen to be adjacent are still two).
    pub fn reserve(&mut self, addr: u64, size: u64, mapped: bool) {
        self.reserved.reserve(addr, size, mapped, ());
    }

    /// `size` bytes at `addr` were returned to the device: a whole segment,
    /// or pages unmapped from an expandable one (which may split its mapped
    /// range in two).
    pub fn release(&mut self, addr: u64, size: u64) {
        self.reserved.release(addr, size);
    }

    /// The block size of an allocation of `requested` bytes at `addr`, which
    /// is in use from now on.
    // `alloc`, `size` and `free` are called once per event of an imported
    // snapshot: inlined there (across crates, they are not without
    // `#[inline]`), the calls and moves around them go.
    #[inline]
    pub fn alloc(&mut self, addr: u64, requested: u64) -> u64 {
        let size = self.config.round_size(requested);
        if size <= SMALL_SIZE {
            self.small.insert(addr, size);
            return size;
        }
        let block = match self.free_at(addr) {
            Some(free) if free >= size => {
                if self.config.should_split(size <= SMALL_SIZE, free, size) {
                    size
                } else {
                    free
                }
            }
            // Not within a reserved range, or overlapping a block in use:
            // the events contradict each other, and the rounded size is the
            // best guess.
            _ => size,
        };
        self.blocks.insert(addr, block);
        block
    }

    /// The size of the block in use at `addr`, if any.
    #[inline]
    pub fn size(&self, addr: u64) -> Option<u64> {
        self.small
            .get(&addr)
            .or_else(|| self.blocks.get(&addr))
            .copied()
    }

    /// The block at `addr` went back to the cache; its size, if it was known.
    #[inline]
    pub fn free(&mut self, addr: u64) -> Option<u64> {
        self.small
            .remove(&addr)
            .or_else(|| self.blocks.remove(&addr))
    }

    fn insert(&mut self, addr: u64, size: u64) {
        if size <= SMALL_SIZE {
            self.small.insert(addr, size);
        } else {
            self.blocks.insert(addr, size);
        }
    }

    /// The free bytes from `addr` to the next block in use or the end of the
    /// reserved range holding `addr`; `None` when no range holds it or a
    /// block in use covers it.
    fn free_at(&self, addr: u64) -> Option<u64> {
        let (_, r) = self.reserved.holding(addr)?;
        if let Some((&start, &size)) = self.blocks.range(..=addr).next_back()
            && start.saturating_add(size) > addr
        {
            return None;
        }
        let next = self
            .blocks
            .range(addr + 1..)
            .next()
            .map_or(r.end, |(&start, _)| start.min(r.end));
        Some(next - addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::{CachingAllocator, MIB};
    use crate::device::SimulatedDevice;
    use crate::format::{EventData, SegmentState};
    use proptest::prelude::*;

    fn config(text: &str) -> AllocatorConfig {
        AllocatorConfig::parse(text).unwrap()
    }

    #[test]
    fn a_slightly_larger_cached_block_is_handed_out_whole() {
        let mut b = ObservedBlocks::new(AllocatorConfig::default());
        b.reserve(0, 20 * MIB, false);
        // A first request splits the new 20 MiB segment.
        assert_eq!(b.alloc(0, 4 * MIB), 4 * MIB);
        assert_eq!(b.free(0), Some(4 * MIB));
        // Free again, the block merged with the rest of the segment: split.
        assert_eq!(b.alloc(0, 3 * MIB + MIB / 2), 3 * MIB + MIB / 2);
        b.alloc(4 * MIB, 16 * MIB);
        b.free(0);
        // Now the free block at 0 is 4 MiB: 3.5 MiB of it would leave 0.5
        // MiB, too little to split off a large block.
        assert_eq!(b.alloc(0, 3 * MIB + MIB / 2), 4 * MIB);
        assert_eq!(b.size(0), Some(4 * MIB));
    }

    #[test]
    fn adjacent_segments_are_not_one_free_run() {
        let mut b = ObservedBlocks::new(AllocatorConfig::default());
        b.reserve(0, 20 * MIB, false);
        b.reserve(20 * MIB, 20 * MIB, false);
        // 19 MiB of the first segment leaves under 1 MiB: handed out whole,
        // although the next segment's free space follows it.
        assert_eq!(b.alloc(0, 19 * MIB + 1), 20 * MIB);
        assert_eq!(b.alloc(20 * MIB, MIB + 1), MIB + 512);
    }

    #[test]
    fn mapped_pages_merge_and_unmapping_splits_them() {
        let mut b = ObservedBlocks::new(config("expandable_segments:True"));
        b.reserve(0, 20 * MIB, true);
        b.reserve(20 * MIB, 20 * MIB, true);
        assert_eq!(b.free_at(0), Some(40 * MIB));
        b.release(10 * MIB, 10 * MIB);
        assert_eq!(b.free_at(0), Some(10 * MIB));
        assert_eq!(b.free_at(20 * MIB), Some(20 * MIB));
        assert_eq!(b.free_at(15 * MIB), None);
        // Expandable: split whenever 512 bytes remain.
        assert_eq!(b.alloc(20 * MIB, 20 * MIB - 1024), 20 * MIB - 1024);
    }

    #[test]
    fn an_initial_state_seeds_segments_and_blocks() {
        let mut b = ObservedBlocks::new(AllocatorConfig::default());
        let block = |addr, size, status| crate::format::BlockState {
            addr,
            size,
            requested: size,
            status,
            stack: Default::default(),
        };
        b.load(&InitialState {
            segments: vec![SegmentState {
                addr: 0,
                size: 20 * MIB,
                blocks: vec![
                    block(0, 2 * MIB, BlockStatus::Allocated),
                    block(2 * MIB, 2 * MIB, BlockStatus::Free),
                    block(4 * MIB, 16 * MIB, BlockStatus::PendingFree),
                ],
                ..Default::default()
            }],
        });
        assert_eq!(b.size(0), Some(2 * MIB));
        assert_eq!(b.size(4 * MIB), Some(16 * MIB));
        assert_eq!(b.free_at(2 * MIB), Some(2 * MIB));
    }

    /// One step of a workload: allocate (size, stream) or free the n-th live
    /// block, or empty the cache.
    #[derive(Clone, Debug)]
    enum Step {
        Alloc(u64, u64),
        Free(usize),
        EmptyCache,
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let size = prop_oneof![
            1u64..4096,
            4096u64..(1 << 20),
            (1u64 << 20)..(12 << 20),
            (12u64 << 20)..(200 << 20),
        ];
        let step = prop_oneof![
            6 => (size, 0u64..2).prop_map(|(s, st)| Step::Alloc(s, st)),
            5 => any::<usize>().prop_map(Step::Free),
            1 => Just(Step::EmptyCache),
        ];
        proptest::collection::vec(step, 1..300)
    }

    /// Runs `steps` on vramtrace's own allocator (PyTorch's policy) and
    /// checks that the block sizes inferred from its events, with the sizes
    /// taken out, are the sizes it gave.
    fn check_inference(conf: &str, steps: &[Step]) {
        let config = config(conf);
        let device = SimulatedDevice::new(2 << 30);
        let mut alloc = CachingAllocator::new(device, config.clone());
        let mut observed = ObservedBlocks::new(config);
        let mut live: Vec<u64> = Vec::new();
        for step in steps {
            match *step {
                Step::Alloc(size, stream) => {
                    if let Ok(a) = alloc.malloc(size, stream) {
                        live.push(a.addr);
                    }
                }
                Step::Free(i) if !live.is_empty() => {
                    let addr = live.swap_remove(i % live.len());
                    alloc.free(addr).unwrap();
                }
                Step::Free(_) => {}
                Step::EmptyCache => alloc.empty_cache(),
            }
            for event in alloc.drain_events() {
                match event {
                    EventData::SegmentAlloc(s) => observed.reserve(s.addr, s.size, false),
                    EventData::SegmentMap(s) => observed.reserve(s.addr, s.size, true),
                    EventData::SegmentFree(s) | EventData::SegmentUnmap(s) => {
                        observed.release(s.addr, s.size)
                    }
                    EventData::Alloc(b) => {
                        assert_eq!(
                            observed.alloc(b.addr, b.requested),
                            b.size,
                            "block at {:#x} for {} bytes under {conf:?}",
                            b.addr,
                            b.requested
                        );
                    }
                    EventData::FreeRequested(b) => assert_eq!(observed.size(b.addr), Some(b.size)),
                    EventData::FreeCompleted(b) => assert_eq!(observed.free(b.addr), Some(b.size)),
                    _ => {}
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn inferred_sizes_are_the_policys(steps in steps()) {
            check_inference("", &steps);
        }

        #[test]
        fn inferred_sizes_are_the_policys_with_max_split_size(steps in steps()) {
            check_inference("max_split_size_mb:40,roundup_power2_divisions:4", &steps);
        }

        #[test]
        fn inferred_sizes_are_the_policys_with_expandable_segments(steps in steps()) {
            check_inference("expandable_segments:True", &steps);
        }
    }
}
