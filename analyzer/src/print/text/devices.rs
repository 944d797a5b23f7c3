//! The table of devices that heads a command's output on a trace of
//! several devices, and each device's result in turn.

use crate::analysis::peaks::DevicePeaks;
use crate::analysis::summary::Peak;
use crate::command::ByDevice;
use crate::print::table::{Align, Table};
use crate::units;

/// When a peak was reached, and in which phase.
pub(super) fn at(time_ns: u64, phase: &str) -> String {
    if phase.is_empty() {
        format!("at {}", units::duration_ns(time_ns))
    } else {
        format!("at {} in {phase}", units::duration_ns(time_ns))
    }
}

/// A peak's cells: its bytes, and when.
pub(super) fn peak_cells(peak: &Peak) -> [String; 2] {
    [units::bytes(peak.bytes), at(peak.time_ns, &peak.phase)]
}

/// One line per device: its allocated and reserved peaks, when and in
/// which phase each was reached.
pub fn devices(peaks: &[DevicePeaks]) -> String {
    let mut t = Table::new(&[
        ("device", Align::Right),
        ("peak allocated", Align::Right),
        ("", Align::Left),
        ("peak reserved", Align::Right),
        ("", Align::Left),
    ]);
    for d in peaks {
        let [a, a_at] = peak_cells(&d.peak_allocated);
        let [r, r_at] = peak_cells(&d.peak_reserved);
        t.row([d.device.to_string(), a, a_at, r, r_at]);
    }
    t.render(0)
}

/// A command's result on each device, as text: with one device its text
/// alone; with several, the table of devices, then each device's text
/// under its name.
pub fn by_device<T>(result: &ByDevice<T>, text: impl Fn(&T) -> String) -> String {
    if let [one] = result.devices.as_slice() {
        return text(&one.result);
    }
    let mut out = devices(&result.peaks());
    for d in &result.devices {
        out.push_str(&format!("\n== device {} ==\n", d.peaks.device));
        out.push_str(&text(&d.result));
    }
    out
}
