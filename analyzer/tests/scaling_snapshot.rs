//! Scaling of the snapshot reader, `merge` and `synth` on hostile shapes
//! (issue #32): ten times the input costs about ten times as much.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use support::pickle;
use support::scaling::assert_linear;
use vramtrace::snapshot::{ParsedSnapshot, parse_bytes};

fn parsed(bytes: &[u8]) -> Arc<ParsedSnapshot> {
    Arc::new(parse_bytes(bytes, &|_| {}).expect("a snapshot"))
}

/// Each device list is a run of its own, merged with the others by time:
/// once a scan of every run per event.
#[test]
fn many_device_lists_and_segments() {
    assert_linear(
        "snapshot with one device list and one segment per device",
        150,
        |n| pickle::device_lists(n, true),
        |bytes| {
            let (_, report) = parsed(bytes).write_trace(std::io::sink()).unwrap();
            assert!(report.event_counts.total() > 0);
        },
    );
}

/// Two devices whose entries alternate: as many runs as entries.
#[test]
fn interleaved_device_lists() {
    assert_linear(
        "merging two devices' interleaved entries",
        2_000,
        |n| parsed(&pickle::interleaved_devices(n)),
        |snapshot| {
            let (_, report) = snapshot.write_trace(std::io::sink()).unwrap();
            assert!(report.event_counts.total() > 0);
        },
    );
}

/// Memo indices far apart: the memo follows the entries stored.
#[test]
fn far_apart_memo_indices() {
    assert_linear(
        "a pickle storing into memo indices 65,535 apart",
        2_000,
        pickle::far_memo_puts,
        |bytes| {
            let value = vramtrace::snapshot::pickle::load(&bytes[..]).unwrap();
            assert_eq!(value, vramtrace::snapshot::pickle::Value::None);
        },
    );
}

/// A dict of many int keys: each new key is checked for a repeat.
#[test]
fn a_dict_of_many_keys() {
    assert_linear(
        "a dict of int keys",
        3_000,
        pickle::int_keyed_dict,
        |bytes| {
            let value = vramtrace::snapshot::pickle::load(&bytes[..]).unwrap();
            assert!(matches!(value, vramtrace::snapshot::pickle::Value::Dict(_)));
        },
    );
}

/// A list of scalars: 16 bytes a value, bounded in all.
#[test]
fn a_list_of_nones() {
    assert_linear(
        "a device list of Nones",
        50_000,
        pickle::none_list,
        |bytes| {
            let parsed = parse_bytes(bytes, &|_| {}).unwrap();
            assert!(!parsed.report().warnings.is_empty());
        },
    );
}

/// A JSON array of summaries, one element at a time.
#[test]
fn merging_an_array_of_summaries() {
    assert_linear(
        "merge of a JSON array of summaries",
        200,
        |n| {
            let items: Vec<String> = (0..n)
                .map(|i| {
                    format!(
                        r#"{{"schema_version": 2, "rank": {i}, "warnings": [], "devices": [{{"device": 0, "peak_allocated": {{"bytes": {i}, "time_ns": 5, "index": 1, "replayed_events": 2, "phase": null}}, "peak_reserved": {{"bytes": {i}, "time_ns": 6, "index": 2, "replayed_events": 3, "phase": null}}}}], "by_device": [{{"path": "rank-{i}.vtrace"}}]}}"#
                    )
                })
                .collect();
            format!("[{}]", items.join(","))
        },
        |text| {
            let paths = [PathBuf::from("ranks.json")];
            let table =
                vramtrace::print::merge::merge_from(&paths, |_| Ok(text.as_bytes())).unwrap();
            assert!(!table.rows.is_empty());
        },
    );
}

/// Synthetic iterations: each costs the same.
#[test]
fn synth_iterations() {
    use vramtrace_allocator::workload::{WorkloadConfig, generate};
    assert_linear(
        "synth iterations",
        5,
        |iters| WorkloadConfig {
            iters: iters as u64,
            layers: 1,
            ..WorkloadConfig::default()
        },
        |config| {
            let report = generate(config, std::io::sink()).unwrap();
            assert_eq!(report.iterations, config.iters);
        },
    );
}
