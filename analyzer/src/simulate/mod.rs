//! What-if simulation: a trace's requests replayed through the caching
//! allocator under another device capacity or allocator setting.
//!
//! A trace is decoded and replayed once into a [`RequestList`] (about 16 to
//! 32 bytes per request); each [`simulate`] call then runs a fresh
//! `CachingAllocator` on a `SimulatedDevice` over that list, so a sweep of
//! policies ([`sweep`]) runs in parallel and a bisection of the smallest
//! capacity that fits ([`min_capacity`]) costs a dozen cheap runs, not a
//! dozen decodes. [`fidelity`] checks that the recorded settings reproduce
//! the recorded device actions. See `docs/simulate.md`.

pub mod bounded;
mod capacity;
pub mod fixes;
pub mod gpus;
pub mod kv;
pub mod plan;
pub mod requests;
mod scenarios;
pub mod verdict;
pub mod what_if;

pub use capacity::{
    CAPACITY_STEP, CUDA_CONTEXT_BYTES, MinCapacity, NCCL_BYTES, Reserve, ReserveSource, Target,
    device_capacity, min_capacity, recorded_capacity, shows_nccl, smallest_capacity,
};
pub use scenarios::{Scenario, ScenarioResult, scenarios, sweep};

#[cfg(test)]
mod tests;

use crate::analysis::categories::CategoryTable;
use crate::replay::PhaseId;
use crate::replay::categories::CategoryBytes;
use crate::sites::SiteId;
pub use requests::{
    AllocInfo, Op, Request, RequestExtractor, RequestList, SegmentAction, SegmentKind,
};
use serde::Serialize;
use vramtrace_allocator::device::{DeviceMemory, SimulatedDevice};
use vramtrace_allocator::{
    AllocError, AllocatorConfig, CachingAllocator, ConfigError, allocation_size,
};
use vramtrace_format::{BlockStatus, PoolId};

/// Simulated addresses of blocks whose allocation failed: their frees are
/// skipped. Real addresses are never 0.
const FAILED: u64 = 0;

/// How to run one simulation.
#[derive(Clone, Debug, Default)]
pub struct SimOptions {
    /// Device memory in bytes; `None` for a device that never runs out.
    pub capacity: Option<u64>,
    /// Stop at the first OOM (a bisection only needs to know whether one
    /// happens).
    pub stop_at_first_oom: bool,
    /// Keep the device actions, to compare them with the recorded ones.
    pub segments: bool,
    /// Sample reserved and allocated memory into this many time buckets
    /// (0: none), for charts.
    pub samples: usize,
    /// The allocator's own limit on what it reserves, in bytes (a
    /// per-process cap, `set_per_process_memory_fraction`), on a device
    /// of [`capacity`](Self::capacity): unlike the device's size, it also
    /// arms `garbage_collection_threshold`, as in PyTorch.
    pub cap: Option<u64>,
}

/// Where a simulated run first ran out of memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OomAt {
    /// The request's position in the list.
    pub request: usize,
    /// The index of the trace event that made the request.
    pub event_index: u64,
    /// Its time since the trace start.
    pub time_ns: u64,
    /// The size asked for.
    pub requested_bytes: u64,
    /// The stream.
    pub stream: u64,
    /// The innermost phase open at the request.
    #[serde(skip)]
    pub phase: PhaseId,
    /// The requesting site.
    #[serde(skip)]
    pub site: SiteId,
    /// Free device memory after the allocator released its cache.
    pub free_bytes: u64,
    /// Memory still cached free in segments then (split segments cannot be
    /// returned to the device).
    pub cached_free_bytes: u64,
    /// The largest of those cached free blocks.
    pub largest_free_block: u64,
    /// Reserved bytes at the failure.
    pub reserved_bytes: u64,
    /// Allocated bytes at the failure.
    pub allocated_bytes: u64,
    /// How much more device memory this request needed: the segment it
    /// asked for less the free memory (a lower bound for the whole run).
    pub shortfall_bytes: u64,
    /// Whether the recorded run ran out of memory at this request too.
    pub recorded: bool,
    /// What the allocated memory held then, by category.
    pub categories: CategoryTable,
}

impl OomAt {
    /// Where every byte under `limit` was at this simulated OOM (see
    /// [`crate::analysis::waterfall`]). The simulation keeps no segment
    /// layout, so the waterfall's segment counts are 0; its bytes are
    /// exact: at an OOM the allocator has released every empty segment, so
    /// cached free memory lies in segments that hold live blocks, and
    /// reserved memory less allocated and cached free memory is held by
    /// blocks waiting on other streams. `limit`: the simulated capacity
    /// (e.g. [`crate::analysis::limits::Limit::inferred`] or a recorded
    /// cap); `None` sums to reserved memory.
    pub fn waterfall(
        &self,
        limit: Option<crate::analysis::limits::Limit>,
    ) -> crate::analysis::waterfall::Waterfall {
        use crate::analysis::waterfall::{Moment, Waterfall};
        Waterfall::of(&Moment {
            allocated: self.allocated_bytes,
            active: self.reserved_bytes.saturating_sub(self.cached_free_bytes),
            reserved: self.reserved_bytes,
            segments: Vec::new(),
            largest_free_block: self.largest_free_block,
            categories: self.categories.clone(),
            sites: Vec::new(),
            request: Some(self.requested_bytes),
            device_memory: None,
            outside: None,
            limit,
        })
    }
}

/// Reserved and allocated memory over one time bucket: the highest values
/// reached in it (or held over from before, in a bucket without requests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// The bucket's start.
    pub start_ns: u64,
    /// The bucket's end.
    pub end_ns: u64,
    /// Highest reserved bytes in the bucket.
    pub reserved_bytes: u64,
    /// Highest allocated bytes in the bucket.
    pub allocated_bytes: u64,
}

/// What a simulated run did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SimResult {
    /// Peak reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Peak allocated bytes (blocks the caller holds).
    pub peak_allocated_bytes: u64,
    /// Reserved bytes that held no allocation at the moment of the peak
    /// of reserved bytes: memory the policy cached or split away.
    pub cached_at_peak_bytes: u64,
    /// `cached_at_peak_bytes / peak_reserved_bytes`: the share of the peak
    /// lost to caching and fragmentation.
    pub fragmentation: f64,
    /// Reserved bytes at the end.
    pub final_reserved_bytes: u64,
    /// Allocations that had to release the cache and retry
    /// (`num_alloc_retries`).
    pub alloc_retries: u64,
    /// Cache flushes: the retries plus the `empty_cache()` calls replayed.
    pub cache_flushes: u64,
    /// `empty_cache()` calls replayed.
    pub empty_cache_calls: u64,
    /// Segments reserved or pages mapped (`num_device_alloc`).
    pub device_allocs: u64,
    /// Segments returned or pages unmapped (`num_device_free`).
    pub device_frees: u64,
    /// Allocations that ran out of memory.
    pub ooms: u64,
    /// The first of them (described with its site and phase in results).
    #[serde(skip)]
    pub first_oom: Option<OomAt>,
    /// Allocations that failed in the recorded run but fit here.
    pub recorded_ooms_avoided: u64,
    /// Allocations that failed here and that the program survives (a
    /// cuDNN convolution's workspace, see [`RequestList::survivable`]):
    /// not counted as OOMs.
    pub survived_failures: u64,
    /// Frees skipped because the block's allocation had failed here.
    pub skipped_frees: u64,
    /// Requests simulated (fewer than the list's when stopped at an OOM).
    pub requests: u64,
    /// The device actions, when [`SimOptions::segments`] asked for them.
    #[serde(skip)]
    pub segments: Vec<SegmentAction>,
    /// Memory over time, when [`SimOptions::samples`] asked for it.
    #[serde(skip)]
    pub samples: Vec<Sample>,
}

/// Buckets of memory over time, filled as requests go.
struct Sampler {
    t0: u64,
    span: u64,
    buckets: Vec<Sample>,
    touched: Vec<bool>,
}

impl Sampler {
    fn new(list: &RequestList, n: usize) -> Self {
        let t0 = list.first_time_ns.min(list.last_time_ns);
        let span = (list.last_time_ns - t0).max(1);
        let buckets = (0..n as u64)
            .map(|i| Sample {
                start_ns: t0 + span * i / n as u64,
                end_ns: t0 + span * (i + 1) / n as u64,
                ..Default::default()
            })
            .collect();
        Sampler {
            t0,
            span,
            buckets,
            touched: vec![false; n],
        }
    }

    #[inline]
    fn add(&mut self, time_ns: u64, reserved: u64, allocated: u64) {
        let n = self.buckets.len() as u128;
        let offset = time_ns.saturating_sub(self.t0) as u128;
        let i = ((offset * n / self.span as u128) as usize).min(self.buckets.len() - 1);
        let b = &mut self.buckets[i];
        b.reserved_bytes = b.reserved_bytes.max(reserved);
        b.allocated_bytes = b.allocated_bytes.max(allocated);
        self.touched[i] = true;
    }

    fn finish(mut self, stop: Option<usize>) -> Vec<Sample> {
        let mut last = (0, 0);
        for (i, b) in self.buckets.iter_mut().enumerate() {
            if self.touched[i] {
                last = (b.reserved_bytes, b.allocated_bytes);
            } else {
                (b.reserved_bytes, b.allocated_bytes) = last;
            }
        }
        if let Some(stop) = stop {
            self.buckets.truncate(stop + 1);
        }
        self.buckets
    }
}

/// Runs the requests through a caching allocator with `config` on a
/// simulated device.
pub fn simulate(list: &RequestList, config: &AllocatorConfig, options: &SimOptions) -> SimResult {
    simulate_edited(list, config, options, &mut Unedited)
}

/// Changes a simulation makes to the recorded program, to try a fix (see
/// [`fixes`]): requests it adds, allocations it drops or shrinks. The
/// plain [`simulate`] runs [`Unedited`], whose calls compile away.
pub(crate) trait Edits {
    /// What to do before request `i`, if anything.
    fn before(&self, i: usize) -> Option<&Insert>;
    /// Whether the allocation `id` is never made (its frees are skipped).
    fn dropped(&self, id: usize) -> bool;
    /// The size allocation `id` asks for, given the recorded one.
    fn size(&self, id: usize, requested: u64) -> u64;
    /// Request `i` was simulated: whether it ran out of memory, and the
    /// reserved and allocated bytes after it.
    fn after(&mut self, i: usize, oom: bool, reserved: u64, allocated: u64);
    /// The pool that pool index `index` (of [`RequestList::pools`]) is
    /// replayed as: its own, unless the edits merge pools.
    fn pool(&self, list: &RequestList, index: usize) -> PoolId {
        list.pools[index - 1]
    }
    /// The device's segment addresses to lay out as recorded (see
    /// `SimulatedDevice::with_recorded_addresses`): the list's own, unless
    /// the edits make another run's requests.
    fn addresses<'a>(&'a self, list: &'a RequestList) -> &'a [(u64, u64)] {
        &list.recorded_allocations
    }
}

/// A request a fix adds to the program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Insert {
    /// `torch.cuda.empty_cache()`.
    EmptyCache,
    /// The program frees these allocations (by id) here, not where it did.
    Free(Vec<u32>),
}

/// No edits: the recorded program.
pub(crate) struct Unedited;

impl Edits for Unedited {
    #[inline(always)]
    fn before(&self, _: usize) -> Option<&Insert> {
        None
    }
    #[inline(always)]
    fn dropped(&self, _: usize) -> bool {
        false
    }
    #[inline(always)]
    fn size(&self, _: usize, requested: u64) -> u64 {
        requested
    }
    #[inline(always)]
    fn after(&mut self, _: usize, _: bool, _: u64, _: u64) {}
}

/// [`simulate`] with the program changed by `edits`.
pub(crate) fn simulate_edited<E: Edits>(
    list: &RequestList,
    config: &AllocatorConfig,
    options: &SimOptions,
    edits: &mut E,
) -> SimResult {
    let device = match options.capacity {
        Some(c) => SimulatedDevice::new(c),
        None => SimulatedDevice::unlimited(),
    }
    .with_recorded_addresses(edits.addresses(list).to_vec());
    let mut alloc = CachingAllocator::new(device, config.clone());
    if let Some(cap) = options.cap {
        alloc.set_reserve_limit(cap);
    }
    alloc.set_event_log(options.segments);
    let mut sampler = (options.samples > 0).then(|| Sampler::new(list, options.samples));
    let mut addrs = vec![FAILED; list.allocs.len()];
    let mut r = SimResult::default();
    take_over_initial_segments(&mut alloc, list, &mut addrs, &mut r);
    // A pool the trace names but does not follow is held from the start
    // (its release, where the recording returned its memory, is a request).
    for &pool in &list.unfollowed_pools {
        alloc.hold_pool(edits.pool(list, pool as usize));
    }
    let mut index = 0u64;
    let mut peak_reserved = 0u64;
    let mut cached_at_peak = 0u64;
    let mut stopped_at = None;
    for (i, req) in list.requests.iter().enumerate() {
        index += req.delta as u64;
        let id = req.id as usize;
        let ooms_before = r.ooms;
        match edits.before(i) {
            None => {}
            Some(Insert::EmptyCache) => {
                r.empty_cache_calls += 1;
                alloc.empty_cache();
            }
            Some(Insert::Free(ids)) => {
                for &freed in ids {
                    match std::mem::replace(&mut addrs[freed as usize], FAILED) {
                        FAILED => {}
                        addr => {
                            let _ = alloc.free(addr);
                        }
                    }
                }
            }
        }
        match req.op {
            Op::Alloc | Op::FailedAlloc if edits.dropped(id) => {}
            Op::Alloc | Op::FailedAlloc => {
                let info = &list.allocs[id];
                let stream = list.streams[req.stream as usize];
                let size = edits.size(id, info.requested);
                let result = match list.alloc_pools.get(id).copied().unwrap_or(0) {
                    0 => alloc.malloc(size, stream),
                    pool => alloc.malloc_in(size, stream, edits.pool(list, pool as usize)),
                };
                match result {
                    Ok(a) if req.op == Op::Alloc => addrs[id] = a.addr,
                    Ok(a) => {
                        r.recorded_ooms_avoided += 1;
                        let _ = alloc.free(a.addr);
                    }
                    Err(AllocError::OutOfMemory { .. })
                        if list.survivable.get(id).copied().unwrap_or(false) =>
                    {
                        // cuDNN tries an algorithm that needs less.
                        r.survived_failures += 1;
                    }
                    Err(AllocError::OutOfMemory {
                        requested,
                        free_bytes,
                    }) => {
                        let at = OomAt {
                            request: i,
                            event_index: index,
                            time_ns: req.time_ns,
                            requested_bytes: requested,
                            stream,
                            phase: info.phase,
                            site: info.site,
                            free_bytes,
                            recorded: req.op == Op::FailedAlloc,
                            ..OomAt::default()
                        };
                        r.out_of_memory(at, &alloc, list, &addrs);
                        if options.stop_at_first_oom {
                            stopped_at = Some(i);
                        }
                    }
                    // The simulated device fails only for lack of memory (or
                    // of address space, which 2^64 bytes do not run out of).
                    Err(_) => {}
                }
            }
            Op::Free => match std::mem::replace(&mut addrs[id], FAILED) {
                FAILED => r.skipped_frees += 1,
                addr => {
                    let _ = alloc.free(addr);
                }
            },
            Op::FreeRequest => match addrs[id] {
                FAILED => r.skipped_frees += 1,
                addr => {
                    // The recording does not say which stream used the
                    // block; a stream of its own makes its completion
                    // exactly the recorded one.
                    let _ = alloc.record_stream(addr, pseudo_stream(id));
                    let _ = alloc.free(addr);
                }
            },
            Op::FreeComplete => {
                if std::mem::replace(&mut addrs[id], FAILED) != FAILED {
                    alloc.synchronize_stream(pseudo_stream(id));
                }
            }
            Op::EmptyCache | Op::InferredEmptyCache => {
                r.empty_cache_calls += 1;
                alloc.empty_cache();
            }
            // Index 0: a capture into a pool of the graph's own, named at its
            // end (which holds it then).
            Op::PoolBegin if id == 0 => alloc.begin_allocate_to_pool(PoolId::DEFAULT),
            Op::PoolBegin => alloc.begin_allocate_to_pool(edits.pool(list, id)),
            Op::PoolEnd => alloc.end_allocate_to_pool(),
            Op::PoolHold => alloc.hold_pool(edits.pool(list, id)),
            Op::PoolRelease => alloc.release_pool(edits.pool(list, id)),
            Op::EmptyPool => alloc.empty_pool(edits.pool(list, id)),
            Op::Nop => {}
        }
        let stats = alloc.stats();
        let reserved = stats.reserved_bytes.all.current;
        let allocated = stats.allocated_bytes.all.current;
        if reserved > peak_reserved || (reserved == peak_reserved && reserved > 0) {
            // At equal peaks the least cached moment tells how much the
            // policy needed beyond what was allocated.
            let cached = reserved - allocated.min(reserved);
            cached_at_peak = if reserved > peak_reserved {
                cached
            } else {
                cached_at_peak.min(cached)
            };
            peak_reserved = reserved;
        }
        edits.after(i, r.ooms > ooms_before, reserved, allocated);
        if let Some(s) = sampler.as_mut() {
            s.add(req.time_ns, reserved, allocated);
        }
        if options.segments {
            r.segments
                .extend(alloc.drain_events().filter_map(|e| SegmentAction::of(&e)));
        }
        r.requests += 1;
        if stopped_at.is_some() {
            break;
        }
    }
    let stats = alloc.stats();
    r.peak_reserved_bytes = stats.reserved_bytes.all.peak;
    r.peak_allocated_bytes = stats.allocated_bytes.all.peak;
    r.cached_at_peak_bytes = cached_at_peak;
    r.fragmentation = if peak_reserved == 0 {
        0.0
    } else {
        cached_at_peak as f64 / peak_reserved as f64
    };
    r.final_reserved_bytes = stats.reserved_bytes.all.current;
    r.alloc_retries = stats.num_alloc_retries;
    r.cache_flushes = r.alloc_retries + r.empty_cache_calls;
    r.device_allocs = stats.num_device_alloc;
    r.device_frees = stats.num_device_free;
    if let Some(s) = sampler {
        let stop = stopped_at.map(|i| {
            let t = list.requests[i].time_ns;
            let n = s.buckets.len() as u128;
            ((t.saturating_sub(s.t0) as u128 * n / s.span as u128) as usize)
                .min(s.buckets.len() - 1)
        });
        r.samples = s.finish(stop);
    }
    r
}

impl SimResult {
    /// Counts an allocation that ran out of memory, described with the
    /// allocator's state if it is the first.
    /// `addrs`: each request's simulated address, for the category mix of
    /// the blocks allocated then.
    fn out_of_memory<D: DeviceMemory>(
        &mut self,
        mut at: OomAt,
        alloc: &CachingAllocator<D>,
        list: &RequestList,
        addrs: &[u64],
    ) {
        self.ooms += 1;
        if self.first_oom.is_none() {
            let mut mix = CategoryBytes::default();
            for (&class, &addr) in list.classes.iter().zip(addrs) {
                if let Some(a) = alloc.allocation(addr).filter(|_| addr != FAILED) {
                    mix.add(class, a.size);
                }
            }
            at.categories = CategoryTable::of(&mix);
            let stats = alloc.stats();
            // A request past the largest block any allocator makes needs
            // at least itself (rounding it would saturate).
            let needed = alloc
                .config()
                .checked_round_size(at.requested_bytes)
                .map_or(at.requested_bytes, allocation_size);
            at.reserved_bytes = stats.reserved_bytes.all.current;
            at.allocated_bytes = stats.allocated_bytes.all.current;
            (at.cached_free_bytes, at.largest_free_block) = alloc.cached_free();
            at.shortfall_bytes = needed.saturating_sub(at.free_bytes);
            self.first_oom = Some(at);
        }
    }
}

/// Starts the simulated allocator from the segments of a trace that begins
/// mid-run, at their recorded sizes and layout. A segment it cannot take
/// over (an expandable one; one the device cannot hold) has its blocks
/// allocated instead, as requests made before the first event.
fn take_over_initial_segments<D: DeviceMemory>(
    alloc: &mut CachingAllocator<D>,
    list: &RequestList,
    addrs: &mut [u64],
    r: &mut SimResult,
) {
    for seg in &list.initial_segments {
        let in_use = seg
            .blocks
            .iter()
            .filter(|b| b.status != BlockStatus::Free)
            .filter_map(|b| Some((b, *list.initial_ids.get(&b.addr)? as usize)));
        match alloc.load_segment(seg) {
            Ok(base) => {
                for (b, id) in in_use {
                    addrs[id] = base + (b.addr - seg.addr);
                }
            }
            Err(_) => {
                for (_, id) in in_use {
                    let info = &list.allocs[id];
                    match alloc.malloc(info.requested, seg.stream) {
                        Ok(a) => addrs[id] = a.addr,
                        Err(AllocError::OutOfMemory {
                            requested,
                            free_bytes,
                        }) => {
                            let at = OomAt {
                                requested_bytes: requested,
                                stream: seg.stream,
                                phase: info.phase,
                                site: info.site,
                                free_bytes,
                                ..OomAt::default()
                            };
                            r.out_of_memory(at, alloc, list, addrs);
                        }
                        Err(_) => {}
                    }
                }
            }
        }
    }
}

/// A stream id no trace uses, one per block, for frees that wait on
/// another stream.
fn pseudo_stream(id: usize) -> u64 {
    u64::MAX - id as u64
}

/// Why a simulation cannot run as asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimulateError {
    /// No settings were named and the recorded ones cannot be read (why).
    #[error(
        "the recorded allocator settings cannot be read ({0}), and no other settings are named"
    )]
    NoSettings(String),
    /// The reserve leaves nothing of the device's memory to the allocator.
    #[error(
        "the reserve of {} leaves nothing of the device's {} to the allocator",
        crate::units::capacity(*reserve),
        crate::units::capacity(*device)
    )]
    ReserveExceedsDevice {
        /// The reserve.
        reserve: u64,
        /// The device's memory.
        device: u64,
    },
}

/// How closely a simulation with the recorded settings reproduces the
/// recording.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fidelity {
    /// Whether device actions (kind, size, stream, in order) and the peak
    /// of reserved bytes are the recorded ones exactly.
    pub exact: bool,
    /// Recorded device actions.
    pub recorded_segment_actions: usize,
    /// Simulated device actions.
    pub simulated_segment_actions: usize,
    /// The first action that differs, if any.
    pub first_difference: Option<usize>,
    /// The recorded peak of reserved bytes.
    pub recorded_peak_reserved_bytes: u64,
    /// The simulated one.
    pub simulated_peak_reserved_bytes: u64,
    /// The device capacity simulated (the recorded one when the header
    /// gives it), `None` for unlimited.
    pub capacity_bytes: Option<u64>,
    /// Why the trace cannot be reproduced exactly, when that is known in
    /// advance.
    pub caveats: Vec<String>,
}

/// Replays the list with the recorded settings on the recorded device and
/// compares the outcome with the recording.
pub fn fidelity(list: &RequestList, config: &AllocatorConfig, capacity: Option<u64>) -> Fidelity {
    fidelity_under(list, config, capacity, None)
}

/// [`fidelity`] on a device of `capacity` whose allocator was capped at
/// `cap` (`set_per_process_memory_fraction`, recorded or inferred): the cap
/// also arms `garbage_collection_threshold`, as in PyTorch.
pub fn fidelity_under(
    list: &RequestList,
    config: &AllocatorConfig,
    capacity: Option<u64>,
    cap: Option<u64>,
) -> Fidelity {
    let options = SimOptions {
        capacity,
        cap,
        segments: true,
        ..Default::default()
    };
    let sim = simulate(list, config, &options);
    let first_difference = list
        .recorded_segments
        .iter()
        .zip(&sim.segments)
        .position(|(a, b)| a != b)
        .or_else(|| {
            (list.recorded_segments.len() != sim.segments.len())
                .then(|| list.recorded_segments.len().min(sim.segments.len()))
        });
    let mut caveats = Vec::new();
    let expandable = list.initial_segments.iter().filter(|s| s.expandable);
    let (count, bytes) = expandable.fold((0, 0), |(n, b), s| (n + 1, b + s.size));
    if count > 0 {
        caveats.push(format!(
            "the trace starts mid-run with {count} mapped ranges of expandable segments ({}): the simulation does not take those over, and allocates their blocks first into segments of its own",
            crate::units::bytes(bytes)
        ));
    }
    if list.cross_stream_frees > 0 {
        caveats.push(format!(
            "{} frees waited for another stream: the trace does not say which, so each waits on a stream of its own and completes when the recorded completion came",
            list.cross_stream_frees
        ));
    }
    if list.streams.len() > 1 {
        caveats.push(format!(
            "{} streams: each has its own pools, as in PyTorch",
            list.streams.len()
        ));
    }
    if list.unmatched_frees > 0 {
        caveats.push(format!(
            "{} frees of blocks the trace never allocated were skipped",
            list.unmatched_frees
        ));
    }
    Fidelity {
        exact: first_difference.is_none() && sim.peak_reserved_bytes == list.recorded_peak_reserved,
        recorded_segment_actions: list.recorded_segments.len(),
        simulated_segment_actions: sim.segments.len(),
        first_difference,
        recorded_peak_reserved_bytes: list.recorded_peak_reserved,
        simulated_peak_reserved_bytes: sim.peak_reserved_bytes,
        capacity_bytes: capacity,
        caveats,
    }
}

/// A trace's requests with what describing them needs.
pub struct Extracted {
    /// The device whose requests these are.
    pub device: u32,
    /// The device's recorded peaks.
    pub peaks: crate::analysis::peaks::DevicePeaks,
    /// The requests.
    pub list: RequestList,
    /// The replay state after the pass: it names sites and phases.
    pub state: crate::replay::ReplayState,
    /// The recorded allocator settings (`Err` when the header's cannot be
    /// read), with the keys ignored as not affecting the policy.
    pub recorded_config: Result<(AllocatorConfig, Vec<String>), ConfigError>,
    /// The recorded capacity: the allocator's limit (recorded, or a cap
    /// inferred from an OOM; see [`crate::analysis::limits`]), else the
    /// recorded device's memory, when the header gives a usable one.
    pub recorded_capacity: Option<u64>,
    /// The allocator's limit, the device-memory samples and what they
    /// measured outside the allocator.
    pub limits: crate::analysis::limits::LimitReport,
    /// The program's notes (`vramtrace.annotate`), in order.
    pub annotations: Vec<(String, String)>,
    /// What the pass read.
    pub info: crate::analysis::PassInfo,
}

/// The requests of each device of a trace.
pub struct ExtractedDevices {
    /// Each device's requests, by device index.
    pub devices: Vec<Extracted>,
    /// Every device seen, those skipped included.
    pub seen: Vec<u32>,
}

/// Decodes and replays a trace once into the [`RequestList`] of each of its
/// devices (or of the one `devices` names): a GPU's capacity is its own.
pub fn extract<S: vramtrace_format::EventSource>(
    reader: &mut S,
    devices: crate::analysis::Devices,
    meter: &dyn crate::progress::Meter,
) -> Result<ExtractedDevices, crate::analysis::PassError> {
    let header = reader.header();
    let recorded_config = AllocatorConfig::from_settings(&header.allocator_settings);
    let listed = header.devices.clone();
    // The starting state the pass replays: without impossible segments.
    let initial = reader.initial_state().map(|i| {
        crate::replay::plausible::plausible_initial(i)
            .0
            .into_owned()
    });
    let categories = crate::replay::categories::CategoryOptions::of_header(header);
    let passes = crate::analysis::run_device_pass(
        reader,
        crate::replay::ReplayState::default().with_categories(categories),
        devices,
        |device| {
            let initial = initial
                .as_ref()
                .map(|i| crate::analysis::initial_on(i, device));
            (
                RequestExtractor::new(device_capacity(&listed, device))
                    .starting_from(initial.as_ref()),
                crate::analysis::limits::LimitWatch::new(),
            )
        },
        &crate::analysis::window::Window::ALL,
        meter,
    )?;
    let devices = passes
        .devices
        .into_iter()
        .map(|p| {
            let limits = p.analyses.1.into_report()?;
            let text = |id| reader.symbols().string_or_unknown(id).to_string();
            let annotations = (p.state.annotations().iter())
                .map(|&(k, v)| (text(k), text(v)))
                .collect();
            Ok(Extracted {
                device: p.device,
                peaks: p.peaks.into_report(p.device)?,
                list: p.analyses.0.into_list()?,
                state: p.state,
                recorded_config: recorded_config.clone(),
                recorded_capacity: limits
                    .capacity()
                    .and_then(recorded_capacity)
                    .or_else(|| device_capacity(&listed, p.device)),
                limits,
                annotations,
                info: passes.info.clone(),
            })
        })
        .collect::<Result<_, crate::analysis::PassError>>()?;
    Ok(ExtractedDevices {
        devices,
        seen: passes.seen,
    })
}
