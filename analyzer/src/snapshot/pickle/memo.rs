//! The pickle memo, packed: a u32 per slot.

use super::value::Val;
use rustc_hash::FxHashMap;

// The memo holds millions of slots for a large snapshot (every dict, list and str is
// memoized), so each is a u32: a 3-bit tag and a 29-bit payload; other values go to a
// side table.
#[derive(Default)]
pub(super) struct Memo {
    pub(super) slots: Vec<u32>,
    pub(super) side: Vec<Val>,
    pub(super) sparse: FxHashMap<u64, Val>,
    // Counts the changes to slots that held a hook's values (see `Memo::epoch`).
    pub(super) epoch: u64,
}

pub(super) const TAG_SHIFT: u32 = 29;
pub(super) const PAYLOAD: u32 = (1 << TAG_SHIFT) - 1;
pub(super) const T_EMPTY: u32 = 0;
pub(super) const T_STR: u32 = 1;
pub(super) const T_OBJ: u32 = 2;
pub(super) const T_SIDE: u32 = 3;
pub(super) const T_CONSUMED: u32 = 4;
pub(super) const T_CUSTOM0: u32 = 5; // kinds 0..=2 use tags 5..=7

impl Memo {
    // A value packed into a slot, when it fits one.
    #[inline(always)]
    pub(super) fn pack(v: Val) -> Option<u32> {
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
    pub(super) fn encode(&mut self, v: Val) -> u32 {
        match Self::pack(v) {
            Some(slot) => slot,
            None => self.encode_side(v),
        }
    }

    #[cold]
    pub(super) fn encode_side(&mut self, v: Val) -> u32 {
        self.side.push(v);
        (T_SIDE << TAG_SHIFT) | (self.side.len() as u32 - 1).min(PAYLOAD)
    }

    #[inline(always)]
    pub(super) fn decode(&self, slot: u32) -> Option<Val> {
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

    /// A number that stays the same while every slot holding a [`Val::Custom`]
    /// value of kinds 0 to 2 keeps it: it changes when such a slot is removed, and
    /// whenever a slot is overwritten other than a container's by its hook's
    /// replacement (which happens all the time). A hook that checked once what a
    /// run of memo references names may trust it while the epoch stays the same;
    /// CPython never overwrites a slot, so it never changes on a real pickle.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    // Removes the slots from `len` on (a decoder giving up), changing the epoch if
    // one of them held a hook's value.
    pub(super) fn truncate(&mut self, len: usize) {
        if let Some(gone) = self.slots.get(len..)
            && gone.iter().any(|&slot| slot >> TAG_SHIFT >= T_CUSTOM0)
        {
            self.epoch += 1;
        }
        self.slots.truncate(len);
    }

    /// The number of entries, as Python's `len(memo)`: where MEMOIZE stores.
    pub(super) fn len(&self) -> usize {
        // The dense slots have no holes, and the sparse entries all lie past them.
        self.slots.len() + self.sparse.len()
    }

    pub(super) fn set(&mut self, idx: u64, v: Val) {
        let len = self.slots.len() as u64;
        if idx < len {
            let old = self.slots[idx as usize];
            if old >> TAG_SHIFT != T_OBJ {
                self.epoch += 1;
            }
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
    pub(super) fn push(&mut self, v: Val) {
        let slot = self.encode(v);
        self.slots.push(slot);
    }

    #[inline(always)]
    pub(super) fn get(&self, idx: u64) -> Option<Val> {
        match self.slots.get(idx as usize) {
            Some(&slot) => self.decode(slot),
            None => self.sparse.get(&idx).copied(),
        }
    }
}
