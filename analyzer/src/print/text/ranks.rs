//! The rank table as text.

use super::devices::peak_cells;
use crate::analysis::categories::Category;
use crate::command::compare::CompareResult;
use crate::command::file_name;
use crate::command::leaks::LeaksResult;
use crate::command::ranks::{RankResults, RankSource, RankTable, Spread};
use crate::print::labels::site_label;
use crate::print::table::{Align, Table};
use crate::units;
use std::path::Path;

/// How far apart the ranks' `name` peaks are, from the lowest rank to the
/// highest; equal peaks are said to be equal, not a rank against itself.
pub(crate) fn spread_line(name: &str, spread: &Spread) -> String {
    if spread.bytes == 0 {
        return format!(
            "{name} none: equal on every rank, {}",
            units::bytes(spread.highest.bytes)
        );
    }
    format!(
        "{name} {} ({} of the highest), rank {} (device {}) at {} to rank {} (device {}) at {}",
        units::bytes(spread.bytes),
        units::percent(spread.fraction),
        spread.lowest.rank,
        spread.lowest.device,
        units::bytes(spread.lowest.bytes),
        spread.highest.rank,
        spread.highest.device,
        units::bytes(spread.highest.bytes),
    )
}

/// The line before a job's rank table, among several runs' traces:
/// `job 1 of 2: 3 traces of world size 3, started 1,764,000,000.0 s after
/// the Unix epoch`; `index` counts from 0.
pub fn job_line(index: usize, of: usize, job: &crate::command::ranks::set::Job) -> String {
    let started = if job.start_unix_ns == 0 {
        "their start not recorded".to_string()
    } else {
        format!(
            "started at {} ns of Unix time",
            units::count(job.start_unix_ns)
        )
    };
    format!(
        "job {} of {of}: {} traces of world size {}, {started} (grouped by their headers: the same world size, started together, each rank once)",
        index + 1,
        job.paths.len(),
        job.world_size,
    )
}

/// A rank set's peaks: a line per rank and device, the rank whose peak is
/// highest, and the spread between ranks.
pub fn ranks(table: &RankTable) -> String {
    let from = source_words(table.ranks_from);
    let mut text = format!(
        "{:<10}{} ranks, {} devices ({from})\n",
        "ranks",
        units::count(table.ranks as u64),
        units::count(table.rows.len() as u64)
    );
    if let (Some(a), Some(r)) = (&table.allocated, &table.reserved) {
        text.push_str(&format!(
            "{:<10}allocated: {}; reserved: {}\n",
            "highest",
            highest(a),
            highest(r)
        ));
        text.push_str(&format!(
            "{:<10}{}\n",
            "spread",
            spread_line("allocated", a)
        ));
        text.push_str(&format!("{:<10}{}\n", "", spread_line("reserved", r)));
    }
    // A column per category with bytes at some rank's peak.
    let categories: Vec<Category> = Category::ALL
        .into_iter()
        .filter(|&c| {
            table
                .rows
                .iter()
                .any(|r| r.categories_at_peak.get(c).bytes > 0)
        })
        .collect();
    let mut columns = vec![
        ("rank", Align::Right),
        ("device", Align::Right),
        ("peak allocated", Align::Right),
        ("", Align::Left),
        ("peak reserved", Align::Right),
        ("", Align::Left),
        ("at end", Align::Right),
    ];
    columns.extend(categories.iter().map(|c| (c.label(), Align::Right)));
    columns.push(("file", Align::Left));
    let mut t = Table::new(&columns);
    for row in &table.rows {
        let [a, a_at] = peak_cells(&row.peak_allocated);
        let [r, r_at] = peak_cells(&row.peak_reserved);
        let mut cells = vec![
            row.rank.to_string(),
            row.device.to_string(),
            a,
            a_at,
            r,
            r_at,
            units::bytes(row.end_allocated),
        ];
        cells.extend(
            categories
                .iter()
                .map(|&c| units::bytes(row.categories_at_peak.get(c).bytes)),
        );
        cells.push(file_name(Path::new(&row.path)));
        t.row(cells);
    }
    text.push('\n');
    text.push_str(&t.render(0));
    if !categories.is_empty() {
        text.push_str("(categories at each allocated peak)\n");
    }
    text
}

/// The rank whose peak is highest, or that every rank's is the same.
fn highest(spread: &Spread) -> String {
    let h = &spread.highest;
    if spread.bytes == 0 {
        return format!("every rank, {}", units::bytes(h.bytes));
    }
    format!(
        "rank {} (device {}), {}",
        h.rank,
        h.device,
        units::bytes(h.bytes)
    )
}

/// Where ranks were read, in words.
fn source_words(from: RankSource) -> &'static str {
    match from {
        RankSource::Header => "ranks from the traces' headers",
        RankSource::FileName => "ranks from the file names",
        RankSource::Order => "ranks in the order of the files",
    }
}

fn ranks_line(from: RankSource, results: usize) -> String {
    let from = source_words(from);
    format!(
        "{:<10}{} GPUs, {from}\n\n",
        "ranks",
        units::count(results as u64)
    )
}

/// The leaks of every rank: its leaking sites, the fastest, and what stays
/// live at the end.
pub fn rank_leaks(set: &RankResults<LeaksResult>) -> String {
    let mut t = Table::new(&[
        ("rank", Align::Right),
        ("device", Align::Right),
        ("leaks", Align::Right),
        ("fastest", Align::Right),
        ("site", Align::Left),
        ("never freed", Align::Right),
        ("file", Align::Left),
    ]);
    for row in &set.rows {
        let r = &row.result.report;
        let (fastest, site) = match r.leaks.first() {
            Some(l) => (
                format!(
                    "{}/{}",
                    units::bytes_delta(i128::from(l.growth.bytes_per_repetition)),
                    l.phase
                ),
                site_label(&l.growth.site.site),
            ),
            None => ("-".to_string(), String::new()),
        };
        t.row([
            row.rank.to_string(),
            row.device.to_string(),
            units::count(r.leaks.len() as u64),
            fastest,
            site,
            units::bytes(r.never_freed_bytes),
            file_name(Path::new(&row.result.path)),
        ]);
    }
    ranks_line(set.ranks_from, set.rows.len()) + &t.render(0)
}

/// Each rank against the same rank of the baseline: peaks and the gate.
pub fn rank_compare(set: &RankResults<CompareResult>) -> String {
    let mut t = Table::new(&[
        ("rank", Align::Right),
        ("device", Align::Right),
        ("base peak", Align::Right),
        ("new peak", Align::Right),
        ("change", Align::Right),
        ("gate", Align::Left),
        ("files", Align::Left),
    ]);
    for row in &set.rows {
        let c = &row.result;
        let (base, new, change) = match c.comparison.metric("peak_allocated") {
            Some(m) => (
                units::bytes(m.change.base as u64),
                units::bytes(m.change.new as u64),
                format!(
                    "{} ({})",
                    units::bytes_delta(m.change.delta as i128),
                    m.change
                        .percent
                        .map_or("new".to_string(), |p| format!("{p:+.1}%"))
                ),
            ),
            None => Default::default(),
        };
        let gate = if c.gate.passed {
            "passed".to_string()
        } else {
            format!("FAILED: {}", c.gate.failed.join("; "))
        };
        t.row([
            row.rank.to_string(),
            row.device.to_string(),
            base,
            new,
            change,
            gate,
            format!(
                "{} against {}",
                c.comparison.new.name, c.comparison.base.name
            ),
        ]);
    }
    let failed = set.rows.iter().filter(|r| !r.result.gate.passed).count();
    let mut text = ranks_line(set.ranks_from, set.rows.len()) + &t.render(0);
    text.push_str(&format!(
        "\ngate: {}\n",
        if failed == 0 {
            "passed on every rank".to_string()
        } else {
            format!("failed on {failed} of {} ranks", set.rows.len())
        }
    ));
    text
}
