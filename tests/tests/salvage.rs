//! Salvage (issue #32, item 1): each damaged trace of the reliability audit,
//! made here from a fixture, as a regression test of the binary. Every
//! intact chunk is read; the warning names the bytes and the events lost;
//! swapped chunks are put back in order and a repeated chunk is read once,
//! so the peak is the undamaged trace's. Traces of format 1.3 (whose chunks
//! carry no sequence number) get what can be had without it.

use std::path::{Path, PathBuf};
use vramtrace_e2e::{fixture, scratch, vramtrace};
use vramtrace_format::{StackId, StringId, TraceReader, TraceWriter, WriterOptions};

/// The fixture `name` rewritten in chunks of `chunk_events` events, with
/// the same events and symbols (ids included); without `footer`, as a
/// killed writer leaves it.
fn rechunked(name: &str, chunk_events: usize, footer: bool) -> Vec<u8> {
    let mut r = TraceReader::open(fixture(name)).unwrap();
    let events = r.events().collect::<Result<Vec<_>, _>>().unwrap();
    let symbols = r.symbols();
    let mut out = Vec::new();
    let options = WriterOptions {
        chunk_events,
        chunk_interval: None,
    };
    let mut w = TraceWriter::with_options(&mut out, r.header().clone(), options).unwrap();
    for i in 1..symbols.string_count() as u32 {
        let id = w.intern_string(symbols.string(StringId(i)).unwrap());
        assert_eq!(id, StringId(i));
    }
    for i in 0..symbols.frame_count() as u32 {
        let frame = *symbols.frame(vramtrace_format::FrameId(i)).unwrap();
        assert_eq!(w.intern_frame(frame).0, i);
    }
    for i in 1..symbols.stack_count() as u32 {
        let id = w.intern_stack(symbols.stack(StackId(i)));
        assert_eq!(id, StackId(i));
    }
    if let Some(state) = r.initial_state() {
        w.write_initial_state(state).unwrap();
    }
    w.push_all(events).unwrap();
    if footer {
        w.finish().unwrap();
    } else {
        drop(w);
    }
    out
}

/// The same trace as format 1.3 wrote it: the version in the signature and
/// the header says 1.3, and the chunks end without their place. (Later
/// minors add nothing these traces hold: no dropped events.)
fn as_1_3(bytes: &[u8]) -> Vec<u8> {
    let minor = vramtrace_format::VERSION_MINOR as u8;
    let mut out = bytes[..13].to_vec();
    assert_eq!(out[10..], [0x92, 1, minor]);
    out[12] = 3;
    for (at, len, kind) in records(bytes) {
        let mut payload = bytes[at + 14..at + len].to_vec();
        match kind {
            1 => {
                let key = [b"\xadversion_minor".as_slice(), &[minor]].concat();
                let i = payload.windows(key.len()).position(|w| w == key).unwrap();
                payload[i + key.len() - 1] = 3;
            }
            4 => {
                let trailer = *payload.last().unwrap() as usize + 1;
                payload.truncate(payload.len() - trailer);
            }
            _ => {}
        }
        out.extend_from_slice(&record(kind, &payload));
    }
    out
}

/// A record, framed as the format frames them.
fn record(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0xc9];
    out.extend_from_slice(&(payload.len() as u32 + 8).to_be_bytes());
    out.push(kind);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Each record's offset, length and type, from the framing.
fn records(bytes: &[u8]) -> Vec<(usize, usize, u8)> {
    let mut at = 13;
    let mut out = Vec::new();
    while at + 6 <= bytes.len() {
        let data = u32::from_be_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        out.push((at, 6 + data, bytes[at + 5]));
        at += 6 + data;
    }
    out
}

/// The chunk records: offset and length.
fn chunks(bytes: &[u8]) -> Vec<(usize, usize)> {
    records(bytes)
        .into_iter()
        .filter(|r| r.2 == 4)
        .map(|r| (r.0, r.1))
        .collect()
}

/// The events of the chunk at `at`: its first varint.
fn chunk_events(bytes: &[u8], at: usize) -> u64 {
    let (mut n, mut shift) = (0u64, 0);
    for &b in &bytes[at + 14..] {
        n |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return n;
        }
        shift += 7;
    }
    unreachable!("a chunk starts with its event count")
}

struct Summary {
    events: u64,
    peak: u64,
    inconsistencies: u64,
    stderr: String,
}

/// `vramtrace summary --json` of `bytes`, written to `dir/name`: it must
/// succeed.
fn summary(dir: &Path, name: &str, bytes: &[u8]) -> Summary {
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let run = vramtrace(["summary".as_ref(), "--json".as_ref(), path.as_os_str()]).success();
    let json = run.result();
    Summary {
        events: json["events"].as_u64().unwrap(),
        peak: json["peak_allocated_bytes"].as_u64().unwrap(),
        inconsistencies: json["inconsistencies"]["total"].as_u64().unwrap(),
        stderr: run.stderr,
    }
}

/// One byte lost inside chunk 1 of 2 read 0 of the audit's 129,502 events:
/// the damaged record's length was trusted, and chunk 2's header missed.
#[test]
fn a_byte_lost_in_chunk_1_of_2_costs_chunk_1_only() {
    let dir = scratch("salvage-two-chunks");
    let bytes = rechunked("fragmenting.vtrace", 3500, true);
    let c = chunks(&bytes);
    assert_eq!(c.len(), 2);
    let whole = summary(&dir, "whole.vtrace", &bytes);
    for (name, bytes) in [("1.4", bytes.clone()), ("1.3", as_1_3(&bytes))] {
        let (at, len) = chunks(&bytes)[0];
        let lost = chunk_events(&bytes, at);
        let mut bad = bytes.clone();
        bad.remove(at + len / 2);
        let run = summary(&dir, &format!("lost-byte-{name}.vtrace"), &bad);
        assert_eq!(run.events, whole.events - lost, "{name}: {}", run.stderr);
        assert!(
            run.stderr
                .contains(&format!("bytes {at} to {} are damaged", at + len - 1)),
            "{name}: {}",
            run.stderr
        );
        // Both name the events lost: 1.4 from chunk 2's first event's index,
        // 1.3 from the footer's count.
        let said = match name {
            "1.4" => format!("losing {lost} events"),
            _ => format!("{lost} events are missing"),
        };
        assert!(run.stderr.contains(&said), "{name}: {}", run.stderr);
    }
}

/// One byte lost in chunk 2 of 17 cost chunks 2 and 3.
#[test]
fn a_byte_lost_in_chunk_2_of_17_costs_chunk_2_only() {
    let dir = scratch("salvage-seventeen-chunks");
    let bytes = rechunked("fragmenting.vtrace", 410, true);
    let c = chunks(&bytes);
    assert_eq!(c.len(), 17);
    let whole = summary(&dir, "whole.vtrace", &bytes);
    let (at, len) = c[1];
    let mut bad = bytes.clone();
    bad.remove(at + 100);
    let run = summary(&dir, "lost-byte.vtrace", &bad);
    assert_eq!(run.events, whole.events - 410, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "bytes {at} to {} are damaged (record payload checksum mismatch) and were skipped, losing 410 events",
            at + len - 1
        )),
        "{}",
        run.stderr
    );
}

/// 14 bytes that look like a record header claiming 1 GiB, before chunk 1,
/// read as a cut: 0 of 1,032 events, the good chunks behind them unread.
#[test]
fn a_forged_header_before_chunk_1_costs_nothing() {
    let dir = scratch("salvage-forged");
    let bytes = rechunked("oom.vtrace", 250, true);
    let whole = summary(&dir, "whole.vtrace", &bytes);
    for (name, bytes) in [("1.4", bytes.clone()), ("1.3", as_1_3(&bytes))] {
        let (at, _) = chunks(&bytes)[0];
        let mut forged = record(4, &[]);
        forged[1..5].copy_from_slice(&((1u32 << 30) + 8).to_be_bytes());
        let crc = crc32fast::hash(&forged[..6]);
        forged[6..10].copy_from_slice(&crc.to_le_bytes());
        let mut bad = bytes[..at].to_vec();
        bad.extend_from_slice(&forged);
        bad.extend_from_slice(&bytes[at..]);
        let run = summary(&dir, &format!("forged-{name}.vtrace"), &bad);
        assert_eq!(run.events, whole.events, "{name}: {}", run.stderr);
        assert_eq!(run.peak, whole.peak, "{name}");
        assert!(
            run.stderr
                .contains(&format!("bytes {at} to {} are damaged", at + 14))
                && !run.stderr.contains("cut short"),
            "{name}: {}",
            run.stderr
        );
    }
}

/// Two chunks swapped: no warning, a peak of 8.0 GiB instead of 7.6 GiB and
/// 20,873 inconsistencies in the audit. Now put back in order (1.4), or
/// said (1.3: time goes back).
#[test]
fn swapped_chunks_are_put_back_in_order() {
    let dir = scratch("salvage-swapped");
    let bytes = rechunked("fragmenting.vtrace", 410, true);
    let whole = summary(&dir, "whole.vtrace", &bytes);
    assert_eq!(whole.inconsistencies, 0);
    let swap = |bytes: &[u8]| {
        let c = chunks(bytes);
        let (a, b) = (c[5], c[6]);
        let mut out = bytes[..a.0].to_vec();
        out.extend_from_slice(&bytes[b.0..b.0 + b.1]);
        out.extend_from_slice(&bytes[a.0..a.0 + a.1]);
        out.extend_from_slice(&bytes[b.0 + b.1..]);
        out
    };
    let run = summary(&dir, "swapped-1.4.vtrace", &swap(&bytes));
    assert_eq!(
        (run.events, run.peak, run.inconsistencies),
        (whole.events, whole.peak, 0)
    );
    assert!(
        run.stderr.contains("chunk 5 (bytes ")
            && run
                .stderr
                .contains("410 events) comes after chunk 6 in the file: read in its place"),
        "{}",
        run.stderr
    );
    let run = summary(&dir, "swapped-1.3.vtrace", &swap(&as_1_3(&bytes)));
    assert_eq!(run.events, whole.events);
    assert!(
        run.stderr.contains("before the chunk before it ends")
            && run.stderr.contains("chunks out of order"),
        "{}",
        run.stderr
    );
}

/// A chunk written twice, in a trace without a footer: 49% more events and
/// a wrong peak in the audit. Read once, in 1.4 (its sequence number) and
/// in 1.3 (its bytes).
#[test]
fn a_repeated_chunk_is_read_once() {
    let dir = scratch("salvage-repeated");
    let bytes = rechunked("fragmenting.vtrace", 410, false);
    let whole = summary(&dir, "whole.vtrace", &bytes);
    for (name, bytes) in [("1.4", bytes.clone()), ("1.3", as_1_3(&bytes))] {
        let (at, len) = chunks(&bytes)[8];
        let mut bad = bytes[..at + len].to_vec();
        bad.extend_from_slice(&bytes[at..]);
        let run = summary(&dir, &format!("repeated-{name}.vtrace"), &bad);
        assert_eq!(
            (run.events, run.peak, run.inconsistencies),
            (whole.events, whole.peak, 0),
            "{name}: {}",
            run.stderr
        );
        let said = match name {
            "1.4" => "repeats chunk 8, already read: dropped, so its 410 events count once",
            _ => "repeats a chunk already read (the same bytes): dropped",
        };
        assert!(
            run.stderr.contains(&format!(
                "the chunk at bytes {} to {} {said}",
                at + len,
                at + 2 * len
            )),
            "{name}: {}",
            run.stderr
        );
    }
}

/// The bundled traces, old and new, raise no alarm.
#[test]
fn sound_traces_read_without_warnings() {
    for name in [
        "clean.vtrace",
        "leak.vtrace",
        "fragmenting.vtrace",
        "oom.vtrace",
        "two-devices.vtrace",
        "compat/leak-1.0.vtrace",
        "compat/leak-1.3.vtrace",
    ] {
        let run = vramtrace(["summary".as_ref(), fixture(name).as_os_str()]).success();
        assert!(!run.stderr.contains("warning"), "{name}: {}", run.stderr);
    }
    let dir = scratch("salvage-sound");
    let bytes = rechunked("two-devices.vtrace", 300, true);
    for bytes in [as_1_3(&bytes), bytes] {
        let path = dir.join("rechunked.vtrace");
        std::fs::write(&path, bytes).unwrap();
        let run = vramtrace(["summary".as_ref(), path.as_os_str()]).success();
        assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    }
}
