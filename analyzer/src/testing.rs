//! Building small traces in memory for unit tests, and replaying them.

use crate::analysis::window::Window;
use crate::analysis::{Analysis, run_pass};
use crate::replay::ReplayState;
use crate::replay::categories::CategoryOptions;
use vramtrace_format::{
    BlockEvent, Category, DeviceMemoryEvent, Event, EventData, Header, InitialState, LimitEvent,
    OomEvent, SegmentEvent, StackId, SymbolTable, TagEvent, TraceReader, TraceWriter, UserTagEvent,
    WriterOptions,
};

/// Writes a trace to memory with terse helpers; times are in nanoseconds.
pub struct TraceBuilder {
    writer: TraceWriter<Vec<u8>>,
    /// The time of the next event when a helper is not given one.
    pub now: u64,
    /// The device of the next events (0 unless set).
    pub device: u32,
    /// The thread of the next block events (0, the main thread, unless set).
    pub thread: u32,
}

impl TraceBuilder {
    /// An empty trace with small chunks, so tests cross chunk boundaries.
    pub fn new() -> Self {
        Self::with_header(Header::default())
    }

    /// An empty trace with this header.
    pub fn with_header(header: Header) -> Self {
        let options = WriterOptions {
            chunk_events: 7,
            chunk_interval: None,
        };
        TraceBuilder {
            writer: TraceWriter::with_options(Vec::new(), header, options).unwrap(),
            now: 0,
            device: 0,
            thread: 0,
        }
    }

    /// An empty trace whose header says its recorder tagged categories.
    pub fn tagged() -> Self {
        let mut header = Header::default();
        header.metadata.insert("categories".into(), "tags".into());
        Self::with_header(header)
    }

    /// Writes an initial state; only before any event.
    pub fn initial_state(&mut self, state: &InitialState) -> &mut Self {
        self.writer.write_initial_state(state).unwrap();
        self
    }

    /// Interns a stack of `(function, file, line)`, innermost first.
    pub fn stack(&mut self, frames: &[(&str, &str, u32)]) -> StackId {
        self.writer.intern_symbol_stack(frames.iter().copied())
    }

    /// A one-frame user stack `function (file:line)`.
    pub fn site(&mut self, function: &str, file: &str, line: u32) -> StackId {
        self.stack(&[
            ("c10::cuda::CUDACachingAllocator::malloc", "", 0),
            (function, file, line),
        ])
    }

    /// Makes the next block events those of `thread`.
    pub fn on_thread(&mut self, thread: u32) -> &mut Self {
        self.thread = thread;
        self
    }

    /// Tags the live block at `addr` as holding `category`.
    pub fn tag(&mut self, addr: u64, category: Category) -> &mut Self {
        self.push(EventData::Tag(TagEvent::new(addr, 0, category)))
    }

    /// Tags the live block at `addr` with the program's own category `name`.
    pub fn tag_user(&mut self, addr: u64, name: &str) -> &mut Self {
        let name = self.writer.intern_string(name);
        self.push(EventData::UserTag(UserTagEvent {
            addr,
            device: 0,
            thread: 0,
            name,
        }))
    }

    /// Makes the next events those of `device`.
    pub fn on_device(&mut self, device: u32) -> &mut Self {
        self.device = device;
        self
    }

    fn push(&mut self, mut data: EventData) -> &mut Self {
        match &mut data {
            EventData::Alloc(b) | EventData::FreeRequested(b) | EventData::FreeCompleted(b) => {
                b.device = self.device;
                b.thread = self.thread;
            }
            EventData::SegmentAlloc(s)
            | EventData::SegmentFree(s)
            | EventData::SegmentMap(s)
            | EventData::SegmentUnmap(s) => s.device = self.device,
            EventData::Oom(o) => o.device = self.device,
            EventData::EmptyCache(e) => e.device = self.device,
            EventData::Tag(t) => t.device = self.device,
            EventData::UserTag(t) => t.device = self.device,
            EventData::Limit(l) => l.device = self.device,
            EventData::DeviceMemory(m) => m.device = self.device,
            _ => {}
        }
        self.now += 1;
        self.writer
            .push(Event {
                time_ns: self.now,
                data,
            })
            .unwrap();
        self
    }

    /// Sets the time of the next event (it is incremented before each event).
    pub fn at(&mut self, time_ns: u64) -> &mut Self {
        self.now = time_ns.saturating_sub(1);
        self
    }

    fn block(addr: u64, size: u64, requested: u64, stack: StackId) -> BlockEvent {
        BlockEvent {
            addr,
            size,
            requested,
            stack,
            ..Default::default()
        }
    }

    /// Reserves a segment.
    pub fn segment(&mut self, addr: u64, size: u64) -> &mut Self {
        self.push(EventData::SegmentAlloc(SegmentEvent {
            addr,
            size,
            ..Default::default()
        }))
    }

    /// Returns a segment.
    pub fn segment_free(&mut self, addr: u64, size: u64) -> &mut Self {
        self.push(EventData::SegmentFree(SegmentEvent {
            addr,
            size,
            ..Default::default()
        }))
    }

    /// Maps a range of an expandable segment.
    pub fn map(&mut self, addr: u64, size: u64) -> &mut Self {
        self.push(EventData::SegmentMap(SegmentEvent {
            addr,
            size,
            ..Default::default()
        }))
    }

    /// Unmaps a range of an expandable segment.
    pub fn unmap(&mut self, addr: u64, size: u64) -> &mut Self {
        self.push(EventData::SegmentUnmap(SegmentEvent {
            addr,
            size,
            ..Default::default()
        }))
    }

    /// Allocates a block of `size` bytes for a request of `requested`.
    pub fn alloc(&mut self, addr: u64, size: u64, requested: u64, stack: StackId) -> &mut Self {
        self.push(EventData::Alloc(Self::block(addr, size, requested, stack)))
    }

    /// Requests the free of a block.
    pub fn free_requested(&mut self, addr: u64, size: u64) -> &mut Self {
        self.push(EventData::FreeRequested(Self::block(
            addr,
            size,
            0,
            StackId::NONE,
        )))
    }

    /// Completes the free of a block.
    pub fn free_completed(&mut self, addr: u64, size: u64) -> &mut Self {
        self.push(EventData::FreeCompleted(Self::block(
            addr,
            size,
            0,
            StackId::NONE,
        )))
    }

    /// Frees a block: both steps, as PyTorch records them on one stream.
    pub fn free(&mut self, addr: u64, size: u64) -> &mut Self {
        self.free_requested(addr, size).free_completed(addr, size)
    }

    /// An out-of-memory event.
    pub fn oom(&mut self, requested: u64, stack: StackId) -> &mut Self {
        self.push(EventData::Oom(OomEvent {
            requested,
            stack,
            ..Default::default()
        }))
    }

    /// Writes an event as given (its device set to the builder's).
    pub fn event(&mut self, data: EventData) -> &mut Self {
        self.push(data)
    }

    /// An out-of-memory event that says how much the device had free.
    pub fn oom_with_free(&mut self, requested: u64, free_bytes: u64, stack: StackId) -> &mut Self {
        self.push(EventData::Oom(OomEvent {
            requested,
            free_bytes,
            stack,
            ..Default::default()
        }))
    }

    /// The allocator's limit (format 1.3): `limit_bytes` of a device of
    /// `total_bytes` (equal: no cap).
    pub fn limit(&mut self, limit_bytes: u64, total_bytes: u64) -> &mut Self {
        self.push(EventData::Limit(LimitEvent {
            limit_bytes,
            total_bytes,
            ..Default::default()
        }))
    }

    /// A sample of the device's memory (format 1.3).
    pub fn device_memory(&mut self, free_bytes: u64, total_bytes: u64) -> &mut Self {
        self.push(EventData::DeviceMemory(DeviceMemoryEvent {
            free_bytes,
            total_bytes,
            ..Default::default()
        }))
    }

    /// Opens a phase of the main thread.
    pub fn begin(&mut self, name: &str) -> &mut Self {
        self.begin_on(0, name)
    }

    /// Closes a phase of the main thread.
    pub fn end(&mut self, name: &str) -> &mut Self {
        self.end_on(0, name)
    }

    /// Opens a phase of `thread`.
    pub fn begin_on(&mut self, thread: u32, name: &str) -> &mut Self {
        let name = self.writer.intern_string(name);
        self.push(EventData::PhaseBegin { name, thread })
    }

    /// Closes a phase of `thread`.
    pub fn end_on(&mut self, thread: u32, name: &str) -> &mut Self {
        let name = self.writer.intern_string(name);
        self.push(EventData::PhaseEnd { name, thread })
    }

    /// The finished trace's bytes.
    pub fn finish(self) -> Vec<u8> {
        self.writer.finish().unwrap()
    }

    /// The finished trace and its symbol table.
    pub fn finish_symbols(self) -> (Vec<u8>, SymbolTable) {
        let bytes = self.finish();
        let mut reader = TraceReader::new(&bytes[..]).unwrap();
        reader.count_remaining().unwrap();
        let symbols = reader.symbols().clone();
        (bytes, symbols)
    }
}

impl Default for TraceBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// Replays the trace `bytes` from its start through `analyses`, in one pass
/// over `window`: what a command does, without the file.
pub fn replay_trace(bytes: &[u8], analyses: &mut [&mut dyn Analysis], window: &Window) {
    let mut reader = TraceReader::new(bytes).unwrap();
    let options = CategoryOptions::of_header(reader.header());
    run_pass(
        &mut reader,
        &mut ReplayState::default().with_categories(options),
        analyses,
        window,
        &crate::progress::NoProgress,
    )
    .unwrap();
}

/// The run of issue #28, scaled by `unit` (a MiB in the issue): on a card
/// of `card` bytes, with `outside` bytes held outside the allocator, the
/// allocator capped at `cap` (or at the card, when `cap` is `None`) by
/// PyTorch's policy, `count` tensors of 6 units are made, two of every three
/// freed, then one of `big` bytes is asked for. Every allocator event is
/// written as PyTorch's caching allocator would make it, with a limit event
/// at the start and a device-memory sample at the start, after each segment
/// event and at the OOM (format 1.3).
pub fn capped_run(
    card: u64,
    cap: Option<u64>,
    outside: u64,
    count: u64,
    unit: u64,
    big: u64,
) -> Vec<u8> {
    capped_run_with(card, cap, outside, count, unit, big, "")
}

/// [`capped_run`] under the allocator settings `alloc_conf`
/// (`PYTORCH_CUDA_ALLOC_CONF` syntax, recorded in the header); the cap is
/// the allocator's own (`set_per_process_memory_fraction`, which arms
/// `garbage_collection_threshold`), on a device of the card's free memory.
pub fn capped_run_with(
    card: u64,
    cap: Option<u64>,
    outside: u64,
    count: u64,
    unit: u64,
    big: u64,
    alloc_conf: &str,
) -> Vec<u8> {
    use vramtrace_allocator::device::SimulatedDevice;
    use vramtrace_allocator::{AllocatorConfig, CachingAllocator};
    let config = AllocatorConfig::parse(alloc_conf).unwrap();
    let mut b = TraceBuilder::with_header(Header {
        allocator_settings: config.to_settings(),
        ..Header::default()
    });
    let small = b.site("make", "issue28.py", 5);
    let large = b.site("ask", "issue28.py", 9);
    let mut alloc = CachingAllocator::new(SimulatedDevice::new(card - outside), config);
    if let Some(cap) = cap {
        alloc.set_reserve_limit(cap);
    }
    alloc.set_event_log(true);
    b.limit(cap.unwrap_or(card), card);
    b.device_memory(card - outside, card);
    let write = |b: &mut TraceBuilder, alloc: &mut CachingAllocator<SimulatedDevice>, stack| {
        let events: Vec<EventData> = alloc.drain_events().collect();
        let reserved = alloc.stats().reserved_bytes.all.current;
        let free = card - outside - reserved;
        for mut e in events {
            let segment = matches!(e, EventData::SegmentAlloc(_) | EventData::SegmentFree(_));
            match &mut e {
                EventData::Alloc(x) => x.stack = stack,
                EventData::Oom(o) => {
                    o.stack = stack;
                    o.free_bytes = free;
                }
                _ => {}
            }
            let oom = matches!(e, EventData::Oom(_));
            b.event(e);
            if segment || oom {
                b.device_memory(free, card);
            }
        }
    };
    let mut addrs = Vec::new();
    for _ in 0..count {
        addrs.push(alloc.malloc(6 * unit, 0).unwrap().addr);
        write(&mut b, &mut alloc, small);
    }
    for (i, addr) in addrs.iter().enumerate() {
        if i % 3 != 0 {
            alloc.free(*addr).unwrap();
            write(&mut b, &mut alloc, small);
        }
    }
    let _ = alloc.malloc(big, 0);
    write(&mut b, &mut alloc, large);
    b.finish()
}

/// What [`serving_run`] records.
#[derive(Clone, Debug)]
pub struct Serving {
    /// The device's memory.
    pub card: u64,
    /// The allocator's cap (`set_per_process_memory_fraction`), if any.
    pub cap: Option<u64>,
    /// The model's weights, in 24 MiB tensors.
    pub weights: u64,
    /// The paged KV cache, one tensor.
    pub kv_cache: u64,
    /// The decode batch sizes captured, largest first, as servers do.
    pub batches: Vec<u64>,
    /// Whether the graphs share one pool (`graph_pool_handle()`), or each
    /// has its own.
    pub shared_pool: bool,
    /// Decode steps replayed after the captures.
    pub steps: u64,
    /// Whether the first graph is let go and `empty_cache()` called at the
    /// end.
    pub release_first: bool,
}

impl Default for Serving {
    fn default() -> Self {
        const MIB: u64 = 1 << 20;
        Serving {
            card: 80 << 30,
            cap: None,
            weights: 480 * MIB,
            kv_cache: 1 << 30,
            batches: vec![8, 4, 2, 1],
            shared_pool: true,
            steps: 6,
            release_first: true,
        }
    }
}

/// An inference server's memory as PyTorch's allocator would record it (the
/// crate's allocator, with its private pools): weights, a KV cache, decode
/// steps captured as CUDA graphs for each batch size (each capture's
/// temporaries freed inside it, its output kept for the graph's life) on a
/// capture stream, into one shared pool or a pool each, then eager steps
/// between replays. Pool events say what the Python package records. The
/// allocation of a capture that fails ends the run there, as in PyTorch.
pub fn serving_run(s: &Serving) -> Vec<u8> {
    serving_run_with_pools(s).0
}

/// [`serving_run`], with each private pool's memory at the end as the
/// allocator that made the trace holds it.
pub fn serving_run_with_pools(s: &Serving) -> (Vec<u8>, Vec<vramtrace_allocator::PoolUsage>) {
    use vramtrace_allocator::device::SimulatedDevice;
    use vramtrace_allocator::{AllocatorConfig, CachingAllocator};
    use vramtrace_format::{PoolAction, PoolEvent, PoolId};
    const MIB: u64 = 1 << 20;
    const CAPTURE_STREAM: u64 = 0x7000;
    let mut b = TraceBuilder::new();
    let load = b.site("load_weights", "serve.py", 20);
    let kv = b.site("allocate_kv_cache", "serve.py", 31);
    let capture = b.site("capture_decode", "serve.py", 44);
    let step = b.site("decode_step", "serve.py", 60);
    let mut alloc = CachingAllocator::new(SimulatedDevice::new(s.card), AllocatorConfig::default());
    if let Some(cap) = s.cap {
        alloc.set_reserve_limit(cap);
        b.limit(cap, s.card);
    }
    let write = |b: &mut TraceBuilder, alloc: &mut CachingAllocator<SimulatedDevice>, stack| {
        for mut e in alloc.drain_events().collect::<Vec<_>>() {
            match &mut e {
                EventData::Alloc(x) | EventData::FreeRequested(x) | EventData::FreeCompleted(x) => {
                    x.stack = stack
                }
                EventData::Oom(o) => o.stack = stack,
                _ => {}
            }
            b.event(e);
        }
    };
    let pool_event = |b: &mut TraceBuilder, action, pool, stream| {
        b.event(EventData::Pool(PoolEvent::new(action, pool, 0, stream)));
    };
    let mut weights = Vec::new();
    for _ in 0..s.weights / (24 * MIB) {
        weights.push(alloc.malloc(24 * MIB, 0).unwrap().addr);
        write(&mut b, &mut alloc, load);
    }
    let Ok(_kv) = alloc.malloc(s.kv_cache, 0) else {
        write(&mut b, &mut alloc, kv);
        return (b.finish(), alloc.pool_usage());
    };
    write(&mut b, &mut alloc, kv);
    let mut graphs = Vec::new();
    for (i, &batch) in s.batches.iter().enumerate() {
        let pool = if s.shared_pool {
            PoolId(0, 1)
        } else {
            PoolId(i as u64 + 1, 0)
        };
        alloc.begin_allocate_to_pool(pool);
        pool_event(&mut b, PoolAction::CaptureBegin, pool, CAPTURE_STREAM);
        let mut failed = false;
        let mut temporaries = Vec::new();
        for layer in 0..4u64 {
            match alloc.malloc_in(batch * (3 + layer) * MIB, CAPTURE_STREAM, pool) {
                Ok(a) => temporaries.push(a.addr),
                Err(_) => failed = true,
            }
            write(&mut b, &mut alloc, capture);
            if failed {
                break;
            }
            if temporaries.len() > 1 {
                alloc.free(temporaries.remove(0)).unwrap();
                write(&mut b, &mut alloc, capture);
            }
        }
        for t in temporaries.drain(..) {
            alloc.free(t).unwrap();
        }
        let output = (!failed)
            .then(|| alloc.malloc_in(batch * 2 * MIB, CAPTURE_STREAM, pool).ok())
            .flatten();
        write(&mut b, &mut alloc, capture);
        alloc.end_allocate_to_pool();
        pool_event(&mut b, PoolAction::CaptureEnd, pool, CAPTURE_STREAM);
        match output {
            Some(out) => graphs.push((pool, out.addr)),
            None => return (b.finish(), alloc.pool_usage()),
        }
    }
    for i in 0..s.steps {
        let Ok(logits) = alloc.malloc((i % 3 + 1) * 5 * MIB, 0) else {
            write(&mut b, &mut alloc, step);
            return (b.finish(), alloc.pool_usage());
        };
        write(&mut b, &mut alloc, step);
        alloc.free(logits.addr).unwrap();
        write(&mut b, &mut alloc, step);
    }
    if s.release_first {
        let (pool, out) = graphs.remove(0);
        alloc.free(out).unwrap();
        write(&mut b, &mut alloc, capture);
        alloc.release_pool(pool);
        pool_event(&mut b, PoolAction::Release, pool, 0);
        alloc.empty_cache();
        write(&mut b, &mut alloc, step);
    }
    let usage = alloc.pool_usage();
    (b.finish(), usage)
}
