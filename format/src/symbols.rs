//! Interned strings, frames and stacks.
//!
//! Every string, frame and stack is defined once in the trace, before the
//! first event that uses it; events carry ids only. Id 0 of strings is the
//! empty string and id 0 of stacks is the empty stack ("not captured"), so a
//! trace without stacks spends one byte per event on them.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// An interned string.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct StringId(pub u32);

/// An interned frame.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct FrameId(pub u32);

/// An interned stack: a list of frames, innermost first.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct StackId(pub u32);

impl StringId {
    /// The empty string.
    pub const EMPTY: StringId = StringId(0);
}

impl StackId {
    /// The empty stack: no stack was captured.
    pub const NONE: StackId = StackId(0);
}

/// One frame of a stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Frame {
    /// A symbolized frame: a function in a source file.
    Symbol {
        /// The function's name.
        function: StringId,
        /// The source file.
        file: StringId,
        /// The line in `file` (0 when unknown).
        line: u32,
    },
    /// A native frame that could not be symbolized.
    Native {
        /// The instruction address.
        address: u64,
        /// The module (shared object) that holds it, if known.
        module: StringId,
        /// The address's offset within `module`.
        offset: u64,
    },
}

/// The interned tables of a trace: what event ids refer to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolTable {
    strings: Vec<String>,
    frames: Vec<Frame>,
    // Stacks flattened: stack i is stack_frames[stack_starts[i]..stack_starts[i + 1]].
    stack_starts: Vec<u32>,
    stack_frames: Vec<FrameId>,
}

impl Default for SymbolTable {
    fn default() -> Self {
        SymbolTable {
            strings: vec![String::new()],
            frames: Vec::new(),
            stack_starts: vec![0, 0],
            stack_frames: Vec::new(),
        }
    }
}

impl SymbolTable {
    /// A table holding only the empty string and the empty stack.
    pub fn new() -> Self {
        Self::default()
    }

    /// The string with this id, or `None` if the trace never defined it.
    pub fn string(&self, id: StringId) -> Option<&str> {
        self.strings.get(id.0 as usize).map(String::as_str)
    }

    /// The string with this id, or `"?"` for an undefined id.
    pub fn string_or_unknown(&self, id: StringId) -> &str {
        self.string(id).unwrap_or("?")
    }

    /// The frame with this id.
    pub fn frame(&self, id: FrameId) -> Option<&Frame> {
        self.frames.get(id.0 as usize)
    }

    /// The frames of a stack, innermost first; empty for an undefined id.
    pub fn stack(&self, id: StackId) -> &[FrameId] {
        let i = id.0 as usize;
        match (self.stack_starts.get(i), self.stack_starts.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.stack_frames[a as usize..b as usize],
            _ => &[],
        }
    }

    /// The number of strings defined, the empty string included.
    pub fn string_count(&self) -> usize {
        self.strings.len()
    }

    /// The number of frames defined.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// The number of stacks defined, the empty stack included.
    pub fn stack_count(&self) -> usize {
        self.stack_starts.len() - 1
    }

    /// Renders a frame as `function (file:line)` or `module+0xoffset`; a
    /// frame that is only a name (no file, line 0, such as the autograd node
    /// an observed backward allocation is named after) as `function`.
    pub fn describe_frame(&self, id: FrameId) -> String {
        match self.frame(id) {
            Some(Frame::Symbol {
                function,
                file,
                line,
            }) => {
                let function = self.string_or_unknown(*function);
                let file = self.string_or_unknown(*file);
                if function.is_empty() && file.is_empty() && *line == 0 {
                    // A frame whose definition was lost to damage.
                    "?".to_string()
                } else if file.is_empty() && *line == 0 {
                    function.to_string()
                } else {
                    format!("{function} ({file}:{line})")
                }
            }
            Some(Frame::Native {
                address,
                module,
                offset,
            }) => match self.string(*module) {
                Some(m) if !m.is_empty() => format!("{m}+{offset:#x}"),
                _ => format!("{address:#x}"),
            },
            None => "?".to_string(),
        }
    }

    /// Adds the definitions of a symbols record. The record must continue the
    /// table exactly where it ends; `Err` names the mismatch otherwise. After
    /// damage (`damaged_bytes` skipped), it may start further on: the ids of
    /// the lost definitions in between read as unknown (`?`, a frame named
    /// `?`, the empty stack), at most as many as the bytes lost could hold.
    pub(crate) fn extend(
        &mut self,
        defs: SymbolDefinitions,
        damaged_bytes: u64,
    ) -> Result<(), String> {
        let gaps = [
            (defs.first_string as u64).checked_sub(self.strings.len() as u64),
            (defs.first_frame as u64).checked_sub(self.frames.len() as u64),
            (defs.first_stack as u64).checked_sub(self.stack_count() as u64),
        ];
        if let [Some(strings), Some(frames), Some(stacks)] = gaps
            && strings + frames + stacks > 0
            && strings + frames + stacks <= damaged_bytes
        {
            self.strings
                .extend(std::iter::repeat_n("?".to_string(), strings as usize));
            self.frames.extend(std::iter::repeat_n(
                Frame::Symbol {
                    function: StringId::EMPTY,
                    file: StringId::EMPTY,
                    line: 0,
                },
                frames as usize,
            ));
            let end = self.stack_frames.len() as u32;
            self.stack_starts
                .extend(std::iter::repeat_n(end, stacks as usize));
        }
        if defs.first_string as usize != self.strings.len()
            || defs.first_frame as usize != self.frames.len()
            || defs.first_stack as usize != self.stack_count()
        {
            return Err(format!(
                "symbol definitions start at string {}, frame {}, stack {} but the table holds {}, {}, {}",
                defs.first_string,
                defs.first_frame,
                defs.first_stack,
                self.strings.len(),
                self.frames.len(),
                self.stack_count()
            ));
        }
        let frame_total = self.frames.len() + defs.frames.len();
        for stack in &defs.stacks {
            if let Some(bad) = stack.iter().find(|f| f.0 as usize >= frame_total) {
                return Err(format!("stack refers to undefined frame {}", bad.0));
            }
        }
        let string_total = self.strings.len() + defs.strings.len();
        for frame in &defs.frames {
            let ids = match frame {
                Frame::Symbol { function, file, .. } => [*function, *file],
                Frame::Native { module, .. } => [*module, *module],
            };
            if let Some(bad) = ids.iter().find(|s| s.0 as usize >= string_total) {
                return Err(format!("frame refers to undefined string {}", bad.0));
            }
        }
        self.strings.extend(defs.strings);
        self.frames.extend(defs.frames);
        for stack in defs.stacks {
            self.stack_frames.extend(stack);
            self.stack_starts.push(self.stack_frames.len() as u32);
        }
        Ok(())
    }
}

/// Symbols defined by one record: a continuation of the table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SymbolDefinitions {
    pub first_string: u32,
    pub strings: Vec<String>,
    pub first_frame: u32,
    pub frames: Vec<Frame>,
    pub first_stack: u32,
    pub stacks: Vec<Vec<FrameId>>,
}

impl SymbolDefinitions {
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty() && self.frames.is_empty() && self.stacks.is_empty()
    }
}

/// The writer's side of the tables: assigns ids and remembers which
/// definitions have not been written yet.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    // FxHash, as the analyzer's tables: a snapshot's import interns thousands of
    // stacks of dozens of frames here, and SipHash was most of their cost.
    strings: FxHashMap<String, StringId>,
    frames: FxHashMap<Frame, FrameId>,
    stacks: FxHashMap<Vec<FrameId>, StackId>,
    string_count: u32,
    frame_count: u32,
    stack_count: u32,
    pending: SymbolDefinitions,
}

impl Interner {
    pub fn new() -> Self {
        let mut interner = Interner {
            string_count: 1,
            stack_count: 1,
            ..Default::default()
        };
        interner.strings.insert(String::new(), StringId::EMPTY);
        interner.stacks.insert(Vec::new(), StackId::NONE);
        interner.pending.first_string = 1;
        interner.pending.first_stack = 1;
        interner
    }

    /// Makes room for this many more strings, frames and stacks: tables that
    /// grow one by one to thousands rehash their keys at each doubling.
    pub fn reserve(&mut self, strings: usize, frames: usize, stacks: usize) {
        self.strings.reserve(strings);
        self.pending.strings.reserve(strings);
        self.frames.reserve(frames);
        self.pending.frames.reserve(frames);
        self.stacks.reserve(stacks);
        self.pending.stacks.reserve(stacks);
    }

    pub fn string(&mut self, s: &str) -> StringId {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = StringId(self.string_count);
        self.string_count += 1;
        self.strings.insert(s.to_owned(), id);
        self.pending.strings.push(s.to_owned());
        id
    }

    pub fn frame(&mut self, frame: Frame) -> FrameId {
        if let Some(&id) = self.frames.get(&frame) {
            return id;
        }
        let id = FrameId(self.frame_count);
        self.frame_count += 1;
        self.frames.insert(frame, id);
        self.pending.frames.push(frame);
        id
    }

    pub fn stack(&mut self, frames: &[FrameId]) -> StackId {
        if let Some(&id) = self.stacks.get(frames) {
            return id;
        }
        let id = StackId(self.stack_count);
        self.stack_count += 1;
        self.stacks.insert(frames.to_vec(), id);
        self.pending.stacks.push(frames.to_vec());
        id
    }

    pub fn knows_frame(&self, id: FrameId) -> bool {
        id.0 < self.frame_count
    }

    /// Every definition so far, in id order, as one record (for an output
    /// that starts with the whole table). What was pending is in it, and is
    /// no longer pending.
    pub fn all_definitions(&mut self) -> SymbolDefinitions {
        fn in_order<K: Clone>(
            ids: impl Iterator<Item = (K, u32)>,
            count: u32,
            first: u32,
        ) -> Vec<K> {
            let mut v: Vec<Option<K>> = vec![None; (count - first) as usize];
            for (k, id) in ids {
                if id >= first {
                    v[(id - first) as usize] = Some(k);
                }
            }
            v.into_iter().map(|k| k.expect("ids are dense")).collect()
        }
        let defs = SymbolDefinitions {
            first_string: 1,
            strings: in_order(
                self.strings.iter().map(|(s, id)| (s.clone(), id.0)),
                self.string_count,
                1,
            ),
            first_frame: 0,
            frames: in_order(
                self.frames.iter().map(|(f, id)| (*f, id.0)),
                self.frame_count,
                0,
            ),
            first_stack: 1,
            stacks: in_order(
                self.stacks.iter().map(|(s, id)| (s.clone(), id.0)),
                self.stack_count,
                1,
            ),
        };
        self.take_pending();
        defs
    }

    /// The definitions made since the last call, to be written before any
    /// event that uses them.
    pub fn take_pending(&mut self) -> SymbolDefinitions {
        let next = SymbolDefinitions {
            first_string: self.string_count,
            first_frame: self.frame_count,
            first_stack: self.stack_count,
            ..Default::default()
        };
        std::mem::replace(&mut self.pending, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interned_definitions_rebuild_the_table() {
        let mut interner = Interner::new();
        let f = interner.string("forward");
        let file = interner.string("model.py");
        assert_eq!(interner.string("forward"), f);
        let fr = interner.frame(Frame::Symbol {
            function: f,
            file,
            line: 41,
        });
        let st = interner.stack(&[fr, fr]);
        assert_eq!(interner.stack(&[fr, fr]), st);
        let mut table = SymbolTable::new();
        table.extend(interner.take_pending(), 0).unwrap();
        assert_eq!(table.string(f), Some("forward"));
        assert_eq!(table.stack(st), &[fr, fr]);
        assert_eq!(table.stack(StackId::NONE), &[] as &[FrameId]);
        assert_eq!(table.describe_frame(fr), "forward (model.py:41)");
        // A second batch continues the first.
        let g = interner.string("backward");
        table.extend(interner.take_pending(), 0).unwrap();
        assert_eq!(table.string(g), Some("backward"));
    }

    #[test]
    fn out_of_order_definitions_are_rejected() {
        let mut table = SymbolTable::new();
        let defs = SymbolDefinitions {
            first_string: 5,
            first_stack: 1,
            ..Default::default()
        };
        assert!(table.extend(defs, 0).is_err());
    }
}
