//! Frames lists known by their bytes: a trace entry's stack found with no memo
//! lookup per frame, and, by its first bytes, with one cache miss, which the
//! decoder asks for ahead ([`FramesCache::look_ahead`]).

use super::entry::ends_list;
use crate::prefetch::prefetch_read;
use crate::snapshot::pickle::{OpReader, op};
use rustc_hash::{FxHashMap, FxHasher};
use std::hash::Hasher;

/// The most bytes of memo references [`FramesCache`] keeps (a few hundred per
/// traceback): a hostile pickle of endless distinct lists is read the usual way
/// past that.
const MAX_CACHED_BYTES: usize = 16 << 20;

/// The first bytes of a frames list by which [`FramesCache`] finds it first: six
/// or more memo references, more than most tracebacks share at their start.
const PREFIX: usize = 32;

/// The most changes of the memo's epoch [`FramesCache`] follows: past that (a pickle
/// that overwrites memo slots, which CPython never does) it is no longer used, so
/// that a pickle changing the epoch before every list does not pay for a cache
/// filled and dropped at every list (a fifth more instructions).
const MAX_EPOCHS: u32 = 64;

/// Stack handles of the frames lists read so far, by the bytes of their one MARK
/// batch of memo references. PyTorch writes one list object per traceback object,
/// so the same traceback comes again and again in lists of their own, whose bytes
/// are the same: reading them costs a hash of the bytes instead of a memo lookup per
/// frame, and the logging thread interns nothing. The references name what they
/// named when they were read while the memo's epoch stays the same (CPython never
/// changes it); when it changes, everything is forgotten.
#[derive(Default)]
pub(super) struct FramesCache {
    handles: FxHashMap<Box<[u8]>, u32>,
    // Some of `handles` again, by their first `PREFIX` bytes: the first list
    // cached with those (of `PREFIX` bytes or more), which a list beginning with
    // them is most likely to be again. Looked up first: it needs no scan of a
    // list's references to their end, nor a hash of them all.
    prefixes: ByPrefix,
    // The memo epoch the handles hold for.
    epoch: u64,
    // Bytes of the keys: at most `MAX_CACHED_BYTES`.
    bytes: usize,
    // Changes of the epoch seen: past `MAX_EPOCHS`, the cache is not used.
    epochs: u32,
    // Where the trace entry being read began (its dict's first key), and how
    // far past that the last entry's frames began (0: none seen yet): see
    // `look_ahead`.
    entry_at: usize,
    frames_offset: usize,
    // Where the entry being read most likely has the references of a frames
    // list of its own, and the hash of their first bytes, if it has a guess.
    guess: Option<(usize, u64)>,
}

impl FramesCache {
    /// Whether lists read at memo epoch `epoch` are looked up and kept (not after
    /// more than `MAX_EPOCHS` changes of the epoch).
    #[inline]
    pub(super) fn in_use(&mut self, epoch: u64) -> bool {
        self.forget_unless(epoch);
        self.epochs <= MAX_EPOCHS
    }

    /// The handle of the list whose references are `refs`, read at memo epoch `epoch`.
    #[inline]
    pub(super) fn get(&mut self, refs: &[u8], epoch: u64) -> Option<u32> {
        self.forget_unless(epoch);
        self.handles.get(refs).copied()
    }

    /// Remembers `handle` as the list's whose references are `refs`, read at memo
    /// epoch `epoch`.
    pub(super) fn insert(&mut self, refs: &[u8], handle: u32, epoch: u64) {
        self.forget_unless(epoch);
        if self.bytes + refs.len() <= MAX_CACHED_BYTES {
            self.bytes += refs.len();
            self.handles.insert(refs.into(), handle);
            self.remember_prefix(refs, handle);
        }
    }

    /// Keeps the list of `refs` (in `handles` as `handle`) by its first bytes too,
    /// unless it is shorter or another list has them.
    #[inline]
    pub(super) fn remember_prefix(&mut self, refs: &[u8], handle: u32) {
        let Some(prefix) = refs.first_chunk::<PREFIX>() else {
            return;
        };
        if self.bytes + refs.len() <= MAX_CACHED_BYTES && self.prefixes.insert(prefix, refs, handle)
        {
            self.bytes += refs.len();
        }
    }

    /// Looks ahead, from the first key of a trace entry at `buf[at]`, at where
    /// the entry's frames most likely are, and asks for what reading them will
    /// need, so that it is in cache when the decoder gets there:
    /// - a list of its own (an alloc's): the table slot its first bytes hash
    ///   to now, and the cached list's bytes later, in
    ///   [`FramesCache::prefetch_list`] (called two keys before `frames`, once
    ///   the slot has arrived);
    /// - a reference to a list read before (a free's, which shares its alloc's
    ///   list): its memo index is returned, for the caller to ask for that slot.
    ///
    /// PyTorch writes `frames` last, so its value lies the same number of bytes
    /// into nearly every entry (the ints before it change length seldom): where
    /// it began in the last entry is where it is looked for. Only a hint:
    /// nothing read here decides anything, and a wrong guess costs a wasted load.
    /// (On a 3 M-event snapshot these two misses had been about a third of
    /// the time spent decoding entries and finding their lists.)
    #[inline(always)]
    pub(super) fn look_ahead(&mut self, buf: &[u8], at: usize) -> Option<usize> {
        self.entry_at = at;
        self.guess = None;
        if self.frames_offset == 0 {
            return None;
        }
        let value = at.checked_add(self.frames_offset)?;
        match *buf.get(value)? {
            op::EMPTY_LIST => {
                // `] MEMOIZE ( refs... APPENDS`.
                let prefix = buf.get(value + 3..)?.first_chunk::<PREFIX>()?;
                if buf[value + 2] != op::MARK || self.prefixes.is_empty() {
                    return None;
                }
                let hash = ByPrefix::hash(prefix);
                self.guess = Some((value + 3, hash));
                prefetch_read(self.prefixes.first_slot(hash));
                None
            }
            _ => OpReader::memo_ref_at(buf, value).map(|(idx, _)| idx),
        }
    }

    /// The second half of [`FramesCache::look_ahead`] for a list of the
    /// entry's own: asks for the bytes of the list its slot names.
    #[inline(always)]
    pub(super) fn prefetch_list(&self) {
        if let Some((_, hash)) = self.guess {
            self.prefixes.prefetch_list(hash);
        }
    }

    /// Notes that the frames of the trace entry being read begin at `at`, for
    /// [`FramesCache::look_ahead`] in the entries after it.
    #[inline(always)]
    pub(super) fn frames_at(&mut self, at: usize) {
        self.frames_offset = at.saturating_sub(self.entry_at);
    }

    /// The handle of the list whose content (its MARK) begins at `buf[at]`, and the
    /// position after its APPENDS, if it is the list `prefixes` holds for its first
    /// bytes, byte for byte, and ends there: then it is one batch of those
    /// references and nothing more, as `single_batch` would find, and `get` would
    /// give the same handle. (The memo epoch was checked by `in_use`.)
    #[inline]
    pub(super) fn by_prefix(&self, buf: &[u8], at: usize) -> Option<(u32, usize)> {
        if self.prefixes.is_empty() || *buf.get(at)? != op::MARK {
            return None;
        }
        let content = buf.get(at + 1..)?;
        let prefix = content.first_chunk::<PREFIX>()?;
        // The look-ahead hashed these bytes if it guessed right.
        let hash = match self.guess {
            Some((guessed, hash)) if guessed == at + 1 => hash,
            _ => ByPrefix::hash(prefix),
        };
        let (refs, handle) = self.prefixes.get_hashed(prefix, hash)?;
        let end = at + 1 + refs.len();
        if content.get(..refs.len())? != refs || !ends_list(buf, end)? {
            return None;
        }
        Some((handle, end + 1))
    }

    #[inline]
    fn forget_unless(&mut self, epoch: u64) {
        if epoch != self.epoch {
            // A new map, not `clear`: clearing a large one again and again (a hostile
            // pickle changing the epoch before every list) would cost its capacity
            // each time; dropping it costs what filling it did.
            self.handles = FxHashMap::default();
            self.prefixes = ByPrefix::default();
            self.bytes = 0;
            self.epoch = epoch;
            self.epochs = self.epochs.saturating_add(1);
        }
    }
}

/// Cache lines of a cached list asked for ahead ([`ByPrefix::prefetch_list`]):
/// a list of 40 frames' memo references is about 200 bytes.
const PREFETCHED_LINES: usize = 4;

/// Bytes before each list in [`ByPrefix`]'s arena: its length and its handle.
const HEADER: usize = 8;

/// The first list cached with each `PREFIX` bytes, laid out so that finding one
/// costs one cache miss where a map of boxed lists costs two (its bucket, then
/// the box): the lists lie one after another in one arena, each after its
/// length and handle, and the table that finds them holds 8 bytes a list, few
/// enough to stay in cache while the pickle streams past. (With a map of
/// boxed lists, finding each trace entry's list took a quarter of the
/// parser's time on a 3 M-event snapshot, nearly all of it waiting on memory;
/// this layout took a third less.)
#[derive(Default)]
struct ByPrefix {
    // Open addressing, a power of two long: the top 32 bits of a prefix's hash
    // above its list's offset in `arena` plus one (0: empty).
    slots: Vec<u64>,
    // Each list's length and handle (u32, little-endian), then its bytes.
    arena: Vec<u8>,
    len: usize,
}

impl ByPrefix {
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn hash(prefix: &[u8; PREFIX]) -> u64 {
        let mut h = FxHasher::default();
        h.write(prefix);
        h.finish()
    }

    // The list at `offset` in the arena, and its handle.
    #[inline(always)]
    fn list(&self, offset: usize) -> (&[u8], u32) {
        let word =
            |at: usize| u32::from_le_bytes(self.arena[at..at + 4].try_into().expect("4 bytes"));
        let start = offset + HEADER;
        let len = word(offset) as usize;
        (&self.arena[start..start + len], word(offset + 4))
    }

    // The list a full slot names.
    #[inline(always)]
    fn list_of_slot(&self, slot: u64) -> (&[u8], u32) {
        self.list(slot as u32 as usize - 1)
    }

    // The slot of the prefix whose hash is `hash` and whose first bytes
    // `prefix` are: its list's, or the empty one where it would go (with
    // lists' prefixes all distinct, a list being moved finds its new slot).
    #[inline(always)]
    fn slot(&self, hash: u64, prefix: &[u8; PREFIX]) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.home(hash);
        loop {
            let slot = self.slots[i];
            if slot == 0
                || (slot >> 32 == hash >> 32
                    && self.list_of_slot(slot).0.first_chunk() == Some(prefix))
            {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    /// The first slot probed for a list whose first bytes hash to `hash`
    /// (the table is not empty).
    #[inline(always)]
    fn home(&self, hash: u64) -> usize {
        hash as usize & (self.slots.len() - 1)
    }

    /// [`ByPrefix::home`]'s slot, to prefetch.
    #[inline(always)]
    fn first_slot(&self, hash: u64) -> &u64 {
        &self.slots[self.home(hash)]
    }

    /// Brings into cache the bytes of the list the first slot for `hash` names
    /// (its header and the first [`PREFETCHED_LINES`] cache lines of its
    /// references), if that slot holds a list with the same top bits of the
    /// hash, without waiting for them.
    #[inline(always)]
    fn prefetch_list(&self, hash: u64) {
        if self.slots.is_empty() {
            return;
        }
        let slot = self.slots[self.home(hash)];
        if slot != 0 && slot >> 32 == hash >> 32 {
            let offset = slot as u32 as usize - 1;
            for line in self.arena[offset..].chunks(64).take(PREFETCHED_LINES) {
                prefetch_read(line.as_ptr());
            }
        }
    }

    /// The first list kept with these first bytes, and its handle.
    #[cfg(test)]
    fn get(&self, prefix: &[u8; PREFIX]) -> Option<(&[u8], u32)> {
        self.get_hashed(prefix, Self::hash(prefix))
    }

    /// [`ByPrefix::get`] for a prefix whose hash is known.
    #[inline(always)]
    fn get_hashed(&self, prefix: &[u8; PREFIX], hash: u64) -> Option<(&[u8], u32)> {
        if self.slots.is_empty() {
            return None;
        }
        match self.slots[self.slot(hash, prefix)] {
            0 => None,
            slot => Some(self.list_of_slot(slot)),
        }
    }

    /// Keeps `refs`, which begin with `prefix`, as `handle`, unless a list with
    /// those first bytes is kept already. Whether it was kept.
    fn insert(&mut self, prefix: &[u8; PREFIX], refs: &[u8], handle: u32) -> bool {
        // At most half full, so that probes end soon.
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let hash = Self::hash(prefix);
        let i = self.slot(hash, prefix);
        if self.slots[i] != 0 {
            return false;
        }
        // Offsets fit in 32 bits: the lists kept are at most `MAX_CACHED_BYTES`,
        // and each at least `PREFIX` bytes, so the headers a quarter of that.
        let offset = self.arena.len() as u64;
        self.arena
            .extend_from_slice(&(refs.len() as u32).to_le_bytes());
        self.arena.extend_from_slice(&handle.to_le_bytes());
        self.arena.extend_from_slice(refs);
        self.slots[i] = (hash >> 32) << 32 | (offset + 1);
        self.len += 1;
        true
    }

    // Doubles the table, each list moved to its slot there.
    fn grow(&mut self) {
        let len = (self.slots.len() * 2).max(64);
        let old = std::mem::replace(&mut self.slots, vec![0; len]);
        for slot in old.into_iter().filter(|&s| s != 0) {
            let (refs, _) = self.list_of_slot(slot);
            let prefix: &[u8; PREFIX] = refs.first_chunk().expect("lists kept begin with a prefix");
            let i = self.slot(Self::hash(prefix), prefix);
            self.slots[i] = slot;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lists by their first bytes, through growth of the table: each prefix
    /// finds the first list kept with it, whatever else shares its slots.
    #[test]
    fn the_first_list_of_each_prefix_is_found_after_growth() {
        let mut index = ByPrefix::default();
        assert!(index.get(&[0; PREFIX]).is_none());
        let list = |i: u32, tail: u8| -> Vec<u8> {
            let mut l = vec![0u8; PREFIX];
            l[..4].copy_from_slice(&i.to_le_bytes());
            l.extend(std::iter::repeat_n(tail, (i % 5) as usize));
            l
        };
        for i in 0..1000 {
            let refs = list(i, 1);
            assert!(index.insert(refs.first_chunk().unwrap(), &refs, i));
            // The same first bytes again, another list: not kept.
            let other = list(i, 2);
            assert!(!index.insert(other.first_chunk().unwrap(), &other, i + 5000));
        }
        assert_eq!(index.len, 1000);
        assert!(index.slots.len() >= 2000);
        for i in 0..1000 {
            let refs = list(i, 1);
            assert_eq!(index.get(refs.first_chunk().unwrap()), Some((&refs[..], i)));
        }
        assert!(index.get(&[9; PREFIX]).is_none());
    }

    #[test]
    fn a_list_is_found_by_its_first_bytes_only_if_all_match() {
        use op::{APPEND, APPENDS, BINGET, LONG_BINGET, MARK, SETITEMS};
        // Twenty references (40 bytes), then the list's end.
        let refs: Vec<u8> = (0..20).flat_map(|i| [BINGET, i]).collect();
        let list = |refs: &[u8], end: &[u8]| [&[MARK], refs, end].concat();
        let mut cache = FramesCache::default();
        assert!(cache.in_use(0));
        cache.insert(&refs, 7, 0);
        let usual = list(&refs, &[APPENDS, SETITEMS, BINGET, 1]);
        assert_eq!(cache.by_prefix(&usual, 0), Some((7, 42)));
        // The same first bytes, then another reference, or fewer of them.
        let mut other = refs.clone();
        other[39] = 99;
        assert_eq!(
            cache.by_prefix(&list(&other, &[APPENDS, SETITEMS]), 0),
            None
        );
        let mut longer = refs.clone();
        longer.extend([LONG_BINGET, 1, 0, 0, 0]);
        assert_eq!(
            cache.by_prefix(&list(&longer, &[APPENDS, SETITEMS]), 0),
            None
        );
        assert_eq!(
            cache.by_prefix(&list(&refs[..36], &[APPENDS, SETITEMS]), 0),
            None
        );
        // More of the list after the batch: another batch, or one item.
        assert_eq!(cache.by_prefix(&list(&refs, &[APPENDS, MARK]), 0), None);
        let one = list(&refs, &[APPENDS, BINGET, 1, APPEND]);
        assert_eq!(cache.by_prefix(&one, 0), None);
        // Not at a MARK, or the buffer ending first.
        assert_eq!(cache.by_prefix(&usual, 1), None);
        assert_eq!(cache.by_prefix(&usual[..41], 0), None);
        // The first list with those bytes is kept, a shorter one not at all.
        cache.insert(&other, 8, 0);
        assert_eq!(
            cache.by_prefix(&list(&other, &[APPENDS, SETITEMS]), 0),
            None
        );
        assert_eq!(cache.get(&other, 0), Some(8));
        cache.insert(&refs[..30], 9, 0);
        assert_eq!(
            cache.by_prefix(&list(&refs[..30], &[APPENDS, SETITEMS]), 0),
            None
        );
        // A new epoch forgets it.
        assert!(cache.in_use(1));
        assert_eq!(cache.by_prefix(&usual, 0), None);
    }

    /// The look-ahead learns where an entry's frames lie from the last entry,
    /// and guesses from it: a memo reference there names the slot to ask for,
    /// a list of its own with a cached prefix the table slot (kept for the
    /// second half), anything else nothing.
    #[test]
    fn the_look_ahead_guesses_where_the_last_entry_had_its_frames() {
        use op::{APPENDS, BINGET, EMPTY_LIST, LONG_BINGET, MARK, MEMOIZE, SETITEMS};
        let refs: Vec<u8> = (0..20).flat_map(|i| [BINGET, i]).collect();
        let mut cache = FramesCache::default();
        // Nothing learned yet: no guess.
        let shared = [&[0u8; 10][..], &[LONG_BINGET, 7, 1, 0, 0]].concat();
        assert_eq!(cache.look_ahead(&shared, 0), None);
        cache.frames_at(10);
        assert_eq!(cache.frames_offset, 10);
        // A reference to a list read before, 10 bytes in: its memo index.
        assert_eq!(cache.look_ahead(&shared, 0), Some(0x107));
        let later = [&[0u8; 30][..], &[BINGET, 9]].concat();
        assert_eq!(cache.look_ahead(&later, 20), Some(9));
        // A list of its own: no index, its prefix's hash kept once a list is
        // cached, and asking for its bytes reads nothing amiss.
        let own = [
            &[0u8; 10][..],
            &[EMPTY_LIST, MEMOIZE, MARK],
            &refs,
            &[APPENDS, SETITEMS],
        ]
        .concat();
        assert_eq!(cache.look_ahead(&own, 0), None);
        assert_eq!(cache.guess, None);
        cache.prefetch_list();
        cache.insert(&refs, 7, 0);
        assert_eq!(cache.look_ahead(&own, 0), None);
        let prefix: &[u8; PREFIX] = refs.first_chunk().unwrap();
        assert_eq!(cache.guess, Some((13, ByPrefix::hash(prefix))));
        cache.prefetch_list();
        // The list found where it was guessed, with the guess's hash, and
        // where it was not, with its own.
        assert_eq!(cache.by_prefix(&own, 12), Some((7, 54)));
        let moved = [&[0u8; 11][..], &own[10..]].concat();
        assert_eq!(cache.by_prefix(&moved, 13), Some((7, 55)));
        // Something else there, or the buffer ending first: no guess, and the
        // last entry's list forgotten.
        assert_eq!(cache.look_ahead(&own, 1), None);
        assert_eq!(cache.guess, None);
        assert_eq!(cache.look_ahead(&own[..20], 0), None);
        assert_eq!(cache.look_ahead(&own, usize::MAX), None);
    }

    #[test]
    fn the_cache_forgets_when_the_epoch_changes() {
        let mut cache = FramesCache::default();
        cache.insert(b"h\x03", 7, 0);
        assert_eq!(cache.get(b"h\x03", 0), Some(7));
        assert_eq!(cache.get(b"h\x04", 0), None);
        assert_eq!(cache.get(b"h\x03", 1), None);
        assert_eq!(cache.get(b"h\x03", 0), None);
        // Past its size, nothing more is kept.
        cache.insert(&vec![b'h'; MAX_CACHED_BYTES], 1, 0);
        cache.insert(b"h\x05", 2, 0);
        assert_eq!(cache.get(b"h\x05", 0), None);
        // Past `MAX_EPOCHS` changes (two so far), it is not used any more.
        let mut epoch = 0;
        while cache.in_use(epoch) {
            epoch += 1;
        }
        assert_eq!(epoch, MAX_EPOCHS as u64 - 1);
        assert!(!cache.in_use(0));
    }
}
