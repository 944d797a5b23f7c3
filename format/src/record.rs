//! Record framing: every record is a MessagePack `ext 32` value.
//!
//! ```text
//! 0xc9 | data length: u32 BE | type: u8 | header crc: u32 LE | payload crc: u32 LE | payload
//! ```
//!
//! The data length covers both CRCs and the payload. The header CRC covers
//! the six bytes before it, so a damaged length is told apart from a file
//! that was cut short: only a record whose header checks out and whose data
//! runs past the end of the input counts as truncation.

use std::io::{self, Read, Write};

/// MessagePack's `ext 32` marker.
const EXT32: u8 = 0xc9;
/// Bytes before the payload: marker, length, type and the two CRCs.
pub const RECORD_OVERHEAD: usize = 14;
/// The largest payload a reader accepts; larger lengths mean damage.
const MAX_PAYLOAD: usize = 1 << 30;

/// What a record holds. Unknown types are skipped by readers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordType {
    Header = 1,
    Symbols = 2,
    InitialState = 3,
    Chunk = 4,
    Footer = 5,
}

impl RecordType {
    pub(crate) fn from_code(code: u8) -> Option<RecordType> {
        Some(match code {
            1 => RecordType::Header,
            2 => RecordType::Symbols,
            3 => RecordType::InitialState,
            4 => RecordType::Chunk,
            5 => RecordType::Footer,
            _ => return None,
        })
    }
}

/// Writes one record; returns the number of bytes written.
pub fn write_record<W: Write>(out: &mut W, kind: RecordType, payload: &[u8]) -> io::Result<u64> {
    let data_len = u32::try_from(payload.len() + 8)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "record larger than 4 GiB"))?;
    let mut head = [0u8; RECORD_OVERHEAD];
    head[0] = EXT32;
    head[1..5].copy_from_slice(&data_len.to_be_bytes());
    head[5] = kind as u8;
    let head_crc = crc32fast::hash(&head[..6]);
    head[6..10].copy_from_slice(&head_crc.to_le_bytes());
    head[10..14].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.write_all(&head)?;
    out.write_all(payload)?;
    Ok((RECORD_OVERHEAD + payload.len()) as u64)
}

/// The outcome of reading one record.
#[derive(Debug)]
pub enum ReadRecord {
    /// A complete, intact record. `kind` is `None` for a type this version
    /// does not know; `code` is its type byte; `crc` its payload's CRC.
    Record {
        kind: Option<RecordType>,
        code: u8,
        crc: u32,
        payload: Vec<u8>,
    },
    /// The input ended cleanly at a record boundary.
    End,
    /// The input ended inside what claims to be a record: `read` holds the
    /// bytes of it that were there (a cut, unless a sound record starts
    /// among them: the reader looks).
    Truncated { read: Vec<u8> },
    /// The bytes at the offset are not a sound record: its header or its
    /// payload fails its checksum. `read` holds the bytes consumed (the
    /// whole record when only the payload is damaged), for the reader to
    /// look for the next record in: a damaged record's length is not
    /// trusted, as a byte lost or added inside it moves the next record.
    Damaged { reason: &'static str, read: Vec<u8> },
}

/// Whether `head` (at least 10 bytes) starts with a plausible record
/// header: the marker, a length within bounds, and a header CRC that
/// checks out (a chance of 2^-32 for bytes that are not one).
pub fn is_record_header(head: &[u8]) -> bool {
    head.len() >= 10
        && head[0] == EXT32
        && crc32fast::hash(&head[..6])
            == u32::from_le_bytes(head[6..10].try_into().expect("4 bytes"))
        && (8..=MAX_PAYLOAD + 8)
            .contains(&(u32::from_be_bytes(head[1..5].try_into().expect("4 bytes")) as usize))
}

/// Reads the record starting here. Damage is an outcome, not an error:
/// errors are the input's own.
pub fn read_record<R: Read>(input: &mut R) -> io::Result<ReadRecord> {
    let mut head = [0u8; RECORD_OVERHEAD];
    let got = read_full(input, &mut head)?;
    if got == 0 {
        return Ok(ReadRecord::End);
    }
    let damaged = |reason, head: &[u8]| ReadRecord::Damaged {
        reason,
        read: head.to_vec(),
    };
    if head[0] != EXT32 {
        return Ok(damaged("expected the start of a record", &head[..got]));
    }
    if got < RECORD_OVERHEAD {
        // Too little is left to check the header: a cut.
        return Ok(ReadRecord::Truncated {
            read: head[..got].to_vec(),
        });
    }
    let head_crc = u32::from_le_bytes(head[6..10].try_into().expect("4 bytes"));
    if crc32fast::hash(&head[..6]) != head_crc {
        return Ok(damaged("record header checksum mismatch", &head));
    }
    let data_len = u32::from_be_bytes(head[1..5].try_into().expect("4 bytes")) as usize;
    if !(8..=MAX_PAYLOAD + 8).contains(&data_len) {
        return Ok(damaged("implausible record length", &head));
    }
    // Read what is there rather than allocate what the length says: a
    // length is believed only as far as the input bears it out.
    let payload = read_payload(input, data_len - 8)?;
    let want = (data_len - 8) as u64;
    let whole = |payload: Vec<u8>| {
        let mut read = Vec::with_capacity(RECORD_OVERHEAD + payload.len());
        read.extend_from_slice(&head);
        read.extend_from_slice(&payload);
        read
    };
    if (payload.len() as u64) < want {
        return Ok(ReadRecord::Truncated {
            read: whole(payload),
        });
    }
    let payload_crc = u32::from_le_bytes(head[10..14].try_into().expect("4 bytes"));
    if crc32fast::hash(&payload) != payload_crc {
        return Ok(ReadRecord::Damaged {
            reason: "record payload checksum mismatch",
            read: whole(payload),
        });
    }
    Ok(ReadRecord::Record {
        kind: RecordType::from_code(head[5]),
        code: head[5],
        crc: payload_crc,
        payload,
    })
}

/// Bytes of a payload read before the input has shown that it holds more.
const FIRST_READ: usize = 4 << 20;

/// Reads up to `want` bytes of a record's payload: fewer if the input ends
/// first. The buffer grows as the input bears the length out (from
/// [`FIRST_READ`], doubling), so a damaged length costs no more memory than
/// the input holds. Each piece is read straight into the buffer: with
/// `read_to_end`, a reader of unknown length was read through small probes
/// with their copies and zeroing, on the thread whose reading the replay
/// waits for (issue #47).
fn read_payload<R: Read>(input: &mut R, want: usize) -> io::Result<Vec<u8>> {
    let mut payload = Vec::with_capacity(want.min(FIRST_READ));
    while payload.len() < want {
        let start = payload.len();
        let piece = (want - start).min(start.max(FIRST_READ));
        payload.resize(start + piece, 0);
        let got = read_full(input, &mut payload[start..])?;
        if got < piece {
            payload.truncate(start + got);
            break;
        }
    }
    Ok(payload)
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
pub fn read_full<R: Read>(input: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_cuts_are_truncation() {
        let mut buf = Vec::new();
        write_record(&mut buf, RecordType::Chunk, b"hello").unwrap();
        assert!(is_record_header(&buf));
        match read_record(&mut &buf[..]).unwrap() {
            ReadRecord::Record { kind, payload, .. } => {
                assert_eq!(kind, Some(RecordType::Chunk));
                assert_eq!(payload, b"hello");
            }
            other => panic!("{other:?}"),
        }
        for cut in 1..buf.len() {
            assert!(matches!(
                read_record(&mut &buf[..cut]).unwrap(),
                ReadRecord::Truncated { read } if read == buf[..cut]
            ));
        }
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let mut buf = Vec::new();
        write_record(&mut buf, RecordType::Symbols, b"payload bytes").unwrap();
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            match read_record(&mut &bad[..]).unwrap() {
                // A flip past the header CRC (in the payload CRC or the
                // payload) lets the whole record be read, for the reader to
                // look in; a flip in the header stops at the header.
                ReadRecord::Damaged { read, .. } => {
                    let expected = if i >= 10 { buf.len() } else { RECORD_OVERHEAD };
                    assert_eq!(read.len(), expected, "flip at {i}");
                }
                other => panic!("flip at byte {i} went unnoticed: {other:?}"),
            }
        }
    }

    /// A length the input does not hold is read as far as the input goes,
    /// never allocated up front.
    #[test]
    fn a_huge_length_allocates_only_what_is_there() {
        let mut head = vec![EXT32];
        head.extend_from_slice(&((MAX_PAYLOAD + 8) as u32).to_be_bytes());
        head.push(RecordType::Chunk as u8);
        let crc = crc32fast::hash(&head);
        head.extend_from_slice(&crc.to_le_bytes());
        head.extend_from_slice(&[0; 4]);
        head.extend_from_slice(b"short");
        assert!(matches!(
            read_record(&mut &head[..]).unwrap(),
            ReadRecord::Truncated { read } if read == head
        ));
    }

    /// Payloads past the first read's size come whole, in order; a cut one
    /// comes as far as the input goes, in memory of its order.
    #[test]
    fn payloads_larger_than_the_first_read_are_read_whole() {
        let data: Vec<u8> = (0..2 * FIRST_READ + 123).map(|i| (i % 251) as u8).collect();
        let mut buf = Vec::new();
        write_record(&mut buf, RecordType::Chunk, &data).unwrap();
        match read_record(&mut &buf[..]).unwrap() {
            ReadRecord::Record { payload, .. } => assert!(payload == data),
            other => panic!("{:?}", std::mem::discriminant(&other)),
        }
        let cut = &data[..FIRST_READ + 7];
        let payload = read_payload(&mut &cut[..], MAX_PAYLOAD).unwrap();
        assert!(payload == cut);
        assert!(payload.capacity() <= 2 * FIRST_READ + 7);
        assert!(read_payload(&mut &data[..], 0).unwrap().is_empty());
    }
}
