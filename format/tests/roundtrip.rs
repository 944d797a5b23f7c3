//! Round trips, damage and truncation of whole traces through the writer and reader.

use proptest::prelude::*;
use vramtrace_format::*;

fn header() -> Header {
    Header {
        producer: "test".into(),
        producer_version: "0".into(),
        devices: vec![DeviceInfo {
            index: 0,
            name: "simulated".into(),
            total_memory: 80 << 30,
        }],
        ..Header::default()
    }
}

fn block(addr: u64, requested: u64, stack: StackId) -> BlockEvent {
    BlockEvent {
        addr,
        size: requested.div_ceil(512) * 512,
        requested,
        stream: 0,
        device: 0,
        stack,
        thread: 1,
    }
}

/// A small trace with every record type: symbols, initial state, several chunks, footer.
fn small_trace(chunk_events: usize) -> (Vec<u8>, Vec<Event>) {
    let options = WriterOptions {
        chunk_events,
        chunk_interval: None,
    };
    let mut w = TraceWriter::with_options(Vec::new(), header(), options).unwrap();
    let stack = w.intern_symbol_stack([("forward", "model.py", 41), ("main", "train.py", 7)]);
    let iter = w.intern_string("iter0");
    w.write_initial_state(&InitialState {
        segments: vec![SegmentState {
            addr: 1 << 30,
            size: 2 << 20,
            blocks: vec![BlockState {
                addr: 1 << 30,
                size: 2 << 20,
                requested: 0,
                status: BlockStatus::Free,
                stack: StackId::NONE,
            }],
            ..SegmentState::default()
        }],
    })
    .unwrap();
    let mut events = vec![Event {
        time_ns: 0,
        data: EventData::PhaseBegin {
            name: iter,
            thread: 0,
        },
    }];
    for i in 0..20u64 {
        let b = block((1 << 30) + i * 4096, 1000 + i, stack);
        events.push(Event {
            time_ns: 10 * i + 1,
            data: EventData::Alloc(b),
        });
        events.push(Event {
            time_ns: 10 * i + 5,
            data: EventData::FreeRequested(b),
        });
        events.push(Event {
            time_ns: 10 * i + 5,
            data: EventData::FreeCompleted(b),
        });
    }
    events.push(Event {
        time_ns: 500,
        data: EventData::PhaseEnd {
            name: iter,
            thread: 0,
        },
    });
    w.push_all(events.iter().copied()).unwrap();
    (w.finish().unwrap(), events)
}

fn read_all(bytes: &[u8]) -> Result<(TraceReader<&[u8]>, Vec<Event>), FormatError> {
    let mut r = TraceReader::new(bytes)?;
    let events = r.events().collect::<Result<Vec<_>, _>>()?;
    Ok((r, events))
}

#[test]
fn every_record_round_trips() {
    let (bytes, events) = small_trace(7);
    let (r, read) = read_all(&bytes).unwrap();
    assert_eq!(read, events);
    assert_eq!(r.header().producer, "test");
    assert_eq!(r.header().version_major, VERSION_MAJOR);
    assert_eq!(r.initial_state().unwrap().segments.len(), 1);
    let footer = r.footer().expect("closed cleanly");
    assert_eq!(footer.events, events.len() as u64);
    assert_eq!(footer.chunks, events.len().div_ceil(7) as u64);
    assert_eq!(footer.counts["alloc"], 20);
    assert!(r.truncation().is_none());
    let stack = match read[1].data {
        EventData::Alloc(b) => b.stack,
        _ => unreachable!(),
    };
    let frames = r.symbols().stack(stack);
    assert_eq!(frames.len(), 2);
    assert_eq!(
        r.symbols().describe_frame(frames[0]),
        "forward (model.py:41)"
    );
}

#[test]
fn parallel_batches_see_every_event_in_order() {
    let (bytes, events) = small_trace(3);
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    let mut seen = Vec::new();
    r.for_each_batch(|batch, _| seen.extend_from_slice(batch))
        .unwrap();
    assert_eq!(seen, events);
}

/// A check of each piece, run as it is decoded, comes with that piece:
/// here, whether it holds an event past 300 ns (the phase's end, in the
/// last piece only), which the consumer compares with its own look.
#[test]
fn checked_batches_hand_each_piece_its_own_check() {
    let (bytes, events) = small_trace(3);
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    let late = |events: &[Event]| events.iter().any(|e| e.time_ns > 300);
    let (mut seen, mut pieces, mut flagged) = (Vec::new(), 0, 0);
    let flow = r
        .try_for_each_checked_batch(late, |batch, checked, _, _| {
            assert_eq!(checked, late(batch));
            pieces += 1;
            flagged += checked as usize;
            seen.extend_from_slice(batch);
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    assert!(flow.is_continue());
    assert_eq!(seen, events);
    assert_eq!(pieces, events.len().div_ceil(3));
    assert_eq!(flagged, 1);
}

#[test]
fn truncation_at_every_byte_keeps_exactly_the_complete_chunks() {
    let (bytes, events) = small_trace(4);
    // Where each chunk ends, and how many events precede that point.
    let full = {
        let mut r = TraceReader::new(&bytes[..]).unwrap();
        let mut ends = Vec::new();
        let mut total = 0;
        while let Some(c) = r.next_chunk().unwrap() {
            total += c.event_count() as usize;
            // A chunk record is 14 bytes of framing and its payload.
            ends.push((c.offset() + 14 + c.encoded_len() as u64, total));
        }
        ends
    };
    let mut header_complete = false;
    for cut in 0..bytes.len() {
        let part = &bytes[..cut];
        match read_all(part) {
            Ok((r, read)) => {
                header_complete = true;
                let expected = full
                    .iter()
                    .rfind(|(end, _)| *end <= cut as u64)
                    .map(|&(_, n)| n)
                    .unwrap_or(0);
                assert_eq!(read.len(), expected, "cut at {cut}");
                assert_eq!(read[..], events[..expected]);
                assert!(r.footer().is_none());
                // A cut exactly between records is indistinguishable from a
                // writer killed there: nothing to report as truncated.
                if let Some(t) = r.truncation() {
                    assert_eq!(t.offset + t.lost_bytes, cut as u64);
                }
            }
            Err(FormatError::TruncatedHeader { .. }) | Err(FormatError::NotATrace) => {
                assert!(
                    !header_complete,
                    "only a cut inside the header may fail (cut at {cut})"
                );
            }
            Err(e) => panic!("cut at {cut}: {e}"),
        }
    }
}

/// The records of an intact trace: (offset, length, type byte), from the
/// framing alone.
fn records(bytes: &[u8]) -> Vec<(usize, usize, u8)> {
    let mut at = MAGIC.len() + 3;
    let mut out = Vec::new();
    while at < bytes.len() {
        let data = u32::from_be_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        out.push((at, 6 + data, bytes[at + 5]));
        at += 6 + data;
    }
    out
}

const CHUNK: u8 = 4;

/// A flipped bit anywhere past the header costs only the record it lands in:
/// every other chunk's events are read, in order, and the damage is
/// reported with its byte range (and the footer's count of what is missing).
#[test]
fn every_flipped_byte_costs_only_its_record() {
    let (bytes, events) = small_trace(4);
    let records = records(&bytes);
    let header_end = records[0].0 + records[0].1;
    // Events per chunk, in order.
    let per_chunk: Vec<usize> = {
        let mut r = TraceReader::new(&bytes[..]).unwrap();
        std::iter::from_fn(|| r.next_chunk().unwrap())
            .map(|c| c.event_count() as usize)
            .collect()
    };
    for i in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[i] ^= 0x01;
        if i < header_end {
            match read_all(&bad) {
                Err(FormatError::Corrupt { offset, .. }) => assert!(offset <= i as u64),
                Err(FormatError::NotATrace) | Err(FormatError::UnsupportedVersion { .. }) => {
                    assert!(i < 13, "flip at {i}")
                }
                Ok(_) => panic!("flip at byte {i} went unnoticed"),
                Err(e) => panic!("flip at byte {i}: unexpected error {e}"),
            }
            continue;
        }
        let (r, read) = read_all(&bad).unwrap_or_else(|e| panic!("flip at {i}: {e}"));
        let &(at, len, kind) = records
            .iter()
            .find(|(at, len, _)| (*at..at + len).contains(&i))
            .unwrap();
        let skipped = r
            .damage()
            .iter()
            .find_map(|d| match d {
                TraceDamage::Skipped { offset, bytes, .. } => Some((*offset, *bytes)),
                _ => None,
            })
            .unwrap_or_else(|| panic!("flip at {i}: nothing reported"));
        assert_eq!(skipped.0, at as u64, "flip at {i}");
        assert!(
            skipped.1 >= 1 && skipped.0 + skipped.1 <= (at + len) as u64 + 14,
            "flip at {i}: {skipped:?}"
        );
        if kind == CHUNK {
            let n = records[..records.iter().position(|r| r.0 == at).unwrap()]
                .iter()
                .filter(|r| r.2 == CHUNK)
                .count();
            let before: usize = per_chunk[..n].iter().sum();
            let lost = per_chunk[n];
            assert_eq!(read.len(), events.len() - lost, "flip at {i}");
            assert_eq!(read[..before], events[..before]);
            assert_eq!(read[before..], events[before + lost..]);
            assert!(
                r.damage().iter().any(|d| matches!(d, TraceDamage::CountMismatch { footer_events, read_events, .. }
                    if *footer_events == events.len() as u64 && *read_events == (events.len() - lost) as u64)),
                "flip at {i}: {:?}",
                r.damage()
            );
        } else {
            assert_eq!(read, events, "flip at {i}");
        }
    }
}

/// A zero byte after the footer, and a chunk re-typed as a record of an
/// unknown type: the events are read and both are reported.
#[test]
fn trailing_bytes_and_unknown_records_are_reported() {
    let (mut bytes, events) = small_trace(4);
    bytes.push(0);
    let (r, read) = read_all(&bytes).unwrap();
    assert_eq!(read, events);
    assert!(r.footer().is_some());
    assert_eq!(
        r.damage(),
        [TraceDamage::TrailingBytes {
            offset: bytes.len() as u64 - 1,
            bytes: 1
        }]
    );
    bytes.pop();
    let (at, _, _) = records(&bytes).into_iter().find(|r| r.2 == CHUNK).unwrap();
    bytes[at + 5] = 42;
    let crc = crc32fast::hash(&bytes[at..at + 6]);
    bytes[at + 6..at + 10].copy_from_slice(&crc.to_le_bytes());
    let (r, read) = read_all(&bytes).unwrap();
    assert_eq!(read.len(), events.len() - 4);
    assert!(matches!(
        r.damage()[0],
        TraceDamage::UnknownRecord { code: 42, .. }
    ));
    // The chunk's place (format 1.4) says which chunk and events are gone.
    assert!(matches!(
        r.damage()[1],
        TraceDamage::Missing {
            first_chunk: 0,
            chunks: 1,
            first_event: 0,
            events: 4,
            ..
        }
    ));
    assert!(matches!(
        r.damage()[2],
        TraceDamage::CountMismatch { footer_events, read_events, footer_chunks, read_chunks }
            if footer_events == read_events + 4 && footer_chunks == read_chunks + 1
    ));
    assert!(r.damage()[2].to_string().contains("4 events are missing"));
}

/// Bytes that are no record at all, between two records: skipped up to the
/// next record, whatever they hold.
#[test]
fn garbage_between_records_is_skipped_to_the_next_record() {
    let (bytes, events) = small_trace(4);
    let recs = records(&bytes);
    let (at, _, _) = recs
        .iter()
        .copied()
        .filter(|r| r.2 == CHUNK)
        .nth(2)
        .unwrap();
    for garbage in [
        vec![0u8],
        vec![0xc9; 3],
        (0..70_000u32).map(|i| (i * 7) as u8).collect(),
    ] {
        let mut bad = bytes[..at].to_vec();
        bad.extend_from_slice(&garbage);
        bad.extend_from_slice(&bytes[at..]);
        let (r, read) = read_all(&bad).unwrap();
        assert_eq!(read, events);
        assert!(
            matches!(&r.damage()[0], TraceDamage::Skipped { offset, bytes, events: None, .. }
                if *offset == at as u64 && *bytes == garbage.len() as u64),
            "{:?}",
            r.damage()
        );
    }
}

#[test]
fn unknown_major_version_is_rejected_naming_both() {
    let (mut bytes, _) = small_trace(4);
    assert_eq!(&bytes[..10], MAGIC);
    assert_eq!(bytes[10], 0x92);
    bytes[11] = 2;
    bytes[12] = 0;
    let err = TraceReader::new(&bytes[..]).err().unwrap();
    assert!(matches!(
        err,
        FormatError::UnsupportedVersion { found_major: 2, .. }
    ));
    let message = err.to_string();
    assert!(
        message.contains("2.0") && message.contains("1.x"),
        "{message}"
    );
}

#[test]
fn not_a_trace_is_rejected() {
    assert!(matches!(
        TraceReader::new(&b"\x80\x04\x95 a pickle"[..]),
        Err(FormatError::NotATrace)
    ));
    assert!(matches!(
        TraceReader::new(&b""[..]),
        Err(FormatError::NotATrace)
    ));
}

#[test]
fn unknown_record_types_are_skipped() {
    let (bytes, events) = small_trace(100);
    let mut spliced = bytes.clone();
    let payload = b"from the future";
    let len = (payload.len() as u32 + 8).to_be_bytes();
    let mut record = vec![0xc9, len[0], len[1], len[2], len[3], 42];
    let header_crc = crc32fast::hash(&record);
    record.extend_from_slice(&header_crc.to_le_bytes());
    record.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    record.extend_from_slice(payload);
    // Before the footer: after it, nothing is part of the trace.
    let footer_at = records(&bytes).last().unwrap().0;
    spliced.splice(footer_at..footer_at, record);
    let (r, read) = read_all(&spliced).unwrap();
    assert_eq!(read, events);
    assert_eq!(r.skipped_records(), 1);
    assert!(matches!(
        r.damage(),
        [TraceDamage::UnknownRecord { code: 42, .. }]
    ));
}

#[test]
fn a_writer_dropped_without_finish_leaves_a_readable_trace() {
    let mut out = Vec::new();
    {
        let mut w = TraceWriter::new(&mut out, header()).unwrap();
        let name = w.intern_string("step");
        w.push(Event {
            time_ns: 3,
            data: EventData::PhaseBegin { name, thread: 0 },
        })
        .unwrap();
    }
    let (r, read) = read_all(&out).unwrap();
    assert_eq!(read.len(), 1);
    assert!(r.footer().is_none());
    assert_eq!(r.symbols().string(StringId(1)), Some("step"));
}

fn arb_event() -> impl Strategy<Value = EventData> {
    let block = (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        0u64..4,
        0u32..3,
        0u32..50,
        0u32..4,
    )
        .prop_map(
            |(addr, size, requested, stream, device, stack, thread)| BlockEvent {
                addr,
                size,
                requested,
                stream,
                device,
                stack: StackId(stack),
                thread,
            },
        );
    let segment = block.clone().prop_map(BlockEvent::segment);
    prop_oneof![
        block.clone().prop_map(EventData::Alloc),
        block.clone().prop_map(EventData::FreeRequested),
        block.prop_map(EventData::FreeCompleted),
        segment.clone().prop_map(EventData::SegmentAlloc),
        segment.clone().prop_map(EventData::SegmentFree),
        segment.clone().prop_map(EventData::SegmentMap),
        segment.prop_map(EventData::SegmentUnmap),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(|(requested, free_bytes, stream, device, stack, thread)| {
                EventData::Oom(OomEvent {
                    requested,
                    free_bytes,
                    stream,
                    device,
                    stack: StackId(stack),
                    thread,
                })
            }),
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(device, stack, thread)| {
            EventData::EmptyCache(EmptyCacheEvent {
                device,
                stack: StackId(stack),
                thread,
            })
        }),
        (any::<u32>(), any::<u32>()).prop_map(|(n, thread)| EventData::PhaseBegin {
            name: StringId(n),
            thread
        }),
        (any::<u32>(), any::<u32>()).prop_map(|(n, thread)| EventData::PhaseEnd {
            name: StringId(n),
            thread
        }),
        (any::<u32>(), any::<u32>()).prop_map(|(k, v)| EventData::Annotation {
            key: StringId(k),
            value: StringId(v)
        }),
        // Any code, known or not: an unknown one reads back as it was.
        (any::<u64>(), any::<u32>(), any::<u32>(), any::<u8>()).prop_map(
            |(addr, device, thread, code)| EventData::Tag(TagEvent {
                addr,
                device,
                thread,
                code
            })
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn arbitrary_event_sequences_round_trip(
        data in proptest::collection::vec(arb_event(), 0..300),
        times in proptest::collection::vec(any::<u64>(), 300),
        chunk_events in 1usize..64,
    ) {
        // Times need not be monotonic: several threads may interleave.
        let events: Vec<Event> = data
            .into_iter()
            .zip(times)
            .map(|(data, time_ns)| Event { time_ns, data })
            .collect();
        let options = WriterOptions { chunk_events, chunk_interval: None };
        let mut w = TraceWriter::with_options(Vec::new(), header(), options).unwrap();
        w.push_all(events.iter().copied()).unwrap();
        let bytes = w.finish().unwrap();
        let (r, read) = read_all(&bytes).unwrap();
        prop_assert_eq!(read, events.clone());
        prop_assert_eq!(r.footer().unwrap().events, events.len() as u64);
    }
}

/// A trace of format 1.0 (the bundled fixtures) has no thread on its phase
/// events: they read as the main thread's.
#[test]
fn phases_of_a_1_0_trace_read_as_the_main_threads() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/compat/leak-1.0.vtrace"
    );
    let mut r = TraceReader::open(path).unwrap();
    assert_eq!((r.header().version_major, r.header().version_minor), (1, 0));
    let mut phases = 0;
    for e in r.events() {
        match e.unwrap().data {
            EventData::PhaseBegin { thread, .. } | EventData::PhaseEnd { thread, .. } => {
                assert_eq!(thread, 0);
                phases += 1;
            }
            _ => {}
        }
    }
    assert!(phases > 0);
}

/// `leak.vtrace` as format 1.3 wrote it and as the writer writes it now (1.4
/// or later: the same generator, the same seed): the same events, neither
/// read with a warning; only the newer chunks know their place.
#[test]
fn a_1_3_trace_reads_as_its_1_4_rewrite() {
    let fixture = |name: &str| format!("{}/../fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let mut old = TraceReader::open(fixture("compat/leak-1.3.vtrace")).unwrap();
    let mut new = TraceReader::open(fixture("leak.vtrace")).unwrap();
    assert_eq!(old.header().version_minor, 3);
    assert_eq!(new.header().version_minor, vramtrace_format::VERSION_MINOR);
    let mut chunks = Vec::new();
    for r in [&mut old, &mut new] {
        let mut events = Vec::new();
        let mut places = Vec::new();
        while let Some(chunk) = r.next_chunk().unwrap() {
            places.push((chunk.sequence(), chunk.first_event(), events.len() as u64));
            events.extend(chunk.decode().unwrap());
        }
        assert_eq!(r.damage(), []);
        chunks.push((events, places));
    }
    assert_eq!(chunks[0].0, chunks[1].0);
    assert!(chunks[0].1.iter().all(|p| (p.0, p.1) == (None, None)));
    for (i, &(sequence, first, before)) in chunks[1].1.iter().enumerate() {
        assert_eq!((sequence, first), (Some(i as u64), Some(before)));
    }
}
