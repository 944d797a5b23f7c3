//! Charts and the HTML report on the bundled fixtures: well-formed, labelled,
//! within their size budgets, and the report renders in a real browser.

use std::path::Path;
use std::process::Command;
use vramtrace_e2e::{chromium, fixture, scratch, vramtrace, write_report};

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
    // A run that ran out of memory is drawn with the device's memory.
    assert!(shown.contains("device memory 1.0 GiB"), "{shown}");
}

#[test]
fn the_timeline_as_json_has_samples_and_categories() {
    let trace = fixture("clean.vtrace");
    let v = vramtrace(["timeline".as_ref(), trace.as_os_str(), "--json".as_ref()])
        .success()
        .result();
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
fn a_leak_chart_of_a_trace_without_repeated_phases_is_not_drawn_but_the_report_is() {
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
    .success();
    assert!(
        run.stderr.contains("no chart written") && run.stderr.contains("no phase repeats"),
        "{}",
        run.stderr
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stdout.contains("never freed"),
        "the report: {}",
        run.stdout
    );
    assert!(!out.exists(), "no chart is written");
}

fn report(trace: &Path, name: &str) -> (std::path::PathBuf, String) {
    let out = write_report(trace, &scratch(name));
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
        4,
        "timeline, categories, fragmentation and leak charts"
    );
    assert!(html.contains("keeps <b>+1.0 MiB per iteration</b>"));
    assert!(html.contains("log_metrics (train.py:120)"));
    assert!(html.contains("<details>"), "stacks are collapsible");
    // The sections link to the explorer: sites highlight, repetitions zoom,
    // and the what-if section simulates the recorded settings.
    assert!(html.contains("<tr data-site=\"log_metrics (train.py:120)\""));
    assert!(html.contains("data-phase-reps=\"iter#\""));
    assert!(html.contains("id=\"what-if\"") && html.contains("smallest that fits"));
    assert!(html.contains("id=\"vt-data\"") && html.contains("id=\"vt-bulk\""));
}

#[test]
fn the_report_of_a_snapshot_and_of_an_oom_run() {
    let (_, html) = report(
        &fixture("torch/cnn_eval_accumulate.pickle.xz"),
        "report-torch",
    );
    assert!(html.contains("871.5 MiB"), "the snapshot's allocated peak");
    // PyTorch recorded it, and its moments read on the page's busy axis too.
    assert!(html.contains("a PyTorch memory snapshot, read by vramtrace"));
    assert!(
        html.contains(" of busy time in "),
        "the peak card's busy time"
    );
    let (_, html) = report(&fixture("oom.vtrace"), "report-oom");
    assert!(html.contains("id=\"ooms\""));
    assert!(html.contains("<b>Out of memory</b>"));
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

#[test]
fn a_window_sets_the_timeline_axis_and_the_axis_can_count_events_or_busy_time() {
    let dir = scratch("timeline-axes");
    let trace = fixture("leak.vtrace");
    let draw = |name: &str, extra: &[&str]| {
        let out = dir.join(name);
        let mut args: Vec<&std::ffi::OsStr> =
            vec!["timeline".as_ref(), trace.as_os_str(), "-o".as_ref()];
        args.push(out.as_os_str());
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        vramtrace(args).success();
        texts(&read_svg(&out))
    };
    let window = draw("window.svg", &["--from", "3ms", "--to", "6ms"]);
    // The axis spans the window: its ticks read 3 to 6 ms, and the phases
    // that ended before it are not drawn.
    let ticks: Vec<f64> = window
        .lines()
        .filter_map(|l| l.strip_suffix(" ms"))
        .filter_map(|v| v.parse().ok())
        .collect();
    assert!(ticks.len() >= 3, "{window}");
    assert!(
        ticks.iter().all(|&t| (2.9..=6.1).contains(&t)),
        "ticks outside the window: {ticks:?}"
    );
    assert!(
        !window.contains("iter0") && window.contains("iter3"),
        "{window}"
    );

    let events = draw("events.svg", &["--x", "events"]);
    assert!(events.contains("event index"), "{events}");
    assert!(
        events.contains("1,000") || events.contains("2,000"),
        "{events}"
    );
    let busy = draw("busy.svg", &["--x", "busy"]);
    assert!(busy.contains("busy time (idle gaps cut)"), "{busy}");
}

#[test]
fn legends_name_each_site_once_with_the_users_line_first() {
    let dir = scratch("timeline-legend");
    for name in ["gpt2_train", "cnn_eval_accumulate"] {
        let out = dir.join(format!("{name}.svg"));
        let trace = fixture(&format!("torch/{name}.pickle.xz"));
        vramtrace([
            "timeline".as_ref(),
            trace.as_os_str(),
            "--by".as_ref(),
            "site".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ])
        .success();
        let svg = read_svg(&out);
        let shown = texts(&svg);
        let lines: Vec<&str> = shown
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        // A legend entry is a site's line, and its library frame after `via`
        // on the next line when both do not fit on one.
        let mut entries: Vec<String> = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with("via ") {
                let user = lines[i - 1];
                assert!(
                    user.ends_with(')') && !user.starts_with("via "),
                    "{name}: `{line}` follows no user line: `{user}`"
                );
                *entries.last_mut().unwrap() = format!("{user} {line}");
            } else if line.ends_with(')') && line.contains(".py:") {
                entries.push(line.to_string());
            }
        }
        assert!(entries.len() >= 6, "{name}: {shown}");
        for entry in &entries {
            assert!(
                entry.contains(".py:"),
                "{name}: a site without its file and line: {entry}"
            );
        }
        let mut distinct = entries.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            entries.len(),
            "{name}: two sites share a name: {entries:#?}"
        );
        // The peak's note names the user's line first, not a cut tail.
        let largest = lines.iter().find(|l| l.starts_with("largest: ")).unwrap();
        assert!(!largest.starts_with("largest: …"), "{largest}");
    }
    // Tick labels are 16 px: readable when the chart is 1400 px wide.
    let svg = std::fs::read_to_string(dir.join("gpt2_train.svg")).unwrap();
    assert!(
        svg.contains("font-size=\"16") || svg.contains("font-size:16"),
        "no 16 px labels"
    );
}

#[test]
fn a_report_of_a_window_says_why_it_has_no_what_if() {
    let dir = scratch("report-window");
    let out = dir.join("report.html");
    let trace = fixture("leak.vtrace");
    vramtrace([
        "report".as_ref(),
        trace.as_os_str(),
        "--from".as_ref(),
        "2ms".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ])
    .success();
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(
        html.contains("No simulation here: a report of a window has none"),
        "no reason given"
    );
    assert!(!html.contains("smallest that fits"));
}

/// Every bundled trace and PyTorch snapshot.
fn every_fixture() -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for (dir, suffix) in [("", ".vtrace"), ("torch", ".pickle.xz")] {
        for entry in std::fs::read_dir(fixture(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.to_string_lossy().ends_with(suffix) {
                found.push(path);
            }
        }
    }
    found.sort();
    assert!(found.len() >= 10, "{found:?}");
    found
}

/// The points of every line and area of an SVG chart, each with a
/// description of the element. An area's outline runs forward along its
/// top and closes back along its base: the closing point is left out.
fn series_points(svg: &str) -> Vec<(String, Vec<(f64, f64)>)> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("polyline") || n.has_tag_name("polygon"))
        .map(|n| {
            let mut points: Vec<(f64, f64)> = n
                .attribute("points")
                .unwrap_or("")
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').expect("x,y");
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect();
            if n.has_tag_name("polygon") {
                points.pop();
            }
            let colour = n.attribute("stroke").or(n.attribute("fill")).unwrap_or("?");
            (format!("<{} {colour}>", n.tag_name().name()), points)
        })
        .collect()
}

#[test]
fn no_series_of_any_chart_goes_back_in_x_on_any_axis() {
    let dir = scratch("charts-forward");
    let mut backward = Vec::new();
    for trace in every_fixture() {
        let name = trace.file_name().unwrap().to_string_lossy().into_owned();
        for chart in ["timeline", "fragmentation"] {
            for axis in ["time", "events", "busy"] {
                let out = dir.join(format!("{name}-{chart}-{axis}.svg"));
                vramtrace([
                    chart.as_ref(),
                    trace.as_os_str(),
                    "--x".as_ref(),
                    axis.as_ref(),
                    "-o".as_ref(),
                    out.as_os_str(),
                ])
                .success();
                let svg = read_svg(&out);
                for (element, points) in series_points(&svg) {
                    let steps_back = points.windows(2).filter(|w| w[1].0 < w[0].0).count();
                    if steps_back > 0 {
                        backward.push(format!(
                            "{chart} --x {axis} of {name}: {element} of {} points goes back {steps_back} times",
                            points.len()
                        ));
                    }
                }
            }
        }
    }
    assert!(backward.is_empty(), "{}", backward.join("\n"));
}

#[test]
fn a_snapshots_table_and_charts_default_to_busy_time_with_no_empty_row() {
    let trace = fixture("torch/cnn_eval_accumulate.pickle.xz");
    let table = |x: Option<&str>| {
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "fragmentation".as_ref(),
            trace.as_os_str(),
            "--json".as_ref(),
        ];
        if let Some(x) = x {
            args.push("--x".as_ref());
            args.push(x.as_ref());
        }
        vramtrace(args).success().result()
    };
    // On wall-clock time, the snapshot's pauses leave rows without events.
    let time = table(Some("time"));
    assert_eq!(time["axis"], "time");
    let empty = |t: &serde_json::Value| {
        t["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["events"] == 0)
            .count()
    };
    assert!(empty(&time) > 0, "the fixture has idle time buckets");
    let busy = table(None);
    assert_eq!(busy["axis"], "busy");
    assert_eq!(busy["buckets"].as_array().map(Vec::len), Some(20));
    assert_eq!(empty(&busy), 0, "{busy:#}");
    let events = table(Some("events"));
    assert_eq!(events["axis"], "events");
    assert_eq!(empty(&events), 0);
    // The charts open on busy time too.
    let dir = scratch("snapshot-axes");
    for chart in ["timeline", "fragmentation"] {
        let out = dir.join(format!("{chart}.svg"));
        vramtrace([
            chart.as_ref(),
            trace.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ])
        .success();
        assert!(texts(&read_svg(&out)).contains("busy time (idle gaps cut)"));
    }
}

/// A byte label of a chart's y axis ("0", "50 MiB", "1.5 GiB") in bytes.
fn axis_bytes(label: &str) -> Option<f64> {
    let label = label.trim();
    if label == "0" {
        return Some(0.0);
    }
    let (number, unit) = label.split_once(' ')?;
    let shift = match unit {
        "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        "TiB" => 40,
        _ => return None,
    };
    Some(number.parse::<f64>().ok()? * (1u64 << shift) as f64)
}

/// The bytes that a pixel row of the chart's left axis stands for: a line
/// through its tick labels (each placed at its tick's row), as
/// `(bytes at row 0, bytes per row downwards)`.
fn y_axis(svg: &str) -> (f64, f64) {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let ticks: Vec<(f64, f64)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("text-anchor") == Some("end"))
        .filter_map(|n| {
            let bytes = axis_bytes(n.text()?)?;
            Some((n.attribute("y")?.parse::<f64>().ok()?, bytes))
        })
        .collect();
    assert!(ticks.len() >= 2, "no byte axis: {ticks:?}");
    let (first, last) = (ticks[0], ticks[ticks.len() - 1]);
    let per_row = (last.1 - first.1) / (last.0 - first.0);
    (first.1 - per_row * first.0, per_row)
}

#[test]
fn the_fragmentation_chart_reaches_the_peaks_the_summary_states() {
    let dir = scratch("fragmentation-peaks");
    for name in [
        "leak.vtrace",
        "fragmenting.vtrace",
        "oom.vtrace",
        "torch/gpt2_train.pickle.xz",
    ] {
        let trace = fixture(name);
        let summary = vramtrace(["summary".as_ref(), trace.as_os_str(), "--json".as_ref()])
            .success()
            .result();
        let device = &summary;
        let out = dir.join(format!("{}.svg", name.replace('/', "-")));
        vramtrace([
            "fragmentation".as_ref(),
            trace.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ])
        .success();
        let svg = read_svg(&out);
        let (at_zero, per_row) = y_axis(&svg);
        // The highest point of a series, in bytes: the smallest row.
        let top = |element: &str| {
            // The series, not its legend's mark (of two points).
            let (_, points) = series_points(&svg)
                .into_iter()
                .filter(|(e, _)| e == element)
                .max_by_key(|(_, points)| points.len())
                .unwrap_or_else(|| panic!("no {element} in the chart of {name}"));
            let row = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
            at_zero + per_row * row
        };
        // Rows are whole pixels: a peak is drawn within one row of it.
        let row_bytes = -per_row;
        for (element, key) in [
            ("<polygon #0072B2>", "peak_allocated_bytes"),
            ("<polyline #282828>", "peak_reserved_bytes"),
        ] {
            let stated = device[key].as_f64().unwrap();
            let drawn = top(element);
            assert!(
                (drawn - stated).abs() <= row_bytes,
                "{name}: the chart's {element} tops at {:.1} MiB, the summary's {key} is {:.1} MiB (a row is {:.2} MiB)",
                drawn / (1 << 20) as f64,
                stated / (1 << 20) as f64,
                row_bytes / (1 << 20) as f64
            );
        }
    }
}

#[test]
fn a_chart_under_a_name_of_another_format_is_refused() {
    // Charts are SVG: `-o out.png` would write SVG under a PNG's name,
    // which an image viewer then fails to open.
    let dir = scratch("chart-names");
    let trace = fixture("leak.vtrace");
    let t = trace.to_str().unwrap();
    for (command, name) in [
        (&["timeline", t][..], "timeline.png"),
        (&["fragmentation", t][..], "fragmentation.PDF"),
        (&["leaks", t][..], "leaks.jpg"),
        (&["flamegraph", t][..], "peak.png"),
        (&["compare", t, t][..], "diff.png"),
        (&["simulate", t, "--capacity", "1GiB"][..], "simulate.png"),
    ] {
        let out = dir.join(name);
        let mut args: Vec<&std::ffi::OsStr> = command.iter().map(|a| a.as_ref()).collect();
        args.extend(["-o".as_ref(), out.as_os_str()]);
        let run = vramtrace(args).fails_with(2);
        assert!(run.stderr.contains(".svg"), "{command:?}: {}", run.stderr);
        assert!(!out.exists(), "{command:?} wrote {}", out.display());
    }
    // An SVG name of any case, a name without an extension (a device such
    // as /dev/stdout) and folded stacks (text) are written.
    for (command, name) in [
        (&["timeline", t][..], "timeline.SVG"),
        (&["timeline", t][..], "timeline"),
        (&["flamegraph", t, "--folded"][..], "peak.folded.txt"),
    ] {
        let out = dir.join(name);
        let mut args: Vec<&std::ffi::OsStr> = command.iter().map(|a| a.as_ref()).collect();
        args.extend(["-o".as_ref(), out.as_os_str()]);
        vramtrace(args).success();
        assert!(out.is_file(), "{command:?} {name}");
    }
}

/// A run as a real one starts: a little allocated while the program
/// imports and starts CUDA, then ten seconds without an allocator event,
/// then 40 training steps of 2 ms each.
fn write_slow_start(path: &Path) {
    use vramtrace_allocator::device::SimulatedDevice;
    use vramtrace_allocator::{AllocatorConfig, CachingAllocator};
    use vramtrace_format::{Event, EventData, Header, TraceWriter};
    const MIB: u64 = 1 << 20;
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = TraceWriter::new(file, Header::default()).unwrap();
    let stack = w.intern_symbol_stack([("step", "train.py", 12u32)]);
    let mut alloc =
        CachingAllocator::new(SimulatedDevice::new(1 << 40), AllocatorConfig::default());
    alloc.set_event_log(true);
    let time = std::cell::Cell::new(0u64);
    let write =
        |w: &mut TraceWriter<_>, alloc: &mut CachingAllocator<SimulatedDevice>, step: u64| {
            for mut e in alloc.drain_events().collect::<Vec<_>>() {
                time.set(time.get() + step);
                if let EventData::Alloc(x) = &mut e {
                    x.stack = stack;
                }
                w.push(Event {
                    time_ns: time.get(),
                    data: e,
                })
                .unwrap();
            }
        };
    alloc.malloc(64 * MIB, 0).unwrap();
    write(&mut w, &mut alloc, 1_000);
    time.set(time.get() + 10_000_000_000);
    for i in 0..40 {
        let a = alloc.malloc((32 + i % 4) * MIB, 0).unwrap().addr;
        write(&mut w, &mut alloc, 1_000_000);
        alloc.free(a).unwrap();
        write(&mut w, &mut alloc, 1_000_000);
    }
    w.finish().unwrap();
}

/// Ten seconds of start-up before 80 ms of steps: the charts open on busy
/// time, which shows the steps across the width, and say so; `--x time`
/// gives the wall-clock axis. A run without such pauses keeps time.
#[test]
fn a_slow_start_opens_the_charts_on_busy_time() {
    let dir = scratch("timeline-slow-start");
    let trace = dir.join("slow.vtrace");
    write_slow_start(&trace);
    let draw = |name: &str, trace: &Path, extra: &[&str]| {
        let out = dir.join(name);
        let mut args: Vec<&std::ffi::OsStr> =
            vec!["timeline".as_ref(), trace.as_os_str(), "-o".as_ref()];
        args.push(out.as_os_str());
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        vramtrace(args).success();
        texts(&read_svg(&out))
    };
    let busy = draw("default.svg", &trace, &[]);
    assert!(busy.contains("busy time"), "{busy}");
    // The axis ends within the steps' length, not ten seconds on.
    assert!(
        !busy.lines().any(|l| l.ends_with(" s") && l != "0 s"),
        "{busy}"
    );
    let time = draw("time.svg", &trace, &["--x", "time"]);
    assert!(!time.contains("busy time"), "{time}");
    assert!(time.lines().any(|l| l == "10.00 s"), "{time}");
    let steady = draw("steady.svg", &fixture("leak.vtrace"), &[]);
    assert!(!steady.contains("busy time"), "{steady}");

    // compare -o and the report's explorer alike.
    let out = dir.join("compare.svg");
    vramtrace([
        "compare".as_ref(),
        trace.as_os_str(),
        trace.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ])
    .success();
    assert!(texts(&read_svg(&out)).contains("busy time"));
    let page = std::fs::read_to_string(write_report(&trace, &dir)).unwrap();
    assert!(
        page.contains("\"default_axis\":\"busy\""),
        "the explorer's axis"
    );
}
