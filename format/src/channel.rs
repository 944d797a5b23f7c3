//! A trace handed from one thread to another as decoded events: the same
//! header, symbols, initial state and events as a trace file, without
//! encoding them into chunks only to decode them again.
//!
//! A producer that runs in the consumer's process (the analyzer's snapshot
//! import feeding its own replay) builds the trace's beginning with a
//! [`TraceChannel`], [`opens`](TraceChannel::open) it into a [`TraceSender`]
//! and a [`TraceReceiver`], and pushes events on its thread while the
//! consumer reads them on its own. [`TraceReceiver::write_to`] turns the
//! received trace into a file.
//!
//! ```
//! use vramtrace_format::*;
//! let mut channel = TraceChannel::new(Header::default());
//! let name = channel.intern_string("forward");
//! let (mut tx, mut rx) = channel.open(4);
//! let producer = std::thread::spawn(move || {
//!     tx.push(Event { time_ns: 5, data: EventData::PhaseBegin { name, thread: 0 } }).unwrap();
//!     tx.finish();
//! });
//! let mut events = Vec::new();
//! while let Some(batch) = rx.next_batch().unwrap() {
//!     events.extend_from_slice(&batch);
//!     rx.recycle(batch);
//! }
//! producer.join().unwrap();
//! assert_eq!(events.len(), 1);
//! assert_eq!(rx.symbols().string(name), Some("forward"));
//! assert!(rx.is_complete());
//! ```

use super::error::FormatError;
use super::event::Event;
use super::header::{Header, InitialState};
use super::symbols::{Frame, FrameId, Interner, StackId, StringId, SymbolDefinitions, SymbolTable};
use super::writer::TraceWriter;
use super::{VERSION_MAJOR, VERSION_MINOR};
use std::io::Write;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};

/// Events sent at a time: enough to make a send, and the wake-up of a
/// waiting thread on the other side, rare (with 4,096, the wake-ups of a
/// 3 M-event snapshot's stream were about 2% of its samples), few enough
/// that a batch stays in the shared cache between producer and consumer.
const BATCH_EVENTS: usize = 16384;

/// The beginning of a trace sent through a channel: its header, the symbols
/// known before the first event and its initial state. A producer in the
/// consumer's process builds one, [`opens`](TraceChannel::open) it into a
/// [`TraceSender`] and a [`TraceReceiver`], and pushes events on its thread
/// while the consumer reads them on its own.
#[derive(Debug)]
pub struct TraceChannel {
    header: Header,
    interner: Interner,
    initial: Option<InitialState>,
}

impl TraceChannel {
    /// Starts a trace with this header (its version fields are set to this
    /// format's version, as [`TraceWriter`] does).
    pub fn new(mut header: Header) -> Self {
        header.version_major = VERSION_MAJOR;
        header.version_minor = VERSION_MINOR;
        TraceChannel {
            header,
            interner: Interner::new(),
            initial: None,
        }
    }

    /// Makes room for at least this many more strings, frames and stacks,
    /// for a producer that knows how many it will intern (at most): the
    /// tables do not grow, and rehash, one doubling at a time.
    pub fn reserve_symbols(&mut self, strings: usize, frames: usize, stacks: usize) {
        self.interner.reserve(strings, frames, stacks);
    }

    /// Interns a string, returning its id.
    pub fn intern_string(&mut self, s: &str) -> StringId {
        self.interner.string(s)
    }

    /// Interns a frame, returning its id. Its strings must come from this trace.
    pub fn intern_frame(&mut self, frame: Frame) -> FrameId {
        self.interner.frame(frame)
    }

    /// Interns a stack (frames innermost first), returning its id.
    pub fn intern_stack(&mut self, frames: &[FrameId]) -> StackId {
        debug_assert!(frames.iter().all(|&f| self.interner.knows_frame(f)));
        self.interner.stack(frames)
    }

    /// Sets the allocator state at the start of the trace.
    pub fn set_initial_state(&mut self, state: InitialState) {
        self.initial = Some(state);
    }

    /// Opens the channel: the receiver holds the header, the symbols so far
    /// and the initial state; events follow as the sender pushes them. Up to
    /// `queue_batches` batches of events wait for the receiver before
    /// [`TraceSender::push`] blocks.
    pub fn open(mut self, queue_batches: usize) -> (TraceSender, TraceReceiver) {
        let mut symbols = SymbolTable::new();
        symbols
            .extend(self.interner.take_pending(), 0)
            .expect("an interner's definitions continue an empty table");
        let queue = queue_batches.max(1);
        let (tx, rx) = sync_channel(queue);
        // Spent buffers come back to the sender: fresh ones would cost page
        // faults on every batch.
        let (spare_tx, spare_rx) = sync_channel(queue + 2);
        let sender = TraceSender {
            interner: self.interner,
            events: Vec::with_capacity(BATCH_EVENTS),
            tx,
            spare: spare_rx,
            receiver_gone: false,
        };
        let receiver = TraceReceiver {
            header: self.header,
            symbols,
            initial: self.initial,
            rx,
            spare: spare_tx,
            events_received: 0,
            complete: false,
            done: false,
        };
        (sender, receiver)
    }
}

/// What passes through the channel.
enum Message {
    /// Symbols first used by `events`, then the events.
    Batch {
        symbols: SymbolDefinitions,
        events: Vec<Event>,
    },
    /// The trace is complete.
    End,
}

/// The producing end of a trace channel. Dropped without
/// [`finish`](TraceSender::finish) (its producer failed or panicked), the
/// receiver gets every event pushed before, then an error.
pub struct TraceSender {
    interner: Interner,
    events: Vec<Event>,
    tx: SyncSender<Message>,
    spare: Receiver<Vec<Event>>,
    receiver_gone: bool,
}

/// The receiver was dropped: nobody reads the events any more, so the
/// producer can stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the trace's receiver is gone")]
pub struct ReceiverGone;

impl TraceSender {
    /// Interns a string, returning its id; it reaches the receiver with the
    /// next batch, before any event that uses it.
    pub fn intern_string(&mut self, s: &str) -> StringId {
        self.interner.string(s)
    }

    /// Sends an event (in batches). Fails once the receiver is gone, which
    /// happens when its reader stopped early: the producer should stop too.
    #[inline]
    pub fn push(&mut self, event: Event) -> Result<(), ReceiverGone> {
        self.events.push(event);
        if self.events.len() >= BATCH_EVENTS {
            self.send_batch()?;
        }
        Ok(())
    }

    /// Sends the last events and marks the trace complete.
    pub fn finish(mut self) {
        if self.send_batch().is_ok() {
            let _ = self.tx.send(Message::End);
        }
    }

    fn send_batch(&mut self) -> Result<(), ReceiverGone> {
        if self.receiver_gone {
            return Err(ReceiverGone);
        }
        let fresh = match self.spare.try_recv() {
            Ok(buf) => buf,
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => {
                Vec::with_capacity(BATCH_EVENTS)
            }
        };
        let message = Message::Batch {
            symbols: self.interner.take_pending(),
            events: std::mem::replace(&mut self.events, fresh),
        };
        if self.tx.send(message).is_err() {
            self.receiver_gone = true;
            return Err(ReceiverGone);
        }
        Ok(())
    }
}

impl Drop for TraceSender {
    fn drop(&mut self) {
        // A sender dropped unfinished still delivers what it has; the missing
        // end tells the receiver the trace stopped short.
        if !self.events.is_empty() && !self.receiver_gone {
            let _ = self.send_batch();
        }
    }
}

/// The consuming end of a trace channel: a trace read without decoding.
pub struct TraceReceiver {
    header: Header,
    symbols: SymbolTable,
    initial: Option<InitialState>,
    rx: Receiver<Message>,
    spare: SyncSender<Vec<Event>>,
    events_received: u64,
    complete: bool,
    done: bool,
}

impl std::fmt::Debug for TraceReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReceiver")
            .field("header", &self.header)
            .field("events_received", &self.events_received)
            .field("complete", &self.complete)
            .finish_non_exhaustive()
    }
}

impl TraceReceiver {
    /// The trace's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The symbols received so far: complete for every event received.
    pub fn symbols(&self) -> &SymbolTable {
        &self.symbols
    }

    /// The allocator state at the start of the trace, if the producer set one.
    pub fn initial_state(&self) -> Option<&InitialState> {
        self.initial.as_ref()
    }

    /// The next batch of events, waiting for the producer; `None` once the
    /// trace is complete. An error if the producer stopped before completing
    /// it (every event it pushed was received before).
    pub fn next_batch(&mut self) -> Result<Option<Vec<Event>>, FormatError> {
        if self.done {
            return Ok(None);
        }
        loop {
            match self.rx.recv() {
                Ok(Message::Batch { symbols, events }) => {
                    self.symbols
                        .extend(symbols, 0)
                        .expect("the sender's definitions continue the receiver's table");
                    if events.is_empty() {
                        continue;
                    }
                    self.events_received += events.len() as u64;
                    return Ok(Some(events));
                }
                Ok(Message::End) => {
                    self.done = true;
                    self.complete = true;
                    return Ok(None);
                }
                Err(_) => {
                    self.done = true;
                    return Err(FormatError::ProducerStopped);
                }
            }
        }
    }

    /// Hands a spent batch back to the sender for reuse.
    pub fn recycle(&self, mut batch: Vec<Event>) {
        batch.clear();
        let _ = self.spare.try_send(batch);
    }

    /// Events received so far.
    pub fn events_received(&self) -> u64 {
        self.events_received
    }

    /// Whether the producer finished the trace and every event was received.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Writes the rest of the trace to `writer`, which must be fresh (its
    /// header written, nothing else): the symbols, the initial state, then
    /// every event as it arrives. The ids stay the same: the writer interns
    /// the definitions in the order the sender made them. Returns whether the
    /// trace was complete; a producer that stopped short is an error after
    /// its events are written.
    pub fn write_to<W: Write>(mut self, writer: &mut TraceWriter<W>) -> Result<(), FormatError> {
        let mut copied = Copied::default();
        copied.intern_new(&self.symbols, writer);
        if let Some(initial) = &self.initial {
            writer.write_initial_state(initial)?;
        }
        while let Some(batch) = self.next_batch()? {
            copied.intern_new(&self.symbols, writer);
            writer.push_all(batch.iter().copied())?;
            self.recycle(batch);
        }
        Ok(())
    }
}

/// How much of a receiver's symbol table a writer has interned.
#[derive(Default)]
struct Copied {
    strings: usize,
    frames: usize,
    stacks: usize,
}

impl Copied {
    fn intern_new<W: Write>(&mut self, symbols: &SymbolTable, writer: &mut TraceWriter<W>) {
        // Index 0 (the empty string and stack) is predefined on both sides.
        for i in self.strings.max(1)..symbols.string_count() {
            let s = symbols.string(StringId(i as u32)).unwrap_or_default();
            let id = writer.intern_string(s);
            debug_assert_eq!(id.0 as usize, i);
        }
        for i in self.frames..symbols.frame_count() {
            if let Some(&frame) = symbols.frame(FrameId(i as u32)) {
                let id = writer.intern_frame(frame);
                debug_assert_eq!(id.0 as usize, i);
            }
        }
        for i in self.stacks.max(1)..symbols.stack_count() {
            let id = writer.intern_stack(symbols.stack(StackId(i as u32)));
            debug_assert_eq!(id.0 as usize, i);
        }
        self.strings = symbols.string_count();
        self.frames = symbols.frame_count();
        self.stacks = symbols.stack_count();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::tests::alloc;
    use crate::{EventData, TraceReader};

    /// A producer on its own thread: symbols before and during the events.
    fn produce(events: u64, finish: bool) -> TraceReceiver {
        let mut channel = TraceChannel::new(Header::default());
        let f = channel.intern_string("f");
        let file = channel.intern_string("a.py");
        let frame = channel.intern_frame(Frame::Symbol {
            function: f,
            file,
            line: 3,
        });
        let stack = channel.intern_stack(&[frame]);
        channel.set_initial_state(InitialState::default());
        let (mut tx, rx) = channel.open(2);
        std::thread::spawn(move || {
            for i in 0..events {
                tx.push(alloc(i, i * 512, stack)).unwrap();
                if i == 5000 {
                    let name = tx.intern_string("late");
                    tx.push(Event {
                        time_ns: i,
                        data: EventData::PhaseBegin { name, thread: 0 },
                    })
                    .unwrap();
                }
            }
            if finish {
                tx.finish();
            }
        });
        rx
    }

    #[test]
    fn every_event_arrives_in_order_with_its_symbols() {
        let mut rx = produce(10_000, true);
        let mut times = Vec::new();
        while let Some(batch) = rx.next_batch().unwrap() {
            for e in &batch {
                if let EventData::PhaseBegin { name, .. } = e.data {
                    assert_eq!(rx.symbols().string(name), Some("late"));
                }
                times.push(e.time_ns);
            }
            rx.recycle(batch);
        }
        assert_eq!(times.len(), 10_001);
        assert!(times.is_sorted());
        assert!(rx.is_complete());
        assert_eq!(rx.events_received(), 10_001);
        assert!(rx.initial_state().is_some());
        assert!(rx.next_batch().unwrap().is_none());
    }

    /// Read through `EventSource`, a receiver's batches are checked and
    /// consumed on the calling thread, each with its own check and the
    /// events received so far; a consumer that breaks stops the reading.
    #[test]
    fn checked_batches_of_a_receiver_come_in_order_on_the_calling_thread() {
        use crate::EventSource;
        use std::ops::ControlFlow;
        let caller = std::thread::current().id();
        let late = |events: &[Event]| events.iter().any(|e| e.time_ns >= 9_000);
        let mut rx = produce(10_000, true);
        let (mut times, mut flagged, mut last_position) = (Vec::new(), 0, 0);
        let flow = rx
            .try_for_each_checked_batch(late, |batch, checked, symbols, position| {
                assert_eq!(std::thread::current().id(), caller);
                assert_eq!(checked, late(batch));
                assert!(symbols.string(StringId(0)).is_some());
                flagged += checked as usize;
                assert!(position >= last_position + batch.len() as u64);
                last_position = position;
                times.extend(batch.iter().map(|e| e.time_ns));
                ControlFlow::Continue(())
            })
            .unwrap();
        assert!(flow.is_continue());
        assert_eq!(times.len(), 10_001);
        assert!(times.is_sorted());
        assert_eq!(last_position, 10_001);
        assert!(flagged >= 1);
        assert!(rx.is_complete());

        let mut rx = produce(10_000, true);
        let mut batches = 0;
        let flow = rx
            .try_for_each_checked_batch(late, |_, _, _, _| {
                batches += 1;
                ControlFlow::Break(())
            })
            .unwrap();
        assert!(flow.is_break());
        assert_eq!(batches, 1);
    }

    #[test]
    fn a_producer_that_stops_short_delivers_its_events_then_an_error() {
        let mut rx = produce(5_000, false);
        let mut n = 0;
        let err = loop {
            match rx.next_batch() {
                Ok(Some(batch)) => n += batch.len(),
                Ok(None) => panic!("an unfinished trace must not end cleanly"),
                Err(e) => break e,
            }
        };
        assert_eq!(n, 5_000);
        assert!(matches!(err, FormatError::ProducerStopped));
        assert!(!rx.is_complete());
    }

    /// Room made beforehand, more or less than what is interned, changes no
    /// id and no symbol.
    #[test]
    fn symbols_interned_after_reserving_are_the_same() {
        let intern = |reserve: Option<(usize, usize, usize)>| {
            let mut channel = TraceChannel::new(Header::default());
            if let Some((strings, frames, stacks)) = reserve {
                channel.reserve_symbols(strings, frames, stacks);
            }
            let mut ids = Vec::new();
            let mut frames = Vec::new();
            for i in 0..300u32 {
                let function = channel.intern_string(&format!("f{}", i % 100));
                let file = channel.intern_string(&format!("m{}.py", i % 7));
                let frame = channel.intern_frame(Frame::Symbol {
                    function,
                    file,
                    line: i % 150,
                });
                frames.push(frame);
                let stack = channel.intern_stack(&frames[frames.len().saturating_sub(4)..]);
                ids.push((function, file, frame, stack));
            }
            let (_, rx) = channel.open(1);
            (ids, format!("{:?}", rx.symbols()))
        };
        let plain = intern(None);
        assert_eq!(intern(Some((600, 300, 300))), plain);
        assert_eq!(intern(Some((2, 1, 1))), plain);
        assert_eq!(intern(Some((0, 0, 0))), plain);
    }

    #[test]
    fn a_dropped_receiver_stops_the_sender() {
        let mut channel = TraceChannel::new(Header::default());
        let stack = channel.intern_stack(&[]);
        let (mut tx, rx) = channel.open(1);
        drop(rx);
        let failed = (0..3 * BATCH_EVENTS as u64).find_map(|i| tx.push(alloc(i, 0, stack)).err());
        assert_eq!(failed, Some(ReceiverGone));
    }

    #[test]
    fn a_received_trace_writes_the_file_a_writer_would() {
        let rx = produce(10_000, true);
        let mut written = TraceWriter::new(Vec::new(), rx.header().clone()).unwrap();
        rx.write_to(&mut written).unwrap();
        let bytes = written.finish().unwrap();
        let mut file = TraceReader::new(&bytes[..]).unwrap();
        let from_file: Vec<Event> = file.events().collect::<Result<_, _>>().unwrap();

        // The same trace, received in memory: the file holds the same events
        // under the same ids.
        let mut rx = produce(10_000, true);
        let mut received = Vec::new();
        while let Some(batch) = rx.next_batch().unwrap() {
            received.extend_from_slice(&batch);
        }
        assert_eq!(from_file, received);
        assert_eq!(file.symbols(), rx.symbols());
        assert_eq!(file.initial_state(), rx.initial_state());
        assert_eq!(file.header(), rx.header());
        assert!(file.footer().is_some());
    }
}
