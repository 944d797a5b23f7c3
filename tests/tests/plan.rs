//! `vramtrace plan`: the largest batch (or sequence length) from runs at
//! two values, checked against the generator run at the answer and one
//! past it on a device of the capacity planned for; one run; bad input.

use std::path::{Path, PathBuf};
use vramtrace_e2e::{scratch, vramtrace};

/// Writes a synthetic run (2 layers, 3 iterations) and returns its path;
/// `extra` adds generator flags (`--annotate`, `--capacity 1GiB`).
fn synth(dir: &Path, batch: u64, seq: u64, extra: &[&str]) -> (PathBuf, serde_json::Value) {
    let path = dir.join(format!(
        "b{batch}-s{seq}{}.vtrace",
        extra.join("").replace('-', "")
    ));
    let (b, s) = (batch.to_string(), seq.to_string());
    let mut args = vec![
        "synth",
        "--layers",
        "2",
        "--hidden",
        "256",
        "--iters",
        "3",
        "--seed",
        "3",
        "--batch",
        &b,
        "--seq-len",
        &s,
        "--json",
        "-o",
    ];
    let p = path.display().to_string();
    args.push(&p);
    args.extend_from_slice(extra);
    let report = vramtrace(&args).success().result();
    (path, report)
}

fn plan(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["plan"];
    all.extend_from_slice(args);
    all.push("--json");
    vramtrace(&all).success().result()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn the_largest_batch_fits_on_the_device_and_the_next_runs_out_where_planned() {
    let dir = scratch("plan-batch");
    let (b4, _) = synth(&dir, 4, 256, &["--annotate"]);
    let (b8, _) = synth(&dir, 8, 256, &["--annotate"]);
    let v = plan(&[&s(&b4), &s(&b8), "--capacity", "1GiB", "--reserve", "0"]);
    assert_eq!(v["varied"], "batch");
    assert_eq!(v["basis"], "runs");
    assert_eq!(v["figures"], "inferred");
    for run in v["runs"].as_array().unwrap() {
        assert_eq!(run["reproduced"], true, "{run:#}");
        assert_eq!(run["unmatched"], 0);
    }
    let answer = &v["answer"];
    let largest = answer["largest"].as_u64().expect("a batch fits");
    assert!(largest > 8, "{answer:#}");
    assert_eq!(answer["range"], "beyond");
    assert_eq!(answer["fits"]["fits"], true);
    assert_eq!(answer["next"]["value"], largest + 1);
    assert_eq!(answer["next"]["fits"], false);
    let line = answer["line"].as_str().unwrap();
    assert!(
        line.starts_with(&format!("batch {largest} fits on 1.00 GiB")),
        "{line}"
    );
    assert!(
        line.contains(&format!("{} runs out of memory at ", largest + 1)),
        "{line}"
    );
    assert!(line.contains("inferred"), "{line}");

    // The generator itself, on a device of that size.
    let (_, fits) = synth(&dir, largest, 256, &["--capacity", "1GiB"]);
    assert!(fits["oom"].is_null(), "batch {largest}: {fits:#}");
    assert_eq!(
        fits["peak_reserved"], answer["fits"]["peak_reserved_bytes"],
        "the peak planned is the generator's"
    );
    let (_, fails) = synth(&dir, largest + 1, 256, &["--capacity", "1GiB"]);
    assert_eq!(
        fails["oom"]["requested"], answer["next"]["oom"]["requested_bytes"],
        "the failing request planned is the generator's: {fails:#}"
    );

    // The text says the same, with its tables.
    let text = vramtrace([
        "plan",
        &s(&b4),
        &s(&b8),
        "--capacity",
        "1GiB",
        "--reserve",
        "0",
    ])
    .success()
    .stdout;
    assert!(text.contains(&format!("answer     {line}")), "{text}");
    assert!(text.contains("how sizes follow the batch"), "{text}");
    assert!(text.contains("linear"), "{text}");
}

#[test]
fn sequence_lengths_given_on_the_command_line_bring_quadratic_sizes() {
    let dir = scratch("plan-seq");
    let (a, _) = synth(&dir, 2, 256, &[]);
    let (b, _) = synth(&dir, 2, 512, &[]);
    let v = plan(&[
        &s(&a),
        &s(&b),
        "--seq",
        "256,512",
        "--cap",
        "2GiB",
        "--step",
        "8",
        "--at",
        "1024",
    ]);
    assert_eq!(v["varied"], "seq");
    let laws: Vec<&str> = (v["laws"].as_array().unwrap().iter())
        .map(|l| l["law"].as_str().unwrap())
        .collect();
    assert!(laws.contains(&"quadratic"), "{laws:?}");
    let largest = v["answer"]["largest"].as_u64().unwrap();
    assert_eq!(largest % 8, 0);
    assert_eq!(v["cap_bytes"], 2u64 << 30);
    // The full result at 1024, checked against the generator there.
    let at = &v["at"];
    assert_eq!(at["value"], 1024);
    let (_, truth) = synth(&dir, 2, 1024, &[]);
    assert_eq!(at["peak_reserved_bytes"], truth["peak_reserved"], "{at:#}");
    assert_eq!(
        at["peak_allocated_bytes"], truth["peak_allocated"],
        "{at:#}"
    );
    assert!(at["categories"].as_array().is_some_and(|c| !c.is_empty()));
}

#[test]
fn one_run_gives_an_estimate() {
    let dir = scratch("plan-one");
    let (b8, _) = synth(&dir, 8, 256, &["--annotate"]);
    let v = plan(&[&s(&b8), "--cap", "1GiB"]);
    assert_eq!(v["basis"], "one_run");
    assert_eq!(v["figures"], "estimate");
    assert!(v["answer"]["largest"].as_u64().is_some_and(|b| b > 8));
    assert!(v["answer"]["line"].as_str().unwrap().contains("estimate"));
}

#[test]
fn runs_that_cannot_be_planned_from_get_one_line_saying_why() {
    let dir = scratch("plan-bad");
    let (b4, _) = synth(&dir, 4, 256, &[]);
    let (b8, _) = synth(&dir, 8, 256, &[]);
    let one_line = |args: &[&str], wanted: &str| {
        let mut all = vec!["plan"];
        all.extend_from_slice(args);
        let run = vramtrace(&all).fails_with(2);
        assert!(run.stderr.contains(wanted), "{wanted}: {}", run.stderr);
    };
    // No value said, none given.
    one_line(&[&s(&b4), "--cap", "1GiB"], "--batch");
    one_line(&[&s(&b4), &s(&b8), "--cap", "1GiB"], "--batch 4,8");
    // Values that do not match the traces.
    one_line(
        &[&s(&b4), &s(&b8), "--batch", "4", "--cap", "1GiB"],
        "1 values for 2",
    );
    one_line(
        &[&s(&b4), &s(&b8), "--batch", "4,4", "--cap", "1GiB"],
        "at batch 4",
    );
    one_line(
        &[&s(&b4), &s(&b8), "--batch", "4,0", "--cap", "1GiB"],
        "invalid value '0'",
    );
    // Nothing to plan for.
    one_line(&[&s(&b4), &s(&b8), "--batch", "4,8"], "--cap");
    // Another program (other layers), another number of steps.
    let other = dir.join("other.vtrace");
    vramtrace([
        "synth",
        "--layers",
        "5",
        "--iters",
        "3",
        "--batch",
        "8",
        "-o",
        &s(&other),
    ])
    .success();
    one_line(
        &[&s(&b4), &s(&other), "--batch", "4,8", "--cap", "1GiB"],
        "does not line up",
    );
    // Each run's unmatched allocations are counted against its own: never
    // more than it has (issue #46: "650 of its 378 allocations").
    let run = vramtrace([
        "plan",
        &s(&b4),
        &s(&other),
        "--batch",
        "4,8",
        "--cap",
        "1GiB",
    ])
    .fails_with(2);
    let words: Vec<&str> = run.stderr.split_whitespace().collect();
    let counts: Vec<(u64, u64)> = (words.windows(4))
        .filter(|w| w[1] == "of" && (w[2] == "its" || w[2] == "the"))
        .filter_map(|w| {
            Some((
                w[0].replace(',', "").parse().ok()?,
                w[3].replace(',', "").parse().ok()?,
            ))
        })
        .collect();
    assert_eq!(counts.len(), 2, "{}", run.stderr);
    assert!(
        counts.iter().all(|(unmatched, of)| unmatched <= of),
        "{}",
        run.stderr
    );
    // Values given against the runs' own notes of them (issue #46).
    let dir2 = scratch("plan-contradict");
    let (n4, _) = synth(&dir2, 4, 256, &["--annotate"]);
    let (n8, _) = synth(&dir2, 8, 256, &["--annotate"]);
    one_line(
        &[&s(&n4), &s(&n8), "--batch", "8,4", "--cap", "1GiB"],
        "says its batch was 4 (its `batch` annotation), but 8 was given",
    );
    let longer = dir.join("longer.vtrace");
    vramtrace([
        "synth",
        "--layers",
        "2",
        "--hidden",
        "256",
        "--iters",
        "5",
        "--seed",
        "3",
        "--batch",
        "8",
        "--seq-len",
        "256",
        "-o",
        &s(&longer),
    ])
    .success();
    one_line(
        &[&s(&b4), &s(&longer), "--batch", "4,8", "--cap", "1GiB"],
        "different numbers of optimizer steps",
    );
    // A run that ran out of memory.
    let (oom, report) = synth(&dir, 64, 256, &["--capacity", "256MiB"]);
    assert!(!report["oom"].is_null());
    one_line(
        &[&s(&b4), &s(&oom), "--batch", "4,64", "--cap", "1GiB"],
        "ran out of memory",
    );
    one_line(
        &[&s(&b4), "missing.vtrace", "--batch", "4,8", "--cap", "1GiB"],
        "missing.vtrace",
    );
}

#[test]
fn a_report_with_a_baseline_at_another_batch_says_how_far_it_fits() {
    let dir = scratch("plan-report");
    let (b4, _) = synth(&dir, 4, 256, &["--annotate", "--capacity", "2GiB"]);
    let (b8, _) = synth(&dir, 8, 256, &["--annotate", "--capacity", "2GiB"]);
    // On the card they were recorded on, less the estimated reserve.
    let v = plan(&[&s(&b4), &s(&b8)]);
    let line = v["answer"]["line"].as_str().unwrap().to_string();
    assert!(line.contains("fits on the card the runs ran on"), "{line}");
    assert_eq!(v["capacity_bytes"], (2u64 << 30) - (512 << 20));
    let html = dir.join("report.html");
    let out = vramtrace(["report", &s(&b8), "--baseline", &s(&b4), "-o", &s(&html)])
        .success()
        .stdout;
    assert!(out.contains(&format!("fits up to: {line}")), "{out}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Fits up to:"));
    // A baseline at the same batch (last week's run): no line.
    let out = vramtrace(["report", &s(&b8), "--baseline", &s(&b8), "-o", &s(&html)])
        .success()
        .stdout;
    assert!(!out.contains("fits up to"), "{out}");
}

#[test]
fn damaged_and_foreign_inputs_are_one_line_or_a_plan_of_what_can_be_read() {
    let dir = scratch("plan-hostile");
    let (b4, _) = synth(&dir, 4, 256, &["--annotate"]);
    let (b8, _) = synth(&dir, 8, 256, &["--annotate"]);
    let bytes = std::fs::read(&b8).unwrap();
    // Another format.
    let text = dir.join("notes.txt");
    std::fs::write(&text, "batch 8\n").unwrap();
    vramtrace(["plan", &s(&b4), &s(&text), "--cap", "1GiB"]).fails_with(2);
    // Cut in half: the readable part has fewer steps than the other run.
    let cut = dir.join("cut.vtrace");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let run = vramtrace(["plan", &s(&b4), &s(&cut), "--batch", "4,8", "--cap", "1GiB"]);
    assert_eq!(run.code, Some(2), "{run:#?}");
    assert!(run.stderr.contains("optimizer steps"), "{}", run.stderr);
    // Every byte flipped in turn over a stretch: never a panic.
    for at in (bytes.len() / 3..bytes.len() / 3 + 64).step_by(7) {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0xff;
        let path = dir.join(format!("damaged-{at}.vtrace"));
        std::fs::write(&path, &damaged).unwrap();
        let run = vramtrace(["plan", &s(&b4), &s(&path), "--cap", "1GiB", "--json"]);
        assert!(
            matches!(run.code, Some(0 | 2)) && !run.stderr.contains("panicked"),
            "{at}: {run:#?}"
        );
        if run.code == Some(2) {
            assert_eq!(run.stderr.lines().count(), 1, "{at}: {}", run.stderr);
        }
    }
}

/// `plan --kv-cache` on a trace without graphs: the largest allocation
/// alive at the end (inferred) resized until it no longer fits under the
/// cap, checked by replaying the answer with `simulate`'s own figures: the
/// cache found plus what the rest of the run needs stays under the cap.
#[test]
fn kv_cache_plan_answers_under_a_cap_and_refuses_bad_input() {
    let leak = vramtrace_e2e::fixture("leak.vtrace");
    let p = leak.display().to_string();
    let v = vramtrace([
        "plan",
        &p,
        "--kv-cache",
        "--kv-block",
        "1MiB",
        "--cap",
        "1GiB",
        "--json",
    ])
    .success()
    .json();
    assert_eq!(v["kv_cache"]["basis"], "inferred", "{v:#}");
    let blocks = v["largest_blocks"].as_u64().unwrap();
    let recorded = v["kv_cache"]["recorded_bytes"].as_u64().unwrap();
    assert!(blocks << 20 > recorded, "{v:#}");
    assert!(blocks << 20 < 1 << 30, "{v:#}");
    assert!(v["fit"]["next_oom"].is_object(), "{v:#}");
    assert_eq!(v["basis"], "exact", "{v:#}");
    let text = vramtrace([
        "plan",
        &p,
        "--kv-cache",
        "--kv-block",
        "1MiB",
        "--cap",
        "1GiB",
    ])
    .success()
    .stdout;
    assert!(text.contains(&format!("({blocks} blocks)")), "{text}");
    // Bad input: one line, exit 2.
    for (args, wanted) in [
        (vec!["--kv-block", "0B"], "0 bytes"),
        (
            vec!["--kv-site", "nowhere.py:1"],
            "no allocation comes from a site matching",
        ),
    ] {
        let mut all = vec!["plan", p.as_str(), "--kv-cache", "--cap", "1GiB"];
        all.extend(args);
        let run = vramtrace(&all).fails_with(2);
        assert!(run.stderr.contains(wanted), "{wanted}: {}", run.stderr);
    }
    let run = vramtrace(["plan", &p, &p, "--kv-cache"]).fails_with(2);
    assert!(run.stderr.contains("give one trace"), "{}", run.stderr);
    // The inverse question on a run that captured no graph; batch sizes
    // without a KV cache to plan them for.
    let run = vramtrace([
        "plan",
        &p,
        "--kv-cache",
        "--kv-size",
        "100MiB",
        "--cap",
        "1GiB",
    ])
    .fails_with(2);
    assert!(
        run.stderr.contains("captured no CUDA graph"),
        "{}",
        run.stderr
    );
    let run = vramtrace(["plan", &p, "--kv-cache", "--captured-batches", "8,4"]).fails_with(2);
    assert!(run.stderr.contains("--kv-size"), "{}", run.stderr);
}

/// A run at `batch` of one program: a block that grows with the batch, and
/// three that shrink as it grows (no law fits them), each allocated and
/// freed at its own site.
fn shrinking_run(batch: u64) -> Vec<u8> {
    use vramtrace_format::{BlockEvent, Event, EventData, Header, SegmentEvent, TraceWriter};
    let mut w = TraceWriter::new(Vec::new(), Header::default()).unwrap();
    let (key, value) = (
        w.intern_string("batch"),
        w.intern_string(&batch.to_string()),
    );
    let mut events = vec![
        EventData::Annotation { key, value },
        EventData::SegmentAlloc(SegmentEvent {
            addr: 1 << 30,
            size: 1 << 30,
            ..Default::default()
        }),
    ];
    let sizes = [
        batch << 20,
        (64 / batch) << 20,
        (128 / batch) << 20,
        (256 / batch) << 20,
    ];
    for (i, &size) in sizes.iter().enumerate() {
        let stack = w.intern_symbol_stack([(format!("f{i}").as_str(), "train.py", i as u32 + 1)]);
        let block = BlockEvent {
            addr: 1 << 30,
            size,
            requested: size,
            stack,
            ..Default::default()
        };
        events.push(EventData::Alloc(block));
        events.push(EventData::FreeRequested(block));
        events.push(EventData::FreeCompleted(block));
    }
    for (i, data) in events.into_iter().enumerate() {
        w.push(Event {
            time_ns: i as u64,
            data,
        })
        .unwrap();
    }
    w.finish().unwrap()
}

/// Sizes that follow no law are not "fitted exactly": the headline counts
/// them, and a note says which run to record next (issue #46 item 6).
#[test]
fn a_plan_says_how_many_sizes_follow_no_law() {
    let dir = scratch("plan-no-law");
    let paths: Vec<String> = [4u64, 8]
        .iter()
        .map(|&b| {
            let p = dir.join(format!("b{b}.vtrace"));
            std::fs::write(&p, shrinking_run(b)).unwrap();
            s(&p)
        })
        .collect();
    let text = vramtrace(["plan", &paths[0], &paths[1], "--cap", "2GiB"])
        .success()
        .stdout;
    let head = text.lines().next().unwrap();
    assert!(
        !head.contains("every allocation's size fitted exactly"),
        "{text}"
    );
    assert!(
        head.contains("1 of 4 allocations' sizes fitted exactly"),
        "{text}"
    );
    assert!(text.contains("record one more run, at batch 16"), "{text}");
}
