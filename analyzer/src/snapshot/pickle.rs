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
use rustc_hash::FxHashMap;
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

/// Index of an interned string in a [`Heap`].
pub type StrId = u32;
/// Index of a container in a [`Heap`]'s arena.
pub type ObjId = u32;

/// A compact pickle value. Containers and strings are references into a [`Heap`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Val {
    /// `None`.
    None,
    /// A bool.
    Bool(bool),
    /// An int that fits an i64 (nearly all of them).
    Int(i64),
    /// A larger int (device addresses can exceed 2^63), by index into the heap's
    /// big ints: keeping it out of line keeps every `Val` 16 bytes, and the parser
    /// copies values around for every opcode.
    BigInt(u32),
    /// A float.
    Float(f64),
    /// A str, interned by content.
    Str(StrId),
    /// A bytes or bytearray value (index into the heap's byte strings).
    Bytes(u32),
    /// A dict, list, tuple or set.
    Obj(ObjId),
    /// A value a [`Hook`] put in place of a container: `kind` and `id` are the hook's.
    Custom {
        /// Hook-defined kind (0 to 3 are stored compactly in the memo).
        kind: u8,
        /// Hook-defined id.
        id: u32,
    },
    /// A container a [`Hook`] consumed: it exists no more.
    Consumed,
}

/// The kind of a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjKind {
    /// A dict: `items` holds keys and values alternately.
    Dict,
    /// A list.
    List,
    /// A tuple.
    Tuple,
    /// A set or frozenset.
    Set,
}

/// A container in the arena.
#[derive(Clone, Debug)]
pub struct Obj {
    /// What it is.
    pub kind: ObjKind,
    /// Its items (for a dict: key, value, key, value, ...).
    pub items: Vec<Val>,
    /// Items a [`Hook`] consumed instead of storing (their count only).
    pub consumed: u64,
    // What a hook replaced it with: an item batch may name the same container twice
    // (a frame repeated in one stack), and the second mention must see the replacement.
    replaced: Option<Val>,
    // The memo slot that refers to this container, so a hook's replacement can be
    // seen by later memo references (u32::MAX: none).
    memo: u32,
    // The offset of the opcode that made it, for messages.
    offset: u64,
}

impl Obj {
    /// The byte offset of the opcode that made the container (for messages
    /// about what it holds).
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

/// Strings, byte strings, containers and the memo of one pickle.
#[derive(Default)]
pub struct Heap {
    strings: Vec<Box<[u8]>>,
    string_ids: FxHashMap<Box<[u8]>, StrId>,
    // The string interned last: see `intern`.
    last_string: StrId,
    bytes: Vec<Vec<u8>>,
    big_ints: Vec<i128>,
    objs: Vec<Obj>,
    free_objs: Vec<ObjId>,
    // Retired in the current item batch: recycled when the batch is done, since items
    // later in the batch may still name them.
    retired: Vec<ObjId>,
    // Values held in live containers' items: bounded by `MAX_HELD`.
    held: usize,
    // Key to pair index of each dict past `SCAN_PAIRS` pairs.
    dict_index: FxHashMap<ObjId, FxHashMap<(u8, u64), u32>>,
    memo: Memo,
}

impl Heap {
    /// Interns a string by content.
    pub fn intern(&mut self, s: &[u8]) -> StrId {
        // Every trace entry holds a fresh copy of the same `compile_context` str
        // (`N/A`), usually the string interned last: comparing with it first costs
        // a fraction of hashing.
        if let Some(last) = self.strings.get(self.last_string as usize)
            && **last == *s
        {
            return self.last_string;
        }
        let id = match self.string_ids.get(s) {
            Some(&id) => id,
            None => {
                let id = self.strings.len() as StrId;
                self.strings.push(s.into());
                self.string_ids.insert(s.into(), id);
                id
            }
        };
        self.last_string = id;
        id
    }

    /// The bytes of an interned string (UTF-8 as the pickle stored it).
    pub fn str_bytes(&self, id: StrId) -> &[u8] {
        &self.strings[id as usize]
    }

    /// An interned string as text (invalid UTF-8, e.g. lone surrogates, replaced).
    pub fn str(&self, id: StrId) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.str_bytes(id))
    }

    /// The value of an int (or bool, as Python treats it), whatever its size.
    #[inline]
    pub fn int(&self, v: Val) -> Option<i128> {
        match v {
            Val::Int(i) => Some(i as i128),
            Val::BigInt(b) => Some(self.big_ints[b as usize]),
            Val::Bool(b) => Some(b as i128),
            _ => None,
        }
    }

    // The value of a LONG1/LONG4 argument of at most 16 bytes (little-endian two's
    // complement).
    fn long(&mut self, b: &[u8]) -> Val {
        let n = b.len();
        let mut le = [0u8; 16];
        le[..n].copy_from_slice(b);
        if n > 0 && n < 16 && b[n - 1] & 0x80 != 0 {
            le[n..].fill(0xff); // sign-extend
        }
        let v = i128::from_le_bytes(le);
        match i64::try_from(v) {
            Ok(small) => Val::Int(small),
            Err(_) => {
                self.big_ints.push(v);
                Val::BigInt(self.big_ints.len() as u32 - 1)
            }
        }
    }

    /// A container.
    pub fn obj(&self, id: ObjId) -> &Obj {
        &self.objs[id as usize]
    }

    /// The value of `key` in a dict (a linear scan: snapshot dicts are small).
    pub fn dict_get(&self, dict: ObjId, key: StrId) -> Option<Val> {
        let o = self.obj(dict);
        o.items
            .chunks_exact(2)
            .find(|kv| kv[0] == Val::Str(key))
            .map(|kv| kv[1])
    }

    /// The value of `key` in a dict, looking the key up by text.
    pub fn dict_get_str(&self, dict: ObjId, key: &str) -> Option<Val> {
        let id = *self.string_ids.get(key.as_bytes())?;
        self.dict_get(dict, id)
    }

    /// Converts a value into an owned tree (for small parts of a pickle and for
    /// tests) of at most `max_values` values: the memo lets a few hundred bytes
    /// name a list holding itself twice, forty levels deep.
    pub fn to_value(&self, v: Val, max_values: usize) -> Result<Value, TooDeep> {
        let mut budget = max_values;
        self.to_value_depth(v, 0, &mut budget)
    }

    fn to_value_depth(&self, v: Val, depth: usize, budget: &mut usize) -> Result<Value, TooDeep> {
        // A memo reference can make a container contain itself.
        if depth > MAX_DEPTH {
            return Err(TooDeep::Nested);
        }
        *budget = budget.checked_sub(1).ok_or(TooDeep::TooMany)?;
        Ok(match v {
            Val::None => Value::None,
            Val::Bool(b) => Value::Bool(b),
            Val::Int(i) => Value::Int(i as i128),
            Val::BigInt(b) => Value::Int(self.big_ints[b as usize]),
            Val::Float(f) => Value::Float(f),
            Val::Str(s) => Value::Str(self.str(s).into_owned()),
            Val::Bytes(b) => Value::Bytes(self.bytes[b as usize].clone()),
            Val::Custom { kind, id } => Value::Custom { kind, id },
            Val::Consumed => Value::Consumed,
            Val::Obj(o) => {
                let obj = self.obj(o);
                let items = obj
                    .items
                    .iter()
                    .map(|&x| self.to_value_depth(x, depth + 1, budget))
                    .collect::<Result<Vec<_>, _>>()?;
                match obj.kind {
                    ObjKind::List => Value::List(items),
                    ObjKind::Tuple => Value::Tuple(items),
                    ObjKind::Set => Value::Set(items),
                    ObjKind::Dict => {
                        let mut pairs = Vec::with_capacity(items.len() / 2);
                        let mut it = items.into_iter();
                        while let (Some(k), Some(v)) = (it.next(), it.next()) {
                            pairs.push((k, v));
                        }
                        Value::Dict(pairs)
                    }
                }
            }
        })
    }

    fn new_obj(&mut self, kind: ObjKind, offset: u64) -> ObjId {
        if let Some(id) = self.free_objs.pop() {
            let o = &mut self.objs[id as usize];
            o.kind = kind;
            o.items.clear();
            o.consumed = 0;
            o.replaced = None;
            o.memo = u32::MAX;
            o.offset = offset;
            id
        } else {
            self.objs.push(Obj {
                kind,
                items: Vec::new(),
                consumed: 0,
                replaced: None,
                memo: u32::MAX,
                offset,
            });
            (self.objs.len() - 1) as ObjId
        }
    }

    /// Retires a container a hook replaced: the memo slot that named it now names the
    /// replacement, and its storage is recycled (keeping its capacity, so steady-state
    /// streaming allocates nothing per entry).
    fn retire(&mut self, id: ObjId, replacement: Val) {
        let memo = self.objs[id as usize].memo;
        if memo != u32::MAX {
            self.memo.set(memo as u64, replacement);
        }
        if !self.dict_index.is_empty() {
            self.dict_index.remove(&id);
        }
        let o = &mut self.objs[id as usize];
        self.held -= o.items.len();
        o.items.clear();
        o.replaced = Some(replacement);
        self.retired.push(id);
    }

    // Ends an item batch: retired containers can be reused now. (A container named
    // both inside the batch and, unattached, further down the stack would be reused
    // too early; CPython never writes that for snapshot data.)
    fn recycle(&mut self) {
        self.free_objs.append(&mut self.retired);
    }

    /// The number of live containers (for memory diagnostics).
    pub fn live_objs(&self) -> usize {
        self.objs.len() - self.free_objs.len()
    }

    /// Frees the memo once parsing is over: for a large snapshot it is the biggest
    /// table, and nothing refers to it afterwards.
    pub fn release_memo(&mut self) {
        self.memo = Memo::default();
    }

    /// The number of memo entries.
    pub fn memo_len(&self) -> usize {
        self.memo.len()
    }

    /// The number of values held in live containers (for memory diagnostics).
    pub fn held_values(&self) -> usize {
        self.held
    }

    // Counts `n` more values held, refusing past `MAX_HELD`.
    #[inline(always)]
    fn hold(&mut self, n: usize, at: u64) -> Result<(), PickleError> {
        self.held += n;
        if self.held > MAX_HELD {
            return Err(malformed(
                at,
                format!(
                    "more than {MAX_HELD} values held at once (16 bytes each): past what a memory snapshot holds"
                ),
            ));
        }
        Ok(())
    }
}

/// Dicts up to this many pairs are scanned for a repeated key; larger ones
/// are indexed.
const SCAN_PAIRS: usize = 32;

// A dict key as a hash key: the variant and its payload's bits (so floats are
// told apart by their bits, where `Val`'s `==` compares them as numbers).
fn key_bits(v: Val) -> (u8, u64) {
    match v {
        Val::None => (0, 0),
        Val::Bool(b) => (1, b as u64),
        Val::Int(i) => (2, i as u64),
        Val::BigInt(b) => (3, b as u64),
        Val::Float(f) => (4, f.to_bits()),
        Val::Str(s) => (5, s as u64),
        Val::Bytes(b) => (6, b as u64),
        Val::Obj(o) => (7, o as u64),
        Val::Custom { kind, id } => (8, (kind as u64) << 32 | id as u64),
        Val::Consumed => (9, 0),
    }
}

/// An owned pickle value, as [`Heap::to_value`] builds it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// A bool.
    Bool(bool),
    /// An int.
    Int(i128),
    /// A float.
    Float(f64),
    /// A str.
    Str(String),
    /// bytes or bytearray.
    Bytes(Vec<u8>),
    /// A list.
    List(Vec<Value>),
    /// A tuple.
    Tuple(Vec<Value>),
    /// A set or frozenset.
    Set(Vec<Value>),
    /// A dict, in insertion order.
    Dict(Vec<(Value, Value)>),
    /// A hook's replacement value.
    Custom {
        /// Hook-defined kind.
        kind: u8,
        /// Hook-defined id.
        id: u32,
    },
    /// A container a hook consumed.
    Consumed,
}

impl Value {
    /// The value of a str key of a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(pairs) => pairs
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The int, if this is one.
    pub fn as_int(&self) -> Option<i128> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(*b as i128),
            _ => None,
        }
    }

    /// The str, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The items of a list or tuple.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) | Value::Tuple(v) => Some(v),
            _ => None,
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

// The memo holds millions of slots for a large snapshot (every dict, list and str is
// memoized), so each is a u32: a 3-bit tag and a 29-bit payload; other values go to a
// side table.
#[derive(Default)]
struct Memo {
    slots: Vec<u32>,
    side: Vec<Val>,
    sparse: FxHashMap<u64, Val>,
}

const TAG_SHIFT: u32 = 29;
const PAYLOAD: u32 = (1 << TAG_SHIFT) - 1;
const T_EMPTY: u32 = 0;
const T_STR: u32 = 1;
const T_OBJ: u32 = 2;
const T_SIDE: u32 = 3;
const T_CONSUMED: u32 = 4;
const T_CUSTOM0: u32 = 5; // kinds 0..=2 use tags 5..=7

impl Memo {
    // A value packed into a slot, when it fits one.
    #[inline(always)]
    fn pack(v: Val) -> Option<u32> {
        let compact = |tag: u32, id: u32| (id <= PAYLOAD).then_some((tag << TAG_SHIFT) | id);
        match v {
            Val::Str(s) => compact(T_STR, s),
            Val::Obj(o) => compact(T_OBJ, o),
            Val::Consumed => Some(T_CONSUMED << TAG_SHIFT),
            Val::Custom { kind, id } if kind <= 2 => compact(T_CUSTOM0 + kind as u32, id),
            _ => None,
        }
    }

    // Inlined, so that a store of a known kind (every trace entry stores a str and
    // a consumed dict) folds to a few instructions.
    #[inline(always)]
    fn encode(&mut self, v: Val) -> u32 {
        match Self::pack(v) {
            Some(slot) => slot,
            None => self.encode_side(v),
        }
    }

    #[cold]
    fn encode_side(&mut self, v: Val) -> u32 {
        self.side.push(v);
        (T_SIDE << TAG_SHIFT) | (self.side.len() as u32 - 1).min(PAYLOAD)
    }

    #[inline(always)]
    fn decode(&self, slot: u32) -> Option<Val> {
        let id = slot & PAYLOAD;
        // Strs (keys) and frames are nearly every memo read: tests before the match,
        // whose jump table costs more.
        let tag = slot >> TAG_SHIFT;
        if tag == T_STR {
            return Some(Val::Str(id));
        }
        if tag >= T_CUSTOM0 {
            return Some(Val::Custom {
                kind: (tag - T_CUSTOM0) as u8,
                id,
            });
        }
        Some(match tag {
            T_EMPTY => return None,
            T_STR => Val::Str(id),
            T_OBJ => Val::Obj(id),
            T_SIDE => *self.side.get(id as usize)?,
            T_CONSUMED => Val::Consumed,
            t => Val::Custom {
                kind: (t - T_CUSTOM0) as u8,
                id,
            },
        })
    }

    /// The number of entries, as Python's `len(memo)`: where MEMOIZE stores.
    fn len(&self) -> usize {
        // The dense slots have no holes, and the sparse entries all lie past them.
        self.slots.len() + self.sparse.len()
    }

    fn set(&mut self, idx: u64, v: Val) {
        let len = self.slots.len() as u64;
        if idx < len {
            let old = self.slots[idx as usize];
            // A value out of line overwriting another reuses its side entry: the
            // same index stored over and over must not grow the side table.
            let slot = match Self::pack(v) {
                Some(slot) => slot,
                None if old >> TAG_SHIFT == T_SIDE
                    && ((old & PAYLOAD) as usize) < self.side.len() =>
                {
                    self.side[(old & PAYLOAD) as usize] = v;
                    old
                }
                None => self.encode_side(v),
            };
            self.slots[idx as usize] = slot;
        } else if idx == len && idx < PAYLOAD as u64 {
            self.push(v);
            // CPython numbers memo entries densely from 0: anything else (odd or
            // hostile input, an index far ahead) waits in the sparse map, so memory
            // follows the entries stored, never the indices named. Entries stored
            // ahead join the dense slots as these reach them.
            while !self.sparse.is_empty() && (self.slots.len() as u64) < PAYLOAD as u64 {
                match self.sparse.remove(&(self.slots.len() as u64)) {
                    Some(next) => self.push(next),
                    None => break,
                }
            }
        } else {
            self.sparse.insert(idx, v);
        }
    }

    // Appends a slot: MEMOIZE, and BINPUT as CPython numbers them.
    #[inline]
    fn push(&mut self, v: Val) {
        let slot = self.encode(v);
        self.slots.push(slot);
    }

    #[inline(always)]
    fn get(&self, idx: u64) -> Option<Val> {
        match self.slots.get(idx as usize) {
            Some(&slot) => self.decode(slot),
            None => self.sparse.get(&idx).copied(),
        }
    }
}

/// A cursor over the buffered input for [`Hook::decode_dict`]. Every read returns
/// `None` at the end of the buffer or on anything unexpected: the decoder then gives
/// up and the parser reads the same bytes the generic way, which reports errors with
/// their offsets. Memo slots it adds are removed again if the decoder gives up.
pub struct OpReader<'a> {
    buf: &'a [u8],
    pos: usize,
    heap: &'a mut Heap,
    // The memo's length when the reader started: older slots are read-only.
    memo_start: usize,
}

impl<'a> OpReader<'a> {
    /// The next byte, without consuming it.
    #[inline(always)]
    pub fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    /// Reads a byte (an opcode or a one-byte argument).
    #[inline(always)]
    pub fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    #[inline(always)]
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let a: [u8; N] = self.buf.get(self.pos..self.pos + N)?.try_into().ok()?;
        self.pos += N;
        Some(a)
    }

    #[inline(always)]
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let b = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(b)
    }

    /// Bytes read so far (to come back to with [`OpReader::rewind`]).
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Goes back to an earlier position, for lookahead that did not match. (The memo is
    /// left as it is: only reads may be undone this way.)
    pub fn rewind(&mut self, pos: usize) {
        self.pos = pos.min(self.pos);
    }

    /// The heap (to read ints and strings, and to intern).
    pub fn heap(&self) -> &Heap {
        self.heap
    }

    /// The number of memo slots: the index the next memo store must use.
    pub fn memo_len(&self) -> usize {
        self.heap.memo.slots.len()
    }

    /// Reads the memo store that may follow a value and stores `v` there. `Some(true)`:
    /// stored; `Some(false)`: no memo store follows; `None`: one that does not append
    /// to the memo (CPython numbers slots in order, so this is not a common layout).
    #[inline(always)]
    pub fn memo_store(&mut self, v: Val) -> Option<bool> {
        let idx = match self.peek() {
            Some(op::MEMOIZE) => {
                self.pos += 1;
                self.memo_len()
            }
            Some(op::BINPUT) => {
                self.pos += 1;
                self.u8()? as usize
            }
            Some(op::LONG_BINPUT) => {
                self.pos += 1;
                u32::from_le_bytes(self.array()?) as usize
            }
            _ => return Some(false),
        };
        // Entries stored out of order (in the sparse map) shift where MEMOIZE
        // stores: the generic reader handles that.
        if idx != self.memo_len() || idx >= PAYLOAD as usize || !self.heap.memo.sparse.is_empty() {
            return None;
        }
        self.heap.memo.push(v);
        Some(true)
    }

    /// Replaces the value of a memo slot this reader stored (a container's slot is
    /// stored before its content is read).
    pub fn memo_replace(&mut self, idx: usize, v: Val) -> Option<()> {
        if idx < self.memo_start || idx >= self.memo_len() {
            return None;
        }
        let slot = self.heap.memo.encode(v);
        self.heap.memo.slots[idx] = slot;
        Some(())
    }

    /// Reads the memo references of a list's MARK batch through its APPENDS, pushing
    /// the id of each: all must name [`Val::Custom`] values of `kind` (0 to 2), else
    /// `None`.
    #[inline]
    pub fn custom_refs(&mut self, kind: u8, out: &mut Vec<u32>) -> Option<()> {
        // A stack's frames are a third of a snapshot's opcodes: their memo slots are
        // checked by tag, with no `Val` built, and each reference is read with one
        // bounds check (for its longest form: near the buffer's end the decoder gives
        // up anyway).
        let tag = T_CUSTOM0 + kind as u32;
        let slots = &self.heap.memo.slots;
        loop {
            let w: &[u8; 5] = self.buf.get(self.pos..self.pos + 5)?.try_into().ok()?;
            let idx = match w[0] {
                op::BINGET => {
                    self.pos += 2;
                    w[1] as usize
                }
                op::LONG_BINGET => {
                    self.pos += 5;
                    u32::from_le_bytes(*w.last_chunk()?) as usize
                }
                op::APPENDS => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            };
            let slot = *slots.get(idx)?;
            if slot >> TAG_SHIFT != tag {
                return None;
            }
            out.push(slot & PAYLOAD);
        }
    }

    /// Reads a str as [`OpReader::atom`] does (a memo reference or a new str): `None`
    /// for any other value.
    #[inline(always)]
    pub fn str_atom(&mut self, opcode: u8) -> Option<StrId> {
        // Dict keys are memo references after their first use: the slot is tested for
        // a str by its tag, with no `Val` built.
        let idx = match opcode {
            op::BINGET => self.u8()? as usize,
            op::LONG_BINGET => u32::from_le_bytes(self.array()?) as usize,
            _ => {
                return match self.atom_rare(opcode)? {
                    Val::Str(s) => Some(s),
                    _ => None,
                };
            }
        };
        let slot = *self.heap.memo.slots.get(idx)?;
        (slot >> TAG_SHIFT == T_STR).then_some(slot & PAYLOAD)
    }

    /// Reads the argument of `opcode` if it is a one-opcode value: an int, a float,
    /// None, a bool, a str (with the memo store after it), or a memo reference. `None`
    /// for anything else, containers included.
    #[inline(always)]
    pub fn atom(&mut self, opcode: u8) -> Option<Val> {
        // The opcodes of nearly every value of a trace entry are handled inline; a call
        // per value would cost more than reading it.
        match opcode {
            op::BINGET => {
                let idx = self.u8()?;
                self.heap.memo.get(idx as u64)
            }
            op::LONG_BINGET => {
                let idx = u32::from_le_bytes(self.array()?);
                self.heap.memo.get(idx as u64)
            }
            op::BININT1 => Some(Val::Int(self.u8()? as i64)),
            op::BININT2 => Some(Val::Int(u16::from_le_bytes(self.array()?) as i64)),
            op::LONG1 => {
                let n = self.u8()? as usize;
                // Up to 8 bytes (addresses, times): one little-endian load of the
                // 8-byte window, shifted to sign-extend its first n bytes.
                match self.buf.get(self.pos..self.pos + 8) {
                    Some(w) if (1..=8).contains(&n) => {
                        let word = u64::from_le_bytes(w.try_into().ok()?);
                        self.pos += n;
                        let shift = 64 - 8 * n as u32;
                        Some(Val::Int(((word << shift) as i64) >> shift))
                    }
                    _ => {
                        if n > 16 {
                            return None;
                        }
                        let b = self.bytes(n)?;
                        Some(self.heap.long(b))
                    }
                }
            }
            _ => self.atom_rare(opcode),
        }
    }

    #[inline(never)]
    fn atom_rare(&mut self, opcode: u8) -> Option<Val> {
        Some(match opcode {
            op::BININT => Val::Int(i32::from_le_bytes(self.array()?) as i64),
            op::SHORT_BINUNICODE | op::BINUNICODE => {
                let n = if opcode == op::SHORT_BINUNICODE {
                    self.u8()? as usize
                } else {
                    u32::from_le_bytes(self.array()?) as usize
                };
                let s = self.bytes(n)?;
                let v = Val::Str(self.heap.intern(s));
                self.memo_store(v)?;
                v
            }
            op::BINFLOAT => Val::Float(f64::from_be_bytes(self.array()?)),
            op::NONE => Val::None,
            op::NEWTRUE => Val::Bool(true),
            op::NEWFALSE => Val::Bool(false),
            _ => return None,
        })
    }
}

// The input, buffered by hand: the opcode loop reads a few bytes at a time and must
// not pay a trait call per byte.
struct Source<'p, R> {
    inner: R,
    buf: Buf<'p>,
    pos: usize,
    end: usize,
    base: u64,
    eof: bool,
    progress: &'p dyn Fn(u64),
}

// The bytes the opcode loop reads: its own buffer, refilled from a reader, or the
// whole pickle lent by the caller (a mapped file, bytes in memory), read where it
// lies with no copy. Over a lent pickle, `end` still advances a window at a time,
// so that progress is told as often as with a reader and the lookahead checks
// stay the same.
enum Buf<'p> {
    Owned(Vec<u8>),
    Lent(&'p [u8]),
}

impl std::ops::Deref for Buf<'_> {
    type Target = [u8];

    #[inline(always)]
    fn deref(&self) -> &[u8] {
        match self {
            Buf::Owned(v) => v,
            Buf::Lent(s) => s,
        }
    }
}

// Over twice the `BufReader` that `input::decompress` puts in front of a file, so
// that each read asks for more than its capacity and goes around it, straight into
// this buffer, instead of being copied through it.
const BUF_SIZE: usize = 4 << 20;
// Bytes kept buffered ahead of a dict offered to `Hook::decode_dict`: trace entries
// are a few hundred bytes at most.
const LOOKAHEAD: usize = 1 << 16;

impl<R: Read> Source<'_, R> {
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    #[inline(always)]
    fn need(&mut self, n: usize, what: &'static str) -> Result<(), PickleError> {
        if self.end - self.pos < n {
            self.fill(n, what)?;
        }
        Ok(())
    }

    #[cold]
    fn fill(&mut self, n: usize, what: &'static str) -> Result<(), PickleError> {
        let buf = match &mut self.buf {
            Buf::Owned(buf) => buf,
            Buf::Lent(all) => {
                // Nothing to copy: the window moves on. Progress hears the bytes
                // consumed, which the lender may drop from memory (see
                // `Parser::over_bytes`).
                (self.progress)(self.pos as u64);
                let want = n.max(BUF_SIZE / 2);
                self.end = all.len().min(self.pos.saturating_add(want).max(self.end));
                self.eof = self.end == all.len();
                if self.end - self.pos < n {
                    return Err(PickleError::Truncated {
                        offset: self.end as u64,
                        what,
                    });
                }
                return Ok(());
            }
        };
        buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        if buf.len() < BUF_SIZE {
            buf.resize(BUF_SIZE, 0);
        }
        // Fill at least half the buffer so refills (and progress calls) stay rare even
        // when the reader hands out small pieces.
        let target = n.max(buf.len() / 2);
        while self.end < target && !self.eof {
            if self.end == buf.len() {
                // A long string: the buffer grows as its bytes arrive, never to a
                // length the input has not borne out (a 14-byte pickle may claim
                // a string of 512 GiB).
                let grown = buf.len().saturating_mul(2).min(target);
                buf.resize(grown, 0);
            }
            match self.inner.read(&mut buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(PickleError::Io {
                        offset: self.base + self.end as u64,
                        source,
                    });
                }
            }
        }
        (self.progress)(self.base + self.end as u64);
        if self.end < n {
            return Err(PickleError::Truncated {
                offset: self.base + self.end as u64,
                what,
            });
        }
        Ok(())
    }

    // Buffers at least `n` bytes ahead if the input has them; a shorter input is not
    // an error here.
    #[cold]
    fn top_up(&mut self, n: usize) -> Result<(), PickleError> {
        match self.fill(n, "") {
            Err(PickleError::Truncated { .. }) => Ok(()),
            r => r,
        }
    }

    #[inline(always)]
    fn u8(&mut self) -> u8 {
        let b = self.buf[self.pos];
        self.pos += 1;
        b
    }

    #[inline(always)]
    fn array<const N: usize>(&mut self) -> [u8; N] {
        let a: [u8; N] = self.buf[self.pos..self.pos + N].try_into().unwrap();
        self.pos += N;
        a
    }

    #[inline(always)]
    fn bytes(&mut self, n: usize) -> &[u8] {
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        s
    }
}

/// The most values the pickle machine's stack holds: CPython writes lists and
/// dicts in batches of 1000 items, so a plain-data pickle nested a few
/// levels deep needs a few thousand; more is a bomb (2 GiB of NONE opcodes
/// would take 32 GiB of stack).
pub const MAX_STACK: usize = 1 << 22;

/// The most MARKs open at once.
pub const MAX_MARKS: usize = 1 << 16;

/// The most values held in containers at once (256 MiB of them). A snapshot
/// holds what its end state lists, about ten values per block, while its trace
/// entries are consumed as they are read; a list of 300 M NONEs, 300 MB of
/// opcodes (or a few hundred KB compressed), would take 4.8 GB.
pub const MAX_HELD: usize = 1 << 24;

/// The pickle reader: a stack machine over the opcodes, with the memo and the
/// containers in a [`Heap`].
pub struct Parser<'p, R> {
    src: Source<'p, R>,
    heap: Heap,
    stack: Vec<Val>,
    marks: Vec<usize>,
    protocol: u8,
}

/// Opcodes, by the names of CPython's `pickletools`.
#[allow(missing_docs)]
pub mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const BINFLOAT: u8 = b'G';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const GET: u8 = b'g';
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const PUT: u8 = b'p';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const PROTO: u8 = 0x80;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINBYTES8: u8 = 0x8e;
    pub const EMPTY_SET: u8 = 0x8f;
    pub const ADDITEMS: u8 = 0x90;
    pub const FROZENSET: u8 = 0x91;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
    pub const BYTEARRAY8: u8 = 0x96;
}

fn unsupported_name(opcode: u8) -> Option<&'static str> {
    Some(match opcode {
        b'F' => "FLOAT",
        b'I' => "INT",
        b'L' => "LONG",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        b'R' => "REDUCE",
        b'S' => "STRING",
        b'T' => "BINSTRING",
        b'U' => "SHORT_BINSTRING",
        b'V' => "UNICODE",
        b'b' => "BUILD",
        b'c' => "GLOBAL",
        b'i' => "INST",
        b'o' => "OBJ",
        0x81 => "NEWOBJ",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x92 => "NEWOBJ_EX",
        0x93 => "STACK_GLOBAL",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return None,
    })
}

impl<'p> Parser<'p, io::Empty> {
    /// A parser over a whole pickle in memory (a mapped file, say), read where it lies:
    /// no byte is copied into a buffer of the parser's. `progress` is called with the
    /// number of bytes consumed so far, every 2 MiB or so; the parser never reads
    /// those bytes again, so the lender may drop them from memory (a mapping's pages,
    /// see `input`).
    pub fn over_bytes(bytes: &'p [u8], progress: &'p dyn Fn(u64)) -> Self {
        Parser::with_buf(io::empty(), Buf::Lent(bytes), progress)
    }
}

impl<'p, R: Read> Parser<'p, R> {
    /// A parser over `read`; `progress` is called with the number of bytes read so far
    /// each time the input buffer is refilled (every MiB or so).
    pub fn new(read: R, progress: &'p dyn Fn(u64)) -> Self {
        Parser::with_buf(read, Buf::Owned(Vec::new()), progress)
    }

    fn with_buf(read: R, buf: Buf<'p>, progress: &'p dyn Fn(u64)) -> Self {
        Parser {
            src: Source {
                inner: read,
                buf,
                pos: 0,
                end: 0,
                base: 0,
                eof: false,
                progress,
            },
            heap: Heap::default(),
            stack: Vec::with_capacity(4096),
            marks: Vec::with_capacity(64),
            protocol: 0,
        }
    }

    /// The heap: strings, containers and memo.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// The heap, mutably (to pre-intern strings a hook compares against).
    pub fn heap_mut(&mut self) -> &mut Heap {
        &mut self.heap
    }

    /// Consumes the parser, keeping its heap.
    pub fn into_heap(self) -> Heap {
        self.heap
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.src.offset()
    }

    /// The protocol the pickle declared.
    pub fn protocol(&self) -> u8 {
        self.protocol
    }

    /// Runs the pickle to its STOP opcode and returns the top-level value.
    pub fn run<H: Hook>(&mut self, hook: &mut H) -> Result<Val, PickleError> {
        match self.src.need(2, "the PROTO opcode") {
            Ok(()) => {}
            Err(PickleError::Truncated { .. }) if self.src.end == 0 => {
                return Err(PickleError::NotAPickle { found: 0 });
            }
            Err(e) => return Err(e),
        }
        if self.src.buf[0] != op::PROTO {
            return Err(PickleError::NotAPickle {
                found: self.src.buf[0],
            });
        }
        loop {
            let at = self.src.offset();
            self.src.need(1, "an opcode")?;
            let opcode = self.src.u8();
            match self.step(opcode, at, hook) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return Err(e),
            }
            // One opcode pushes at most one value or mark (three for DUP and
            // TUPLE3's like): checking after each keeps the bound.
            if self.stack.len() > MAX_STACK || self.marks.len() > MAX_MARKS {
                return Err(malformed(
                    at,
                    format!(
                        "more than {MAX_STACK} values or {MAX_MARKS} marks on the pickle stack: not a plain-data pickle"
                    ),
                ));
            }
        }
        let at = self.src.offset();
        if self.stack.len() != 1 || !self.marks.is_empty() {
            return Err(malformed(
                at,
                "STOP with a stack not holding exactly one value",
            ));
        }
        Ok(self.stack.pop().unwrap())
    }

    #[inline(always)]
    fn pop(&mut self, at: u64) -> Result<Val, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(malformed(at, "stack underflow"));
        }
        Ok(self.stack.pop().unwrap())
    }

    #[inline(always)]
    fn top_obj(&self, at: u64, below: usize) -> Result<ObjId, PickleError> {
        match self
            .stack
            .len()
            .checked_sub(below + 1)
            .map(|i| self.stack[i])
        {
            Some(Val::Obj(o)) => Ok(o),
            _ => Err(malformed(at, "expected a container on the stack")),
        }
    }

    fn pop_mark(&mut self, at: u64) -> Result<usize, PickleError> {
        self.marks
            .pop()
            .ok_or_else(|| malformed(at, "no MARK on the stack"))
    }

    #[inline(always)]
    fn memo_get(&self, idx: u64, at: u64) -> Result<Val, PickleError> {
        self.heap
            .memo
            .get(idx)
            .ok_or_else(|| malformed(at, format!("memo index {idx} read before it was written")))
    }

    fn memo_put(&mut self, idx: u64, at: u64) -> Result<(), PickleError> {
        let v = *self
            .stack
            .last()
            .ok_or_else(|| malformed(at, "memo store with an empty stack"))?;
        if idx >= PAYLOAD as u64 {
            // Keep the back-reference compact: an obj's memo index is a u32.
        } else if let Val::Obj(o) = v {
            self.heap.objs[o as usize].memo = idx as u32;
        }
        self.heap.memo.set(idx, v);
        Ok(())
    }

    fn push_str(&mut self, n: usize, what: &'static str) -> Result<(), PickleError> {
        self.src.need(n, what)?;
        let s = self.src.bytes(n);
        let id = self.heap.intern(s);
        self.stack.push(Val::Str(id));
        Ok(())
    }

    fn push_bytes(&mut self, n: usize, what: &'static str) -> Result<(), PickleError> {
        self.src.need(n, what)?;
        let b = self.src.bytes(n).to_vec();
        self.heap.bytes.push(b);
        self.stack
            .push(Val::Bytes(self.heap.bytes.len() as u32 - 1));
        Ok(())
    }

    fn length(&mut self, at: u64, n: u64) -> Result<usize, PickleError> {
        // A length beyond the address space cannot be honest; reading it would only
        // fail later, after trying to allocate it.
        usize::try_from(n)
            .ok()
            .filter(|&n| n < (1 << 40))
            .ok_or_else(|| malformed(at, format!("length {n} is too large")))
    }

    // Attaches `items` (stack[from..]) to the list/set `target`, through the hook.
    fn append_items<H: Hook>(
        &mut self,
        target: ObjId,
        from: usize,
        at: u64,
        hook: &mut H,
    ) -> Result<(), PickleError> {
        let kind = self.heap.objs[target as usize].kind;
        if kind != ObjKind::List && kind != ObjKind::Set {
            return Err(malformed(
                at,
                "append to a container that is not a list or set",
            ));
        }
        for i in from..self.stack.len() {
            let mut item = self.stack[i];
            if let Val::Obj(o) = item
                && let Some(v) = self.heap.objs[o as usize].replaced
            {
                item = v;
            }
            let stored = match item {
                Val::Obj(o) => match hook.on_append(&mut self.heap, target, o) {
                    Attach::Keep => Some(item),
                    Attach::Replace(v) => {
                        self.heap.retire(o, v);
                        Some(v)
                    }
                    Attach::Consume => {
                        self.heap.retire(o, Val::Consumed);
                        None
                    }
                },
                Val::Custom { .. } => match hook.on_append_custom(&mut self.heap, target, item) {
                    Attach::Keep => Some(item),
                    Attach::Replace(v) => Some(v),
                    Attach::Consume => None,
                },
                _ => Some(item),
            };
            let t = &mut self.heap.objs[target as usize];
            match stored {
                Some(v) => {
                    t.items.push(v);
                    self.heap.hold(1, at)?;
                }
                None => t.consumed += 1,
            }
        }
        self.stack.truncate(from);
        self.heap.recycle();
        Ok(())
    }

    // Stores the pairs stack[from..] into the dict `target`, through the hook.
    fn set_items<H: Hook>(
        &mut self,
        target: ObjId,
        from: usize,
        at: u64,
        hook: &mut H,
    ) -> Result<(), PickleError> {
        if self.heap.objs[target as usize].kind != ObjKind::Dict {
            return Err(malformed(
                at,
                "SETITEM(S) on a container that is not a dict",
            ));
        }
        if !(self.stack.len() - from).is_multiple_of(2) {
            return Err(malformed(at, "SETITEMS with an odd number of items"));
        }
        // Str keys with small ids (the keys of snapshot dicts are interned early) are
        // tracked in a bit set while the dict started empty: a new key then needs no
        // scan of the pairs already stored.
        let mut seen: u64 = 0;
        let mut fresh = self.heap.objs[target as usize].items.is_empty();
        let mut i = from;
        while i < self.stack.len() {
            let key = self.stack[i];
            let mut value = self.stack[i + 1];
            if let Val::Obj(o) = value
                && let Some(v) = self.heap.objs[o as usize].replaced
            {
                value = v;
            }
            if let Val::Obj(o) = value {
                match hook.on_set(&mut self.heap, target, key, o) {
                    Attach::Keep => {}
                    Attach::Replace(v) => {
                        self.heap.retire(o, v);
                        value = v;
                    }
                    Attach::Consume => {
                        self.heap.retire(o, Val::Consumed);
                        value = Val::Consumed;
                    }
                }
            }
            let heap = &mut self.heap;
            let t = &mut heap.objs[target as usize];
            let known_new = match key {
                Val::Str(k) if fresh && k < 64 => {
                    let new = seen & (1 << k) == 0;
                    seen |= 1 << k;
                    new
                }
                _ => {
                    fresh = false;
                    false
                }
            };
            // A repeated key replaces the earlier value, as in Python. Keys are almost
            // always strs, compared by id without the general enum comparison.
            let same = |k: &Val| match (key, *k) {
                (Val::Str(a), Val::Str(b)) => a == b,
                (Val::Str(_), _) => false,
                _ => *k == key,
            };
            let pair = if known_new {
                None
            } else if t.items.len() < 2 * SCAN_PAIRS {
                t.items.chunks_exact(2).position(|kv| same(&kv[0]))
            } else {
                // A large dict (not a snapshot's: a hand-made one of many int
                // keys, say) is indexed, so that each key costs O(1), not a scan.
                let index = heap.dict_index.entry(target).or_insert_with(|| {
                    let pairs = t.items.chunks_exact(2).enumerate();
                    pairs.map(|(i, kv)| (key_bits(kv[0]), i as u32)).collect()
                });
                index.get(&key_bits(key)).map(|&i| i as usize)
            };
            match pair {
                Some(p) => t.items[2 * p + 1] = value,
                None => {
                    if let Some(index) = heap.dict_index.get_mut(&target) {
                        index.insert(key_bits(key), (t.items.len() / 2) as u32);
                    }
                    t.items.push(key);
                    t.items.push(value);
                    heap.hold(2, at)?;
                }
            }
            i += 2;
        }
        self.stack.truncate(from);
        self.heap.recycle();
        Ok(())
    }

    // The list whose MARK batch is open (its items are being pushed), if any.
    #[inline(always)]
    fn batch_list(&self) -> Option<ObjId> {
        let &mark = self.marks.last()?;
        match *self.stack.get(mark.checked_sub(1)?)? {
            Val::Obj(o) if self.heap.objs[o as usize].kind == ObjKind::List => Some(o),
            _ => None,
        }
    }

    // Offers the dict whose EMPTY_DICT was just read to the hook's decoder (see
    // `Hook::decode_dict`); on Ok(None) nothing was consumed.
    fn offer_dict<H: Hook>(
        &mut self,
        list: ObjId,
        hook: &mut H,
    ) -> Result<Option<Val>, PickleError> {
        // The decoder sees only what is buffered: keep enough for any usual dict.
        if self.src.end - self.src.pos < LOOKAHEAD && !self.src.eof {
            self.src.top_up(LOOKAHEAD)?;
        }
        let memo = &self.heap.memo;
        let (slots, side) = (memo.slots.len(), memo.side.len());
        let mut ops = OpReader {
            buf: &self.src.buf[self.src.pos..self.src.end],
            pos: 0,
            heap: &mut self.heap,
            memo_start: slots,
        };
        match hook.decode_dict(list, &mut ops) {
            Some(v) => {
                self.src.pos += ops.pos;
                Ok(Some(v))
            }
            None => {
                self.heap.memo.slots.truncate(slots);
                self.heap.memo.side.truncate(side);
                Ok(None)
            }
        }
    }

    fn new_container_from(
        &mut self,
        kind: ObjKind,
        from: usize,
        at: u64,
    ) -> Result<ObjId, PickleError> {
        let id = self.heap.new_obj(kind, at);
        let items = &mut self.heap.objs[id as usize].items;
        items.extend_from_slice(&self.stack[from..]);
        self.heap.hold(self.stack.len() - from, at)?;
        self.stack.truncate(from);
        Ok(id)
    }

    // One opcode; Ok(false) at STOP.
    #[inline(always)]
    fn step<H: Hook>(&mut self, opcode: u8, at: u64, hook: &mut H) -> Result<bool, PickleError> {
        match opcode {
            op::BINGET => {
                self.src.need(1, "BINGET's argument")?;
                let idx = self.src.u8() as u64;
                let v = self.memo_get(idx, at)?;
                self.stack.push(v);
            }
            op::LONG_BINGET => {
                self.src.need(4, "LONG_BINGET's argument")?;
                let idx = u32::from_le_bytes(self.src.array()) as u64;
                let v = self.memo_get(idx, at)?;
                self.stack.push(v);
            }
            op::MEMOIZE => {
                let idx = self.heap.memo.len() as u64;
                self.memo_put(idx, at)?;
            }
            op::BINPUT => {
                self.src.need(1, "BINPUT's argument")?;
                let idx = self.src.u8() as u64;
                self.memo_put(idx, at)?;
            }
            op::LONG_BINPUT => {
                self.src.need(4, "LONG_BINPUT's argument")?;
                let idx = u32::from_le_bytes(self.src.array()) as u64;
                self.memo_put(idx, at)?;
            }
            op::GET | op::PUT => {
                let line = self.read_line(at)?;
                let idx: u64 = line
                    .trim()
                    .parse()
                    .map_err(|_| malformed(at, format!("bad memo index {line:?}")))?;
                if opcode == op::GET {
                    let v = self.memo_get(idx, at)?;
                    self.stack.push(v);
                } else {
                    self.memo_put(idx, at)?;
                }
            }
            op::MARK => self.marks.push(self.stack.len()),
            op::EMPTY_DICT => {
                if let Some(list) = self.batch_list()
                    && let Some(v) = self.offer_dict(list, hook)?
                {
                    self.stack.push(v);
                    return Ok(true);
                }
                let id = self.heap.new_obj(ObjKind::Dict, at);
                self.stack.push(Val::Obj(id));
            }
            op::EMPTY_LIST => {
                let id = self.heap.new_obj(ObjKind::List, at);
                self.stack.push(Val::Obj(id));
            }
            op::EMPTY_SET => {
                let id = self.heap.new_obj(ObjKind::Set, at);
                self.stack.push(Val::Obj(id));
            }
            op::EMPTY_TUPLE => {
                let id = self.heap.new_obj(ObjKind::Tuple, at);
                self.stack.push(Val::Obj(id));
            }
            op::SETITEMS => {
                let from = self.pop_mark(at)?;
                let target = if from == 0 {
                    return Err(malformed(at, "SETITEMS without a dict below the MARK"));
                } else {
                    match self.stack[from - 1] {
                        Val::Obj(o) => o,
                        _ => return Err(malformed(at, "SETITEMS on a value that is not a dict")),
                    }
                };
                self.set_items(target, from, at, hook)?;
            }
            op::SETITEM => {
                let floor = self.marks.last().copied().unwrap_or(0);
                if self.stack.len() < floor + 3 {
                    return Err(malformed(at, "stack underflow"));
                }
                let target = self.top_obj(at, 2)?;
                let from = self.stack.len() - 2;
                self.set_items(target, from, at, hook)?;
            }
            op::APPENDS | op::ADDITEMS => {
                let from = self.pop_mark(at)?;
                let target = if from == 0 {
                    return Err(malformed(at, "APPENDS without a list below the MARK"));
                } else {
                    match self.stack[from - 1] {
                        Val::Obj(o) => o,
                        _ => return Err(malformed(at, "APPENDS on a value that is not a list")),
                    }
                };
                self.append_items(target, from, at, hook)?;
            }
            op::APPEND => {
                let floor = self.marks.last().copied().unwrap_or(0);
                if self.stack.len() < floor + 2 {
                    return Err(malformed(at, "stack underflow"));
                }
                let target = self.top_obj(at, 1)?;
                let from = self.stack.len() - 1;
                self.append_items(target, from, at, hook)?;
            }
            op::SHORT_BINUNICODE => {
                self.src.need(1, "SHORT_BINUNICODE's length")?;
                let n = self.src.u8() as usize;
                self.push_str(n, "a string")?;
            }
            op::BINUNICODE => {
                self.src.need(4, "BINUNICODE's length")?;
                let n = u32::from_le_bytes(self.src.array()) as usize;
                self.push_str(n, "a string")?;
            }
            op::BINUNICODE8 => {
                self.src.need(8, "BINUNICODE8's length")?;
                let n = u64::from_le_bytes(self.src.array());
                let n = self.length(at, n)?;
                self.push_str(n, "a string")?;
            }
            op::SHORT_BINBYTES => {
                self.src.need(1, "SHORT_BINBYTES's length")?;
                let n = self.src.u8() as usize;
                self.push_bytes(n, "bytes")?;
            }
            op::BINBYTES => {
                self.src.need(4, "BINBYTES's length")?;
                let n = u32::from_le_bytes(self.src.array()) as usize;
                self.push_bytes(n, "bytes")?;
            }
            op::BINBYTES8 | op::BYTEARRAY8 => {
                self.src.need(8, "a bytes length")?;
                let n = u64::from_le_bytes(self.src.array());
                let n = self.length(at, n)?;
                self.push_bytes(n, "bytes")?;
            }
            op::BININT1 => {
                self.src.need(1, "BININT1's argument")?;
                let v = self.src.u8();
                self.stack.push(Val::Int(v as i64));
            }
            op::BININT2 => {
                self.src.need(2, "BININT2's argument")?;
                let v = u16::from_le_bytes(self.src.array());
                self.stack.push(Val::Int(v as i64));
            }
            op::BININT => {
                self.src.need(4, "BININT's argument")?;
                let v = i32::from_le_bytes(self.src.array());
                self.stack.push(Val::Int(v as i64));
            }
            op::LONG1 | op::LONG4 => {
                let n = if opcode == op::LONG1 {
                    self.src.need(1, "LONG1's length")?;
                    self.src.u8() as usize
                } else {
                    self.src.need(4, "LONG4's length")?;
                    let n = i32::from_le_bytes(self.src.array());
                    if n < 0 {
                        return Err(malformed(at, "LONG4 with a negative length"));
                    }
                    n as usize
                };
                if n > 16 {
                    return Err(malformed(
                        at,
                        format!("integer of {n} bytes exceeds 128 bits"),
                    ));
                }
                self.src.need(n, "an integer")?;
                let v = self.heap.long(self.src.bytes(n));
                self.stack.push(v);
            }
            op::BINFLOAT => {
                self.src.need(8, "BINFLOAT's argument")?;
                let v = f64::from_be_bytes(self.src.array());
                self.stack.push(Val::Float(v));
            }
            op::NONE => self.stack.push(Val::None),
            op::NEWTRUE => self.stack.push(Val::Bool(true)),
            op::NEWFALSE => self.stack.push(Val::Bool(false)),
            op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                let n = (opcode - op::TUPLE1 + 1) as usize;
                let floor = self.marks.last().copied().unwrap_or(0);
                if self.stack.len() < floor + n {
                    return Err(malformed(at, "stack underflow"));
                }
                let from = self.stack.len() - n;
                let id = self.new_container_from(ObjKind::Tuple, from, at)?;
                self.stack.push(Val::Obj(id));
            }
            op::TUPLE | op::FROZENSET => {
                let from = self.pop_mark(at)?;
                let kind = if opcode == op::TUPLE {
                    ObjKind::Tuple
                } else {
                    ObjKind::Set
                };
                let id = self.new_container_from(kind, from, at)?;
                self.stack.push(Val::Obj(id));
            }
            op::LIST | op::DICT => {
                let from = self.pop_mark(at)?;
                let kind = if opcode == op::LIST {
                    ObjKind::List
                } else {
                    ObjKind::Dict
                };
                let id = self.heap.new_obj(kind, at);
                // Route the items through the hook like APPENDS/SETITEMS would.
                self.stack.insert(from, Val::Obj(id));
                if kind == ObjKind::List {
                    self.append_items(id, from + 1, at, hook)?;
                } else {
                    self.set_items(id, from + 1, at, hook)?;
                }
            }
            op::POP => {
                self.pop(at)?;
            }
            op::POP_MARK => {
                let from = self.pop_mark(at)?;
                self.stack.truncate(from);
            }
            op::DUP => {
                let v = self.pop(at)?;
                self.stack.push(v);
                self.stack.push(v);
            }
            op::FRAME => {
                // Framing only helps readers prefetch; our buffer does that anyway.
                self.src.need(8, "FRAME's length")?;
                self.src.array::<8>();
            }
            op::PROTO => {
                self.src.need(1, "PROTO's argument")?;
                let p = self.src.u8();
                if !(2..=5).contains(&p) {
                    return Err(malformed(at, format!("unsupported pickle protocol {p}")));
                }
                self.protocol = p;
            }
            op::STOP => return Ok(false),
            other => {
                return Err(match unsupported_name(other) {
                    Some(name) => PickleError::Unsupported { offset: at, name },
                    None => PickleError::UnknownOpcode {
                        offset: at,
                        opcode: other,
                    },
                });
            }
        }
        Ok(true)
    }

    fn read_line(&mut self, at: u64) -> Result<String, PickleError> {
        let mut line = Vec::new();
        loop {
            self.src.need(1, "a text argument")?;
            let b = self.src.u8();
            if b == b'\n' {
                break;
            }
            if line.len() > 64 {
                return Err(malformed(at, "text argument too long"));
            }
            line.push(b);
        }
        Ok(String::from_utf8_lossy(&line).into_owned())
    }
}

fn malformed(offset: u64, message: impl Into<String>) -> PickleError {
    PickleError::Malformed {
        offset,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every test's pickle is read both ways, from a reader and in place: the two
    // must agree, errors and their offsets included.
    fn parse(bytes: &[u8]) -> Result<Value, PickleError> {
        let read = load(bytes);
        let lent = load_lent(bytes);
        assert_eq!(format!("{read:?}"), format!("{lent:?}"));
        read
    }

    fn load_lent(bytes: &[u8]) -> Result<Value, PickleError> {
        into_value(Parser::over_bytes(bytes, &|_| {}))
    }

    #[test]
    fn a_lent_pickle_is_read_a_window_at_a_time() {
        // A list of 3 million small ints (about 6 MiB): progress is told more than
        // once, with offsets that only grow and that the parser has consumed.
        let n = 3_000_000u32;
        let mut p = vec![0x80, 4, op::EMPTY_LIST, op::MARK];
        for i in 0..n {
            p.extend([op::BININT1, i as u8]);
        }
        p.extend([op::APPENDS, op::STOP]);
        let seen = std::cell::RefCell::new(Vec::new());
        let progress = |b: u64| seen.borrow_mut().push(b);
        let mut parser = Parser::over_bytes(&p, &progress);
        let root = parser.run(&mut KeepAll).unwrap();
        let Val::Obj(list) = root else { panic!() };
        assert_eq!(parser.heap().obj(list).items.len(), n as usize);
        let seen = seen.into_inner();
        assert!(seen.len() >= 3, "{seen:?}");
        assert!(seen.windows(2).all(|w| w[0] <= w[1]));
        assert!(*seen.last().unwrap() < p.len() as u64);
        // Cut anywhere, it is the same error as from a reader.
        for cut in [1, 2, 3, 1000, p.len() / 2, p.len() - 1] {
            parse(&p[..cut]).unwrap_err();
        }
    }

    // pickle.dumps({'a': [1, 2**64 - 1, -5, 1.5, None, True, 'x', b'y', (1, 2)]}, protocol=4)
    // written out by hand, with a shared (memoized) list.
    #[test]
    fn reads_basic_values() {
        let mut p = vec![0x80, 4, op::EMPTY_DICT, op::MEMOIZE];
        p.extend([op::SHORT_BINUNICODE, 1, b'a', op::MEMOIZE]);
        p.extend([op::EMPTY_LIST, op::MEMOIZE, op::MARK]);
        p.extend([op::BININT1, 1]);
        p.extend([
            op::LONG1,
            9,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0,
        ]);
        p.extend([op::BININT, 0xfb, 0xff, 0xff, 0xff]);
        p.push(op::BINFLOAT);
        p.extend(1.5f64.to_be_bytes());
        p.extend([op::NONE, op::NEWTRUE]);
        p.extend([op::SHORT_BINUNICODE, 1, b'x', op::MEMOIZE]);
        p.extend([op::SHORT_BINBYTES, 1, b'y', op::MEMOIZE]);
        p.extend([op::BININT1, 1, op::BININT1, 2, op::TUPLE2, op::MEMOIZE]);
        p.extend([op::APPENDS]);
        p.extend([op::SETITEM]);
        p.extend([
            op::SHORT_BINUNICODE,
            1,
            b'b',
            op::BINGET,
            2,
            op::SETITEM,
            op::STOP,
        ]);
        let v = parse(&p).unwrap();
        let list = Value::List(vec![
            Value::Int(1),
            Value::Int(u64::MAX as i128),
            Value::Int(-5),
            Value::Float(1.5),
            Value::None,
            Value::Bool(true),
            Value::Str("x".into()),
            Value::Bytes(b"y".to_vec()),
            Value::Tuple(vec![Value::Int(1), Value::Int(2)]),
        ]);
        assert_eq!(v.get("a"), Some(&list));
        assert_eq!(v.get("b"), Some(&list));
    }

    #[test]
    fn errors_carry_offsets() {
        assert!(matches!(
            parse(b""),
            Err(PickleError::NotAPickle { found: 0 })
        ));
        assert!(matches!(
            parse(b"{}"),
            Err(PickleError::NotAPickle { found: b'{' })
        ));
        let e = parse(&[0x80, 4, op::EMPTY_DICT, 0xff]).unwrap_err();
        assert!(
            matches!(
                e,
                PickleError::UnknownOpcode {
                    offset: 3,
                    opcode: 0xff
                }
            ),
            "{e}"
        );
        let e = parse(&[0x80, 4, op::SHORT_BINUNICODE, 10, b'a']).unwrap_err();
        assert!(matches!(e, PickleError::Truncated { offset: 5, .. }), "{e}");
        let e = parse(&[0x80, 4, op::BINGET, 7]).unwrap_err();
        assert!(matches!(e, PickleError::Malformed { offset: 2, .. }), "{e}");
        let e = parse(&[0x80, 4, b'c']).unwrap_err();
        assert!(
            matches!(e, PickleError::Unsupported { name: "GLOBAL", .. }),
            "{e}"
        );
        let e = parse(&[0x80, 4, op::APPENDS]).unwrap_err();
        assert_eq!(e.offset(), Some(2));
        let e = parse(&[0x80, 4, op::NONE, op::NONE, op::STOP]).unwrap_err();
        assert!(matches!(e, PickleError::Malformed { .. }), "{e}");
    }

    #[test]
    fn op_reader_reads_long1_like_the_parser() {
        let mut heap = Heap::default();
        for v in [
            0i128,
            1,
            -1,
            255,
            -129,
            1 << 47,
            -(1 << 55),
            i64::MIN as i128,
            1 << 64,
        ] {
            let mut b = v.to_le_bytes().to_vec();
            // Minimal two's complement, as CPython writes it.
            while b.len() > 1
                && ((b[b.len() - 1] == 0 && b[b.len() - 2] < 0x80)
                    || (b[b.len() - 1] == 0xff && b[b.len() - 2] >= 0x80))
            {
                b.pop();
            }
            if v == 0 {
                b.clear();
            }
            let mut p = vec![b.len() as u8];
            p.extend(&b);
            p.extend([op::STOP; 8]); // room for the 8-byte window, or not
            for end in [1 + b.len(), p.len()] {
                let mut r = OpReader {
                    buf: &p[..end],
                    pos: 0,
                    heap: &mut heap,
                    memo_start: 0,
                };
                let got = r.atom(op::LONG1).unwrap();
                assert_eq!(r.pos(), 1 + b.len());
                assert_eq!(r.heap().int(got), Some(v), "{v}");
            }
        }
    }

    #[test]
    fn self_reference_is_an_error_not_a_hang() {
        // l = []; l.append(l)
        let p = [
            0x80,
            4,
            op::EMPTY_LIST,
            op::MEMOIZE,
            op::BINGET,
            0,
            op::APPEND,
            op::STOP,
        ];
        assert!(parse(&p).is_err());
    }

    #[test]
    fn small_buffers_and_large_strings() {
        // A string longer than the buffer forces it to grow.
        let s = vec![b'z'; BUF_SIZE + 10];
        let mut p = vec![0x80, 4, op::BINUNICODE8];
        p.extend((s.len() as u64).to_le_bytes());
        p.extend(&s);
        p.push(op::STOP);
        struct OneByte<'a>(&'a [u8]);
        impl Read for OneByte<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(buf.len()).min(7);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let v = load(OneByte(&p)).unwrap();
        assert_eq!(v.as_str().map(str::len), Some(s.len()));
    }

    /// A length no input holds is read as far as the input goes, in a buffer
    /// that grows as bytes arrive: a 14-byte pickle claiming a 512 GiB
    /// string, or a 10-byte one claiming 4 GiB, fails at once.
    #[test]
    fn lengths_are_believed_only_as_far_as_the_input_goes() {
        for (opcode, len) in [
            (op::BINUNICODE8, 1u64 << 39),
            (op::BINBYTES8, 1 << 39),
            (op::BYTEARRAY8, (1 << 40) - 1),
            (op::BINUNICODE, 0xffff_ffff),
            (op::BINBYTES, 0xffff_ffff),
        ] {
            let mut p = vec![0x80, 4, opcode];
            if matches!(opcode, op::BINUNICODE | op::BINBYTES) {
                p.extend((len as u32).to_le_bytes());
            } else {
                p.extend(len.to_le_bytes());
            }
            p.extend(b"abc");
            match parse(&p) {
                Err(PickleError::Truncated { offset, .. }) => assert_eq!(offset, p.len() as u64),
                other => panic!("{opcode:#x}: {other:?}"),
            }
        }
    }

    /// Opcodes that only push (NONE, MARK) fill the stack up to a bound,
    /// whatever the input's length: the stack of a real pickle stays small.
    #[test]
    fn the_stack_is_bounded() {
        for (opcode, bound) in [(op::NONE, MAX_STACK), (op::MARK, MAX_MARKS)] {
            let mut p = vec![0x80, 4];
            p.resize(2 + bound + 10, opcode);
            p.push(op::STOP);
            match parse(&p) {
                Err(PickleError::Malformed { offset, message }) => {
                    assert_eq!(offset, 2 + bound as u64, "{message}");
                    assert!(message.contains("pickle stack"), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// A list holding the same list twice, forty levels deep (a few hundred
    /// bytes, 2^40 values as a tree): building it is refused.
    #[test]
    fn a_bomb_of_shared_lists_is_refused() {
        let mut p = vec![0x80, 4, op::EMPTY_LIST, op::MEMOIZE, op::POP];
        for level in 0..40u8 {
            // [x, x] where x is the list of the level below (memo `level`).
            p.extend([op::EMPTY_LIST, op::MEMOIZE, op::MARK]);
            p.extend([op::BINGET, level, op::BINGET, level, op::APPENDS]);
            if level < 39 {
                p.push(op::POP);
            }
        }
        p.push(op::STOP);
        assert!(p.len() < 700);
        match parse(&p) {
            Err(PickleError::Malformed { message, .. }) => {
                assert!(message.contains("expands"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// Memo indices far apart (80 KB of them once allocated 4 GiB): the memo
    /// holds the entries stored, each still read back, and MEMOIZE stores
    /// at Python's `len(memo)`.
    #[test]
    fn the_memo_takes_memory_for_its_entries_not_their_indices() {
        let puts = 16_000u32;
        let mut p = vec![0x80, 4, op::NONE];
        for i in 1..=puts {
            p.push(op::LONG_BINPUT);
            p.extend((i * 65_535).to_le_bytes());
        }
        // Read the last back; MEMOIZE a True at index `puts`.
        p.extend([op::POP, op::LONG_BINGET]);
        p.extend((puts * 65_535).to_le_bytes());
        p.extend([op::POP, op::NEWTRUE, op::MEMOIZE, op::POP, op::LONG_BINGET]);
        p.extend(puts.to_le_bytes());
        p.push(op::STOP);
        let mut parser = Parser::new(&p[..], &|_| {});
        assert_eq!(parser.run(&mut KeepAll).unwrap(), Val::Bool(true));
        let memo = &parser.heap().memo;
        assert_eq!(memo.len(), puts as usize + 1);
        assert!(memo.slots.capacity() < 1024, "{}", memo.slots.capacity());

        // Entries stored ahead join the dense slots as these reach them.
        let p = [
            0x80,
            4,
            op::NONE,
            op::BINPUT,
            2,
            op::BINPUT,
            1,
            op::BINPUT,
            0,
            op::STOP,
        ];
        let mut parser = Parser::new(&p[..], &|_| {});
        parser.run(&mut KeepAll).unwrap();
        let memo = &parser.heap().memo;
        assert_eq!((memo.slots.len(), memo.sparse.len()), (3, 0));
    }

    /// Storing an out-of-line value (an int) at one index over and over
    /// reuses its side entry.
    #[test]
    fn a_memo_index_stored_again_reuses_its_entry() {
        let mut p = vec![0x80, 4];
        for i in 0..1000u16 {
            p.push(op::BININT2);
            p.extend(i.to_le_bytes());
            p.extend([op::BINPUT, 0, op::POP]);
        }
        p.extend([op::BINGET, 0, op::STOP]);
        let mut parser = Parser::new(&p[..], &|_| {});
        assert_eq!(parser.run(&mut KeepAll).unwrap(), Val::Int(999));
        assert_eq!(parser.heap().memo.side.len(), 1);
    }

    /// A list of Nones is 16 bytes a value, and the values held at once are
    /// bounded: past `MAX_HELD`, an error, not gigabytes.
    #[test]
    fn the_values_held_are_bounded() {
        assert_eq!(std::mem::size_of::<Val>(), 16);
        let mut p = vec![0x80, 4, op::EMPTY_LIST];
        let batch = 1 << 16;
        for _ in 0..MAX_HELD / batch + 1 {
            p.push(op::MARK);
            p.resize(p.len() + batch, op::NONE);
            p.push(op::APPENDS);
        }
        p.push(op::STOP);
        match parse(&p) {
            Err(PickleError::Malformed { message, .. }) => {
                assert!(message.contains("values held at once"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// A dict of many distinct keys is indexed past `SCAN_PAIRS`; a key
    /// repeated then still replaces its value.
    #[test]
    fn a_large_dict_keeps_one_value_per_key() {
        let mut p = vec![0x80, 4, op::EMPTY_DICT, op::MARK];
        for k in 0..100u8 {
            p.extend([op::BININT1, k, op::BININT1, k]);
        }
        p.extend([op::BININT1, 7, op::NONE, op::SETITEMS, op::STOP]);
        let value = load(&p[..]).unwrap();
        let Value::Dict(pairs) = value else {
            panic!("{value:?}")
        };
        assert_eq!(pairs.len(), 100);
        assert_eq!(pairs[7], (Value::Int(7), Value::None));
        assert_eq!(pairs[8], (Value::Int(8), Value::Int(8)));
    }
}
