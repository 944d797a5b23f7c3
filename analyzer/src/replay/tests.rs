use super::*;
use crate::testing::TraceBuilder;
use categories::Class;
use std::collections::BTreeMap;
use vramtrace_format::{BlockState, SegmentState, TraceReader};

pub(super) fn replay(bytes: &[u8]) -> (ReplayState, Vec<Applied>) {
    let mut reader = TraceReader::new(bytes).unwrap();
    let mut state = ReplayState::default();
    if let Some(init) = reader.initial_state().cloned() {
        state.load_initial(&init, reader.symbols());
    }
    let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
    let applied = events
        .iter()
        .enumerate()
        .map(|(i, e)| state.apply(i as u64, e, reader.symbols()))
        .collect();
    (state, applied)
}

#[test]
fn totals_follow_the_block_life() {
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.segment(0, 4096)
        .alloc(0, 512, 500, s)
        .alloc(512, 1024, 1000, s);
    b.free_requested(0, 512);
    let bytes = b.finish();
    let (state, applied) = replay(&bytes);
    let t = state.totals();
    assert_eq!(t.reserved, 4096);
    // PyTorch's meanings: the freed block no longer counts as allocated,
    // but stays active until its free completes.
    assert_eq!(t.allocated, 1024);
    assert_eq!(t.requested, 1000);
    assert_eq!(t.active, 1536);
    assert_eq!(t.live_blocks, 2);
    assert_eq!(state.segments().next().unwrap().live_blocks, 2);
    assert!(matches!(applied[3], Applied::FreeRequested(a) if a.addr == 0 && a.free_requested));
    assert_eq!(state.inconsistency_total(), 0);

    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.segment(0, 4096)
        .alloc(0, 512, 500, s)
        .free(0, 512)
        .segment_free(0, 4096);
    let (state, applied) = replay(&b.finish());
    assert_eq!(*state.totals(), Totals::default());
    assert!(matches!(applied[3], Applied::FreeCompleted(a) if a.size == 512));
    assert_eq!(state.site_live()[1], SiteLive::default());
}

#[test]
fn starts_from_the_initial_state() {
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.initial_state(&InitialState {
        segments: vec![SegmentState {
            addr: 1 << 20,
            size: 8192,
            blocks: vec![
                BlockState {
                    addr: 1 << 20,
                    size: 4096,
                    requested: 4000,
                    status: BlockStatus::Allocated,
                    stack: s,
                },
                BlockState {
                    addr: (1 << 20) + 4096,
                    size: 2048,
                    requested: 2048,
                    status: BlockStatus::PendingFree,
                    stack: s,
                },
                BlockState {
                    addr: (1 << 20) + 6144,
                    size: 2048,
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
    });
    b.free_completed((1 << 20) + 4096, 2048);
    let (state, _) = replay(&b.finish());
    let t = state.totals();
    assert_eq!(t.reserved, 8192);
    assert_eq!(t.allocated, 4096);
    assert_eq!(t.requested, 4000);
    assert_eq!(t.active, 4096);
    assert_eq!(state.inconsistency_total(), 0);
    let space = state.free_space();
    assert_eq!(space.free_bytes, 4096);
    assert_eq!(space.largest_free_block, 4096);
}

#[test]
fn expandable_segments_map_and_unmap() {
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.map(0, 2 << 20).map(2 << 20, 2 << 20);
    b.alloc(0, 3 << 20, 3 << 20, s);
    b.map(4 << 20, 2 << 20);
    let bytes = b.finish();
    let (state, _) = replay(&bytes);
    assert_eq!(state.totals().reserved, 6 << 20);
    assert_eq!(state.totals().segments, 1);
    assert_eq!(state.free_space().largest_free_block, 3 << 20);

    let mut b = TraceBuilder::new();
    b.map(0, 2 << 20)
        .map(2 << 20, 2 << 20)
        .alloc(0, 1 << 20, 1 << 20, s);
    b.unmap(2 << 20, 2 << 20);
    let (state, _) = replay(&b.finish());
    assert_eq!(state.totals().reserved, 2 << 20);
    assert_eq!(state.segments().len(), 1);
    assert_eq!(state.segments().next().unwrap().live_blocks, 1);
    assert_eq!(state.inconsistency_total(), 0);
}

/// The segment found last is looked at first: a segment freed and another
/// reserved at the same start, shorter, must not take a block past its end
/// (nor one freed, the block's count).
#[test]
fn the_segment_found_last_is_forgotten_when_segments_change() {
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.segment(0, 4096)
        .alloc(2048, 512, 512, s)
        .free(2048, 512)
        .segment_free(0, 4096)
        .segment(0, 1024)
        .alloc(2048, 512, 512, s);
    let (state, applied) = replay(&b.finish());
    assert_eq!(state.segments().next().unwrap().live_blocks, 0);
    assert_eq!(state.segments().next().unwrap().live_bytes, 0);
    assert!(matches!(applied.last(), Some(Applied::Alloc(_))));
    assert_eq!(
        state.inconsistency_count(InconsistencyKind::AllocOutsideSegment),
        1
    );
    assert_eq!(state.inconsistency_total(), 1);

    // Merged mapped ranges: the block goes to the merged segment.
    let mut b = TraceBuilder::new();
    b.map(0, 2 << 20)
        .alloc(0, 1 << 20, 1 << 20, s)
        .map(2 << 20, 2 << 20)
        .alloc(3 << 20, 1 << 20, 1 << 20, s)
        .free(0, 1 << 20);
    let (state, _) = replay(&b.finish());
    assert_eq!(state.segments().len(), 1);
    assert_eq!(state.segments().next().unwrap().live_blocks, 1);
    assert_eq!(state.segments().next().unwrap().live_bytes, 1 << 20);
    assert_eq!(state.inconsistency_total(), 0);
}

mod random {
    use super::*;
    use proptest::prelude::*;
    use vramtrace_format::SegmentEvent;

    fn event(op: u8, slot: u64, size: u64) -> EventData {
        let block = BlockEvent {
            addr: slot * 256,
            size,
            requested: size / 2,
            ..Default::default()
        };
        let segment = SegmentEvent {
            addr: (slot / 4) * 1024,
            size: 1024 * (1 + size % 3),
            ..Default::default()
        };
        match op % 9 {
            0 | 1 => EventData::Alloc(block),
            2 => EventData::FreeRequested(block),
            3 => EventData::FreeCompleted(block),
            4 => EventData::SegmentAlloc(segment),
            5 => EventData::SegmentFree(segment),
            6 => EventData::SegmentMap(segment),
            7 => EventData::SegmentUnmap(segment),
            _ => {
                if size.is_multiple_of(2) {
                    EventData::PhaseBegin {
                        name: StringId(slot as u32 % 3),
                        thread: size.is_multiple_of(3) as u32,
                    }
                } else {
                    EventData::PhaseEnd {
                        name: StringId(slot as u32 % 3),
                        thread: (size % 3 == 1) as u32,
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the events, replay does not panic and its totals agree
        /// with its live blocks and segments.
        #[test]
        fn totals_match_the_state(ops in proptest::collection::vec((0u8..9, 0u64..32, 1u64..300), 0..200)) {
            let symbols = SymbolTable::new();
            let mut state = ReplayState::default();
            for (i, (op, slot, size)) in ops.into_iter().enumerate() {
                let e = Event { time_ns: i as u64, data: event(op, slot, size) };
                state.apply(i as u64, &e, &symbols);
                let t = *state.totals();
                let held = || state.live().filter(|a| !a.free_requested);
                prop_assert_eq!(t.allocated, held().map(|a| a.size).sum::<u64>());
                prop_assert_eq!(t.requested, held().map(|a| a.requested).sum::<u64>());
                prop_assert_eq!(t.active, state.live().map(|a| a.size).sum::<u64>());
                prop_assert_eq!(t.live_blocks, state.live().count() as u64);
                let segments: Vec<Segment> = state.segments().copied().collect();
                prop_assert_eq!(t.reserved, segments.iter().map(Segment::size).sum::<u64>());
                prop_assert_eq!(t.segments, segments.len() as u64);
                prop_assert!(segments.windows(2).all(|w| w[0].end <= w[1].start));
                for seg in state.segments() {
                    let inside: Vec<_> = state
                        .live()
                        .filter(|a| a.addr >= seg.start && a.addr < seg.end)
                        .collect();
                    prop_assert_eq!(seg.live_blocks, inside.len() as u64, "{:?}", seg);
                    prop_assert_eq!(seg.live_bytes, inside.iter().map(|a| a.size).sum::<u64>());
                }
                let space = state.free_space();
                prop_assert!(space.largest_free_block <= space.free_bytes.max(t.reserved));
                prop_assert!(space.free_bytes <= t.reserved);
            }
        }
    }
}

/// Segments arriving in descending address order (each one inserted before
/// all the others) are found, merged and freed as in ascending order.
#[test]
fn segments_in_any_order() {
    const N: u64 = 20_000;
    for descending in [false, true] {
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        let order: Vec<u64> = if descending {
            (0..N).rev().collect()
        } else {
            (0..N).collect()
        };
        for &i in &order {
            b.segment(i << 21, 1 << 20).alloc(i << 21, 512, 512, s);
        }
        // Expandable ranges merging with neighbours on both sides.
        let base = N << 21;
        b.map(base, 4096)
            .map(base + 8192, 4096)
            .map(base + 4096, 4096);
        for &i in &order {
            b.free(i << 21, 512).segment_free(i << 21, 1 << 20);
        }
        let (state, _) = replay(&b.finish());
        assert_eq!(state.inconsistency_total(), 0);
        let segments: Vec<Segment> = state.segments().copied().collect();
        assert_eq!(segments.len(), 1);
        assert_eq!(
            (segments[0].start, segments[0].end),
            (base, base + 3 * 4096)
        );
        assert_eq!(state.totals().reserved, 3 * 4096);
        assert_eq!(state.totals().segments, 1);
    }
}

/// Replays `bytes` with the categories its header asks for, settling what
/// is open at the end, and returns the state and every block's last class
/// by allocation (`born`), freed or not.
fn replay_categories(bytes: &[u8]) -> (ReplayState, BTreeMap<u64, (u64, Class)>) {
    use categories::CategoryOptions;
    let mut reader = TraceReader::new(bytes).unwrap();
    let mut state =
        ReplayState::default().with_categories(CategoryOptions::of_header(reader.header()));
    let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
    let mut classes = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let applied = state.apply(i as u64, e, reader.symbols());
        if let Some(a) = applied.released() {
            classes.insert(a.born, (a.size, a.class));
        }
        check_category_totals(&state);
    }
    state.settle_at_end();
    for a in state.live().filter(|a| !a.free_requested) {
        classes.insert(a.born, (a.size, a.class));
    }
    check_category_totals(&state);
    (state, classes)
}

fn check_category_totals(state: &ReplayState) {
    assert_eq!(state.categories().total(), state.totals().allocated);
    let by_site: u64 = state.site_categories().iter().flatten().sum();
    assert_eq!(by_site, state.totals().allocated);
}

/// The `born` of the `nth` allocation at `addr`.
fn born_at(bytes: &[u8], addr: u64, nth: usize) -> u64 {
    let mut reader = TraceReader::new(bytes).unwrap();
    let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.data, EventData::Alloc(b) if b.addr == addr))
        .nth(nth)
        .map(|(i, _)| i as u64 + 1)
        .unwrap()
}

fn category_of(classes: &BTreeMap<u64, (u64, Class)>, born: u64) -> (Category, bool) {
    let class = classes[&born].1;
    (class.category, class.exact)
}

#[test]
fn categories_inferred_from_a_training_step() {
    let mut b = TraceBuilder::new();
    let init = b.stack(&[
        (
            "_apply",
            "/venv/site-packages/torch/nn/modules/module.py",
            900,
        ),
        ("main", "train.py", 10),
    ]);
    let fwd = b.site("forward", "model.py", 20);
    let data = b.site("main", "train.py", 30);
    let node = b.stack(&[("MmBackward0", "", 0)]);
    let adam = b.stack(&[
        (
            "_init_group",
            "/venv/site-packages/torch/optim/adam.py",
            150,
        ),
        ("main", "train.py", 40),
    ]);
    b.segment(0, 1 << 30);
    // Events 1..: parameters, then two iterations.
    b.alloc(0x1000, 4096, 4096, init); // born 2: a parameter, by its frames
    for it in 0..2u64 {
        let base = 0x10_0000 * (it + 1);
        b.alloc(base, 512, 512, data); // the batch
        if it > 0 {
            b.free(0x10_0000 * it, 512); // the last one
        }
        b.alloc(base + 0x1000, 8192, 8192, fwd); // saved for backward
        b.alloc(base + 0x4000, 1024, 1024, fwd)
            .free(base + 0x4000, 1024); // a temporary
        b.on_thread(1);
        b.alloc(base + 0x8000, 4096, 4096, node); // the parameter's gradient
        b.alloc(base + 0xc000, 2048, 2048, node)
            .free(base + 0xc000, 2048); // a grad's temporary
        b.free(base + 0x1000, 8192); // the engine frees the saved tensor
        b.on_thread(0);
        b.begin("Optimizer.step#Adam.step");
        if it == 0 {
            b.alloc(0x2000, 4096, 4096, adam); // state, made at the first step
        }
        b.alloc(base + 0x20000, 4096, 4096, adam)
            .free(base + 0x20000, 4096);
        b.end("Optimizer.step#Adam.step");
        b.free(base + 0x8000, 4096); // zero_grad(set_to_none=True)
    }
    let bytes = b.finish();
    let (state, classes) = replay_categories(&bytes);
    let born_at = |addr, nth| born_at(&bytes, addr, nth);
    let inferred = |c| (c, false);
    assert_eq!(
        category_of(&classes, born_at(0x1000, 0)),
        inferred(Category::Parameter)
    );
    assert_eq!(
        category_of(&classes, born_at(0x2000, 0)),
        inferred(Category::OptimizerState)
    );
    for it in 0..2u64 {
        let base = 0x10_0000 * (it + 1);
        assert_eq!(
            category_of(&classes, born_at(base, 0)),
            inferred(Category::Other)
        );
        let act = born_at(base + 0x1000, 0);
        assert_eq!(category_of(&classes, act), inferred(Category::Activation));
        let tmp = born_at(base + 0x4000, 0);
        assert_eq!(category_of(&classes, tmp), inferred(Category::Temporary));
        let grad = born_at(base + 0x8000, 0);
        assert_eq!(category_of(&classes, grad), inferred(Category::Gradient));
        let grad_tmp = born_at(base + 0xc000, 0);
        assert_eq!(
            category_of(&classes, grad_tmp),
            inferred(Category::Temporary)
        );
        let step_tmp = born_at(base + 0x20000, 0);
        assert_eq!(
            category_of(&classes, step_tmp),
            inferred(Category::Temporary)
        );
    }
    let end = state.categories();
    assert_eq!(end.bytes(Category::Parameter), 4096);
    assert_eq!(end.bytes(Category::OptimizerState), 4096);
    assert_eq!(end.bytes(Category::Other), 512, "the last batch");
    assert_eq!(end.total_exact(), 0);
}

#[test]
fn set_up_blocks_are_parameters_when_a_gradient_has_their_size() {
    // No frames name the parameters: they are blocks made before the
    // first step that outlive a second one, with a gradient of their size.
    let mut b = TraceBuilder::new();
    let s = b.site("main", "train.py", 1);
    b.segment(0, 1 << 30);
    b.alloc(0x1000, 4096, 4000, s); // a parameter
    b.alloc(0x3000, 1 << 20, 1 << 20, s); // a workspace, kept for good
    for it in 0..3u64 {
        let base = 0x10_0000 * (it + 1);
        b.alloc(base, 512, 512, s); // the batch, freed next iteration
        if it > 0 {
            b.free(0x10_0000 * it, 512);
        }
        b.on_thread(1)
            .alloc(base + 0x8000, 4096, 4000, s)
            .on_thread(0);
        b.begin("optimizer").end("optimizer");
        b.free(base + 0x8000, 4096);
    }
    let (state, _) = replay_categories(&b.finish());
    let c = state.categories();
    assert_eq!(c.bytes(Category::Parameter), 4096);
    assert_eq!(c.bytes(Category::Other), (1 << 20) + 512);
}

#[test]
fn tags_hold_from_the_allocation_and_rule_in_a_tagged_run() {
    let mut b = TraceBuilder::tagged();
    let s = b.site("main", "train.py", 1);
    b.segment(0, 1 << 30);
    b.alloc(0x1000, 4096, 4096, s); // the parameter, tagged at the step
    b.alloc(0x3000, 8192, 8192, s); // an untagged block kept for good
    b.on_thread(1).alloc(0x8000, 4096, 4096, s).on_thread(0); // a gradient
    b.on_thread(1).alloc(0x9000, 1024, 1024, s).on_thread(0); // not one
    b.begin("Optimizer.step#SGD.step");
    b.alloc(0xa000, 4096, 4096, s); // the momentum buffer
    b.tag(0x1000, Category::Parameter)
        .tag(0x8000, Category::Gradient)
        .tag(0xa000, Category::OptimizerState);
    b.end("Optimizer.step#SGD.step");
    b.tag(0x7777, Category::Buffer); // no block there
    b.free(0x8000, 4096);
    let bytes = b.finish();
    let (state, classes) = replay_categories(&bytes);
    let of = |addr| category_of(&classes, born_at(&bytes, addr, 0));
    assert_eq!(of(0x1000), (Category::Parameter, true));
    assert_eq!(of(0x3000), (Category::Other, false));
    assert_eq!(of(0x8000), (Category::Gradient, true));
    assert_eq!(of(0x9000), (Category::Other, false));
    assert_eq!(of(0xa000), (Category::OptimizerState, true));
    assert_eq!(
        state.inconsistency_count(InconsistencyKind::TagWithoutBlock),
        1
    );
    let c = state.categories();
    assert_eq!(c.exact_bytes(Category::Parameter), 4096);
    assert_eq!(c.exact_bytes(Category::OptimizerState), 4096);
}

#[test]
fn an_unknown_category_reads_as_other_and_is_counted() {
    let mut b = TraceBuilder::new();
    let s = b.site("main", "train.py", 1);
    b.segment(0, 1 << 20).alloc(0, 512, 512, s);
    let (bytes, _) = {
        let mut w = b;
        // A tag with a code from a later version.
        w.tag(0, Category::Parameter);
        w.finish_symbols()
    };
    // Rewrite the tag's code: find the one tag and give it code 42.
    let mut reader = TraceReader::new(&bytes[..]).unwrap();
    let mut events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
    for e in &mut events {
        if let EventData::Tag(t) = &mut e.data {
            t.code = 42;
        }
    }
    let mut state = ReplayState::default();
    for (i, e) in events.iter().enumerate() {
        state.apply(i as u64, e, reader.symbols());
    }
    assert_eq!(
        state.inconsistency_count(InconsistencyKind::UnknownCategory),
        1
    );
    assert_eq!(state.categories().bytes(Category::Other), 512);
    assert_eq!(state.categories().exact_bytes(Category::Other), 512);
}

/// Before any step, the waiting list is emptied at its bound (twice the
/// live blocks, and 1,024) rather than filtered: it stays bounded.
#[test]
fn a_trace_without_steps_keeps_its_waiting_list_bounded() {
    let mut b = TraceBuilder::new();
    let s = b.site("main", "train.py", 1);
    b.segment(0, 1 << 30);
    for _ in 0..20_000u64 {
        b.alloc(0, 512, 512, s).free(0, 512);
    }
    let bytes = b.finish();
    let mut reader = TraceReader::new(&bytes[..]).unwrap();
    let mut state = ReplayState::default();
    let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
    for (i, e) in events.iter().enumerate() {
        state.apply(i as u64, e, reader.symbols());
        // The bound is kept as a block is allocated (its free may leave the
        // list above it until the next allocation).
        if matches!(e.data, EventData::Alloc(_)) {
            assert!(state.classifier.waiting.len() <= 2 * state.live.len() + 1024);
        }
    }
    assert!(!state.classifier.waiting_kept);
}

/// Once a step has ended, the blocks born since wait for the next one in a
/// list, kept bounded when no step comes (evaluation after training).
#[test]
fn a_trace_whose_steps_stop_keeps_its_waiting_list_bounded() {
    let mut b = TraceBuilder::new();
    let s = b.site("main", "train.py", 1);
    b.segment(0, 1 << 30);
    b.begin("Optimizer.step#SGD.step");
    b.end("Optimizer.step#SGD.step");
    for i in 0..20_000u64 {
        b.alloc(0, 512, 512, s).free(0, 512);
        let _ = i;
    }
    let bytes = b.finish();
    let mut reader = TraceReader::new(&bytes[..]).unwrap();
    let mut state = ReplayState::default();
    let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
    let mut allocs = 0;
    for (i, e) in events.iter().enumerate() {
        state.apply(i as u64, e, reader.symbols());
        // The bound is kept as a block is allocated (its free may leave the
        // list above it until the next allocation).
        if matches!(e.data, EventData::Alloc(_)) {
            allocs += 1;
            assert!(state.classifier.waiting.len() <= 2 * state.live.len() + 1024);
        }
    }
    assert_eq!(allocs, 20_000);
    // The list was kept (and filtered), not left empty.
    assert!(state.classifier.waiting_kept);
    assert!(!state.classifier.waiting.is_empty());
}

/// Before the first step's end the waiting list is not kept whole (a
/// trace without steps empties it at its bound rather than filtering it);
/// that end finds the blocks waiting for it in the live map, and settles them in the order of their allocations, as the
/// list held them: the changes it lists, and the set-up blocks it sets
/// aside, come in that order.
#[test]
fn the_first_step_end_settles_the_live_blocks_in_allocation_order() {
    let n = 300u64;
    let trace = |step_ends: bool| {
        let mut b = TraceBuilder::new();
        let forward = b.site("forward", "model.py", 20);
        let init = b.site("reset_parameters", "model.py", 5);
        b.segment(0, 1 << 30);
        // Named by its frames: settled at birth, never waiting.
        b.alloc(0x3f_0000, 4096, 4096, init);
        // Addresses falling as the blocks are born, so that the map's
        // order is not theirs; every other one freed before the step.
        for i in 0..n {
            b.alloc(0x20_0000 - i * 0x1000, 512, 512, forward);
        }
        for i in (0..n).step_by(2) {
            b.free(0x20_0000 - i * 0x1000, 512);
        }
        b.begin("Optimizer.step#SGD.step");
        if step_ends {
            b.end("Optimizer.step#SGD.step");
        }
        b.finish()
    };
    // The list is not kept whole before the step's end.
    let (before, _) = replay(&trace(false));
    assert!(!before.classifier.waiting_kept);
    let (state, _) = replay(&trace(true));
    assert!(state.classifier.waiting_kept);
    // The survivors are set-up blocks (born in the forward before any
    // step, named by no frame): set aside for the second step, in the
    // order they were born, which is that of falling addresses.
    let survivors: Vec<u64> = (1..n).step_by(2).map(|i| 0x20_0000 - i * 0x1000).collect();
    let setup: Vec<u64> = state
        .classifier
        .setup
        .iter()
        .map(|&(addr, _)| addr)
        .collect();
    assert_eq!(setup, survivors);
    let born: Vec<u64> = state
        .classifier
        .setup
        .iter()
        .map(|&(_, born)| born)
        .collect();
    assert!(born.is_sorted());
}

/// The waiting list's bound drops only blocks that wait no more: the block
/// whose allocation reaches the bound is live and waits for the step's end
/// like any other (it was once dropped, checked before it was live).
#[test]
fn the_waiting_lists_bound_keeps_the_block_that_reached_it() {
    let settled_at_step_end = |freed: u64| {
        let mut b = TraceBuilder::new();
        let s = b.site("forward", "model.py", 20);
        b.segment(0, 1 << 30);
        b.begin("Optimizer.step#SGD.step");
        b.end("Optimizer.step#SGD.step");
        // Blocks born and freed within the step: they wait, until the bound
        // (twice the live blocks, and 1,024) drops them.
        for _ in 0..freed {
            b.alloc(0, 512, 512, s).free(0, 512);
        }
        b.alloc(0x10_0000, 512, 512, s);
        b.begin("Optimizer.step#SGD.step");
        b.end("Optimizer.step#SGD.step");
        let (state, _) = replay(&b.finish());
        state.live.get(0x10_0000).unwrap().birth.settled
    };
    assert!(settled_at_step_end(10));
    // The block's allocation makes the list 1,025 long: the bound applies.
    assert!(settled_at_step_end(1024));
}

/// A step's end walks the blocks waiting for it and hands the list back
/// empty with its buffer (dropped, it was allocated and grown afresh every
/// step), and a phase name that ended keeps its emptied list of open depths
/// for its next phase.
#[test]
fn a_step_end_keeps_its_buffers_for_the_next_step() {
    let mut b = TraceBuilder::new();
    let s = b.site("forward", "model.py", 20);
    b.segment(0, 1 << 30);
    for it in 0..3u64 {
        b.alloc(0x1000 * (it + 1), 512, 512, s);
        b.begin("Optimizer.step#SGD.step");
        b.end("Optimizer.step#SGD.step");
    }
    let bytes = b.finish();
    let (state, _) = replay(&bytes);
    assert!(state.classifier.waiting.is_empty());
    assert!(state.classifier.waiting.capacity() > 0);
    assert_eq!(state.open_by_name.len(), 1);
    assert!(state.open_by_name.values().all(Vec::is_empty));
    assert!(state.open_phases().is_empty());
}

/// Pools as the replay follows them: a segment's pool, its live bytes, a
/// graph's capture into a pool named only at its end, and the three
/// contradictions (a capture never ended, a pool used after its release, a
/// pool let go that nothing began), each counted once.
#[test]
fn pools_are_followed_and_their_contradictions_counted() {
    use vramtrace_format::{PoolAction, PoolEvent, PoolId, SegmentPoolEvent};
    let pool = |action, id, stream| EventData::Pool(PoolEvent::new(action, id, 0, stream));
    let segment_pool = |addr, id| {
        EventData::SegmentPool(SegmentPoolEvent {
            addr,
            pool: id,
            device: 0,
            thread: 0,
        })
    };
    let graph = PoolId(1, 0);
    let mut t = TraceBuilder::new();
    let s = t.site("capture", "serve.py", 44);
    // A capture into a pool of the graph's own: named at its end.
    t.event(pool(PoolAction::CaptureBegin, PoolId::DEFAULT, 7))
        .segment(0x1000_0000, 20 << 20)
        .event(segment_pool(0x1000_0000, graph))
        .alloc(0x1000_0000, 4 << 20, 4 << 20, s)
        .alloc(0x1040_0000, 2 << 20, 2 << 20, s)
        .free(0x1040_0000, 2 << 20)
        .event(pool(PoolAction::CaptureEnd, graph, 7));
    // The graph goes; its pool's memory is returned; then a segment
    // reserved for the pool anyway, a release of a pool never seen, and a
    // capture that never ends.
    t.free(0x1000_0000, 4 << 20)
        .event(pool(PoolAction::Release, graph, 0))
        .segment_free(0x1000_0000, 20 << 20)
        .segment(0x2000_0000, 2 << 20)
        .event(segment_pool(0x2000_0000, graph))
        .event(pool(PoolAction::Release, PoolId(0, 9), 0))
        .event(pool(PoolAction::CaptureBegin, PoolId(0, 3), 7));
    let (mut state, _) = replay(&t.finish());
    let p = state.pools()[0];
    assert_eq!(p.id, graph);
    assert_eq!((p.captures, p.open, p.users), (1, 0, 0));
    assert!(p.released && p.followed);
    assert_eq!(p.peak_reserved, 20 << 20);
    assert_eq!((p.reserved, p.live), (2 << 20, 0));
    state.settle_at_end();
    for kind in [
        InconsistencyKind::PoolUsedAfterRelease,
        InconsistencyKind::UnknownPool,
        InconsistencyKind::CaptureNeverEnded,
    ] {
        assert_eq!(state.inconsistency_count(kind), 1, "{kind:?}");
    }
}

#[test]
fn a_block_too_large_to_add_may_still_replace_the_live_one_at_its_address() {
    // Sizes no allocator records (the pass leaves such events out) but a
    // state fed directly takes: totals near 2^64.
    let huge = u64::MAX - 10;
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.alloc(0, huge, huge, s)
        // Added, the sum would pass 2^64; in place of the block at 0 it
        // does not: it replaces it.
        .alloc(0, huge + 5, huge + 5, s)
        // Beside it, the sum passes 2^64 either way.
        .alloc(1 << 40, 20, 20, s);
    let (state, applied) = replay(&b.finish());
    assert!(matches!(applied[0], Applied::Alloc(_)));
    assert!(matches!(applied[1], Applied::Alloc(a) if a.size == huge + 5));
    assert_eq!(applied[2], Applied::Inconsistent);
    assert_eq!(state.totals().allocated, huge + 5);
    assert_eq!(state.totals().live_blocks, 1);
    assert_eq!(
        state.inconsistency_count(InconsistencyKind::AllocOverLive),
        1
    );
    assert_eq!(
        state.inconsistency_count(InconsistencyKind::ImplausibleSize),
        1
    );
}
