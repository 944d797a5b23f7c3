//! The summary as text.

use super::devices::at;
use super::{full_stacks, site_cell};
use crate::analysis::summary::{PeakState, SiteShare, SummaryReport};
use crate::command::summary::SummaryResult;
use crate::print::labels::{self, site_label};
use crate::print::table::{Align, Table};
use crate::units;

/// The OOMs whose waterfall the text shows (all are in the JSON).
const OOM_WATERFALLS: usize = 4;

/// The summary as text; `full`: sites are whole stacks, listed below the table.
pub fn summary(out: &SummaryResult, full: bool) -> String {
    let r = &out.summary;
    if r.empty_window {
        return format!(
            "{:<10}{}\n{:<10}0\n{:<10}none: no event lies inside the window\n",
            "trace", out.path, "events", "peaks"
        );
    }
    let mut text = header(out);
    text.push_str(&format!("{:<10}{}\n", "at peak", at_peak_line(&r.at_peak)));
    text.push_str(&context_lines(r));
    text.push_str(&categories_section(r));
    if let Some(p) = r.pools.as_ref().filter(|p| !p.pools.is_empty()) {
        text.push_str(&pools_table(p));
    }
    text.push_str(&top_sites(&r.top_sites_at_peak, full));
    text.push_str(&oom_section(out));
    if let Some(w) = &r.waterfall_at_peak {
        text.push_str("\nwhere the limit went at the allocated peak:\n");
        text.push_str(&super::waterfall(w, 2));
    }
    text.push_str(&inconsistencies(r));
    text
}

/// The trace, its duration and events, the peaks, and the phases hidden.
fn header(out: &SummaryResult) -> String {
    let r = &out.summary;
    let mut lines: Vec<(&str, String)> = vec![("trace", out.path.clone())];
    lines.push((
        "duration",
        format!(
            "{} ({} to {})",
            units::duration_ns(r.duration_ns),
            units::duration_ns(r.first_time_ns),
            units::duration_ns(r.last_time_ns)
        ),
    ));
    let kinds: Vec<String> = r
        .counts
        .iter()
        .map(|(k, n)| format!("{k} {}", units::count(*n)))
        .collect();
    lines.push((
        "events",
        if kinds.is_empty() {
            units::count(r.events)
        } else {
            format!("{} ({})", units::count(r.events), kinds.join(", "))
        },
    ));
    let mut peaks = Table::new(&[("", Align::Left), ("", Align::Right), ("", Align::Left)]);
    for (name, peak) in [
        ("allocated", &r.peak_allocated),
        ("reserved", &r.peak_reserved),
        ("requested", &r.peak_requested),
    ] {
        peaks.row([
            name.to_string(),
            units::bytes(peak.bytes),
            at(peak.time_ns, &peak.phase),
        ]);
    }
    if !out.hidden_phases.is_empty() {
        let threads: Vec<String> = (out.hidden_phases.iter())
            .map(|t| format!("thread {} began {}", t.thread, units::count(t.phases)))
            .collect();
        let flag = match out.hidden_phases.as_slice() {
            [one] => format!("--phase-thread {}", one.thread),
            _ => "--phase-thread N".to_string(),
        };
        lines.push((
            "phases",
            format!(
                "backward-pass phases (autograd thread, most likely) are hidden: {}; {flag} shows them",
                threads.join(", ")
            ),
        ));
    }
    let mut text = String::new();
    for (label, value) in lines {
        text.push_str(&format!("{label:<10}{value}\n"));
    }
    // The header row of this table is blank: drop it.
    let peak_lines = peaks.render(0);
    for (i, line) in peak_lines.lines().skip(1).enumerate() {
        let label = if i == 0 { "peaks" } else { "" };
        text.push_str(&format!("{label:<10}{line}\n"));
    }
    text
}

/// The state at the allocated peak: segments, cache and fragmentation.
fn at_peak_line(p: &PeakState) -> String {
    let mut at_peak = format!(
        "{} segments, {} reserved, {} cached free",
        units::count(p.segments),
        units::bytes(p.reserved_bytes),
        units::bytes(p.cached_free_bytes)
    );
    if let (Some(largest), Some(ext)) = (p.largest_free_block, p.external_fragmentation) {
        at_peak.push_str(&format!(
            " (largest free block {}, external fragmentation {})",
            units::bytes(largest),
            units::percent(ext)
        ));
    }
    at_peak.push_str(&format!(
        ", internal fragmentation {}",
        units::bytes(p.internal_fragmentation_bytes)
    ));
    at_peak
}

/// The limit, the memory outside the allocator, the pools and the end.
fn context_lines(r: &SummaryReport) -> String {
    let mut text = String::new();
    if let Some(limit) = &r.limit {
        // The waterfall's name for an inferred cap, so one rule says when
        // the basis is already in the words.
        let source = if limit.source == crate::analysis::limits::LimitSource::InferredCap {
            "inferred_cap"
        } else {
            ""
        };
        text.push_str(&format!(
            "{:<10}{}\n",
            "limit",
            crate::print::labels::limit_with_known(&limit.describe(), source, limit.known.word())
        ));
    }
    if let Some(o) = &r.outside_allocator {
        let at_peak = o
            .at_peak_bytes
            .map_or(String::new(), |b| format!(", at peak {}", units::bytes(b)));
        text.push_str(&format!(
            "{:<10}outside the allocator (measured at {}): at start {}{at_peak}, max {}, at end {} (the CUDA context, NCCL, cuBLAS workspaces, other processes)\n",
            "card",
            units::counted(o.samples, "device-memory sample", "device-memory samples"),
            units::bytes(o.at_start_bytes),
            units::bytes(o.max_bytes),
            units::bytes(o.at_end_bytes)
        ));
    }
    if let Some(p) = &r.pools {
        text.push_str(&format!("{:<10}{}\n", "pools", labels::pools_line(p)));
    }
    text.push_str(&format!(
        "{:<10}{} allocated, {} reserved, {} live blocks\n",
        "at end",
        units::bytes(r.end.allocated),
        units::bytes(r.end.reserved),
        units::count(r.end.live_blocks)
    ));

    text
}

/// What the blocks hold at the peaks and at the end, by category.
fn categories_section(r: &SummaryReport) -> String {
    let mut text = String::new();
    let c = &r.categories;
    let user: Vec<_> = c
        .user
        .iter()
        .map(|u| super::categories::UserColumns {
            name: &u.name,
            bytes: vec![u.at_allocated_peak, u.at_reserved_peak, u.at_end],
        })
        .collect();
    let categories = super::categories::table(
        &[
            ("allocated peak", &c.at_allocated_peak),
            ("reserved peak", &c.at_reserved_peak),
            ("end", &c.at_end),
        ],
        &user,
        2,
    );
    if !categories.is_empty() {
        text.push_str(&format!(
            "\nby category ({}):\n",
            crate::print::labels::category_source(c.source)
        ));
        text.push_str(&categories);
        if let Some(line) = labels::peak_dominant_line(c, r.peak_allocated_bytes) {
            text.push_str(&format!("  {line}\n"));
        }
    }

    text
}

/// The sites live at the allocated peak, and their stacks when `full`.
fn top_sites(sites: &[SiteShare], full: bool) -> String {
    let mut text = String::new();
    text.push_str("\ntop sites live at the allocated peak:\n");
    if sites.is_empty() {
        text.push_str("  none\n");
    } else {
        let mut t = Table::new(&[
            ("bytes", Align::Right),
            ("blocks", Align::Right),
            ("share", Align::Right),
            ("category", Align::Left),
            ("site", Align::Left),
        ]);
        for s in sites {
            t.row([
                units::bytes(s.bytes),
                units::count(s.count),
                units::percent(s.share),
                s.category.map_or("", |c| c.label()).to_string(),
                site_cell(&s.site),
            ]);
        }
        text.push_str(&t.render(2));
        if labels::lists_no_stack(sites.iter().map(|s| s.site.site.as_str())) {
            text.push_str(&super::wrapped(labels::NO_STACK_NOTE, 100, "  "));
        }
        if full {
            text.push_str("\n  stacks:\n");
            text.push_str(&full_stacks(sites.iter().map(|s| &s.site), 4));
        }
    }

    text
}

/// The out-of-memory events, the first ones' waterfalls, and the fixes.
fn oom_section(out: &SummaryResult) -> String {
    let r = &out.summary;
    let mut text = String::new();
    text.push_str(&format!(
        "\nout-of-memory events: {}{}\n",
        units::count(r.oom_count),
        if r.survived_oom_count > 0 {
            format!(
                " ({} survived: a convolution's cuDNN workspace could not be allocated, and PyTorch tried the next algorithm, one that needs less)",
                units::count(r.survived_oom_count)
            )
        } else {
            String::new()
        }
    ));
    if !r.ooms.is_empty() {
        let mut t = Table::new(&[
            ("time", Align::Right),
            ("requested", Align::Right),
            ("allocated", Align::Right),
            ("reserved", Align::Right),
            ("phase", Align::Left),
            ("site", Align::Left),
            ("", Align::Left),
        ]);
        for o in &r.ooms {
            t.row([
                units::duration_ns(o.time_ns),
                units::bytes(o.requested_bytes),
                units::bytes(o.allocated_bytes),
                units::bytes(o.reserved_bytes),
                o.phase.clone(),
                site_label(&o.site.site),
                if o.survived { "survived" } else { "" }.to_string(),
            ]);
        }
        text.push_str(&t.render(2));
        let fatal = r.fatal_ooms().count();
        for o in r.fatal_ooms().take(OOM_WATERFALLS) {
            text.push_str(&format!("\n  {}:\n", super::oom_line(o)));
            text.push_str(&super::waterfall(&o.waterfall, 4));
        }
        if fatal > OOM_WATERFALLS {
            text.push_str(&format!(
                "\n  the waterfalls of {} more out-of-memory events are in --json\n",
                units::count((fatal - OOM_WATERFALLS) as u64)
            ));
        }
        // The same fixes `simulate` and the report offer, so that the first
        // command run gives the answer.
        if let Some(f) = &out.fixes {
            text.push('\n');
            for line in super::fixes(f).lines() {
                text.push_str("  ");
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    text
}

/// The inconsistencies by kind, with the gaps in the recording.
fn inconsistencies(r: &SummaryReport) -> String {
    let mut text = String::new();
    let inc = &r.inconsistencies;
    text.push_str(&format!("\ninconsistencies: {}\n", units::count(inc.total)));
    if let Some(d) = &r.dropped_events {
        text.push_str(&format!(
            "  {d}; {} contradictions after the gaps are put down to them\n",
            units::count(d.explained_inconsistencies)
        ));
    }
    if inc.total > 0 {
        let mut t = Table::new(&[
            ("count", Align::Right),
            ("kind", Align::Left),
            ("first at event", Align::Right),
        ]);
        for k in &inc.by_kind {
            let first = inc
                .examples
                .iter()
                .find(|e| e.kind == k.kind)
                .map_or(String::new(), |e| units::count(e.index));
            t.row([units::count(k.count), k.description.to_string(), first]);
        }
        text.push_str(&t.render(2));
    }
    text
}

/// Each private pool: at the allocated peak, its own peak and at the end
/// (every figure exact: replayed from the pool's segments and blocks).
fn pools_table(p: &crate::analysis::pools::PoolsReport) -> String {
    let mut t = Table::new(&[
        ("pool", Align::Left),
        ("made by", Align::Left),
        ("graphs", Align::Right),
        ("at peak", Align::Right),
        ("in use", Align::Right),
        ("free", Align::Right),
        ("own peak", Align::Right),
        ("at end", Align::Right),
        ("users", Align::Left),
    ]);
    for pool in &p.pools {
        t.row([
            format!("({}, {})", pool.id.0, pool.id.1),
            labels::pool_kind(pool.kind).to_string(),
            if pool.followed {
                units::count(pool.captures as u64)
            } else {
                "?".to_string()
            },
            units::bytes(pool.reserved_at_peak_bytes),
            units::bytes(pool.live_at_peak_bytes),
            units::bytes(pool.free_at_peak_bytes()),
            units::bytes(pool.peak_reserved_bytes),
            units::bytes(pool.reserved_at_end_bytes),
            if !pool.followed {
                "not recorded".to_string()
            } else if pool.released {
                "all let go".to_string()
            } else {
                "held".to_string()
            },
        ]);
    }
    format!(
        "\nmemory pools (exact; a pool's free bytes serve only its own allocations):\n{}",
        t.render(2)
    )
}
