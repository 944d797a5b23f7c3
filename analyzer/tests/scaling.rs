//! Every analysis costs time in proportion to its input (issue #32): each
//! family of crafted traces in `support::hostile`, replayed at two sizes,
//! costs at most about ten times as much at ten times the size.
//!
//! `VRAMTRACE_HOSTILE_DIR=DIR cargo test --release -p vramtrace --test scaling -- --ignored write_hostile_inputs`
//! writes each family at the audit's sizes into `DIR`, for timing the
//! binary (`scripts/hostile-scaling.sh` does both).

mod support;

use support::hostile;
use support::scaling::assert_linear;
use vramtrace::analysis::Devices;
use vramtrace::analysis::explorer::{ExplorerAnalysis, ExplorerOptions};
use vramtrace::analysis::fragmentation::Fragmentation;
use vramtrace::analysis::leaks::Leaks;
use vramtrace::analysis::phase_totals::PhaseTotals;
use vramtrace::analysis::summary::Summary;
use vramtrace::analysis::timeline::{GroupBy, TimelineAnalysis, TimelineOptions};
use vramtrace::command::Replay;
use vramtrace::command::ReplayOptions;
use vramtrace::command::leaks::leaks;
use vramtrace::command::report::CHART_BUCKETS;
use vramtrace::command::summary::summary;
use vramtrace::input::Input;
use vramtrace::progress::NoProgress;
use vramtrace::simulate::{SimOptions, extract, simulate};
use vramtrace_allocator::AllocatorConfig;

fn input(bytes: Vec<u8>) -> Input {
    Input::from_bytes(bytes, &NoProgress).unwrap()
}

/// The analyses of `report`'s pass, on this thread (the command runs its
/// pass on a worker thread, which a thread's cost would not count).
fn run_report(input: &Input) {
    let options = ReplayOptions::default();
    let replay = Replay::new(input, &options, &NoProgress).unwrap();
    replay
        .run(|_| {
            (
                Summary::new(10),
                Fragmentation::new(CHART_BUCKETS),
                Leaks::new(),
                TimelineAnalysis::new(TimelineOptions {
                    group_by: GroupBy::Site,
                    ..TimelineOptions::default()
                }),
                TimelineAnalysis::new(TimelineOptions {
                    group_by: GroupBy::Category,
                    ..TimelineOptions::default()
                }),
                ExplorerAnalysis::new(ExplorerOptions::default()),
                PhaseTotals::new(),
            )
        })
        .unwrap();
}

/// The timeline of a Perfetto export: by category, at its width.
fn run_perfetto_timeline(input: &Input) {
    let options = ReplayOptions::default();
    let replay = Replay::new(input, &options, &NoProgress).unwrap();
    replay
        .run(|_| {
            (TimelineAnalysis::new(TimelineOptions {
                columns: vramtrace::command::export::PERFETTO_COLUMNS,
                group_by: GroupBy::Category,
                top: 8,
            }),)
        })
        .unwrap();
}

fn run_leaks(input: &Input) {
    leaks(input, &ReplayOptions::default(), &NoProgress).unwrap();
}

fn run_summary(input: &Input) {
    summary(input, &Default::default(), &NoProgress).unwrap();
}

#[test]
fn deep_phase_nesting() {
    assert_linear(
        "report, deep phases",
        2_000,
        |n| input(hostile::deep_phases(n)),
        run_report,
    );
}

#[test]
fn unclosed_phases() {
    assert_linear(
        "leaks, unclosed phases",
        2_000,
        |n| input(hostile::unclosed_phases(n)),
        run_leaks,
    );
}

#[test]
fn overlapping_segments() {
    assert_linear(
        "report, overlapping segments",
        1_000,
        |n| input(hostile::overlapping_segments(n)),
        run_report,
    );
}

#[test]
fn expandable_churn() {
    assert_linear(
        "simulate, expandable churn",
        1_000,
        |n| {
            let input = input(hostile::expandable_churn(n));
            let mut events = input.events().unwrap();
            let mut extracted = extract(&mut events, Devices::Apart, &NoProgress).unwrap();
            extracted.devices.remove(0).list
        },
        |list| {
            simulate(list, &AllocatorConfig::default(), &SimOptions::default());
        },
    );
}

#[test]
fn zero_size_segments() {
    assert_linear(
        "summary, zero-size segments",
        1_000,
        |n| input(hostile::zero_size_segments(n)),
        run_summary,
    );
}

#[test]
fn leaking_steps() {
    assert_linear(
        "report, leaking steps",
        300,
        |n| input(hostile::leaking_steps(n)),
        run_report,
    );
}

#[test]
fn descending_segments() {
    assert_linear(
        "summary, descending segments",
        2_000,
        |n| input(hostile::descending_segments(n)),
        run_summary,
    );
}

#[test]
fn many_devices() {
    assert_linear(
        "summary, many devices",
        300,
        |n| input(hostile::many_devices(n)),
        run_summary,
    );
}

#[test]
fn blocks_recategorized_long_after_their_birth() {
    // Issue #46: each block whose category changed walked back over every
    // column since its birth (100,000 blocks in a Perfetto export: 39.7 s).
    // On a pool of one thread, the measuring one: the replay runs beside
    // the decoding (`rayon::join`), on whichever thread is free.
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(blocks_tagged_late_scale);
}

fn blocks_tagged_late_scale() {
    assert_linear(
        "perfetto timeline, blocks tagged late",
        1_000,
        |n| input(hostile::blocks_tagged_late(n)),
        run_perfetto_timeline,
    );
}

/// A family's name, its maker, and the two sizes timed.
type Family = (&'static str, fn(usize) -> Vec<u8>, [usize; 2]);

/// The inputs at the audit's sizes, for timing the binary: written only
/// when asked (`VRAMTRACE_HOSTILE_DIR`).
#[test]
#[ignore = "writes large inputs; see the module documentation"]
fn write_hostile_inputs() {
    let Some(dir) = std::env::var_os("VRAMTRACE_HOSTILE_DIR") else {
        panic!("set VRAMTRACE_HOSTILE_DIR to the folder to write into");
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let families: [Family; 9] = [
        ("deep-phases", hostile::deep_phases, [50_000, 200_000]),
        (
            "unclosed-phases",
            hostile::unclosed_phases,
            [100_000, 200_000],
        ),
        (
            "overlapping-segments",
            hostile::overlapping_segments,
            [5_000, 20_000],
        ),
        (
            "expandable-churn",
            hostile::expandable_churn,
            [10_000, 60_000],
        ),
        (
            "zero-size-segments",
            hostile::zero_size_segments,
            [10_000, 100_000],
        ),
        ("leaking-steps", hostile::leaking_steps, [10_000, 50_000]),
        (
            "descending-segments",
            hostile::descending_segments,
            [100_000, 400_000],
        ),
        ("many-devices", hostile::many_devices, [10_000, 100_000]),
        (
            "distinct-stacks",
            hostile::distinct_stacks,
            [10_000, 100_000],
        ),
    ];
    for (name, make, sizes) in families {
        for n in sizes {
            std::fs::write(dir.join(format!("{name}-{n}.vtrace")), make(n)).unwrap();
        }
    }
}
