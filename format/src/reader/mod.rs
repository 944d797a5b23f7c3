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
use rustc_hash::FxHashSet;
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::ops::Range;
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
    /// A chunk that comes after chunks that follow it in sequence (format
    /// 1.4): held back and read in its place.
    OutOfOrder {
        /// Where it begins.
        offset: u64,
        /// Its size.
        bytes: u64,
        /// Its sequence number.
        sequence: u64,
        /// A chunk after it in sequence that came before it in the file.
        after: u64,
        /// Its events (none lost).
        events: u64,
    },
    /// A chunk that repeats one already read: dropped, so its events count
    /// once. In format 1.4 told by its sequence number; before, by bytes
    /// equal to a chunk's read before.
    Repeated {
        /// Where it begins.
        offset: u64,
        /// Its size.
        bytes: u64,
        /// The sequence number both carry (format 1.4).
        sequence: Option<u64>,
        /// Its events (read once, in the first copy).
        events: u64,
    },
    /// A chunk met too long after its place (more than [`REORDER_CHUNKS`]
    /// chunks), once the chunks after it were read: its events are dropped
    /// (format 1.4).
    Late {
        /// Where it begins.
        offset: u64,
        /// Its size.
        bytes: u64,
        /// Its sequence number.
        sequence: u64,
        /// Its events, lost.
        events: u64,
    },
    /// Chunks that never came (format 1.4): damaged beyond reading, or
    /// missing from the file. Their events are lost.
    Missing {
        /// Where the bytes that should hold them begin.
        offset: u64,
        /// How many bytes that is.
        bytes: u64,
        /// The sequence number of the first missing chunk.
        first_chunk: u64,
        /// How many chunks are missing.
        chunks: u64,
        /// The index of the first missing event.
        first_event: u64,
        /// How many events are missing.
        events: u64,
    },
    /// A chunk that starts before the chunk read before it ends, in a trace
    /// whose chunks carry no sequence number (format 1.3 and older): chunks
    /// out of order. Read as found (nothing tells their order).
    TimeBackwards {
        /// Where it begins.
        offset: u64,
        /// Its size.
        bytes: u64,
        /// The time of its first event.
        first_time_ns: u64,
        /// The time of the last event of the chunk before it.
        previous_last_ns: u64,
        /// Its events.
        events: u64,
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
                    Some(n) => write!(f, ", losing {n} events"),
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
            TraceDamage::OutOfOrder {
                offset,
                bytes,
                sequence,
                after,
                events,
            } => write!(
                f,
                "chunk {sequence} (bytes {offset} to {}, {events} events) comes after chunk {after} in the file: read in its place, no events lost",
                offset + bytes
            ),
            TraceDamage::Repeated {
                offset,
                bytes,
                sequence,
                events,
            } => {
                write!(
                    f,
                    "the chunk at bytes {offset} to {} repeats ",
                    offset + bytes
                )?;
                match sequence {
                    Some(n) => write!(f, "chunk {n}, already read")?,
                    None => write!(f, "a chunk already read (the same bytes)")?,
                }
                write!(f, ": dropped, so its {events} events count once")
            }
            TraceDamage::Late {
                offset,
                bytes,
                sequence,
                events,
            } => write!(
                f,
                "chunk {sequence} (bytes {offset} to {}) comes more than {REORDER_CHUNKS} chunks after its place, once the chunks after it were read: its {events} events are lost",
                offset + bytes
            ),
            TraceDamage::Missing {
                offset,
                bytes,
                first_chunk,
                chunks,
                first_event,
                events,
            } => {
                match chunks {
                    0 => write!(f, "events are missing")?,
                    1 => write!(f, "chunk {first_chunk} is missing")?,
                    n => write!(
                        f,
                        "chunks {first_chunk} to {} are missing",
                        first_chunk + n - 1
                    )?,
                }
                write!(f, " between bytes {offset} and {}", offset + bytes)?;
                match events {
                    0 => Ok(()),
                    n => write!(
                        f,
                        ": events {first_event} to {} ({n} events) are lost",
                        first_event.saturating_add(n - 1)
                    ),
                }
            }
            TraceDamage::TimeBackwards {
                offset,
                bytes,
                first_time_ns,
                previous_last_ns,
                events,
            } => write!(
                f,
                "the chunk at bytes {offset} to {} ({events} events) starts at {first_time_ns} ns, before the chunk before it ends ({previous_last_ns} ns): chunks out of order (this trace's version does not number them), read as found",
                offset + bytes
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

/// The most chunks a reader holds back while it waits for a chunk whose
/// turn has come (format 1.4): a chunk displaced by more is lost, and one
/// that never comes is declared missing once this many follow it.
pub const REORDER_CHUNKS: usize = 16;
/// The most bytes of chunks held back, whatever their number.
const REORDER_BYTES: usize = 256 << 20;

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

/// Where a reader is in a trace's sequence of chunks.
enum Order {
    /// Format 1.4 and later: chunks carry their place.
    Numbered {
        /// The sequence number of the chunk whose turn it is.
        next: u64,
        /// The index of its first event.
        next_event: u64,
        /// Where the last chunk handed out ends: missing chunks lie after.
        last_end: u64,
        /// Chunks that came before their turn, by sequence number.
        held: BTreeMap<u64, RawChunk>,
        held_bytes: usize,
        /// Sequence numbers declared missing: one met later is late, not
        /// a repeat.
        missing: Vec<Range<u64>>,
    },
    /// Older traces: chunks are read as found.
    Unnumbered {
        /// The payload checksum and length of each chunk read: a chunk
        /// equal to one of them is a repeat.
        seen: FxHashSet<(u32, usize)>,
        /// The time of the last event of the chunk read last.
        last_time_ns: Option<u64>,
    },
}

/// What a scan after damage found.
enum Scan {
    /// A sound record, this many bytes from the damage's start; it is next
    /// in the input.
    Found(u64),
    /// No sound record up to the end of the input, this many bytes from
    /// the damage's start. `cut`: where the first record whose header
    /// checks out but whose data runs past the end begins (the trace was
    /// cut there).
    End { consumed: u64, cut: Option<u64> },
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

    /// Damage at `at`: `read` holds the bytes consumed from there (`cut`:
    /// a record whose header checks out and whose data runs past the end).
    /// Skips to the next sound record, or the end, and says what was lost.
    fn recover(
        &mut self,
        at: u64,
        read: Vec<u8>,
        reason: &'static str,
        cut: bool,
    ) -> Result<(), FormatError> {
        match self.scan(read, cut.then_some(0))? {
            Scan::Found(skipped) => {
                self.offset += skipped;
                self.damaged(at, skipped, reason.to_string());
            }
            Scan::End { consumed, cut } => {
                self.offset += consumed;
                match cut {
                    Some(cut) => {
                        if cut > 0 {
                            self.damaged(at, cut, reason.to_string());
                        }
                        self.truncation = Some(Truncation {
                            offset: at + cut,
                            lost_bytes: consumed - cut,
                        });
                    }
                    None => self.damaged(at, consumed, reason.to_string()),
                }
                self.done = true;
            }
        }
        Ok(())
    }

    /// Looks for the next sound record after damage, from the second of
    /// the bytes `buf` holds (read from the damage's start) on, reading
    /// more as needed: byte by byte, a record marker whose header checksum
    /// and then payload checksum check out. A damaged length is never
    /// trusted: a byte lost or added inside a record moves the next one.
    /// Memory: the bytes from the candidate looked at to what its length
    /// claims, at most the rest of the input. Time: linear, however many
    /// forged headers claim long payloads ([`Prefixes`]).
    fn scan(&mut self, mut buf: Vec<u8>, mut cut: Option<u64>) -> io::Result<Scan> {
        const MARKER: u8 = 0xc9;
        const STEP: u64 = 1 << 16;
        // `buf[0]` is at `dropped` bytes from the damage's start.
        let mut dropped = 0u64;
        let mut sums = Prefixes::new();
        sums.extend(&buf, dropped);
        let mut p = 1usize;
        let mut eof = false;
        loop {
            if buf.len() < p + RECORD_OVERHEAD && !eof {
                // Keep what is left to look at (whole blocks go), and read on.
                let done = p / PREFIX_BLOCK * PREFIX_BLOCK;
                if done as u64 > STEP {
                    buf.drain(..done);
                    dropped += done as u64;
                    p -= done;
                    sums.drop_to(dropped);
                }
                let before = buf.len();
                (&mut self.input).take(STEP).read_to_end(&mut buf)?;
                eof = buf.len() == before;
                sums.extend(&buf, dropped);
                continue;
            }
            if p >= buf.len() {
                return Ok(Scan::End {
                    consumed: dropped + buf.len() as u64,
                    cut,
                });
            }
            match buf[p..].iter().position(|&b| b == MARKER) {
                Some(i) => p += i,
                None => {
                    p = buf.len();
                    continue;
                }
            }
            let head = &buf[p..];
            if head.len() < RECORD_OVERHEAD && !eof {
                continue;
            }
            if !is_record_header(head) {
                p += 1;
                continue;
            }
            let len = 6 + u32::from_be_bytes(head[1..5].try_into().expect("4 bytes")) as usize;
            if head.len() < len {
                if eof {
                    // Its data runs past the end: the trace may be cut
                    // here, unless a sound record follows.
                    cut.get_or_insert(dropped + p as u64);
                    p += 1;
                } else {
                    // Read what its length claims, as far as the input
                    // goes, to check its payload.
                    let missing = (len - head.len()) as u64;
                    let before = buf.len();
                    (&mut self.input).take(missing).read_to_end(&mut buf)?;
                    eof = ((buf.len() - before) as u64) < missing;
                    sums.extend(&buf, dropped);
                }
                continue;
            }
            let crc = u32::from_le_bytes(head[10..14].try_into().expect("4 bytes"));
            let payload = dropped + (p + RECORD_OVERHEAD) as u64..dropped + (p + len) as u64;
            if sums.crc(&buf, dropped, payload) == crc {
                self.input.unread(&buf[p..]);
                return Ok(Scan::Found(dropped + p as u64));
            }
            p += 1;
        }
    }

    /// Takes a chunk read from the file into the sequence: returns it if
    /// its turn has come, holds it back if it came early, drops it if it
    /// repeats one already read.
    fn admit(&mut self, chunk: RawChunk, crc: u32) -> Option<RawChunk> {
        let damage = match &mut self.order {
            Order::Unnumbered { seen, last_time_ns } => {
                if !seen.insert((crc, chunk.encoded_len())) {
                    // Equal bytes, times included: the same chunk twice.
                    Some(TraceDamage::Repeated {
                        offset: chunk.offset(),
                        bytes: chunk.record_len(),
                        sequence: None,
                        events: chunk.event_count(),
                    })
                } else {
                    let previous = last_time_ns.replace(chunk.last_time_ns());
                    let damage = previous.filter(|&t| chunk.first_time_ns() < t).map(|t| {
                        TraceDamage::TimeBackwards {
                            offset: chunk.offset(),
                            bytes: chunk.record_len(),
                            first_time_ns: chunk.first_time_ns(),
                            previous_last_ns: t,
                            events: chunk.event_count(),
                        }
                    });
                    if let Some(damage) = damage {
                        self.note(damage);
                    }
                    return Some(chunk);
                }
            }
            Order::Numbered {
                next,
                held,
                held_bytes,
                missing,
                ..
            } => {
                let sequence = chunk.sequence().expect("chunks of 1.4 are numbered");
                if sequence == *next {
                    if let Some((&after, _)) = held.first_key_value() {
                        let damage = TraceDamage::OutOfOrder {
                            offset: chunk.offset(),
                            bytes: chunk.record_len(),
                            sequence,
                            after,
                            events: chunk.event_count(),
                        };
                        self.note(damage);
                    }
                    return Some(self.hand_out(chunk));
                }
                if sequence > *next && !held.contains_key(&sequence) {
                    *held_bytes += chunk.encoded_len();
                    held.insert(sequence, chunk);
                    return None;
                }
                let (offset, bytes, events) =
                    (chunk.offset(), chunk.record_len(), chunk.event_count());
                if missing.iter().any(|r| r.contains(&sequence)) {
                    Some(TraceDamage::Late {
                        offset,
                        bytes,
                        sequence,
                        events,
                    })
                } else {
                    Some(TraceDamage::Repeated {
                        offset,
                        bytes,
                        sequence: Some(sequence),
                        events,
                    })
                }
            }
        };
        if let Some(damage) = damage {
            self.note(damage);
        }
        None
    }

    /// A chunk held back whose turn has come; or, once the reader holds as
    /// many as it may (or has read everything), the first held, the chunks
    /// before it declared missing.
    fn release_held(&mut self) -> Option<RawChunk> {
        let Order::Numbered {
            next,
            held,
            held_bytes,
            ..
        } = &mut self.order
        else {
            return None;
        };
        let (&first, _) = held.first_key_value()?;
        let full = held.len() >= REORDER_CHUNKS || *held_bytes >= REORDER_BYTES;
        if first != *next && !full && !self.done {
            return None;
        }
        let (_, chunk) = held.pop_first().expect("a first chunk");
        *held_bytes -= chunk.encoded_len();
        Some(self.hand_out(chunk))
    }

    /// Hands out the next chunk in sequence, saying what is missing before
    /// it.
    fn hand_out(&mut self, chunk: RawChunk) -> RawChunk {
        let Order::Numbered {
            next,
            next_event,
            last_end,
            missing,
            ..
        } = &mut self.order
        else {
            return chunk;
        };
        let sequence = chunk.sequence().expect("chunks of 1.4 are numbered");
        let first_event = chunk.first_event().expect("chunks of 1.4 are numbered");
        let gap = (*next..sequence, *next_event..first_event.max(*next_event));
        let bytes = (*last_end).min(chunk.offset())..(*last_end).max(chunk.offset());
        if !gap.0.is_empty() {
            missing.push(gap.0.clone());
        }
        *next = sequence + 1;
        *next_event = first_event.saturating_add(chunk.event_count());
        *last_end = chunk.offset() + chunk.record_len();
        if !gap.0.is_empty() || !gap.1.is_empty() {
            self.note_missing(bytes, gap.0, gap.1);
        }
        chunk
    }

    /// Says that the chunks and events in `chunks` and `events` are lost,
    /// from `bytes`: on the one skip of damage there, if there is one,
    /// else as missing.
    fn note_missing(&mut self, bytes: Range<u64>, chunks: Range<u64>, events: Range<u64>) {
        if self.tell_skip(&bytes, events.end - events.start) {
            return;
        }
        self.note(TraceDamage::Missing {
            offset: bytes.start,
            bytes: bytes.end - bytes.start,
            first_chunk: chunks.start,
            chunks: chunks.end - chunks.start,
            first_event: events.start,
            events: events.end - events.start,
        });
    }

    /// Tells the one skip of damage within `bytes` (if there is exactly
    /// one, its events untold) the events it cost.
    fn tell_skip(&mut self, bytes: &Range<u64>, lost: u64) -> bool {
        let mut skips = self.damage.iter_mut().filter_map(|d| match d {
            TraceDamage::Skipped {
                offset,
                events: count @ None,
                ..
            } if bytes.contains(offset) => Some(count),
            _ => None,
        });
        match (skips.next(), skips.next()) {
            (Some(count), None) => {
                *count = Some(lost);
                true
            }
            _ => false,
        }
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

    fn damaged(&mut self, offset: u64, bytes: u64, reason: String) {
        self.damaged_bytes += bytes;
        self.note(TraceDamage::Skipped {
            offset,
            bytes,
            reason,
            events: None,
        });
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

/// The spacing of [`Prefixes`]' checksums.
const PREFIX_BLOCK: usize = 1024;

/// The CRC-32 of the bytes of a scan (from the damage's start) up to every
/// [`PREFIX_BLOCK`]: the CRC of any range follows from those at its ends
/// (CRC-32 is linear: `crc(A B) = crc(A) shifted by |B| ^ crc(B)`), each
/// hashing less than a block from the nearest sum. A scan thus checks the
/// payload of every candidate record in constant time, where hashing each
/// payload would make a run of forged headers, each claiming the rest of
/// the trace, cost the square of its length.
struct Prefixes {
    /// The CRC of the bytes up to block `first + i`'s start.
    sums: Vec<u32>,
    first: u64,
}

impl Prefixes {
    fn new() -> Self {
        Prefixes {
            sums: vec![0],
            first: 0,
        }
    }

    /// Adds the sums of the whole blocks in `buf`, which starts `dropped`
    /// bytes from the damage's start (a multiple of the block).
    fn extend(&mut self, buf: &[u8], dropped: u64) {
        loop {
            let last = self.first + self.sums.len() as u64 - 1;
            let from = (last * PREFIX_BLOCK as u64 - dropped) as usize;
            let Some(block) = buf.get(from..from + PREFIX_BLOCK) else {
                return;
            };
            let mut h = crc32fast::Hasher::new_with_initial(*self.sums.last().expect("a sum"));
            h.update(block);
            self.sums.push(h.finalize());
        }
    }

    /// Forgets the sums before `dropped` (a multiple of the block).
    fn drop_to(&mut self, dropped: u64) {
        let first = dropped / PREFIX_BLOCK as u64;
        self.sums.drain(..(first - self.first) as usize);
        self.first = first;
    }

    /// The CRC of the bytes up to `at` (from the damage's start).
    fn prefix(&self, buf: &[u8], dropped: u64, at: u64) -> u32 {
        let block = at / PREFIX_BLOCK as u64;
        let from = (block * PREFIX_BLOCK as u64 - dropped) as usize;
        let mut h = crc32fast::Hasher::new_with_initial(self.sums[(block - self.first) as usize]);
        h.update(&buf[from..(at - dropped) as usize]);
        h.finalize()
    }

    /// The CRC of the bytes in `range` (from the damage's start).
    fn crc(&self, buf: &[u8], dropped: u64, range: Range<u64>) -> u32 {
        let mut shifted =
            crc32fast::Hasher::new_with_initial(self.prefix(buf, dropped, range.start));
        shifted.combine(&crc32fast::Hasher::new_with_initial_len(
            0,
            range.end - range.start,
        ));
        self.prefix(buf, dropped, range.end) ^ shifted.finalize()
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
        if bytes.len() <= self.pos {
            // Room in what was read of the bytes put back before (after
            // damage inside a long record, the rest of the input may be
            // there): no copy of it per damage.
            self.pos -= bytes.len();
            self.back[self.pos..self.pos + bytes.len()].copy_from_slice(bytes);
            return;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{BlockEvent, EventData};
    use crate::record::write_record;
    use crate::writer::{TraceWriter, WriterOptions};

    /// A trace of `chunks` chunks of `per_chunk` (even) events: blocks
    /// allocated and freed, a nanosecond apart. Without `footer`, the writer
    /// is dropped (as by a killed process) rather than finished.
    fn trace(chunks: usize, per_chunk: usize, footer: bool) -> (Vec<u8>, Vec<Event>) {
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
    fn records(bytes: &[u8]) -> Vec<(usize, usize, u8)> {
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
    fn chunks(bytes: &[u8]) -> Vec<(usize, usize)> {
        records(bytes)
            .into_iter()
            .filter(|r| r.2 == RecordType::Chunk as u8)
            .map(|r| (r.0, r.1))
            .collect()
    }

    fn read_all(bytes: &[u8]) -> (TraceReader<&[u8]>, Vec<Event>) {
        let mut r = TraceReader::new(bytes).unwrap();
        let events = r.events().collect::<Result<Vec<_>, _>>().unwrap();
        assert!(r.is_done());
        (r, events)
    }

    /// The same trace as format 1.3 wrote it: chunks without their place.
    fn as_1_3(bytes: &[u8]) -> Vec<u8> {
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

    fn skips(r: &TraceReader<&[u8]>) -> Vec<(u64, u64, Option<u64>)> {
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

    /// The audit's GPT-2 trace of 2 chunks read none of its events once a
    /// byte of chunk 1 was lost: the damaged record's length, one byte too
    /// long, was trusted, and chunk 2's header missed by a byte.
    #[test]
    fn a_byte_lost_in_the_first_of_two_chunks_costs_that_chunk_only() {
        let (bytes, events) = trace(2, 1000, true);
        for bytes in [bytes.clone(), as_1_3(&bytes)] {
            let (at, len) = chunks(&bytes)[0];
            let mut bad = bytes.clone();
            bad.remove(at + len / 2);
            let (r, read) = read_all(&bad);
            assert_eq!(read, events[1000..]);
            let numbered = r.header().version_minor >= 4;
            // The place of chunk 2 says how many events went (1.4).
            let lost = numbered.then_some(1000);
            assert_eq!(skips(&r), [(at as u64, len as u64 - 1, lost)]);
            if numbered {
                let text = r.damage()[0].to_string();
                assert!(
                    text.contains(&format!("bytes {at} to {}", at + len - 1))
                        && text.contains("losing 1000 events"),
                    "{text}"
                );
            }
        }
    }

    /// The audit lost chunks 2 and 3 of 17 to a byte lost in chunk 2; a
    /// byte added costs as little.
    #[test]
    fn a_byte_lost_or_added_in_chunk_2_of_17_costs_chunk_2_only() {
        let (bytes, events) = trace(17, 200, false);
        let (at, len) = chunks(&bytes)[1];
        for added in [false, true] {
            let mut bad = bytes.clone();
            if added {
                bad.insert(at + 20, 0xc9);
            } else {
                bad.remove(at + 20);
            }
            let (r, read) = read_all(&bad);
            assert_eq!(r.chunks_read(), 16);
            assert_eq!(read[..200], events[..200]);
            assert_eq!(read[200..], events[400..]);
            let skipped = if added { len + 1 } else { len - 1 };
            assert_eq!(skips(&r), [(at as u64, skipped as u64, Some(200))]);
            assert_eq!(r.damage().len(), 1, "{:?}", r.damage());
        }
    }

    /// Bytes that look like a record header claiming 1 GiB, before chunk 1:
    /// a "cut" that read nothing in the audit. A length that runs past the
    /// end is a cut only when no sound record starts inside it.
    #[test]
    fn a_forged_header_claiming_a_gib_is_skipped_not_taken_for_a_cut() {
        let (bytes, events) = trace(4, 250, true);
        let mut forged = vec![0xc9];
        forged.extend_from_slice(&((1u32 << 30) + 8).to_be_bytes());
        forged.push(RecordType::Chunk as u8);
        forged.extend_from_slice(&crc32fast::hash(&forged).to_le_bytes());
        forged.extend_from_slice(&[0; 4]);
        assert!(is_record_header(&forged));
        let (at, _) = chunks(&bytes)[0];
        for bytes in [bytes.clone(), as_1_3(&bytes)] {
            let mut bad = bytes[..at].to_vec();
            bad.extend_from_slice(&forged);
            bad.extend_from_slice(&bytes[at..]);
            let (r, read) = read_all(&bad);
            assert_eq!(read, events);
            assert_eq!(r.truncation(), None);
            assert_eq!(skips(&r), [(at as u64, 14, None)]);
            // The same, with the trace cut inside its last chunk: every
            // complete chunk is read, and the cut is where the last begins.
            let last = chunks(&bytes).last().unwrap().0 + forged.len();
            let (r, read) = read_all(&bad[..last + 30]);
            assert_eq!(read.len(), 750, "{:?} {:?}", r.damage(), r.truncation());
            assert_eq!(read, events[..750]);
            assert_eq!(skips(&r), [(at as u64, 14, None)]);
            assert_eq!(
                r.truncation(),
                Some(&Truncation {
                    offset: last as u64,
                    lost_bytes: 30
                })
            );
        }
    }

    /// Two chunks swapped: read in their places (1.4), with a warning; in
    /// 1.3, where nothing tells their order, time going back is said.
    #[test]
    fn swapped_chunks_are_put_back_in_order() {
        let (bytes, events) = trace(8, 100, true);
        let swap = |bytes: &[u8]| {
            let c = chunks(bytes);
            let (a, b) = (c[3], c[4]);
            let mut out = bytes[..a.0].to_vec();
            out.extend_from_slice(&bytes[b.0..b.0 + b.1]);
            out.extend_from_slice(&bytes[a.0..a.0 + a.1]);
            out.extend_from_slice(&bytes[b.0 + b.1..]);
            (out, a.1 as u64, b.1 as u64, a.0 as u64)
        };
        let (swapped, len3, len4, at) = swap(&bytes);
        let (r, read) = read_all(&swapped);
        assert_eq!(read, events);
        assert_eq!(
            r.damage(),
            [TraceDamage::OutOfOrder {
                offset: at + len4,
                bytes: len3,
                sequence: 3,
                after: 4,
                events: 100,
            }]
        );
        let (old, _, _, _) = swap(&as_1_3(&bytes));
        let (r, read) = read_all(&old);
        assert_eq!(read.len(), events.len());
        assert!(
            matches!(
                r.damage(),
                [TraceDamage::TimeBackwards {
                    first_time_ns: 300,
                    previous_last_ns: 499,
                    events: 100,
                    ..
                }]
            ),
            "{:?}",
            r.damage()
        );
    }

    /// A chunk written twice, in a trace without a footer to count against:
    /// read once (the audit counted 49% more events, and a wrong peak).
    #[test]
    fn a_repeated_chunk_is_read_once() {
        let (bytes, events) = trace(3, 100, false);
        for bytes in [bytes.clone(), as_1_3(&bytes)] {
            let (at, len) = chunks(&bytes)[1];
            let mut bad = bytes[..at + len].to_vec();
            bad.extend_from_slice(&bytes[at..]);
            let (r, read) = read_all(&bad);
            assert_eq!(read, events);
            let sequence = (r.header().version_minor >= 4).then_some(1);
            assert_eq!(
                r.damage(),
                [TraceDamage::Repeated {
                    offset: (at + len) as u64,
                    bytes: len as u64,
                    sequence,
                    events: 100,
                }]
            );
        }
    }

    /// A chunk gone without a trace of damage: which chunk and events, and
    /// where.
    #[test]
    fn a_missing_chunk_is_named_with_its_events() {
        let (bytes, events) = trace(6, 100, false);
        let (at, len) = chunks(&bytes)[2];
        let mut bad = bytes[..at].to_vec();
        bad.extend_from_slice(&bytes[at + len..]);
        let (r, read) = read_all(&bad);
        assert_eq!(read[..200], events[..200]);
        assert_eq!(read[200..], events[300..]);
        assert_eq!(
            r.damage(),
            [TraceDamage::Missing {
                offset: at as u64,
                bytes: 0,
                first_chunk: 2,
                chunks: 1,
                first_event: 200,
                events: 100,
            }]
        );
        assert!(
            r.damage()[0]
                .to_string()
                .contains("events 200 to 299 (100 events) are lost")
        );
    }

    /// A chunk moved further than the reader holds chunks back: the chunks
    /// after its place are read in order, it is said to be missing, then
    /// late; nothing is replayed out of order.
    #[test]
    fn a_chunk_displaced_beyond_the_window_is_dropped_and_said() {
        let n = REORDER_CHUNKS + 4;
        let (bytes, events) = trace(n, 10, true);
        let c = chunks(&bytes);
        let (at, len) = c[1];
        let (last, last_len) = c[n - 1];
        let mut bad = bytes[..at].to_vec();
        bad.extend_from_slice(&bytes[at + len..last + last_len]);
        bad.extend_from_slice(&bytes[at..at + len]);
        bad.extend_from_slice(&bytes[last + last_len..]);
        let (r, read) = read_all(&bad);
        assert_eq!(read[..10], events[..10]);
        assert_eq!(read[10..], events[20..]);
        assert!(
            matches!(
                r.damage(),
                [
                    TraceDamage::Missing {
                        first_chunk: 1,
                        chunks: 1,
                        events: 10,
                        ..
                    },
                    TraceDamage::Late {
                        sequence: 1,
                        events: 10,
                        ..
                    },
                    TraceDamage::CountMismatch { .. },
                ]
            ),
            "{:?}",
            r.damage()
        );
    }

    /// Undamaged traces, numbered or not, raise no alarm.
    #[test]
    fn sound_traces_read_without_warnings() {
        for footer in [true, false] {
            let (bytes, events) = trace(5, 100, footer);
            for bytes in [bytes.clone(), as_1_3(&bytes)] {
                let (r, read) = read_all(&bytes);
                assert_eq!(read, events);
                assert_eq!(r.damage(), []);
            }
        }
    }

    /// The CRC of any range, from the prefix sums, is the CRC of its bytes,
    /// also once the front of the bytes is dropped.
    #[test]
    fn prefix_sums_give_the_crc_of_any_range() {
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 7919 % 251) as u8).collect();
        let mut sums = Prefixes::new();
        sums.extend(&bytes, 0);
        for (start, end) in [
            (0, 0),
            (0, 5000),
            (3, 1024),
            (1024, 2048),
            (1500, 4999),
            (7, 8),
        ] {
            let direct = crc32fast::hash(&bytes[start..end]);
            assert_eq!(sums.crc(&bytes, 0, start as u64..end as u64), direct);
        }
        sums.drop_to(2048);
        let rest = &bytes[2048..];
        assert_eq!(
            sums.crc(rest, 2048, 2100..4321),
            crc32fast::hash(&bytes[2100..4321])
        );
    }

    /// Forged headers by the thousand, each claiming more than the trace
    /// holds, in front of the chunks: skipped, every chunk read.
    #[test]
    fn many_forged_headers_are_skipped() {
        let (bytes, events) = trace(4, 250, true);
        let (at, _) = chunks(&bytes)[0];
        let mut bad = bytes[..at].to_vec();
        for i in 0..2000u32 {
            let mut forged = vec![0xc9];
            forged.extend_from_slice(&(1_000_000 + i).to_be_bytes());
            forged.push(RecordType::Chunk as u8);
            forged.extend_from_slice(&crc32fast::hash(&forged).to_le_bytes());
            bad.extend_from_slice(&forged);
        }
        bad.extend_from_slice(&bytes[at..]);
        let (r, read) = read_all(&bad);
        assert_eq!(read, events);
        assert_eq!(skips(&r), [(at as u64, 2000 * 10, None)]);
    }
}
