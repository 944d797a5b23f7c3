//! Chunk ordering: numbered chunks (format 1.4) handed out in sequence, those
//! that come early held back within a bound, repeats dropped and gaps named;
//! older chunks checked for repeats and time going back.

use super::{TraceDamage, TraceReader};
use crate::chunk::RawChunk;
use rustc_hash::FxHashSet;
use std::collections::BTreeMap;
use std::io::Read;
use std::ops::Range;

/// The most chunks a reader holds back while it waits for a chunk whose
/// turn has come (format 1.4): a chunk displaced by more is lost, and one
/// that never comes is declared missing once this many follow it.
pub const REORDER_CHUNKS: usize = 16;
/// The most bytes of chunks held back, whatever their number.
const REORDER_BYTES: usize = 256 << 20;

/// Where a reader is in a trace's sequence of chunks.
pub(super) enum Order {
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

impl<R: Read> TraceReader<R> {
    /// Takes a chunk read from the file into the sequence: returns it if
    /// its turn has come, holds it back if it came early, drops it if it
    /// repeats one already read.
    pub(super) fn admit(&mut self, chunk: RawChunk, crc: u32) -> Option<RawChunk> {
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
    pub(super) fn release_held(&mut self) -> Option<RawChunk> {
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
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::*;

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
}
