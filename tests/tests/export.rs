//! `vramtrace export --format perfetto`: a trace-event document that
//! Perfetto's UI opens, checked against the trace-event format's rules and
//! the summary's figures.

use serde_json::Value;
use vramtrace_e2e::{fixture, scratch, vramtrace};

fn export(name: &str) -> (Value, Value) {
    let dir = scratch("export-perfetto");
    let out = dir.join(format!("{}.json", name.replace('/', "_")));
    let input = fixture(name);
    let run = vramtrace([
        "export",
        "--format",
        "perfetto",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ])
    .success();
    assert!(run.stdout.starts_with("wrote "), "{}", run.stdout);
    let document: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let summary = vramtrace(["summary", "--json", input.to_str().unwrap()])
        .success()
        .result();
    (document, summary)
}

/// The trace-event format's rules for the phases this export writes.
fn check_schema(document: &Value) {
    let events = document["traceEvents"]
        .as_array()
        .expect("traceEvents array");
    assert!(!events.is_empty());
    for e in events {
        let ph = e["ph"].as_str().expect("ph");
        assert!(e["pid"].is_u64(), "{e}");
        assert!(e["name"].is_string(), "{e}");
        match ph {
            "M" => assert!(e["args"]["name"].is_string(), "{e}"),
            "C" => {
                assert!(e["ts"].is_f64() || e["ts"].is_u64(), "{e}");
                let args = e["args"].as_object().expect("counter args");
                assert!(!args.is_empty() && args.values().all(Value::is_u64), "{e}");
            }
            "X" => {
                assert!(
                    e["ts"].is_number() && e["dur"].as_f64().unwrap() >= 0.0,
                    "{e}"
                );
                assert!(e["tid"].is_u64(), "{e}");
            }
            "i" => assert!(["t", "p", "g"].contains(&e["s"].as_str().unwrap()), "{e}"),
            other => panic!("phase {other} is not one this export writes: {e}"),
        }
    }
}

#[test]
fn counters_hold_the_peaks_and_phases_become_slices() {
    let (document, summary) = export("leak.vtrace");
    check_schema(&document);
    let events = document["traceEvents"].as_array().unwrap();
    let memory: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "GPU 0 memory")
        .collect();
    let max = |key: &str| {
        memory
            .iter()
            .map(|e| e["args"][key].as_u64().unwrap())
            .max()
    };
    assert_eq!(max("allocated"), summary["peak_allocated_bytes"].as_u64());
    assert_eq!(max("reserved"), summary["peak_reserved_bytes"].as_u64());
    // Category counters sum to allocated at every sample.
    let categories: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "GPU 0 allocated by category")
        .collect();
    assert_eq!(categories.len(), memory.len());
    for (c, m) in categories.iter().zip(&memory) {
        let sum: u64 = c["args"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(Some(sum), m["args"]["allocated"].as_u64(), "{c} {m}");
    }
    // Ten iterations, each with forward, backward and optimizer.
    let slices = events.iter().filter(|e| e["ph"] == "X").count();
    assert_eq!(slices, 40);
    // Unix time: the trace's start plus the event's offset, in µs.
    let start = document["otherData"]["start_unix_ns"].as_u64().unwrap();
    let first = memory[0]["ts"].as_f64().unwrap();
    assert!(first >= start as f64 / 1000.0, "{first} {start}");
}

#[test]
fn an_oom_is_an_instant() {
    let (document, summary) = export("oom.vtrace");
    check_schema(&document);
    let ooms: Vec<&Value> = document["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "i" && e["name"] == "out of memory")
        .collect();
    assert_eq!(ooms.len() as u64, summary["oom_count"].as_u64().unwrap());
    assert_eq!(
        ooms[0]["args"]["requested_bytes"],
        summary["ooms"][0]["requested_bytes"]
    );
}

#[test]
fn a_bad_format_names_the_valid_ones() {
    let run = vramtrace([
        "export",
        "--format",
        "speedscope",
        fixture("leak.vtrace").to_str().unwrap(),
        "-o",
        "/dev/null",
    ])
    .fails_with(2);
    assert!(
        run.stderr.contains("one of: perfetto, pprof"),
        "{}",
        run.stderr
    );
}

#[test]
fn beside_a_profiler_trace_the_memory_joins_it_on_its_clock() {
    let dir = scratch("export-beside");
    // A real snapshot: its times are Unix time, as a recording's are.
    let input = fixture("torch/gpt2_train.pickle.xz");
    let info = vramtrace(["info", "--json", input.to_str().unwrap()])
        .success()
        .result();
    let start = info["start_unix_ns"].as_u64().unwrap();
    // A torch.profiler trace whose clock starts 1 ms before the recording.
    let base = start - 1_000_000;
    let profiler = dir.join("torch_profiler.json");
    std::fs::write(
        &profiler,
        serde_json::json!({
            "schemaVersion": 1,
            "baseTimeNanoseconds": base,
            "traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1500.0, "dur": 2.0, "pid": 7, "tid": 7}],
        })
        .to_string(),
    )
    .unwrap();
    let out = dir.join("joined.json");
    vramtrace([
        "export",
        "--format",
        "perfetto",
        input.to_str().unwrap(),
        "--beside",
        profiler.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ])
    .success();
    let joined: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    check_schema_of_ours(&joined);
    let events = joined["traceEvents"].as_array().unwrap();
    assert_eq!(
        events[0]["name"], "aten::mm",
        "the profiler's events stay first"
    );
    assert_eq!(joined["baseTimeNanoseconds"], base);
    // Our first sample: 1 ms (the clocks' offset) plus its time in the trace.
    let first_time = vramtrace(["timeline", "--json", input.to_str().unwrap()])
        .success()
        .result()["samples"][0]["time_ns"]
        .as_u64()
        .unwrap();
    let ours = events
        .iter()
        .find(|e| e["ph"] == "C")
        .expect("our counters");
    let expected = (1_000_000 + first_time) as f64 / 1000.0;
    assert!(
        (ours["ts"].as_f64().unwrap() - expected).abs() < 1e-6,
        "{ours} vs {expected}"
    );
    // The profiler's trace is an input: never the output.
    let run = vramtrace([
        "export",
        "--format",
        "perfetto",
        input.to_str().unwrap(),
        "--beside",
        profiler.to_str().unwrap(),
        "-o",
        profiler.to_str().unwrap(),
    ])
    .fails_with(2);
    assert!(
        run.stderr.contains("would destroy the input"),
        "{}",
        run.stderr
    );
}

/// The schema check of our own events in a joined document.
fn check_schema_of_ours(document: &Value) {
    let ours: Vec<Value> = document["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] != "aten::mm")
        .cloned()
        .collect();
    check_schema(&serde_json::json!({ "traceEvents": ours }));
}

/// A torch.profiler trace of `events` kernels a microsecond apart from
/// `ts0` µs after `base` (ns of Unix time), each with some arguments.
fn profiler_trace(base: u64, ts0: f64, events: usize) -> String {
    let mut text =
        format!(r#"{{"schemaVersion": 1, "baseTimeNanoseconds": {base}, "traceEvents": ["#);
    for i in 0..events {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "ts": {}, "dur": 0.5, "pid": 7, "tid": 7, "args": {{"grid": [1, 2, 3], "block": [128, 1, 1], "stream": 7, "correlation": {i}}}}}"#,
            ts0 + i as f64
        ));
    }
    text.push_str("]}");
    text
}

#[test]
fn a_profiler_trace_of_another_time_is_joined_with_a_warning() {
    let dir = scratch("export-beside-apart");
    let input = fixture("torch/gpt2_train.pickle.xz");
    let info = vramtrace(["info", "--json", input.to_str().unwrap()])
        .success()
        .result();
    let start = info["start_unix_ns"].as_u64().unwrap();
    let out = dir.join("joined.json");
    let day = 86_400_000_000_000u64;
    for (name, base, apart) in [
        ("same", start - 1_000_000, false),
        ("a day later", start + day, true),
        ("decades earlier", start - 30 * 365 * day, true),
    ] {
        let profiler = dir.join("torch_profiler.json");
        std::fs::write(&profiler, profiler_trace(base, 1000.0, 3)).unwrap();
        let run = vramtrace([
            "export",
            "--format",
            "perfetto",
            input.to_str().unwrap(),
            "--beside",
            profiler.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .success();
        assert_eq!(
            run.stderr.contains("do not overlap in time"),
            apart,
            "{name}: {}",
            run.stderr
        );
        // Joined all the same: every event of theirs, then ours.
        let joined: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        assert_eq!(joined["traceEvents"][2]["args"]["correlation"], 2);
        assert_eq!(joined["baseTimeNanoseconds"], base);
    }
}

#[test]
fn a_large_profiler_trace_is_joined_in_memory_near_its_size() {
    // Issue #46: an 87 MB profiler trace took 1.74 GB, parsed into values
    // (a 41 MB one here: 514 MB). It now joins within 192 MiB of address
    // space more than the export alone needs: under five times its size.
    let dir = scratch("export-beside-large");
    let input = fixture("leak.vtrace");
    let profiler = dir.join("torch_profiler.json");
    let text = profiler_trace(1_700_000_000_000_000_000, 0.0, 210_000);
    assert!(text.len() > 40_000_000, "{}", text.len());
    std::fs::write(&profiler, &text).unwrap();
    let out = dir.join("joined.json");
    let alone = dir.join("alone.json");
    let export = |beside: bool, mib: u64| {
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "export".as_ref(),
            "--format".as_ref(),
            "perfetto".as_ref(),
            input.as_os_str(),
        ];
        if beside {
            args.extend([
                "--beside".as_ref(),
                profiler.as_os_str(),
                "-o".as_ref(),
                out.as_os_str(),
            ]);
        } else {
            args.extend(["-o".as_ref(), alone.as_os_str()]);
        }
        vramtrace_e2e::vramtrace_within(mib, args)
    };
    // The least address space the export alone runs in, to a 64 MiB step.
    let floor = (4..64u64)
        .map(|k| k * 64)
        .find(|&mib| export(false, mib).code == Some(0))
        .expect("the export alone runs within 4 GiB");
    let run = export(true, floor + 192);
    assert_eq!(
        run.code,
        Some(0),
        "within {} MiB: {}",
        floor + 192,
        run.stderr
    );
    let joined: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert!(joined["traceEvents"].as_array().unwrap().len() > 210_000);
}
