use super::*;
use crate::analysis::window::Window;
use crate::testing::{TraceBuilder, replay_trace};

#[test]
fn by_phase_splits_allocations_inside_and_outside_phases() {
    let mut b = TraceBuilder::new();
    let site = b.site("f", "a.py", 1);
    b.at(1).alloc(0x1000, 512, 512, site);
    b.at(2).begin("forward").alloc(0x2000, 1024, 1024, site);
    b.at(3).end("forward").free(0x2000, 1024);
    let trace = b.finish();
    let mut timeline = TimelineAnalysis::new(TimelineOptions {
        group_by: GroupBy::Phase,
        ..TimelineOptions::default()
    });
    replay_trace(&trace, &mut [&mut timeline], &Window::default());
    let mut names: Vec<_> = timeline.phase_names.keys().cloned().collect();
    names.sort();
    assert_eq!(names, ["(no phase)", "forward"]);
    // One slot per phase instance, and one for "no phase".
    assert_eq!(timeline.phase_category.len(), 2);
}

#[test]
fn samples_carry_the_bytes_in_private_pools() {
    use crate::testing::{Serving, serving_run_with_pools};
    let (trace, pools) = serving_run_with_pools(&Serving::default());
    let mut timeline = TimelineAnalysis::new(TimelineOptions {
        columns: 100_000,
        ..TimelineOptions::default()
    });
    replay_trace(&trace, &mut [&mut timeline], &Window::default());
    let t = timeline.into_report().unwrap();
    let held: Vec<u64> = t.samples.iter().map(|s| s.pools.unwrap()).collect();
    let most = *held.iter().max().unwrap();
    // The graphs' shared pool held memory at some point, never more than
    // what was reserved then, and at the end what the allocator says.
    assert!(most > 0);
    assert!(t.samples.iter().all(|s| s.pools.unwrap() <= s.reserved));
    let at_end: u64 = pools.iter().map(|p| p.reserved).sum();
    assert_eq!(*held.last().unwrap(), at_end);
    // A trace without pools has none in its samples (nor in its JSON).
    let mut b = TraceBuilder::new();
    b.segment(0, 1 << 20)
        .alloc(0, 512, 512, vramtrace_format::StackId::NONE);
    let mut plain = TimelineAnalysis::new(TimelineOptions::default());
    replay_trace(&b.finish(), &mut [&mut plain], &Window::default());
    let t = plain.into_report().unwrap();
    assert!(t.samples.iter().all(|s| s.pools.is_none()));
    assert!(!serde_json::to_string(&t.samples).unwrap().contains("pools"));
}

#[test]
fn events_fall_in_the_column_their_time_is_in_whichever_was_open() {
    let mut b = TraceBuilder::new();
    let site = b.site("f", "a.py", 1);
    // Columns of 1,000 ns from the first event's time (100 ns): every
    // allocation raises the allocated bytes, so each is a maximum of its
    // column when it comes.
    b.at(100).alloc(0x1000, 512, 512, site);
    b.at(1_099).alloc(0x2000, 512, 512, site); // the first column's last nanosecond
    b.at(1_100).alloc(0x3000, 512, 512, site); // the second column's first
    b.at(50).alloc(0x4000, 512, 512, site); // back in time, before the origin: the first
    b.at(2_099).alloc(0x5000, 512, 512, site); // the second column's last
    let trace = b.finish();
    let mut timeline = TimelineAnalysis::new(TimelineOptions::default());
    replay_trace(&trace, &mut [&mut timeline], &Window::default());
    let t = timeline.into_report().unwrap();
    let samples: Vec<(u64, u64)> = t.samples.iter().map(|s| (s.time_ns, s.allocated)).collect();
    // Each column's least and most: the first column's maximum is the
    // event that went back in time, the second's its last event.
    assert_eq!(
        samples,
        [(50, 2048), (100, 512), (1_100, 1536), (2_099, 2560)]
    );
}

#[test]
fn a_category_change_moves_the_samples_taken_since_its_block_was_born() {
    let mut b = TraceBuilder::tagged();
    let site = b.site("f", "a.py", 1);
    // One column (the events span less than its 1,000 ns): samples at
    // the first event (the least) and at each new most.
    b.at(1).alloc(0x1000, 4096, 4096, site);
    b.at(2).alloc(0x2000, 8192, 8192, site);
    b.at(3).free(0x2000, 8192);
    // Neither least nor most: no sample holds this block ...
    b.at(4).alloc(0x3000, 1024, 1024, site);
    // ... until this one, a new most, taken at the allocation of 0x4000.
    b.at(5).alloc(0x4000, 16384, 16384, site);
    b.at(6).tag(0x3000, Category::Parameter);
    b.at(6).tag(0x4000, Category::Parameter);
    // Born after every sample, and tagged before the next: it moves none.
    b.at(7).free(0x4000, 16384);
    b.at(8).alloc(0x5000, 512, 512, site);
    b.at(9).tag(0x5000, Category::Parameter);
    let trace = b.finish();
    let mut timeline = TimelineAnalysis::new(TimelineOptions {
        group_by: GroupBy::Category,
        ..TimelineOptions::default()
    });
    replay_trace(&trace, &mut [&mut timeline], &Window::default());
    let t = timeline.into_report().unwrap();
    let parameters = (t.categories.iter())
        .position(|c| c == Category::Parameter.label())
        .unwrap();
    let most = t.samples.iter().max_by_key(|s| s.allocated).unwrap();
    assert_eq!(most.allocated, 4096 + 1024 + 16384);
    assert_eq!(most.values[parameters], 1024 + 16384);
    let least = t.samples.iter().min_by_key(|s| s.allocated).unwrap();
    assert_eq!((least.allocated, least.values[parameters]), (4096, 0));
    let peak = t.peak.unwrap();
    assert_eq!(peak.category, Category::Parameter.label());
    assert_eq!(peak.category_bytes, 1024 + 16384);
}
