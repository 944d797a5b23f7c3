//! The record scanner: after damage, the next sound record found byte by
//! byte (its header and payload checksums both checked, in linear time
//! however many forged headers there are), over an input whose bytes can be
//! put back.

use super::{TraceReader, Truncation};
use crate::error::FormatError;
use crate::record::{RECORD_OVERHEAD, is_record_header};
use std::io::{self, Read};
use std::ops::Range;

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

impl<R: Read> TraceReader<R> {
    /// Damage at `at`: `read` holds the bytes consumed from there (`cut`:
    /// a record whose header checks out and whose data runs past the end).
    /// Skips to the next sound record, or the end, and says what was lost.
    pub(super) fn recover(
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
pub(super) struct Rewind<R> {
    inner: R,
    back: Vec<u8>,
    pos: usize,
}

impl<R: Read> Rewind<R> {
    pub(super) fn new(inner: R) -> Self {
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

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::*;
    use crate::record::RecordType;

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
