//! [`Trace`]: what every recording does besides recording its allocator's
//! events (phases, notes, tags, flushing, dumps), written once for
//! [`Recorder`](super::Recorder) and [`Observer`](super::Observer), so the
//! two never drift apart and a host drives either through `dyn Trace`.

use super::recording::{EventBuffer, Recording};
use super::ring::DumpSummary;
use super::writer::QueueStats;
use super::{Observer, Recorder, RecorderError, thread_id};
use crate::device::DeviceMemory;
use crate::format::{Category, StringId};
use std::path::Path;

/// Only this crate's recordings have a recording behind them: the trait is
/// sealed (its supertrait cannot be named outside), and its methods are
/// this crate's to change.
mod sealed {
    use super::*;

    /// A recording, whatever it records (object-safe: a [`Trace`] hands
    /// out `&dyn Marks`).
    pub trait Marks {
        fn begin_phase(&self, name: &str, thread: u32) -> StringId;
        fn end_innermost_phase(&self, thread: u32) -> Result<(), RecorderError>;
        fn end_phase(&self, name: StringId, thread: u32) -> bool;
        fn end_phase_named(&self, name: &str, thread: u32) -> bool;
        fn annotate(&self, key: &str, value: &str);
        fn tag(&self, device: u32, tags: &mut dyn Iterator<Item = (u64, Category)>) -> usize;
        fn tag_user(&self, device: u32, name: &str, addrs: &mut dyn Iterator<Item = u64>) -> usize;
        fn flush(&self) -> Result<(), RecorderError>;
        fn queue_stats(&self) -> QueueStats;
        fn dump(&self, path: Option<&Path>) -> Result<DumpSummary, RecorderError>;
    }

    /// What a [`Trace`] is made from.
    pub trait Recorded {
        /// The recording.
        fn marks(&self) -> &dyn Marks;
        /// The index of the recorded device.
        fn device_index(&self) -> u32;
    }
}

impl<D: DeviceMemory> sealed::Recorded for Recorder<D> {
    fn marks(&self) -> &dyn sealed::Marks {
        &self.rec
    }
    fn device_index(&self) -> u32 {
        self.device
    }
}

impl sealed::Recorded for Observer {
    fn marks(&self) -> &dyn sealed::Marks {
        &self.rec
    }
    fn device_index(&self) -> u32 {
        self.device
    }
}

/// Ends its phase when dropped: the phase of the thread that began it,
/// never another thread's. See [`Trace::phase`].
#[must_use = "the phase ends when the guard is dropped"]
pub struct PhaseGuard<'r> {
    recording: &'r dyn sealed::Marks,
    name: StringId,
    thread: u32,
}

impl Drop for PhaseGuard<'_> {
    fn drop(&mut self) {
        // A guard's phase may have been ended by phase_end() already.
        self.recording.end_phase(self.name, self.thread);
    }
}

impl<B: EventBuffer> sealed::Marks for Recording<B> {
    fn begin_phase(&self, name: &str, thread: u32) -> StringId {
        Recording::begin_phase(self, name, thread)
    }
    fn end_innermost_phase(&self, thread: u32) -> Result<(), RecorderError> {
        Recording::end_innermost_phase(self, thread)
    }
    fn end_phase(&self, name: StringId, thread: u32) -> bool {
        Recording::end_phase(self, name, thread)
    }
    fn end_phase_named(&self, name: &str, thread: u32) -> bool {
        Recording::end_phase_named(self, name, thread)
    }
    fn annotate(&self, key: &str, value: &str) {
        Recording::annotate(self, key, value)
    }
    fn tag(&self, device: u32, tags: &mut dyn Iterator<Item = (u64, Category)>) -> usize {
        Recording::tag(self, device, tags)
    }
    fn tag_user(&self, device: u32, name: &str, addrs: &mut dyn Iterator<Item = u64>) -> usize {
        Recording::tag_user(self, device, name, addrs)
    }
    fn flush(&self) -> Result<(), RecorderError> {
        Recording::flush(self)
    }
    fn queue_stats(&self) -> QueueStats {
        Recording::queue_stats(self)
    }
    fn dump(&self, path: Option<&Path>) -> Result<DumpSummary, RecorderError> {
        Recording::dump(self, path)
    }
}

/// What every recording does besides recording its allocator's events:
/// phases, key/value notes, what blocks hold, flushing, and dumps of a
/// bounded recording. [`Recorder`](super::Recorder) and
/// [`Observer`](super::Observer) both have it (bring it into scope:
/// `use vramtrace_recorder::Trace`).
pub trait Trace: sealed::Recorded {
    /// The index of the recorded device.
    fn device(&self) -> u32 {
        self.device_index()
    }

    /// Begins a phase of the calling thread that ends when the returned
    /// guard is dropped. Each thread's phases nest, apart from other
    /// threads'.
    fn phase(&self, name: &str) -> PhaseGuard<'_> {
        let thread = thread_id();
        let recording = self.marks();
        PhaseGuard {
            name: recording.begin_phase(name, thread),
            recording,
            thread,
        }
    }

    /// Begins a phase of the calling thread, to be ended by
    /// [`phase_end`](Self::phase_end) or
    /// [`phase_end_named`](Self::phase_end_named) (for callers that cannot
    /// hold a guard, such as a C API).
    fn phase_begin(&self, name: &str) {
        self.marks().begin_phase(name, thread_id());
    }

    /// Begins a phase of `thread` (a [`thread_id`]) rather than the
    /// caller's: for a host that replays the phases open in its other
    /// traces into one begun later.
    fn phase_begin_for(&self, thread: u32, name: &str) {
        self.marks().begin_phase(name, thread);
    }

    /// Ends the calling thread's innermost open phase.
    fn phase_end(&self) -> Result<(), RecorderError> {
        self.marks().end_innermost_phase(thread_id())
    }

    /// Ends the calling thread's innermost open phase named `name`, leaving
    /// phases opened inside it open (a phase that another source of phases
    /// interleaves with, such as an iteration that ends inside a user's
    /// phase). Returns whether such a phase was open.
    fn phase_end_named(&self, name: &str) -> bool {
        self.marks().end_phase_named(name, thread_id())
    }

    /// Ends `thread`'s innermost open phase named `name` (see
    /// [`phase_begin_for`](Self::phase_begin_for)). Returns whether such a
    /// phase was open.
    fn phase_end_named_for(&self, thread: u32, name: &str) -> bool {
        self.marks().end_phase_named(name, thread)
    }

    /// Records a key/value note (a step number, a config value; `batch` and
    /// `seq` are what `vramtrace plan` reads).
    fn annotate(&self, key: &str, value: &str) {
        self.marks().annotate(key, value);
    }

    /// Says what the live block at `addr` holds, for its whole life (a
    /// [`Tag`](crate::format::EventData::Tag), format 1.2): the caller may
    /// learn it long after the allocation. Stamped with the time and the
    /// calling thread, in order with the allocator's events so far.
    fn tag(&self, addr: u64, category: Category) {
        self.marks()
            .tag(self.device_index(), &mut std::iter::once((addr, category)));
    }

    /// [`tag`](Self::tag) for many blocks at once, under one lock and at one
    /// moment (what a walk over a model's tensors found). Returns the number
    /// recorded: 0 once the trace is finished.
    fn tag_all(&self, tags: impl IntoIterator<Item = (u64, Category)>) -> usize
    where
        Self: Sized,
    {
        self.marks().tag(self.device_index(), &mut tags.into_iter())
    }

    /// Says that the live blocks at `addrs` hold a category the program
    /// names itself (`"kv_cache"`), for their whole lives (a
    /// [`UserTag`](crate::format::EventData::UserTag), format 1.7). Analyses
    /// show it beside the built-in categories, exact. Under one lock and at
    /// one moment; returns the number recorded (0 once the trace is finished).
    fn tag_user(&self, name: &str, addrs: impl IntoIterator<Item = u64>) -> usize
    where
        Self: Sized,
    {
        self.marks()
            .tag_user(self.device_index(), name, &mut addrs.into_iter())
    }

    /// Writes everything recorded so far to the output and flushes it;
    /// waits for the writer thread (without holding the recording's lock).
    fn flush(&self) -> Result<(), RecorderError> {
        self.marks().flush()
    }

    /// What recording waited for its output and dropped so far.
    fn queue_stats(&self) -> QueueStats {
        self.marks().queue_stats()
    }

    /// Writes the kept window of a bounded recording, joined into one
    /// trace, to `path`, or by default beside the trace, numbered
    /// (`serve-dump-1.vtrace`). See
    /// [`RecorderOptions::keep_last`](super::RecorderOptions::keep_last).
    fn dump(&self, path: Option<&Path>) -> Result<DumpSummary, RecorderError> {
        self.marks().dump(path)
    }
}

impl<T: sealed::Recorded> Trace for T {}
