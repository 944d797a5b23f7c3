//! How figures and sites read, in every printer: values and changes in their
//! units, and short names for sites in charts, where space is scarce (tables
//! and JSON keep the full names).

use crate::analysis::compare::{Change, Unit};
use crate::sites::VIA;
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
/// loses its namespaces, template and parameter lists and compiler clone
/// suffixes, and an unknown file (`??:0`) is dropped. A site attributed to
/// the user's line (`USER via LIBRARY`) has both parts shortened.
///
/// `forward (/opt/venv/lib/python3.12/site-packages/torchvision/models/resnet.py:97)`
/// becomes `forward (torchvision/models/resnet.py:97)`.
pub fn site_label(site: &str) -> String {
    if let Some((user, library)) = split_via(site) {
        return format!("{}{VIA}{}", frame_label(user), frame_label(library));
    }
    frame_label(site)
}

/// A site's name split at [`VIA`] into the user's line and the library
/// frame, when it has both.
fn split_via(site: &str) -> Option<(&str, &str)> {
    let at = site.find(&format!("){VIA}"))?;
    Some((&site[..=at], &site[at + 1 + VIA.len()..]))
}

/// One frame `function (file:line)`, shortened (see [`site_label`]).
pub fn frame_label(frame: &str) -> String {
    let (function, location) = match split_site(frame) {
        Some(parts) => parts,
        None => return simplify_function(frame),
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

/// A file's path from its package: what follows `site-packages/`,
/// `dist-packages/` or the standard library's `lib/pythonX.Y/`; other paths
/// keep their last two components.
fn shorten_path(file: &str) -> String {
    for marker in ["site-packages/", "dist-packages/"] {
        if let Some(i) = file.rfind(marker) {
            return file[i + marker.len()..].to_string();
        }
    }
    let parts: Vec<&str> = file.split('/').filter(|p| !p.is_empty()).collect();
    let python_version = |p: &str| {
        p.strip_prefix("python")
            .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
    };
    if let Some(i) = parts.iter().rposition(|p| python_version(p))
        && i > 0
        && parts[i - 1].starts_with("lib")
        && i + 1 < parts.len()
    {
        return parts[i + 1..].join("/");
    }
    if parts.len() <= 2 {
        file.to_string()
    } else {
        parts[parts.len() - 2..].join("/")
    }
}

/// `torch::autograd::generated::ConvolutionBackward0::apply(std::vector<..>&&)`
/// becomes `ConvolutionBackward0::apply`; GCC's clone suffixes
/// (`[clone .isra.0]`, `[clone .cold]`) and the anonymous namespace go.
fn simplify_function(function: &str) -> String {
    let mut depth = 0usize;
    let mut plain = String::with_capacity(function.len());
    // Drop everything inside <...>, (...) and [...]: templates, parameters,
    // clone suffixes, ABI tags.
    for c in function.chars() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    // A qualifier after the parameters (`const`, `&&`) and a return type
    // before the name are not the name.
    let plain = plain.trim();
    let plain = plain
        .split(' ')
        .rfind(|w| !w.is_empty() && !matches!(*w, "const" | "volatile" | "&" | "&&" | "noexcept"))
        .unwrap_or(plain);
    let parts: Vec<&str> = plain.split("::").filter(|p| !p.is_empty()).collect();
    match parts.len() {
        0 => function.trim().to_string(),
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
        // GCC clones and the anonymous namespace.
        assert_eq!(
            site_label(
                "void at::native::(anonymous namespace)::launch_kernel<float>(at::TensorIterator&) [clone .isra.0] (Loss.cu:0)"
            ),
            "native::launch_kernel (Loss.cu)"
        );
        assert_eq!(
            site_label("at::Tensor::to(c10::TensorOptions) const [clone .cold]"),
            "Tensor::to"
        );
        assert_eq!(site_label("NllLossBackward0"), "NllLossBackward0");
    }

    #[test]
    fn a_site_attributed_to_the_users_line_shows_it_first_both_shortened() {
        assert_eq!(
            site_label(
                "steps (/work/gpt2/train.py:31) via forward (/opt/venv/lib/python3.12/site-packages/transformers/activations.py:66)"
            ),
            "steps (gpt2/train.py:31) via forward (transformers/activations.py:66)"
        );
        assert_eq!(
            site_label("main (train.py:90) via AccumulateGrad"),
            "main (train.py:90) via AccumulateGrad"
        );
        assert_eq!(
            site_label("load (/usr/lib/python3.12/json/decoder.py:353)"),
            "load (json/decoder.py:353)"
        );
    }
}
