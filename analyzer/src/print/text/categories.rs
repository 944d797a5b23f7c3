//! Memory by category as text: the table of categories at a run's moments
//! (the words for them are shared with the other printers: see
//! [`crate::print::labels`]).

use crate::analysis::categories::{Basis, Category, CategoryTable};
use crate::print::labels::category_row_basis;
use crate::print::table::{Align, Table};
use crate::units;

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
        row.push(category_row_basis(&bases).to_string());
        t.row(row);
    }
    if t.is_empty() {
        String::new()
    } else {
        t.render(indent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::print::labels::category_dominant_line;
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
        let line = category_dominant_line(&d, a.total(), "the allocated peak");
        assert!(line.starts_with("activations dominate the allocated peak: 3.0 MiB of 4.0 MiB"));
        assert!(line.contains("checkpointing"));
    }
}
