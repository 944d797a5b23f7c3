//! The reserved segments, by start address.

use super::Segment;
use std::collections::BTreeMap;

/// The reserved segments by start address. They live in a slab, indexed by
/// an ordered map of their starts: finding the segment that holds an
/// address walks the map (`O(log n)`, about 190 instructions for the range
/// walk down both edges of the tree). Block events (two per block, its
/// alloc and its free) ask for the segment of their address, and a program
/// works in a few segments at a time, so the segments found are kept in
/// small tables by the unit of the address asked: nearly every block event
/// finds its segment there with a compare or three.
///
/// There is a table for each size class of segments ([`CLASS_SHIFTS`]),
/// each by units of its class's smallest size, and a segment found is kept
/// in its class's table: a segment then spans a few units of its table at
/// most, however large it is. With one table of 2 MiB units, a snapshot
/// working in 48 segments of 64 MiB (1,536 units for 256 entries) missed
/// nearly every time, and the searches were a sixth of its replay.
#[derive(Clone, Debug)]
pub(super) struct SegmentMap {
    by_start: BTreeMap<u64, u32>,
    slab: Vec<Segment>,
    // Slots of removed segments, reused first.
    vacant: Vec<u32>,
    // Segments found lately, by `recent_index(addr, class)`: the tables of
    // the classes one after the other. An entry is valid while its
    // `generation` is the map's, which moves on whenever a segment comes or
    // goes (so emptying the tables costs nothing).
    recent: Box<[Recent; RECENT * CLASSES]>,
    generation: u32,
}

/// A segment found lately: its range and its slot.
#[derive(Clone, Copy, Debug, Default)]
struct Recent {
    start: u64,
    end: u64,
    slot: u32,
    generation: u32,
}

/// Entries of each of [`SegmentMap`]'s tables of segments found lately:
/// enough for half a gigabyte of 2 MiB segments in use at once without two
/// sharing an entry (64 entries of a megabyte each missed one block event
/// in thirteen on a synthetic trace of 422 MiB reserved, at 170
/// instructions a search).
const RECENT: usize = 256;

/// The size classes of segments, by the shift of their smallest size (and
/// of their table's unit): 2 MiB (PyTorch's smallest segment) and up, 64
/// MiB and up, 2 GiB and up (an expandable segment grown large).
const CLASS_SHIFTS: [u32; 3] = [21, 26, 31];

/// The number of size classes.
const CLASSES: usize = CLASS_SHIFTS.len();

/// The size class of a segment of `size` bytes: the last whose smallest
/// size it reaches (the first for smaller ones).
fn class_of(size: u64) -> usize {
    CLASS_SHIFTS
        .iter()
        .rposition(|&shift| size >> shift != 0)
        .unwrap_or(0)
}

/// The entry of the tables of segments found lately for `addr` in size
/// class `class`: by its unit of that class, folded.
#[inline(always)]
fn recent_index(addr: u64, class: usize) -> usize {
    let unit = addr >> CLASS_SHIFTS[class];
    class * RECENT + (((unit ^ (unit >> 8)) as usize) & (RECENT - 1))
}

impl Default for SegmentMap {
    fn default() -> Self {
        SegmentMap {
            by_start: BTreeMap::new(),
            slab: Vec::new(),
            vacant: Vec::new(),
            recent: Box::new([Recent::default(); RECENT * CLASSES]),
            // Entries start at generation 0: none is valid.
            generation: 1,
        }
    }
}

impl SegmentMap {
    /// The segment holding `addr`.
    // Inlined: asked twice per block, and found in a table nearly always;
    // the search of the map is out of line.
    #[inline(always)]
    pub fn holding(&mut self, addr: u64) -> Option<&mut Segment> {
        for class in 0..CLASSES {
            let r = self.recent[recent_index(addr, class)];
            if r.generation == self.generation && r.start <= addr && addr < r.end {
                return Some(&mut self.slab[r.slot as usize]);
            }
        }
        self.search(addr)
    }

    /// The segment holding `addr`, searched in the map and kept in the
    /// table of its size class.
    #[inline(never)]
    fn search(&mut self, addr: u64) -> Option<&mut Segment> {
        let (_, &slot) = self.by_start.range(..=addr).next_back()?;
        let seg = &mut self.slab[slot as usize];
        if addr >= seg.end {
            return None;
        }
        self.recent[recent_index(addr, class_of(seg.end - seg.start))] = Recent {
            start: seg.start,
            end: seg.end,
            slot,
            generation: self.generation,
        };
        Some(seg)
    }

    // Forgets the segments found lately: one of them came or went.
    fn forget_recent(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // After 2^32 changes, old entries could look valid again.
            self.recent.fill(Recent::default());
            self.generation = 1;
        }
    }

    /// The segment holding `addr`, without keeping it in the table.
    pub fn holding_ref(&self, addr: u64) -> Option<&Segment> {
        self.before(addr).filter(|s| addr < s.end)
    }

    /// The segment starting at or before `addr` last.
    pub fn before(&self, addr: u64) -> Option<&Segment> {
        let (_, &slot) = self.by_start.range(..=addr).next_back()?;
        Some(&self.slab[slot as usize])
    }

    /// The segment starting before `addr` last.
    pub fn before_strictly(&self, addr: u64) -> Option<&Segment> {
        let (_, &slot) = self.by_start.range(..addr).next_back()?;
        Some(&self.slab[slot as usize])
    }

    /// The segment starting at `start`.
    pub fn get(&self, start: u64) -> Option<&Segment> {
        self.by_start
            .get(&start)
            .map(|&slot| &self.slab[slot as usize])
    }

    /// The segment starting at `start`, to change.
    pub fn get_mut(&mut self, start: u64) -> Option<&mut Segment> {
        let slot = *self.by_start.get(&start)?;
        Some(&mut self.slab[slot as usize])
    }

    /// Adds `seg` (no segment starts where it does).
    pub fn insert(&mut self, seg: Segment) {
        self.forget_recent();
        let slot = match self.vacant.pop() {
            Some(slot) => {
                self.slab[slot as usize] = seg;
                slot
            }
            None => {
                self.slab.push(seg);
                (self.slab.len() - 1) as u32
            }
        };
        if let Some(old) = self.by_start.insert(seg.start, slot) {
            self.vacant.push(old);
        }
    }

    /// Removes the segment starting at `start`.
    pub fn remove(&mut self, start: u64) -> Option<Segment> {
        self.forget_recent();
        let slot = self.by_start.remove(&start)?;
        self.vacant.push(slot);
        Some(self.slab[slot as usize])
    }

    /// The segments, by start address.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &Segment> + Clone {
        let slab = &self.slab;
        self.by_start
            .values()
            .map(move |&slot| &slab[slot as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(start: u64, end: u64) -> Segment {
        Segment {
            start,
            end,
            live_blocks: 0,
            live_bytes: 0,
            expandable: false,
            pool: 0,
        }
    }

    #[test]
    fn finds_the_segment_holding_an_address_after_segments_come_and_go() {
        let mut map = SegmentMap::default();
        map.insert(seg(100, 200));
        map.insert(seg(300, 400));
        assert_eq!(map.holding(150).map(|s| s.start), Some(100));
        // A segment found is kept: a change through it is the map's.
        map.holding(199).unwrap().live_blocks = 3;
        assert_eq!(map.get(100).unwrap().live_blocks, 3);
        assert!(map.holding(200).is_none() && map.holding(99).is_none());
        // A removed segment is found no more, even where it was kept.
        map.holding(350);
        map.remove(300);
        assert!(map.holding(350).is_none());
        // Its slot is reused, and the order by address kept.
        map.insert(seg(0, 50));
        map.insert(seg(500, 600));
        assert_eq!(
            map.values().map(|s| s.start).collect::<Vec<_>>(),
            [0, 100, 500]
        );
        assert_eq!(map.values().len(), 3);
        assert_eq!(map.holding(550).map(|s| s.end), Some(600));
        assert_eq!(map.before_strictly(100).map(|s| s.start), Some(0));
        assert_eq!(map.before(100).map(|s| s.start), Some(100));
        assert_eq!(map.holding_ref(49).map(|s| s.start), Some(0));
    }

    #[test]
    fn size_classes() {
        assert_eq!(class_of(0), 0);
        assert_eq!(class_of(512 << 10), 0);
        assert_eq!(class_of((64 << 20) - 1), 0);
        assert_eq!(class_of(64 << 20), 1);
        assert_eq!(class_of((2 << 30) - 1), 1);
        assert_eq!(class_of(2 << 30), 2);
        assert_eq!(class_of(u64::MAX), 2);
    }

    #[test]
    fn large_segments_are_found_in_the_tables() {
        // A PyTorch snapshot's layout: 48 segments of 64 MiB at 128 MiB
        // strides, 1,536 units of 2 MiB; and a segment of 4 GiB beyond.
        let mut map = SegmentMap::default();
        let starts: Vec<u64> = (0..48)
            .map(|i| 0x7F00_0000_0000 + i * (128 << 20))
            .collect();
        for &start in &starts {
            map.insert(seg(start, start + (64 << 20)));
        }
        let huge = 0x7F10_0000_0000u64;
        map.insert(seg(huge, huge + (4 << 30)));
        let addresses = || {
            let units = starts
                .iter()
                .flat_map(|&start| (0..32).map(move |k| (start, start + k * (2 << 20) + 4096)));
            let huge_units = (0..2048).map(move |k| (huge, huge + k * (2 << 20) + 8));
            units.chain(huge_units)
        };
        for (start, addr) in addresses() {
            assert_eq!(map.holding(addr).map(|s| s.start), Some(start));
        }
        // Found once, every one is found again without the map.
        let by_start = std::mem::take(&mut map.by_start);
        for (start, addr) in addresses() {
            assert_eq!(map.holding(addr).map(|s| s.start), Some(start));
        }
        // Between the segments, nothing.
        assert!(map.holding(starts[0] + (64 << 20)).is_none());
        map.by_start = by_start;
        assert!(map.holding(starts[0] + (64 << 20)).is_none());
    }

    #[test]
    fn segments_sharing_an_entry_of_the_table_are_told_apart() {
        let mut map = SegmentMap::default();
        // Two segments whose megabytes fold to the same entry.
        let a = 1u64 << 30;
        let b = (1..)
            .map(|k| a + k * (2 << 20))
            .find(|&b| recent_index(b, 0) == recent_index(a, 0))
            .unwrap();
        map.insert(seg(a, a + (2 << 20)));
        map.insert(seg(b, b + (2 << 20)));
        for _ in 0..3 {
            assert_eq!(map.holding(a + 5).map(|s| s.start), Some(a));
            assert_eq!(map.holding(b + 5).map(|s| s.start), Some(b));
        }
        // The generation wrapping empties the table.
        map.generation = u32::MAX;
        map.holding(a);
        map.remove(b);
        assert_eq!(map.generation, 1);
        assert!(map.holding(b + 5).is_none());
        assert_eq!(map.holding(a + 5).map(|s| s.start), Some(a));
    }
}
