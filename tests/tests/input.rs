//! Opening inputs: traces, snapshots, compressed files, and everything that
//! is not one of them.

use vramtrace_e2e::{fixture, scratch, vramtrace};

#[test]
fn a_missing_file_is_one_line_and_exit_2() {
    let run = vramtrace(["info", "/nonexistent/run.vtrace"]).fails_with(2);
    assert!(run.stderr.contains("No such file"), "{}", run.stderr);
}

#[test]
fn a_file_of_another_format_is_one_line_and_exit_2() {
    let dir = scratch("wrong-format");
    let path = dir.join("notes.txt");
    std::fs::write(&path, "these are not allocator events").unwrap();
    let run = vramtrace(["info".as_ref(), path.as_os_str()]).fails_with(2);
    assert!(
        run.stderr.contains("not a vramtrace trace"),
        "{}",
        run.stderr
    );
    std::fs::write(&path, "").unwrap();
    vramtrace(["info".as_ref(), path.as_os_str()]).fails_with(2);
}

#[test]
fn a_bad_flag_is_one_line_and_exit_2() {
    let run = vramtrace(["info", "--frobnicate", "x.vtrace"]).fails_with(2);
    assert!(run.stderr.contains("--frobnicate"), "{}", run.stderr);
    vramtrace(["no-such-command"]).fails_with(2);
}

#[test]
fn help_and_version_succeed() {
    let run = vramtrace(["--help"]).success();
    assert!(run.stdout.contains("info"));
    let run = vramtrace(["--version"]).success();
    assert!(run.stdout.starts_with("vramtrace "));
    vramtrace(["info", "--help"]).success();
}

#[test]
fn a_snapshot_imports_to_a_trace_with_the_same_counts() {
    let dir = scratch("import");
    let out = dir.join("cnn.vtrace");
    let snapshot = fixture("torch/cnn_eval_accumulate.pickle.xz");
    let run = vramtrace([
        "import".as_ref(),
        snapshot.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "--json".as_ref(),
    ])
    .success();
    let report = run.result();
    assert_eq!(report["counts"]["alloc"], 3587);
    assert_eq!(report["counts"]["segment_alloc"], 47);
    assert_eq!(report["end_state_matches"], true);
    // The snapshot itself and its imported trace describe the same run.
    let from_trace = vramtrace(["info".as_ref(), out.as_os_str(), "--json".as_ref()])
        .success()
        .result();
    let from_snapshot = vramtrace(["info".as_ref(), snapshot.as_os_str(), "--json".as_ref()])
        .success()
        .result();
    assert_eq!(from_trace["counts"], from_snapshot["counts"]);
    assert_eq!(from_trace["duration_ns"], from_snapshot["duration_ns"]);
    assert_eq!(from_trace["counts"]["free_completed"], 3397);
    assert_eq!(from_trace["status"], "complete");
    assert_eq!(from_snapshot["status"], "complete");
    // A snapshot is not stored in chunks: its bytes are the pickle's.
    assert_eq!(from_trace["chunks"], 1);
    assert!(from_snapshot["chunks"].is_null());
    assert_eq!(from_snapshot["bytes"], report["pickle_bytes"]);
}

#[test]
fn importing_a_trace_is_refused() {
    let dir = scratch("import-trace");
    let out = dir.join("a.vtrace");
    let snapshot = fixture("torch/mlp_expandable.pickle.xz");
    vramtrace([
        "import".as_ref(),
        snapshot.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ])
    .success();
    let again = dir.join("b.vtrace");
    vramtrace([
        "import".as_ref(),
        out.as_os_str(),
        "-o".as_ref(),
        again.as_os_str(),
    ])
    .fails_with(2);
}

#[test]
fn a_truncated_trace_is_read_up_to_the_cut_with_a_warning() {
    let dir = scratch("truncated");
    let full = dir.join("full.vtrace");
    let snapshot = fixture("torch/cnn_eval_accumulate.pickle.xz");
    vramtrace([
        "import".as_ref(),
        snapshot.as_os_str(),
        "-o".as_ref(),
        full.as_os_str(),
    ])
    .success();
    let bytes = std::fs::read(&full).unwrap();
    let cut = dir.join("cut.vtrace");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    let run = vramtrace(["info".as_ref(), cut.as_os_str(), "--json".as_ref()]).success();
    assert!(
        run.stderr.contains("warning: trace is cut short"),
        "{}",
        run.stderr
    );
    assert_eq!(run.result()["status"], "truncated");
}

#[test]
fn a_damaged_record_is_skipped_and_named_with_its_offset() {
    let dir = scratch("corrupt");
    let full = dir.join("full.vtrace");
    let snapshot = fixture("torch/mlp_empty_cache.pickle.xz");
    vramtrace([
        "import".as_ref(),
        snapshot.as_os_str(),
        "-o".as_ref(),
        full.as_os_str(),
    ])
    .success();
    let mut bytes = std::fs::read(&full).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&full, &bytes).unwrap();
    let run = vramtrace(["info".as_ref(), full.as_os_str()]).success();
    assert!(
        run.stderr
            .contains("are damaged (record payload checksum mismatch) and were skipped"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.contains("status    damaged"), "{}", run.stdout);
    // A damaged header is beyond repair: an error naming its offset.
    bytes[20] ^= 0x40;
    std::fs::write(&full, &bytes).unwrap();
    let run = vramtrace(["info".as_ref(), full.as_os_str()]).fails_with(2);
    assert!(
        run.stderr.contains("corrupt trace at byte 13"),
        "{}",
        run.stderr
    );
}
