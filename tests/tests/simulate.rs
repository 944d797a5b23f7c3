//! `vramtrace simulate`: fidelity to the recordings, OOMs and their
//! capacity, policies side by side, and its chart.

use vramtrace_e2e::{fixture, scratch, vramtrace};

fn simulate_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["simulate"];
    all.extend_from_slice(args);
    all.push("--json");
    vramtrace(&all).success().json()
}

fn path(name: &str) -> String {
    fixture(name).display().to_string()
}

#[test]
fn every_fixture_and_snapshot_is_reproduced_exactly() {
    for name in [
        "clean.vtrace",
        "leak.vtrace",
        "fragmenting.vtrace",
        "oom.vtrace",
        "torch/cnn_eval_accumulate.pickle.xz",
        "torch/mlp_empty_cache.pickle.xz",
        "torch/mlp_expandable.pickle.xz",
        "torch/gpt2_train.pickle.xz",
        "torch/gpt2_midrun.pickle.xz",
    ] {
        let v = simulate_json(&[&path(name)]);
        let f = &v["fidelity"];
        assert_eq!(f["exact"], true, "{name}: {f:#}");
        assert_eq!(
            f["recorded_segment_actions"], f["simulated_segment_actions"],
            "{name}"
        );
        assert_eq!(
            f["recorded_peak_reserved_bytes"], f["simulated_peak_reserved_bytes"],
            "{name}"
        );
    }
}

#[test]
fn summary_and_simulate_of_real_snapshots_give_torchs_own_peaks() {
    // PyTorch's max_memory_allocated() and max_memory_reserved() in the
    // recorded runs (the .json beside each snapshot).
    for (name, allocated, reserved) in [
        (
            "torch/gpt2_train.pickle.xz",
            7_722_708_480u64,
            8_082_423_808u64,
        ),
        ("torch/gpt2_midrun.pickle.xz", 7_721_260_032, 8_082_423_808),
    ] {
        let summary = vramtrace(["summary", &path(name), "--json"])
            .success()
            .json();
        assert_eq!(summary["peak_allocated_bytes"], allocated, "{name}");
        assert_eq!(summary["peak_reserved_bytes"], reserved, "{name}");
        let sim = simulate_json(&[&path(name)]);
        assert_eq!(sim["peak_allocated_bytes"], allocated, "{name}");
        assert_eq!(sim["peak_reserved_bytes"], reserved, "{name}");
        assert_eq!(sim["recorded"]["peak_allocated_bytes"], allocated, "{name}");
    }
}

#[test]
fn the_oom_fixture_runs_out_at_the_recorded_request_on_1_gib() {
    let v = simulate_json(&[&path("oom.vtrace"), "--capacity", "1GiB"]);
    let oom = &v["oom"];
    assert_eq!(oom["recorded"], true, "{oom:#}");
    assert_eq!(oom["requested_bytes"], 89_128_960);
    assert!(
        oom["phase"].as_str().unwrap().starts_with("iter3"),
        "{oom:#}"
    );
    assert!(oom["event_index"].as_u64().unwrap() > 0);
    assert!(oom["shortfall_bytes"].as_u64().unwrap() > 0);
    assert!(!oom["site"].as_str().unwrap().is_empty());

    let free = simulate_json(&[&path("oom.vtrace")]);
    assert!(free["oom"].is_null(), "{:#}", free["oom"]);
    assert_eq!(free["alloc_retries"], 0);
}

#[test]
fn min_capacity_fits_and_2_mib_less_does_not() {
    let v = simulate_json(&[&path("oom.vtrace"), "--min-capacity"]);
    let min = v["min_capacity_bytes"].as_u64().unwrap();
    assert_eq!(min % (2 << 20), 0);
    let at = |c: u64| simulate_json(&[&path("oom.vtrace"), "--capacity", &c.to_string()]);
    assert!(at(min)["oom"].is_null());
    assert!(!at(min - (2 << 20))["oom"].is_null());
}

#[test]
fn expandable_segments_reduce_reserved_memory_when_fragmenting() {
    let v = simulate_json(&[&path("fragmenting.vtrace"), "--compare-policies"]);
    let policies = v["policies"].as_array().unwrap();
    let peak = |name: &str| {
        policies
            .iter()
            .find(|p| p["policy"].as_str().unwrap().starts_with(name))
            .unwrap_or_else(|| panic!("no policy {name}: {v:#}"))["peak_reserved_bytes"]
            .as_u64()
            .unwrap()
    };
    let default = peak("recorded");
    let expandable = peak("expandable_segments:True");
    assert!(
        expandable * 3 < default * 2,
        "expandable {expandable} vs default {default}"
    );
    assert_eq!(policies.len(), 4);
}

#[test]
fn a_bad_alloc_conf_is_a_one_line_usage_error_naming_the_key() {
    let run = vramtrace([
        "simulate",
        &path("clean.vtrace"),
        "--alloc-conf",
        "expandable_segments:True,no_such_key:4",
    ])
    .fails_with(2);
    assert!(run.stderr.contains("no_such_key"), "{}", run.stderr);
}

#[test]
fn the_chart_is_well_formed_svg_with_every_policy() {
    let dir = scratch("simulate");
    let out = dir.join("whatif.svg");
    let run = vramtrace([
        "simulate",
        &path("oom.vtrace"),
        "--capacity",
        "1GiB",
        "--compare-policies",
        "-o",
        out.to_str().unwrap(),
    ])
    .success();
    assert!(
        run.stdout.contains("out of memory at event"),
        "{}",
        run.stdout
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let labels: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    for want in [
        "expandable_segments:True: reserved",
        "capacity 1.0 GiB",
        "time",
    ] {
        assert!(
            labels.iter().any(|l| l.contains(want)),
            "no '{want}' in {labels:?}"
        );
    }
}
