//! The phase instances open inside a window, for the analyses that follow
//! what each instance allocated and left behind (the leaks, the phase
//! totals).
//!
//! An instance's figures count only what happened while it was the
//! innermost instance followed; an ending instance hands them to the one
//! around it ([`Figures::absorb`]), so that an event costs one update
//! however deep the nesting. What an instance retains is then the sum over
//! itself and the instances open inside it.

use crate::replay::{LiveAlloc, PhaseId, ReplayState};

/// What an analysis keeps for one open instance.
pub(super) trait Figures {
    /// Takes in the figures of an instance that ended inside this one.
    fn absorb(&mut self, inner: Self);
}

/// One open instance: its phase, its nesting depth, and its figures.
#[derive(Clone, Debug)]
struct OpenInstance<F> {
    phase: PhaseId,
    depth: u32,
    figures: F,
}

/// The instances begun inside the window and still open, outermost first
/// (so in depth order), each with its figures `F`.
#[derive(Clone, Debug)]
pub(super) struct OpenInstances<F> {
    open: Vec<OpenInstance<F>>,
}

impl<F> Default for OpenInstances<F> {
    fn default() -> Self {
        OpenInstances { open: Vec::new() }
    }
}

impl<F: Figures> OpenInstances<F> {
    /// How many are open.
    pub(super) fn len(&self) -> usize {
        self.open.len()
    }

    /// Instance `phase` began, with `figures` as its own.
    pub(super) fn begin(&mut self, phase: PhaseId, state: &ReplayState, figures: F) {
        let depth = state.phase(phase).map_or(0, |p| p.depth);
        self.open.push(OpenInstance {
            phase,
            depth,
            figures,
        });
    }

    /// The innermost open instance's figures: those an allocation counts in.
    pub(super) fn innermost(&mut self) -> Option<&mut F> {
        self.open.last_mut().map(|o| &mut o.figures)
    }

    /// The figures that take the release of block `a`: those of the
    /// innermost open instance holding it. The open instances holding a
    /// block are the open ancestors of the phase it was allocated in, a
    /// prefix of the stack, so the innermost of them takes the release for
    /// all. `None` when no open instance holds it.
    pub(super) fn holder(&mut self, a: &LiveAlloc, state: &ReplayState) -> Option<&mut F> {
        if self.open.is_empty() || a.phase.is_none() {
            return None;
        }
        let depth = state.open_depth(a.phase)?;
        let holders = self.open.partition_point(|o| o.depth <= depth);
        let innermost = holders.checked_sub(1)?;
        Some(&mut self.open[innermost].figures)
    }

    /// Where instance `phase`, at `depth`, ending now sits in the stack:
    /// those from there on are to end with it (a mismatched end closes the
    /// instances nested in it too). `None` when it was begun before the
    /// window: then the instances followed inside it end with it, their
    /// figures going nowhere (as its own did not reach it), so the stack
    /// stays in depth order.
    pub(super) fn ending(&mut self, phase: PhaseId, depth: u32) -> Option<usize> {
        let pos = self.open.partition_point(|o| o.depth < depth);
        if self.open.get(pos).is_some_and(|o| o.phase == phase) {
            Some(pos)
        } else {
            self.open.truncate(pos);
            None
        }
    }

    /// Ends the innermost open instance: `read` reads its figures (with its
    /// phase), which then go to the instance around it. `None` when none is
    /// open.
    pub(super) fn end_innermost<R>(&mut self, read: impl FnOnce(PhaseId, &F) -> R) -> Option<R> {
        let ended = self.open.pop()?;
        let result = read(ended.phase, &ended.figures);
        if let Some(outer) = self.open.last_mut() {
            outer.figures.absorb(ended.figures);
        }
        Some(result)
    }
}
