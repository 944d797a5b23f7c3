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

mod page;
mod report;

pub use report::{
    AllocationRecord, Checkpoint, CheckpointBlock, CheckpointKind, CheckpointSegment, Explorer,
    ExplorerOptions, Extent, LeftOutSegments, PhaseMark, Series, SeriesBucket,
};

use super::pauses::PauseTracker;
use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::categories::Class;
use crate::replay::{Applied, FreeSpace, Occupancy, PhaseId, ReplayState, Segment, SegmentUndo};
use crate::sites::SiteId;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use vramtrace_format::{Event, EventData, StackId, SymbolTable};

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
    /// the kept records of live blocks. Inlined into `event`: most events
    /// change no category, and the call cost more than the check.
    #[inline(always)]
    fn follow_categories(&mut self, state: &ReplayState) {
        if !state.recategorized().is_empty() {
            self.move_recategorized(state);
        }
    }

    /// The moves of `follow_categories`, for an event that changed some
    /// blocks' categories.
    fn move_recategorized(&mut self, state: &ReplayState) {
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
        // By reference: the block is not copied out of the step.
        match step.applied {
            Applied::Alloc(alloc) => {
                if let Some(old) = state.replaced_by(index) {
                    let addr = old.addr;
                    self.freed(index, time_ns, addr);
                }
                self.keep(index, time_ns, alloc, false);
            }
            Applied::FreeRequested(a) => self.freed(index, time_ns, a.addr),
            Applied::FreeCompleted(a) if !a.free_requested => self.freed(index, time_ns, a.addr),
            &Applied::PhaseBegin(id) => self.open.push(id),
            &Applied::PhaseEnd(id) => {
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
