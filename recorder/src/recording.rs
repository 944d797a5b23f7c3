//! [`Recording`]: what every recording keeps besides the events it is
//! about: the lock, the clock, interned strings and stacks, the open phases,
//! and the hand-off of event buffers to the writer thread. A [`Recorder`]
//! records its own allocator through it, an [`Observer`] another's.
//!
//! Crash safety: the header is flushed to the file before the recording
//! starts, and the writer thread runs on a timer
//! ([`RecorderOptions::flush_interval`]): when the recording has not handed
//! it a buffer for that long, it takes the buffer itself (under the lock,
//! so an idle or slow recording loses nothing), and it flushes what it
//! wrote within that interval too. The allocating thread only hands over
//! full buffers, and reads the clock once per buffer for it. Nothing holds the lock while
//! waiting for the writer thread: a recording ahead of it by more than
//! [`RecorderOptions::queue_batches`] waits after leaving the lock, for at
//! most [`RecorderOptions::max_wait`]; a buffer that fills while the writer
//! is still that far behind is dropped, counted, and marked in the trace by
//! an `events_dropped` event sent ahead of the next buffer; a buffer that
//! waited in the queue past [`RecorderOptions::max_queue_age`] is dropped by
//! the writer thread, which writes its marker in its place
//! (`docs/recording.md`, "A disk slower than the program").
//!
//! [`Recorder`]: super::Recorder
//! [`Observer`]: super::Observer

use super::biased::{BiasedGuard, BiasedMutex};
use super::clock::Clock;
use super::ring::DumpSummary;
use super::stacks::{self, FrameSource, StackBuf, StackKey, WalkId};
use super::writer::{self, Backlog, Batch, FlushTimer, Msg, QueueStats, TraceSummary, WriterSetup};
use super::{CALL_EVENTS, RecorderError, RecorderOptions, StackMode, thread_id};
use crate::format::{
    Category, DroppedEvents, Event, EventData, FormatError, Header, InitialState, LimitEvent,
    StackId, StringId, TagEvent, TraceWriter, UserTagEvent, WriterOptions,
};
use rustc_hash::FxHashMap;
use std::io::Write;
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The most events a recording buffers before handing them to the writer
/// thread: buffers this small stay in cache (a 64k-event buffer made each
/// push a cache miss).
const BATCH_EVENTS: usize = 4096;

/// The most walks a recording remembers the stacks of (it forgets them all
/// past this; the stacks stay interned).
const MAX_WALK_STACKS: usize = 1 << 16;

/// Where a recording's events wait for the writer thread: a recorder's
/// allocator logs them itself (its event log is the buffer, so no event is
/// copied on the hot path); an observer has a plain vector.
pub(crate) trait EventBuffer {
    fn events(&mut self) -> &mut Vec<Event>;
}

impl EventBuffer for Vec<Event> {
    #[inline]
    fn events(&mut self) -> &mut Vec<Event> {
        self
    }
}

/// When, on which thread and with which stack a call's events happen.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stamp {
    pub time_ns: u64,
    pub stack: StackId,
    pub thread: u32,
}

/// A recording of the events of `B`. See the [module docs](self).
pub(crate) struct Recording<B: EventBuffer> {
    /// Shared with the writer thread, which takes a buffer left too long.
    inner: Arc<BiasedMutex<Inner<B>>>,
    backlog: Arc<Backlog>,
    pub stacks: StackMode,
    pub source: Option<Arc<dyn FrameSource>>,
    pub max_depth: usize,
    writer: Mutex<Option<JoinHandle<Result<TraceSummary, FormatError>>>>,
}

/// What the lock guards: the subject of the recording (the allocator, or
/// the observer's buffer) and the bookkeeping of the recording itself.
pub(crate) struct Inner<B> {
    pub subject: B,
    pub log: Log,
}

pub(crate) struct Log {
    /// Read under the lock, so that event times are monotonic in trace order.
    clock: Clock,
    pub recording: bool,
    batch_events: usize,
    /// Recording-local ids: the writer thread maps them to the trace's, since
    /// symbolization interns strings of its own there.
    strings: FxHashMap<Box<str>, StringId>,
    new_strings: Vec<Box<str>>,
    stack_ids: FxHashMap<Box<[usize]>, StackId>,
    /// The stacks of walks that frame sources named: a stack seen before
    /// costs one lookup of a word rather than hashing its frames.
    walk_stacks: FxHashMap<WalkId, StackId>,
    new_stacks: Vec<Box<[usize]>>,
    /// Each thread's open phases, innermost last: a thread's phases nest,
    /// and no thread ends another's.
    open_phases: FxHashMap<u32, Vec<StringId>>,
    tx: Option<Sender<Msg>>,
    spare: Receiver<Vec<Event>>,
    backlog: Arc<Backlog>,
    /// Events dropped since the last buffer sent (their marker goes first in
    /// the next one), and the time of the last of them.
    dropped: Option<(DroppedEvents, u64)>,
}

impl<B: EventBuffer + Send + 'static> Recording<B> {
    /// Starts recording `subject` to `out`: writes `header`, flushes it to
    /// the output (so that even a recording killed before its first event
    /// leaves a trace) and starts the writer thread. The subject's buffer is
    /// emptied first: events from before belong to no trace.
    pub fn new(
        mut subject: B,
        out: impl Write + Send + 'static,
        mut header: Header,
        options: &RecorderOptions,
        setup: WriterSetup,
    ) -> Result<Self, RecorderError> {
        let clock = Clock::start();
        let mut chunk_events = options.chunk_events.max(1);
        if let Some(window) = &setup.window {
            // A part is ended between batches: a chunk per batch at most
            // keeps what a part may run over its share of the bound small.
            chunk_events = chunk_events.min(window.chunk_events());
            header
                .metadata
                .insert("keep_last".into(), window.keep().to_string());
            // Tells this ring's parts from another's of the same process
            // (a ring per device): `vramtrace join` keeps to one ring.
            header
                .metadata
                .insert(vramtrace_format::RING_KEY.into(), ring_id());
        }
        let batch_events = chunk_events.min(BATCH_EVENTS);
        let out: Box<dyn Write + Send> = Box::new(out);
        let mut trace = TraceWriter::with_options(
            crate::format::CountingWriter::new(out),
            header,
            WriterOptions {
                chunk_events,
                // The writer thread flushes on a timer of its own.
                chunk_interval: None,
            },
        )?;
        trace.flush()?;
        let backlog = Arc::new(Backlog::new(
            options.queue_batches.max(1),
            options.max_wait,
            options.max_queue_age,
        ));
        let (tx, rx) = channel();
        let (spare_tx, spare_rx) = sync_channel(options.queue_batches.max(1) + 2);
        *subject.events() = Vec::with_capacity(batch_events + CALL_EVENTS);
        let inner = Arc::new(BiasedMutex::new(Inner {
            subject,
            log: Log {
                clock,
                recording: true,
                batch_events,
                strings: FxHashMap::default(),
                new_strings: Vec::new(),
                stack_ids: FxHashMap::default(),
                walk_stacks: FxHashMap::default(),
                new_stacks: Vec::new(),
                open_phases: FxHashMap::default(),
                tx: Some(tx),
                spare: spare_rx,
                backlog: backlog.clone(),
                dropped: None,
            },
        }));
        let timer = options.flush_interval.map(|interval| {
            let inner = Arc::downgrade(&inner);
            FlushTimer::new(interval, move || {
                // The recording may be finishing: then nothing is left to take.
                inner.upgrade().is_some_and(|inner| {
                    let mut g = inner.lock();
                    let Inner { subject, log } = &mut *g;
                    log.handoff(subject.events(), true)
                })
            })
        });
        let source = options.frame_source.clone();
        let writer_backlog = backlog.clone();
        let handle = std::thread::Builder::new()
            .name("vramtrace-writer".into())
            .spawn(move || writer::run(trace, rx, spare_tx, source, setup, writer_backlog, timer))
            .map_err(RecorderError::Spawn)?;
        Ok(Recording {
            inner,
            backlog,
            stacks: options.stacks,
            source: options.frame_source.clone(),
            max_depth: options.max_stack_depth.min(stacks::MAX_STACK_DEPTH),
            writer: Mutex::new(Some(handle)),
        })
    }
}

impl<B: EventBuffer> Recording<B> {
    #[inline(always)]
    pub fn lock(&self) -> BiasedGuard<'_, Inner<B>> {
        // A panic elsewhere while holding the lock leaves consistent-enough
        // state for recording to go on: the lock does not poison.
        self.inner.lock()
    }

    /// Captures the caller's native stack, if on. `marker` is a local of the
    /// public entry point: frames below it are the recorder's own.
    #[inline(always)]
    pub fn capture(&self, marker: &u8, buf: &mut StackBuf) {
        if self.stacks == StackMode::Native {
            stacks::capture(marker as *const u8 as usize, self.max_depth, buf);
        }
    }

    /// Appends the frame source's frames of the calling thread, if there is
    /// a source.
    #[inline(always)]
    pub fn capture_source(&self, buf: &mut StackBuf) {
        if let Some(source) = &self.source {
            buf.capture_external(&**source, self.max_depth);
        }
    }

    /// Ends the stack key in the layout the writer expects.
    #[inline(always)]
    pub fn seal(&self, buf: &mut StackBuf) {
        if self.source.is_some() {
            buf.seal();
        }
    }

    /// Runs `f` on the subject under the lock with the call's stamp (the
    /// time the call began, the calling thread, the stack of the key
    /// `stack`, none if empty), or `None` once the recording is over; then
    /// hands the buffer over if it is full or old enough.
    ///
    /// `counter`: the CPU's time-stamp counter when the call happened, if
    /// the caller has it (0: the clock is read now).
    #[inline(always)]
    pub fn call<R>(
        &self,
        stack: StackKey<'_>,
        counter: u64,
        f: impl FnOnce(&mut B, Option<Stamp>) -> R,
    ) -> R {
        let mut g = self.lock();
        let Inner { subject, log } = &mut *g;
        if !log.recording {
            return f(subject, None);
        }
        let time_ns = if counter == 0 {
            log.clock.now_ns()
        } else {
            log.clock.counter_ns(counter)
        };
        let stack = log.stack_id(stack);
        let result = f(
            subject,
            Some(Stamp {
                time_ns,
                stack,
                thread: thread_id(),
            }),
        );
        let behind = log.after_push(subject.events());
        drop(g);
        if behind {
            self.backlog.wait();
        }
        result
    }

    /// Records a phase begin, end or annotation, under the lock `g`, which
    /// it releases.
    fn push_marker(
        &self,
        mut g: BiasedGuard<'_, Inner<B>>,
        data: impl FnOnce(&mut Log) -> EventData,
    ) {
        let Inner { subject, log } = &mut *g;
        if !log.recording {
            return;
        }
        let data = data(log);
        let time_ns = log.clock.now_ns();
        subject.events().push(Event { time_ns, data });
        let behind = log.after_push(subject.events());
        drop(g);
        if behind {
            self.backlog.wait();
        }
    }

    /// Begins a phase of `thread` (a [`thread_id`]); each thread's phases
    /// nest.
    pub fn begin_phase(&self, name: &str, thread: u32) -> StringId {
        let mut g = self.lock();
        let name = g.log.intern(name);
        g.log.open_phases.entry(thread).or_default().push(name);
        self.push_marker(g, |_| EventData::PhaseBegin { name, thread });
        name
    }

    /// Ends the innermost open phase of `thread`.
    pub fn end_innermost_phase(&self, thread: u32) -> Result<(), RecorderError> {
        let mut g = self.lock();
        let name = g
            .log
            .open_phases
            .get_mut(&thread)
            .and_then(Vec::pop)
            .ok_or(RecorderError::NoOpenPhase)?;
        self.push_marker(g, |_| EventData::PhaseEnd { name, thread });
        Ok(())
    }

    /// Ends the innermost open phase named `name` of `thread`, wherever it
    /// is in the thread's nesting (phases opened inside it stay open).
    /// Returns whether one was.
    pub fn end_phase(&self, name: StringId, thread: u32) -> bool {
        let g = self.lock();
        self.end_open_phase(g, name, thread)
    }

    /// [`end_phase`](Self::end_phase) by the phase's text.
    pub fn end_phase_named(&self, name: &str, thread: u32) -> bool {
        let g = self.lock();
        match g.log.strings.get(name).copied() {
            Some(id) => self.end_open_phase(g, id, thread),
            None => false,
        }
    }

    fn end_open_phase(
        &self,
        mut g: BiasedGuard<'_, Inner<B>>,
        name: StringId,
        thread: u32,
    ) -> bool {
        let Some(open) = g.log.open_phases.get_mut(&thread) else {
            return false;
        };
        let Some(i) = open.iter().rposition(|&n| n == name) else {
            return false;
        };
        open.remove(i);
        if open.is_empty() {
            g.log.open_phases.remove(&thread);
        }
        self.push_marker(g, |_| EventData::PhaseEnd { name, thread });
        true
    }

    /// Records a key/value note.
    pub fn annotate(&self, key: &str, value: &str) {
        let g = self.lock();
        self.push_marker(g, |log| EventData::Annotation {
            key: log.intern(key),
            value: log.intern(value),
        });
    }

    /// Records one event without a stack (a limit, a device-memory sample,
    /// format 1.3), made by `data` from the calling thread's id, stamped
    /// now, in order with the events recorded so far. Returns whether it
    /// was recorded (not once the recording is over).
    pub fn push_now(&self, data: impl FnOnce(u32) -> EventData) -> bool {
        let g = self.lock();
        if !g.log.recording {
            return false;
        }
        let thread = thread_id();
        self.push_marker(g, |_| data(thread));
        true
    }

    /// Records the allocator's limit on `device`: `limit_bytes` of the
    /// device's `total_bytes` (format 1.3; see [`Recording::push_now`]).
    pub fn push_limit(&self, device: u32, limit_bytes: u64, total_bytes: u64) -> bool {
        self.push_now(|thread| {
            EventData::Limit(LimitEvent {
                device,
                thread,
                limit_bytes,
                total_bytes,
            })
        })
    }

    /// Records tags (format 1.2): each says what the live block at its
    /// address on `device` holds, for the block's whole life. One lock and
    /// one clock reading for the lot, so that a walk's tags are ordered with
    /// the allocator events of the device as one moment; stamped with the
    /// calling thread. A long batch hands full buffers over as it goes.
    /// Returns the number recorded (0 once the recording is over).
    pub fn tag(&self, device: u32, tags: impl IntoIterator<Item = (u64, Category)>) -> usize {
        let mut g = self.lock();
        let Inner { subject, log } = &mut *g;
        if !log.recording {
            return 0;
        }
        let time_ns = log.clock.now_ns();
        let thread = thread_id();
        let events = subject.events();
        let mut behind = false;
        let mut n = 0;
        for (addr, category) in tags {
            events.push(Event {
                time_ns,
                data: EventData::Tag(TagEvent {
                    addr,
                    device,
                    thread,
                    code: category.code(),
                }),
            });
            n += 1;
            behind |= log.after_push(events);
        }
        drop(g);
        if behind {
            self.backlog.wait();
        }
        n
    }

    /// Records user tags (format 1.7): the live blocks at `addrs` on
    /// `device` hold the program's own category `name`, for their whole
    /// lives. As [`tag`](Self::tag): one lock, one moment, the calling
    /// thread. Returns the number recorded (0 once the recording is over).
    pub fn tag_user(&self, device: u32, name: &str, addrs: impl IntoIterator<Item = u64>) -> usize {
        let mut g = self.lock();
        let Inner { subject, log } = &mut *g;
        if !log.recording {
            return 0;
        }
        let time_ns = log.clock.now_ns();
        let thread = thread_id();
        let name = log.intern(name);
        let events = subject.events();
        let mut behind = false;
        let mut n = 0;
        for addr in addrs {
            events.push(Event {
                time_ns,
                data: EventData::UserTag(UserTagEvent {
                    addr,
                    device,
                    thread,
                    name,
                }),
            });
            n += 1;
            behind |= log.after_push(events);
        }
        drop(g);
        if behind {
            self.backlog.wait();
        }
        n
    }

    /// What the recording waited for its writer thread and dropped so far.
    pub fn queue_stats(&self) -> QueueStats {
        self.backlog.stats()
    }

    /// Gives the writer thread the state the trace starts from, for a writer
    /// set up to wait for one.
    pub fn send_initial_state(&self, state: InitialState) -> Result<(), RecorderError> {
        let tx = self.lock().log.tx.clone().ok_or(RecorderError::Finished)?;
        tx.send(Msg::InitialState(Box::new(state)))
            .map_err(|_| RecorderError::WriterStopped("the writer thread is gone".into()))
    }

    /// Writes everything recorded so far to the output and flushes it; waits
    /// for the writer thread (without holding the lock).
    pub fn flush(&self) -> Result<(), RecorderError> {
        self.ask_writer(Msg::Sync)?
            .map_err(RecorderError::WriterStopped)
    }

    /// Writes the kept window of a bounded recording, joined into one
    /// trace, to `path` (by default beside the trace): everything recorded
    /// so far that the bound keeps. Waits for it (without holding the
    /// lock; the recording goes on).
    pub fn dump(&self, path: Option<&std::path::Path>) -> Result<DumpSummary, RecorderError> {
        self.ask_writer(|reply| Msg::Dump(path.map(|p| p.to_path_buf()), reply))?
            .map_err(RecorderError::Dump)
    }

    /// Hands the buffer over (to be flushed), sends the writer thread the
    /// message `ask` makes around a reply channel, and waits for the reply,
    /// which comes once everything before the message is written.
    fn ask_writer<T>(
        &self,
        ask: impl FnOnce(SyncSender<Result<T, String>>) -> Msg,
    ) -> Result<Result<T, String>, RecorderError> {
        let gone = || RecorderError::WriterStopped("the writer thread is gone".into());
        let tx = {
            let mut g = self.lock();
            let Inner { subject, log } = &mut *g;
            log.handoff(subject.events(), true);
            log.tx.clone()
        };
        let tx = tx.ok_or(RecorderError::Finished)?;
        let (reply_tx, reply_rx) = sync_channel(1);
        tx.send(ask(reply_tx)).map_err(|_| gone())?;
        reply_rx.recv().map_err(|_| gone())
    }

    /// Ends the recording: hands over the last events, runs `close` on the
    /// subject under the lock (a recorder stops its allocator's log there),
    /// then lets the writer write the footer and joins it. A second call
    /// returns [`RecorderError::Finished`].
    pub fn finish<T>(
        &self,
        close: impl FnOnce(&mut B) -> T,
    ) -> Result<(TraceSummary, T), RecorderError> {
        let closed = {
            let mut g = self.lock();
            let Inner { subject, log } = &mut *g;
            if !log.recording {
                return Err(RecorderError::Finished);
            }
            log.handoff(subject.events(), false);
            log.recording = false;
            // Closing the channel tells the writer thread to finish.
            log.tx = None;
            // A finished recording may be kept (an observer is never freed):
            // it keeps nothing it no longer needs.
            log.strings = FxHashMap::default();
            log.stack_ids = FxHashMap::default();
            log.walk_stacks = FxHashMap::default();
            log.open_phases = FxHashMap::default();
            *subject.events() = Vec::new();
            close(subject)
        };
        let handle = self
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or(RecorderError::Finished)?;
        let summary = handle.join().map_err(|_| RecorderError::WriterPanicked)??;
        Ok((summary, closed))
    }
}

impl Log {
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

    /// The id of the stack `key`, interned now if it is new.
    #[inline]
    fn stack_id(&mut self, key: StackKey<'_>) -> StackId {
        if key.words.is_empty() {
            return StackId::NONE;
        }
        if let Some(walk) = key.walk
            && let Some(&id) = self.walk_stacks.get(&walk)
        {
            return id;
        }
        let id = self.intern_stack(key.words);
        if let Some(walk) = key.walk {
            // Sources forget walks and name them anew: bounded, as the
            // stacks themselves stay interned.
            if self.walk_stacks.len() >= MAX_WALK_STACKS {
                self.walk_stacks.clear();
            }
            self.walk_stacks.insert(walk, id);
        }
        id
    }

    fn intern_stack(&mut self, ips: &[usize]) -> StackId {
        if let Some(&id) = self.stack_ids.get(ips) {
            return id;
        }
        let id = StackId(self.stack_ids.len() as u32 + 1);
        self.stack_ids.insert(ips.into(), id);
        self.new_stacks.push(ips.into());
        id
    }

    /// Hands a full buffer over, or drops it if the writer thread is still
    /// behind after the last wait. Returns whether the writer thread is
    /// behind: the caller then waits for it, once out of the lock.
    #[inline]
    fn after_push(&mut self, events: &mut Vec<Event>) -> bool {
        if events.len() < self.batch_events {
            return false;
        }
        if self.backlog.drops_now() {
            self.drop_events(events);
            return false;
        }
        self.handoff(events, false) && self.backlog.behind()
    }

    /// Drops the buffer's events, counting them into the marker the next
    /// buffer sent begins with. Its strings and stacks still go with that
    /// buffer: later events may use them.
    #[cold]
    fn drop_events(&mut self, events: &mut Vec<Event>) {
        let (Some(first), Some(last)) = (events.first(), events.last()) else {
            return;
        };
        let count = events.len() as u64;
        let (first, last) = (first.time_ns, last.time_ns);
        events.clear();
        self.backlog.dropped(count, self.dropped.is_none());
        let (marker, to_ns) = self.dropped.get_or_insert((
            DroppedEvents {
                count: 0,
                from_ns: first,
            },
            last,
        ));
        marker.count += count;
        *to_ns = last;
    }

    /// Sends the buffer (and the symbols it needs) to the writer thread;
    /// returns whether there was anything to send. Never blocks: the
    /// channel is unbounded, and the [`Backlog`] bounds it.
    fn handoff(&mut self, events: &mut Vec<Event>, flush: bool) -> bool {
        let Some(tx) = &self.tx else {
            events.clear();
            return false;
        };
        if events.is_empty()
            && self.new_strings.is_empty()
            && self.new_stacks.is_empty()
            && self.dropped.is_none()
        {
            return false;
        }
        if let Some((marker, to_ns)) = self.dropped.take() {
            // The dropped events came before the buffer's: so does their
            // marker, stamped with the last one's time (times stay monotonic).
            events.insert(
                0,
                Event {
                    time_ns: to_ns,
                    data: EventData::EventsDropped(marker),
                },
            );
        }
        let fresh = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(self.batch_events + CALL_EVENTS));
        let batch = Batch {
            strings: std::mem::take(&mut self.new_strings),
            stacks: std::mem::take(&mut self.new_stacks),
            events: std::mem::replace(events, fresh),
            flush,
            // One clock reading per buffer, for the queue's age bound.
            sent: std::time::Instant::now(),
        };
        self.backlog.sent();
        if tx.send(Msg::Batch(batch)).is_err() {
            // The writer thread is gone (it panicked): keep going, stop
            // recording; finish() reports it.
            self.tx = None;
            return false;
        }
        true
    }
}

/// An id no other ring shares: random (std's hasher keys are), with the
/// process id beside it for a reader.
fn ring_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{}-{:016x}", std::process::id(), h.finish())
}
