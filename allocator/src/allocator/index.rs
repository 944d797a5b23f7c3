//! The free-block index of a pool: PyTorch's best-fit order (stream, then
//! size, then address) without a balanced tree.
//!
//! A `BTreeMap<(stream, size, address), _>` spent most of an alloc+free pair
//! comparing tuples and shifting nodes. Here each stream has its own index,
//! and within it blocks are segregated into size classes (eight per power of
//! two, as in TLSF) with a bitmap of the non-empty ones. A class holds its
//! blocks sorted by (size, address); classes are ordered, so the first block
//! at or above a size is either in that size's class or the first block of
//! the next non-empty class, found with a bit scan. Classes usually hold zero
//! to a few blocks, in one `Vec`.
//!
//! An insert or remove `memmove`s the rest of its `Vec`, so a class holding
//! a huge number of free blocks (one stream, one eighth of a power of two:
//! heavy small-pool fragmentation) would cost more than a tree. A class is
//! therefore split in chunks of at most [`CHUNK`] blocks (see [`Class`]).
//! Measured with callgrind (instructions per free+malloc pair of 512 bytes
//! on one stream, after 100,000 allocations of 512 bytes with every other
//! one freed: 50,000 free blocks in one class): 1,313,636 with one `Vec` per
//! class, 3,172 with chunks of 512. The price is a check for chunks on each
//! operation: the bench's `raw` workload went from 1,048 to 1,085
//! instructions per pair.

/// Index of a block in the pool's slab: what the index finds.
pub(crate) type BlockId = u32;
/// PyTorch's `BlockComparatorSize`: stream, then size, then address; what
/// the index orders by.
pub(crate) type SizeKey = (u64, u64, u64);

/// Sizes are counted in 512-byte units (the allocator's rounding unit), so
/// the first classes are exact.
const UNIT_SHIFT: u32 = 9;
/// log2 of the classes per power of two.
const SUB_BITS: u32 = 3;
const SUBS: usize = 1 << SUB_BITS;
/// Enough classes for any `u64` size: the top class is that of `u64::MAX`.
const CLASSES: usize = size_class(u64::MAX) + 1;
const WORDS: usize = CLASSES.div_ceil(64);

/// The size class of `size`: non-decreasing in `size`, so every block of a
/// class is smaller than every block of a later class.
#[inline]
const fn size_class(size: u64) -> usize {
    let units = size >> UNIT_SHIFT;
    if units < SUBS as u64 {
        return units as usize;
    }
    let log = 63 - units.leading_zeros();
    let sub = (units >> (log - SUB_BITS)) as usize & (SUBS - 1);
    (log - SUB_BITS + 1) as usize * SUBS + sub
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    size: u64,
    addr: u64,
    id: BlockId,
}

impl Entry {
    #[inline]
    fn key(&self, stream: u64) -> SizeKey {
        (stream, self.size, self.addr)
    }
}

/// The most blocks a chunk of a class holds: a class with more is split in
/// chunks, so that an insert or remove moves at most this many entries. Small
/// under test, so that the tests exercise splits and merges.
#[cfg(not(test))]
const CHUNK: usize = 512;
#[cfg(test)]
const CHUNK: usize = 4;

/// The blocks of one size class, sorted by (size, address): an unrolled list,
/// chunks of at most [`CHUNK`] entries in order. Nearly always one chunk,
/// `head`, kept inline so that the common case costs one `Vec`, as before
/// classes were chunked.
///
/// Chunks are never empty when there are several, and two neighbours hold
/// more than `CHUNK / 2` blocks together, so a class of `n` blocks has at
/// most about `4 * n / CHUNK` chunks.
#[derive(Debug, Default)]
struct Class {
    head: Vec<Entry>,
    /// The chunks after `head`.
    tail: Vec<Vec<Entry>>,
}

impl Class {
    #[inline]
    fn is_empty(&self) -> bool {
        self.head.is_empty()
    }

    #[inline]
    fn chunks(&self) -> usize {
        self.tail.len() + 1
    }

    #[inline(always)]
    fn chunk(&self, c: usize) -> &Vec<Entry> {
        if c == 0 {
            &self.head
        } else {
            &self.tail[c - 1]
        }
    }

    #[inline(always)]
    fn chunk_mut(&mut self, c: usize) -> &mut Vec<Entry> {
        if c == 0 {
            &mut self.head
        } else {
            &mut self.tail[c - 1]
        }
    }

    // Each operation has a path for a class of one chunk, the code of an
    // unchunked class, and an out-of-line one for several chunks: with the
    // general case inlined, the allocator ran ~3% more instructions per
    // pair (register spills).

    /// The chunk holding the first entry for which `below` is false, or the
    /// last chunk if there is none, and that entry's place in it; `below`
    /// must be true of a prefix of the class.
    #[inline(always)]
    fn partition_point(&self, below: impl Fn(&Entry) -> bool) -> (usize, usize) {
        if self.tail.is_empty() {
            (0, self.head.partition_point(below))
        } else {
            self.partition_point_chunked(&below)
        }
    }

    #[cold]
    #[inline(never)]
    fn partition_point_chunked(&self, below: &dyn Fn(&Entry) -> bool) -> (usize, usize) {
        // Over all chunks but the last, which catches everything after them.
        let (mut lo, mut hi) = (0, self.tail.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            // Chunks are not empty when there are several.
            if below(self.chunk(mid).last().unwrap()) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo, self.chunk(lo).partition_point(below))
    }

    #[cold]
    #[inline(never)]
    fn find_chunked(&self, size: u64, addr: u64) -> (usize, Result<usize, usize>) {
        let (c, _) = self.partition_point_chunked(&|e| (e.size, e.addr) < (size, addr));
        (c, find(self.chunk(c), size, addr))
    }

    /// The block of (`size`, `addr`), if there is one.
    fn get(&self, size: u64, addr: u64) -> Option<BlockId> {
        let (c, pos) = if self.tail.is_empty() {
            (0, find(&self.head, size, addr))
        } else {
            self.find_chunked(size, addr)
        };
        pos.ok().map(|pos| self.chunk(c)[pos].id)
    }

    /// Adds `e`; false (and no change) if its (size, address) is there.
    #[inline]
    fn insert(&mut self, e: Entry) -> bool {
        if !self.tail.is_empty() {
            return self.insert_chunked(e);
        }
        let Err(pos) = find(&self.head, e.size, e.addr) else {
            return false;
        };
        self.head.insert(pos, e);
        if self.head.len() > CHUNK {
            self.split(0);
        }
        true
    }

    #[cold]
    #[inline(never)]
    fn insert_chunked(&mut self, e: Entry) -> bool {
        let (c, Err(pos)) = self.find_chunked(e.size, e.addr) else {
            return false;
        };
        let chunk = self.chunk_mut(c);
        chunk.insert(pos, e);
        if chunk.len() > CHUNK {
            self.split(c);
        }
        true
    }

    #[cold]
    #[inline(never)]
    fn split(&mut self, c: usize) {
        let chunk = self.chunk_mut(c);
        let upper = chunk.split_off(chunk.len() / 2);
        self.tail.insert(c, upper);
    }

    /// Removes the block of (`size`, `addr`), if there.
    #[inline]
    fn remove(&mut self, size: u64, addr: u64) -> Option<Entry> {
        if self.tail.is_empty() {
            let pos = find(&self.head, size, addr).ok()?;
            Some(self.head.remove(pos))
        } else {
            let (c, pos) = self.find_chunked(size, addr);
            Some(self.remove_at_chunked(c, pos.ok()?))
        }
    }

    /// Removes the entry at `pos` of chunk `c`.
    #[inline]
    fn remove_at(&mut self, c: usize, pos: usize) -> Entry {
        if self.tail.is_empty() {
            self.head.remove(pos)
        } else {
            self.remove_at_chunked(c, pos)
        }
    }

    #[cold]
    #[inline(never)]
    fn remove_at_chunked(&mut self, c: usize, pos: usize) -> Entry {
        let e = self.chunk_mut(c).remove(pos);
        self.rebalance(c);
        e
    }

    /// Restores the invariants of several chunks after a remove from chunk
    /// `c`: drops it if empty, else merges it into its smaller neighbour if
    /// the two hold at most `CHUNK / 2` blocks, which keeps every pair of
    /// neighbours above that (the neighbour's other pair only grows).
    fn rebalance(&mut self, c: usize) {
        let len = self.chunk(c).len();
        if len == 0 {
            self.remove_chunk(c);
            return;
        }
        let next = (c + 1 < self.chunks()).then_some(c + 1);
        let j = match (c.checked_sub(1), next) {
            (Some(p), Some(n)) if self.chunk(n).len() < self.chunk(p).len() => n,
            (Some(p), _) => p,
            (None, Some(n)) => n,
            (None, None) => return,
        };
        if len + self.chunk(j).len() <= CHUNK / 2 {
            let upper = self.remove_chunk(c.max(j));
            self.chunk_mut(c.min(j)).extend(upper);
        }
    }

    fn remove_chunk(&mut self, c: usize) -> Vec<Entry> {
        if c == 0 {
            std::mem::replace(&mut self.head, self.tail.remove(0))
        } else {
            self.tail.remove(c - 1)
        }
    }
}

/// The blocks of one stream.
#[derive(Debug)]
struct StreamIndex {
    stream: u64,
    /// Bit `c` is set when `classes[c]` is not empty.
    nonempty: [u64; WORDS],
    /// Per size class, the blocks sorted by (size, address).
    classes: Box<[Class]>,
}

impl StreamIndex {
    fn new(stream: u64) -> Self {
        StreamIndex {
            stream,
            nonempty: [0; WORDS],
            classes: (0..CLASSES).map(|_| Class::default()).collect(),
        }
    }

    /// The first non-empty class at or after `class`.
    #[inline]
    fn next_nonempty(&self, class: usize) -> Option<usize> {
        let mut word = class / 64;
        if word >= WORDS {
            return None;
        }
        let mut bits = self.nonempty[word] & (u64::MAX << (class % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            if word == WORDS {
                return None;
            }
            bits = self.nonempty[word];
        }
    }

    /// The blocks of at least `size` bytes, in order; `index` is this
    /// stream's place in [`SizeIndex::streams`].
    #[inline(always)]
    fn iter_from(&self, index: usize, size: u64) -> Iter<'_> {
        let class = size_class(size);
        let (chunk, pos) = self.classes[class].partition_point(|e| e.size < size);
        Iter {
            stream: Some(self),
            index,
            class,
            chunk,
            pos,
        }
    }

    /// Removes the entry at `pos` of chunk `chunk` of `class`.
    #[inline]
    fn remove_at(&mut self, class: usize, chunk: usize, pos: usize) -> Entry {
        let c = &mut self.classes[class];
        let e = c.remove_at(chunk, pos);
        if c.is_empty() {
            self.nonempty[class / 64] &= !(1 << (class % 64));
        }
        e
    }
}

/// Free blocks in PyTorch's best-fit order (`BlockComparatorSize`): stream,
/// then size, then address.
#[derive(Debug, Default)]
pub(crate) struct SizeIndex {
    /// By stream; streams are few, and stay once seen.
    streams: Vec<StreamIndex>,
}

impl SizeIndex {
    /// Where `stream` is in `streams`, or where it would go.
    #[inline]
    fn position(&self, stream: u64) -> Result<usize, usize> {
        // Nearly always one stream: check the first before searching.
        match self.streams.first() {
            Some(s) if s.stream == stream => Ok(0),
            _ => self.streams.binary_search_by_key(&stream, |s| s.stream),
        }
    }

    // Out of line: a stream is added once, and its setup would bloat `insert`.
    #[cold]
    #[inline(never)]
    fn add_stream(&mut self, i: usize, stream: u64) -> usize {
        self.streams.insert(i, StreamIndex::new(stream));
        i
    }

    /// Adds a block under `key`; returns false (and changes nothing) if the
    /// key is there already.
    #[inline]
    pub fn insert(&mut self, key: SizeKey, id: BlockId) -> bool {
        let (stream, size, addr) = key;
        let i = self
            .position(stream)
            .unwrap_or_else(|i| self.add_stream(i, stream));
        let s = &mut self.streams[i];
        let class = size_class(size);
        if !s.classes[class].insert(Entry { size, addr, id }) {
            return false;
        }
        s.nonempty[class / 64] |= 1 << (class % 64);
        true
    }

    /// The block under `key`, if any.
    pub fn get(&self, key: &SizeKey) -> Option<BlockId> {
        let &(stream, size, addr) = key;
        let i = self.position(stream).ok()?;
        self.streams[i].classes[size_class(size)].get(size, addr)
    }

    /// Removes the block under `key`, if any.
    #[inline]
    pub fn remove(&mut self, key: &SizeKey) -> Option<BlockId> {
        let &(stream, size, addr) = key;
        let i = self.position(stream).ok()?;
        let s = &mut self.streams[i];
        let class = size_class(size);
        let c = &mut s.classes[class];
        let e = c.remove(size, addr)?;
        if c.is_empty() {
            s.nonempty[class / 64] &= !(1 << (class % 64));
        }
        Some(e.id)
    }

    /// The blocks of `stream` with at least `size` bytes, in order.
    #[inline(always)]
    pub fn range_from(&self, stream: u64, size: u64) -> Iter<'_> {
        match self.position(stream) {
            Ok(i) => self.streams[i].iter_from(i, size),
            Err(_) => Iter {
                stream: None,
                index: 0,
                class: 0,
                chunk: 0,
                pos: 0,
            },
        }
    }

    /// Every block, in order.
    pub fn iter(&self) -> impl Iterator<Item = (SizeKey, BlockId)> + '_ {
        self.streams
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.iter_from(i, 0))
    }

    /// Removes the block at `slot`, which an iterator over this index
    /// returned under `key` with no change to the index since: best fit takes
    /// the block it found without searching for it again.
    #[inline]
    pub fn remove_at(&mut self, slot: Slot, key: &SizeKey) -> BlockId {
        let s = &mut self.streams[slot.stream];
        let e = s.remove_at(slot.class, slot.chunk, slot.pos);
        debug_assert_eq!(e.key(s.stream), *key, "stale slot");
        e.id
    }
}

/// Where the block of (`size`, `addr`) is in a chunk, or would go.
#[inline]
fn find(chunk: &[Entry], size: u64, addr: u64) -> Result<usize, usize> {
    chunk.binary_search_by(|e| (e.size, e.addr).cmp(&(size, addr)))
}

/// Where a block is in a [`SizeIndex`], valid until the index changes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    stream: usize,
    class: usize,
    chunk: usize,
    pos: usize,
}

/// Blocks of one stream in order, from a lower bound on.
pub(crate) struct Iter<'a> {
    /// None once exhausted.
    stream: Option<&'a StreamIndex>,
    index: usize,
    class: usize,
    chunk: usize,
    /// The next block's place in its chunk.
    pos: usize,
}

impl Iter<'_> {
    /// The slot of the block `next` returned last (only after it returned one).
    #[inline]
    pub fn slot(&self) -> Slot {
        debug_assert!(self.pos > 0);
        Slot {
            stream: self.index,
            class: self.class,
            chunk: self.chunk,
            pos: self.pos - 1,
        }
    }
}

impl Iterator for Iter<'_> {
    type Item = (SizeKey, BlockId);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let s = self.stream?;
        loop {
            let class = &s.classes[self.class];
            if let Some(e) = class.chunk(self.chunk).get(self.pos) {
                self.pos += 1;
                return Some((e.key(s.stream), e.id));
            }
            if self.chunk + 1 < class.chunks() {
                self.chunk += 1;
                self.pos = 0;
                continue;
            }
            match s.next_nonempty(self.class + 1) {
                Some(class) => {
                    self.class = class;
                    self.chunk = 0;
                    self.pos = 0;
                }
                None => {
                    self.stream = None;
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn classes_are_ordered_and_cover_u64() {
        let mut sizes: Vec<u64> = (0..64).flat_map(|b| [1u64 << b, (1 << b) + 1]).collect();
        sizes.extend((0..4096).map(|i| i * 512));
        sizes.extend([u64::MAX, u64::MAX - 1, 40 << 20, 20 << 20]);
        sizes.sort_unstable();
        for w in sizes.windows(2) {
            assert!(size_class(w[0]) <= size_class(w[1]), "{w:?}");
        }
        assert_eq!(size_class(u64::MAX), CLASSES - 1);
        // Below 8 units and up to 16, one class per 512 bytes.
        for units in 0..16u64 {
            assert_eq!(size_class(units << UNIT_SHIFT), units as usize);
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(SizeKey),
        Remove(SizeKey),
        Query(u64, u64),
        TakeFirst(u64, u64),
        Below(u64, u64, u64),
    }

    // Few streams and sizes, so that keys collide, classes share blocks and
    // ties are broken by address; a few sizes of two classes (16 to 19
    // units) fill classes past `CHUNK`, so that they split and merge.
    fn key() -> impl Strategy<Value = SizeKey> {
        let size = prop_oneof![
            3 => (16u64..20).prop_map(|u| u * 512),
            1 => (0u64..64).prop_map(|u| u * 512),
            1 => (1u64..8).prop_map(|m| m << 21),
            1 => any::<u64>(),
            1 => 0u64..200_000_000,
        ];
        (
            prop_oneof![Just(0u64), Just(7), any::<u64>()],
            size,
            0u64..16,
        )
            .prop_map(|(stream, size, a)| (stream, size, a << 12))
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => key().prop_map(Op::Insert),
            2 => key().prop_map(Op::Remove),
            2 => key().prop_map(|(stream, size, _)| Op::Query(stream, size)),
            1 => key().prop_map(|(stream, size, _)| Op::TakeFirst(stream, size)),
            1 => (key(), any::<u64>()).prop_map(|((stream, a, _), b)| {
                Op::Below(stream, a.min(b), a.max(b))
            }),
        ]
    }

    /// The invariants [`Class`] documents.
    fn check_chunks(index: &SizeIndex) {
        for s in &index.streams {
            for (i, c) in s.classes.iter().enumerate() {
                let bit = s.nonempty[i / 64] >> (i % 64) & 1 == 1;
                assert_eq!(bit, !c.is_empty(), "class {i}");
                assert!(c.head.len() <= CHUNK);
                if c.chunks() > 1 {
                    let lens: Vec<_> = (0..c.chunks()).map(|k| c.chunk(k).len()).collect();
                    assert!(lens.iter().all(|&n| n > 0 && n <= CHUNK), "{lens:?}");
                    assert!(lens.windows(2).all(|w| w[0] + w[1] > CHUNK / 2), "{lens:?}");
                }
            }
        }
    }

    proptest! {
        // The index must behave exactly as the ordered map it replaces.
        #[test]
        fn matches_ordered_map(ops in prop::collection::vec(op(), 1..400)) {
            let mut index = SizeIndex::default();
            let mut model = BTreeMap::<SizeKey, BlockId>::new();
            let mut live: Vec<SizeKey> = Vec::new();
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(k) => {
                        let fresh = !model.contains_key(&k);
                        prop_assert_eq!(index.insert(k, n as BlockId), fresh);
                        if fresh {
                            model.insert(k, n as BlockId);
                            live.push(k);
                        }
                    }
                    Op::Remove(k) => {
                        // Mostly remove a present key.
                        let k = live.pop().unwrap_or(k);
                        prop_assert_eq!(index.remove(&k), model.remove(&k));
                    }
                    Op::Query(stream, size) => {
                        let got: Vec<_> = index.range_from(stream, size).collect();
                        let want: Vec<_> = model
                            .range((stream, size, 0)..)
                            .take_while(|(k, _)| k.0 == stream)
                            .map(|(k, v)| (*k, *v))
                            .collect();
                        prop_assert_eq!(got, want);
                    }
                    // How release_available_cached_blocks lists its
                    // candidates: sizes in [lo, hi), largest first.
                    Op::Below(stream, lo, hi) => {
                        let mut got: Vec<_> = index
                            .range_from(stream, lo)
                            .take_while(|(k, _)| k.1 < hi)
                            .collect();
                        got.reverse();
                        let want: Vec<_> = model
                            .range(..(stream, hi, 0))
                            .rev()
                            .take_while(|(k, _)| k.0 == stream && k.1 >= lo)
                            .map(|(k, v)| (*k, *v))
                            .collect();
                        prop_assert_eq!(got, want);
                    }
                    Op::TakeFirst(stream, size) => {
                        let mut iter = index.range_from(stream, size);
                        let got = iter.next().map(|(k, id)| (k, id, iter.slot()));
                        let want = model
                            .range((stream, size, 0)..)
                            .next()
                            .filter(|(k, _)| k.0 == stream)
                            .map(|(k, v)| (*k, *v));
                        prop_assert_eq!(got.map(|(k, id, _)| (k, id)), want);
                        if let Some((k, id, slot)) = got {
                            prop_assert_eq!(index.remove_at(slot, &k), id);
                            model.remove(&k);
                        }
                    }
                }
                prop_assert_eq!(index.iter().count(), model.len());
                check_chunks(&index);
            }
            let all: Vec<_> = index.iter().collect();
            let want: Vec<_> = model.into_iter().collect();
            prop_assert_eq!(all, want);
        }
    }
}
