//! What the report's explorer draws, gathered in one pass with bounded
//! memory:
//!
//! - **Series**: allocated, reserved and cached-free memory per bucket of
//!   events (the lowest, highest and last value in each), at the finest
//!   resolution that fits [`ExplorerOptions::series_buckets`]: buckets start
//!   one event wide and pairs merge whenever the trace outgrows them, so a
//!   spike one event wide survives at every zoom level. Coarser levels are
//!   derived from it by the page.
//! - **Allocations**, one by one: every allocation of at least
//!   [`Explorer::allocation_threshold`] bytes, with its stack, phase and
//!   alloc and free moments. The threshold starts at 0 and rises (dropping
//!   the records below it) whenever more than
//!   [`ExplorerOptions::allocation_budget`] are kept, so the kept set is
//!   always exactly "every allocation of at least the threshold".
//! - **Checkpoints**: the allocator's segments and blocks at the allocated
//!   and reserved peaks, at each OOM, at the end, and at evenly spaced
//!   moments.
//! - **Idle gaps**, for an x axis of busy time, and the **phase** instances
//!   with their event indices.
//!
//! The x axis of every item is the event index; times ride along so that
//! the page can draw against time, event index or busy time.

use super::pauses::{IdleGaps, PauseTracker};
use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::categories::{Category, Class};
use crate::replay::{Applied, FreeSpace, Occupancy, PhaseId, ReplayState, Segment, SegmentUndo};
use crate::sites::SiteId;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;
use vramtrace_format::{Event, EventData, StackId, SymbolTable};

/// Bounds on what the explorer keeps.
#[derive(Clone, Copy, Debug)]
pub struct ExplorerOptions {
    /// Buckets of the finest series at most (it ends with between half this
    /// and this many).
    pub series_buckets: usize,
    /// Allocations kept one by one at most.
    pub allocation_budget: usize,
    /// Evenly spaced checkpoints (at least this many and at most twice).
    pub even_checkpoints: usize,
    /// Blocks a checkpoint keeps one by one (the largest); the rest are
    /// counted per segment.
    pub checkpoint_blocks: usize,
    /// Segments a checkpoint keeps (the largest); the rest are summed up
    /// (`segments_left_out`), so that a run of 400,000 segments costs the
    /// page what one of this many does.
    pub checkpoint_segments: usize,
    /// OOM checkpoints at most (the first ones).
    pub oom_checkpoints: usize,
    /// Phase instances kept at most, the outermost first.
    pub phase_budget: usize,
    /// Idle gaps kept at most (the longest).
    pub gap_budget: usize,
}

impl Default for ExplorerOptions {
    fn default() -> Self {
        ExplorerOptions {
            series_buckets: 1 << 16,
            allocation_budget: 250_000,
            even_checkpoints: 16,
            checkpoint_blocks: 20_000,
            checkpoint_segments: 10_000,
            oom_checkpoints: 4,
            phase_budget: 10_000,
            gap_budget: super::pauses::GAP_BUDGET,
        }
    }
}

/// The lowest, highest and last value of a quantity in a bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Extent {
    /// The lowest value after an event of the bucket.
    pub min: u64,
    /// The highest.
    pub max: u64,
    /// The value after the bucket's last event.
    pub last: u64,
}

impl Extent {
    fn of(v: u64) -> Self {
        Extent {
            min: v,
            max: v,
            last: v,
        }
    }

    fn add(&mut self, v: u64) {
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.last = v;
    }

    fn merge(a: Extent, b: Extent) -> Extent {
        Extent {
            min: a.min.min(b.min),
            max: a.max.max(b.max),
            last: b.last,
        }
    }
}

/// One bucket of consecutive events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SeriesBucket {
    /// The time of its first event.
    pub start_ns: u64,
    /// The time of its last event.
    pub end_ns: u64,
    /// Allocated bytes (blocks the program holds).
    pub allocated: Extent,
    /// Reserved bytes (segments).
    pub reserved: Extent,
    /// Reserved bytes in no block in use: what the cache holds free.
    pub cached_free: Extent,
    /// Reserved bytes in private pools (CUDA graphs, `MemPool`s).
    pub pools: Extent,
}

impl SeriesBucket {
    fn merge(a: &SeriesBucket, b: &SeriesBucket) -> SeriesBucket {
        SeriesBucket {
            start_ns: a.start_ns,
            end_ns: b.end_ns,
            allocated: Extent::merge(a.allocated, b.allocated),
            reserved: Extent::merge(a.reserved, b.reserved),
            cached_free: Extent::merge(a.cached_free, b.cached_free),
            pools: Extent::merge(a.pools, b.pools),
        }
    }
}

/// Memory over the events, at one resolution.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Series {
    /// Events per bucket (a power of two); bucket `b` holds the window's
    /// events `b × bucket_events` to `(b + 1) × bucket_events - 1`.
    pub bucket_events: u64,
    /// The buckets, the last one possibly partial.
    pub buckets: Vec<SeriesBucket>,
    /// Whether the trace has private pools (else every bucket's `pools`
    /// is 0, and the page draws none).
    pub has_pools: bool,
}

/// A phase instance with its event indices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PhaseMark {
    /// The phase's own name.
    pub name: String,
    /// Nesting depth (0 for a top-level phase).
    pub depth: u32,
    /// The index of its begin event.
    pub begin_index: u64,
    /// The index of its end event (the last event when it never ended).
    pub end_index: u64,
    /// When it began.
    pub begin_ns: u64,
    /// When it ended (the last event's time when it never did).
    pub end_ns: u64,
}

/// One allocation, from the moment it was made to the moment the program
/// freed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AllocationRecord {
    /// The index of its allocation event (the window's first event when it
    /// was live before the window opened).
    pub alloc_index: u64,
    /// Whether it was live before the window opened (its allocation is not
    /// in the window, or not in the trace).
    pub initial: bool,
    /// The time of it.
    pub alloc_ns: u64,
    /// The index of the event that freed it (the caller's free), if any.
    pub free_index: Option<u64>,
    /// The time of it.
    pub free_ns: Option<u64>,
    /// Block size.
    pub size: u64,
    /// The size asked for.
    pub requested: u64,
    /// Its device address.
    pub addr: u64,
    /// Its stack, an index into [`Explorer::stacks`].
    pub stack: u32,
    /// Its site, an index into [`Explorer::sites`].
    pub site: u32,
    /// The phase path it was made in, an index into
    /// [`Explorer::phase_paths`], if any.
    pub phase: Option<u32>,
    /// What it held (as the whole pass settled it).
    pub category: Category,
    /// Whether the program said so (a tag) rather than replay inferring it.
    pub exact: bool,
}

/// Why a moment is a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    /// The most allocated memory.
    AllocatedPeak,
    /// The most reserved memory.
    ReservedPeak,
    /// An out-of-memory event.
    Oom,
    /// The last event.
    End,
    /// One of the evenly spaced moments.
    Even,
}

/// A block of a segment at a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CheckpointBlock {
    /// Its offset in the segment.
    pub offset: u64,
    /// Its size.
    pub size: u64,
    /// Freed by the program, waiting for another stream's work before the
    /// cache may reuse it (PyTorch's `active_pending_free`).
    pub pending_free: bool,
    /// Its stack, an index into [`Explorer::stacks`].
    pub stack: u32,
    /// Its record in [`Explorer::allocations`], when kept.
    pub allocation: Option<u32>,
}

/// A segment at a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckpointSegment {
    /// Its address.
    pub addr: u64,
    /// Its size.
    pub size: u64,
    /// Whether it is (part of) an expandable segment.
    pub expandable: bool,
    /// Bytes of blocks in use (allocated or pending free).
    pub used_bytes: u64,
    /// Blocks in use.
    pub used_blocks: u64,
    /// The largest free range inside it.
    pub largest_free: u64,
    /// The blocks kept one by one, by offset.
    pub blocks: Vec<CheckpointBlock>,
}

/// The allocator's state at one moment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Checkpoint {
    /// Why this moment was kept (several reasons may meet).
    pub kinds: Vec<CheckpointKind>,
    /// The index of the event after which the state is taken.
    pub index: u64,
    /// Its time.
    pub time_ns: u64,
    /// Allocated bytes.
    pub allocated: u64,
    /// Bytes freed by the program but not yet back in the cache.
    pub pending_free: u64,
    /// Reserved bytes.
    pub reserved: u64,
    /// The free space of the segments.
    pub free: FreeSpace,
    /// `1 - largest free block / free bytes`.
    pub external_fragmentation: f64,
    /// The segments, by address.
    pub segments: Vec<CheckpointSegment>,
    /// Blocks in use not kept one by one (the smallest, past the budget).
    pub blocks_left_out: u64,
    /// Segments not kept (the smallest, past the budget), summed up.
    pub segments_left_out: LeftOutSegments,
}

/// The segments a checkpoint left out, summed up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LeftOutSegments {
    /// How many.
    pub count: u64,
    /// Their bytes.
    pub reserved: u64,
    /// Their bytes in blocks in use.
    pub used: u64,
}

/// Everything the explorer draws.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Explorer {
    /// The index of the window's first event.
    pub first_index: u64,
    /// Events in the window.
    pub events: u64,
    /// The time of the first event.
    pub start_ns: u64,
    /// The time of the last event.
    pub end_ns: u64,
    /// Memory over the events.
    pub series: Series,
    /// Pauses, for a busy-time axis.
    pub idle: IdleGaps,
    /// Phase instances (at most the budget, the outermost first).
    pub phases: Vec<PhaseMark>,
    /// Phase instances left out past the budget.
    pub phases_left_out: u64,
    /// The allocations kept one by one, by allocation index.
    pub allocations: Vec<AllocationRecord>,
    /// Every allocation of at least this many bytes is kept.
    pub allocation_threshold: u64,
    /// Allocations in the window, kept or not.
    pub allocations_total: u64,
    /// Stacks, innermost frame first, from the site's telling frame on:
    /// indices into [`frames`](Self::frames).
    pub stacks: Vec<Vec<u32>>,
    /// Frames, `function (file:line)`.
    pub frames: Vec<String>,
    /// Site names.
    pub sites: Vec<String>,
    /// Phase paths (`iter3/forward`) that allocations were made in.
    pub phase_paths: Vec<String>,
    /// Allocator states, by index.
    pub checkpoints: Vec<Checkpoint>,
}

impl Explorer {
    /// The busy time of an event: its time since the first event, less
    /// what the idle gaps up to it were collapsed by.
    pub fn busy_ns(&self, index: u64, time_ns: u64) -> u64 {
        let collapsed: u64 = self
            .idle
            .gaps
            .iter()
            .take_while(|g| g.index <= index)
            .map(|g| g.gap_ns - self.idle.threshold_ns)
            .sum();
        time_ns
            .saturating_sub(self.start_ns)
            .saturating_sub(collapsed)
    }
}

// A checkpoint as captured, before stacks and records are resolved.
#[derive(Clone, Debug)]
struct RawCheckpoint {
    kinds: Vec<CheckpointKind>,
    index: u64,
    time_ns: u64,
    allocated: u64,
    active: u64,
    reserved: u64,
    segments: Vec<Segment>,
    blocks: Vec<RawBlock>,
    blocks_left_out: u64,
    segments_left_out: LeftOutSegments,
    // Bytes and blocks in use per segment, all blocks counted.
    used: Vec<(u64, u64)>,
    free: FreeSpace,
    largest_free: Vec<u64>,
}

/// The items of `v` whose `keep` is true, in order, in a vector of their number: a `collect` of
/// `v.into_iter()` would reuse `v`'s buffer, and a checkpoint would hold
/// room for every segment of the run where it keeps the budget's.
fn kept<T>(v: Vec<T>, keep: &[bool]) -> Vec<T> {
    let mut out = Vec::with_capacity(keep.iter().filter(|&&k| k).count());
    out.extend(v.into_iter().zip(keep).filter(|&(_, &k)| k).map(|(x, _)| x));
    out
}

// A block at a checkpoint: address, size, pending free, stack, sequence
// number of its record, site.
type RawBlock = (u64, u64, bool, StackId, Option<u64>, SiteId);

// The totals of a checkpoint's moment.
#[derive(Clone, Copy, Debug)]
struct Moment {
    index: u64,
    time_ns: u64,
    allocated: u64,
    active: u64,
    reserved: u64,
}

// What one event changed of the live blocks and segments, as they were
// before it: the addresses (or segment starts) it may have changed, and
// what was there.
#[derive(Clone, Copy, Debug)]
enum Undo {
    Block(u64, Option<RawBlock>),
    Segments(SegmentUndo),
}

// A peak's moment, kept as the changes made since (undone at the end)
// rather than captured at every new peak: a rising peak would otherwise
// cost all live blocks each time it rises.
#[derive(Clone, Debug)]
struct PeakLog {
    kind: CheckpointKind,
    at: Moment,
    undo: Vec<Undo>,
}

// A record as kept during the pass: the stack and site raw, and a sequence
// number (its key: blocks live when the window opened share an index).
#[derive(Clone, Copy, Debug)]
struct Kept {
    seq: u64,
    initial: bool,
    alloc_index: u64,
    alloc_ns: u64,
    free: Option<(u64, u64)>,
    size: u64,
    requested: u64,
    addr: u64,
    stack: StackId,
    site: SiteId,
    phase: PhaseId,
    class: Class,
}

/// Gathers an [`Explorer`] in one pass.
pub struct ExplorerAnalysis {
    options: ExplorerOptions,
    first_index: Option<u64>,
    events: u64,
    start_ns: u64,
    last_ns: u64,
    // Series.
    bucket_events: u64,
    buckets: Vec<SeriesBucket>,
    pauses: PauseTracker,
    // Allocations.
    kept: Vec<Kept>,
    next_seq: u64,
    threshold: u64,
    allocations_total: u64,
    // Kept records of live blocks, by address: positions in `kept` shift
    // when records are dropped, so the sequence number is the key.
    live_kept: FxHashMap<u64, u64>,
    // Phase ends by phase id.
    phase_end_index: Vec<u64>,
    // The phases begun in the window and not ended, outermost first.
    open: Vec<PhaseId>,
    // Checkpoints.
    even_every: u64,
    even: Vec<RawCheckpoint>,
    ooms: Vec<RawCheckpoint>,
    allocated_peak: Option<RawCheckpoint>,
    reserved_peak: Option<RawCheckpoint>,
    // The peaks not captured yet: their moments and the changes since.
    allocated_peak_log: Option<PeakLog>,
    reserved_peak_log: Option<PeakLog>,
    peak_allocated: u64,
    peak_reserved: u64,
    // A new peak was reached and not captured yet: the state is captured
    // before the first event that may lower it (see `before`).
    allocated_peak_pending: Option<(u64, u64)>,
    reserved_peak_pending: Option<(u64, u64)>,
    report: Option<Explorer>,
}

impl ExplorerAnalysis {
    /// An explorer within these bounds.
    pub fn new(options: ExplorerOptions) -> Self {
        ExplorerAnalysis {
            options: ExplorerOptions {
                series_buckets: options.series_buckets.max(2),
                allocation_budget: options.allocation_budget.max(1),
                even_checkpoints: options.even_checkpoints.max(1),
                ..options
            },
            first_index: None,
            events: 0,
            start_ns: 0,
            last_ns: 0,
            bucket_events: 1,
            buckets: Vec::new(),
            pauses: PauseTracker::new(options.gap_budget),
            kept: Vec::new(),
            next_seq: 0,
            threshold: 0,
            allocations_total: 0,
            live_kept: FxHashMap::default(),
            phase_end_index: Vec::new(),
            open: Vec::new(),
            even_every: 1,
            even: Vec::new(),
            ooms: Vec::new(),
            allocated_peak: None,
            reserved_peak: None,
            allocated_peak_log: None,
            reserved_peak_log: None,
            peak_allocated: 0,
            peak_reserved: 0,
            allocated_peak_pending: None,
            reserved_peak_pending: None,
            report: None,
        }
    }

    /// Takes the explorer's data, once the pass is over: an error if it did
    /// not finish.
    pub fn into_report(self) -> Result<Explorer, AnalysisError> {
        self.report.ok_or(AnalysisError::NoResult("explorer"))
    }

    fn observe(&mut self, offset: u64, time_ns: u64, state: &ReplayState) {
        let t = state.totals();
        let cached_free = t.reserved.saturating_sub(t.active);
        let pools = state.pools_reserved();
        let b = (offset / self.bucket_events) as usize;
        if b >= self.options.series_buckets {
            // Outgrown: halve the resolution, keeping each pair's extremes.
            let merged: Vec<SeriesBucket> = self
                .buckets
                .chunks(2)
                .map(|pair| match pair {
                    [a, b] => SeriesBucket::merge(a, b),
                    [a] => *a,
                    _ => unreachable!("chunks of two"),
                })
                .collect();
            self.buckets = merged;
            self.bucket_events *= 2;
        }
        let b = (offset / self.bucket_events) as usize;
        // Events of other devices leave gaps in a device's indices, and
        // its memory unchanged through them.
        while b > self.buckets.len() {
            let held = match self.buckets.last() {
                Some(l) => SeriesBucket {
                    start_ns: l.end_ns,
                    end_ns: l.end_ns,
                    allocated: Extent::of(l.allocated.last),
                    reserved: Extent::of(l.reserved.last),
                    cached_free: Extent::of(l.cached_free.last),
                    pools: Extent::of(l.pools.last),
                },
                None => SeriesBucket {
                    start_ns: time_ns,
                    end_ns: time_ns,
                    allocated: Extent::of(t.allocated),
                    reserved: Extent::of(t.reserved),
                    cached_free: Extent::of(cached_free),
                    pools: Extent::of(pools),
                },
            };
            self.buckets.push(held);
        }
        if b == self.buckets.len() {
            self.buckets.push(SeriesBucket {
                start_ns: time_ns,
                end_ns: time_ns,
                allocated: Extent::of(t.allocated),
                reserved: Extent::of(t.reserved),
                cached_free: Extent::of(cached_free),
                pools: Extent::of(pools),
            });
        } else {
            let bucket = &mut self.buckets[b];
            bucket.end_ns = time_ns;
            bucket.allocated.add(t.allocated);
            bucket.reserved.add(t.reserved);
            bucket.cached_free.add(cached_free);
            bucket.pools.add(pools);
        }
    }

    fn keep(&mut self, index: u64, time_ns: u64, alloc: &crate::replay::LiveAlloc, initial: bool) {
        self.allocations_total += 1;
        if alloc.size < self.threshold {
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.kept.push(Kept {
            seq,
            initial,
            alloc_index: index,
            alloc_ns: time_ns,
            free: None,
            size: alloc.size,
            requested: alloc.requested,
            addr: alloc.addr,
            stack: alloc.stack,
            site: alloc.site,
            phase: alloc.phase,
            class: alloc.class,
        });
        self.live_kept.insert(alloc.addr, seq);
        if self.kept.len() > self.options.allocation_budget {
            self.raise_threshold();
        }
    }

    /// Raises the threshold to the smallest size that keeps at most the
    /// budget's three quarters, and drops the records below it.
    fn raise_threshold(&mut self) {
        let target = self.options.allocation_budget * 3 / 4;
        let mut sizes: Vec<u64> = self.kept.iter().map(|k| k.size).collect();
        let cut = sizes.len() - target.max(1);
        sizes.select_nth_unstable(cut);
        // Every size equal to the cut goes too, so the kept set stays "at
        // least the threshold" (one more than the cut's size).
        self.threshold = sizes[cut].saturating_add(1).max(self.threshold);
        let threshold = self.threshold;
        self.kept.retain(|k| k.size >= threshold);
        let kept = &self.kept;
        self.live_kept
            .retain(|_, seq| kept.binary_search_by_key(seq, |k| k.seq).is_ok());
    }

    fn freed(&mut self, index: u64, time_ns: u64, addr: u64) {
        let Some(seq) = self.live_kept.remove(&addr) else {
            return;
        };
        if let Ok(i) = self.kept.binary_search_by_key(&seq, |k| k.seq) {
            self.kept[i].free = Some((index, time_ns));
        }
    }

    /// The category changes of the last event (or of the pass's end), for
    /// the kept records of live blocks.
    fn follow_categories(&mut self, state: &ReplayState) {
        for change in state.recategorized() {
            let Some(&seq) = self.live_kept.get(&change.addr) else {
                continue;
            };
            if let Ok(i) = self.kept.binary_search_by_key(&seq, |k| k.seq) {
                self.kept[i].class = change.to;
            }
        }
    }

    /// A live block as a checkpoint holds it.
    fn raw_block(&self, a: &crate::replay::LiveAlloc) -> RawBlock {
        let record = self
            .live_kept
            .get(&a.addr)
            .copied()
            .filter(|_| a.size >= self.threshold);
        (a.addr, a.size, a.free_requested, a.stack, record, a.site)
    }

    fn moment(state: &ReplayState) -> Moment {
        let t = state.totals();
        Moment {
            index: state.events_applied().saturating_sub(1),
            time_ns: state.time_ns(),
            allocated: t.allocated,
            active: t.active,
            reserved: t.reserved,
        }
    }

    fn capture(&self, kind: CheckpointKind, state: &ReplayState) -> RawCheckpoint {
        let segments: Vec<_> = state.segments().cloned().collect();
        let blocks: Vec<RawBlock> = state.live().map(|a| self.raw_block(a)).collect();
        Self::checkpoint(kind, Self::moment(state), segments, blocks, &self.options)
    }

    /// The checkpoint of a logged peak: the state now, its changes since the
    /// peak undone, latest first.
    fn rebuild(&self, log: PeakLog, state: &ReplayState) -> RawCheckpoint {
        let mut blocks: FxHashMap<u64, RawBlock> =
            state.live().map(|a| (a.addr, self.raw_block(a))).collect();
        let mut segments: BTreeMap<u64, Segment> =
            state.segments().map(|s| (s.start, *s)).collect();
        for undo in log.undo.into_iter().rev() {
            match undo {
                Undo::Block(addr, was) => match was {
                    Some(b) => {
                        blocks.insert(addr, b);
                    }
                    None => {
                        blocks.remove(&addr);
                    }
                },
                Undo::Segments(were) => were.undo(&mut segments),
            }
        }
        Self::checkpoint(
            log.kind,
            log.at,
            segments.into_values().collect(),
            blocks.into_values().collect(),
            &self.options,
        )
    }

    /// Notes what an event about to be applied changes, in the logs of the
    /// peaks not captured yet; a log grown larger than a capture is
    /// replaced by the capture.
    fn log_change(&mut self, event: &Event, state: &ReplayState) {
        if self.allocated_peak_log.is_none() && self.reserved_peak_log.is_none() {
            return;
        }
        let undo = match &event.data {
            EventData::Alloc(b) | EventData::FreeRequested(b) | EventData::FreeCompleted(b) => {
                Undo::Block(b.addr, state.live_at(b.addr).map(|a| self.raw_block(a)))
            }
            EventData::SegmentAlloc(s)
            | EventData::SegmentMap(s)
            | EventData::SegmentFree(s)
            | EventData::SegmentUnmap(s) => Undo::Segments(state.segment_undo(s)),
            _ => return,
        };
        let bound = 2 * (state.totals().live_blocks + state.totals().segments) as usize + 1024;
        let mut full = [false; 2];
        for (log, full) in [&mut self.allocated_peak_log, &mut self.reserved_peak_log]
            .into_iter()
            .zip(&mut full)
        {
            if let Some(log) = log {
                log.undo.push(undo);
                *full = log.undo.len() > bound;
            }
        }
        if full[0]
            && let Some(log) = self.allocated_peak_log.take()
        {
            self.allocated_peak = Some(self.rebuild(log, state));
        }
        if full[1]
            && let Some(log) = self.reserved_peak_log.take()
        {
            self.reserved_peak = Some(self.rebuild(log, state));
        }
    }

    fn checkpoint(
        kind: CheckpointKind,
        at: Moment,
        segments: Vec<Segment>,
        mut blocks: Vec<RawBlock>,
        options: &ExplorerOptions,
    ) -> RawCheckpoint {
        let mut occupancy = Occupancy::of_blocks(
            at.reserved,
            segments.clone(),
            blocks.iter().map(|b| (b.0, b.1)),
        );
        let free = occupancy.free_space();
        blocks.sort_unstable_by_key(|b| b.0);
        // Per segment: bytes and blocks in use, and the largest free range.
        let mut used = Vec::with_capacity(segments.len());
        let mut largest_free = Vec::with_capacity(segments.len());
        let mut i = 0;
        for s in &segments {
            while i < blocks.len() && blocks[i].0 < s.start {
                i += 1;
            }
            let (mut bytes, mut count, mut cursor, mut largest) = (0, 0, s.start, 0);
            while i < blocks.len() && blocks[i].0 < s.end {
                let (addr, size) = (blocks[i].0, blocks[i].1);
                bytes += size;
                count += 1;
                largest = largest.max(addr.saturating_sub(cursor));
                cursor = cursor.max(addr.saturating_add(size).min(s.end));
                i += 1;
            }
            largest = largest.max(s.end.saturating_sub(cursor));
            used.push((bytes, count));
            largest_free.push(largest);
        }
        // Past the budget, the largest segments (the lowest address first
        // among equals) are kept, in address order; the rest, and their
        // blocks, are summed up.
        let mut segments = segments;
        let mut segments_left_out = LeftOutSegments::default();
        if segments.len() > options.checkpoint_segments {
            let cap = options.checkpoint_segments;
            let mut order: Vec<usize> = (0..segments.len()).collect();
            order.select_nth_unstable_by(cap, |&a, &b| {
                (segments[b].size().cmp(&segments[a].size()))
                    .then(segments[a].start.cmp(&segments[b].start))
            });
            let mut keep = vec![false; segments.len()];
            for &i in &order[..cap] {
                keep[i] = true;
            }
            for (i, s) in segments.iter().enumerate().filter(|&(i, _)| !keep[i]) {
                segments_left_out.count += 1;
                segments_left_out.reserved = segments_left_out.reserved.saturating_add(s.size());
                segments_left_out.used = segments_left_out.used.saturating_add(used[i].0);
            }
            segments = kept(segments, &keep);
            used = kept(used, &keep);
            largest_free = kept(largest_free, &keep);
            // Blocks of the segments left out go with them.
            let starts: Vec<u64> = segments.iter().map(|s| s.start).collect();
            blocks.retain(|b| {
                let i = starts.partition_point(|&start| start <= b.0);
                i > 0 && b.0 < segments[i - 1].end
            });
        }
        let mut blocks_left_out = 0;
        let cap = options.checkpoint_blocks;
        if blocks.len() > cap {
            blocks_left_out = (blocks.len() - cap) as u64;
            // The largest, the lowest address first among equals: the same
            // blocks whatever order they came in.
            blocks.select_nth_unstable_by(cap, |a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            blocks.truncate(cap);
            blocks.sort_unstable_by_key(|b| b.0);
        }
        // Kept until the page is written: only the room the blocks take.
        blocks.shrink_to_fit();
        RawCheckpoint {
            kinds: vec![kind],
            index: at.index,
            time_ns: at.time_ns,
            allocated: at.allocated,
            active: at.active,
            reserved: at.reserved,
            segments,
            blocks,
            blocks_left_out,
            segments_left_out,
            used,
            free,
            largest_free,
        }
    }

    fn build(&mut self, state: &ReplayState, symbols: &SymbolTable) -> Explorer {
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
            .map(|c| checkpoint(c, &mut interner, &record_of, state, symbols))
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
fn checkpoint(
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

impl Analysis for ExplorerAnalysis {
    fn begin(&mut self, state: &ReplayState, _symbols: &SymbolTable) {
        let first = state.events_applied();
        self.first_index = Some(first);
        self.peak_allocated = state.totals().allocated;
        self.peak_reserved = state.totals().reserved;
        // Blocks live when the window opens are drawn from its start.
        let mut live: Vec<crate::replay::LiveAlloc> = state
            .live()
            .filter(|a| !a.free_requested)
            .copied()
            .collect();
        live.sort_unstable_by_key(|a| a.addr);
        for a in &live {
            self.keep(first, state.time_ns(), a, true);
        }
    }

    fn wants_before(&self) -> bool {
        true
    }

    fn before(&mut self, _index: u64, event: &Event, state: &ReplayState) {
        // A peak is captured just before the first event that may lower it:
        // the state then is the peak's. Allocations only raise allocated
        // memory, segment reservations only raise reserved memory.
        // It is kept as a log of the changes from then on, undone at the end.
        if self.allocated_peak_pending.is_some() && !matches!(event.data, EventData::Alloc(_)) {
            self.allocated_peak_pending = None;
            self.allocated_peak = None;
            self.allocated_peak_log = Some(PeakLog {
                kind: CheckpointKind::AllocatedPeak,
                at: Self::moment(state),
                undo: Vec::new(),
            });
        }
        if self.reserved_peak_pending.is_some()
            && !matches!(
                event.data,
                EventData::SegmentAlloc(_) | EventData::SegmentMap(_)
            )
        {
            self.reserved_peak_pending = None;
            self.reserved_peak = None;
            self.reserved_peak_log = Some(PeakLog {
                kind: CheckpointKind::ReservedPeak,
                at: Self::moment(state),
                undo: Vec::new(),
            });
        }
        self.log_change(event, state);
    }

    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError> {
        let index = step.index;
        let time_ns = step.event.time_ns;
        let first = *self.first_index.get_or_insert(index);
        if self.events == 0 {
            self.start_ns = time_ns;
        }
        self.pauses.event(index, time_ns);
        self.events += 1;
        self.last_ns = time_ns;
        self.follow_categories(state);
        match step.applied {
            Applied::Alloc(alloc) => {
                if let Some(old) = state.replaced_by(index) {
                    let addr = old.addr;
                    self.freed(index, time_ns, addr);
                }
                self.keep(index, time_ns, &alloc, false);
            }
            Applied::FreeRequested(a) => self.freed(index, time_ns, a.addr),
            Applied::FreeCompleted(a) if !a.free_requested => self.freed(index, time_ns, a.addr),
            Applied::PhaseBegin(id) => self.open.push(id),
            Applied::PhaseEnd(id) => {
                let phases = state.phases().len();
                if self.phase_end_index.len() < phases {
                    self.phase_end_index.resize(phases, u64::MAX);
                }
                // Phases begun after this one are nested in it: those it
                // closed end here too, the top of the stack.
                while let Some(&top) = self.open.last()
                    && top >= id
                    && state.phase(top).is_some_and(|p| p.end_ns.is_some())
                {
                    self.phase_end_index[top.0 as usize] = index;
                    self.open.pop();
                }
            }
            Applied::Oom(_) if self.ooms.len() < self.options.oom_checkpoints => {
                self.ooms.push(self.capture(CheckpointKind::Oom, state));
            }
            _ => {}
        }
        self.observe(index - first, time_ns, state);
        let t = state.totals();
        if t.allocated > self.peak_allocated {
            self.peak_allocated = t.allocated;
            self.allocated_peak_pending = Some((index, time_ns));
        }
        if t.reserved > self.peak_reserved {
            self.peak_reserved = t.reserved;
            self.reserved_peak_pending = Some((index, time_ns));
        }
        // Evenly spaced checkpoints: every `even_every` events, halving
        // their number (and doubling the spacing) when there are too many.
        let offset = index - first + 1;
        if offset.is_multiple_of(self.even_every) {
            self.even.push(self.capture(CheckpointKind::Even, state));
            if self.even.len() >= 2 * self.options.even_checkpoints {
                let mut k = 0;
                self.even.retain(|_| {
                    k += 1;
                    k % 2 == 0
                });
                self.even_every *= 2;
            }
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self, state: &ReplayState, symbols: &SymbolTable) -> Result<(), AnalysisError> {
        self.follow_categories(state);
        // A peak still pending holds at the end.
        if self.allocated_peak_pending.take().is_some() {
            self.allocated_peak_log = None;
            self.allocated_peak = Some(self.capture(CheckpointKind::AllocatedPeak, state));
        }
        if self.reserved_peak_pending.take().is_some() {
            self.reserved_peak_log = None;
            self.reserved_peak = Some(self.capture(CheckpointKind::ReservedPeak, state));
        }
        if let Some(log) = self.allocated_peak_log.take() {
            self.allocated_peak = Some(self.rebuild(log, state));
        }
        if let Some(log) = self.reserved_peak_log.take() {
            self.reserved_peak = Some(self.rebuild(log, state));
        }
        self.report = Some(self.build(state, symbols));
        Ok(())
    }
}

#[cfg(test)]
mod tests;
