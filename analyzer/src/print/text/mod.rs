//! The text printers: one function per command's result, aligned tables
//! with human units and short, readable site names.

mod categories;
mod compare;
mod devices;
mod fixes;
mod fragmentation;
mod import;
mod info;
mod join;
mod leaks;
mod plan;
mod ranks;
mod report;
mod simulate;
mod summary;
mod synth;
mod waterfall;

pub use compare::compare;
pub use devices::{by_device, devices};
pub use fixes::fixes;
pub use fragmentation::fragmentation;
pub use import::import;
pub use info::info;
pub use join::join;
pub use leaks::leaks;
pub use plan::{plan, plan_kv};
pub(crate) use ranks::spread_line;
pub use ranks::{job_line, rank_compare, rank_leaks, ranks};
pub use report::report_written;
pub use simulate::simulate;
pub use summary::summary;
pub use synth::synth;
pub use waterfall::{oom_line, waterfall};

use crate::print::labels::{frame_label, site_label};
use crate::sites::SiteDescription;

/// Text broken into lines of at most `width` characters (a word longer
/// than that has a line of its own), each after `indent`.
fn wrapped(text: &str, width: usize, indent: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            out.push_str(&format!("{indent}{line}\n"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push_str(&format!("{indent}{line}\n"));
    }
    out
}

/// A site's cell in a table: its name, shortened (the user's line first,
/// paths from their package: see [`site_label`]). With whole stacks
/// (`full`), [`full_stacks`] lists each one's frames below the table.
fn site_cell(site: &SiteDescription) -> String {
    site_label(&site.site)
}

/// The whole stacks of a table's sites, their paths shortened.
fn full_stacks<'a>(sites: impl IntoIterator<Item = &'a SiteDescription>, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let mut text = String::new();
    for site in sites {
        text.push_str(&format!("{pad}{}:\n", site_label(&site.site)));
        for frame in &site.frames {
            text.push_str(&format!("{pad}    {}\n", frame_label(frame)));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn text_wraps_at_words() {
        assert_eq!(
            super::wrapped("one two three four", 9, "  "),
            "  one two\n  three\n  four\n"
        );
        assert_eq!(super::wrapped("", 9, "  "), "");
    }
}
