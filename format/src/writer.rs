//! [`TraceWriter`]: buffered, streaming trace output.

use super::chunk;
use super::error::FormatError;
use super::event::{Event, KindCounts};
use super::header::{Footer, Header, InitialState};
use super::record::{RecordType, write_record};
use super::symbols::{Frame, FrameId, Interner, StackId, StringId};
use super::{MAGIC, VERSION_MAJOR, VERSION_MINOR};
use std::io::Write;
use std::time::{Duration, Instant};

/// When the writer turns buffered events into a chunk.
#[derive(Clone, Copy, Debug)]
pub struct WriterOptions {
    /// A chunk is written once this many events are buffered (at most
    /// [`MAX_CHUNK_EVENTS`](crate::MAX_CHUNK_EVENTS)).
    pub chunk_events: usize,
    /// A chunk is written once its first event has waited this long, so a
    /// process killed mid-run loses at most this much (checked on `push`).
    pub chunk_interval: Option<Duration>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            chunk_events: 64 * 1024,
            chunk_interval: Some(Duration::from_secs(1)),
        }
    }
}

/// Writes a trace: the header at once, then events in chunks, then a footer
/// on [`finish`](TraceWriter::finish).
///
/// Strings, frames and stacks are interned through the writer, and their
/// definitions are written before the first chunk that may use them. A writer
/// dropped without `finish` still writes its buffered events, so the file is
/// readable (without a footer).
///
/// ```
/// use vramtrace_format::*;
/// let mut w = TraceWriter::new(Vec::new(), Header::default()).unwrap();
/// let name = w.intern_string("forward");
/// w.push(Event { time_ns: 0, data: EventData::PhaseBegin { name, thread: 0 } }).unwrap();
/// let bytes = w.finish().unwrap();
/// let mut r = TraceReader::new(&bytes[..]).unwrap();
/// let events: Vec<Event> = r.events().collect::<Result<_, _>>().unwrap();
/// assert_eq!(events.len(), 1);
/// assert_eq!(r.symbols().string(name), Some("forward"));
/// ```
pub struct TraceWriter<W: Write> {
    out: Option<W>,
    /// The header written, versions set: [`rotate`](Self::rotate) starts
    /// from it.
    header: Header,
    options: WriterOptions,
    interner: Interner,
    pending: Vec<Event>,
    payload: Vec<u8>,
    counts: KindCounts,
    chunks: u64,
    /// Events in the chunks written: the next chunk's first event's index.
    chunked_events: u64,
    end_time_ns: u64,
    events_written: bool,
    last_chunk_at: Instant,
    pushes_since_clock: u32,
}

impl<W: Write> TraceWriter<W> {
    /// Starts a trace with default options.
    pub fn new(out: W, header: Header) -> Result<Self, FormatError> {
        Self::with_options(out, header, WriterOptions::default())
    }

    /// Starts a trace: writes the signature and the header. The header's
    /// version fields are set to this format's version.
    pub fn with_options(
        mut out: W,
        mut header: Header,
        options: WriterOptions,
    ) -> Result<Self, FormatError> {
        header.version_major = VERSION_MAJOR;
        header.version_minor = VERSION_MINOR;
        write_start(&mut out, &header)?;
        Ok(TraceWriter {
            out: Some(out),
            header,
            options: WriterOptions {
                chunk_events: options
                    .chunk_events
                    .clamp(1, super::chunk::MAX_CHUNK_EVENTS as usize),
                ..options
            },
            interner: Interner::new(),
            pending: Vec::with_capacity(options.chunk_events.clamp(1, 1 << 20)),
            payload: Vec::new(),
            counts: KindCounts::default(),
            chunks: 0,
            chunked_events: 0,
            end_time_ns: 0,
            events_written: false,
            last_chunk_at: Instant::now(),
            pushes_since_clock: 0,
        })
    }

    /// Interns a string, returning its id.
    pub fn intern_string(&mut self, s: &str) -> StringId {
        self.interner.string(s)
    }

    /// Interns a frame, returning its id. Its strings must come from this writer.
    pub fn intern_frame(&mut self, frame: Frame) -> FrameId {
        self.interner.frame(frame)
    }

    /// Interns a stack (frames innermost first), returning its id.
    pub fn intern_stack(&mut self, frames: &[FrameId]) -> StackId {
        debug_assert!(frames.iter().all(|&f| self.interner.knows_frame(f)));
        self.interner.stack(frames)
    }

    /// Interns a stack of symbolized frames given as `(function, file, line)`.
    pub fn intern_symbol_stack<'s>(
        &mut self,
        frames: impl IntoIterator<Item = (&'s str, &'s str, u32)>,
    ) -> StackId {
        let ids: Vec<FrameId> = frames
            .into_iter()
            .map(|(function, file, line)| {
                let frame = Frame::Symbol {
                    function: self.interner.string(function),
                    file: self.interner.string(file),
                    line,
                };
                self.interner.frame(frame)
            })
            .collect();
        self.interner.stack(&ids)
    }

    /// Writes the allocator state at the start of the trace. Only allowed
    /// before the first event.
    pub fn write_initial_state(&mut self, state: &InitialState) -> Result<(), FormatError> {
        if self.events_written || !self.pending.is_empty() {
            return Err(FormatError::InvalidUse(
                "the initial state must come before the first event",
            ));
        }
        self.write_pending_symbols()?;
        let payload = rmp_serde::to_vec_named(state).map_err(encode_err)?;
        write_record(self.out_mut(), RecordType::InitialState, &payload)?;
        Ok(())
    }

    /// Buffers one event; writes a chunk when the size or time bound is reached.
    pub fn push(&mut self, event: Event) -> Result<(), FormatError> {
        self.counts.add(event.kind());
        self.end_time_ns = self.end_time_ns.max(event.time_ns);
        self.pending.push(event);
        if self.pending.len() >= self.options.chunk_events {
            return self.write_chunk();
        }
        if let Some(interval) = self.options.chunk_interval {
            // Reading the clock on every push would cost more than the push.
            self.pushes_since_clock += 1;
            if self.pushes_since_clock >= 1024 {
                self.pushes_since_clock = 0;
                if self.last_chunk_at.elapsed() >= interval {
                    self.flush()?;
                }
            }
        }
        Ok(())
    }

    /// Buffers several events.
    pub fn push_all(&mut self, events: impl IntoIterator<Item = Event>) -> Result<(), FormatError> {
        for e in events {
            self.push(e)?;
        }
        Ok(())
    }

    /// Writes buffered events as a chunk and flushes the output.
    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.write_chunk()?;
        self.out_mut().flush()?;
        Ok(())
    }

    /// Counts of the events pushed so far, by kind.
    pub fn counts(&self) -> &KindCounts {
        &self.counts
    }

    /// The output.
    pub fn get_ref(&self) -> &W {
        self.out.as_ref().expect("output present until finish")
    }

    /// The output, to change what it holds (never to write to it: the
    /// trace's records would be broken).
    pub fn get_mut(&mut self) -> &mut W {
        self.out_mut()
    }

    /// The header written at the start of the output.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Ends the output as a complete trace (its last chunk and its footer)
    /// and goes on in `out` with a trace of its own that starts mid-run:
    /// `header`, every string, frame and stack defined so far, and `state`
    /// as its initial state. Returns the finished output.
    ///
    /// Ids stay valid across the rotation, so the caller goes on using the
    /// ones it holds; a reader of the new output alone sees a whole trace.
    /// Chunk numbers and counts start again in each output. This is how a
    /// recording keeps only its last part on disk: see
    /// [`join`](crate::join) for putting the parts back together.
    pub fn rotate(
        &mut self,
        mut out: W,
        mut header: Header,
        state: &InitialState,
    ) -> Result<W, FormatError> {
        self.write_chunk()?;
        self.write_footer()?;
        let mut old = self.out.take().expect("output present until finish");
        old.flush()?;
        header.version_major = VERSION_MAJOR;
        header.version_minor = VERSION_MINOR;
        write_start(&mut out, &header)?;
        let defs = self.interner.all_definitions();
        if !defs.is_empty() {
            let payload = rmp_serde::to_vec(&defs).map_err(encode_err)?;
            write_record(&mut out, RecordType::Symbols, &payload)?;
        }
        let payload = rmp_serde::to_vec_named(state).map_err(encode_err)?;
        write_record(&mut out, RecordType::InitialState, &payload)?;
        self.out = Some(out);
        self.header = header;
        self.counts = KindCounts::default();
        self.chunks = 0;
        self.chunked_events = 0;
        self.end_time_ns = 0;
        self.events_written = false;
        Ok(old)
    }

    /// Writes the last chunk and the footer, and returns the output.
    pub fn finish(mut self) -> Result<W, FormatError> {
        self.write_chunk()?;
        self.write_footer()?;
        let mut out = self.out.take().expect("output present until finish");
        out.flush()?;
        Ok(out)
    }

    fn write_footer(&mut self) -> Result<(), FormatError> {
        let mut footer = Footer {
            events: self.counts.total(),
            chunks: self.chunks,
            end_time_ns: self.end_time_ns,
            ..Footer::default()
        };
        for (kind, n) in self.counts.nonzero() {
            footer.counts.insert(kind.name().to_string(), n);
        }
        self.write_pending_symbols()?;
        let payload = rmp_serde::to_vec_named(&footer).map_err(encode_err)?;
        write_record(self.out_mut(), RecordType::Footer, &payload)?;
        Ok(())
    }

    fn out_mut(&mut self) -> &mut W {
        self.out.as_mut().expect("output present until finish")
    }

    fn write_pending_symbols(&mut self) -> Result<(), FormatError> {
        let defs = self.interner.take_pending();
        if !defs.is_empty() {
            let payload = rmp_serde::to_vec(&defs).map_err(encode_err)?;
            write_record(self.out_mut(), RecordType::Symbols, &payload)?;
        }
        Ok(())
    }

    fn write_chunk(&mut self) -> Result<(), FormatError> {
        self.last_chunk_at = Instant::now();
        if self.pending.is_empty() {
            return Ok(());
        }
        self.write_pending_symbols()?;
        self.payload.clear();
        chunk::encode(&self.pending, &mut self.payload);
        // The chunk's place, so a reader puts swapped chunks back in order
        // and counts the events of missing ones.
        chunk::put_order(&mut self.payload, self.chunks, self.chunked_events);
        let out = self.out.as_mut().expect("output present until finish");
        write_record(out, RecordType::Chunk, &self.payload)?;
        self.chunked_events += self.pending.len() as u64;
        self.pending.clear();
        self.chunks += 1;
        self.events_written = true;
        Ok(())
    }
}

impl<W: Write> Drop for TraceWriter<W> {
    fn drop(&mut self) {
        if self.out.is_some() {
            // Best effort: a writer dropped without finish() (a panic, an
            // early return) still leaves every buffered event readable.
            let _ = self.flush();
        }
    }
}

/// The signature, the version and the header: how every output begins.
fn write_start<W: Write>(out: &mut W, header: &Header) -> Result<(), FormatError> {
    out.write_all(MAGIC)?;
    out.write_all(&rmp_serde::to_vec(&(VERSION_MAJOR, VERSION_MINOR)).map_err(encode_err)?)?;
    let payload = rmp_serde::to_vec_named(header).map_err(encode_err)?;
    write_record(out, RecordType::Header, &payload)?;
    Ok(())
}

fn encode_err(e: rmp_serde::encode::Error) -> FormatError {
    FormatError::Io(std::io::Error::other(e))
}
