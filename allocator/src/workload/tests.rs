use super::*;
use crate::format::{EventKind, TraceReader};
use std::collections::HashMap;

fn run(config: &WorkloadConfig) -> (WorkloadReport, Vec<u8>) {
    let mut out = Vec::new();
    let report = generate(config, &mut out).unwrap();
    (report, out)
}

fn events(bytes: &[u8]) -> Vec<Event> {
    let mut r = TraceReader::new(bytes).unwrap();
    let events = r.events().collect::<Result<Vec<_>, _>>().unwrap();
    assert!(r.footer().is_some());
    events
}

/// Live blocks (address -> requested size) at the end of a trace.
fn live_at_end(events: &[Event]) -> HashMap<u64, u64> {
    let mut live = HashMap::new();
    for e in events {
        match e.data {
            EventData::Alloc(b) => assert!(live.insert(b.addr, b.requested).is_none()),
            EventData::FreeRequested(b) => assert_eq!(live.remove(&b.addr), Some(b.requested)),
            _ => {}
        }
    }
    live
}

#[test]
fn a_steady_run_is_deterministic_and_balanced() {
    let config = WorkloadConfig::default();
    let (report, bytes) = run(&config);
    let (_, again) = run(&config);
    assert_eq!(bytes, again);
    let (_, other_seed) = run(&WorkloadConfig {
        seed: 1,
        seq_len: (128, 512),
        ..config.clone()
    });
    assert_ne!(bytes, other_seed);

    assert_eq!(report.iterations, 10);
    assert_eq!(report.oom, None);
    assert_eq!(report.bytes, bytes.len() as u64);
    let events = events(&bytes);
    assert_eq!(events.len() as u64, report.events);
    assert!(events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    let c = report.counts;
    assert_eq!(c.get(EventKind::PhaseBegin), 40);
    assert_eq!(c.get(EventKind::PhaseEnd), 40);
    assert_eq!(
        c.get(EventKind::FreeRequested),
        c.get(EventKind::FreeCompleted)
    );
    // What stays: parameters and optimizer state.
    let live = live_at_end(&events);
    assert_eq!(
        live.values().sum::<u64>(),
        report.parameter_bytes + report.optimizer_state_bytes
    );
    assert!(report.final_allocated >= live.values().sum::<u64>());
    assert_eq!(report.optimizer_state_bytes, 2 * report.parameter_bytes);
    // Every allocation has a stack.
    assert!(events.iter().all(|e| e.data.stack() != Some(StackId::NONE)));
}

#[test]
fn stacks_are_python_like_and_distinct_per_site() {
    let (_, bytes) = run(&WorkloadConfig {
        leak_bytes: 1 << 20,
        ..WorkloadConfig::default()
    });
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    let events = r.events().collect::<Result<Vec<_>, _>>().unwrap();
    let sym = r.symbols();
    let describe = |s: StackId| -> Vec<String> {
        sym.stack(s)
            .iter()
            .map(|&f| sym.describe_frame(f))
            .collect()
    };
    let stacks: std::collections::BTreeSet<StackId> = events
        .iter()
        .filter_map(|e| match e.data {
            EventData::Alloc(b) => Some(b.stack),
            _ => None,
        })
        .collect();
    assert!(stacks.len() >= 15, "{} allocation sites", stacks.len());
    let leak: Vec<Vec<String>> = stacks
        .iter()
        .map(|&s| describe(s))
        .filter(|frames| frames[0] == "log_metrics (train.py:120)")
        .collect();
    assert_eq!(leak.len(), 1);
    let qkv = stacks
        .iter()
        .map(|&s| describe(s))
        .find(|f| f.get(3).map(String::as_str) == Some("forward (model.py:41)"))
        .unwrap();
    assert_eq!(
        qkv[0],
        "forward (/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py:125)"
    );
    assert!(qkv.contains(&"train_step (train.py:88)".to_string()));
}

#[test]
fn a_leak_grows_every_iteration_from_its_own_stack() {
    let (clean, clean_bytes) = run(&WorkloadConfig::default());
    let (leaky, bytes) = run(&WorkloadConfig {
        leak_bytes: 1 << 20,
        ..WorkloadConfig::default()
    });
    assert_eq!(leaky.leaked_bytes, 10 << 20);
    assert_eq!(leaky.final_allocated, clean.final_allocated + (10 << 20));
    let mib_blocks = |bytes: &[u8]| {
        let live = live_at_end(&events(bytes));
        live.values().filter(|&&s| s == 1 << 20).count()
    };
    assert_eq!(mib_blocks(&bytes), mib_blocks(&clean_bytes) + 10);
}

#[test]
fn a_small_device_runs_out_of_memory_and_the_run_ends_cleanly() {
    let config = WorkloadConfig {
        capacity: Some(300 << 20),
        leak_bytes: 8 << 20,
        iters: 100,
        ..WorkloadConfig::default()
    };
    let (report, bytes) = run(&config);
    let oom = report.oom.expect("the run should run out of memory");
    assert_eq!(report.iterations, oom.iteration);
    assert!(report.iterations < 100);
    let events = events(&bytes);
    let last_oom = events.iter().rposition(|e| e.kind() == EventKind::Oom);
    assert!(last_oom.is_some());
    assert_eq!(
        report.counts.get(EventKind::PhaseBegin),
        report.counts.get(EventKind::PhaseEnd)
    );
    // The failed iteration's tensors were released.
    let live = live_at_end(&events);
    assert_eq!(
        live.values().sum::<u64>(),
        report.parameter_bytes + report.optimizer_state_bytes + report.leaked_bytes
    );
}

#[test]
fn two_streams_free_across_streams_and_empty_cache_is_periodic() {
    let (report, bytes) = run(&WorkloadConfig {
        streams: 2,
        empty_cache_every: Some(3),
        ..WorkloadConfig::default()
    });
    assert_eq!(report.counts.get(EventKind::EmptyCache), 3);
    let events = events(&bytes);
    let mut requested_at = HashMap::new();
    let mut cross = 0;
    for e in &events {
        match e.data {
            EventData::FreeRequested(b) if b.stream == 1 => {
                requested_at.insert(b.addr, e.time_ns);
            }
            EventData::FreeCompleted(b) if b.stream == 1 => {
                assert!(requested_at[&b.addr] < e.time_ns);
                cross += 1;
            }
            EventData::Alloc(b) if b.stream == 1 => assert_eq!(b.thread, 1),
            _ => {}
        }
    }
    assert_eq!(cross, 10);
}

#[test]
fn the_event_count_knob_sets_the_size() {
    let (report, bytes) = run(&WorkloadConfig {
        events: Some(50_000),
        ..WorkloadConfig::default()
    });
    assert!(report.events >= 50_000 && report.events < 60_000);
    assert_eq!(events(&bytes).len() as u64, report.events);
}

#[test]
fn bad_configurations_are_errors() {
    for config in [
        WorkloadConfig {
            streams: 3,
            ..WorkloadConfig::default()
        },
        WorkloadConfig {
            seq_len: (10, 5),
            ..WorkloadConfig::default()
        },
        WorkloadConfig {
            empty_cache_every: Some(0),
            ..WorkloadConfig::default()
        },
    ] {
        assert!(matches!(
            generate(&config, Vec::new()),
            Err(WorkloadError::Invalid(_))
        ));
    }
}

/// Sizes whose products would wrap 64 bits, or that no allocator hands out,
/// are refused up front rather than wrapped into small blocks.
#[test]
fn sizes_beyond_any_block_are_refused() {
    for config in [
        WorkloadConfig {
            seq_len: (8, u64::MAX / 4),
            ..WorkloadConfig::default()
        },
        WorkloadConfig {
            seq_len: (1 << 31, 1 << 31),
            ..WorkloadConfig::default()
        },
        WorkloadConfig {
            leak_bytes: u64::MAX,
            ..WorkloadConfig::default()
        },
        WorkloadConfig {
            hidden: 1 << 40,
            ..WorkloadConfig::default()
        },
    ] {
        match generate(&config, &mut Vec::new()) {
            Err(WorkloadError::Invalid(why)) => assert!(why.contains("4 EiB"), "{why}"),
            other => panic!("{config:?}: {:?}", other.map(|r| r.events)),
        }
    }
    // A large leak that fits in 64 bits is an OOM the trace records.
    let (report, bytes) = run(&WorkloadConfig {
        iters: 2,
        leak_bytes: 1 << 61,
        ..WorkloadConfig::default()
    });
    assert!(report.oom.is_some());
    assert!(events(&bytes).iter().any(|e| e.kind() == EventKind::Oom));
}

/// Tags as a recording has them: parameters and optimizer state once, at
/// the first optimizer step; each iteration's gradients in its optimizer
/// phase; every tag names a live block of what it says; nothing else is
/// tagged; and the untagged trace has the same memory and times.
#[test]
fn parameters_gradients_and_state_are_tagged_in_the_optimizer_phase() {
    let config = WorkloadConfig {
        iters: 3,
        devices: 2,
        ..WorkloadConfig::default()
    };
    let (report, bytes) = run(&config);
    let header = TraceReader::new(&bytes[..]).unwrap().header().clone();
    assert_eq!(header.metadata["categories"], "tags");
    let events = events(&bytes);
    let params_per_device = 1 + 6 * config.layers as u64 + 1;
    let c = report.counts;
    assert_eq!(
        c.get(EventKind::Tag),
        2 * (params_per_device * (1 + 3) + 2 * params_per_device)
    );
    // Replay: each tag is of a live block, inside an optimizer phase, on
    // the device of that block.
    let mut live: HashMap<(u32, u64), (u64, StackId)> = HashMap::new();
    let mut phases: Vec<StringId> = Vec::new();
    let r = TraceReader::new(&bytes[..]).unwrap();
    let sym = r.symbols().clone();
    let mut per_category: HashMap<Category, (u64, u64)> = HashMap::new();
    let mut tagged_at: HashMap<(u32, u64), Category> = HashMap::new();
    for e in &events {
        match e.data {
            EventData::Alloc(b) => {
                live.insert((b.device, b.addr), (b.requested, b.stack));
            }
            EventData::FreeRequested(b) => {
                let key = (b.device, b.addr);
                live.remove(&key);
                tagged_at.remove(&key);
            }
            EventData::PhaseBegin { name, .. } => phases.push(name),
            EventData::PhaseEnd { .. } => {
                phases.pop();
            }
            EventData::Tag(t) => {
                let category = t.category().unwrap();
                let (requested, stack) = live[&(t.device, t.addr)];
                assert_eq!(
                    phases.last().and_then(|&p| sym.string(p)),
                    Some("optimizer")
                );
                // The block's allocation site says what it is.
                let site = sym
                    .stack(stack)
                    .first()
                    .map(|&f| sym.describe_frame(f))
                    .unwrap_or_default();
                let expected = match category {
                    Category::Parameter => site.contains("linear.py"),
                    Category::Gradient => site == "AccumulateGrad" || site == "EmbeddingBackward0",
                    Category::OptimizerState => site.contains("_init_group"),
                    other => panic!("{other:?} is never tagged"),
                };
                assert!(expected, "{category:?} at {site}");
                assert!(tagged_at.insert((t.device, t.addr), category).is_none());
                let sum = per_category.entry(category).or_default();
                sum.0 += 1;
                sum.1 += requested;
            }
            _ => {}
        }
    }
    let per_device = |c: Category| per_category[&c].1 / 2;
    assert_eq!(per_device(Category::Parameter), report.parameter_bytes);
    assert_eq!(
        per_device(Category::OptimizerState),
        report.optimizer_state_bytes
    );
    assert_eq!(per_device(Category::Gradient), 3 * report.parameter_bytes);

    let (plain, plain_bytes) = run(&WorkloadConfig {
        tags: false,
        ..config
    });
    let header = TraceReader::new(&plain_bytes[..]).unwrap().header().clone();
    assert!(!header.metadata.contains_key("categories"));
    assert_eq!(plain.counts.get(EventKind::Tag), 0);
    let untagged: Vec<Event> = events
        .into_iter()
        .filter(|e| e.kind() != EventKind::Tag)
        .collect();
    assert_eq!(untagged, self::events(&plain_bytes));
    assert_eq!(
        (plain.peak_allocated, plain.peak_reserved, plain.duration_ns),
        (
            report.peak_allocated,
            report.peak_reserved,
            report.duration_ns
        )
    );
}
