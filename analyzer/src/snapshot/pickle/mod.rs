//! A streaming reader for the pickles CPython's `pickle.dump` writes (protocols 2 to 5),
//! restricted to plain data: dicts, lists, tuples, sets, str, bytes, int, float, bool
//! and None.
//!
//! PyTorch snapshots share objects through the pickle memo (one frame dict is referred
//! to by thousands of stacks), which general-purpose deserializers turn into copies, and
//! they are large (hundreds of MB), so building the whole object tree is not an option.
//! This reader keeps values compact ([`Val`] is `Copy`; containers live in an arena
//! whose storage is recycled) and lets a [`Hook`] replace or consume containers at the
//! moment they are attached to their parent: the snapshot converter turns trace entries
//! into events there and drops them, so memory stays proportional to what is kept.

// FxHash throughout: the keys (short strings, small ints, addresses) come from files
// we read, not from an adversary that could exploit collisions cheaply enough to
// matter, and SipHash would cost a good share of the parse time.
mod memo;
pub mod op;
mod ops;
mod source;
mod value;
mod vm;

pub use ops::OpReader;
pub use value::{Heap, Obj, ObjId, ObjKind, StrId, Val, Value};
pub use vm::{MAX_HELD, MAX_MARKS, MAX_STACK, Parser};

use std::io::{self, Read};

/// An error reading a pickle: always names the byte offset where it happened.
#[derive(Debug, thiserror::Error)]
pub enum PickleError {
    /// The underlying reader failed.
    #[error("read error at byte {offset}: {source}")]
    Io {
        /// Bytes successfully read before the failure.
        offset: u64,
        /// The reader's error.
        #[source]
        source: io::Error,
    },
    /// The input does not start with a PROTO opcode of protocol 2 or later.
    #[error("not a pickle of protocol 2 or later: first byte is {found:#04x}, expected 0x80")]
    NotAPickle {
        /// The first byte of the input (0 for an empty input).
        found: u8,
    },
    /// The input ended before the STOP opcode.
    #[error("truncated pickle: input ends at byte {offset} while reading {what}")]
    Truncated {
        /// The input's length.
        offset: u64,
        /// What was being read.
        what: &'static str,
    },
    /// A byte that is not a pickle opcode.
    #[error("unknown pickle opcode {opcode:#04x} at byte {offset}")]
    UnknownOpcode {
        /// The opcode's offset.
        offset: u64,
        /// The byte found.
        opcode: u8,
    },
    /// A real opcode this reader does not support (objects, globals, out-of-band buffers).
    #[error("unsupported pickle opcode {name} at byte {offset}: only plain data is supported")]
    Unsupported {
        /// The opcode's offset.
        offset: u64,
        /// The opcode's name.
        name: &'static str,
    },
    /// The opcodes are valid one by one but do not form a valid pickle.
    #[error("malformed pickle at byte {offset}: {message}")]
    Malformed {
        /// The offending opcode's offset.
        offset: u64,
        /// What is wrong.
        message: String,
    },
}

impl PickleError {
    /// The byte offset the error refers to, when there is one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            PickleError::Io { offset, .. }
            | PickleError::Truncated { offset, .. }
            | PickleError::UnknownOpcode { offset, .. }
            | PickleError::Unsupported { offset, .. }
            | PickleError::Malformed { offset, .. } => Some(*offset),
            PickleError::NotAPickle { .. } => Some(0),
        }
    }
}

/// What a [`Hook`] decides about a container being attached to its parent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Attach {
    /// Store it as it is.
    Keep,
    /// Store this value instead and retire the container.
    Replace(Val),
    /// Store nothing (the parent counts it in [`Obj::consumed`]) and retire the container.
    Consume,
}

/// The deepest nesting [`Heap::to_value`] follows.
pub const MAX_DEPTH: usize = 200;

/// A value too big to build as a tree: nested deeper than [`MAX_DEPTH`] (a
/// container that holds itself, through a memo reference, most likely), or
/// holding more values than allowed (containers shared through the memo,
/// over and over).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TooDeep {
    /// Nested deeper than [`MAX_DEPTH`].
    #[error("value nested more than {MAX_DEPTH} deep (a cycle?)")]
    Nested,
    /// More values than the budget.
    #[error(
        "value expands to more values than the pickle's size allows (containers shared over and over?)"
    )]
    TooMany,
}

/// Sees every container as it is attached to a parent, and may replace or consume it.
pub trait Hook {
    /// `item` (a container) is being appended to the list or set `list`.
    fn on_append(&mut self, heap: &mut Heap, list: ObjId, item: ObjId) -> Attach;
    /// `value` (a container) is being stored under `key` in `dict`.
    fn on_set(&mut self, heap: &mut Heap, dict: ObjId, key: Val, value: ObjId) -> Attach;

    /// `item` (a [`Val::Custom`] value, e.g. one [`Hook::decode_dict`] returned) is
    /// being appended to the list or set `list`. Keeps it by default.
    fn on_append_custom(&mut self, _heap: &mut Heap, _list: ObjId, _item: Val) -> Attach {
        Attach::Keep
    }

    /// The items of one APPENDS (or APPEND, LIST) batch are being appended to the list
    /// or set `list`: the hook may take a run of them from the front at once, each as
    /// [`Hook::on_append_custom`] returning [`Attach::Consume`] would, and returns how
    /// many it took; the rest are handed over one by one as usual, but for the
    /// [`Val::Custom`] items after an item of another kind, which it is offered
    /// again from the first of them. Takes none by default. (A batch of a thousand
    /// trace entries is then one call, not a thousand, or a few when some are read
    /// the generic way.)
    fn on_append_run(&mut self, _list: ObjId, _items: &[Val]) -> usize {
        0
    }

    /// Offered every dict that begins as a direct item of a MARK batch of the list
    /// `list` (its EMPTY_DICT just read): a hook that knows the dict's layout may decode
    /// it straight from the opcodes with `ops`, through its closing SETITEMS, and return
    /// the value that stands for it, instead of having a generic dict built and handed
    /// to [`Hook::on_append`] later. Returning `None` undoes everything `ops` did, and
    /// the dict is read the generic way, so a decoder only handles the common layouts
    /// and gives up on anything else. Declines by default.
    fn decode_dict(&mut self, _list: ObjId, _ops: &mut OpReader<'_>) -> Option<Val> {
        None
    }
}

/// A hook that keeps everything: plain deserialization.
pub struct KeepAll;

impl Hook for KeepAll {
    fn on_append(&mut self, _: &mut Heap, _: ObjId, _: ObjId) -> Attach {
        Attach::Keep
    }
    fn on_set(&mut self, _: &mut Heap, _: ObjId, _: Val, _: ObjId) -> Attach {
        Attach::Keep
    }
}

/// Reads a whole pickle into an owned [`Value`] (small pickles and tests).
pub fn load(read: impl Read) -> Result<Value, PickleError> {
    into_value(Parser::new(read, &|_| {}))
}

/// Runs `parser` to the end and builds the whole pickle as a [`Value`].
fn into_value<R: Read>(mut parser: Parser<'_, R>) -> Result<Value, PickleError> {
    let root = parser.run(&mut KeepAll)?;
    // Sharing through the memo is fine; a tree many times the pickle's size
    // is a bomb.
    let budget = (parser.offset() as usize).saturating_mul(16).max(1 << 10);
    parser
        .heap()
        .to_value(root, budget)
        .map_err(|e| PickleError::Malformed {
            offset: parser.offset(),
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests;
