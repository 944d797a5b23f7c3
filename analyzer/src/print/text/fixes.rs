//! The fixes tried for an out-of-memory error, as text.

use crate::print::labels::site_label;
use crate::print::table::{Align, Table};
use crate::simulate::fixes::FixesTried;
use crate::units;

/// The fixes that passed their replay, ranked, then those that did not, in
/// one line each; or how much more memory the run needs.
pub fn fixes(f: &FixesTried) -> String {
    let limit = if f.limit_bytes == u64::MAX {
        "with no limit".to_string()
    } else {
        format!("under the {} limit", units::capacity(f.limit_bytes))
    };
    let mut text = format!(
        "fixes tried for the out-of-memory error at event {}, each replayed {limit}:\n",
        units::count(f.event_index),
    );
    if f.passed.is_empty() {
        text.push_str("  nothing tried gets past it");
        match f.needs_more_bytes {
            // The allocator's limit, not the device's memory: the verdict
            // gives the one figure the run needs, the reserve included.
            Some(more) => text.push_str(&format!(
                ": the allocator's limit would have to be {}, {} more than its {} (exact: the smallest limit the run fits under, by replay)\n",
                units::capacity(f.limit_bytes.saturating_add(more)),
                units::bytes(more),
                units::capacity(f.limit_bytes)
            )),
            None => text.push('\n'),
        }
    } else {
        let mut t = Table::new(&[
            ("#", Align::Right),
            ("fix", Align::Left),
            ("reserved less", Align::Right),
            ("unreserved after", Align::Right),
            ("basis", Align::Left),
        ]);
        for (i, fix) in f.passed.iter().enumerate() {
            t.row([
                (i + 1).to_string(),
                fix.change_with(site_label),
                opt_bytes(fix.frees_bytes),
                opt_bytes(fix.headroom_bytes),
                fix.basis.word().to_string(),
            ]);
        }
        text.push_str(&t.render(2));
        for (i, fix) in f.passed.iter().enumerate() {
            text.push_str(&format!("  {}. {}\n", i + 1, fix.detail));
        }
        text.push_str(
            "  reserved less: what the allocator holds at the failing request, less than without the fix with the request granted; unreserved after: the limit less what the allocator holds right after the request (cached free memory not counted)\n",
        );
    }
    if !f.failed.is_empty() {
        let names: Vec<String> = f.failed.iter().map(|x| x.change_with(site_label)).collect();
        text.push_str(&format!(
            "  tried, still out of memory: {}\n",
            names.join("; ")
        ));
    }
    text
}

fn opt_bytes(b: Option<u64>) -> String {
    b.map_or_else(|| "-".into(), units::bytes)
}
