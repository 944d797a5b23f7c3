//! The program's own categories (format 1.7's user tags:
//! `vramtrace.tag(kv_cache, "kv_cache")`, or PyTorch's `annotate` action).
//!
//! A user-tagged block counts as [`Category::Other`](super::Category::Other)
//! in the built-in tables, exact, and here under its own name, so a table
//! can show it as a row of its own. Tracked apart from the built-in
//! categories: a trace without user tags pays one `is_empty` test per
//! freed block and nothing else.

use rustc_hash::FxHashMap;

/// The most distinct names a replay keeps: a hostile trace naming a new
/// category on every tag leaves the rest counted as built-in "other" only.
pub const MAX_USER_CATEGORIES: usize = 256;

/// Index of a name in [`UserCategories::names`].
pub type UserCategoryId = u16;

/// Bytes and blocks of one user category at a moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserShare {
    /// Bytes of its blocks (block sizes).
    pub bytes: u64,
    /// Its blocks.
    pub blocks: u64,
}

/// A block's user category changed: `from` before (None: none), `to` now.
/// It holds from the block's allocation, as a built-in tag does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserChange {
    /// The events replayed when the block was allocated.
    pub born: u64,
    /// Its size.
    pub size: u64,
    /// The category it was counted in.
    pub from: Option<UserCategoryId>,
    /// The category it is counted in now.
    pub to: Option<UserCategoryId>,
}

/// User categories of the live blocks, followed through a replay.
#[derive(Clone, Debug, Default)]
pub struct UserCategories {
    /// The names met, in order of first use.
    names: Vec<String>,
    by_name: FxHashMap<String, UserCategoryId>,
    /// User-tagged blocks the caller holds: address → (category, born, size).
    live: FxHashMap<u64, (UserCategoryId, u64, u64)>,
    /// Bytes and blocks by category, now.
    now: Vec<UserShare>,
    /// The changes the last event made.
    changes: Vec<UserChange>,
}

impl UserCategories {
    /// Whether no block holds a user category now.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// The names met, indexed by [`UserCategoryId`].
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Bytes and blocks by category now, indexed by [`UserCategoryId`].
    pub fn now(&self) -> &[UserShare] {
        &self.now
    }

    /// The changes the last event made (see [`UserChange`]).
    pub fn changes(&self) -> &[UserChange] {
        &self.changes
    }

    /// Forgets the last event's changes (each event starts afresh).
    #[inline]
    pub fn clear_changes(&mut self) {
        if !self.changes.is_empty() {
            self.changes.clear();
        }
    }

    /// The id of `name`, made on first use; `None` past
    /// [`MAX_USER_CATEGORIES`] names.
    pub fn id(&mut self, name: &str) -> Option<UserCategoryId> {
        if let Some(&id) = self.by_name.get(name) {
            return Some(id);
        }
        if self.names.len() >= MAX_USER_CATEGORIES {
            return None;
        }
        let id = self.names.len() as UserCategoryId;
        self.names.push(name.to_owned());
        self.by_name.insert(name.to_owned(), id);
        self.now.push(UserShare::default());
        Some(id)
    }

    /// The block at `addr` (allocated after `born` events, `size` bytes)
    /// holds category `id` from its allocation on.
    pub fn tag(&mut self, addr: u64, born: u64, size: u64, id: UserCategoryId) {
        let from = match self.live.insert(addr, (id, born, size)) {
            Some((old, _, _)) if old == id => return,
            Some((old, _, old_size)) => {
                sub(&mut self.now[old as usize], old_size);
                Some(old)
            }
            None => None,
        };
        let share = &mut self.now[id as usize];
        share.bytes = share.bytes.saturating_add(size);
        share.blocks += 1;
        self.changes.push(UserChange {
            born,
            size,
            from,
            to: Some(id),
        });
    }

    /// The caller gave up the block at `addr`: it no longer counts.
    #[inline]
    pub fn release(&mut self, addr: u64) {
        if let Some((id, _, size)) = self.live.remove(&addr) {
            sub(&mut self.now[id as usize], size);
        }
    }

    /// The user category of the live block at `addr`, if it has one.
    pub fn of(&self, addr: u64) -> Option<UserCategoryId> {
        self.live.get(&addr).map(|&(id, _, _)| id)
    }
}

fn sub(share: &mut UserShare, size: u64) {
    share.bytes = share.bytes.saturating_sub(size);
    share.blocks = share.blocks.saturating_sub(1);
}

/// User categories' bytes at one moment of a pass (after `replayed` events),
/// kept true as later tags name blocks live then (see
/// [`follow`](Self::follow)). Empty, and free to copy, without user tags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserMoment {
    replayed: u64,
    shares: Vec<UserShare>,
}

impl UserMoment {
    /// The categories' counts now, after `replayed` events.
    pub fn now(replayed: u64, user: &UserCategories) -> UserMoment {
        UserMoment {
            replayed,
            shares: user.now.clone(),
        }
    }

    /// Applies the last event's changes to the blocks that were live at
    /// this moment: allocated by then and live when tagged, so live then.
    #[inline]
    pub fn follow(&mut self, user: &UserCategories) {
        for c in &user.changes {
            if c.born > self.replayed {
                continue;
            }
            if let Some(from) = c.from
                && let Some(s) = self.shares.get_mut(from as usize)
            {
                sub(s, c.size);
            }
            if let Some(to) = c.to {
                let to = to as usize;
                if self.shares.len() <= to {
                    self.shares.resize(to + 1, UserShare::default());
                }
                self.shares[to].bytes = self.shares[to].bytes.saturating_add(c.size);
                self.shares[to].blocks += 1;
            }
        }
    }

    /// Bytes and blocks by category, indexed by [`UserCategoryId`] (shorter
    /// than the names when later names held nothing then).
    pub fn shares(&self) -> &[UserShare] {
        &self.shares
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_counts_from_the_allocation_and_a_release_ends_it() {
        let mut u = UserCategories::default();
        let kv = u.id("kv_cache").unwrap();
        // A moment after the block was allocated (event 5) and before it
        // was tagged (event 9): the tag reaches back to it.
        let mut before = UserMoment::now(7, &u);
        let mut earlier = UserMoment::now(3, &u);
        u.tag(0x1000, 5, 4096, kv);
        before.follow(&u);
        earlier.follow(&u);
        assert_eq!(before.shares()[kv as usize].bytes, 4096);
        assert!(earlier.shares().iter().all(|s| s.bytes == 0));
        assert_eq!(
            u.now()[kv as usize],
            UserShare {
                bytes: 4096,
                blocks: 1
            }
        );
        u.clear_changes();
        // Tagged again under another name: moved, not counted twice.
        let other = u.id("draft_kv").unwrap();
        u.tag(0x1000, 5, 4096, other);
        before.follow(&u);
        assert_eq!(before.shares()[kv as usize].bytes, 0);
        assert_eq!(before.shares()[other as usize].bytes, 4096);
        u.release(0x1000);
        assert!(u.is_empty());
        assert_eq!(u.now()[other as usize], UserShare::default());
    }

    #[test]
    fn names_past_the_cap_get_no_id() {
        let mut u = UserCategories::default();
        for i in 0..MAX_USER_CATEGORIES {
            assert!(u.id(&format!("c{i}")).is_some());
        }
        assert_eq!(u.id("one_more"), None);
        assert_eq!(u.id("c0"), Some(0));
    }
}
