//! The request stream of a trace: what the program asked of the allocator,
//! stripped of what the allocator did in reply, in a compact list that every
//! simulation of a sweep reads.
//!
//! A trace records both the caller's requests (allocations, frees,
//! `empty_cache()` calls) and the allocator's reactions (segments reserved
//! and released, OOMs). A what-if simulation keeps the first and lets another
//! allocator produce the second. The reactions are kept apart, as
//! [`SegmentAction`]s, to check that the recorded settings reproduce them.

mod extract;

pub use extract::RequestExtractor;

use crate::replay::PhaseId;
use crate::replay::categories::Class;
use crate::sites::SiteId;
use rustc_hash::FxHashMap;
use serde::Serialize;
use vramtrace_format::{EventData, PoolId, SegmentState};

/// What a [`Request`] asks of the allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Allocate `allocs[id].requested` bytes on the request's stream.
    Alloc,
    /// An allocation that failed in the recorded run (an `Oom` event): the
    /// simulation tries it too, and frees it at once if it succeeds, since
    /// the program never held it.
    FailedAlloc,
    /// Free block `id`, completed at once (no use on another stream).
    Free,
    /// The caller freed block `id`, but it stays in use on another stream
    /// until a later [`Op::FreeComplete`].
    FreeRequest,
    /// Block `id`'s last use on another stream finished.
    FreeComplete,
    /// `empty_cache()`, recorded as an `EmptyCache` event.
    EmptyCache,
    /// `empty_cache()` inferred from a burst of segment frees that no OOM
    /// followed (PyTorch snapshots record no `empty_cache` entry).
    InferredEmptyCache,
    /// Nothing to do: an inference withdrawn, or a filler that carries a
    /// long run of events without requests (see [`Request::delta`]).
    Nop,
    /// A capture into pool `id` (a [`RequestList::pools`] index), or a
    /// `use_mem_pool` block, began: a user of the pool, and no whole-cache
    /// release while it is under way.
    PoolBegin,
    /// The capture (or block) in pool `id` ended.
    PoolEnd,
    /// A `MemPool` made pool `id`: it holds it.
    PoolHold,
    /// One of pool `id`'s users let it go.
    PoolRelease,
    /// `emptyCache` of pool `id` alone (a `MemPool` deleted): inferred from
    /// a burst of segment frees all of that pool.
    EmptyPool,
}

/// One request, 16 bytes: a sweep of many simulations reads millions of
/// them, so they hold only what the allocator needs and ids for the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The time of the event that made the request.
    pub time_ns: u64,
    /// The block: an index into [`RequestList::allocs`].
    pub id: u32,
    /// Events between the previous request's event and this one's, so that
    /// the event index of a request is the sum of the deltas up to it: an
    /// index per request would double its size for a number only an OOM
    /// report needs.
    pub delta: u16,
    /// What to do.
    pub op: Op,
    /// The stream: an index into [`RequestList::streams`].
    pub stream: u8,
}

/// What the simulation and its report need of one allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocInfo {
    /// The size the caller asked for.
    pub requested: u64,
    /// The innermost phase open at the allocation.
    pub phase: PhaseId,
    /// The allocating stack's site.
    pub site: SiteId,
}

/// What kind of device action a [`SegmentAction`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentKind {
    /// A segment reserved (`cudaMalloc`).
    Alloc,
    /// A segment returned (`cudaFree`).
    Free,
    /// Pages mapped into an expandable segment.
    Map,
    /// Pages unmapped from an expandable segment.
    Unmap,
}

/// A device action of the allocator, as compared between a recording and a
/// simulation: addresses differ by construction, sizes and order must not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SegmentAction {
    /// What happened.
    pub kind: SegmentKind,
    /// Bytes reserved, released, mapped or unmapped.
    pub size: u64,
    /// The stream of the pool concerned.
    pub stream: u64,
}

impl SegmentAction {
    /// The action an event records, if it is a device action.
    pub fn of(data: &EventData) -> Option<SegmentAction> {
        let (kind, s) = match data {
            EventData::SegmentAlloc(s) => (SegmentKind::Alloc, s),
            EventData::SegmentFree(s) => (SegmentKind::Free, s),
            EventData::SegmentMap(s) => (SegmentKind::Map, s),
            EventData::SegmentUnmap(s) => (SegmentKind::Unmap, s),
            _ => return None,
        };
        Some(SegmentAction {
            kind,
            size: s.size,
            stream: s.stream,
        })
    }
}

/// The most streams a list can name: [`Request::stream`] is one byte.
pub const MAX_STREAMS: usize = 256;

/// A trace's requests and what the recorded allocator did with them.
#[derive(Clone, Debug, Default)]
pub struct RequestList {
    /// The requests, in trace order.
    pub requests: Vec<Request>,
    /// One entry per allocation (recorded, failed, or loaded from the
    /// initial state), indexed by [`Request::id`].
    pub allocs: Vec<AllocInfo>,
    /// What each allocation's block held (as the whole pass settled it),
    /// by id: apart from [`AllocInfo`], which stays 16 bytes.
    pub classes: Vec<Class>,
    /// The allocations a program survives failing, by id: a cuDNN
    /// convolution's workspace (made under a convolution and freed before
    /// anything else is allocated), on whose failure PyTorch tries the next
    /// algorithm, one that needs less; and the recorded failures under a
    /// convolution. Empty when none.
    pub survivable: Vec<bool>,
    /// The streams' recorded ids, indexed by [`Request::stream`].
    pub streams: Vec<u64>,
    /// The recorded device actions, in order.
    pub recorded_segments: Vec<SegmentAction>,
    /// The size and address of each segment the recording reserved
    /// (`cudaMalloc`), in order: a simulation lays its segments out the
    /// same way while it makes the same requests of the device.
    pub recorded_allocations: Vec<(u64, u64)>,
    /// The private pools (format 1.6): a request's or allocation's pool
    /// index `n` is `pools[n - 1]`, and 0 the default pools.
    pub pools: Vec<PoolId>,
    /// Each allocation's pool index, by id; empty when every allocation is
    /// in the default pools.
    pub alloc_pools: Vec<u16>,
    /// The pools the trace names without saying how they are used (no
    /// `pool` event: a snapshot, or a recorder before format 1.6): held
    /// from the start, and let go where the recording returned their
    /// segments (an inferred release).
    pub unfollowed_pools: Vec<u16>,
    /// Releases of unfollowed pools inferred from their segments' return.
    pub inferred_pool_releases: u64,
    /// The recorded peak of reserved bytes.
    pub recorded_peak_reserved: u64,
    /// The recorded peak of allocated bytes.
    pub recorded_peak_allocated: u64,
    /// The recorded OOM events.
    pub recorded_ooms: u64,
    /// The segments reserved when recording began (a trace that starts
    /// mid-run), with their blocks at their recorded addresses: a
    /// simulation takes them over as they were
    /// (`CachingAllocator::load_segment`).
    pub initial_segments: Vec<SegmentState>,
    /// The alloc id ([`Request::id`]) of each block in use in
    /// [`initial_segments`](Self::initial_segments), by recorded address.
    pub initial_ids: FxHashMap<u64, u32>,
    /// Blocks live when recording began.
    pub initial_live_blocks: u64,
    /// Their bytes.
    pub initial_live_bytes: u64,
    /// Bytes reserved when recording began.
    pub initial_reserved: u64,
    /// Frees whose completion waited for another stream.
    pub cross_stream_frees: u64,
    /// Frees of blocks the trace never allocated (skipped).
    pub unmatched_frees: u64,
    /// `empty_cache()` calls recorded as events.
    pub explicit_empty_cache: u64,
    /// `empty_cache()` calls inferred from bursts of segment frees.
    pub inferred_empty_cache: u64,
    /// Bursts of segment frees taken for the release-and-retry of a failed
    /// allocation, not for `empty_cache()`.
    pub retry_bursts: u64,
    /// Where each phase instance ended: the position in
    /// [`requests`](Self::requests) of the first request after its end, and
    /// the instance. A fix inserts its `empty_cache()` there.
    pub phase_ends: Vec<(usize, PhaseId)>,
    /// Events read.
    pub events: u64,
    /// Time of the first event.
    pub first_time_ns: u64,
    /// Time of the last event.
    pub last_time_ns: u64,
}

impl RequestList {
    /// The recorded stream id of a request.
    pub fn stream(&self, r: &Request) -> u64 {
        self.streams[r.stream as usize]
    }

    /// The pool of allocation `id` (the default pools' unless the trace put
    /// it in a private one).
    #[inline]
    pub fn pool_of(&self, id: usize) -> PoolId {
        match self.alloc_pools.get(id).copied().unwrap_or(0) {
            0 => PoolId::DEFAULT,
            p => self.pools[p as usize - 1],
        }
    }

    /// Bytes of memory the list holds, for the performance notes.
    pub fn memory_bytes(&self) -> usize {
        self.requests.capacity() * size_of::<Request>()
            + self.allocs.capacity() * size_of::<AllocInfo>()
            + self.classes.capacity() * size_of::<Class>()
            + self.survivable.capacity()
            + self.recorded_segments.capacity() * size_of::<SegmentAction>()
            + self.recorded_allocations.capacity() * size_of::<(u64, u64)>()
            + self.phase_ends.capacity() * size_of::<(usize, PhaseId)>()
    }
}
