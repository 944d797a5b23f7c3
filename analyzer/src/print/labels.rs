//! How figures and sites read, in every printer: values and changes in their
//! units, and short names for sites in charts, where space is scarce (tables
//! and JSON keep the full names).

use crate::analysis::compare::{Change, Unit};
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

/// Shortens a site `function (file:line)`: the file loses its directories up
/// to `site-packages/` (or all but its last two components), a C++ function
/// loses its namespaces, template and parameter lists, and an unknown file
/// (`??:0`) is dropped.
///
/// `forward (/opt/venv/lib/python3.12/site-packages/torchvision/models/resnet.py:97)`
/// becomes `forward (torchvision/models/resnet.py:97)`.
pub fn site_label(site: &str) -> String {
    let (function, location) = match split_site(site) {
        Some(parts) => parts,
        None => return simplify_function(site),
    };
    let function = simplify_function(function);
    let (file, line) = location.rsplit_once(':').unwrap_or((location, ""));
    if file.is_empty() || file == "??" {
        return function;
    }
    let file = shorten_path(file);
    if line.is_empty() || line == "0" {
        format!("{function} ({file})")
    } else {
        format!("{function} ({file}:{line})")
    }
}

/// Splits `function (location)` at the parenthesis that opens the location:
/// the last ` (` whose group runs to the end of the text.
fn split_site(site: &str) -> Option<(&str, &str)> {
    let inner = site.strip_suffix(')')?;
    let open = inner.rfind(" (")?;
    Some((&inner[..open], &inner[open + 2..]))
}

fn shorten_path(file: &str) -> String {
    for marker in ["site-packages/", "dist-packages/"] {
        if let Some(i) = file.rfind(marker) {
            return file[i + marker.len()..].to_string();
        }
    }
    let parts: Vec<&str> = file.split('/').filter(|p| !p.is_empty()).collect();
    if parts.len() <= 2 {
        file.to_string()
    } else {
        parts[parts.len() - 2..].join("/")
    }
}

/// `torch::autograd::generated::ConvolutionBackward0::apply(std::vector<..>&&)`
/// becomes `ConvolutionBackward0::apply`.
fn simplify_function(function: &str) -> String {
    let mut depth = 0usize;
    let mut plain = String::with_capacity(function.len());
    // Drop everything inside <...> and (...) : templates and parameters.
    for c in function.chars() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let plain = plain.trim();
    let plain = plain.rsplit(' ').next().unwrap_or(plain);
    let parts: Vec<&str> = plain.split("::").filter(|p| !p.is_empty()).collect();
    match parts.len() {
        0 => function.to_string(),
        1 | 2 => parts.join("::"),
        n => parts[n - 2..].join("::"),
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

    #[test]
    fn python_sites_keep_function_package_path_and_line() {
        assert_eq!(
            site_label(
                "forward (/opt/torch/.venv/lib/python3.12/site-packages/torchvision/models/resnet.py:97)"
            ),
            "forward (torchvision/models/resnet.py:97)"
        );
        assert_eq!(
            site_label("<module> (/work/probes/train.py:33)"),
            "<module> (probes/train.py:33)"
        );
        assert_eq!(site_label("step (optim.py:9)"), "step (optim.py:9)");
    }

    #[test]
    fn cpp_sites_lose_namespaces_templates_and_parameters() {
        assert_eq!(
            site_label(
                "torch::autograd::generated::ConvolutionBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&) (??:0)"
            ),
            "ConvolutionBackward0::apply"
        );
        assert_eq!(
            site_label("c10::cuda::malloc(unsigned long)"),
            "cuda::malloc"
        );
    }
}
