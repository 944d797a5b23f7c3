//! [`TraceReader`]: sequential and parallel access to a trace's events.

use super::chunk::RawChunk;
use super::error::FormatError;
use super::event::{Event, KindCounts};
use super::header::{Footer, Header, InitialState};
use super::record::{RECORD_OVERHEAD, ReadRecord, RecordType, read_full, read_record};
use super::symbols::{SymbolDefinitions, SymbolTable};
use super::{MAGIC, VERSION_MAJOR};
use rustc_hash::FxHashSet;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

mod damage;
mod order;
mod scan;

pub use damage::{KEPT_DAMAGE, TraceDamage, Truncation};
use order::Order;
pub use order::REORDER_CHUNKS;
use scan::Rewind;

/// Reads a trace record by record.
///
/// Opening reads the header and everything up to the first chunk, so the
/// initial state is known before any event. Symbol definitions are applied as
/// they are met; since each precedes its first use, [`symbols`](Self::symbols)
/// resolves every id of the events read so far.
///
/// A damaged record costs only itself: the reader scans on, byte by byte,
/// to the next record whose header and payload both check out (it never
/// trusts a damaged record's length), and lists what it skipped
/// ([`damage`](Self::damage)), as it does bytes after the footer and a
/// footer that disagrees with what was read. Only a damaged header (or
/// signature, or version) stops it.
///
/// Chunks of format 1.4 carry their sequence number and first event's
/// index: the reader hands them out in sequence, holding back at most
/// [`REORDER_CHUNKS`] that come early, drops repeats and says which chunks
/// and events are missing. In older traces it drops chunks that repeat one
/// read before byte for byte and says where time goes back.
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
    /// Whether the footer was checked against what was read.
    checked: bool,
    /// Chunks in sequence (format 1.4), or the checks of older chunks.
    order: Order,
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
            checked: false,
            order: if minor >= 4 {
                Order::Numbered {
                    next: 0,
                    next_event: 0,
                    last_end: header_at + header_len as u64,
                    held: BTreeMap::new(),
                    held_bytes: 0,
                    missing: Vec::new(),
                }
            } else {
                Order::Unnumbered {
                    seen: FxHashSet::default(),
                    last_time_ns: None,
                }
            },
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

    /// Whether the reader has reached the end of the trace.
    pub fn is_done(&self) -> bool {
        self.done && self.ahead.is_none() && self.checked
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

    /// The next chunk in sequence: one held back whose turn has come, or
    /// the next read.
    fn read_next_chunk(&mut self) -> Result<Option<RawChunk>, FormatError> {
        loop {
            if let Some(chunk) = self.release_held() {
                return Ok(Some(chunk));
            }
            if self.done {
                self.check_footer();
                return Ok(None);
            }
            if let Some((chunk, crc)) = self.read_chunk_record()?
                && let Some(chunk) = self.admit(chunk, crc)
            {
                return Ok(Some(chunk));
            }
        }
    }

    /// Reads records up to the next chunk (with its payload checksum),
    /// applying the others; `None` at the end.
    fn read_chunk_record(&mut self) -> Result<Option<(RawChunk, u32)>, FormatError> {
        while !self.done {
            let at = self.offset;
            match read_record(&mut self.input)? {
                ReadRecord::End => self.done = true,
                ReadRecord::Truncated { read } => {
                    self.recover(
                        at,
                        read,
                        "a record header claims more bytes than the trace holds",
                        true,
                    )?;
                }
                ReadRecord::Damaged { reason, read } => self.recover(at, read, reason, false)?,
                ReadRecord::Record {
                    kind,
                    code,
                    crc,
                    payload,
                } => {
                    let length = (RECORD_OVERHEAD + payload.len()) as u64;
                    self.offset += length;
                    match self.take_record(at, kind, code, length, payload) {
                        Ok(Some(chunk)) => return Ok(Some((chunk, crc))),
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
                let chunk = match self.order {
                    Order::Numbered { .. } => RawChunk::parse_ordered(at, payload),
                    Order::Unnumbered { .. } => RawChunk::parse(at, payload),
                };
                return chunk.map(Some).map_err(|e| match e {
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
                let held = matches!(&self.order, Order::Numbered { held, .. } if !held.is_empty());
                if self.chunks_read > 0
                    || self.ahead.is_some()
                    || held
                    || self.initial_state.is_some()
                {
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
                self.done = true;
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

    /// Once every chunk is handed out: the footer, if any, is checked
    /// against what was read, and a lone skip of damage at the end learns
    /// the events it cost.
    fn check_footer(&mut self) {
        if self.checked {
            return;
        }
        self.checked = true;
        let chunks = self.chunks_read + self.ahead.is_some() as u64;
        let events = self.events_read + self.ahead.as_ref().map_or(0, RawChunk::event_count);
        let Some(footer) = &self.footer else {
            return;
        };
        let (footer_events, footer_chunks) = (footer.events, footer.chunks);
        if (footer_events, footer_chunks) == (events, chunks) {
            return;
        }
        if let Order::Numbered {
            next_event,
            last_end,
            ..
        } = self.order
            && footer_events > next_event
        {
            // The footer says what the tail held and the count below says
            // it is missing: a skip of damage there is told its events.
            self.tell_skip(&(last_end..self.offset), footer_events - next_event);
        }
        self.note(TraceDamage::CountMismatch {
            footer_events,
            read_events: events,
            footer_chunks,
            read_chunks: chunks,
        });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{BlockEvent, EventData};
    use crate::record::write_record;
    use crate::writer::{TraceWriter, WriterOptions};

    /// A trace of `chunks` chunks of `per_chunk` (even) events: blocks
    /// allocated and freed, a nanosecond apart. Without `footer`, the writer
    /// is dropped (as by a killed process) rather than finished.
    pub(super) fn trace(chunks: usize, per_chunk: usize, footer: bool) -> (Vec<u8>, Vec<Event>) {
        let mut out = Vec::new();
        let options = WriterOptions {
            chunk_events: per_chunk,
            chunk_interval: None,
        };
        let mut w = TraceWriter::with_options(&mut out, Header::default(), options).unwrap();
        let mut events = Vec::new();
        for i in 0..(chunks * per_chunk / 2) as u64 {
            let block = BlockEvent {
                addr: 4096 * (i % 100),
                size: 4096,
                requested: 4000 + i % 7,
                ..Default::default()
            };
            for (t, data) in [
                (2 * i, EventData::Alloc(block)),
                (2 * i + 1, EventData::FreeCompleted(block)),
            ] {
                let event = Event { time_ns: t, data };
                w.push(event).unwrap();
                events.push(event);
            }
        }
        if footer {
            w.finish().unwrap();
        } else {
            drop(w);
        }
        (out, events)
    }

    /// Each record's offset, length and type, from the framing.
    pub(super) fn records(bytes: &[u8]) -> Vec<(usize, usize, u8)> {
        let mut at = MAGIC.len() + 3;
        let mut out = Vec::new();
        while at + 6 <= bytes.len() {
            let data = u32::from_be_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
            out.push((at, 6 + data, bytes[at + 5]));
            at += 6 + data;
        }
        out
    }

    /// The chunk records' offsets and lengths.
    pub(super) fn chunks(bytes: &[u8]) -> Vec<(usize, usize)> {
        records(bytes)
            .into_iter()
            .filter(|r| r.2 == RecordType::Chunk as u8)
            .map(|r| (r.0, r.1))
            .collect()
    }

    pub(super) fn read_all(bytes: &[u8]) -> (TraceReader<&[u8]>, Vec<Event>) {
        let mut r = TraceReader::new(bytes).unwrap();
        let events = r.events().collect::<Result<Vec<_>, _>>().unwrap();
        assert!(r.is_done());
        (r, events)
    }

    /// The same trace as format 1.3 wrote it: chunks without their place.
    pub(super) fn as_1_3(bytes: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[0x92, 1, 3]);
        for (at, len, code) in records(bytes) {
            let payload = &bytes[at + RECORD_OVERHEAD..at + len];
            let kind = RecordType::from_code(code).unwrap();
            let payload = match kind {
                RecordType::Header => {
                    let mut header: Header = rmp_serde::from_slice(payload).unwrap();
                    header.version_minor = 3;
                    rmp_serde::to_vec_named(&header).unwrap()
                }
                RecordType::Chunk => {
                    let trailer = *payload.last().unwrap() as usize + 1;
                    payload[..payload.len() - trailer].to_vec()
                }
                _ => payload.to_vec(),
            };
            write_record(&mut out, kind, &payload).unwrap();
        }
        out
    }

    pub(super) fn skips(r: &TraceReader<&[u8]>) -> Vec<(u64, u64, Option<u64>)> {
        r.damage()
            .iter()
            .filter_map(|d| match d {
                TraceDamage::Skipped {
                    offset,
                    bytes,
                    events,
                    ..
                } => Some((*offset, *bytes, *events)),
                _ => None,
            })
            .collect()
    }

    /// Undamaged traces, numbered or not, raise no alarm.
    #[test]
    pub(super) fn sound_traces_read_without_warnings() {
        for footer in [true, false] {
            let (bytes, events) = trace(5, 100, footer);
            for bytes in [bytes.clone(), as_1_3(&bytes)] {
                let (r, read) = read_all(&bytes);
                assert_eq!(read, events);
                assert_eq!(r.damage(), []);
            }
        }
    }
}
