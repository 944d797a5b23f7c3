//! The fragmentation series as text.

use crate::analysis::pauses::XAxis;
use crate::command::fragmentation::FragmentationResult;
use crate::print::table::{Align, Table};
use crate::units;

/// The fragmentation series as a table.
pub fn fragmentation(out: &FragmentationResult) -> String {
    let r = &out.report;
    let width = match r.axis {
        XAxis::Time => units::duration_ns(r.bucket_ns),
        XAxis::Busy => format!(
            "about {} of busy time (idle gaps cut)",
            units::duration_ns(r.axis_width)
        ),
        XAxis::Events => format!("about {} events", units::count(r.axis_width)),
    };
    let mut text = format!(
        "trace     {}\nbuckets   {} of {width}\n\n",
        out.path,
        r.buckets.len(),
    );
    let mut t = Table::new(&[
        ("from", Align::Right),
        ("events", Align::Right),
        ("reserved", Align::Right),
        ("allocated", Align::Right),
        ("cached free", Align::Right),
        ("largest free", Align::Right),
        ("external", Align::Right),
        ("internal", Align::Right),
        ("segments", Align::Right),
    ]);
    for b in &r.buckets {
        t.row([
            units::duration_ns(b.start_ns),
            units::count(b.events),
            units::bytes(b.reserved_bytes),
            units::bytes(b.allocated_bytes),
            units::bytes(b.cached_free_bytes),
            units::bytes(b.largest_free_block),
            units::percent(b.external_fragmentation),
            units::bytes(b.internal_fragmentation_bytes),
            units::count(b.segments),
        ]);
    }
    text.push_str(&t.render(0));
    text.push_str(
        "\nat each bucket's end: cached free = reserved - allocated; external = 1 - largest free / cached free;\ninternal = block sizes - requested sizes of live blocks\n",
    );
    if let Some(i) = r.worst_cached_free {
        let b = &r.buckets[i];
        text.push_str(&format!(
            "most cached free: {} at {}\n",
            units::bytes(b.cached_free_bytes),
            units::duration_ns(b.start_ns)
        ));
    }
    if let Some(i) = r.worst_external {
        let b = &r.buckets[i];
        text.push_str(&format!(
            "worst external fragmentation: {} at {}\n",
            units::percent(b.external_fragmentation),
            units::duration_ns(b.start_ns)
        ));
    }
    text
}
