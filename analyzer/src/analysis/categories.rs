//! Memory by category at the moments analyses report: tables of bytes per
//! category, and the moments themselves, kept true as later events say
//! more about the blocks they counted (see [`crate::replay::categories`]).

use crate::replay::ReplayState;
use crate::replay::categories::{CategoryBytes, CategorySource};
use crate::replay::user_categories::{UserCategories, UserMoment};
use serde::{Deserialize, Serialize};

pub use crate::replay::categories::Category;

/// One category's part of allocated memory at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CategoryShare {
    /// The category.
    pub category: Category,
    /// Bytes of its blocks (block sizes).
    pub bytes: u64,
    /// The part of `bytes` that tags accounted for: `bytes` when the whole
    /// figure is exact, 0 when it is all inferred.
    pub exact_bytes: u64,
    /// Its blocks.
    pub blocks: u64,
}

impl CategoryShare {
    /// How the figure is known (a figure of 0 bytes is inferred: there was
    /// nothing to tag).
    pub fn basis(&self) -> Basis {
        if self.exact_bytes == 0 {
            Basis::Inferred
        } else if self.exact_bytes >= self.bytes {
            Basis::Exact
        } else {
            Basis::Mixed
        }
    }
}

/// How a figure is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Every byte of it was tagged by the program.
    Exact,
    /// None of it was: replay inferred it.
    Inferred,
    /// Some of it was.
    Mixed,
}

/// Allocated memory by category at one moment: every category, in
/// [`Category::ALL`] order, summing to the allocated bytes then.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CategoryTable(pub Vec<CategoryShare>);

impl CategoryTable {
    /// The table of these counts.
    pub fn of(counts: &CategoryBytes) -> CategoryTable {
        CategoryTable(
            Category::ALL
                .into_iter()
                .map(|category| CategoryShare {
                    category,
                    bytes: counts.bytes(category),
                    exact_bytes: counts.exact_bytes(category),
                    blocks: counts.blocks(category),
                })
                .collect(),
        )
    }

    /// A category's share (zeros when the table lacks it).
    pub fn get(&self, category: Category) -> CategoryShare {
        self.0
            .iter()
            .find(|s| s.category == category)
            .copied()
            .unwrap_or(CategoryShare {
                category,
                bytes: 0,
                exact_bytes: 0,
                blocks: 0,
            })
    }

    /// Bytes of every category.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|s| s.bytes).sum()
    }

    /// The category with the most bytes (the first of equals), if any has
    /// bytes.
    pub fn dominant(&self) -> Option<Dominant> {
        let total = self.total();
        let top = self.0.iter().filter(|s| s.bytes > 0).fold(
            None::<&CategoryShare>,
            |best, s| match best {
                Some(b) if b.bytes >= s.bytes => Some(b),
                _ => Some(s),
            },
        )?;
        Some(Dominant {
            category: top.category,
            bytes: top.bytes,
            share: top.bytes as f64 / total as f64,
            basis: top.basis(),
        })
    }

    /// Each category's bytes here minus `base`'s, in [`Category::ALL`]
    /// order.
    pub fn delta(&self, base: &CategoryTable) -> Vec<CategoryDelta> {
        Category::ALL
            .into_iter()
            .map(|category| CategoryDelta {
                category,
                base: base.get(category).bytes,
                new: self.get(category).bytes,
            })
            .collect()
    }
}

/// The category with the most bytes at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dominant {
    /// The category.
    pub category: Category,
    /// Its bytes.
    pub bytes: u64,
    /// Its bytes over all allocated bytes then.
    pub share: f64,
    /// How its figure is known.
    pub basis: Basis,
}

/// A category's bytes in two runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CategoryDelta {
    /// The category.
    pub category: Category,
    /// Its bytes in the baseline.
    pub base: u64,
    /// Its bytes in the new run.
    pub new: u64,
}

impl CategoryDelta {
    /// `new - base`.
    pub fn change(&self) -> i128 {
        self.new as i128 - self.base as i128
    }
}

/// Memory by category at a run's moments that matter.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CategoryReport {
    /// Where the categories come from.
    pub source: CategorySource,
    /// At the allocated peak.
    pub at_allocated_peak: CategoryTable,
    /// At the reserved peak (of what was allocated then).
    pub at_reserved_peak: CategoryTable,
    /// At the end of the window.
    pub at_end: CategoryTable,
    /// What dominates the allocated peak.
    pub dominant: Option<Dominant>,
    /// The program's own categories (`vramtrace.tag(t, "kv_cache")`,
    /// format 1.7), exact, largest at the allocated peak first. Their bytes
    /// are also in the tables' `other`, which they subdivide; absent when
    /// the program named none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub user: Vec<UserCategoryRow>,
}

impl CategoryReport {
    /// The program's own category that is the largest part of the
    /// allocated peak, when one is: larger than every built-in category,
    /// `other` counted without the user categories it holds.
    pub fn user_lead(&self) -> Option<&UserCategoryRow> {
        let named: u64 = self.user.iter().map(|u| u.at_allocated_peak).sum();
        let largest_builtin = (self.at_allocated_peak.0.iter())
            .map(|s| match s.category {
                Category::Other => s.bytes.saturating_sub(named),
                _ => s.bytes,
            })
            .max()
            .unwrap_or(0);
        (self.user.first())
            .filter(|u| u.at_allocated_peak > 0 && u.at_allocated_peak >= largest_builtin)
    }
}

/// One of the program's own categories at the moments a
/// [`CategoryReport`] tells: every byte exact (the program tagged it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserCategoryRow {
    /// The name the program gave (`"kv_cache"`).
    pub name: String,
    /// Its bytes at the allocated peak.
    pub at_allocated_peak: u64,
    /// Its bytes at the reserved peak.
    pub at_reserved_peak: u64,
    /// Its bytes at the end of the window.
    pub at_end: u64,
    /// Its blocks at the allocated peak.
    pub blocks_at_allocated_peak: u64,
}

impl UserCategoryRow {
    /// The rows of the categories `user` named, at three moments, largest
    /// at the allocated peak first (then by name); categories that held
    /// nothing at any of them are left out.
    pub fn rows(
        user: &UserCategories,
        at_allocated_peak: &UserMoment,
        at_reserved_peak: &UserMoment,
        at_end: &UserMoment,
    ) -> Vec<UserCategoryRow> {
        let share = |m: &UserMoment, i: usize| m.shares().get(i).copied().unwrap_or_default();
        let mut rows: Vec<UserCategoryRow> = user
            .names()
            .iter()
            .enumerate()
            .map(|(i, name)| UserCategoryRow {
                name: name.clone(),
                at_allocated_peak: share(at_allocated_peak, i).bytes,
                at_reserved_peak: share(at_reserved_peak, i).bytes,
                at_end: share(at_end, i).bytes,
                blocks_at_allocated_peak: share(at_allocated_peak, i).blocks,
            })
            .filter(|r| r.at_allocated_peak > 0 || r.at_reserved_peak > 0 || r.at_end > 0)
            .collect();
        rows.sort_by(|a, b| {
            b.at_allocated_peak
                .cmp(&a.at_allocated_peak)
                .then_with(|| a.name.cmp(&b.name))
        });
        rows
    }
}

/// Allocated bytes by category at one moment of a pass (once `replayed`
/// events were applied), kept true as later events settle or tag the
/// blocks live then: call [`follow`](Self::follow) after every event and in
/// `finish`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CategoryMoment {
    replayed: u64,
    counts: CategoryBytes,
    user: UserMoment,
}

impl CategoryMoment {
    /// The state's counts now.
    pub fn now(state: &ReplayState) -> CategoryMoment {
        let replayed = state.events_applied();
        CategoryMoment {
            replayed,
            counts: *state.categories(),
            user: UserMoment::now(replayed, state.user_categories()),
        }
    }

    /// Applies the category changes of the last event (or of the pass's
    /// end) to the blocks that were live at this moment.
    #[inline]
    pub fn follow(&mut self, state: &ReplayState) {
        // Most events change no category: one test each, the rest apart.
        if state.recategorized().is_empty() && state.user_categories().changes().is_empty() {
            return;
        }
        self.follow_changes(state);
    }

    #[inline(never)]
    fn follow_changes(&mut self, state: &ReplayState) {
        for change in state.recategorized() {
            self.counts.follow(self.replayed, change);
        }
        if !state.user_categories().changes().is_empty() {
            self.user.follow(state.user_categories());
        }
    }

    /// [`follow`](Self::follow) of two moments (the summary's peaks') in
    /// one walk of the changes, for an event that changed a category: two
    /// calls and walks cost 7 to 8 M more instructions of the 2 M-event
    /// synthetic traces' summaries (issue #47).
    #[inline(never)]
    pub fn follow_pair(a: &mut CategoryMoment, b: &mut CategoryMoment, state: &ReplayState) {
        for change in state.recategorized() {
            a.counts.follow(a.replayed, change);
            b.counts.follow(b.replayed, change);
        }
        if !state.user_categories().changes().is_empty() {
            a.user.follow(state.user_categories());
            b.user.follow(state.user_categories());
        }
    }

    /// The program's own categories' counts at this moment.
    pub fn user(&self) -> &UserMoment {
        &self.user
    }

    /// The table of the counts.
    pub fn table(&self) -> CategoryTable {
        CategoryTable::of(&self.counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::categories::Class;

    #[test]
    fn dominant_and_basis() {
        let mut c = CategoryBytes::default();
        c.add(Class::exact(Category::Parameter), 100);
        c.add(Class::inferred(Category::Activation), 300);
        c.add(Class::exact(Category::Gradient), 60);
        c.add(Class::inferred(Category::Gradient), 40);
        let t = CategoryTable::of(&c);
        assert_eq!(t.0.len(), Category::COUNT);
        assert_eq!(t.total(), 500);
        let d = t.dominant().unwrap();
        assert_eq!(d.category, Category::Activation);
        assert_eq!(d.share, 0.6);
        assert_eq!(d.basis, Basis::Inferred);
        assert_eq!(t.get(Category::Parameter).basis(), Basis::Exact);
        assert_eq!(t.get(Category::Gradient).basis(), Basis::Mixed);
        assert_eq!(CategoryTable::default().dominant(), None);
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json[3]["category"], "optimizer_state");
        let back: CategoryTable = serde_json::from_value(json).unwrap();
        assert_eq!(back, t);
    }
}
