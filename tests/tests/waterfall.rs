//! Issue #28: an out-of-memory error under a cap that explains itself, in
//! `summary` and `simulate`, as text and JSON.

use vramtrace_e2e::{scratch, vramtrace, write_capped_run};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// An H100 as CUDA reports it (the `h100` preset).
const CARD: u64 = 85_017_853_952;

/// The issue's run: 12 GiB cap, 1,434 tensors of 6 MiB (478 segments of
/// 20 MiB, each left with one live block), 5.4 GiB asked for.
fn issue_trace(name: &str, cap: Option<u64>) -> String {
    let path = scratch(name).join("run.vtrace");
    write_capped_run(&path, CARD, cap, 500 * MIB, 1434, 5530 * MIB);
    path.display().to_string()
}

fn term(w: &serde_json::Value, name: &str) -> u64 {
    let all = w["terms"]
        .as_array()
        .unwrap()
        .iter()
        .chain(w["beside"].as_array().unwrap());
    all.clone()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {w:#}"))["bytes"]
        .as_u64()
        .unwrap()
}

#[test]
fn summary_explains_an_oom_under_a_cap() {
    let trace = issue_trace("waterfall_summary", Some(12 * GIB));
    let v = vramtrace(["summary", &trace, "--json"]).success().result();
    let w = &v["ooms"][0]["waterfall"];
    assert_eq!(w["limit_bytes"], 12 * GIB);
    assert_eq!(w["limit_source"], "cap");
    assert_eq!(w["limit_known"], "exact");
    assert_eq!(w["sums_to"], "limit");
    assert_eq!(term(w, "allocated"), 478 * 6 * MIB);
    assert_eq!(term(w, "cached_in_used_segments"), 478 * 14 * MIB);
    assert_eq!(term(w, "cached_in_empty_segments"), 0);
    assert_eq!(term(w, "waiting_for_streams"), 0);
    assert_eq!(term(w, "free_under_limit"), 12 * GIB - 478 * 20 * MIB);
    let sum: u64 = (w["terms"].as_array().unwrap().iter())
        .map(|t| t["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, 12 * GIB);
    // Outside the allocator: beside the cap, measured.
    assert_eq!(term(w, "outside_allocator"), 500 * MIB);
    assert_eq!(w["beside"][0]["known"], "measured");
    assert_eq!(w["fragmentation"]["segments_with_free"], 478);
    assert_eq!(w["fragmentation"]["largest_free_block"], 14 * MIB);
    assert_eq!(v["limit"]["source"], "cap");
    assert_eq!(v["outside_allocator"]["max_bytes"], 500 * MIB);
    assert_eq!(v["outside_allocator"]["known"], "measured");
    assert!(v["waterfall_at_peak"]["terms"].is_array());

    let text = vramtrace(["summary", &trace]).success().stdout;
    assert!(
        text.contains("under the 12.00 GiB cap from set_per_process_memory_fraction(0.1516)"),
        "{text}"
    );
    assert!(!text.contains("free on the device"), "{text}");
    for line in [
        "allocated (held by the program)",
        "cached free in segments with live blocks",
        "free under the limit",
        "= the limit",
        "beside: outside the allocator",
    ] {
        assert!(text.contains(line), "{line}: {text}");
    }
    assert!(text.contains("12,884,901,888 bytes"), "{text}");
}

#[test]
fn without_a_cap_the_waterfall_sums_to_the_card() {
    let trace = issue_trace("waterfall_card", None);
    let v = vramtrace(["summary", &trace, "--json"]).success().result();
    let w = &v["waterfall_at_peak"];
    assert_eq!(w["sums_to"], "card_total");
    assert_eq!(w["total_bytes"], CARD);
    let sum: u64 = (w["terms"].as_array().unwrap().iter())
        .map(|t| t["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, CARD);
    assert_eq!(term(w, "outside_allocator"), 500 * MIB);
}

#[test]
fn simulate_reproduces_the_capped_oom_and_speaks_of_the_cap() {
    let trace = issue_trace("waterfall_simulate", Some(12 * GIB));
    let v = vramtrace(["simulate", &trace, "--json"]).success().result();
    assert_eq!(v["fidelity"]["exact"], true, "{:#}", v["fidelity"]);
    assert_eq!(v["fidelity"]["capacity_bytes"], 12 * GIB);
    assert_eq!(v["capacity_bytes"], 12 * GIB);
    assert_eq!(v["oom"]["recorded"], true);
    assert_eq!(v["verdict"]["outcome"], "out_of_memory");
    let line = v["verdict"]["line"].as_str().unwrap();
    assert!(
        line.starts_with("runs out of memory under its recorded 12.00 GiB cap from set_per_process_memory_fraction(0.1516)"),
        "{line}"
    );
    assert!(line.contains("it needs a cap of"), "{line}");
    // Memory under the cap that the allocator had not reserved then (it may
    // have been reserved before, and released) is unreserved, not "never
    // reserved".
    assert!(!line.contains("never reserved"), "{line}");
    assert!(line.contains(" unreserved under the cap and "), "{line}");
    assert_eq!(v["reserve"]["source"], "measured");
    assert_eq!(v["reserve"]["bytes"], 500 * MIB);
    let text = vramtrace(["simulate", &trace]).success().stdout;
    assert!(text.contains("fidelity   exact"), "{text}");
    // Under a cap the figure needed is the cap; the smallest device memory
    // (the min capacity column) says it is that cap and the reserve.
    let min = vramtrace(["simulate", &trace, "--min-capacity"])
        .success()
        .stdout;
    assert!(
        min.contains("min capacity: the smallest device memory without an OOM: the cap it needs (14.74 GiB) and the 500 MiB reserve"),
        "{min}"
    );
    assert!(!text.contains("fits on"), "{text}");
    assert!(text.contains("free under the cap"), "{text}");
}

#[test]
fn bad_limits_and_samples_are_warnings_not_verdicts() {
    use vramtrace_format::{
        BlockEvent, DeviceMemoryEvent, Event, EventData, Header, LimitEvent, SegmentEvent,
        TraceWriter,
    };
    let path = scratch("waterfall_bad").join("bad.vtrace");
    let file = std::fs::File::create(&path).unwrap();
    let mut w = TraceWriter::new(file, Header::default()).unwrap();
    let events = [
        EventData::Limit(LimitEvent {
            limit_bytes: 0,
            total_bytes: GIB,
            ..Default::default()
        }),
        EventData::Limit(LimitEvent {
            limit_bytes: 2 * GIB,
            total_bytes: GIB,
            ..Default::default()
        }),
        EventData::DeviceMemory(DeviceMemoryEvent {
            free_bytes: 2 * GIB,
            total_bytes: GIB,
            ..Default::default()
        }),
        EventData::SegmentAlloc(SegmentEvent {
            addr: 1 << 32,
            size: 20 * MIB,
            ..Default::default()
        }),
        EventData::Alloc(BlockEvent {
            addr: 1 << 32,
            size: 6 * MIB,
            requested: 6 * MIB,
            ..Default::default()
        }),
    ];
    for (i, data) in events.into_iter().enumerate() {
        w.push(Event {
            time_ns: i as u64 + 1,
            data,
        })
        .unwrap();
    }
    w.finish().unwrap();
    let p = path.display().to_string();
    for command in ["summary", "simulate"] {
        let run = vramtrace([command, &p]).success();
        assert!(
            run.stderr.contains("a limit event of 0 bytes was left out"),
            "{command}: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains("above the device's total"),
            "{}",
            run.stderr
        );
        assert!(
            run.stderr
                .contains("device-memory sample with 2.0 GiB free of 1.0 GiB"),
            "{}",
            run.stderr
        );
    }
    let v = vramtrace(["summary", &p, "--json"]).success().result();
    assert!(v["limit"].is_null());
    assert!(v["outside_allocator"].is_null());
    assert_eq!(v["waterfall_at_peak"]["sums_to"], "reserved");
    assert_eq!(v["waterfall_at_peak"]["total_bytes"], 20 * MIB);
    let s = vramtrace(["simulate", &p, "--json"]).success().result();
    assert_eq!(s["verdict"]["outcome"], "needs");
    assert_eq!(s["reserve"]["source"], "estimated");
}

#[test]
fn a_snapshots_cap_is_inferred_from_its_oom() {
    let p = vramtrace_e2e::fixture("torch/synthetic/capped_oom_p4.pickle")
        .display()
        .to_string();
    let v = vramtrace(["summary", &p, "--json"]).success().result();
    assert_eq!(v["limit"]["source"], "inferred_cap");
    assert_eq!(v["limit"]["known"], "inferred");
    assert_eq!(v["limit"]["low_bytes"], 2000 * MIB);
    assert_eq!(v["limit"]["high_bytes"], 7530 * MIB - 1);
    let w = &v["ooms"][0]["waterfall"];
    assert_eq!(w["limit_source"], "inferred_cap");
    assert_eq!(
        w["limit_range"],
        serde_json::json!([2000 * MIB, 7530 * MIB - 1])
    );
    assert_eq!(w["total_bytes"], 2000 * MIB);
    assert_eq!(term(w, "allocated"), 600 * MIB);
    assert_eq!(term(w, "cached_in_used_segments"), 1400 * MIB);
    let s = vramtrace(["simulate", &p, "--json"]).success().result();
    assert_eq!(s["fidelity"]["exact"], true, "{:#}", s["fidelity"]);
    assert_eq!(s["fidelity"]["capacity_bytes"], 2000 * MIB);
    assert_eq!(s["oom"]["recorded"], true);
    assert!(
        s["verdict"]["line"]
            .as_str()
            .unwrap()
            .starts_with("runs out of memory under its inferred cap of 1.95 GiB to 7.35 GiB")
    );
}

/// An inferred cap's words say it is inferred: no line says so twice
/// ("cap of ..., inferred (...) (inferred)"), in any command that shows it.
#[test]
fn an_inferred_cap_is_called_inferred_once_a_line() {
    let p = vramtrace_e2e::fixture("torch/synthetic/capped_oom_p4.pickle")
        .display()
        .to_string();
    let html = scratch("waterfall_inferred_once").join("r.html");
    let mut lines = 0;
    for args in [
        vec!["summary", &p],
        vec!["simulate", &p],
        vec!["report", &p, "-o", html.to_str().unwrap()],
    ] {
        let out = vramtrace(args).success().stdout;
        for line in out.lines().filter(|l| l.contains("inferred")) {
            lines += 1;
            assert_eq!(line.matches("inferred").count(), 1, "{line}");
        }
    }
    let page = std::fs::read_to_string(&html).unwrap();
    for line in page.lines().filter(|l| l.contains("Limit:")) {
        lines += 1;
        assert!(!line.contains("(inferred)"), "{line}");
    }
    assert!(lines > 0, "no line spoke of the inferred cap");
}

#[test]
fn the_fix_offered_for_the_issues_run_is_freeing_the_kept_tensors() {
    let trace = issue_trace("waterfall_fixes", Some(12 * GIB));
    let v = vramtrace(["simulate", &trace, "--json"]).success().result();
    let f = &v["fixes"];
    assert_eq!(f["limit_bytes"], 12 * GIB, "{f:#}");
    let passed = f["passed"].as_array().unwrap();
    // Freeing the 478 kept 6 MiB tensors first: every segment goes back.
    let kept = passed
        .iter()
        .find(|x| x["kind"] == "free_kept")
        .unwrap_or_else(|| panic!("{f:#}"));
    let change = kept["change"].as_str().unwrap();
    assert!(change.contains("478 blocks"), "{change}");
    assert!(change.contains("issue28.py:5"), "{change}");
    // The recording ends at the failure (the program died of it): the fix
    // is exact as far as the recording goes, and says so (issue #44).
    assert_eq!(kept["basis"], "exact_to_recording_end");
    assert_eq!(kept["holds_to"], "recording_end");
    // Left free under the cap: 12 GiB less the 5.4 GiB segment granted.
    assert_eq!(kept["headroom_bytes"], 12 * GIB - 5530 * MIB);
    // PyTorch already empties the cache before it fails: an empty_cache()
    // or a splitting rule cannot help here, and none is offered.
    assert!(
        passed
            .iter()
            .all(|x| x["kind"] != "empty_cache"
                && !x["change"].as_str().unwrap().contains("max_split")),
        "{f:#}"
    );
    // The report tries the same fixes, under the recorded cap.
    let page = scratch("waterfall_fixes_report").join("report.html");
    let r = vramtrace(["report", &trace, "-o", page.to_str().unwrap(), "--json"])
        .success()
        .result();
    assert_eq!(r["fixes"], *f, "the report's fixes are simulate's");
    // And so are the summary's (issue #44: one answer in every command).
    let sum = vramtrace(["summary", &trace, "--json"]).success().result();
    assert_eq!(sum["fixes"], *f, "the summary's fixes are simulate's");
    let text = vramtrace(["summary", &trace]).success().stdout;
    assert!(
        text.contains("fixes tried for the out-of-memory error")
            && text.contains("exact to the recording's end"),
        "{text}"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("Fixes that were tried"));
}
