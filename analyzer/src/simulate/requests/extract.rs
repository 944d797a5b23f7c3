//! The pass that reads a trace's request stream: each allocation, free and
//! `empty_cache()` as a [`Request`], the allocator's reactions as
//! [`SegmentAction`]s, the private pools followed, and the bursts of
//! segment frees told apart (an inferred `empty_cache()`, or a retry inside
//! a failed allocation).

use super::{AllocInfo, MAX_STREAMS, Op, Request, RequestList, SegmentAction, SegmentKind};
use crate::analysis::{Analysis, AnalysisError, Flow, Step};
use crate::replay::categories::{Class, is_convolution_stack};
use crate::replay::{Applied, PhaseId, ReplayState};
use crate::sites::SiteId;
use rustc_hash::FxHashMap;
use vramtrace_format::{
    BlockEvent, BlockStatus, EventData, EventKind, InitialState, OomEvent, PoolAction, PoolEvent,
    StackId, SymbolTable,
};

/// A burst of segment frees being read: whether it was `empty_cache()`
/// depends on what comes after it.
#[derive(Clone, Copy, Debug)]
struct Burst {
    /// The tentative [`Op::InferredEmptyCache`] request.
    request: usize,
    /// Reserved bytes before the burst.
    reserved_before: u64,
    /// The pool of the segments it freed so far, while all are of one
    /// private pool (a `MemPool`'s own `emptyCache`).
    pool: Option<u16>,
    /// Whether it freed segments of several pools.
    mixed: bool,
}

/// The [`Analysis`] that builds a [`RequestList`] in one replay pass.
#[derive(Debug, Default)]
pub struct RequestExtractor {
    list: RequestList,
    /// Recorded address of each live block: its alloc id, and whether the
    /// caller already asked to free it.
    live: FxHashMap<u64, (u32, bool)>,
    stream_ids: FxHashMap<u64, u8>,
    /// The stream last numbered and its number: most traces use one
    /// stream, and most requests the stream of the one before, so it is
    /// checked before `stream_ids`.
    last_stream: Option<(u64, u8)>,
    last_index: u64,
    prev_kind: Option<EventKind>,
    burst: Option<Burst>,
    device_capacity: Option<u64>,
    initial: Option<InitialState>,
    started: bool,
    // More streams than a request can name were met: the pass fails.
    too_many_streams: bool,
    /// Whether each allocation was made under a convolution, by id.
    convolution: Vec<bool>,
    /// Whether a stack is a convolution's, by stack.
    convolution_stacks: FxHashMap<StackId, bool>,
    /// The pool index of each private pool's segment, by recorded address.
    pooled_segments: FxHashMap<u64, u16>,
    /// Captures and `use_mem_pool` blocks under way: (stream of a capture,
    /// or `None` and the thread of a block; pool index).
    routes: Vec<(Option<u64>, u32, u16)>,
    /// Pools with `pool` events, by index.
    followed: Vec<bool>,
    /// Unfollowed pools whose release was inferred.
    inferred_release: Vec<bool>,
    finished: bool,
}

impl RequestExtractor {
    /// An extractor for a trace recorded on a device of `device_capacity`
    /// bytes, when known: it tells a release-and-retry inside a failed
    /// allocation from an `empty_cache()` call.
    pub fn new(device_capacity: Option<u64>) -> Self {
        RequestExtractor {
            device_capacity: device_capacity.filter(|&c| c > 0),
            ..Default::default()
        }
    }

    /// The same, for a trace that starts from `initial` (its segments and
    /// blocks go to [`RequestList::initial_segments`]).
    pub fn starting_from(mut self, initial: Option<&InitialState>) -> Self {
        self.initial = initial.cloned();
        self
    }

    /// The list, once the pass is over: an error if it did not finish.
    pub fn into_list(self) -> Result<RequestList, AnalysisError> {
        if self.finished {
            Ok(self.list)
        } else {
            Err(AnalysisError::NoResult("request extraction"))
        }
    }

    /// The number of `stream`: streams are numbered in the order first met.
    #[inline]
    fn stream(&mut self, stream: u64) -> u8 {
        match self.last_stream {
            Some((last, s)) if last == stream => s,
            _ => self.stream_numbered(stream),
        }
    }

    /// [`stream`](Self::stream) from the map, numbering a stream first met.
    fn stream_numbered(&mut self, stream: u64) -> u8 {
        if let Some(&s) = self.stream_ids.get(&stream) {
            self.last_stream = Some((stream, s));
            return s;
        }
        if self.list.streams.len() >= MAX_STREAMS {
            self.too_many_streams = true;
            return 0;
        }
        let s = self.list.streams.len() as u8;
        self.list.streams.push(stream);
        self.stream_ids.insert(stream, s);
        self.last_stream = Some((stream, s));
        s
    }

    fn push(&mut self, index: u64, time_ns: u64, op: Op, id: u32, stream: u8) {
        let mut delta = index - self.last_index;
        // Long runs of events without a request (phases, annotations) are
        // carried by fillers rather than a wider field.
        while delta > u16::MAX as u64 {
            self.list.requests.push(Request {
                time_ns,
                id: 0,
                delta: u16::MAX,
                op: Op::Nop,
                stream: 0,
            });
            delta -= u16::MAX as u64;
        }
        self.last_index = index;
        self.list.requests.push(Request {
            time_ns,
            id,
            delta: delta as u16,
            op,
            stream,
        });
    }

    /// Whether `stack` is a convolution's (cached per stack).
    fn under_convolution(&mut self, stack: StackId, symbols: &SymbolTable) -> bool {
        *self
            .convolution_stacks
            .entry(stack)
            .or_insert_with(|| is_convolution_stack(stack, symbols))
    }

    fn new_alloc(&mut self, requested: u64, phase: PhaseId, site: SiteId, class: Class) -> u32 {
        let id = self.list.allocs.len() as u32;
        self.convolution.push(false);
        self.list.allocs.push(AllocInfo {
            requested,
            phase,
            site,
        });
        self.list.classes.push(class);
        id
    }

    /// The category changes of the last event (or of the pass's end), for
    /// the blocks still live.
    fn follow_categories(&mut self, state: &ReplayState) {
        for change in state.recategorized() {
            if let Some(&(id, _)) = self.live.get(&change.addr) {
                self.list.classes[id as usize] = change.to;
            }
        }
    }

    /// Follows a capture or block begun: past
    /// [`MAX_OPEN_CAPTURES`](crate::replay::MAX_OPEN_CAPTURES) under way
    /// (a hostile trace's), the oldest is dropped, so that each end and
    /// failure searches a bounded list.
    fn route(&mut self, route: (Option<u64>, u32, u16)) {
        if self.routes.len() >= crate::replay::MAX_OPEN_CAPTURES {
            self.routes.remove(0);
        }
        self.routes.push(route);
    }

    /// Puts allocation `id` in pool `pool` (an index).
    fn set_pool(&mut self, id: u32, pool: u16) {
        if pool == 0 && self.list.alloc_pools.is_empty() {
            return;
        }
        let id = id as usize;
        if self.list.alloc_pools.len() <= id {
            self.list.alloc_pools.resize(id + 1, 0);
        }
        self.list.alloc_pools[id] = pool;
    }

    /// A `pool` event: its requests (a capture's or block's begin and end, a
    /// hold, a release), and the routes of failed allocations.
    fn pool_event(&mut self, index: u64, time: u64, p: &PoolEvent, state: &ReplayState) {
        // A capture into a pool of the graph's own begins unnamed (index 0):
        // its end names it.
        if p.pool.is_default() {
            if p.action() == Some(PoolAction::CaptureBegin) {
                self.route((Some(p.stream), p.thread, 0));
                self.push(index, time, Op::PoolBegin, 0, 0);
            }
            return;
        }
        let Some(pool) = state.pool_index_of(p.pool) else {
            return;
        };
        if self.followed.len() <= pool as usize {
            self.followed.resize(pool as usize + 1, false);
        }
        self.followed[pool as usize] = true;
        let id = pool as u32;
        match p.action() {
            Some(PoolAction::CaptureBegin) => {
                self.route((Some(p.stream), p.thread, pool));
                self.push(index, time, Op::PoolBegin, id, 0);
            }
            Some(PoolAction::UseBegin) => {
                self.route((None, p.thread, pool));
                self.push(index, time, Op::PoolBegin, id, 0);
            }
            Some(action @ (PoolAction::CaptureEnd | PoolAction::UseEnd)) => {
                let stream = (action == PoolAction::CaptureEnd).then_some(p.stream);
                let route = self
                    .routes
                    .iter()
                    .rposition(|r| r.2 == pool && r.0 == stream)
                    .or_else(|| {
                        self.routes
                            .iter()
                            .rposition(|r| r.2 == 0 && r.0 == stream && stream.is_some())
                    });
                let unnamed = route.is_some_and(|i| self.routes[i].2 == 0);
                if let Some(i) = route {
                    self.routes.remove(i);
                }
                self.push(index, time, Op::PoolEnd, id, 0);
                // The unnamed capture's hold on its pool, now named.
                if unnamed {
                    self.push(index, time, Op::PoolHold, id, 0);
                }
                if action == PoolAction::UseEnd {
                    self.push(index, time, Op::PoolRelease, id, 0);
                }
            }
            Some(PoolAction::Hold) => self.push(index, time, Op::PoolHold, id, 0),
            Some(PoolAction::Release) => {
                self.push(index, time, Op::PoolRelease, id, 0);
                // A `MemPool` deleted returns its memory as it lets its pool
                // go (`releasePool`, then `emptyCache` of the pool), but its
                // Python end comes after: the release goes before the
                // return it made possible.
                let n = self.list.requests.len();
                if n >= 2
                    && self.list.requests[n - 2].op == Op::EmptyPool
                    && self.list.requests[n - 2].id == id
                {
                    let (a, b) = (self.list.requests[n - 2], self.list.requests[n - 1]);
                    self.list.requests[n - 2].op = b.op;
                    self.list.requests[n - 1].op = a.op;
                }
            }
            _ => {}
        }
    }

    /// The recording returned a segment of `pool`: a pool no `pool` event
    /// follows was let go by then (once).
    fn infer_release(&mut self, index: u64, time: u64, pool: u16) {
        let p = pool as usize;
        if self.followed.get(p).copied().unwrap_or(false)
            || self.inferred_release.get(p).copied().unwrap_or(false)
        {
            return;
        }
        if self.inferred_release.len() <= p {
            self.inferred_release.resize(p + 1, false);
        }
        self.inferred_release[p] = true;
        self.list.inferred_pool_releases += 1;
        // Before the burst the free belongs to, or the `empty_cache()` it
        // follows.
        let after_empty_cache = matches!(
            self.prev_kind,
            Some(EventKind::EmptyCache | EventKind::SegmentFree | EventKind::SegmentUnmap)
        ) && self
            .list
            .requests
            .last()
            .is_some_and(|r| r.op == Op::EmptyCache);
        let at = match self.burst {
            Some(b) => Some(b.request),
            None if after_empty_cache => Some(self.list.requests.len() - 1),
            None => None,
        };
        match at {
            Some(at) => {
                let r = self.list.requests[at];
                self.list.requests.insert(
                    at,
                    Request {
                        op: Op::PoolRelease,
                        id: pool as u32,
                        delta: 0,
                        stream: 0,
                        ..r
                    },
                );
                if let Some(b) = self.burst.as_mut() {
                    b.request += 1;
                }
                for end in self.list.phase_ends.iter_mut().filter(|(i, _)| *i >= at) {
                    end.0 += 1;
                }
            }
            None => self.push(index, time, Op::PoolRelease, pool as u32, 0),
        }
    }

    /// Closes a burst of segment frees at the first event after it: a burst
    /// right before an OOM, or before a segment that could not have fit
    /// beside the burst's memory, was the allocator's release-and-retry.
    /// `limit`: the allocator's recorded limit in force, which bounds it
    /// before the device does.
    fn close_burst(&mut self, data: &EventData, limit: Option<u64>) {
        let Some(burst) = self.burst.take() else {
            return;
        };
        let capacity = limit.or(self.device_capacity);
        // A burst of one private pool's segments, no OOM after it: that
        // pool's own release (a `MemPool` deleted), not `empty_cache()`.
        if let (Some(pool), false) = (burst.pool, burst.mixed)
            && !matches!(data, EventData::Oom(_))
        {
            let r = &mut self.list.requests[burst.request];
            r.op = Op::EmptyPool;
            r.id = pool as u32;
            self.list.inferred_empty_cache -= 1;
            return;
        }
        let retry = match data {
            EventData::Oom(_) => true,
            EventData::SegmentAlloc(s) | EventData::SegmentMap(s) => {
                capacity.is_some_and(|c| burst.reserved_before.saturating_add(s.size) > c)
            }
            _ => false,
        };
        if retry {
            self.list.requests[burst.request].op = Op::Nop;
            self.list.inferred_empty_cache -= 1;
            self.list.retry_bursts += 1;
        }
    }

    /// A block's free completed: the request's free, when it came right
    /// after it, becomes one free; otherwise the completion is a request of
    /// its own.
    fn free_completed(&mut self, b: &BlockEvent, index: u64, time: u64) {
        let Some((id, requested)) = self.live.remove(&b.addr) else {
            self.list.unmatched_frees += 1;
            return;
        };
        let last = self.list.requests.last_mut();
        match last {
            // The usual case: completed right after the request.
            Some(r)
                if requested
                    && r.op == Op::FreeRequest
                    && r.id == id
                    && self.last_index + 1 == index =>
            {
                r.op = Op::Free;
            }
            _ if requested => {
                self.list.cross_stream_frees += 1;
                let stream = self.stream(b.stream);
                self.push(index, time, Op::FreeComplete, id, stream);
            }
            _ => {
                let stream = self.stream(b.stream);
                self.push(index, time, Op::Free, id, stream);
            }
        }
    }

    /// An allocation that failed: a request of its own, in the pool of a
    /// capture (or block) it happened in.
    fn failed_alloc(
        &mut self,
        o: &OomEvent,
        applied: Applied,
        step: &Step<'_>,
        state: &ReplayState,
    ) {
        self.list.recorded_ooms += 1;
        let site = match applied {
            Applied::Oom(site) => site,
            _ => SiteId::UNKNOWN,
        };
        let stream = self.stream(o.stream);
        let id = self.new_alloc(o.requested, state.current_phase(), site, Class::default());
        // A failure during a capture (or block) was its pool's.
        if let Some(&(_, _, pool)) = self
            .routes
            .iter()
            .rev()
            .find(|(s, thread, _)| *s == Some(o.stream) || (s.is_none() && *thread == o.thread))
        {
            self.set_pool(id, pool);
        }
        self.convolution[id as usize] = self.under_convolution(o.stack, step.symbols);
        self.push(step.index, step.event.time_ns, Op::FailedAlloc, id, stream);
    }

    /// A segment event (`data`, as `action`): recorded, and a segment
    /// free after anything but another starts a burst, an inferred
    /// `empty_cache`.
    fn segment_action(
        &mut self,
        action: SegmentAction,
        data: &EventData,
        index: u64,
        time: u64,
        state: &ReplayState,
    ) {
        // The pool of a segment returned: an unfollowed pool let go
        // before it, and the burst's pool.
        let freed_pool = match data {
            EventData::SegmentFree(s) => self.pooled_segments.remove(&s.addr).unwrap_or(0),
            _ => 0,
        };
        let starts_burst = matches!(action.kind, SegmentKind::Free | SegmentKind::Unmap)
            && !matches!(
                self.prev_kind,
                Some(EventKind::SegmentFree | EventKind::SegmentUnmap | EventKind::EmptyCache)
            );
        if freed_pool != 0 {
            self.infer_release(index, time, freed_pool);
        }
        if starts_burst {
            self.list.inferred_empty_cache += 1;
            let request = self.list.requests.len();
            self.push(index, time, Op::InferredEmptyCache, 0, 0);
            self.burst = Some(Burst {
                request,
                // The state already applied this free.
                reserved_before: state.totals().reserved.saturating_add(action.size),
                pool: (freed_pool != 0).then_some(freed_pool),
                mixed: false,
            });
        } else if let Some(burst) = self.burst.as_mut()
            && matches!(action.kind, SegmentKind::Free | SegmentKind::Unmap)
            && burst.pool != Some(freed_pool)
        {
            burst.mixed = true;
        }
        self.list.recorded_segments.push(action);
        if let EventData::SegmentAlloc(s) = data {
            self.list.recorded_allocations.push((s.size, s.addr));
        }
    }
}

impl Analysis for RequestExtractor {
    fn begin(&mut self, state: &ReplayState, _symbols: &SymbolTable) {
        if self.started {
            return;
        }
        self.started = true;
        self.list.initial_reserved = state.totals().reserved;
        self.list.recorded_peak_reserved = state.totals().reserved;
        self.list.recorded_peak_allocated = state.totals().allocated;
        // A trace that starts mid-run: its segments, with the blocks in use
        // in them, are where the simulated allocator starts from; they come
        // first among the recorded segments' addresses.
        let segments = self.initial.take().map_or_else(Vec::new, |i| i.segments);
        for seg in &segments {
            for b in seg.blocks.iter().filter(|b| b.status != BlockStatus::Free) {
                let (site, phase, class) = state
                    .live_at(b.addr)
                    .map_or((SiteId::UNKNOWN, PhaseId::NONE, Class::default()), |a| {
                        (a.site, a.phase, a.class)
                    });
                let id = self.new_alloc(b.requested.max(1), phase, site, class);
                // A block waiting for other streams is freed when they are done.
                self.live.insert(b.addr, (id, false));
                self.list.initial_ids.insert(b.addr, id);
                self.list.initial_live_blocks += 1;
                self.list.initial_live_bytes += b.size;
            }
            if !seg.expandable {
                self.list.recorded_allocations.push((seg.size, seg.addr));
            }
        }
        self.list.initial_segments = segments;
    }

    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError> {
        let index = step.index;
        let time = step.event.time_ns;
        if self.list.events == 0 {
            self.list.first_time_ns = time;
        }
        self.list.events += 1;
        self.list.last_time_ns = time;
        self.follow_categories(state);
        let data = &step.event.data;
        let kind = data.kind();
        // What the recorder observed rather than what the allocator did (a
        // device-memory sample after each segment event, a tag, a note)
        // neither ends a burst of segment frees nor breaks one in two.
        let observation = matches!(
            kind,
            EventKind::DeviceMemory | EventKind::Tag | EventKind::Annotation | EventKind::Limit
        );
        if self.burst.is_some()
            && !observation
            && !matches!(kind, EventKind::SegmentFree | EventKind::SegmentUnmap)
        {
            let limit = (state.limit())
                .filter(|l| {
                    l.limit_bytes > 0 && (l.total_bytes == 0 || l.limit_bytes <= l.total_bytes)
                })
                .map(|l| l.limit_bytes);
            self.close_burst(data, limit);
        }
        // By reference: the block is not copied out of the step.
        match (data, step.applied) {
            (EventData::Alloc(b), Applied::Alloc(a)) => {
                let stream = self.stream(b.stream);
                let id = self.new_alloc(a.requested, a.phase, a.site, a.class);
                if state.has_pools() {
                    self.set_pool(id, state.pool_at(b.addr));
                }
                self.convolution[id as usize] = self.under_convolution(b.stack, step.symbols);
                self.live.insert(b.addr, (id, false));
                self.push(index, time, Op::Alloc, id, stream);
            }
            (EventData::FreeRequested(b), _) => match self.live.get_mut(&b.addr) {
                Some((id, requested)) if !*requested => {
                    *requested = true;
                    let id = *id;
                    let stream = self.stream(b.stream);
                    self.push(index, time, Op::FreeRequest, id, stream);
                }
                _ => self.list.unmatched_frees += 1,
            },
            (EventData::FreeCompleted(b), _) => self.free_completed(b, index, time),
            (EventData::Oom(o), applied) => self.failed_alloc(o, *applied, step, state),
            (EventData::EmptyCache(_), _) => {
                self.list.explicit_empty_cache += 1;
                self.push(index, time, Op::EmptyCache, 0, 0);
            }
            (_, Applied::PhaseEnd(phase)) => {
                self.list
                    .phase_ends
                    .push((self.list.requests.len(), *phase));
            }
            (EventData::SegmentPool(sp), _) => {
                let pool = state.pool_at(sp.addr);
                if pool != 0 {
                    self.pooled_segments.insert(sp.addr, pool);
                }
            }
            (EventData::Pool(p), _) => self.pool_event(index, time, p, state),
            _ => {}
        }
        if let Some(action) = SegmentAction::of(data) {
            self.segment_action(action, data, index, time, state);
        }
        let totals = state.totals();
        self.list.recorded_peak_reserved = self.list.recorded_peak_reserved.max(totals.reserved);
        self.list.recorded_peak_allocated = self.list.recorded_peak_allocated.max(totals.allocated);
        if !observation {
            self.prev_kind = Some(kind);
        }
        if self.too_many_streams {
            return Err(AnalysisError::Unsupported(format!(
                "the trace uses more than {MAX_STREAMS} streams; the simulator takes at most {MAX_STREAMS}"
            )));
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self, state: &ReplayState, _symbols: &SymbolTable) -> Result<(), AnalysisError> {
        self.follow_categories(state);
        self.list.pools = state.pools().iter().map(|p| p.id).collect();
        self.list.unfollowed_pools = (1..=state.pools().len() as u16)
            .filter(|&i| !self.followed.get(i as usize).copied().unwrap_or(false))
            .collect();
        // A trace ending inside a burst: nothing follows it, so it was not
        // an allocation's retry.
        self.burst = None;
        // A convolution's workspace is made after its output and freed
        // before anything else is allocated (its output, an activation, and
        // its backward's gradients live on); a failure under a convolution
        // was survived when the program allocated again after it (as the
        // summary reads it, `OomReport::survived`).
        if self.convolution.iter().any(|&c| c) {
            let mut survivable = vec![false; self.list.allocs.len()];
            let mut last_alloc = None;
            let mut failed = Vec::new();
            for r in &self.list.requests {
                let id = r.id as usize;
                match r.op {
                    Op::FailedAlloc => {
                        if self.convolution[id] {
                            failed.push(id);
                        }
                        last_alloc = Some(id);
                    }
                    Op::Alloc => {
                        for f in failed.drain(..) {
                            survivable[f] = true;
                        }
                        last_alloc = Some(id);
                    }
                    Op::Free | Op::FreeRequest if last_alloc == Some(id) => {
                        survivable[id] = self.convolution[id];
                    }
                    _ => {}
                }
            }
            self.list.survivable = survivable;
        }
        self.finished = true;
        Ok(())
    }
}
