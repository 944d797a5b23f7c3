//! Occupancy: the reserved segments and the live blocks' address ranges at
//! one moment, and the free space (fragmentation) computed from them.

use super::{ReplayState, Segment};
use serde::Serialize;

/// The free space of the reserved segments at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FreeSpace {
    /// Reserved bytes not in live blocks.
    pub free_bytes: u64,
    /// The largest contiguous free range inside one segment.
    pub largest_free_block: u64,
    /// The number of contiguous free ranges.
    pub free_ranges: u64,
}

impl FreeSpace {
    /// External fragmentation: `1 - largest free block / free bytes` (0 with no free bytes).
    pub fn external_fragmentation(&self) -> f64 {
        if self.free_bytes == 0 {
            0.0
        } else {
            1.0 - self.largest_free_block as f64 / self.free_bytes as f64
        }
    }
}

/// The segments and the address ranges of the live blocks at one moment,
/// copied out of a [`ReplayState`] to compute its [`FreeSpace`] later.
#[derive(Clone, Debug, Default)]
pub struct Occupancy {
    reserved: u64,
    segments: Vec<Segment>,
    // Live block ranges, unsorted; left empty when no segment holds a block.
    busy: Vec<(u64, u64)>,
}

impl Occupancy {
    /// The occupancy of these segments by these blocks, `(address, size)`, in
    /// any order: each segment's live blocks and bytes are counted again from
    /// the blocks, those that start inside it (as the replay counts them).
    pub fn of_blocks(
        reserved: u64,
        mut segments: Vec<Segment>,
        blocks: impl IntoIterator<Item = (u64, u64)>,
    ) -> Occupancy {
        let mut blocks: Vec<(u64, u64)> = blocks.into_iter().collect();
        blocks.sort_unstable();
        let mut b = 0;
        for s in &mut segments {
            while b < blocks.len() && blocks[b].0 < s.start {
                b += 1;
            }
            let first = b;
            while b < blocks.len() && blocks[b].0 < s.end {
                b += 1;
            }
            s.live_blocks = (b - first) as u64;
            s.live_bytes = blocks[first..b].iter().map(|&(_, size)| size).sum();
        }
        let busy = blocks
            .into_iter()
            .map(|(addr, size)| (addr, addr.saturating_add(size)))
            .collect();
        Occupancy {
            reserved,
            segments,
            busy,
        }
    }

    /// The segments, with their live blocks and bytes.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The free space of the segments: a sweep, `O(live log live)`.
    pub fn free_space(&mut self) -> FreeSpace {
        let mut space = FreeSpace {
            free_bytes: self
                .reserved
                .saturating_sub(self.segments.iter().map(|s| s.live_bytes).sum::<u64>()),
            ..Default::default()
        };
        for s in &self.segments {
            if s.live_blocks == 0 {
                space.largest_free_block = space.largest_free_block.max(s.size());
                space.free_ranges += 1;
            }
        }
        let busy = &mut self.busy;
        busy.sort_unstable();
        let mut b = 0;
        for s in self.segments.iter().filter(|s| s.live_blocks > 0) {
            while b < busy.len() && busy[b].0 < s.start {
                b += 1;
            }
            let mut cursor = s.start;
            while b < busy.len() && busy[b].0 < s.end {
                let (start, end) = busy[b];
                if start > cursor {
                    space.largest_free_block = space.largest_free_block.max(start - cursor);
                    space.free_ranges += 1;
                }
                cursor = cursor.max(end.min(s.end));
                b += 1;
            }
            if s.end > cursor {
                space.largest_free_block = space.largest_free_block.max(s.end - cursor);
                space.free_ranges += 1;
            }
        }
        space
    }
}

impl ReplayState {
    /// The free space of the segments now: a sweep over the live blocks,
    /// `O(live log live)`, so call it at sample points, not per event.
    pub fn free_space(&self) -> FreeSpace {
        let mut occupancy = Occupancy::default();
        self.copy_occupancy(&mut occupancy);
        occupancy.free_space()
    }

    /// Copies what the free space now depends on into `out`, reusing its
    /// buffers: `O(live)`, without the sort of [`free_space`](Self::free_space).
    pub fn copy_occupancy(&self, out: &mut Occupancy) {
        out.reserved = self.totals.reserved;
        out.segments.clear();
        out.segments.extend(self.segments.values().copied());
        out.busy.clear();
        if self.blocks_in_segments > 0 {
            out.busy.extend(
                self.live
                    .values()
                    .map(|a| (a.addr, a.addr.saturating_add(a.size))),
            );
        }
    }
}
