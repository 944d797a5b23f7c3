//! Blocks and the pools of free blocks, with PyTorch's orderings.
//!
//! Blocks live in a slab and link to their segment neighbours by index, so an
//! allocation reuses slots instead of boxing a node, and the pools' indexes
//! hold plain `(stream, size, address)` keys.

use super::index::SizeIndex;
pub(crate) use super::index::{BlockId, SizeKey};
use std::collections::BTreeMap;

/// No block (end of a segment's chain, or no expandable segment).
pub(crate) const NONE: u32 = u32::MAX;

#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub addr: u64,
    pub size: u64,
    pub requested: u64,
    pub stream: u64,
    pub prev: BlockId,
    pub next: BlockId,
    /// The expandable segment holding this block, or [`NONE`].
    pub segment: u32,
    pub small: bool,
    /// The pool it belongs to: 0 the default pools, `n` the allocator's
    /// `n`th private pool.
    pub pool: u16,
    pub allocated: bool,
    /// Backed by memory; false only for the unmapped parts of expandable segments.
    pub mapped: bool,
    /// Streams (other than its own) whose pending work still uses the block
    /// once it is freed.
    pub pending_uses: u32,
    /// The pool's free-block search count when the block was cached (for GC age).
    pub gc_count_base: u64,
    /// The pool ([`list_mark`]) whose list of the blocks cached since the
    /// last release (`BlockPool::cached_since_release`) holds this block's
    /// id, or 0: caching a block whose id is listed there adds nothing. A
    /// mark of the id, not of the block: a block put in a reused slot keeps
    /// it ([`Slab::insert`]), as the list still holds the id.
    pub listed: u32,
}

impl Block {
    #[inline]
    pub fn new(addr: u64, size: u64, stream: u64, small: bool) -> Self {
        Block {
            addr,
            size,
            requested: 0,
            stream,
            prev: NONE,
            next: NONE,
            segment: NONE,
            small,
            pool: 0,
            allocated: false,
            mapped: true,
            pending_uses: 0,
            gc_count_base: 0,
            listed: 0,
        }
    }

    #[inline]
    pub fn is_split(&self) -> bool {
        self.prev != NONE || self.next != NONE
    }

    #[inline]
    pub fn size_key(&self) -> SizeKey {
        (self.stream, self.size, self.addr)
    }

    pub fn addr_key(&self) -> AddrKey {
        (self.stream, self.addr)
    }
}

/// PyTorch's `BlockComparatorAddress`: stream, then address.
pub(crate) type AddrKey = (u64, u64);

/// What [`Block::listed`] holds for the pool of index `pool` (0: the default
/// pools) and size `small`: never 0.
#[inline]
pub(crate) fn list_mark(pool: u16, small: bool) -> u32 {
    pool as u32 * 2 + small as u32 + 1
}

/// Block storage with slot reuse.
#[derive(Debug, Default)]
pub(crate) struct Slab {
    blocks: Vec<Block>,
    free: Vec<BlockId>,
}

impl Slab {
    #[inline]
    pub fn insert(&mut self, block: Block) -> BlockId {
        if let Some(id) = self.free.pop() {
            // The list that holds this id still does.
            let listed = self.blocks[id as usize].listed;
            self.blocks[id as usize] = Block { listed, ..block };
            id
        } else {
            self.blocks.push(block);
            (self.blocks.len() - 1) as BlockId
        }
    }

    #[inline]
    pub fn remove(&mut self, id: BlockId) {
        self.free.push(id);
    }

    #[cfg(test)]
    pub fn live(&self) -> usize {
        self.blocks.len() - self.free.len()
    }
}

impl std::ops::Index<BlockId> for Slab {
    type Output = Block;
    #[inline]
    fn index(&self, id: BlockId) -> &Block {
        &self.blocks[id as usize]
    }
}

impl std::ops::IndexMut<BlockId> for Slab {
    #[inline]
    fn index_mut(&mut self, id: BlockId) -> &mut Block {
        &mut self.blocks[id as usize]
    }
}

/// The cached free blocks of one pool (small or large), all streams.
#[derive(Debug, Default)]
pub(crate) struct BlockPool {
    /// Free mapped blocks, by (stream, size, address).
    pub blocks: SizeIndex,
    /// Unmapped ranges of expandable segments, by (stream, address).
    pub unmapped: BTreeMap<AddrKey, BlockId>,
    /// Free-block searches so far (only counted while GC is active).
    pub get_free_blocks_call_count: u64,
    /// The blocks cached since the last release of cached blocks (some
    /// taken again since, some twice). A cached block changes only by
    /// leaving the cache, so only these can have become releasable: a
    /// release looks at them rather than at every cached block, and a
    /// run of `empty_cache()` calls over a cache of split blocks costs the
    /// blocks cached in between, not the cache each time.
    cached_since_release: Vec<BlockId>,
}

impl BlockPool {
    /// Caches a free block, stamping it for GC age.
    #[inline]
    pub fn insert(&mut self, slab: &mut Slab, id: BlockId) {
        let b = &mut slab[id];
        b.gc_count_base = self.get_free_blocks_call_count;
        let fresh = self.blocks.insert(b.size_key(), id);
        debug_assert!(fresh, "block cached twice");
        // An id listed here is in the list already: a block cached, taken
        // and cached again between two releases (a split's remainder, each
        // time), or a block in the slot of one that was, is added once. A
        // block is cached in the pool its `pool` and `small` name
        // (`Pools::cache`), so the mark names this pool.
        let mark = list_mark(b.pool, b.small);
        if b.listed != mark {
            b.listed = mark;
            self.cached_since_release.push(id);
            if self.cached_since_release.len() > 2 * slab.blocks.len() + 64 {
                self.compact(slab, mark);
            }
        }
    }

    /// Keeps the list no longer than twice the slots there are: an id whose
    /// slot no longer has this pool's mark holds no block cached here since
    /// the last release (its block went and the slot was cached in another
    /// pool since), and an id that has it is kept once. (An id comes back
    /// in the list only after its slot went to another pool's block.)
    #[cold]
    fn compact(&mut self, slab: &mut Slab, mark: u32) {
        // Each id kept takes the mark 0 until the end, so that it is kept
        // once, in the order first listed.
        self.cached_since_release.retain(|&id| {
            let keep = slab[id].listed == mark;
            if keep {
                slab[id].listed = 0;
            }
            keep
        });
        for &id in &self.cached_since_release {
            slab[id].listed = mark;
        }
    }

    /// The blocks cached since the last call that are still cached, in the
    /// cache's order, and a fresh start for the next call; `mark` is this
    /// pool's [`list_mark`].
    pub fn take_cached_since_release(
        &mut self,
        slab: &mut Slab,
        mark: u32,
    ) -> Vec<(SizeKey, BlockId)> {
        let mut ids = std::mem::take(&mut self.cached_since_release);
        ids.sort_unstable();
        ids.dedup();
        // None of these is listed here now; an id listed in another pool's
        // list (its slot reused there) stays so.
        for &id in &ids {
            if slab[id].listed == mark {
                slab[id].listed = 0;
            }
        }
        let mut cached: Vec<(SizeKey, BlockId)> = ids
            .into_iter()
            .map(|id| (slab[id].size_key(), id))
            .filter(|(key, id)| self.blocks.get(key) == Some(*id))
            .collect();
        cached.sort_unstable();
        cached
    }

    /// The smallest free block of `stream` with at least `size` bytes.
    pub fn lower_bound(&self, stream: u64, size: u64) -> Option<(SizeKey, BlockId)> {
        self.blocks.range_from(stream, size).next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_orders_by_stream_size_address() {
        let mut slab = Slab::default();
        let mut pool = BlockPool::default();
        for (addr, size, stream) in [
            (0x3000, 4096, 0),
            (0x1000, 4096, 0),
            (0x9000, 8192, 0),
            (0x5000, 1024, 1),
        ] {
            let id = slab.insert(Block::new(addr, size, stream, false));
            pool.insert(&mut slab, id);
        }
        let (_, id) = pool.lower_bound(0, 2048).unwrap();
        assert_eq!(slab[id].addr, 0x1000);
        let (_, id) = pool.lower_bound(0, 5000).unwrap();
        assert_eq!(slab[id].addr, 0x9000);
        assert!(pool.lower_bound(0, 9000).is_none());
        assert!(pool.lower_bound(1, 2048).is_none());
        slab.remove(id);
        assert_eq!(slab.live(), 3);
    }

    /// The ids a pool's take returns, by address.
    fn taken(pool: &mut BlockPool, slab: &mut Slab, small: bool) -> Vec<u64> {
        (pool
            .take_cached_since_release(slab, list_mark(0, small))
            .iter())
        .map(|&(_, id)| slab[id].addr)
        .collect()
    }

    #[test]
    fn a_block_cached_again_is_listed_once_and_taken_once() {
        let mut slab = Slab::default();
        let mut large = BlockPool::default();
        let id = slab.insert(Block::new(0x1000, 4096, 0, false));
        large.insert(&mut slab, id);
        large.blocks.remove(&slab[id].size_key());
        large.insert(&mut slab, id);
        assert_eq!(large.cached_since_release, [id]);
        assert_eq!(taken(&mut large, &mut slab, false), [0x1000]);
        // Taken: the next release sees it only if it is cached again.
        assert!(taken(&mut large, &mut slab, false).is_empty());
        large.blocks.remove(&slab[id].size_key());
        large.insert(&mut slab, id);
        assert_eq!(taken(&mut large, &mut slab, false), [0x1000]);
    }

    #[test]
    fn a_reused_slot_is_listed_in_the_pool_of_its_new_block() {
        let mut slab = Slab::default();
        let (mut small, mut large) = (BlockPool::default(), BlockPool::default());
        // A small block cached and released: the small pool's list is
        // empty after.
        let id = slab.insert(Block::new(0x1000, 512, 0, true));
        small.insert(&mut slab, id);
        assert_eq!(taken(&mut small, &mut slab, true), [0x1000]);
        small.blocks.remove(&slab[id].size_key());
        slab.remove(id);
        // Its slot goes to a large block, cached in the large pool.
        assert_eq!(slab.insert(Block::new(0x8000, 4096, 0, false)), id);
        large.insert(&mut slab, id);
        large.blocks.remove(&slab[id].size_key());
        slab.remove(id);
        // Then to a small block again: listed in the small pool's list,
        // although the large pool's mark is on its slot.
        assert_eq!(slab.insert(Block::new(0x2000, 512, 0, true)), id);
        small.insert(&mut slab, id);
        assert_eq!(small.cached_since_release, [id]);
        assert_eq!(taken(&mut small, &mut slab, true), [0x2000]);
        assert!(taken(&mut large, &mut slab, false).is_empty());
        // A slot reused by a block of the same pool is listed already.
        small.blocks.remove(&slab[id].size_key());
        slab.remove(id);
        assert_eq!(slab.insert(Block::new(0x9000, 4096, 0, false)), id);
        large.insert(&mut slab, id);
        assert_eq!(large.cached_since_release, [id]);
        large.blocks.remove(&slab[id].size_key());
        slab.remove(id);
        assert_eq!(slab.insert(Block::new(0xa000, 4096, 0, false)), id);
        large.insert(&mut slab, id);
        assert_eq!(large.cached_since_release, [id]);
        assert_eq!(taken(&mut large, &mut slab, false), [0xa000]);
    }

    #[test]
    fn the_list_stays_short_and_keeps_what_is_cached() {
        let mut slab = Slab::default();
        let (mut small, mut large) = (BlockPool::default(), BlockPool::default());
        // Cached before the churn and kept cached through it.
        let kept = slab.insert(Block::new(0x1000, 512, 0, true));
        small.insert(&mut slab, kept);
        // One slot going from a small block to a large one and back: each
        // small block is listed anew, as the large pool marked the slot.
        for i in 0..200 {
            let id = slab.insert(Block::new(0x10_0000 + i * 0x1000, 512, 0, true));
            small.insert(&mut slab, id);
            small.blocks.remove(&slab[id].size_key());
            slab.remove(id);
            let id = slab.insert(Block::new(0x100_0000, 4096, 0, false));
            large.insert(&mut slab, id);
            large.blocks.remove(&slab[id].size_key());
            slab.remove(id);
        }
        assert!(small.cached_since_release.len() <= 2 * slab.blocks.len() + 64);
        let last = slab.insert(Block::new(0x2000, 512, 0, true));
        small.insert(&mut slab, last);
        assert_eq!(taken(&mut small, &mut slab, true), [0x1000, 0x2000]);
        assert!(taken(&mut large, &mut slab, false).is_empty());
    }
}
