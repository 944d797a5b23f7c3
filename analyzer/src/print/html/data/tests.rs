use super::*;

#[test]
fn base64_matches_the_standard() {
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(b"foobar"), "Zm9vYmFy");
}

/// Knots at each bucket's first and last event; busy time as
/// [`Explorer::busy_ns`] counts it; one knot past the end.
#[test]
fn knots_follow_the_buckets_and_busy_time() {
    use crate::analysis::explorer::SeriesBucket;
    use crate::analysis::pauses::{IdleGap, IdleGaps};
    let bucket = |start_ns, end_ns| SeriesBucket {
        start_ns,
        end_ns,
        ..SeriesBucket::default()
    };
    let e = Explorer {
        first_index: 100,
        events: 7,
        start_ns: 1_000,
        end_ns: 9_000,
        series: crate::analysis::explorer::Series {
            bucket_events: 3,
            // Events 0-2, 3-5 and 6; the second bucket's start goes
            // back (merged devices): its knot keeps the time before.
            buckets: vec![
                bucket(1_000, 1_200),
                bucket(1_100, 8_000),
                bucket(9_000, 9_000),
            ],
            has_pools: false,
        },
        idle: IdleGaps {
            threshold_ns: 100,
            gaps: vec![IdleGap {
                gap_ns: 6_000,
                index: 105,
                time_ns: 8_000,
            }],
            left_out: 0,
            median_ns: 10,
        },
        ..Explorer::default()
    };
    let knots = Knots::of(&e);
    assert_eq!(knots.index, [0, 2, 3, 5, 6]);
    assert_eq!(knots.time, [0, 200, 200, 7_000, 8_000]);
    assert_eq!(knots.busy, [0, 200, 200, 1_100, 2_100]);
    for (k, &index) in knots.index.iter().enumerate() {
        let time = e.start_ns + knots.time[k];
        assert_eq!(knots.busy[k], e.busy_ns(e.first_index + index, time));
    }
    assert_eq!(knots.end_index, 7);
    assert_eq!(knots.end_time, 8_004.0);
    assert_eq!(knots.end_busy, 2_104.0);
}

/// What the page's tests (`assets/explorer/tests`, run with `node
/// --test`) decode and compare: the explorer's data of a small trace as
/// this encoder writes it, with what the page should find in it, and
/// [`units`](crate::units)' forms of a table of values for the
/// page's to match. The file must be what this writes now; after a
/// change, `VRAMTRACE_BLESS=1 cargo test -p vramtrace --lib the_pages_tests_read`
/// writes it.
/// A trace with private pools sends their bytes as columns of their
/// own, which the page draws; one without sends none.
#[test]
fn bytes_in_private_pools_are_columns_only_when_there_are_pools() {
    use crate::analysis::explorer::{ExplorerAnalysis, ExplorerOptions};
    use crate::analysis::window::Window;
    use crate::testing::{Serving, TraceBuilder, replay_trace, serving_run_with_pools};
    let columns = |trace: &[u8]| {
        let mut analysis = ExplorerAnalysis::new(ExplorerOptions::default());
        replay_trace(trace, &mut [&mut analysis], &Window::default());
        let e = analysis.into_report().unwrap();
        let (data, _) = encode(&e, &mut Palette::new());
        let names: Vec<String> = (data["columns"].as_array().unwrap().iter())
            .map(|c| c[0].as_str().unwrap().to_string())
            .collect();
        (e, names)
    };
    let (trace, pools) = serving_run_with_pools(&Serving::default());
    let (e, names) = columns(&trace);
    assert!(e.series.has_pools);
    assert!(names.iter().any(|n| n == "p_last"), "{names:?}");
    let at_end: u64 = pools.iter().map(|p| p.reserved).sum();
    assert_eq!(e.series.buckets.last().unwrap().pools.last, at_end);
    assert!(e.series.buckets.iter().any(|b| b.pools.max > 0));
    let mut plain = TraceBuilder::new();
    plain
        .segment(0, 1 << 20)
        .alloc(0, 512, 512, vramtrace_format::StackId::NONE);
    let (e, names) = columns(&plain.finish());
    assert!(!e.series.has_pools);
    assert!(!names.iter().any(|n| n.starts_with("p_")), "{names:?}");
}

#[test]
fn the_pages_tests_read_what_this_writes() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/print/html/assets/explorer/tests/rust-fixture.json"
    );
    let text = rust_fixture();
    if std::env::var_os("VRAMTRACE_BLESS").is_some() {
        std::fs::write(path, &text).unwrap();
    }
    let kept = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        kept == text,
        "{path} is not what the encoder writes now: run \
         VRAMTRACE_BLESS=1 cargo test -p vramtrace --lib the_pages_tests_read"
    );
}

fn rust_fixture() -> String {
    use crate::analysis::explorer::{ExplorerAnalysis, ExplorerOptions};
    use crate::analysis::window::Window;
    use crate::testing::{TraceBuilder, replay_trace};
    use crate::units;
    const MIB: u64 = 1 << 20;
    // A segment, two phases, allocations of growing size each freed
    // after the next is made, a pause of a second, and an OOM.
    let mut b = TraceBuilder::new();
    let site = b.site("forward", "model.py", 3);
    let other = b.site("step", "train.py", 9);
    b.at(1_000).segment(0, 64 * MIB);
    let mut t = 2_000;
    for i in 0..6u64 {
        t += if i == 3 { 1_000_000_000 } else { 1_000 };
        b.at(t)
            .begin(if i % 2 == 0 { "forward" } else { "backward" });
        let stack = if i % 2 == 0 { site } else { other };
        b.at(t + 10)
            .alloc(i * 4 * MIB, (i + 1) * MIB, (i + 1) * MIB - 3, stack);
        if i > 0 {
            b.at(t + 20).free((i - 1) * 4 * MIB, i * MIB);
        }
        b.at(t + 30)
            .end(if i % 2 == 0 { "forward" } else { "backward" });
    }
    b.at(t + 100).oom(512 * MIB, site);
    let mut analysis = ExplorerAnalysis::new(ExplorerOptions::default());
    replay_trace(&b.finish(), &mut [&mut analysis], &Window::default());
    let e = analysis.into_report().unwrap();
    let (data, bulk) = encode(&e, &mut Palette::new());
    let knots = Knots::of(&e);
    let a = &e.allocations;
    let expect = json!({
        "knots": { "index": knots.index, "time": knots.time, "busy": knots.busy },
        "allocations": {
            "allocEvent": a.iter().map(|a| a.alloc_index - e.first_index).collect::<Vec<_>>(),
            "allocTime": a.iter().map(|a| a.alloc_ns - e.start_ns).collect::<Vec<_>>(),
            "freeEvent": a.iter().map(|a| a.free_index.map_or(e.events, |f| f - e.first_index)).collect::<Vec<_>>(),
            "freeTime": a.iter().map(|a| a.free_ns.map(|f| f - e.start_ns)).collect::<Vec<_>>(),
            "size": a.iter().map(|a| a.size).collect::<Vec<_>>(),
            "requested": a.iter().map(|a| a.requested).collect::<Vec<_>>(),
            "site": a.iter().map(|a| a.site).collect::<Vec<_>>(),
        },
        "allocated_last": e.series.buckets.iter().map(|b| b.allocated.last).collect::<Vec<_>>(),
        "stacks": e.stacks,
        "checkpoints": e.checkpoints.iter().map(|c| json!({
            "event": c.index - e.first_index,
            "segments": c.segments.iter().map(|s| json!({
                "addr": s.addr,
                "size": s.size,
                "blocks": s.blocks.iter().map(|b| json!([b.offset, b.size, b.allocation.map_or(-1, |a| a as i64)])).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "phases": e.phases.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
    });
    const GIB: u64 = 1 << 30;
    let sizes = [
        0,
        1,
        1023,
        1024,
        1280,
        1536,
        1792,
        2047,
        1_048_575,
        1_048_576,
        20 * MIB,
        1_288_490_188,
        80 * GIB,
        1 << 50,
        1 << 60,
        u64::MAX >> 11,
    ];
    let times = [
        0,
        999,
        1_000,
        12_250,
        12_350,
        999_949,
        999_950,
        1_125_000,
        3_205_000,
        999_994_999,
        1_250_000_000,
        59_994_999_999,
        60_000_000_000,
        125_000_000_000,
        3_600_000_000_000,
        7_265_000_000_000,
    ];
    let counts = [0, 12, 999, 1_000, 1_234_567, 9_007_199_254_740_991];
    let fixture = json!({
        "about": "Written by analyzer/src/print/html/data.rs (the_pages_tests_read_what_this_writes); read by assets/explorer/tests.",
        "units": {
            "bytes": sizes.map(|n| json!([n, units::bytes(n)])),
            "duration_ns": times.map(|n| json!([n, units::duration_ns(n)])),
            "count": counts.map(|n| json!([n, units::count(n)])),
        },
        "explorer": { "data": data, "bulk": bulk, "expect": expect },
    });
    serde_json::to_string_pretty(&fixture).unwrap() + "\n"
}

#[test]
fn columns_are_varints_and_signed_ones_zigzag() {
    let mut c = Columns::default();
    c.column("u", [300]);
    c.signed("s", [0, -1, 1, -2, i128::MIN]);
    assert_eq!(c.bytes[..2], [0xac, 0x02]);
    assert_eq!(c.bytes[2..6], [0, 1, 2, 3]);
    // Clamped to i64::MIN, whose zigzag is u64::MAX: ten bytes.
    assert_eq!(c.bytes.len(), 6 + 10);
    assert_eq!(c.index, [("u", 1), ("s", 5)]);
}
