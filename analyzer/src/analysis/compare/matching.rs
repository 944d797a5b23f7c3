//! Matching two runs symbolically: the key a site is known by in both (its
//! frames as text, lines dropped or not), and the sites and phases of the
//! two runs paired by key and ranked by how much they changed.

use super::{Change, CompareOptions, PhaseDelta, Presence, RunFigures, SiteDelta};
use crate::analysis::phase_totals::PhaseTotal;
use crate::sites::SiteDescription;
use std::collections::{BTreeMap, BTreeSet};

/// The key two runs' sites are matched by.
pub fn site_key(site: &SiteDescription, full_stacks: bool, ignore_lines: bool) -> String {
    let frames: &[String] = if full_stacks {
        &site.frames
    } else {
        std::slice::from_ref(&site.site)
    };
    frames
        .iter()
        .map(|f| {
            if ignore_lines {
                without_line(f)
            } else {
                f.clone()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `function (file:line)` without its line: `function (file)`; a site
/// named `USER via LIBRARY` loses both lines. A frame of another shape (a
/// native `module+0x1f`) is kept whole.
pub fn without_line(frame: &str) -> String {
    let via = format!("){}", crate::sites::VIA);
    if let Some(at) = frame.find(&via) {
        let (user, library) = (&frame[..=at], &frame[at + via.len()..]);
        return format!(
            "{}{}{}",
            frame_without_line(user),
            crate::sites::VIA,
            frame_without_line(library)
        );
    }
    frame_without_line(frame)
}

fn frame_without_line(frame: &str) -> String {
    if let Some((head, line)) = frame.strip_suffix(')').and_then(|f| f.rsplit_once(':'))
        && !line.is_empty()
        && line.bytes().all(|c| c.is_ascii_digit())
        && head.contains(" (")
    {
        return format!("{head})");
    }
    frame.to_string()
}

#[derive(Clone, Debug, Default)]
struct SiteFigures {
    description: Option<SiteDescription>,
    at_peak: u64,
    retained: u64,
    allocations: u64,
    allocated_bytes: u64,
}

fn site_figures(run: &RunFigures, options: CompareOptions) -> BTreeMap<String, SiteFigures> {
    let mut map: BTreeMap<String, SiteFigures> = BTreeMap::new();
    fn entry<'m>(
        map: &'m mut BTreeMap<String, SiteFigures>,
        site: &SiteDescription,
        options: CompareOptions,
    ) -> &'m mut SiteFigures {
        let key = site_key(site, options.full_stacks, options.ignore_lines);
        let figures = map.entry(key).or_default();
        figures.description.get_or_insert_with(|| site.clone());
        figures
    }
    // Sites that fold to one key add up: saturating, as the sums of a
    // trace with absurd sizes may pass 2^64.
    for s in &run.summary.top_sites_at_peak {
        let f = entry(&mut map, &s.site, options);
        f.at_peak = f.at_peak.saturating_add(s.bytes);
    }
    for s in &run.leaks.never_freed {
        let f = entry(&mut map, &s.site, options);
        f.retained = f.retained.saturating_add(s.bytes);
    }
    for s in &run.sites.sites {
        let f = entry(&mut map, &s.site, options);
        f.allocations += s.allocations;
        f.allocated_bytes = f.allocated_bytes.saturating_add(s.allocated_bytes);
    }
    map
}

pub(super) fn sites(
    base: &RunFigures,
    new: &RunFigures,
    options: CompareOptions,
    (db, dn): (f64, f64),
) -> Vec<SiteDelta> {
    let b = site_figures(base, options);
    let n = site_figures(new, options);
    let keys: BTreeSet<&String> = b.keys().chain(n.keys()).collect();
    let empty = SiteFigures::default();
    let mut out: Vec<SiteDelta> = keys
        .into_iter()
        .map(|key| {
            let (fb, fn_) = (b.get(key), n.get(key));
            let description = fn_
                .and_then(|f| f.description.clone())
                .or_else(|| fb.and_then(|f| f.description.clone()))
                .unwrap_or_else(|| SiteDescription {
                    site: key.clone(),
                    frames: vec![key.clone()],
                });
            let (x, y) = (fb.unwrap_or(&empty), fn_.unwrap_or(&empty));
            SiteDelta {
                site: description.site,
                frames: description.frames,
                key: key.clone(),
                presence: Presence::of(fb.is_some(), fn_.is_some()),
                at_peak: Change::of_u64(x.at_peak, y.at_peak),
                retained: Change::of_u64(x.retained, y.retained),
                allocations: Change::of(x.allocations as f64 / db, y.allocations as f64 / dn),
                allocated_bytes: Change::of(
                    x.allocated_bytes as f64 / db,
                    y.allocated_bytes as f64 / dn,
                ),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.rank_delta()
            .abs()
            .total_cmp(&a.rank_delta().abs())
            .then_with(|| {
                b.allocated_bytes
                    .delta
                    .abs()
                    .total_cmp(&a.allocated_bytes.delta.abs())
            })
            .then_with(|| a.site.cmp(&b.site))
    });
    out
}

pub(super) fn phases(base: &RunFigures, new: &RunFigures, per_iteration: bool) -> Vec<PhaseDelta> {
    let totals = |r: &RunFigures| {
        r.phases
            .phases
            .iter()
            .map(|p| (p.phase.clone(), p.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    let growth = |r: &RunFigures| {
        r.leaks
            .repeated_phases
            .iter()
            .map(|g| {
                let leaked = g.leaking_sites.iter().map(|s| s.bytes_per_repetition).sum();
                (g.phase.clone(), leaked)
            })
            .collect::<BTreeMap<_, i64>>()
    };
    let (tb, tn) = (totals(base), totals(new));
    let (gb, gn) = (growth(base), growth(new));
    let keys: BTreeSet<&String> = tb.keys().chain(tn.keys()).collect();
    let mut out: Vec<PhaseDelta> = keys
        .into_iter()
        .map(|key| {
            let (x, y) = (tb.get(key), tn.get(key));
            let field =
                |p: Option<&PhaseTotal>, f: fn(&PhaseTotal) -> u64| p.map_or(0.0, |p| f(p) as f64);
            let retained = |p: Option<&PhaseTotal>| {
                p.map_or(0.0, |p| {
                    if per_iteration {
                        p.retained_bytes as f64 / p.instances.max(1) as f64
                    } else {
                        p.retained_bytes as f64
                    }
                })
            };
            let g = |m: &BTreeMap<String, i64>| m.get(key).copied().unwrap_or(0) as f64;
            PhaseDelta {
                phase: key.clone(),
                presence: Presence::of(x.is_some(), y.is_some()),
                repetitions: Change::of(field(x, |p| p.instances), field(y, |p| p.instances)),
                peak: Change::of(
                    field(x, |p| p.peak_allocated_bytes),
                    field(y, |p| p.peak_allocated_bytes),
                ),
                retained: Change::of(retained(x), retained(y)),
                leak_per_repetition: Change::of(g(&gb), g(&gn)),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.rank_delta()
            .total_cmp(&a.rank_delta())
            .then_with(|| a.phase.cmp(&b.phase))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;
    use super::*;
    use crate::analysis::compare::compare;

    #[test]
    fn sites_rank_by_change_and_are_marked_new_or_gone() {
        let a = run(
            "a",
            1000,
            0,
            &[("f (a.py:1)", 600, 0), ("g (a.py:2)", 400, 0)],
        );
        let b = run(
            "b",
            1300,
            100,
            &[("f (a.py:1)", 600, 0), ("leak (a.py:9)", 700, 1000)],
        );
        let c = compare(&a, &b, CompareOptions::default()).unwrap();
        let names: Vec<(&str, Presence)> = c
            .sites
            .iter()
            .map(|s| (s.site.as_str(), s.presence))
            .collect();
        assert_eq!(
            names,
            [
                ("leak (a.py:9)", Presence::New),
                ("g (a.py:2)", Presence::Gone),
                ("f (a.py:1)", Presence::Both)
            ]
        );
        assert_eq!(c.sites[0].retained.delta, 1000.0);
        assert_eq!(c.sites[0].rank_delta(), 1000.0);
        let peak = c.metric("peak_allocated").unwrap().change;
        assert_eq!((peak.delta, peak.percent), (300.0, Some(30.0)));
        let leak = c.metric("leak").unwrap().change;
        assert_eq!((leak.delta, leak.percent), (100.0, None));
    }

    #[test]
    fn ignoring_lines_matches_moved_code() {
        let a = run("a", 1000, 0, &[("f (a.py:1)", 600, 0)]);
        let b = run("b", 1000, 0, &[("f (a.py:5)", 600, 0)]);
        let strict = compare(&a, &b, CompareOptions::default()).unwrap();
        assert_eq!(strict.sites.len(), 2);
        let loose = compare(
            &a,
            &b,
            CompareOptions {
                ignore_lines: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(loose.sites.len(), 1);
        assert!(!loose.sites[0].changed());
        assert_eq!(loose.sites[0].site, "f (a.py:5)");
        assert_eq!(without_line("f (a.py:12)"), "f (a.py)");
        assert_eq!(
            without_line("step (t.py:9) via forward (m.py:41)"),
            "step (t.py) via forward (m.py)"
        );
        assert_eq!(without_line("libtorch.so+0x1f"), "libtorch.so+0x1f");
        assert_eq!(
            without_line("operator() (x.cpp:7)"),
            "operator() (x.cpp)",
            "only the location's colon counts"
        );
    }
}
