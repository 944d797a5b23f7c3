//! Phase names and their normalization.
//!
//! A loop body recorded as `iter0`, `iter1`, ... is one phase repeated: its
//! instances are grouped by the name with every run of digits replaced by
//! `#` (`iter12` → `iter#`, `epoch3/step17` → `epoch#/step#`).

use crate::replay::{PhaseId, ReplayState};
use vramtrace_format::SymbolTable;

/// A phase name with every run of ASCII digits replaced by `#`.
pub fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// A phase instance's path with each name normalized: the key that groups
/// repetitions of the same phase.
pub fn normalized_path(state: &ReplayState, id: PhaseId, symbols: &SymbolTable) -> String {
    normalize_name(&state.phase_path(id, symbols))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_numbers() {
        assert_eq!(normalize_name("iter12"), "iter#");
        assert_eq!(normalize_name("epoch3/step17"), "epoch#/step#");
        assert_eq!(normalize_name("forward"), "forward");
        assert_eq!(
            normalize_name("Optimizer.step#Adam.step"),
            "Optimizer.step#Adam.step"
        );
        assert_eq!(normalize_name("a1b22c"), "a#b#c");
    }
}
