//! The pickle machine: the buffered input, the opcode loop, and the stack.

use super::memo::PAYLOAD;
use super::op::{self, unsupported_name};
use super::ops::OpReader;
use super::source::{Buf, LOOKAHEAD, Source};
use super::value::{Heap, ObjId, ObjKind, SCAN_PAIRS, Val, key_bits};
use super::{Attach, Hook, PickleError};
use std::io::{self, Read};

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

/// The most items a container's storage is grown by ahead of a batch (see
/// `set_items`): room a snapshot's small dicts fill, and a waste bounded per
/// container when the items do not stay (repeated keys, consumed items), which
/// the `MAX_HELD` count does not see.
pub(super) const RESERVE_MAX: usize = 64;

/// The pickle reader: a stack machine over the opcodes, with the memo and the
/// containers in a [`Heap`].
pub struct Parser<'p, R> {
    src: Source<'p, R>,
    heap: Heap,
    stack: Vec<Val>,
    marks: Vec<usize>,
    protocol: u8,
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

    // Pops the topmost MARK for `name` (SETITEMS, APPENDS), which adds the
    // items above the MARK to the container below it: returns that
    // container and where the items begin on the stack. `kind` names the
    // container in the errors.
    #[inline]
    fn target_below_mark(
        &mut self,
        at: u64,
        name: &str,
        kind: &str,
    ) -> Result<(ObjId, usize), PickleError> {
        let from = self.pop_mark(at)?;
        match from.checked_sub(1).map(|i| self.stack[i]) {
            Some(Val::Obj(o)) => Ok((o, from)),
            Some(_) => Err(malformed(
                at,
                format!("{name} on a value that is not a {kind}"),
            )),
            None => Err(malformed(
                at,
                format!("{name} without a {kind} below the MARK"),
            )),
        }
    }

    // For an opcode that adds the `items` values on top of the stack
    // (SETITEM: 2, APPEND: 1) to the container just below them, above the
    // topmost MARK: returns that container and where the items begin.
    #[inline]
    fn target_below_items(&self, at: u64, items: usize) -> Result<(ObjId, usize), PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() < floor + items + 1 {
            return Err(malformed(at, "stack underflow"));
        }
        Ok((self.top_obj(at, items)?, self.stack.len() - items))
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
        // A run the hook takes at once: consumed, as one by one.
        let run = hook
            .on_append_run(target, &self.stack[from..])
            .min(self.stack.len() - from);
        let t = &mut self.heap.objs[target as usize];
        t.consumed += run as u64;
        // Room for the rest at once, as `set_items`.
        t.items
            .reserve((self.stack.len() - from - run).min(RESERVE_MAX));
        let mut i = from + run;
        while i < self.stack.len() {
            // After an item of another kind (an entry read the generic way, say,
            // around a FRAME), the hook may take a run again.
            if i > from
                && matches!(self.stack[i], Val::Custom { .. })
                && !matches!(self.stack[i - 1], Val::Custom { .. })
            {
                let run = hook
                    .on_append_run(target, &self.stack[i..])
                    .min(self.stack.len() - i);
                if run > 0 {
                    self.heap.objs[target as usize].consumed += run as u64;
                    i += run;
                    continue;
                }
            }
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
            i += 1;
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
        let items = &mut self.heap.objs[target as usize].items;
        let mut fresh = items.is_empty();
        // Room for the batch at once: a dict read the generic way would otherwise grow
        // its storage a few times.
        items.reserve((self.stack.len() - from).min(RESERVE_MAX));
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
        let offset = self.src.offset();
        let mut ops = OpReader {
            buf: &self.src.buf[self.src.pos..self.src.end],
            pos: 0,
            heap: &mut self.heap,
            memo_start: slots,
            offset,
        };
        match hook.decode_dict(list, &mut ops) {
            Some(v) => {
                self.src.pos += ops.pos;
                Ok(Some(v))
            }
            None => {
                self.heap.memo.truncate(slots);
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
        // Grouped by what the opcodes do; each group is inlined back here, so the
        // dispatch stays one jump table.
        match opcode {
            op::BINGET
            | op::LONG_BINGET
            | op::MEMOIZE
            | op::BINPUT
            | op::LONG_BINPUT
            | op::GET
            | op::PUT => self.memo_op(opcode, at),
            op::MARK
            | op::EMPTY_DICT
            | op::EMPTY_LIST
            | op::EMPTY_SET
            | op::EMPTY_TUPLE
            | op::SETITEMS
            | op::SETITEM
            | op::APPENDS
            | op::ADDITEMS
            | op::APPEND
            | op::TUPLE1
            | op::TUPLE2
            | op::TUPLE3
            | op::TUPLE
            | op::FROZENSET
            | op::LIST
            | op::DICT => self.build_op(opcode, at, hook),
            op::SHORT_BINUNICODE
            | op::BINUNICODE
            | op::BINUNICODE8
            | op::SHORT_BINBYTES
            | op::BINBYTES
            | op::BINBYTES8
            | op::BYTEARRAY8
            | op::BININT1
            | op::BININT2
            | op::BININT
            | op::LONG1
            | op::LONG4
            | op::BINFLOAT
            | op::NONE
            | op::NEWTRUE
            | op::NEWFALSE => self.atom_op(opcode, at),
            _ => self.control_op(opcode, at),
        }
    }

    // BINGET, BINPUT and their kin: values put in and read back from the memo.
    #[inline(always)]
    fn memo_op(&mut self, opcode: u8, at: u64) -> Result<bool, PickleError> {
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
            // Not this group's (`step` sends none): handled as any other.
            _ => return self.control_op(opcode, at),
        }
        Ok(true)
    }

    // MARK and the opcodes that make containers or add items to them.
    #[inline(always)]
    fn build_op<H: Hook>(
        &mut self,
        opcode: u8,
        at: u64,
        hook: &mut H,
    ) -> Result<bool, PickleError> {
        match opcode {
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
                let (target, from) = self.target_below_mark(at, "SETITEMS", "dict")?;
                self.set_items(target, from, at, hook)?;
            }
            op::SETITEM => {
                let (target, from) = self.target_below_items(at, 2)?;
                self.set_items(target, from, at, hook)?;
            }
            op::APPENDS | op::ADDITEMS => {
                let (target, from) = self.target_below_mark(at, "APPENDS", "list")?;
                self.append_items(target, from, at, hook)?;
            }
            op::APPEND => {
                let (target, from) = self.target_below_items(at, 1)?;
                self.append_items(target, from, at, hook)?;
            }
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
            // Not this group's (`step` sends none): handled as any other.
            _ => return self.control_op(opcode, at),
        }
        Ok(true)
    }

    // Strings, bytes, ints, floats and the constants: one value pushed.
    #[inline(always)]
    fn atom_op(&mut self, opcode: u8, at: u64) -> Result<bool, PickleError> {
        match opcode {
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
            // Not this group's (`step` sends none): handled as any other.
            _ => return self.control_op(opcode, at),
        }
        Ok(true)
    }

    // The stack and stream opcodes (POP, DUP, FRAME, PROTO, STOP), and the rest:
    // opcodes this reader does not support.
    #[inline(always)]
    fn control_op(&mut self, opcode: u8, at: u64) -> Result<bool, PickleError> {
        match opcode {
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

pub(super) fn malformed(offset: u64, message: impl Into<String>) -> PickleError {
    PickleError::Malformed {
        offset,
        message: message.into(),
    }
}
