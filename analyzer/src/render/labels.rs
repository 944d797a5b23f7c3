//! Short, readable names for sites in charts, where space is scarce. Tables
//! and JSON keep the full names.

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
