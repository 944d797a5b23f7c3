//! Trace entries decoded straight from the opcodes, with no dict built.
//!
//! Nearly all of a snapshot is `device_traces` entries in one layout, CPython's:
//! `} MEMOIZE ( key value key value ... u`, keys being memoized strs (read back with
//! BINGET after their first use) and values ints, strs, memo references, or the frames
//! list `] MEMOIZE ( BINGET ... e` whose frames were all seen before. Reading that
//! layout here costs a fraction of building the dict in the parser's arena and reading
//! it back; anything else makes [`decode`] give up, and the parser then reads the
//! dict the generic way (through `Collector::on_append`), with the same result.

use super::{CUSTOM_FRAME, CUSTOM_STACK, Collector, EntryFields, F_ACTION, F_FRAMES, F_POOL};
use crate::snapshot::pickle::{OpReader, Val, op};
use vramtrace_format::PoolId;

/// Decodes the trace entry whose EMPTY_DICT was just read, through its SETITEMS.
/// `None`: not the usual layout, or not a trace entry. In a list not `known` to hold
/// trace entries, only a dict whose first key is `action` (as PyTorch writes them) is
/// tried, so that the other dicts (blocks, frames) are not read twice.
pub(super) fn decode(
    c: &mut Collector,
    ops: &mut OpReader<'_>,
    known: bool,
) -> Option<EntryFields> {
    // The dict will be consumed on its APPENDS; a later memo reference sees that, as
    // it would after the generic path.
    ops.memo_store(Val::Consumed)?;
    if ops.u8()? != op::MARK {
        return None;
    }
    let mut f = EntryFields::default();
    let mut known = known;
    loop {
        let opcode = ops.u8()?;
        if opcode == op::SETITEMS {
            break;
        }
        let key = ops.str_atom(opcode)?;
        let field = c.field(key);
        if !known && field != F_ACTION {
            return None;
        }
        known = true;
        let opcode = ops.u8()?;
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
            continue;
        } else {
            match ops.atom(opcode)? {
                // A shared container (the generic path would look into a list under
                // `frames`): not the usual layout.
                Val::Obj(_) => return None,
                v => v,
            }
        };
        if field != F_POOL || !c.shared_pool(&mut f, field, value) {
            f.set(ops.heap(), key, field, value)?;
        }
    }
    f.action?;
    // Nothing may add to the dict after its SETITEMS (a second batch, a SETITEM): the
    // next opcode must begin the next item or end the list's batch.
    match ops.peek()? {
        op::EMPTY_DICT | op::APPENDS | op::BINGET | op::LONG_BINGET => Some(f),
        _ => None,
    }
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
    let stack = Val::Custom {
        kind: CUSTOM_STACK,
        id: c.scratch_stack_handle(),
    };
    if memoized {
        ops.memo_replace(slot, stack)?;
    }
    Some(stack)
}
