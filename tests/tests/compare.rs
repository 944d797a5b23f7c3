//! `vramtrace compare` and `report --baseline` on the bundled fixtures: the
//! headline and site deltas, the `--fail-on` gate's exit codes, the diff
//! chart, and real PyTorch snapshots.

use vramtrace_e2e::{fixture, scratch, vramtrace};

fn path(name: &str) -> String {
    fixture(name).display().to_string()
}

#[test]
fn a_trace_against_itself_changes_nothing() {
    let clean = path("clean.vtrace");
    let run = vramtrace([
        "compare",
        &clean,
        &clean,
        "--json",
        "--fail-on",
        "peak_allocated:+0%,leak:+0,ooms:+0,duration:+0",
    ])
    .success();
    let json = run.result();
    for m in json["headline"].as_array().unwrap() {
        assert_eq!(m["delta"], 0, "{m}");
    }
    for s in json["sites"].as_array().unwrap() {
        assert_eq!(s["presence"], "both");
        assert_eq!(s["at_peak"]["delta"], 0);
        assert_eq!(s["allocations"]["delta"], 0);
    }
    assert_eq!(json["gate"]["passed"], true);
    assert_eq!(json["gate"]["checks"].as_array().unwrap().len(), 4);
}

#[test]
fn the_leak_site_comes_first_and_trips_the_gate() {
    let (clean, leak) = (path("clean.vtrace"), path("leak.vtrace"));
    let run = vramtrace(["compare", &clean, &leak, "--fail-on", "leak:+1MiB"]);
    assert_eq!(run.code, Some(1), "{run:#?}");
    assert!(
        run.stdout.contains("FAILED  leak:+1MiB"),
        "the failed threshold is named:\n{}",
        run.stdout
    );
    assert!(run.stdout.contains("leak growth per repetition"));

    let json = vramtrace(["compare", &clean, &leak, "--json"])
        .success()
        .result();
    let first_positive = json["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["at_peak"]["delta"].as_f64().unwrap() > 0.0)
        .unwrap();
    assert_eq!(first_positive["site"], "log_metrics (train.py:120)");
    assert_eq!(first_positive["presence"], "new");
    assert_eq!(first_positive["retained"]["delta"], 10 << 20);
    let leak_metric = json["headline"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "leak")
        .unwrap();
    assert_eq!(leak_metric["delta"], 1 << 20);

    let run = vramtrace([
        "compare",
        &clean,
        &leak,
        "--json",
        "--fail-on",
        "leak:+2MiB",
        "--fail-on",
        "peak_allocated:+5%",
    ])
    .success();
    assert_eq!(run.result()["gate"]["passed"], true);

    let run = vramtrace([
        "compare",
        &clean,
        &leak,
        "--json",
        "--fail-on",
        "leak:+1MiB,peak_allocated:+1%",
    ]);
    assert_eq!(run.code, Some(1));
    assert_eq!(
        run.result()["gate"]["failed"],
        serde_json::json!(["leak:+1MiB", "peak_allocated:+1%"])
    );
    assert!(run.stderr.contains("threshold crossed: leak:+1MiB"));
}

#[test]
fn bad_gates_and_inputs_are_usage_errors() {
    let clean = path("clean.vtrace");
    for (spec, says) in [
        ("peak:+5%", "unknown metric 'peak'"),
        ("leak:1MiB", "needs a sign"),
        ("leak", "METRIC:CHANGE"),
        ("leak:+1parsec", "parsec"),
        ("peak_allocated:+5%,", "empty"),
    ] {
        let run = vramtrace(["compare", &clean, &clean, "--fail-on", spec]).fails_with(2);
        assert!(run.stderr.contains(says), "{spec}: {}", run.stderr);
    }
    vramtrace(["compare", &clean, "/no/such/trace.vtrace"]).fails_with(2);
    vramtrace(["compare", &clean]).fails_with(2);
    // The chart's alignment needs the chart.
    vramtrace(["compare", &clean, &clean, "--align", "repetition"]).fails_with(2);
}

#[test]
fn real_snapshots_compare_in_any_mix() {
    let snapshots = [
        "torch/mlp_empty_cache.pickle.xz",
        "torch/mlp_expandable.pickle.xz",
        "torch/cnn_eval_accumulate.pickle.xz",
    ];
    for pair in snapshots.windows(2) {
        let run = vramtrace(["compare", &path(pair[0]), &path(pair[1])]).success();
        assert!(run.stdout.contains("peak allocated"), "{}", run.stdout);
        assert!(run.stdout.contains("sites (matched by"));
        let json = vramtrace(["compare", &path(pair[0]), &path(pair[1]), "--json"])
            .success()
            .result();
        assert!(!json["sites"].as_array().unwrap().is_empty());
    }
    // A trace against a snapshot, lines ignored.
    vramtrace([
        "compare",
        &path("leak.vtrace"),
        &path(snapshots[0]),
        "--ignore-lines",
    ])
    .success();
}

#[test]
fn the_diff_chart_parses_and_names_both_runs() {
    let dir = scratch("compare-svg");
    for align in ["time", "repetition"] {
        let out = dir.join(format!("diff-{align}.svg"));
        vramtrace([
            "compare",
            &path("clean.vtrace"),
            &path("leak.vtrace"),
            "-o",
            &out.display().to_string(),
            "--align",
            align,
        ])
        .success();
        let text = std::fs::read_to_string(&out).unwrap();
        let doc = roxmltree::Document::parse(&text).unwrap();
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let shown: String = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .collect::<Vec<_>>()
            .join("\n");
        for label in [
            "clean.vtrace",
            "leak.vtrace",
            "log_metrics (train.py:120) [new]",
        ] {
            assert!(shown.contains(label), "no '{label}' in:\n{shown}");
        }
        if align == "repetition" {
            assert!(shown.contains("repetition of iter#"));
        }
    }
    // Snapshots repeat their optimizer steps: those are their repetitions.
    let out = dir.join("snap.svg");
    vramtrace([
        "compare",
        &path("torch/mlp_empty_cache.pickle.xz"),
        &path("torch/mlp_expandable.pickle.xz"),
        "-o",
        &out.display().to_string(),
        "--align",
        "repetition",
    ])
    .success();
}

#[test]
fn the_report_holds_the_comparison() {
    let dir = scratch("compare-report");
    let out = dir.join("report.html");
    vramtrace([
        "report",
        &path("leak.vtrace"),
        "--baseline",
        &path("clean.vtrace"),
        "-o",
        &out.display().to_string(),
    ])
    .success();
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.contains("<section id=\"comparison\">"));
    assert!(html.contains("Compared with clean.vtrace"));
    assert!(html.contains("leak growth per repetition"));
    let section = &html[html.find("id=\"comparison\"").unwrap()..];
    let section = &section[..section.find("</section>").unwrap()];
    assert!(section.contains("<svg"), "the chart is inline");
    assert!(section.contains("log_metrics (train.py:120)"));
}
