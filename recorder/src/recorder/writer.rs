//! The writer thread: maps recorder-local ids to the trace's, symbolizes new
//! stacks, encodes and writes.

use super::stacks::{FrameSource, SourceFrames, Symbolizer, split_key};
use crate::format::{
    Event, EventData, FormatError, FrameId, KindCounts, StackId, StringId, TraceWriter,
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
    /// Acknowledge once everything before this message is written and flushed.
    Sync(SyncSender<Result<(), String>>),
}

pub(crate) struct WriterSummary {
    pub counts: KindCounts,
    pub bytes: u64,
    pub stacks: u64,
    pub addresses: u64,
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
}

pub(crate) fn run<W: Write>(
    mut trace: TraceWriter<Counting<W>>,
    rx: Receiver<Msg>,
    spare: SyncSender<Vec<Event>>,
    source: Option<Arc<dyn FrameSource>>,
) -> Result<WriterSummary, FormatError> {
    let mut state = State {
        strings: vec![StringId::EMPTY],
        stacks: vec![StackId::NONE],
        symbolizer: Symbolizer::default(),
        source: source.map(SourceFrames::new),
        scratch: Vec::new(),
        identity: true,
    };
    let mut failed: Option<FormatError> = None;
    // Keep receiving after a failure so that the recorder never blocks on a
    // full channel; its events are dropped.
    for msg in rx {
        match msg {
            Msg::Batch(mut batch) => {
                if failed.is_none()
                    && let Err(e) = write_batch(&mut trace, &mut state, &mut batch)
                {
                    failed = Some(e);
                }
                batch.events.clear();
                let _ = spare.try_send(batch.events);
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
    if let Some(e) = failed {
        return Err(e);
    }
    let counts = *trace.counts();
    let out = trace.finish()?;
    Ok(WriterSummary {
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
        trace.push(*event)?;
    }
    if batch.flush {
        trace.flush()?;
    }
    Ok(())
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
