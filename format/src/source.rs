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
use super::reader::{TraceDamage, TraceReader, Truncation};
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
    /// per piece, reusing the buffers `out` holds. A piece that does not
    /// decode is left empty and returned as damage, for
    /// [`note_damage`](Self::note_damage): the other pieces are read.
    fn decode(
        pending: Self::Pending,
        out: &mut Vec<Vec<Event>>,
    ) -> Result<Vec<TraceDamage>, FormatError>;

    /// Whether [`decode`](Self::decode) only hands over events decoded
    /// already (a [`TraceReceiver`]'s): then
    /// [`try_for_each_checked_batch`](Self::try_for_each_checked_batch)
    /// checks and consumes each batch on the calling thread, since there is
    /// no decoding to overlap with the consumer.
    fn hands_over_decoded(&self) -> bool {
        false
    }

    /// Takes note of damage [`decode`](Self::decode) found.
    fn note_damage(&mut self, damage: TraceDamage) {
        let _ = damage;
    }

    /// What was skipped or found amiss in the input so far (some of it, if
    /// there was much: see [`damage_count`](Self::damage_count)).
    fn damage(&self) -> &[TraceDamage] {
        &[]
    }

    /// How much damage there was, listed or not.
    fn damage_count(&self) -> u64 {
        0
    }

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
        self.try_for_each_checked_batch(
            |_| false,
            |events, _, symbols, position| f(events, symbols, position),
        )
    }

    /// Like [`try_for_each_batch`](Self::try_for_each_batch), with `check`
    /// run on each piece of events as it is decoded, beside the work on the
    /// batch before, and its answer handed to `f` with the piece. A check
    /// that every event would otherwise need (a consumer's test for values
    /// out of range, say) so moves off the consumer's thread, whose work on
    /// the events bounds the whole read when decoding waits for it. A source
    /// that [hands over decoded events](Self::hands_over_decoded) has no
    /// decoding to overlap: its batches are checked and consumed one after
    /// another on the calling thread.
    fn try_for_each_checked_batch<C, F>(
        &mut self,
        check: C,
        mut f: F,
    ) -> Result<ControlFlow<()>, FormatError>
    where
        C: Fn(&[Event]) -> bool + Sync,
        F: FnMut(&[Event], bool, &SymbolTable, u64) -> ControlFlow<()> + Send,
    {
        if self.hands_over_decoded() {
            return for_each_handed_over(self, check, f);
        }
        // Decoded events go to buffers reused from batch to batch: allocating
        // them afresh costs page faults on every batch.
        let mut current = Vec::new();
        let mut next = Vec::new();
        let mut current_checks = Vec::new();
        let mut next_checks = Vec::new();
        if let Some(first) = self.read(&mut next)? {
            for damage in Self::decode(first, &mut current)? {
                self.note_damage(damage);
            }
            check_each(&check, &current, &mut current_checks);
        }
        let mut position = self.position();
        while !current.is_empty() {
            let pending = self.read(&mut next)?;
            let next_position = self.position();
            let symbols = self.symbols();
            let (decoded, flow) = rayon::join(
                || {
                    let decoded = match pending {
                        Some(p) => Self::decode(p, &mut next),
                        None => {
                            next.clear();
                            Ok(Vec::new())
                        }
                    };
                    check_each(&check, &next, &mut next_checks);
                    decoded
                },
                || {
                    current
                        .iter()
                        .zip(&current_checks)
                        .try_for_each(|(events, &checked)| f(events, checked, symbols, position))
                },
            );
            if flow.is_break() {
                return Ok(flow);
            }
            for damage in decoded? {
                self.note_damage(damage);
            }
            position = next_position;
            std::mem::swap(&mut current, &mut next);
            std::mem::swap(&mut current_checks, &mut next_checks);
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// [`EventSource::try_for_each_checked_batch`] over a source whose events
/// come decoded: each batch is checked and consumed on the calling thread as
/// it comes. Handing each batch to the thread pool, to overlap a check of a
/// few nanoseconds an event, costs more than the check: the consumer waits
/// for a pool thread to wake at every batch, and its state moves from core
/// to core between batches. (On an H200 host's two cores, the phase after a
/// 3 M-event snapshot's parse went from 0.23 s to 0.20 s, by each build's
/// fastest runs.)
fn for_each_handed_over<S, C, F>(
    source: &mut S,
    check: C,
    mut f: F,
) -> Result<ControlFlow<()>, FormatError>
where
    S: EventSource + ?Sized,
    C: Fn(&[Event]) -> bool,
    F: FnMut(&[Event], bool, &SymbolTable, u64) -> ControlFlow<()>,
{
    let mut batch = Vec::new();
    while let Some(pending) = source.read(&mut batch)? {
        for damage in S::decode(pending, &mut batch)? {
            source.note_damage(damage);
        }
        let position = source.position();
        for events in &batch {
            if f(events, check(events), source.symbols(), position).is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// `check` of each piece of `pieces`, into `out`.
fn check_each(
    check: &(impl Fn(&[Event]) -> bool + Sync),
    pieces: &[Vec<Event>],
    out: &mut Vec<bool>,
) {
    out.clear();
    out.extend(pieces.iter().map(|events| check(events)));
}

/// Chunks read at a time: two per core keeps every core decoding.
fn chunks_per_read() -> usize {
    rayon::current_num_threads().max(1) * 2
}

/// Bytes of chunks read at a time, at most (past the first chunk): with the
/// batch decoded before, what reading holds in memory, whatever the chunks'
/// sizes.
const BYTES_PER_READ: usize = 64 << 20;

/// Events of chunks read at a time, at most (past the first chunk).
const EVENTS_PER_READ: u64 = 1 << 21;

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
        let mut chunks: Vec<RawChunk> = Vec::new();
        let (mut bytes, mut events) = (0usize, 0u64);
        while chunks.len() < chunks_per_read() && bytes < BYTES_PER_READ && events < EVENTS_PER_READ
        {
            let Some(chunk) = self.next_chunk()? else {
                break;
            };
            bytes += chunk.encoded_len();
            events += chunk.event_count();
            chunks.push(chunk);
        }
        Ok((!chunks.is_empty()).then_some(chunks))
    }

    fn decode(
        chunks: Vec<RawChunk>,
        out: &mut Vec<Vec<Event>>,
    ) -> Result<Vec<TraceDamage>, FormatError> {
        out.resize_with(chunks.len(), Vec::new);
        out.truncate(chunks.len());
        Ok(chunks
            .par_iter()
            .zip(out.par_iter_mut())
            .filter_map(|(chunk, buf)| {
                buf.clear();
                let reason = chunk.decode_into(buf).err()?;
                buf.clear();
                Some(TraceDamage::Skipped {
                    offset: chunk.offset(),
                    bytes: chunk.record_len(),
                    reason: reason.to_string(),
                    events: Some(chunk.event_count()),
                })
            })
            .collect())
    }

    fn note_damage(&mut self, damage: TraceDamage) {
        self.note_damage(damage);
    }

    fn damage(&self) -> &[TraceDamage] {
        TraceReader::damage(self)
    }

    fn damage_count(&self) -> u64 {
        TraceReader::damage_count(self)
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

    fn decode(
        events: Vec<Event>,
        out: &mut Vec<Vec<Event>>,
    ) -> Result<Vec<TraceDamage>, FormatError> {
        out.clear();
        out.push(events);
        Ok(Vec::new())
    }

    fn hands_over_decoded(&self) -> bool {
        true
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
