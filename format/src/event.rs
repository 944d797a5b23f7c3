//! Events: one record for every allocator action, plus the user context
//! (phases and annotations) that gives them meaning.

use super::category::Category;
use super::symbols::{StackId, StringId};
use serde::{Deserialize, Serialize};

/// One allocator action or user-context marker, at a time since the trace start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// Nanoseconds since the trace start (the header's `start_unix_ns`).
    pub time_ns: u64,
    /// What happened.
    pub data: EventData,
}

/// The payload of an [`Event`], one variant per [`EventKind`]. A later
/// minor version may add kinds: a `match` outside this crate needs an arm
/// for those.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventData {
    /// A block was handed to the caller.
    Alloc(BlockEvent),
    /// The caller freed a block; it may still be in use on other streams.
    FreeRequested(BlockEvent),
    /// The block's last use finished and it returned to the allocator's cache.
    FreeCompleted(BlockEvent),
    /// A segment was reserved from the device (cudaMalloc).
    SegmentAlloc(SegmentEvent),
    /// A segment was returned to the device (cudaFree).
    SegmentFree(SegmentEvent),
    /// Pages were mapped into an expandable segment.
    SegmentMap(SegmentEvent),
    /// Pages were unmapped from an expandable segment.
    SegmentUnmap(SegmentEvent),
    /// An allocation failed after the cache was flushed and retried.
    Oom(OomEvent),
    /// The cache was emptied (`empty_cache()`): the caller asked for it, so a
    /// replay can ask for it too.
    EmptyCache(EmptyCacheEvent),
    /// A named phase began on a thread; each thread's phases nest.
    PhaseBegin {
        /// The phase's name.
        name: StringId,
        /// The thread whose phase it is (0: the main thread; traces of
        /// format 1.0 have no thread on phases and read as 0).
        thread: u32,
    },
    /// The innermost open phase of that name on the thread ended.
    PhaseEnd {
        /// The phase's name, as given to the matching [`EventData::PhaseBegin`].
        name: StringId,
        /// The thread whose phase it is.
        thread: u32,
    },
    /// A key/value note from the user (a step number, a config value).
    Annotation {
        /// The note's key.
        key: StringId,
        /// The note's value.
        value: StringId,
    },
    /// The program said what the live block at an address holds (format
    /// 1.2): it holds that for its whole life, from its allocation.
    Tag(TagEvent),
    /// The allocator's limit on the device's reserved memory was set
    /// (format 1.3): `torch.cuda.set_per_process_memory_fraction`, or the
    /// limit in force when recording began.
    Limit(LimitEvent),
    /// The device's memory as the driver reports it (format 1.3,
    /// `cudaMemGetInfo`): sampled at the start, at device actions, at
    /// out-of-memory errors and at the end.
    DeviceMemory(DeviceMemoryEvent),
    /// The recorder dropped events because its output could not keep up
    /// (format 1.5): this many, recorded from `from_ns` to the marker's own
    /// time, which is the last dropped event's. The events around it are
    /// complete; the ones in the span are not.
    EventsDropped(DroppedEvents),
    /// A memory pool's life (format 1.6): a CUDA graph's capture began or
    /// ended in it, a thread began or stopped allocating to it
    /// (`torch.cuda.use_mem_pool`), or its last user let it go.
    Pool(PoolEvent),
    /// The segment reserved at `addr` belongs to a private pool (format
    /// 1.6): it follows that segment's `segment_alloc`. A segment with
    /// none is in the default pools.
    SegmentPool(SegmentPoolEvent),
    /// The program named what the live block at an address holds, in a
    /// category of its own (format 1.7: `vramtrace.tag(kv, "kv_cache")`, or
    /// PyTorch's `annotate` action): it holds that for its whole life, from
    /// its allocation, as with [`EventData::Tag`].
    UserTag(UserTagEvent),
}

/// A block-level action: an allocation or one of the two steps of its free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BlockEvent {
    /// The block's device address.
    pub addr: u64,
    /// The block's size: the requested size after the allocator's rounding
    /// (and larger when a cached block was handed out whole).
    pub size: u64,
    /// The size the caller asked for.
    pub requested: u64,
    /// The stream the block belongs to (0 for the default stream).
    pub stream: u64,
    /// The device index.
    pub device: u32,
    /// The stack that performed the action ([`StackId::NONE`] when not captured).
    pub stack: StackId,
    /// The recording thread's id, as numbered by the producer.
    pub thread: u32,
}

impl BlockEvent {
    /// The segment event with this one's address, size, stream, device,
    /// stack and thread (a segment has no requested size).
    #[inline]
    pub fn segment(self) -> SegmentEvent {
        SegmentEvent {
            addr: self.addr,
            size: self.size,
            stream: self.stream,
            device: self.device,
            stack: self.stack,
            thread: self.thread,
        }
    }
}

/// A segment-level action: memory reserved from or returned to the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SegmentEvent {
    /// The segment's (or the mapped range's) start address.
    pub addr: u64,
    /// The segment's (or the mapped range's) size in bytes.
    pub size: u64,
    /// The stream whose pool owns the segment.
    pub stream: u64,
    /// The device index.
    pub device: u32,
    /// The stack that caused the action ([`StackId::NONE`] when not captured).
    pub stack: StackId,
    /// The recording thread's id.
    pub thread: u32,
}

/// An allocation that failed for lack of device memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OomEvent {
    /// The size the caller asked for.
    pub requested: u64,
    /// Free device memory at the time of the failure, as the driver reports it.
    pub free_bytes: u64,
    /// The stream of the failed request.
    pub stream: u64,
    /// The device index.
    pub device: u32,
    /// The stack of the failed request.
    pub stack: StackId,
    /// The recording thread's id.
    pub thread: u32,
}

/// A request to return every wholly free cached segment to the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EmptyCacheEvent {
    /// The device index.
    pub device: u32,
    /// The stack of the caller.
    pub stack: StackId,
    /// The recording thread's id.
    pub thread: u32,
}

/// What the live block at `addr` holds: the program said so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TagEvent {
    /// The block's address (the address its allocation returned).
    pub addr: u64,
    /// The device index.
    pub device: u32,
    /// The recording thread's id.
    pub thread: u32,
    /// A [`Category`] code; a code this version does not know is kept as
    /// it was read ([`category`](Self::category) says `None`).
    pub code: u8,
}

impl TagEvent {
    /// A tag of the block at `addr` on `device` as `category`.
    pub fn new(addr: u64, device: u32, category: Category) -> TagEvent {
        TagEvent {
            addr,
            device,
            thread: 0,
            code: category.code(),
        }
    }

    /// The category, if this version knows its code.
    pub fn category(&self) -> Option<Category> {
        Category::from_code(self.code)
    }
}

/// A limit on what the caching allocator may reserve on one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LimitEvent {
    /// The device index.
    pub device: u32,
    /// The recording thread's id.
    pub thread: u32,
    /// The most bytes the allocator may reserve from now on (PyTorch's
    /// `fraction × total`, rounded down); `total_bytes` means no cap.
    pub limit_bytes: u64,
    /// The device's total memory, as the driver reports it: the fraction
    /// given is `limit_bytes / total_bytes`.
    pub total_bytes: u64,
}

impl LimitEvent {
    /// The fraction of the device's memory the limit is (1.0 without a
    /// cap; 0.0 when the total is unknown).
    pub fn fraction(&self) -> f64 {
        if self.total_bytes == 0 {
            0.0
        } else {
            self.limit_bytes as f64 / self.total_bytes as f64
        }
    }
}

/// The device's free and total memory at one moment, as the driver reports
/// them: what every process and the driver itself hold on the card.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeviceMemoryEvent {
    /// The device index.
    pub device: u32,
    /// The recording thread's id.
    pub thread: u32,
    /// Free bytes on the device.
    pub free_bytes: u64,
    /// The device's total bytes.
    pub total_bytes: u64,
}

/// Events the recorder left out of the trace, and when they were recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DroppedEvents {
    /// How many events were dropped, all kinds.
    pub count: u64,
    /// The time of the first dropped event (the marker's time is the last's).
    pub from_ns: u64,
}

/// A memory pool of PyTorch's caching allocator: its `MempoolId_t`, a pair
/// of counters. The default pools (every allocation outside a capture or a
/// `use_mem_pool` block) are `(0, 0)`; a pool a CUDA graph's capture made
/// for itself is `(n, 0)`; one made by `torch.cuda.graph_pool_handle()` or
/// `torch.cuda.MemPool()`, which several graphs (or allocations) may share,
/// is `(0, n)`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct PoolId(pub u64, pub u64);

impl PoolId {
    /// The default pools.
    pub const DEFAULT: PoolId = PoolId(0, 0);

    /// Whether this is the default pools rather than a private pool.
    pub fn is_default(self) -> bool {
        self == PoolId::DEFAULT
    }

    /// Whether a graph's capture made the pool for itself (`(n, 0)`),
    /// rather than the program (`graph_pool_handle()`, `MemPool`).
    pub fn made_by_capture(self) -> bool {
        self.0 != 0
    }
}

impl std::fmt::Display for PoolId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({}, {})", self.0, self.1)
    }
}

/// What happened to a pool in a [`PoolEvent`]. The discriminants are the
/// codes used on disk and never change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum PoolAction {
    /// A CUDA graph's capture began on `stream`: the stream's allocations
    /// come from the pool until the capture ends.
    CaptureBegin = 0,
    /// The capture on `stream` ended.
    CaptureEnd = 1,
    /// The thread began allocating from the pool (`use_mem_pool`).
    UseBegin = 2,
    /// The thread stopped allocating from the pool.
    UseEnd = 3,
    /// One of the pool's users (a graph, a `MemPool`) let it go. PyTorch
    /// counts a pool's users: each capture into it and each `use_mem_pool`
    /// block adds one, as a `MemPool` does for its life ([`Hold`](Self::Hold));
    /// each graph destroyed or reset, `use_mem_pool` block ended and
    /// `MemPool` deleted takes one away. Once none is left, the pool's free
    /// segments may be returned to the device, at the next `empty_cache()`
    /// or release-and-retry.
    Release = 4,
    /// A `torch.cuda.MemPool` was made: it holds the pool until it is
    /// deleted (a [`Release`](Self::Release)).
    Hold = 5,
}

impl PoolAction {
    /// Every action, in code order.
    pub const ALL: [PoolAction; 6] = [
        PoolAction::CaptureBegin,
        PoolAction::CaptureEnd,
        PoolAction::UseBegin,
        PoolAction::UseEnd,
        PoolAction::Release,
        PoolAction::Hold,
    ];

    /// The action with this on-disk code, if this version knows it.
    pub fn from_code(code: u8) -> Option<PoolAction> {
        Self::ALL.get(code as usize).copied()
    }

    /// The on-disk code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The snake_case name used in JSON.
    pub fn name(self) -> &'static str {
        match self {
            PoolAction::CaptureBegin => "capture_begin",
            PoolAction::CaptureEnd => "capture_end",
            PoolAction::UseBegin => "use_begin",
            PoolAction::UseEnd => "use_end",
            PoolAction::Release => "release",
            PoolAction::Hold => "hold",
        }
    }
}

/// A memory pool's life: see [`EventData::Pool`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PoolEvent {
    /// The pool.
    pub pool: PoolId,
    /// The capturing stream (captures); 0 otherwise.
    pub stream: u64,
    /// The device index.
    pub device: u32,
    /// The recording thread's id.
    pub thread: u32,
    /// The stack of the call ([`StackId::NONE`] when not captured).
    pub stack: StackId,
    /// A [`PoolAction`] code; a code this version does not know is kept as
    /// read ([`action`](Self::action) says `None`).
    pub code: u8,
}

impl PoolEvent {
    /// An event of `action` on `pool` of `device`.
    pub fn new(action: PoolAction, pool: PoolId, device: u32, stream: u64) -> PoolEvent {
        PoolEvent {
            pool,
            stream,
            device,
            thread: 0,
            stack: StackId::NONE,
            code: action.code(),
        }
    }

    /// The action, if this version knows its code.
    pub fn action(&self) -> Option<PoolAction> {
        PoolAction::from_code(self.code)
    }
}

/// A category the program named itself: see [`EventData::UserTag`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UserTagEvent {
    /// The block's address (the address its allocation returned).
    pub addr: u64,
    /// The device index.
    pub device: u32,
    /// The recording thread's id.
    pub thread: u32,
    /// The category's name, as the program gave it (`"kv_cache"`).
    pub name: StringId,
}

/// The longest name of a user category, in bytes.
pub const MAX_USER_CATEGORY_LEN: usize = 64;

/// Whether `name` can name a user category: 1 to
/// [`MAX_USER_CATEGORY_LEN`] bytes, no control characters, and not a
/// built-in category's [`name`](Category::name) (those are plain tags).
/// Readers accept any name a trace holds; recorders refuse others.
pub fn user_category_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_USER_CATEGORY_LEN
        && !name.chars().any(char::is_control)
        && Category::ALL.iter().all(|c| c.name() != name)
}

/// The pool a segment belongs to: see [`EventData::SegmentPool`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SegmentPoolEvent {
    /// The segment's address (its `segment_alloc`'s).
    pub addr: u64,
    /// Its pool.
    pub pool: PoolId,
    /// The device index.
    pub device: u32,
    /// The recording thread's id.
    pub thread: u32,
}

impl DeviceMemoryEvent {
    /// Bytes in use on the device, by every process and the driver.
    pub fn used_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.free_bytes)
    }
}

/// The kind of an event, without its data. The discriminants are the codes
/// used on disk and must never change within a major format version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum EventKind {
    /// See [`EventData::Alloc`].
    Alloc = 0,
    /// See [`EventData::FreeRequested`].
    FreeRequested = 1,
    /// See [`EventData::FreeCompleted`].
    FreeCompleted = 2,
    /// See [`EventData::SegmentAlloc`].
    SegmentAlloc = 3,
    /// See [`EventData::SegmentFree`].
    SegmentFree = 4,
    /// See [`EventData::SegmentMap`].
    SegmentMap = 5,
    /// See [`EventData::SegmentUnmap`].
    SegmentUnmap = 6,
    /// See [`EventData::Oom`].
    Oom = 7,
    /// See [`EventData::EmptyCache`].
    EmptyCache = 8,
    /// See [`EventData::PhaseBegin`].
    PhaseBegin = 9,
    /// See [`EventData::PhaseEnd`].
    PhaseEnd = 10,
    /// See [`EventData::Annotation`].
    Annotation = 11,
    /// See [`EventData::Tag`] (format 1.2).
    Tag = 12,
    /// See [`EventData::Limit`] (format 1.3).
    Limit = 13,
    /// See [`EventData::DeviceMemory`] (format 1.3).
    DeviceMemory = 14,
    /// See [`EventData::EventsDropped`] (format 1.5).
    EventsDropped = 15,
    /// See [`EventData::Pool`] (format 1.6).
    Pool = 16,
    /// See [`EventData::SegmentPool`] (format 1.6).
    SegmentPool = 17,
    /// See [`EventData::UserTag`] (format 1.7).
    UserTag = 18,
}

impl EventKind {
    /// Every kind, in code order.
    pub const ALL: [EventKind; 19] = [
        EventKind::Alloc,
        EventKind::FreeRequested,
        EventKind::FreeCompleted,
        EventKind::SegmentAlloc,
        EventKind::SegmentFree,
        EventKind::SegmentMap,
        EventKind::SegmentUnmap,
        EventKind::Oom,
        EventKind::EmptyCache,
        EventKind::PhaseBegin,
        EventKind::PhaseEnd,
        EventKind::Annotation,
        EventKind::Tag,
        EventKind::Limit,
        EventKind::DeviceMemory,
        EventKind::EventsDropped,
        EventKind::Pool,
        EventKind::SegmentPool,
        EventKind::UserTag,
    ];

    /// The number of kinds this version knows.
    pub const COUNT: usize = Self::ALL.len();

    /// The kind with this on-disk code, if this version knows it.
    pub fn from_code(code: u8) -> Option<EventKind> {
        Self::ALL.get(code as usize).copied()
    }

    /// The on-disk code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Whether events of this kind are a block's or a segment's: those
    /// [`EventData::from_parts`] makes (the first seven codes).
    #[inline]
    pub(crate) fn is_block_or_segment(self) -> bool {
        self <= EventKind::SegmentUnmap
    }

    /// The snake_case name used in tables, JSON and PyTorch snapshots.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Alloc => "alloc",
            EventKind::FreeRequested => "free_requested",
            EventKind::FreeCompleted => "free_completed",
            EventKind::SegmentAlloc => "segment_alloc",
            EventKind::SegmentFree => "segment_free",
            EventKind::SegmentMap => "segment_map",
            EventKind::SegmentUnmap => "segment_unmap",
            EventKind::Oom => "oom",
            EventKind::EmptyCache => "empty_cache",
            EventKind::PhaseBegin => "phase_begin",
            EventKind::PhaseEnd => "phase_end",
            EventKind::Annotation => "annotation",
            EventKind::Tag => "tag",
            EventKind::Limit => "limit",
            EventKind::DeviceMemory => "device_memory",
            EventKind::EventsDropped => "events_dropped",
            EventKind::Pool => "pool",
            EventKind::SegmentPool => "segment_pool",
            EventKind::UserTag => "user_tag",
        }
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl EventData {
    /// The event of a block or segment kind, made from the fields those
    /// share: a block kind's payload is `parts` itself; a segment kind's,
    /// `parts` without the requested size ([`BlockEvent::segment`]). `None`
    /// for every other kind, whose payloads have fields of their own.
    ///
    /// The one place a kind and its fields become an event, for whoever
    /// holds them apart: the chunk decoder's columns, an observed
    /// allocator's callbacks, a snapshot's log entries.
    #[inline]
    pub fn from_parts(kind: EventKind, parts: BlockEvent) -> Option<EventData> {
        Some(match kind {
            EventKind::Alloc => EventData::Alloc(parts),
            EventKind::FreeRequested => EventData::FreeRequested(parts),
            EventKind::FreeCompleted => EventData::FreeCompleted(parts),
            EventKind::SegmentAlloc => EventData::SegmentAlloc(parts.segment()),
            EventKind::SegmentFree => EventData::SegmentFree(parts.segment()),
            EventKind::SegmentMap => EventData::SegmentMap(parts.segment()),
            EventKind::SegmentUnmap => EventData::SegmentUnmap(parts.segment()),
            EventKind::Oom
            | EventKind::EmptyCache
            | EventKind::PhaseBegin
            | EventKind::PhaseEnd
            | EventKind::Annotation
            | EventKind::Tag
            | EventKind::Limit
            | EventKind::DeviceMemory
            | EventKind::EventsDropped
            | EventKind::Pool
            | EventKind::SegmentPool
            | EventKind::UserTag => return None,
        })
    }

    /// This event's kind.
    #[inline]
    pub fn kind(&self) -> EventKind {
        match self {
            EventData::Alloc(_) => EventKind::Alloc,
            EventData::FreeRequested(_) => EventKind::FreeRequested,
            EventData::FreeCompleted(_) => EventKind::FreeCompleted,
            EventData::SegmentAlloc(_) => EventKind::SegmentAlloc,
            EventData::SegmentFree(_) => EventKind::SegmentFree,
            EventData::SegmentMap(_) => EventKind::SegmentMap,
            EventData::SegmentUnmap(_) => EventKind::SegmentUnmap,
            EventData::Oom(_) => EventKind::Oom,
            EventData::EmptyCache(_) => EventKind::EmptyCache,
            EventData::PhaseBegin { .. } => EventKind::PhaseBegin,
            EventData::PhaseEnd { .. } => EventKind::PhaseEnd,
            EventData::Annotation { .. } => EventKind::Annotation,
            EventData::Tag(_) => EventKind::Tag,
            EventData::Limit(_) => EventKind::Limit,
            EventData::DeviceMemory(_) => EventKind::DeviceMemory,
            EventData::EventsDropped(_) => EventKind::EventsDropped,
            EventData::Pool(_) => EventKind::Pool,
            EventData::SegmentPool(_) => EventKind::SegmentPool,
            EventData::UserTag(_) => EventKind::UserTag,
        }
    }

    /// The stack that caused this event, for the kinds that carry one.
    pub fn stack(&self) -> Option<StackId> {
        match self {
            EventData::Alloc(b) | EventData::FreeRequested(b) | EventData::FreeCompleted(b) => {
                Some(b.stack)
            }
            EventData::SegmentAlloc(s)
            | EventData::SegmentFree(s)
            | EventData::SegmentMap(s)
            | EventData::SegmentUnmap(s) => Some(s.stack),
            EventData::Oom(o) => Some(o.stack),
            EventData::EmptyCache(e) => Some(e.stack),
            EventData::Pool(p) => Some(p.stack),
            EventData::PhaseBegin { .. }
            | EventData::PhaseEnd { .. }
            | EventData::Annotation { .. }
            | EventData::Tag(_)
            | EventData::Limit(_)
            | EventData::DeviceMemory(_)
            | EventData::SegmentPool(_)
            | EventData::UserTag(_)
            | EventData::EventsDropped(_) => None,
        }
    }
    /// The device whose memory this event concerns; `None` for phases,
    /// annotations and dropped-event markers, which belong to the process
    /// (every device it uses).
    pub fn device(&self) -> Option<u32> {
        match self {
            EventData::Alloc(b) | EventData::FreeRequested(b) | EventData::FreeCompleted(b) => {
                Some(b.device)
            }
            EventData::SegmentAlloc(s)
            | EventData::SegmentFree(s)
            | EventData::SegmentMap(s)
            | EventData::SegmentUnmap(s) => Some(s.device),
            EventData::Oom(o) => Some(o.device),
            EventData::EmptyCache(e) => Some(e.device),
            EventData::Tag(t) => Some(t.device),
            EventData::Limit(l) => Some(l.device),
            EventData::DeviceMemory(m) => Some(m.device),
            EventData::Pool(p) => Some(p.device),
            EventData::SegmentPool(s) => Some(s.device),
            EventData::UserTag(t) => Some(t.device),
            EventData::PhaseBegin { .. }
            | EventData::PhaseEnd { .. }
            | EventData::Annotation { .. }
            | EventData::EventsDropped(_) => None,
        }
    }
}

impl Event {
    /// This event's kind.
    #[inline]
    pub fn kind(&self) -> EventKind {
        self.data.kind()
    }
}

/// Event counts by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindCounts(pub [u64; EventKind::COUNT]);

impl KindCounts {
    /// Counts one event of this kind.
    #[inline]
    pub fn add(&mut self, kind: EventKind) {
        self.0[kind as usize] += 1;
    }

    /// The count for one kind.
    pub fn get(&self, kind: EventKind) -> u64 {
        self.0[kind as usize]
    }

    /// The total over all kinds.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Adds another set of counts to this one.
    pub fn merge(&mut self, other: &KindCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }

    /// `(kind, count)` for every kind with a non-zero count.
    pub fn nonzero(&self) -> impl Iterator<Item = (EventKind, u64)> + '_ {
        EventKind::ALL
            .iter()
            .map(|&k| (k, self.get(k)))
            .filter(|&(_, n)| n > 0)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An allocation of 512 bytes (500 asked for) at `addr`, the event the
    /// crate's tests stream, join and read back.
    pub(crate) fn alloc(time_ns: u64, addr: u64, stack: StackId) -> Event {
        Event {
            time_ns,
            data: EventData::Alloc(BlockEvent {
                addr,
                size: 512,
                requested: 500,
                stack,
                ..BlockEvent::default()
            }),
        }
    }

    #[test]
    fn kind_codes_round_trip() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::from_code(kind.code()), Some(kind));
        }
        assert_eq!(EventKind::from_code(EventKind::COUNT as u8), None);
    }

    #[test]
    fn category_codes_round_trip() {
        for category in Category::ALL {
            assert_eq!(Category::from_code(category.code()), Some(category));
        }
        assert_eq!(Category::from_code(Category::COUNT as u8), None);
        let unknown = TagEvent {
            code: 200,
            ..TagEvent::new(0x1000, 0, Category::Other)
        };
        assert_eq!(unknown.category(), None);
    }
}
