//! The summary checked against brute-force replays of random traces.

use super::tests::{free_space_at, summarize, summarize_sites, summarize_with};
use super::*;
use crate::analysis::window::Window;
use crate::replay::categories::dominant;
use crate::sites::SiteId;
use crate::testing::TraceBuilder;
use proptest::prelude::*;
use rustc_hash::FxHashMap;
use vramtrace_format::{Event, TraceReader};

/// One operation of a random trace (see [`mixed_trace`]).
#[derive(Clone, Copy)]
enum Op {
    Alloc,
    Free,
    FreeRequested,
    FreeCompleted,
    Segment,
    /// The optimizer's step phase begins, or ends if it had begun.
    OptimizerStep,
    Tag,
}

/// A trace of `ops` (operation, slot, size, which), tagged or not, after one
/// segment of `first_segment` bytes at 0 if given. Blocks are at `slot`
/// MiB, allocated at one of four stacks of different kinds by `which` (the
/// user's site, an autograd node, the optimizer's step, a module's
/// `_apply`), tagged with a category by `which` and `slot`; segments are at
/// `64 + slot` GiB, `size` MiB long. Operations with `which == 1` happen on a
/// second thread.
fn mixed_trace(
    tagged: bool,
    first_segment: Option<u64>,
    ops: impl IntoIterator<Item = (Op, u64, u64, usize)>,
) -> Vec<u8> {
    use crate::replay::categories::Category;
    let mut b = if tagged {
        TraceBuilder::tagged()
    } else {
        TraceBuilder::new()
    };
    let stacks = [
        b.site("forward", "model.py", 1),
        b.stack(&[("MmBackward0", "", 0)]),
        b.stack(&[
            ("step", "/site-packages/torch/optim/adam.py", 9),
            ("main", "t.py", 3),
        ]),
        b.stack(&[("_apply", "/site-packages/torch/nn/modules/module.py", 9)]),
    ];
    if let Some(size) = first_segment {
        b.segment(0, size);
    }
    let mut in_step = false;
    for (op, slot, size, which) in ops {
        let addr = slot << 20;
        b.on_thread(u32::from(which == 1));
        match op {
            Op::Alloc => {
                b.alloc(addr, size, size, stacks[which]);
            }
            Op::Free => {
                b.free(addr, 0);
            }
            Op::FreeRequested => {
                b.free_requested(addr, 0);
            }
            Op::FreeCompleted => {
                b.free_completed(addr, 0);
            }
            Op::Segment => {
                b.segment((64 + slot) << 30, size << 20);
            }
            Op::OptimizerStep => {
                let name = "Optimizer.step#Adam.step";
                if in_step {
                    b.end(name);
                } else {
                    b.begin(name);
                }
                in_step = !in_step;
            }
            Op::Tag => {
                b.tag(addr, Category::ALL[which + slot as usize % 3]);
            }
        }
    }
    b.on_thread(0);
    b.finish()
}

/// The block size of the allocation replayed as event `born - 1`.
fn block_size(events: &[Event], born: u64) -> u64 {
    match events[born as usize - 1].data {
        EventData::Alloc(b) => b.size,
        _ => 0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The lazily copied per-site table is the one at the peak's event.
    #[test]
    fn sites_at_peak_match_a_brute_force_replay(
        ops in proptest::collection::vec((any::<bool>(), 0u64..12, 1u64..5000, 0usize..3), 1..150),
    ) {
        let mut b = TraceBuilder::new();
        let stacks = [b.site("a", "a.py", 1), b.site("b", "b.py", 2), b.site("c", "c.py", 3)];
        b.segment(0, 1 << 30);
        for (alloc, slot, size, site) in ops {
            if alloc {
                b.alloc(slot << 20, size, size, stacks[site]);
            } else {
                b.free(slot << 20, 0);
            }
        }
        let bytes = b.finish();
        let r = summarize(&bytes, Window::ALL);

        let mut reader = TraceReader::new(&bytes[..]).unwrap();
        let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
        let mut state = ReplayState::default();
        let mut best = (0u64, Vec::new());
        for (i, e) in events.iter().enumerate() {
            state.apply(i as u64, e, reader.symbols());
            if state.totals().allocated > best.0 {
                let mut sites: Vec<(String, u64)> = state
                    .site_live()
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.blocks > 0)
                    .map(|(i, s)| (state.sites().name(SiteId(i as u32), reader.symbols()), s.bytes))
                    .collect();
                sites.sort();
                best = (state.totals().allocated, sites);
            }
        }
        prop_assert_eq!(r.peak_allocated_bytes, best.0);
        let mut got: Vec<(String, u64)> = r
            .top_sites_at_peak
            .iter()
            .map(|s| (s.site.site.clone(), s.bytes))
            .collect();
        got.sort();
        prop_assert_eq!(got, best.1);
    }

    /// The categories at the allocated and reserved peaks (and each top
    /// site's) are those of the blocks live then, as the whole pass
    /// settles them: tags and frees after a peak reach back to it.
    #[test]
    fn categories_at_peaks_match_a_brute_force_replay(
        ops in proptest::collection::vec((0u8..12, 0u64..10, 1u64..5000, 0usize..4), 1..160),
        tagged in any::<bool>(),
    ) {
        use crate::replay::categories::{Category, CategoryOptions, Class};
        let ops = ops.into_iter().map(|(op, slot, size, which)| {
            let op = match op {
                0..=3 => Op::Alloc,
                4 | 5 => Op::Free,
                6 => Op::FreeRequested,
                7 => Op::Segment,
                8 | 9 => Op::OptimizerStep,
                _ => Op::Tag,
            };
            (op, slot, size, which)
        });
        let bytes = mixed_trace(tagged, None, ops);
        let r = summarize(&bytes, Window::ALL);

        let mut reader = TraceReader::new(&bytes[..]).unwrap();
        let options = CategoryOptions::of_header(reader.header());
        let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
        let mut state = ReplayState::default().with_categories(options);
        // Each block's life (born, released) and site; its final class.
        let mut lives: Vec<(u64, u64, SiteId)> = Vec::new();
        let mut class: FxHashMap<u64, Class> = FxHashMap::default();
        let (mut peak, mut peak_at) = (0u64, 0u64);
        let (mut reserved, mut reserved_at) = (0u64, 0u64);
        for (i, e) in events.iter().enumerate() {
            match state.apply(i as u64, e, reader.symbols()) {
                Applied::Alloc(_) if state.totals().allocated > peak => {
                    (peak, peak_at) = (state.totals().allocated, i as u64 + 1);
                }
                Applied::Segment if state.totals().reserved > reserved => {
                    (reserved, reserved_at) = (state.totals().reserved, i as u64 + 1);
                }
                applied => {
                    if let Some(a) = applied.released() {
                        lives.push((a.born, i as u64 + 1, a.site));
                        class.insert(a.born, a.class);
                    }
                }
            }
            if let Some(old) = state.replaced_by(i as u64)
                && !old.free_requested
            {
                lives.push((old.born, i as u64 + 1, old.site));
                class.insert(old.born, old.class);
            }
        }
        state.settle_at_end();
        for a in state.live().filter(|a| !a.free_requested) {
            lives.push((a.born, u64::MAX, a.site));
            class.insert(a.born, a.class);
        }
        let at = |moment: u64| {
            let mut bytes = [0u64; Category::COUNT];
            for &(born, released, _) in &lives {
                if born <= moment && moment < released {
                    let c = class[&born];
                    bytes[c.category as usize] += block_size(&events, born);
                }
            }
            bytes
        };
        let got = |t: &crate::analysis::categories::CategoryTable| {
            let mut bytes = [0u64; Category::COUNT];
            for s in &t.0 {
                bytes[s.category as usize] = s.bytes;
            }
            bytes
        };
        prop_assert_eq!(r.peak_allocated_bytes, peak);
        prop_assert_eq!(got(&r.categories.at_allocated_peak), at(peak_at));
        prop_assert_eq!(got(&r.categories.at_reserved_peak), at(reserved_at));
        // Each top site's category: the one of most of its bytes then.
        for site in &r.top_sites_at_peak {
            let mut bytes = [0u64; Category::COUNT];
            for &(born, released, s) in &lives {
                if born <= peak_at && peak_at < released
                    && state.sites().name(s, reader.symbols()) == site.site.site
                {
                    bytes[class[&born].category as usize] += block_size(&events, born);
                }
            }
            prop_assert_eq!(site.category, dominant(&bytes));
        }
    }

    /// The sites at the allocated peak (their blocks, bytes and categories),
    /// and the whole summary, are the same whether their copy is made when
    /// due, put off until the end, or put off as the summary chooses: the
    /// log undone and followed gives the copy back exactly, whatever
    /// happens after the peak (frees, settling at a step's end, tags,
    /// blocks of no size, blocks allocated over live ones).
    #[test]
    fn sites_at_peak_are_the_same_however_long_their_copy_is_put_off(
        ops in proptest::collection::vec((0u8..14, 0u64..10, 0u64..5000, 0usize..4), 1..200),
        tagged in any::<bool>(),
        from in 0u64..10,
    ) {
        let ops = ops.into_iter().map(|(op, slot, size, which)| {
            let op = match op {
                0..=3 => Op::Alloc,
                4 | 5 => Op::Free,
                6 => Op::FreeRequested,
                7 => Op::FreeCompleted,
                8 | 9 => Op::OptimizerStep,
                10 => Op::Segment,
                _ => Op::Tag,
            };
            (op, slot, size, which)
        });
        let bytes = mixed_trace(tagged, Some(1 << 30), ops);
        let window = || Window { from_index: Some(from), ..Window::ALL };
        let when_due = summarize_sites(&bytes, window(), Some(0));
        for max in [None, Some(1), Some(3), Some(usize::MAX)] {
            prop_assert_eq!(&summarize_sites(&bytes, window(), max), &when_due, "{:?}", max);
        }
    }

    /// The free space swept in the pass is the one a replay up to the
    /// peak finds, whatever blocks and segments change after the peak,
    /// and however soon the log since the peak is undone into a copy.
    #[test]
    fn free_space_at_peak_matches_a_replay(
        ops in proptest::collection::vec((0u8..10, 0u64..12, 0u64..5000), 1..150),
        from in 0u64..20,
        undo_min in 0usize..12,
    ) {
        let mut b = TraceBuilder::new();
        let s = b.site("a", "a.py", 1);
        b.segment(0, 1 << 30);
        for (op, slot, size) in ops {
            let addr = slot << 20;
            match op {
                0 | 1 => b.alloc(addr, size, size, s),
                2 => b.free_requested(addr, 0),
                3 => b.free_completed(addr, 0),
                4 => b.segment((64 + slot) << 30, size << 20),
                5 => b.segment_free((64 + slot) << 30, size << 20),
                // Segments holding blocks: returned with their blocks
                // live (inconsistent), reserved again, mapped and unmapped.
                6 => b.segment_free(0, 1 << 30),
                7 => b.segment(0, 1 << 30),
                8 => b.map(slot << 20, 1 << 20),
                _ => b.unmap(slot << 20, 1 << 20),
            };
        }
        let bytes = b.finish();
        let window = Window { from_index: Some(from), ..Window::ALL };
        let r = summarize_with(&bytes, window, undo_min);
        if r.peak_allocated_bytes == 0 {
            prop_assert_eq!(r.at_peak.largest_free_block, None);
        } else if let Some(largest) = r.at_peak.largest_free_block {
            let mut reader = TraceReader::new(&bytes[..]).unwrap();
            let space = free_space_at(&mut reader, r.peak_allocated.replayed_events);
            prop_assert_eq!(largest, space.largest_free_block);
            prop_assert_eq!(
                r.at_peak.external_fragmentation,
                Some(space.external_fragmentation())
            );
        }
    }
}
