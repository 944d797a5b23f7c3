//! `vramtrace simulate`: fidelity to the recordings, OOMs and their
//! capacity, policies side by side, and its chart.

use vramtrace_e2e::{fixture, scratch, vramtrace};

fn simulate_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["simulate"];
    all.extend_from_slice(args);
    all.push("--json");
    vramtrace(&all).success().result()
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
            .result();
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
    // The synthetic device had no CUDA context: nothing reserved.
    let v = simulate_json(&[&path("oom.vtrace"), "--capacity", "1GiB", "--reserve", "0"]);
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
    let at = |c: u64| simulate_json(&[&path("oom.vtrace"), "--capacity", &format!("{c}B")]);
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
        "--reserve",
        "0",
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
    // The legend, in its column: each policy's name, and what its line is
    // on the next line; the allocator's limit is the device less the
    // reserve (none here).
    let lines: Vec<&str> = labels.iter().map(|l| l.trim()).collect();
    assert!(
        lines
            .windows(2)
            .any(|w| w == ["expandable_segments:True", "reserved"]),
        "{lines:?}"
    );
    for want in ["allocator's limit 1.0 GiB", "time"] {
        assert!(lines.contains(&want), "no '{want}' in {lines:?}");
    }
}

#[test]
fn a_size_without_a_unit_is_refused_and_units_mean_what_they_say() {
    let run = vramtrace(["simulate", &path("leak.vtrace"), "--capacity", "24"]).fails_with(2);
    assert!(run.stderr.contains("no unit"), "{}", run.stderr);
    let gb = simulate_json(&[&path("leak.vtrace"), "--capacity", "80GB", "--reserve", "0"]);
    assert_eq!(gb["capacity_bytes"], 80_000_000_000u64);
    let gib = simulate_json(&[
        &path("leak.vtrace"),
        "--capacity",
        "80GiB",
        "--reserve",
        "0",
    ]);
    assert_eq!(gib["capacity_bytes"], 80u64 << 30);
    let run = vramtrace(["simulate", &path("leak.vtrace"), "--gpu", "h1000"]).fails_with(2);
    assert!(
        run.stderr.contains("h100"),
        "names the known GPUs: {}",
        run.stderr
    );
}

#[test]
fn a_gpu_name_of_several_cards_is_refused_with_the_matches() {
    // An A100 has 40 or 80 GB: picking one would answer for a card the
    // user may not have.
    for command in ["simulate", "plan"] {
        let leak = path("leak.vtrace");
        let args: Vec<&str> = match command {
            "plan" => vec![command, &leak, &leak, "--gpu", "a100"],
            _ => vec![command, &leak, "--gpu", "a100"],
        };
        let run = vramtrace(args).fails_with(2);
        assert!(
            run.stderr.contains("a100-80gb") && run.stderr.contains("a100-40gb"),
            "{command}: lists the matches: {}",
            run.stderr
        );
    }
    // A whole name still picks its card.
    let run = vramtrace([
        "simulate",
        &path("leak.vtrace"),
        "--gpu",
        "A100 40GB",
        "--reserve",
        "0",
        "--json",
    ]);
    assert_eq!(run.success().result()["capacity_bytes"], 42_298_834_944u64);
}

#[test]
fn the_verdict_is_one_line_that_text_and_json_share() {
    // GPT-2 on an H100: PyTorch's peak reserved, 8,082,423,808 bytes, on
    // 79.18 GiB less 512 MiB for the CUDA context.
    let args = [
        path("torch/gpt2_train.pickle.xz"),
        "--gpu".into(),
        "h100".into(),
    ];
    let v = simulate_json(&[&args[0], &args[1], &args[2]]);
    let verdict = &v["verdict"];
    assert_eq!(verdict["outcome"], "fits");
    assert_eq!(v["device"]["name"], "H100 80GB");
    assert_eq!(v["reserve"]["bytes"], 512u64 << 20);
    let spare = (81_080u64 << 20) - (512 << 20) - 8_082_423_808;
    assert_eq!(verdict["spare_bytes"], spare);
    let line = verdict["line"].as_str().unwrap();
    assert_eq!(
        line,
        "fits on H100 80GB with 71.15 GiB to spare (512 MiB kept for the CUDA context)"
    );
    let text = vramtrace(["simulate", &args[0], &args[1], &args[2]])
        .success()
        .stdout;
    assert!(text.contains(&format!("verdict    {line}\n")), "{text}");

    // Fragmentation: the default policy runs out where expandable segments fit.
    let v = simulate_json(&[&path("fragmenting.vtrace"), "--capacity", "2.7GiB"]);
    let verdict = &v["verdict"];
    assert_eq!(verdict["outcome"], "out_of_memory");
    assert_eq!(verdict["fits_with"], "expandable_segments:True");
    let line = verdict["line"].as_str().unwrap();
    assert!(
        line.starts_with("runs out of memory on 2.70 GiB at iter18/backward, at train_step (train.py:90) via LogSoftmaxBackward0, asking for 208.2 MiB with ")
            // Memory not reserved is not fragmented: the free memory is
            // told apart, unreserved and cached, with the largest piece.
            && line.contains("with 279.9 MiB free in pieces: 100.8 MiB unreserved on the device and 179.1 MiB cached (largest cached block 76.9 MiB)")
            && line.ends_with("; expandable_segments:True fits"),
        "{line}"
    );

    // No device: what it needs, and the smallest GPU that has it.
    let v = simulate_json(&[&path("torch/gpt2_train.pickle.xz")]);
    assert_eq!(v["verdict"]["outcome"], "needs");
    assert_eq!(v["verdict"]["needs_bytes"], 8_082_423_808u64 + (512 << 20));
    assert!(
        v["verdict"]["line"]
            .as_str()
            .unwrap()
            .ends_with("fits on T4 16GB and larger"),
        "{}",
        v["verdict"]["line"]
    );
}

#[test]
fn min_capacity_reads_the_same_in_text_and_json() {
    let v = simulate_json(&[&path("oom.vtrace"), "--min-capacity"]);
    let min = v["min_capacity_bytes"].as_u64().unwrap();
    let text = vramtrace(["simulate", &path("oom.vtrace"), "--min-capacity"])
        .success()
        .stdout;
    let shown = format!("{:.2} GiB", min as f64 / (1u64 << 30) as f64);
    assert!(text.contains(&shown), "{shown} in:\n{text}");
}

#[test]
fn the_reports_what_if_agrees_with_simulate_reserve_included() {
    for name in ["leak.vtrace", "torch/cnn_eval_accumulate.pickle.xz"] {
        let dir = scratch("what-if-agrees");
        let page = dir.join("report.html");
        let report = vramtrace([
            "report",
            &path(name),
            "-o",
            &page.display().to_string(),
            "--json",
        ])
        .success()
        .result();
        let what_if = &report["what_if"];
        let simulated = simulate_json(&[&path(name), "--min-capacity"]);
        assert_eq!(
            what_if["min_capacity_bytes"], simulated["min_capacity_bytes"],
            "{name}: the report's smallest GPU is simulate's"
        );
        assert_eq!(what_if["reserve"], simulated["reserve"], "{name}");
        // Every capacity the page lists, simulate runs to the same outcome.
        for point in what_if["points"].as_array().unwrap() {
            let capacity = point["capacity_bytes"].as_u64().unwrap();
            let one = simulate_json(&[&path(name), "--capacity", &format!("{capacity}B")]);
            assert_eq!(
                one["oom"].is_null(),
                point["first_oom"].is_null(),
                "{name} at {capacity} bytes: report {point:#}, simulate {:#}",
                one["oom"]
            );
        }
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(
            html.contains("for the CUDA context (estimated)"),
            "{name}: the page says what it keeps off the allocator"
        );
    }
}

#[test]
fn the_reports_what_if_lists_capacities_a_reader_can_tell_apart() {
    // GPT-2's smallest fitting device (8.02 GiB) is within 11 MiB of the
    // device its unlimited peak needs: the steps between them made five
    // rows that all read 8.0 GiB, with the same outcome.
    for name in [
        "torch/gpt2_train.pickle.xz",
        "torch/mlp_empty_cache.pickle.xz",
        "leak.vtrace",
        "oom.vtrace",
    ] {
        let dir = scratch("what-if-apart");
        let page = dir.join("report.html");
        let report = vramtrace([
            "report",
            &path(name),
            "-o",
            &page.display().to_string(),
            "--json",
        ])
        .success()
        .result();
        let what_if = &report["what_if"];
        let capacities: Vec<u64> = what_if["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["capacity_bytes"].as_u64().unwrap())
            .collect();
        let min = what_if["min_capacity_bytes"].as_u64().unwrap();
        assert!(
            capacities.contains(&min),
            "{name}: the smallest that fits is listed"
        );
        for pair in capacities.windows(2) {
            assert!(
                (pair[1] - pair[0]) * 40 >= min,
                "{name}: {} and {} bytes are under a 40th of the smallest fitting device apart: {capacities:?}",
                pair[0],
                pair[1]
            );
        }
    }
}

#[test]
fn a_negative_size_is_told_apart_from_an_unknown_flag() {
    for size in ["-5GiB", "-1"] {
        let run = vramtrace(["simulate", &path("leak.vtrace"), "--capacity", size]).fails_with(2);
        assert!(
            run.stderr.contains(&format!("'{size}' is not a size")),
            "{}",
            run.stderr
        );
    }
}

#[test]
fn every_fix_offered_for_the_recorded_oom_removes_it_when_applied() {
    // Without a device, the fixes are tried where the recorded run failed,
    // on its recorded 1 GiB.
    let v = simulate_json(&[&path("oom.vtrace")]);
    let f = &v["fixes"];
    assert_eq!(f["limit_bytes"], 1u64 << 30, "{f:#}");
    let passed = f["passed"].as_array().unwrap();
    assert!(!passed.is_empty(), "{f:#}");
    assert!(passed.iter().all(|x| x["passed"] == true));
    // An allocator setting offered is one that, simulated on its own on the
    // same device, runs without an OOM.
    for fix in passed.iter().filter(|x| x["kind"] == "allocator_setting") {
        let conf = fix["change"]
            .as_str()
            .unwrap()
            .strip_prefix("PYTORCH_CUDA_ALLOC_CONF=")
            .unwrap();
        let alone = simulate_json(&[
            &path("oom.vtrace"),
            "--capacity",
            "1GiB",
            "--reserve",
            "0B",
            "--alloc-conf",
            conf,
        ]);
        assert_eq!(alone["policies"][0]["ooms"], 0, "{conf}: {alone:#}");
    }
    // Tried and failed fixes are kept apart, and the text names them.
    let text = vramtrace(["simulate", &path("oom.vtrace")])
        .success()
        .stdout;
    assert!(
        text.contains("fixes tried for the out-of-memory error"),
        "{text}"
    );
    assert!(text.contains("tried, still out of memory:"), "{text}");
    // A run that fits has none.
    assert!(simulate_json(&[&path("clean.vtrace")])["fixes"].is_null());
}

/// A run that does not fit gives one figure it needs, of device memory,
/// the reserve included; the other figures say which limit they are about
/// (the failing request's shortfall, the allocator's limit), and all agree.
#[test]
fn a_run_that_does_not_fit_gives_one_figure_it_needs() {
    let args = [path("oom.vtrace"), "--capacity".into(), "1000MiB".into()];
    let v = simulate_json(&[&args[0], &args[1], &args[2], "--min-capacity"]);
    let needs = v["verdict"]["needs_bytes"].as_u64().unwrap();
    let reserve = v["reserve"]["bytes"].as_u64().unwrap();
    let fixes = &v["fixes"];
    let limit = fixes["limit_bytes"].as_u64().unwrap();
    let more = fixes["needs_more_bytes"].as_u64().unwrap();
    // The allocator's limit that fits, and the device memory that holds it.
    assert_eq!(limit + more + reserve, needs, "{v:#}");
    let text = vramtrace(["simulate", &args[0], &args[1], &args[2], "--min-capacity"])
        .success()
        .stdout;
    let shown = format!("{:.2} GiB", needs as f64 / (1u64 << 30) as f64);
    assert_eq!(text.matches("need").count(), 1, "{text}");
    assert!(
        text.contains(&format!(
            "needs {shown} of device memory (the reserve included)"
        )),
        "{text}"
    );
    // The request's own shortfall and the allocator's limit are named so.
    assert!(
        text.contains("this request alone was 2.0 MiB short"),
        "{text}"
    );
    assert!(
        text.contains(
            "the allocator's limit would have to be 1.04 GiB, 578.0 MiB more than its 488 MiB"
        ),
        "{text}"
    );
}

/// The fixes' columns use the verdict's words (unreserved, cached): no
/// "free 1.6 GiB" in the verdict beside a fix that "frees 120 MiB" with
/// "left free 0 B".
#[test]
fn the_fixes_columns_say_what_they_count_in_the_verdicts_words() {
    let text = vramtrace(["simulate", &path("oom.vtrace")])
        .success()
        .stdout;
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("#  fix"))
        .unwrap_or_else(|| panic!("no fixes table:\n{text}"));
    assert!(header.contains("reserved less"), "{header}");
    assert!(header.contains("unreserved after"), "{header}");
    assert!(!header.contains("frees"), "{header}");
    assert!(!text.contains("left free"), "{text}");
    assert!(text.contains("cached free memory not counted"), "{text}");
}
