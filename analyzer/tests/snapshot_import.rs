//! Imports the real PyTorch snapshots in `fixtures/torch` and the synthetic ones in
//! `fixtures/torch/synthetic`, and checks the traces against the pickles read
//! independently (plain deserialization, no streaming hooks).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use vramtrace::input::{self, Compression, Input, InputKind};
use vramtrace::progress::NoProgress;
use vramtrace::snapshot::pickle::{self, Value};
use vramtrace_format::EventSource;
use vramtrace_format::{BlockStatus, Event, EventData, EventKind, TraceReader};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/torch")
        .join(name)
}

fn load_pickle(path: &PathBuf) -> Value {
    let file = std::fs::File::open(path).unwrap();
    let (mut stream, _) = input::decompress(file).unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).unwrap();
    pickle::load(&bytes[..]).unwrap()
}

fn int(v: &Value, k: &str) -> i128 {
    v.get(k)
        .and_then(Value::as_int)
        .unwrap_or_else(|| panic!("no int {k}"))
}

struct Imported {
    events: Vec<Event>,
    reader: input::EventStream,
    report: vramtrace::snapshot::ImportReport,
}

/// The snapshot's events as analyses read them (streamed from the conversion),
/// checked against the trace file `vramtrace import` writes.
fn import(path: &PathBuf) -> Imported {
    let opened = Input::open(path, &NoProgress).unwrap();
    assert_eq!(opened.kind(), InputKind::TorchSnapshot);
    let mut streamed = opened.events().unwrap();
    let mut events = Vec::new();
    streamed
        .for_each_batch(|batch, _| events.extend_from_slice(batch))
        .unwrap();
    assert!(streamed.is_complete());

    let file = std::fs::File::open(path).unwrap();
    let (stream, _) = input::decompress(file).unwrap();
    let imported = vramtrace::snapshot::import(stream, &|_| {}).unwrap();
    let mut written = TraceReader::new(&imported.trace[..]).unwrap();
    let written_events = written.events().collect::<Result<Vec<_>, _>>().unwrap();
    assert_eq!(written_events, events);
    assert_eq!(written.symbols(), streamed.symbols());
    assert_eq!(written.initial_state(), streamed.initial_state());
    assert_eq!(written.header(), streamed.header());
    assert_eq!(imported.report.event_counts.total(), events.len() as u64);

    Imported {
        events,
        report: opened.import_report().unwrap().clone(),
        reader: streamed,
    }
}

// (device, addr) -> (size, requested, status) of the blocks live after replaying the
// trace from its initial state; and the segments (device, addr) -> size.
type Blocks = BTreeMap<(u32, u64), (u64, u64, BlockStatus)>;

fn replay(imp: &Imported) -> (Blocks, u64, Vec<(bool, String)>) {
    let mut blocks = Blocks::new();
    let mut reserved: u64 = 0;
    if let Some(init) = imp.reader.initial_state() {
        for s in &init.segments {
            reserved += s.size;
            for b in &s.blocks {
                if b.status != BlockStatus::Free {
                    blocks.insert((s.device, b.addr), (b.size, b.requested, b.status));
                }
            }
        }
    }
    let mut peak = reserved;
    let mut phases = Vec::new();
    let syms = imp.reader.symbols();
    for e in &imp.events {
        match e.data {
            EventData::Alloc(b) => {
                assert!(
                    blocks
                        .insert(
                            (b.device, b.addr),
                            (b.size, b.requested, BlockStatus::Allocated)
                        )
                        .is_none(),
                    "alloc over a live block at {:#x}",
                    b.addr
                );
            }
            EventData::FreeRequested(b) => {
                let x = blocks
                    .get_mut(&(b.device, b.addr))
                    .expect("free of no block");
                assert_eq!(x.0, b.size, "free size differs from the block's");
                x.2 = BlockStatus::PendingFree;
            }
            EventData::FreeCompleted(b) => {
                blocks
                    .remove(&(b.device, b.addr))
                    .expect("free of no block");
            }
            EventData::SegmentAlloc(s) | EventData::SegmentMap(s) => {
                reserved += s.size;
                peak = peak.max(reserved);
            }
            EventData::SegmentFree(s) | EventData::SegmentUnmap(s) => reserved -= s.size,
            EventData::PhaseBegin { name, .. } => {
                phases.push((true, syms.string_or_unknown(name).into()))
            }
            EventData::PhaseEnd { name, .. } => {
                phases.push((false, syms.string_or_unknown(name).into()))
            }
            _ => {}
        }
    }
    (blocks, peak, phases)
}

fn check_real(name: &str) {
    let path = fixture(name);
    let imp = import(&path);
    let snap = load_pickle(&path);
    assert!(imp.report.end_state_matches, "{:#?}", imp.report.warnings);

    // Event counts per kind equal the pickle's action counts.
    let mut actions: BTreeMap<String, u64> = BTreeMap::new();
    let traces = snap.get("device_traces").unwrap().as_list().unwrap();
    for t in traces {
        for e in t.as_list().unwrap() {
            *actions
                .entry(e.get("action").unwrap().as_str().unwrap().into())
                .or_default() += 1;
        }
    }
    assert_eq!(imp.report.counts_by_action, actions);
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for e in &imp.events {
        if !matches!(e.kind(), EventKind::PhaseBegin | EventKind::PhaseEnd) {
            *kinds.entry(e.kind().name().into()).or_default() += 1;
        }
    }
    assert_eq!(kinds, actions);

    // The end state equals `segments`.
    let (blocks, peak, phases) = replay(&imp);
    let mut expected = Blocks::new();
    let mut final_reserved: i128 = 0;
    for s in snap.get("segments").unwrap().as_list().unwrap() {
        final_reserved += int(s, "total_size");
        for b in s.get("blocks").unwrap().as_list().unwrap() {
            let status = match b.get("state").unwrap().as_str().unwrap() {
                "active_allocated" => BlockStatus::Allocated,
                "active_pending_free" => BlockStatus::PendingFree,
                _ => continue,
            };
            expected.insert(
                (int(s, "device") as u32, int(b, "address") as u64),
                (
                    int(b, "size") as u64,
                    int(b, "requested_size") as u64,
                    status,
                ),
            );
        }
    }
    assert_eq!(blocks, expected);

    // Peak reserved equals the largest running sum of segment sizes.
    let mut net: i128 = 0;
    let mut steps = Vec::new();
    for t in traces {
        for e in t.as_list().unwrap() {
            let size = int(e, "size");
            match e.get("action").unwrap().as_str().unwrap() {
                "segment_alloc" | "segment_map" => net += size,
                "segment_free" | "segment_unmap" => net -= size,
                _ => continue,
            }
            steps.push(net);
        }
    }
    let start = final_reserved - net;
    let expected_peak = steps
        .iter()
        .map(|s| start + s)
        .max()
        .unwrap_or(start)
        .max(start);
    assert_eq!(peak as i128, expected_peak);

    // Phases match the annotations, in time order.
    let mut ann: Vec<(i128, bool, String)> = match snap.get("external_annotations") {
        Some(Value::List(l)) => l
            .iter()
            .map(|a| {
                (
                    int(a, "time_us"),
                    a.get("stage").unwrap().as_str() == Some("START"),
                    a.get("name").unwrap().as_str().unwrap().to_string(),
                )
            })
            .collect(),
        _ => Vec::new(),
    };
    ann.sort_by_key(|a| (a.0, !a.1));
    let ann: Vec<(bool, String)> = ann.into_iter().map(|a| (a.1, a.2)).collect();
    assert_eq!(phases, ann);

    // Times are ordered, start at the first event, and the header says where it came from.
    assert!(imp.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    let h = imp.reader.header();
    assert_eq!(
        h.metadata.get("source").map(String::as_str),
        Some("torch-snapshot")
    );
    assert!(h.start_unix_ns > 1_700_000_000_000_000_000);
    assert!(h.allocator_settings.contains_key("expandable_segments"));
}

#[test]
fn cnn_eval_accumulate() {
    check_real("cnn_eval_accumulate.pickle.xz");
}

#[test]
fn mlp_empty_cache() {
    check_real("mlp_empty_cache.pickle.xz");
}

#[test]
fn mlp_expandable() {
    check_real("mlp_expandable.pickle.xz");
    let imp = import(&fixture("mlp_expandable.pickle.xz"));
    let h = imp.reader.header();
    assert_eq!(h.allocator_settings["expandable_segments"], "True");
}

#[test]
fn compression_is_detected_by_content() {
    let opened = Input::open(fixture("mlp_empty_cache.pickle.xz"), &NoProgress).unwrap();
    assert_eq!(opened.compression(), Compression::Xz);
}

fn synthetic(name: &str) -> PathBuf {
    fixture("synthetic").join(name)
}

#[test]
fn old_layout_without_time_annotations_or_frames() {
    let imp = import(&synthetic("old_no_time_p2.pickle"));
    let r = &imp.report;
    assert!(r.end_state_matches, "{:#?}", r.warnings);
    assert_eq!(r.pickle_protocol, 2);
    let w = r.warnings.join("\n");
    assert!(w.contains("time_us"), "{w}");
    assert!(w.contains("external_annotations"), "{w}");
    assert!(w.contains("frames"), "{w}");
    // The block freed before any alloc was live at the start.
    let init = imp.reader.initial_state().unwrap();
    assert_eq!(init.segments.len(), 1);
    let live: Vec<_> = init.segments[0]
        .blocks
        .iter()
        .filter(|b| b.status != BlockStatus::Free)
        .map(|b| (b.addr, b.size))
        .collect();
    assert_eq!(live, vec![(0x1000, 1024)]);
    let tiled: u64 = init.segments[0].blocks.iter().map(|b| b.size).sum();
    assert_eq!(tiled, 4096);
    assert_eq!(imp.events.len(), 3);
    let (blocks, _, _) = replay(&imp);
    assert_eq!(blocks.len(), 1);
}

#[test]
fn protocols_4_and_5_with_shared_frames() {
    for name in ["shared_p4.pickle", "shared_p5.pickle"] {
        let imp = import(&synthetic(name));
        let r = &imp.report;
        assert!(r.end_state_matches, "{name}: {:#?}", r.warnings);
        assert_eq!(r.frames, 2, "frame dicts are interned by memo identity");
        assert_eq!(r.entries_per_device, vec![4, 4]);
        let big = (1u64 << 63) + (1 << 40);
        assert!(
            imp.events
                .iter()
                .any(|e| matches!(e.data, EventData::Alloc(b) if b.addr == big && b.device == 1))
        );
        assert!(imp.events.iter().any(
            |e| matches!(e.data, EventData::Oom(o) if o.free_bytes == 123 && o.requested == 1 << 40)
        ));
        assert!(imp.events.iter().any(|e| e.kind() == EventKind::Annotation));
        let (_, _, phases) = replay(&imp);
        assert_eq!(
            phases,
            vec![(true, "step0".to_string()), (false, "step0".to_string())]
        );
        assert!(imp.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        let h = imp.reader.header();
        assert_eq!(
            h.allocator_settings["roundup_power2_divisions"],
            "[1:0,2:0]"
        );
        assert_eq!(h.devices.len(), 2);
    }
}

#[test]
fn block_sizes_follow_the_snapshots_rounding_settings() {
    let alloc_size = |imp: &Imported| {
        imp.events
            .iter()
            .find_map(|e| match e.data {
                EventData::Alloc(b) => Some((b.size, b.requested)),
                _ => None,
            })
            .unwrap()
    };
    // 4 divisions below 2 MiB: 1,200,000 bytes round to 1.25 MiB.
    let imp = import(&synthetic("rounding_p4.pickle"));
    assert!(imp.report.end_state_matches, "{:#?}", imp.report.warnings);
    assert_eq!(alloc_size(&imp), (1_310_720, 1_200_000));
    let freed: Vec<u64> = imp
        .events
        .iter()
        .filter_map(|e| match e.data {
            EventData::FreeRequested(b) | EventData::FreeCompleted(b) => Some(b.size),
            _ => None,
        })
        .collect();
    assert_eq!(freed, vec![1_310_720, 1_310_720]);
    assert!(
        !imp.report
            .warnings
            .iter()
            .any(|w| w.contains("allocator_settings")),
        "{:#?}",
        imp.report.warnings
    );

    // Unreadable settings: the default 512-byte rounding, and a warning.
    let imp = import(&synthetic("bad_settings_p4.pickle"));
    assert_eq!(alloc_size(&imp), (1_200_128, 1_200_000));
    let w = imp.report.warnings.join("\n");
    assert!(w.contains("allocator_settings could not be read"), "{w}");
}

#[test]
fn malformed_inputs_are_errors_with_offsets() {
    for (name, needle) in [
        ("truncated.pickle", "truncated"),
        ("not_a_pickle.pickle", "not a vramtrace trace nor"),
        (
            "unknown_opcode.pickle",
            "unknown pickle opcode 0xff at byte 3",
        ),
    ] {
        let e = Input::open(synthetic(name), &NoProgress)
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{name}: {e}");
    }
}

#[test]
fn entries_out_of_time_order_are_raised_with_a_warning() {
    let imp = import(&synthetic("out_of_order_p4.pickle"));
    assert!(imp.report.end_state_matches, "{:#?}", imp.report.warnings);
    let w = imp.report.warnings.join("\n");
    assert!(
        w.contains("1 events were earlier than an event before them on their device"),
        "{w}"
    );
    // Devices merged by time; device 0's free_requested (8 µs) raised to its alloc (10 µs).
    let seen: Vec<(u64, u32, EventKind)> = imp
        .events
        .iter()
        .map(|e| {
            let device = match e.data {
                EventData::Alloc(b) | EventData::FreeRequested(b) | EventData::FreeCompleted(b) => {
                    b.device
                }
                EventData::SegmentAlloc(s) => s.device,
                _ => u32::MAX,
            };
            (e.time_ns, device, e.kind())
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (0, 0, EventKind::SegmentAlloc),
            (9_000, 1, EventKind::SegmentAlloc),
            (10_000, 0, EventKind::Alloc),
            (10_000, 0, EventKind::FreeRequested),
            (12_000, 0, EventKind::FreeCompleted),
        ]
    );
}

#[test]
fn end_blocks_past_2_pow_64_are_no_panic() {
    // pickle.dumps({'segments': [{'address': 2**64 - 1, 'total_size': 1, 'blocks':
    // [{'address': 2**64 - 1, 'size': 2}, {'size': 1}]}]}, protocol=2): the second
    // block's address follows the first's end, past 2^64 (found by the fuzzer; a
    // debug build panicked on the overflow).
    let pickle: &[u8] = &[
        128, 2, 125, 113, 0, 88, 8, 0, 0, 0, 115, 101, 103, 109, 101, 110, 116, 115, 113, 1, 93,
        113, 2, 125, 113, 3, 40, 88, 7, 0, 0, 0, 97, 100, 100, 114, 101, 115, 115, 113, 4, 138, 9,
        255, 255, 255, 255, 255, 255, 255, 255, 0, 88, 10, 0, 0, 0, 116, 111, 116, 97, 108, 95,
        115, 105, 122, 101, 113, 5, 75, 1, 88, 6, 0, 0, 0, 98, 108, 111, 99, 107, 115, 113, 6, 93,
        113, 7, 40, 125, 113, 8, 40, 104, 4, 138, 9, 255, 255, 255, 255, 255, 255, 255, 255, 0, 88,
        4, 0, 0, 0, 115, 105, 122, 101, 113, 9, 75, 2, 117, 125, 113, 10, 104, 9, 75, 1, 115, 101,
        117, 97, 115, 46,
    ];
    let opened = Input::from_bytes(pickle.to_vec(), &NoProgress).unwrap();
    assert_eq!(opened.kind(), InputKind::TorchSnapshot);
}
