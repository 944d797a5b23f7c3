//! Snapshots in the shape of each PyTorch release from 2.12 to 2.15, and one
//! with keys no release writes (fixtures/torch/synthetic/make_synthetic.py;
//! docs/snapshots.md has the table of fields): each field is read, or counted
//! and reported once as not read.

use vramtrace_e2e::{fixture, vramtrace};

fn path(name: &str) -> String {
    fixture(&format!("torch/synthetic/{name}"))
        .display()
        .to_string()
}

/// `import --json` of a snapshot (the trace goes to a scratch file).
fn import(name: &str) -> serde_json::Value {
    let out = vramtrace_e2e::scratch(&format!("torch-versions-{name}")).join("t.vtrace");
    vramtrace([
        "import",
        "--json",
        &path(name),
        "-o",
        &out.display().to_string(),
    ])
    .success()
    .json()
}

fn summary(name: &str) -> serde_json::Value {
    vramtrace(["summary", "--json", &path(name)])
        .success()
        .json()
}

/// The conversion warnings of a summary.
fn warnings(summary: &serde_json::Value) -> Vec<String> {
    (summary["warnings"].as_array().unwrap().iter())
        .map(|w| w["message"].as_str().unwrap().to_string())
        .collect()
}

/// A summary's categories at the allocated peak: (name, bytes), built-in and
/// the program's own.
fn categories_at_peak(summary: &serde_json::Value) -> Vec<(String, u64)> {
    let device = &summary["by_device"][0]["categories"];
    let mut rows: Vec<(String, u64)> = (device["at_allocated_peak"].as_array().unwrap().iter())
        .map(|r| {
            let name = r["category"].as_str().unwrap().to_string();
            (name, r["bytes"].as_u64().unwrap())
        })
        .collect();
    if let Some(user) = device["user"].as_array() {
        rows.extend(user.iter().map(|r| {
            let name = r["name"].as_str().unwrap().to_string();
            (name, r["at_allocated_peak"].as_u64().unwrap())
        }));
    }
    rows
}

#[test]
fn a_2_12_entry_s_pool_id_puts_a_segment_freed_before_the_end_in_its_pool() {
    let i = import("torch_2_12_p4.pickle");
    // The segments of pools (1, 0) and (2, 0) are gone from `segments`:
    // only their `segment_alloc` says whose they were (two name (2, 0)
    // through one shared tuple).
    assert_eq!(i["counts"]["segment_pool"], 3, "{i}");
    assert_eq!(i["end_state_matches"], true);
    assert!(i.get("unread").is_none(), "{i}");
    let s = summary("torch_2_12_p4.pickle");
    let pools = &s["by_device"][0]["pools"]["pools"];
    let peak = |id: serde_json::Value| {
        (pools.as_array().unwrap().iter())
            .find(|p| p["id"] == id)
            .unwrap_or_else(|| panic!("no pool {id}: {s}"))["peak_reserved_bytes"]
            .as_u64()
    };
    assert_eq!(peak(serde_json::json!([1, 0])), Some(20 << 20));
    assert_eq!(peak(serde_json::json!([2, 0])), Some(2 << 20));
    assert_eq!(warnings(&s), Vec::<String>::new());
}

#[test]
fn the_allocator_s_own_pair_is_named_and_the_program_s_metadata_is_a_category() {
    // 2.13 and 2.14 tag the allocator's prefix block `mallocWithAddress` in
    // `user_metadata`, 2.15 in `internal_metadata`: neither is a category.
    for name in ["torch_2_13_p4.pickle", "torch_2_15_p4.pickle"] {
        let i = import(name);
        assert_eq!(i["internal_tags"]["mallocWithAddress"], 3, "{name}: {i}");
        let s = summary(name);
        let rows = categories_at_peak(&s);
        assert!(
            rows.iter().all(|r| r.0 != "mallocWithAddress"),
            "{name}: {rows:?}"
        );
        assert!(
            warnings(&s)
                .iter()
                .any(|w| w.contains("allocator tagged as its own work")
                    && w.contains("`mallocWithAddress` (3)")),
            "{name}: {s}"
        );
    }
    // 2.13: one word names the program's own category.
    let rows = categories_at_peak(&summary("torch_2_13_p4.pickle"));
    assert!(rows.contains(&("weights".to_string(), 8 << 20)), "{rows:?}");
}

#[test]
fn a_2_15_dict_of_metadata_names_a_category_and_free_text_stays_a_note() {
    let s = summary("torch_2_15_p4.pickle");
    let rows = categories_at_peak(&s);
    // `{"category":"optimizer_state","step":3}` while the 8 MiB block was made.
    assert!(
        rows.contains(&("optimizer_state".to_string(), 8 << 20)),
        "{rows:?}"
    );
    let i = import("torch_2_15_p4.pickle");
    assert_eq!(i["counts"]["tag"], 1, "{i}");
    // "eval loop, step 3": one note where it was set, no category.
    assert_eq!(i["counts"]["annotation"], 1, "{i}");
    assert!(i.get("unread").is_none(), "{i}");
}

#[test]
fn a_2_14_snapshot_s_pinned_host_memory_is_counted_not_replayed() {
    let i = import("torch_2_14_p4.pickle");
    assert_eq!(i["unread"]["host_segments"], 1, "{i}");
    assert_eq!(i["unread"]["host_traces"], 2, "{i}");
    // The device's actions only: the host's segment_alloc and alloc are not.
    assert_eq!(
        i["actions"],
        serde_json::json!({"alloc": 1, "annotate": 1, "segment_alloc": 1})
    );
    // `annotate` names the block's category.
    assert_eq!(i["counts"]["user_tag"], 1, "{i}");
    let s = summary("torch_2_14_p4.pickle");
    // The host's entries come 10 µs earlier: they do not set the time base.
    let device = &s["by_device"][0];
    assert_eq!(device["first_time_ns"], 0, "{s}");
    assert_eq!(device["duration_ns"], 2000);
    assert!(
        warnings(&s)
            .iter()
            .any(|w| w.contains("`host_segments` (1), `host_traces` (2)")),
        "{s}"
    );
}

#[test]
fn keys_no_release_writes_are_counted_once_and_fx_frames_still_read() {
    let i = import("future_keys_p4.pickle");
    let unread = &i["unread"];
    for (key, n) in [
        ("process_name", 1),
        ("segments.numa_node", 1),
        ("blocks.tier", 1),
        ("trace.tier", 1),
        ("trace.compile_context", 1),
        ("frames.fx_node_op", 1),
        ("frames.fx_node_name", 1),
        ("frames.fx_original_trace", 1),
        ("frames.fx_node_info", 1),
    ] {
        assert_eq!(unread[key], n, "{key}: {i}");
    }
    assert_eq!(unread.as_object().unwrap().len(), 9, "{i}");
    assert_eq!(i["actions"]["prefetch"], 1);
    let w = i["warnings"].as_array().unwrap();
    // Once: one line names them all.
    assert_eq!(
        w.iter()
            .filter(|w| w.as_str().unwrap().starts_with("not understood"))
            .count(),
        1,
        "{i}"
    );
    // A frame with `augment_with_fx_traces`'s keys is still a frame: the
    // block has its stack.
    let text = vramtrace(["summary", &path("future_keys_p4.pickle")])
        .success()
        .stdout;
    assert!(text.contains("forward (model.py:7)"), "{text}");
    assert!(!text.contains("<no stack captured>"), "{text}");
}
