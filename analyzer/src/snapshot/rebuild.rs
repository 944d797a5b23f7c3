//! The allocator state around the ring buffer: the snapshot's `segments` are the state
//! at dump time, the trace may begin mid-run, so the state at the first event is
//! rebuilt from the two.
//!
//! A backward walk from the end state is equivalent to a forward walk that resolves
//! each address at its first touch: a block first seen being freed was allocated at the
//! start, one first seen being allocated was not there, and what no event touches is
//! as the end state says. The forward form needs no reversed copy of the log and
//! checks consistency on the way: replaying forward must land on `segments`.

use super::log::{Action, LogEntry};
use rustc_hash::{FxHashMap as FxMap, FxHashSet as FxSet};
use std::collections::BTreeMap;
use vramtrace_allocator::{AllocatorConfig, ObservedBlocks, SMALL_SIZE};
use vramtrace_format::{BlockState, BlockStatus, PoolId, SegmentState};

/// A block of the end state (`segments[].blocks[]`), not free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EndBlock {
    pub size: u64,
    pub requested: u64,
    pub status: BlockStatus,
    pub stack: u32,
}

/// A segment of the end state.
#[derive(Clone, Debug)]
pub(crate) struct EndSegment {
    pub device: u32,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub expandable: bool,
    /// Its pool (`segment_pool_id`).
    pub pool: PoolId,
}

/// A segment at the start, with its allocated (and pending-free) blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StartSegment {
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub expandable: bool,
    /// `(addr, block)`, in address order.
    pub blocks: Vec<(u64, EndBlock)>,
    /// Its pool, where the end state says (a segment that lives to the end).
    pub pool: PoolId,
}

// Sorted, disjoint, non-adjacent half-open ranges: the mapped parts of expandable
// segments. Segment-level events are rare, so plain vectors do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ranges(pub Vec<(u64, u64)>);

impl Ranges {
    pub fn add(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        let mut out = Vec::with_capacity(self.0.len() + 1);
        for &(a, b) in &self.0 {
            if b < s || a > e {
                out.push((a, b));
            } else {
                s = s.min(a);
                e = e.max(b);
            }
        }
        out.push((s, e));
        out.sort_unstable();
        self.0 = out;
    }

    pub fn remove(&mut self, start: u64, end: u64) {
        let mut out = Vec::with_capacity(self.0.len() + 1);
        for &(a, b) in &self.0 {
            if b <= start || a >= end {
                out.push((a, b));
            } else {
                if a < start {
                    out.push((a, start));
                }
                if b > end {
                    out.push((end, b));
                }
            }
        }
        self.0 = out;
    }

    /// The parts of `[start, end)` not in `self`.
    pub fn missing(&self, start: u64, end: u64) -> Ranges {
        let mut r = Ranges(vec![(start, end)]);
        for &(a, b) in &self.0 {
            r.remove(a, b);
        }
        r
    }

    pub fn intersect(&self, other: &Ranges) -> Ranges {
        let mut out = Ranges::default();
        for &(a, b) in &self.0 {
            for &(c, d) in &other.0 {
                let (s, e) = (a.max(c), b.min(d));
                if s < e {
                    out.add(s, e);
                }
            }
        }
        out
    }

    pub fn minus(&self, other: &Ranges) -> Ranges {
        let mut r = self.clone();
        for &(a, b) in &other.0 {
            r.remove(a, b);
        }
        r
    }
}

#[derive(Clone, Copy, Debug)]
struct Live {
    requested: u64,
    status: BlockStatus,
    // The log index of the alloc that made it, if the trace holds it.
    alloc_index: Option<u64>,
}

/// One device's replay.
#[derive(Default)]
pub(crate) struct DeviceReplay {
    blocks: FxMap<u64, Live>,
    /// The block the last entry, a `free_requested`, made pending: out of
    /// `blocks`, where it belongs, since the next entry is nearly always the
    /// `free_completed` that removes it (one hash probe per freed block
    /// instead of two). Any other entry puts it back first ([`Self::settle`]).
    held: Option<(u64, Live)>,
    touched: FxSet<u64>,
    start_blocks: Vec<(u64, EndBlock)>,
    segments: FxMap<u64, (u64, u64)>,
    seg_touched: FxSet<u64>,
    start_segments: Vec<(u64, u64, u64)>,
    mapped: Ranges,
    map_touched: Ranges,
    start_mapped: Ranges,
    map_stream: u64,
    pub inconsistencies: Vec<String>,
    pub inconsistency_count: u64,
}

/// How many inconsistencies are described one by one before only being counted.
const DESCRIBED: usize = 20;

impl DeviceReplay {
    fn problem(&mut self, msg: impl FnOnce() -> String) {
        self.inconsistency_count += 1;
        if self.inconsistencies.len() < DESCRIBED {
            self.inconsistencies.push(msg());
        }
    }

    /// Applies one entry (as it is read: the allocator settings that block sizes depend
    /// on come later in the snapshot, so sizes are worked out in `start_state`).
    //
    // Inlined into the logging thread's loop, every entry's: the block
    // actions, nearly all entries, are here, the rest out of line
    // (`apply_segment`).
    #[inline]
    pub fn apply(&mut self, index: u64, e: &LogEntry) {
        if let Some((addr, _)) = self.held {
            if e.action == Action::FreeCompleted && e.addr == addr {
                // Pending, as `blocks` would have had it: freed, no problem.
                self.held = None;
                return;
            }
            self.settle();
        }
        // An address in `blocks` is in `touched` too, so a free of a block in
        // `blocks` (nearly every free) asks `touched` nothing: one hash lookup per
        // free, on the logging thread beside the parser, instead of two.
        match e.action {
            Action::Alloc => {
                self.touched.insert(e.addr);
                let old = self.blocks.insert(
                    e.addr,
                    Live {
                        requested: e.size,
                        status: BlockStatus::Allocated,
                        alloc_index: Some(index),
                    },
                );
                if let Some(old) = old {
                    let s = old.status;
                    self.problem(|| format!("alloc at {:#x} over a block still {:?}", e.addr, s));
                }
            }
            Action::FreeRequested => {
                let wrong = match self.blocks.remove(&e.addr) {
                    Some(b) if b.status == BlockStatus::Allocated => {
                        let b = Live {
                            status: BlockStatus::PendingFree,
                            ..b
                        };
                        self.held = Some((e.addr, b));
                        None
                    }
                    Some(b) => {
                        self.blocks.insert(e.addr, b);
                        Some(Some(b.status))
                    }
                    // First touched here: allocated before the trace began.
                    None if self.touched.insert(e.addr) => {
                        let b = Live {
                            requested: e.size,
                            status: BlockStatus::Allocated,
                            alloc_index: None,
                        };
                        self.start_blocks.push((e.addr, end_block(&b)));
                        let b = Live {
                            status: BlockStatus::PendingFree,
                            ..b
                        };
                        self.held = Some((e.addr, b));
                        None
                    }
                    None => Some(None),
                };
                if let Some(s) = wrong {
                    self.problem(|| format!("free_requested at {:#x} of a block {:?}", e.addr, s))
                }
            }
            Action::FreeCompleted => {
                let wrong = match self.blocks.remove(&e.addr) {
                    Some(b) if b.status != BlockStatus::Free => None,
                    Some(b) => Some(Some(b.status)),
                    // First touched here: pending before the trace began, and
                    // gone now.
                    None if self.touched.insert(e.addr) => {
                        let b = Live {
                            requested: e.size,
                            status: BlockStatus::PendingFree,
                            alloc_index: None,
                        };
                        self.start_blocks.push((e.addr, end_block(&b)));
                        None
                    }
                    None => Some(None),
                };
                if let Some(s) = wrong {
                    self.problem(|| format!("free_completed at {:#x} of a block {:?}", e.addr, s))
                }
            }
            Action::SegmentAlloc
            | Action::SegmentFree
            | Action::SegmentMap
            | Action::SegmentUnmap => self.apply_segment(e),
            Action::Oom | Action::Snapshot | Action::UserDefined | Action::Annotate => {}
        }
    }

    /// Puts the block a `free_requested` left aside back in `blocks`.
    fn settle(&mut self) {
        if let Some((addr, b)) = self.held.take() {
            self.blocks.insert(addr, b);
        }
    }

    /// Applies a segment's entry (see [`DeviceReplay::apply`]).
    #[inline(never)]
    fn apply_segment(&mut self, e: &LogEntry) {
        match e.action {
            Action::SegmentAlloc => {
                self.seg_touched.insert(e.addr);
                if self.segments.insert(e.addr, (e.size, e.stream)).is_some() {
                    self.problem(|| format!("segment_alloc at {:#x} over a live segment", e.addr));
                }
            }
            Action::SegmentFree => {
                if self.seg_touched.insert(e.addr) {
                    self.start_segments.push((e.addr, e.size, e.stream));
                    self.segments.insert(e.addr, (e.size, e.stream));
                }
                if self.segments.remove(&e.addr).is_none() {
                    self.problem(|| format!("segment_free at {:#x} of no segment", e.addr));
                }
            }
            Action::SegmentMap | Action::SegmentUnmap => {
                let end = e.addr.saturating_add(e.size);
                let fresh = self.map_touched.missing(e.addr, end);
                if e.action == Action::SegmentUnmap {
                    // Unmapped before any map: it was mapped at the start.
                    for &(a, b) in &fresh.0 {
                        self.start_mapped.add(a, b);
                        self.mapped.add(a, b);
                    }
                    self.map_stream = e.stream;
                    if !self.mapped.missing(e.addr, end).0.is_empty() {
                        self.problem(|| {
                            format!("segment_unmap at {:#x} of unmapped memory", e.addr)
                        });
                    }
                    self.mapped.remove(e.addr, end);
                } else {
                    if !self
                        .mapped
                        .intersect(&Ranges(vec![(e.addr, end)]))
                        .0
                        .is_empty()
                    {
                        self.problem(|| format!("segment_map at {:#x} of mapped memory", e.addr));
                    }
                    self.mapped.add(e.addr, end);
                    self.map_stream = e.stream;
                }
                self.map_touched.add(e.addr, end);
            }
            Action::Alloc
            | Action::FreeRequested
            | Action::FreeCompleted
            | Action::Oom
            | Action::Snapshot
            | Action::UserDefined
            | Action::Annotate => {}
        }
    }

    /// Compares the replayed end with the snapshot's end state, records the differences,
    /// and returns the log indices of allocs whose blocks are live at the end, with the
    /// end state's size for them (the rounding cannot know a block handed out whole).
    pub fn check_end(
        &mut self,
        device: u32,
        end_blocks: &FxMap<u64, EndBlock>,
        end_segments: &[EndSegment],
    ) -> Vec<(u64, u64)> {
        self.settle();
        let mut sizes = Vec::new();
        // Only a block live in the replay or in the end state can differ:
        // those are looked at (every address in `blocks` is in `touched`),
        // not every address touched, nearly all of them freed in both. The
        // differences, few, are then told in address order.
        let mut differ = Vec::new();
        for (&addr, r) in &self.blocks {
            match end_blocks.get(&addr) {
                Some(b) => {
                    if r.status != b.status || r.requested != b.requested {
                        differ.push(addr);
                    }
                    if let Some(i) = r.alloc_index {
                        sizes.push((i, b.size));
                    }
                }
                None => differ.push(addr),
            }
        }
        differ.extend(
            (end_blocks.keys())
                .filter(|&a| !self.blocks.contains_key(a) && self.touched.contains(a)),
        );
        differ.sort_unstable();
        for addr in differ {
            let replayed = self.blocks.get(&addr).copied();
            let end = end_blocks.get(&addr).copied();
            match (replayed, end) {
                (None, None) => {}
                (Some(r), Some(b)) => self.problem(|| {
                    format!(
                        "device {device}: block {addr:#x} replays to {:?} (requested {}) but the snapshot has {:?} (requested {})",
                        r.status, r.requested, b.status, b.requested
                    )
                }),
                (Some(r), None) => self.problem(|| {
                    format!(
                        "device {device}: block {addr:#x} replays to {:?} but the snapshot has no block there",
                        r.status
                    )
                }),
                (None, Some(b)) => self.problem(|| {
                    format!(
                        "device {device}: block {addr:#x} is {:?} in the snapshot but freed in the replay",
                        b.status
                    )
                }),
            }
        }
        let fixed: FxMap<u64, (u64, u64)> = end_segments
            .iter()
            .filter(|s| !s.expandable)
            .map(|s| (s.addr, (s.size, s.stream)))
            .collect();
        let mut seg_touched: Vec<u64> = self.seg_touched.iter().copied().collect();
        seg_touched.sort_unstable();
        for addr in seg_touched {
            let (r, e) = (self.segments.get(&addr).copied(), fixed.get(&addr).copied());
            if r.map(|x| x.0) != e.map(|x| x.0) {
                self.problem(|| {
                    format!(
                        "device {device}: segment {addr:#x} replays to size {:?} but the snapshot has {:?}",
                        r.map(|x| x.0),
                        e.map(|x| x.0)
                    )
                });
            }
        }
        let end_mapped = expandable_ranges(end_segments);
        let replayed = self.mapped.intersect(&self.map_touched);
        let expected = end_mapped.intersect(&self.map_touched);
        if replayed != expected {
            self.problem(|| {
                format!(
                    "device {device}: expandable segments replay to mapped ranges {:x?} but the snapshot has {:x?}",
                    replayed.0, expected.0
                )
            });
        }
        sizes
    }

    /// The state at the first event: what no event touched is as at the end, the rest
    /// is what the first touches imply. Blocks outside every segment are reported in
    /// `problems` and left out.
    ///
    /// The end state gives the size of each block it holds; a block live at the start
    /// and freed before the end is known by its requested size only. Its size follows
    /// from the free space after it under `config`'s policy ([`ObservedBlocks`]), as
    /// if it were allocated now: exactly, unless free space follows a large block,
    /// which then may have been handed out whole with some of that space (see
    /// [`StartState::uncertain_blocks`]).
    pub fn start_state(
        &mut self,
        device: u32,
        end_blocks: &FxMap<u64, EndBlock>,
        end_segments: &[EndSegment],
        config: &AllocatorConfig,
    ) -> StartState {
        let mut segs: BTreeMap<u64, StartSegment> = BTreeMap::new();
        for s in end_segments.iter().filter(|s| !s.expandable) {
            if !self.seg_touched.contains(&s.addr) {
                let mut seg = start_segment(s.addr, s.size, s.stream, false);
                seg.pool = s.pool;
                segs.insert(s.addr, seg);
            }
        }
        for &(addr, size, stream) in &self.start_segments {
            segs.insert(addr, start_segment(addr, size, stream, false));
        }
        let end_mapped = expandable_ranges(end_segments);
        let mut mapped = end_mapped.minus(&self.map_touched);
        for &(a, b) in &self.start_mapped.0 {
            mapped.add(a, b);
        }
        for &(a, b) in &mapped.0 {
            let stream = end_segments
                .iter()
                .find(|s| s.expandable && s.addr < b && s.addr + s.size > a)
                .map_or(self.map_stream, |s| s.stream);
            segs.insert(a, start_segment(a, b - a, stream, true));
        }
        let mut known: Vec<(u64, EndBlock)> = end_blocks
            .iter()
            .filter(|(a, _)| !self.touched.contains(a))
            .map(|(&a, &b)| (a, b))
            .collect();
        // In address order, each segment's blocks are a slice of them; the
        // start blocks, touched (so none of these), come sorted too, and
        // the two merge.
        known.sort_unstable_by_key(|b| b.0);
        let mut state = StartState::default();
        let starts = self.sized_start_blocks(&segs, &known, config, &mut state);
        // Each block goes to the last segment starting at or before it: the
        // blocks go up, and so does that segment.
        let mut segs: Vec<StartSegment> = segs.into_values().collect();
        let mut at = 0;
        for (addr, b) in merge_by_address(known, starts.into_iter().rev()) {
            at += segs[at..].partition_point(|s| s.addr <= addr);
            let seg = at
                .checked_sub(1)
                .map(|i| &mut segs[i])
                .filter(|s| addr.saturating_add(b.size) <= s.addr + s.size);
            let last_end = seg
                .as_ref()
                .and_then(|s| s.blocks.last())
                .map_or(0, |(a, l)| a + l.size);
            match seg {
                Some(s) if addr >= last_end => s.blocks.push((addr, b)),
                _ => self.problem(|| {
                    format!(
                        "device {device}: block {addr:#x} ({} bytes, {:?}) lies outside the segments at the first event; left out of the initial state",
                        b.size, b.status
                    )
                }),
            }
        }
        state.segments = segs;
        state
    }

    /// The start blocks with their sizes, from the last to the first: each from the
    /// space up to the next block in use (`known`, in address order, or the end of
    /// its segment), the last first, so that the blocks after it are known when it
    /// is sized.
    fn sized_start_blocks(
        &self,
        segs: &BTreeMap<u64, StartSegment>,
        known: &[(u64, EndBlock)],
        config: &AllocatorConfig,
        state: &mut StartState,
    ) -> Vec<(u64, EndBlock)> {
        let mut observed = ObservedBlocks::new(config.clone());
        for s in segs.values() {
            let range = s.addr..s.addr.saturating_add(s.size);
            observed.load_segment(&SegmentState {
                addr: s.addr,
                size: s.size,
                stream: s.stream,
                expandable: s.expandable,
                blocks: within(known, range)
                    .iter()
                    .map(|&(addr, b)| BlockState {
                        addr,
                        size: b.size,
                        requested: b.requested,
                        status: b.status,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            });
        }
        let mut starts: Vec<(u64, EndBlock)> = self.start_blocks.clone();
        starts.sort_unstable_by_key(|b| std::cmp::Reverse(b.0));
        // The next block in use after a start block is the next known one or
        // the start block sized before it: the starts go down, so that is
        // the lowest of those sized so far.
        let mut start_after = None;
        for (addr, b) in &mut starts {
            b.size = observed.alloc(*addr, b.requested);
            let seg = segs.range(..=*addr).next_back().map(|(_, s)| s);
            let known_after = known.get(known.partition_point(|k| k.0 <= *addr));
            let next = (known_after.map(|k| k.0).into_iter())
                .chain(start_after)
                .chain(seg.map(|s| s.addr + s.size))
                .min();
            start_after = Some(*addr);
            // Free space after a large block of a fixed segment: the block may have
            // been handed out whole with part of it (at most what the policy leaves
            // unsplit), and which cannot be told.
            let large = b.size > SMALL_SIZE && seg.is_some_and(|s| !s.expandable);
            if large && next.is_some_and(|n| n > *addr + b.size) {
                state.uncertain_blocks += 1;
                state.uncertain_bytes += if b.size >= config.max_split_size {
                    config.max_non_split_rounding_size
                } else {
                    SMALL_SIZE
                };
            }
        }
        starts
    }
}

/// The state at the first event of one device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StartState {
    /// Its segments, with their blocks in use.
    pub segments: Vec<StartSegment>,
    /// Blocks live at the start, freed before the end, whose size the snapshot does not
    /// determine: each may be larger than it is taken to be.
    pub uncertain_blocks: u64,
    /// By how much, in all, at most.
    pub uncertain_bytes: u64,
}

/// The blocks of `blocks` (in address order) whose address is in `range`.
fn within(blocks: &[(u64, EndBlock)], range: std::ops::Range<u64>) -> &[(u64, EndBlock)] {
    let first = blocks.partition_point(|b| b.0 < range.start);
    let end = first + blocks[first..].partition_point(|b| b.0 < range.end);
    &blocks[first..end]
}

/// Two lists of blocks in address order, with no address in both, as one in
/// address order.
fn merge_by_address(
    a: Vec<(u64, EndBlock)>,
    b: impl IntoIterator<Item = (u64, EndBlock)>,
) -> Vec<(u64, EndBlock)> {
    let mut b = b.into_iter().peekable();
    let mut out = Vec::with_capacity(a.len() + b.size_hint().0);
    for x in a {
        while let Some(y) = b.next_if(|y| y.0 < x.0) {
            out.push(y);
        }
        out.push(x);
    }
    out.extend(b);
    out
}

fn start_segment(addr: u64, size: u64, stream: u64, expandable: bool) -> StartSegment {
    StartSegment {
        addr,
        size,
        stream,
        expandable,
        blocks: Vec::new(),
        pool: PoolId::DEFAULT,
    }
}

// A block at the start; `start_state` sizes it.
fn end_block(b: &Live) -> EndBlock {
    EndBlock {
        size: 0,
        requested: b.requested,
        status: b.status,
        stack: 0,
    }
}

fn expandable_ranges(end_segments: &[EndSegment]) -> Ranges {
    let mut r = Ranges::default();
    for s in end_segments.iter().filter(|s| s.expandable) {
        r.add(s.addr, s.addr + s.size);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(action: Action, addr: u64, size: u64) -> LogEntry {
        LogEntry {
            action,
            list: 0,
            time_us: Some(0),
            addr,
            size,
            stream: 0,
            stack: 0,
        }
    }

    fn config() -> AllocatorConfig {
        AllocatorConfig::default()
    }

    /// A device's replay of `log`, entry `i` logged at index `i`.
    fn replayed(log: &[LogEntry]) -> DeviceReplay {
        let mut r = DeviceReplay::default();
        for (i, x) in log.iter().enumerate() {
            r.apply(i as u64, x);
        }
        r
    }

    /// A segment of device 0 at the end, on stream 0, not expandable, in
    /// the default pool.
    fn segment(addr: u64, size: u64) -> EndSegment {
        EndSegment {
            device: 0,
            addr,
            size,
            stream: 0,
            expandable: false,
            pool: PoolId::DEFAULT,
        }
    }

    #[test]
    fn ranges() {
        let mut r = Ranges::default();
        r.add(0, 10);
        r.add(20, 30);
        r.add(10, 20);
        assert_eq!(r.0, vec![(0, 30)]);
        r.remove(5, 25);
        assert_eq!(r.0, vec![(0, 5), (25, 30)]);
        assert_eq!(r.missing(0, 30).0, vec![(5, 25)]);
    }

    #[test]
    fn first_touches_give_the_start_state() {
        // Segment S (0x1000, 4096) lives throughout; block A was allocated before the
        // trace and is freed in it; block B is allocated in it and live at the end; a
        // second segment is allocated in the trace.
        let log = [
            e(Action::FreeRequested, 0x1000, 1000),
            e(Action::FreeCompleted, 0x1000, 1000),
            e(Action::SegmentAlloc, 0x9000, 2048),
            e(Action::Alloc, 0x9000, 100),
        ];
        let end_segments = vec![segment(0x1000, 4096), segment(0x9000, 2048)];
        let live = EndBlock {
            size: 2048,
            requested: 100,
            status: BlockStatus::Allocated,
            stack: 0,
        };
        let untouched = EndBlock {
            size: 512,
            requested: 512,
            status: BlockStatus::Allocated,
            stack: 3,
        };
        let end_blocks: FxMap<u64, EndBlock> =
            [(0x9000, live), (0x1800, untouched)].into_iter().collect();
        let mut r = replayed(&log);
        let sizes = r.check_end(0, &end_blocks, &end_segments);
        assert_eq!(r.inconsistencies, Vec::<String>::new());
        assert_eq!(sizes, vec![(3, 2048)]);
        let start = r
            .start_state(0, &end_blocks, &end_segments, &config())
            .segments;
        assert_eq!(start.len(), 1);
        assert_eq!(start[0].addr, 0x1000);
        let addrs: Vec<u64> = start[0].blocks.iter().map(|b| b.0).collect();
        assert_eq!(addrs, vec![0x1000, 0x1800]);
        assert_eq!(start[0].blocks[0].1.size, 1024);
        assert_eq!(start[0].blocks[1].1.stack, 3);
    }

    #[test]
    fn start_blocks_are_sized_by_the_policy_and_doubts_are_counted() {
        const MIB: u64 = 1 << 20;
        // A 20 MiB segment before the trace: block A (requested 3.5 MiB) ends
        // 0.5 MiB before block B, too little to have been split off: A was
        // handed out whole. Block C (2 MiB) is followed by 12.5 MiB of free
        // space: split, or whole with up to 1 MiB of it, cannot be told.
        let (a, b, c) = (
            0x100_0000,
            0x100_0000 + 4 * MIB,
            0x100_0000 + 5 * MIB + MIB / 2,
        );
        let log = [
            e(Action::FreeRequested, a, 3 * MIB + MIB / 2),
            e(Action::FreeCompleted, a, 3 * MIB + MIB / 2),
            e(Action::FreeRequested, c, 2 * MIB),
            e(Action::FreeCompleted, c, 2 * MIB),
        ];
        let end_segments = [segment(a, 20 * MIB)];
        let kept = EndBlock {
            size: 3 * MIB / 2,
            requested: 3 * MIB / 2,
            status: BlockStatus::Allocated,
            stack: 0,
        };
        let end_blocks: FxMap<u64, EndBlock> = [(b, kept)].into_iter().collect();
        let mut r = replayed(&log);
        let start = r.start_state(0, &end_blocks, &end_segments, &config());
        let sizes: Vec<(u64, u64)> = start.segments[0]
            .blocks
            .iter()
            .map(|(addr, b)| (*addr, b.size))
            .collect();
        assert_eq!(sizes, vec![(a, 4 * MIB), (b, 3 * MIB / 2), (c, 2 * MIB)]);
        assert_eq!((start.uncertain_blocks, start.uncertain_bytes), (1, MIB));
        assert_eq!(r.inconsistencies, Vec::<String>::new());
    }

    /// A start block followed by another start block is followed by a block
    /// in use: only the last, followed by free space, is in doubt.
    #[test]
    fn a_start_block_before_another_is_not_in_doubt() {
        const MIB: u64 = 1 << 20;
        let (a, e2) = (0x100_0000, 0x100_0000 + 3 * MIB);
        let log = [
            e(Action::FreeRequested, a, 3 * MIB),
            e(Action::FreeCompleted, a, 3 * MIB),
            e(Action::FreeRequested, e2, 2 * MIB),
            e(Action::FreeCompleted, e2, 2 * MIB),
        ];
        let end_segments = [segment(a, 20 * MIB)];
        let mut r = replayed(&log);
        let start = r.start_state(0, &FxMap::default(), &end_segments, &config());
        let sizes: Vec<(u64, u64)> = (start.segments[0].blocks.iter())
            .map(|(addr, b)| (*addr, b.size))
            .collect();
        assert_eq!(sizes, vec![(a, 3 * MIB), (e2, 2 * MIB)]);
        assert_eq!((start.uncertain_blocks, start.uncertain_bytes), (1, MIB));
    }

    #[test]
    fn mismatches_are_reported() {
        let mut r = DeviceReplay::default();
        r.apply(0, &e(Action::Alloc, 0x1000, 10));
        r.apply(1, &e(Action::Alloc, 0x1000, 10));
        assert_eq!(r.inconsistency_count, 1);
        r.check_end(0, &FxMap::default(), &[]);
        assert_eq!(r.inconsistency_count, 2);
    }

    /// `check_end` looks only at blocks live in the replay or at the end,
    /// yet finds what a walk of every touched address in order does: each
    /// difference, in address order (the first [`DESCRIBED`] of them told),
    /// and the end size of each alloc live at both ends.
    #[test]
    fn the_end_check_tells_differences_in_address_order() {
        let mut r = DeviceReplay::default();
        let mut end: FxMap<u64, EndBlock> = FxMap::default();
        let block = |requested, status| EndBlock {
            size: 512,
            requested,
            status,
            stack: 0,
        };
        let mut i = 0;
        let mut next = || {
            i += 1;
            i - 1
        };
        // Addresses in an order of their own, so that hashing them does
        // not give them sorted.
        for k in (0..60u64).map(|k| (k * 37) % 60) {
            let addr = 0x1000 + k * 0x200;
            match k % 6 {
                // Freed in both.
                0 => {
                    r.apply(next(), &e(Action::Alloc, addr, 100));
                    r.apply(next(), &e(Action::FreeRequested, addr, 100));
                    r.apply(next(), &e(Action::FreeCompleted, addr, 100));
                }
                // Live in both, alike.
                1 => {
                    r.apply(next(), &e(Action::Alloc, addr, 100));
                    end.insert(addr, block(100, BlockStatus::Allocated));
                }
                // Live in both, differing.
                2 => {
                    r.apply(next(), &e(Action::Alloc, addr, 100));
                    end.insert(addr, block(200, BlockStatus::Allocated));
                }
                // Live in the replay only.
                3 => r.apply(next(), &e(Action::Alloc, addr, 100)),
                // Freed in the replay, live at the end.
                4 => {
                    r.apply(next(), &e(Action::Alloc, addr, 100));
                    r.apply(next(), &e(Action::FreeRequested, addr, 100));
                    r.apply(next(), &e(Action::FreeCompleted, addr, 100));
                    end.insert(addr, block(100, BlockStatus::Allocated));
                }
                // Never touched, live at the end: no difference.
                _ => {
                    end.insert(addr, block(100, BlockStatus::Allocated));
                }
            }
        }
        let mut sizes = r.check_end(0, &end, &[]);
        sizes.sort_unstable();
        // Three of every six addresses differ, in address order.
        assert_eq!(r.inconsistency_count, 30);
        assert_eq!(r.inconsistencies.len(), DESCRIBED);
        let addrs: Vec<u64> = (r.inconsistencies.iter())
            .map(|m| {
                let hex = m.split("block 0x").nth(1).unwrap();
                u64::from_str_radix(hex.split(' ').next().unwrap(), 16).unwrap()
            })
            .collect();
        let expected: Vec<u64> = (0..60u64)
            .filter(|k| matches!(k % 6, 2..=4))
            .map(|k| 0x1000 + k * 0x200)
            .take(DESCRIBED)
            .collect();
        assert_eq!(addrs, expected);
        assert!(r.inconsistencies[0].contains("replays to Allocated (requested 100) but the snapshot has Allocated (requested 200)"), "{:?}", r.inconsistencies);
        assert!(
            r.inconsistencies[1]
                .contains("replays to Allocated but the snapshot has no block there")
        );
        assert!(
            r.inconsistencies[2].contains("is Allocated in the snapshot but freed in the replay")
        );
        // Sizes for the allocs live in both, alike or not.
        assert_eq!(sizes.len(), 20);
        assert!(sizes.iter().all(|&(_, size)| size == 512));
    }

    #[test]
    fn blocks_in_address_order_are_sliced_by_range_and_merged() {
        let b = |addr: u64| {
            (
                addr,
                EndBlock {
                    size: 1,
                    requested: 1,
                    status: BlockStatus::Allocated,
                    stack: addr as u32,
                },
            )
        };
        let addrs = |v: &[(u64, EndBlock)]| v.iter().map(|x| x.0).collect::<Vec<_>>();
        let blocks: Vec<_> = [10, 20, 30, 40].into_iter().map(b).collect();
        assert_eq!(addrs(within(&blocks, 20..40)), [20, 30]);
        assert_eq!(addrs(within(&blocks, 0..10)), Vec::<u64>::new());
        assert_eq!(addrs(within(&blocks, 11..u64::MAX)), [20, 30, 40]);
        assert_eq!(addrs(within(&blocks, 20..20)), Vec::<u64>::new());
        let merged = merge_by_address(blocks.clone(), [5, 25, 26, 50].map(b));
        assert_eq!(addrs(&merged), [5, 10, 20, 25, 26, 30, 40, 50]);
        // Each block is the one given for its address.
        assert!(merged.iter().all(|x| x.1.stack as u64 == x.0));
        assert_eq!(addrs(&merge_by_address(Vec::new(), [1, 2].map(b))), [1, 2]);
        assert_eq!(addrs(&merge_by_address(blocks, [])), [10, 20, 30, 40]);
    }

    // A block a free_requested leaves pending is held out of the map until
    // the next entry: whatever that entry is, the replay is as with the
    // block in the map.
    #[test]
    fn a_pending_block_is_seen_by_every_next_entry() {
        let (a, b) = (0x1000, 0x2000);
        let problems = |entries: &[(Action, u64)]| {
            let mut r = DeviceReplay::default();
            for (i, &(action, addr)) in entries.iter().enumerate() {
                r.apply(i as u64, &e(action, addr, 512));
            }
            let end = [(a, BlockStatus::PendingFree)]
                .into_iter()
                .map(|(addr, status)| {
                    let block = EndBlock {
                        size: 512,
                        requested: 512,
                        status,
                        stack: 0,
                    };
                    (addr, block)
                })
                .collect();
            r.check_end(0, &end, &[]);
            r.inconsistencies
        };
        let (alloc, req, done) = (Action::Alloc, Action::FreeRequested, Action::FreeCompleted);
        // Freed while another block is: no problem; the pending one is at
        // the end as the snapshot has it.
        assert_eq!(
            problems(&[(alloc, a), (alloc, b), (req, a), (req, b), (done, b)]),
            Vec::<String>::new()
        );
        // Freed for good: the end state's pending block is not replayed.
        assert_eq!(
            problems(&[(alloc, a), (req, a), (done, a)]),
            [format!(
                "device 0: block {a:#x} is PendingFree in the snapshot but freed in the replay"
            )]
        );
        // Requested twice, allocated over while pending, completed twice.
        assert_eq!(
            problems(&[(alloc, a), (req, a), (req, a)]),
            [format!(
                "free_requested at {a:#x} of a block Some(PendingFree)"
            )]
        );
        assert_eq!(
            problems(&[(alloc, a), (req, a), (alloc, a), (req, a)]),
            [format!("alloc at {a:#x} over a block still PendingFree")]
        );
        assert_eq!(
            problems(&[
                (alloc, a),
                (req, a),
                (done, a),
                (done, a),
                (alloc, a),
                (req, a)
            ]),
            [format!("free_completed at {a:#x} of a block None")]
        );
        // First touched by a free_requested: pending from before the trace,
        // held the same way.
        assert_eq!(
            problems(&[(req, a), (alloc, b), (req, b), (done, b)]),
            Vec::<String>::new()
        );
    }

    #[test]
    fn expandable_mapping() {
        let mut r = DeviceReplay::default();
        // 0..100 mapped before the trace; unmapped then remapped bigger.
        r.apply(0, &e(Action::SegmentUnmap, 50, 50));
        r.apply(1, &e(Action::SegmentMap, 50, 150));
        let end = [EndSegment {
            device: 0,
            addr: 0,
            size: 200,
            stream: 0,
            expandable: true,
            pool: PoolId::DEFAULT,
        }];
        r.check_end(0, &FxMap::default(), &end);
        assert_eq!(r.inconsistencies, Vec::<String>::new());
        let start = r
            .start_state(0, &FxMap::default(), &end, &config())
            .segments;
        assert_eq!(start.len(), 1);
        assert_eq!((start[0].addr, start[0].size), (0, 100));
    }
}
