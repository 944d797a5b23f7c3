use super::*;
use crate::event::PoolAction;

pub(crate) fn sample_events() -> Vec<Event> {
    let block = BlockEvent {
        addr: 0x7f00_0000_0000,
        size: 1024,
        requested: 1000,
        stream: 0,
        device: 0,
        stack: StackId(3),
        thread: 1,
    };
    let seg = SegmentEvent {
        addr: 0x7f00_0000_0000,
        size: 2 << 20,
        stream: 0,
        device: 0,
        stack: StackId(3),
        thread: 1,
    };
    vec![
        Event {
            time_ns: 5,
            data: EventData::PhaseBegin {
                name: StringId(1),
                thread: 0,
            },
        },
        Event {
            time_ns: 10,
            data: EventData::SegmentAlloc(seg),
        },
        Event {
            time_ns: 11,
            data: EventData::Alloc(block),
        },
        Event {
            time_ns: 12,
            data: EventData::Annotation {
                key: StringId(2),
                value: StringId(3),
            },
        },
        Event {
            time_ns: 20,
            data: EventData::FreeRequested(block),
        },
        Event {
            time_ns: 20,
            data: EventData::FreeCompleted(block),
        },
        Event {
            time_ns: 30,
            data: EventData::Oom(OomEvent {
                requested: 1 << 40,
                free_bytes: 12345,
                stream: 7,
                device: 1,
                stack: StackId(0),
                thread: 2,
            }),
        },
        Event {
            time_ns: 31,
            data: EventData::EmptyCache(EmptyCacheEvent {
                device: 0,
                stack: StackId(0),
                thread: 1,
            }),
        },
        Event {
            time_ns: 32,
            data: EventData::SegmentFree(seg),
        },
        Event {
            time_ns: 33,
            data: EventData::SegmentMap(seg),
        },
        Event {
            time_ns: 34,
            data: EventData::SegmentUnmap(seg),
        },
        Event {
            time_ns: 35,
            data: EventData::Tag(TagEvent {
                addr: 0x7f00_0000_0000,
                device: 0,
                thread: 1,
                code: 3,
            }),
        },
        Event {
            time_ns: 36,
            data: EventData::Limit(LimitEvent {
                device: 1,
                thread: 0,
                limit_bytes: 12 << 30,
                total_bytes: 85_045_477_376,
            }),
        },
        Event {
            time_ns: 37,
            data: EventData::DeviceMemory(DeviceMemoryEvent {
                device: 0,
                thread: 4,
                free_bytes: 70_000_000_000,
                total_bytes: 85_045_477_376,
            }),
        },
        Event {
            time_ns: 39,
            data: EventData::EventsDropped(DroppedEvents {
                count: 4096,
                from_ns: 38,
            }),
        },
        Event {
            time_ns: 39,
            data: EventData::Pool(PoolEvent {
                pool: PoolId(0, 3),
                stream: 0x5555_0000,
                device: 1,
                thread: 2,
                stack: StackId(0),
                code: PoolAction::CaptureBegin.code(),
            }),
        },
        Event {
            time_ns: 39,
            data: EventData::SegmentPool(SegmentPoolEvent {
                addr: 0x7f00_0000_0000,
                pool: PoolId(7, 0),
                device: 1,
                thread: 2,
            }),
        },
        Event {
            time_ns: 39,
            data: EventData::UserTag(UserTagEvent {
                addr: 0x7f00_0000_0000,
                device: 1,
                thread: 2,
                name: StringId(2),
            }),
        },
        Event {
            time_ns: 40,
            data: EventData::PhaseEnd {
                name: StringId(1),
                thread: 3,
            },
        },
    ]
}

#[test]
fn every_kind_round_trips() {
    let events = sample_events();
    let kinds: std::collections::HashSet<_> = events.iter().map(|e| e.kind()).collect();
    assert_eq!(
        kinds.len(),
        EventKind::COUNT,
        "the sample covers every kind"
    );
    let mut payload = Vec::new();
    encode(&events, &mut payload);
    let chunk = RawChunk::parse(0, payload).unwrap();
    assert_eq!(chunk.event_count(), events.len() as u64);
    assert_eq!(chunk.first_time_ns(), 5);
    assert_eq!(chunk.last_time_ns(), 40);
    assert_eq!(chunk.decode().unwrap(), events);
    assert_eq!(chunk.count_kinds().unwrap().total(), events.len() as u64);
}

#[test]
fn unknown_kinds_are_skipped_with_their_fields() {
    let events = sample_events();
    let mut payload = Vec::new();
    encode(&events[..3], &mut payload);
    // Rewrite the kind of the first event (a phase begin, one extra
    // value) to a code from the future with the same field mask: in the
    // kind table and in the kind column.
    let mut cur = Cursor::new(&payload);
    for _ in 0..3 {
        cur.varint().unwrap();
    }
    let table_len = cur.byte().unwrap() as usize;
    let table_at = cur.position();
    let entry = (0..table_len)
        .map(|i| table_at + 2 * i)
        .find(|&at| payload[at] == EventKind::PhaseBegin.code())
        .unwrap();
    payload[entry] = 200;
    // The kind column holds the codes in event order; patch its first byte.
    let kind_column_at = {
        let layout = Layout::parse(&payload).unwrap();
        layout.kinds.as_ptr() as usize - payload.as_ptr() as usize
    };
    payload[kind_column_at] = 200;
    let mut out = Vec::new();
    let skipped = RawChunk::parse(0, payload)
        .unwrap()
        .decode_into(&mut out)
        .unwrap();
    assert_eq!(skipped, 1);
    assert_eq!(out, events[1..3].to_vec());
}

/// The 1.4 trailer reads back, and a reader of 1.3 (which takes the
/// chunk as unordered) decodes the same events from it.
#[test]
fn the_order_trailer_is_invisible_to_older_readers() {
    let events = sample_events();
    let mut payload = Vec::new();
    encode(&events, &mut payload);
    for (sequence, first_event) in [(0, 0), (7, 123_456), (u64::MAX, u64::MAX)] {
        let mut ordered = payload.clone();
        put_order(&mut ordered, sequence, first_event);
        let chunk = RawChunk::parse_ordered(9, ordered.clone()).unwrap();
        assert_eq!(chunk.sequence(), Some(sequence));
        assert_eq!(chunk.first_event(), Some(first_event));
        assert_eq!(chunk.decode().unwrap(), events);
        let old = RawChunk::parse(9, ordered).unwrap();
        assert_eq!(old.sequence(), None);
        assert_eq!(old.decode().unwrap(), events);
        assert_eq!(old.count_kinds().unwrap().total(), events.len() as u64);
    }
    // A trailer whose varints end early, or whose length byte claims
    // more than the payload: damage.
    let mut bad = payload.clone();
    bad.extend_from_slice(&[0x80, 1]);
    assert!(RawChunk::parse_ordered(9, bad).is_err());
    assert!(RawChunk::parse_ordered(9, vec![5]).is_err());
    assert!(RawChunk::parse_ordered(9, Vec::new()).is_err());
}
