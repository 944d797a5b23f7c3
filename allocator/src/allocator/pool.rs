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
            self.blocks[id as usize] = block;
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
        self.cached_since_release.push(id);
        if self.cached_since_release.len() > 2 * slab.blocks.len() + 64 {
            // Kept no longer than twice the blocks there are: the blocks
            // since taken go, each id once.
            let blocks = &self.blocks;
            let list = &mut self.cached_since_release;
            list.retain(|&id| blocks.get(&slab[id].size_key()) == Some(id));
            list.sort_unstable();
            list.dedup();
        }
    }

    /// The blocks cached since the last call that are still cached, in the
    /// cache's order, and a fresh start for the next call.
    pub fn take_cached_since_release(&mut self, slab: &Slab) -> Vec<(SizeKey, BlockId)> {
        let mut ids = std::mem::take(&mut self.cached_since_release);
        ids.sort_unstable();
        ids.dedup();
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
}
