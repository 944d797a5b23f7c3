use super::*;
use crate::analysis::limits::LimitWatch;
use crate::analysis::run_pass;
use crate::analysis::window::Window;
use crate::progress::NoProgress;
use crate::testing::TraceBuilder;
use vramtrace_format::TraceReader;

const MIB: u64 = 1 << 20;

/// Replays a whole trace; returns the state, its symbols and the limits.
fn replay(bytes: &[u8]) -> (ReplayState, SymbolTable, LimitWatch) {
    let mut reader = TraceReader::new(bytes).unwrap();
    let mut state = ReplayState::default();
    let mut watch = LimitWatch::new();
    run_pass(
        &mut reader,
        &mut state,
        &mut [&mut watch],
        &Window::ALL,
        &NoProgress,
    )
    .unwrap();
    (state, reader.symbols().clone(), watch)
}

/// Two 20 MiB segments: the first holds a live block of 6 MiB, a freed one
/// waiting on another stream (4 MiB) and 10 MiB free; the second is empty.
fn fragmented(b: &mut TraceBuilder) {
    let s = b.site("train", "train.py", 7);
    let w = b.site("other", "train.py", 9);
    b.segment(0x1000_0000, 20 * MIB)
        .alloc(0x1000_0000, 6 * MIB, 6 * MIB, s)
        .alloc(0x1000_0000 + 6 * MIB, 4 * MIB, 4 * MIB, w)
        .free_requested(0x1000_0000 + 6 * MIB, 4 * MIB)
        .segment(0x2000_0000, 20 * MIB);
}

#[test]
fn terms_sum_to_a_recorded_cap() {
    let mut b = TraceBuilder::new();
    b.limit(100 * MIB, 1000 * MIB);
    fragmented(&mut b);
    b.device_memory(900 * MIB, 1000 * MIB);
    let (state, symbols, watch) = replay(&b.finish());
    let limit = watch.in_force();
    assert_eq!(limit.unwrap().source, LimitSource::Cap);
    let w = waterfall_now(&state, &symbols, limit, Some(30 * MIB), watch.outside_now());
    assert_eq!(w.sums_to, SumsTo::Limit);
    assert_eq!(w.total_bytes, 100 * MIB);
    assert_eq!(w.sum(), 100 * MIB);
    let bytes = |n| w.term(n).unwrap().bytes;
    assert_eq!(bytes("allocated"), 6 * MIB);
    assert_eq!(bytes("waiting_for_streams"), 4 * MIB);
    assert_eq!(bytes("cached_in_used_segments"), 10 * MIB);
    assert_eq!(bytes("cached_in_empty_segments"), 20 * MIB);
    assert_eq!(bytes("free_under_limit"), 60 * MIB);
    // 100 MiB used on the card, 40 MiB of them reserved: 60 MiB outside,
    // shown beside the cap, not in its sum.
    assert_eq!(w.beside[0].name, "outside_allocator");
    assert_eq!(w.beside[0].bytes, 60 * MIB);
    assert_eq!(w.beside[0].known, Known::Measured);
    assert_eq!(w.fragmentation.segments_with_free, 1);
    assert_eq!(w.fragmentation.empty_segments, 1);
    assert_eq!(w.fragmentation.largest_free_block, 20 * MIB);
    assert_eq!(w.fragmentation.segment_bytes, Some(30 * MIB));
    assert_eq!(
        crate::print::words::waterfall::limit_line(&w),
        "100 MiB cap from set_per_process_memory_fraction(0.1000)"
    );
    assert_eq!(w.terms[0].sites[0].name, "train (train.py:7)");
    assert_eq!(
        w.terms[0].categories.iter().map(|p| p.bytes).sum::<u64>(),
        6 * MIB
    );
}

#[test]
fn without_a_cap_terms_sum_to_the_card() {
    let mut b = TraceBuilder::new();
    b.limit(1000 * MIB, 1000 * MIB);
    fragmented(&mut b);
    b.device_memory(900 * MIB, 1000 * MIB);
    let (state, symbols, watch) = replay(&b.finish());
    let w = waterfall_now(
        &state,
        &symbols,
        watch.in_force(),
        None,
        watch.outside_now(),
    );
    assert_eq!(w.sums_to, SumsTo::CardTotal);
    assert_eq!(w.sum(), 1000 * MIB);
    assert_eq!(w.term("free_on_device").unwrap().bytes, 900 * MIB);
    assert_eq!(w.term("outside_allocator").unwrap().bytes, 60 * MIB);
    assert!(w.beside.is_empty());
    assert!(w.notes.is_empty(), "{:?}", w.notes);
}

#[test]
fn a_card_whose_free_memory_was_less_than_the_cap_allowed_is_noted() {
    let mut b = TraceBuilder::new();
    b.limit(500 * MIB, 1000 * MIB);
    fragmented(&mut b);
    b.device_memory(100 * MIB, 1000 * MIB);
    let (state, symbols, watch) = replay(&b.finish());
    let w = waterfall_now(
        &state,
        &symbols,
        watch.in_force(),
        None,
        watch.outside_now(),
    );
    assert_eq!(w.sum(), 500 * MIB);
    assert!(
        w.notes
            .iter()
            .any(|n| matches!(n, Note::CardBinding { .. })),
        "{:?}",
        w.notes
    );
}

#[test]
fn without_any_limit_terms_sum_to_reserved() {
    let mut b = TraceBuilder::new();
    fragmented(&mut b);
    let (state, symbols, watch) = replay(&b.finish());
    let w = waterfall_now(
        &state,
        &symbols,
        watch.limit_now(),
        None,
        watch.outside_now(),
    );
    assert_eq!(w.sums_to, SumsTo::Reserved);
    assert_eq!(w.limit_source, "unknown");
    assert_eq!(w.sum(), 40 * MIB);
    assert_eq!(w.total_bytes, 40 * MIB);
    assert!(w.card.is_none());
}

/// An uncapped run that records no limit but samples the card (the HF
/// Trainer's, issue #44): the card's sampled total is the limit, and the
/// terms sum to it.
#[test]
fn without_a_recorded_limit_a_sampled_card_is_the_limit() {
    let mut b = TraceBuilder::new();
    fragmented(&mut b);
    b.device_memory(900 * MIB, 1000 * MIB);
    let (state, symbols, watch) = replay(&b.finish());
    let w = waterfall_now(
        &state,
        &symbols,
        watch.limit_now(),
        None,
        watch.outside_now(),
    );
    assert_eq!(w.sums_to, SumsTo::CardTotal);
    assert_eq!(w.limit_source, "card");
    assert_eq!(w.limit_known, Some(Known::Measured));
    assert_eq!(w.limit_bytes, Some(1000 * MIB));
    assert_eq!(w.sum(), 1000 * MIB);
    assert_eq!(w.term("free_on_device").unwrap().bytes, 900 * MIB);
    assert_eq!(w.term("outside_allocator").unwrap().bytes, 60 * MIB);
    assert!(
        w.notes
            .iter()
            .any(|n| matches!(n, Note::CardAsLimit { .. })),
        "{:?}",
        w.notes
    );
}

#[test]
fn a_cap_is_inferred_from_an_oom_while_the_device_had_room() {
    let mut b = TraceBuilder::new();
    let s = b.site("train", "train.py", 7);
    fragmented(&mut b);
    // 30 MiB asked, a 30 MiB segment: the device had 500 MiB free.
    b.segment_free(0x2000_0000, 20 * MIB)
        .oom_with_free(30 * MIB, 500 * MIB, s);
    let (state, symbols, watch) = replay(&b.finish());
    let report = watch.report_now();
    let limit = report.limit.unwrap();
    assert_eq!(limit.source, LimitSource::InferredCap);
    // At least the 40 MiB held before the release, below 20 + 30 MiB.
    assert_eq!(limit.low_bytes, Some(40 * MIB));
    assert_eq!(limit.high_bytes, Some(50 * MIB - 1));
    assert_eq!(limit.bytes, 40 * MIB);
    let w = waterfall_now(&state, &symbols, Some(limit), Some(30 * MIB), None);
    assert_eq!(w.sum(), 40 * MIB);
    assert_eq!(w.term("free_under_limit").unwrap().known, Known::Inferred);
    assert_eq!(w.term("cached_in_empty_segments").unwrap().bytes, 0);
    assert_eq!(w.limit_source, "inferred_cap");
}

#[test]
fn no_cap_is_inferred_when_the_device_itself_was_full() {
    let mut b = TraceBuilder::new();
    let s = b.site("train", "train.py", 7);
    fragmented(&mut b);
    b.oom_with_free(30 * MIB, 10 * MIB, s);
    let (_, _, watch) = replay(&b.finish());
    assert_eq!(watch.report_now().limit, None);
}

#[test]
fn bad_limits_and_samples_are_warnings() {
    let mut b = TraceBuilder::new();
    b.limit(0, 1000 * MIB)
        .limit(2000 * MIB, 1000 * MIB)
        .device_memory(2000 * MIB, 1000 * MIB);
    fragmented(&mut b);
    let (state, symbols, watch) = replay(&b.finish());
    let report = watch.report_now();
    assert_eq!(report.limit, None);
    assert_eq!(report.outside, None);
    assert_eq!(report.warnings.len(), 3, "{:?}", report.warnings);
    // The bad sample is not the card's state either.
    let w = waterfall_now(&state, &symbols, None, None, None);
    assert!(w.card.is_none());
    assert_eq!(w.sum(), 40 * MIB);
}

#[test]
fn a_limit_that_changes_is_warned_of_and_the_one_at_the_first_oom_used() {
    let mut b = TraceBuilder::new();
    let s = b.site("train", "train.py", 7);
    b.limit(100 * MIB, 1000 * MIB);
    fragmented(&mut b);
    b.oom(200 * MIB, s).limit(300 * MIB, 1000 * MIB);
    let (_, _, watch) = replay(&b.finish());
    let report = watch.report_now();
    assert_eq!(report.capacity(), Some(100 * MIB));
    assert_eq!(report.changes, 2);
    assert!(
        report.warnings[0].contains("changed 1 time "),
        "{:?}",
        report.warnings
    );
}

#[test]
fn outside_memory_is_the_used_memory_less_reserved_at_each_sample() {
    let mut b = TraceBuilder::new();
    b.device_memory(900 * MIB, 1000 * MIB); // 100 MiB used, none reserved
    fragmented(&mut b); // 40 MiB reserved
    b.device_memory(800 * MIB, 1000 * MIB) // 200 used: 160 outside
        .device_memory(850 * MIB, 1000 * MIB); // 150 used: 110 outside
    let (_, _, watch) = replay(&b.finish());
    let o = watch.report_now().outside.unwrap();
    assert_eq!(o.at_start_bytes, 100 * MIB);
    assert_eq!(o.max_bytes, 160 * MIB);
    assert_eq!(o.at_end_bytes, 110 * MIB);
    assert_eq!(o.samples, 3);
}
