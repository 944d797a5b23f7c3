//! Memory by category as text: the table of categories at a run's moments,
//! the line naming what dominates, and what lowers each category.

use crate::analysis::categories::{Basis, Category, CategoryTable, Dominant};
use crate::print::table::{Align, Table};
use crate::replay::categories::CategorySource;
use crate::units;

/// What lowers a category's memory: the remedy its dominance points to.
pub fn remedy(category: Category) -> &'static str {
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
        Category::Other => {
            "it is what the program keeps (inputs, outputs, caches, workspaces): see its sites"
        }
    }
}

/// How a figure is known, in a word.
pub fn basis(basis: Basis) -> &'static str {
    match basis {
        Basis::Exact => "exact",
        Basis::Inferred => "inferred",
        Basis::Mixed => "partly exact",
    }
}

/// How the figures of a row of several moments are known.
fn row_basis(cells: &[Basis]) -> &'static str {
    let mut cells = cells.iter();
    let first = cells.next().copied().unwrap_or(Basis::Inferred);
    if cells.all(|&b| b == first) {
        basis(first)
    } else {
        basis(Basis::Mixed)
    }
}

/// The categories of `columns` (a heading and a table each) as a table,
/// one row per category with bytes in any column, and how each row's
/// figures are known; empty when no column has bytes.
pub fn table(columns: &[(&str, &CategoryTable)], indent: usize) -> String {
    let mut heads: Vec<(&str, Align)> = vec![("category", Align::Left)];
    heads.extend(columns.iter().map(|(h, _)| (*h, Align::Right)));
    heads.push(("how known", Align::Left));
    let mut t = Table::new(&heads);
    for category in Category::ALL {
        let shares: Vec<_> = columns.iter().map(|(_, c)| c.get(category)).collect();
        if shares.iter().all(|s| s.bytes == 0) {
            continue;
        }
        let bases: Vec<Basis> = shares
            .iter()
            .filter(|s| s.bytes > 0)
            .map(|s| s.basis())
            .collect();
        let mut row = vec![category.label().to_string()];
        row.extend(shares.iter().map(|s| units::bytes(s.bytes)));
        row.push(row_basis(&bases).to_string());
        t.row(row);
    }
    if t.is_empty() {
        String::new()
    } else {
        t.render(indent)
    }
}

/// "activations dominate the allocated peak: 4.2 GiB of 7.2 GiB (58%,
/// inferred); activation checkpointing ... lowers it".
pub fn dominant_line(d: &Dominant, total: u64, moment: &str) -> String {
    format!(
        "{} {} {moment}: {} of {} ({}, {}); {}",
        d.category.label(),
        if d.category.label().ends_with('s') {
            "dominate"
        } else {
            "dominates"
        },
        units::bytes(d.bytes),
        units::bytes(total),
        units::percent(d.share),
        basis(d.basis),
        remedy(d.category)
    )
}

/// Where a run's categories come from, in a few words.
pub fn source_line(source: CategorySource) -> &'static str {
    match source {
        CategorySource::Tags => {
            "parameters, buffers, gradients and optimizer state tagged by the recorder; \
             activations and temporaries inferred from lifetimes"
        }
        CategorySource::Inferred => {
            "inferred from lifetimes, phases and frames; a trace recorded by \
             `python -m vramtrace run` has exact ones"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::categories::{CategoryBytes, Class};

    #[test]
    fn rows_for_categories_with_bytes() {
        let mut a = CategoryBytes::default();
        a.add(Class::exact(Category::Parameter), 1 << 20);
        a.add(Class::inferred(Category::Activation), 3 << 20);
        let mut b = CategoryBytes::default();
        b.add(Class::exact(Category::Parameter), 1 << 20);
        b.add(Class::inferred(Category::Parameter), 1 << 20);
        let (a, b) = (CategoryTable::of(&a), CategoryTable::of(&b));
        let text = table(&[("peak", &a), ("end", &b)], 2);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[1].contains("parameters") && lines[1].ends_with("partly exact"));
        assert!(lines[2].contains("activations") && lines[2].ends_with("inferred"));
        assert!(!text.contains("gradients"));
        let d = a.dominant().unwrap();
        let line = dominant_line(&d, a.total(), "the allocated peak");
        assert!(line.starts_with("activations dominate the allocated peak: 3.0 MiB of 4.0 MiB"));
        assert!(line.contains("checkpointing"));
    }
}
