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
