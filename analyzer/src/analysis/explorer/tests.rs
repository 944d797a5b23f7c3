use super::*;
use crate::analysis::window::Window;
use crate::testing::{TraceBuilder, replay_trace};

const MIB: u64 = 1 << 20;

fn explore(trace: &[u8], options: ExplorerOptions) -> Explorer {
    let mut explorer = ExplorerAnalysis::new(options);
    replay_trace(trace, &mut [&mut explorer], &Window::default());
    explorer.into_report().unwrap()
}

/// One segment, then `n` allocations of growing size, each freed after the
/// next is made; a 10 s pause after the third event.
fn staircase(n: u64) -> Vec<u8> {
    let mut b = TraceBuilder::new();
    let site = b.site("forward", "model.py", 3);
    b.at(1_000).segment(0, 1 << 40);
    let mut t = 2_000;
    for i in 0..n {
        t += if i == 1 { 10_000_000_000 } else { 1_000 };
        b.at(t)
            .alloc(i * MIB * 64, (i + 1) * MIB, (i + 1) * MIB, site);
        if i > 0 {
            t += 1_000;
            b.at(t).free((i - 1) * MIB * 64, i * MIB);
        }
    }
    b.finish()
}

#[test]
fn one_event_buckets_hold_each_value_exactly() {
    let e = explore(&staircase(4), ExplorerOptions::default());
    assert_eq!(e.series.bucket_events, 1);
    // `free` is a free request and its completion: two events.
    assert_eq!(e.events, 1 + 4 + 2 * 3);
    let allocated: Vec<u64> = e
        .series
        .buckets
        .iter()
        .map(|b| b.allocated.last / MIB)
        .collect();
    assert_eq!(allocated, [0, 1, 3, 2, 2, 5, 3, 3, 7, 4, 4]);
    let reserved = e.series.buckets.last().unwrap().reserved.last;
    assert_eq!(reserved, 1 << 40);
    // Cached free is what the segment holds beyond the live block.
    assert_eq!(
        e.series.buckets.last().unwrap().cached_free.last,
        (1 << 40) - 4 * MIB
    );
}

#[test]
fn merged_buckets_keep_a_one_event_spike() {
    let mut b = TraceBuilder::new();
    let site = b.site("forward", "model.py", 3);
    b.segment(0, 1 << 40);
    for i in 0..1000u64 {
        let size = if i == 637 { 900 * MIB } else { MIB };
        b.at(1_000 * (i + 1))
            .alloc(0, size, size, site)
            .free(0, size);
    }
    let e = explore(
        &b.finish(),
        ExplorerOptions {
            series_buckets: 16,
            ..ExplorerOptions::default()
        },
    );
    assert!(e.series.buckets.len() <= 16, "{}", e.series.buckets.len());
    assert!(e.series.bucket_events >= 128);
    let max = e.series.buckets.iter().map(|b| b.allocated.max).max();
    assert_eq!(max, Some(900 * MIB));
    let spike = e
        .series
        .buckets
        .iter()
        .position(|b| b.allocated.max == 900 * MIB)
        .unwrap() as u64;
    // Event 1 + 3 × 637 is the spike's allocation (each free is two events).
    let index = 1 + 3 * 637;
    assert_eq!(index / e.series.bucket_events, spike);
    assert!(e.series.buckets.iter().all(|b| b.allocated.min == 0));
}

#[test]
fn allocations_past_the_budget_keep_every_one_above_a_threshold() {
    let e = explore(
        &staircase(40),
        ExplorerOptions {
            allocation_budget: 8,
            ..ExplorerOptions::default()
        },
    );
    assert_eq!(e.allocations_total, 40);
    assert!(e.allocations.len() <= 8 && !e.allocations.is_empty());
    let smallest = e.allocations.iter().map(|a| a.size).min().unwrap();
    assert!(smallest >= e.allocation_threshold);
    // Every allocation of at least the threshold is there.
    let expected = (1..=40)
        .filter(|i| i * MIB >= e.allocation_threshold)
        .count();
    assert_eq!(e.allocations.len(), expected);
    // Each knows its free (all but the last) and stack.
    for a in &e.allocations[..e.allocations.len() - 1] {
        assert!(a.free_index.unwrap() > a.alloc_index);
        assert!(a.free_ns.unwrap() > a.alloc_ns);
    }
    assert_eq!(e.allocations.last().unwrap().free_index, None);
    assert_eq!(e.sites, ["forward (model.py:3)"]);
    assert_eq!(e.frames[e.stacks[0][0] as usize], "forward (model.py:3)");
}

#[test]
fn idle_gaps_collapse_in_busy_time() {
    let e = explore(&staircase(4), ExplorerOptions::default());
    assert_eq!(e.idle.gaps.len(), 1, "{:?}", e.idle);
    let gap = e.idle.gaps[0];
    assert_eq!(gap.gap_ns, 10_000_000_000);
    assert_eq!(gap.index, 2);
    let last = e.series.buckets.last().unwrap();
    let busy = e.busy_ns(e.events - 1, last.end_ns);
    assert_eq!(
        busy,
        last.end_ns - e.start_ns - (10_000_000_000 - e.idle.threshold_ns)
    );
}

#[test]
fn checkpoints_hold_the_peaks_the_end_and_evenly_spaced_moments() {
    let mut b = TraceBuilder::new();
    let site = b.site("forward", "model.py", 3);
    b.at(1).segment(0, 64 * MIB);
    b.at(2).begin("iter0").alloc(0, 8 * MIB, 8 * MIB, site);
    b.at(3).alloc(8 * MIB, 16 * MIB, 16 * MIB, site);
    b.at(4).free_requested(0, 8 * MIB);
    b.at(5).end("iter0").free(8 * MIB, 16 * MIB);
    b.at(6).oom(1 << 40, site);
    let e = explore(&b.finish(), ExplorerOptions::default());
    let peak = e
        .checkpoints
        .iter()
        .find(|c| c.kinds.contains(&CheckpointKind::AllocatedPeak))
        .unwrap();
    assert_eq!(peak.allocated, 24 * MIB);
    assert_eq!(peak.index, 3);
    let seg = &peak.segments[0];
    assert_eq!(seg.used_bytes, 24 * MIB);
    assert_eq!(seg.largest_free, 40 * MIB);
    assert_eq!(seg.blocks.len(), 2);
    assert_eq!(seg.blocks[1].offset, 8 * MIB);
    assert_eq!(seg.blocks[1].allocation, Some(1));
    assert!((peak.external_fragmentation - 0.0).abs() < 1e-9);
    // After the free request the first block waits for its stream.
    let after = e.checkpoints.iter().find(|c| c.index == 4).unwrap();
    assert!(after.segments[0].blocks[0].pending_free);
    assert_eq!(after.pending_free, 8 * MIB);
    let oom = e
        .checkpoints
        .iter()
        .find(|c| c.kinds.contains(&CheckpointKind::Oom))
        .unwrap();
    assert!(oom.kinds.contains(&CheckpointKind::End));
    assert!(
        e.checkpoints
            .iter()
            .any(|c| c.kinds.contains(&CheckpointKind::ReservedPeak))
    );
    assert!(e.checkpoints.windows(2).all(|w| w[0].index < w[1].index));
    let phase = &e.phases[0];
    assert_eq!(
        (phase.name.as_str(), phase.begin_index, phase.end_index),
        ("iter0", 1, 5)
    );
    assert_eq!(e.phase_paths, ["iter0"]);
}

#[test]
fn evenly_spaced_checkpoints_stay_within_twice_the_target() {
    let e = explore(
        &staircase(300),
        ExplorerOptions {
            even_checkpoints: 4,
            ..ExplorerOptions::default()
        },
    );
    let even = e
        .checkpoints
        .iter()
        .filter(|c| c.kinds.contains(&CheckpointKind::Even))
        .count();
    assert!((4..8).contains(&even), "{even}");
}

/// Past the budget of segments, a checkpoint keeps the largest (in address
/// order) with their blocks, and sums up the rest: a run of 400,000
/// segments costs the page what one of the budget does (issue #46 item 4:
/// `report` took 25.6 s and 1.2 GB there).
#[test]
fn a_checkpoint_keeps_the_largest_segments_and_sums_up_the_rest() {
    let mut b = TraceBuilder::new();
    let site = b.site("forward", "model.py", 3);
    // Ten segments in descending address order, the k-th of (k + 1) MiB,
    // each with a 4 KiB block.
    for k in 0..10u64 {
        let addr = (10 - k) << 30;
        b.segment(addr, (k + 1) * MIB).alloc(addr, 4096, 4096, site);
    }
    let trace = b.finish();
    let e = explore(
        &trace,
        ExplorerOptions {
            checkpoint_segments: 3,
            ..ExplorerOptions::default()
        },
    );
    let c = e.checkpoints.last().unwrap();
    let sizes: Vec<u64> = c.segments.iter().map(|s| s.size / MIB).collect();
    // The three largest (10, 9 and 8 MiB), lowest address first.
    assert_eq!(sizes, [10, 9, 8]);
    assert!(c.segments.windows(2).all(|w| w[0].addr < w[1].addr));
    assert!(c.segments.iter().all(|s| s.blocks.len() == 1));
    assert_eq!(
        c.segments_left_out,
        LeftOutSegments {
            count: 7,
            reserved: (1..=7).sum::<u64>() * MIB,
            used: 7 * 4096,
        }
    );
    // Nothing is lost from the totals: the kept and the summed-up make the
    // reserved bytes.
    let kept: u64 = c.segments.iter().map(|s| s.size).sum();
    assert_eq!(kept + c.segments_left_out.reserved, c.reserved);
    // Under the budget, none is left out.
    let all = explore(&trace, ExplorerOptions::default());
    assert_eq!(all.checkpoints.last().unwrap().segments.len(), 10);
    assert_eq!(all.checkpoints.last().unwrap().segments_left_out.count, 0);
}

/// A checkpoint past its budgets holds room for what it keeps, not for
/// every segment and block of the run (issue #46 item 4: 400,000 segments
/// cost 2.3 KB each in `report`, most of it the room each checkpoint's
/// vectors kept for all of them).
#[test]
fn a_checkpoint_holds_room_only_for_what_it_keeps() {
    let n = 1000u64;
    let segments: Vec<Segment> = (0..n)
        .map(|k| Segment {
            start: k << 30,
            end: (k << 30) + (k + 1) * MIB,
            live_blocks: 0,
            live_bytes: 0,
            expandable: false,
            pool: 0,
        })
        .collect();
    let blocks: Vec<RawBlock> = (0..n)
        .map(|k| {
            (
                k << 30,
                4096,
                false,
                StackId::default(),
                None,
                SiteId::default(),
            )
        })
        .collect();
    let options = ExplorerOptions {
        checkpoint_segments: 3,
        checkpoint_blocks: 2,
        ..ExplorerOptions::default()
    };
    let at = Moment {
        index: 0,
        time_ns: 0,
        allocated: n * 4096,
        active: n * 4096,
        reserved: (1..=n).sum::<u64>() * MIB,
    };
    let c = ExplorerAnalysis::checkpoint(CheckpointKind::Even, at, segments, blocks, &options);
    assert_eq!(c.segments.len(), 3);
    assert_eq!(c.blocks.len(), 2);
    let room = [
        c.segments.capacity(),
        c.used.capacity(),
        c.largest_free.capacity(),
    ];
    assert!(room.iter().all(|&r| r <= 3), "{room:?}");
    assert!(c.blocks.capacity() <= 2, "{}", c.blocks.capacity());
}
