//! [`TraceReader`]: sequential and parallel access to a trace's events.

use super::chunk::RawChunk;
use super::error::FormatError;
use super::event::{Event, KindCounts};
use super::header::{Footer, Header, InitialState};
use super::record::{RECORD_OVERHEAD, ReadRecord, RecordType, read_full, read_record};
use super::symbols::{SymbolDefinitions, SymbolTable};
use super::{MAGIC, VERSION_MAJOR};
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

/// Where a trace was cut short, and how much of it was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Truncation {
    /// The offset of the incomplete record.
    pub offset: u64,
    /// The bytes of that record that were present, and dropped.
    pub lost_bytes: u64,
}

impl fmt::Display for Truncation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "trace is cut short at byte {}: its last record is incomplete ({} bytes dropped); every complete chunk before it was read",
            self.offset, self.lost_bytes
        )
    }
}

/// Reads a trace record by record.
///
/// Opening reads the header and everything up to the first chunk, so the
/// initial state is known before any event. Symbol definitions are applied as
/// they are met; since each precedes its first use, [`symbols`](Self::symbols)
/// resolves every id of the events read so far.
pub struct TraceReader<R: Read> {
    input: R,
    offset: u64,
    header: Header,
    symbols: SymbolTable,
    initial_state: Option<InitialState>,
    footer: Option<Footer>,
    truncation: Option<Truncation>,
    ahead: Option<RawChunk>,
    done: bool,
    chunks_read: u64,
    events_read: u64,
    skipped_records: u64,
}

impl TraceReader<BufReader<File>> {
    /// Opens a trace file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, FormatError> {
        Self::new(BufReader::with_capacity(1 << 20, File::open(path)?))
    }
}

impl<R: Read> TraceReader<R> {
    /// Reads the signature, the version and the header.
    pub fn new(mut input: R) -> Result<Self, FormatError> {
        let mut magic = [0u8; MAGIC.len()];
        let got = read_full(&mut input, &mut magic)?;
        if magic[..got] != MAGIC[..got] || got == 0 {
            return Err(FormatError::NotATrace);
        }
        if got < MAGIC.len() {
            return Err(FormatError::TruncatedHeader { offset: got as u64 });
        }
        let (major, minor, version_len) = read_version(&mut input, MAGIC.len() as u64)?;
        if major != VERSION_MAJOR {
            return Err(FormatError::UnsupportedVersion {
                found_major: major,
                found_minor: minor,
                supported_major: VERSION_MAJOR,
            });
        }
        let header_at = (MAGIC.len() + version_len) as u64;
        let (header, header_len): (Header, usize) = match read_record(&mut input, header_at)? {
            ReadRecord::Record {
                kind: Some(RecordType::Header),
                payload,
            } => (
                rmp_serde::from_slice(&payload).map_err(|e| {
                    FormatError::corrupt(header_at, format!("unreadable header: {e}"))
                })?,
                RECORD_OVERHEAD + payload.len(),
            ),
            ReadRecord::Record { .. } => {
                return Err(FormatError::corrupt(
                    header_at,
                    "the first record is not a header",
                ));
            }
            ReadRecord::End | ReadRecord::Truncated { .. } => {
                return Err(FormatError::TruncatedHeader { offset: header_at });
            }
        };
        if (header.version_major, header.version_minor) != (major, minor) {
            return Err(FormatError::corrupt(
                MAGIC.len() as u64,
                "the file's version differs from its header's",
            ));
        }
        let mut reader = TraceReader {
            input,
            offset: header_at + header_len as u64,
            header,
            symbols: SymbolTable::new(),
            initial_state: None,
            footer: None,
            truncation: None,
            ahead: None,
            done: false,
            chunks_read: 0,
            events_read: 0,
            skipped_records: 0,
        };
        // Read up to the first chunk, so the initial state is known.
        reader.ahead = reader.read_next_chunk()?;
        Ok(reader)
    }

    /// The trace's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The interned tables read so far.
    pub fn symbols(&self) -> &SymbolTable {
        &self.symbols
    }

    /// The allocator state when recording began, if the trace has one.
    pub fn initial_state(&self) -> Option<&InitialState> {
        self.initial_state.as_ref()
    }

    /// The footer, once the reader has reached it: `None` before the end and
    /// for a trace that was not closed cleanly.
    pub fn footer(&self) -> Option<&Footer> {
        self.footer.as_ref()
    }

    /// Where the trace was cut short, once the reader has reached the cut.
    pub fn truncation(&self) -> Option<&Truncation> {
        self.truncation.as_ref()
    }

    /// Chunks handed out so far.
    pub fn chunks_read(&self) -> u64 {
        self.chunks_read
    }

    /// Events in the chunks handed out so far.
    pub fn events_read(&self) -> u64 {
        self.events_read
    }

    /// Bytes of the trace consumed so far.
    pub fn bytes_read(&self) -> u64 {
        self.offset
    }

    /// Records of types this version does not know, skipped so far.
    pub fn skipped_records(&self) -> u64 {
        self.skipped_records
    }

    /// Whether the reader has reached the end of the trace.
    pub fn is_done(&self) -> bool {
        self.done && self.ahead.is_none()
    }

    /// The next event chunk, undecoded; `None` at the end (or the cut).
    pub fn next_chunk(&mut self) -> Result<Option<RawChunk>, FormatError> {
        let chunk = match self.ahead.take() {
            Some(chunk) => Some(chunk),
            None => self.read_next_chunk()?,
        };
        if let Some(c) = &chunk {
            self.chunks_read += 1;
            self.events_read += c.event_count();
        }
        Ok(chunk)
    }

    /// Up to `max_chunks` chunks; fewer (or none) at the end.
    pub fn next_chunks(&mut self, max_chunks: usize) -> Result<Vec<RawChunk>, FormatError> {
        let mut chunks = Vec::with_capacity(max_chunks);
        while chunks.len() < max_chunks {
            match self.next_chunk()? {
                Some(c) => chunks.push(c),
                None => break,
            }
        }
        Ok(chunks)
    }

    /// An iterator over every remaining event, in order.
    pub fn events(&mut self) -> Events<'_, R> {
        Events {
            reader: self,
            buffer: Vec::new(),
            pos: 0,
            failed: false,
        }
    }

    /// Reads the rest of the trace and counts events by kind without building
    /// them: the footer's counts when the trace was closed cleanly.
    pub fn count_remaining(&mut self) -> Result<KindCounts, FormatError> {
        let mut counts = KindCounts::default();
        while let Some(chunk) = self.next_chunk()? {
            counts.merge(&chunk.count_kinds()?);
        }
        Ok(counts)
    }

    fn read_next_chunk(&mut self) -> Result<Option<RawChunk>, FormatError> {
        while !self.done {
            let at = self.offset;
            match read_record(&mut self.input, at)? {
                ReadRecord::End => self.done = true,
                ReadRecord::Truncated { present } => {
                    self.truncation = Some(Truncation {
                        offset: at,
                        lost_bytes: present,
                    });
                    self.offset += present;
                    self.done = true;
                }
                ReadRecord::Record { kind, payload } => {
                    self.offset += (RECORD_OVERHEAD + payload.len()) as u64;
                    match kind {
                        Some(RecordType::Chunk) => {
                            return Ok(Some(RawChunk::parse(at, payload)?));
                        }
                        Some(RecordType::Symbols) => {
                            let defs: SymbolDefinitions =
                                rmp_serde::from_slice(&payload).map_err(|e| {
                                    FormatError::corrupt(at, format!("unreadable symbols: {e}"))
                                })?;
                            self.symbols
                                .extend(defs)
                                .map_err(|reason| FormatError::corrupt(at, reason))?;
                        }
                        Some(RecordType::InitialState) => {
                            if self.chunks_read > 0 || self.initial_state.is_some() {
                                return Err(FormatError::corrupt(
                                    at,
                                    "an initial state after the first events",
                                ));
                            }
                            self.initial_state =
                                Some(rmp_serde::from_slice(&payload).map_err(|e| {
                                    FormatError::corrupt(
                                        at,
                                        format!("unreadable initial state: {e}"),
                                    )
                                })?);
                        }
                        Some(RecordType::Footer) => {
                            self.footer = Some(rmp_serde::from_slice(&payload).map_err(|e| {
                                FormatError::corrupt(at, format!("unreadable footer: {e}"))
                            })?);
                        }
                        Some(RecordType::Header) => {
                            return Err(FormatError::corrupt(at, "a second header"));
                        }
                        None => self.skipped_records += 1,
                    }
                }
            }
        }
        Ok(None)
    }
}

/// Reads the `[major, minor]` MessagePack array after the signature.
fn read_version<R: Read>(input: &mut R, offset: u64) -> Result<(u16, u16, usize), FormatError> {
    // A fixarray of two positive fixints is all version 1 writes; anything
    // longer is read by rmp so future writers may use wider integers.
    let mut buf = [0u8; 3];
    let got = read_full(input, &mut buf)?;
    if got < 3 {
        return Err(FormatError::TruncatedHeader {
            offset: offset + got as u64,
        });
    }
    if buf[0] == 0x92 && buf[1] < 0x80 && buf[2] < 0x80 {
        return Ok((buf[1] as u16, buf[2] as u16, 3));
    }
    let mut chained = (&buf[..]).chain(input);
    let version: (u16, u16) = rmp_serde::from_read(&mut chained)
        .map_err(|_| FormatError::corrupt(offset, "unreadable format version"))?;
    Err(FormatError::UnsupportedVersion {
        found_major: version.0,
        found_minor: version.1,
        supported_major: VERSION_MAJOR,
    })
}

/// Iterator over a trace's events; see [`TraceReader::events`].
pub struct Events<'r, R: Read> {
    reader: &'r mut TraceReader<R>,
    buffer: Vec<Event>,
    pos: usize,
    failed: bool,
}

impl<R: Read> Iterator for Events<'_, R> {
    type Item = Result<Event, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.pos >= self.buffer.len() {
            if self.failed {
                return None;
            }
            self.buffer.clear();
            self.pos = 0;
            let chunk = match self.reader.next_chunk() {
                Ok(Some(chunk)) => chunk,
                Ok(None) => return None,
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            };
            if let Err(e) = chunk.decode_into(&mut self.buffer) {
                self.failed = true;
                return Some(Err(e));
            }
        }
        let event = self.buffer[self.pos];
        self.pos += 1;
        Some(Ok(event))
    }
}
