//! The device memory an allocator holds, as its segment events leave it:
//! segments (`cudaMalloc`) and the mapped pages of expandable segments,
//! merged where they touch. Shared by the block sizes of an observed
//! allocator ([`ObservedBlocks`](super::ObservedBlocks)) and the recorder's
//! running state of a bounded recording, which must agree on what a mapped
//! or unmapped page does to the ranges.

use std::collections::BTreeMap;

/// One reserved range: from its start (the map's key) to `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reserved<T> {
    /// One past its last byte.
    pub end: u64,
    /// Mapped pages of an expandable segment (they merge with mapped pages
    /// they touch), rather than a segment of its own.
    pub mapped: bool,
    /// What the caller keeps with the range (the recorder: its stream).
    pub tag: T,
}

/// Reserved ranges by start address (of one device).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservedRanges<T> {
    ranges: BTreeMap<u64, Reserved<T>>,
}

impl<T> Default for ReservedRanges<T> {
    fn default() -> Self {
        ReservedRanges {
            ranges: BTreeMap::new(),
        }
    }
}

impl<T: Copy> ReservedRanges<T> {
    /// Nothing reserved.
    pub fn new() -> Self {
        Self::default()
    }

    /// `size` bytes at `addr` were reserved: mapped pages of an expandable
    /// segment (`mapped`), merged with mapped pages they touch and taking
    /// their `tag`; else a segment of its own, never merged (two segments
    /// that happen to be adjacent are still two).
    pub fn reserve(&mut self, addr: u64, size: u64, mapped: bool, tag: T) {
        let mut start = addr;
        let mut end = addr.saturating_add(size);
        if mapped {
            if let Some((&s, r)) = self.ranges.range(..addr).next_back()
                && r.mapped
                && r.end == addr
            {
                start = s;
            }
            if let Some(r) = self.ranges.get(&end).copied()
                && r.mapped
            {
                self.ranges.remove(&end);
                end = r.end;
            }
        }
        self.ranges.insert(start, Reserved { end, mapped, tag });
    }

    /// `size` bytes at `addr` were returned to the device: a whole segment,
    /// or pages unmapped from a mapped range (which may split it in two).
    /// Bytes no range holds are passed over.
    pub fn release(&mut self, addr: u64, size: u64) {
        let end = addr.saturating_add(size);
        let Some((start, r)) = self.holding(addr) else {
            return;
        };
        self.ranges.remove(&start);
        if start < addr {
            self.ranges.insert(start, Reserved { end: addr, ..r });
        }
        if end < r.end {
            self.ranges.insert(end, r);
        }
    }

    /// The range holding `addr`, with its start.
    pub fn holding(&self, addr: u64) -> Option<(u64, Reserved<T>)> {
        let (&start, &r) = self.ranges.range(..=addr).next_back()?;
        (r.end > addr).then_some((start, r))
    }

    /// Every range with its start, by address.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Reserved<T>)> + '_ {
        self.ranges.iter().map(|(&start, &r)| (start, r))
    }

    /// How many ranges.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether nothing is reserved.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(r: &ReservedRanges<u8>) -> Vec<(u64, u64, bool, u8)> {
        r.iter().map(|(s, r)| (s, r.end, r.mapped, r.tag)).collect()
    }

    #[test]
    fn mapped_pages_merge_segments_do_not() {
        let mut r = ReservedRanges::new();
        r.reserve(10, 2, true, 1);
        r.reserve(14, 2, true, 1);
        r.reserve(12, 2, true, 2);
        assert_eq!(spans(&r), vec![(10, 16, true, 2)]);
        r.reserve(16, 4, false, 3);
        r.reserve(20, 4, false, 3);
        assert_eq!(r.len(), 3, "adjacent segments stay apart");
    }

    #[test]
    fn unmapping_splits_and_freeing_removes() {
        let mut r = ReservedRanges::new();
        r.reserve(10, 6, true, 0);
        r.release(12, 2);
        assert_eq!(spans(&r), vec![(10, 12, true, 0), (14, 16, true, 0)]);
        assert_eq!(r.holding(13), None);
        assert_eq!(r.holding(15).map(|(s, _)| s), Some(14));
        r.release(100, 1);
        r.release(10, 2);
        r.release(14, 2);
        assert!(r.is_empty());
    }
}
