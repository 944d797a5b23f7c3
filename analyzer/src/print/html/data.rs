//! The explorer's data as the page reads it: small parts as JSON, the bulk
//! (series, allocations, stacks, checkpoints) as columns of LEB128 varints,
//! compressed with zlib and base64-encoded. The page inflates them with the
//! browser's own `DecompressionStream`, so nothing but this file is needed.
//!
//! Each column is a sequence of unsigned varints; signed values are
//! zigzag-encoded, and most are deltas from the value before, so the numbers
//! are small. The column order and lengths are listed in the JSON
//! (`columns`), and the page decodes them in that order.

use crate::analysis::categories::Category;
use crate::analysis::explorer::Explorer;
use crate::print::labels;
use crate::print::svg::palette;
use serde_json::{Value, json};
use std::io::Write as _;

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
            put_varint(&mut self.bytes, v);
            n += 1;
        }
        self.index.push((name, n));
    }

    fn signed(&mut self, name: &'static str, values: impl IntoIterator<Item = i128>) {
        self.column(name, values.into_iter().map(zigzag));
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i128) -> u64 {
    let v = v.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    ((v << 1) ^ (v >> 63)) as u64
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
/// base64-encoded.
pub fn encode(e: &Explorer) -> (Value, String) {
    let mut c = Columns::default();
    let buckets = &e.series.buckets;
    let start = e.start_ns;
    c.signed("s_start", deltas(buckets.iter().map(|b| b.start_ns), start));
    c.signed(
        "s_span",
        buckets
            .iter()
            .map(|b| b.end_ns as i128 - b.start_ns as i128),
    );
    type Pick = fn(&crate::analysis::explorer::SeriesBucket) -> crate::analysis::explorer::Extent;
    let quantities: [(&'static str, &'static str, &'static str, Pick); 3] = [
        ("a_last", "a_hi", "a_lo", |b| b.allocated),
        ("r_last", "r_hi", "r_lo", |b| b.reserved),
        ("c_last", "c_hi", "c_lo", |b| b.cached_free),
    ];
    for (last, hi, lo, pick) in quantities {
        c.signed(last, deltas(buckets.iter().map(|b| pick(b).last), 0));
        c.column(hi, buckets.iter().map(|b| pick(b).max - pick(b).last));
        c.column(lo, buckets.iter().map(|b| pick(b).last - pick(b).min));
    }

    let allocs = &e.allocations;
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

    c.column("st_len", e.stacks.iter().map(|s| s.len() as u64));
    c.column(
        "st_frames",
        e.stacks.iter().flat_map(|s| s.iter().map(|&f| f as u64)),
    );

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

    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&c.bytes).expect("writing to memory");
    let compressed = z.finish().expect("writing to memory");

    let checkpoints: Vec<Value> = e
        .checkpoints
        .iter()
        .map(|c| {
            json!({
                "kinds": c.kinds,
                "index": c.index,
                "time": c.time_ns.saturating_sub(start),
                "allocated": c.allocated,
                "pending": c.pending_free,
                "reserved": c.reserved,
                "free": c.free.free_bytes,
                "largest_free": c.free.largest_free_block,
                "fragmentation": c.external_fragmentation,
                "left_out": c.blocks_left_out,
            })
        })
        .collect();
    let phases = json!({
        "name": e.phases.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        "depth": e.phases.iter().map(|p| p.depth).collect::<Vec<_>>(),
        "begin": e.phases.iter().map(|p| p.begin_index - e.first_index).collect::<Vec<_>>(),
        "end": e.phases.iter().map(|p| p.end_index - e.first_index).collect::<Vec<_>>(),
    });
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
        "phases": phases,
        "phases_left_out": e.phases_left_out,
        "frames": e.frames,
        "sites": e.sites,
        "site_key": site_key(e),
        "phase_paths": e.phase_paths,
        // What blocks hold, by code: their names and fixed colours.
        "categories": Category::ALL.iter().map(|&c| json!({
            "label": c.label(),
            "colour": palette::hex(palette::of_category(c)),
        })).collect::<Vec<_>>(),
        "checkpoints": checkpoints,
        "columns": c.index.iter().map(|(name, n)| json!([name, n])).collect::<Vec<_>>(),
    });
    (json, base64(&compressed))
}

/// Sites the explorer colours one by one when it colours by site (the
/// rest share one grey), so that its key is short and true.
const SITE_COLOURS: usize = 11;

/// The explorer's key of sites: the [`SITE_COLOURS`] sites with the most
/// bytes among the allocations kept, most first, each with its index and
/// its name within 80 characters, the user's own line first (no two alike).
fn site_key(e: &Explorer) -> Vec<Value> {
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
        .map(|(&site, label)| json!({ "site": site, "label": label }))
        .collect()
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

    #[test]
    fn varints_and_zigzag() {
        let mut out = Vec::new();
        put_varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        assert_eq!(zigzag(0), 0);
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
        assert_eq!(zigzag(-2), 3);
    }
}
