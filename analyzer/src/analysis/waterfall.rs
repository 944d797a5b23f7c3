//! The waterfall of memory at one moment: where every byte under the limit
//! went, in terms that add up exactly (in bytes) to the limit.
//!
//! At an out-of-memory error (or the allocated peak), the allocator's limit
//! is split into:
//!
//! | term | what |
//! |---|---|
//! | `allocated` | blocks the caller holds, by category and by top sites |
//! | `waiting_for_streams` | blocks the caller freed that still wait on another stream |
//! | `cached_in_used_segments` | cached free space inside segments that hold a live block: fragmentation |
//! | `cached_in_empty_segments` | segments that hold no live block (0 at an OOM: the allocator released them before failing) |
//! | `free_under_limit` | the limit less reserved memory (a cap) |
//! | `free_on_device`, `outside_allocator` | without a cap (the limit is the card): the card's free memory and what others hold on it, measured |
//!
//! With a cap (`set_per_process_memory_fraction`), the cap bounds reserved
//! memory only: the terms sum to the cap, and the memory outside the
//! allocator is shown beside them, not counted. Without a cap the terms sum
//! to the card's total. When no limit is known, they sum to reserved memory.

use super::categories::{Basis, CategoryTable};
use super::limits::{Known, Limit, LimitSource, segment_for};
use crate::replay::{FreeSpace, ReplayState, Segment};
use serde::Serialize;
use vramtrace_format::{DeviceMemoryEvent, SymbolTable};

/// The number of sites a waterfall lists under `allocated`.
pub const TOP_SITES: usize = 5;

/// What the terms of a waterfall add up to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SumsTo {
    /// The allocator's cap (recorded or inferred).
    Limit,
    /// The card's total memory (the limit is the card itself).
    CardTotal,
    /// Reserved memory: the limit is unknown (or was below reserved memory).
    Reserved,
}

/// A part of a term: a category or a site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Part {
    /// The category (`activations`) or the site's whole name.
    pub name: String,
    /// Its bytes.
    pub bytes: u64,
    /// How it is known.
    pub known: Known,
}

/// One term of a waterfall.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Term {
    /// Its key: `allocated`, `waiting_for_streams`,
    /// `cached_in_used_segments`, `cached_in_empty_segments`,
    /// `free_under_limit`, `free_on_device`, `outside_allocator`.
    pub name: &'static str,
    /// Its bytes.
    pub bytes: u64,
    /// How it is known.
    pub known: Known,
    /// Its parts by category (for `allocated`), summing to `bytes`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<Part>,
    /// The sites with the most bytes in it (for `allocated`), the user's
    /// line first in their names; not all of it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<Part>,
}

impl Term {
    fn new(name: &'static str, bytes: u64, known: Known) -> Term {
        Term {
            name,
            bytes,
            known,
            categories: Vec::new(),
            sites: Vec::new(),
        }
    }

    /// The term in words, for tables.
    pub fn label(&self) -> &'static str {
        match self.name {
            "allocated" => "allocated (held by the program)",
            "waiting_for_streams" => "freed, waiting on another stream",
            "cached_in_used_segments" => "cached free in segments with live blocks",
            "cached_in_empty_segments" => "cached free in empty segments",
            "free_under_limit" => "free under the limit",
            "free_on_device" => "free on the device",
            "outside_allocator" => "outside the allocator",
            other => other,
        }
    }
}

/// The fragmentation a waterfall's cached free space shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Fragmentation {
    /// Segments that hold a live block and free space.
    pub segments_with_free: u64,
    /// Segments that hold a live block.
    pub segments_in_use: u64,
    /// Segments that hold none.
    pub empty_segments: u64,
    /// The largest contiguous free block of any segment.
    pub largest_free_block: u64,
    /// At an OOM: the size asked for.
    pub requested_bytes: Option<u64>,
    /// At an OOM: the segment the allocator tried to add for it (PyTorch's
    /// default rounding).
    pub segment_bytes: Option<u64>,
}

/// The card's memory as last sampled, at a waterfall's moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CardState {
    /// Free on the card at the sample.
    pub free_bytes: u64,
    /// The card's total.
    pub total_bytes: u64,
    /// Always measured.
    pub known: Known,
}

/// Where every byte under the limit was at one moment. As JSON (its
/// `Serialize` is in [`print::words::waterfall`](crate::print::words::waterfall))
/// it carries the limit in words, `limit_line`, and its notes as sentences.
#[derive(Clone, Debug, PartialEq)]
pub struct Waterfall {
    /// The limit, in bytes, when known.
    pub limit_bytes: Option<u64>,
    /// Where it comes from: `cap`, `card`, `inferred_cap`, or `unknown`.
    pub limit_source: &'static str,
    /// How it is known.
    pub limit_known: Option<Known>,
    /// The limit (none: unknown), which its line words (`12.00 GiB cap
    /// from set_per_process_memory_fraction(0.1411)`).
    pub limit: Option<Limit>,
    /// For an inferred cap: its range, low and high.
    pub limit_range: Option<(u64, u64)>,
    /// What the terms add up to.
    pub sums_to: SumsTo,
    /// Their sum, exactly.
    pub total_bytes: u64,
    /// The terms, in order.
    pub terms: Vec<Term>,
    /// Shown beside the terms, not counted in their sum: the memory outside
    /// the allocator under a cap (the cap bounds reserved memory only).
    pub beside: Vec<Term>,
    /// Fragmentation of the cached free space.
    pub fragmentation: Fragmentation,
    /// The card's memory as last sampled, when the trace samples it.
    pub card: Option<CardState>,
    /// What to know to read it.
    pub notes: Vec<Note>,
}

// A limit's fraction is a ratio the recorder wrote, never NaN: a waterfall
// equals itself, as the results that hold one require.
impl Eq for Waterfall {}

/// What to know to read a waterfall, worded by
/// [`print::words::waterfall::note`](crate::print::words::waterfall::note)
/// (and so in JSON: its `Serialize` is there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Note {
    /// Blocks and empty segments add up to more than was reserved.
    OverReserved {
        /// By how much.
        over_bytes: u64,
        /// Reserved bytes.
        reserved_bytes: u64,
    },
    /// The categories do not add up to the allocated bytes.
    CategoriesOff {
        /// Their sum.
        categories_bytes: u64,
        /// Allocated bytes.
        allocated_bytes: u64,
    },
    /// No limit was recorded: the limit is the card's total as sampled.
    CardAsLimit {
        /// The card's total.
        total_bytes: u64,
    },
    /// The last sample's free figure differs from the one worked out.
    SampleFree {
        /// What the sample said.
        free_bytes: u64,
    },
    /// The trace samples no device memory.
    NoSamples,
    /// The card, not the cap, was the binding limit.
    CardBinding {
        /// Free on the card.
        card_free_bytes: u64,
        /// What the cap still allowed.
        cap_free_bytes: u64,
    },
    /// Reserved memory is above the limit, lowered after it was reserved.
    LimitLowered {
        /// Reserved bytes.
        reserved_bytes: u64,
        /// The limit.
        limit_bytes: u64,
    },
    /// The limit is unknown.
    UnknownLimit,
    /// Enough cached free in all, but in pieces.
    Fragmented {
        /// Cached free in segments that hold live blocks.
        cached_bytes: u64,
        /// Those segments with free space, when the moment lists segments.
        segments: Option<u64>,
        /// The size asked for.
        requested_bytes: u64,
        /// The largest free block.
        largest_free_block: u64,
    },
}

/// A moment's state, as a waterfall needs it: from a [`ReplayState`]
/// ([`waterfall_now`]), from a summary's copy of its peak, or from a
/// simulated allocator.
#[derive(Clone, Debug, Default)]
pub struct Moment {
    /// Bytes of blocks the caller holds.
    pub allocated: u64,
    /// Bytes of blocks not back in the cache (`allocated` and those waiting
    /// on another stream).
    pub active: u64,
    /// Reserved bytes.
    pub reserved: u64,
    /// The segments, with their live blocks (waiting ones included).
    pub segments: Vec<Segment>,
    /// The largest free block of the segments.
    pub largest_free_block: u64,
    /// Allocated bytes by category (summing to `allocated`).
    pub categories: CategoryTable,
    /// The top sites, named, with their allocated bytes.
    pub sites: Vec<(String, u64)>,
    /// At an OOM: the size asked for.
    pub request: Option<u64>,
    /// The device's memory as last sampled.
    pub device_memory: Option<DeviceMemoryEvent>,
    /// Memory outside the allocator as measured at the last sample.
    pub outside: Option<u64>,
    /// The limit in force.
    pub limit: Option<Limit>,
}

fn category_known(basis: Basis) -> Known {
    match basis {
        Basis::Exact => Known::Exact,
        Basis::Inferred => Known::Inferred,
        Basis::Mixed => Known::PartlyExact,
    }
}

impl Waterfall {
    /// The waterfall of a moment. Its terms sum exactly to
    /// [`total_bytes`](Self::total_bytes): the limit, the card's total, or
    /// reserved memory (see [`SumsTo`]).
    pub fn of(m: &Moment) -> Waterfall {
        let mut notes = Vec::new();
        let reserved = m.reserved;
        let allocated = m.allocated;
        let waiting = m.active.saturating_sub(m.allocated);
        let empty = (m.segments.iter())
            .filter(|s| s.live_blocks == 0)
            .fold(0u64, |sum, s| sum.saturating_add(s.size()));
        let held = allocated.saturating_add(waiting).saturating_add(empty);
        let cached_used = reserved.saturating_sub(held);
        // Reserved memory is the sum of the four terms; a trace whose blocks
        // lie outside its segments (or has none) holds more than it reserved.
        let reserved_part = held.saturating_add(cached_used);
        if held > reserved {
            notes.push(Note::OverReserved {
                over_bytes: held - reserved,
                reserved_bytes: reserved,
            });
        }
        let mut alloc_term = Term::new("allocated", allocated, Known::Exact);
        let mut by_category = 0u64;
        for share in m.categories.0.iter().filter(|s| s.bytes > 0) {
            by_category = by_category.saturating_add(share.bytes);
            alloc_term.categories.push(Part {
                name: share.category.name().to_string(),
                bytes: share.bytes,
                known: category_known(share.basis()),
            });
        }
        if !alloc_term.categories.is_empty() && by_category != allocated {
            notes.push(Note::CategoriesOff {
                categories_bytes: by_category,
                allocated_bytes: allocated,
            });
        }
        alloc_term.sites = (m.sites.iter())
            .filter(|(_, b)| *b > 0)
            .take(TOP_SITES)
            .map(|(name, bytes)| Part {
                name: name.clone(),
                bytes: *bytes,
                known: Known::Exact,
            })
            .collect();
        let mut terms = vec![
            alloc_term,
            Term::new("waiting_for_streams", waiting, Known::Exact),
            Term::new("cached_in_used_segments", cached_used, Known::Exact),
            Term::new("cached_in_empty_segments", empty, Known::Exact),
        ];
        let card = m.device_memory.map(|d| CardState {
            free_bytes: d.free_bytes,
            total_bytes: d.total_bytes,
            known: Known::Measured,
        });
        let mut beside = Vec::new();
        // No limit recorded or inferred, but the card was sampled: an
        // uncapped run's limit is the card itself, its total measured.
        let limit = m.limit.or_else(|| {
            let d = m.device_memory.filter(|d| d.total_bytes > 0)?;
            notes.push(Note::CardAsLimit {
                total_bytes: d.total_bytes,
            });
            Some(Limit::sampled_card(d.total_bytes))
        });
        let (sums_to, total) = match limit {
            Some(limit) if limit.source == LimitSource::Card => {
                let total = limit.bytes.max(reserved_part);
                let room = total - reserved_part;
                match m.outside {
                    Some(outside) => {
                        let outside = outside.min(room);
                        let free = room - outside;
                        if let Some(d) = m.device_memory.filter(|d| d.free_bytes != free) {
                            notes.push(Note::SampleFree {
                                free_bytes: d.free_bytes,
                            });
                        }
                        terms.push(Term::new("free_on_device", free, Known::Measured));
                        terms.push(Term::new("outside_allocator", outside, Known::Measured));
                    }
                    None => {
                        notes.push(Note::NoSamples);
                        terms.push(Term::new("free_on_device", room, Known::Exact));
                    }
                }
                (SumsTo::CardTotal, total)
            }
            Some(limit) if limit.bytes >= reserved_part => {
                let free = limit.bytes - reserved_part;
                terms.push(Term::new("free_under_limit", free, limit.known));
                if let Some(outside) = m.outside {
                    beside.push(Term::new("outside_allocator", outside, Known::Measured));
                }
                if let Some(d) = m.device_memory.filter(|d| d.free_bytes < free) {
                    notes.push(Note::CardBinding {
                        card_free_bytes: d.free_bytes,
                        cap_free_bytes: free,
                    });
                }
                (SumsTo::Limit, limit.bytes)
            }
            Some(limit) => {
                notes.push(Note::LimitLowered {
                    reserved_bytes: reserved_part,
                    limit_bytes: limit.bytes,
                });
                if let Some(outside) = m.outside {
                    beside.push(Term::new("outside_allocator", outside, Known::Measured));
                }
                (SumsTo::Reserved, reserved_part)
            }
            None => {
                notes.push(Note::UnknownLimit);
                if let Some(outside) = m.outside {
                    beside.push(Term::new("outside_allocator", outside, Known::Measured));
                }
                (SumsTo::Reserved, reserved_part)
            }
        };
        let in_use = m.segments.iter().filter(|s| s.live_blocks > 0);
        let fragmentation = Fragmentation {
            segments_with_free: in_use.clone().filter(|s| s.live_bytes < s.size()).count() as u64,
            segments_in_use: in_use.count() as u64,
            empty_segments: m.segments.iter().filter(|s| s.live_blocks == 0).count() as u64,
            largest_free_block: m.largest_free_block,
            requested_bytes: m.request,
            segment_bytes: m.request.map(segment_for),
        };
        if let Some(request) = m.request {
            let cached = cached_used.saturating_add(empty);
            if cached >= request && fragmentation.largest_free_block < request {
                notes.push(Note::Fragmented {
                    cached_bytes: cached_used,
                    segments: (!m.segments.is_empty()).then_some(fragmentation.segments_with_free),
                    requested_bytes: request,
                    largest_free_block: fragmentation.largest_free_block,
                });
            }
        }
        let limit_source = match limit.map(|l| l.source) {
            Some(LimitSource::Cap) => "cap",
            Some(LimitSource::Card) => "card",
            Some(LimitSource::InferredCap) => "inferred_cap",
            None => "unknown",
        };
        Waterfall {
            limit_bytes: limit.map(|l| l.bytes),
            limit_source,
            limit_known: limit.map(|l| l.known),
            limit,
            limit_range: limit.and_then(|l| l.low_bytes.zip(l.high_bytes)),
            sums_to,
            total_bytes: total,
            terms,
            beside,
            fragmentation,
            card,
            notes,
        }
    }

    /// The sum of the terms ([`total_bytes`](Self::total_bytes), but for
    /// a hostile trace whose figures overflow: then at most `u64::MAX`).
    pub fn sum(&self) -> u64 {
        (self.terms.iter()).fold(0u64, |sum, t| sum.saturating_add(t.bytes))
    }

    /// A term by its key.
    pub fn term(&self, name: &str) -> Option<&Term> {
        self.terms
            .iter()
            .chain(&self.beside)
            .find(|t| t.name == name)
    }
}

/// The sites with the most allocated bytes in `state` now, named, most first.
pub fn top_sites(state: &ReplayState, symbols: &SymbolTable, n: usize) -> Vec<(String, u64)> {
    let mut live: Vec<(usize, u64)> = (state.site_live().iter().enumerate())
        .filter(|(_, s)| s.bytes > 0)
        .map(|(i, s)| (i, s.bytes))
        .collect();
    live.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    live.truncate(n);
    live.into_iter()
        .map(|(i, bytes)| {
            let site = crate::sites::SiteId(i as u32);
            (state.sites().describe(site, symbols).site, bytes)
        })
        .collect()
}

/// The [`Moment`] of a replay state now: its totals, segments, free space,
/// categories (as known now) and top sites. `request` is the size an OOM
/// asked for; `outside`, the memory outside the allocator at the last
/// sample (see [`super::limits::LimitWatch::outside_now`]).
pub fn moment_now(
    state: &ReplayState,
    symbols: &SymbolTable,
    limit: Option<Limit>,
    request: Option<u64>,
    outside: Option<u64>,
) -> Moment {
    let t = state.totals();
    let space: FreeSpace = state.free_space();
    Moment {
        allocated: t.allocated,
        active: t.active,
        reserved: t.reserved,
        segments: state.segments().copied().collect(),
        largest_free_block: space.largest_free_block,
        categories: CategoryTable::of(state.categories()),
        sites: top_sites(state, symbols, TOP_SITES),
        request,
        device_memory: (state.device_memory().copied()).filter(|d| d.free_bytes <= d.total_bytes),
        outside,
        limit,
    }
}

/// The waterfall of a replay state now (see [`moment_now`]): what the lead's
/// fixes and any analysis with a state in hand call.
pub fn waterfall_now(
    state: &ReplayState,
    symbols: &SymbolTable,
    limit: Option<Limit>,
    request: Option<u64>,
    outside: Option<u64>,
) -> Waterfall {
    Waterfall::of(&moment_now(state, symbols, limit, request, outside))
}

#[cfg(test)]
mod tests;
