use super::*;
use crate::analysis::Devices;
use crate::input::Input;
use crate::progress::NoProgress;
use crate::simulate::{Extracted, extract};
use vramtrace_allocator::MIB;
use vramtrace_allocator::workload::{WorkloadConfig, WorkloadReport, generate};
use vramtrace_format::EventSource;

/// A synthetic training run: 2 layers, 3 iterations, at a batch size and
/// sequence length, on a device of `capacity` bytes (unlimited: `None`).
fn workload(batch: u64, seq: u64, capacity: Option<u64>) -> (WorkloadReport, Vec<u8>) {
    let config = WorkloadConfig {
        seed: 7,
        iters: 3,
        layers: 2,
        hidden: 256,
        vocab: 4096,
        batch: (batch, batch),
        seq_len: (seq, seq),
        capacity,
        ..WorkloadConfig::default()
    };
    let mut bytes = Vec::new();
    let report = generate(&config, &mut bytes).unwrap();
    (report, bytes)
}

fn runs_at(values: &[(u64, u64)]) -> (Vec<Extracted>, Vec<Vec<u32>>) {
    let mut keys = Keys::default();
    values
        .iter()
        .map(|&(b, s)| {
            let bytes = workload(b, s, None).1;
            let input = Input::from_bytes(bytes, &NoProgress).unwrap();
            let mut events = input.events().unwrap();
            let e = extract(&mut events, Devices::Apart, &NoProgress)
                .unwrap()
                .devices
                .remove(0);
            let k = keys.of(&e.list, &e.state, events.symbols());
            (e, k)
        })
        .unzip()
}

/// The sizes a run asked for, by alloc id.
fn requested(e: &Extracted) -> Vec<u64> {
    e.list.allocs.iter().map(|a| a.requested).collect()
}

/// The runs given to the model: each run with its keys, at a value.
fn inputs<'a>(runs: &[(&'a Extracted, &[u32], u64)]) -> Vec<RunInput<'a>> {
    runs.iter()
        .map(|&(e, keys, value)| RunInput {
            value,
            list: &e.list,
            keys: keys.to_vec(),
        })
        .collect()
}

fn model(runs: &[Extracted], keys: &[Vec<u32>], values: &[u64], varied: Varied) -> Model {
    let given: Vec<(&Extracted, &[u32], u64)> = (runs.iter().zip(keys).zip(values))
        .map(|((e, k), &v)| (e, k.as_slice(), v))
        .collect();
    Model::fit(&inputs(&given), varied).unwrap()
}

fn on_device(capacity: u64) -> Target {
    Target {
        config: AllocatorConfig::default(),
        options: SimOptions {
            capacity: Some(capacity),
            ..SimOptions::default()
        },
        step: 1,
        without_workspaces: false,
    }
}

#[test]
fn runs_at_two_batches_line_up_and_fit_exact_laws() {
    let (runs, keys) = runs_at(&[(16, 128), (32, 128)]);
    let m = model(&runs, &keys, &[16, 32], Varied::Batch);
    assert_eq!(m.reference, 1);
    assert_eq!(m.line_ups[0].unmatched, 0);
    assert_eq!(m.line_ups[0].reference_unmatched, 0);
    let list = &runs[1].list;
    let kinds: std::collections::BTreeSet<LawKind> =
        (0..list.allocs.len()).map(|id| m.law(id).kind).collect();
    assert!(kinds.contains(&LawKind::Constant), "{kinds:?}");
    assert!(kinds.contains(&LawKind::Linear), "{kinds:?}");
    assert!(!kinds.contains(&LawKind::NoLaw), "{kinds:?}");
    // The model gives each run's own sizes back.
    assert_eq!(m.sizes_at(16), requested(&runs[0]));
    assert_eq!(m.sizes_at(32), requested(&runs[1]));
    // And a run recorded at 48 has the sizes the model predicts for 48.
    // (Not below 16: the generator's gradient temporaries are
    // `max(activation, parameter / 2)`, constant at small batches, a
    // change of law two runs above it cannot see.)
    let (other, _) = runs_at(&[(48, 128)]);
    assert_eq!(m.sizes_at(48), requested(&other[0]));
}

#[test]
fn the_sequence_length_brings_quadratic_attention_scores() {
    let (runs, keys) = runs_at(&[(4, 512), (4, 1024)]);
    let m = model(&runs, &keys, &[512, 1024], Varied::Seq);
    let list = &runs[1].list;
    let kinds: std::collections::BTreeSet<LawKind> =
        (0..list.allocs.len()).map(|id| m.law(id).kind).collect();
    assert!(kinds.contains(&LawKind::Quadratic), "{kinds:?}");
    let (other, _) = runs_at(&[(4, 1536)]);
    assert_eq!(m.sizes_at(1536), requested(&other[0]));
}

#[test]
fn the_largest_batch_found_fits_and_the_next_runs_out_on_the_device() {
    let (runs, keys) = runs_at(&[(4, 128), (8, 128)]);
    let m = model(&runs, &keys, &[4, 8], Varied::Batch);
    let capacity = 400 * MIB;
    let found = largest_fitting(&m, &runs[1].list, &on_device(capacity));
    let largest = found.largest.expect("some batch fits");
    assert!(largest > 8, "{found:?}");
    assert!(!found.unbounded && !found.at_ceiling);
    assert_eq!(m.range(largest), Range::Beyond);
    // The generator runs the same program on a device of that size.
    let (fits, _) = workload(largest, 128, Some(capacity));
    assert!(fits.oom.is_none(), "batch {largest} should fit");
    let (fails, _) = workload(largest + 1, 128, Some(capacity));
    let oom = fails.oom.expect("the next batch should run out of memory");
    // And the simulated failure is the same request.
    let next = evaluate(
        &m,
        &runs[1].list,
        &on_device(capacity),
        largest + 1,
        true,
        None,
    );
    let at = next.sim.first_oom.expect("simulated OOM");
    assert_eq!(at.requested_bytes, oom.requested);
    let full = evaluate(
        &m,
        &runs[1].list,
        &on_device(capacity),
        largest,
        false,
        None,
    );
    assert_eq!(full.sim.ooms, 0);
    assert_eq!(full.sim.peak_reserved_bytes, fits.peak_reserved);
    assert_eq!(full.sim.peak_allocated_bytes, fits.peak_allocated);
    assert!(full.categories.bytes(Category::Activation) > 0);
    assert!(
        full.by_law
            .iter()
            .any(|&(k, b)| k == LawKind::Linear && b > 0)
    );
}

#[test]
fn one_run_assumes_activations_scale() {
    let (runs, _) = runs_at(&[(8, 128)]);
    let m = Model::assumed(8, &runs[0].list);
    assert!(m.is_assumed());
    assert!(m.grows());
    let found = largest_fitting(&m, &runs[0].list, &on_device(400 * MIB));
    assert!(found.largest.is_some_and(|b| b > 8), "{found:?}");
}

#[test]
fn memory_that_does_not_grow_fits_every_value_and_too_small_a_device_none() {
    let (runs, keys) = runs_at(&[(4, 128), (8, 128)]);
    let m = model(&runs, &keys, &[4, 8], Varied::Batch);
    let found = largest_fitting(&m, &runs[1].list, &on_device(4 * MIB));
    assert_eq!(found.largest, None);
    assert!(!found.unbounded);
    // Runs whose sizes do not change with the value: every value fits.
    let same = Model::fit(
        &inputs(&[(&runs[0], &keys[0], 4), (&runs[0], &keys[0], 5)]),
        Varied::Batch,
    )
    .unwrap();
    assert!(!same.grows());
    let found = largest_fitting(&same, &runs[0].list, &on_device(400 * MIB));
    assert!(found.unbounded && found.largest.is_none(), "{found:?}");
    let err = Model::fit(
        &inputs(&[(&runs[0], &keys[0], 8), (&runs[1], &keys[1], 8)]),
        Varied::Batch,
    )
    .unwrap_err();
    assert_eq!(err, ModelError::SameValue(8));
}

#[test]
fn runs_of_different_programs_do_not_line_up() {
    let (runs, mut keys) = runs_at(&[(4, 128), (8, 128)]);
    // Another program: every key differs.
    for k in &mut keys[0] {
        *k += 1_000_000;
    }
    let given = inputs(&[(&runs[0], &keys[0], 4), (&runs[1], &keys[1], 8)]);
    match Model::fit(&given, Varied::Batch) {
        Err(ModelError::NotLinedUp { run: 0, line_up }) => {
            assert_eq!(line_up.first_difference, Some(0));
            // Each count is of its own run's allocations (issue #46: "650
            // of its 378 allocations").
            assert!(line_up.unmatched <= line_up.allocations, "{line_up:?}");
            assert!(
                line_up.reference_unmatched <= line_up.reference_allocations,
                "{line_up:?}"
            );
            assert_eq!(line_up.allocations, runs[0].list.allocs.len());
            assert_eq!(line_up.reference_allocations, runs[1].list.allocs.len());
        }
        other => panic!("{:?}", other.map(|m| m.values)),
    }
}

#[test]
fn wide_products_are_exact_past_128_bits() {
    assert_eq!(mul_wide(3, 5), (0, 15));
    assert_eq!(mul_wide(1 << 127, 2), (1, 0));
    let max64 = u64::MAX as u128;
    // (2^128 - 1)(2^64 - 1) = (2^64 - 2) 2^128 + (2^128 - 2^64 + 1).
    assert_eq!(
        mul_wide(u128::MAX, max64),
        (max64 - 1, u128::MAX - max64 + 1)
    );
    // Sizes and values near 2^64, where a product of three overflowed: the
    // same product compares equal, a neighbour's not.
    let (s, v) = (max64, max64 - 1);
    assert_eq!(mul_wide(s * v, v), mul_wide(v * s, v));
    assert_ne!(mul_wide(s * v, v), mul_wide((s - 1) * v, v));
}
