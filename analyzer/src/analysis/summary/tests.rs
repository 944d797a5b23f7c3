//! The summary's tests, and the helpers other analyses' tests summarize with.

use super::*;
use crate::analysis::run_pass;
use crate::analysis::window::Window;
use crate::progress::NoProgress;
use crate::replay::FreeSpace;
use crate::replay::categories::Category;
use crate::testing::{TraceBuilder, replay_trace};
use vramtrace_format::StackId;
use vramtrace_format::{EventSource, TraceReader};

/// Replays the first `events` events of a trace (after its initial state)
/// and returns the free space of its segments then: what the summary
/// finds at the peak in its own pass, found the slow way.
pub(super) fn free_space_at<S: EventSource>(reader: &mut S, events: u64) -> FreeSpace {
    let mut state = ReplayState::default();
    if events == 0 {
        if let Some(initial) = reader.initial_state() {
            state.load_initial(initial, reader.symbols());
        }
    } else {
        let window = Window {
            to_index: Some(events - 1),
            ..Window::ALL
        };
        run_pass(reader, &mut state, &mut [], &window, &NoProgress).unwrap();
    }
    state.free_space()
}

/// The free space at the peak, the slow way: a replay up to it.
fn replayed_free_space(bytes: &[u8], r: &SummaryReport) -> FreeSpace {
    let mut reader = TraceReader::new(bytes).unwrap();
    free_space_at(&mut reader, r.peak_allocated.replayed_events)
}

pub(crate) fn summarize(bytes: &[u8], window: Window) -> SummaryReport {
    summarize_with(bytes, window, UNDO_MIN)
}

/// A summary whose log since the peak is undone into a copy once it is
/// longer than `undo_min` entries (and twice the peak's blocks).
pub(super) fn summarize_with(bytes: &[u8], window: Window, undo_min: usize) -> SummaryReport {
    let mut summary = Summary::new(10);
    summary.undo_min = undo_min;
    replay_trace(bytes, &mut [&mut summary], &window);
    summary.into_report().unwrap()
}

/// A summary whose copy of the sites at the allocated peak, put off, is
/// made once its log holds `sites_log_max` entries (`Some(0)`: when due,
/// never put off; `None`: as the summary chooses).
pub(super) fn summarize_sites(
    bytes: &[u8],
    window: Window,
    sites_log_max: Option<usize>,
) -> SummaryReport {
    let mut summary = Summary::new(10);
    summary.sites_log_max = sites_log_max;
    replay_trace(bytes, &mut [&mut summary], &window);
    summary.into_report().unwrap()
}

/// A peak that creeps up: each new peak makes the copy of the sites at the
/// last one moot, so it is put off and dropped, never made; the copy is
/// made once the log outgrows its limit, or at the end.
#[test]
fn the_copy_of_the_sites_at_a_creeping_peak_is_put_off() {
    let mut b = TraceBuilder::new();
    let a = b.site("a", "a.py", 1);
    let c = b.site("c", "c.py", 3);
    b.segment(0, 1 << 30);
    for i in 0..10u64 {
        // Two up, one down: a new peak every other event.
        b.alloc(i << 21, 300, 300, a)
            .alloc((i << 21) + (1 << 20), 200, 200, c)
            .free((i << 21) + (1 << 20), 0);
    }
    let bytes = b.finish();
    let mut reader = TraceReader::new(&bytes[..]).unwrap();
    let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
    let symbols = reader.symbols();
    let mut state = ReplayState::default();
    let mut summary = Summary::new(10);
    summary.begin(&state, symbols);
    let mut copies = 0;
    for (i, e) in events.iter().enumerate() {
        let applied = state.apply(i as u64, e, symbols);
        let step = Step {
            index: i as u64,
            event: e,
            applied: &applied,
            symbols,
        };
        summary.before(i as u64, e, &state);
        summary.event(&step, &state).unwrap();
        if !summary.sites_at_peak.is_empty() {
            copies += 1;
        }
    }
    // Each free put a copy off; each allocation after it dropped it.
    assert_eq!(copies, 0);
    assert_eq!(summary.sites_due, SitesDue::Deferred);
    // As a pass ends: what is open is settled, then the analyses finish.
    state.settle_at_end();
    summary.finish(&state, symbols).unwrap();
    let r = summary.into_report().unwrap();
    let sites: Vec<(u64, u64)> = r
        .top_sites_at_peak
        .iter()
        .map(|s| (s.bytes, s.count))
        .collect();
    // At the peak (the last allocation of `c`): ten blocks of `a`, and
    // `c`'s last one.
    assert_eq!(sites, [(3000, 10), (200, 1)]);
    // Made when due, the copy says the same.
    assert_eq!(summarize_sites(&bytes, Window::ALL, Some(0)), r);
}

#[test]
fn user_categories_at_each_moment_reach_back_to_the_allocation() {
    let mut b = TraceBuilder::tagged();
    let site = b.site("serve", "server.py", 7);
    b.segment(0, 1 << 30);
    b.alloc(0, 1 << 20, 1 << 20, site)
        .tag(0, Category::Parameter);
    // The KV cache makes the peak, and is tagged only after it.
    b.alloc(1 << 20, 64 << 20, 64 << 20, site);
    b.tag_user(1 << 20, "kv_cache");
    b.alloc(65 << 20, 2 << 20, 2 << 20, site)
        .tag_user(65 << 20, "draft_kv");
    b.free(65 << 20, 2 << 20);
    // A built-in tag after the user's leaves the user's category.
    b.tag(1 << 20, Category::Activation);
    // A name the trace never defined: counted once, read as other.
    b.alloc(70 << 20, 4096, 4096, site);
    b.event(EventData::UserTag(vramtrace_format::UserTagEvent {
        addr: 70 << 20,
        device: 0,
        thread: 0,
        name: vramtrace_format::StringId(999_999),
    }));
    let r = summarize(&b.finish(), Window::default());
    let user = &r.categories.user;
    assert_eq!(user.len(), 2, "{user:?}");
    assert_eq!(user[0].name, "kv_cache");
    assert_eq!(user[0].at_allocated_peak, 64 << 20);
    assert_eq!(user[0].at_end, 64 << 20);
    assert_eq!(user[0].blocks_at_allocated_peak, 1);
    assert_eq!(user[1].name, "draft_kv");
    assert_eq!(user[1].at_allocated_peak, 2 << 20);
    assert_eq!(user[1].at_end, 0);
    // The tagged blocks are "other", exact, in the built-in tables.
    let other = r.categories.at_allocated_peak.get(Category::Other);
    assert_eq!(other.exact_bytes, 66 << 20);
    assert_eq!(r.categories.at_end.get(Category::Activation).bytes, 0);
    assert_eq!(r.inconsistencies.total, 1, "{:?}", r.inconsistencies);
    let json = serde_json::to_value(&r.categories).unwrap();
    assert_eq!(json["user"][0]["name"], "kv_cache");
    // Without user tags the JSON has no `user` key (the shape is kept).
    let mut plain = TraceBuilder::new();
    plain.segment(0, 1 << 20).alloc(0, 512, 512, StackId::NONE);
    let r = summarize(&plain.finish(), Window::default());
    let json = serde_json::to_value(&r.categories).unwrap();
    assert!(json.get("user").is_none());
}

#[test]
fn peaks_and_sites_at_peak() {
    let mut b = TraceBuilder::new();
    let weights = b.site("load", "model.py", 10);
    let acts = b.site("forward", "model.py", 41);
    b.segment(0, 1000).begin("train");
    b.alloc(0, 100, 90, weights);
    b.begin("iter0");
    b.alloc(100, 300, 300, acts).alloc(400, 200, 150, acts);
    b.free(100, 300).free(400, 200);
    b.end("iter0");
    b.begin("iter1")
        .alloc(100, 50, 50, acts)
        .free(100, 50)
        .end("iter1");
    b.end("train");
    let r = summarize(&b.finish(), Window::ALL);
    assert_eq!(r.peak_allocated_bytes, 600);
    assert_eq!(r.peak_requested_bytes, 540);
    assert_eq!(r.peak_reserved_bytes, 1000);
    assert_eq!(r.peak_phase, "train/iter0");
    assert_eq!(r.peak_allocated.index, 5);
    assert_eq!(r.at_peak.internal_fragmentation_bytes, 60);
    assert_eq!(r.at_peak.cached_free_bytes, 400);
    assert_eq!(r.top_sites_at_peak.len(), 2);
    assert_eq!(r.top_sites_at_peak[0].site.site, "forward (model.py:41)");
    assert_eq!(r.top_sites_at_peak[0].bytes, 500);
    assert_eq!(r.top_sites_at_peak[0].count, 2);
    assert_eq!(r.top_sites_at_peak[1].bytes, 100);
    assert_eq!(r.end.allocated, 100);
    assert_eq!(r.counts["alloc"], 4);
    assert_eq!(r.inconsistencies.total, 0);
}

#[test]
fn free_space_at_the_peak() {
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.segment(0, 1000)
        .alloc(0, 100, 100, s)
        .alloc(300, 100, 100, s);
    b.free(300, 100).free(0, 100);
    let bytes = b.finish();
    let r = summarize(&bytes, Window::ALL);
    let space = replayed_free_space(&bytes, &r);
    assert_eq!(space.free_bytes, 800);
    assert_eq!(space.largest_free_block, 600);
    assert_eq!(space.free_ranges, 2);
}

#[test]
fn free_space_at_the_peak_in_the_pass() {
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.segment(0, 1000)
        .alloc(0, 100, 100, s)
        .alloc(300, 100, 100, s);
    // Freed by the caller, the block still holds its range.
    b.free_requested(300, 100).alloc(600, 50, 50, s);
    b.free_completed(300, 100).free(0, 100);
    let r = summarize(&b.finish(), Window::ALL);
    assert_eq!(r.peak_allocated.index, 2);
    assert_eq!(r.at_peak.largest_free_block, Some(600));
    assert_eq!(r.at_peak.external_fragmentation, Some(0.25));
}

#[test]
fn a_peak_that_keeps_moving_costs_no_copy_and_no_second_replay() {
    // Each step makes a new peak and then frees a block: a copy of all
    // 10,000 live blocks per step would cost 10,000 times the events.
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.segment(0, 1 << 30);
    for i in 1..=10_000 {
        b.alloc(4096 * i, 16, 16, s);
    }
    for i in 0..50 {
        b.alloc(0, 1024 + i, 1024 + i, s).free(0, 1024 + i);
    }
    let bytes = b.finish();
    let r = summarize(&bytes, Window::ALL);
    assert_eq!(r.peak_allocated_bytes, 10_000 * 16 + 1024 + 49);
    let largest = (1 << 30) - 10_000 * 4096 - 16;
    assert_eq!(r.at_peak.largest_free_block, Some(largest));
    assert_eq!(replayed_free_space(&bytes, &r).largest_free_block, largest);
    // Undone into a copy once the log outgrows its budget: the same.
    let copied = summarize_with(&bytes, Window::ALL, 0);
    assert_eq!(copied.at_peak, r.at_peak);
}

#[test]
fn a_log_since_the_peak_undoes_segment_changes() {
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.segment(0, 1000)
        .alloc(0, 100, 100, s)
        .alloc(500, 100, 100, s);
    // After the peak: a block freed, a segment added, the first one's
    // blocks gone and the segment returned, a new one mapped.
    b.free(500, 100)
        .segment(4096, 300)
        .free(0, 100)
        .segment_free(0, 1000);
    b.map(8192, 2048).alloc(8192, 50, 50, s);
    let bytes = b.finish();
    for undo_min in [0, 1, 3, UNDO_MIN] {
        let r = summarize_with(&bytes, Window::ALL, undo_min);
        assert_eq!(r.peak_allocated.index, 2);
        assert_eq!(r.at_peak.largest_free_block, Some(400), "{undo_min}");
        assert_eq!(r.at_peak.external_fragmentation, Some(0.5));
        assert_eq!(replayed_free_space(&bytes, &r).largest_free_block, 400);
    }
}

#[test]
fn a_convolutions_failure_the_program_goes_on_from_is_survived() {
    let mut b = TraceBuilder::new();
    let conv = b.stack(&[
        ("_conv_forward", "torch/nn/modules/conv.py", 549),
        ("forward", "model.py", 12),
    ]);
    let other = b.site("forward", "model.py", 14);
    b.segment(0, 1 << 20).alloc(0, 1000, 1000, conv);
    // A workspace refused, then the next algorithm's, then the layer
    // after: both survived.
    b.oom(1 << 30, conv)
        .oom(1 << 29, conv)
        .alloc(4096, 1000, 1000, other);
    // A failure elsewhere is not; nor is one under a convolution that
    // the run ends at.
    b.oom(1 << 30, other).alloc(8192, 1000, 1000, other);
    b.oom(1 << 30, conv);
    let r = summarize(&b.finish(), Window::ALL);
    let survived: Vec<bool> = r.ooms.iter().map(|o| o.survived).collect();
    assert_eq!(survived, [true, true, false, false]);
    assert_eq!((r.oom_count, r.survived_oom_count), (4, 2));
    assert_eq!(r.fatal_ooms().count(), 2);
}

#[test]
fn oom_and_windows() {
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.at(1_000).segment(0, 1 << 20).alloc(0, 1000, 1000, s);
    b.at(2_000).alloc(1000, 5000, 5000, s).free(1000, 5000);
    b.at(3_000).oom(1 << 30, s).alloc(1000, 2000, 2000, s);
    let bytes = b.finish();
    let all = summarize(&bytes, Window::ALL);
    assert_eq!(all.peak_allocated_bytes, 6000);
    assert_eq!(all.oom_count, 1);
    assert_eq!(all.ooms[0].requested_bytes, 1 << 30);
    assert_eq!(all.ooms[0].allocated_bytes, 1000);
    assert_eq!(all.ooms[0].site.site, "f (a.py:1)");
    let late = summarize(
        &bytes,
        Window {
            from_ns: Some(3_000),
            ..Window::ALL
        },
    );
    // The window starts with 1000 bytes live; the earlier 6000 is outside.
    assert_eq!(late.peak_allocated_bytes, 3000);
    assert_eq!(late.events, 2);
    assert_eq!(late.first_time_ns, 3_000);
    let early = summarize(
        &bytes,
        Window {
            to_ns: Some(1_500),
            ..Window::ALL
        },
    );
    assert_eq!(early.peak_allocated_bytes, 1000);
    assert_eq!(early.oom_count, 0);
}
