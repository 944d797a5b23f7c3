//! The writer thread: maps recorder-local ids to the trace's, symbolizes new
//! stacks, works out the block sizes of observed allocations, encodes and
//! writes.

use super::ring::{DumpSummary, Output, PartLeftOut, Window};
use super::stacks::{FrameSource, SourceFrames, Symbolizer, split_key};
use crate::allocator::ObservedBlocks;
use crate::format::{
    DroppedEvents, Event, EventData, FormatError, FrameId, InitialState, KindCounts, StackId,
    StringId, TraceWriter,
};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Events stamped by the recorder, with the strings and stacks first used in
/// them (recorder-local ids, continuing those of earlier batches).
pub(crate) struct Batch {
    pub strings: Vec<Box<str>>,
    pub stacks: Vec<Box<[usize]>>,
    pub events: Vec<Event>,
    /// Write a chunk and flush the output after this batch.
    pub flush: bool,
    /// When it was handed over: a batch that waited longer than the
    /// queue's age bound is dropped.
    pub sent: Instant,
}

pub(crate) enum Msg {
    Batch(Batch),
    /// The state the trace starts from, for a writer set up to wait for it.
    InitialState(Box<InitialState>),
    /// Acknowledge once everything before this message is written and flushed.
    Sync(SyncSender<Result<(), String>>),
    /// Write the kept window of a bounded recording, joined, to a file (by
    /// default, one beside the trace).
    Dump(Option<PathBuf>, SyncSender<Result<DumpSummary, String>>),
}

/// What the writer thread needs beyond the trace: set by an observer.
#[derive(Default)]
pub(crate) struct WriterSetup {
    /// Hold events back until [`Msg::InitialState`] arrives (the state is
    /// known only once the observed allocator has been asked for it, while
    /// its events already flow).
    pub await_initial_state: bool,
    /// Fill in the block sizes of block events, which an observed allocator
    /// does not report.
    pub blocks: Option<ObservedBlocks>,
    /// Keep only the last part of the trace on disk (a bounded recording).
    pub window: Option<Window>,
}

/// Batches sent to the writer thread and not yet taken off the channel. The
/// channel itself is unbounded, so that handing a batch over never blocks
/// under the recording's lock (where the writer thread, taking a buffer
/// left too long, could wait for it); a recording more than `limit` batches
/// ahead waits here instead, outside the lock, for at most `max_wait` (and
/// drops the buffers that fill while the writer is still that far behind:
/// `docs/recording.md`, "A disk slower than the program").
pub(crate) struct Backlog {
    batches: AtomicUsize,
    limit: usize,
    /// How long a recording thread waits for the writer; `None`: until it
    /// catches up.
    max_wait: Option<Duration>,
    /// How long a batch may wait for the writer thread before it is
    /// dropped when taken; `None`: any time.
    max_age: Option<Duration>,
    /// The longest a recording thread waited here, in nanoseconds.
    longest_wait_ns: AtomicU64,
    /// Events dropped so far, and the spans they were dropped in (each
    /// becomes one marker in the trace).
    dropped_events: AtomicU64,
    drops: AtomicU64,
    /// Set when the writer thread ends: nobody waits for it any more.
    closed: AtomicBool,
    lock: Mutex<()>,
    drained: Condvar,
}

/// How a recording kept up with its output: what the program waited and
/// what it lost. See [`Trace::queue_stats`](super::Trace::queue_stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Events dropped because the output could not keep up.
    pub dropped_events: u64,
    /// Spans of consecutive dropped events (each marked in the trace by an
    /// `events_dropped` event).
    pub drops: u64,
    /// The longest a recording thread waited for the writer thread.
    pub longest_wait: Duration,
}

impl Backlog {
    pub fn new(limit: usize, max_wait: Option<Duration>, max_age: Option<Duration>) -> Self {
        Backlog {
            batches: AtomicUsize::new(0),
            limit,
            max_wait,
            max_age,
            longest_wait_ns: AtomicU64::new(0),
            dropped_events: AtomicU64::new(0),
            drops: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            lock: Mutex::new(()),
            drained: Condvar::new(),
        }
    }

    /// A batch was sent.
    #[inline]
    pub fn sent(&self) {
        self.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the writer thread is more than `limit` batches behind.
    #[inline]
    pub fn behind(&self) -> bool {
        self.batches.load(Ordering::Relaxed) > self.limit
    }

    /// Whether a full buffer is dropped rather than sent: the writer thread
    /// is still behind (after the wait of the buffer before), and waiting
    /// is bounded.
    #[inline]
    pub fn drops_now(&self) -> bool {
        self.max_wait.is_some() && self.behind()
    }

    /// `count` events were dropped; `new_span`: they begin a span of their
    /// own (the previous span's marker was sent).
    pub fn dropped(&self, count: u64, new_span: bool) {
        self.dropped_events.fetch_add(count, Ordering::Relaxed);
        if new_span {
            self.drops.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether `batch` waited in the queue longer than its age bound: then
    /// its events are older than what a killed process may lose, and
    /// writing them would only make the events behind them older still.
    fn is_stale(&self, batch: &Batch) -> bool {
        self.max_age
            .is_some_and(|age| !batch.events.is_empty() && batch.sent.elapsed() > age)
    }

    /// What was waited and dropped so far.
    pub fn stats(&self) -> QueueStats {
        QueueStats {
            dropped_events: self.dropped_events.load(Ordering::Relaxed),
            drops: self.drops.load(Ordering::Relaxed),
            longest_wait: Duration::from_nanos(self.longest_wait_ns.load(Ordering::Relaxed)),
        }
    }

    /// Waits until the writer thread is at most `limit` batches behind (or
    /// gone), or `max_wait` passed.
    #[cold]
    pub fn wait(&self) {
        let start = Instant::now();
        let deadline = self.max_wait.map(|w| start + w);
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        while self.batches.load(Ordering::Acquire) > self.limit
            && !self.closed.load(Ordering::Acquire)
        {
            g = match deadline {
                None => self.drained.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    self.drained
                        .wait_timeout(g, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        drop(g);
        let waited = start.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.longest_wait_ns.fetch_max(waited, Ordering::Relaxed);
    }

    /// The writer thread took a batch off the channel.
    fn received(&self) {
        let before = self.batches.fetch_sub(1, Ordering::AcqRel);
        if before == self.limit + 1 {
            // Under the lock, so that a thread between its check and its
            // wait cannot miss the wake-up.
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.drained.notify_all();
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.drained.notify_all();
    }
}

/// Closes the backlog when the writer thread ends, even by a panic.
struct CloseOnExit(Arc<Backlog>);

impl Drop for CloseOnExit {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The writer thread's timer: every event is written and flushed to the
/// output about `interval` after it was recorded, at most, however slowly
/// the recording fills its buffers.
pub(crate) struct FlushTimer {
    interval: Duration,
    /// Takes the recording's buffer, sent as a batch to flush; returns
    /// whether there was anything in it.
    take_buffer: Box<dyn FnMut() -> bool + Send>,
    /// Since when the recording has been filling the buffer it holds: the
    /// last time the writer thread got one (its events are all younger).
    buffer_since: Instant,
    /// The oldest moment an event written to the trace but not flushed to
    /// the output may have been recorded.
    unflushed_since: Option<Instant>,
}

impl FlushTimer {
    pub fn new(interval: Duration, take_buffer: impl FnMut() -> bool + Send + 'static) -> Self {
        FlushTimer {
            interval,
            take_buffer: Box::new(take_buffer),
            buffer_since: Instant::now(),
            unflushed_since: None,
        }
    }

    /// How long until the timer has work.
    fn timeout(&self, now: Instant) -> Duration {
        let due = match self.unflushed_since {
            Some(t) => t.min(self.buffer_since),
            None => self.buffer_since,
        } + self.interval;
        due.saturating_duration_since(now)
    }

    /// A batch from the recording arrived (its events were recorded since
    /// `buffer_since`), to be written now.
    fn received(&mut self, now: Instant) {
        self.unflushed_since.get_or_insert(self.buffer_since);
        self.buffer_since = now;
    }

    /// Runs what is due: takes a buffer the recording has held for an
    /// interval (it arrives as a batch marked for flushing), and flushes
    /// events written an interval ago.
    fn tick<W: Write>(
        &mut self,
        now: Instant,
        trace: &mut TraceWriter<W>,
        failed: &mut Option<FormatError>,
    ) {
        if now >= self.buffer_since + self.interval {
            (self.take_buffer)();
            self.buffer_since = now;
        }
        if self
            .unflushed_since
            .is_some_and(|t| now >= t + self.interval)
        {
            self.flushed();
            if failed.is_none()
                && let Err(e) = trace.flush()
            {
                *failed = Some(e);
            }
        }
    }

    fn flushed(&mut self) {
        self.unflushed_since = None;
    }
}

/// The most events held back waiting for an initial state: past it, the
/// state is given up on and events are written without it, rather than
/// kept without bound.
const MAX_HELD_EVENTS: usize = 1 << 20;

/// What a finished trace holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceSummary {
    /// Events written, all kinds.
    pub events: u64,
    /// Events by kind.
    pub counts: KindCounts,
    /// Bytes written.
    pub bytes: u64,
    /// Distinct stacks recorded.
    pub stacks: u64,
    /// Distinct instruction addresses symbolized.
    pub addresses: u64,
    /// Distinct codes of the frame source named.
    pub codes: u64,
    /// Events the recording dropped because the output could not keep up
    /// (the sum of the trace's `events_dropped` markers, which `events`
    /// counts; the dropped events are not).
    pub dropped_events: u64,
    /// A bounded recording's parts that could not be joined into the
    /// trace, each with why; they are kept in the ring folder.
    pub parts_left_out: Vec<PartLeftOut>,
}

struct State {
    strings: Vec<StringId>,
    stacks: Vec<StackId>,
    symbolizer: Symbolizer,
    /// Present when the recorder has a frame source: its keys are sealed.
    source: Option<SourceFrames>,
    scratch: Vec<FrameId>,
    /// Whether every recorder-local id so far is the trace's id too (always
    /// so without stacks, phases and annotations): then events go into the
    /// trace as they are, without [`remap`] (a tenth of this thread's work
    /// per event).
    identity: bool,
    blocks: Option<ObservedBlocks>,
    /// The events the markers written say were dropped.
    dropped_events: u64,
    window: Option<Window>,
}

pub(crate) fn run(
    mut trace: TraceWriter<Output>,
    rx: Receiver<Msg>,
    spare: SyncSender<Vec<Event>>,
    source: Option<Arc<dyn FrameSource>>,
    setup: WriterSetup,
    backlog: Arc<Backlog>,
    mut timer: Option<FlushTimer>,
) -> Result<TraceSummary, FormatError> {
    let _close = CloseOnExit(backlog.clone());
    let mut state = State {
        strings: vec![StringId::EMPTY],
        stacks: vec![StackId::NONE],
        symbolizer: Symbolizer::default(),
        source: source.map(SourceFrames::new),
        scratch: Vec::new(),
        identity: true,
        blocks: setup.blocks,
        dropped_events: 0,
        window: setup.window,
    };
    let mut failed: Option<FormatError> = None;
    // Batches waiting for the initial state, while one is awaited.
    let mut held: Option<Vec<Batch>> = setup.await_initial_state.then(Vec::new);
    let mut held_events = 0usize;
    let write = |trace: &mut TraceWriter<Output>,
                 state: &mut State,
                 failed: &mut Option<FormatError>,
                 timer: &mut Option<FlushTimer>,
                 mut batch: Batch| {
        if failed.is_none()
            && let Err(e) = write_batch(trace, state, &mut batch)
        {
            *failed = Some(e);
        }
        if batch.flush
            && let Some(t) = timer
        {
            t.flushed();
        }
        batch.events.clear();
        let _ = spare.try_send(batch.events);
    };
    // Keep receiving after a failure so that the recorder never waits on
    // the backlog; its events are dropped.
    loop {
        let msg = match &mut timer {
            None => match rx.recv() {
                Ok(msg) => msg,
                Err(_) => break,
            },
            Some(t) => match rx.recv_timeout(t.timeout(Instant::now())) {
                Ok(msg) => msg,
                Err(RecvTimeoutError::Timeout) => {
                    t.tick(Instant::now(), &mut trace, &mut failed);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            },
        };
        if let Msg::Batch(_) = &msg {
            backlog.received();
            if let Some(t) = &mut timer
                && held.is_none()
            {
                t.received(Instant::now());
            }
        }
        match msg {
            Msg::Batch(batch) => match &mut held {
                Some(waiting) if held_events + batch.events.len() <= MAX_HELD_EVENTS => {
                    held_events += batch.events.len();
                    waiting.push(batch);
                }
                Some(_) => {
                    for b in held.take().into_iter().flatten() {
                        write(&mut trace, &mut state, &mut failed, &mut timer, b);
                    }
                    write(&mut trace, &mut state, &mut failed, &mut timer, batch);
                    flush_now(&mut trace, &mut failed, &mut timer);
                }
                None => {
                    let mut batch = batch;
                    if backlog.is_stale(&batch) {
                        drop_stale(&mut batch, &backlog);
                    }
                    write(&mut trace, &mut state, &mut failed, &mut timer, batch)
                }
            },
            Msg::InitialState(initial) => {
                // Only the first state counts, and only before any event.
                if let Some(waiting) = held.take() {
                    if let Some(blocks) = &mut state.blocks {
                        blocks.load(&initial);
                    }
                    if let Some(window) = &mut state.window {
                        window.live.load(&initial);
                    }
                    if failed.is_none()
                        && let Err(e) = trace.write_initial_state(&initial)
                    {
                        failed = Some(e);
                    }
                    for b in waiting {
                        write(&mut trace, &mut state, &mut failed, &mut timer, b);
                    }
                    // The state and the events held for it are on disk now.
                    flush_now(&mut trace, &mut failed, &mut timer);
                }
            }
            Msg::Sync(ack) => {
                flush_now(&mut trace, &mut failed, &mut timer);
                let _ = ack.send(match &failed {
                    Some(e) => Err(e.to_string()),
                    None => Ok(()),
                });
            }
            Msg::Dump(path, done) => {
                flush_now(&mut trace, &mut failed, &mut timer);
                match (&mut state.window, &failed) {
                    (_, Some(e)) => {
                        let _ = done.send(Err(e.to_string()));
                    }
                    (None, None) => {
                        let _ = done.send(Err(
                            "only a bounded recording (one that keeps its last part) can be dumped"
                                .into(),
                        ));
                    }
                    (Some(window), None) => {
                        if let Err(e) = window.dump(&mut trace, path, Some(done)) {
                            failed = Some(e);
                        }
                    }
                }
            }
        }
        // A writer that never runs out of batches (an output slower than
        // the recording) never times out waiting: its timer is run here,
        // so that chunks are still cut and flushed within the interval
        // rather than at `chunk_events`, seconds of events later.
        if let Some(t) = &mut timer
            && held.is_none()
        {
            let now = Instant::now();
            if t.timeout(now).is_zero() {
                t.tick(now, &mut trace, &mut failed);
            }
        }
    }
    // An initial state that never came: the events are written all the same.
    for b in held.take().into_iter().flatten() {
        write(&mut trace, &mut state, &mut failed, &mut timer, b);
    }
    if let Some(e) = failed {
        return Err(e);
    }
    // A bounded recording's summary is of the trace it leaves: the parts
    // kept, joined.
    let (counts, bytes, parts_left_out) = match state.window.take() {
        Some(window) => {
            let finished = window.finish(trace)?;
            (finished.joined.counts, finished.bytes, finished.left_out)
        }
        None => (*trace.counts(), trace.finish()?.bytes(), Vec::new()),
    };
    Ok(TraceSummary {
        events: counts.total(),
        counts,
        bytes,
        stacks: state.stacks.len() as u64 - 1,
        addresses: state.symbolizer.addresses(),
        codes: state.source.as_ref().map_or(0, SourceFrames::codes),
        dropped_events: state.dropped_events,
        parts_left_out,
    })
}

/// Replaces the events of a batch that waited too long with one marker
/// saying how many there were (folding in the marker the batch may begin
/// with). Its strings and stacks are still written: later events use them.
fn drop_stale(batch: &mut Batch, backlog: &Backlog) {
    let (Some(first), Some(last)) = (batch.events.first(), batch.events.last()) else {
        return;
    };
    let (mut marker, had_marker) = match first.data {
        EventData::EventsDropped(d) => (d, true),
        _ => (
            DroppedEvents {
                count: 0,
                from_ns: first.time_ns,
            },
            false,
        ),
    };
    let to_ns = last.time_ns;
    let dropped_now = batch.events.len() as u64 - had_marker as u64;
    marker.count += dropped_now;
    backlog.dropped(dropped_now, !had_marker);
    batch.events.clear();
    batch.events.push(Event {
        time_ns: to_ns,
        data: EventData::EventsDropped(marker),
    });
}

/// Writes the buffered events as a chunk and flushes the output.
fn flush_now<W: Write>(
    trace: &mut TraceWriter<W>,
    failed: &mut Option<FormatError>,
    timer: &mut Option<FlushTimer>,
) {
    if let Some(t) = timer {
        t.flushed();
    }
    if failed.is_none()
        && let Err(e) = trace.flush()
    {
        *failed = Some(e);
    }
}

fn write_batch(
    trace: &mut TraceWriter<Output>,
    state: &mut State,
    batch: &mut Batch,
) -> Result<(), FormatError> {
    for s in &batch.strings {
        let id = trace.intern_string(s);
        state.identity &= id.0 as usize == state.strings.len();
        state.strings.push(id);
    }
    for key in &batch.stacks {
        let (ips, external) = split_key(key, state.source.is_some());
        state.scratch.clear();
        state
            .scratch
            .extend_from_slice(&state.symbolizer.stack(ips, trace));
        if let Some(source) = &mut state.source {
            source.extend(external, trace, &mut state.scratch);
        }
        let id = trace.intern_stack(&state.scratch);
        state.identity &= id.0 as usize == state.stacks.len();
        state.stacks.push(id);
    }
    for event in &mut batch.events {
        if !state.identity {
            remap(&mut event.data, state);
        }
        if let Some(blocks) = &mut state.blocks {
            size_blocks(&mut event.data, blocks);
        }
        if let EventData::EventsDropped(d) = event.data {
            state.dropped_events += d.count;
        }
        trace.push(*event)?;
    }
    if batch.flush {
        trace.flush()?;
    }
    if let Some(window) = &mut state.window {
        let oom = window.follow(&batch.events);
        window.after_batch(trace, oom)?;
    }
    Ok(())
}

/// Fills in the block sizes of an observed allocator's block events (which
/// carry requested sizes only) and follows its segments.
fn size_blocks(data: &mut EventData, blocks: &mut ObservedBlocks) {
    let fallback = |blocks: &ObservedBlocks, requested| blocks.config().round_size(requested);
    match data {
        EventData::Alloc(b) => b.size = blocks.alloc(b.addr, b.requested),
        EventData::FreeRequested(b) => {
            b.size = blocks
                .size(b.addr)
                .unwrap_or_else(|| fallback(blocks, b.requested))
        }
        EventData::FreeCompleted(b) => {
            b.size = blocks
                .free(b.addr)
                .unwrap_or_else(|| fallback(blocks, b.requested))
        }
        EventData::SegmentAlloc(s) => blocks.reserve(s.addr, s.size, false),
        EventData::SegmentMap(s) => blocks.reserve(s.addr, s.size, true),
        EventData::SegmentFree(s) | EventData::SegmentUnmap(s) => blocks.release(s.addr, s.size),
        _ => {}
    }
}

fn remap(data: &mut EventData, state: &State) {
    let stack = |s: &mut StackId| *s = state.stacks[s.0 as usize];
    let string = |s: &mut StringId| *s = state.strings[s.0 as usize];
    match data {
        EventData::Alloc(b) | EventData::FreeRequested(b) | EventData::FreeCompleted(b) => {
            stack(&mut b.stack)
        }
        EventData::SegmentAlloc(s)
        | EventData::SegmentFree(s)
        | EventData::SegmentMap(s)
        | EventData::SegmentUnmap(s) => stack(&mut s.stack),
        EventData::Oom(o) => stack(&mut o.stack),
        EventData::EmptyCache(e) => stack(&mut e.stack),
        EventData::PhaseBegin { name, .. } | EventData::PhaseEnd { name, .. } => string(name),
        EventData::Annotation { key, value } => {
            string(key);
            string(value);
        }
        EventData::Tag(_)
        | EventData::Limit(_)
        | EventData::DeviceMemory(_)
        | EventData::EventsDropped(_) => {}
        // Kinds a later format adds: the recorder makes none of them.
        _ => {}
    }
}
