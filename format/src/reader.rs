//! [`TraceReader`]: sequential and parallel access to a trace's events.

use super::chunk::RawChunk;
use super::error::FormatError;
use super::event::{Event, KindCounts};
use super::header::{Footer, Header, InitialState};
use super::record::{
    RECORD_OVERHEAD, ReadRecord, RecordType, is_record_header, read_full, read_record,
};
use super::symbols::{SymbolDefinitions, SymbolTable};
use super::{MAGIC, VERSION_MAJOR};
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read};
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

/// What a reader stepped over to read the rest of a trace, or found amiss
/// with it: the trace is read without it, and the reader says so.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TraceDamage {
    /// Damaged bytes, skipped up to the next record that checks out: a
    /// record whose checksum fails (or whose content does not decode), or
    /// bytes that are no record at all.
    Skipped {
        /// Where the damage begins.
        offset: u64,
        /// The bytes skipped.
        bytes: u64,
        /// What was wrong.
        reason: String,
        /// The events lost with it, when the chunk said how many.
        events: Option<u64>,
    },
    /// A record of a type this version does not read (a newer writer's).
    UnknownRecord {
        /// Where it begins.
        offset: u64,
        /// Its size.
        bytes: u64,
        /// Its type byte.
        code: u8,
    },
    /// Bytes after the footer, which ends a trace.
    TrailingBytes {
        /// Where they begin.
        offset: u64,
        /// How many.
        bytes: u64,
    },
    /// The footer's counts differ from what was read: events were lost
    /// (in damage skipped) or never reached the reader.
    CountMismatch {
        /// Events the footer counts.
        footer_events: u64,
        /// Events in the chunks read.
        read_events: u64,
        /// Chunks the footer counts.
        footer_chunks: u64,
        /// Chunks read.
        read_chunks: u64,
    },
}

impl fmt::Display for TraceDamage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceDamage::Skipped {
                offset,
                bytes,
                reason,
                events,
            } => {
                write!(
                    f,
                    "bytes {offset} to {} are damaged ({reason}) and were skipped",
                    offset + bytes
                )?;
                match events {
                    Some(n) => write!(f, ", with the {n} events of that chunk"),
                    None => Ok(()),
                }
            }
            TraceDamage::UnknownRecord {
                offset,
                bytes,
                code,
            } => write!(
                f,
                "the record at byte {offset} ({bytes} bytes) is of type {code}, which this version does not read: skipped"
            ),
            TraceDamage::TrailingBytes { offset, bytes: 1 } => write!(
                f,
                "1 byte after the footer, at byte {offset}, is not part of the trace: ignored"
            ),
            TraceDamage::TrailingBytes { offset, bytes } => write!(
                f,
                "{bytes} bytes after the footer, from byte {offset}, are not part of the trace: ignored"
            ),
            TraceDamage::CountMismatch {
                footer_events,
                read_events,
                footer_chunks,
                read_chunks,
            } => {
                write!(
                    f,
                    "the footer counts {footer_events} events in {footer_chunks} chunks, but {read_events} events in {read_chunks} chunks were read"
                )?;
                if footer_events > read_events {
                    write!(f, ": {} events are missing", footer_events - read_events)?;
                }
                Ok(())
            }
        }
    }
}

/// The most [`TraceDamage`] entries a reader keeps; more are only counted.
pub const KEPT_DAMAGE: usize = 100;

/// Reads a trace record by record.
///
/// Opening reads the header and everything up to the first chunk, so the
/// initial state is known before any event. Symbol definitions are applied as
/// they are met; since each precedes its first use, [`symbols`](Self::symbols)
/// resolves every id of the events read so far.
///
/// A damaged record costs only itself: the reader skips to the next record
/// whose header checks out and goes on, and lists what it skipped
/// ([`damage`](Self::damage)), as it does bytes after the footer and a
/// footer that disagrees with what was read. Only a damaged header (or
/// signature, or version) stops it.
pub struct TraceReader<R: Read> {
    input: Rewind<R>,
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
    damage: Vec<TraceDamage>,
    damage_count: u64,
    /// Bytes skipped as damage so far: how many symbols a gap may hold.
    damaged_bytes: u64,
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
        let (header, header_len): (Header, usize) = match read_record(&mut input)? {
            ReadRecord::Record {
                kind: Some(RecordType::Header),
                payload,
                ..
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
            ReadRecord::Damaged { reason, .. } => {
                return Err(FormatError::corrupt(
                    header_at,
                    format!("the header is damaged ({reason})"),
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
            input: Rewind::new(input),
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
            damage: Vec::new(),
            damage_count: 0,
            damaged_bytes: 0,
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

    /// What was skipped or found amiss so far (at most [`KEPT_DAMAGE`]
    /// entries; [`damage_count`](Self::damage_count) counts them all). The
    /// footer's check comes once the reader reaches the end.
    pub fn damage(&self) -> &[TraceDamage] {
        &self.damage
    }

    /// How many [`TraceDamage`] entries there were, kept or not.
    pub fn damage_count(&self) -> u64 {
        self.damage_count
    }

    /// Notes damage found past the reader: a chunk whose records checked out
    /// but whose content does not decode (its events are skipped).
    pub fn note_undecodable(&mut self, chunk: &RawChunk, reason: String) {
        self.note(TraceDamage::Skipped {
            offset: chunk.offset(),
            bytes: chunk.record_len(),
            reason,
            events: Some(chunk.event_count()),
        });
    }

    /// Notes damage found past the reader (by the decoding of chunks it
    /// handed out).
    pub fn note_damage(&mut self, damage: TraceDamage) {
        self.note(damage);
    }

    fn note(&mut self, damage: TraceDamage) {
        self.damage_count += 1;
        if self.damage.len() < KEPT_DAMAGE {
            self.damage.push(damage);
        }
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
            match read_record(&mut self.input)? {
                ReadRecord::End => self.finish(),
                ReadRecord::Truncated { present } => {
                    self.truncation = Some(Truncation {
                        offset: at,
                        lost_bytes: present,
                    });
                    self.offset += present;
                    self.done = true;
                }
                ReadRecord::Damaged {
                    reason,
                    length: Some(length),
                    ..
                } => {
                    // The header checked out: the damage is this record only.
                    self.offset += length;
                    self.damaged(at, length, reason.to_string());
                }
                ReadRecord::Damaged {
                    reason,
                    length: None,
                    read,
                } => {
                    let skipped = self.resync(&read)?;
                    self.offset += skipped;
                    self.damaged(at, skipped, reason.to_string());
                }
                ReadRecord::Record {
                    kind,
                    code,
                    payload,
                } => {
                    let length = (RECORD_OVERHEAD + payload.len()) as u64;
                    self.offset += length;
                    match self.take_record(at, kind, code, length, payload) {
                        Ok(Some(chunk)) => return Ok(Some(chunk)),
                        Ok(None) => {}
                        // Sound framing, content that does not decode: the
                        // record is skipped as damage.
                        Err(reason) => self.damaged(at, length, reason),
                    }
                }
            }
        }
        Ok(None)
    }

    /// Takes a sound record in: a chunk is returned, anything else applied.
    /// `Err` says why its content cannot be used.
    fn take_record(
        &mut self,
        at: u64,
        kind: Option<RecordType>,
        code: u8,
        length: u64,
        payload: Vec<u8>,
    ) -> Result<Option<RawChunk>, String> {
        match kind {
            Some(RecordType::Chunk) => {
                return RawChunk::parse(at, payload).map(Some).map_err(|e| match e {
                    FormatError::Corrupt { reason, .. } => reason,
                    e => e.to_string(),
                });
            }
            Some(RecordType::Symbols) => {
                let defs: SymbolDefinitions = rmp_serde::from_slice(&payload)
                    .map_err(|e| format!("unreadable symbols: {e}"))?;
                // After damage, definitions may follow a gap: its ids read
                // as unknown, and the later ones keep their ids.
                self.symbols.extend(defs, self.damaged_bytes)?;
            }
            Some(RecordType::InitialState) => {
                if self.chunks_read > 0 || self.ahead.is_some() || self.initial_state.is_some() {
                    return Err("an initial state after the first events".into());
                }
                self.initial_state = Some(
                    rmp_serde::from_slice(&payload)
                        .map_err(|e| format!("unreadable initial state: {e}"))?,
                );
            }
            Some(RecordType::Footer) => {
                self.footer = Some(
                    rmp_serde::from_slice(&payload)
                        .map_err(|e| format!("unreadable footer: {e}"))?,
                );
                // The footer ends the trace: whatever follows is not of it.
                let trailing =
                    io::copy(&mut self.input, &mut io::sink()).map_err(|e| e.to_string())?;
                if trailing > 0 {
                    self.note(TraceDamage::TrailingBytes {
                        offset: self.offset,
                        bytes: trailing,
                    });
                    self.offset += trailing;
                }
                self.finish();
            }
            Some(RecordType::Header) => return Err("a second header".into()),
            None => {
                self.skipped_records += 1;
                self.note(TraceDamage::UnknownRecord {
                    offset: at,
                    bytes: length,
                    code,
                });
            }
        }
        Ok(None)
    }

    fn damaged(&mut self, offset: u64, bytes: u64, reason: String) {
        self.damaged_bytes += bytes;
        self.note(TraceDamage::Skipped {
            offset,
            bytes,
            reason,
            events: None,
        });
    }

    /// Finds the next record after damage: `read` holds the bytes already
    /// consumed from the damage's start. Returns the bytes skipped; the
    /// record found (if any) is next in the input.
    fn resync(&mut self, read: &[u8]) -> io::Result<u64> {
        // A record header is told by its marker and its own checksum; the
        // damage's first byte is never one (it was just refused).
        let mut window: Vec<u8> = read.get(1..).unwrap_or_default().to_vec();
        let mut skipped = 1u64;
        let mut more = [0u8; 1 << 16];
        loop {
            if let Some(at) =
                (0..window.len().saturating_sub(9)).find(|&i| is_record_header(&window[i..]))
            {
                self.input.unread(&window[at..]);
                return Ok(skipped + at as u64);
            }
            // Keep the last bytes: a header may straddle two reads.
            let keep = window.len().min(9);
            skipped += (window.len() - keep) as u64;
            window.drain(..window.len() - keep);
            let n = read_full(&mut self.input, &mut more)?;
            if n == 0 {
                return Ok(skipped + window.len() as u64);
            }
            window.extend_from_slice(&more[..n]);
        }
    }

    /// The reader reached the end: the footer, if any, is checked against
    /// what was read.
    fn finish(&mut self) {
        self.done = true;
        let chunks = self.chunks_read + self.ahead.is_some() as u64;
        let events = self.events_read + self.ahead.as_ref().map_or(0, RawChunk::event_count);
        if let Some(footer) = &self.footer
            && (footer.events, footer.chunks) != (events, chunks)
        {
            self.note(TraceDamage::CountMismatch {
                footer_events: footer.events,
                read_events: events,
                footer_chunks: footer.chunks,
                read_chunks: chunks,
            });
        }
    }
}

/// An input whose bytes can be put back, to be read again: the reader looks
/// ahead for the next record after damage.
struct Rewind<R> {
    inner: R,
    back: Vec<u8>,
    pos: usize,
}

impl<R: Read> Rewind<R> {
    fn new(inner: R) -> Self {
        Rewind {
            inner,
            back: Vec::new(),
            pos: 0,
        }
    }

    /// Puts `bytes` back in front of the input.
    fn unread(&mut self, bytes: &[u8]) {
        let mut back = bytes.to_vec();
        back.extend_from_slice(&self.back[self.pos..]);
        self.back = back;
        self.pos = 0;
    }
}

impl<R: Read> Read for Rewind<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos < self.back.len() {
            let n = buf.len().min(self.back.len() - self.pos);
            buf[..n].copy_from_slice(&self.back[self.pos..self.pos + n]);
            self.pos += n;
            if self.pos == self.back.len() {
                self.back = Vec::new();
                self.pos = 0;
            }
            return Ok(n);
        }
        self.inner.read(buf)
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
                // Sound records, content that does not decode: this chunk's
                // events are lost, the next chunk's are not.
                self.reader.note_undecodable(&chunk, e.to_string());
                self.buffer.clear();
            }
        }
        let event = self.buffer[self.pos];
        self.pos += 1;
        Some(Ok(event))
    }
}
