//! How figures and sites read, in every printer: values and changes in their
//! units, and short names for sites (defined with the sites, in
//! [`crate::sites`]): text and charts shorten them, JSON keeps them whole.

use crate::analysis::categories::{Basis, Category, Dominant};
use crate::analysis::compare::{Change, Unit};
use crate::analysis::pools::PoolsReport;
use crate::replay::PoolKind;
use crate::replay::categories::CategorySource;
pub use crate::sites::{
    NO_STACK, cut_left, frame_label, frame_within, site_label, site_lines_within, site_within,
};
use crate::units;

/// A limit's words with how it is known: `12.00 GiB cap (recorded)
/// (exact)`. An inferred cap's words already say `inferred`, so its basis
/// is not said a second time on the same line.
pub fn limit_with_known(line: &str, source: &str, known: &str) -> String {
    if source == "inferred_cap" || known.is_empty() {
        line.to_string()
    } else {
        format!("{line} ({known})")
    }
}

/// A value in its unit, for tables: `412.1 MiB`, `1,234`, `1.25 s`, `12.3%`.
/// Per-iteration counts keep one decimal.
pub fn format_value(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Bytes => units::bytes(v.max(0.0).round() as u64),
        Unit::Count => count(v),
        Unit::Nanoseconds => units::duration_ns(v.max(0.0).round() as u64),
        Unit::Ratio => units::percent(v),
    }
}

/// A change in its unit, always signed unless zero: `+10.0 MiB`, `-3`,
/// `+20.0 ms`, and percentage points for ratios (`+1.7 pp`).
pub fn format_delta(unit: Unit, d: f64) -> String {
    let sign = if d > 0.0 {
        "+"
    } else if d < 0.0 {
        "-"
    } else {
        ""
    };
    match unit {
        Unit::Bytes => units::bytes_delta(d.round() as i128),
        Unit::Ratio => format!("{sign}{:.1} pp", d.abs() * 100.0),
        _ => format!("{sign}{}", format_value(unit, d.abs())),
    }
}

/// What the site of allocations without a stack ([`NO_STACK`]) probably
/// holds, for a note beneath a table that lists it.
pub const NO_STACK_NOTE: &str = "<no stack captured>: allocations that came with no stack. \
     Most are probably the autograd engine's: backward runs on a thread of its own with no \
     Python frame, and a PyTorch snapshot or a trace of the replacement mode records Python \
     stacks only (a trace of `python -m vramtrace run` names the autograd node instead). \
     The rest were allocated before recording began: a snapshot's history starts mid-run.";

/// Whether these sites list the one of allocations without a stack.
pub fn lists_no_stack<'a>(sites: impl IntoIterator<Item = &'a str>) -> bool {
    sites.into_iter().any(|s| s == NO_STACK)
}

/// Numbers the names that meet, from the second on (`… #2`), so that
/// distinct things drawn in distinct colours never share a name. A name of
/// several lines is numbered on its last, which is cut from the left to
/// stay within `max` characters.
pub fn number_alike(names: &mut [String], max: usize) {
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    for name in names.iter_mut() {
        let n = seen.entry(name.clone()).or_default();
        *n += 1;
        if *n == 1 {
            continue;
        }
        let suffix = format!(" #{n}");
        let (head, last) = match name.rsplit_once('\n') {
            Some((head, last)) => (format!("{head}\n"), last),
            None => (String::new(), name.as_str()),
        };
        let last = cut_left(last, max.saturating_sub(suffix.len()));
        *name = format!("{head}{last}{suffix}");
    }
}

/// The relative change: `+2.4%`, `0.0%`, or `new` for a rise from zero.
pub fn format_percent(change: &Change) -> String {
    match change.percent {
        Some(0.0) => "0.0%".into(),
        Some(p) => format!("{p:+.1}%"),
        None => "new".into(),
    }
}

fn count(v: f64) -> String {
    let whole = v.round();
    if (v - whole).abs() < 0.05 {
        units::count(whole.max(0.0) as u64)
    } else {
        format!(
            "{}.{}",
            units::count(v.trunc() as u64),
            ((v.fract() * 10.0).round() as u64).min(9)
        )
    }
}

/// `10`, or `10 → 12` when the runs differ.
pub fn repetitions(c: &Change) -> String {
    if c.is_zero() {
        format_value(Unit::Count, c.new)
    } else {
        format!(
            "{} → {}",
            format_value(Unit::Count, c.base),
            format_value(Unit::Count, c.new)
        )
    }
}

// What blocks hold: the words every printer uses for categories.

/// What lowers a category's memory: the remedy its dominance points to.
pub fn category_remedy(category: Category) -> &'static str {
    match category {
        Category::Parameter => "bf16 weights, sharding (FSDP, ZeRO-3) or offloading lowers it",
        Category::Buffer => {
            "buffers are fixed model state (masks, statistics): look for large ones"
        }
        Category::Gradient => {
            "zero_grad(set_to_none=True), sharded gradients (ZeRO-2, FSDP) or DDP's \
             gradient_as_bucket_view=True lowers it"
        }
        Category::OptimizerState => "a sharded (ZeRO-1, FSDP) or 8-bit optimizer lowers it",
        Category::Activation => {
            "activation checkpointing, or a smaller batch or sequence, lowers it"
        }
        Category::Temporary => {
            "a smaller batch, fused kernels (a fused loss, flash attention) or chunking the \
             largest operation lowers it"
        }
        // A category a later format adds reads as "other" here.
        _ => "it is what the program keeps (inputs, outputs, caches, workspaces): see its sites",
    }
}

/// How a figure is known, in a word.
pub fn category_basis(basis: Basis) -> &'static str {
    match basis {
        Basis::Exact => "exact",
        Basis::Inferred => "inferred",
        Basis::Mixed => "partly exact",
    }
}

/// How the figures of a row of several moments are known.
pub fn category_row_basis(cells: &[Basis]) -> &'static str {
    let mut cells = cells.iter();
    let first = cells.next().copied().unwrap_or(Basis::Inferred);
    if cells.all(|&b| b == first) {
        category_basis(first)
    } else {
        category_basis(Basis::Mixed)
    }
}

/// "activations dominate the allocated peak: 4.2 GiB of 7.2 GiB (58%,
/// inferred); activation checkpointing ... lowers it". A category under
/// half of the total "is the largest part of" it: it does not dominate.
pub fn category_dominant_line(d: &Dominant, total: u64, moment: &str) -> String {
    let plural = d.category.label().ends_with('s');
    format!(
        "{} {} {moment}: {} of {} ({}, {}); {}",
        d.category.label(),
        match (d.share > 0.5, plural) {
            (true, true) => "dominate",
            (true, false) => "dominates",
            (false, true) => "are the largest part of",
            (false, false) => "is the largest part of",
        },
        units::bytes(d.bytes),
        units::bytes(total),
        units::percent(d.share),
        category_basis(d.basis),
        category_remedy(d.category)
    )
}

/// [`category_dominant_line`] when the largest part is one of the
/// program's own categories (tagged, so exact).
pub fn user_category_dominant_line(name: &str, bytes: u64, total: u64, moment: &str) -> String {
    let share = if total == 0 {
        0.0
    } else {
        bytes as f64 / total as f64
    };
    format!(
        "{} (your tag) {} {moment}: {} of {} ({}, exact)",
        crate::print::printable::printable_cut(name, 40),
        if share > 0.5 {
            "dominates"
        } else {
            "is the largest part of"
        },
        units::bytes(bytes),
        units::bytes(total),
        units::percent(share),
    )
}

/// What fills the allocated peak of `total` bytes, in a line: the
/// program's own category when it leads, else the dominant built-in one.
pub fn peak_dominant_line(
    c: &crate::analysis::categories::CategoryReport,
    total: u64,
) -> Option<String> {
    const MOMENT: &str = "the allocated peak";
    match c.user_lead() {
        Some(top) => Some(user_category_dominant_line(
            &top.name,
            top.at_allocated_peak,
            total,
            MOMENT,
        )),
        None => (c.dominant.as_ref()).map(|d| category_dominant_line(d, total, MOMENT)),
    }
}

/// Where a run's categories come from, in a few words.
pub fn category_source(source: CategorySource) -> &'static str {
    match source {
        CategorySource::Tags => {
            "parameters, buffers, gradients and optimizer state tagged by the recorder; \
             activations and temporaries inferred from lifetimes"
        }
        // Said of every trace without the recorder's tags, those that
        // `python -m vramtrace run` recorded included (with
        // --no-categories, or of a run without parameters or an optimizer
        // it saw): the words must hold for those too.
        CategorySource::Inferred => {
            "inferred from lifetimes, phases and frames: the trace has no recorder tags"
        }
    }
}

/// What a pool is, in a table cell: who made it.
pub fn pool_kind(kind: Option<PoolKind>) -> &'static str {
    match kind {
        Some(PoolKind::Graph) => "a graph's own",
        Some(PoolKind::Shared) => "graph_pool_handle()",
        Some(PoolKind::MemPool) => "MemPool",
        None => "not recorded",
    }
}

/// The private pools in one sentence: "CUDA graph pools: 4.7 GiB held by 3
/// graphs sharing one pool, 1.2 GiB of it free at the allocated peak".
pub fn pools_line(p: &PoolsReport) -> String {
    let graph_pools = p.pools.iter().filter(|x| x.captures > 0).count();
    let mem_pools = p
        .pools
        .iter()
        .filter(|x| x.kind == Some(PoolKind::MemPool))
        .count();
    let holders = if !p.followed && p.captures == 0 {
        format!(
            "held by {} (how many graphs use them is not recorded)",
            units::counted(p.pools.len() as u64, "private pool", "private pools")
        )
    } else {
        let mut parts = Vec::new();
        if p.captures > 0 {
            let graphs = units::counted(p.captures as u64, "graph", "graphs");
            parts.push(match graph_pools {
                1 if p.captures > 1 => format!("{graphs} sharing one pool"),
                1 => format!("{graphs} in its own pool"),
                n if n as u32 == p.captures => format!("{graphs}, a pool each"),
                n => format!("{graphs} in {n} pools"),
            });
        }
        if mem_pools > 0 {
            parts.push(units::counted(mem_pools as u64, "MemPool", "MemPools"));
        }
        let others = p.pools.len() - graph_pools - mem_pools;
        if others > 0 {
            parts.push(units::counted(others as u64, "other pool", "other pools"));
        }
        format!("held by {}", parts.join(" and "))
    };
    format!(
        "{}: {} {holders}, {} of it free, at the allocated peak (exact)",
        if graph_pools > 0 {
            "CUDA graph pools"
        } else {
            "private pools"
        },
        units::bytes(p.reserved_at_peak_bytes),
        units::bytes(p.free_at_peak_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_untagged_trace_is_not_told_that_recording_it_would_tag_it() {
        // A trace that `python -m vramtrace run` recorded without tags gets
        // these words too: they must not promise what it lacks.
        let words = category_source(CategorySource::Inferred);
        assert!(!words.contains("has exact ones"), "{words}");
        assert!(words.contains("the trace has no recorder tags"), "{words}");
    }

    #[test]
    fn a_category_under_half_of_the_peak_is_its_largest_part_not_dominant() {
        let line = |bytes: u64| {
            let d = Dominant {
                category: Category::Activation,
                bytes,
                share: bytes as f64 / 1000.0,
                basis: Basis::Inferred,
            };
            category_dominant_line(&d, 1000, "the allocated peak")
        };
        assert!(line(494).starts_with("activations are the largest part of the allocated peak: "));
        assert!(line(501).starts_with("activations dominate the allocated peak: "));
    }

    /// As for colours: a category the format adds needs a remedy of its own.
    #[test]
    fn every_category_has_a_remedy_of_its_own() {
        let remedies: Vec<&str> = Category::ALL.into_iter().map(category_remedy).collect();
        for r in &remedies {
            assert_eq!(remedies.iter().filter(|s| *s == r).count(), 1, "{r}");
        }
    }

    #[test]
    fn names_that_meet_are_numbered() {
        let mut names = [
            "a (x.py:1)",
            "b",
            "a (x.py:1)",
            "u\nvia a (x.py:1)",
            "u\nvia a (x.py:1)",
        ]
        .map(String::from);
        number_alike(&mut names, 14);
        assert_eq!(
            names,
            [
                "a (x.py:1)",
                "b",
                "a (x.py:1) #2",
                "u\nvia a (x.py:1)",
                "u\n…a (x.py:1) #2"
            ]
            .map(String::from)
        );
    }

    #[test]
    fn values_and_changes_read_well() {
        assert_eq!(format_delta(Unit::Bytes, (1 << 20) as f64), "+1.0 MiB");
        assert_eq!(format_delta(Unit::Count, -3.0), "-3");
        assert_eq!(format_delta(Unit::Nanoseconds, 20e6), "+20.00 ms");
        assert_eq!(format_delta(Unit::Ratio, -0.127), "-12.7 pp");
        assert_eq!(format_value(Unit::Count, 1234.5), "1,234.5");
        assert_eq!(format_percent(&Change::of(100.0, 102.4)), "+2.4%");
        assert_eq!(format_percent(&Change::of(0.0, 1.0)), "new");
        assert_eq!(format_percent(&Change::of(5.0, 5.0)), "0.0%");
    }
}
