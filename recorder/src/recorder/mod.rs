//! [`Recorder`]: a [`CachingAllocator`] that writes every event it causes to
//! a trace, with time, thread and stack.
//!
//! The hot path (an allocator call from any thread) does as little as
//! possible: it captures raw instruction pointers (when native stacks are on)
//! and, on allocations, the frames of a [`FrameSource`] (an interpreter's,
//! as opaque code keys and lines) before taking the lock, then, under the allocator lock, runs the
//! allocator, reads the clock (so event times are monotonic in trace order),
//! interns the stack by its pointer list, and appends the stamped events to a
//! buffer. A full buffer is handed over a bounded channel to a writer thread,
//! which symbolizes new addresses and names new codes (each once), encodes chunks and writes them.
//!
//! The lock is a `BiasedMutex` (`biased.rs`): the thread that takes it most
//! (in practice the one allocating) enters without an atomic
//! read-modify-write, which on the machines we measured was the difference
//! between a time-stamp counter read of 1 to 30 ns and one of 20 to 60.
//!
//! Recording never changes what the allocator decides: it only reads the
//! events the allocator reports.

mod biased;
mod clock;
mod stacks;
mod writer;

use crate::allocator::{AllocError, Allocation, AllocatorStats, CachingAllocator, EventOrigin};
use crate::device::DeviceMemory;
use crate::format::{
    DeviceInfo, Event, EventData, FormatError, Header, KindCounts, ProcessInfo, StackId, StringId,
    TraceWriter, WriterOptions,
};
use biased::{BiasedGuard, BiasedMutex};
use clock::Clock;
use rustc_hash::FxHashMap;
use stacks::StackBuf;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use writer::{Batch, Msg, WriterSummary};

pub use stacks::{CodeInfo, FrameSink, FrameSource, MAX_STACK_DEPTH, capture_frames};

/// The most events the recorder buffers before handing them to the writer
/// thread.
const BATCH_EVENTS: usize = 4096;

/// Room a buffer has beyond `batch_events`: the buffer is handed over once a
/// call leaves it at least that full, so the call that crosses the line
/// writes past it (a free writes two events, an allocation up to three).
/// Without the room, such a call reallocated a fresh buffer (copying it and
/// faulting in twice the memory): in callgrind, 13 reallocations per 100k
/// pairs, 10 instructions a pair. A rare call with more events (`empty_cache`,
/// `synchronize`) may still grow a buffer, once.
const CALL_EVENTS: usize = 64;

/// Which stacks the recorder captures for allocator events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StackMode {
    /// No stacks: every event carries [`StackId::NONE`].
    #[default]
    None,
    /// Native stacks: raw instruction pointers captured on each call,
    /// symbolized once per distinct address on the writer thread (to
    /// function, file and line where debug information allows, else to module
    /// and offset).
    Native,
}

/// How a [`Recorder`] records.
#[derive(Clone, Debug)]
pub struct RecorderOptions {
    /// Which native stacks to capture.
    pub stacks: StackMode,
    /// Frames of an interpreter (Python's, from `libvramtrace_recorder`)
    /// captured on each allocation, outside the native frames when those are
    /// on. Frees, synchronizations and `empty_cache` get native frames only:
    /// what allocated is the question stacks answer, and a source's walk
    /// costs more than an unwinder's.
    pub frame_source: Option<Arc<dyn FrameSource>>,
    /// The most frames kept per native stack, and per source stack (each at
    /// most [`MAX_STACK_DEPTH`]).
    pub max_stack_depth: usize,
    /// Events per chunk of the trace.
    pub chunk_events: usize,
    /// A buffer is also handed over (and the file flushed) once its events
    /// span this long, so a killed process loses at most about this much.
    /// Checked when an event is recorded.
    pub chunk_interval: Option<Duration>,
    /// Batches (of up to 4096 events) that may wait for the writer thread
    /// before recording blocks: backpressure rather than unbounded memory or
    /// lost events.
    pub queue_batches: usize,
    /// The header's start time; `None` reads the system clock.
    pub start_unix_ns: Option<u64>,
    /// The header's process; `None` describes this process.
    pub process: Option<ProcessInfo>,
    /// Extra header metadata.
    pub metadata: BTreeMap<String, String>,
}

impl Default for RecorderOptions {
    fn default() -> Self {
        RecorderOptions {
            stacks: StackMode::None,
            frame_source: None,
            max_stack_depth: 64,
            chunk_events: 64 * 1024,
            chunk_interval: Some(Duration::from_secs(1)),
            queue_batches: 64,
            start_unix_ns: None,
            process: None,
            metadata: BTreeMap::new(),
        }
    }
}

/// Why recording failed.
#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    /// The trace file could not be created.
    #[error("cannot create {}: {source}", path.display())]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Writing the trace failed.
    #[error("cannot write the trace: {0}")]
    Format(#[from] FormatError),
    /// The writer thread could not be started.
    #[error("cannot start the trace writer thread: {0}")]
    Spawn(io::Error),
    /// The writer thread panicked (a bug); the trace ends where it stopped.
    #[error("the trace writer thread panicked")]
    WriterPanicked,
    /// The writer thread failed (the full error is returned by
    /// [`Recorder::finish`]); recording goes on dropping events.
    #[error("the trace writer stopped: {0}")]
    WriterStopped(String),
    /// The recording was finished already.
    #[error("the recording is finished")]
    Finished,
    /// [`Recorder::phase_end`] without an open phase.
    #[error("no phase is open")]
    NoOpenPhase,
}

/// What a finished recording wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordingSummary {
    /// Events written.
    pub events: u64,
    /// Events by kind.
    pub counts: KindCounts,
    /// Bytes written.
    pub bytes: u64,
    /// Distinct native stacks recorded.
    pub stacks: u64,
    /// Distinct instruction addresses symbolized.
    pub addresses: u64,
    /// Distinct codes of the frame source named.
    pub codes: u64,
    /// The allocator's statistics at the end.
    pub allocator: AllocatorStats,
}

/// A caching allocator that records. See the [module docs](self).
///
/// `Recorder` is `Send + Sync` when the device is `Send`: share it (`&self`,
/// an `Arc`, a static) between the threads that allocate.
pub struct Recorder<D: DeviceMemory> {
    inner: BiasedMutex<Inner<D>>,
    stacks: StackMode,
    source: Option<Arc<dyn FrameSource>>,
    max_depth: usize,
    writer: Mutex<Option<JoinHandle<Result<WriterSummary, FormatError>>>>,
}

struct Inner<D: DeviceMemory> {
    alloc: CachingAllocator<D>,
    /// Read under the lock, so that event times are monotonic in trace order.
    clock: Clock,
    recording: bool,
    batch_events: usize,
    interval_ns: u64,
    /// Time of the first event of the buffer (the allocator's event log).
    buf_start_ns: Option<u64>,
    /// Recorder-local ids: the writer thread maps them to the trace's, since
    /// symbolization interns strings of its own there.
    strings: FxHashMap<Box<str>, StringId>,
    new_strings: Vec<Box<str>>,
    stack_ids: FxHashMap<Box<[usize]>, StackId>,
    new_stacks: Vec<Box<[usize]>>,
    open_phases: Vec<StringId>,
    tx: Option<SyncSender<Msg>>,
    spare: Receiver<Vec<Event>>,
}

/// Ends its phase when dropped. See [`Recorder::phase`].
#[must_use = "the phase ends when the guard is dropped"]
pub struct PhaseGuard<'r, D: DeviceMemory> {
    recorder: &'r Recorder<D>,
    name: StringId,
}

impl<D: DeviceMemory> Drop for PhaseGuard<'_, D> {
    fn drop(&mut self) {
        self.recorder.end_phase(self.name);
    }
}

/// A small id for the calling OS thread, the same for every recorder of the
/// process (so traces of several devices agree), assigned on first use.
#[inline]
pub fn thread_id() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    thread_local! {
        static ID: Cell<u32> = const { Cell::new(u32::MAX) };
    }
    ID.with(|id| {
        let v = id.get();
        if v != u32::MAX {
            return v;
        }
        let v = NEXT.fetch_add(1, Ordering::Relaxed);
        id.set(v);
        v
    })
}

impl<D: DeviceMemory> Recorder<D> {
    /// Starts recording `allocator` to `out`: writes the header and starts the
    /// writer thread.
    pub fn new(
        mut allocator: CachingAllocator<D>,
        out: impl Write + Send + 'static,
        options: RecorderOptions,
    ) -> Result<Self, RecorderError> {
        let clock = Clock::start();
        let start_unix_ns = options.start_unix_ns.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
        let device = allocator.device();
        let mut metadata = options.metadata.clone();
        metadata.entry("stacks".into()).or_insert_with(|| {
            match (options.stacks, &options.frame_source) {
                (StackMode::None, None) => "none".into(),
                (StackMode::Native, None) => "native".into(),
                (StackMode::None, Some(s)) => s.name().into(),
                (StackMode::Native, Some(s)) => format!("native+{}", s.name()),
            }
        });
        let header = Header {
            producer: "vramtrace-recorder".into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            start_unix_ns,
            process: options.process.clone().unwrap_or_else(ProcessInfo::current),
            devices: vec![DeviceInfo {
                index: device.index(),
                name: device.name().to_string(),
                total_memory: device.total_memory(),
            }],
            allocator_settings: allocator.config().to_settings(),
            metadata,
            ..Header::default()
        };
        let chunk_events = options.chunk_events.max(1);
        // Buffers handed to the writer stay small enough to be cache-resident:
        // a 64k-event buffer made each push a cache miss.
        let batch_events = chunk_events.min(BATCH_EVENTS);
        let trace = TraceWriter::with_options(
            writer::Counting::new(out),
            header,
            WriterOptions {
                chunk_events,
                // The recorder hands buffers over on its own interval.
                chunk_interval: None,
            },
        )?;
        let queue = options.queue_batches.max(1);
        let (tx, rx) = sync_channel(queue);
        let (spare_tx, spare_rx) = sync_channel(queue + 2);
        let source = options.frame_source.clone();
        let handle = std::thread::Builder::new()
            .name("vramtrace-writer".into())
            .spawn(move || writer::run(trace, rx, spare_tx, source))
            .map_err(RecorderError::Spawn)?;
        // Events from before recording (a used allocator) belong to no trace.
        // The allocator's event log is the recorder's buffer (see `call`).
        *allocator.event_log_mut() = Vec::with_capacity(batch_events + CALL_EVENTS);
        allocator.set_event_log(true);
        Ok(Recorder {
            inner: BiasedMutex::new(Inner {
                alloc: allocator,
                clock,
                recording: true,
                batch_events,
                interval_ns: options
                    .chunk_interval
                    .map_or(u64::MAX, |d| d.as_nanos().min(u64::MAX as u128) as u64),
                buf_start_ns: None,
                strings: FxHashMap::default(),
                new_strings: Vec::new(),
                stack_ids: FxHashMap::default(),
                new_stacks: Vec::new(),
                open_phases: Vec::new(),
                tx: Some(tx),
                spare: spare_rx,
            }),
            stacks: options.stacks,
            source: options.frame_source,
            max_depth: options.max_stack_depth.min(MAX_STACK_DEPTH),
            writer: Mutex::new(Some(handle)),
        })
    }

    /// Starts recording `allocator` to a new file at `path`.
    pub fn create(
        path: impl AsRef<Path>,
        allocator: CachingAllocator<D>,
        options: RecorderOptions,
    ) -> Result<Self, RecorderError> {
        let path = path.as_ref();
        let file = std::fs::File::create(path).map_err(|source| RecorderError::Create {
            path: path.to_path_buf(),
            source,
        })?;
        Self::new(
            allocator,
            io::BufWriter::with_capacity(1 << 20, file),
            options,
        )
    }

    /// Allocates a block of at least `size` bytes for `stream`, recording the
    /// `Alloc` (and any segment or `Oom`) event.
    #[inline(never)]
    pub fn malloc(&self, size: u64, stream: u64) -> Result<Allocation, AllocError> {
        if self.stacks == StackMode::None && self.source.is_none() {
            // Nothing to capture: the most common call skips the stack buffer.
            return self.call(&[], |a| a.malloc(size, stream));
        }
        let marker = 0u8;
        let mut stack = StackBuf::new();
        self.capture(&marker, &mut stack);
        if let Some(source) = &self.source {
            stack.capture_external(&**source, self.max_depth);
        }
        self.seal(&mut stack);
        self.call(stack.as_slice(), |a| a.malloc(size, stream))
    }

    /// Frees the block at `addr`, recording `FreeRequested` (and
    /// `FreeCompleted` unless other streams still use it).
    #[inline(never)]
    pub fn free(&self, addr: u64) -> Result<(), AllocError> {
        if self.stacks == StackMode::None {
            // Frees get native stacks only: nothing to capture.
            return self.call(&[], |a| a.free(addr));
        }
        let marker = 0u8;
        let mut stack = StackBuf::new();
        self.capture(&marker, &mut stack);
        self.seal(&mut stack);
        self.call(stack.as_slice(), |a| a.free(addr))
    }

    /// Notes that the block at `addr` is used on `stream` too (nothing is
    /// recorded: the free's events show the effect).
    pub fn record_stream(&self, addr: u64, stream: u64) -> Result<(), AllocError> {
        self.lock().alloc.record_stream(addr, stream)
    }

    /// Marks `stream`'s queued work complete, recording the `FreeCompleted`
    /// of blocks that were waiting for it.
    #[inline(never)]
    pub fn synchronize_stream(&self, stream: u64) {
        let marker = 0u8;
        let mut stack = StackBuf::new();
        self.capture(&marker, &mut stack);
        self.seal(&mut stack);
        self.call(stack.as_slice(), |a| a.synchronize_stream(stream));
    }

    /// Marks every stream's work complete (`torch.cuda.synchronize()`).
    #[inline(never)]
    pub fn synchronize(&self) {
        let marker = 0u8;
        let mut stack = StackBuf::new();
        self.capture(&marker, &mut stack);
        self.seal(&mut stack);
        self.call(stack.as_slice(), |a| a.synchronize());
    }

    /// Returns the cache to the device, recording `EmptyCache` then the
    /// segment frees.
    #[inline(never)]
    pub fn empty_cache(&self) {
        let marker = 0u8;
        let mut stack = StackBuf::new();
        self.capture(&marker, &mut stack);
        self.seal(&mut stack);
        self.call(stack.as_slice(), |a| a.empty_cache());
    }

    /// Begins a phase that ends when the returned guard is dropped. Phases nest.
    pub fn phase(&self, name: &str) -> PhaseGuard<'_, D> {
        let name = self.begin_phase(name);
        PhaseGuard {
            recorder: self,
            name,
        }
    }

    /// Begins a phase, to be ended by [`phase_end`](Self::phase_end) (for
    /// callers that cannot hold a guard, such as a C API).
    pub fn phase_begin(&self, name: &str) {
        self.begin_phase(name);
    }

    /// Ends the innermost open phase.
    pub fn phase_end(&self) -> Result<(), RecorderError> {
        let mut g = self.lock();
        let name = g.open_phases.pop().ok_or(RecorderError::NoOpenPhase)?;
        self.push_marker(&mut g, EventData::PhaseEnd { name });
        Ok(())
    }

    /// Records a key/value note (a step number, a config value).
    pub fn annotate(&self, key: &str, value: &str) {
        let mut g = self.lock();
        let key = g.intern(key);
        let value = g.intern(value);
        self.push_marker(&mut g, EventData::Annotation { key, value });
    }

    /// Writes everything recorded so far to the output and flushes it; waits
    /// for the writer thread (without holding the allocator lock).
    pub fn flush(&self) -> Result<(), RecorderError> {
        let tx = {
            let mut g = self.lock();
            g.handoff(true);
            g.tx.clone()
        };
        let tx = tx.ok_or(RecorderError::Finished)?;
        let (ack_tx, ack_rx) = sync_channel(1);
        tx.send(Msg::Sync(ack_tx))
            .map_err(|_| RecorderError::WriterStopped("the writer thread is gone".into()))?;
        match ack_rx.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(RecorderError::WriterStopped(e)),
            Err(_) => Err(RecorderError::WriterStopped(
                "the writer thread is gone".into(),
            )),
        }
    }

    /// The allocator's statistics now.
    pub fn stats(&self) -> AllocatorStats {
        *self.lock().alloc.stats()
    }

    /// The allocated block at `addr`, if any.
    pub fn allocation(&self, addr: u64) -> Option<Allocation> {
        self.lock().alloc.allocation(addr)
    }

    /// Runs `f` on the allocator, under the lock (for inspection: it must not
    /// block).
    pub fn with_allocator<R>(&self, f: impl FnOnce(&CachingAllocator<D>) -> R) -> R {
        f(&self.lock().alloc)
    }

    /// Ends the recording: writes the remaining events and the footer, and
    /// joins the writer thread. The allocator keeps working afterwards,
    /// without recording. A second call returns [`RecorderError::Finished`].
    pub fn finish(&self) -> Result<RecordingSummary, RecorderError> {
        let allocator = {
            let mut g = self.lock();
            if !g.recording {
                return Err(RecorderError::Finished);
            }
            g.handoff(false);
            g.recording = false;
            g.alloc.set_event_log(false);
            // Closing the channel tells the writer thread to finish.
            g.tx = None;
            *g.alloc.stats()
        };
        let handle = self
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or(RecorderError::Finished)?;
        let summary = handle.join().map_err(|_| RecorderError::WriterPanicked)??;
        Ok(RecordingSummary {
            events: summary.counts.total(),
            counts: summary.counts,
            bytes: summary.bytes,
            stacks: summary.stacks,
            addresses: summary.addresses,
            codes: summary.codes,
            allocator,
        })
    }

    #[inline(always)]
    fn lock(&self) -> BiasedGuard<'_, Inner<D>> {
        // A panic elsewhere while holding the lock leaves consistent-enough
        // state for recording to go on: the lock does not poison.
        self.inner.lock()
    }

    /// Captures the caller's native stack, if on. `marker` is a local of the
    /// public entry point: frames below it are the recorder's own.
    #[inline(always)]
    fn capture(&self, marker: &u8, buf: &mut StackBuf) {
        if self.stacks == StackMode::Native {
            stacks::capture(marker as *const u8 as usize, self.max_depth, buf);
        }
    }

    /// Ends the stack key in the layout the writer expects.
    #[inline(always)]
    fn seal(&self, buf: &mut StackBuf) {
        if self.source.is_some() {
            buf.seal();
        }
    }

    /// Calls the allocator under the lock with its events' origin set (the
    /// time the call began, the calling thread, the stack of the key `stack`,
    /// none if empty). The events land
    /// finished in the allocator's log, which is this recorder's buffer.
    #[inline(always)]
    fn call<R>(&self, stack: &[usize], f: impl FnOnce(&mut CachingAllocator<D>) -> R) -> R {
        let mut g = self.lock();
        if !g.recording {
            return f(&mut g.alloc);
        }
        let time_ns = g.clock.now_ns();
        let stack = if stack.is_empty() {
            StackId::NONE
        } else {
            g.stack_id(stack)
        };
        g.alloc.set_event_origin(EventOrigin {
            time_ns,
            stack,
            thread: thread_id(),
        });
        let result = f(&mut g.alloc);
        g.after_push(time_ns);
        result
    }

    fn push_marker(&self, g: &mut Inner<D>, data: EventData) {
        if !g.recording {
            return;
        }
        let time_ns = g.clock.now_ns();
        g.alloc.event_log_mut().push(Event { time_ns, data });
        g.after_push(time_ns);
    }

    fn begin_phase(&self, name: &str) -> StringId {
        let mut g = self.lock();
        let name = g.intern(name);
        g.open_phases.push(name);
        self.push_marker(&mut g, EventData::PhaseBegin { name });
        name
    }

    fn end_phase(&self, name: StringId) {
        let mut g = self.lock();
        // A guard's phase may have been ended by phase_end() already.
        if let Some(i) = g.open_phases.iter().rposition(|&n| n == name) {
            g.open_phases.remove(i);
            self.push_marker(&mut g, EventData::PhaseEnd { name });
        }
    }
}

impl<D: DeviceMemory> Inner<D> {
    fn intern(&mut self, s: &str) -> StringId {
        if s.is_empty() {
            return StringId::EMPTY;
        }
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = StringId(self.strings.len() as u32 + 1);
        self.strings.insert(s.into(), id);
        self.new_strings.push(s.into());
        id
    }

    fn stack_id(&mut self, ips: &[usize]) -> StackId {
        if let Some(&id) = self.stack_ids.get(ips) {
            return id;
        }
        let id = StackId(self.stack_ids.len() as u32 + 1);
        self.stack_ids.insert(ips.into(), id);
        self.new_stacks.push(ips.into());
        id
    }

    #[inline]
    fn after_push(&mut self, time_ns: u64) {
        let start = *self.buf_start_ns.get_or_insert(time_ns);
        if self.alloc.event_log_mut().len() >= self.batch_events {
            self.handoff(false);
        } else if time_ns - start >= self.interval_ns {
            self.handoff(true);
        }
    }

    /// Sends the buffer (and the symbols it needs) to the writer thread.
    fn handoff(&mut self, flush: bool) {
        self.buf_start_ns = None;
        let Some(tx) = &self.tx else {
            self.alloc.event_log_mut().clear();
            return;
        };
        if self.alloc.event_log_mut().is_empty()
            && self.new_strings.is_empty()
            && self.new_stacks.is_empty()
        {
            return;
        }
        let fresh = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(self.batch_events + CALL_EVENTS));
        let batch = Batch {
            strings: std::mem::take(&mut self.new_strings),
            stacks: std::mem::take(&mut self.new_stacks),
            events: std::mem::replace(self.alloc.event_log_mut(), fresh),
            flush,
        };
        if tx.send(Msg::Batch(batch)).is_err() {
            // The writer thread is gone (it panicked): keep allocating, stop
            // recording; finish() reports it.
            self.tx = None;
        }
    }
}

impl<D: DeviceMemory> Drop for Recorder<D> {
    fn drop(&mut self) {
        // Best effort: a recorder dropped without finish() still closes the
        // trace with a footer.
        let _ = self.finish();
    }
}

#[cfg(test)]
mod tests;
