//! Bounded recording (issue #33, part 5): a recording that keeps only its
//! last part on disk stays within its bound, and its dumps and its final
//! trace analyze exactly as the same stretch of an unbounded recording of
//! the same program does: peaks, the end state, categories and phases.

use std::path::{Path, PathBuf};
use vramtrace_allocator::device::SimulatedDevice;
use vramtrace_allocator::{AllocatorConfig, CachingAllocator};
use vramtrace_e2e::{scratch, vramtrace};
use vramtrace_format::{Category, Event, EventData, PREAMBLE_EVENTS_KEY, TraceReader};
use vramtrace_recorder::{KeepLast, Recorder, RecorderOptions, Trace, ring_folder};

const BOUND: u64 = 96 << 10;
const OPS: usize = 120_000;
const DUMP_AT: usize = 90_000;

/// What a run saw: the largest the ring folder got, the dump made mid-run
/// (for a bounded run), and a copy of the ring taken just before it, as a
/// recording killed then would have left it.
struct Ran {
    largest_ring: u64,
    dump: Option<PathBuf>,
    left_behind: Option<PathBuf>,
}

fn folder_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// A serving loop on a simulated device: weights allocated (and tagged) at
/// the start and kept, then requests that allocate and free, each in a
/// phase, inside a `serve` phase open throughout. Deterministic, so a
/// bounded and an unbounded run record the same events.
fn serve(trace: &Path, keep_last: Option<KeepLast>) -> Ran {
    let options = RecorderOptions {
        keep_last,
        // Drop nothing, however slow the disk: both runs must record all.
        max_wait: None,
        max_queue_age: None,
        ..RecorderOptions::default()
    };
    let alloc = CachingAllocator::new(SimulatedDevice::new(1 << 40), AllocatorConfig::default());
    let rec = Recorder::create(trace, alloc, options).unwrap();
    rec.annotate("model", "tiny");
    rec.phase_begin("serve");
    for _ in 0..3 {
        let w = rec.malloc(40 << 20, 0).unwrap();
        rec.tag(w.addr, Category::Parameter);
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut live: Vec<u64> = Vec::new();
    let mut ran = Ran {
        largest_ring: 0,
        dump: None,
        left_behind: None,
    };
    for i in 0..OPS {
        if i % 40 == 0 {
            if i > 0 {
                rec.phase_end_named("request");
                for a in live.drain(..) {
                    rec.free(a).unwrap();
                }
            }
            rec.phase_begin("request");
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if live.len() > 12 || (x.is_multiple_of(3) && !live.is_empty()) {
            let a = live.swap_remove((x as usize / 3) % live.len());
            rec.free(a).unwrap();
        } else {
            let size = match x % 5 {
                0 => 512 + x % 8192,
                1..=3 => 100_000 + x % 3_000_000,
                _ => 20_000_000 + x % 30_000_000,
            };
            live.push(rec.malloc(size, 0).unwrap().addr);
        }
        if keep_last.is_some() && i % 500 == 0 {
            ran.largest_ring = ran.largest_ring.max(folder_bytes(&ring_folder(trace)));
        }
        if keep_last.is_some() && i == DUMP_AT {
            rec.flush().unwrap();
            let copy = trace.with_file_name("left-behind.ring");
            let _ = std::fs::remove_dir_all(&copy);
            std::fs::create_dir(&copy).unwrap();
            for part in std::fs::read_dir(ring_folder(trace)).unwrap() {
                let part = part.unwrap().path();
                std::fs::copy(&part, copy.join(part.file_name().unwrap())).unwrap();
            }
            ran.left_behind = Some(copy);
            let dump = trace.with_file_name("mid-dump.vtrace");
            let summary = rec.dump(Some(&dump)).unwrap();
            assert!(summary.joined.parts >= 2, "{summary:?}");
            ran.dump = Some(dump);
        }
    }
    rec.phase_end_named("request");
    let summary = rec.finish().unwrap();
    // The summary is of the trace left: for a bounded run, the parts kept.
    let written = TraceReader::open(trace).unwrap().count_remaining().unwrap();
    assert_eq!(summary.trace.events, written.total());
    assert_eq!(summary.trace.bytes, std::fs::metadata(trace).unwrap().len());
    ran
}

/// A trace's events, and how many of its first ones restate its start.
fn events(path: &Path) -> (Vec<Event>, usize) {
    let mut r = TraceReader::open(path).unwrap();
    let events = r.events().collect::<Result<Vec<_>, _>>().unwrap();
    let restated = r
        .header()
        .metadata
        .get(PREAMBLE_EVENTS_KEY)
        .map_or(0, |n| n.parse().unwrap());
    (events, restated)
}

/// Where `window` (a bounded trace's own events) lies in `full`: the index
/// of its first event. The events match but for their times.
fn place(full: &[Event], window: &[Event]) -> usize {
    let same = |k: usize| {
        full[k..k + window.len()]
            .iter()
            .zip(window)
            .all(|(a, b)| a.data == b.data)
    };
    let k = (0..=full.len() - window.len())
        .rev()
        .find(|&k| full[k].data == window[0].data && same(k));
    if k.is_none() {
        // Where the window and the unbounded trace's end part ways.
        let tail = &full[full.len() - window.len()..];
        let first = tail.iter().zip(window).position(|(a, b)| a.data != b.data);
        panic!(
            "the kept window is no stretch of the unbounded trace; against its end, they differ at {first:?} of {}: {:?} vs {:?}",
            window.len(),
            first.map(|i| tail[i]),
            first.map(|i| window[i])
        );
    }
    k.unwrap()
}

/// The figures a summary gives that the window must reproduce; `first`:
/// the index of the window's first own event in the trace.
fn figures(json: &serde_json::Value, first: u64) -> serde_json::Value {
    serde_json::json!({
        "peak_allocated": json["peak_allocated_bytes"],
        "peak_allocated_at": json["peak_allocated"]["index"].as_u64().unwrap() - first,
        "peak_reserved": json["peak_reserved_bytes"],
        "peak_requested": json["peak_requested_bytes"],
        "at_peak": json["at_peak"],
        "end": json["end"],
        // Categories inferred from lifetimes differ for blocks allocated
        // before a window (their start is not in it): the exact ones (tags)
        // must agree.
        "exact_categories": json["categories"]["at_allocated_peak"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["category"].clone(), c["exact_bytes"].clone()))
            .collect::<Vec<_>>(),
        "phase_at_peak": json["peak_phase"],
    })
}

fn summary(args: &[&str], first: usize) -> serde_json::Value {
    let run = vramtrace(args).success();
    figures(&run.result(), first as u64)
}

#[test]
fn a_bounded_recording_stays_in_bounds_and_its_windows_are_exact() {
    let dir = scratch("keep_last");
    let full_path = dir.join("full.vtrace");
    let kept_path = dir.join("kept.vtrace");
    serve(&full_path, None);
    let ran = serve(&kept_path, Some(KeepLast::Bytes(BOUND)));

    // The ring never held more than the bound, and is gone at the end.
    assert!(ran.largest_ring > BOUND / 2, "{}", ran.largest_ring);
    assert!(
        ran.largest_ring <= BOUND,
        "the ring held {} bytes",
        ran.largest_ring
    );
    assert!(!ring_folder(&kept_path).exists());
    let (full, _) = events(&full_path);

    for window in [kept_path.clone(), ran.dump.clone().unwrap()] {
        let (events, restated) = events(&window);
        assert!(
            restated >= 2,
            "serve and request are open at a part's start"
        );
        let own = &events[restated..];
        assert!(
            own.len() < full.len() / 2,
            "{} of {}",
            own.len(),
            full.len()
        );
        let k = place(&full, own);
        let (from, to) = (full[k].time_ns, full[k + own.len() - 1].time_ns);
        assert!(
            full[k - 1].time_ns < from,
            "the window starts between two times"
        );
        let whole = summary(
            &[
                "summary",
                "--json",
                "--from",
                &format!("{from}ns"),
                "--to",
                &format!("{to}ns"),
                full_path.to_str().unwrap(),
            ],
            k,
        );
        let kept = summary(&["summary", "--json", window.to_str().unwrap()], restated);
        assert_eq!(kept, whole, "{}", window.display());
        // The weights, allocated long before the window, are in it, with
        // their category.
        assert!(
            kept["exact_categories"][0] == serde_json::json!(["parameters", 3 * (40 << 20)]),
            "{kept}"
        );
        assert!(matches!(events[0].data, EventData::PhaseBegin { .. }));
    }

    // What a recording killed at the dump would have left: its current part
    // unfinished. Joined, it is the dump's window.
    let joined = dir.join("joined.vtrace");
    let left = ran.left_behind.unwrap();
    let run = vramtrace([
        "join",
        left.to_str().unwrap(),
        "-o",
        joined.to_str().unwrap(),
        "--json",
    ])
    .success();
    let result = run.result();
    assert!(result["parts"].as_array().unwrap().len() >= 2, "{result}");
    // The dump ended the current part first, which may have let the
    // oldest go: its window ends where the copy's does, and may start later.
    let dump = ran.dump.unwrap();
    let (dump_events, dump_restated) = events(&dump);
    let (joined_events, joined_restated) = events(&joined);
    let (dump_own, joined_own) = (
        &dump_events[dump_restated..],
        &joined_events[joined_restated..],
    );
    assert!(dump_own.len() <= joined_own.len());
    assert_eq!(dump_own, &joined_own[joined_own.len() - dump_own.len()..]);
    let end = |path: &Path| {
        vramtrace(["summary", "--json", path.to_str().unwrap()])
            .success()
            .result()["end"]
            .clone()
    };
    assert_eq!(end(&joined), end(&dump));
    let text = vramtrace([
        "join",
        left.to_str().unwrap(),
        "-o",
        joined.to_str().unwrap(),
    ])
    .success()
    .stdout;
    assert!(text.starts_with("joined "), "{text}");
}

#[test]
fn join_refuses_what_is_not_one_recordings_parts() {
    let dir = scratch("keep_last_join");
    let empty = dir.join("empty.ring");
    std::fs::create_dir_all(&empty).unwrap();
    let out = dir.join("out.vtrace");
    let err = vramtrace(["join", empty.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .fails_with(2)
        .stderr;
    assert!(err.contains("no parts"), "{err}");
    let a = vramtrace_e2e::fixture("clean.vtrace");
    let b = vramtrace_e2e::fixture("leak.vtrace");
    let err = vramtrace([
        "join",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ])
    .fails_with(2)
    .stderr;
    assert!(err.contains("not parts of one recording"), "{err}");
    assert!(!out.exists(), "nothing is left under the output's name");
    let missing = dir.join("missing.vtrace");
    vramtrace([
        "join",
        missing.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ])
    .fails_with(2);
}

#[test]
fn a_duration_bound_keeps_at_least_that_long_and_not_much_more() {
    let dir = scratch("keep_last_duration");
    let trace = dir.join("timed.vtrace");
    let keep = std::time::Duration::from_millis(400);
    let options = RecorderOptions {
        keep_last: Some(KeepLast::Duration(keep)),
        max_wait: None,
        max_queue_age: None,
        ..RecorderOptions::default()
    };
    let alloc = CachingAllocator::new(SimulatedDevice::new(1 << 40), AllocatorConfig::default());
    let rec = Recorder::create(&trace, alloc, options).unwrap();
    let began = std::time::Instant::now();
    while began.elapsed() < std::time::Duration::from_millis(1500) {
        for _ in 0..200 {
            let a = rec.malloc(1 << 20, 0).unwrap();
            rec.free(a.addr).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    rec.finish().unwrap();
    let json = vramtrace(["summary", "--json", trace.to_str().unwrap()])
        .success()
        .result();
    let kept_ns = json["duration_ns"].as_u64().unwrap();
    let last_ns = json["last_time_ns"].as_u64().unwrap();
    assert!(kept_ns >= keep.as_nanos() as u64, "kept {kept_ns} ns");
    // In the events' times, a part is ended an eighth of the bound after it
    // began, and one that ended more than the bound before the newest event
    // goes when the next part begins: however late the writer thread runs.
    assert!(kept_ns <= 2 * keep.as_nanos() as u64, "kept {kept_ns} ns");
    assert!(
        last_ns >= 1_400_000_000,
        "the window ends at the end: {last_ns}"
    );
}
