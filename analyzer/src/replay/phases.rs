//! Phases: the instances of the program's named phases, how they nest, and
//! their paths interned by normalized name, as a replay follows them.

use super::{Applied, InconsistencyKind, ReplayState};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;
use vramtrace_format::{StringId, SymbolTable};

/// A phase instance: one execution of a named phase, numbered in order of
/// its begin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct PhaseId(pub u32);

impl PhaseId {
    /// Outside any phase.
    pub const NONE: PhaseId = PhaseId(u32::MAX);

    /// Whether this is [`PhaseId::NONE`].
    pub fn is_none(self) -> bool {
        self == PhaseId::NONE
    }
}

/// A phase path with every name normalized (`iter#/forward`), interned: the
/// instances of a repeated phase share one, and comparing or grouping them
/// costs nothing however deep they nest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct PathId(pub u32);

impl PathId {
    /// The path of no phase.
    pub const NONE: PathId = PathId(u32::MAX);
}

/// The thread whose phases a replay follows unless told otherwise: the
/// recorded process's main thread (the recorder numbers it 0; a trace of
/// format 1.0 has every phase on it).
pub const MAIN_THREAD: u32 = 0;

/// Phase paths deeper than this are shown with their middle left out (a
/// path of thousands of nested phases is read by nobody, and would cost
/// its depth in memory for every instance).
pub const SHOWN_PATH_DEPTH: usize = 24;

/// Names whose list of open depths is kept once empty, for the next phase
/// of the name; past this many, emptied lists are dropped.
const KEPT_PHASE_NAMES: usize = 4096;

/// One execution of a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhaseInstance {
    /// The phase's name.
    pub name: StringId,
    /// The enclosing instance, or [`PhaseId::NONE`].
    pub parent: PhaseId,
    /// Its normalized path, shared by the instances of a repeated phase.
    pub path: PathId,
    /// Nesting depth (0 for a top-level phase).
    pub depth: u32,
    /// Time of the begin event.
    pub begin_ns: u64,
    /// Index of the begin event.
    pub begin_index: u64,
    /// Time of the end event, once it ended.
    pub end_ns: Option<u64>,
}

/// A phase name with every run of ASCII digits replaced by `#`: the
/// instances of a phase repeated as `iter0`, `iter1`, ... share a name.
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

/// The interned normalized phase paths of a replay.
#[derive(Clone, Debug, Default)]
pub(super) struct PathTable {
    /// Each path's parent, last name (normalized, by index), depth, and
    /// the ancestor that holds its first shown names (see [`shown_path`]).
    paths: Vec<PathNode>,
    by_parent_and_name: FxHashMap<(PathId, u32), PathId>,
    /// Normalized names, and the index of each trace string's.
    names: Vec<Box<str>>,
    name_index: FxHashMap<Box<str>, u32>,
    normalized: FxHashMap<StringId, u32>,
}

#[derive(Clone, Copy, Debug)]
struct PathNode {
    parent: PathId,
    name: u32,
    depth: u32,
    head: PathId,
}

impl PathTable {
    /// The path of a phase named `name` inside `parent`.
    fn child(&mut self, parent: PathId, name: StringId, symbols: &SymbolTable) -> PathId {
        let name = match self.normalized.get(&name) {
            Some(&n) => n,
            None => {
                let text = normalize_name(symbols.string_or_unknown(name)).into_boxed_str();
                let next = self.names.len() as u32;
                let n = *self.name_index.entry(text.clone()).or_insert(next);
                if n == next {
                    self.names.push(text);
                }
                self.normalized.insert(name, n);
                n
            }
        };
        let next = PathId(self.paths.len() as u32);
        let id = *self
            .by_parent_and_name
            .entry((parent, name))
            .or_insert(next);
        if id == next {
            let parent_node = self.get(parent);
            let depth = parent_node.map_or(0, |p| p.depth + 1);
            self.paths.push(PathNode {
                parent,
                name,
                depth,
                head: match parent_node {
                    Some(p) if depth as usize >= SHOWN_HEAD => p.head,
                    _ => id,
                },
            });
        }
        id
    }

    fn get(&self, path: PathId) -> Option<&PathNode> {
        self.paths.get(path.0 as usize)
    }

    fn name(&self, path: PathId) -> String {
        let Some(node) = self.get(path) else {
            return String::new();
        };
        shown_path(
            node.depth as usize + 1,
            path,
            node.head,
            |p| self.paths[p.0 as usize].parent,
            |p| &self.names[self.paths[p.0 as usize].name as usize],
        )
    }
}

/// The outermost names a path deeper than [`SHOWN_PATH_DEPTH`] shows.
pub(super) const SHOWN_HEAD: usize = SHOWN_PATH_DEPTH / 3;

/// Joins the names of a path of `depth` names ending at `node`, outermost
/// first (`outer/inner`). Past [`SHOWN_PATH_DEPTH`] names the middle ones
/// are left out (`a/b/…(N phases)…/y/z`): `head` is the ancestor holding
/// the first [`SHOWN_HEAD`] names, so only the names shown are visited.
fn shown_path<'a, N: Copy>(
    depth: usize,
    node: N,
    head: N,
    parent: impl Fn(N) -> N,
    name: impl Fn(N) -> &'a str,
) -> String {
    let walk = |from: N, n: usize| {
        let mut names: Vec<&str> = std::iter::successors(Some(from), |&p| Some(parent(p)))
            .take(n)
            .map(&name)
            .collect();
        names.reverse();
        names.join("/")
    };
    if depth <= SHOWN_PATH_DEPTH {
        return walk(node, depth);
    }
    let tail = SHOWN_PATH_DEPTH - SHOWN_HEAD;
    format!(
        "{}/…({} phases)…/{}",
        walk(head, SHOWN_HEAD),
        depth - SHOWN_HEAD - tail,
        walk(node, tail)
    )
}

impl ReplayState {
    /// Follows the phases of `thread` (a trace's thread id) rather than the
    /// main thread's: phase events of other threads are counted, not
    /// replayed, since each thread's phases nest only among themselves.
    pub fn with_phase_thread(mut self, thread: u32) -> Self {
        self.phase_thread = thread;
        self
    }

    /// The thread whose phases are replayed.
    pub fn phase_thread(&self) -> u32 {
        self.phase_thread
    }

    /// Phase begins of the threads whose phases are not replayed, by thread.
    pub fn other_thread_phases(&self) -> &BTreeMap<u32, u64> {
        &self.other_thread_phases
    }

    pub(super) fn phase_begin(
        &mut self,
        index: u64,
        time_ns: u64,
        name: StringId,
        symbols: &SymbolTable,
    ) -> Applied {
        let parent = self.open.last().copied().unwrap_or(PhaseId::NONE);
        let parent_path = self.phase(parent).map_or(PathId::NONE, |p| p.path);
        let path = self.paths.child(parent_path, name, symbols);
        let id = PhaseId(self.phases.len() as u32);
        let depth = self.open.len();
        self.phase_heads.push(if depth >= SHOWN_HEAD {
            self.phase_heads[parent.0 as usize]
        } else {
            id
        });
        self.phases.push(PhaseInstance {
            name,
            parent,
            path,
            depth: self.open.len() as u32,
            begin_ns: time_ns,
            begin_index: index,
            end_ns: None,
        });
        self.open_by_name
            .entry(name)
            .or_default()
            .push(depth as u32);
        self.open.push(id);
        if self.ended_at_depth.len() < self.open.len() {
            self.ended_at_depth.push(0);
        }
        Applied::PhaseBegin(id)
    }

    pub(super) fn phase_end(
        &mut self,
        index: u64,
        time_ns: u64,
        name: StringId,
        symbols: &SymbolTable,
    ) -> Applied {
        let Some(pos) = self
            .open_by_name
            .get(&name)
            .and_then(|depths| depths.last())
            .map(|&d| d as usize)
        else {
            self.record(InconsistencyKind::UnmatchedPhaseEnd, index, time_ns, 0);
            return Applied::Inconsistent;
        };
        if pos + 1 != self.open.len() {
            self.record(InconsistencyKind::UnmatchedPhaseEnd, index, time_ns, 0);
        }
        let id = self.open[pos];
        let mut step_ended = false;
        self.ended_at_depth[pos..self.open.len()].fill(index + 1);
        // Innermost first: phases left open inside it end with it.
        for p in self.open.drain(pos..).rev() {
            let phase = &mut self.phases[p.0 as usize];
            if let Some(depths) = self.open_by_name.get_mut(&phase.name) {
                depths.pop();
                // An emptied list is kept for the name's next phase (most
                // names open once a step: freeing the list and growing it
                // again cost about 200 instructions a phase, issue #47),
                // unless names are many, so that a trace of ever new names
                // does not grow the map without end.
                if depths.is_empty() && self.open_by_name.len() > KEPT_PHASE_NAMES {
                    self.open_by_name.remove(&phase.name);
                }
            }
            phase.end_ns = Some(time_ns);
            step_ended |= self.classifier.phase_end(phase.name, symbols);
        }
        if step_ended {
            self.settle_at_step_end();
        }
        Applied::PhaseEnd(id)
    }

    /// Every phase instance begun so far.
    pub fn phases(&self) -> &[PhaseInstance] {
        &self.phases
    }

    /// A phase instance.
    pub fn phase(&self, id: PhaseId) -> Option<&PhaseInstance> {
        self.phases.get(id.0 as usize)
    }

    /// The open phases, outermost first.
    pub fn open_phases(&self) -> &[PhaseId] {
        &self.open
    }

    /// The depth of the innermost phase still open among `id` and the
    /// phases around it (`None`: none is), in `O(log depth)`.
    pub fn open_depth(&self, id: PhaseId) -> Option<u32> {
        let inst = self.phase(id)?;
        let depths =
            &self.ended_at_depth[..(inst.depth as usize + 1).min(self.ended_at_depth.len())];
        // Open ancestors are a prefix: those whose depth saw no end since
        // `id` began.
        let open = depths.partition_point(|&ended| ended <= inst.begin_index);
        open.checked_sub(1).map(|d| d as u32)
    }

    /// The innermost open phase.
    pub fn current_phase(&self) -> PhaseId {
        self.open.last().copied().unwrap_or(PhaseId::NONE)
    }

    /// A phase instance's path, `outer/inner` (empty for [`PhaseId::NONE`]);
    /// past [`SHOWN_PATH_DEPTH`] names, the middle ones are left out.
    pub fn phase_path(&self, id: PhaseId, symbols: &SymbolTable) -> String {
        let Some(inst) = self.phase(id) else {
            return String::new();
        };
        shown_path(
            inst.depth as usize + 1,
            id,
            self.phase_heads[id.0 as usize],
            |p| self.phases[p.0 as usize].parent,
            |p| symbols.string_or_unknown(self.phases[p.0 as usize].name),
        )
    }

    /// A normalized path, `iter#/forward` (empty for [`PathId::NONE`]); past
    /// [`SHOWN_PATH_DEPTH`] names, the middle ones are left out.
    pub fn path_name(&self, path: PathId) -> String {
        self.paths.name(path)
    }

    /// Whether `id` is `ancestor` or nested in it.
    pub fn phase_within(&self, mut id: PhaseId, ancestor: PhaseId) -> bool {
        while let Some(inst) = self.phase(id) {
            if id == ancestor {
                return true;
            }
            id = inst.parent;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::replay;
    use super::*;
    use crate::testing::TraceBuilder;
    use vramtrace_format::{Event, TraceReader};

    #[test]
    fn phases_nest_and_blocks_remember_theirs() {
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.begin("train")
            .begin("iter0")
            .alloc(0, 10, 10, s)
            .end("iter0");
        b.begin("iter1").begin("inner").end("iter1"); // closes inner too
        b.end("train");
        let (bytes, symbols) = b.finish_symbols();
        let (state, applied) = replay(&bytes);
        let a = state.live_at(0).unwrap();
        assert_eq!(state.phase_path(a.phase, &symbols), "train/iter0");
        assert!(state.open_phases().is_empty());
        assert_eq!(state.phases().len(), 4);
        assert!(matches!(applied[6], Applied::PhaseEnd(PhaseId(2))));
        assert_eq!(
            state.inconsistency_count(InconsistencyKind::UnmatchedPhaseEnd),
            1
        );
        assert!(state.phase_within(a.phase, PhaseId(0)));
    }

    /// Two threads' phases interleave: each nests within its own thread, so
    /// following one thread sees no mismatch, and the other's are counted.
    #[test]
    fn each_threads_phases_nest_on_their_own() {
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.segment(0, 1 << 20);
        b.begin_on(0, "train").begin_on(7, "load");
        b.alloc(0, 512, 512, s);
        b.end_on(0, "train").begin_on(7, "decode");
        b.alloc(512, 512, 512, s);
        b.end_on(7, "decode").end_on(7, "load");
        let bytes = b.finish();
        let (state, _) = replay(&bytes);
        assert_eq!(state.inconsistency_total(), 0);
        assert_eq!(state.phases().len(), 1);
        assert_eq!(state.other_thread_phases().get(&7), Some(&2));
        let on_7 = |bytes: &[u8]| {
            let mut reader = TraceReader::new(bytes).unwrap();
            let mut state = ReplayState::default().with_phase_thread(7);
            let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
            for (i, e) in events.iter().enumerate() {
                state.apply(i as u64, e, reader.symbols());
            }
            (state, reader.symbols().clone())
        };
        let (state, symbols) = on_7(&bytes);
        assert_eq!(state.inconsistency_total(), 0);
        let names: Vec<String> = (0..state.phases().len() as u32)
            .map(|i| state.phase_path(PhaseId(i), &symbols))
            .collect();
        assert_eq!(names, ["load", "load/decode"]);
        let blocks: Vec<String> = [0, 512]
            .iter()
            .map(|a| state.phase_path(state.live_at(*a).unwrap().phase, &symbols))
            .collect();
        assert_eq!(blocks, ["load", "load/decode"]);
        assert_eq!(state.other_thread_phases().get(&0), Some(&1));
    }

    /// Nesting tens of thousands deep costs linear time and memory: paths are
    /// interned, and shown with their middle left out.
    #[test]
    fn deep_nesting_is_linear_and_shown_short() {
        const DEPTH: usize = 50_000;
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.segment(0, 1 << 30);
        for i in 0..DEPTH {
            b.begin(&format!("level{}", i % 7));
        }
        b.alloc(0, 512, 512, s);
        for i in (0..DEPTH).rev() {
            b.end(&format!("level{}", i % 7));
        }
        let (bytes, symbols) = b.finish_symbols();
        let (state, _) = replay(&bytes);
        assert_eq!(state.phases().len(), DEPTH);
        assert_eq!(state.inconsistency_total(), 0);
        let innermost = state.live_at(0).unwrap().phase;
        let path = state.phase_path(innermost, &symbols);
        assert!(path.len() < 400, "{path}");
        assert!(path.starts_with("level0/level1/level2/"), "{path}");
        assert!(
            path.contains(&format!("…({} phases)…", DEPTH - SHOWN_PATH_DEPTH)),
            "{path}"
        );
        let normalized = state.path_name(state.phase(innermost).unwrap().path);
        assert!(normalized.starts_with("level#/level#/"), "{normalized}");
        assert_eq!(
            normalized.matches('/').count(),
            path.matches('/').count(),
            "{normalized} against {path}"
        );
        // Shallow paths are whole.
        assert_eq!(
            state.phase_path(PhaseId(2), &symbols),
            "level0/level1/level2"
        );
        assert_eq!(
            state.path_name(state.phase(PhaseId(1)).unwrap().path),
            "level#/level#"
        );
    }
}
