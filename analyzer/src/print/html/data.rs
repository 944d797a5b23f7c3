//! The explorer's data as the page reads it: small parts as JSON, the bulk
//! (series, axis knots, allocations, stacks, checkpoints) as columns of
//! LEB128 varints, compressed with zlib and base64-encoded. The page inflates them with the
//! browser's own `DecompressionStream`, so nothing but this file is needed.
//!
//! Each column is a sequence of unsigned varints, the trace format's own
//! ([`vramtrace_format::varint`]); signed values are zigzag-encoded, and
//! most are deltas from the value before, so the numbers are small. The
//! column order and lengths are listed in the JSON (`columns`), and the
//! page decodes them in that order (`assets/explorer/decode.js`).

use crate::analysis::categories::Category;
use crate::analysis::explorer::Explorer;
use crate::print::labels;
use crate::print::svg::palette::{self, Palette};
use serde_json::{Value, json};
use std::io::Write as _;
use vramtrace_format::varint;

/// Columns of varints, in order, with their names and lengths.
#[derive(Default)]
struct Columns {
    bytes: Vec<u8>,
    index: Vec<(&'static str, usize)>,
}

impl Columns {
    fn column(&mut self, name: &'static str, values: impl IntoIterator<Item = u64>) {
        let mut n = 0;
        for v in values {
            varint::put(&mut self.bytes, v);
            n += 1;
        }
        self.index.push((name, n));
    }

    /// A column of signed values, zigzag-encoded; a difference past 64
    /// bits (only a damaged trace has one) is clamped to them.
    fn signed(&mut self, name: &'static str, values: impl IntoIterator<Item = i128>) {
        self.column(
            name,
            values
                .into_iter()
                .map(|v| varint::zigzag(v.clamp(i64::MIN as i128, i64::MAX as i128) as i64)),
        );
    }
}

/// Deltas of a sequence from the value before (the first from `origin`).
fn deltas(values: impl IntoIterator<Item = u64>, origin: u64) -> impl Iterator<Item = i128> {
    let mut prev = origin as i128;
    values.into_iter().map(move |v| {
        let d = v as i128 - prev;
        prev = v as i128;
        d
    })
}

/// The explorer's data: `(json, bulk)`, the bulk compressed and
/// base64-encoded. Sites take their colours from `palette`, which the
/// report's charts have coloured theirs with.
pub fn encode(e: &Explorer, palette: &mut Palette) -> (Value, String) {
    // The columns' order is the bulk's layout, which the page reads by the
    // index written last (`columns`).
    let mut c = Columns::default();
    series_columns(&mut c, e);
    let knots = Knots::of(e);
    knot_columns(&mut c, &knots);
    allocation_columns(&mut c, e);
    c.column("st_len", e.stacks.iter().map(|s| s.len() as u64));
    c.column(
        "st_frames",
        e.stacks.iter().flat_map(|s| s.iter().map(|&f| f as u64)),
    );
    segment_columns(&mut c, e);

    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&c.bytes).expect("writing to memory");
    let compressed = z.finish().expect("writing to memory");

    let json = json!({
        "first_index": e.first_index,
        "events": e.events,
        "start_ns": e.start_ns,
        "end_ns": e.end_ns,
        "bucket_events": e.series.bucket_events,
        "threshold": e.allocation_threshold,
        "allocations_total": e.allocations_total,
        "idle": {
            "threshold": e.idle.threshold_ns,
            "index": e.idle.gaps.iter().map(|g| g.index - e.first_index).collect::<Vec<_>>(),
            "gap": e.idle.gaps.iter().map(|g| g.gap_ns).collect::<Vec<_>>(),
            "left_out": e.idle.left_out,
        },
        "phases": phases_json(e),
        "phases_left_out": e.phases_left_out,
        "frames": e.frames,
        "sites": e.sites,
        "site_key": site_key(e, palette),
        "phase_paths": e.phase_paths,
        // What blocks hold, by code: their names and fixed colours.
        "categories": Category::ALL.iter().map(|&c| json!({
            "label": c.label(),
            "colour": palette::hex(palette::of_category(c)),
        })).collect::<Vec<_>>(),
        "colours": colours_json(),
        "axis_end": { "index": knots.end_index, "time": knots.end_time, "busy": knots.end_busy },
        "checkpoints": checkpoints_json(e),
        "columns": c.index.iter().map(|(name, n)| json!([name, n])).collect::<Vec<_>>(),
    });
    (json, base64(&compressed))
}

/// The time series: each quantity's last value a bucket (as deltas), and
/// how far above and below it the bucket went.
fn series_columns(c: &mut Columns, e: &Explorer) {
    let buckets = &e.series.buckets;
    type Pick = fn(&crate::analysis::explorer::SeriesBucket) -> crate::analysis::explorer::Extent;
    let quantities: [(&'static str, &'static str, &'static str, Pick); 3] = [
        ("a_last", "a_hi", "a_lo", |b| b.allocated),
        ("r_last", "r_hi", "r_lo", |b| b.reserved),
        ("c_last", "c_hi", "c_lo", |b| b.cached_free),
    ];
    let pools: (&'static str, &'static str, &'static str, Pick) =
        ("p_last", "p_hi", "p_lo", |b| b.pools);
    // Bytes in private pools: columns only for a trace that has them.
    let pools = e.series.has_pools.then_some(pools);
    for (last, hi, lo, pick) in quantities.into_iter().chain(pools) {
        c.signed(last, deltas(buckets.iter().map(|b| pick(b).last), 0));
        c.column(hi, buckets.iter().map(|b| pick(b).max - pick(b).last));
        c.column(lo, buckets.iter().map(|b| pick(b).last - pick(b).min));
    }
}

/// The buckets' times reach the page as knots only. Busy time goes as
/// what it cut from time, which changes only at idle gaps: nearly all
/// zeros, where busy times would double the bytes of the times.
fn knot_columns(c: &mut Columns, knots: &Knots) {
    c.column(
        "kn_index",
        deltas(knots.index.iter().copied(), 0).map(|d| d.max(0) as u64),
    );
    c.signed("kn_time", deltas(knots.time.iter().copied(), 0));
    c.signed(
        "kn_cut",
        deltas(knots.time.iter().zip(&knots.busy).map(|(t, b)| t - b), 0),
    );
}

/// The allocations kept: when each was made and freed, its size, slack,
/// stack, site, phase and category.
fn allocation_columns(c: &mut Columns, e: &Explorer) {
    let allocs = &e.allocations;
    let start = e.start_ns;
    c.column(
        "al_index",
        deltas(allocs.iter().map(|a| a.alloc_index), e.first_index).map(|d| d.max(0) as u64),
    );
    c.column(
        "al_life",
        allocs
            .iter()
            .map(|a| a.free_index.map_or(0, |f| f - a.alloc_index + 1)),
    );
    c.signed("al_time", deltas(allocs.iter().map(|a| a.alloc_ns), start));
    c.signed(
        "al_free_time",
        allocs
            .iter()
            .map(|a| a.free_ns.map_or(0, |f| f as i128 - a.alloc_ns as i128)),
    );
    c.column("al_size", allocs.iter().map(|a| a.size));
    c.signed(
        "al_slack",
        allocs.iter().map(|a| a.size as i128 - a.requested as i128),
    );
    c.column("al_stack", allocs.iter().map(|a| a.stack as u64));
    c.column("al_site", allocs.iter().map(|a| a.site as u64));
    c.column(
        "al_phase",
        allocs.iter().map(|a| a.phase.map_or(0, |p| p as u64 + 1)),
    );
    c.column("al_initial", allocs.iter().map(|a| a.initial as u64));
    // The category's code, plus 8 when a tag said it.
    c.column(
        "al_category",
        allocs
            .iter()
            .map(|a| a.category.code() as u64 + if a.exact { 8 } else { 0 }),
    );
}

/// The checkpoints' segments, and each segment's blocks by the gap before
/// each (so that a block's offset costs a small number).
fn segment_columns(c: &mut Columns, e: &Explorer) {
    let segments = e.checkpoints.iter().flat_map(|c| c.segments.iter());
    c.column(
        "cp_segments",
        e.checkpoints.iter().map(|c| c.segments.len() as u64),
    );
    c.column("sg_addr", segments.clone().map(|s| s.addr));
    c.column("sg_size", segments.clone().map(|s| s.size));
    c.column("sg_flags", segments.clone().map(|s| s.expandable as u64));
    c.column("sg_used", segments.clone().map(|s| s.used_bytes));
    c.column("sg_used_blocks", segments.clone().map(|s| s.used_blocks));
    c.column("sg_largest_free", segments.clone().map(|s| s.largest_free));
    c.column("sg_blocks", segments.clone().map(|s| s.blocks.len() as u64));
    let blocks = || {
        segments.clone().flat_map(|s| {
            let mut end = 0;
            s.blocks.iter().map(move |b| {
                let gap = b.offset as i128 - end as i128;
                end = b.offset.saturating_add(b.size);
                (gap, b)
            })
        })
    };
    c.signed("bl_gap", blocks().map(|(gap, _)| gap));
    c.column("bl_size", blocks().map(|(_, b)| b.size));
    c.column("bl_pending", blocks().map(|(_, b)| b.pending_free as u64));
    c.column("bl_stack", blocks().map(|(_, b)| b.stack as u64));
    c.column(
        "bl_alloc",
        blocks().map(|(_, b)| b.allocation.map_or(0, |a| a as u64 + 1)),
    );
}

/// Each checkpoint's figures; its segments and blocks are in the bulk.
fn checkpoints_json(e: &Explorer) -> Vec<Value> {
    e.checkpoints
        .iter()
        .map(|c| {
            json!({
                "kinds": c.kinds,
                "index": c.index,
                "time": c.time_ns.saturating_sub(e.start_ns),
                "allocated": c.allocated,
                "pending": c.pending_free,
                "reserved": c.reserved,
                "free": c.free.free_bytes,
                "largest_free": c.free.largest_free_block,
                "fragmentation": c.external_fragmentation,
                "left_out": c.blocks_left_out,
                "segments_left_out": c.segments_left_out.count,
                "segments_left_out_reserved": c.segments_left_out.reserved,
                "segments_left_out_used": c.segments_left_out.used,
            })
        })
        .collect()
}

/// The phases kept, as parallel arrays, with their tints.
fn phases_json(e: &Explorer) -> Value {
    json!({
        "name": e.phases.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        "depth": e.phases.iter().map(|p| p.depth).collect::<Vec<_>>(),
        "begin": e.phases.iter().map(|p| p.begin_index - e.first_index).collect::<Vec<_>>(),
        "end": e.phases.iter().map(|p| p.end_index - e.first_index).collect::<Vec<_>>(),
        "tint": e.phases.iter().map(|p| palette::phase_tint(&p.name)).collect::<Vec<_>>(),
    })
}

/// The colours of what the explorer draws, from the charts' palette.
fn colours_json() -> Value {
    json!({
        "reserved": palette::hex(palette::RESERVED),
        "allocated": palette::hex(palette::ALLOCATED),
        "cached_free": palette::hex(palette::CACHED_FREE),
        "pools": palette::hex(palette::POOLS),
        "alert": palette::hex(palette::ALERT),
        "pending_free": palette::hex(palette::PENDING_FREE),
        "segment_free": palette::hex(palette::SEGMENT_FREE),
        "block_in_use": palette::hex(palette::BLOCK_IN_USE),
        "dimmed": palette::hex(palette::DIMMED),
        "other_sites": palette::hex(palette::OTHER),
        "phase_tints": palette::PHASE_TINTS.map(palette::hex),
    })
}

/// Sites the explorer colours one by one when it colours by site (the
/// rest share one grey), so that its key is short and true.
const SITE_COLOURS: usize = 11;

/// The explorer's key of sites: the [`SITE_COLOURS`] sites with the most
/// bytes among the allocations kept, most first, each with its index, its
/// name within 80 characters, the user's own line first (no two alike), and
/// its colour in `palette`.
fn site_key(e: &Explorer, palette: &mut Palette) -> Vec<Value> {
    let mut bytes = vec![0u64; e.sites.len()];
    for a in &e.allocations {
        if let Some(b) = bytes.get_mut(a.site as usize) {
            // Saturating: a damaged trace may hold sizes near 2^64.
            *b = b.saturating_add(a.size);
        }
    }
    let mut top: Vec<usize> = (0..bytes.len()).filter(|&s| bytes[s] > 0).collect();
    top.sort_by_key(|&s| std::cmp::Reverse(bytes[s]));
    top.truncate(SITE_COLOURS);
    let mut names: Vec<String> = top
        .iter()
        .map(|&s| labels::site_within(&e.sites[s], 80))
        .collect();
    labels::number_alike(&mut names, 80);
    top.iter()
        .zip(names)
        .map(|(&site, label)| {
            let colour = palette::hex(palette.colour(&e.sites[site]));
            json!({ "site": site, "label": label, "colour": colour })
        })
        .collect()
}

/// The knots of the explorer's x axes: each bucket's first and last event
/// (window indices), with its time from the window's start (never going
/// back: times of merged devices may) and its busy time (the time less the
/// idle gaps up to the event, shrunk as [`Explorer::busy_ns`] shrinks
/// them); then one knot past the last event, a 2000th of the span later, so
/// that the last event has a width. The page places anything between two
/// knots in proportion.
#[derive(Debug, Default, PartialEq)]
struct Knots {
    index: Vec<u64>,
    time: Vec<u64>,
    busy: Vec<u64>,
    end_index: u64,
    end_time: f64,
    end_busy: f64,
}

impl Knots {
    fn of(e: &Explorer) -> Knots {
        let mut knots = Knots::default();
        let width = e.series.bucket_events.max(1);
        let since_start = |ns: u64| ns.saturating_sub(e.start_ns);
        // The idle gaps by window index, and what busy time cut from those
        // up to the next knot: knots come in order, so one walk does.
        let mut gaps = e.idle.gaps.iter().peekable();
        let mut cut = 0u64;
        let mut cut_up_to = |index: u64| {
            while let Some(g) = gaps.next_if(|g| g.index - e.first_index <= index) {
                cut += g.gap_ns.saturating_sub(e.idle.threshold_ns);
            }
            cut
        };
        let mut latest = 0;
        for (b, bucket) in e.series.buckets.iter().enumerate() {
            let first = b as u64 * width;
            let last = (first + width).min(e.events).saturating_sub(1);
            latest = latest.max(since_start(bucket.start_ns));
            knots.push(first, latest, cut_up_to(first));
            if last > first {
                latest = latest.max(since_start(bucket.end_ns.max(bucket.start_ns)));
                knots.push(last, latest, cut_up_to(last));
            }
        }
        let span = latest.max(1) as f64;
        knots.end_index = e.events;
        knots.end_time = latest as f64 + (span / 2000.0).max(1.0);
        knots.end_busy = knots.end_time - cut_up_to(e.events) as f64;
        knots
    }

    fn push(&mut self, index: u64, time: u64, cut: u64) {
        self.index.push(index);
        self.time.push(time);
        self.busy.push(time.saturating_sub(cut));
    }
}

/// Standard base64 with padding.
pub(super) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> shift & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    /// Knots at each bucket's first and last event; busy time as
    /// [`Explorer::busy_ns`] counts it; one knot past the end.
    #[test]
    fn knots_follow_the_buckets_and_busy_time() {
        use crate::analysis::explorer::SeriesBucket;
        use crate::analysis::pauses::{IdleGap, IdleGaps};
        let bucket = |start_ns, end_ns| SeriesBucket {
            start_ns,
            end_ns,
            ..SeriesBucket::default()
        };
        let e = Explorer {
            first_index: 100,
            events: 7,
            start_ns: 1_000,
            end_ns: 9_000,
            series: crate::analysis::explorer::Series {
                bucket_events: 3,
                // Events 0-2, 3-5 and 6; the second bucket's start goes
                // back (merged devices): its knot keeps the time before.
                buckets: vec![
                    bucket(1_000, 1_200),
                    bucket(1_100, 8_000),
                    bucket(9_000, 9_000),
                ],
                has_pools: false,
            },
            idle: IdleGaps {
                threshold_ns: 100,
                gaps: vec![IdleGap {
                    gap_ns: 6_000,
                    index: 105,
                    time_ns: 8_000,
                }],
                left_out: 0,
                median_ns: 10,
            },
            ..Explorer::default()
        };
        let knots = Knots::of(&e);
        assert_eq!(knots.index, [0, 2, 3, 5, 6]);
        assert_eq!(knots.time, [0, 200, 200, 7_000, 8_000]);
        assert_eq!(knots.busy, [0, 200, 200, 1_100, 2_100]);
        for (k, &index) in knots.index.iter().enumerate() {
            let time = e.start_ns + knots.time[k];
            assert_eq!(knots.busy[k], e.busy_ns(e.first_index + index, time));
        }
        assert_eq!(knots.end_index, 7);
        assert_eq!(knots.end_time, 8_004.0);
        assert_eq!(knots.end_busy, 2_104.0);
    }

    /// What the page's tests (`assets/explorer/tests`, run with `node
    /// --test`) decode and compare: the explorer's data of a small trace as
    /// this encoder writes it, with what the page should find in it, and
    /// [`units`](crate::units)' forms of a table of values for the
    /// page's to match. The file must be what this writes now; after a
    /// change, `VRAMTRACE_BLESS=1 cargo test -p vramtrace --lib the_pages_tests_read`
    /// writes it.
    /// A trace with private pools sends their bytes as columns of their
    /// own, which the page draws; one without sends none.
    #[test]
    fn bytes_in_private_pools_are_columns_only_when_there_are_pools() {
        use crate::analysis::explorer::{ExplorerAnalysis, ExplorerOptions};
        use crate::analysis::window::Window;
        use crate::testing::{Serving, TraceBuilder, replay_trace, serving_run_with_pools};
        let columns = |trace: &[u8]| {
            let mut analysis = ExplorerAnalysis::new(ExplorerOptions::default());
            replay_trace(trace, &mut [&mut analysis], &Window::default());
            let e = analysis.into_report().unwrap();
            let (data, _) = encode(&e, &mut Palette::new());
            let names: Vec<String> = (data["columns"].as_array().unwrap().iter())
                .map(|c| c[0].as_str().unwrap().to_string())
                .collect();
            (e, names)
        };
        let (trace, pools) = serving_run_with_pools(&Serving::default());
        let (e, names) = columns(&trace);
        assert!(e.series.has_pools);
        assert!(names.iter().any(|n| n == "p_last"), "{names:?}");
        let at_end: u64 = pools.iter().map(|p| p.reserved).sum();
        assert_eq!(e.series.buckets.last().unwrap().pools.last, at_end);
        assert!(e.series.buckets.iter().any(|b| b.pools.max > 0));
        let mut plain = TraceBuilder::new();
        plain
            .segment(0, 1 << 20)
            .alloc(0, 512, 512, vramtrace_format::StackId::NONE);
        let (e, names) = columns(&plain.finish());
        assert!(!e.series.has_pools);
        assert!(!names.iter().any(|n| n.starts_with("p_")), "{names:?}");
    }

    #[test]
    fn the_pages_tests_read_what_this_writes() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/print/html/assets/explorer/tests/rust-fixture.json"
        );
        let text = rust_fixture();
        if std::env::var_os("VRAMTRACE_BLESS").is_some() {
            std::fs::write(path, &text).unwrap();
        }
        let kept = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            kept == text,
            "{path} is not what the encoder writes now: run \
             VRAMTRACE_BLESS=1 cargo test -p vramtrace --lib the_pages_tests_read"
        );
    }

    fn rust_fixture() -> String {
        use crate::analysis::explorer::{ExplorerAnalysis, ExplorerOptions};
        use crate::analysis::window::Window;
        use crate::testing::{TraceBuilder, replay_trace};
        use crate::units;
        const MIB: u64 = 1 << 20;
        // A segment, two phases, allocations of growing size each freed
        // after the next is made, a pause of a second, and an OOM.
        let mut b = TraceBuilder::new();
        let site = b.site("forward", "model.py", 3);
        let other = b.site("step", "train.py", 9);
        b.at(1_000).segment(0, 64 * MIB);
        let mut t = 2_000;
        for i in 0..6u64 {
            t += if i == 3 { 1_000_000_000 } else { 1_000 };
            b.at(t)
                .begin(if i % 2 == 0 { "forward" } else { "backward" });
            let stack = if i % 2 == 0 { site } else { other };
            b.at(t + 10)
                .alloc(i * 4 * MIB, (i + 1) * MIB, (i + 1) * MIB - 3, stack);
            if i > 0 {
                b.at(t + 20).free((i - 1) * 4 * MIB, i * MIB);
            }
            b.at(t + 30)
                .end(if i % 2 == 0 { "forward" } else { "backward" });
        }
        b.at(t + 100).oom(512 * MIB, site);
        let mut analysis = ExplorerAnalysis::new(ExplorerOptions::default());
        replay_trace(&b.finish(), &mut [&mut analysis], &Window::default());
        let e = analysis.into_report().unwrap();
        let (data, bulk) = encode(&e, &mut Palette::new());
        let knots = Knots::of(&e);
        let a = &e.allocations;
        let expect = json!({
            "knots": { "index": knots.index, "time": knots.time, "busy": knots.busy },
            "allocations": {
                "allocEvent": a.iter().map(|a| a.alloc_index - e.first_index).collect::<Vec<_>>(),
                "allocTime": a.iter().map(|a| a.alloc_ns - e.start_ns).collect::<Vec<_>>(),
                "freeEvent": a.iter().map(|a| a.free_index.map_or(e.events, |f| f - e.first_index)).collect::<Vec<_>>(),
                "freeTime": a.iter().map(|a| a.free_ns.map(|f| f - e.start_ns)).collect::<Vec<_>>(),
                "size": a.iter().map(|a| a.size).collect::<Vec<_>>(),
                "requested": a.iter().map(|a| a.requested).collect::<Vec<_>>(),
                "site": a.iter().map(|a| a.site).collect::<Vec<_>>(),
            },
            "allocated_last": e.series.buckets.iter().map(|b| b.allocated.last).collect::<Vec<_>>(),
            "stacks": e.stacks,
            "checkpoints": e.checkpoints.iter().map(|c| json!({
                "event": c.index - e.first_index,
                "segments": c.segments.iter().map(|s| json!({
                    "addr": s.addr,
                    "size": s.size,
                    "blocks": s.blocks.iter().map(|b| json!([b.offset, b.size, b.allocation.map_or(-1, |a| a as i64)])).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "phases": e.phases.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        });
        const GIB: u64 = 1 << 30;
        let sizes = [
            0,
            1,
            1023,
            1024,
            1280,
            1536,
            1792,
            2047,
            1_048_575,
            1_048_576,
            20 * MIB,
            1_288_490_188,
            80 * GIB,
            1 << 50,
            1 << 60,
            u64::MAX >> 11,
        ];
        let times = [
            0,
            999,
            1_000,
            12_250,
            12_350,
            999_949,
            999_950,
            1_125_000,
            3_205_000,
            999_994_999,
            1_250_000_000,
            59_994_999_999,
            60_000_000_000,
            125_000_000_000,
            3_600_000_000_000,
            7_265_000_000_000,
        ];
        let counts = [0, 12, 999, 1_000, 1_234_567, 9_007_199_254_740_991];
        let fixture = json!({
            "about": "Written by analyzer/src/print/html/data.rs (the_pages_tests_read_what_this_writes); read by assets/explorer/tests.",
            "units": {
                "bytes": sizes.map(|n| json!([n, units::bytes(n)])),
                "duration_ns": times.map(|n| json!([n, units::duration_ns(n)])),
                "count": counts.map(|n| json!([n, units::count(n)])),
            },
            "explorer": { "data": data, "bulk": bulk, "expect": expect },
        });
        serde_json::to_string_pretty(&fixture).unwrap() + "\n"
    }

    #[test]
    fn columns_are_varints_and_signed_ones_zigzag() {
        let mut c = Columns::default();
        c.column("u", [300]);
        c.signed("s", [0, -1, 1, -2, i128::MIN]);
        assert_eq!(c.bytes[..2], [0xac, 0x02]);
        assert_eq!(c.bytes[2..6], [0, 1, 2, 3]);
        // Clamped to i64::MIN, whose zigzag is u64::MAX: ten bytes.
        assert_eq!(c.bytes.len(), 6 + 10);
        assert_eq!(c.index, [("u", 1), ("s", 5)]);
    }
}
