//! `vramtrace leaks`: the exact verdicts on the bundled fixtures and the real
//! PyTorch snapshots, and the report card's leak.

use vramtrace_e2e::{fixture, scratch, vramtrace};

const MIB: u64 = 1 << 20;

fn leaks(name: &str) -> serde_json::Value {
    let path = fixture(name).display().to_string();
    vramtrace(["leaks", &path, "--json"]).success().result()
}

/// (phase, trend) of every repeated phase, in order.
fn trends(v: &serde_json::Value) -> Vec<(String, String)> {
    v["repeated_phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["phase"].as_str().unwrap().to_string(),
                p["trend"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn expect(name: &str, want: &[(&str, &str)]) -> serde_json::Value {
    let v = leaks(name);
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect();
    assert_eq!(trends(&v), want, "{name}");
    v
}

/// (site, phase, bytes per repetition, retained bytes) of every leak.
fn leak_list(v: &serde_json::Value) -> Vec<(String, String, u64, u64)> {
    v["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["site"].as_str().unwrap().to_string(),
                l["phase"].as_str().unwrap().to_string(),
                l["bytes_per_repetition"].as_u64().unwrap(),
                l["retained_bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn log_metrics(rate: u64, retained: u64) -> Vec<(String, String, u64, u64)> {
    vec![(
        "log_metrics (train.py:120)".into(),
        "iter#".into(),
        rate,
        retained,
    )]
}

#[test]
fn the_clean_run_is_steady_and_leaks_nothing() {
    let v = expect(
        "clean.vtrace",
        &[
            ("iter#", "steady"),
            ("iter#/backward", "steady"),
            ("iter#/forward", "steady"),
            ("iter#/optimizer", "steady"),
        ],
    );
    assert!(leak_list(&v).is_empty());
}

#[test]
fn the_leak_fixture_leaks_once_from_log_metrics() {
    let v = expect(
        "leak.vtrace",
        &[
            ("iter#", "grows"),
            ("iter#/backward", "grows"),
            ("iter#/forward", "grows"),
            ("iter#/optimizer", "grows"),
        ],
    );
    assert_eq!(leak_list(&v), log_metrics(MIB, 10 * MIB));
    assert_eq!(v["leaks"][0]["steadiness"], 1.0);
}

#[test]
fn varying_shapes_vary_and_leak_nothing() {
    let v = expect(
        "fragmenting.vtrace",
        &[
            ("iter#", "steady"),
            ("iter#/backward", "varies"),
            ("iter#/forward", "varies"),
            ("iter#/optimizer", "steady"),
        ],
    );
    assert!(leak_list(&v).is_empty());
}

#[test]
fn the_oom_fixture_leaks_16_mib_per_iteration_and_its_forward_pass_varies() {
    let v = expect(
        "oom.vtrace",
        &[
            ("iter#", "grows"),
            ("iter#/backward", "varies"),
            ("iter#/forward", "varies"),
            ("iter#/optimizer", "grows"),
        ],
    );
    // Iteration 3 ran out of memory before its leak: left out of the fit.
    assert_eq!(leak_list(&v), log_metrics(16 * MIB, 48 * MIB));
    assert_eq!(v["repeated_phases"][0]["cut_short_repetitions"][0], 3);
    assert_eq!(v["leaks"][0]["repetitions"], 3);
}

#[test]
fn the_real_snapshots_leak_nothing() {
    let cases: [(&str, &[(&str, &str)]); 4] = [
        (
            "torch/cnn_eval_accumulate.pickle.xz",
            &[
                ("train_epoch#/Optimizer.step#SGD.step", "steady"),
                ("train_epoch#/Optimizer.zero_grad#SGD.zero_grad", "steady"),
            ],
        ),
        (
            // Three experiments with models of three widths.
            "torch/mlp_empty_cache.pickle.xz",
            &[
                ("experiment#", "steady"),
                ("experiment#/Optimizer.step#Adam.step", "varies"),
                ("experiment#/Optimizer.zero_grad#Adam.zero_grad", "varies"),
            ],
        ),
        (
            "torch/mlp_expandable.pickle.xz",
            &[
                ("Optimizer.step#AdamW.step", "steady"),
                ("Optimizer.zero_grad#AdamW.zero_grad", "steady"),
            ],
        ),
        (
            "torch/gpt2_train.pickle.xz",
            &[
                ("Optimizer.step#AdamW.step", "steady"),
                ("Optimizer.zero_grad#AdamW.zero_grad", "steady"),
            ],
        ),
    ];
    for (name, want) in cases {
        let v = expect(name, want);
        assert!(leak_list(&v).is_empty(), "{name}");
    }
}

#[test]
fn text_says_one_word_per_verdict_and_names_the_leak_once() {
    let path = fixture("oom.vtrace").display().to_string();
    let text = vramtrace(["leaks", &path]).success().stdout;
    let (leak_section, rest) = text.split_once("repeated phases").unwrap();
    assert_eq!(
        leak_section.matches("log_metrics (train.py:120)").count(),
        1,
        "{text}"
    );
    assert!(rest.contains("log_metrics"), "retained and never freed too");
    assert!(!text.contains("LEAK"), "{text}");
    assert!(text.contains("varies"), "{text}");
}

#[test]
fn the_report_names_the_leaking_site_and_its_rate() {
    let dir = scratch("leaks-report");
    let html = dir.join("oom.html");
    let path = fixture("oom.vtrace").display().to_string();
    let run = vramtrace(["report", &path, "-o", html.to_str().unwrap()]).success();
    assert!(
        run.stdout
            .contains("leak: log_metrics (train.py:120) +16.0 MiB per iteration"),
        "{}",
        run.stdout
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("+16.0 MiB per iteration"), "the card's rate");
    assert!(
        page.contains("log_metrics (train.py:120)"),
        "the card's site"
    );
    assert!(!page.contains("173.1 MiB"), "a varying phase is no leak");
}

#[test]
fn the_leak_chart_marks_whole_repetitions() {
    let dir = scratch("leaks-ticks");
    let svg = dir.join("oom-leaks.svg");
    let path = fixture("oom.vtrace").display().to_string();
    vramtrace(["leaks", &path, "-o", svg.to_str().unwrap()]).success();
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
    let labels: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    // Repetitions 0 to 3, whole: no "-0", no fractions.
    assert!(!labels.contains(&"-0"), "{labels:?}");
    for t in ["0", "1", "2", "3"] {
        assert!(labels.contains(&t), "no tick {t}: {labels:?}");
    }
    let fraction = |l: &&str| l.contains('.') && l.parse::<f64>().is_ok();
    assert!(!labels.iter().any(fraction), "{labels:?}");
}

#[test]
fn report_of_two_traces_read_as_ranks_is_a_rank_set() {
    let help = vramtrace(["report", "--help"]).success().stdout;
    assert!(help.contains("<TRACE>..."), "{help}");
    let dir = scratch("report-two");
    let out = dir.join("r.html");
    let a = fixture("clean.vtrace").display().to_string();
    let b = fixture("leak.vtrace").display().to_string();
    vramtrace(["report", "--ranks", &a, &b, "-o", out.to_str().unwrap()]).success();
    // The page is the leaking run's (its peak is higher), ranks in order.
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.contains("<section id=\"ranks\"><h2>Ranks (2)</h2>"));
    assert!(page.contains("<b>leak.vtrace</b>, whose allocated peak is highest"));
    // A baseline compares one trace, not a set.
    let run = vramtrace([
        "report",
        "--ranks",
        &a,
        &b,
        "--baseline",
        &a,
        "-o",
        out.to_str().unwrap(),
    ])
    .fails_with(2);
    assert!(
        run.stderr.contains("--baseline compares one trace"),
        "{}",
        run.stderr
    );
}

/// The report's leak chart says what it draws: a phase that varies says
/// between what and what (its line looked flat under "varies"), and the
/// caption speaks of a fitted line only where one is drawn.
#[test]
fn the_leak_charts_words_match_what_it_draws() {
    let mut seen = 0;
    for name in [
        "clean.vtrace",
        "leak.vtrace",
        "oom.vtrace",
        "two-devices.vtrace",
        "fragmenting.vtrace",
    ] {
        let dir = vramtrace_e2e::scratch(&format!("leaks-words-{name}"));
        let page = std::fs::read_to_string(vramtrace_e2e::write_report(
            &vramtrace_e2e::fixture(name),
            &dir,
        ))
        .unwrap();
        let Some(at) = page.find("<section id=\"leaks\"") else {
            continue;
        };
        let section = &page[at..at + page[at..].find("</section>").unwrap()];
        let Some(figure) = section.find("<figure>") else {
            continue;
        };
        let figure = &section[figure..section.find("</figure>").unwrap()];
        let caption = &figure[figure.find("<figcaption>").unwrap()..];
        let fitted = figure.contains(": grows by ") || figure.contains(": shrinks by ");
        assert_eq!(caption.contains("dashed line"), fitted, "{name}: {caption}");
        if figure.contains(": varies ") {
            assert!(figure.contains("varies between "), "{name}: {figure}");
        }
        seen += 1;
    }
    assert!(seen >= 3, "too few leak charts");
}
