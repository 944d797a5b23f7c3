//! `vramtrace flamegraph`: the memory live at a moment, by stack, against
//! the summary's figures, in each output form.

use vramtrace_e2e::{fixture, scratch, vramtrace};

fn arg(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_peak_graph_holds_exactly_the_allocated_peak() {
    for name in [
        "leak.vtrace",
        "fragmenting.vtrace",
        "torch/gpt2_train.pickle.xz",
    ] {
        let input = fixture(name);
        let summary = vramtrace(["summary", "--json", arg(&input)])
            .success()
            .result();
        let graph = vramtrace(["flamegraph", "--json", arg(&input)])
            .success()
            .result();
        assert_eq!(
            graph["total_bytes"], summary["peak_allocated_bytes"],
            "{name}: the stacks at the peak sum to the peak"
        );
        let stacks = graph["stacks"].as_array().unwrap();
        let sum: u64 = stacks.iter().map(|s| s["bytes"].as_u64().unwrap()).sum();
        assert_eq!(Some(sum), graph["total_bytes"].as_u64(), "{name}");
        // Largest first.
        assert!(
            stacks
                .windows(2)
                .all(|w| w[0]["bytes"].as_u64() >= w[1]["bytes"].as_u64())
        );
        assert_eq!(
            graph["at"]["index"], summary["peak_allocated"]["index"],
            "{name}: the moment is the summary's peak event"
        );
    }
}

#[test]
fn the_graph_at_an_oom_and_at_a_time() {
    let oom = fixture("oom.vtrace");
    let graph = vramtrace(["flamegraph", "--json", "--at", "oom", arg(&oom)])
        .success()
        .result();
    let summary = vramtrace(["summary", "--json", arg(&oom)])
        .success()
        .result();
    assert_eq!(graph["at"]["moment"], "first_oom");
    assert_eq!(
        graph["at"]["index"], summary["ooms"][0]["index"],
        "{summary:#}"
    );
    assert!(graph["total_bytes"].as_u64().unwrap() > 0);
    // At a time before any event: the starting state (nothing live here).
    let early = vramtrace([
        "flamegraph",
        "--json",
        "--at",
        "0ns",
        arg(&fixture("leak.vtrace")),
    ])
    .success()
    .result();
    assert_eq!(early["total_bytes"], 0);
}

#[test]
fn svg_and_folded_outputs() {
    let dir = scratch("flamegraph");
    let input = fixture("leak.vtrace");
    let svg = dir.join("peak.svg");
    let run = vramtrace(["flamegraph", arg(&input), "-o", arg(&svg)]).success();
    assert!(run.stdout.starts_with("wrote "), "{}", run.stdout);
    assert!(run.stdout.contains("(exact)"), "{}", run.stdout);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("<svg") && text.contains("GPU memory by stack: leak.vtrace"));
    // inferno writes the SVG 1.1 doctype: allowed here, nothing else relaxed.
    let xml = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    roxmltree::Document::parse_with_options(&text, xml)
        .expect("the flame graph is well-formed XML");
    // A label too long for its box is cut from the right, in the file and
    // by its script on zoom, so the function name, first, stays.
    assert!(
        text.contains("truncate_text_right = true;"),
        "labels cut from the left"
    );
    // The same stacks make the same file.
    let again = dir.join("again.svg");
    vramtrace(["flamegraph", arg(&input), "-o", arg(&again)]).success();
    assert_eq!(text, std::fs::read_to_string(&again).unwrap());
    // Folded: one `frames bytes` line per stack, summing to the peak.
    let folded = vramtrace(["flamegraph", "--folded", arg(&input)]).success();
    let total: u64 = folded
        .stdout
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    let summary = vramtrace(["summary", "--json", arg(&input)])
        .success()
        .result();
    assert_eq!(Some(total), summary["peak_allocated_bytes"].as_u64());
    assert!(folded.stdout.lines().all(|l| l.contains(" (train.py:")));
}

#[test]
fn bad_moments_and_missing_ones_are_one_line() {
    let clean = fixture("clean.vtrace");
    let run = vramtrace(["flamegraph", "--json", "--at", "never", arg(&clean)]).fails_with(2);
    assert!(
        run.stderr.contains("write peak, oom, or a time"),
        "{}",
        run.stderr
    );
    let run = vramtrace(["flamegraph", "--json", "--at", "oom", arg(&clean)]).fails_with(2);
    assert!(
        run.stderr.contains("has no out-of-memory event"),
        "{}",
        run.stderr
    );
    let run = vramtrace(["flamegraph", arg(&clean)]).fails_with(2);
    assert!(run.stderr.contains("-o FILE.svg"), "{}", run.stderr);
}

#[test]
fn the_report_shows_the_peak_graph_in_a_frame_of_its_own() {
    let dir = scratch("flamegraph-report");
    let page = dir.join("r.html");
    vramtrace(["report", arg(&fixture("leak.vtrace")), "-o", arg(&page)]).success();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<section id=\"flame\"><h2>Live at the peak, by stack</h2>"));
    let at = html
        .find("src=\"data:image/svg+xml;base64,")
        .expect("the graph's frame");
    assert!(
        html[..at].ends_with("sandbox=\"allow-scripts\" "),
        "its script runs apart"
    );
    assert!(html.contains("422.1 MiB in 124 blocks (exact)"));
}

#[test]
fn a_time_past_the_traces_end_is_refused_not_drawn_as_the_end() {
    // leak.vtrace's last event is at 10.56 ms: 12.5 s would silently be
    // its end state.
    let leak = fixture("leak.vtrace");
    let run = vramtrace(["flamegraph", "--json", "--at", "12.5s", arg(&leak)]).fails_with(2);
    assert!(
        run.stderr.contains("12.50 s") && run.stderr.contains("10.56 ms"),
        "{}",
        run.stderr
    );
    // Times inside the trace are drawn.
    for at in ["5ms", "10ms"] {
        let graph = vramtrace(["flamegraph", "--json", "--at", at, arg(&leak)])
            .success()
            .result();
        assert!(
            graph["at"]["time_ns"].as_u64().unwrap() <= 10_560_000,
            "{at}"
        );
    }
}
