//! Hostile snapshots, `merge` inputs and `synth` arguments (issue #32): each
//! once took unbounded time or memory, or aborted; each now gets a warning
//! or a one-line error, in bounded memory (`ulimit -v`) and time.

#[path = "../../analyzer/tests/support/pickle.rs"]
mod pickle;

use std::path::{Path, PathBuf};
use vramtrace_e2e::{scratch, vramtrace, vramtrace_within};

/// Address space for runs on hostile input, in MiB: far below the 4 GiB
/// and more these inputs once took.
const MIB: u64 = 1024;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn os(p: &Path) -> &std::ffi::OsStr {
    p.as_os_str()
}

#[test]
fn device_lists_past_the_device_limit_are_skipped_with_one_warning() {
    let dir = scratch("device_lists_past_the_limit");
    // 20,000 lists of `device_traces`, each holding one alloc: each list
    // was a device, and each event was merged by a scan of all of them.
    let path = write(&dir, "lists.pickle", &pickle::device_lists(20_000, false));
    for command in ["info", "summary"] {
        let run = vramtrace_within(MIB, [command.as_ref(), os(&path)]).success();
        let warnings: Vec<&str> = (run.stderr.lines())
            .filter(|l| l.contains("`device_traces`"))
            .collect();
        assert_eq!(warnings.len(), 1, "{command}: {}", run.stderr);
        assert!(
            warnings[0].contains("holds 20000 lists")
                && warnings[0].contains("only devices 0 to 1023 are read"),
            "{command}: {}",
            run.stderr
        );
    }
    let run = vramtrace(["summary".as_ref(), os(&path), "--json".as_ref()]).success();
    let devices = run.result()["devices"].as_array().map(Vec::len);
    assert_eq!(devices, Some(1024), "{}", run.stdout);
}

#[test]
fn memo_indices_far_apart_take_memory_for_what_is_stored() {
    let dir = scratch("memo_far_apart");
    // 16,000 memo stores, each 65,535 past the last: 80 KB that once
    // allocated 4 GiB of memo.
    let path = write(&dir, "memo.pickle", &pickle::far_memo_puts(16_000));
    let run = vramtrace_within(MIB, ["summary".as_ref(), os(&path)]).fails_with(2);
    assert!(
        run.stderr.contains("the top-level value is not a dict"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_list_of_nones_past_the_values_held_is_an_error() {
    let dir = scratch("none_list");
    let held = 1 << 24;
    let path = write(&dir, "nones.pickle", &pickle::none_list(held + 1000));
    let run = vramtrace_within(MIB, ["summary".as_ref(), os(&path)]).fails_with(2);
    assert!(
        run.stderr
            .contains(&format!("more than {held} values held at once")),
        "{}",
        run.stderr
    );
    // Below the bound, the list is read, and its items reported as no entries.
    let path = write(&dir, "fewer.pickle", &pickle::none_list(100_000));
    let run = vramtrace_within(MIB, ["summary".as_ref(), os(&path)]).success();
    assert!(
        run.stderr
            .contains("device 0: 100000 trace entries were not recognized"),
        "{}",
        run.stderr
    );
}

#[test]
fn merge_reads_an_array_one_summary_at_a_time() {
    let dir = scratch("merge_array");
    let n = 100_000;
    let mut text = String::from("[");
    for i in 0..n {
        if i > 0 {
            text.push(',');
        }
        // A summary padded with a long list (as `warnings` may be), which a
        // reader holding the whole document as values pays for many times.
        text.push_str(&format!(
            r#"{{"schema_version": 2, "rank": {i}, "warnings": [{pad}], "devices": [{{"device": 0, "peak_allocated": {{"bytes": {i}, "time_ns": 5, "index": 1, "replayed_events": 2, "phase": null}}, "peak_reserved": {{"bytes": {i}, "time_ns": 6, "index": 2, "replayed_events": 3, "phase": null}}}}], "by_device": [{{"path": "rank-{i}.vtrace"}}]}}"#,
            pad = ["0"; 100].join(",")
        ));
    }
    text.push(']');
    let path = write(&dir, "ranks.json", text.as_bytes());
    let run = vramtrace_within(256, ["merge".as_ref(), os(&path), "--json".as_ref()]).success();
    let rows = run.result()["rows"].as_array().map(Vec::len);
    assert_eq!(
        rows,
        Some(n),
        "{}",
        &run.stdout[..200.min(run.stdout.len())]
    );
}

#[test]
fn synth_bounds_its_layers_and_its_length() {
    let dir = scratch("synth_bounds");
    let out = dir.join("x.vtrace");
    let run = vramtrace_within(
        MIB,
        [
            "synth".as_ref(),
            "--layers".as_ref(),
            "4294967295".as_ref(),
            "-o".as_ref(),
            os(&out),
        ],
    )
    .fails_with(2);
    assert!(
        run.stderr.contains("4294967295 layers: at most 4096"),
        "{}",
        run.stderr
    );
    let run = vramtrace_within(
        MIB,
        [
            "synth".as_ref(),
            "--iters".as_ref(),
            "4294967295".as_ref(),
            "-o".as_ref(),
            os(&out),
        ],
    )
    .fails_with(2);
    assert!(
        run.stderr.contains("4294967295 iterations of")
            && run.stderr.contains("at most 8589934592 are written"),
        "{}",
        run.stderr
    );
    assert!(!out.exists(), "a refused run leaves no trace");
    let run = vramtrace([
        "synth".as_ref(),
        "--events".as_ref(),
        "1e12".as_ref(),
        "-o".as_ref(),
        os(&out),
    ])
    .fails_with(2);
    assert!(run.stderr.contains("at most 8589934592"), "{}", run.stderr);
}
