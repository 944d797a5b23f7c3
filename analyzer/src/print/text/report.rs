//! What `report` wrote, as a line of text.

use crate::analysis::leaks::repetition_noun;
use crate::command::report::ReportWritten;
use crate::print::labels::site_label;
use crate::units;

/// `wrote report.html (1.2 MiB): peak allocated ..., reserved ..., the
/// leak, OOMs`.
pub fn report_written(w: &ReportWritten<'_>) -> String {
    let r = w.report;
    let leak = match r.leaks.leaks.as_slice() {
        [] => "no leak".to_string(),
        [first, rest @ ..] => format!(
            "leak: {} {} per {}{}",
            site_label(&first.growth.site.site),
            units::bytes_delta(first.growth.bytes_per_repetition as i128),
            repetition_noun(&first.phase),
            match rest.len() {
                0 => String::new(),
                n => format!(" (and {n} more)"),
            }
        ),
    };
    let fixes = r.fixes.as_ref().map_or_else(String::new, |f| {
        format!(
            " ({} of {} fixes tried get past the first)",
            f.passed.len(),
            f.passed.len() + f.failed.len()
        )
    });
    // Failures the program went on from did not end the run.
    let survived = match r.summary.survived_oom_count {
        0 => String::new(),
        n => format!(
            " ({} survived: cuDNN fell back to an algorithm that needs less workspace)",
            units::count(n)
        ),
    };
    let mut text = format!(
        "wrote {} ({}): peak allocated {}, reserved {}; {leak}; {}{survived}{fixes}\n",
        w.wrote.path,
        units::bytes(w.wrote.bytes),
        units::bytes(r.summary.peak_allocated_bytes),
        units::bytes(r.summary.peak_reserved_bytes),
        units::counted(r.summary.oom_count, "OOM", "OOMs")
    );
    if let Some(f) = &r.fits_up_to {
        text.push_str(&format!(
            "fits up to: {}\n",
            crate::print::words::plan::fits_up_to(f)
        ));
    }
    if let Some(o) = r.summary.fatal_ooms().next() {
        text.push_str(&format!("first {}:\n", super::oom_line(o)));
        text.push_str(&super::waterfall(&o.waterfall, 2));
    }
    text
}
