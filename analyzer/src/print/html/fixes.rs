//! The fixes-tried section: where the recorded run ran out of memory, the
//! fixes whose replay got past the failure, ranked, and those that did not.

use crate::print::labels::site_label;
use crate::simulate::fixes::FixesTried;
use crate::units;
use askama::Template;

/// The section's content.
#[derive(Template)]
#[template(path = "fixes.html", config = "src/print/html/askama.toml")]
pub struct Fixes<'a> {
    /// The limit the run was replayed under.
    limit: String,
    /// The failing request's event, as the explorer knows it and as shown.
    event: u64,
    event_shown: String,
    /// The fixes that got past it, best first.
    passed: Vec<Passed<'a>>,
    /// When nothing tried gets past it: how much more the allocator's
    /// limit needs, the limit that fits, and the limit it had.
    needs_more: Option<(String, String, String)>,
    /// The fixes that did not get past it.
    failed: Vec<String>,
}

/// A fix whose replay got past the failure.
struct Passed<'a> {
    change: String,
    /// The memory it frees at the failing request, and what is left free
    /// (`-` where the replay cannot tell).
    frees: String,
    left_free: String,
    basis: &'static str,
    why: &'a str,
}

impl<'a> Fixes<'a> {
    /// The section of the fixes tried.
    pub fn new(f: &'a FixesTried) -> Fixes<'a> {
        Fixes {
            limit: units::capacity(f.limit_bytes),
            event: f.event_index,
            event_shown: units::count(f.event_index),
            passed: f
                .passed
                .iter()
                .map(|fix| Passed {
                    change: fix.change_with(site_label),
                    frees: fix.frees_bytes.map_or_else(|| "-".into(), units::bytes),
                    left_free: fix.headroom_bytes.map_or_else(|| "-".into(), units::bytes),
                    basis: fix.basis.word(),
                    why: &fix.detail,
                })
                .collect(),
            needs_more: f.needs_more_bytes.map(|more| {
                (
                    units::bytes(more),
                    units::capacity(f.limit_bytes.saturating_add(more)),
                    units::capacity(f.limit_bytes),
                )
            }),
            failed: f.failed.iter().map(|x| x.change_with(site_label)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Fixes;
    use crate::simulate::fixes::{Basis, FixKind, FixesTried, HoldsTo, TriedFix};
    use askama::Template;

    fn tried(change: &str, passed: bool) -> TriedFix {
        TriedFix {
            kind: FixKind::AllocatorSetting,
            change: change.to_string(),
            detail: "fewer <cached> blocks".to_string(),
            site: None,
            basis: Basis::Exact,
            passed,
            frees_bytes: passed.then_some(1 << 20),
            headroom_bytes: None,
            fails_at_event: None,
            holds_to: HoldsTo::End,
        }
    }

    #[test]
    fn when_nothing_passes_it_says_how_much_more_is_needed() {
        let f = FixesTried {
            limit_bytes: 100 << 20,
            event_index: 7,
            passed: Vec::new(),
            failed: vec![tried("a&b", false), tried("c", false)],
            needs_more_bytes: Some(1 << 20),
        };
        let html = Fixes::new(&f).render().unwrap();
        assert!(html.contains(
            "<p><b>Nothing tried gets past it</b>: the allocator's limit would have to be <b>101 MiB</b>, 1.0 MiB more than its 100 MiB (exact, by replay).</p>"
        ));
        assert!(html.ends_with(
            "<p class=\"muted\">Tried, and still out of memory: <code>a&amp;b</code>; <code>c</code>.</p>"
        ));
    }

    #[test]
    fn the_fixes_that_pass_are_numbered_rows() {
        let f = FixesTried {
            limit_bytes: 1 << 30,
            event_index: 7,
            passed: vec![tried("expandable_segments:True", true)],
            failed: Vec::new(),
            needs_more_bytes: None,
        };
        let html = Fixes::new(&f).render().unwrap();
        assert!(html.contains(
            "<tr><td class=\"num\">1</td><td><code>expandable_segments:True</code></td><td class=\"num\">1.0 MiB</td><td class=\"num\">-</td><td>exact</td><td>fewer &lt;cached&gt; blocks</td></tr>"
        ), "{html}");
        assert!(!html.contains("Tried, and still"));
    }
}
