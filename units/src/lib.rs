//! # vramtrace-units
//!
//! Byte sizes as people write them, in one grammar for every part of
//! vramtrace that reads one: the analyzer's flags, the recorder's
//! `VRAMTRACE_KEEP_LAST`, and (through the C library's
//! `vramtrace_parse_size`) the Python package's `keep_last` and its pytest
//! plugin's limits. A size written one way is read the same everywhere.
//!
//! The grammar ([`parse_size`]): a number (digits, one `.`, `_` between
//! digits), optional spaces, and a unit, case-insensitive:
//!
//! | unit | bytes |
//! |---|---|
//! | `B` | 1 |
//! | `KiB`, `MiB`, `GiB`, `TiB` (or `K`, `M`, `G`, `T`) | 2^10, 2^20, 2^30, 2^40 |
//! | `KB`, `MB`, `GB`, `TB` | 10^3, 10^6, 10^9, 10^12 |
//!
//! A number without a unit is refused (is `24` bytes or GiB?), but for `0`.
//! Fractions are rounded to the nearest byte.
//!
//! ```
//! use vramtrace_units::{SizeError, parse_size};
//!
//! assert_eq!(parse_size("64MiB"), Ok(64 << 20));
//! assert_eq!(parse_size("1.5 gb"), Ok(1_500_000_000));
//! assert_eq!(parse_size("24"), Err(SizeError::NoUnit));
//! ```

#![warn(missing_docs)]

/// The units [`parse_size`] knows, as a message lists them.
pub const SIZE_UNITS: &str = "B, KiB, MiB, GiB, TiB, KB, MB, GB or TB";

/// Sizes in the forms [`parse_size`] reads, for messages.
pub const SIZE_EXAMPLES: &str = "512B, 64MiB, 24GiB, 80GB";

/// Why a text is not a size. The message does not repeat the text: the
/// caller, who knows where it came from, names it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// It does not start with a number.
    #[error("not a size (examples: {SIZE_EXAMPLES})")]
    NotANumber,
    /// A number other than 0, with no unit.
    #[error("a size needs a unit ({SIZE_UNITS})")]
    NoUnit,
    /// A unit this grammar does not know.
    #[error("unknown size unit '{0}' (use {SIZE_UNITS})")]
    UnknownUnit(String),
    /// 2^64 bytes or more.
    #[error("a size past 2^64 bytes")]
    OutOfRange,
}

/// 2^64: the first value a `u64` cannot hold (`u64::MAX as f64` rounds up
/// to it).
const TWO_TO_64: f64 = 18_446_744_073_709_551_616.0;

/// Reads a size in the grammar the crate's documentation gives: `64MiB`,
/// `1.5 GiB`, `80GB`, `512B`, `0`.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number
        .replace('_', "")
        .parse()
        .map_err(|_| SizeError::NotANumber)?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" if number == 0.0 => 1.0,
        "" => return Err(SizeError::NoUnit),
        "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => return Err(SizeError::UnknownUnit(unit.trim().to_string())),
    };
    let value = number * scale;
    if !value.is_finite() || !(0.0..TWO_TO_64).contains(&value) {
        return Err(SizeError::OutOfRange);
    }
    Ok(value.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_binary_decimal_and_bytes_in_any_case() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64 mib"), Ok(64 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("80GB"), Ok(80_000_000_000));
        assert_eq!(parse_size("500 kB"), Ok(500_000));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("1_000MB"), Ok(1_000_000_000));
        assert_eq!(parse_size(" 0 "), Ok(0));
        assert_eq!(parse_size("0.5B"), Ok(1), "rounded to the nearest byte");
    }

    #[test]
    fn refuses_what_is_not_a_size() {
        assert_eq!(parse_size("24"), Err(SizeError::NoUnit));
        assert_eq!(parse_size(""), Err(SizeError::NotANumber));
        assert_eq!(parse_size("MiB"), Err(SizeError::NotANumber));
        assert_eq!(parse_size("-3MiB"), Err(SizeError::NotANumber));
        assert_eq!(parse_size("nanMiB"), Err(SizeError::NotANumber));
        assert_eq!(parse_size("1.2.3GiB"), Err(SizeError::NotANumber));
        assert_eq!(
            parse_size("3 parsecs"),
            Err(SizeError::UnknownUnit("parsecs".into()))
        );
        assert_eq!(parse_size("16777216TiB"), Err(SizeError::OutOfRange));
        assert_eq!(
            parse_size("18446744073709551615B"),
            Err(SizeError::OutOfRange)
        );
        assert_eq!(
            parse_size("18446744073709549568B"),
            Ok(18446744073709549568)
        );
    }
}
