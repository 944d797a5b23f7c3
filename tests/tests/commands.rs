//! End-to-end tests of the replaying commands: the built binary on traces
//! written here.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use vramtrace_e2e::{binary, scratch};
use vramtrace_format::{
    BlockEvent, Event, EventData, Header, SegmentEvent, StackId, TraceWriter, WriterOptions,
};

const MIB: u64 = 1 << 20;

fn vramtrace(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .output()
        .expect("the binary runs")
}

fn temp_path(name: &str) -> PathBuf {
    scratch(&format!("commands-{name}")).join(name)
}

/// A training loop of `iterations` phases `iter{i}` with torch-like stacks,
/// optimizer state created in the first, and `leak` bytes kept per iteration
/// from their own stack.
fn training_trace(name: &str, iterations: u64, leak: u64) -> PathBuf {
    let options = WriterOptions {
        chunk_events: 1000,
        chunk_interval: None,
    };
    let mut w = TraceWriter::with_options(Vec::new(), Header::default(), options).unwrap();
    let torch = |w: &mut TraceWriter<Vec<u8>>, func: &str, file: &str, line: u32| -> StackId {
        w.intern_symbol_stack([
            ("torch::unwind::unwind()", "", 0),
            (
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
                "",
                0,
            ),
            ("??", "??", 0),
            (
                "forward",
                "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py",
                125,
            ),
            (func, file, line),
            ("main", "train.py", 99),
        ])
    };
    let act = torch(&mut w, "forward", "model.py", 41);
    let optim = torch(&mut w, "step", "train.py", 70);
    let leaky = torch(&mut w, "log_metrics", "train.py", 57);
    let mut t = 0;
    let mut push = |w: &mut TraceWriter<Vec<u8>>, data| {
        t += 1_000_000;
        w.push(Event { time_ns: t, data }).unwrap();
    };
    let block = |addr, size, stack| BlockEvent {
        addr,
        size,
        requested: size - 100,
        stack,
        ..Default::default()
    };
    push(
        &mut w,
        EventData::SegmentAlloc(SegmentEvent {
            addr: 0,
            size: 1 << 34,
            ..Default::default()
        }),
    );
    let mut leak_addr = 1 << 33;
    for i in 0..iterations {
        let name = w.intern_string(&format!("iter{i}"));
        push(&mut w, EventData::PhaseBegin { name, thread: 0 });
        push(&mut w, EventData::Alloc(block(0, 64 * MIB, act)));
        if i == 0 {
            push(&mut w, EventData::Alloc(block(1 << 32, 32 * MIB, optim)));
        }
        if leak > 0 {
            push(&mut w, EventData::Alloc(block(leak_addr, leak, leaky)));
            leak_addr += leak;
        }
        push(&mut w, EventData::FreeRequested(block(0, 64 * MIB, act)));
        push(&mut w, EventData::FreeCompleted(block(0, 64 * MIB, act)));
        push(&mut w, EventData::PhaseEnd { name, thread: 0 });
    }
    let path = temp_path(name);
    std::fs::write(&path, w.finish().unwrap()).unwrap();
    path
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    vramtrace_e2e::one_device(serde_json::from_slice(&out.stdout).expect("valid JSON"))
}

#[test]
fn summary_json_has_the_promised_keys() {
    let path = training_trace("steady.vtrace", 10, 0);
    let v = json(&vramtrace(&["summary", "--json", path.to_str().unwrap()]));
    for key in [
        "events",
        "duration_ns",
        "peak_allocated_bytes",
        "peak_reserved_bytes",
        "peak_requested_bytes",
        "peak_time_ns",
        "peak_phase",
        "top_sites_at_peak",
        "ooms",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["peak_allocated_bytes"], 96 * MIB);
    assert_eq!(v["peak_phase"], "iter0");
    assert_eq!(v["top_sites_at_peak"][0]["site"], "forward (model.py:41)");
    assert_eq!(
        v["at_peak"]["largest_free_block"],
        (1u64 << 34) - (1 << 32) - 32 * MIB
    );

    let text = vramtrace(&["summary", path.to_str().unwrap()]);
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("96.0 MiB"), "{text}");
    assert!(text.contains("forward (model.py:41)"), "{text}");

    // Several traces are summarized each on its own, unless their headers
    // say they are a run's ranks, or --ranks asks.
    let each = json(&vramtrace(&[
        "summary",
        "--json",
        path.to_str().unwrap(),
        path.to_str().unwrap(),
    ]));
    assert_eq!(each.as_array().map(Vec::len), Some(2));
    assert_eq!(each[1]["peak_allocated_bytes"], 96 * MIB);
    // As a rank set: one table, a row per trace, numbered in order when
    // neither headers nor names give ranks.
    let both = json(&vramtrace(&[
        "summary",
        "--json",
        "--ranks",
        path.to_str().unwrap(),
        path.to_str().unwrap(),
    ]));
    assert_eq!(both["rows"].as_array().map(Vec::len), Some(2));
    assert_eq!(both["ranks_from"], "order");
    assert_eq!(both["rows"][1]["peak_allocated"]["bytes"], 96 * MIB);
    assert_eq!(both["allocated"]["bytes"], 0);
}

#[test]
fn report_json_is_the_report() {
    let path = training_trace("report.vtrace", 10, 0);
    let html = temp_path("report.html");
    let v = json(&vramtrace(&[
        "report",
        path.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(v["summary"]["peak_allocated_bytes"], 96 * MIB);
    assert_eq!(v["name"], "report.vtrace");
    assert_eq!(v["wrote"]["path"], html.to_str().unwrap());
    assert_eq!(
        v["wrote"]["bytes"].as_u64(),
        std::fs::metadata(&html).ok().map(|m| m.len())
    );
    assert!(
        v["timeline"]["samples"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
    );
    assert!(v["comparison"].is_null());
    assert!(std::fs::read_to_string(&html).unwrap().contains("<svg"));
}

#[test]
fn leaks_finds_an_injected_leak_with_its_size() {
    let path = training_trace("leak.vtrace", 12, 3 * MIB);
    let v = json(&vramtrace(&["leaks", "--json", path.to_str().unwrap()]));
    let leaks = v["leaks"].as_array().unwrap();
    assert_eq!(leaks.len(), 1, "{leaks:?}");
    assert_eq!(leaks[0]["phase"], "iter#");
    assert_eq!(leaks[0]["bytes_per_repetition"], 3 * MIB);
    assert_eq!(leaks[0]["repetitions"], 12);
    assert_eq!(leaks[0]["site"], "log_metrics (train.py:57)");
    let iter = &v["repeated_phases"][0];
    assert_eq!(iter["phase"], "iter#");
    assert_eq!(iter["repetitions"], 12);
    assert_eq!(iter["trend"], "grows");
    assert_eq!(iter["bytes_per_repetition"], 3 * MIB);
    assert_eq!(
        iter["leaking_sites"][0]["frames"][0],
        "log_metrics (train.py:57)"
    );

    let steady = training_trace("steady2.vtrace", 12, 0);
    let v = json(&vramtrace(&["leaks", "--json", steady.to_str().unwrap()]));
    assert_eq!(v["leaks"].as_array().map(Vec::len), Some(0));
    assert_eq!(v["repeated_phases"][0]["trend"], "steady");

    // A window that stops before the leak has repeated enough.
    let v = json(&vramtrace(&[
        "leaks",
        "--json",
        "--to",
        "iter1",
        path.to_str().unwrap(),
    ]));
    assert_eq!(v["leaks"].as_array().map(Vec::len), Some(0));
}

#[test]
fn fragmentation_json_is_a_series() {
    let path = training_trace("frag.vtrace", 20, 0);
    let v = json(&vramtrace(&[
        "fragmentation",
        "--json",
        "--buckets",
        "4",
        path.to_str().unwrap(),
    ]));
    let buckets = v["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 4);
    assert_eq!(buckets[0]["reserved_bytes"], 1u64 << 34);
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let missing = vramtrace(&["summary", "/nonexistent/trace.vtrace"]);
    assert_eq!(missing.status.code(), Some(2));
    let err = String::from_utf8(missing.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: /nonexistent/trace.vtrace") && err.contains("No such file"),
        "{err}"
    );

    let junk = temp_path("junk.vtrace");
    std::fs::write(&junk, b"definitely not a trace").unwrap();
    let out = vramtrace(&["leaks", junk.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));

    let path = training_trace("flags.vtrace", 3, 0);
    for args in [
        &["summary", "--from", "2s", "--to", "1s"][..],
        &["summary", "--from", "no_such_phase"][..],
        &["leaks", "--skip-frames", "("][..],
        &["fragmentation", "--buckets", "0"][..],
    ] {
        let mut args = args.to_vec();
        args.push(path.to_str().unwrap());
        let out = vramtrace(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("error:"));
    }
}

#[test]
fn a_truncated_trace_is_analyzed_with_a_warning() {
    let path = training_trace("full.vtrace", 3000, 0);
    let bytes = std::fs::read(&path).unwrap();
    let cut = temp_path("cut.vtrace");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let out = vramtrace(&["summary", "--json", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("warning:") && err.contains("cut short"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["by_device"][0]["events"].as_u64().unwrap() > 0);
    // The JSON tells the warning too, once, with its input and a kind to
    // match on.
    let warnings = v["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{v:#}");
    assert_eq!(warnings[0]["kind"], "truncated");
    assert_eq!(warnings[0]["path"], cut.to_str().unwrap());
    assert!(
        warnings[0]["message"]
            .as_str()
            .unwrap()
            .contains("cut short")
    );
}

#[test]
fn site_folding_flags() {
    let path = training_trace("sites.vtrace", 3, 0);
    let p = path.to_str().unwrap();
    let v = json(&vramtrace(&["summary", "--json", p]));
    assert_eq!(
        v["top_sites_at_peak"][0]["frames"],
        serde_json::json!(["forward (model.py:41)", "main (train.py:99)"])
    );
    let v = json(&vramtrace(&[
        "summary",
        "--json",
        "--skip-frames",
        "model\\.py",
        p,
    ]));
    assert_eq!(v["top_sites_at_peak"][0]["site"], "main (train.py:99)");
    let v = json(&vramtrace(&["summary", "--json", "--full-stacks", p]));
    let frames = v["top_sites_at_peak"][0]["frames"].as_array().unwrap();
    assert_eq!(frames.len(), 6);
    assert_eq!(frames[0], "torch::unwind::unwind()");
}

#[test]
fn text_to_writes_the_tables_beside_the_json() {
    // One pass, both forms: the JSON on stdout, and in the file the tables
    // the command prints without --json.
    let trace = training_trace("text-to.vtrace", 6, MIB);
    let trace = trace.to_str().unwrap();
    let other = training_trace("text-to-other.vtrace", 6, 0);
    let other = other.to_str().unwrap();
    let commands: [&[&str]; 6] = [
        &["info", trace],
        &["summary", trace, other],
        &["leaks", trace],
        &["fragmentation", trace],
        &["simulate", "--capacity", "1GiB", trace],
        &["compare", other, trace],
    ];
    for args in commands {
        let tables = temp_path(&format!("{}.txt", args[0]));
        let _ = std::fs::remove_file(&tables);
        let text = vramtrace(args);
        let mut both: Vec<&str> = args.to_vec();
        both.extend(["--json", "--text-to", tables.to_str().unwrap()]);
        let out = vramtrace(&both);
        assert_eq!(out.status.code(), text.status.code(), "{args:?}");
        json(&out);
        assert_eq!(
            std::fs::read_to_string(&tables).unwrap(),
            String::from_utf8(text.stdout).unwrap(),
            "{args:?}"
        );
    }
    // Without --json it is a usage error: the tables are on stdout already.
    let out = vramtrace(&["info", trace, "--text-to", "t.txt"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!Path::new("t.txt").exists());
}
