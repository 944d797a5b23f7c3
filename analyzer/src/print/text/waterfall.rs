//! Waterfalls as text: where every byte under the limit was at one moment.

use crate::analysis::summary::OomReport;
use crate::analysis::waterfall::{Note, SumsTo, Waterfall};
use crate::print::labels::site_label;
use crate::print::table::{Align, Table};
use crate::print::words::{self, waterfall::limit_line};
use crate::units;

/// A waterfall as an aligned table, each figure with how it is known, the
/// line that says what the terms add up to, what lies beside them, and the
/// notes; every line indented by `indent` spaces.
pub fn waterfall(w: &Waterfall, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let mut text = String::new();
    let known = w.limit_known.map_or("", |k| k.word());
    if w.limit_source == "unknown" {
        text.push_str(&format!("{pad}limit: unknown\n"));
    } else {
        text.push_str(&format!(
            "{pad}limit: {}\n",
            crate::print::labels::limit_with_known(&limit_line(w), w.limit_source, known)
        ));
    }
    let mut t = Table::new(&[
        ("", Align::Left),
        ("", Align::Right),
        ("", Align::Left),
        ("", Align::Left),
    ]);
    for term in &w.terms {
        let detail = match term.name {
            "cached_in_used_segments" => {
                let f = &w.fragmentation;
                let mut d = format!(
                    "in {} of the {} segments holding live blocks; largest free block {}",
                    units::count(f.segments_with_free),
                    units::count(f.segments_in_use),
                    units::bytes(f.largest_free_block)
                );
                if let Some(r) = f.requested_bytes {
                    d.push_str(&format!("; asked for {}", units::bytes(r)));
                }
                d
            }
            "cached_in_empty_segments" => {
                format!("{} segments", units::count(w.fragmentation.empty_segments))
            }
            _ => String::new(),
        };
        t.row([
            term.label().to_string(),
            units::bytes(term.bytes),
            term.known.word().to_string(),
            detail,
        ]);
        for part in &term.categories {
            t.row([
                format!("  {}", part.name.replace('_', " ")),
                units::bytes(part.bytes),
                part.known.word().to_string(),
                String::new(),
            ]);
        }
    }
    let total = match w.sums_to {
        SumsTo::Limit => "= the limit",
        SumsTo::CardTotal => "= the card's total",
        SumsTo::Reserved => "= reserved (limit unknown)",
    };
    t.row([
        total.to_string(),
        // At the precision the limit is named with (`5.37 GiB cap`).
        units::capacity(w.total_bytes),
        String::new(),
        format!("{} bytes", units::count(w.total_bytes)),
    ]);
    for term in &w.beside {
        t.row([
            format!("beside: {}", term.label()),
            units::bytes(term.bytes),
            term.known.word().to_string(),
            "not counted by the cap: it bounds reserved memory only".to_string(),
        ]);
    }
    // The header row of this table is blank: drop it.
    for line in t.render(indent).lines().skip(1) {
        text.push_str(line.trim_end());
        text.push('\n');
    }
    // The top sites of allocated memory, apart: their names are long.
    for term in w.terms.iter().filter(|t| !t.sites.is_empty()) {
        let mut sites = Table::new(&[("", Align::Right), ("", Align::Left), ("", Align::Left)]);
        for part in &term.sites {
            sites.row([
                units::bytes(part.bytes),
                part.known.word().to_string(),
                site_label(&part.name),
            ]);
        }
        text.push_str(&format!("{pad}{} by site (the largest):\n", term.label()));
        for line in sites.render(indent + 2).lines().skip(1) {
            text.push_str(line.trim_end());
            text.push('\n');
        }
    }
    // The card's own state matters where the card was the limit, or bound
    // before the cap did (a note says so).
    let binding = (w.notes.iter()).any(|n| matches!(n, Note::CardBinding { .. }));
    if let Some(card) = w.card.filter(|_| w.sums_to == SumsTo::CardTotal || binding) {
        text.push_str(&format!(
            "{pad}the card: {} free of {} at the last sample (measured)\n",
            units::bytes(card.free_bytes),
            units::bytes(card.total_bytes)
        ));
    }
    for note in &w.notes {
        let note = words::waterfall::note(note);
        text.push_str(&format!("{pad}note: {note}\n"));
    }
    text
}

/// An OOM in one line: what it asked for, where, and under which limit (the
/// card's free memory only where the card itself was the limit).
pub fn oom_line(o: &OomReport) -> String {
    let under = words::waterfall::under_limit(o, "measured by the driver");
    let phase = if o.phase.is_empty() {
        String::new()
    } else {
        format!(" in {}", o.phase)
    };
    format!(
        "out of memory at {}{phase}: asked for {} at {} {under}",
        units::duration_ns(o.time_ns),
        units::bytes(o.requested_bytes),
        site_label(&o.site.site)
    )
}
