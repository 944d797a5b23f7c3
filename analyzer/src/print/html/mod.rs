//! The HTML report: one self-contained page (inline CSS, SVG and script,
//! no font or anything else fetched) that opens anywhere, offline. Its
//! explorer (`explorer.rs`) draws on canvas from data embedded in the page
//! (`data.rs`); every other section is plain HTML and SVG, readable without
//! JavaScript.
//!
//! # Templates
//!
//! The markup lives in `templates/*.html` and the styles in
//! `assets/report.css`; each section is a module here whose struct holds
//! what its template shows, the figures already worded (`page.rs` lays the
//! sections out). The templates are [askama]'s: compiled with the crate, so
//! a field a template names that its struct lacks, or a mistyped tag, fails
//! the build rather than a user's report, and rendering parses nothing at
//! run time. maud would keep the markup in Rust macros, where it does not
//! read as the page it makes; minijinja reads its templates at run time,
//! where a mistake shows only when that branch of a page is drawn.
//!
//! Every value a template interpolates is escaped (`escape::Html`: control
//! characters shown as escapes, then HTML's five); a template inserts markup
//! as it is only with `|safe`, and only markup built elsewhere: the SVG
//! charts, the explorer, and the sections' own templates nested in the
//! page.

mod categories;
mod compare;
mod consistency;
mod data;
mod escape;
mod explorer;
mod findings;
mod fixes;
mod flame;
mod fragmentation;
mod leaks;
mod ooms;
mod page;
mod ranks;
mod sites;
mod waterfall;
mod what_if;

use super::ChartError;
use super::labels::site_label;
use super::svg::diff::{AlignBy, DiffRun};
use super::svg::{self, palette::Palette};
use crate::analysis::pauses::XAxis;
use crate::command::Warning;
use crate::command::report::ReportResult;
use askama::Template;

/// The report page of a [`ReportResult`], its charts drawn inline with `top`
/// sites named.
pub fn report(r: &ReportResult, top: usize) -> Result<String, ChartError> {
    // One palette for every chart and the explorer: a site keeps its
    // colour throughout the page.
    let mut palette = Palette::new();
    let charts = Charts::draw(r, top, &mut palette)?;
    let input = ReportInput {
        report: r,
        charts,
        warnings: warnings(&r.warnings),
        explorer: explorer::section(r, &mut palette),
        top,
    };
    let page = page::Page::new(&input)
        .render()
        .map_err(|e| ChartError::Draw(format!("the report page: {e}")))?;
    // Every name is escaped where a template writes it; this is the net
    // under them: the page's own markup, styles and script hold no control
    // character, so only a name's can be changed here.
    Ok(match super::printable(&page) {
        std::borrow::Cow::Owned(shown) => shown,
        std::borrow::Cow::Borrowed(_) => page,
    })
}

/// A report and what its page is drawn from besides.
struct ReportInput<'a> {
    /// The report.
    report: &'a ReportResult,
    /// The rendered charts.
    charts: Charts,
    /// Warnings met while reading (truncation, import notes), worded.
    warnings: Vec<String>,
    /// The explorer section, as HTML with its data and script.
    explorer: String,
    /// How many sites and phases the tables name.
    top: usize,
}

impl ReportInput<'_> {
    /// The explorer's data, when its axis opens on busy time: moments are
    /// then told in busy time too, as the axis shows them.
    fn busy(&self) -> Option<&crate::analysis::explorer::Explorer> {
        (self.report.default_axis == XAxis::Busy).then_some(&self.report.explorer)
    }
}

/// The SVG charts of a report.
#[derive(Default)]
struct Charts {
    /// Memory over time.
    timeline: String,
    /// Memory over time by what it holds.
    categories: String,
    /// Fragmentation over time.
    fragmentation: String,
    /// Growth of the leaking (or most repeated) phase, if any phase repeats.
    leaks: Option<String>,
    /// The flame graph at the allocated peak (`None`: inferno refused it).
    flame: Option<String>,
    /// Both runs and the sites that changed, when there is a baseline.
    comparison: Option<String>,
}

impl Charts {
    /// The charts of `r`, `top` sites named, their sites coloured from
    /// `palette` (the timelines, then the leaks chart).
    fn draw(r: &ReportResult, top: usize, palette: &mut Palette) -> Result<Charts, ChartError> {
        let comparison = match (&r.comparison, &r.base_timeline) {
            (Some(comparison), Some(base_timeline)) => {
                // Runs that repeat a phase line up repetition by repetition;
                // others by time since their first event.
                let align = if comparison.base.iterations.is_some()
                    && comparison.new.iterations.is_some()
                {
                    AlignBy::Repetition
                } else {
                    AlignBy::Time
                };
                Some(svg::diff::render(
                    &DiffRun {
                        name: &comparison.base.name,
                        timeline: base_timeline,
                        iterations: comparison.base.iterations.as_ref(),
                    },
                    &DiffRun {
                        name: &comparison.new.name,
                        timeline: &r.timeline,
                        iterations: comparison.new.iterations.as_ref(),
                    },
                    comparison,
                    align,
                    r.default_axis,
                    top,
                )?)
            }
            _ => None,
        };
        Ok(Charts {
            timeline: svg::timeline::render(
                &r.timeline,
                &format!("Memory over time: {}", r.name),
                palette,
                r.default_axis,
            )?,
            categories: svg::timeline::render(
                &r.category_timeline,
                &format!("What fills the GPU: {}", r.name),
                palette,
                r.default_axis,
            )?,
            fragmentation: svg::fragmentation::render(
                &r.fragmentation,
                &format!("Fragmentation: {}", r.name),
                r.default_axis,
            )?,
            leaks: r
                .leaks
                .chart_phase()
                .map(|phase| svg::leaks::render(phase, palette))
                .transpose()?,
            flame: r
                .flame
                .as_ref()
                .and_then(|f| svg::flame::render(f, &format!("Live at the peak: {}", r.name)).ok()),
            comparison,
        })
    }
}

/// The warnings the page shows above its sections, worded for it.
fn warnings(warnings: &[Warning]) -> Vec<String> {
    warnings
        .iter()
        .filter_map(|w| match w {
            Warning::Truncated(t) => Some(format!("This trace was cut short: {t}.")),
            Warning::Unfinished => Some("This trace has no footer: the recording process did not close it, so its last events may be missing.".into()),
            Warning::Damaged(d) => Some(format!("This trace is damaged: {d}; the rest was read.")),
            Warning::MoreDamage(_) | Warning::Impossible(_) | Warning::TooManyDevices { .. } => {
                Some(format!("{w}."))
            }
            Warning::EventsDropped(d) => Some(format!("In this trace, {d}.")),
            Warning::OtherThreadPhases { .. } => Some(format!(
                "In this report, {w} (--phase-thread N reports another thread's)."
            )),
            _ => None,
        })
        .collect()
}

/// A site as the tables show it: its name, its stack folded under it
/// (`templates/macros.html`).
struct Stack {
    /// The site's name, as a label.
    site: String,
    /// Its frames, one a line.
    frames: String,
}

impl Stack {
    /// The site named `site` (labelled here) with its `frames`.
    fn new(site: &str, frames: &[String]) -> Stack {
        Stack {
            site: site_label(site),
            frames: frames.join("\n"),
        }
    }
}

/// A phase's name, or that there was none.
fn phase_or_none(phase: &str) -> &str {
    if phase.is_empty() {
        "(no phase)"
    } else {
        phase
    }
}
