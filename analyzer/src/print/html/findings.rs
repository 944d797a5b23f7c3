//! The findings section: the headline figures as cards, then what the
//! analyses found, one sentence each, the worrying ones marked.

use super::ReportInput;
use crate::analysis::leaks::repetition_noun;
use crate::analysis::summary::Peak;
use crate::print::labels::{category_basis, site_label};
use crate::units;
use askama::Template;

/// The section's content.
#[derive(Template)]
#[template(path = "findings.html", config = "src/print/html/askama.toml")]
pub struct Findings {
    /// The headline figures.
    cards: Vec<Card>,
    /// What was found, in the order the page tells it.
    findings: Vec<Finding>,
}

/// A headline figure: a label, its value, a note under it.
struct Card {
    label: &'static str,
    value: String,
    note: String,
    /// `good`, `bad`, or empty: how the value is coloured.
    class: &'static str,
}

/// One thing the analyses found, with the figures its sentence shows.
enum Finding {
    /// When allocated and reserved memory peaked.
    Peak {
        allocated: String,
        at: String,
        phase: String,
        reserved: String,
    },
    /// The largest allocation site at the peak.
    TopSite {
        site: String,
        bytes: String,
        blocks: String,
        share: String,
    },
    /// A site whose memory grows across the repetitions of a phase.
    Leak {
        site: String,
        per_repetition: String,
        noun: String,
        phase: String,
        repetitions: u64,
        steadiness: String,
        retained: String,
    },
    /// No site grows across the repetitions of these phases (name,
    /// repetitions, trend).
    NoLeak {
        phases: Vec<(String, u64, &'static str)>,
    },
    /// Much of reserved memory was cached but free at the peak.
    CachedFree {
        cached: String,
        reserved: String,
        share: String,
        largest_free_block: Option<String>,
    },
    /// cuDNN fell back to an algorithm needing a smaller workspace.
    CudnnFellBack { times: String },
    /// The run ran out of memory (the first failure's figures).
    OutOfMemory {
        times: String,
        at: String,
        phase: String,
        requested: String,
        site: String,
        limit: String,
    },
    /// Blocks still allocated when the trace ended, and where most came from.
    NeverFreed {
        blocks: String,
        bytes: String,
        most_from: Option<(String, String)>,
    },
    /// The trace contradicts itself.
    Inconsistent { times: String },
}

impl Finding {
    /// Whether the finding is worth worrying about (marked in the list).
    fn bad(&self) -> bool {
        matches!(
            self,
            Finding::Leak { .. }
                | Finding::CachedFree { .. }
                | Finding::OutOfMemory { .. }
                | Finding::Inconsistent { .. }
        )
    }
}

/// When something happened: its time, and its busy time where the page's
/// axis is busy time (`718.79 ms, 175.12 ms of busy time`).
fn moment(input: &ReportInput<'_>, peak: &Peak) -> String {
    let at = units::duration_ns(peak.time_ns);
    match input.busy() {
        Some(e) => format!(
            "{at}, {} of busy time",
            units::duration_ns(e.busy_ns(peak.index, peak.time_ns))
        ),
        None => at,
    }
}

impl Findings {
    /// The findings of one report.
    pub fn new(input: &ReportInput<'_>) -> Findings {
        Findings {
            cards: cards(input),
            findings: findings(input),
        }
    }
}

fn cards(input: &ReportInput<'_>) -> Vec<Card> {
    let s = &input.report.summary;
    let leaks = &input.report.leaks;
    let card = |label, value, note, class| Card {
        label,
        value,
        note,
        class,
    };
    let mut cards = vec![card(
        "peak allocated",
        units::bytes(s.peak_allocated_bytes),
        format!(
            "at {} in {}",
            moment(input, &s.peak_allocated),
            super::phase_or_none(&s.peak_phase)
        ),
        "",
    )];
    if let Some(u) = s.categories.user_lead() {
        cards.push(card(
            "fills the peak",
            format!(
                "{} (your tag)",
                crate::print::printable::printable_cut(&u.name, 24)
            ),
            format!(
                "{} of it ({}, exact)",
                units::percent(u.at_allocated_peak as f64 / s.peak_allocated_bytes.max(1) as f64),
                units::bytes(u.at_allocated_peak)
            ),
            "",
        ));
    } else if let Some(d) = &s.categories.dominant {
        cards.push(card(
            "fills the peak",
            d.category.label().to_string(),
            format!(
                "{} of it ({}, {})",
                units::percent(d.share),
                units::bytes(d.bytes),
                category_basis(d.basis)
            ),
            "",
        ));
    }
    cards.push(card(
        "peak reserved",
        units::bytes(s.peak_reserved_bytes),
        format!("at {}", moment(input, &s.peak_reserved)),
        "",
    ));
    cards.push(card(
        "peak requested",
        units::bytes(s.peak_requested_bytes),
        "sizes as the program asked".to_string(),
        "",
    ));
    cards.push(match leaks.leaks.as_slice() {
        [] => card(
            "leaks",
            "none".to_string(),
            "no site grows across repetitions".to_string(),
            "good",
        ),
        [first, rest @ ..] => card(
            "leak",
            format!(
                "{} per {}",
                units::bytes_delta(first.growth.bytes_per_repetition as i128),
                repetition_noun(&first.phase)
            ),
            match rest.len() {
                0 => site_label(&first.growth.site.site),
                n => format!("{} and {n} more", site_label(&first.growth.site.site)),
            },
            "bad",
        ),
    });
    // A failure the program went on from (a cuDNN workspace's) is said
    // beside the count, not counted in it.
    let fatal = s.oom_count - s.survived_oom_count;
    let survived = match s.survived_oom_count {
        0 => String::new(),
        n => format!("; {} survived (cuDNN fell back)", units::count(n)),
    };
    cards.push(card(
        "out of memory",
        fatal.to_string(),
        match (fatal, s.survived_oom_count) {
            (0, 0) => "no allocation failed".to_string(),
            (0, _) => format!("none the run did not survive{survived}"),
            _ => format!("allocations failed{survived}"),
        },
        if fatal == 0 { "good" } else { "bad" },
    ));
    let frag = s.at_peak.external_fragmentation.unwrap_or(0.0);
    cards.push(card(
        "cached free at peak",
        units::bytes(s.at_peak.cached_free_bytes),
        format!("external fragmentation {}", units::percent(frag)),
        "",
    ));
    cards
}

fn findings(input: &ReportInput<'_>) -> Vec<Finding> {
    let s = &input.report.summary;
    let leaks = &input.report.leaks;
    let mut found = vec![Finding::Peak {
        allocated: units::bytes(s.peak_allocated_bytes),
        at: moment(input, &s.peak_allocated),
        phase: super::phase_or_none(&s.peak_phase).to_string(),
        reserved: units::bytes(s.peak_reserved_bytes),
    }];
    if let Some(top) = s.top_sites_at_peak.first() {
        found.push(Finding::TopSite {
            site: site_label(&top.site.site),
            bytes: units::bytes(top.bytes),
            blocks: units::count(top.count),
            share: units::percent(top.share),
        });
    }
    for l in &leaks.leaks {
        let g = &l.growth;
        found.push(Finding::Leak {
            site: site_label(&g.site.site),
            per_repetition: units::bytes_delta(g.bytes_per_repetition as i128),
            noun: repetition_noun(&l.phase).to_string(),
            phase: l.phase.clone(),
            repetitions: g.repetitions,
            steadiness: units::percent(g.steadiness),
            retained: units::bytes(g.retained_bytes),
        });
    }
    if leaks.leaks.is_empty() && !leaks.repeated_phases.is_empty() {
        found.push(Finding::NoLeak {
            phases: leaks
                .repeated_phases
                .iter()
                .take(3)
                .map(|p| (p.phase.clone(), p.repetitions, p.trend.word()))
                .collect(),
        });
    }
    if s.peak_reserved_bytes > 0 {
        let cached = s.at_peak.cached_free_bytes;
        let share = cached as f64 / s.at_peak.reserved_bytes.max(1) as f64;
        if share > 0.25 {
            found.push(Finding::CachedFree {
                cached: units::bytes(cached),
                reserved: units::bytes(s.at_peak.reserved_bytes),
                share: units::percent(share),
                largest_free_block: s.at_peak.largest_free_block.map(units::bytes),
            });
        }
    }
    if s.survived_oom_count > 0 {
        found.push(Finding::CudnnFellBack {
            times: units::counted(s.survived_oom_count, "time", "times"),
        });
    }
    if let Some(o) = s.fatal_ooms().next() {
        found.push(Finding::OutOfMemory {
            times: units::counted(s.oom_count - s.survived_oom_count, "time", "times"),
            at: units::duration_ns(o.time_ns),
            phase: super::phase_or_none(&o.phase).to_string(),
            requested: units::bytes(o.requested_bytes),
            site: site_label(&o.site.site),
            limit: super::waterfall::oom_words(o),
        });
    }
    if leaks.never_freed_blocks > 0 {
        found.push(Finding::NeverFreed {
            blocks: units::count(leaks.never_freed_blocks),
            bytes: units::bytes(leaks.never_freed_bytes),
            most_from: leaks
                .never_freed
                .first()
                .map(|b| (site_label(&b.site.site), units::bytes(b.bytes))),
        });
    }
    if s.inconsistencies.total > 0 {
        found.push(Finding::Inconsistent {
            times: units::counted(s.inconsistencies.total, "time", "times"),
        });
    }
    found
}
