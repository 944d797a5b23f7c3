//! Phase names and their normalization.
//!
//! A loop body recorded as `iter0`, `iter1`, ... is one phase repeated: its
//! instances are grouped by the name with every run of digits replaced by
//! `#` (`iter12` → `iter#`, `epoch3/step17` → `epoch#/step#`).

pub use crate::replay::normalize_name;
use crate::replay::{PhaseId, ReplayState};

/// A phase instance's path with each name normalized: the key that groups
/// repetitions of the same phase (interned: see [`ReplayState::path_name`]
/// for its text).
pub fn normalized_path(state: &ReplayState, id: PhaseId) -> String {
    state.path_name(
        state
            .phase(id)
            .map_or(crate::replay::PathId::NONE, |p| p.path),
    )
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
