//! Charts and the HTML report on the bundled fixtures: well-formed, labelled,
//! within their size budgets, and the report renders in a real browser.

use std::path::Path;
use std::process::Command;
use vramtrace_e2e::{fixture, scratch, vramtrace};

/// Budgets from the issue: a chart under 2 MB, a report under 5 MB.
const SVG_BUDGET: u64 = 2 << 20;
const REPORT_BUDGET: u64 = 5 << 20;

fn read_svg(path: &Path) -> String {
    let size = std::fs::metadata(path).unwrap().len();
    assert!(size < SVG_BUDGET, "{} is {size} bytes", path.display());
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    text
}

/// The texts of every `<text>` element: what a reader sees.
fn texts(svg: &str) -> String {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_timeline_shows_phases_the_peak_and_the_leaking_site() {
    let dir = scratch("timeline");
    let out = dir.join("timeline.svg");
    let trace = fixture("leak.vtrace");
    vramtrace([
        "timeline".as_ref(),
        trace.as_os_str(),
        "--top".as_ref(),
        "16".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ])
    .success();
    let svg = read_svg(&out);
    let shown = texts(&svg);
    for label in [
        "iter0",
        "iter9",
        "peak 422.1 MiB",
        "log_metrics (train.py:120)",
        "reserved",
        "time",
        "memory",
    ] {
        assert!(
            shown.contains(label),
            "no '{label}' in the timeline's labels:\n{shown}"
        );
    }
    // Hover tooltips carry exact values.
    assert!(svg.contains("<title>"), "no tooltips");
    assert!(svg.contains("allocated 422.1 MiB") || svg.contains("peak 422.1 MiB at"));
}

#[test]
fn the_timeline_marks_ooms_and_splits_by_phase() {
    let dir = scratch("timeline-oom");
    let out = dir.join("oom.svg");
    let trace = fixture("oom.vtrace");
    vramtrace([
        "timeline".as_ref(),
        trace.as_os_str(),
        "--by".as_ref(),
        "phase".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ])
    .success();
    let shown = texts(&read_svg(&out));
    assert!(shown.contains("OOM"), "{shown}");
    assert!(shown.contains("iter#/forward"), "{shown}");
}

#[test]
fn the_timeline_as_json_has_samples_and_categories() {
    let trace = fixture("clean.vtrace");
    let v = vramtrace(["timeline".as_ref(), trace.as_os_str(), "--json".as_ref()])
        .success()
        .json();
    let samples = v["samples"].as_array().unwrap();
    assert!(samples.len() > 100, "{}", samples.len());
    let categories = v["categories"].as_array().unwrap().len();
    for s in samples {
        let values = s["values"].as_array().unwrap();
        assert_eq!(values.len(), categories);
        let sum: u64 = values.iter().map(|x| x.as_u64().unwrap()).sum();
        assert_eq!(
            sum,
            s["allocated"].as_u64().unwrap(),
            "categories add up to allocated"
        );
    }
}

#[test]
fn fragmentation_and_leak_charts_are_drawn() {
    let dir = scratch("charts");
    let frag = dir.join("fragmentation.svg");
    let leaks = dir.join("leaks.svg");
    let trace = fixture("leak.vtrace");
    vramtrace([
        "fragmentation".as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        frag.as_os_str(),
    ])
    .success();
    vramtrace([
        "leaks".as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        leaks.as_os_str(),
    ])
    .success();
    let shown = texts(&read_svg(&frag));
    assert!(
        shown.contains("largest free block") && shown.contains("external fragmentation"),
        "{shown}"
    );
    let shown = texts(&read_svg(&leaks));
    assert!(shown.contains("grows by 1.0 MiB per repetition"), "{shown}");
    assert!(shown.contains("+1.0 MiB / repetition"), "{shown}");
    assert!(shown.contains("log_metrics (train.py:120)"), "{shown}");
}

#[test]
fn a_leak_chart_of_a_trace_without_repeated_phases_is_refused() {
    let dir = scratch("charts-none");
    let trace = dir.join("two.vtrace");
    let out = dir.join("leaks.svg");
    // Two iterations: no phase repeats three times.
    vramtrace([
        "synth".as_ref(),
        "--iters".as_ref(),
        "2".as_ref(),
        "-o".as_ref(),
        trace.as_os_str(),
    ])
    .success();
    let run = vramtrace([
        "leaks".as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ])
    .fails_with(2);
    assert!(run.stderr.contains("no phase repeats"), "{}", run.stderr);
}

fn report(trace: &Path, name: &str) -> (std::path::PathBuf, String) {
    let dir = scratch(name);
    let out = dir.join("report.html");
    vramtrace([
        "report".as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ])
    .success();
    let size = std::fs::metadata(&out).unwrap().len();
    assert!(size < REPORT_BUDGET, "report is {size} bytes");
    let html = std::fs::read_to_string(&out).unwrap();
    (out, html)
}

#[test]
fn the_report_is_self_contained_and_says_what_it_found() {
    let (_, html) = report(&fixture("leak.vtrace"), "report-leak");
    // Nothing is fetched: no scripts, stylesheets, fonts or images from anywhere.
    for needle in [
        "src=\"http",
        "href=\"http",
        "@import",
        "url(",
        "<script src",
        "<link",
    ] {
        assert!(
            !html.contains(needle),
            "the report refers to something outside: {needle}"
        );
    }
    assert_eq!(
        html.matches("<svg").count(),
        3,
        "timeline, fragmentation and leak charts"
    );
    assert!(html.contains("keeps <b>+1.0 MiB per iteration</b>"));
    assert!(html.contains("log_metrics (train.py:120)"));
    assert!(html.contains("<details>"), "stacks are collapsible");
}

#[test]
fn the_report_of_a_snapshot_and_of_an_oom_run() {
    let (_, html) = report(
        &fixture("torch/cnn_eval_accumulate.pickle.xz"),
        "report-torch",
    );
    assert!(html.contains("871.5 MiB"), "the snapshot's allocated peak");
    let (_, html) = report(&fixture("oom.vtrace"), "report-oom");
    assert!(html.contains("id=\"ooms\""));
    assert!(html.contains("<b>Out of memory</b>"));
}

/// Chromium, when installed (CI installs it; elsewhere the test says it
/// was skipped, and fails under CI).
fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have chromium (.ci/run installs it)"
        );
        eprintln!("skipped: no chromium on this machine");
    }
    found
}

#[test]
fn the_report_renders_in_a_real_browser() {
    let Some(browser) = chromium() else { return };
    let (page, _) = report(&fixture("leak.vtrace"), "report-browser");
    let dir = page.parent().unwrap();
    let profile = dir.join("profile");
    let shot = dir.join("shot.png");
    let url = format!("file://{}", page.display());
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ];
    let run = |extra: &[&str]| {
        Command::new(browser)
            .args(flags)
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(&url)
            .output()
            .expect("run chromium")
    };
    // The DOM after loading: the page parsed and holds its sections.
    let dom = run(&["--dump-dom"]);
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains("id=\"findings\"") && dom.contains("<svg"),
        "the page did not load"
    );

    let out = run(&[
        "--window-size=1280,1600",
        &format!("--screenshot={}", shot.display()),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let pixels = &buf[..info.buffer_size()];
    let channels = info.color_type.samples();
    let mut colours = std::collections::HashSet::new();
    for px in pixels.chunks(channels) {
        colours.insert((px[0] >> 4, px[1] >> 4, px[2] >> 4));
    }
    // A blank or failed page has one or two colours; the report has the
    // dark header, cards, chart areas in the palette, text.
    assert!(
        colours.len() > 40,
        "the screenshot looks blank: {} colours",
        colours.len()
    );
}
