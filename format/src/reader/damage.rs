//! Damage reporting: what a reader could not read as written (records
//! skipped, a cut, chunks missing, repeated or out of order, a footer that
//! disagrees), kept up to a bound and counted beyond it.

use super::{REORDER_CHUNKS, TraceReader};
use crate::chunk::RawChunk;
use std::fmt;
use std::io::Read;
use std::ops::Range;

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

impl<R: Read> TraceReader<R> {
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

    pub(super) fn note(&mut self, damage: TraceDamage) {
        self.damage_count += 1;
        if self.damage.len() < KEPT_DAMAGE {
            self.damage.push(damage);
        }
    }

    /// Says that the chunks and events in `chunks` and `events` are lost,
    /// from `bytes`: on the one skip of damage there, if there is one,
    /// else as missing.
    pub(super) fn note_missing(
        &mut self,
        bytes: Range<u64>,
        chunks: Range<u64>,
        events: Range<u64>,
    ) {
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
    pub(super) fn tell_skip(&mut self, bytes: &Range<u64>, lost: u64) -> bool {
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

    pub(super) fn damaged(&mut self, offset: u64, bytes: u64, reason: String) {
        self.damaged_bytes += bytes;
        self.note(TraceDamage::Skipped {
            offset,
            bytes,
            reason,
            events: None,
        });
    }
}
