//! Human units: sizes in KiB/MiB/GiB, durations in us/ms/s, and the parsing
//! of sizes, durations and counts as people write them.

/// Why a size, time or count cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    /// Not a number with a unit.
    #[error("'{text}' is not a {what} (examples: {examples})")]
    NotANumber {
        /// The text.
        text: String,
        /// What it should be: `size`, `time`, `count`.
        what: &'static str,
        /// Examples of the right form.
        examples: &'static str,
    },
    /// A size given without a unit.
    #[error(
        "'{text}' has no unit: write {text}GiB (binary), {text}GB (decimal) or {text}B (bytes)"
    )]
    NoUnit {
        /// The text.
        text: String,
    },
    /// A unit this parser does not know.
    #[error("unknown {what} unit '{unit}' in '{text}'{hint}")]
    UnknownUnit {
        /// The unit.
        unit: String,
        /// The whole text.
        text: String,
        /// `size` or `time`.
        what: &'static str,
        /// The units known, as a parenthesized hint (or nothing).
        hint: &'static str,
    },
    /// A value too large, negative, or not finite.
    #[error("{what} '{text}' is out of range")]
    OutOfRange {
        /// The text.
        text: String,
        /// `size`, `time` or `count`.
        what: &'static str,
    },
    /// A range whose bounds are not positive or out of order.
    #[error("'{0}': the range must be positive with MIN <= MAX")]
    BadRange(String),
}

/// Formats a byte count with a binary unit: `512 B`, `1.5 KiB`, `23.4 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Formats a signed byte delta: `+1.5 MiB`, `-512 B`, `0 B`.
pub fn bytes_delta(n: i128) -> String {
    let magnitude = bytes(n.unsigned_abs().min(u64::MAX as u128) as u64);
    match n.signum() {
        1 => format!("+{magnitude}"),
        -1 => format!("-{magnitude}"),
        _ => magnitude,
    }
}

/// Formats nanoseconds: `850 ns`, `12.5 us`, `3.20 ms`, `1.25 s`, `2m 05s`.
pub fn duration_ns(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} us", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2} ms", ns as f64 / 1e6),
        1_000_000_000..60_000_000_000 => format!("{:.2} s", ns as f64 / 1e9),
        _ => {
            let s = ns / 1_000_000_000;
            if s < 3600 {
                format!("{}m {:02}s", s / 60, s % 60)
            } else {
                format!("{}h {:02}m", s / 3600, (s % 3600) / 60)
            }
        }
    }
}

/// A count and its noun, singular for one: `1 OOM`, `3 OOMs`, `1 time`.
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", count(n), if n == 1 { one } else { many })
}

/// Formats a count with thousands separators: `12,345,678`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Formats a ratio in [0, 1] as a percentage: `12.3%`.
pub fn percent(ratio: f64) -> String {
    format!("{:.1}%", ratio * 100.0)
}

/// Parses a size in the grammar of `vramtrace_units::parse_size`, the one
/// the recorder and the Python package read too: a number with a unit,
/// binary (`KiB`, `MiB`, `GiB`, `TiB`, or their initials `K`, `M`, `G`,
/// `T`) or decimal (`KB`, `MB`, `GB`, `TB`), case-insensitive, or `B` for
/// bytes: `1.5GiB`, `24 GB`, `512B`. A number without a unit is an error (24
/// bytes is never what `--capacity 24` means), but for 0.
pub fn parse_bytes(text: &str) -> Result<u64, UnitError> {
    use vramtrace_units::SizeError;
    vramtrace_units::parse_size(text).map_err(|e| match e {
        SizeError::NotANumber => UnitError::NotANumber {
            text: text.to_string(),
            what: "size",
            examples: vramtrace_units::SIZE_EXAMPLES,
        },
        SizeError::NoUnit => UnitError::NoUnit {
            text: text.to_string(),
        },
        SizeError::UnknownUnit(unit) => UnitError::UnknownUnit {
            unit: unit.to_ascii_lowercase(),
            text: text.to_string(),
            what: "size",
            hint: " (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)",
        },
        SizeError::OutOfRange => UnitError::OutOfRange {
            text: text.to_string(),
            what: "size",
        },
    })
}

/// A device's memory: two decimals in GiB from 1 GiB (`79.18 GiB`), whole
/// MiB below (`512 MiB`), so that a capacity found to 2 MiB reads as such.
pub fn capacity(n: u64) -> String {
    const MIB: u64 = 1 << 20;
    if n >= 1 << 30 {
        format!("{:.2} GiB", n as f64 / (1u64 << 30) as f64)
    } else if n >= MIB {
        format!("{} MiB", count(n.div_ceil(MIB)))
    } else {
        bytes(n)
    }
}

/// Parses a duration: a number with a unit `ns`, `us`, `ms`, `s`, `m`, `h`
/// (a bare number is seconds). Returns nanoseconds.
pub fn parse_duration_ns(text: &str) -> Result<u64, UnitError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number.parse().map_err(|_| UnitError::NotANumber {
        text: text.to_string(),
        what: "time",
        examples: "1.5s, 300ms, 2m",
    })?;
    let scale = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "" | "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        other => {
            return Err(UnitError::UnknownUnit {
                unit: other.to_string(),
                text: text.to_string(),
                what: "time",
                hint: "",
            });
        }
    };
    let value = (number * scale).round();
    if !value.is_finite() || value >= TWO_TO_64 {
        return Err(UnitError::OutOfRange {
            text: text.to_string(),
            what: "time",
        });
    }
    Ok(value as u64)
}

/// 2^64: the first value a `u64` cannot hold.
const TWO_TO_64: f64 = 18_446_744_073_709_551_616.0;

/// Parses a count with an optional decimal suffix: `5000`, `100k`, `100M`,
/// `2G`, `1e8`; a whole number, at least 1. Digits are read exactly, to
/// 2^64 − 1; a decimal or an exponent only where a float holds the whole
/// number exactly (to 2^53), never rounded onto a neighbour.
pub fn parse_count(text: &str) -> Result<u64, UnitError> {
    let t = text.trim().replace('_', "");
    let (number, scale) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1_000u64),
        Some((i, 'M')) => (&t[..i], 1_000_000),
        Some((i, 'G' | 'B')) => (&t[..i], 1_000_000_000),
        _ => (t.as_str(), 1),
    };
    let out_of_range = || UnitError::OutOfRange {
        text: text.to_string(),
        what: "count",
    };
    let value = match number.parse::<u64>() {
        Ok(n) => n.checked_mul(scale).ok_or_else(out_of_range)?,
        Err(_) => {
            let v: f64 = number.parse().map_err(|_| UnitError::NotANumber {
                text: text.to_string(),
                what: "count",
                examples: "5000, 100M, 1e8",
            })?;
            let v = v * scale as f64;
            if !v.is_finite() || !(1.0..TWO_TO_64).contains(&v) {
                return Err(out_of_range());
            }
            if v.fract() != 0.0 || v >= TWO_TO_53 {
                return Err(UnitError::NotANumber {
                    text: text.to_string(),
                    what: "whole count (past 2^53, in digits)",
                    examples: "5000, 100M, 1e8, 9007199254740993",
                });
            }
            v as u64
        }
    };
    if value == 0 {
        return Err(out_of_range());
    }
    Ok(value)
}

/// 2^53: from here on a float no longer holds every whole number.
const TWO_TO_53: f64 = 9_007_199_254_740_992.0;

/// Parses `N` or a range `MIN:MAX` of positive whole numbers.
pub fn parse_range(text: &str) -> Result<(u64, u64), UnitError> {
    let number = |s: &str| {
        s.trim().parse::<u64>().map_err(|_| UnitError::NotANumber {
            text: text.to_string(),
            what: "number or a range MIN:MAX",
            examples: "8, 64:1024",
        })
    };
    let (lo, hi) = match text.split_once(':') {
        Some((a, b)) => (number(a)?, number(b)?),
        None => {
            let n = number(text)?;
            (n, n)
        }
    };
    if lo == 0 || lo > hi {
        return Err(UnitError::BadRange(text.to_string()));
    }
    Ok((lo, hi))
}

/// Formats Unix-epoch nanoseconds as a UTC date and time.
pub fn utc_datetime(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_of_a_noun_is_singular() {
        assert_eq!(counted(1, "OOM", "OOMs"), "1 OOM");
        assert_eq!(counted(0, "OOM", "OOMs"), "0 OOMs");
        assert_eq!(counted(1200, "time", "times"), "1,200 times");
    }

    #[test]
    fn formats_sizes() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(20 << 20), "20.0 MiB");
        assert_eq!(bytes(80 << 30), "80.0 GiB");
        assert_eq!(bytes_delta(-(1 << 20)), "-1.0 MiB");
        assert_eq!(bytes_delta(0), "0 B");
        assert_eq!(capacity(1066 << 20), "1.04 GiB");
        assert_eq!(capacity(512 << 20), "512 MiB");
        assert_eq!(capacity(85_020_000_000), "79.18 GiB");
    }

    #[test]
    fn formats_durations_and_counts() {
        assert_eq!(duration_ns(999), "999 ns");
        assert_eq!(duration_ns(12_500), "12.5 us");
        assert_eq!(duration_ns(1_250_000_000), "1.25 s");
        assert_eq!(duration_ns(125_000_000_000), "2m 05s");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(12), "12");
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("512B"), Ok(512));
        assert_eq!(parse_bytes("0"), Ok(0));
        let e = parse_bytes("24").unwrap_err().to_string();
        assert!(
            e.contains("no unit") && e.contains("24GiB") && e.contains("24GB"),
            "{e}"
        );
        assert_eq!(parse_bytes("80GB"), Ok(80_000_000_000));
        assert_eq!(parse_bytes("80GiB"), Ok(80 << 30));
        assert_eq!(parse_bytes("24GiB"), Ok(24 << 30));
        assert_eq!(parse_bytes("24 gb"), Ok(24_000_000_000));
        assert_eq!(parse_bytes("1.5M"), Ok(3 << 19));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("3 parsecs").is_err());
        assert_eq!(parse_duration_ns("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration_ns("300ms"), Ok(300_000_000));
        let e = parse_bytes("3 parsecs").unwrap_err().to_string();
        assert!(e.contains("'parsecs'") && e.contains("MiB"), "{e}");
    }

    #[test]
    fn counts_and_ranges_parse() {
        assert_eq!(parse_count("100M"), Ok(100_000_000));
        assert_eq!(parse_count("1e8"), Ok(100_000_000));
        assert_eq!(parse_count("5_000"), Ok(5000));
        assert_eq!(parse_count("2.5k"), Ok(2500));
        // Digits are exact past 2^53, where a float would merge neighbours
        // (issue #46); a decimal there, or a fraction, is refused.
        assert_eq!(parse_count("9007199254740993"), Ok(9_007_199_254_740_993));
        assert_eq!(parse_count("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_count("18446744073709551616").is_err());
        assert!(parse_count("18446744073709551615k").is_err());
        assert!(parse_count("9.007199254740993e15").is_err());
        assert!(parse_count("2.4").is_err());
        assert!(parse_count("lots").is_err());
        assert!(parse_count("0").is_err());
        assert_eq!(parse_range("256"), Ok((256, 256)));
        assert_eq!(parse_range("64:1024"), Ok((64, 1024)));
        assert!(parse_range("9:3").is_err());
        assert!(parse_range("0").is_err());
    }

    /// 2^64 and more, in any unit, is out of range: not a value saturated
    /// to 2^64 − 1.
    #[test]
    fn values_past_64_bits_are_out_of_range() {
        assert_eq!(
            parse_bytes("18446744073709549568B"),
            Ok(18_446_744_073_709_549_568)
        );
        for text in [
            "18446744073709551616B",
            "16EiB",
            "17179869184GiB",
            "16777216TiB",
        ] {
            assert!(parse_bytes(text).is_err(), "{text}");
        }
        assert!(matches!(
            parse_bytes("18446744073709551616B"),
            Err(UnitError::OutOfRange { .. })
        ));
        for text in ["99999999999999h", "1e30s", "18446744074s"] {
            assert!(parse_duration_ns(text).is_err(), "{text}");
        }
        assert!(parse_duration_ns("18446744073s").is_ok());
        assert!(parse_count("18446744073709551616").is_err());
        assert!(parse_count("20000000000G").is_err());
    }

    #[test]
    fn formats_dates() {
        assert_eq!(utc_datetime(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            utc_datetime(1_795_000_000 * 1_000_000_000),
            "2026-11-18 11:06:40 UTC"
        );
    }
}
