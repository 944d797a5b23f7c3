//! The plan's sentences: its answer line, the full result's line, and
//! its notes.

use super::result::Point;
use crate::analysis::limits::Limit;
use crate::command::simulate::Device;
use crate::simulate::plan::checks::request_words;
use crate::simulate::plan::{self, Found, Model, Range, RequestList, Target, Varied};
use crate::units;

/// Where the plan is for, in words: `under the 20.00 GiB cap`, `on H100 80GB`.
pub(super) fn place_words(
    target: &Target,
    cap: Option<u64>,
    limit: Option<&Limit>,
    device: Option<&Device>,
) -> String {
    match (device, limit, cap) {
        (Some(d), _, _) => format!("on {}", d.name),
        (None, Some(l), _) => format!("under the {}", l.noun()),
        (None, None, Some(c)) => format!("under a cap of {}", units::capacity(c)),
        (None, None, None) => format!(
            "in {}",
            units::capacity(target.options.capacity.unwrap_or(0))
        ),
    }
}

/// What the answer is with cuDNN's workspaces asked for.
pub(super) fn workspace_words(varied: Varied, kept: &Found, found: &Found) -> String {
    let what = varied.words();
    let with = match (kept.largest, kept.unbounded) {
        (Some(v), _) if Some(v) == found.largest => {
            return "; the same with every convolution's cuDNN workspace at the size the runs asked for".into();
        }
        (Some(v), _) => format!("{what} {v}"),
        (None, true) => format!("every {what}"),
        (None, false) => format!("no {what}"),
    };
    format!(
        "; {with} with every convolution's cuDNN workspace at the size the runs asked for (near the limit, cuDNN falls back to algorithms that need less, and are slower)"
    )
}

/// `beyond the recorded 4–8` and the like.
pub(super) fn range_words(model: &Model, range: Range) -> String {
    let lo = model.values.iter().min().copied().unwrap_or(0);
    let hi = model.values.iter().max().copied().unwrap_or(0);
    let recorded = if lo == hi {
        format!("the recorded {lo}")
    } else {
        format!("the recorded {lo}–{hi}")
    };
    match range {
        Range::Within => format!("within {recorded}"),
        Range::Beyond => format!("beyond {recorded}"),
        Range::Below => format!("below {recorded}"),
    }
}

/// How a failing point failed: `at train.py:41 in iter2/backward, asking
/// for 1.2 GiB`.
pub(super) fn failure_words(p: &Point) -> String {
    match &p.oom {
        Some(o) => format!("at {}", request_words(&o.site, &o.phase, o.requested_bytes)),
        None => "nowhere".into(),
    }
}

pub(super) fn answer_line(
    model: &Model,
    varied: Varied,
    found: &Found,
    fits: Option<&Point>,
    next: Option<&Point>,
    place: &str,
) -> String {
    let figures = if model.is_assumed() {
        "estimate: activations and temporaries assumed to scale"
    } else {
        "inferred"
    };
    let what = varied.words();
    if found.unbounded {
        return format!(
            "memory does not grow with the {what}: every {what} fits {place} as well as any (peak {} reserved, {figures})",
            fits.map_or_else(|| "-".into(), |p| units::bytes(p.peak_reserved_bytes))
        );
    }
    match (found.largest, fits) {
        (Some(v), Some(p)) => {
            let mut line = format!(
                "{what} {v} fits {place} (peak {} reserved, {} to spare, {figures}; {}{})",
                units::bytes(p.peak_reserved_bytes),
                units::bytes(p.spare_bytes),
                range_words(model, p.range),
                super::super::simulate::survived_words(p.survived_failures)
            );
            match next {
                Some(n) => line.push_str(&format!(
                    "; {} runs out of memory {}",
                    n.value,
                    failure_words(n)
                )),
                None => line.push_str(&format!(
                    "; the search stops there ({what}s above {} are not tried)",
                    plan::LARGEST_VALUE
                )),
            }
            line
        }
        _ => match next {
            Some(n) => format!(
                "not even {what} {} fits {place}: it runs out of memory {} ({figures})",
                n.value,
                failure_words(n)
            ),
            None => format!("no {what} fits {place}"),
        },
    }
}

pub(super) fn at_line(p: &Point, varied: Varied, model: &Model, place: &str) -> String {
    let figures = if model.is_assumed() {
        "estimate"
    } else {
        "inferred"
    };
    let range = range_words(model, p.range);
    if p.fits {
        format!(
            "{} {} fits {place}: peak {} reserved, {} allocated, {} cached at the peak ({figures}; {range})",
            varied.words(),
            p.value,
            units::bytes(p.peak_reserved_bytes),
            units::bytes(p.peak_allocated_bytes),
            units::percent(p.fragmentation)
        )
    } else {
        format!(
            "{} {} runs out of memory {place} {} ({figures}; {range})",
            varied.words(),
            p.value,
            failure_words(p)
        )
    }
}

/// The plan's notes: how far the laws hold, the runs' unmatched
/// allocations (`paths` are the runs', in order), the workspaces left out of
/// `reference` (the replayed run's requests), a replay from mid-run.
pub(super) fn notes(
    model: &Model,
    paths: &[&std::path::Path],
    reference: &RequestList,
    varied: Varied,
) -> Vec<String> {
    let mut notes = Vec::new();
    let what = varied.words();
    if model.is_assumed() {
        notes.push(format!(
            "one run only: activations and temporaries are assumed to grow in proportion to the {what}, everything else to stay; record a second {what} for laws fitted exactly"
        ));
    } else if model.values.len() == 2 {
        notes.push(format!(
            "two runs: each size is fitted through both exactly; a size whose law changes outside them (the larger of two terms, say) is not seen: a third run at another {what} checks it"
        ));
    }
    for (k, path) in paths.iter().enumerate() {
        let l = &model.line_ups[k];
        if l.unmatched > 0 || l.reference_unmatched > 0 {
            notes.push(format!(
                "{}: {} of its allocations have no partner in the run replayed (left out), which has {} without one in it (made only above this run's value: left out at it and below; above it, those holding activations or temporaries grow in proportion, the rest keep their size)",
                path.display(),
                l.unmatched,
                l.reference_unmatched
            ));
        }
    }
    let workspaces = reference.survivable.iter().filter(|&&s| s).count();
    if workspaces > 0 {
        notes.push(format!(
            "{} are cuDNN convolutions' workspaces (made under a convolution, freed before anything else is allocated): the answer and the values simulated leave them out, as when cuDNN falls back to algorithms that need none; where one is asked for and cannot be had, the run goes on, as PyTorch's does",
            units::counted(workspaces as u64, "allocation", "allocations")
        ));
    }
    if !reference.initial_segments.is_empty() {
        notes.push(
            "the replayed run starts mid-run: the blocks live at its start keep their recorded sizes"
                .into(),
        );
    }
    notes
}
