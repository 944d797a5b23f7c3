//! Matching two runs symbolically: the key a site is known by in both (its
//! frames as text, lines dropped or not), and the sites and phases of the
//! two runs paired by key and ranked by how much they changed.

use super::{Change, MatchOptions, PhaseDelta, Presence, RunFigures, SiteDelta};
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

fn site_figures(run: &RunFigures, options: MatchOptions) -> BTreeMap<String, SiteFigures> {
    let mut map: BTreeMap<String, SiteFigures> = BTreeMap::new();
    fn entry<'m>(
        map: &'m mut BTreeMap<String, SiteFigures>,
        site: &SiteDescription,
        options: MatchOptions,
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
    options: MatchOptions,
    (db, dn): (f64, f64),
) -> Vec<SiteDelta> {
    let mut b = site_figures(base, options);
    let n = site_figures(new, options);
    let renamed = match_path_suffixes(&mut b, &n);
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
                matched_by_path_suffix: renamed.get(key.as_str()).cloned(),
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

/// A frame's text split into its function, its path's components and
/// its line (`function (dir/file.py:13)`); `None` for a frame of another
/// shape.
fn frame_parts(frame: &str) -> Option<(&str, Vec<&str>, &str)> {
    let inner = frame.strip_suffix(')')?;
    let (function, place) = inner.split_once(" (")?;
    let (path, line) = match place.rsplit_once(':') {
        Some((path, line)) if line.bytes().all(|c| c.is_ascii_digit()) => (path, line),
        _ => (place, ""),
    };
    let components = path
        .split(['/', '\\'])
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    Some((function, components, line))
}

/// How many trailing path components two keys' frames share, summed over
/// their frames, when every frame has the same function and line and shares
/// at least its file's name; `None` when they are not the same code.
fn suffix_match(a: &str, b: &str) -> Option<usize> {
    let (fa, fb): (Vec<&str>, Vec<&str>) = (
        a.split(['\n'])
            .flat_map(|f| f.split(crate::sites::VIA))
            .collect(),
        b.split(['\n'])
            .flat_map(|f| f.split(crate::sites::VIA))
            .collect(),
    );
    if fa.len() != fb.len() {
        return None;
    }
    let mut score = 0;
    for (x, y) in fa.iter().zip(&fb) {
        if x == y {
            score += frame_parts(x).map_or(1, |p| p.1.len());
            continue;
        }
        let ((f1, p1, l1), (f2, p2, l2)) = (frame_parts(x)?, frame_parts(y)?);
        if f1 != f2 || l1 != l2 {
            return None;
        }
        let common = p1
            .iter()
            .rev()
            .zip(p2.iter().rev())
            .take_while(|(c1, c2)| c1 == c2)
            .count();
        if common == 0 {
            return None;
        }
        score += common;
    }
    Some(score)
}

/// Pairs the sites only the baseline has with those only the new run has
/// when they are the same code under another folder (the same functions
/// and lines, the longest common suffix of the paths; a tie is no match):
/// each such baseline site is filed under the new run's key. Returns the
/// baseline's name of each site so matched, by the new run's key.
fn match_path_suffixes(
    base: &mut BTreeMap<String, SiteFigures>,
    new: &BTreeMap<String, SiteFigures>,
) -> BTreeMap<String, String> {
    let gone: Vec<String> = base
        .keys()
        .filter(|k| !new.contains_key(*k))
        .cloned()
        .collect();
    let added: Vec<&String> = new.keys().filter(|k| !base.contains_key(*k)).collect();
    // Every candidate pair with its score, best first: a pair is taken when
    // neither side was taken and no other pair of either side scores as
    // well (an ambiguous match is no match).
    let mut pairs: Vec<(usize, &String, &String)> = Vec::new();
    for g in &gone {
        for a in &added {
            if let Some(score) = suffix_match(g, a) {
                pairs.push((score, g, a));
            }
        }
    }
    pairs.sort_by(|x, y| {
        y.0.cmp(&x.0)
            .then_with(|| x.1.cmp(y.1))
            .then_with(|| x.2.cmp(y.2))
    });
    let mut taken: BTreeSet<&String> = BTreeSet::new();
    let mut renames: Vec<(String, String)> = Vec::new();
    for &(score, g, a) in &pairs {
        if taken.contains(g) || taken.contains(a) {
            continue;
        }
        let rival = pairs.iter().any(|&(s, g2, a2)| {
            s == score && (g2 == g) != (a2 == a) && !taken.contains(g2) && !taken.contains(a2)
        });
        taken.insert(g);
        taken.insert(a);
        if !rival {
            renames.push((g.clone(), a.clone()));
        }
    }
    let mut names = BTreeMap::new();
    for (g, a) in renames {
        if let Some(figures) = base.remove(&g) {
            let name = figures
                .description
                .as_ref()
                .map_or_else(|| g.clone(), |d| d.site.clone());
            base.insert(a.clone(), figures);
            names.insert(a, name);
        }
    }
    names
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

    /// Issue #44: two runs of one program recorded from different folders
    /// name its sites with different paths; they are one site, and the
    /// comparison says the match needed the path's end.
    #[test]
    fn runs_from_two_checkouts_match_their_sites() {
        let a = run(
            "a",
            1000,
            0,
            &[("training_step (lightning_train.py:13)", 1000, 0)],
        );
        let b = run(
            "b",
            1100,
            0,
            &[("training_step (gpu3/lightning_train.py:13)", 1100, 0)],
        );
        let c = compare(&a, &b, MatchOptions::default()).unwrap();
        assert_eq!(c.sites.len(), 1, "{:#?}", c.sites);
        let s = &c.sites[0];
        assert_eq!(s.presence, Presence::Both);
        assert_eq!(s.site, "training_step (gpu3/lightning_train.py:13)");
        assert_eq!(s.at_peak.delta, 100.0);
        assert_eq!(
            s.matched_by_path_suffix.as_deref(),
            Some("training_step (lightning_train.py:13)")
        );
    }

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
        let c = compare(&a, &b, MatchOptions::default()).unwrap();
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
        let strict = compare(&a, &b, MatchOptions::default()).unwrap();
        assert_eq!(strict.sites.len(), 2);
        let loose = compare(
            &a,
            &b,
            MatchOptions {
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

#[cfg(test)]
mod path_suffix_tests {
    use super::*;

    fn figures(site: &str, at_peak: u64) -> (String, SiteFigures) {
        (
            site.to_string(),
            SiteFigures {
                description: Some(SiteDescription {
                    site: site.to_string(),
                    frames: vec![site.to_string()],
                }),
                at_peak,
                ..SiteFigures::default()
            },
        )
    }

    #[test]
    fn sites_of_two_checkouts_match_by_function_and_path_suffix() {
        let mut base: BTreeMap<String, SiteFigures> = [
            figures("training_step (lightning_train.py:13)", 100),
            figures("forward (model/layers.py:7)", 50),
            figures("forward (other/layers.py:7)", 60),
            figures("load (data.py:3)", 10),
        ]
        .into_iter()
        .collect();
        let new: BTreeMap<String, SiteFigures> = [
            figures("training_step (gpu3/lightning_train.py:13)", 120),
            figures("forward (gpu3/model/layers.py:7)", 55),
            figures("load (data.py:4)", 10),
        ]
        .into_iter()
        .collect();
        let names = match_path_suffixes(&mut base, &new);
        assert_eq!(
            names
                .get("training_step (gpu3/lightning_train.py:13)")
                .map(String::as_str),
            Some("training_step (lightning_train.py:13)")
        );
        // The longest common suffix wins: model/layers.py, not other/layers.py.
        assert_eq!(
            names
                .get("forward (gpu3/model/layers.py:7)")
                .map(String::as_str),
            Some("forward (model/layers.py:7)")
        );
        assert_eq!(base["forward (gpu3/model/layers.py:7)"].at_peak, 50);
        assert!(base.contains_key("forward (other/layers.py:7)"));
        // Another line is other code.
        assert!(!names.contains_key("load (data.py:4)"));
        assert_eq!(names.len(), 2);
    }

    #[test]
    fn an_ambiguous_suffix_is_no_match() {
        let mut base: BTreeMap<String, SiteFigures> =
            [figures("f (a/x.py:1)", 1), figures("f (b/x.py:1)", 1)]
                .into_iter()
                .collect();
        let new: BTreeMap<String, SiteFigures> = [figures("f (c/x.py:1)", 1)].into_iter().collect();
        assert!(match_path_suffixes(&mut base, &new).is_empty());
    }
}
