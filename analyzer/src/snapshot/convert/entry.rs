//! Trace entries decoded straight from the opcodes, with no dict built.
//!
//! Nearly all of a snapshot is `device_traces` entries in one layout, CPython's:
//! `} MEMOIZE ( key value key value ... u`, keys being memoized strs (read back with
//! BINGET after their first use) and values ints, strs, memo references, or the frames
//! list `] MEMOIZE ( BINGET ... e` whose frames were all seen before. Reading that
//! layout here costs a fraction of building the dict in the parser's arena and reading
//! it back; anything else makes [`decode`] give up, and the parser then reads the
//! dict the generic way (through `Collector::on_append`), with the same result.

use super::{
    CUSTOM_FRAME, CUSTOM_STACK, Collector, EntryFields, F_ACTION, F_ADDR, F_COMPILE, F_FRAMES,
    F_POOL, F_SIZE, F_STREAM, F_TEXT, F_TIME,
};
use crate::snapshot::pickle::{OpReader, StrId, Val, op};
use vramtrace_format::PoolId;

/// Decodes the trace entry whose EMPTY_DICT was just read, through its SETITEMS,
/// into `f` (empty before; the caller keeps it in `Collector::pending` if the
/// entry was read). `None`: not the usual layout, or not a trace entry. In a list not
/// `known` to hold trace entries, only a dict whose first key is `action` (as
/// PyTorch writes them) is tried, so that the other dicts (blocks, frames) are not
/// read twice.
pub(super) fn decode(
    c: &mut Collector,
    ops: &mut OpReader<'_>,
    known: bool,
    f: &mut EntryFields,
) -> Option<()> {
    // The dict will be consumed on its APPENDS; a later memo reference sees that, as
    // it would after the generic path.
    ops.memo_store(Val::Consumed)?;
    if ops.u8()? != op::MARK {
        return None;
    }
    let mut known = known;
    // The common opcodes (memo references, ints) are read here with a position of
    // our own, which stays in a register; `ops` is moved to it (`seek`) before the
    // rest are read through it, and `at` taken back after.
    let buf = ops.buf();
    let mut at = ops.pos();
    // What the entry's frames will need, asked for now so that it is in
    // cache when they are read (see `FramesCache::look_ahead`).
    if let Some(idx) = c.frames_cache.look_ahead(buf, at) {
        ops.prefetch_memo(idx);
    }
    // Nothing the decoder does changes the epoch (its own memo stores append).
    let epoch = ops.memo_epoch();
    c.key_cache.forget_unless(epoch);
    c.shape.forget_unless(epoch);
    // The keys that follow the learned shape, with no lookup. Its first key is
    // `action`: a dict it matches is tried, `known` or not, as the generic loop
    // below would.
    let mut matched = if c.shape.usual {
        usual_keys(c, ops, f, &mut at)?
    } else {
        0
    };
    while let Some((key, field, len)) = c.shape.key(matched, buf, at) {
        at += len;
        matched += 1;
        usual_value(c, ops, f, &mut at, key, field)?;
    }
    if matched > 0 && matched == c.shape.len && buf.get(at) == Some(&op::SETITEMS) {
        // The whole shape, and the dict's end (nearly every entry): all the
        // generic loop below would do is read the SETITEMS.
        at += 1;
    } else {
        known |= matched > 0;
        // The rest, from the first key off the shape (if any), the generic way; the
        // shape is learned again from there, so that it is this entry's keys.
        let mut learning = c.shape.truncate(matched);
        loop {
            let opcode = *buf.get(at)?;
            if opcode == op::SETITEMS {
                at += 1;
                break;
            }
            // The key: a memo reference to its str after its first use.
            let (key, field) = match OpReader::memo_ref_at(buf, at) {
                Some((idx, next)) => {
                    let key = match c.key_cache.get(idx) {
                        Some(known_key) => known_key,
                        None => {
                            let key = ops.memo_str(idx)?;
                            let field = c.field(key);
                            if ops.memo_settled(idx) {
                                c.key_cache.put(idx, key, field);
                            }
                            (key, field)
                        }
                    };
                    if learning {
                        learning =
                            ops.memo_settled(idx) && c.shape.push(&buf[at..next], key.0, key.1);
                    }
                    at = next;
                    key
                }
                None => {
                    learning = false;
                    ops.seek(at + 1);
                    let key = ops.str_atom(opcode)?;
                    at = ops.pos();
                    (key, c.field(key))
                }
            };
            if !known && field != F_ACTION {
                return None;
            }
            known = true;
            value(c, ops, f, &mut at, key, field)?;
        }
    }
    ops.seek(at);
    f.action?;
    match ends_entry(buf, at) {
        Some(true) => Some(()),
        _ => None,
    }
}

/// Whether the opcode at `buf[at]`, after an entry's SETITEMS, ends the entry:
/// nothing may add to the dict after its SETITEMS (a second batch, a SETITEM),
/// so the next opcode must begin the next item or end the list's batch. A FRAME
/// of protocol 4 may come first (CPython begins a frame before an object, the
/// next entry's as any): it only frames the bytes, and the opcode after it
/// decides. (Given up on here, the entry would be read again the generic way,
/// and its frames list's memo slot, removed, would change the memo's epoch.)
/// `None`: the buffer ends first.
#[inline(always)]
pub(super) fn ends_entry(buf: &[u8], at: usize) -> Option<bool> {
    let mut opcode = *buf.get(at)?;
    if opcode == op::FRAME {
        opcode = *buf.get(at + 9)?;
    }
    Some(matches!(
        opcode,
        op::EMPTY_DICT | op::APPENDS | op::BINGET | op::LONG_BINGET
    ))
}

/// The keys of a trace entry as PyTorch 2.x writes them (before the private pools'
/// `pool_id` of 2.12 and the `internal_metadata` of 2.15; the snapshots of most
/// versions): a shape that begins with them is read by [`usual_keys`].
pub(super) const USUAL: [u8; 8] = [
    F_ACTION, F_ADDR, F_SIZE, F_STREAM, F_TIME, F_COMPILE, F_TEXT, F_FRAMES,
];

// The loop over the shape's keys of `decode`, unrolled for a shape that begins
// with the `USUAL` keys (`c.shape.usual`): each key's field is known where its
// value is read, so that no field is dispatched on at run time. Each step does
// what the loop's does for that key; at the first key whose bytes are not the
// shape's, the number of keys read is returned, and the loop goes on from there.
// `None`: not the usual layout, as the loop's.
#[inline(always)]
fn usual_keys(
    c: &mut Collector,
    ops: &mut OpReader<'_>,
    f: &mut EntryFields,
    at: &mut usize,
) -> Option<usize> {
    let buf = ops.buf();
    macro_rules! step {
        ($i:literal) => {
            match c.shape.usual_key($i, buf, *at) {
                Some((key, field, len)) => {
                    debug_assert_eq!(field, USUAL[$i]);
                    *at += len;
                    usual_value(c, ops, f, at, key, USUAL[$i])?;
                }
                None => return Some($i),
            }
        };
    }
    step!(0);
    step!(1);
    step!(2);
    step!(3);
    step!(4);
    step!(5);
    // Two keys before `frames`: the slot `look_ahead` asked for is in cache.
    c.frames_cache.prefetch_list();
    step!(6);
    step!(7);
    Some(USUAL.len())
}

/// `compile_context` outside torch.compile, as nearly every entry has it: a
/// SHORT_BINUNICODE of 3 bytes, "N/A", and the MEMOIZE after it.
pub(super) const NA: [u8; 6] = [op::SHORT_BINUNICODE, 3, b'N', b'/', b'A', op::MEMOIZE];

// [`value`] for a key of the learned shape: the value its field nearly always
// has in a trace entry (an int for the number fields, a memo reference to a str
// for `action` and `user_metadata`, to a stack for `frames`, a fresh "N/A" for
// `compile_context`) is read here with no more checks than that layout needs, so
// the same as `value` would read it; any other value, from its first byte (nothing
// was read or stored before that), is read by `value`.
#[inline(always)]
fn usual_value(
    c: &mut Collector,
    ops: &mut OpReader<'_>,
    f: &mut EntryFields,
    at: &mut usize,
    key: StrId,
    field: u8,
) -> Option<()> {
    let buf = ops.buf();
    match field {
        F_ADDR | F_SIZE | F_STREAM | F_TIME => {
            if let Some(&opcode) = buf.get(*at)
                && let Some((i, len)) = OpReader::int_at(buf, *at + 1, opcode)
            {
                *at += 1 + len;
                f.set_int(field, i.into());
                return Some(());
            }
        }
        F_ACTION => {
            if let Some((idx, next)) = OpReader::memo_ref_at(buf, *at)
                && let Some(s) = ops.memo_str(idx)
            {
                *at = next;
                f.action = Some(s);
                return Some(());
            }
        }
        F_TEXT => {
            if let Some((idx, next)) = OpReader::memo_ref_at(buf, *at)
                && let Some(s) = ops.memo_str(idx)
            {
                *at = next;
                // `EntryFields::set`: only a non-empty str is kept (the empty
                // one, interned up front, is known by its id).
                if s != c.k.empty && !ops.heap().str_bytes(s).is_empty() {
                    f.text = s;
                    f.special = true;
                }
                return Some(());
            }
        }
        F_FRAMES => {
            c.frames_cache.frames_at(*at);
            match buf.get(*at) {
                Some(&op::EMPTY_LIST) => {
                    ops.seek(*at + 1);
                    let stack = frames_list(c, ops)?;
                    *at = ops.pos();
                    f.has_frames = true;
                    if let Val::Custom {
                        kind: CUSTOM_STACK,
                        id,
                    } = stack
                    {
                        f.e.stack = id;
                    }
                    return Some(());
                }
                _ => {
                    if let Some((idx, next)) = OpReader::memo_ref_at(buf, *at)
                        && let Some(id) = ops.memo_custom(idx, CUSTOM_STACK)
                    {
                        *at = next;
                        f.has_frames = true;
                        f.e.stack = id;
                        return Some(());
                    }
                }
            }
        }
        F_COMPILE if buf.get(*at..*at + NA.len()) == Some(&NA[..]) => {
            ops.seek(*at + NA.len() - 1);
            ops.memo_store(Val::Str(c.k.not_applicable))?;
            *at = ops.pos();
            f.compile_context = Some(c.k.not_applicable);
            return Some(());
        }
        _ => {}
    }
    value(c, ops, f, at, key, field)
}

// Reads the value of `key` (which fills `field`) at `buf[*at]` into `f`, moving `at`
// past it. `None`: not the usual layout.
#[inline(always)]
fn value(
    c: &mut Collector,
    ops: &mut OpReader<'_>,
    f: &mut EntryFields,
    at: &mut usize,
    key: StrId,
    field: u8,
) -> Option<()> {
    let buf = ops.buf();
    let opcode = *buf.get(*at)?;
    // The values of nearly every entry: ints of the number fields, and memo
    // references (the action's str, a shared frames list, a shared str).
    if matches!(field, F_ADDR | F_SIZE | F_STREAM | F_TIME)
        && let Some((i, len)) = OpReader::int_at(buf, *at + 1, opcode)
    {
        *at += 1 + len;
        f.set_int(field, i.into());
        return Some(());
    }
    if field != F_POOL
        && let Some((idx, next)) = OpReader::memo_ref_at(buf, *at)
    {
        *at = next;
        let value = ops.memo_value(idx)?;
        if matches!(value, Val::Obj(_)) {
            // A shared container (the generic path would look into a list under
            // `frames`): not the usual layout.
            return None;
        }
        return f.set(ops.heap(), key, field, value);
    }
    ops.seek(*at + 1);
    let value = if opcode == op::EMPTY_LIST && field == F_FRAMES {
        frames_list(c, ops)?
    } else if field == F_POOL && opcode != op::BINGET && opcode != op::LONG_BINGET {
        let pool = pool_tuple(ops, opcode)?;
        f.pool = Some(pool);
        f.special |= !pool.is_default();
        // Nearly every entry's pool is the default: its slot costs nothing
        // more than a consumed dict's.
        let v = if pool.is_default() {
            Val::Consumed
        } else {
            c.pool_value(pool)
        };
        ops.memo_store(v)?;
        *at = ops.pos();
        return Some(());
    } else if matches!(opcode, op::SHORT_BINUNICODE | op::BINUNICODE) {
        // `compile_context`'s "N/A", a fresh str in every entry.
        Val::Str(ops.new_str_as(opcode, b"N/A", c.k.not_applicable)?)
    } else {
        match ops.atom(opcode)? {
            Val::Obj(_) => return None,
            v => v,
        }
    };
    *at = ops.pos();
    if field != F_POOL || !c.shared_pool(f, field, value) {
        f.set(ops.heap(), key, field, value)?;
    }
    Some(())
}

// A `pool_id` whose first opcode was just read: two counters and TUPLE2, as
// CPython writes a pair (its memo store, if any, is left to the caller).
fn pool_tuple(ops: &mut OpReader<'_>, opcode: u8) -> Option<PoolId> {
    let counter = |ops: &mut OpReader<'_>, opcode: u8| {
        let v = ops.atom(opcode)?;
        u64::try_from(ops.heap().int(v)?).ok()
    };
    let a = counter(ops, opcode)?;
    let opcode = ops.u8()?;
    let b = counter(ops, opcode)?;
    if ops.u8()? != op::TUPLE2 {
        return None;
    }
    Some(PoolId(a, b))
}

// A frames list whose EMPTY_LIST was just read, as a local stack's handle (of the
// frames' memo identities, which the generic path turned into local frames).
fn frames_list(c: &mut Collector, ops: &mut OpReader<'_>) -> Option<Val> {
    let slot = ops.memo_len();
    let memoized = ops.memo_store(Val::Consumed)?;
    // A list of one batch of memo references, byte for byte one read before (the
    // same traceback in a list of its own): the same stack, without the references
    // read again, nor the stack handed to the logging thread to intern.
    let epoch = ops.memo_epoch();
    let in_use = c.frames_cache.in_use(epoch);
    // Found by its first bytes (no scan of the references to their end, nor a hash
    // of them all), else by all of them.
    let by_prefix = if in_use {
        c.frames_cache.by_prefix(ops.buf(), ops.pos())
    } else {
        None
    };
    let handle = if let Some((handle, end)) = by_prefix {
        ops.seek(end);
        handle
    } else {
        let single = if in_use {
            single_batch(ops.buf(), ops.pos())
        } else {
            None
        };
        let cached = single.and_then(|(refs, _)| c.frames_cache.get(refs, epoch));
        match (cached, single) {
            (Some(handle), Some((refs, end))) => {
                c.frames_cache.remember_prefix(refs, handle);
                ops.seek(end);
                handle
            }
            _ => {
                read_frames(c, ops)?;
                let handle = c.scratch_stack_handle();
                if let Some((refs, _)) = single {
                    c.frames_cache.insert(refs, handle, epoch);
                }
                handle
            }
        }
    };
    let stack = Val::Custom {
        kind: CUSTOM_STACK,
        id: handle,
    };
    if memoized {
        ops.memo_replace(slot, stack)?;
    }
    Some(stack)
}

// The memo references of a list whose content begins at `buf[at]`, when they are one
// MARK batch and nothing else (the list ends after its APPENDS): their bytes, and the
// position after the APPENDS. `None` for any other list, which `read_frames` reads.
pub(super) fn single_batch(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    if *buf.get(at)? != op::MARK {
        return None;
    }
    let end = OpReader::memo_refs_end(buf, at + 1)?;
    ends_list(buf, end)?.then(|| (&buf[at + 1..end], end + 1))
}

// Whether `buf[end]` is an APPENDS that ends its list: nothing more is added to the
// list after it. `None`: the buffer ends first.
#[inline]
pub(super) fn ends_list(buf: &[u8], end: usize) -> Option<bool> {
    if *buf.get(end)? != op::APPENDS {
        return Some(false);
    }
    // What `read_frames` would take for more of the list: another batch, or one
    // reference and APPEND.
    let more = match *buf.get(end + 1)? {
        op::MARK => true,
        op::BINGET => *buf.get(end + 3)? == op::APPEND,
        op::LONG_BINGET => *buf.get(end + 6)? == op::APPEND,
        _ => false,
    };
    Some(!more)
}

// Reads the frames of a list whose memo store was just read into `c.scratch`: their
// local frame ids. `None` if one is not a frame seen before (or anything else).
fn read_frames(c: &mut Collector, ops: &mut OpReader<'_>) -> Option<()> {
    let frame = |v: Val| match v {
        Val::Custom {
            kind: CUSTOM_FRAME,
            id,
        } => Some(id),
        // A frame dict not seen before (or anything else): not the usual layout.
        _ => None,
    };
    c.scratch.clear();
    // CPython appends in batches of 1000 (MARK ... APPENDS), a last single item with
    // APPEND.
    loop {
        match ops.peek()? {
            op::MARK => {
                ops.u8();
                ops.custom_refs(CUSTOM_FRAME, &mut c.scratch)?;
            }
            opcode @ (op::BINGET | op::LONG_BINGET) => {
                // One item and APPEND, or (an empty list) the entry's next key.
                let at = ops.pos();
                ops.u8();
                let v = ops.atom(opcode)?;
                if ops.peek() != Some(op::APPEND) {
                    ops.rewind(at);
                    break;
                }
                ops.u8();
                c.scratch.push(frame(v)?);
            }
            _ => break,
        }
    }
    Some(())
}

/// The most keys a [`Shape`] holds: PyTorch writes 8 to 11 per entry.
const SHAPE_KEYS: usize = 16;

/// The keys of the trace entry read last, in its order: CPython writes every entry
/// of a list with the same keys in the same order, each a memo reference to the str
/// it memoized the first time, so the same bytes. While an entry's key bytes are the
/// expected ones, the key and its field are taken from here, with no memo or cache
/// lookup (one compare per key); from the first that is not, the entry is read the
/// generic way and the shape learned again from there. Only references to memo
/// slots stored before their entry began are kept: what those hold changes only
/// with the memo's epoch (see [`KeyCache`]), and everything is forgotten when it
/// does. The first key is always `action`, so that a dict it matches is tried as a
/// trace entry in any list, as the generic way would.
#[derive(Clone)]
pub(super) struct Shape {
    // Key i: the bytes of its memo reference (BINGET or LONG_BINGET and the
    // index, little-endian, in the low bytes of `bytes[i]`, `masks[i]` covering
    // them), and the str and field the reference names, with the reference's
    // length.
    bytes: [u64; SHAPE_KEYS],
    masks: [u64; SHAPE_KEYS],
    keys: [(StrId, u8, u8); SHAPE_KEYS],
    len: usize,
    epoch: u64,
    /// Whether the first keys are the `USUAL` ones, in their order (their fields;
    /// at least that many keys).
    usual: bool,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            bytes: [0; SHAPE_KEYS],
            masks: [0; SHAPE_KEYS],
            keys: [(0, 0, 0); SHAPE_KEYS],
            len: 0,
            epoch: 0,
            usual: false,
        }
    }
}

impl Shape {
    /// Key `i` of the shape, its field and the length of its reference, if the
    /// opcodes at `buf[at..]` are its memo reference. (Read with one load of 8
    /// bytes: not within 8 bytes of the buffer's end, where the generic way reads
    /// it.)
    #[inline(always)]
    pub(super) fn key(&self, i: usize, buf: &[u8], at: usize) -> Option<(StrId, u8, usize)> {
        if i >= self.len {
            return None;
        }
        self.held_key(i, buf, at)
    }

    /// [`Shape::key`] for key `i` of a `usual` shape, whose first keys are the
    /// `USUAL` ones (so `i` is within its length, and is not tested).
    #[inline(always)]
    fn usual_key(&self, i: usize, buf: &[u8], at: usize) -> Option<(StrId, u8, usize)> {
        debug_assert!(self.usual && i < USUAL.len() && i < self.len);
        self.held_key(i, buf, at)
    }

    // Key `i`, which the shape holds, if its reference is at `buf[at..]`.
    #[inline(always)]
    fn held_key(&self, i: usize, buf: &[u8], at: usize) -> Option<(StrId, u8, usize)> {
        let word = u64::from_le_bytes(buf.get(at..at + 8)?.try_into().ok()?);
        if word & self.masks[i] != self.bytes[i] {
            return None;
        }
        let (key, field, len) = self.keys[i];
        Some((key, field, len as usize))
    }

    /// Whether the shape is the `USUAL` keys and no more: the layout of nearly
    /// every entry of PyTorch 2.11 and earlier, which `ahead` reads.
    pub(super) fn is_exactly_usual(&self) -> bool {
        self.usual && self.len == USUAL.len()
    }

    /// The bytes of key `i`'s memo reference (none past the shape's end).
    pub(super) fn reference(&self, i: usize) -> Vec<u8> {
        if i >= self.len {
            return Vec::new();
        }
        let len = self.keys[i].2 as usize;
        self.bytes[i].to_le_bytes()[..len].to_vec()
    }

    /// The memo epoch the shape's keys hold for.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Keeps the first `len` keys; true (to `push` the next ones) if there is
    /// room for more.
    #[inline]
    fn truncate(&mut self, len: usize) -> bool {
        self.len = self.len.min(len);
        self.usual &= self.len >= USUAL.len();
        self.len < SHAPE_KEYS
    }

    /// Appends the key whose memo reference is `reference` (a BINGET or
    /// LONG_BINGET of a slot stored before the entry began), naming the str `key`
    /// that fills `field`. False (nothing kept) if the shape is full, or if this
    /// would be its first key and not `action`.
    #[inline]
    pub(super) fn push(&mut self, reference: &[u8], key: StrId, field: u8) -> bool {
        let i = self.len;
        if i >= SHAPE_KEYS || (i == 0 && field != F_ACTION) || reference.len() > 8 {
            return false;
        }
        let mut word = [0; 8];
        word[..reference.len()].copy_from_slice(reference);
        self.bytes[i] = u64::from_le_bytes(word);
        self.masks[i] = u64::MAX >> (64 - 8 * reference.len() as u32);
        self.keys[i] = (key, field, reference.len() as u8);
        self.len += 1;
        if self.len == USUAL.len() {
            self.usual = self.keys.iter().map(|k| k.1).take(USUAL.len()).eq(USUAL);
        }
        true
    }

    /// Forgets everything if the memo's epoch is no longer `epoch`.
    #[inline(always)]
    fn forget_unless(&mut self, epoch: u64) {
        if epoch != self.epoch {
            self.len = 0;
            self.usual = false;
            self.epoch = epoch;
        }
    }
}

/// Slots of [`KeyCache`] (a power of two).
const KEY_SLOTS: usize = 64;

/// The dict keys read lately, by the memo index they were read back from: a trace
/// entry's keys are the same few memo references in every entry, and this saves
/// the memo lookup, the check of the slot's tag and the lookup of the key's field
/// for each. Direct-mapped by the index's low bits. Only slots stored before the
/// entry began are kept (the slots of a decoder that gives up are removed, and
/// stored again with other values): those change only with the memo's epoch, and
/// everything is forgotten when it does.
pub(super) struct KeyCache {
    // (memo index, key, field); u64::MAX: empty (memo indices are u32).
    slots: [(u64, StrId, u8); KEY_SLOTS],
    epoch: u64,
}

impl Default for KeyCache {
    fn default() -> Self {
        KeyCache {
            slots: [(u64::MAX, 0, 0); KEY_SLOTS],
            epoch: 0,
        }
    }
}

impl KeyCache {
    /// The key read back from memo slot `idx`, and its field, if known.
    #[inline(always)]
    fn get(&self, idx: usize) -> Option<(StrId, u8)> {
        let (at, key, field) = self.slots[idx % KEY_SLOTS];
        (at == idx as u64).then_some((key, field))
    }

    /// Remembers that memo slot `idx` holds the str `key`, which fills `field`.
    #[inline]
    fn put(&mut self, idx: usize, key: StrId, field: u8) {
        self.slots[idx % KEY_SLOTS] = (idx as u64, key, field);
    }

    /// Forgets everything if the memo's epoch is no longer `epoch`.
    #[inline(always)]
    fn forget_unless(&mut self, epoch: u64) {
        if epoch != self.epoch {
            *self = KeyCache {
                epoch,
                ..KeyCache::default()
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_batch_is_told_from_a_longer_list() {
        use op::{APPEND, APPENDS, BINGET, LONG_BINGET, MARK, SETITEMS};
        let one = [MARK, BINGET, 3, LONG_BINGET, 1, 0, 0, 0, APPENDS, SETITEMS];
        assert_eq!(single_batch(&one, 0), Some((&one[1..8], 9)));
        // A second batch, or a last item with APPEND: read the usual way.
        let two = [MARK, BINGET, 3, APPENDS, MARK, BINGET, 4, APPENDS, SETITEMS];
        assert_eq!(single_batch(&two, 0), None);
        let last = [MARK, BINGET, 3, APPENDS, BINGET, 4, APPEND, SETITEMS];
        assert_eq!(single_batch(&last, 0), None);
        // The next key (a memo reference, no APPEND after it) ends the list.
        let key = [MARK, BINGET, 3, APPENDS, BINGET, 4, BINGET, 5, SETITEMS];
        assert_eq!(single_batch(&key, 0), Some((&key[1..3], 4)));
        // Anything but references, or the buffer's end.
        assert_eq!(single_batch(&[MARK, op::NONE, APPENDS, SETITEMS], 0), None);
        assert_eq!(single_batch(&one[..9], 0), None);
        assert_eq!(single_batch(&one, 1), None);
    }

    #[test]
    fn a_shape_matches_the_bytes_of_its_references() {
        use op::{BINGET, BININT1, LONG_BINGET};
        let mut shape = Shape::default();
        shape.forget_unless(1);
        // The first key must be `action`.
        assert!(!shape.push(&[BINGET, 3], 10, F_ADDR));
        assert!(shape.push(&[BINGET, 3], 10, F_ACTION));
        assert!(shape.push(&[LONG_BINGET, 1, 2, 0, 0], 11, F_ADDR));
        let buf = [
            BINGET,
            3,
            LONG_BINGET,
            1,
            2,
            0,
            0,
            BININT1,
            0,
            0,
            0,
            0,
            0,
            0,
        ];
        assert_eq!(shape.key(0, &buf, 0), Some((10, F_ACTION, 2)));
        assert_eq!(shape.key(1, &buf, 2), Some((11, F_ADDR, 5)));
        // Another key's bytes, anything else, past the shape's end.
        assert_eq!(shape.key(1, &buf, 0), None);
        assert_eq!(shape.key(0, &buf, 2), None);
        assert_eq!(shape.key(0, &buf, 7), None);
        assert_eq!(shape.key(2, &buf, 7), None);
        // The same slot read back with LONG_BINGET: other bytes, not matched.
        let long = [LONG_BINGET, 3, 0, 0, 0, BININT1, 0, 0, 0];
        assert_eq!(shape.key(0, &long, 0), None);
        // Within 8 bytes of the buffer's end: left to the generic way.
        assert_eq!(shape.key(0, &buf[..7], 0), None);
        assert!(shape.truncate(1));
        assert_eq!(shape.key(0, &buf, 0), Some((10, F_ACTION, 2)));
        assert_eq!(shape.key(1, &buf, 2), None);
        // A new epoch forgets it.
        shape.forget_unless(2);
        assert_eq!(shape.key(0, &buf, 0), None);
        // No more than `SHAPE_KEYS` keys.
        for i in 0..SHAPE_KEYS {
            assert!(shape.push(&[BINGET, i as u8], i as StrId, F_ACTION));
        }
        assert!(!shape.push(&[BINGET, 99], 99, F_SIZE));
        assert!(!shape.truncate(SHAPE_KEYS));
        assert_eq!(
            shape.key(SHAPE_KEYS - 1, &[BINGET, 15, 0, 0, 0, 0, 0, 0], 0),
            Some((15, F_ACTION, 2))
        );
    }

    #[test]
    fn a_shape_is_usual_while_it_begins_with_the_usual_keys() {
        use op::BINGET;
        let mut shape = Shape::default();
        shape.forget_unless(1);
        for (i, &field) in USUAL.iter().enumerate() {
            assert!(!shape.usual);
            assert!(shape.push(&[BINGET, i as u8], i as StrId, field));
        }
        assert!(shape.usual);
        // More keys after them keep it; fewer than them do not.
        assert!(shape.push(&[BINGET, 20], 20, F_POOL));
        assert!(shape.usual);
        assert!(shape.truncate(USUAL.len()));
        assert!(shape.usual);
        assert!(shape.truncate(USUAL.len() - 1));
        assert!(!shape.usual);
        // The same keys pushed again make it usual again; a new epoch forgets it.
        assert!(shape.push(&[BINGET, 7], 7, USUAL[7]));
        assert!(shape.usual);
        shape.forget_unless(2);
        assert!(!shape.usual);
        // Another order of the same keys is not usual.
        let mut other = USUAL;
        other.swap(1, 2);
        for (i, &field) in other.iter().enumerate() {
            assert!(shape.push(&[BINGET, i as u8], i as StrId, field));
        }
        assert!(!shape.usual);
    }

    #[test]
    fn keys_are_known_by_memo_index_within_an_epoch() {
        let mut keys = KeyCache::default();
        keys.forget_unless(3);
        assert_eq!(keys.get(5), None);
        keys.put(5, 40, F_ADDR);
        assert_eq!(keys.get(5), Some((40, F_ADDR)));
        // Another index of the same slot replaces it; an index is never mistaken.
        keys.put(5 + KEY_SLOTS, 41, F_SIZE);
        assert_eq!(keys.get(5), None);
        assert_eq!(keys.get(5 + KEY_SLOTS), Some((41, F_SIZE)));
        assert_eq!(keys.get(u32::MAX as usize), None);
        keys.forget_unless(3);
        assert_eq!(keys.get(5 + KEY_SLOTS), Some((41, F_SIZE)));
        keys.forget_unless(4);
        assert_eq!(keys.get(5 + KEY_SLOTS), None);
    }
}
