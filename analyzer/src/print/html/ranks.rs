//! The sections of a run on several GPUs: the ranks of a distributed run
//! (their spread, their memory over time as small multiples, the rank
//! table), and the devices of one trace.

use crate::analysis::summary::Peak;
use crate::command::ranks::RanksSection;
use crate::command::report::ReportResult;
use crate::print::{svg, text};
use crate::units;
use askama::Template;

/// The ranks section: the set the trace belongs to.
#[derive(Template)]
#[template(path = "ranks.html", config = "src/print/html/askama.toml")]
pub struct Ranks<'a> {
    /// How many ranks the set has.
    pub count: usize,
    /// The trace the page is of: the rank whose allocated peak is highest.
    name: &'a str,
    /// How far apart the ranks' peaks are (allocated, reserved).
    spread: Option<(String, String)>,
    /// Each rank's memory over time (SVG).
    chart: String,
    rows: Vec<RankRow>,
}

/// A rank's row of the table.
struct RankRow {
    rank: u32,
    device: u32,
    allocated: PeakCells,
    reserved: PeakCells,
    end_allocated: String,
    file: String,
}

/// The devices section: the devices of one trace, the one shown marked.
#[derive(Template)]
#[template(path = "devices.html", config = "src/print/html/askama.toml")]
pub struct Devices {
    /// The device the page shows.
    shown: u32,
    rows: Vec<DeviceRow>,
}

/// A device's row of the table.
struct DeviceRow {
    device: u32,
    allocated: PeakCells,
    reserved: PeakCells,
}

/// A peak as two cells: its bytes, and when it was reached, in which phase.
pub struct PeakCells {
    bytes: String,
    when: String,
}

impl PeakCells {
    fn new(p: &Peak) -> PeakCells {
        let at = units::duration_ns(p.time_ns);
        PeakCells {
            bytes: units::bytes(p.bytes),
            when: match p.phase.as_str() {
                "" => at,
                phase => format!("{at} in {phase}"),
            },
        }
    }
}

impl<'a> Ranks<'a> {
    /// The ranks section of a report.
    pub fn new(r: &'a ReportResult, ranks: &RanksSection) -> Ranks<'a> {
        let t = &ranks.table;
        Ranks {
            count: t.ranks,
            name: &r.name,
            spread: match (&t.allocated, &t.reserved) {
                (Some(a), Some(res)) => Some((
                    text::spread_line("allocated", a),
                    text::spread_line("reserved", res),
                )),
                _ => None,
            },
            chart: svg::ranks::render(&ranks.timelines),
            rows: t
                .rows
                .iter()
                .map(|row| RankRow {
                    rank: row.rank,
                    device: row.device,
                    allocated: PeakCells::new(&row.peak_allocated),
                    reserved: PeakCells::new(&row.peak_reserved),
                    end_allocated: units::bytes(row.end_allocated),
                    file: crate::command::file_name(std::path::Path::new(&row.path)),
                })
                .collect(),
        }
    }
}

impl Devices {
    /// The devices section of a report.
    pub fn new(r: &ReportResult) -> Devices {
        Devices {
            shown: r.device,
            rows: r
                .devices
                .iter()
                .map(|d| DeviceRow {
                    device: d.device,
                    allocated: PeakCells::new(&d.peak_allocated),
                    reserved: PeakCells::new(&d.peak_reserved),
                })
                .collect(),
        }
    }
}
