//! [`EventSource`]: a trace's events read in order, whether from a file's
//! chunks ([`TraceReader`], decoded on all cores) or from a
//! [`TraceReceiver`], whose producer (the analyzer's snapshot import) hands
//! over events already decoded.
//!
//! Reading takes two steps so that decoding runs beside the consumer's work
//! on the events before: [`EventSource::read`] takes the next events off the
//! input (in order, with the symbols they use), and [`EventSource::decode`],
//! which needs nothing of the source, turns them into events.

use super::channel::TraceReceiver;
use super::chunk::RawChunk;
use super::error::FormatError;
use super::event::Event;
use super::header::{Header, InitialState};
use super::reader::{TraceReader, Truncation};
use super::symbols::SymbolTable;
use rayon::prelude::*;
use std::io::Read;
use std::ops::ControlFlow;

/// A trace's events, read in order.
pub trait EventSource {
    /// Events read but not yet decoded.
    type Pending: Send;

    /// The trace's header.
    fn header(&self) -> &Header;

    /// The symbols read so far: complete for every event read.
    fn symbols(&self) -> &SymbolTable;

    /// The allocator state at the trace's start, if it has one.
    fn initial_state(&self) -> Option<&InitialState>;

    /// Reads the next events; `None` at the end. `spent` holds event buffers
    /// of an earlier batch, replayed and done with: a source may take them
    /// back for reuse.
    fn read(&mut self, spent: &mut Vec<Vec<Event>>) -> Result<Option<Self::Pending>, FormatError>;

    /// Decodes events read by [`read`](Self::read) into `out`, one buffer
    /// per piece, reusing the buffers `out` holds.
    fn decode(pending: Self::Pending, out: &mut Vec<Vec<Event>>) -> Result<(), FormatError>;

    /// How far reading has got, for progress bars: bytes of a trace file,
    /// events of a channel.
    fn position(&self) -> u64;

    /// Where the trace was cut short, if it was.
    fn truncation(&self) -> Option<&Truncation>;

    /// Whether the trace ended properly: a file's footer, a producer that
    /// finished. Meaningful once every event is read.
    fn is_complete(&self) -> bool;

    /// Calls `f` on every remaining event in order, in batches, decoding the
    /// next batch while `f` works on the current one.
    fn for_each_batch<F>(&mut self, mut f: F) -> Result<(), FormatError>
    where
        F: FnMut(&[Event], &SymbolTable) + Send,
    {
        self.try_for_each_batch(|events, symbols, _| {
            f(events, symbols);
            ControlFlow::Continue(())
        })
        .map(drop)
    }

    /// Like [`for_each_batch`](Self::for_each_batch), stopping early when `f`
    /// breaks. `f` also gets the [`position`](Self::position) reading had
    /// reached once its batch was read, for progress bars.
    fn try_for_each_batch<F>(&mut self, mut f: F) -> Result<ControlFlow<()>, FormatError>
    where
        F: FnMut(&[Event], &SymbolTable, u64) -> ControlFlow<()> + Send,
    {
        // Decoded events go to buffers reused from batch to batch: allocating
        // them afresh costs page faults on every batch.
        let mut current = Vec::new();
        let mut next = Vec::new();
        if let Some(first) = self.read(&mut next)? {
            Self::decode(first, &mut current)?;
        }
        let mut position = self.position();
        while !current.is_empty() {
            let pending = self.read(&mut next)?;
            let next_position = self.position();
            let symbols = self.symbols();
            let (decoded, flow) = rayon::join(
                || match pending {
                    Some(p) => Self::decode(p, &mut next),
                    None => {
                        next.clear();
                        Ok(())
                    }
                },
                || {
                    current
                        .iter()
                        .try_for_each(|events| f(events, symbols, position))
                },
            );
            if flow.is_break() {
                return Ok(flow);
            }
            decoded?;
            position = next_position;
            std::mem::swap(&mut current, &mut next);
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// Chunks read at a time: two per core keeps every core decoding.
fn chunks_per_read() -> usize {
    rayon::current_num_threads().max(1) * 2
}

impl<R: Read> EventSource for TraceReader<R> {
    type Pending = Vec<RawChunk>;

    fn header(&self) -> &Header {
        TraceReader::header(self)
    }

    fn symbols(&self) -> &SymbolTable {
        TraceReader::symbols(self)
    }

    fn initial_state(&self) -> Option<&InitialState> {
        TraceReader::initial_state(self)
    }

    fn read(&mut self, _spent: &mut Vec<Vec<Event>>) -> Result<Option<Vec<RawChunk>>, FormatError> {
        // `decode` reuses the spent buffers: they are its `out`.
        let chunks = self.next_chunks(chunks_per_read())?;
        Ok((!chunks.is_empty()).then_some(chunks))
    }

    fn decode(chunks: Vec<RawChunk>, out: &mut Vec<Vec<Event>>) -> Result<(), FormatError> {
        out.resize_with(chunks.len(), Vec::new);
        out.truncate(chunks.len());
        chunks
            .par_iter()
            .zip(out.par_iter_mut())
            .try_for_each(|(chunk, buf)| {
                buf.clear();
                chunk.decode_into(buf).map(|_| ())
            })
    }

    fn position(&self) -> u64 {
        self.bytes_read()
    }

    fn truncation(&self) -> Option<&Truncation> {
        TraceReader::truncation(self)
    }

    fn is_complete(&self) -> bool {
        self.footer().is_some()
    }
}

impl EventSource for TraceReceiver {
    type Pending = Vec<Event>;

    fn header(&self) -> &Header {
        TraceReceiver::header(self)
    }

    fn symbols(&self) -> &SymbolTable {
        TraceReceiver::symbols(self)
    }

    fn initial_state(&self) -> Option<&InitialState> {
        TraceReceiver::initial_state(self)
    }

    fn read(&mut self, spent: &mut Vec<Vec<Event>>) -> Result<Option<Vec<Event>>, FormatError> {
        for buffer in spent.drain(..) {
            self.recycle(buffer);
        }
        self.next_batch()
    }

    fn decode(events: Vec<Event>, out: &mut Vec<Vec<Event>>) -> Result<(), FormatError> {
        out.clear();
        out.push(events);
        Ok(())
    }

    fn position(&self) -> u64 {
        self.events_received()
    }

    fn truncation(&self) -> Option<&Truncation> {
        None
    }

    fn is_complete(&self) -> bool {
        TraceReceiver::is_complete(self)
    }
}
