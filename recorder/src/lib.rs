//! # vramtrace-recorder
//!
//! The recording half of vramtrace, above the trace format
//! ([`vramtrace_format`], re-exported here as [`format`](mod@format)):
//! [`Recorder`], a caching allocator that records every event it causes,
//! with time, thread and stack, to a trace file; and [`Observer`], which
//! records another allocator's events (PyTorch's). [`allocator`],
//! [`device`] and [`workload`] (the caching allocator with PyTorch's
//! policy, its devices and a synthetic workload) come from their own crate
//! ([`vramtrace_allocator`]), re-exported here.
//!
//! A program that only reads or writes traces needs `vramtrace-format`
//! alone, and one that simulates `vramtrace-allocator`: this crate adds the
//! clock, the stack unwinder and the writer thread.
//!
//! ## Recording
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

#![warn(missing_docs)]

/// The caching allocator, from its own crate ([`vramtrace_allocator`]):
/// code that says `allocator::CachingAllocator` keeps working.
pub use vramtrace_allocator as allocator;
pub use vramtrace_allocator::{device, workload};

/// The trace format, from its own crate: code that says `format::TraceWriter`
/// keeps working.
pub use vramtrace_format as format;

/// The recorder's items by the path they had when they lived in a module of
/// that name (`vramtrace_recorder::recorder::Recorder`), so that code
/// written against it keeps compiling; new code names them at the root.
#[doc(hidden)]
pub use crate as recorder;

mod biased;
mod clock;
mod live;
mod observer;
mod recording;
mod ring;
mod stacks;
mod trace;
mod writer;

use crate::allocator::{AllocError, Allocation, AllocatorStats, CachingAllocator, EventOrigin};
use crate::device::DeviceMemory;
use crate::format::{DeviceInfo, Event, FormatError, Header, ProcessInfo};
use recording::{EventBuffer, Recording};
use stacks::{StackBuf, StackKey};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use writer::WriterSetup;

pub use ring::{
    DumpSummary, KeepLast, MIN_KEEP_BYTES, MIN_KEEP_DURATION, PartLeftOut, oom_dump_path,
    ring_folder, suffixed,
};
pub use trace::{PhaseGuard, Trace};
pub use writer::{QueueStats, TraceSummary};

pub use observer::{ObservedEvent, Observer, ObserverSetup, StartState};
pub use stacks::{CodeInfo, FrameSink, FrameSource, MAX_STACK_DEPTH, WalkId, capture_frames};

/// Room a buffer has beyond its batch size: the buffer is handed over once a
/// call leaves it at least that full, so the call that crosses the line
/// writes past it (a free writes two events, an allocation up to three).
/// Without the room, such a call reallocated a fresh buffer (copying it and
/// faulting in twice the memory): in callgrind, 13 reallocations per 100k
/// pairs, 10 instructions a pair. A rare call with more events (`empty_cache`,
/// `synchronize`) may still grow a buffer, once.
const CALL_EVENTS: usize = 64;

/// How often the writer thread flushes by default: with the time it takes
/// to write, a process killed at any moment keeps every event recorded more
/// than a second before (`docs/recording.md`, crash safety).
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_millis(500);

/// How many batches may wait for the writer thread by default: at 30,000
/// events per second, about a second of events (`docs/recording.md`, "A
/// disk slower than the program").
pub const DEFAULT_QUEUE_BATCHES: usize = 8;

/// How long a recording thread waits for a writer thread that is behind, by
/// default, before recording goes on and drops what the writer cannot take:
/// long enough for a fast disk's hiccup, short beside a training step.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_millis(5);

/// How long a buffer may wait for the writer thread by default: with the
/// flush interval, the second a killed process may lose.
pub const DEFAULT_MAX_QUEUE_AGE: Duration = Duration::from_secs(1);

/// Which stacks the recorder captures for allocator events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StackMode {
    /// No stacks: every event carries [`StackId::NONE`](crate::format::StackId::NONE).
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
    /// Events per chunk of the trace (at most: the writer thread also ends
    /// a chunk when it flushes).
    pub chunk_events: usize,
    /// The writer thread's timer: every event is written and flushed to the
    /// output at most about this long after it was recorded, whatever the
    /// rate (an idle recording's buffer is taken by the writer thread), so a
    /// process killed at any moment loses at most about this much, plus the
    /// writer's backlog. `None`: only full buffers, [`Trace::flush`] and
    /// the end write events (for tests that count chunks).
    pub flush_interval: Option<Duration>,
    /// Batches (of up to 4096 events) that may wait for the writer thread
    /// before recording waits for it: memory stays bounded, and so does what
    /// a killed process loses (`docs/recording.md`, "A disk slower than the
    /// program").
    pub queue_batches: usize,
    /// How long a recording thread waits for a writer thread more than
    /// `queue_batches` behind: a buffer that fills while the writer is still
    /// that far behind is dropped (counted, and marked in the trace by an
    /// `events_dropped` event). `None`: wait as long as it takes and drop
    /// nothing, however slow the output (the program slows to its pace).
    pub max_wait: Option<Duration>,
    /// How long a buffer may wait for the writer thread: one taken later is
    /// dropped (counted, and marked in the trace where it was), so that an
    /// output slower than the recording writes recent events rather than
    /// ever older ones, and a killed process loses about this much plus
    /// the flush interval. `None`: write every buffer, however late.
    pub max_queue_age: Option<Duration>,
    /// The header's start time; `None` reads the system clock.
    pub start_unix_ns: Option<u64>,
    /// The header's process; `None` describes this process.
    pub process: Option<ProcessInfo>,
    /// Extra header metadata.
    pub metadata: BTreeMap<String, String>,
    /// Keep only the last part of the trace on disk, in a ring of parts
    /// beside it (see [`KeepLast`] and `docs/recording.md`, "Bounded
    /// recording"); the trace is written when the recording ends. Only for
    /// a recording to a file (`create`).
    pub keep_last: Option<KeepLast>,
}

impl Default for RecorderOptions {
    fn default() -> Self {
        RecorderOptions {
            stacks: StackMode::None,
            frame_source: None,
            max_stack_depth: 64,
            chunk_events: 64 * 1024,
            flush_interval: Some(DEFAULT_FLUSH_INTERVAL),
            queue_batches: DEFAULT_QUEUE_BATCHES,
            max_wait: Some(DEFAULT_MAX_WAIT),
            max_queue_age: Some(DEFAULT_MAX_QUEUE_AGE),
            start_unix_ns: None,
            process: None,
            metadata: BTreeMap::new(),
            keep_last: None,
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
    /// A dump of the kept window failed, or the recording keeps no window.
    #[error("cannot dump: {0}")]
    Dump(String),
    /// [`Trace::phase_end`] without an open phase on the calling thread.
    #[error("no phase is open on this thread")]
    NoOpenPhase,
}

/// What a finished recording wrote: its trace's summary, and the
/// allocator's statistics at the end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordingSummary {
    /// What the trace holds (as an [`Observer`]'s recording reports it).
    pub trace: TraceSummary,
    /// The allocator's statistics at the end.
    pub allocator: AllocatorStats,
}

/// A caching allocator that records. See the [module docs](self).
///
/// `Recorder` is `Send + Sync` when the device is `Send`: share it (`&self`,
/// an `Arc`, a static) between the threads that allocate.
pub struct Recorder<D: DeviceMemory> {
    rec: Recording<CachingAllocator<D>>,
    /// The device's index, for tags.
    device: u32,
}

impl<D: DeviceMemory> EventBuffer for CachingAllocator<D> {
    #[inline]
    fn events(&mut self) -> &mut Vec<Event> {
        self.event_log_mut()
    }
}

/// A small id for the calling OS thread, the same for every recorder of the
/// process (so traces of several devices agree), assigned on first use.
/// The process's main thread is 0 (on Linux; elsewhere, the first thread
/// that asks), so that analyses can show its phases by default.
#[inline]
pub fn thread_id() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    thread_local! {
        static ID: Cell<u32> = const { Cell::new(u32::MAX) };
    }
    ID.with(|id| {
        let v = id.get();
        if v != u32::MAX {
            return v;
        }
        let v = if is_main_thread() {
            0
        } else {
            NEXT.fetch_add(1, Ordering::Relaxed)
        };
        id.set(v);
        v
    })
}

/// Whether the calling thread is the process's main thread.
#[cfg(target_os = "linux")]
fn is_main_thread() -> bool {
    // SAFETY: gettid and getpid take no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::pid_t == libc::getpid() }
}

/// Whether the calling thread is the first to ask (standing for the main
/// thread where there is no portable way to tell).
#[cfg(not(target_os = "linux"))]
fn is_main_thread() -> bool {
    static CLAIMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    !CLAIMED.swap(true, Ordering::Relaxed)
}

/// The header's start time: the option's, else now.
fn start_unix_ns(options: &RecorderOptions) -> u64 {
    options.start_unix_ns.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    })
}

/// The header's `stacks` entry: which stacks the trace's events carry.
fn stacks_metadata(options: &RecorderOptions) -> String {
    match (options.stacks, &options.frame_source) {
        (StackMode::None, None) => "none".into(),
        (StackMode::Native, None) => "native".into(),
        (StackMode::None, Some(s)) => s.name().into(),
        (StackMode::Native, Some(s)) => format!("native+{}", s.name()),
    }
}

/// Opens `path` for a trace, buffered; for a bounded recording, the first
/// part of its ring, with the writer thread's side of the ring.
fn create_file(
    path: &Path,
    keep_last: Option<KeepLast>,
) -> Result<(impl Write + Send + 'static, Option<ring::Window>), RecorderError> {
    let created = match keep_last {
        None => std::fs::File::create(path).map(|f| (f, None)),
        Some(keep) => ring::Window::create(path, keep).map(|(w, f)| (f, Some(w))),
    };
    let (file, window) = created.map_err(|source| RecorderError::Create {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((io::BufWriter::with_capacity(1 << 20, file), window))
}

impl<D: DeviceMemory + Send + 'static> Recorder<D> {
    /// Starts recording `allocator` to `out`: writes the header, flushes it,
    /// and starts the writer thread (which takes the allocator's events from
    /// under its lock when they wait too long: hence `Send + 'static`).
    pub fn new(
        allocator: CachingAllocator<D>,
        out: impl Write + Send + 'static,
        options: RecorderOptions,
    ) -> Result<Self, RecorderError> {
        Self::start(allocator, out, options, None)
    }

    fn start(
        mut allocator: CachingAllocator<D>,
        out: impl Write + Send + 'static,
        options: RecorderOptions,
        window: Option<ring::Window>,
    ) -> Result<Self, RecorderError> {
        let device = allocator.device();
        let index = device.index();
        let mut metadata = options.metadata.clone();
        metadata
            .entry("stacks".into())
            .or_insert_with(|| stacks_metadata(&options));
        let header = Header {
            producer: "vramtrace-recorder".into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            start_unix_ns: start_unix_ns(&options),
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
        allocator.set_event_log(true);
        let setup = WriterSetup {
            window,
            ..WriterSetup::default()
        };
        let rec = Recording::new(allocator, out, header, &options, setup)?;
        Ok(Recorder { rec, device: index })
    }

    /// Starts recording `allocator` to a new file at `path` (with
    /// [`RecorderOptions::keep_last`], to a ring of parts beside it, joined
    /// into `path` at the end).
    pub fn create(
        path: impl AsRef<Path>,
        allocator: CachingAllocator<D>,
        options: RecorderOptions,
    ) -> Result<Self, RecorderError> {
        let (out, window) = create_file(path.as_ref(), options.keep_last)?;
        Self::start(allocator, out, options, window)
    }
}

impl<D: DeviceMemory> Recorder<D> {
    /// Allocates a block of at least `size` bytes for `stream`, recording the
    /// `Alloc` (and any segment or `Oom`) event.
    #[inline(never)]
    pub fn malloc(&self, size: u64, stream: u64) -> Result<Allocation, AllocError> {
        if self.rec.stacks == StackMode::None && self.rec.source.is_none() {
            // Nothing to capture: the most common call skips the stack buffer.
            return self.call(StackKey::NONE, |a| a.malloc(size, stream));
        }
        let marker = 0u8;
        let mut stack = StackBuf::new();
        self.rec.capture(&marker, &mut stack);
        self.rec.capture_source(&mut stack);
        self.rec.seal(&mut stack);
        self.call(stack.key(), |a| a.malloc(size, stream))
    }

    /// Frees the block at `addr`, recording `FreeRequested` (and
    /// `FreeCompleted` unless other streams still use it).
    #[inline(never)]
    pub fn free(&self, addr: u64) -> Result<(), AllocError> {
        if self.rec.stacks == StackMode::None {
            // Frees get native stacks only: nothing to capture.
            return self.call(StackKey::NONE, |a| a.free(addr));
        }
        let marker = 0u8;
        let mut stack = StackBuf::new();
        self.rec.capture(&marker, &mut stack);
        self.rec.seal(&mut stack);
        self.call(stack.key(), |a| a.free(addr))
    }

    /// Notes that the block at `addr` is used on `stream` too (nothing is
    /// recorded: the free's events show the effect).
    pub fn record_stream(&self, addr: u64, stream: u64) -> Result<(), AllocError> {
        self.rec.lock().subject.record_stream(addr, stream)
    }

    /// Marks `stream`'s queued work complete, recording the `FreeCompleted`
    /// of blocks that were waiting for it.
    #[inline(never)]
    pub fn synchronize_stream(&self, stream: u64) {
        let marker = 0u8;
        let mut stack = StackBuf::new();
        self.rec.capture(&marker, &mut stack);
        self.rec.seal(&mut stack);
        self.call(stack.key(), |a| a.synchronize_stream(stream));
    }

    /// Marks every stream's work complete (`torch.cuda.synchronize()`).
    #[inline(never)]
    pub fn synchronize(&self) {
        let marker = 0u8;
        let mut stack = StackBuf::new();
        self.rec.capture(&marker, &mut stack);
        self.rec.seal(&mut stack);
        self.call(stack.key(), |a| a.synchronize());
    }

    /// Returns the cache to the device, recording `EmptyCache` then the
    /// segment frees.
    #[inline(never)]
    pub fn empty_cache(&self) {
        let marker = 0u8;
        let mut stack = StackBuf::new();
        self.rec.capture(&marker, &mut stack);
        self.rec.seal(&mut stack);
        self.call(stack.key(), |a| a.empty_cache());
    }

    /// Limits what the allocator may reserve to `fraction` of the device's
    /// total ([`CachingAllocator::set_memory_fraction`], PyTorch's
    /// `set_per_process_memory_fraction`) and records the limit (a `Limit`
    /// event, format 1.3). A fraction outside [0, 1] (or NaN) changes
    /// nothing and returns `false`, as PyTorch refuses it.
    pub fn set_memory_fraction(&self, fraction: f64) -> bool {
        if !(0.0..=1.0).contains(&fraction) {
            return false;
        }
        let (limit_bytes, total_bytes) = {
            let mut g = self.rec.lock();
            g.subject.set_memory_fraction(fraction);
            let total = g.subject.device().total_memory();
            (g.subject.memory_limit().unwrap_or(total), total)
        };
        self.rec.push_limit(self.device, limit_bytes, total_bytes);
        true
    }

    /// The allocator's statistics now.
    pub fn stats(&self) -> AllocatorStats {
        *self.rec.lock().subject.stats()
    }

    /// The allocated block at `addr`, if any.
    pub fn allocation(&self, addr: u64) -> Option<Allocation> {
        self.rec.lock().subject.allocation(addr)
    }

    /// Runs `f` on the allocator, under the lock (for inspection: it must not
    /// block).
    pub fn with_allocator<R>(&self, f: impl FnOnce(&CachingAllocator<D>) -> R) -> R {
        f(&self.rec.lock().subject)
    }

    /// Ends the recording: writes the remaining events and the footer, and
    /// joins the writer thread. The allocator keeps working afterwards,
    /// without recording. A second call returns [`RecorderError::Finished`].
    pub fn finish(&self) -> Result<RecordingSummary, RecorderError> {
        let (trace, allocator) = self.rec.finish(|a| {
            a.set_event_log(false);
            *a.stats()
        })?;
        Ok(RecordingSummary { trace, allocator })
    }

    /// Calls the allocator under the lock with its events' origin set. The
    /// events land finished in the allocator's log, which is the recording's
    /// buffer.
    #[inline(always)]
    fn call<R>(&self, stack: StackKey<'_>, f: impl FnOnce(&mut CachingAllocator<D>) -> R) -> R {
        self.rec.call(stack, 0, |a, stamp| {
            if let Some(s) = stamp {
                a.set_event_origin(EventOrigin {
                    time_ns: s.time_ns,
                    stack: s.stack,
                    thread: s.thread,
                });
            }
            f(a)
        })
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
