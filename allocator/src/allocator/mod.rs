//! A caching allocator with the policy of PyTorch's `CUDACachingAllocator`
//! (torch 2.x defaults), generic over the [`DeviceMemory`] it carves segments
//! from. It serves recording (on a CUDA device) and offline simulation (on a
//! [`SimulatedDevice`](crate::device::SimulatedDevice)) alike, and reports
//! every action as an [`EventData`]. See `docs/allocator.md` for the policy.

mod config;
mod index;
mod observed;
mod pool;
mod reserved;
mod stats;

pub use config::{
    AllocatorConfig, ConfigError, IgnoredKeys, LARGE_BUFFER, MAX_BLOCK_SIZE, MIB, MIN_BLOCK_SIZE,
    MIN_LARGE_ALLOC, ROUND_LARGE, ROUNDUP_INTERVALS, SMALL_BUFFER, SMALL_SIZE,
};
pub use observed::ObservedBlocks;
pub use reserved::{Reserved, ReservedRanges};
pub use stats::{AllocatorStats, Stat, StatArray};

use crate::device::{DeviceError, DeviceMemory};
use crate::format::{
    BlockEvent, BlockStatus, DeviceMemoryEvent, EmptyCacheEvent, Event, EventData, OomEvent,
    PoolId, SegmentEvent, SegmentPoolEvent, SegmentState, StackId,
};
use pool::{Block, BlockId, BlockPool, NONE, Slab, list_mark};
use rustc_hash::FxHashMap;
use thiserror::Error;

/// A block handed to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The block's device address.
    pub addr: u64,
    /// The block's size (the rounded request, or more when a cached block was
    /// handed out whole).
    pub size: u64,
    /// The size the caller asked for.
    pub requested: u64,
    /// The stream the block belongs to.
    pub stream: u64,
}

/// A failed allocator call.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AllocError {
    /// No memory even after releasing the cache (an `Oom` event was recorded).
    #[error(
        "out of memory: tried to allocate {requested} bytes with {free_bytes} bytes free on the device"
    )]
    OutOfMemory {
        /// The size the caller asked for.
        requested: u64,
        /// The device's free memory at the failure.
        free_bytes: u64,
    },
    /// The address is not that of a block this allocator handed out (or it
    /// was freed already).
    #[error("address {0:#x} is not an allocated block")]
    UnknownAddress(u64),
    /// The device failed for another reason than lack of memory.
    #[error(transparent)]
    Device(DeviceError),
    /// A segment given to [`CachingAllocator::load_segment`] cannot be taken
    /// over (why).
    #[error("segment at {addr:#x} cannot be taken over: {why}")]
    Unloadable {
        /// The segment's address.
        addr: u64,
        /// Why.
        why: &'static str,
    },
}

// Block addresses are multiples of 512: FxHash multiplies and rotates, so the
// bucket index depends on the high bits too. SipHash would double the cost of
// a free.
type AddrMap<V> = FxHashMap<u64, V>;

/// An expandable segment: a reserved virtual range whose pages are mapped on
/// demand.
#[derive(Clone, Debug)]
struct ExpandableSegment {
    base: u64,
    page_size: u64,
    size: u64,
}

impl ExpandableSegment {
    fn page_left(&self, addr: u64) -> u64 {
        (addr - self.base) / self.page_size
    }
    fn page_right(&self, addr: u64) -> u64 {
        (addr - self.base).div_ceil(self.page_size)
    }
}

/// A private pool (PyTorch's `PrivatePool`): the free blocks of the
/// segments reserved for a CUDA graph's captures or a `MemPool`, which serve
/// only allocations made to that pool.
#[derive(Debug, Default)]
struct PrivatePool {
    id: PoolId,
    small: BlockPool,
    large: BlockPool,
    /// Its users (captures into it, `use_mem_pool` blocks, a `MemPool`):
    /// at 0 its free segments may be returned to the device.
    users: i64,
    /// Segments reserved for it and not yet returned.
    segments: u64,
    /// Their bytes.
    reserved: u64,
}

/// The free blocks of every pool, by the pool index blocks carry (0: the
/// default pools).
#[derive(Debug, Default)]
struct Pools {
    small: BlockPool,
    large: BlockPool,
    private: Vec<PrivatePool>,
    index: FxHashMap<PoolId, u16>,
}

impl Pools {
    #[inline]
    fn get(&mut self, pool: u16, small: bool) -> &mut BlockPool {
        match (pool, small) {
            (0, true) => &mut self.small,
            (0, false) => &mut self.large,
            (p, true) => &mut self.private[p as usize - 1].small,
            (p, false) => &mut self.private[p as usize - 1].large,
        }
    }

    /// Caches the free block `id` in the pool its `pool` and `small` name:
    /// the one place a block enters a cache, so that no block can be cached
    /// in a pool other than its own (which `BlockPool::insert`'s list mark
    /// relies on).
    #[inline]
    fn cache(&mut self, slab: &mut Slab, id: BlockId) {
        let (pool, small) = (slab[id].pool, slab[id].small);
        self.get(pool, small).insert(slab, id);
    }

    #[inline]
    fn get_ref(&self, pool: u16, small: bool) -> &BlockPool {
        match (pool, small) {
            (0, true) => &self.small,
            (0, false) => &self.large,
            (p, true) => &self.private[p as usize - 1].small,
            (p, false) => &self.private[p as usize - 1].large,
        }
    }

    /// The index of a pool, made (with no user) on first mention. `None`
    /// past the 65,535 private pools a block's index can name.
    fn index_of(&mut self, id: PoolId) -> Option<u16> {
        if id.is_default() {
            return Some(0);
        }
        if let Some(&i) = self.index.get(&id) {
            return Some(i);
        }
        let i = u16::try_from(self.private.len() + 1).ok()?;
        self.private.push(PrivatePool {
            id,
            ..PrivatePool::default()
        });
        self.index.insert(id, i);
        Some(i)
    }

    fn private(&mut self, pool: u16) -> Option<&mut PrivatePool> {
        (pool as usize)
            .checked_sub(1)
            .and_then(|i| self.private.get_mut(i))
    }

    /// Every pool's free blocks, the default pools first.
    fn all(&self) -> impl Iterator<Item = &BlockPool> {
        [&self.small, &self.large]
            .into_iter()
            .chain(self.private.iter().flat_map(|p| [&p.small, &p.large]))
    }
}

/// A private pool's memory at one moment ([`CachingAllocator::pool_usage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolUsage {
    /// The pool.
    pub id: PoolId,
    /// Bytes reserved for it.
    pub reserved: u64,
    /// Bytes of it cached free.
    pub cached_free: u64,
    /// Its users now (0: its free segments may go back to the device).
    pub users: i64,
}

/// The caching allocator: PyTorch's policy (see the [crate docs](crate) and
/// `docs/allocator.md`).
pub struct CachingAllocator<D: DeviceMemory> {
    device: D,
    config: AllocatorConfig,
    device_index: u32,
    slab: Slab,
    /// The free blocks of every pool: the default pools and the private ones.
    pools: Pools,
    /// Captures (and `use_mem_pool` blocks) under way: while any is, a
    /// failed allocation is not retried after releasing the whole cache,
    /// as in PyTorch.
    captures_underway: u32,
    /// Allocated blocks by address.
    active: AddrMap<BlockId>,
    /// Streams recorded with `record_stream`, by allocated block address.
    /// Kept out of `Block` so that blocks stay small and plain on the hot
    /// path; most programs never record a stream.
    stream_uses: AddrMap<Vec<u64>>,
    /// Freed blocks waiting for work on other streams: (stream, block).
    pending: Vec<(u64, BlockId)>,
    expandable: Vec<Option<ExpandableSegment>>,
    stats: AllocatorStats,
    /// Bytes reserved or mapped from the device (PyTorch's `total_allocated_memory`).
    total_reserved: u64,
    /// Set by [`set_memory_fraction`](Self::set_memory_fraction).
    allowed_maximum: Option<u64>,
    log: bool,
    /// Whether each segment event and `Oom` is followed by a
    /// `DeviceMemory` sample of the device (format 1.3).
    device_memory_samples: bool,
    /// Stamped on the events of the calls that follow.
    origin: EventOrigin,
    events: Vec<Event>,
}

/// When, where and on which thread the allocator's next events happen: the
/// caller knows, the allocator does not. A recorder sets it before each call
/// so that events come out finished, with nothing to patch on the hot path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventOrigin {
    /// The events' time.
    pub time_ns: u64,
    /// The stack of the call ([`StackId::NONE`] when not captured).
    pub stack: StackId,
    /// The calling thread, as the caller numbers threads.
    pub thread: u32,
}

impl<D: DeviceMemory> CachingAllocator<D> {
    /// An allocator with an empty cache on `device`. Event logging starts on.
    pub fn new(device: D, config: AllocatorConfig) -> Self {
        let device_index = device.index();
        CachingAllocator {
            device,
            config,
            device_index,
            slab: Slab::default(),
            pools: Pools::default(),
            captures_underway: 0,
            active: AddrMap::default(),
            stream_uses: AddrMap::default(),
            pending: Vec::new(),
            expandable: Vec::new(),
            stats: AllocatorStats::default(),
            total_reserved: 0,
            allowed_maximum: None,
            log: true,
            device_memory_samples: false,
            origin: EventOrigin::default(),
            events: Vec::new(),
        }
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The settings.
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// The statistics so far.
    pub fn stats(&self) -> &AllocatorStats {
        &self.stats
    }

    /// Turns event buffering on or off; off, no event is kept, which spares a
    /// simulation that only wants statistics the memory.
    pub fn set_event_log(&mut self, on: bool) {
        self.log = on;
        if !on {
            self.events.clear();
        }
    }

    /// Turns device-memory samples on or off (off by default): on, each
    /// segment event and each `Oom` is followed by a `DeviceMemory` event
    /// with the device's free memory ([`DeviceMemory::free_memory`]) and
    /// total, for a recorder of a real device (a simulation has no use for
    /// them).
    pub fn set_device_memory_samples(&mut self, on: bool) {
        self.device_memory_samples = on;
    }

    /// The most bytes this allocator may reserve, if limited
    /// ([`set_memory_fraction`](Self::set_memory_fraction)).
    pub fn memory_limit(&self) -> Option<u64> {
        self.allowed_maximum
    }

    /// Sets the time, stack and thread of the events of the calls that
    /// follow (all zero and [`StackId::NONE`] until set).
    #[inline]
    pub fn set_event_origin(&mut self, origin: EventOrigin) {
        self.origin = origin;
    }

    /// Takes the events buffered since the last call, oldest first.
    pub fn drain_events(&mut self) -> impl Iterator<Item = EventData> + '_ {
        self.events.drain(..).map(|e| e.data)
    }

    /// The event log itself, oldest first, with each event's origin. A
    /// recorder makes it its buffer: it appends its own events (phases,
    /// annotations) in order and takes the log whole, so that no event is
    /// copied on the hot path.
    #[inline]
    pub fn event_log_mut(&mut self) -> &mut Vec<Event> {
        &mut self.events
    }

    /// Limits the memory this allocator may reserve to `fraction` of the
    /// device's total, like `torch.cuda.set_per_process_memory_fraction`.
    /// This is also what arms `garbage_collection_threshold`, as in PyTorch.
    pub fn set_memory_fraction(&mut self, fraction: f64) {
        let fraction = fraction.clamp(0.0, 1.0);
        self.allowed_maximum = Some((fraction * self.device.total_memory() as f64) as u64);
    }

    /// Limits the memory this allocator may reserve to `bytes`: what
    /// [`set_memory_fraction`](Self::set_memory_fraction) sets, given in
    /// bytes (a recorded limit is). It too arms
    /// `garbage_collection_threshold`.
    pub fn set_reserve_limit(&mut self, bytes: u64) {
        self.allowed_maximum = Some(bytes);
    }

    /// Allocates a block of at least `requested` bytes for use on `stream`,
    /// from the default pools.
    /// A request beyond [`MAX_BLOCK_SIZE`] is out of memory, as on any device.
    #[inline]
    pub fn malloc(&mut self, requested: u64, stream: u64) -> Result<Allocation, AllocError> {
        self.malloc_to(requested, stream, 0)
    }

    /// Allocates as [`malloc`](Self::malloc) does, from `pool`: a private
    /// pool's free blocks serve only its own allocations, and the segments
    /// reserved for it are its own (never expandable, as in PyTorch). A
    /// pool first named here has no user yet.
    pub fn malloc_in(
        &mut self,
        requested: u64,
        stream: u64,
        pool: PoolId,
    ) -> Result<Allocation, AllocError> {
        match self.pools.index_of(pool) {
            Some(index) => self.malloc_to(requested, stream, index),
            None => Err(self.out_of_memory(requested, stream)),
        }
    }

    fn malloc_to(
        &mut self,
        requested: u64,
        stream: u64,
        pool: u16,
    ) -> Result<Allocation, AllocError> {
        let Some(size) = self.config.checked_round_size(requested) else {
            return Err(self.out_of_memory(requested, stream));
        };
        let small = size <= SMALL_SIZE;
        let alloc_size = allocation_size(size);

        let mut found = self.get_free_block(pool, small, stream, size);
        if found.is_none() {
            if self.gc_active() {
                self.garbage_collect_cached_blocks();
            }
            found = self.alloc_block(pool, small, stream, size, alloc_size, false)?;
            if found.is_none() && self.release_available_cached_blocks(pool, small, stream, size) {
                found = self.alloc_block(pool, small, stream, size, alloc_size, false)?;
            }
            // PyTorch releases the whole cache and retries only while no
            // capture (nor `use_mem_pool` block) is under way.
            if found.is_none() && self.captures_underway == 0 {
                self.release_cached_blocks();
                found = self.alloc_block(pool, small, stream, size, alloc_size, true)?;
            }
        }
        let Some(id) = found else {
            return Err(self.out_of_memory(requested, stream));
        };
        let split = self.should_split(id, size);
        Ok(self.alloc_found_block(id, size, requested, split))
    }

    /// A capture into `pool` (or a `use_mem_pool` block) begins: PyTorch's
    /// `beginAllocateToPool`, which counts a user of the pool. The caller
    /// routes the allocations themselves ([`malloc_in`](Self::malloc_in)).
    pub fn begin_allocate_to_pool(&mut self, pool: PoolId) {
        self.captures_underway += 1;
        self.hold_pool(pool);
    }

    /// The capture (or block) ends: PyTorch's `endAllocateToPool`. A
    /// graph's pool keeps its user until the graph goes
    /// ([`release_pool`](Self::release_pool)).
    pub fn end_allocate_to_pool(&mut self) {
        self.captures_underway = self.captures_underway.saturating_sub(1);
    }

    /// Counts a user of `pool` (a `MemPool` made, a capture into it).
    pub fn hold_pool(&mut self, pool: PoolId) {
        if let Some(p) = (self.pools.index_of(pool)).and_then(|i| self.pools.private(i)) {
            p.users += 1;
        }
    }

    /// One of `pool`'s users let it go (PyTorch's `releasePool`): once none
    /// is left, `empty_cache()` and a failed allocation's release return its
    /// free segments to the device.
    pub fn release_pool(&mut self, pool: PoolId) {
        if let Some(p) = (self.pools.index_of(pool)).and_then(|i| self.pools.private(i)) {
            p.users -= 1;
        }
    }

    /// `torch.cuda.empty_cache()` of one pool (PyTorch's `emptyCache(id)`,
    /// as a `MemPool` does when it is deleted): returns its wholly free
    /// segments, if it has no user left.
    pub fn empty_pool(&mut self, pool: PoolId) {
        let Some(index) = self.pools.index.get(&pool).copied() else {
            return;
        };
        if self.pools.private(index).is_some_and(|p| p.users <= 0) {
            self.synchronize();
            // A private pool's small blocks go first, as in PyTorch.
            self.release_blocks(index, true);
            self.release_blocks(index, false);
        }
    }

    /// Each private pool's memory now, in the order they were first named.
    pub fn pool_usage(&self) -> Vec<PoolUsage> {
        (self.pools.private.iter())
            .map(|p| PoolUsage {
                id: p.id,
                reserved: p.reserved,
                cached_free: [&p.small, &p.large]
                    .iter()
                    .flat_map(|b| b.blocks.iter())
                    .map(|((_, size, _), _)| size)
                    .sum(),
                users: p.users,
            })
            .collect()
    }

    /// Records an `Oom` for a request that could not be served.
    #[cold]
    fn out_of_memory(&mut self, requested: u64, stream: u64) -> AllocError {
        let free_bytes = self.device.free_memory();
        self.stats.num_ooms += 1;
        self.emit(EventData::Oom(OomEvent {
            requested,
            free_bytes,
            stream,
            device: self.device_index,
            stack: self.origin.stack,
            thread: self.origin.thread,
        }));
        AllocError::OutOfMemory {
            requested,
            free_bytes,
        }
    }

    /// Frees the block at `addr`. Without uses recorded on other streams it is
    /// cached at once (`FreeRequested` then `FreeCompleted`); otherwise it is
    /// cached once those streams are synchronized.
    pub fn free(&mut self, addr: u64) -> Result<(), AllocError> {
        let id = self
            .active
            .remove(&addr)
            .ok_or(AllocError::UnknownAddress(addr))?;
        let b = &mut self.slab[id];
        b.allocated = false;
        let (small, size) = (b.small, b.size);
        self.stats.allocation.decrease(small, 1);
        self.stats.allocated_bytes.decrease(small, size);
        let ev = self.block_event(id);
        self.emit(EventData::FreeRequested(ev));
        let uses = if self.stream_uses.is_empty() {
            None
        } else {
            self.stream_uses.remove(&addr)
        };
        match uses {
            None => self.free_block(id),
            Some(uses) => {
                self.slab[id].pending_uses = uses.len() as u32;
                self.pending.extend(uses.into_iter().map(|s| (s, id)));
            }
        }
        Ok(())
    }

    /// Records that the block at `addr` is used on `stream` too, so that its
    /// free waits for that stream's work (`Tensor.record_stream`).
    pub fn record_stream(&mut self, addr: u64, stream: u64) -> Result<(), AllocError> {
        let &id = self
            .active
            .get(&addr)
            .ok_or(AllocError::UnknownAddress(addr))?;
        if stream != self.slab[id].stream {
            let uses = self.stream_uses.entry(addr).or_default();
            if !uses.contains(&stream) {
                uses.push(stream);
            }
        }
        Ok(())
    }

    /// Marks the work queued so far on `stream` as complete: blocks freed
    /// while in use there are cached once no other stream uses them.
    pub fn synchronize_stream(&mut self, stream: u64) {
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].0 == stream {
                let (_, id) = self.pending.remove(i);
                self.complete_use(id);
            } else {
                i += 1;
            }
        }
    }

    /// Marks the work on every stream as complete (`torch.cuda.synchronize()`).
    pub fn synchronize(&mut self) {
        for (_, id) in std::mem::take(&mut self.pending) {
            self.complete_use(id);
        }
    }

    /// Returns every wholly free cached segment (and every free page of
    /// expandable segments) to the device, as `torch.cuda.empty_cache()`.
    pub fn empty_cache(&mut self) {
        self.emit(EventData::EmptyCache(EmptyCacheEvent {
            device: self.device_index,
            stack: self.origin.stack,
            thread: self.origin.thread,
        }));
        self.release_cached_blocks();
    }

    /// Takes over a segment reserved before this allocator began, as a
    /// recording that starts mid-run found it: reserves `segment.size` bytes
    /// of the device and lays the segment's blocks out at the same offsets,
    /// those allocated or waiting for other streams in use (allocated), the
    /// rest cached (free space between blocks included). Returns the
    /// segment's address here; a block's is that plus its offset in the
    /// segment. A free of a block handed over this way is an ordinary
    /// [`free`](Self::free).
    ///
    /// Like the state it rebuilds, this records no event and no device
    /// allocation in the statistics; the bytes count as reserved and
    /// allocated. The pool is the small one for a segment of
    /// [`SMALL_BUFFER`] bytes, the only size it reserves. An expandable
    /// segment, or blocks that overlap or leave the segment, are
    /// [`AllocError::Unloadable`]; no memory is reserved then.
    pub fn load_segment(&mut self, segment: &SegmentState) -> Result<u64, AllocError> {
        let unloadable = |why| AllocError::Unloadable {
            addr: segment.addr,
            why,
        };
        if segment.expandable {
            return Err(unloadable("expandable segments are not taken over"));
        }
        let seg_end = segment.addr.saturating_add(segment.size);
        let mut at = segment.addr;
        for b in &segment.blocks {
            if b.addr < at || b.addr.saturating_add(b.size) > seg_end || b.size == 0 {
                return Err(unloadable("its blocks overlap or leave it"));
            }
            at = b.addr + b.size;
        }
        let base = match self.device.allocate(segment.size) {
            Ok(addr) => addr,
            Err(DeviceError::OutOfMemory) => {
                return Err(AllocError::OutOfMemory {
                    requested: segment.size,
                    free_bytes: self.device.free_memory(),
                });
            }
            Err(e) => return Err(AllocError::Device(e)),
        };
        let small = segment.size <= SMALL_BUFFER;
        let stream = segment.stream;
        // A segment of a private pool the recording began with: its users
        // are the caller's to say (`hold_pool`).
        let pool = self.pools.index_of(segment.pool).unwrap_or(0);
        if let Some(p) = self.pools.private(pool) {
            p.segments += 1;
            p.reserved += segment.size;
        }
        self.total_reserved += segment.size;
        self.stats.segment.increase(small, 1);
        self.stats.reserved_bytes.increase(small, segment.size);
        // The segment's tiling: blocks in use as they are, free space between
        // them merged into one free block, as the allocator keeps it.
        let mut pieces: Vec<(u64, u64, Option<u64>)> = Vec::new();
        let mut at = segment.addr;
        let in_use = segment
            .blocks
            .iter()
            .filter(|b| b.status != BlockStatus::Free);
        for b in in_use {
            if b.addr > at {
                pieces.push((at, b.addr - at, None));
            }
            pieces.push((b.addr, b.size, Some(b.requested)));
            at = b.addr + b.size;
        }
        if at < seg_end {
            pieces.push((at, seg_end - at, None));
        }
        let mut prev = NONE;
        for (addr, size, requested) in pieces {
            let id = self.slab.insert(Block::new(
                base + (addr - segment.addr),
                size,
                stream,
                small,
            ));
            self.slab[id].pool = pool;
            self.slab[id].prev = prev;
            if prev != NONE {
                self.slab[prev].next = id;
            }
            prev = id;
            match requested {
                Some(requested) => self.hand_out(id, requested),
                None => self.pools.cache(&mut self.slab, id),
            }
        }
        Ok(base)
    }

    /// The memory cached free in segments (both pools, every stream): its
    /// bytes, and the size of its largest block. What the device still has
    /// is [`DeviceMemory::free_memory`].
    pub fn cached_free(&self) -> (u64, u64) {
        (self.pools.all())
            .flat_map(|pool| pool.blocks.iter())
            .fold((0, 0), |(total, largest), ((_, size, _), _)| {
                (total + size, largest.max(size))
            })
    }

    /// The allocated block at `addr`, if any.
    pub fn allocation(&self, addr: u64) -> Option<Allocation> {
        self.active.get(&addr).map(|&id| {
            let b = &self.slab[id];
            Allocation {
                addr: b.addr,
                size: b.size,
                requested: b.requested,
                stream: b.stream,
            }
        })
    }

    fn complete_use(&mut self, id: BlockId) {
        let b = &mut self.slab[id];
        b.pending_uses -= 1;
        if b.pending_uses == 0 {
            self.free_block(id);
        }
    }

    fn emit(&mut self, data: EventData) {
        if self.log {
            let sample = self.device_memory_samples
                && matches!(
                    data,
                    EventData::SegmentAlloc(_)
                        | EventData::SegmentFree(_)
                        | EventData::SegmentMap(_)
                        | EventData::SegmentUnmap(_)
                        | EventData::Oom(_)
                );
            self.events.push(Event {
                time_ns: self.origin.time_ns,
                data,
            });
            if sample {
                self.sample_device_memory();
            }
        }
    }

    /// Records the device's free and total memory now, right after the
    /// event that changed it. A device that reports no free memory (its
    /// query failed) gives no sample.
    #[cold]
    fn sample_device_memory(&mut self) {
        let free_bytes = self.device.free_memory();
        let total_bytes = self.device.total_memory();
        if free_bytes == 0 || free_bytes > total_bytes {
            return;
        }
        self.events.push(Event {
            time_ns: self.origin.time_ns,
            data: EventData::DeviceMemory(DeviceMemoryEvent {
                device: self.device_index,
                thread: self.origin.thread,
                free_bytes,
                total_bytes,
            }),
        });
    }

    fn block_event(&self, id: BlockId) -> BlockEvent {
        let b = &self.slab[id];
        BlockEvent {
            addr: b.addr,
            size: b.size,
            requested: b.requested,
            stream: b.stream,
            device: self.device_index,
            stack: self.origin.stack,
            thread: self.origin.thread,
        }
    }

    fn segment_event(&self, addr: u64, size: u64, stream: u64) -> SegmentEvent {
        SegmentEvent {
            addr,
            size,
            stream,
            device: self.device_index,
            stack: self.origin.stack,
            thread: self.origin.thread,
        }
    }

    /// The default pool of that size (expandable segments live only there).
    fn pool(&mut self, small: bool) -> &mut BlockPool {
        self.pools.get(0, small)
    }

    fn gc_active(&self) -> bool {
        self.allowed_maximum.is_some() && self.config.garbage_collection_threshold > 0.0
    }

    #[inline]
    fn allocatable(&self, id: BlockId) -> bool {
        if id == NONE {
            return false;
        }
        let b = &self.slab[id];
        // Only allocated blocks have recorded stream uses.
        !b.allocated && b.pending_uses == 0
    }

    fn should_split(&self, id: BlockId, size: u64) -> bool {
        let b = &self.slab[id];
        self.config.should_split(b.small, b.size, size)
    }

    // PyTorch's get_free_block: best fit in the pool, with the oversize rules.
    fn get_free_block(
        &mut self,
        pool: u16,
        small: bool,
        stream: u64,
        size: u64,
    ) -> Option<BlockId> {
        let gc = self.gc_active();
        let expandable_on = self.config.expandable_segments;
        let max_split = self.config.max_split_size;
        let max_rounding = self.config.max_non_split_rounding_size;
        let (slab, pool) = (&self.slab, self.pools.get(pool, small));
        if gc {
            pool.get_free_blocks_call_count += 1;
        }
        let mut iter = pool.blocks.range_from(stream, size);
        let (mut key, mut id) = iter.next()?;
        let mut slot = iter.slot();
        if slab[id].segment != NONE {
            if expandable_on {
                // Best fit counts an expandable block as the size it can grow
                // to: its own plus the unmapped range right after it.
                let expandable_size = |id: BlockId| {
                    let b = &slab[id];
                    b.size
                        + if b.next != NONE && !slab[b.next].mapped {
                            slab[b.next].size
                        } else {
                            0
                        }
                };
                while let Some((k, next)) = iter.next() {
                    if slab[id].segment != NONE && expandable_size(next) < expandable_size(id) {
                        (key, id, slot) = (k, next, iter.slot());
                    } else {
                        break;
                    }
                }
            } else {
                // Expandable segments were turned off: skip their blocks.
                (key, id) = iter.find(|&(_, v)| slab[v].segment == NONE)?;
                slot = iter.slot();
            }
        }
        let block_size = slab[id].size;
        if size < max_split && block_size >= max_split {
            return None;
        }
        if size >= max_split && block_size >= size.saturating_add(max_rounding) {
            return None;
        }
        pool.blocks.remove_at(slot, &key);
        Some(id)
    }

    // PyTorch's alloc_block: a new segment (or newly mapped pages).
    fn alloc_block(
        &mut self,
        pool: u16,
        small: bool,
        stream: u64,
        size: u64,
        alloc_size: u64,
        is_retry: bool,
    ) -> Result<Option<BlockId>, AllocError> {
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        if let Some(max) = self.allowed_maximum
            && self.total_reserved.saturating_add(alloc_size) > max
        {
            return Ok(None);
        }
        // PyTorch keeps private pools out of expandable segments.
        if self.config.expandable_segments && pool == 0 {
            return self.try_allocate_expandable_block(small, stream, size);
        }
        let addr = match self.device.allocate(alloc_size) {
            Ok(addr) => addr,
            Err(DeviceError::OutOfMemory) => return Ok(None),
            Err(e) => return Err(AllocError::Device(e)),
        };
        self.total_reserved += alloc_size;
        let id = self
            .slab
            .insert(Block::new(addr, alloc_size, stream, small));
        self.slab[id].pool = pool;
        self.stats.segment.increase(small, 1);
        self.stats.reserved_bytes.increase(small, alloc_size);
        self.stats.num_device_alloc += 1;
        let ev = self.segment_event(addr, alloc_size, stream);
        self.emit(EventData::SegmentAlloc(ev));
        if let Some(p) = self.pools.private(pool) {
            p.segments += 1;
            p.reserved += alloc_size;
            let id = p.id;
            self.emit(EventData::SegmentPool(SegmentPoolEvent {
                addr,
                pool: id,
                device: self.device_index,
                thread: self.origin.thread,
            }));
        }
        Ok(Some(id))
    }

    // PyTorch's find_expandable_block: the lowest address where free and
    // unmapped space together hold `size`, or a new segment's range.
    fn find_expandable_block(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
    ) -> Result<BlockId, AllocError> {
        let pool = self.pools.get_ref(0, small);
        for (_, &u) in pool
            .unmapped
            .range((stream, 0)..)
            .take_while(|(k, _)| k.0 == stream)
        {
            let mut c = u;
            let prev = self.slab[c].prev;
            if self.allocatable(prev) {
                c = prev;
            }
            let mut bytes = 0;
            let mut b = c;
            while bytes < size && self.allocatable(b) {
                bytes += self.slab[b].size;
                b = self.slab[b].next;
            }
            if bytes >= size {
                return Ok(c);
            }
        }
        let page_size = if small { SMALL_BUFFER } else { LARGE_BUFFER };
        // Address space for 1 1/8 of the device, as PyTorch reserves.
        let total = self.device.total_memory();
        // Saturating: a simulated device may be as large as a hostile
        // trace says.
        let want = total.saturating_add(total / 8);
        let space = want
            .div_ceil(page_size)
            .checked_mul(page_size)
            .unwrap_or(want / page_size * page_size);
        let base = self
            .device
            .reserve_address_range(space, page_size)
            .map_err(AllocError::Device)?;
        let seg = self.expandable.len() as u32;
        self.expandable.push(Some(ExpandableSegment {
            base,
            page_size,
            size: space,
        }));
        let mut block = Block::new(base, space, stream, small);
        block.mapped = false;
        block.segment = seg;
        let id = self.slab.insert(block);
        self.pool(small).unmapped.insert((stream, base), id);
        Ok(id)
    }

    // PyTorch's map_block: maps the pages under the first `size` bytes of an
    // unmapped block and merges it with free neighbours. Ok(None) on OOM.
    fn map_block(&mut self, id: BlockId, size: u64) -> Result<Option<BlockId>, AllocError> {
        let b = &self.slab[id];
        debug_assert!(!b.mapped && size <= b.size);
        let (small, stream, addr, block_size) = (b.small, b.stream, b.addr, b.size);
        let es = self.expandable[b.segment as usize]
            .as_ref()
            .expect("live segment");
        let begin = es.page_left(addr);
        let end = es.page_right(addr + size);
        debug_assert_eq!(es.base + begin * es.page_size, addr);
        let page_size = es.page_size;
        let mapped_size = (end - begin) * page_size;
        if mapped_size == 0 {
            return Ok(None);
        }
        match self.device.map_pages(addr, mapped_size, page_size) {
            Ok(()) => {}
            Err(DeviceError::OutOfMemory) => return Ok(None),
            Err(e) => return Err(AllocError::Device(e)),
        }
        self.pool(small).unmapped.remove(&(stream, addr));
        self.slab[id].mapped = true;
        if mapped_size < block_size {
            let b = &self.slab[id];
            let mut rest = Block::new(addr + mapped_size, block_size - mapped_size, stream, small);
            rest.mapped = false;
            rest.segment = b.segment;
            rest.prev = id;
            rest.next = b.next;
            let rest_id = self.slab.insert(rest);
            let next = self.slab[id].next;
            if next != NONE {
                self.slab[next].prev = rest_id;
            }
            self.slab[id].next = rest_id;
            self.slab[id].size = mapped_size;
            self.pool(small)
                .unmapped
                .insert((stream, addr + mapped_size), rest_id);
        }
        let prev = self.slab[id].prev;
        self.try_merge_blocks(id, prev);
        let next = self.slab[id].next;
        self.try_merge_blocks(id, next);
        self.pools.cache(&mut self.slab, id);

        self.total_reserved += mapped_size;
        self.stats.reserved_bytes.increase(small, mapped_size);
        self.stats.num_device_alloc += 1;
        let ev = self.segment_event(addr, mapped_size, stream);
        self.emit(EventData::SegmentMap(ev));
        Ok(Some(id))
    }

    fn try_allocate_expandable_block(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
    ) -> Result<Option<BlockId>, AllocError> {
        let mut c = self.find_expandable_block(small, stream, size)?;
        if !self.slab[c].mapped {
            let want = self.slab[c].size.min(size);
            match self.map_block(c, want)? {
                Some(id) => c = id,
                None => return Ok(None),
            }
        }
        while self.slab[c].size < size {
            let remaining = size - self.slab[c].size;
            let next = self.slab[c].next;
            let want = remaining.min(self.slab[next].size);
            // Mapping merges `c` into the newly mapped block.
            match self.map_block(next, want)? {
                Some(id) => c = id,
                None => return Ok(None),
            }
        }
        let key = self.slab[c].size_key();
        self.pool(small).blocks.remove(&key);
        Ok(Some(c))
    }

    // PyTorch's try_merge_blocks: `dst` absorbs its neighbour `src` if free
    // and of the same mapping state. Returns the bytes absorbed.
    #[inline]
    fn try_merge_blocks(&mut self, dst: BlockId, src: BlockId) -> u64 {
        if src == NONE || !self.allocatable(src) || self.slab[dst].mapped != self.slab[src].mapped {
            return 0;
        }
        self.merge_blocks(dst, src)
    }

    // The merge itself, out of line: most neighbours fail the check above.
    #[inline(never)]
    fn merge_blocks(&mut self, dst: BlockId, src: BlockId) -> u64 {
        let s = self.slab[src].clone_links();
        if self.slab[dst].prev == src {
            self.slab[dst].addr = s.addr;
            self.slab[dst].prev = s.prev;
            if s.prev != NONE {
                self.slab[s.prev].next = dst;
            }
        } else {
            self.slab[dst].next = s.next;
            if s.next != NONE {
                self.slab[s.next].prev = dst;
            }
        }
        self.slab[dst].size += s.size;
        let pool = self.pools.get(s.pool, s.small);
        if s.mapped {
            pool.blocks.remove(&(s.stream, s.size, s.addr));
        } else {
            pool.unmapped.remove(&(s.stream, s.addr));
        }
        self.slab.remove(src);
        s.size
    }

    // PyTorch's alloc_found_block: split off the remainder if worth it.
    fn alloc_found_block(
        &mut self,
        id: BlockId,
        size: u64,
        requested: u64,
        split: bool,
    ) -> Allocation {
        let mut id = id;
        if split {
            let rem = id;
            let r = &self.slab[rem];
            let mut block = Block::new(r.addr, size, r.stream, r.small);
            block.segment = r.segment;
            block.pool = r.pool;
            block.prev = r.prev;
            block.next = rem;
            id = self.slab.insert(block);
            let prev = self.slab[id].prev;
            if prev != NONE {
                self.slab[prev].next = id;
            }
            let r = &mut self.slab[rem];
            r.prev = id;
            r.addr += size;
            r.size -= size;
            self.pools.cache(&mut self.slab, rem);
        }
        self.hand_out(id, requested);
        let b = &self.slab[id];
        let (addr, bsize, stream) = (b.addr, b.size, b.stream);
        let ev = self.block_event(id);
        self.emit(EventData::Alloc(ev));
        Allocation {
            addr,
            size: bsize,
            requested,
            stream,
        }
    }

    // The block is the caller's now: in use, and counted.
    #[inline]
    fn hand_out(&mut self, id: BlockId, requested: u64) {
        let b = &mut self.slab[id];
        b.allocated = true;
        b.requested = requested;
        let (small, size) = (b.small, b.size);
        self.active.insert(b.addr, id);
        let st = &mut self.stats;
        st.allocation.increase(small, 1);
        st.allocated_bytes.increase(small, size);
        st.active.increase(small, 1);
        st.active_bytes.increase(small, size);
        st.requested_bytes.increase(small, requested);
    }

    // PyTorch's free_block: cache the block, merged with free neighbours.
    fn free_block(&mut self, id: BlockId) {
        let ev = self.block_event(id);
        self.emit(EventData::FreeCompleted(ev));
        let (small, size, requested) = {
            let b = &self.slab[id];
            (b.small, b.size, b.requested)
        };
        let prev = self.slab[id].prev;
        self.try_merge_blocks(id, prev);
        let next = self.slab[id].next;
        self.try_merge_blocks(id, next);
        self.slab[id].requested = 0;
        self.pools.cache(&mut self.slab, id);
        let st = &mut self.stats;
        st.active.decrease(small, 1);
        st.active_bytes.decrease(small, size);
        st.requested_bytes.decrease(small, requested);
    }

    // PyTorch's release_available_cached_blocks: with max_split_size set,
    // free oversize cached segments (just enough of them) before retrying.
    fn release_available_cached_blocks(
        &mut self,
        pool: u16,
        small: bool,
        stream: u64,
        size: u64,
    ) -> bool {
        let max_split = self.config.max_split_size;
        if max_split == u64::MAX {
            return false;
        }
        let key_size = size.max(max_split);
        let pool = self.pools.get_ref(pool, small);
        if let Some((_, id)) = pool.lower_bound(stream, key_size) {
            if self.slab[id].segment != NONE || self.slab[id].is_split() {
                return false;
            }
            self.release_block(id);
            return true;
        }
        // No single block is large enough: free oversize blocks of the
        // stream, largest first, until enough is released.
        let mut candidates: Vec<BlockId> = pool
            .blocks
            .range_from(stream, max_split)
            .take_while(|(k, _)| k.1 < key_size)
            .map(|(_, id)| id)
            .collect();
        candidates.reverse();
        let mut released = 0;
        for id in candidates {
            if released >= key_size {
                break;
            }
            if self.slab[id].segment != NONE || self.slab[id].is_split() {
                break;
            }
            released += self.slab[id].size;
            self.release_block(id);
        }
        released >= key_size
    }

    // PyTorch's release_cached_blocks: wait for all streams, then free every
    // wholly free segment and unmap every free page.
    // The default pools only while no capture is under way; then the
    // private pools no user holds any more.
    fn release_cached_blocks(&mut self) {
        if self.captures_underway == 0 {
            self.stats.num_sync_all_streams += 1;
            self.synchronize();
            self.release_blocks(0, false);
            self.release_blocks(0, true);
        }
        for i in 0..self.pools.private.len() {
            if self.pools.private[i].users <= 0 {
                // A private pool's small blocks go first, as in PyTorch
                // (the default pools' large blocks do).
                let index = (i + 1) as u16;
                self.release_blocks(index, true);
                self.release_blocks(index, false);
            }
        }
    }

    fn release_blocks(&mut self, pool: u16, small: bool) {
        // The blocks cached since the last release, in the cache's order:
        // the others were there then, and what kept them (a split segment,
        // no whole page to unmap) still does.
        let ids = self
            .pools
            .get(pool, small)
            .take_cached_since_release(&mut self.slab, list_mark(pool, small));
        let mut to_unmap = Vec::new();
        for (_, id) in ids {
            let b = &self.slab[id];
            if b.segment != NONE {
                to_unmap.push(id);
            } else if !b.is_split() {
                self.release_block(id);
            }
        }
        for id in to_unmap {
            self.unmap_block(id);
            let b = &self.slab[id];
            if !b.is_split() && !b.mapped {
                self.release_expandable_segment(id);
            }
        }
    }

    fn release_block(&mut self, id: BlockId) {
        let b = &self.slab[id];
        debug_assert!(b.segment == NONE && !b.is_split());
        let (small, addr, size, stream, pool) = (b.small, b.addr, b.size, b.stream, b.pool);
        self.stats.num_device_free += 1;
        let ev = self.segment_event(addr, size, stream);
        // Freed first: a device-memory sample after the event sees it.
        self.device.free(addr, size);
        self.emit(EventData::SegmentFree(ev));
        self.total_reserved -= size;
        self.stats.segment.decrease(small, 1);
        self.stats.reserved_bytes.decrease(small, size);
        self.pools
            .get(pool, small)
            .blocks
            .remove(&(stream, size, addr));
        if let Some(p) = self.pools.private(pool) {
            p.segments -= 1;
            p.reserved -= size;
        }
        self.slab.remove(id);
    }

    // PyTorch's unmap_block: unmap the whole pages inside a free block of an
    // expandable segment, leaving the partial pages at its ends mapped.
    fn unmap_block(&mut self, id: BlockId) {
        let b = &self.slab[id];
        let (small, addr, size, stream, seg) = (b.small, b.addr, b.size, b.stream, b.segment);
        let es = self.expandable[seg as usize]
            .as_ref()
            .expect("live segment");
        let begin = es.page_right(addr);
        let end = es.page_left(addr + size);
        if begin >= end {
            return;
        }
        let page_size = es.page_size;
        let un_addr = es.base + begin * page_size;
        let un_size = (end - begin) * page_size;
        self.pool(small).blocks.remove(&(stream, size, addr));
        let before = un_addr - addr;
        if before > 0 {
            let mut bf = Block::new(addr, before, stream, small);
            bf.segment = seg;
            bf.prev = self.slab[id].prev;
            bf.next = id;
            let bf_id = self.slab.insert(bf);
            if self.slab[bf_id].prev != NONE {
                let p = self.slab[bf_id].prev;
                self.slab[p].next = bf_id;
            }
            self.slab[id].prev = bf_id;
            self.pools.cache(&mut self.slab, bf_id);
        }
        let after = size - before - un_size;
        if after > 0 {
            let mut af = Block::new(un_addr + un_size, after, stream, small);
            af.segment = seg;
            af.prev = id;
            af.next = self.slab[id].next;
            let af_id = self.slab.insert(af);
            if self.slab[af_id].next != NONE {
                let n = self.slab[af_id].next;
                self.slab[n].prev = af_id;
            }
            self.slab[id].next = af_id;
            self.pools.cache(&mut self.slab, af_id);
        }
        let b = &mut self.slab[id];
        b.addr = un_addr;
        b.size = un_size;
        b.mapped = false;
        let prev = b.prev;
        self.try_merge_blocks(id, prev);
        let next = self.slab[id].next;
        self.try_merge_blocks(id, next);
        let key = self.slab[id].addr_key();
        self.pool(small).unmapped.insert(key, id);

        self.device.unmap_pages(un_addr, un_size, page_size);
        self.total_reserved -= un_size;
        self.stats.reserved_bytes.decrease(small, un_size);
        self.stats.num_device_free += 1;
        let ev = self.segment_event(un_addr, un_size, stream);
        self.emit(EventData::SegmentUnmap(ev));
    }

    fn release_expandable_segment(&mut self, id: BlockId) {
        let b = &self.slab[id];
        let (small, seg, key) = (b.small, b.segment, b.addr_key());
        let es = self.expandable[seg as usize].take().expect("live segment");
        debug_assert_eq!(self.slab[id].size, es.size);
        self.pool(small).unmapped.remove(&key);
        self.device.release_address_range(es.base, es.size);
        self.slab.remove(id);
    }

    // PyTorch's garbage_collect_cached_blocks: free unsplit cached large
    // blocks older than average (in free-block searches since caching) until
    // reserved memory is back under the threshold.
    fn garbage_collect_cached_blocks(&mut self) {
        let Some(allowed) = self.allowed_maximum else {
            return;
        };
        let threshold = (self.config.garbage_collection_threshold * allowed as f64) as u64;
        if self.total_reserved <= threshold {
            return;
        }
        let target = self.total_reserved - threshold;
        let calls = self.pools.large.get_free_blocks_call_count;
        let age = |b: &Block| calls - b.gc_count_base;
        let freeable = |b: &Block| !b.is_split() && b.segment == NONE;
        let mut total_age = 0u64;
        let mut count = 0u64;
        for (_, id) in self.pools.large.blocks.iter() {
            let b = &self.slab[id];
            if freeable(b) {
                total_age += age(b);
                count += 1;
            }
        }
        let mut reclaimed = 0;
        let mut freed_one = true;
        while reclaimed < target && freed_one && count > 0 {
            let age_threshold = total_age as f64 / count as f64;
            freed_one = false;
            let ids: Vec<BlockId> = self.pools.large.blocks.iter().map(|(_, id)| id).collect();
            for id in ids {
                let b = &self.slab[id];
                if freeable(b) && age(b) as f64 >= age_threshold {
                    freed_one = true;
                    reclaimed += b.size;
                    total_age -= age(b);
                    count -= 1;
                    self.release_block(id);
                }
            }
        }
    }
}

/// The segment size PyTorch allocates for a rounded request of `size` bytes:
/// 2 MiB for the small pool, 20 MiB below 10 MiB, else `size` rounded up to 2 MiB.
#[inline]
pub fn allocation_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

#[derive(Clone, Copy)]
struct Links {
    addr: u64,
    size: u64,
    stream: u64,
    prev: BlockId,
    next: BlockId,
    small: bool,
    pool: u16,
    mapped: bool,
}

impl Block {
    fn clone_links(&self) -> Links {
        Links {
            addr: self.addr,
            size: self.size,
            stream: self.stream,
            prev: self.prev,
            next: self.next,
            small: self.small,
            pool: self.pool,
            mapped: self.mapped,
        }
    }
}

#[cfg(test)]
mod tests;
