use super::*;
use crate::analysis::Devices;
use crate::progress::NoProgress;
use crate::simulate::{Extracted, extract};
use crate::testing::TraceBuilder;
use vramtrace_format::TraceReader;

fn extracted(bytes: &[u8]) -> (Extracted, SymbolTable) {
    let mut reader = TraceReader::new(bytes).unwrap();
    let e = extract(&mut reader, Devices::Apart, &NoProgress)
        .unwrap()
        .devices
        .remove(0);
    (e, reader.symbols().clone())
}

fn tried(bytes: &[u8], limit: u64) -> FixesTried {
    let (e, symbols) = extracted(bytes);
    let options = SimOptions {
        capacity: Some(limit),
        ..SimOptions::default()
    };
    for_first_oom(
        &e.list,
        &AllocatorConfig::default(),
        &options,
        &e.state,
        &symbols,
    )
    .expect("the run runs out of memory")
}

/// Every fix offered was checked: replayed again on its own, it gets
/// past the failure (a test of the test's premise as much as of the
/// ranking).
fn assert_ranked(f: &FixesTried) {
    let frees: Vec<(bool, bool, u64)> = f
        .passed
        .iter()
        .map(|x| {
            (
                x.holds_to != HoldsTo::End,
                !matches!(x.basis, Basis::Exact | Basis::ExactToRecordingEnd),
                u64::MAX - x.frees_bytes.unwrap(),
            )
        })
        .collect();
    let mut sorted = frees.clone();
    sorted.sort();
    assert_eq!(
        frees, sorted,
        "ranked: those replayed to the end first, then exact first, most freed first"
    );
    assert!(
        f.passed
            .iter()
            .all(|x| x.passed && x.headroom_bytes.is_some())
    );
    assert!(f.failed.iter().all(|x| !x.passed));
}

/// The program, scaled down: 150 blocks of 6 MiB in 50 segments
/// of 20 MiB, two of every three freed, then 200 MiB asked for under a
/// 1 GiB limit. Each segment keeps one live block, so nothing can be
/// returned; freeing the kept blocks first is what helps.
fn fragmenting() -> Vec<u8> {
    const MIB: u64 = 1 << 20;
    let mut t = TraceBuilder::new();
    let keep = t.site("make_tensors", "frag.py", 12);
    let big = t.site("<module>", "frag.py", 20);
    let base = 0x7f00_0000_0000u64;
    for s in 0..50u64 {
        let seg = base + s * 20 * MIB;
        t.segment(seg, 20 * MIB);
        for b in 0..3 {
            t.alloc(seg + b * 6 * MIB, 6 * MIB, 6 * MIB, keep);
        }
    }
    for s in 0..50u64 {
        let seg = base + s * 20 * MIB;
        t.free(seg, 6 * MIB).free(seg + 6 * MIB, 6 * MIB);
    }
    t.oom(200 * MIB, big);
    t.finish()
}

#[test]
fn freeing_the_kept_blocks_removes_a_fragmentation_oom() {
    let f = tried(&fragmenting(), 1 << 30);
    assert_ranked(&f);
    let kept = f
        .passed
        .iter()
        .find(|x| x.kind == FixKind::FreeKept)
        .unwrap_or_else(|| panic!("{f:#?}"));
    assert!(kept.change.contains("frag.py:12"), "{}", kept.change);
    assert!(kept.change.contains("50 blocks"), "{}", kept.change);
    // The 50 kept segments of 20 MiB go back; 200 MiB is taken.
    assert_eq!(kept.headroom_bytes, Some((1 << 30) - 200 * (1 << 20)));
    // Splitting rules do not touch 6 MiB blocks: no help.
    assert!(
        f.failed
            .iter()
            .any(|x| x.change.contains("max_split_size_mb:128")),
        "{f:#?}"
    );
    assert_eq!(f.needs_more_bytes, None);
}

#[test]
fn an_empty_cache_where_the_phase_ended_stops_a_cached_segment_being_split() {
    const MIB: u64 = 1 << 20;
    let mut t = TraceBuilder::new();
    let s = t.site("step", "train.py", 5);
    let seg = 0x7f00_0000_0000u64;
    t.begin("load")
        .segment(seg, 600 * MIB)
        .alloc(seg, 600 * MIB, 600 * MIB, s)
        .free(seg, 600 * MIB)
        .end("load")
        .begin("train")
        // 30 MiB taken from the cached 600 MiB block splits it: it can
        // no longer be returned when 600 MiB more is asked for.
        .alloc(seg, 30 * MIB, 30 * MIB, s)
        .oom(600 * MIB, s)
        .end("train");
    let f = tried(&t.finish(), 1000 * MIB);
    assert_ranked(&f);
    let empty = f
        .passed
        .iter()
        .find(|x| x.kind == FixKind::EmptyCache)
        .unwrap_or_else(|| panic!("{f:#?}"));
    assert_eq!(empty.change, "torch.cuda.empty_cache() after load ends");
    // 30 MiB in a segment of its own, and 600 MiB: 370 MiB left.
    assert_eq!(empty.headroom_bytes, Some(370 * MIB));
    // Without the split the allocator would have held 1200 MiB.
    assert_eq!(empty.frees_bytes, Some(570 * MIB));
}

/// Issue #44: a fix replayed only to where the recording stops (in the
/// failure's own iteration: the program died of its error) is exact
/// only that far, and says so in its basis and its line; the same run
/// recorded past the failure's iteration gets plain `exact`.
#[test]
fn a_fix_replayed_to_a_recording_that_stops_at_its_failure_says_so() {
    const MIB: u64 = 1 << 20;
    for goes_on in [false, true] {
        let mut t = TraceBuilder::new();
        let s = t.site("step", "train.py", 5);
        let seg = 0x7f00_0000_0000u64;
        t.begin("iter0")
            .segment(seg, 600 * MIB)
            .alloc(seg, 600 * MIB, 600 * MIB, s)
            .free(seg, 600 * MIB)
            .end("iter0")
            .begin("iter1")
            .alloc(seg, 30 * MIB, 30 * MIB, s)
            .oom(600 * MIB, s);
        if goes_on {
            t.end("iter1");
        }
        let f = tried(&t.finish(), 1000 * MIB);
        assert_ranked(&f);
        let empty = f
            .passed
            .iter()
            .find(|x| x.kind == FixKind::EmptyCache)
            .unwrap_or_else(|| panic!("{f:#?}"));
        if goes_on {
            assert_eq!(empty.basis, Basis::Exact);
            assert_eq!(empty.holds_to, HoldsTo::End);
            assert!(!empty.detail.contains("recording's end"));
        } else {
            assert_eq!(empty.basis, Basis::ExactToRecordingEnd);
            assert_eq!(empty.basis.word(), "exact to the recording's end");
            assert_eq!(empty.holds_to, HoldsTo::RecordingEnd);
            assert!(
                empty
                    .detail
                    .contains("replayed only to the recording's end"),
                "{}",
                empty.detail
            );
            let json = serde_json::to_value(empty).unwrap();
            assert_eq!(json["basis"], "exact_to_recording_end");
            assert_eq!(json["holds_to"], "recording_end");
        }
    }
}

#[test]
fn model_state_is_never_offered_for_freeing_and_the_shortfall_is_exact() {
    const MIB: u64 = 1 << 20;
    let mut t = TraceBuilder::tagged();
    let s = t.site("<module>", "train.py", 3);
    let seg = 0x7f00_0000_0000u64;
    t.segment(seg, 900 * MIB)
        .alloc(seg, 900 * MIB, 900 * MIB, s)
        .tag(seg, Category::Parameter)
        .oom(200 * MIB, s);
    let f = tried(&t.finish(), 1000 * MIB);
    assert!(f.passed.is_empty(), "{f:#?}");
    assert!(f.failed.iter().all(|x| x.kind != FixKind::FreeKept));
    // 900 MiB and 200 MiB segments: 100 MiB more than the limit.
    assert_eq!(f.needs_more_bytes, Some(100 * MIB));
}

#[test]
fn a_run_that_fails_in_backward_has_its_unfreed_activations_found_by_site() {
    const MIB: u64 = 1 << 20;
    let mut t = TraceBuilder::new();
    let forward = t.site("forward", "model.py", 7);
    let grad = t.site("backward", "train.py", 30);
    let a = 0x7f00_0000_0000u64;
    let b = a + (600 * MIB);
    t.segment(a, 600 * MIB).segment(b, 200 * MIB);
    // iter0 saves 600 MiB in forward and frees it in backward: an
    // activation, known at its free.
    t.begin("iter0")
        .begin("forward")
        .alloc(a, 600 * MIB, 600 * MIB, forward)
        .end("forward")
        .begin("backward")
        .alloc(b, 200 * MIB, 200 * MIB, grad)
        .free(b, 200 * MIB)
        .free(a, 600 * MIB)
        .end("backward")
        .end("iter0");
    // iter1 fails in backward: its saved 600 MiB is never freed.
    t.begin("iter1")
        .begin("forward")
        .alloc(a, 600 * MIB, 600 * MIB, forward)
        .end("forward")
        .begin("backward")
        .oom(300 * MIB, grad)
        .end("backward")
        .end("iter1");
    let f = tried(&t.finish(), 850 * MIB);
    let ckpt = f
        .passed
        .iter()
        .find(|x| x.change.contains("checkpointing"))
        .unwrap_or_else(|| panic!("{f:#?}"));
    assert_eq!(ckpt.basis, Basis::Bound);
    assert!(
        ckpt.detail.contains("1 saved activations"),
        "{}",
        ckpt.detail
    );
}

#[test]
fn a_run_that_fits_has_nothing_to_fix() {
    let (e, symbols) = extracted(&fragmenting());
    let options = SimOptions {
        capacity: Some(4 << 30),
        ..SimOptions::default()
    };
    assert!(
        for_first_oom(
            &e.list,
            &AllocatorConfig::default(),
            &options,
            &e.state,
            &symbols
        )
        .is_none()
    );
}
