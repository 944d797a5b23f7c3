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

#[test]
fn a_steady_loop_does_not_grow() {
    let r = leaks(&training(20, false), Window::ALL);
    assert!(r.growth.is_empty(), "{:?}", r.growth);
    let iter = r
        .repeated_phases
        .iter()
        .find(|g| g.phase == "train/iter#")
        .unwrap();
    assert_eq!(iter.repetitions, 20);
    assert_eq!(iter.bytes_per_repetition, 0);
    assert!(iter.sites.is_empty());
    assert_eq!(iter.warmup_repetitions, 4);
    assert_eq!(iter.live_bytes_at_end.len(), 20);
}

#[test]
fn a_retained_tensor_per_iteration_is_found_with_its_size() {
    let r = leaks(&training(20, true), Window::ALL);
    let iter = r.growth.iter().find(|g| g.phase == "train/iter#").unwrap();
    assert_eq!(iter.bytes_per_repetition, MIB as i64);
    assert_eq!(iter.steadiness, 1.0);
    assert!(iter.growing);
    assert_eq!(iter.sites.len(), 1, "{:?}", iter.sites);
    assert_eq!(iter.sites[0].site.site, "log_metrics (train.py:57)");
    assert_eq!(iter.sites[0].bytes_per_repetition, MIB as i64);
    assert_eq!(iter.sites[0].live_bytes_at_last_end, 20 * MIB);
    // The enclosing phase, repeated too, grows the same way.
    assert!(
        r.growth
            .iter()
            .any(|g| g.phase == "train" && g.bytes_per_repetition == MIB as i64)
    );
}

#[test]
fn a_leak_under_noise_is_found_by_its_site() {
    let r = leaks(&training_with(30, true, true), Window::ALL);
    let iter = r.growth.iter().find(|g| g.phase == "train/iter#").unwrap();
    assert!(
        iter.steadiness < 0.5,
        "the total is noisy: {}",
        iter.steadiness
    );
    assert_eq!(iter.sites.len(), 1, "{:?}", iter.sites);
    assert_eq!(iter.sites[0].site.site, "log_metrics (train.py:57)");
    assert_eq!(iter.sites[0].bytes_per_repetition, MIB as i64);
    let steady = leaks(&training_with(30, false, true), Window::ALL);
    assert!(steady.growth.is_empty(), "{:?}", steady.growth);
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
    assert!(steadiness(&x, &y, 7.0) >= 0.75);
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
