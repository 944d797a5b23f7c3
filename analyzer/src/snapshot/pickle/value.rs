//! Values as the reader keeps them: compact [`Val`]s, the [`Heap`] they point into,
//! and owned [`Value`] trees.

use super::memo::Memo;
use super::vm::{MAX_HELD, malformed};
use super::{MAX_DEPTH, PickleError, TooDeep};
use rustc_hash::FxHashMap;

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
    /// A value a [`Hook`](super::Hook) put in place of a container: `kind` and `id` are the hook's.
    Custom {
        /// Hook-defined kind (0 to 3 are stored compactly in the memo).
        kind: u8,
        /// Hook-defined id.
        id: u32,
    },
    /// A container a [`Hook`](super::Hook) consumed: it exists no more.
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
    /// Items a [`Hook`](super::Hook) consumed instead of storing (their count only).
    pub consumed: u64,
    // What a hook replaced it with: an item batch may name the same container twice
    // (a frame repeated in one stack), and the second mention must see the replacement.
    pub(super) replaced: Option<Val>,
    // The memo slot that refers to this container, so a hook's replacement can be
    // seen by later memo references (u32::MAX: none).
    pub(super) memo: u32,
    // The offset of the opcode that made it, for messages.
    pub(super) offset: u64,
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
    pub(super) strings: Vec<Box<[u8]>>,
    pub(super) string_ids: FxHashMap<Box<[u8]>, StrId>,
    // The string interned last: see `intern`.
    pub(super) last_string: StrId,
    pub(super) bytes: Vec<Vec<u8>>,
    pub(super) big_ints: Vec<i128>,
    pub(super) objs: Vec<Obj>,
    pub(super) free_objs: Vec<ObjId>,
    // Retired in the current item batch: recycled when the batch is done, since items
    // later in the batch may still name them.
    pub(super) retired: Vec<ObjId>,
    // Values held in live containers' items: bounded by `MAX_HELD`.
    pub(super) held: usize,
    // Key to pair index of each dict past `SCAN_PAIRS` pairs.
    pub(super) dict_index: FxHashMap<ObjId, FxHashMap<(u8, u64), u32>>,
    pub(super) memo: Memo,
}

impl Heap {
    /// Interns a string by content.
    pub fn intern(&mut self, s: &[u8]) -> StrId {
        // Every trace entry holds a fresh copy of the same `compile_context` str
        // (`N/A`), usually the string interned last: comparing with it first costs
        // a fraction of hashing.
        if let Some(last) = self.strings.get(self.last_string as usize)
            && same_bytes(last, s)
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
    pub(super) fn long(&mut self, b: &[u8]) -> Val {
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

    pub(super) fn new_obj(&mut self, kind: ObjKind, offset: u64) -> ObjId {
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
    pub(super) fn retire(&mut self, id: ObjId, replacement: Val) {
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
    pub(super) fn recycle(&mut self) {
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
    pub(super) fn hold(&mut self, n: usize, at: u64) -> Result<(), PickleError> {
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

// Whether two byte strings are equal, the short ones (the 3 bytes of `N/A`)
// compared inline: a call to memcmp costs more than the bytes.
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if a.len() <= 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    a == b
}

/// Dicts up to this many pairs are scanned for a repeated key; larger ones
/// are indexed.
pub(super) const SCAN_PAIRS: usize = 32;

// A dict key as a hash key: the variant and its payload's bits (so floats are
// told apart by their bits, where `Val`'s `==` compares them as numbers).
pub(super) fn key_bits(v: Val) -> (u8, u64) {
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
