//! Several devices and several ranks: each device replayed apart, the
//! table of devices, `--device`, per-GPU simulation, rank sets and merging.

use std::path::PathBuf;
use std::process::{Command, Output};
use vramtrace_e2e::{binary, scratch};

fn vramtrace(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .output()
        .expect("run vramtrace")
}

fn ok(args: &[&str]) -> String {
    let out = vramtrace(args);
    assert!(
        out.status.success(),
        "vramtrace {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(args)).expect("valid JSON")
}

fn fixture(name: &str) -> String {
    vramtrace_e2e::fixture(name).display().to_string()
}

fn temp_dir(name: &str) -> PathBuf {
    scratch(name)
}

#[test]
fn each_device_is_summarized_apart_under_a_table_of_devices() {
    let two = fixture("two-devices.vtrace");
    let v = json(&["summary", "--json", &two]);
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    let by_device = v["by_device"].as_array().unwrap();
    for (i, (d, s)) in devices.iter().zip(by_device).enumerate() {
        assert_eq!(d["device"], i);
        assert_eq!(s["device"], i);
        // The table's peaks are each device's summary's.
        assert_eq!(d["peak_allocated"]["bytes"], s["peak_allocated_bytes"]);
        assert_eq!(d["peak_reserved"]["bytes"], s["peak_reserved_bytes"]);
        assert_eq!(d["peak_allocated"]["phase"], s["peak_allocated"]["phase"]);
    }
    // Device 1 carries longer sequences: a higher peak. Neither is the sum.
    let peak = |i: usize| devices[i]["peak_allocated"]["bytes"].as_u64().unwrap();
    assert!(peak(1) > peak(0), "{} {}", peak(0), peak(1));
    let one = json(&["summary", "--json", &fixture("leak.vtrace")]);
    assert!(
        peak(0)
            < one["by_device"][0]["peak_allocated_bytes"]
                .as_u64()
                .unwrap()
                * 2
    );

    let text = ok(&["summary", &two]);
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("device  peak allocated"), "{text}");
    assert!(text.contains("== device 0 ==") && text.contains("== device 1 =="));

    // --device picks one: its output is that of a single device.
    let only = json(&["summary", "--json", "--device", "1", &two]);
    assert_eq!(only["devices"].as_array().map(Vec::len), Some(1));
    assert_eq!(only["by_device"][0]["device"], 1);
    assert_eq!(only["by_device"][0]["peak_allocated_bytes"], peak(1));
    assert!(!ok(&["summary", "--device", "1", &two]).contains("== device"));

    let missing = vramtrace(&["summary", "--device", "5", &two]);
    assert_eq!(missing.status.code(), Some(2));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("device 5 has no event in it (its devices: 0, 1)"),
        "{err}"
    );
}

#[test]
fn a_single_device_reads_as_before_and_the_json_has_one_shape() {
    // No table of devices in the text.
    let text = ok(&["summary", &fixture("leak.vtrace")]);
    assert!(text.starts_with("trace "), "{text}");
    // The JSON has the same keys, in the same order, with one device or two.
    let keys =
        |v: &serde_json::Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    let envelope = ["by_device", "devices", "rank", "schema_version", "warnings"];
    for command in [
        &["summary"][..],
        &["leaks"],
        &["fragmentation"],
        &["timeline"],
        &["flamegraph"],
        &["simulate"],
    ] {
        for trace in ["leak.vtrace", "two-devices.vtrace"] {
            let path = fixture(trace);
            let args: Vec<&str> = (command.iter().copied())
                .chain(["--json", path.as_str()])
                .collect();
            let text = ok(&args);
            assert!(text.starts_with("{\n  \"schema_version\": 2,"), "{text}");
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(keys(&v), envelope, "{command:?} {trace}");
            assert_eq!(v["schema_version"], 2);
            let devices = v["devices"].as_array().unwrap().len();
            assert_eq!(devices, v["by_device"].as_array().unwrap().len());
            assert_eq!(devices, if trace == "leak.vtrace" { 1 } else { 2 });
        }
    }
    let leak = fixture("leak.vtrace");
    let cmp = json(&["compare", "--json", &leak, &leak]);
    assert_eq!(keys(&cmp), envelope);
}

#[test]
fn every_command_keeps_devices_apart() {
    let two = fixture("two-devices.vtrace");
    let summary = json(&["summary", "--json", &two]);
    for command in ["leaks", "fragmentation", "timeline"] {
        let v = json(&[command, "--json", &two]);
        assert_eq!(
            v["by_device"].as_array().map(Vec::len),
            Some(2),
            "{command}"
        );
        // The same peaks; categories only from the commands that tell
        // them apart (fragmentation and timeline skip the inference).
        let peaks = |v: &serde_json::Value| {
            let mut devices = v["devices"].clone();
            for d in devices.as_array_mut().unwrap() {
                d.as_object_mut().unwrap().remove("categories_at_peak");
            }
            devices
        };
        assert_eq!(peaks(&v), peaks(&summary), "{command}");
        let categories = v["devices"][0]["categories_at_peak"].as_array().unwrap();
        assert_eq!(categories.is_empty(), command != "leaks", "{command}");
    }
    // Each device leaks its own 1 MiB per iteration.
    let leaks = json(&["leaks", "--json", &two]);
    for d in leaks["by_device"].as_array().unwrap() {
        let site = &d["leaks"][0];
        assert_eq!(site["site"], "log_metrics (train.py:120)", "{d}");
    }
    // A capacity is one GPU's: each device is simulated on its own.
    let sim = json(&["simulate", "--json", "--min-capacity", &two]);
    let per_device = sim["by_device"].as_array().unwrap();
    assert_eq!(per_device.len(), 2);
    for (d, s) in per_device
        .iter()
        .zip(summary["by_device"].as_array().unwrap())
    {
        assert_eq!(
            d["recorded"]["peak_allocated_bytes"],
            s["peak_allocated_bytes"]
        );
        // The smallest GPU, less the context's reserve, holds this device's
        // peak, not both devices'.
        let gpu =
            d["min_capacity_bytes"].as_u64().unwrap() - d["reserve"]["bytes"].as_u64().unwrap();
        assert!(gpu <= s["peak_reserved_bytes"].as_u64().unwrap(), "{gpu}");
    }
    // Device i against device i.
    let cmp = json(&["compare", "--json", &two, &two]);
    assert_eq!(cmp["by_device"].as_array().map(Vec::len), Some(2));
    let err = vramtrace(&["compare", &two, &fixture("leak.vtrace")]);
    assert_eq!(err.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&err.stderr).contains("different devices"));
    assert_eq!(
        json(&["compare", "--json", "--device", "0", &two, &two])["by_device"][0]["gate"]["passed"],
        true
    );
    // A chart draws one device, named in its title.
    let svg = temp_dir("devices-chart").join("timeline.svg");
    let out = vramtrace(&["timeline", &two, "-o", svg.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("drew device 1"));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("device 1"));
}

#[test]
fn a_folder_of_ranks_is_one_rank_table_and_json_summaries_merge_into_it() {
    let dir = temp_dir("ranks");
    let pattern = dir.join("run-%r.vtrace");
    ok(&[
        "synth",
        "--iters",
        "3",
        "--world-size",
        "4",
        "-o",
        pattern.to_str().unwrap(),
    ]);
    let table = json(&["summary", "--json", dir.to_str().unwrap()]);
    assert_eq!(table["ranks_from"], "header");
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for (rank, row) in rows.iter().enumerate() {
        assert_eq!(row["rank"], rank);
        assert_eq!(row["device"], rank);
    }
    // The load grows with the rank: rank 3 peaks highest.
    assert_eq!(table["allocated"]["highest"]["rank"], 3);
    assert_eq!(table["allocated"]["lowest"]["rank"], 0);
    let spread = table["allocated"]["bytes"].as_u64().unwrap();
    assert_eq!(
        spread,
        rows[3]["peak_allocated"]["bytes"].as_u64().unwrap()
            - rows[0]["peak_allocated"]["bytes"].as_u64().unwrap()
    );
    let text = ok(&["summary", dir.to_str().unwrap(), "--in-flight", "1"]);
    assert!(text.contains("4 ranks"), "{text}");

    // The report of the set: the highest rank's page, with every rank's
    // memory over time as small multiples.
    let html = dir.join("report.html");
    let v = json(&[
        "report",
        "--json",
        dir.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]);
    assert_eq!(v["name"], "run-3.vtrace");
    assert_eq!(v["ranks"]["table"]["rows"], table["rows"]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<section id=\"ranks\"><h2>Ranks (4)</h2>"));
    for rank in 0..4 {
        assert!(
            page.contains(&format!("rank {rank} · dev {rank} · ")),
            "rank {rank}"
        );
    }

    // The same table from per-rank JSON made anywhere, and from tables.
    let mut files = Vec::new();
    for rank in 0..2 {
        let trace = dir.join(format!("run-{rank}.vtrace"));
        let out = dir.join(format!("rank{rank}.json"));
        std::fs::write(&out, ok(&["summary", "--json", trace.to_str().unwrap()])).unwrap();
        files.push(out);
    }
    let rest = dir.join("rest.json");
    let two = [dir.join("run-2.vtrace"), dir.join("run-3.vtrace")];
    let args = [
        "summary",
        "--json",
        two[0].to_str().unwrap(),
        two[1].to_str().unwrap(),
    ];
    std::fs::write(&rest, ok(&args)).unwrap();
    files.push(rest);
    let mut args = vec!["merge", "--json"];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let merged = json(&args);
    assert_eq!(merged["rows"], table["rows"]);
    assert_eq!(merged["allocated"], table["allocated"]);

    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"x\": 1}").unwrap();
    let out = vramtrace(&["merge", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn leaks_and_compare_take_rank_sets() {
    let base = temp_dir("ranks-base");
    let new = temp_dir("ranks-new");
    for (dir, leak) in [(&base, "0"), (&new, "4MiB")] {
        let pattern = dir.join("run-%r.vtrace");
        ok(&[
            "synth",
            "--iters",
            "4",
            "--world-size",
            "3",
            "--leak-bytes",
            leak,
            "-o",
            pattern.to_str().unwrap(),
        ]);
    }
    let leaks = json(&["leaks", "--json", new.to_str().unwrap()]);
    let rows = leaks["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for (rank, row) in rows.iter().enumerate() {
        assert_eq!(row["rank"], rank);
        assert_eq!(row["leaks"][0]["site"], "log_metrics (train.py:120)");
        let growth = row["leaks"][0]["bytes_per_repetition"].as_u64().unwrap();
        assert!((3 << 20..5 << 20).contains(&growth), "{growth}");
    }
    // Rank i against rank i: the leak crosses the gate on every rank.
    let out = vramtrace(&[
        "compare",
        "--json",
        base.to_str().unwrap(),
        new.to_str().unwrap(),
        "--fail-on",
        "peak_allocated:+1MiB",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r["gate"]["passed"] == false));
    let text = ok(&["compare", base.to_str().unwrap(), base.to_str().unwrap()]);
    assert!(text.contains("passed on every rank"), "{text}");
    // Sets of other ranks do not pair.
    std::fs::remove_file(new.join("run-2.vtrace")).unwrap();
    let out = vramtrace(&["compare", base.to_str().unwrap(), new.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rank sets differ"));
}

#[test]
fn a_snapshot_of_two_gpus_is_not_summed() {
    // A real run's snapshot as if recorded on two GPUs at once, at the same
    // addresses: each GPU peaks at the run's own peak, not at the sum.
    let two = fixture("torch/synthetic/two_devices_p4.pickle.xz");
    let one = json(&[
        "summary",
        "--json",
        &fixture("torch/mlp_empty_cache.pickle.xz"),
    ])["by_device"][0]
        .clone();
    let v = json(&["summary", "--json", &two]);
    for d in v["by_device"].as_array().unwrap() {
        assert_eq!(d["peak_allocated_bytes"], one["peak_allocated_bytes"]);
        assert_eq!(d["peak_reserved_bytes"], one["peak_reserved_bytes"]);
        assert_eq!(d["inconsistencies"]["total"], 0);
    }
    // The smallest GPU that fits is one run's, on each device.
    let alone = json(&[
        "simulate",
        "--json",
        "--min-capacity",
        &fixture("torch/mlp_empty_cache.pickle.xz"),
    ])["by_device"][0]
        .clone();
    let sim = json(&["simulate", "--json", "--min-capacity", &two]);
    let per_gpu = sim["by_device"].as_array().unwrap();
    assert_eq!(per_gpu.len(), 2);
    for d in per_gpu {
        assert_eq!(d["min_capacity_bytes"], alone["min_capacity_bytes"]);
    }
}
