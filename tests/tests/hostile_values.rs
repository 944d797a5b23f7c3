//! Impossible values (issue #32, item 3): sizes, addresses, times and device
//! figures at the edges of 64 bits, in a trace and in a PyTorch snapshot.
//! Every command reads them in a build with overflow checks on (the tests'
//! debug build): no internal error, no figure made by wrapping ("16.0 EiB",
//! "-100.0%"), and each impossible value named in a warning and skipped.

use std::path::{Path, PathBuf};
use vramtrace_e2e::{Run, fixture, scratch, vramtrace};
use vramtrace_format::{
    BlockEvent, BlockState, BlockStatus, DeviceMemoryEvent, Event, EventData, Header, InitialState,
    LimitEvent, OomEvent, SegmentEvent, SegmentState, TraceWriter,
};

const GIB: u64 = 1 << 30;
const TOP: u64 = u64::MAX;

/// A sound 1 GiB segment with a 1 MiB block, then every field at its edge.
fn extreme_trace() -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), Header::default()).unwrap();
    w.write_initial_state(&InitialState {
        segments: vec![
            SegmentState {
                addr: 1 << 40,
                size: 4 << 20,
                blocks: vec![BlockState {
                    addr: 1 << 40,
                    size: 4 << 20,
                    requested: 4 << 20,
                    status: BlockStatus::Allocated,
                    ..Default::default()
                }],
                ..Default::default()
            },
            // Past 2^64, and as large as 64 bits hold.
            SegmentState {
                addr: TOP - 10,
                size: 1 << 30,
                ..Default::default()
            },
            SegmentState {
                addr: 1 << 41,
                size: TOP,
                blocks: vec![BlockState {
                    addr: 1 << 41,
                    size: TOP,
                    requested: TOP,
                    status: BlockStatus::Allocated,
                    ..Default::default()
                }],
                ..Default::default()
            },
        ],
    })
    .unwrap();
    let mut time = 10u64;
    let mut push = |w: &mut TraceWriter<Vec<u8>>, data: EventData| {
        time += 10;
        w.push(Event {
            time_ns: time,
            data,
        })
        .unwrap();
    };
    let segment = |addr, size| SegmentEvent {
        addr,
        size,
        ..Default::default()
    };
    let block = |addr, size, requested| BlockEvent {
        addr,
        size,
        requested,
        ..Default::default()
    };
    push(&mut w, EventData::SegmentAlloc(segment(0, GIB)));
    push(&mut w, EventData::Alloc(block(0, 1 << 20, 1 << 20)));
    // Sizes no device holds, addresses whose end passes 2^64.
    push(&mut w, EventData::SegmentAlloc(segment(GIB, TOP)));
    push(
        &mut w,
        EventData::SegmentAlloc(segment(TOP - 4096, 1 << 20)),
    );
    push(&mut w, EventData::SegmentMap(segment(TOP / 2, TOP / 2 + 2)));
    push(&mut w, EventData::Alloc(block(4096, TOP, TOP)));
    push(&mut w, EventData::Alloc(block(8192, 1 << 63, 1 << 63)));
    push(&mut w, EventData::Alloc(block(1 << 29, 1 << 63, 1 << 63)));
    push(&mut w, EventData::Alloc(block(TOP - 100, 512, 512)));
    push(&mut w, EventData::Alloc(block(16384, 512, TOP)));
    push(&mut w, EventData::FreeRequested(block(0, TOP, TOP)));
    push(&mut w, EventData::FreeCompleted(block(0, TOP, TOP)));
    push(&mut w, EventData::SegmentUnmap(segment(TOP / 2, TOP)));
    push(
        &mut w,
        EventData::Oom(OomEvent {
            requested: 1 << 40,
            free_bytes: TOP,
            ..Default::default()
        }),
    );
    push(
        &mut w,
        EventData::Limit(LimitEvent {
            limit_bytes: TOP,
            total_bytes: 0,
            ..Default::default()
        }),
    );
    push(
        &mut w,
        EventData::DeviceMemory(DeviceMemoryEvent {
            free_bytes: TOP,
            total_bytes: 1,
            ..Default::default()
        }),
    );
    push(&mut w, EventData::Alloc(block(1 << 20, 2 << 20, 2 << 20)));
    push(
        &mut w,
        EventData::FreeRequested(block(1 << 20, 2 << 20, 2 << 20)),
    );
    push(
        &mut w,
        EventData::FreeCompleted(block(1 << 20, 2 << 20, 2 << 20)),
    );
    // A time at the end of 64 bits, then one before it.
    w.push(Event {
        time_ns: TOP,
        data: EventData::Alloc(block(3 << 20, 1 << 20, 1 << 20)),
    })
    .unwrap();
    w.push(Event {
        time_ns: 5,
        data: EventData::Alloc(block(5 << 20, 1 << 20, 1 << 20)),
    })
    .unwrap();
    w.finish().unwrap()
}

/// Text that only wrapped arithmetic makes: a figure in PiB or EiB (no
/// device holds one), a negative share.
fn wrapped_figures(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for unit in [" PiB", " EiB"] {
        for (at, _) in text.match_indices(unit) {
            if text[..at].ends_with(|c: char| c.is_ascii_digit()) {
                let start = text[..at].rfind(' ').map_or(0, |s| s + 1);
                found.push(text[start..at + unit.len()].to_string());
            }
        }
    }
    found.extend(
        ["-100.0%", "NaN"]
            .into_iter()
            .filter(|s| text.contains(s))
            .map(String::from),
    );
    found
}

/// What is wrong with one command's run, if anything.
fn fault(run: &Run) -> Option<String> {
    if run.stderr.contains("panicked") || run.stderr.contains("internal error") {
        return Some(run.stderr.clone());
    }
    if !matches!(run.code, Some(0..=2)) {
        return Some(format!("exit {:?}: {}", run.code, run.stderr));
    }
    let wrapped = wrapped_figures(&run.stdout);
    (!wrapped.is_empty())
        .then(|| format!("figures made by wrapping ({wrapped:?}):\n{}", run.stdout))
}

/// Every command on one input: returns each command's stdout and stderr.
fn every_command(input: &Path, dir: &Path) -> Vec<(String, Run)> {
    let i = input.to_str().unwrap();
    let svg = dir.join("t.svg");
    let html = dir.join("r.html");
    let imported = dir.join("imported.vtrace");
    let commands: Vec<Vec<&str>> = vec![
        vec!["info", i],
        vec!["info", "--json", i],
        vec!["summary", i],
        vec!["summary", "--json", i],
        vec!["fragmentation", i],
        vec!["fragmentation", "--json", i],
        vec!["leaks", i],
        vec!["leaks", "--json", i],
        vec!["timeline", i, "-o", svg.to_str().unwrap()],
        vec!["timeline", "--json", i],
        vec!["report", i, "-o", html.to_str().unwrap()],
        vec!["compare", i, i],
        vec!["compare", "--json", i, i],
        vec!["simulate", i],
        vec!["simulate", "--json", "--gpu", "h100", "--min-capacity", i],
        vec!["plan", "--batch", "4,8", i, i],
        vec!["plan", "--json", "--gpu", "h100", i],
        vec!["import", i, "-o", imported.to_str().unwrap()],
    ];
    commands
        .into_iter()
        .filter(|args| !(args[0] == "import" && i.ends_with(".vtrace")))
        .map(|args| {
            let run = vramtrace(&args);
            (args.join(" "), run)
        })
        .collect()
}

fn check_every_command(input: &Path, dir: &Path, expect_warning: &str) {
    let runs = every_command(input, dir);
    let mut warned = false;
    let mut faults = Vec::new();
    for (what, run) in &runs {
        if let Some(fault) = fault(run) {
            faults.push(format!("{what}: {fault}"));
        }
        warned |= run.stderr.contains(expect_warning) || run.stdout.contains(expect_warning);
    }
    assert!(faults.is_empty(), "{}", faults.join("\n\n"));
    assert!(
        warned,
        "no command said `{expect_warning}`:\n{:#?}",
        runs.iter().map(|(w, r)| (w, &r.stderr)).collect::<Vec<_>>()
    );
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn impossible_values_in_a_trace_are_skipped_and_named() {
    let dir = scratch("hostile-values-trace");
    let trace = write(&dir, "extreme.vtrace", &extreme_trace());
    check_every_command(&trace, &dir, "impossible");
    // The sound part is still there: the 4 MiB block of the starting state,
    // the 1 GiB segment with its 1 MiB block at 0, a 2 MiB block allocated
    // and freed, and two 1 MiB blocks after.
    let summary = vramtrace(["summary", "--json", trace.to_str().unwrap()])
        .success()
        .result();
    assert_eq!(summary["peak_allocated_bytes"], 7 << 20, "{summary:#}");
    assert_eq!(
        summary["peak_reserved_bytes"],
        GIB + (4 << 20),
        "{summary:#}"
    );
}

#[test]
fn impossible_values_in_a_snapshot_are_skipped_and_named() {
    let dir = scratch("hostile-values-snapshot");
    let snapshot = fixture("torch/synthetic/extreme_values_p4.pickle");
    check_every_command(&snapshot, &dir, "impossible");
}

/// A sound trace (a segment, a block, freed) with `extra` events after
/// its allocation.
fn sound_trace_with(extra: &[EventData]) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), Header::default()).unwrap();
    let block = BlockEvent {
        addr: 1 << 40,
        size: 1 << 20,
        requested: 1 << 20,
        ..Default::default()
    };
    let mut events = vec![
        EventData::SegmentAlloc(SegmentEvent {
            addr: 1 << 40,
            size: 2 << 20,
            ..Default::default()
        }),
        EventData::Alloc(block),
    ];
    events.extend_from_slice(extra);
    events.push(EventData::FreeCompleted(block));
    for (i, data) in events.into_iter().enumerate() {
        w.push(Event {
            time_ns: 1_000 * (i as u64 + 1),
            data,
        })
        .unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn a_device_figure_of_exactly_two_to_the_fifty_is_analyzed_or_left_out_never_fatal() {
    let dir = scratch("hostile-values-2-50");
    let sample = DeviceMemoryEvent {
        free_bytes: 1 << 49,
        total_bytes: 1 << 50,
        ..Default::default()
    };
    let trace = write(
        &dir,
        "sample.vtrace",
        &sound_trace_with(&[EventData::DeviceMemory(sample)]),
    );
    for args in [
        vec!["simulate", "--gpu", "h100"],
        vec!["simulate"],
        vec!["summary"],
        vec!["plan", "--batch", "4", "--gpu", "h100"],
    ] {
        let mut all: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        all.push(trace.as_os_str());
        let run = vramtrace(&all);
        assert_eq!(run.code, Some(0), "{args:?}: {}", run.stderr);
        if args == ["simulate", "--gpu", "h100"] {
            // Said, not silent: the sample's reserve gave way to the estimate.
            assert!(
                run.stderr.contains("is as much as the device's"),
                "{}",
                run.stderr
            );
        }
    }
}

#[test]
fn impossible_dropped_markers_are_left_out_and_counted() {
    use vramtrace_format::DroppedEvents;
    let dir = scratch("hostile-values-dropped");
    let trace = write(
        &dir,
        "dropped.vtrace",
        &sound_trace_with(&[
            // 2^64 − 1 events, and a span that ends before it starts.
            EventData::EventsDropped(DroppedEvents {
                count: TOP,
                from_ns: 100,
            }),
            EventData::EventsDropped(DroppedEvents {
                count: 5,
                from_ns: 1 << 40,
            }),
            EventData::EventsDropped(DroppedEvents {
                count: 7,
                from_ns: 100,
            }),
        ]),
    );
    let run = vramtrace(["summary".as_ref(), "--json".as_ref(), trace.as_os_str()]).success();
    assert!(
        run.stderr
            .contains("2 events (the first, event 2, has an events_dropped marker"),
        "{}",
        run.stderr
    );
    // The sound marker alone is told: 7 events, not a saturated sum.
    assert!(run.stderr.contains("7 events dropped"), "{}", run.stderr);
    assert!(!run.stdout.contains(&TOP.to_string()), "{}", run.stdout);
}
