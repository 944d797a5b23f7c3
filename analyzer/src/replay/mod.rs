//! The replay engine: the allocator's state reconstructed event by event.
//!
//! [`ReplayState::apply`] takes the events of a trace in order and keeps
//! what the allocator held after each: the live blocks (with their sizes,
//! stack, site and the phase they were allocated in), the reserved segments,
//! the open phases, and running totals. Memory is proportional to what is
//! live (plus one small record per phase instance), never to the trace's
//! length. Events that contradict the state (a free of an unknown address, a
//! segment returned while blocks in it are live, ...) are recorded as
//! [`Inconsistency`] values and skipped; replay never panics on bad input.
//!
//! Byte totals follow the block's life:
//!
//! | total | grows at | shrinks at |
//! |---|---|---|
//! | `allocated` (block sizes the caller holds) | `Alloc` | `FreeRequested` (or `FreeCompleted` without one) |
//! | `requested` (requested sizes of those blocks) | `Alloc` | as `allocated` |
//! | `active` (block sizes not yet back in the cache) | `Alloc` | `FreeCompleted` |
//!
//! These are PyTorch's meanings: `torch.cuda.memory_allocated()` drops when
//! the caller frees a block, `active` once its uses on other streams are
//! done. Per-site live bytes follow `allocated`.
//! | `reserved` (segment sizes) | `SegmentAlloc`, `SegmentMap` | `SegmentFree`, `SegmentUnmap` |

pub mod categories;
mod inconsistencies;
mod live;
mod occupancy;
mod phases;
pub mod plausible;
mod pools;
mod segments;
pub mod user_categories;

pub use inconsistencies::{
    DroppedReport, DroppedSpan, Inconsistency, InconsistencyKind, KEPT_DROPPED_SPANS, KEPT_PER_KIND,
};
pub use occupancy::{FreeSpace, Occupancy};
use phases::PathTable;
pub use phases::{MAIN_THREAD, PathId, PhaseId, PhaseInstance, SHOWN_PATH_DEPTH, normalize_name};
pub(crate) use pools::MAX_OPEN_CAPTURES;
pub use pools::{PoolKind, PoolTally};

use crate::sites::{SiteFolder, SiteId};
use categories::{
    Birth, CATEGORIES, Category, CategoryBytes, CategoryOptions, CategorySource, Class, Classifier,
    Recategorized,
};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use vramtrace_format::{
    BlockEvent, BlockStatus, DeviceMemoryEvent, Event, EventData, InitialState, LimitEvent, PoolId,
    SegmentEvent, StackId, StringId, SymbolTable, TagEvent, UserTagEvent,
};

/// A live block: allocated and not yet returned to the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveAlloc {
    /// Device address.
    pub addr: u64,
    /// Block size.
    pub size: u64,
    /// The size the caller asked for.
    pub requested: u64,
    /// The allocating stack.
    pub stack: StackId,
    /// The allocating stack folded to its site.
    pub site: SiteId,
    /// The innermost phase open at allocation time.
    pub phase: PhaseId,
    /// Allocation time.
    pub time_ns: u64,
    /// Whether the caller has freed it (it waits for other streams).
    pub free_requested: bool,
    /// The events replayed when it was allocated, its own included (its
    /// event's index + 1; 0 for the initial state's blocks): it was live at
    /// the moments of a pass after at least that many events.
    pub born: u64,
    /// What it holds, as far as is known now (see [`categories`]).
    pub class: Class,
    /// What inference knows of its allocation.
    pub birth: Birth,
}

/// A reserved address range: a segment, or the mapped part of an expandable one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// Live blocks inside.
    pub live_blocks: u64,
    /// Bytes of the live blocks inside.
    pub live_bytes: u64,
    /// Whether it is (part of) an expandable segment.
    pub expandable: bool,
    /// Its pool: 0 the default pools, `n` the `n - 1`th of
    /// [`ReplayState::pools`].
    pub pool: u16,
}

impl Segment {
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.end - self.start
    }
}

/// Running byte totals; see the module documentation for their definitions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Sum of the block sizes of live blocks.
    pub allocated: u64,
    /// Sum of the requested sizes of live blocks.
    pub requested: u64,
    /// Sum of the block sizes of blocks the caller has not freed.
    pub active: u64,
    /// Sum of reserved segment sizes.
    pub reserved: u64,
    /// Number of live blocks.
    pub live_blocks: u64,
    /// Number of reserved ranges (segments).
    pub segments: u64,
}

/// Per-site live totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SiteLive {
    /// Bytes of live blocks from the site.
    pub bytes: u64,
    /// Number of live blocks from the site.
    pub blocks: u64,
}

/// What one event did to the state, for analyses to react to without
/// looking it up again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// A block became live.
    Alloc(LiveAlloc),
    /// A live block was freed by the caller (it stays allocated).
    FreeRequested(LiveAlloc),
    /// A block was returned to the cache; this is its last state.
    FreeCompleted(LiveAlloc),
    /// Reserved memory changed.
    Segment,
    /// A phase instance began.
    PhaseBegin(PhaseId),
    /// A phase instance ended (phases left open inside it ended too).
    PhaseEnd(PhaseId),
    /// An out-of-memory event, with the stack's site.
    Oom(SiteId),
    /// An event that changes no state (annotation, empty-cache request).
    Other,
    /// The event contradicted the state and was skipped.
    Inconsistent,
}

impl Applied {
    /// The block whose bytes stopped counting as allocated with this event:
    /// at `FreeRequested`, or at `FreeCompleted` when no request came first.
    pub fn released(&self) -> Option<LiveAlloc> {
        match *self {
            Applied::FreeRequested(a) => Some(a),
            Applied::FreeCompleted(a) if !a.free_requested => Some(a),
            _ => None,
        }
    }
}

/// The segments a segment event may change (by start address), as they
/// were before it: undone in reverse order, a log of these turns the
/// segments of a later moment back into those of an earlier one, at the
/// cost of the events rather than of every segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentUndo([(u64, Option<Segment>); 3]);

impl SegmentUndo {
    /// Puts the segments back as they were before the event, in `segments`
    /// (by start) as they were right after it.
    pub fn undo(&self, segments: &mut BTreeMap<u64, Segment>) {
        for (start, _) in &self.0 {
            segments.remove(start);
        }
        for (start, was) in &self.0 {
            if let Some(seg) = was {
                segments.insert(*start, *seg);
            }
        }
    }
}

/// The allocator's state, replayed.
#[derive(Clone, Debug)]
pub struct ReplayState {
    /// The live blocks, by address.
    live: live::LiveBlocks,
    /// The live blocks' addresses in order, built the first time a segment
    /// event needs the blocks of an address range (blocks outside every
    /// segment, a segment freed in part with blocks in it) and kept from
    /// then on: a range then costs its blocks, not every live one, and
    /// traces that never need it never pay for it.
    by_addr: Option<BTreeSet<u64>>,
    /// By start address, with the one found last at hand (see
    /// [`SegmentMap`](segments::SegmentMap)).
    segments: segments::SegmentMap,
    /// The live blocks the segments count (`Segment::live_blocks`, summed).
    blocks_in_segments: u64,
    totals: Totals,
    site_live: Vec<SiteLive>,
    sites: SiteFolder,
    phases: Vec<PhaseInstance>,
    /// Each instance's ancestor holding the first names of its path shown.
    phase_heads: Vec<PhaseId>,
    open: Vec<PhaseId>,
    /// The depths in `open` of each name's open instances, innermost last:
    /// a phase end finds its instance in one probe however deep the stack.
    open_by_name: FxHashMap<StringId, Vec<u32>>,
    /// By nesting depth: 1 + the index of the event that last ended the
    /// instance open at that depth (0: none ended). An instance's ancestor
    /// at a depth is still open if no instance ended there since it began.
    ended_at_depth: Vec<u64>,
    paths: PathTable,
    /// The thread whose phases are replayed.
    phase_thread: u32,
    /// Phase begins of other threads, by thread: not replayed.
    other_thread_phases: BTreeMap<u32, u64>,
    inconsistencies: Vec<Inconsistency>,
    inconsistency_counts: [u64; InconsistencyKind::ALL.len()],
    saw_segments: bool,
    events: u64,
    time_ns: u64,
    replaced: Option<(u64, LiveAlloc)>,
    /// Allocated bytes by category, overall and by site, and the changes
    /// the last event made.
    counts: CategoryCounts,
    classifier: Classifier,
    /// The allocator's limit on this device, as last recorded.
    limit: Option<LimitEvent>,
    /// The device's memory, as last sampled.
    device_memory: Option<DeviceMemoryEvent>,
    /// The program's notes (key, value), in order, at most
    /// [`KEPT_ANNOTATIONS`]: they belong to the process, like phases.
    annotations: Vec<(StringId, StringId)>,
    /// The recorder's dropped events, as marked in the trace.
    dropped: DroppedReport,
    /// The number of events replayed up to the last drop marker (its index
    /// + 1): blocks born no later ([`LiveAlloc::born`]) are in doubt.
    last_drop: Option<u64>,
    /// Bytes the caller holds in blocks in doubt, by site.
    site_doubt: Vec<u64>,
    /// The program's own categories of live blocks (format 1.7).
    user_categories: user_categories::UserCategories,
    /// The private pools met (format 1.6), by index - 1.
    pools: Vec<PoolTally>,
    pool_indices: FxHashMap<PoolId, u16>,
    /// Bytes reserved in private pools, summed over `pools`.
    pools_reserved: u64,
    /// Captures under way into a pool of the graph's own, not yet named:
    /// (stream, thread).
    anonymous_captures: Vec<(u64, u32)>,
}

/// The most annotations a state keeps: a program that notes every step
/// leaves the rest unkept, so memory stays bounded.
pub const KEPT_ANNOTATIONS: usize = 4096;

impl Default for ReplayState {
    fn default() -> Self {
        Self::new(SiteFolder::default())
    }
}

impl ReplayState {
    /// An empty allocator, folding stacks with `sites`.
    pub fn new(sites: SiteFolder) -> Self {
        ReplayState {
            live: live::LiveBlocks::default(),
            by_addr: None,
            segments: segments::SegmentMap::default(),
            blocks_in_segments: 0,
            totals: Totals::default(),
            site_live: vec![SiteLive::default()],
            sites,
            phases: Vec::new(),
            phase_heads: Vec::new(),
            open: Vec::new(),
            open_by_name: FxHashMap::default(),
            ended_at_depth: Vec::new(),
            paths: PathTable::default(),
            phase_thread: MAIN_THREAD,
            other_thread_phases: BTreeMap::new(),
            inconsistencies: Vec::new(),
            inconsistency_counts: [0; InconsistencyKind::ALL.len()],
            saw_segments: false,
            annotations: Vec::new(),
            events: 0,
            time_ns: 0,
            replaced: None,
            counts: CategoryCounts::default(),
            classifier: Classifier::default(),
            limit: None,
            device_memory: None,
            dropped: DroppedReport::default(),
            last_drop: None,
            site_doubt: Vec::new(),
            user_categories: Default::default(),
            pools: Vec::new(),
            pools_reserved: 0,
            pool_indices: FxHashMap::default(),
            anonymous_captures: Vec::new(),
        }
    }

    /// Tells categories apart as `options` say (by default, everything is
    /// inferred).
    pub fn with_categories(mut self, options: CategoryOptions) -> Self {
        self.classifier = Classifier::new(options);
        self
    }

    /// A state with this one's phases (their instances, the open ones, their
    /// paths, the thread followed) and site folding, and no memory: the
    /// start of a device first seen after other devices' events, whose
    /// phases, the process's, it shares.
    pub fn fork_phases(&self) -> ReplayState {
        let mut state = ReplayState::new(self.sites.clone());
        state.phases.clone_from(&self.phases);
        state.phase_heads.clone_from(&self.phase_heads);
        state.open.clone_from(&self.open);
        state.ended_at_depth.clone_from(&self.ended_at_depth);
        state.open_by_name.clone_from(&self.open_by_name);
        state.paths = self.paths.clone();
        state.phase_thread = self.phase_thread;
        state
            .other_thread_phases
            .clone_from(&self.other_thread_phases);
        state.events = self.events;
        state.time_ns = self.time_ns;
        state.classifier = self.classifier.fork();
        state.annotations.clone_from(&self.annotations);
        // The gaps are the process's: a device seen later tells of them too
        // (its blocks, all born since, are in no doubt).
        state.dropped.clone_from(&self.dropped);
        state.dropped.explained_inconsistencies = 0;
        state.last_drop = self.last_drop;
        state
    }
    /// Loads the state a trace starts from. Call before the first event.
    pub fn load_initial(&mut self, state: &InitialState, symbols: &SymbolTable) {
        for seg in &state.segments {
            self.saw_segments = true;
            let end = seg.addr.saturating_add(seg.size);
            if self.totals.reserved.checked_add(seg.size).is_none() {
                self.inconsistent(InconsistencyKind::ImplausibleSize, seg.addr);
                continue;
            }
            if self.overlaps(seg.addr, end) {
                self.inconsistent(InconsistencyKind::OverlappingSegment, seg.addr);
                continue;
            }
            self.insert_segment(Segment {
                start: seg.addr,
                end,
                live_blocks: 0,
                live_bytes: 0,
                expandable: seg.expandable,
                pool: 0,
            });
            for block in &seg.blocks {
                if block.status == BlockStatus::Free {
                    continue;
                }
                let site = self.sites.site(block.stack, symbols);
                let (birth, class) = self
                    .classifier
                    .initial(block.stack, block.requested, symbols);
                let alloc = LiveAlloc {
                    addr: block.addr,
                    size: block.size,
                    requested: block.requested,
                    stack: block.stack,
                    site,
                    phase: PhaseId::NONE,
                    time_ns: 0,
                    free_requested: block.status == BlockStatus::PendingFree,
                    born: 0,
                    class,
                    birth,
                };
                if self.live.contains(block.addr) {
                    self.inconsistent(InconsistencyKind::AllocOverLive, block.addr);
                    continue;
                }
                if !self.fits(block.size, block.requested) {
                    self.inconsistent(InconsistencyKind::ImplausibleSize, block.addr);
                    continue;
                }
                self.add_live(alloc);
                if alloc.free_requested {
                    self.release(&alloc, alloc.class);
                }
            }
            if !seg.pool.is_default() {
                self.assign_segment(seg.addr, seg.pool);
            }
        }
    }

    /// Asks the CPU for what replaying `event` will read first (the slot of
    /// its block's address), so that a pass can ask a few events ahead and
    /// find it in the cache when [`apply`](Self::apply) gets there (issue #47).
    #[inline(always)]
    pub fn prefetch(&self, event: &Event) {
        if let EventData::Alloc(b) | EventData::FreeRequested(b) | EventData::FreeCompleted(b) =
            &event.data
        {
            self.live.prefetch(b.addr);
        }
    }

    /// Applies the event with this index (events are numbered from 0 in
    /// trace order) and says what it did.
    // Always inlined into the pass's loop: called once an event, and its
    // body is a dispatch to the kinds' own functions.
    #[inline(always)]
    pub fn apply(&mut self, index: u64, event: &Event, symbols: &SymbolTable) -> Applied {
        self.events = index + 1;
        self.time_ns = event.time_ns;
        if !self.counts.changes.is_empty() {
            self.counts.changes.clear();
        }
        self.user_categories.clear_changes();
        match &event.data {
            EventData::Alloc(b) => self.alloc(index, event.time_ns, b, symbols),
            EventData::FreeRequested(b) => self.free_requested(index, event.time_ns, b, symbols),
            EventData::FreeCompleted(b) => self.free_completed(index, event.time_ns, b, symbols),
            EventData::SegmentAlloc(s) => self.segment_alloc(index, event.time_ns, s, false),
            EventData::SegmentMap(s) => self.segment_alloc(index, event.time_ns, s, true),
            EventData::SegmentFree(s) => self.segment_free(index, event.time_ns, s, false),
            EventData::SegmentUnmap(s) => self.segment_free(index, event.time_ns, s, true),
            EventData::PhaseBegin { name, thread } => {
                if *thread == self.phase_thread {
                    self.classifier.phase_begin(*name, symbols);
                    self.phase_begin(index, event.time_ns, *name, symbols)
                } else {
                    *self.other_thread_phases.entry(*thread).or_default() += 1;
                    Applied::Other
                }
            }
            EventData::PhaseEnd { name, thread } => {
                if *thread == self.phase_thread {
                    self.phase_end(index, event.time_ns, *name, symbols)
                } else {
                    Applied::Other
                }
            }
            EventData::Oom(o) => Applied::Oom(self.sites.site(o.stack, symbols)),
            EventData::Tag(t) => self.tag(index, event.time_ns, t),
            EventData::Limit(l) => {
                self.limit = Some(*l);
                Applied::Other
            }
            EventData::DeviceMemory(m) => {
                self.device_memory = Some(*m);
                Applied::Other
            }
            EventData::Annotation { key, value } => {
                if self.annotations.len() < KEPT_ANNOTATIONS {
                    self.annotations.push((*key, *value));
                }
                Applied::Other
            }
            EventData::EmptyCache(_) => Applied::Other,
            EventData::EventsDropped(d) => self.events_dropped(index, event.time_ns, d),
            EventData::Pool(p) => self.pool_event(index, event.time_ns, p),
            EventData::SegmentPool(s) => self.segment_pool(index, event.time_ns, s),
            EventData::UserTag(t) => self.user_tag(index, event.time_ns, t, symbols),
            // A kind a later minor version adds: the reader skips what it
            // cannot decode, so none reaches here; were one to, it changes
            // nothing this version knows of.
            _ => Applied::Other,
        }
    }

    /// The segment holding `addr`.
    #[inline]
    fn segment_of(&mut self, addr: u64) -> Option<&mut Segment> {
        self.segments.holding(addr)
    }

    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.segments
            .before_strictly(end)
            .is_some_and(|s| s.end > start)
    }

    fn insert_segment(&mut self, seg: Segment) {
        self.totals.reserved += seg.size();
        self.totals.segments += 1;
        self.blocks_in_segments += seg.live_blocks;
        self.segments.insert(seg);
    }

    fn remove_segment(&mut self, start: u64) -> Option<Segment> {
        let seg = self.segments.remove(start)?;
        self.blocks_in_segments -= seg.live_blocks;
        Some(seg)
    }

    /// Whether a block of this size (and request) can join the live ones
    /// without a total passing 2^64 bytes (`active` bounds the others).
    fn fits(&self, size: u64, requested: u64) -> bool {
        self.totals.active.checked_add(size).is_some()
            && self.totals.requested.checked_add(requested).is_some()
    }

    /// Whether the block of `b` fits in place of the live block at its
    /// address (which an allocation over it replaces), or of none.
    #[cold]
    #[inline(never)]
    fn fits_replacing(&self, b: &BlockEvent) -> bool {
        let replaced = self
            .live
            .get(b.addr)
            .map_or((0, 0), |o| (o.size, o.requested));
        self.fits(
            b.size.saturating_sub(replaced.0),
            b.requested.saturating_sub(replaced.1),
        )
    }

    fn add_live(&mut self, a: LiveAlloc) {
        self.live.insert(a);
        if let Some(by_addr) = &mut self.by_addr {
            by_addr.insert(a.addr);
        }
        self.count_live(&a);
    }

    /// The live blocks starting in `start..end`: their number and bytes.
    fn live_in(&mut self, start: u64, end: u64) -> (u64, u64) {
        let live = &self.live;
        let by_addr = self
            .by_addr
            .get_or_insert_with(|| live.values().map(|a| a.addr).collect());
        by_addr
            .range(start..end)
            .filter_map(|&addr| live.get(addr))
            .fold((0, 0), |(n, bytes), a| (n + 1, bytes + a.size))
    }

    /// The live blocks of the smaller of two address ranges, walking both
    /// at once so the cost is that of the smaller: which one (`true`: the
    /// first), and its blocks' number and bytes.
    fn live_in_smaller(&mut self, a: (u64, u64), b: (u64, u64)) -> (bool, u64, u64) {
        let live = &self.live;
        let by_addr = self
            .by_addr
            .get_or_insert_with(|| live.values().map(|a| a.addr).collect());
        let mut first = by_addr.range(a.0..a.1);
        let mut second = by_addr.range(b.0..b.1);
        let (mut na, mut nb, mut bytes_a, mut bytes_b) = (0, 0, 0, 0);
        loop {
            match first.next() {
                None => return (true, na, bytes_a),
                Some(addr) => {
                    na += 1;
                    bytes_a += live.get(*addr).map_or(0, |l| l.size);
                }
            }
            match second.next() {
                None => return (false, nb, bytes_b),
                Some(addr) => {
                    nb += 1;
                    bytes_b += live.get(*addr).map_or(0, |l| l.size);
                }
            }
        }
    }

    /// Adds a block, already in the map, to the totals.
    // This, `release`, `remove_live` and `settle_released` are always
    // inlined: called once or twice a block event, and out of line their
    // prologues cost about 30 instructions a block (issue #47).
    #[inline(always)]
    fn count_live(&mut self, a: &LiveAlloc) {
        self.totals.allocated += a.size;
        self.totals.requested += a.requested;
        self.totals.active += a.size;
        self.totals.live_blocks += 1;
        self.counts.bytes.add(a.class, a.size);
        let s = a.site.0 as usize;
        if s >= self.site_live.len() {
            self.site_live.resize(s + 1, SiteLive::default());
            self.counts.by_site.resize(s + 1, [0; CATEGORIES]);
        }
        self.site_live[s].bytes += a.size;
        self.site_live[s].blocks += 1;
        self.counts.by_site[s][a.class.category as usize] += a.size;
        if let Some(seg) = self.segment_of(a.addr) {
            seg.live_blocks += 1;
            seg.live_bytes += a.size;
            let pool = seg.pool;
            self.blocks_in_segments += 1;
            if pool != 0 {
                self.pool_live(pool, a.size, true);
            }
        } else if self.saw_segments {
            self.inconsistent(InconsistencyKind::AllocOutsideSegment, a.addr);
        }
    }

    /// The caller gave the block up: it no longer counts as allocated (its
    /// bytes were counted as `counted`, its class until it was settled now).
    #[inline(always)]
    fn release(&mut self, a: &LiveAlloc, counted: Class) {
        if self.in_doubt(a)
            && let Some(doubt) = self.site_doubt.get_mut(a.site.0 as usize)
        {
            *doubt = doubt.saturating_sub(a.size);
        }
        self.totals.allocated -= a.size;
        self.totals.requested -= a.requested;
        self.counts.bytes.remove(counted, a.size);
        let site = &mut self.site_live[a.site.0 as usize];
        site.bytes -= a.size;
        site.blocks -= 1;
        self.counts.by_site[a.site.0 as usize][counted.category as usize] -= a.size;
        if !self.user_categories.is_empty() {
            self.user_categories.release(a.addr);
        }
    }

    #[inline(always)]
    fn remove_live(&mut self, a: &LiveAlloc, counted: Class) {
        if !a.free_requested {
            self.release(a, counted);
        }
        self.totals.active -= a.size;
        self.totals.live_blocks -= 1;
        if let Some(seg) = self.segment_of(a.addr)
            && seg.live_blocks > 0
        {
            seg.live_blocks -= 1;
            seg.live_bytes = seg.live_bytes.saturating_sub(a.size);
            let pool = seg.pool;
            self.blocks_in_segments -= 1;
            if pool != 0 {
                self.pool_live(pool, a.size, false);
            }
        }
    }

    fn alloc(
        &mut self,
        index: u64,
        time_ns: u64,
        b: &BlockEvent,
        symbols: &SymbolTable,
    ) -> Applied {
        // A block that fits whole fits in place of a live one too: the live
        // block at the address is looked up only when the sum is in doubt.
        if !self.fits(b.size, b.requested) && !self.fits_replacing(b) {
            self.record(InconsistencyKind::ImplausibleSize, index, time_ns, b.addr);
            return Applied::Inconsistent;
        }
        let site = self.sites.site(b.stack, symbols);
        let (birth, class) = self
            .classifier
            .birth(b.thread, b.stack, b.requested, symbols);
        let a = LiveAlloc {
            addr: b.addr,
            size: b.size,
            requested: b.requested,
            stack: b.stack,
            site,
            phase: self.open.last().copied().unwrap_or(PhaseId::NONE),
            time_ns,
            free_requested: false,
            born: index + 1,
            class,
            birth,
        };
        if let Some(by_addr) = &mut self.by_addr {
            by_addr.insert(b.addr);
        }
        // One probe of the map: insert, and only look back on a collision.
        if let Some(old) = self.live.insert(a) {
            // The old block must have been freed unrecorded; the new one wins.
            // Born after the last gap, its free cannot have been dropped.
            if self.in_doubt(&old) {
                self.dropped.explained_inconsistencies += 1;
            } else {
                self.count_inconsistency(InconsistencyKind::AllocOverLive, index, time_ns, b.addr);
            }
            self.remove_live(&old, old.class);
            self.replaced = Some((index, old));
        }
        // After the insert: the list's bound keeps only live blocks, and
        // this one must be among them.
        if !birth.settled {
            self.wait_for_step(b.addr, index + 1);
        }
        self.count_live(&a);
        Applied::Alloc(a)
    }

    fn free_requested(
        &mut self,
        index: u64,
        time_ns: u64,
        b: &BlockEvent,
        symbols: &SymbolTable,
    ) -> Applied {
        let Some(a) = self.live.get_mut(b.addr) else {
            self.record(InconsistencyKind::UnknownFree, index, time_ns, b.addr);
            return Applied::Inconsistent;
        };
        if a.free_requested {
            self.record(InconsistencyKind::DoubleFree, index, time_ns, b.addr);
            return Applied::Inconsistent;
        }
        let counted = settle_released(
            &mut self.classifier,
            &mut self.counts.changes,
            a,
            b,
            symbols,
        );
        a.free_requested = true;
        let a = *a;
        self.release(&a, counted);
        if b.size != 0 && b.size != a.size {
            self.record(InconsistencyKind::SizeMismatch, index, time_ns, b.addr);
        }
        Applied::FreeRequested(a)
    }

    fn free_completed(
        &mut self,
        index: u64,
        time_ns: u64,
        b: &BlockEvent,
        symbols: &SymbolTable,
    ) -> Applied {
        let Some(mut a) = self.live.remove(b.addr) else {
            self.record(InconsistencyKind::UnknownFree, index, time_ns, b.addr);
            return Applied::Inconsistent;
        };
        if let Some(by_addr) = &mut self.by_addr {
            by_addr.remove(&b.addr);
        }
        let counted = if a.free_requested {
            a.class
        } else {
            settle_released(
                &mut self.classifier,
                &mut self.counts.changes,
                &mut a,
                b,
                symbols,
            )
        };
        self.remove_live(&a, counted);
        if b.size != 0 && b.size != a.size {
            self.record(InconsistencyKind::SizeMismatch, index, time_ns, b.addr);
        }
        Applied::FreeCompleted(a)
    }

    fn segment_alloc(
        &mut self,
        index: u64,
        time_ns: u64,
        s: &SegmentEvent,
        mapped: bool,
    ) -> Applied {
        self.saw_segments = true;
        let (start, end) = (s.addr, s.addr.saturating_add(s.size));
        if self.totals.reserved.checked_add(s.size).is_none() {
            self.record(InconsistencyKind::ImplausibleSize, index, time_ns, s.addr);
            return Applied::Inconsistent;
        }
        if self.overlaps(start, end) {
            self.record(
                InconsistencyKind::OverlappingSegment,
                index,
                time_ns,
                s.addr,
            );
            return Applied::Inconsistent;
        }
        let mut seg = Segment {
            start,
            end,
            live_blocks: 0,
            live_bytes: 0,
            expandable: mapped,
            pool: 0,
        };
        // Blocks outside every segment may have been allocated before it was
        // known (a trace without an initial state); count them now.
        if self.totals.live_blocks > self.blocks_in_segments {
            (seg.live_blocks, seg.live_bytes) = self.live_in(start, end);
        }
        if mapped {
            // Mapped ranges of an expandable segment grow it in place: merge
            // with the neighbours they touch so free space spans them.
            let prev = self
                .segments
                .before_strictly(start)
                .filter(|p| p.expandable && p.end == start)
                .map(|p| p.start);
            let next = self
                .segments
                .get(end)
                .filter(|n| n.expandable)
                .map(|n| n.start);
            if prev.is_some() || next.is_some() {
                let mut merged = seg;
                if let Some(k) = prev {
                    let p = self.remove_segment(k).expect("a segment just found");
                    merged.start = p.start;
                    merged.live_blocks += p.live_blocks;
                    merged.live_bytes += p.live_bytes;
                    self.totals.segments -= 1;
                    self.totals.reserved -= p.size();
                }
                if let Some(k) = next {
                    let n = self.remove_segment(k).expect("a segment just found");
                    merged.end = n.end;
                    merged.live_blocks += n.live_blocks;
                    merged.live_bytes += n.live_bytes;
                    self.totals.segments -= 1;
                    self.totals.reserved -= n.size();
                }
                self.insert_segment(merged);
                return Applied::Segment;
            }
        }
        self.insert_segment(seg);
        Applied::Segment
    }

    fn segment_free(
        &mut self,
        index: u64,
        time_ns: u64,
        s: &SegmentEvent,
        unmapped: bool,
    ) -> Applied {
        let (start, end) = (s.addr, s.addr.saturating_add(s.size));
        let found = if unmapped {
            self.segment_of(start).filter(|seg| seg.end >= end).copied()
        } else {
            self.segments.get(start).copied()
        };
        let Some(seg) = found else {
            self.record(InconsistencyKind::UnknownSegment, index, time_ns, s.addr);
            return Applied::Inconsistent;
        };
        let key = seg.start;
        let end = if unmapped { end } else { seg.end };
        let (live_inside, bytes_inside) = if seg.live_blocks == 0 {
            (0, 0)
        } else if start == seg.start && end == seg.end {
            (seg.live_blocks, seg.live_bytes)
        } else {
            self.live_in(start, end)
        };
        if live_inside > 0 {
            // The blocks stay live (their frees will come); only the
            // reservation goes.
            self.record(
                InconsistencyKind::SegmentFreedWithLiveBlocks,
                index,
                time_ns,
                s.addr,
            );
        }
        self.remove_segment(key);
        self.totals.reserved -= end - start;
        self.totals.segments -= 1;
        if seg.pool != 0 {
            self.pool_segment_gone(seg.pool, end - start);
        }
        let left = (seg.start < start).then_some((seg.start, start));
        let right = (end < seg.end).then_some((end, seg.end));
        // The blocks of the pieces left: those of the smaller one counted
        // (so that cutting a segment again and again costs each block a
        // count only when its piece at least halves), the rest are the
        // other's.
        let rest = (
            seg.live_blocks.saturating_sub(live_inside),
            seg.live_bytes.saturating_sub(bytes_inside),
        );
        let counts = match (left, right) {
            _ if rest.0 == 0 => [(0, 0); 2],
            (Some(l), Some(r)) => {
                let (first, n, bytes) = self.live_in_smaller(l, r);
                let other = (rest.0.saturating_sub(n), rest.1.saturating_sub(bytes));
                if first {
                    [(n, bytes), other]
                } else {
                    [other, (n, bytes)]
                }
            }
            _ => [rest; 2],
        };
        for ((a, b), (blocks, bytes)) in [left, right]
            .into_iter()
            .zip(counts)
            .filter_map(|(p, c)| Some((p?, c)))
        {
            let piece = Segment {
                start: a,
                end: b,
                live_blocks: blocks,
                live_bytes: bytes,
                expandable: seg.expandable,
                pool: seg.pool,
            };
            // insert_segment counts the piece's bytes again: take them off first.
            self.totals.reserved -= b - a;
            self.insert_segment(piece);
        }
        Applied::Segment
    }

    fn tag(&mut self, index: u64, time_ns: u64, t: &TagEvent) -> Applied {
        let class = match t.category() {
            Some(category) => Class::exact(category),
            None => {
                self.record(InconsistencyKind::UnknownCategory, index, time_ns, t.addr);
                Class::exact(Category::Other)
            }
        };
        // The program's own name for a block outranks a built-in tag, which
        // a walk over modules and optimizers may make after it.
        if !self.user_categories.is_empty() && self.user_categories.of(t.addr).is_some() {
            return Applied::Other;
        }
        self.tag_class(index, time_ns, t.addr, class)
    }

    /// A user tag (format 1.7): the block counts as built-in "other",
    /// exact, and under its own name in [`user_categories`](Self::user_categories).
    fn user_tag(
        &mut self,
        index: u64,
        time_ns: u64,
        t: &UserTagEvent,
        symbols: &SymbolTable,
    ) -> Applied {
        let id = symbols
            .string(t.name)
            .and_then(|name| self.user_categories.id(name));
        if id.is_none() {
            self.record(InconsistencyKind::UnknownCategory, index, time_ns, t.addr);
        }
        let applied = self.tag_class(index, time_ns, t.addr, Class::exact(Category::Other));
        if let (Some(id), Some(a)) = (id, self.live.get(t.addr))
            && !a.free_requested
        {
            self.user_categories.tag(t.addr, a.born, a.size, id);
        }
        applied
    }

    fn tag_class(&mut self, index: u64, time_ns: u64, addr: u64, class: Class) -> Applied {
        // One probe of the map for the block's note, its change and its
        // settling (they were three: a tenth of a tag's cost, issue #47).
        match self.live.get_mut(addr) {
            Some(a) if !a.free_requested => {
                self.classifier.note(class.category, a.requested);
                self.counts.recategorize(a, class);
                a.birth.settled = true;
                Applied::Other
            }
            _ => {
                self.record(InconsistencyKind::TagWithoutBlock, index, time_ns, addr);
                Applied::Inconsistent
            }
        }
    }

    /// Remembers a block to settle when the next step ends, keeping the
    /// list no longer than twice the live blocks (a trace whose steps stop,
    /// evaluation after training say, would otherwise grow it without end).
    fn wait_for_step(&mut self, addr: u64, born: u64) {
        let waiting = &mut self.classifier.waiting;
        waiting.push((addr, born));
        if waiting.len() > 2 * self.live.len() + 1024 {
            if !self.classifier.waiting_kept {
                // Before the first step's end, the list is not needed (that
                // end finds its blocks in the live map): emptied, not
                // filtered.
                waiting.clear();
                return;
            }
            let live = &self.live;
            waiting.retain(|(addr, born)| {
                live.get(*addr)
                    .is_some_and(|a| a.born == *born && !a.birth.settled)
            });
        }
    }

    /// The live, unsettled block at `addr` allocated by event `born`.
    fn unsettled(&self, addr: u64, born: u64) -> Option<&LiveAlloc> {
        self.live
            .get(addr)
            .filter(|a| a.born == born && !a.birth.settled && !a.free_requested)
    }

    /// A step ended: the blocks born since the last one that are still
    /// alive are settled (the module docs of [`categories`] say as what),
    /// but for set-up blocks, which wait for a second step.
    fn settle_at_step_end(&mut self) {
        // The list is taken to be walked, and handed back empty: dropped, it
        // was allocated and grown afresh each step (15 M instructions of the
        // 2 M-event trace's summary, issue #47).
        let mut waiting = std::mem::take(&mut self.classifier.waiting);
        if !self.classifier.waiting_kept {
            // The first step's end: the blocks waiting for it are the live
            // ones not settled (see `Classifier::waiting_kept`), in the
            // order of their allocations, as a list kept whole would have
            // held them (the order of the changes listed, and of the set-up
            // blocks).
            waiting.clear();
            waiting.extend(
                self.live
                    .values()
                    .filter(|a| !a.birth.settled && !a.free_requested)
                    .map(|a| (a.addr, a.born)),
            );
            waiting.sort_unstable_by_key(|&(_, born)| born);
            self.classifier.waiting_kept = true;
        }
        let inferred = self.classifier.options().source == CategorySource::Inferred;
        for &(addr, born) in &waiting {
            // One probe of the map a block (the lookup, the change and the
            // settling were three).
            let Some(a) = self
                .live
                .get_mut(addr)
                .filter(|a| a.born == born && !a.birth.settled && !a.free_requested)
            else {
                continue;
            };
            let (birth, requested) = (a.birth, a.requested);
            let class = if is_setup(&birth) && inferred {
                // Alive after the first step: not an activation, but
                // perhaps the model's (decided after a second step).
                self.classifier.setup.push((addr, born));
                Class::inferred(Category::Other)
            } else {
                a.birth.settled = true;
                Class::inferred(self.classifier.survivor(&birth, requested))
            };
            self.counts.recategorize(a, class);
        }
        waiting.clear();
        // Nothing above waits for a step, but were anything to, it is kept.
        waiting.append(&mut self.classifier.waiting);
        self.classifier.waiting = waiting;
        if self.classifier.setup_decidable() {
            for (addr, born) in std::mem::take(&mut self.classifier.setup) {
                if let Some(a) = self.unsettled(addr, born) {
                    let requested = a.requested;
                    let category = if self.classifier.setup_is_parameter(requested, born, false) {
                        Category::Parameter
                    } else {
                        Category::Other
                    };
                    self.settle(addr, Class::inferred(category));
                }
            }
            if !self.classifier.gradients_counted {
                self.classifier.gradients_counted = true;
                self.settle_extra_gradients();
            }
        }
    }

    /// Blocks inferred to be gradients beyond one per parameter of their
    /// size are other: the oldest of them (the backward's cuBLAS workspace,
    /// made by the first backward, kept for good, and as large as many a
    /// weight). Worked out once, when the parameters are first known, and
    /// again at the end: a pass over the live blocks each time.
    fn settle_extra_gradients(&mut self) {
        if self.classifier.options().source != CategorySource::Inferred {
            return;
        }
        let mut parameters: FxHashMap<u64, usize> = FxHashMap::default();
        let mut gradients: Vec<(u64, u64, u64)> = Vec::new();
        for a in self.live.values() {
            if a.free_requested {
                continue;
            }
            match a.class.category {
                Category::Parameter => *parameters.entry(a.requested).or_default() += 1,
                Category::Gradient if !a.class.exact => {
                    gradients.push((a.requested, a.born, a.addr))
                }
                _ => {}
            }
        }
        if gradients.is_empty() {
            return;
        }
        // By size, oldest first: the extras are the oldest.
        gradients.sort_unstable();
        for same in gradients.chunk_by(|x, y| x.0 == y.0) {
            let allowed = parameters.get(&same[0].0).copied().unwrap_or(0);
            if allowed == 0 {
                // No parameter of this size is known: nothing to count by.
                continue;
            }
            for &(_, _, addr) in &same[..same.len().saturating_sub(allowed)] {
                self.settle(addr, Class::inferred(Category::Other));
            }
        }
    }

    fn settle(&mut self, addr: u64, class: Class) {
        if let Some(a) = self.live.get_mut(addr) {
            self.counts.recategorize(a, class);
            a.birth.settled = true;
        }
    }

    /// The pass ended: every block alive and not settled is settled as what
    /// it is at the end (a set-up block alive after a step: a parameter).
    /// The changes are listed in [`recategorized`](Self::recategorized) for
    /// the analyses' `finish`.
    pub fn settle_at_end(&mut self) {
        if !self.counts.changes.is_empty() {
            self.counts.changes.clear();
        }
        let open: Vec<(u64, Birth, u64, SiteId, u64)> = self
            .live
            .values()
            .filter(|a| !a.birth.settled && !a.free_requested)
            .map(|a| (a.addr, a.birth, a.requested, a.site, a.born))
            .collect();
        // The same order whatever the map's: the list is a result, and
        // gradients are settled before the set-up blocks their sizes decide.
        // Their keys are sorted, with their places in `open`, rather than
        // the blocks themselves: a smaller thing to move, and the key made
        // once a block rather than once a comparison.
        let mut order: Vec<(bool, u64, usize)> = (open.iter().enumerate())
            .map(|(i, &(addr, birth, ..))| (is_setup(&birth), addr, i))
            .collect();
        order.sort_unstable();
        for (addr, birth, requested, site, born) in order.into_iter().map(|(.., i)| open[i]) {
            // A run that stopped mid-iteration (at an out-of-memory error)
            // never freed that iteration's blocks: those of a site whose
            // freed blocks all turned out alike (saved activations, say)
            // are what the completed iterations' were.
            let learned = match birth.region {
                categories::Region::Initial => None,
                _ if is_setup(&birth) => None,
                _ => self.classifier.learned(site),
            };
            let category = if let Some(category) = learned {
                category
            } else if is_setup(&birth) {
                if self.classifier.setup_is_parameter(requested, born, true) {
                    Category::Parameter
                } else {
                    Category::Other
                }
            } else {
                self.classifier.survivor(&birth, requested)
            };
            self.settle(addr, Class::inferred(category));
        }
        self.settle_extra_gradients();
        self.classifier.waiting.clear();
        self.classifier.setup.clear();
        self.close_pools();
    }

    /// The program's own categories of the blocks the caller holds
    /// (format 1.7's user tags), with the last event's changes.
    pub fn user_categories(&self) -> &user_categories::UserCategories {
        &self.user_categories
    }

    /// Allocated bytes by category (blocks the caller holds).
    pub fn categories(&self) -> &CategoryBytes {
        &self.counts.bytes
    }

    /// Allocated bytes by site and category, indexed by [`SiteId`] and
    /// [`Category`] code.
    pub fn site_categories(&self) -> &[[u64; CATEGORIES]] {
        &self.counts.by_site
    }

    /// The category changes the last event applied made (or
    /// [`settle_at_end`](Self::settle_at_end)), each holding from the
    /// block's allocation.
    pub fn recategorized(&self) -> &[Recategorized] {
        &self.counts.changes
    }

    /// How categories are told apart in this replay.
    pub fn category_options(&self) -> CategoryOptions {
        self.classifier.options()
    }

    /// The running totals.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    /// The allocator's limit on this device, as last recorded (format 1.3
    /// traces of programs that set one, or that started recording under one).
    pub fn limit(&self) -> Option<&LimitEvent> {
        self.limit.as_ref()
    }

    /// The program's notes (`vramtrace.annotate(key, value)`), as (key,
    /// value), in the order recorded (at most [`KEPT_ANNOTATIONS`]).
    pub fn annotations(&self) -> &[(StringId, StringId)] {
        &self.annotations
    }

    /// The device's free and total memory, as last sampled (format 1.3).
    pub fn device_memory(&self) -> Option<&DeviceMemoryEvent> {
        self.device_memory.as_ref()
    }

    /// The number of events applied.
    pub fn events_applied(&self) -> u64 {
        self.events
    }

    /// The time of the last event applied.
    pub fn time_ns(&self) -> u64 {
        self.time_ns
    }

    /// The live block that the allocation with this event index replaced
    /// (an [`InconsistencyKind::AllocOverLive`]), if it did.
    pub fn replaced_by(&self, index: u64) -> Option<&LiveAlloc> {
        match &self.replaced {
            Some((i, old)) if *i == index => Some(old),
            _ => None,
        }
    }

    /// The live blocks, in no particular order.
    pub fn live(&self) -> impl Iterator<Item = &LiveAlloc> {
        self.live.values()
    }

    /// The live block at an address.
    pub fn live_at(&self, addr: u64) -> Option<&LiveAlloc> {
        self.live.get(addr)
    }

    /// The reserved segments, by address.
    pub fn segments(&self) -> impl ExactSizeIterator<Item = &Segment> + Clone {
        self.segments.values()
    }

    /// What a segment event about to be applied may change of the
    /// segments, as it is now: see [`SegmentUndo`].
    pub fn segment_undo(&self, s: &SegmentEvent) -> SegmentUndo {
        // A reservation merges at most with the segment ending at its start
        // and the one starting at its end; a release removes the segment
        // holding its start and leaves pieces at that segment's start and at
        // its own end. Anything else refuses the event.
        let before = self.segments.before(s.addr).map_or(s.addr, |seg| seg.start);
        let end = s.addr.saturating_add(s.size);
        SegmentUndo([before, s.addr, end].map(|start| (start, self.segments.get(start).copied())))
    }

    /// Live bytes and blocks per site, indexed by [`SiteId`].
    pub fn site_live(&self) -> &[SiteLive] {
        &self.site_live
    }

    /// The site folder (to name sites).
    pub fn sites(&self) -> &SiteFolder {
        &self.sites
    }
}

/// Allocated bytes by category, overall and by site, with the category
/// changes the last event made: a block's change of category moves all
/// three, here ([`CategoryCounts::recategorize`]).
#[derive(Clone, Debug)]
struct CategoryCounts {
    /// Allocated bytes by category.
    bytes: CategoryBytes,
    /// Allocated bytes by site and category, indexed by [`SiteId`].
    by_site: Vec<[u64; CATEGORIES]>,
    /// The category changes the last event made.
    changes: Vec<Recategorized>,
}

impl Default for CategoryCounts {
    fn default() -> Self {
        CategoryCounts {
            bytes: CategoryBytes::default(),
            // The unknown site's row.
            by_site: vec![[0; CATEGORIES]],
            changes: Vec::new(),
        }
    }
}

impl CategoryCounts {
    /// Makes live block `a` hold `class` from its allocation on: the
    /// running counts move if it still counts in them, and the change is
    /// listed for the analyses that keep past moments. The block is the
    /// caller's (from its own lookup of the live map, a field apart), so
    /// that it is not looked up again.
    fn recategorize(&mut self, a: &mut LiveAlloc, class: Class) {
        if a.class == class {
            return;
        }
        let change = Recategorized {
            addr: a.addr,
            born: a.born,
            size: a.size,
            site: a.site,
            from: a.class,
            to: class,
        };
        a.class = class;
        if !a.free_requested {
            self.bytes.shift(change.from, change.to, change.size);
            let site = &mut self.by_site[change.site.0 as usize];
            site[change.from.category as usize] -= change.size;
            site[change.to.category as usize] += change.size;
        }
        self.changes.push(change);
    }
}

/// Settles what the block `a` held, given up by the caller now (`b`), if
/// nothing did before; returns the class its bytes were counted as, to take
/// them off with. The change, if any, is listed (it holds from the block's
/// allocation), but the counts are not moved: the block leaves them.
#[inline(always)]
fn settle_released(
    classifier: &mut Classifier,
    changes: &mut Vec<Recategorized>,
    a: &mut LiveAlloc,
    b: &BlockEvent,
    symbols: &SymbolTable,
) -> Class {
    let counted = a.class;
    if !a.birth.settled {
        a.birth.settled = true;
        let category = classifier.at_free(&a.birth, a.requested, b.thread, b.stack, symbols);
        classifier.learn(a.site, category);
        if category == Category::Activation && is_setup(&a.birth) {
            classifier.first_forward_activation(a.born);
        }
        let to = Class::inferred(category);
        if to != counted {
            changes.push(Recategorized {
                addr: a.addr,
                born: a.born,
                size: a.size,
                site: a.site,
                from: counted,
                to,
            });
            a.class = to;
        }
    }
    counted
}

/// Whether a block is a set-up block: allocated outside the autograd
/// engine and any step before the first step began, and named by no frame.
fn is_setup(birth: &Birth) -> bool {
    birth.region == categories::Region::Forward
        && birth.steps == 0
        && birth.hint == categories::Hint::None
}

#[cfg(test)]
mod tests;
