//! The rank table as text.

use super::devices::peak_cells;
use crate::command::ranks::{RankSource, RankTable, Spread};
use crate::print::table::{Align, Table};
use crate::units;

fn spread_line(name: &str, spread: &Spread) -> String {
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

/// A rank set's peaks: a line per rank and device, the rank whose peak is
/// highest, and the spread between ranks.
pub fn ranks(table: &RankTable) -> String {
    let from = match table.ranks_from {
        RankSource::Header => "ranks from the traces' headers",
        RankSource::FileName => "ranks from the file names",
        RankSource::Order => "ranks in the order of the files",
    };
    let mut text = format!(
        "{:<10}{} ranks, {} devices ({from})\n",
        "ranks",
        units::count(table.ranks as u64),
        units::count(table.rows.len() as u64)
    );
    if let (Some(a), Some(r)) = (&table.allocated, &table.reserved) {
        text.push_str(&format!(
            "{:<10}allocated: rank {} (device {}), {}; reserved: rank {} (device {}), {}\n",
            "highest",
            a.highest.rank,
            a.highest.device,
            units::bytes(a.highest.bytes),
            r.highest.rank,
            r.highest.device,
            units::bytes(r.highest.bytes),
        ));
        text.push_str(&format!(
            "{:<10}{}\n",
            "spread",
            spread_line("allocated", a)
        ));
        text.push_str(&format!("{:<10}{}\n", "", spread_line("reserved", r)));
    }
    let mut t = Table::new(&[
        ("rank", Align::Right),
        ("device", Align::Right),
        ("peak allocated", Align::Right),
        ("", Align::Left),
        ("peak reserved", Align::Right),
        ("", Align::Left),
    ]);
    for row in &table.rows {
        let [a, a_at] = peak_cells(&row.peak_allocated);
        let [r, r_at] = peak_cells(&row.peak_reserved);
        t.row([
            row.rank.to_string(),
            row.device.to_string(),
            a,
            a_at,
            r,
            r_at,
        ]);
    }
    text.push('\n');
    text.push_str(&t.render(0));
    text
}
