//! `vramtrace summary`'s headlines: true of the window asked for.

use vramtrace_e2e::{fixture, scratch, vramtrace};
use vramtrace_format::{BlockEvent, Event, EventData, Header, SegmentEvent, TraceWriter};

#[test]
fn a_window_past_the_end_is_empty_and_has_no_peak() {
    // clean.vtrace runs 10.53 ms: a window from 5 s holds no event.
    let trace = fixture("clean.vtrace").display().to_string();
    let run = vramtrace(["summary", &trace, "--from", "5s"]).success();
    assert!(
        run.stderr.contains("no event lies inside --from/--to"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.contains("peaks     none"), "{}", run.stdout);
    // Nothing from before the window: no peak, no time, no site.
    for outside in ["10.53 ms", "195.1 MiB", "train.py"] {
        assert!(!run.stdout.contains(outside), "{outside}:\n{}", run.stdout);
    }
    let json = vramtrace(["summary", &trace, "--from", "5s", "--json"])
        .success()
        .result();
    assert_eq!(json["empty_window"], true);
    assert_eq!(json["events"], 0);
    for key in [
        "peak_allocated_bytes",
        "peak_reserved_bytes",
        "peak_time_ns",
    ] {
        assert_eq!(json[key], 0, "{key}");
    }
    assert_eq!(json["peak_allocated"]["bytes"], 0);
    assert_eq!(json["top_sites_at_peak"].as_array().map(Vec::len), Some(0));
    // A window with events is not empty.
    let whole = vramtrace(["summary", &trace, "--from", "5ms", "--json"])
        .success()
        .result();
    assert_eq!(whole["empty_window"], false);
}

#[test]
fn allocations_without_a_stack_are_explained() {
    let gpt2 = fixture("torch/gpt2_train.pickle.xz").display().to_string();
    let text = vramtrace(["summary", &gpt2]).success().stdout;
    assert!(text.contains("<no stack captured>"), "{text}");
    assert!(
        text.contains("<no stack captured>: allocations that came with no stack")
            && text.contains("autograd engine")
            && text.contains("before recording began"),
        "{text}"
    );
    // Every line stays readable.
    assert!(
        text.lines()
            .all(|l| l.chars().count() <= 160 || l.contains(" via "))
    );
    let leak = fixture("leak.vtrace").display().to_string();
    let text = vramtrace(["summary", &leak]).success().stdout;
    assert!(!text.contains("autograd engine"), "{text}");
}

/// A trace whose main thread runs `iter0` and whose thread 1 (backward's,
/// in a real run) runs `backward` twice, with an allocation in each.
fn trace_with_phases_on_two_threads() -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), Header::default()).unwrap();
    let (iter, backward) = (w.intern_string("iter0"), w.intern_string("backward"));
    let segment = SegmentEvent {
        addr: 1 << 20,
        size: 2 << 20,
        ..Default::default()
    };
    let block = |i: u64| BlockEvent {
        addr: (1 << 20) + i * 4096,
        size: 4096,
        requested: 4096,
        ..Default::default()
    };
    let events = [
        EventData::SegmentAlloc(segment),
        EventData::PhaseBegin {
            name: iter,
            thread: 0,
        },
        EventData::PhaseBegin {
            name: backward,
            thread: 1,
        },
        EventData::Alloc(block(0)),
        EventData::PhaseEnd {
            name: backward,
            thread: 1,
        },
        EventData::PhaseBegin {
            name: backward,
            thread: 1,
        },
        EventData::Alloc(block(1)),
        EventData::PhaseEnd {
            name: backward,
            thread: 1,
        },
        EventData::PhaseEnd {
            name: iter,
            thread: 0,
        },
    ];
    for (i, data) in events.into_iter().enumerate() {
        w.push(Event {
            time_ns: i as u64 * 1000,
            data,
        })
        .unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn other_threads_phases_are_told_once_in_the_summary_header() {
    let dir = scratch("summary-threads");
    let path = dir.join("threads.vtrace");
    std::fs::write(&path, trace_with_phases_on_two_threads()).unwrap();
    let path = path.display().to_string();
    let run = vramtrace(["summary", &path]).success();
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    assert!(
        run.stdout.contains("phases    backward-pass phases (autograd thread, most likely) are hidden: thread 1 began 2; --phase-thread 1 shows them"),
        "{}",
        run.stdout
    );
    let json = vramtrace(["summary", &path, "--json"]).success().result();
    assert_eq!(json["hidden_phases"][0]["thread"], 1);
    assert_eq!(json["hidden_phases"][0]["phases"], 2);
    // No other command warns of them.
    for command in ["leaks", "fragmentation"] {
        let run = vramtrace([command, &path]).success();
        assert!(run.stderr.is_empty(), "{command}: {}", run.stderr);
    }
    // Followed, thread 1's phases are shown and thread 0's are the hidden.
    let json = vramtrace(["summary", &path, "--phase-thread", "1", "--json"])
        .success()
        .result();
    assert_eq!(json["hidden_phases"][0]["thread"], 0);
}

#[test]
fn info_keeps_a_snapshots_allocator_settings_to_readable_lines() {
    let gpt2 = fixture("torch/gpt2_train.pickle.xz").display().to_string();
    let text = vramtrace(["info", &gpt2]).success().stdout;
    assert!(text.contains("allocator "), "{text}");
    for line in text.lines() {
        assert!(
            line.chars().count() <= 130,
            "{} characters: {line}",
            line.len()
        );
    }
}

/// Issue #32: a trace whose recorder dropped events (format 1.5 marker).
/// Before the gap, blocks at 1 MiB and 1 MiB + 4 KiB; the gap dropped the
/// allocation at 1 MiB + 8 KiB and the free of the block at 1 MiB; after it,
/// the free of the block the gap allocated, a new block over the one whose
/// free was dropped, and the end.
fn trace_with_a_gap() -> Vec<u8> {
    use vramtrace_format::DroppedEvents;
    let mut w = TraceWriter::new(Vec::new(), Header::default()).unwrap();
    let block = |i: u64| BlockEvent {
        addr: (1 << 20) + i * 4096,
        size: 4096,
        requested: 4096,
        ..Default::default()
    };
    let events = [
        (
            1_000,
            EventData::SegmentAlloc(SegmentEvent {
                addr: 1 << 20,
                size: 2 << 20,
                ..Default::default()
            }),
        ),
        (2_000, EventData::Alloc(block(0))),
        (3_000, EventData::Alloc(block(1))),
        (
            2_500_000_000,
            EventData::EventsDropped(DroppedEvents {
                count: 3,
                from_ns: 1_200_000_000,
            }),
        ),
        (2_600_000_000, EventData::FreeRequested(block(2))),
        (2_600_000_001, EventData::FreeCompleted(block(2))),
        (2_700_000_000, EventData::Alloc(block(0))),
    ];
    for (time_ns, data) in events {
        w.push(Event { time_ns, data }).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn dropped_events_are_told_and_make_no_inconsistency_or_leak() {
    let dir = scratch("summary-gap");
    let path = dir.join("gap.vtrace");
    std::fs::write(&path, trace_with_a_gap()).unwrap();
    let path = path.display().to_string();
    let told = "3 events dropped by the recorder between 1.20 s and 2.50 s (1 gap; the disk could not keep up): figures over that span are a lower bound";
    let run = vramtrace(["summary", &path]).success();
    assert!(run.stderr.contains(told), "{}", run.stderr);
    assert!(run.stdout.contains(told), "{}", run.stdout);
    assert!(run.stdout.contains("inconsistencies: 0"), "{}", run.stdout);
    let json = vramtrace(["summary", &path, "--json"]).success().result();
    assert_eq!(json["inconsistencies"]["total"], 0);
    let dropped = &json["dropped_events"];
    assert_eq!(dropped["events"], 3);
    assert_eq!(dropped["spans"], 1);
    assert_eq!(dropped["from_ns"], 1_200_000_000u64);
    assert_eq!(dropped["to_ns"], 2_500_000_000u64);
    // The unknown free (twice: requested, completed) and the allocation
    // over the block whose free was dropped.
    assert_eq!(dropped["explained_inconsistencies"], 3);

    let run = vramtrace(["leaks", &path]).success();
    assert!(run.stderr.contains(told), "{}", run.stderr);
    let json = vramtrace(["leaks", &path, "--json"]).success().result();
    // The block at 1 MiB + 4 KiB was live at the gap: in doubt, not a leak;
    // the one allocated after the gap is never freed.
    assert_eq!(json["never_freed_blocks"], 1);
    assert_eq!(json["in_doubt_blocks"], 1);
    assert_eq!(json["dropped_events"]["events"], 3);
}
