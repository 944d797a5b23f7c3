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
    let digit = |n: u32, shift: u32| ALPHABET[(n >> shift & 63) as usize];
    // Bytes, four a group, rather than a `char` pushed at a time (each with
    // its own capacity check and UTF-8 encoding): the explorer's bulk is
    // about a megabyte.
    let mut out = Vec::with_capacity(bytes.len().div_ceil(3) * 4);
    let whole = bytes.chunks_exact(3);
    let rest = whole.remainder();
    for chunk in whole {
        let n = (chunk[0] as u32) << 16 | (chunk[1] as u32) << 8 | chunk[2] as u32;
        out.extend_from_slice(&[digit(n, 18), digit(n, 12), digit(n, 6), digit(n, 0)]);
    }
    if !rest.is_empty() {
        let b1 = rest.get(1).copied().unwrap_or(0);
        let n = (rest[0] as u32) << 16 | (b1 as u32) << 8;
        let third = if rest.len() == 2 { digit(n, 6) } else { b'=' };
        out.extend_from_slice(&[digit(n, 18), digit(n, 12), third, b'=']);
    }
    String::from_utf8(out).expect("the base64 alphabet is ASCII")
}

#[cfg(test)]
mod tests;
