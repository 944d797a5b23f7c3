//! The live blocks by address: an open-addressed table whose slot for an
//! address is known before the event that needs it is replayed.
//!
//! A free finds its block in a table of thousands, at an address the
//! allocator chose, so nearly every lookup waits on memory: with std's map,
//! the probe's first load was 44% of a free's samples (issue #47). Here a
//! block lies whole in the one cache line of its slot, and
//! [`LiveBlocks::prefetch`] asks for that line while the events before it
//! are replayed: the pass knows the addresses a few events ahead.
//!
//! Linear probing, at most half full, with backward-shift deletion:
//! no tombstones, so a table that sees millions of frees stays as short to
//! probe as it was. (With tombstones, the probes grew and the table was
//! rebuilt every few thousand frees: 1.15× the replay's time.) A removal
//! reads the slots after its hole up to an empty one, so the prefetch asks
//! for the slot after the home one too. The home slot comes from the
//! address's product's top bits (Fibonacci hashing): allocators hand out
//! addresses aligned to 512 bytes or more, so their low bits say nothing.

use super::LiveAlloc;
use crate::prefetch::prefetch_read;

/// One slot: a block, alone on its cache line, or none.
#[derive(Clone, Copy, Debug, Default)]
#[repr(align(64))]
struct Slot(Option<LiveAlloc>);

/// The live blocks, by address (see the module docs).
#[derive(Clone, Default)]
pub(crate) struct LiveBlocks {
    /// A power of two in length, or empty before the first insert.
    slots: Box<[Slot]>,
    len: usize,
    /// `64 - log2(slots.len())`: the product's bits that are not the slot.
    shift: u32,
}

/// Slots a table starts with.
const FIRST_SLOTS: usize = 64;

/// The fewest slots for which [`LiveBlocks::prefetch`] asks for any: 256
/// KiB, a quarter of the smaller L2 cache of the machines measured. Below
/// that, the lookups find their lines in cache and the prefetch would only
/// cost its instructions (about 30 an event, 3% of a trace's `summary`).
const PREFETCHED_FROM: usize = 4096;

/// 2^64 divided by the golden ratio: its product with an address spreads
/// the address's bits into the top ones.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

impl LiveBlocks {
    /// The blocks held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The slot where a probe for `addr` starts (the table is not empty).
    #[inline(always)]
    fn home(&self, addr: u64) -> usize {
        (addr.wrapping_mul(FIBONACCI) >> self.shift) as usize
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding the block at `addr`.
    #[inline(always)]
    fn find(&self, addr: u64) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut i = self.home(addr);
        // The table is never full, so an empty slot ends every probe.
        while let Some(block) = &self.slots[i].0 {
            if block.addr == addr {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Asks the CPU for the cache lines a lookup, insert or removal at
    /// `addr` reads first, without waiting for them: the slot where its
    /// probe starts (the block is there, or not far after) and the one
    /// after it (where a probe goes on, and a removal looks for a block to
    /// move back). A table of fewer than [`PREFETCHED_FROM`] slots is left
    /// to the caches, which hold it anyway.
    #[inline(always)]
    pub(crate) fn prefetch(&self, addr: u64) {
        if self.slots.len() < PREFETCHED_FROM {
            return;
        }
        // Addresses worked out, not slots indexed: no bounds checks. The
        // last slot's next is one past the end, which a prefetch may name.
        let home = self.slots.as_ptr().wrapping_add(self.home(addr));
        prefetch_read(home);
        prefetch_read(home.wrapping_add(1));
    }

    /// The block at `addr`.
    #[inline(always)]
    pub(crate) fn get(&self, addr: u64) -> Option<&LiveAlloc> {
        self.find(addr).and_then(|i| self.slots[i].0.as_ref())
    }

    /// The block at `addr`, to change it (its address stays).
    #[inline(always)]
    pub(crate) fn get_mut(&mut self, addr: u64) -> Option<&mut LiveAlloc> {
        self.find(addr).and_then(|i| self.slots[i].0.as_mut())
    }

    /// Whether a block lies at `addr`.
    pub(crate) fn contains(&self, addr: u64) -> bool {
        self.find(addr).is_some()
    }

    /// Adds `block` at its address, and returns the block it replaces there.
    #[inline(always)]
    pub(crate) fn insert(&mut self, block: LiveAlloc) -> Option<LiveAlloc> {
        // At most half full: a linear probe for an absent address then
        // reads about two and a half slots on average. (Five eighths full
        // measured the same within the noise, in the same peak memory, on
        // a 3 M-event snapshot.)
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(block.addr);
        loop {
            match &mut self.slots[i].0 {
                Some(old) if old.addr == block.addr => return Some(std::mem::replace(old, block)),
                Some(_) => i = (i + 1) & mask,
                empty @ None => {
                    *empty = Some(block);
                    self.len += 1;
                    return None;
                }
            }
        }
    }

    /// Takes out the block at `addr`.
    #[inline(always)]
    pub(crate) fn remove(&mut self, addr: u64) -> Option<LiveAlloc> {
        let mut hole = self.find(addr)?;
        let removed = self.slots[hole].0.take();
        self.len -= 1;
        // The blocks after the hole, up to the next empty slot, move back
        // into it if their probe starts at or before it, so that no probe
        // meets an empty slot before its block.
        let mask = self.mask();
        let mut next = (hole + 1) & mask;
        while let Some(block) = self.slots[next].0 {
            let from_home = next.wrapping_sub(self.home(block.addr)) & mask;
            if from_home >= (next.wrapping_sub(hole) & mask) {
                self.slots[hole].0 = Some(block);
                self.slots[next].0 = None;
                hole = next;
            }
            next = (next + 1) & mask;
        }
        removed
    }

    /// The blocks, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &LiveAlloc> + '_ {
        self.slots.iter().filter_map(|slot| slot.0.as_ref())
    }

    /// Twice the slots (or the first ones), every block put back.
    #[cold]
    fn grow(&mut self) {
        let slots = (self.slots.len() * 2).max(FIRST_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); slots].into());
        self.shift = 64 - slots.trailing_zeros();
        self.len = 0;
        for block in old.iter().filter_map(|slot| slot.0) {
            self.insert(block);
        }
    }
}

impl std::fmt::Debug for LiveBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.values().map(|block| (block.addr, block)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{Birth, Class, PhaseId, SiteId};
    use proptest::prelude::*;
    use std::collections::HashMap;
    use vramtrace_format::StackId;

    fn block(addr: u64, size: u64) -> LiveAlloc {
        LiveAlloc {
            addr,
            size,
            requested: size,
            stack: StackId(0),
            site: SiteId(0),
            phase: PhaseId::NONE,
            time_ns: 0,
            free_requested: false,
            born: 0,
            class: Class::inferred(crate::replay::Category::Other),
            birth: Birth::default(),
        }
    }

    #[test]
    fn a_slot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }

    #[test]
    fn an_empty_table_finds_nothing_and_is_safe_to_prefetch_in() {
        let mut live = LiveBlocks::default();
        live.prefetch(0x1000);
        assert!(live.get(0x1000).is_none());
        assert!(live.remove(0x1000).is_none());
        assert_eq!(live.len(), 0);
    }

    #[test]
    fn a_block_at_the_same_address_replaces_the_old_one() {
        let mut live = LiveBlocks::default();
        assert!(live.insert(block(0x200, 512)).is_none());
        let old = live.insert(block(0x200, 1024)).unwrap();
        assert_eq!(old.size, 512);
        assert_eq!(live.get(0x200).unwrap().size, 1024);
        assert_eq!(live.len(), 1);
    }

    #[test]
    fn blocks_whose_probes_wrap_around_the_end_stay_findable_after_removals() {
        let mut live = LiveBlocks::default();
        live.insert(block(1, 1));
        // Addresses sharing the last slot as their home: each probe wraps.
        let last = live.mask();
        let same_home: Vec<u64> = (0u64..)
            .map(|k| k << 9)
            .filter(|&a| live.home(a) == last)
            .take(8)
            .collect();
        for &a in &same_home {
            live.insert(block(a, a));
        }
        for &a in same_home.iter().step_by(2) {
            assert_eq!(live.remove(a).unwrap().addr, a);
        }
        for (k, &a) in same_home.iter().enumerate() {
            assert_eq!(live.get(a).is_some(), k % 2 == 1, "block {a:#x}");
        }
        assert!(live.get(1).is_some());
    }

    proptest! {
        /// Any sequence of inserts and removals leaves the table holding
        /// what a map would hold, through its growths.
        #[test]
        fn it_holds_what_a_map_holds(
            ops in prop::collection::vec((any::<bool>(), 0u64..600, 0u64..4), 0..2000),
        ) {
            let mut live = LiveBlocks::default();
            let mut model = HashMap::new();
            for (insert, slot, high) in ops {
                // Addresses aligned as an allocator's, some far apart.
                let addr = (high << 40) | (slot << 9);
                if insert {
                    let old = live.insert(block(addr, slot));
                    prop_assert_eq!(old.map(|b| b.size), model.insert(addr, slot));
                } else {
                    prop_assert_eq!(live.remove(addr).map(|b| b.size), model.remove(&addr));
                }
                prop_assert_eq!(live.len(), model.len());
            }
            for (&addr, &size) in &model {
                prop_assert_eq!(live.get(addr).map(|b| b.size), Some(size));
            }
            prop_assert_eq!(live.values().count(), model.len());
            prop_assert!(live.values().all(|b| model.get(&b.addr) == Some(&b.size)));
        }
    }
}
