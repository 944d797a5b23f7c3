//! Replays the request sequences of real PyTorch 2.11 snapshots (extracted by
//! `fixtures/torch/extract_requests.py`) through `CachingAllocator` on a
//! `SimulatedDevice` and checks that the segment actions, in order, and the
//! peak reserved bytes are exactly PyTorch's.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use vramtrace_allocator::device::SimulatedDevice;
use vramtrace_allocator::{AllocatorConfig, CachingAllocator};
use vramtrace_format::EventData;

// The snapshots come from an H200 (143,771 MiB); its size bounds the address
// range of expandable segments, and no run comes near it.
const H200_BYTES: u64 = 143_771 << 20;

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct SegmentAction {
    kind: char,
    size: u64,
    stream: u64,
}

struct Expected {
    settings: BTreeMap<String, String>,
    initial_reserved: u64,
    peak_reserved: u64,
    requests: Vec<(usize, String)>,
    // With the line number where each appears.
    segments: Vec<(usize, SegmentAction)>,
}

fn load(name: &str) -> Expected {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/torch/requests")
        .join(format!("{name}.txt"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut e = Expected {
        settings: BTreeMap::new(),
        initial_reserved: 0,
        peak_reserved: 0,
        requests: Vec::new(),
        segments: Vec::new(),
    };
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.first().copied() {
            None | Some("#") | Some("conf") => {}
            Some("setting") => {
                e.settings.insert(f[1].to_string(), f[2..].join(" "));
            }
            Some("initial_reserved") => e.initial_reserved = f[1].parse().unwrap(),
            Some("peak_reserved") => e.peak_reserved = f[1].parse().unwrap(),
            Some(k @ ("S" | "F" | "M" | "U")) => e.segments.push((
                n + 1,
                SegmentAction {
                    kind: k.chars().next().unwrap(),
                    size: f[1].parse().unwrap(),
                    stream: f[2].parse().unwrap(),
                },
            )),
            Some("a" | "f" | "r" | "c" | "e") => e.requests.push((n + 1, line.to_string())),
            Some(other) => panic!("{name}:{}: unknown line kind {other}", n + 1),
        }
    }
    e
}

struct Replay {
    segments: Vec<(usize, SegmentAction)>,
    peak_reserved: u64,
}

fn replay(name: &str, e: &Expected) -> Replay {
    let (config, ignored) = AllocatorConfig::from_settings(&e.settings).unwrap();
    assert!(ignored.is_empty(), "{name}: ignored settings {ignored:?}");
    let mut a = CachingAllocator::new(SimulatedDevice::new(H200_BYTES), config);
    let mut addrs: HashMap<u64, u64> = HashMap::new();
    let mut segments = Vec::new();
    for (line, req) in &e.requests {
        let f: Vec<&str> = req.split_whitespace().collect();
        let id = || f[1].parse::<u64>().unwrap();
        match f[0] {
            "a" => {
                let requested = f[2].parse().unwrap();
                let stream = f[3].parse().unwrap();
                let x = a
                    .malloc(requested, stream)
                    .unwrap_or_else(|err| panic!("{name}:{line}: {err}"));
                addrs.insert(id(), x.addr);
            }
            "f" => a.free(addrs.remove(&id()).unwrap()).unwrap(),
            // No snapshot here frees across streams; a lone free_requested
            // would need record_stream, which snapshots do not record.
            "r" | "c" => panic!("{name}:{line}: split frees are not replayed"),
            "e" => a.empty_cache(),
            _ => unreachable!(),
        }
        for ev in a.drain_events() {
            let (kind, s) = match ev {
                EventData::SegmentAlloc(s) => ('S', s),
                EventData::SegmentFree(s) => ('F', s),
                EventData::SegmentMap(s) => ('M', s),
                EventData::SegmentUnmap(s) => ('U', s),
                _ => continue,
            };
            segments.push((
                *line,
                SegmentAction {
                    kind,
                    size: s.size,
                    stream: s.stream,
                },
            ));
        }
    }
    Replay {
        segments,
        peak_reserved: a.stats().reserved_bytes.all.peak,
    }
}

fn check(name: &str) {
    let e = load(name);
    assert_eq!(
        e.initial_reserved, 0,
        "{name}: the trace does not start at the beginning of the run"
    );
    let r = replay(name, &e);
    for (i, (exp, got)) in e.segments.iter().zip(&r.segments).enumerate() {
        assert_eq!(
            exp.1, got.1,
            "{name}: segment action {i} differs: PyTorch {:?} at line {}, replay {:?} at request line {}",
            exp.1, exp.0, got.1, got.0
        );
    }
    assert_eq!(
        e.segments.len(),
        r.segments.len(),
        "{name}: PyTorch took {} segment actions, the replay {}",
        e.segments.len(),
        r.segments.len()
    );
    assert_eq!(
        r.peak_reserved, e.peak_reserved,
        "{name}: peak reserved bytes"
    );
}

#[test]
fn cnn_eval_accumulate_matches_pytorch() {
    check("cnn_eval_accumulate");
}

#[test]
fn mlp_empty_cache_matches_pytorch() {
    check("mlp_empty_cache");
}

#[test]
fn mlp_expandable_matches_pytorch() {
    check("mlp_expandable");
}
