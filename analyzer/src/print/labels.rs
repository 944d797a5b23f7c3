//! How figures and sites read, in every printer: values and changes in their
//! units, and short names for sites (defined with the sites, in
//! [`crate::sites`]): text and charts shorten them, JSON keeps them whole.

use crate::analysis::compare::{Change, Unit};
pub use crate::sites::{frame_label, site_label};
use crate::units;

/// A value in its unit, for tables: `412.1 MiB`, `1,234`, `1.25 s`, `12.3%`.
/// Per-iteration counts keep one decimal.
pub fn format_value(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Bytes => units::bytes(v.max(0.0).round() as u64),
        Unit::Count => count(v),
        Unit::Nanoseconds => units::duration_ns(v.max(0.0).round() as u64),
        Unit::Ratio => units::percent(v),
    }
}

/// A change in its unit, always signed unless zero: `+10.0 MiB`, `-3`,
/// `+20.0 ms`, and percentage points for ratios (`+1.7 pp`).
pub fn format_delta(unit: Unit, d: f64) -> String {
    let sign = if d > 0.0 {
        "+"
    } else if d < 0.0 {
        "-"
    } else {
        ""
    };
    match unit {
        Unit::Bytes => units::bytes_delta(d.round() as i128),
        Unit::Ratio => format!("{sign}{:.1} pp", d.abs() * 100.0),
        _ => format!("{sign}{}", format_value(unit, d.abs())),
    }
}

/// The relative change: `+2.4%`, `0.0%`, or `new` for a rise from zero.
pub fn format_percent(change: &Change) -> String {
    match change.percent {
        Some(0.0) => "0.0%".into(),
        Some(p) => format!("{p:+.1}%"),
        None => "new".into(),
    }
}

fn count(v: f64) -> String {
    let whole = v.round();
    if (v - whole).abs() < 0.05 {
        units::count(whole.max(0.0) as u64)
    } else {
        format!(
            "{}.{}",
            units::count(v.trunc() as u64),
            ((v.fract() * 10.0).round() as u64).min(9)
        )
    }
}

/// `10`, or `10 → 12` when the runs differ.
pub fn repetitions(c: &Change) -> String {
    if c.is_zero() {
        format_value(Unit::Count, c.new)
    } else {
        format!(
            "{} → {}",
            format_value(Unit::Count, c.base),
            format_value(Unit::Count, c.new)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_changes_read_well() {
        assert_eq!(format_delta(Unit::Bytes, (1 << 20) as f64), "+1.0 MiB");
        assert_eq!(format_delta(Unit::Count, -3.0), "-3");
        assert_eq!(format_delta(Unit::Nanoseconds, 20e6), "+20.00 ms");
        assert_eq!(format_delta(Unit::Ratio, -0.127), "-12.7 pp");
        assert_eq!(format_value(Unit::Count, 1234.5), "1,234.5");
        assert_eq!(format_percent(&Change::of(100.0, 102.4)), "+2.4%");
        assert_eq!(format_percent(&Change::of(0.0, 1.0)), "new");
        assert_eq!(format_percent(&Change::of(5.0, 5.0)), "0.0%");
    }
}
