//! `vramtrace summary`'s headlines: true of the window asked for.

use vramtrace_e2e::{fixture, vramtrace};

#[test]
fn a_window_past_the_end_is_empty_and_has_no_peak() {
    // clean.vtrace runs 10.53 ms: a window from 5 s holds no event.
    let trace = fixture("clean.vtrace").display().to_string();
    let run = vramtrace(["summary", &trace, "--from", "5s"]).success();
    assert!(
        run.stderr.contains("no event lies inside --from/--to"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.contains("peaks     none"), "{}", run.stdout);
    // Nothing from before the window: no peak, no time, no site.
    for outside in ["10.53 ms", "195.1 MiB", "train.py"] {
        assert!(!run.stdout.contains(outside), "{outside}:\n{}", run.stdout);
    }
    let json = vramtrace(["summary", &trace, "--from", "5s", "--json"])
        .success()
        .json();
    assert_eq!(json["empty_window"], true);
    assert_eq!(json["events"], 0);
    for key in [
        "peak_allocated_bytes",
        "peak_reserved_bytes",
        "peak_time_ns",
    ] {
        assert_eq!(json[key], 0, "{key}");
    }
    assert_eq!(json["peak_allocated"]["bytes"], 0);
    assert_eq!(json["top_sites_at_peak"].as_array().map(Vec::len), Some(0));
    // A window with events is not empty.
    let whole = vramtrace(["summary", &trace, "--from", "5ms", "--json"])
        .success()
        .json();
    assert_eq!(whole["empty_window"], false);
}

#[test]
fn allocations_without_a_stack_are_explained() {
    let gpt2 = fixture("torch/gpt2_train.pickle.xz").display().to_string();
    let text = vramtrace(["summary", &gpt2]).success().stdout;
    assert!(text.contains("<no stack captured>"), "{text}");
    assert!(
        text.contains("<no stack captured>: allocations that came with no stack")
            && text.contains("autograd engine")
            && text.contains("before recording began"),
        "{text}"
    );
    // Every line stays readable.
    assert!(
        text.lines()
            .all(|l| l.chars().count() <= 160 || l.contains(" via "))
    );
    let leak = fixture("leak.vtrace").display().to_string();
    let text = vramtrace(["summary", &leak]).success().stdout;
    assert!(!text.contains("autograd engine"), "{text}");
}
