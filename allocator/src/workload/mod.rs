//! A synthetic training loop: drives the caching allocator on a
//! [`SimulatedDevice`] the way a transformer's training step drives
//! PyTorch's, and writes the trace.
//!
//! Per run: parameters are allocated once; optimizer state appears at the
//! first optimizer step (a warm-up effect that leak analyses must ignore).
//! Per iteration (phase `iterN` holding `forward`, `backward`, `optimizer`):
//! an input batch, per-layer activations saved for backward (their sizes
//! follow the iteration's batch size and sequence length, so blocks of
//! different sizes interleave and the cache fragments), temporaries,
//! gradients freed by `zero_grad`, and optionally an injected leak, a
//! periodic `empty_cache()`, and a second stream that loads the input and
//! frees it across streams. Each allocation site has its own Python-like
//! stack. A run on a device with a capacity can run out of memory: the `Oom`
//! is recorded, the iteration's tensors are released (as PyTorch's exception
//! unwinding would), and the run ends.
//!
//! Everything is deterministic given the configuration: the header has no
//! wall-clock time, pid or host, and event times come from a simulated clock.
//! The generator writes straight through [`TraceWriter`] with stacks interned
//! up front, which is what lets it produce hundreds of millions of events.

mod sites;
mod slow_disk;

pub use slow_disk::SlowDisk;

use crate::allocator::{
    AllocError, AllocatorConfig, CachingAllocator, EventOrigin, MAX_BLOCK_SIZE,
};
use crate::device::{DeviceMemory, SimulatedDevice};
use crate::format::{
    Category, CountingWriter, DeviceInfo, Event, EventData, FormatError, Header, KindCounts,
    ProcessInfo, StackId, StringId, TagEvent, TraceWriter, WriterOptions,
};
use rustc_hash::FxHashSet;
use sites::Sites;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

/// The generator's own version, written as the trace's producer version: it
/// changes whenever the same configuration would produce different bytes.
pub const WORKLOAD_VERSION: &str = "3";

/// What to generate. [`Default`] is a small, steady run.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// Seed of every random choice.
    pub seed: u64,
    /// Training iterations (ignored when `events` is set).
    pub iters: u64,
    /// Run iterations until at least this many events are written.
    pub events: Option<u64>,
    /// Transformer layers.
    pub layers: u32,
    /// Hidden size (elements).
    pub hidden: u64,
    /// Attention heads.
    pub heads: u64,
    /// Vocabulary size (elements of a logits row).
    pub vocab: u64,
    /// Batch size: drawn per iteration from this inclusive range.
    pub batch: (u64, u64),
    /// Sequence length: drawn per iteration from this inclusive range (in
    /// steps of 8); a wide range fragments the cache.
    pub seq_len: (u64, u64),
    /// Bytes retained every iteration by a leaking call site (0: no leak).
    pub leak_bytes: u64,
    /// Call `empty_cache()` after every this many iterations.
    pub empty_cache_every: Option<u64>,
    /// 1, or 2 for a data-loading stream whose input tensors are used and
    /// freed on the compute stream (`record_stream`).
    pub streams: u32,
    /// Device capacity in bytes; `None` for a device that never runs out.
    pub capacity: Option<u64>,
    /// Allocator settings.
    pub allocator: AllocatorConfig,
    /// Events per chunk of the trace.
    pub chunk_events: usize,
    /// Devices the process drives (1 to 64), each with its own allocator:
    /// each iteration runs its body on every device in turn (as pipeline
    /// stages do), device `d` with sequences `8 × d` longer.
    pub devices: u32,
    /// The rank of a distributed run, recorded in the header, whose load
    /// it varies: sequences `8 × (rank mod 8)` longer, and its own random
    /// choices; its first device is `rank mod 8` (its local rank on a node
    /// of eight).
    pub rank: Option<u32>,
    /// The number of ranks, recorded in the header.
    pub world_size: Option<u32>,
    /// Tag what blocks hold, as a recording does (format 1.2): parameters
    /// and gradients in each optimizer phase (parameters at the first),
    /// optimizer state when made; the header says `categories = tags`.
    /// Activations and temporaries are never tagged: the analyzer tells
    /// them from lifetimes. Off: the untagged trace of an older recorder.
    pub tags: bool,
    /// Note the batch size and the sequence length at the start, as a
    /// program's `vramtrace.annotate("batch", 8)` does (each when fixed).
    pub annotate: bool,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            seed: 0,
            iters: 10,
            events: None,
            layers: 4,
            hidden: 512,
            heads: 8,
            vocab: 8192,
            batch: (8, 8),
            seq_len: (256, 256),
            leak_bytes: 0,
            empty_cache_every: None,
            streams: 1,
            capacity: None,
            allocator: AllocatorConfig::default(),
            chunk_events: 64 * 1024,
            devices: 1,
            rank: None,
            world_size: None,
            tags: true,
            annotate: false,
        }
    }
}

/// Why generation failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The configuration cannot be run.
    #[error("invalid workload: {0}")]
    Invalid(String),
    /// Writing the trace failed.
    #[error("cannot write the trace: {0}")]
    Format(#[from] FormatError),
    /// The simulated device failed other than by running out of memory.
    #[error("allocator error: {0}")]
    Alloc(AllocError),
}

/// An out-of-memory that ended a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OomReport {
    /// The iteration it happened in (0-based).
    pub iteration: u64,
    /// The size of the failed request.
    pub requested: u64,
    /// The device's free memory then.
    pub free_bytes: u64,
}

/// What a run wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadReport {
    /// Iterations completed (an iteration cut short by an OOM is not counted).
    pub iterations: u64,
    /// Events written.
    pub events: u64,
    /// Events by kind.
    pub counts: KindCounts,
    /// Bytes written.
    pub bytes: u64,
    /// The simulated time the trace spans, in ns.
    pub duration_ns: u64,
    /// The OOM that ended the run, if any.
    pub oom: Option<OomReport>,
    /// Bytes leaked by the injected leak.
    pub leaked_bytes: u64,
    /// Parameter bytes.
    pub parameter_bytes: u64,
    /// Optimizer state bytes (allocated at the first step).
    pub optimizer_state_bytes: u64,
    /// Parameter bytes in the allocator's blocks: what replay counts (a
    /// block is the request rounded up, or more when a cached block was
    /// handed out whole).
    pub parameter_block_bytes: u64,
    /// Optimizer state bytes in the allocator's blocks (see
    /// `parameter_block_bytes`).
    pub optimizer_state_block_bytes: u64,
    /// Peak allocated bytes.
    pub peak_allocated: u64,
    /// Peak reserved bytes.
    pub peak_reserved: u64,
    /// Allocated bytes at the end.
    pub final_allocated: u64,
    /// Reserved bytes at the end.
    pub final_reserved: u64,
    /// Wall-clock time the generation took (not part of the trace).
    pub elapsed: Duration,
}

/// The most transformer layers a run may have: the largest models have a
/// few hundred, and each iteration's work and events grow with them.
pub const MAX_LAYERS: u32 = 4096;

/// The most events a run may write (about 8.6 billion: hundreds of GB of
/// trace, hours of generation). A run of `iters` iterations that would
/// write more is refused after its first iteration, when the events of one
/// are known; a run to `events` is refused at once.
pub const MAX_EVENTS: u64 = 1 << 33;

/// How far a run got, as [`generate_with_progress`] reports it after each
/// iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunProgress {
    /// Iterations completed.
    pub iterations: u64,
    /// Events written.
    pub events: u64,
}

/// Generates a trace to `out`. See the [module docs](self).
pub fn generate(config: &WorkloadConfig, out: impl Write) -> Result<WorkloadReport, WorkloadError> {
    generate_with_progress(config, out, &mut |_| {})
}

/// [`generate`], telling `progress` how far the run got after each
/// iteration (long runs write billions of events).
pub fn generate_with_progress(
    config: &WorkloadConfig,
    out: impl Write,
    progress: &mut dyn FnMut(RunProgress),
) -> Result<WorkloadReport, WorkloadError> {
    validate(config)?;
    let started = Instant::now();
    let devices: Vec<SimulatedDevice> = (0..config.devices)
        .map(|d| {
            let device = match config.capacity {
                Some(c) => SimulatedDevice::new(c),
                None => SimulatedDevice::unlimited(),
            };
            // A rank of one node's eight drives the device of its local rank.
            device.with_index(config.rank.map_or(0, |r| r % 8) + d)
        })
        .collect();
    let mut metadata = BTreeMap::new();
    metadata.insert("source".into(), "synthetic".into());
    metadata.insert("workload".into(), describe(config));
    if config.tags {
        metadata.insert("categories".into(), "tags".into());
    }
    let header = Header {
        producer: "vramtrace-workload".into(),
        producer_version: WORKLOAD_VERSION.into(),
        devices: devices
            .iter()
            .map(|device| DeviceInfo {
                index: device.index(),
                name: device.name().to_string(),
                total_memory: device.total_memory(),
            })
            .collect(),
        process: {
            let mut process = ProcessInfo::default();
            process.rank = config.rank;
            process.world_size = config.world_size;
            process
        },
        allocator_settings: config.allocator.to_settings(),
        metadata,
        ..Header::default()
    };
    let mut writer = TraceWriter::with_options(
        CountingWriter::new(out),
        header,
        WriterOptions {
            chunk_events: config.chunk_events.max(1),
            // Chunk boundaries must not depend on the wall clock.
            chunk_interval: None,
        },
    )?;
    let sites = Sites::intern(&mut writer);
    let work = devices
        .into_iter()
        .map(|device| {
            let mut alloc = CachingAllocator::new(device, config.allocator.clone());
            alloc.set_event_log(true);
            DeviceWork {
                alloc,
                iter_live: FxHashSet::default(),
                params: Vec::new(),
                opt_state: Vec::new(),
                leaked: Vec::new(),
                parameter_bytes: 0,
                optimizer_state_bytes: 0,
                parameter_block_bytes: 0,
                optimizer_state_block_bytes: 0,
            }
        })
        .collect();
    let mut g = Gen {
        cfg: config,
        work,
        cur: 0,
        w: writer,
        sites,
        // A rank makes its own random choices; rank 0 those of a run without one.
        rng: (config.seed ^ 0x5851_f42d_4c95_7f2d)
            .wrapping_add(u64::from(config.rank.unwrap_or(0)).wrapping_mul(0x9e37_79b9)),
        time_ns: 0,
        thread: 0,
        oom: None,
        iteration: 0,
        last_block: 0,
    };
    if config.annotate {
        g.annotate()?;
    }
    let completed = g.run(progress)?;
    let counts = *g.w.counts();
    let duration_ns = g.time_ns;
    // Figures of a GPU: the busiest device's (each device is alike in
    // parameters and state).
    let busiest = (g.work.iter())
        .max_by_key(|w| w.alloc.stats().allocated_bytes.all.peak)
        .map(|w| *w.alloc.stats())
        .unwrap_or_default();
    let stats = busiest;
    let first = &g.work[0];
    let leaked_bytes = first.leaked.len() as u64 * config.leak_bytes;
    let (parameter_bytes, optimizer_state_bytes, oom) =
        (first.parameter_bytes, first.optimizer_state_bytes, g.oom);
    let (parameter_block_bytes, optimizer_state_block_bytes) = (
        first.parameter_block_bytes,
        first.optimizer_state_block_bytes,
    );
    let out = g.w.finish()?;
    Ok(WorkloadReport {
        iterations: completed,
        events: counts.total(),
        counts,
        bytes: out.bytes(),
        duration_ns,
        oom,
        leaked_bytes,
        parameter_bytes,
        optimizer_state_bytes,
        parameter_block_bytes,
        optimizer_state_block_bytes,
        peak_allocated: stats.allocated_bytes.all.peak,
        peak_reserved: stats.reserved_bytes.all.peak,
        final_allocated: stats.allocated_bytes.all.current,
        final_reserved: stats.reserved_bytes.all.current,
        elapsed: started.elapsed(),
    })
}

fn validate(c: &WorkloadConfig) -> Result<(), WorkloadError> {
    let bad = |m: &str| Err(WorkloadError::Invalid(m.to_string()));
    if c.layers == 0 || c.hidden == 0 || c.heads == 0 || c.vocab == 0 {
        return bad("layers, hidden, heads and vocab must be positive");
    }
    if c.layers > MAX_LAYERS {
        return bad(&format!(
            "{} layers: at most {MAX_LAYERS} are simulated",
            c.layers
        ));
    }
    if c.events.is_some_and(|n| n > MAX_EVENTS) {
        return bad(&format!(
            "{} events: at most {MAX_EVENTS} are written",
            c.events.unwrap_or(0)
        ));
    }
    if c.batch.0 == 0 || c.batch.0 > c.batch.1 {
        return bad("the batch range must be positive and ordered");
    }
    if c.seq_len.0 == 0 || c.seq_len.0 > c.seq_len.1 {
        return bad("the sequence length range must be positive and ordered");
    }
    if !(1..=2).contains(&c.streams) {
        return bad("streams must be 1 or 2");
    }
    if !(1..=64).contains(&c.devices) {
        return bad("devices must be 1 to 64");
    }
    if c.empty_cache_every == Some(0) {
        return bad("empty_cache_every must be positive");
    }
    if c.events.is_none() && c.iters == 0 {
        return bad("iters must be positive");
    }
    if c.leak_bytes > MAX_BLOCK_SIZE {
        return bad("leak_bytes is larger than any block an allocator hands out (4 EiB)");
    }
    if largest_tensor(c).is_none_or(|bytes| bytes > MAX_BLOCK_SIZE) {
        return bad(
            "the largest tensor (batch × sequence length × hidden size, heads or vocabulary) is larger than any block an allocator hands out (4 EiB)",
        );
    }
    Ok(())
}

/// The bytes of the largest tensor an iteration allocates at the largest
/// batch and sequence length, or `None` if it does not fit in 64 bits.
fn largest_tensor(c: &WorkloadConfig) -> Option<u64> {
    let seq = (c.seq_len.1 / 8).max(1).checked_mul(8)?;
    let tokens = c.batch.1.checked_mul(seq)?;
    let act = tokens.checked_mul(c.hidden)?.checked_mul(BF16)?;
    let scores = c
        .batch
        .1
        .checked_mul(c.heads)?
        .checked_mul(seq)?
        .checked_mul(seq)?
        .checked_mul(BF16)?;
    let logits = tokens.checked_mul(c.vocab)?.checked_mul(BF16)?;
    let embedding = c.vocab.checked_mul(c.hidden)?.checked_mul(F32)?;
    let weights = c.hidden.checked_mul(c.hidden)?.checked_mul(4 * F32)?;
    [
        tokens.checked_mul(8)?,
        act.checked_mul(4)?,
        scores,
        logits,
        embedding,
        weights,
    ]
    .into_iter()
    .max()
}

/// The configuration in one line, for the header's metadata.
fn describe(c: &WorkloadConfig) -> String {
    let mut s = format!(
        "seed={} layers={} hidden={} heads={} vocab={} batch={}..{} seq={}..{} streams={}",
        c.seed,
        c.layers,
        c.hidden,
        c.heads,
        c.vocab,
        c.batch.0,
        c.batch.1,
        c.seq_len.0,
        c.seq_len.1,
        c.streams
    );
    match c.events {
        Some(n) => s.push_str(&format!(" events={n}")),
        None => s.push_str(&format!(" iters={}", c.iters)),
    }
    if c.leak_bytes > 0 {
        s.push_str(&format!(" leak_bytes={}", c.leak_bytes));
    }
    if let Some(k) = c.empty_cache_every {
        s.push_str(&format!(" empty_cache_every={k}"));
    }
    if let Some(cap) = c.capacity {
        s.push_str(&format!(" capacity={cap}"));
    }
    if c.devices > 1 {
        s.push_str(&format!(" devices={}", c.devices));
    }
    if let Some(rank) = c.rank {
        s.push_str(&format!(" rank={rank}"));
    }
    if let Some(n) = c.world_size {
        s.push_str(&format!(" world_size={n}"));
    }
    if !c.tags {
        s.push_str(" tags=off");
    }
    s
}

/// An allocation failed for lack of memory: unwind the iteration.
struct OutOfMemory;

const BF16: u64 = 2;
const F32: u64 = 4;
const DATA_STREAM: u64 = 1;

struct Gen<'c, W: Write> {
    cfg: &'c WorkloadConfig,
    /// Each device's allocator and tensors.
    work: Vec<DeviceWork>,
    /// The device the body runs on now.
    cur: usize,
    w: TraceWriter<CountingWriter<W>>,
    sites: Sites,
    rng: u64,
    time_ns: u64,
    thread: u32,
    oom: Option<OomReport>,
    iteration: u64,
    /// The size of the block the last successful `malloc_on` got.
    last_block: u64,
}

/// One device of a run: its allocator and the tensors it holds.
struct DeviceWork {
    alloc: CachingAllocator<SimulatedDevice>,
    /// Tensors of the current iteration, freed if it is cut short.
    iter_live: FxHashSet<u64>,
    params: Vec<u64>,
    opt_state: Vec<u64>,
    leaked: Vec<u64>,
    parameter_bytes: u64,
    optimizer_state_bytes: u64,
    parameter_block_bytes: u64,
    optimizer_state_block_bytes: u64,
}

/// Per-iteration shape.
#[derive(Clone, Copy)]
struct Shape {
    batch: u64,
    seq: u64,
}

impl<W: Write> Gen<'_, W> {
    fn next(&mut self) -> u64 {
        // splitmix64: tiny, fast, and the same on every platform.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Notes the batch size and the sequence length, each when every
    /// iteration of the first device uses the same.
    fn annotate(&mut self) -> Result<(), WorkloadError> {
        let cfg = self.cfg;
        let mut notes = Vec::new();
        if cfg.batch.0 == cfg.batch.1 {
            notes.push(("batch", cfg.batch.0));
        }
        // Sequences are whole multiples of 8; ranks and devices past the
        // first carry longer ones.
        let seq = (cfg.seq_len.0 / 8).max(1) * 8;
        if cfg.seq_len.0 / 8 == cfg.seq_len.1 / 8 && cfg.rank.unwrap_or(0).is_multiple_of(8) {
            notes.push(("seq", seq));
        }
        for (key, value) in notes {
            let key = self.w.intern_string(key);
            let value = self.w.intern_string(&value.to_string());
            self.w.push(Event {
                time_ns: self.time_ns,
                data: EventData::Annotation { key, value },
            })?;
        }
        Ok(())
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// Moves the simulated clock as if a kernel touching `bytes` ran.
    fn tick(&mut self, bytes: u64) {
        let jitter = self.next() % 512;
        self.time_ns += 1_500 + bytes / 512 + jitter;
    }

    /// Calls the allocator with its events' origin set (the simulated
    /// clock, this thread, `stack`) and writes the events it reports.
    fn call<R>(
        &mut self,
        stack: StackId,
        f: impl FnOnce(&mut CachingAllocator<SimulatedDevice>) -> R,
    ) -> Result<R, WorkloadError> {
        self.work[self.cur].alloc.set_event_origin(EventOrigin {
            time_ns: self.time_ns,
            stack,
            thread: self.thread,
        });
        let result = f(&mut self.work[self.cur].alloc);
        for event in self.work[self.cur].alloc.event_log_mut().drain(..) {
            self.w.push(event)?;
        }
        Ok(result)
    }

    /// Tags blocks of the current device, as a recorder's walk at the
    /// optimizer step does: at the moment of the walk, without moving the
    /// clock (so the trace's memory and times are those of an untagged one).
    fn tag(
        &mut self,
        addrs: impl IntoIterator<Item = u64>,
        category: Category,
    ) -> Result<(), WorkloadError> {
        if !self.cfg.tags {
            return Ok(());
        }
        let device = self.work[self.cur].alloc.device().index();
        for addr in addrs {
            self.w.push(Event {
                time_ns: self.time_ns,
                data: EventData::Tag(TagEvent {
                    addr,
                    device,
                    thread: self.thread,
                    code: category.code(),
                }),
            })?;
        }
        Ok(())
    }

    fn marker(&mut self, data: EventData) -> Result<(), WorkloadError> {
        self.time_ns += 100;
        self.w.push(Event {
            time_ns: self.time_ns,
            data,
        })?;
        Ok(())
    }

    /// Allocates; `Ok(Err(OutOfMemory))` when the device is full (the `Oom`
    /// event is written).
    fn malloc_on(
        &mut self,
        bytes: u64,
        stream: u64,
        stack: StackId,
    ) -> Result<Result<u64, OutOfMemory>, WorkloadError> {
        self.tick(bytes);
        let result = self.call(stack, |a| a.malloc(bytes, stream))?;
        match result {
            Ok(a) => {
                self.last_block = a.size;
                Ok(Ok(a.addr))
            }
            Err(AllocError::OutOfMemory {
                requested,
                free_bytes,
            }) => {
                self.oom = Some(OomReport {
                    iteration: self.iteration,
                    requested,
                    free_bytes,
                });
                Ok(Err(OutOfMemory))
            }
            Err(e) => Err(WorkloadError::Alloc(e)),
        }
    }

    /// Allocates a tensor of the current iteration.
    fn local(
        &mut self,
        bytes: u64,
        stack: StackId,
    ) -> Result<Result<u64, OutOfMemory>, WorkloadError> {
        let r = self.malloc_on(bytes, 0, stack)?;
        if let Ok(addr) = r {
            self.work[self.cur].iter_live.insert(addr);
        }
        Ok(r)
    }

    fn free(&mut self, addr: u64, stack: StackId) -> Result<(), WorkloadError> {
        self.work[self.cur].iter_live.remove(&addr);
        self.time_ns += 300 + self.next() % 128;
        self.call(stack, |a| a.free(addr))?
            .map_err(WorkloadError::Alloc)
    }

    fn run(&mut self, progress: &mut dyn FnMut(RunProgress)) -> Result<u64, WorkloadError> {
        let step = self.w.intern_string("step");
        for device in 0..self.work.len() {
            self.cur = device;
            if self.init_parameters()?.is_err() {
                return Ok(0);
            }
        }
        let mut completed = 0;
        // Events before the first iteration (parameters): the rest is per
        // iteration.
        let before = self.w.counts().total();
        loop {
            let done = match self.cfg.events {
                Some(n) => self.w.counts().total() >= n,
                None => completed >= self.cfg.iters,
            };
            if done {
                break;
            }
            self.iteration = completed;
            let name = self.w.intern_string(&format!("iter{completed}"));
            let value = self.w.intern_string(&completed.to_string());
            self.marker(EventData::PhaseBegin { name, thread: 0 })?;
            self.marker(EventData::Annotation { key: step, value })?;
            let mut open = vec![name];
            let mut failed = false;
            for device in 0..self.work.len() {
                self.cur = device;
                if self.iteration_body(&mut open)?.is_err() {
                    failed = true;
                    break;
                }
            }
            if failed {
                self.unwind(&mut open)?;
                break;
            }
            self.marker(EventData::PhaseEnd { name, thread: 0 })?;
            completed += 1;
            let events = self.w.counts().total();
            if completed == 1 && self.cfg.events.is_none() {
                // Every iteration writes about as many events as the first
                // (its batch and sequence drawn from the same ranges).
                let estimate = (self.cfg.iters - 1)
                    .saturating_mul(events.saturating_sub(before))
                    .saturating_add(events);
                if estimate > MAX_EVENTS {
                    return Err(WorkloadError::Invalid(format!(
                        "{} iterations of {} events would write about {estimate} events: at most {MAX_EVENTS} are written",
                        self.cfg.iters,
                        events.saturating_sub(before)
                    )));
                }
            }
            progress(RunProgress {
                iterations: completed,
                events,
            });
        }
        Ok(completed)
    }

    /// Releases what a failed iteration held and closes its phases.
    fn unwind(&mut self, open: &mut Vec<StringId>) -> Result<(), WorkloadError> {
        let mut live: Vec<u64> = self.work[self.cur].iter_live.iter().copied().collect();
        live.sort_unstable();
        let stack = self.sites.oom_unwind;
        for addr in live.into_iter().rev() {
            self.free(addr, stack)?;
        }
        self.call(stack, |a| a.synchronize())?;
        while let Some(name) = open.pop() {
            self.marker(EventData::PhaseEnd { name, thread: 0 })?;
        }
        Ok(())
    }

    fn layer_params(&self) -> [u64; 6] {
        let h = self.cfg.hidden;
        // qkv, out proj, mlp up, mlp down, two norms.
        [3 * h * h, h * h, 4 * h * h, 4 * h * h, 2 * h, 2 * h].map(|n| n * F32)
    }

    fn init_parameters(&mut self) -> Result<Result<(), OutOfMemory>, WorkloadError> {
        let embed = self.cfg.vocab * self.cfg.hidden * F32;
        let mut sizes = vec![embed];
        for _ in 0..self.cfg.layers {
            sizes.extend(self.layer_params());
        }
        sizes.push(2 * self.cfg.hidden * F32);
        for bytes in sizes {
            match self.malloc_on(bytes, 0, self.sites.param_init)? {
                Ok(addr) => {
                    self.work[self.cur].params.push(addr);
                    self.work[self.cur].parameter_bytes += bytes;
                    self.work[self.cur].parameter_block_bytes += self.last_block;
                }
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(()))
    }

    fn param_sizes(&self) -> Vec<u64> {
        let mut sizes = vec![self.cfg.vocab * self.cfg.hidden * F32];
        for _ in 0..self.cfg.layers {
            sizes.extend(self.layer_params());
        }
        sizes.push(2 * self.cfg.hidden * F32);
        sizes
    }

    fn iteration_body(
        &mut self,
        open: &mut Vec<StringId>,
    ) -> Result<Result<(), OutOfMemory>, WorkloadError> {
        macro_rules! try_oom {
            ($e:expr) => {
                match $e? {
                    Ok(v) => v,
                    Err(oom) => return Ok(Err(oom)),
                }
            };
        }
        let cfg = self.cfg;
        let (b0, b1) = cfg.batch;
        // Ranks and devices past the first carry longer sequences.
        let longer = 8 * (u64::from(cfg.rank.unwrap_or(0) % 8) + self.cur as u64);
        let (s0, s1) = (cfg.seq_len.0 + longer, cfg.seq_len.1 + longer);
        let shape = Shape {
            batch: self.range(b0, b1),
            seq: self.range(s0 / 8, s1 / 8).max(1) * 8,
        };
        let (h, tokens) = (cfg.hidden, shape.batch * shape.seq);
        let act = tokens * h * BF16;
        let s = self.sites;

        // The input batch: token ids, loaded on the data stream by another
        // thread when there are two streams.
        let input = if cfg.streams == 2 {
            self.thread = 1;
            let addr = try_oom!(self.malloc_on(tokens * 8, DATA_STREAM, s.data_loader));
            self.thread = 0;
            self.work[self.cur].iter_live.insert(addr);
            self.work[self.cur]
                .alloc
                .record_stream(addr, 0)
                .map_err(WorkloadError::Alloc)?;
            addr
        } else {
            try_oom!(self.local(tokens * 8, s.data_loader))
        };

        // Forward: activations saved per layer for backward.
        let forward = self.w.intern_string("forward");
        self.marker(EventData::PhaseBegin {
            name: forward,
            thread: 0,
        })?;
        open.push(forward);
        let embed_out = try_oom!(self.local(act, s.embedding));
        let mut saved: Vec<Vec<u64>> = Vec::with_capacity(cfg.layers as usize);
        for _ in 0..cfg.layers {
            let mut keep = Vec::with_capacity(10);
            keep.push(try_oom!(self.local(act, s.norm)));
            keep.push(try_oom!(self.local(3 * act, s.qkv)));
            let scores_bytes = shape.batch * cfg.heads * shape.seq * shape.seq * BF16;
            let scores = try_oom!(self.local(scores_bytes, s.attn_scores));
            keep.push(try_oom!(self.local(scores_bytes, s.softmax)));
            self.free(scores, s.attn_scores)?;
            keep.push(try_oom!(self.local(act, s.attn_out)));
            keep.push(try_oom!(self.local(act, s.norm)));
            keep.push(try_oom!(self.local(4 * act, s.mlp_up)));
            keep.push(try_oom!(self.local(4 * act, s.gelu)));
            keep.push(try_oom!(self.local(act, s.mlp_down)));
            saved.push(keep);
        }
        let logits = try_oom!(self.local(tokens * cfg.vocab * BF16, s.head));
        let loss = try_oom!(self.local(F32, s.loss));
        self.marker(EventData::PhaseEnd {
            name: forward,
            thread: 0,
        })?;
        open.pop();

        // Backward: gradients flow back layer by layer; saved activations are
        // released as their layer is done; parameter gradients stay until
        // zero_grad.
        let backward = self.w.intern_string("backward");
        self.marker(EventData::PhaseBegin {
            name: backward,
            thread: 0,
        })?;
        open.push(backward);
        let grad_logits = try_oom!(self.local(tokens * cfg.vocab * BF16, s.grad_head));
        self.free(logits, s.autograd_free)?;
        self.free(loss, s.autograd_free)?;
        let mut grads = Vec::with_capacity(self.work[self.cur].params.len());
        let final_norm = *self.param_sizes().last().unwrap_or(&0);
        grads.push(try_oom!(self.local(final_norm, s.accumulate_grad)));
        let mut grad_out = try_oom!(self.local(act, s.grad_linear));
        self.free(grad_logits, s.autograd_free)?;
        for keep in saved.into_iter().rev() {
            for bytes in self.layer_params().into_iter().rev() {
                let tmp = try_oom!(self.local(act.max(bytes / 2), s.grad_linear));
                grads.push(try_oom!(self.local(bytes, s.accumulate_grad)));
                self.free(tmp, s.autograd_free)?;
            }
            let grad_in = try_oom!(self.local(act, s.grad_attention));
            self.free(grad_out, s.autograd_free)?;
            grad_out = grad_in;
            for addr in keep.into_iter().rev() {
                self.free(addr, s.autograd_free)?;
            }
        }
        grads.push(try_oom!(self.local(cfg.vocab * h * F32, s.grad_embedding)));
        self.free(grad_out, s.autograd_free)?;
        self.free(embed_out, s.autograd_free)?;
        self.marker(EventData::PhaseEnd {
            name: backward,
            thread: 0,
        })?;
        open.pop();

        // Optimizer: Adam state at the first step, per-layer temporaries, then
        // zero_grad frees the gradients.
        let optimizer = self.w.intern_string("optimizer");
        self.marker(EventData::PhaseBegin {
            name: optimizer,
            thread: 0,
        })?;
        open.push(optimizer);
        let first_step = self.work[self.cur].opt_state.is_empty();
        if first_step {
            for bytes in self.param_sizes() {
                for _ in 0..2 {
                    let addr = try_oom!(self.malloc_on(bytes, 0, s.adam_init));
                    self.work[self.cur].opt_state.push(addr);
                    self.work[self.cur].optimizer_state_bytes += bytes;
                    self.work[self.cur].optimizer_state_block_bytes += self.last_block;
                }
            }
        }
        for bytes in self.layer_params().into_iter().take(4) {
            let tmp = try_oom!(self.local(bytes, s.adam_step));
            self.free(tmp, s.adam_step)?;
        }
        // The recorder's walk after the step: parameters and state when
        // first seen (they never move here), each step's new gradients.
        if first_step {
            let params = std::mem::take(&mut self.work[self.cur].params);
            self.tag(params.iter().copied(), Category::Parameter)?;
            self.work[self.cur].params = params;
        }
        self.tag(grads.iter().copied(), Category::Gradient)?;
        if first_step {
            let state = std::mem::take(&mut self.work[self.cur].opt_state);
            self.tag(state.iter().copied(), Category::OptimizerState)?;
            self.work[self.cur].opt_state = state;
        }
        for g in grads {
            self.free(g, s.zero_grad)?;
        }
        self.marker(EventData::PhaseEnd {
            name: optimizer,
            thread: 0,
        })?;
        open.pop();

        if cfg.leak_bytes > 0 {
            let addr = try_oom!(self.malloc_on(cfg.leak_bytes, 0, s.leak));
            self.work[self.cur].leaked.push(addr);
        }
        self.free(input, s.data_free)?;
        if cfg.streams == 2 {
            // The compute stream's work is done: the input's free completes.
            self.time_ns += 1_000;
            self.call(s.data_free, |a| a.synchronize_stream(0))?;
        }
        if let Some(k) = cfg.empty_cache_every
            && (self.iteration + 1).is_multiple_of(k)
        {
            self.time_ns += 1_000;
            self.call(s.empty_cache, |a| a.empty_cache())?;
        }
        debug_assert!(self.work[self.cur].iter_live.is_empty());
        Ok(Ok(()))
    }
}

#[cfg(test)]
mod tests;
