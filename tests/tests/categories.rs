//! What fills the GPU, end to end: categories from tags (the synthetic
//! fixtures, recorded as a recorder tags), inferred (a real PyTorch snapshot,
//! and the same synthetic run without tags), and in every command that
//! shows them.

use vramtrace_e2e::{fixture, scratch, vramtrace};
use vramtrace_format::{
    BlockEvent, Category, Event, EventData, Header, SegmentEvent, TagEvent, TraceReader,
    TraceWriter,
};

/// The categories of `summary --json`: `(category, bytes, exact bytes)` at
/// `moment`, in category order.
fn categories(summary: &serde_json::Value, moment: &str) -> Vec<(String, u64, u64)> {
    summary["categories"][moment]
        .as_array()
        .unwrap_or_else(|| panic!("no categories {moment}: {summary}"))
        .iter()
        .map(|r| {
            (
                r["category"].as_str().unwrap().to_string(),
                r["bytes"].as_u64().unwrap(),
                r["exact_bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn bytes_of(rows: &[(String, u64, u64)], category: &str) -> u64 {
    rows.iter().find(|r| r.0 == category).map_or(0, |r| r.1)
}

fn summary(path: &std::path::Path) -> serde_json::Value {
    vramtrace(["summary", &path.display().to_string(), "--json"])
        .success()
        .result()
}

/// Within `tolerance` (a fraction) of `want`.
fn near(got: u64, want: u64, tolerance: f64) -> bool {
    (got as f64 - want as f64).abs() <= tolerance * want as f64
}

#[test]
fn a_snapshot_s_inferred_categories_agree_with_pytorch_s_counts() {
    // What PyTorch said of the same model and optimizer, and what a tagged
    // recording of the run said (fixtures/torch/README.md).
    let exact: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("torch/gpt2_categories.json")).unwrap(),
    )
    .unwrap();
    let s = summary(&fixture("torch/gpt2_train.pickle.xz"));
    assert_eq!(s["categories"]["source"], "inferred");
    let end = categories(&s, "at_end");
    assert!(end.iter().all(|r| r.2 == 0), "nothing is exact: {end:?}");
    for (category, key) in [
        ("parameters", "parameter_blocks_bytes"),
        ("optimizer_state", "optimizer_state_blocks_bytes"),
    ] {
        let got = bytes_of(&end, category);
        let want = exact[key].as_u64().unwrap();
        assert!(near(got, want, 0.02), "{category}: {got} against {want}");
    }
    // At the allocated peak, the categories add up to it, to the byte.
    let peak = categories(&s, "at_allocated_peak");
    let total: u64 = peak.iter().map(|r| r.1).sum();
    assert_eq!(total, s["peak_allocated"]["bytes"].as_u64().unwrap());
    assert_eq!(total, 7_722_708_480, "PyTorch's max_memory_allocated()");
    // The model's state at the peak; what fills the rest is the forward's.
    assert_eq!(bytes_of(&peak, "parameters"), bytes_of(&end, "parameters"));
    assert_eq!(s["categories"]["dominant"]["category"], "activations");
    assert_eq!(s["categories"]["dominant"]["basis"], "inferred");
}

#[test]
fn tags_make_the_model_s_state_exact_and_inference_agrees_without_them() {
    let tagged = summary(&fixture("leak.vtrace"));
    assert_eq!(tagged["categories"]["source"], "tags");
    let dir = scratch("categories-untagged");
    let untagged = dir.join("leak-untagged.vtrace");
    vramtrace([
        "synth",
        "--iters",
        "10",
        "--seed",
        "0",
        "--leak-bytes",
        "1MiB",
        "--no-tags",
        "-o",
        &untagged.display().to_string(),
    ])
    .success();
    let inferred = summary(&untagged);
    assert_eq!(inferred["categories"]["source"], "inferred");
    for moment in ["at_allocated_peak", "at_reserved_peak", "at_end"] {
        let (t, i) = (categories(&tagged, moment), categories(&inferred, moment));
        let total: u64 = t.iter().map(|r| r.1).sum();
        assert_eq!(total, i.iter().map(|r| r.1).sum::<u64>(), "{moment}");
        for category in ["parameters", "optimizer_state"] {
            let row = t.iter().find(|r| r.0 == category).unwrap();
            assert_eq!(row.1, row.2, "{moment} {category}: every byte tagged");
            assert!(row.1 > 0);
            assert!(
                near(bytes_of(&i, category), row.1, 0.02),
                "{moment} {category}: inferred {} against tagged {}",
                bytes_of(&i, category),
                row.1
            );
        }
    }
    // The leak is what the program keeps: other, in both.
    assert_eq!(
        bytes_of(&categories(&tagged, "at_end"), "other"),
        10 << 20,
        "ten iterations of 1 MiB kept"
    );
    let text = vramtrace(["summary", &fixture("leak.vtrace").display().to_string()])
        .success()
        .stdout;
    assert!(text.contains(
        "by category (parameters, buffers, gradients and optimizer state tagged by the recorder"
    ));
    // 44.1% of the peak: the largest part, not a dominant one.
    assert!(text.contains(
        "activations are the largest part of the allocated peak: 186.0 MiB of 422.1 MiB (44.1%"
    ));
    assert!(
        text.contains("optimizer state  train_step (train.py:92)"),
        "{text}"
    );
}

#[test]
fn every_command_shows_categories() {
    let leak = fixture("leak.vtrace").display().to_string();
    let clean = fixture("clean.vtrace").display().to_string();
    // leaks: what grows.
    let leaks = vramtrace(["leaks", &leak, "--json"]).success().result();
    assert_eq!(leaks["leaks"][0]["category"], "other");
    // compare: what changed, by category.
    let compare = vramtrace(["compare", &clean, &leak]).success().stdout;
    assert!(
        compare.contains("by category at the allocated peak: activations -1.0 MiB, other +9.0 MiB; everything else equal"),
        "{compare}"
    );
    let json = vramtrace(["compare", &clean, &leak, "--json"])
        .success()
        .result();
    let at_end = json["categories"]["at_end"].as_array().unwrap();
    let other = at_end.iter().find(|d| d["category"] == "other").unwrap();
    assert_eq!(
        other["new"].as_u64().unwrap() - other["base"].as_u64().unwrap(),
        10 << 20
    );
    // timeline: areas by category, each sample's adding up to it.
    let t = vramtrace(["timeline", &leak, "--by", "category", "--json"])
        .success()
        .result();
    assert_eq!(t["grouped_by"], "category");
    let names: Vec<&str> = t["categories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "parameters",
            "gradients",
            "optimizer state",
            "activations",
            "temporaries",
            "other"
        ]
    );
    for s in t["samples"].as_array().unwrap() {
        let sum: u64 = s["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(sum, s["allocated"].as_u64().unwrap());
    }
    let dir = scratch("categories-charts");
    let svg = dir.join("by-category.svg");
    vramtrace([
        "timeline",
        &leak,
        "--by",
        "category",
        "-o",
        &svg.display().to_string(),
    ])
    .success();
    let svg = std::fs::read_to_string(svg).unwrap();
    roxmltree::Document::parse(&svg).expect("well-formed SVG");
    assert!(
        svg.contains("optimizer state") && !svg.contains(">state<"),
        "the legend names categories whole"
    );
    // simulate: what the memory held at a simulated OOM.
    let sim = vramtrace(["simulate", &leak, "--capacity", "300MiB", "--reserve", "0B"])
        .success()
        .stdout;
    assert!(sim.contains("allocated then: parameters"), "{sim}");
    // The rank table: a column per category.
    let ranks = scratch("categories-ranks");
    let pattern = ranks.join("run-%r.vtrace").display().to_string();
    vramtrace(["synth", "--world-size", "2", "-o", &pattern]).success();
    let table = vramtrace(["summary", &ranks.display().to_string()])
        .success()
        .stdout;
    assert!(
        table.contains("parameters  optimizer state  activations"),
        "{table}"
    );
    let json = vramtrace(["summary", &ranks.display().to_string(), "--json"])
        .success()
        .result();
    let row = &json["rows"][0]["categories_at_peak"];
    assert!(
        row.as_array().is_some_and(|r| r.len() == Category::COUNT),
        "{json}"
    );
}

/// A trace of one 4 KiB block, then `tags`.
fn trace_with_tags(tags: &[TagEvent]) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), Header::default()).unwrap();
    let segment = SegmentEvent {
        addr: 1 << 20,
        size: 2 << 20,
        ..Default::default()
    };
    let block = BlockEvent {
        addr: 1 << 20,
        size: 4096,
        requested: 4096,
        ..Default::default()
    };
    let mut events = vec![EventData::SegmentAlloc(segment), EventData::Alloc(block)];
    events.extend(tags.iter().copied().map(EventData::Tag));
    for (i, data) in events.into_iter().enumerate() {
        w.push(Event {
            time_ns: i as u64,
            data,
        })
        .unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn bad_tags_are_counted_not_fatal() {
    let dir = scratch("categories-bad-tags");
    let path = dir.join("bad.vtrace");
    let bytes = trace_with_tags(&[
        TagEvent::new(1 << 20, 0, Category::Parameter),
        // No block there.
        TagEvent::new(7 << 20, 0, Category::Gradient),
        // A category from a later version: read as other.
        TagEvent {
            code: 77,
            ..TagEvent::new(1 << 20, 0, Category::Parameter)
        },
    ]);
    std::fs::write(&path, &bytes).unwrap();
    // The trace reads back whole, the unknown code kept as it was.
    let mut reader = TraceReader::new(&bytes[..]).unwrap();
    let codes: Vec<u8> = reader
        .events()
        .filter_map(|e| match e.unwrap().data {
            EventData::Tag(t) => Some(t.code),
            _ => None,
        })
        .collect();
    assert_eq!(codes, [0, 2, 77]);
    let s = summary(&path);
    let end = categories(&s, "at_end");
    assert_eq!(
        bytes_of(&end, "other"),
        4096,
        "the last tag's category, unknown: other"
    );
    let kinds: Vec<&str> = s["inconsistencies"]["by_kind"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tag_without_block", "unknown_category"]);
    let text = vramtrace(["summary", &path.display().to_string()])
        .success()
        .stdout;
    assert!(
        text.contains("tag of an address with no live block"),
        "{text}"
    );
}

#[test]
fn a_newer_torch_s_annotations_name_categories_of_their_own() {
    // `annotate` entries (after PyTorch 2.11): one word, a JSON object's
    // "category", and free text (fixtures/torch/synthetic/make_synthetic.py).
    let p = fixture("torch/synthetic/annotate_p4.pickle");
    let s = summary(&p);
    let user = s["categories"]["user"].as_array().expect("user categories");
    assert_eq!(user.len(), 1, "{user:?}");
    assert_eq!(user[0]["name"], "kv_cache");
    assert_eq!(user[0]["at_allocated_peak"], 32 << 20);
    let peak = categories(&s, "at_allocated_peak");
    assert_eq!(bytes_of(&peak, "activations"), 8 << 20);
    // The kv cache is in "other" too (which it subdivides), exact; the
    // block under free text is inferred.
    let other = peak.iter().find(|r| r.0 == "other").unwrap();
    assert_eq!((other.1, other.2), (33 << 20, 32 << 20));
    let text = vramtrace(["summary", &p.display().to_string()])
        .success()
        .stdout;
    let row = text.lines().find(|l| l.contains("kv_cache")).unwrap();
    assert!(
        row.contains("32.0 MiB") && row.ends_with("exact (your tag)"),
        "{text}"
    );
    assert!(
        text.contains("kv_cache (your tag) dominates the allocated peak"),
        "{text}"
    );
    // The report says the same, in its findings and its categories section.
    let page = scratch("annotate-report").join("report.html");
    vramtrace([
        "report",
        &p.display().to_string(),
        "-o",
        &page.display().to_string(),
    ])
    .success();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("kv_cache (your tag) dominates the allocated peak"));
    assert!(html.contains("kv_cache (your tag)</"), "the findings card");
    assert!(!html.contains("other dominates the allocated peak"));
    let other_row = text
        .lines()
        .find(|l| l.trim_start().starts_with("other"))
        .unwrap();
    assert!(other_row.contains("1.0 MiB"), "{text}");
    // The free text is kept as a note of its block, not dropped.
    let out = scratch("annotate").join("annotate.vtrace");
    vramtrace([
        "import",
        &p.display().to_string(),
        "-o",
        &out.display().to_string(),
    ])
    .success();
    let bytes = std::fs::read(&out).unwrap();
    let mut reader = TraceReader::new(&bytes[..]).unwrap();
    let events: Vec<Event> = reader.events().map(|e| e.unwrap()).collect();
    let s = reader.symbols();
    let notes: Vec<String> = (events.iter())
        .filter_map(|e| match e.data {
            EventData::Annotation { key, value } => Some(format!(
                "{}={}",
                s.string_or_unknown(key),
                s.string_or_unknown(value)
            )),
            _ => None,
        })
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("torch.annotate=0x7e0002800000: retained by autograd")),
        "{notes:?}"
    );
}
