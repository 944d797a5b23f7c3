//! The writer thread: maps recorder-local ids to the trace's, symbolizes new
//! stacks, works out the block sizes of observed allocations, encodes and
//! writes.

use super::stacks::{FrameSource, SourceFrames, Symbolizer, split_key};
use crate::allocator::ObservedBlocks;
use crate::format::{
    Event, EventData, FormatError, FrameId, InitialState, KindCounts, StackId, StringId,
    TraceWriter,
};
use std::io::{self, Write};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender};

/// Events stamped by the recorder, with the strings and stacks first used in
/// them (recorder-local ids, continuing those of earlier batches).
pub(crate) struct Batch {
    pub strings: Vec<Box<str>>,
    pub stacks: Vec<Box<[usize]>>,
    pub events: Vec<Event>,
    /// Write a chunk and flush the output after this batch.
    pub flush: bool,
}

pub(crate) enum Msg {
    Batch(Batch),
    /// The state the trace starts from, for a writer set up to wait for it.
    InitialState(Box<InitialState>),
    /// Acknowledge once everything before this message is written and flushed.
    Sync(SyncSender<Result<(), String>>),
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
}

/// A writer that counts the bytes through it.
pub(crate) struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W> Counting<W> {
    pub fn new(inner: W) -> Self {
        Counting { inner, bytes: 0 }
    }
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
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
}

pub(crate) fn run<W: Write>(
    mut trace: TraceWriter<Counting<W>>,
    rx: Receiver<Msg>,
    spare: SyncSender<Vec<Event>>,
    source: Option<Arc<dyn FrameSource>>,
    setup: WriterSetup,
) -> Result<TraceSummary, FormatError> {
    let mut state = State {
        strings: vec![StringId::EMPTY],
        stacks: vec![StackId::NONE],
        symbolizer: Symbolizer::default(),
        source: source.map(SourceFrames::new),
        scratch: Vec::new(),
        identity: true,
        blocks: setup.blocks,
    };
    let mut failed: Option<FormatError> = None;
    // Batches waiting for the initial state, while one is awaited.
    let mut held: Option<Vec<Batch>> = setup.await_initial_state.then(Vec::new);
    let mut held_events = 0usize;
    let write = |trace: &mut TraceWriter<Counting<W>>,
                 state: &mut State,
                 failed: &mut Option<FormatError>,
                 mut batch: Batch| {
        if failed.is_none()
            && let Err(e) = write_batch(trace, state, &mut batch)
        {
            *failed = Some(e);
        }
        batch.events.clear();
        let _ = spare.try_send(batch.events);
    };
    // Keep receiving after a failure so that the recorder never blocks on a
    // full channel; its events are dropped.
    for msg in rx {
        match msg {
            Msg::Batch(batch) => match &mut held {
                Some(waiting) if held_events + batch.events.len() <= MAX_HELD_EVENTS => {
                    held_events += batch.events.len();
                    waiting.push(batch);
                }
                Some(_) => {
                    for b in held.take().into_iter().flatten() {
                        write(&mut trace, &mut state, &mut failed, b);
                    }
                    write(&mut trace, &mut state, &mut failed, batch);
                }
                None => write(&mut trace, &mut state, &mut failed, batch),
            },
            Msg::InitialState(initial) => {
                // Only the first state counts, and only before any event.
                if let Some(waiting) = held.take() {
                    if let Some(blocks) = &mut state.blocks {
                        blocks.load(&initial);
                    }
                    if failed.is_none()
                        && let Err(e) = trace.write_initial_state(&initial)
                    {
                        failed = Some(e);
                    }
                    for b in waiting {
                        write(&mut trace, &mut state, &mut failed, b);
                    }
                }
            }
            Msg::Sync(ack) => {
                let result = match &failed {
                    Some(e) => Err(e.to_string()),
                    None => trace.flush().map_err(|e| {
                        let text = e.to_string();
                        failed = Some(e);
                        text
                    }),
                };
                let _ = ack.send(result);
            }
        }
    }
    // An initial state that never came: the events are written all the same.
    for b in held.take().into_iter().flatten() {
        write(&mut trace, &mut state, &mut failed, b);
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let counts = *trace.counts();
    let out = trace.finish()?;
    Ok(TraceSummary {
        events: counts.total(),
        counts,
        bytes: out.bytes,
        stacks: state.stacks.len() as u64 - 1,
        addresses: state.symbolizer.addresses(),
        codes: state.source.as_ref().map_or(0, SourceFrames::codes),
    })
}

fn write_batch<W: Write>(
    trace: &mut TraceWriter<W>,
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
        trace.push(*event)?;
    }
    if batch.flush {
        trace.flush()?;
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
        EventData::PhaseBegin { name } | EventData::PhaseEnd { name } => string(name),
        EventData::Annotation { key, value } => {
            string(key);
            string(value);
        }
    }
}
