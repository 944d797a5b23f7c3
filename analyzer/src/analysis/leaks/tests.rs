use super::*;
use crate::analysis::window::Window;
use crate::testing::{TraceBuilder, replay_trace};
use vramtrace_format::TraceReader;

const MIB: u64 = 1 << 20;

/// A training loop: weights, then `iterations` phases `iter{i}` whose
/// activations are freed inside, whose gradients live until the next
/// iteration, with optimizer state created in the first two (warm-up), and,
/// with `leak`, 1 MiB retained per iteration from its own stack.
fn training(iterations: u64, leak: bool) -> Vec<u8> {
    training_with(iterations, leak, false)
}

/// [`training`], with `noise`: gradients of a size that varies from one
/// iteration to the next by several MiB.
fn training_with(iterations: u64, leak: bool, noise: bool) -> Vec<u8> {
    let mut b = TraceBuilder::new();
    let weights = b.site("load_weights", "train.py", 10);
    let acts = b.site("forward", "model.py", 41);
    let grads = b.site("backward", "train.py", 30);
    let optim = b.site("step", "optim.py", 77);
    let leaky = b.site("log_metrics", "train.py", 57);
    b.segment(0, 1 << 40);
    let mut next = 0u64;
    let mut alloc = |b: &mut TraceBuilder, size: u64, stack| {
        let addr = next;
        next += size;
        b.alloc(addr, size, size, stack);
        addr
    };
    alloc(&mut b, 64 * MIB, weights);
    let mut prev_grad = None;
    for i in 0..iterations {
        b.begin("train").begin(&format!("iter{i}"));
        let a1 = alloc(&mut b, 8 * MIB, acts);
        let a2 = alloc(&mut b, 4 * MIB + 512 * i % 3, acts);
        b.free(a2, 4 * MIB + 512 * i % 3).free(a1, 8 * MIB);
        let grad_size = if noise {
            (16 + (i * 7919) % 5) * MIB
        } else {
            16 * MIB
        };
        let g = alloc(&mut b, grad_size, grads);
        if let Some((p, size)) = prev_grad.replace((g, grad_size)) {
            b.free(p, size);
        }
        if i < 2 {
            alloc(&mut b, 32 * MIB, optim);
        }
        if leak {
            alloc(&mut b, MIB, leaky);
        }
        b.end(&format!("iter{i}")).end("train");
    }
    b.finish()
}

fn leaks(bytes: &[u8], window: Window) -> LeaksReport {
    let mut leaks = Leaks::new();
    replay_trace(bytes, &mut [&mut leaks], &window);
    leaks.into_report().unwrap()
}

fn phase<'a>(r: &'a LeaksReport, name: &str) -> &'a PhaseGrowth {
    r.repeated_phases
        .iter()
        .find(|g| g.phase == name)
        .unwrap_or_else(|| panic!("no phase {name}: {:?}", r.repeated_phases))
}

#[test]
fn a_steady_loop_does_not_grow() {
    let r = leaks(&training(20, false), Window::ALL);
    assert!(r.leaks.is_empty(), "{:?}", r.leaks);
    let iter = phase(&r, "train/iter#");
    assert_eq!(iter.repetitions, 20);
    assert_eq!(iter.trend, Trend::Steady);
    assert!(iter.leaking_sites.is_empty());
    assert_eq!(iter.warmup_repetitions, 4);
    assert_eq!(iter.live_bytes_at_end.len(), 20);
}

#[test]
fn a_retained_tensor_per_iteration_is_one_leak_with_its_size() {
    let r = leaks(&training(20, true), Window::ALL);
    // The site leaks in `train` and in `train/iter#` alike: it is reported
    // once, under the innermost phase whose repetitions allocate it.
    assert_eq!(r.leaks.len(), 1, "{:?}", r.leaks);
    let leak = &r.leaks[0];
    assert_eq!(leak.phase, "train/iter#");
    assert_eq!(leak.growth.site.site, "log_metrics (train.py:57)");
    assert_eq!(leak.growth.bytes_per_repetition, MIB as i64);
    assert_eq!(leak.growth.steadiness, 1.0);
    assert_eq!(leak.growth.retained_bytes, 20 * MIB);
    assert_eq!(leak.growth.repetitions, 20);
    let iter = phase(&r, "train/iter#");
    assert_eq!(iter.trend, Trend::Grows);
    assert_eq!(iter.bytes_per_repetition, MIB as i64);
    assert_eq!(iter.leaking_sites, vec![leak.growth.clone()]);
    // The enclosing phase grows the same way, with no leak of its own.
    let train = phase(&r, "train");
    assert_eq!(train.trend, Trend::Grows);
    assert!(train.leaking_sites.is_empty());
    assert_eq!(r.chart_phase().unwrap().phase, "train/iter#");
    assert_eq!(r.fastest_leak(), MIB as i64);
}

#[test]
fn a_leak_under_noise_is_found_by_its_site() {
    let r = leaks(&training_with(30, true, true), Window::ALL);
    // The total is noisy, yet grows by the leak over 30 repetitions.
    let iter = phase(&r, "train/iter#");
    assert_eq!(iter.trend, Trend::Grows);
    assert!(iter.steadiness < 1.0);
    assert_eq!(r.leaks.len(), 1, "{:?}", r.leaks);
    assert_eq!(r.leaks[0].growth.site.site, "log_metrics (train.py:57)");
    assert_eq!(r.leaks[0].growth.bytes_per_repetition, MIB as i64);
    let steady = leaks(&training_with(30, false, true), Window::ALL);
    assert!(steady.leaks.is_empty(), "{:?}", steady.leaks);
    assert_eq!(phase(&steady, "train/iter#").trend, Trend::Varies);
}

#[test]
fn a_repetition_cut_short_by_an_oom_is_left_out() {
    // Three iterations leak 2 MiB each; a fourth runs out of memory before
    // its leak, so its end holds no more than the third's.
    let mut b = TraceBuilder::new();
    let leaky = b.site("log_metrics", "train.py", 57);
    let acts = b.site("forward", "model.py", 41);
    b.segment(0, 1 << 40);
    for i in 0..4u64 {
        b.begin(&format!("iter{i}"));
        let a = (100 + i) * 64 * MIB;
        b.alloc(a, 8 * MIB, 8 * MIB, acts);
        if i == 3 {
            b.oom(1 << 40, acts);
            b.free(a, 8 * MIB);
        } else {
            b.free(a, 8 * MIB);
            b.alloc(i * 2 * MIB, 2 * MIB, 2 * MIB, leaky);
        }
        b.end(&format!("iter{i}"));
    }
    let r = leaks(&b.finish(), Window::ALL);
    let iter = phase(&r, "iter#");
    assert_eq!(iter.cut_short_repetitions, vec![3]);
    assert_eq!(iter.trend, Trend::Grows);
    assert_eq!(r.leaks.len(), 1, "{:?}", r.leaks);
    assert_eq!(r.leaks[0].growth.bytes_per_repetition, 2 * MIB as i64);
    assert_eq!(r.leaks[0].growth.repetitions, 3);
}

#[test]
fn growth_that_stopped_during_setup_is_not_a_leak() {
    // DDP's start: three broadcasts, each leaving a bucket allocated, then a
    // steady training loop.
    let setup_then_training = |leak: bool| {
        let mut b = TraceBuilder::new();
        let bucket = b.site("_sync_module_states", "ddp.py", 880);
        let acts = b.site("forward", "model.py", 41);
        let leaky = b.site("log_metrics", "train.py", 57);
        b.segment(0, 1 << 40);
        for i in 0..3u64 {
            b.begin("nccl:broadcast");
            b.alloc(i * 256 * MIB, 256 * MIB, 256 * MIB, bucket);
            b.end("nccl:broadcast");
        }
        for i in 0..20u64 {
            b.begin(&format!("iter{i}"));
            b.alloc(1 << 39, 8 * MIB, 8 * MIB, acts);
            b.free(1 << 39, 8 * MIB);
            if leak {
                b.alloc((1 << 38) + i * MIB, MIB, MIB, leaky);
            }
            b.end(&format!("iter{i}"));
        }
        leaks(&b.finish(), Window::ALL)
    };
    let r = setup_then_training(false);
    assert!(r.leaks.is_empty(), "{:?}", r.leaks);
    // The setup phase did grow: its trend says so, without a leak.
    let broadcast = phase(&r, "nccl:broadcast");
    assert_eq!(broadcast.trend, Trend::Grows);
    assert!(broadcast.leaking_sites.is_empty());
    // A leak in the loop that follows is still found.
    let r = setup_then_training(true);
    assert_eq!(r.leaks.len(), 1, "{:?}", r.leaks);
    assert_eq!(r.leaks[0].phase, "iter#");
    assert_eq!(r.leaks[0].growth.site.site, "log_metrics (train.py:57)");
}

#[test]
fn varying_shapes_are_variation_not_a_leak() {
    // Activations kept to the phase's end, sized by a sequence length that
    // changes every repetition (as the oom fixture's forward pass).
    let mut b = TraceBuilder::new();
    let acts = b.site("forward", "model.py", 41);
    b.segment(0, 1 << 40);
    for (i, seq) in [321u64, 558, 423, 921, 300, 650, 512, 777]
        .iter()
        .enumerate()
    {
        b.begin(&format!("iter{i}")).begin("forward");
        b.alloc(0, seq * MIB, seq * MIB, acts);
        b.end("forward");
        b.free(0, seq * MIB);
        b.end(&format!("iter{i}"));
    }
    let r = leaks(&b.finish(), Window::ALL);
    assert!(r.leaks.is_empty(), "{:?}", r.leaks);
    assert_eq!(phase(&r, "iter#/forward").trend, Trend::Varies);
    assert_eq!(phase(&r, "iter#").trend, Trend::Steady);
}

#[test]
fn retention_by_phase_and_never_freed() {
    let r = leaks(&training(5, true), Window::ALL);
    // The last iteration leaves its gradients and its leak.
    let last = r
        .retained_by_phase
        .iter()
        .find(|p| p.phase == "train/iter4")
        .unwrap();
    assert_eq!(last.retained_bytes, 17 * MIB);
    assert_eq!(last.sites[0].site.site, "backward (train.py:30)");
    // iter1 ends holding its gradient (freed by iter2), optimizer state and leak.
    let second = r
        .retained_by_phase
        .iter()
        .find(|p| p.phase == "train/iter1")
        .unwrap();
    assert_eq!(second.retained_bytes, 49 * MIB);
    assert_eq!(
        r.retained_by_phase[0].phase, "train",
        "the outer phase holds the most"
    );
    assert_eq!(r.phase_instances, 10);
    assert_eq!(r.never_freed_bytes, (64 + 16 + 64 + 5) * MIB);
    assert_eq!(r.never_freed[0].site.site, "load_weights (train.py:10)");
    assert_eq!(r.never_freed.len(), 4);
    // From a later start, only blocks allocated since count.
    let late = leaks(
        &training(5, true),
        Window {
            from_index: Some(40),
            ..Window::ALL
        },
    );
    // iter4's gradient and the leaks of iter2 (event 40) to iter4.
    assert_eq!(late.never_freed_bytes, 19 * MIB);
}

#[test]
fn robust_fit() {
    let x: Vec<f64> = (0..10).map(f64::from).collect();
    let mut y: Vec<f64> = x.iter().map(|v| 100.0 + 7.0 * v).collect();
    y[3] = 5000.0; // an outlier
    assert_eq!(robust_slope(&x, &y), Some(7.0));
    assert_eq!(robust_slope(&x[..1], &y[..1]), None);
    assert_eq!(warmup(2), 0);
    assert_eq!(warmup(3), 1);
    assert_eq!(warmup(20), 4);
    assert!(steadiness(&x, &y, 7.0) < MIN_STEADINESS);
    let clean: Vec<f64> = x.iter().map(|v| 100.0 + 7.0 * v).collect();
    assert_eq!(steadiness(&x, &clean, 7.0), 1.0);
    // A long series takes the slopes half the series apart.
    let long: Vec<f64> = (0..200).map(f64::from).collect();
    let line: Vec<f64> = long.iter().map(|v| 3.0 * v).collect();
    assert_eq!(robust_slope(&long, &line), Some(3.0));
}

#[test]
fn consistent_growth_needs_three_points_a_slope_and_a_good_fit() {
    let x = [0.0, 1.0, 2.0, 3.0, 4.0];
    // A one-off step at the start (optimizer state) is a warm-up.
    let step = [0.0, 130.0, 130.0, 130.0, 130.0];
    assert!(Fit::consistent(&x, &step, true).is_none());
    // The same step before a steady growth: found after the warm-up.
    let warm = [0.0, 130.0, 146.0, 162.0, 178.0];
    let f = Fit::consistent(&x, &warm, true).unwrap();
    assert_eq!((f.skipped, f.slope), (1, 16.0));
    // Steady growth from the start needs no warm-up.
    let f = Fit::consistent(&x[..3], &[16.0, 32.0, 48.0], true).unwrap();
    assert_eq!((f.skipped, f.points, f.slope), (0, 3, 16.0));
    // Two points are too few; one late jump is no trend.
    assert!(Fit::consistent(&x[..2], &[16.0, 32.0], true).is_none());
    assert!(Fit::consistent(&x[..3], &[0.0, 0.0, 16.0], true).is_none());
    // A fall is not growth.
    assert!(Fit::consistent(&x[..3], &[48.0, 32.0, 16.0], true).is_none());
    assert!(Fit::consistent(&x[..3], &[48.0, 32.0, 16.0], false).is_some());
}

#[test]
fn repetitions_are_named_for_sentences() {
    assert_eq!(repetition_noun("iter#"), "iteration");
    assert_eq!(repetition_noun("train/step#"), "step");
    assert_eq!(repetition_noun("epoch#"), "epoch");
    assert_eq!(
        repetition_noun("train/iter#/forward"),
        "repetition of train/iter#/forward"
    );
}

mod random {
    use super::*;
    use proptest::prelude::*;
    use vramtrace_format::Event;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// What each phase instance retains matches the live blocks
        /// allocated inside it, counted at its end by brute force.
        #[test]
        fn retention_matches_a_brute_force_replay(
            ops in proptest::collection::vec((0u8..5, 0u64..10, 1u64..1000), 1..150),
        ) {
            let mut b = TraceBuilder::new();
            let s = b.site("f", "a.py", 1);
            b.segment(0, 1 << 30);
            let mut open: Vec<String> = Vec::new();
            for (n, (op, slot, size)) in ops.into_iter().enumerate() {
                match op {
                    0 | 1 => {
                        b.alloc(slot << 20, size, size, s);
                    }
                    2 => {
                        b.free(slot << 20, 0);
                    }
                    3 if open.len() < 3 => {
                        let name = format!("p{n}");
                        b.begin(&name);
                        open.push(name);
                    }
                    _ => {
                        if let Some(name) = open.pop() {
                            b.end(&name);
                        }
                    }
                }
            }
            let (bytes, symbols) = b.finish_symbols();
            let r = leaks(&bytes, Window::ALL);

            let mut reader = TraceReader::new(&bytes[..]).unwrap();
            let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
            let mut state = ReplayState::default();
            let mut expected = Vec::new();
            for (i, e) in events.iter().enumerate() {
                if let Applied::PhaseEnd(id) = state.apply(i as u64, e, &symbols) {
                    let retained: u64 = state
                        .live()
                        .filter(|a| state.phase_within(a.phase, id))
                        .map(|a| a.size)
                        .sum();
                    if retained > 0 {
                        expected.push((state.phase(id).unwrap().begin_ns, retained));
                    }
                }
            }
            let mut got: Vec<(u64, u64)> =
                r.retained_by_phase.iter().map(|p| (p.begin_ns, p.retained_bytes)).collect();
            got.sort();
            expected.sort();
            prop_assert_eq!(got, expected);
        }
    }
}

/// Issue #32: a training loop without a leak, recorded on a disk too slow
/// for it: every third iteration the recorder dropped the frees of the
/// activations and of the previous gradient and the allocation of a
/// temporary whose free it kept. With `marked`, each gap has its
/// `events_dropped` marker (format 1.5); without, it is the same trace as
/// a reader that does not know the marker sees it.
fn training_with_gaps(iterations: u64, marked: bool) -> Vec<u8> {
    use vramtrace_format::{DroppedEvents, EventData};
    let mut b = TraceBuilder::new();
    let weights = b.site("load_weights", "train.py", 10);
    let acts = b.site("forward", "model.py", 41);
    let grads = b.site("backward", "train.py", 30);
    let temps = b.site("loss", "train.py", 44);
    b.segment(0, 1 << 40);
    let mut next = 0u64;
    let mut alloc = |b: &mut TraceBuilder, size: u64, stack| {
        let addr = next;
        next += size;
        b.alloc(addr, size, size, stack);
        addr
    };
    alloc(&mut b, 64 * MIB, weights);
    let mut prev_grad = None;
    for i in 0..iterations {
        let gap = i % 3 == 2;
        b.begin("train").begin(&format!("iter{i}"));
        let a1 = alloc(&mut b, 8 * MIB, acts);
        let a2 = alloc(&mut b, 4 * MIB, acts);
        let g = alloc(&mut b, 16 * MIB, grads);
        let from_ns = b.now + 1;
        // What the recorder dropped here: three frees (two events each)
        // and an allocation.
        let t = (1 << 39) + i * MIB;
        if !gap {
            b.free(a2, 4 * MIB).free(a1, 8 * MIB);
            if let Some(p) = prev_grad {
                b.free(p, 16 * MIB);
            }
            b.alloc(t, MIB, MIB, temps);
        } else {
            b.now += 7;
            if marked {
                b.event(EventData::EventsDropped(DroppedEvents {
                    count: 7,
                    from_ns,
                }));
            }
        }
        prev_grad = Some(g);
        b.free(t, MIB);
        b.end(&format!("iter{i}")).end("train");
    }
    b.finish()
}

#[test]
fn dropped_events_make_no_leak_and_no_inconsistency() {
    let marked = training_with_gaps(21, true);
    let r = leaks(&marked, Window::ALL);
    assert!(r.leaks.is_empty(), "{:?}", r.leaks);
    let d = r.dropped_events.as_ref().expect("the gaps are reported");
    assert_eq!((d.spans, d.events), (7, 49));
    assert_eq!(d.kept_spans.len(), 7);
    assert!(d.from_ns < d.to_ns);
    // The blocks live at the last gap are in doubt, not never freed: the
    // activations whose frees were dropped, the weights, the gradients.
    assert!(
        r.never_freed
            .iter()
            .all(|s| !s.site.site.starts_with("forward")),
        "{:?}",
        r.never_freed
    );
    assert!(r.in_doubt_blocks > 0);
    let mut summary = crate::analysis::summary::Summary::new(10);
    replay_trace(&marked, &mut [&mut summary], &Window::ALL);
    let s = summary.into_report().unwrap();
    assert_eq!(s.inconsistencies.total, 0, "{:?}", s.inconsistencies);
    let d = s.dropped_events.expect("the summary reports the gaps");
    // Each gap's kept free of a dropped allocation contradicts the state.
    assert!(d.explained_inconsistencies >= 7);
    let said = d.to_string();
    assert!(
        said.starts_with("49 events dropped by the recorder between"),
        "{said}"
    );
    assert!(said.contains("lower bound"), "{said}");

    // The same gaps unmarked: what the marker saves the analyses from.
    let unmarked = training_with_gaps(21, false);
    let r = leaks(&unmarked, Window::ALL);
    assert!(r.dropped_events.is_none());
    assert!(
        r.never_freed
            .iter()
            .any(|s| s.site.site.starts_with("forward"))
    );
    let mut summary = crate::analysis::summary::Summary::new(10);
    replay_trace(&unmarked, &mut [&mut summary], &Window::ALL);
    let inconsistencies = summary.into_report().unwrap().inconsistencies.total;
    assert_eq!(inconsistencies, d.explained_inconsistencies);
}
