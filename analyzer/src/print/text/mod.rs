//! The text printers: one function per command's result, aligned tables
//! with human units and short, readable site names.

mod compare;
mod fragmentation;
mod import;
mod info;
mod leaks;
mod report;
mod simulate;
mod summary;
mod synth;

pub use compare::compare;
pub use fragmentation::fragmentation;
pub use import::import;
pub use info::info;
pub use leaks::leaks;
pub use report::report_written;
pub use simulate::simulate;
pub use summary::summary;
pub use synth::synth;

use crate::sites::SiteDescription;

/// A site's cell in a table: its frames joined by ` <- ` (the telling frame
/// and a few callers), or with whole stacks (`full`) only the telling frame,
/// whose stack [`full_stacks`] lists below the table.
fn site_cell(site: &SiteDescription, full: bool) -> String {
    if full {
        site.site.clone()
    } else {
        site.frames.join(" <- ")
    }
}

/// The whole stacks of a table's sites.
fn full_stacks<'a>(sites: impl IntoIterator<Item = &'a SiteDescription>, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let mut text = String::new();
    for site in sites {
        text.push_str(&format!("{pad}{}:\n", site.site));
        for frame in &site.frames {
            text.push_str(&format!("{pad}    {frame}\n"));
        }
    }
    text
}
