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

use super::error::FormatError;
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
    fn from_code(code: u8) -> Option<RecordType> {
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
    /// A complete, intact record. `kind` is `None` for a type this version does not know.
    Record {
        kind: Option<RecordType>,
        payload: Vec<u8>,
    },
    /// The input ended cleanly at a record boundary.
    End,
    /// The input ended inside a record: `present` bytes of it were there.
    Truncated { present: u64 },
}

/// Reads the record starting at `offset` (used only for messages).
pub fn read_record<R: Read>(input: &mut R, offset: u64) -> Result<ReadRecord, FormatError> {
    let mut head = [0u8; RECORD_OVERHEAD];
    let got = read_full(input, &mut head)?;
    if got == 0 {
        return Ok(ReadRecord::End);
    }
    if head[0] != EXT32 {
        return Err(FormatError::corrupt(
            offset,
            "expected the start of a record",
        ));
    }
    if got < RECORD_OVERHEAD {
        // Too little is left to check the header: a cut, unless the bytes we
        // have already contradict a record header.
        return Ok(ReadRecord::Truncated {
            present: got as u64,
        });
    }
    let head_crc = u32::from_le_bytes(head[6..10].try_into().expect("4 bytes"));
    if crc32fast::hash(&head[..6]) != head_crc {
        return Err(FormatError::corrupt(
            offset,
            "record header checksum mismatch",
        ));
    }
    let data_len = u32::from_be_bytes(head[1..5].try_into().expect("4 bytes")) as usize;
    if !(8..=MAX_PAYLOAD + 8).contains(&data_len) {
        return Err(FormatError::corrupt(
            offset,
            format!("implausible record length {data_len}"),
        ));
    }
    let mut payload = vec![0u8; data_len - 8];
    let got_payload = read_full(input, &mut payload)?;
    if got_payload < payload.len() {
        return Ok(ReadRecord::Truncated {
            present: (RECORD_OVERHEAD + got_payload) as u64,
        });
    }
    let payload_crc = u32::from_le_bytes(head[10..14].try_into().expect("4 bytes"));
    if crc32fast::hash(&payload) != payload_crc {
        return Err(FormatError::corrupt(
            offset,
            "record payload checksum mismatch",
        ));
    }
    Ok(ReadRecord::Record {
        kind: RecordType::from_code(head[5]),
        payload,
    })
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
        match read_record(&mut &buf[..], 0).unwrap() {
            ReadRecord::Record { kind, payload } => {
                assert_eq!(kind, Some(RecordType::Chunk));
                assert_eq!(payload, b"hello");
            }
            other => panic!("{other:?}"),
        }
        for cut in 1..buf.len() {
            assert!(matches!(
                read_record(&mut &buf[..cut], 0).unwrap(),
                ReadRecord::Truncated { present } if present == cut as u64
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
            assert!(
                matches!(
                    read_record(&mut &bad[..], 7),
                    Err(FormatError::Corrupt { offset: 7, .. })
                ),
                "flip at {i} went unnoticed"
            );
        }
    }
}
