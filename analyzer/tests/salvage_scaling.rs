//! The reader's scan after damage stays linear however many forged record
//! headers it meets: each claims a payload that reaches the end of the
//! input, so checking every one would hash the rest of the trace again.

mod support;

use support::scaling::assert_linear;
use vramtrace_format::{
    BlockEvent, Event, EventData, Header, TraceReader, TraceWriter, WriterOptions,
};

/// A trace of 8 chunks with `forged` record headers (10 bytes each, header
/// checksum right) before its first chunk, each claiming every byte to the
/// end of the input; and its event count.
fn forged(forged: usize) -> (Vec<u8>, u64) {
    let options = WriterOptions {
        chunk_events: 100,
        chunk_interval: None,
    };
    let mut w = TraceWriter::with_options(Vec::new(), Header::default(), options).unwrap();
    for i in 0..400u64 {
        let block = BlockEvent {
            addr: 4096 * (i % 50),
            size: 4096,
            requested: 4096,
            ..Default::default()
        };
        w.push(Event {
            time_ns: 2 * i,
            data: EventData::Alloc(block),
        })
        .unwrap();
        w.push(Event {
            time_ns: 2 * i + 1,
            data: EventData::FreeCompleted(block),
        })
        .unwrap();
    }
    let events = w.counts().total();
    let bytes = w.finish().unwrap();
    // The first chunk follows the header record, which follows the
    // signature and version (13 bytes).
    let header_len = 6 + u32::from_be_bytes(bytes[14..18].try_into().unwrap()) as usize;
    let at = 13 + header_len;
    let total = bytes.len() + 10 * forged;
    let mut out = bytes[..at].to_vec();
    for i in 0..forged {
        let claim = (total - (at + 10 * i) - 6) as u32;
        let mut head = vec![0xc9];
        head.extend_from_slice(&claim.to_be_bytes());
        head.push(4);
        let crc = crc32fast::hash(&head);
        head.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&head);
    }
    out.extend_from_slice(&bytes[at..]);
    (out, events)
}

#[test]
fn the_scan_after_damage_is_linear_in_forged_headers() {
    assert_linear(
        "reading past forged record headers",
        2_000,
        forged,
        |(bytes, events)| {
            let mut r = TraceReader::new(&bytes[..]).unwrap();
            let mut read = 0;
            while let Some(chunk) = r.next_chunk().unwrap() {
                read += chunk.event_count();
            }
            assert_eq!(read, *events);
            assert_eq!(r.truncation(), None);
        },
    );
}
