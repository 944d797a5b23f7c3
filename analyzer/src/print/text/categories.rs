//! Memory by category as text: the table of categories at a run's moments
//! (the words for them are shared with the other printers: see
//! [`crate::print::labels`]).

use crate::analysis::categories::{Basis, Category, CategoryShare, CategoryTable};
use crate::print::labels::category_row_basis;
use crate::print::printable::printable_cut;
use crate::print::table::{Align, Table};
use crate::units;

/// One of the program's own categories in a [`table`]: its name and its
/// bytes in each column.
pub struct UserColumns<'a> {
    /// The name the program gave.
    pub name: &'a str,
    /// Its bytes, one figure per column of the table.
    pub bytes: Vec<u64>,
}

/// The categories of `columns` (a heading and a table each) as a table,
/// one row per category with bytes in any column, and how each row's
/// figures are known; empty when no column has bytes. The program's own
/// categories (`user`) come before "other", which shows what they leave of it.
pub fn table(columns: &[(&str, &CategoryTable)], user: &[UserColumns], indent: usize) -> String {
    let mut heads: Vec<(&str, Align)> = vec![("category", Align::Left)];
    heads.extend(columns.iter().map(|(h, _)| (*h, Align::Right)));
    heads.push(("how known", Align::Left));
    let mut t = Table::new(&heads);
    for category in Category::ALL {
        if category == Category::Other {
            for u in user.iter().filter(|u| u.bytes.iter().any(|&b| b > 0)) {
                let mut row = vec![printable_cut(u.name, 40)];
                row.extend(u.bytes.iter().map(|&b| units::bytes(b)));
                row.push("exact (your tag)".to_string());
                t.row(row);
            }
        }
        let shares: Vec<CategoryShare> = columns
            .iter()
            .enumerate()
            .map(|(i, (_, c))| {
                let mut share = c.get(category);
                if category == Category::Other {
                    // The user categories are tagged "other", exact.
                    let named: u64 = user.iter().filter_map(|u| u.bytes.get(i)).sum();
                    share.bytes = share.bytes.saturating_sub(named);
                    share.exact_bytes = share.exact_bytes.saturating_sub(named);
                }
                share
            })
            .collect();
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
        let text = table(&[("peak", &a), ("end", &b)], &[], 2);
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

    #[test]
    fn user_categories_are_rows_of_their_own_and_other_keeps_the_rest() {
        let mut a = CategoryBytes::default();
        a.add(Class::exact(Category::Parameter), 1 << 20);
        a.add(Class::exact(Category::Other), 8 << 20);
        a.add(Class::inferred(Category::Other), 2 << 20);
        let a = CategoryTable::of(&a);
        let user = [UserColumns {
            name: "kv_cache",
            bytes: vec![8 << 20],
        }];
        let text = table(&[("peak", &a)], &user, 2);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[2].contains("kv_cache") && lines[2].contains("8.0 MiB"),
            "{text}"
        );
        assert!(lines[2].ends_with("exact (your tag)"), "{text}");
        // "other" holds the 2 MiB inferred, no longer the tagged 8 MiB.
        assert!(
            lines[3].contains("other") && lines[3].contains("2.0 MiB"),
            "{text}"
        );
        assert!(lines[3].ends_with("inferred"), "{text}");
        // Wholly named: no "other" row left.
        let mut b = CategoryBytes::default();
        b.add(Class::exact(Category::Other), 8 << 20);
        let b = CategoryTable::of(&b);
        let text = table(&[("peak", &b)], &user, 2);
        assert!(!text.contains("other"), "{text}");
    }
}
