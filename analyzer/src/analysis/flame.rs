//! Memory live at one moment, by the full stack that allocated it: the data
//! of a flame graph (widths in bytes).
//!
//! [`LiveStacks`] folds the blocks the program holds (allocated, not yet
//! freed by the caller: what `torch.cuda.memory_allocated()` counts) at the
//! moment a pass hands it: when its window opens (the trace's starting
//! state) or closes. A command places the window's end on the moment it
//! wants, the allocated peak or an OOM, found by an earlier pass.

use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::ReplayState;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use vramtrace_format::{StackId, SymbolTable};

/// One stack's live memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldedStack {
    /// Its frames, outermost first (the recorder's own left out).
    pub frames: Vec<String>,
    /// Bytes of the blocks it holds (block sizes, as `allocated` counts them).
    pub bytes: u64,
    /// How many blocks.
    pub blocks: u64,
}

/// Live memory by stack, largest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldedStacks {
    /// Bytes of every live block: the allocated total at that moment.
    pub total_bytes: u64,
    /// Live blocks.
    pub blocks: u64,
    /// The stacks, largest first (ties by frames).
    pub stacks: Vec<FoldedStack>,
}

/// Bytes and blocks by stack id.
type ByStack = FxHashMap<StackId, (u64, u64)>;

/// The blocks the program holds (allocated, not yet freed by the caller):
/// bytes and blocks by stack id.
fn live_by_stack(state: &ReplayState) -> ByStack {
    let mut by_stack = ByStack::default();
    for block in state.live().filter(|b| !b.free_requested) {
        let entry = by_stack.entry(block.stack).or_default();
        entry.0 += block.size;
        entry.1 += 1;
    }
    by_stack
}

impl FoldedStacks {
    /// The blocks the program holds in `state`, folded by their frames.
    pub fn of_live(state: &ReplayState, symbols: &SymbolTable) -> FoldedStacks {
        Self::named(live_by_stack(state), state, symbols)
    }

    /// Bytes and blocks by stack id, named by their frames.
    fn named(by_stack: ByStack, state: &ReplayState, symbols: &SymbolTable) -> FoldedStacks {
        // Stacks that differ only in hidden frames show as one.
        let mut by_frames: FxHashMap<Vec<String>, (u64, u64)> = FxHashMap::default();
        for (stack, (bytes, blocks)) in by_stack {
            let entry = by_frames
                .entry(state.sites().stack_frames(stack, symbols))
                .or_default();
            entry.0 += bytes;
            entry.1 += blocks;
        }
        let mut stacks: Vec<FoldedStack> = by_frames
            .into_iter()
            .map(|(frames, (bytes, blocks))| FoldedStack {
                frames,
                bytes,
                blocks,
            })
            .collect();
        stacks.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.frames.cmp(&b.frames)));
        FoldedStacks {
            total_bytes: stacks.iter().map(|s| s.bytes).sum(),
            blocks: stacks.iter().map(|s| s.blocks).sum(),
            stacks,
        }
    }

    /// The stacks in the folded format flame graph tools read
    /// (`frame;frame;frame bytes`, one line per stack, outermost first), as
    /// inferno and Brendan Gregg's `flamegraph.pl` take it. A `;` inside a
    /// frame would split it: it is written as `:`.
    pub fn folded_lines(&self) -> Vec<String> {
        self.folded_lines_named(|frame| frame.to_string())
    }

    /// [`folded_lines`](Self::folded_lines) with each frame as `name` writes
    /// it (a shorter label for a chart, say).
    pub fn folded_lines_named(&self, name: impl Fn(&str) -> String) -> Vec<String> {
        self.stacks
            .iter()
            .map(|s| {
                let frames: Vec<String> = s
                    .frames
                    .iter()
                    .map(|f| name(f).replace(';', ":").replace(['\n', '\r'], " "))
                    .collect();
                format!("{} {}", frames.join(";"), s.bytes)
            })
            .collect()
    }
}

/// When [`LiveStacks`] folds a device's live blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoldAt {
    /// The starting state, before the first event.
    Start,
    /// Just after the device's event with this index.
    After(u64),
    /// Just after the device's last event at or before this time (ns).
    AtTime(u64),
    /// Never (the moment does not come on this device).
    Never,
}

/// The live blocks folded, and the device's last event before them (its
/// index and time; `None`: the starting state).
pub type Folded = (Option<(u64, u64)>, FoldedStacks);

/// Folds a device's live blocks at one moment, then is done: every device
/// of one pass folds at its own.
#[derive(Debug)]
pub struct LiveStacks {
    at: FoldAt,
    last: Option<(u64, u64)>,
    // Taken before an event, where no symbols are at hand: named at the
    // next call that has them.
    unnamed: Option<(Option<(u64, u64)>, ByStack)>,
    folded: Option<Folded>,
}

impl LiveStacks {
    /// Folds at `at`.
    pub fn new(at: FoldAt) -> Self {
        LiveStacks {
            at,
            last: None,
            unnamed: None,
            folded: None,
        }
    }

    fn fold(&mut self, state: &ReplayState, symbols: &SymbolTable) {
        self.folded = Some((self.last, FoldedStacks::of_live(state, symbols)));
    }

    fn name(&mut self, state: &ReplayState, symbols: &SymbolTable) {
        if let Some((last, by_stack)) = self.unnamed.take() {
            self.folded = Some((last, FoldedStacks::named(by_stack, state, symbols)));
        }
    }

    /// What was folded (`None`: the moment never came).
    pub fn into_report(self) -> Option<Folded> {
        self.folded
    }
}

impl Analysis for LiveStacks {
    fn begin(&mut self, state: &ReplayState, symbols: &SymbolTable) {
        if self.at == FoldAt::Start {
            self.fold(state, symbols);
        }
    }

    fn wants_before(&self) -> bool {
        matches!(self.at, FoldAt::AtTime(_))
    }

    fn before(&mut self, _index: u64, event: &vramtrace_format::Event, state: &ReplayState) {
        // The first event past the time: the state before it is the one.
        if let FoldAt::AtTime(t) = self.at
            && self.folded.is_none()
            && self.unnamed.is_none()
            && event.time_ns > t
        {
            self.unnamed = Some((self.last, live_by_stack(state)));
        }
    }

    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError> {
        // The blocks' stacks are the same after the event: only sites'
        // names are read, and a stack's frames never change.
        self.name(state, step.symbols);
        if self.folded.is_some() || self.at == FoldAt::Never {
            return Ok(Flow::Done);
        }
        self.last = Some((step.index, step.event.time_ns));
        if let FoldAt::After(index) = self.at
            && step.index >= index
        {
            self.fold(state, step.symbols);
            return Ok(Flow::Done);
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self, state: &ReplayState, symbols: &SymbolTable) -> Result<(), AnalysisError> {
        self.name(state, symbols);
        // A time past the device's last event: its state at the end.
        if self.folded.is_none() && matches!(self.at, FoldAt::AtTime(_)) {
            self.fold(state, symbols);
        }
        Ok(())
    }
}

/// The first out-of-memory event of a pass: its index and time.
#[derive(Debug, Default)]
pub struct FirstOom {
    found: Option<(u64, u64)>,
}

impl FirstOom {
    /// The event's index and time, if there was one.
    pub fn into_report(self) -> Option<(u64, u64)> {
        self.found
    }
}

impl Analysis for FirstOom {
    fn event(&mut self, step: &Step<'_>, _state: &ReplayState) -> Result<Flow, AnalysisError> {
        if let crate::replay::Applied::Oom(_) = *step.applied {
            self.found = Some((step.index, step.event.time_ns));
            return Ok(Flow::Done);
        }
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TraceBuilder;
    use vramtrace_format::{Event, TraceReader};

    fn state_after(bytes: &[u8]) -> (ReplayState, SymbolTable) {
        let mut reader = TraceReader::new(bytes).unwrap();
        let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
        let symbols = reader.symbols().clone();
        let mut state = ReplayState::default();
        for (i, e) in events.iter().enumerate() {
            state.apply(i as u64, e, &symbols);
        }
        (state, symbols)
    }

    #[test]
    fn live_blocks_fold_by_their_frames_outermost_first() {
        let mut b = TraceBuilder::new();
        let forward = b.stack(&[("linear", "model.py", 7), ("main", "train.py", 1)]);
        let weird = b.stack(&[("a;b", "x.py", 2), ("main", "train.py", 1)]);
        let bare = vramtrace_format::StackId::NONE;
        b.segment(0, 1 << 20)
            .alloc(0, 512, 500, forward)
            .alloc(512, 1024, 1000, forward)
            .alloc(2048, 4096, 4096, weird)
            .alloc(8192, 256, 256, bare)
            .alloc(9216, 2048, 2048, forward);
        // Freed by the caller: no longer allocated, so not in the graph.
        b.free_requested(9216, 2048);
        let (state, symbols) = state_after(&b.finish());
        let folded = FoldedStacks::of_live(&state, &symbols);
        assert_eq!(folded.total_bytes, state.totals().allocated);
        assert_eq!(folded.total_bytes, 512 + 1024 + 4096 + 256);
        assert_eq!(folded.blocks, 4);
        let lines = folded.folded_lines();
        assert_eq!(
            lines,
            vec![
                "main (train.py:1);a:b (x.py:2) 4096".to_string(),
                "main (train.py:1);linear (model.py:7) 1536".to_string(),
                "<no stack captured> 256".to_string(),
            ]
        );
        assert_eq!(folded.stacks[1].blocks, 2);
    }
}
