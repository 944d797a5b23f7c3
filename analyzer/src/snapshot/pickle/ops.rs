//! A cursor over buffered opcodes, for hooks that decode a container's layout
//! themselves.

use super::memo::{PAYLOAD, T_CUSTOM0, T_STR, TAG_SHIFT};
use super::op;
use super::value::{Heap, StrId, Val};

/// A cursor over the buffered input for [`Hook::decode_dict`](super::Hook::decode_dict). Every read returns
/// `None` at the end of the buffer or on anything unexpected: the decoder then gives
/// up and the parser reads the same bytes the generic way, which reports errors with
/// their offsets. Memo slots it adds are removed again if the decoder gives up.
pub struct OpReader<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
    pub(super) heap: &'a mut Heap,
    // The memo's length when the reader started: older slots are read-only.
    pub(super) memo_start: usize,
    // The input offset of `buf[0]`.
    pub(super) offset: u64,
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

    /// The input offset of the buffer's first byte (of position 0): where the
    /// bytes being decoded lie in the whole pickle.
    #[inline(always)]
    pub fn offset(&self) -> u64 {
        self.offset
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

    /// Stores `v` as a MEMOIZE opcode would: for a decoder that checked the opcode
    /// itself, and the same checks as [`OpReader::memo_store`]'s. `None`: a store
    /// `memo_store` would refuse (nothing stored).
    #[inline(always)]
    pub fn memo_push(&mut self, v: Val) -> Option<()> {
        let idx = self.memo_len();
        if idx >= PAYLOAD as usize || !self.heap.memo.sparse.is_empty() {
            return None;
        }
        self.heap.memo.push(v);
        Some(())
    }

    /// Replaces the value of a memo slot this reader stored (a container's slot is
    /// stored before its content is read).
    #[inline]
    pub fn memo_replace(&mut self, idx: usize, v: Val) -> Option<()> {
        if idx < self.memo_start || idx >= self.memo_len() {
            return None;
        }
        let slot = self.heap.memo.encode(v);
        let memo = &mut self.heap.memo;
        if memo.slots[idx] >> TAG_SHIFT >= T_CUSTOM0 {
            memo.epoch += 1;
        }
        memo.slots[idx] = slot;
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
        // up anyway). The position and the slots are locals, kept in registers: through
        // `self`, the compiler stored the position back at every reference.
        let tag = T_CUSTOM0 + kind as u32;
        let slots: &[u32] = &self.heap.memo.slots;
        let buf = self.buf;
        let mut pos = self.pos;
        loop {
            let w: &[u8; 5] = buf.get(pos..pos + 5)?.try_into().ok()?;
            let idx = match w[0] {
                op::BINGET => {
                    pos += 2;
                    w[1] as usize
                }
                op::LONG_BINGET => {
                    pos += 5;
                    u32::from_le_bytes(*w.last_chunk()?) as usize
                }
                op::APPENDS => {
                    self.pos = pos + 1;
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

    /// All the buffered bytes this reader reads from, [`OpReader::pos`] being where it
    /// is. A decoder may read ahead in them with a position of its own (the compiler
    /// keeps a local in a register, where the reader's own is stored back at every
    /// read), and move the reader there with [`OpReader::seek`] before calling its
    /// other methods. The slice outlives the borrow of the reader.
    #[inline(always)]
    pub fn buf(&self) -> &'a [u8] {
        self.buf
    }

    /// Moves the read position to `pos` (at most the buffer's end): bytes a decoder
    /// read itself from [`OpReader::buf`].
    #[inline(always)]
    pub fn seek(&mut self, pos: usize) {
        self.pos = pos.min(self.buf.len());
    }

    /// The memo's epoch: while it stays the same, every memo slot holding a
    /// [`Val::Custom`] value of kinds 0 to 2 keeps it, so what a run of memo
    /// references to such values names (all of it checked once) holds.
    #[inline(always)]
    pub fn memo_epoch(&self) -> u64 {
        self.heap.memo.epoch()
    }

    /// Whether memo slot `idx` was stored before this reader started. Such a slot
    /// is never removed (the slots a decoder that gives up stored are), so what it
    /// holds changes only with the memo's epoch.
    #[inline(always)]
    pub fn memo_settled(&self, idx: usize) -> bool {
        idx < self.memo_start
    }

    /// The str memo slot `idx` holds (a dict key read back with BINGET), if it holds
    /// one. Tested by the slot's tag, with no `Val` built.
    #[inline(always)]
    pub fn memo_str(&self, idx: usize) -> Option<StrId> {
        let slot = *self.heap.memo.slots.get(idx)?;
        (slot >> TAG_SHIFT == T_STR).then_some(slot & PAYLOAD)
    }

    /// The id of the [`Val::Custom`] value of `kind` (0 to 2) that memo slot `idx`
    /// holds, if it holds one: what [`OpReader::memo_value`] would give as
    /// `Val::Custom { kind, id }`, tested by the slot's tag.
    #[inline(always)]
    pub fn memo_custom(&self, idx: usize, kind: u8) -> Option<u32> {
        let slot = *self.heap.memo.slots.get(idx)?;
        (kind <= 2 && slot >> TAG_SHIFT == T_CUSTOM0 + kind as u32).then_some(slot & PAYLOAD)
    }

    /// Asks for memo slot `idx` to be brought into cache, without waiting for it
    /// (see [`OpReader::memo_custom`]).
    #[inline(always)]
    pub fn prefetch_memo(&self, idx: usize) {
        if let Some(slot) = self.heap.memo.slots.get(idx) {
            crate::prefetch::prefetch_read(slot);
        }
    }

    /// The value memo slot `idx` holds (`None`: nothing stored there).
    #[inline(always)]
    pub fn memo_value(&self, idx: usize) -> Option<Val> {
        self.heap.memo.get(idx as u64)
    }

    /// The memo index of the reference whose opcode is at `buf[at]` (BINGET or
    /// LONG_BINGET), with the position after it. `None` for any other opcode, or
    /// past the buffer's end.
    #[inline(always)]
    pub fn memo_ref_at(buf: &[u8], at: usize) -> Option<(usize, usize)> {
        match *buf.get(at)? {
            op::BINGET => Some((*buf.get(at + 1)? as usize, at + 2)),
            op::LONG_BINGET => {
                let w: [u8; 4] = buf.get(at + 1..at + 5)?.try_into().ok()?;
                Some((u32::from_le_bytes(w) as usize, at + 5))
            }
            _ => None,
        }
    }

    /// The position of the APPENDS that closes a MARK batch of memo references
    /// (BINGET, LONG_BINGET) beginning at `buf[at]`, found without reading the memo.
    /// `None` if anything else comes first, or the buffer ends.
    #[inline]
    pub fn memo_refs_end(buf: &[u8], mut at: usize) -> Option<usize> {
        loop {
            match *buf.get(at)? {
                op::BINGET => at += 2,
                op::LONG_BINGET => at += 5,
                op::APPENDS => return Some(at),
                _ => return None,
            }
        }
    }

    /// The value of the int opcode `opcode` whose argument starts at `buf[at]`, with
    /// the argument's length: BININT1, BININT2, BININT, and LONG1 of 1 to 8 bytes (read
    /// with one load of an 8-byte window, so not within 8 bytes of the buffer's end).
    /// `None` for any other opcode or argument, which [`OpReader::atom`] reads.
    #[inline(always)]
    pub fn int_at(buf: &[u8], at: usize, opcode: u8) -> Option<(i64, usize)> {
        match opcode {
            op::BININT1 => Some((*buf.get(at)? as i64, 1)),
            op::BININT2 => {
                let a: [u8; 2] = buf.get(at..at + 2)?.try_into().ok()?;
                Some((u16::from_le_bytes(a) as i64, 2))
            }
            op::BININT => {
                let a: [u8; 4] = buf.get(at..at + 4)?.try_into().ok()?;
                Some((i32::from_le_bytes(a) as i64, 4))
            }
            op::LONG1 => {
                // Up to 8 bytes (addresses, times): the little-endian window after the
                // length, shifted to sign-extend its first n bytes.
                let n = *buf.get(at)? as usize;
                let w: [u8; 8] = buf.get(at + 1..at + 9)?.try_into().ok()?;
                if !(1..=8).contains(&n) {
                    return None;
                }
                let shift = 64 - 8 * n as u32;
                Some((((u64::from_le_bytes(w) << shift) as i64) >> shift, 1 + n))
            }
            _ => None,
        }
    }

    /// Reads a new str (SHORT_BINUNICODE or BINUNICODE, whose opcode was just read) and
    /// the memo store after it, as [`OpReader::atom`] does, inline.
    #[inline(always)]
    pub fn new_str(&mut self, opcode: u8) -> Option<StrId> {
        let n = match opcode {
            op::SHORT_BINUNICODE => self.u8()? as usize,
            op::BINUNICODE => u32::from_le_bytes(self.array()?) as usize,
            _ => return None,
        };
        let s = self.bytes(n)?;
        let id = self.heap.intern(s);
        self.memo_store(Val::Str(id))?;
        Some(id)
    }

    /// [`OpReader::new_str`] for a str that is most often `known`, interned as
    /// `id` already: those bytes are compared first, and that id taken with no
    /// lookup in the heap's table (the `N/A` of every trace entry's
    /// `compile_context`). Any other str is interned as `new_str` does.
    #[inline(always)]
    pub fn new_str_as(&mut self, opcode: u8, known: &[u8], id: StrId) -> Option<StrId> {
        if opcode == op::SHORT_BINUNICODE
            && self.buf.get(self.pos) == Some(&(known.len() as u8))
            && self.buf.get(self.pos + 1..self.pos + 1 + known.len()) == Some(known)
        {
            debug_assert_eq!(self.heap.str_bytes(id), known);
            self.pos += 1 + known.len();
            self.memo_store(Val::Str(id))?;
            return Some(id);
        }
        self.new_str(opcode)
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
        self.memo_str(idx)
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
