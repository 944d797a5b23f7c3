//! The HTML report: one self-contained page (inline CSS, SVG and script,
//! no font or anything else fetched) that opens anywhere, offline. Its
//! explorer (`explorer.rs`) draws on canvas from data embedded in the page
//! (`data.rs`); every other section is plain HTML and SVG, readable without
//! JavaScript.

mod compare;
mod data;
mod explorer;
mod fixes;
mod waterfall;
mod what_if;

use super::ChartError;
use super::labels::site_label;
use super::svg::diff::{AlignBy, DiffRun};
use super::svg::escape;
use super::svg::{self, palette, palette::Palette};
use crate::analysis::categories::Category;
use crate::analysis::fragmentation::FragmentationReport;
use crate::analysis::leaks::{LeaksReport, Trend, repetition_noun};
use crate::analysis::pauses::XAxis;
use crate::analysis::summary::SummaryReport;
use crate::command::Warning;
use crate::command::report::ReportResult;
use crate::simulate::what_if::WhatIf;
use crate::units;
use std::fmt::Write as _;
use vramtrace_format::Header;

/// The report page of a [`ReportResult`], its charts drawn inline with `top`
/// sites named.
pub fn report(r: &ReportResult, top: usize) -> Result<String, ChartError> {
    let mut extra_sections = Vec::new();
    if let (Some(comparison), Some(base_timeline)) = (&r.comparison, &r.base_timeline) {
        // Runs that repeat a phase line up repetition by repetition; others
        // by time since their first event.
        let align = if comparison.base.iterations.is_some() && comparison.new.iterations.is_some() {
            AlignBy::Repetition
        } else {
            AlignBy::Time
        };
        let chart = svg::diff::render(
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
        )?;
        extra_sections.push(Section {
            id: "comparison".into(),
            title: format!("Compared with {}", comparison.base.name),
            html: compare::section(comparison, &chart, top, r.fits_up_to.as_ref()),
        });
    }
    if let Some(ranks) = &r.ranks {
        extra_sections.push(Section {
            id: "ranks".into(),
            title: format!("Ranks ({})", ranks.table.ranks),
            html: ranks_section(r, ranks),
        });
    }
    if !r.devices.is_empty() {
        extra_sections.push(Section {
            id: "devices".into(),
            title: "Devices".into(),
            html: devices_section(r),
        });
    }
    // One palette for every chart: a site keeps its colour throughout.
    let mut palette = Palette::new();
    let charts = Charts {
        timeline: svg::timeline::render(
            &r.timeline,
            &format!("Memory over time: {}", r.name),
            &mut palette,
            r.default_axis,
        )?,
        categories: svg::timeline::render(
            &r.category_timeline,
            &format!("What fills the GPU: {}", r.name),
            &mut palette,
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
            .map(|phase| svg::leaks::render(phase, &mut palette))
            .transpose()?,
        flame: r
            .flame
            .as_ref()
            .and_then(|f| svg::flame::render(f, &format!("Live at the peak: {}", r.name)).ok()),
    };
    let warnings = r
        .warnings
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
        .collect();
    let page = render(&ReportInput {
        name: &r.name,
        header: &r.header,
        summary: &r.summary,
        fragmentation: &r.fragmentation,
        leaks: &r.leaks,
        charts,
        warnings,
        extra_sections,
        explorer: explorer::section(r),
        what_if: r.what_if.as_ref(),
        what_if_left_out: r.what_if_left_out.as_deref(),
        fixes: r.fixes.as_ref(),
        busy: (r.default_axis == XAxis::Busy).then_some(&r.explorer),
        flame: r.flame.as_ref(),
    });
    // Every name is escaped where it is written; this is the net under
    // them: the page's own markup, styles and script hold no control
    // character, so only a name's can be changed here.
    Ok(match super::printable(&page) {
        std::borrow::Cow::Owned(shown) => shown,
        std::borrow::Cow::Borrowed(_) => page,
    })
}

/// Everything one report shows about one trace.
struct ReportInput<'a> {
    /// The trace's file name, as the title shows it.
    pub name: &'a str,
    /// The trace's header.
    pub header: &'a Header,
    /// The summary analysis.
    pub summary: &'a SummaryReport,
    /// The fragmentation analysis (chart resolution).
    pub fragmentation: &'a FragmentationReport,
    /// The leak analysis.
    pub leaks: &'a LeaksReport,
    /// The rendered charts.
    pub charts: Charts,
    /// Warnings met while reading (truncation, import notes).
    pub warnings: Vec<String>,
    /// Extra sections (e.g. a comparison with a baseline), as HTML.
    pub extra_sections: Vec<Section>,
    /// The explorer section, as HTML with its data and script.
    pub explorer: String,
    /// The recorded settings at a range of capacities.
    pub what_if: Option<&'a WhatIf>,
    /// Why there is no what-if section, when one was asked for.
    pub what_if_left_out: Option<&'a str>,
    /// The fixes tried where the recorded run ran out of memory.
    pub fixes: Option<&'a crate::simulate::fixes::FixesTried>,
    /// The explorer's data, when its axis opens on busy time: moments are
    /// then told in busy time too, as the axis shows them.
    pub busy: Option<&'a crate::analysis::explorer::Explorer>,
    /// The memory live at the allocated peak, by stack.
    pub flame: Option<&'a crate::command::flamegraph::FlameGraph>,
}

impl ReportInput<'_> {
    /// When something happened: its time, and its busy time where the
    /// page's axis is busy time (`718.79 ms, 175.12 ms of busy time`).
    fn moment(&self, peak: &crate::analysis::summary::Peak) -> String {
        let at = units::duration_ns(peak.time_ns);
        match self.busy {
            Some(e) => format!(
                "{at}, {} of busy time",
                units::duration_ns(e.busy_ns(peak.index, peak.time_ns))
            ),
            None => at,
        }
    }
}

/// The SVG charts of a report.
#[derive(Default)]
struct Charts {
    /// Memory over time.
    pub timeline: String,
    /// Memory over time by what it holds.
    pub categories: String,
    /// Fragmentation over time.
    pub fragmentation: String,
    /// Growth of the leaking (or most repeated) phase, if any phase repeats.
    pub leaks: Option<String>,
    /// The flame graph at the allocated peak (`None`: inferno refused it).
    pub flame: Option<String>,
}

/// A section of the report: an anchor, a heading and HTML content.
struct Section {
    /// The anchor (letters, digits and dashes).
    pub id: String,
    /// The heading.
    pub title: String,
    /// The content, as HTML.
    pub html: String,
}

const STYLE: &str = r#"
:root { --fg: #1d2433; --muted: #5b6475; --line: #dde1e8; --bg: #f6f7f9; --alert: #c81e1e; --ok: #1b7f3b; --accent: #0072b2; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: var(--fg); background: var(--bg); }
header { background: #1d2433; color: #fff; padding: 20px 32px; }
header h1 { margin: 0 0 4px; font-size: 22px; font-weight: 600; }
header .meta { color: #c3c9d4; font-size: 13px; }
nav { background: #fff; border-bottom: 1px solid var(--line); padding: 8px 32px; position: sticky; top: 0; z-index: 1; }
nav a { color: var(--accent); text-decoration: none; margin-right: 18px; font-size: 14px; }
main { max-width: 1180px; margin: 0 auto; padding: 16px 32px 48px; }
tr.shown td { font-weight: 600; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 16px 24px; margin: 18px 0; }
h2 { font-size: 18px; margin: 0 0 12px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 12px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; background: #fbfcfd; }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .value { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .note { color: var(--muted); font-size: 12px; }
.card.bad .value { color: var(--alert); }
.card.good .value { color: var(--ok); }
ul.findings { padding-left: 20px; margin: 0; }
ul.findings li { margin: 6px 0; }
li.bad::marker { color: var(--alert); }
figure { margin: 8px 0; overflow-x: auto; }
figure svg { max-width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 13px; }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 600; font-size: 12px; text-transform: uppercase; letter-spacing: .03em; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
details summary { cursor: pointer; }
details pre { margin: 6px 0 2px; padding: 8px; background: var(--bg); border-radius: 4px; font-size: 12px; overflow-x: auto; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.muted { color: var(--muted); }
.warning { border-left: 4px solid #e6a000; background: #fff8e6; padding: 8px 12px; margin: 8px 0; border-radius: 4px; }
footer { color: var(--muted); font-size: 12px; text-align: center; padding: 16px; }
iframe.flame { width: 100%; height: 480px; border: 1px solid var(--line); border-radius: 4px; }
i.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 6px; vertical-align: -1px; }
"#;

/// The page's styles: the report's, then the explorer's.
fn style() -> String {
    format!("{STYLE}{}", explorer::STYLE)
}

/// Renders the report page.
fn render(input: &ReportInput<'_>) -> String {
    let s = input.summary;
    let mut html = String::with_capacity(256 * 1024);
    let title = format!("vramtrace report: {}", input.name);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n",
        escape(&title),
        style()
    );
    let _ = writeln!(
        html,
        "<header><h1>{}</h1><div class=\"meta\">{}</div></header>",
        escape(&title),
        escape(&header_line(input.header, s))
    );
    let mut sections: Vec<(&str, &str)> = vec![
        ("findings", "Findings"),
        ("categories", "What fills it"),
        ("explorer", "Explorer"),
        ("sites", "Top sites at the peak"),
        ("leaks", "Leaks"),
        ("fragmentation", "Fragmentation"),
    ];
    if input.what_if.is_some() || input.what_if_left_out.is_some() {
        sections.push(("what-if", "What if"));
    }
    if s.oom_count > 0 {
        sections.push(("ooms", "Out of memory"));
    }
    if input.fixes.is_some() {
        sections.push(("fixes", "Fixes tried"));
    }
    sections.push(("consistency", "Trace consistency"));
    html.push_str("<nav>");
    for (id, name) in &sections {
        let _ = write!(html, "<a href=\"#{id}\">{name}</a>");
    }
    for extra in &input.extra_sections {
        let _ = write!(
            html,
            "<a href=\"#{}\">{}</a>",
            escape(&extra.id),
            escape(&extra.title)
        );
    }
    html.push_str("</nav>\n<main>\n");

    for w in &input.warnings {
        let _ = writeln!(html, "<div class=\"warning\">{}</div>", escape(w));
    }
    for extra in &input.extra_sections {
        section(&mut html, &extra.id, &extra.title, &extra.html);
    }
    section(&mut html, "findings", "Findings", &findings(input));
    section(
        &mut html,
        "categories",
        "What fills the GPU",
        &format!("{}{}", categories_section(input), peak_waterfall(s)),
    );
    section(
        &mut html,
        "explorer",
        "Memory explorer",
        &format!(
            "{}<details class=\"static\"><summary>Allocated memory by site, as a static chart</summary><figure>{}<figcaption>Allocated memory stacked by allocation site, reserved memory as the black line, phases along the top. Each pixel column keeps its lowest and highest moment, so short spikes stay visible. Hover for exact values.</figcaption></figure></details>",
            input.explorer, input.charts.timeline
        ),
    );
    section(&mut html, "sites", "Top sites at the peak", &sites_table(s));
    section(
        &mut html,
        "flame",
        "Live at the peak, by stack",
        &flame_section(input),
    );
    section(&mut html, "leaks", "Leaks", &leaks_section(input));
    section(
        &mut html,
        "fragmentation",
        "Fragmentation",
        &fragmentation_section(input),
    );
    if let Some(w) = input.what_if {
        section(
            &mut html,
            "what-if",
            "What if the GPU were smaller?",
            &what_if::section(w),
        );
    } else if let Some(why) = input.what_if_left_out {
        section(
            &mut html,
            "what-if",
            "What if the GPU were smaller?",
            &format!(
                "<p class=\"muted\">No simulation here: {}.</p>",
                escape(why)
            ),
        );
    }
    if s.oom_count > 0 {
        section(&mut html, "ooms", "Out of memory", &ooms_section(s));
    }
    if let Some(f) = input.fixes {
        section(
            &mut html,
            "fixes",
            "Fixes that were tried",
            &fixes::section(f),
        );
    }
    section(
        &mut html,
        "consistency",
        "Trace consistency",
        &consistency_section(s),
    );
    let _ = write!(
        html,
        "</main>\n<footer>Made by vramtrace {} from {}. Self-contained: this page loads nothing from anywhere.</footer>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION"),
        escape(input.name)
    );
    html
}

/// The flame graph of the memory live at the allocated peak, in a frame of
/// its own: inferno's script (click to zoom, search) runs there, apart from
/// the page's.
fn flame_section(input: &ReportInput<'_>) -> String {
    let (Some(graph), Some(svg)) = (input.flame, &input.charts.flame) else {
        return "<p class=\"muted\">No flame graph: it could not be drawn.</p>".to_string();
    };
    let caption = format!(
        "Each box is a frame; its width, the bytes live under it at the allocated peak; the stacks outermost at the bottom. Click a frame to zoom into it (Reset Zoom at the top left), search by name at the top right. Memory {}. (<code>vramtrace flamegraph</code> draws it on its own, at an OOM or any time too.)",
        escape(&svg::flame::moment_line(graph))
    );
    // As an SVG document of its own (a data URL), as the file opens.
    format!(
        "<figure><iframe class=\"flame\" title=\"flame graph\" sandbox=\"allow-scripts\" src=\"data:image/svg+xml;base64,{}\"></iframe><figcaption>{caption}</figcaption></figure>",
        data::base64(svg.as_bytes())
    )
}

fn section(html: &mut String, id: &str, title: &str, body: &str) {
    let _ = write!(
        html,
        "<section id=\"{}\"><h2>{}</h2>\n{body}\n</section>\n",
        escape(id),
        escape(title)
    );
}

fn header_line(header: &Header, s: &SummaryReport) -> String {
    let mut parts = Vec::new();
    if header.start_unix_ns > 0 {
        parts.push(units::utc_datetime(header.start_unix_ns));
    }
    for d in &header.devices {
        if d.total_memory > 0 {
            parts.push(format!("{} ({})", d.name, units::bytes(d.total_memory)));
        } else {
            parts.push(d.name.clone());
        }
    }
    if !header.process.hostname.is_empty() {
        parts.push(format!(
            "{} pid {}",
            header.process.hostname, header.process.pid
        ));
    }
    parts.push(format!(
        "{} events over {}",
        units::count(s.events),
        units::duration_ns(s.duration_ns)
    ));
    parts.push(if header.producer == crate::snapshot::IMPORTED_BY {
        // No process of ours recorded it: PyTorch did.
        format!(
            "a PyTorch memory snapshot, read by vramtrace {}",
            header.producer_version
        )
    } else {
        format!(
            "recorded by {} {}",
            header.producer, header.producer_version
        )
    });
    parts.join(" · ")
}

fn card(label: &str, value: &str, note: &str, class: &str) -> String {
    format!(
        "<div class=\"card {class}\"><div class=\"label\">{}</div><div class=\"value\">{}</div><div class=\"note\">{}</div></div>",
        escape(label),
        escape(value),
        escape(note)
    )
}

fn findings(input: &ReportInput<'_>) -> String {
    let s = input.summary;
    let leaks = input.leaks;
    let mut html = String::from("<div class=\"cards\">");
    html.push_str(&card(
        "peak allocated",
        &units::bytes(s.peak_allocated_bytes),
        &format!(
            "at {} in {}",
            input.moment(&s.peak_allocated),
            phase_or_none(&s.peak_phase)
        ),
        "",
    ));
    if let Some(d) = &s.categories.dominant {
        html.push_str(&card(
            "fills the peak",
            d.category.label(),
            &format!(
                "{} of it ({}, {})",
                units::percent(d.share),
                units::bytes(d.bytes),
                super::labels::category_basis(d.basis)
            ),
            "",
        ));
    }
    html.push_str(&card(
        "peak reserved",
        &units::bytes(s.peak_reserved_bytes),
        &format!("at {}", input.moment(&s.peak_reserved)),
        "",
    ));
    html.push_str(&card(
        "peak requested",
        &units::bytes(s.peak_requested_bytes),
        "sizes as the program asked",
        "",
    ));
    html.push_str(&match leaks.leaks.as_slice() {
        [] => card("leaks", "none", "no site grows across repetitions", "good"),
        [first, rest @ ..] => card(
            "leak",
            &format!(
                "{} per {}",
                units::bytes_delta(first.growth.bytes_per_repetition as i128),
                repetition_noun(&first.phase)
            ),
            &match rest.len() {
                0 => site_label(&first.growth.site.site),
                n => format!("{} and {n} more", site_label(&first.growth.site.site)),
            },
            "bad",
        ),
    });
    // A failure the program went on from (a cuDNN workspace's) is said
    // beside the count, not counted in it.
    let fatal = s.oom_count - s.survived_oom_count;
    let survived = match s.survived_oom_count {
        0 => String::new(),
        n => format!("; {} survived (cuDNN fell back)", units::count(n)),
    };
    html.push_str(&card(
        "out of memory",
        &fatal.to_string(),
        &match (fatal, s.survived_oom_count) {
            (0, 0) => "no allocation failed".to_string(),
            (0, _) => format!("none the run did not survive{survived}"),
            _ => format!("allocations failed{survived}"),
        },
        if fatal == 0 { "good" } else { "bad" },
    ));
    let frag = s.at_peak.external_fragmentation.unwrap_or(0.0);
    html.push_str(&card(
        "cached free at peak",
        &units::bytes(s.at_peak.cached_free_bytes),
        &format!("external fragmentation {}", units::percent(frag)),
        "",
    ));
    html.push_str("</div>\n<ul class=\"findings\">");

    let mut items: Vec<(bool, String)> = Vec::new();
    items.push((
        false,
        format!(
            "Allocated memory peaked at <b>{}</b> at {} in <code>{}</code>; reserved memory peaked at <b>{}</b>.",
            units::bytes(s.peak_allocated_bytes),
            input.moment(&s.peak_allocated),
            escape(phase_or_none(&s.peak_phase)),
            units::bytes(s.peak_reserved_bytes)
        ),
    ));
    if let Some(top) = s.top_sites_at_peak.first() {
        items.push((
            false,
            format!(
                "The largest allocation site at the peak is <code>{}</code>: {} in {} blocks ({} of allocated memory).",
                escape(&site_label(&top.site.site)),
                units::bytes(top.bytes),
                units::count(top.count),
                units::percent(top.share)
            ),
        ));
    }
    for l in &leaks.leaks {
        let g = &l.growth;
        items.push((
            true,
            format!(
                "<b>Leak:</b> <code>{}</code> keeps <b>{} per {}</b> (<code>{}</code>, {} repetitions, steadiness {}); {} retained at the last.",
                escape(&site_label(&g.site.site)),
                units::bytes_delta(g.bytes_per_repetition as i128),
                escape(&repetition_noun(&l.phase)),
                escape(&l.phase),
                g.repetitions,
                units::percent(g.steadiness),
                units::bytes(g.retained_bytes)
            ),
        ));
    }
    if leaks.leaks.is_empty() && !leaks.repeated_phases.is_empty() {
        let names: Vec<String> = leaks
            .repeated_phases
            .iter()
            .take(3)
            .map(|p| {
                format!(
                    "<code>{}</code> ({}×, {})",
                    escape(&p.phase),
                    p.repetitions,
                    p.trend.word()
                )
            })
            .collect();
        items.push((
            false,
            format!(
                "No leak: no site's memory grows across the repetitions of {}.",
                names.join(", ")
            ),
        ));
    }
    if s.peak_reserved_bytes > 0 {
        let cached = s.at_peak.cached_free_bytes;
        let share = cached as f64 / s.at_peak.reserved_bytes.max(1) as f64;
        if share > 0.25 {
            items.push((
                true,
                format!(
                    "At the allocated peak, <b>{}</b> of the {} reserved ({}) was cached but free{}. The caching allocator could not reuse it for the requests that came; <code>expandable_segments:True</code> often helps.",
                    units::bytes(cached),
                    units::bytes(s.at_peak.reserved_bytes),
                    units::percent(share),
                    s.at_peak
                        .largest_free_block
                        .map(|b| format!(", its largest free block only {}", units::bytes(b)))
                        .unwrap_or_default()
                ),
            ));
        }
    }
    if s.survived_oom_count > 0 {
        items.push((
            false,
            format!(
                "<b>cuDNN fell back</b> {}: a convolution's workspace could not be allocated, and PyTorch tried the next algorithm, one that needs less (and is slower). The run went on.",
                units::counted(s.survived_oom_count, "time", "times"),
            ),
        ));
    }
    if let Some(o) = s.fatal_ooms().next() {
        items.push((
            true,
            format!(
                "<b>Out of memory</b> {}: first at {} in <code>{}</code>, requesting {} at <code>{}</code> {}. Where the limit went is under Out of memory; the explorer opens at it.",
                units::counted(s.oom_count - s.survived_oom_count, "time", "times"),
                units::duration_ns(o.time_ns),
                escape(phase_or_none(&o.phase)),
                units::bytes(o.requested_bytes),
                escape(&site_label(&o.site.site)),
                waterfall::oom_words(o)
            ),
        ));
    }
    if leaks.never_freed_blocks > 0 {
        let top = leaks
            .never_freed
            .first()
            .map(|b| {
                format!(
                    ", most from <code>{}</code> ({})",
                    escape(&site_label(&b.site.site)),
                    units::bytes(b.bytes)
                )
            })
            .unwrap_or_default();
        items.push((
            false,
            format!(
                "{} blocks ({}) were still allocated when the trace ended{top}.",
                units::count(leaks.never_freed_blocks),
                units::bytes(leaks.never_freed_bytes)
            ),
        ));
    }
    if s.inconsistencies.total > 0 {
        items.push((
            true,
            format!(
                "The trace contradicts itself {} (see <a href=\"#consistency\">consistency</a>): figures may be off.",
                units::counted(s.inconsistencies.total, "time", "times")
            ),
        ));
    }
    for (bad, text) in items {
        let _ = write!(
            html,
            "<li{}>{text}</li>",
            if bad { " class=\"bad\"" } else { "" }
        );
    }
    html.push_str("</ul>");
    html
}

fn phase_or_none(phase: &str) -> &str {
    if phase.is_empty() {
        "(no phase)"
    } else {
        phase
    }
}

fn stack_details(site: &str, frames: &[String]) -> String {
    format!(
        "<details><summary><code>{}</code></summary><pre>{}</pre></details>",
        escape(&site_label(site)),
        escape(&frames.join("\n"))
    )
}

/// The rank table of the set the trace belongs to, and each rank's memory
/// over time as small multiples.
fn ranks_section(r: &ReportResult, ranks: &crate::command::ranks::RanksSection) -> String {
    let t = &ranks.table;
    let mut html = format!(
        "<p>This report is one rank's of a set of {} ranks: <b>{}</b>, whose allocated peak is highest; the rest of the page is its own.</p>",
        t.ranks,
        escape(&r.name)
    );
    if let (Some(a), Some(res)) = (&t.allocated, &t.reserved) {
        let _ = write!(
            html,
            "<p>Spread between ranks: {}; {}.</p>",
            escape(&super::text::spread_line("allocated", a)),
            escape(&super::text::spread_line("reserved", res))
        );
    }
    let _ = write!(
        html,
        "<figure>{}<figcaption>Each rank's allocated and reserved memory over time, on one time axis and one memory scale, so that the ranks compare at a glance.</figcaption></figure>",
        svg::ranks::render(&ranks.timelines)
    );
    html.push_str("<details><summary>The rank table</summary><table><tr><th class=\"num\">rank</th><th class=\"num\">device</th><th class=\"num\">peak allocated</th><th>when</th><th class=\"num\">peak reserved</th><th>when</th><th class=\"num\">allocated at the end</th><th>file</th></tr>");
    for row in &t.rows {
        let _ = write!(
            html,
            "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td>{}{}<td class=\"num\">{}</td><td>{}</td></tr>",
            row.rank,
            row.device,
            peak_cells(&row.peak_allocated),
            peak_cells(&row.peak_reserved),
            units::bytes(row.end_allocated),
            escape(&crate::command::file_name(std::path::Path::new(&row.path)))
        );
    }
    html.push_str("</table></details>");
    html
}

/// A peak's two cells: its bytes, and when it was reached, in which phase.
fn peak_cells(p: &crate::analysis::summary::Peak) -> String {
    let at = units::duration_ns(p.time_ns);
    let when = match p.phase.as_str() {
        "" => at,
        phase => format!("{at} in {}", escape(phase)),
    };
    format!(
        "<td class=\"num\">{}</td><td>{when}</td>",
        units::bytes(p.bytes)
    )
}

/// The table of a trace's devices, and which one the page shows.
fn devices_section(r: &ReportResult) -> String {
    let mut html = format!(
        "<p>This trace holds {} devices; the page shows device {}, whose allocated peak is highest (<code>--device N</code> reports another).</p><table><tr><th class=\"num\">device</th><th class=\"num\">peak allocated</th><th>when</th><th class=\"num\">peak reserved</th><th>when</th></tr>",
        r.devices.len(),
        r.device
    );
    for d in &r.devices {
        let _ = write!(
            html,
            "<tr{}><td class=\"num\">{}</td>{}{}</tr>",
            if d.device == r.device {
                " class=\"shown\""
            } else {
                ""
            },
            d.device,
            peak_cells(&d.peak_allocated),
            peak_cells(&d.peak_reserved)
        );
    }
    html.push_str("</table>");
    html
}

/// Memory by category at the peaks and at the end, what dominates the peak
/// and what lowers it, and the chart of categories over time.
fn categories_section(input: &ReportInput<'_>) -> String {
    let c = &input.summary.categories;
    let mut html = format!(
        "<p class=\"muted\">Allocated memory by what it holds: {}.</p><table><tr><th>category</th><th class=\"num\">at the allocated peak</th><th class=\"num\">at the reserved peak</th><th class=\"num\">at the end</th><th>how known</th></tr>",
        escape(super::labels::category_source(c.source))
    );
    let columns = [&c.at_allocated_peak, &c.at_reserved_peak, &c.at_end];
    for category in Category::ALL {
        let shares: Vec<_> = columns.iter().map(|t| t.get(category)).collect();
        if shares.iter().all(|s| s.bytes == 0) {
            continue;
        }
        let _ = write!(
            html,
            "<tr><td><i class=\"swatch\" style=\"background:{}\"></i>{}</td>",
            palette::hex(palette::of_category(category)),
            category.label()
        );
        for s in &shares {
            let _ = write!(html, "<td class=\"num\">{}</td>", units::bytes(s.bytes));
        }
        let bases: Vec<_> = shares
            .iter()
            .filter(|s| s.bytes > 0)
            .map(|s| s.basis())
            .collect();
        let _ = write!(
            html,
            "<td>{}</td></tr>",
            super::labels::category_row_basis(&bases)
        );
    }
    html.push_str("</table>");
    if let Some(d) = &c.dominant {
        let _ = write!(
            html,
            "<p><b>{}</b></p>",
            escape(&super::labels::category_dominant_line(
                d,
                input.summary.peak_allocated_bytes,
                "the allocated peak"
            ))
        );
    }
    let _ = write!(
        html,
        "<figure>{}<figcaption>Allocated memory stacked by what it holds, reserved memory as the black line. Each pixel column keeps its lowest and highest moment. A category learned late (a gradient tagged after its step, an activation known when backward frees it) counts from its block's allocation.</figcaption></figure>",
        input.charts.categories
    );
    html
}

fn sites_table(s: &SummaryReport) -> String {
    if s.top_sites_at_peak.is_empty() {
        return "<p class=\"muted\">Nothing was allocated.</p>".into();
    }
    let mut html = String::from(
        "<p class=\"muted\">Click a row to highlight the site's allocations in the explorer.</p><table><tr><th class=\"num\">bytes</th><th class=\"num\">blocks</th><th class=\"num\">share</th><th>holds</th><th>site (click for the stack)</th></tr>",
    );
    for site in &s.top_sites_at_peak {
        let _ = write!(
            html,
            "<tr data-site=\"{}\"><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            escape(&site.site.site),
            units::bytes(site.bytes),
            units::count(site.count),
            units::percent(site.share),
            site.category.map_or("", |c| c.label()),
            stack_details(&site.site.site, &site.site.frames)
        );
    }
    html.push_str("</table>");
    if super::labels::lists_no_stack(s.top_sites_at_peak.iter().map(|s| s.site.site.as_str())) {
        let _ = write!(
            html,
            "<p class=\"muted\">{}</p>",
            escape(super::labels::NO_STACK_NOTE)
        );
    }
    html
}

fn leaks_section(input: &ReportInput<'_>) -> String {
    let leaks = input.leaks;
    let mut html = String::new();
    if let Some(chart) = &input.charts.leaks {
        let _ = write!(
            html,
            "<figure>{chart}<figcaption>Allocated memory at the end of each repetition; the dashed line is the robust fit of its growth (warm-up repetitions, and repetitions cut short by an out-of-memory error, grey, are left out). Bars: the sites that leak.</figcaption></figure>"
        );
    }
    if leaks.repeated_phases.is_empty() {
        html.push_str("<p class=\"muted\">No phase repeats three times or more, so growth across repetitions cannot be measured. Mark loop iterations as phases (<code>iter0</code>, <code>iter1</code>, …) to get it.</p>");
    } else {
        html.push_str("<table><tr><th>repeated phase</th><th class=\"num\">repetitions</th><th class=\"num\">growth per repetition</th><th class=\"num\">steadiness</th><th>trend</th></tr>");
        for p in &leaks.repeated_phases {
            let growth = match p.trend {
                Trend::Grows | Trend::Shrinks => units::bytes_delta(p.bytes_per_repetition as i128),
                _ => "–".into(),
            };
            let _ = write!(
                html,
                "<tr><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                escape(&p.phase),
                p.repetitions,
                growth,
                match p.trend {
                    Trend::Grows | Trend::Shrinks => units::percent(p.steadiness),
                    _ => "–".into(),
                },
                p.trend.word()
            );
        }
        html.push_str("</table><p class=\"muted\">steady: the same at every repetition's end; grows, shrinks: by about the same amount each time; varies: neither (batch or sequence sizes that change). A leak is a site, not a phase.</p>");
        for p in &leaks.repeated_phases {
            let _ = write!(
                html,
                "<p class=\"vt-reps\" data-phase-reps=\"{}\"><code>{}</code>: </p>",
                escape(&p.phase),
                escape(&p.phase)
            );
        }
    }
    if !leaks.leaks.is_empty() {
        html.push_str("<h3>Leaking sites</h3><table><tr><th class=\"num\">per repetition</th><th>of</th><th class=\"num\">steadiness</th><th class=\"num\">retained</th><th>site</th></tr>");
        for l in leaks.leaks.iter().take(10) {
            let g = &l.growth;
            let _ = write!(
                html,
                "<tr><td class=\"num\">{}</td><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                units::bytes_delta(g.bytes_per_repetition as i128),
                escape(&l.phase),
                units::percent(g.steadiness),
                units::bytes(g.retained_bytes),
                stack_details(&g.site.site, &g.site.frames)
            );
        }
        html.push_str("</table>");
    }
    if !leaks.never_freed.is_empty() {
        let _ = write!(
            html,
            "<h3>Never freed</h3><p>{} blocks, {}, were still allocated when the trace ended (model weights and optimizer state are expected here).</p><table><tr><th class=\"num\">bytes</th><th class=\"num\">blocks</th><th>site</th></tr>",
            units::count(leaks.never_freed_blocks),
            units::bytes(leaks.never_freed_bytes)
        );
        for b in leaks.never_freed.iter().take(10) {
            let _ = write!(
                html,
                "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                units::bytes(b.bytes),
                units::count(b.count),
                stack_details(&b.site.site, &b.site.frames)
            );
        }
        html.push_str("</table>");
    }
    html
}

fn fragmentation_section(input: &ReportInput<'_>) -> String {
    let s = input.summary;
    let f = input.fragmentation;
    let mut html = format!(
        "<figure>{}<figcaption>Reserved against allocated memory; cached free memory is what the caching allocator holds but nothing uses, and external fragmentation (dashed, right axis) says how scattered it is: 1 − largest free block / free memory.</figcaption></figure>",
        input.charts.fragmentation
    );
    let _ = write!(
        html,
        "<p>At the allocated peak: {} segments, {} reserved, {} cached free{}, internal fragmentation (block sizes beyond the requested sizes) {}.</p>",
        units::count(s.at_peak.segments),
        units::bytes(s.at_peak.reserved_bytes),
        units::bytes(s.at_peak.cached_free_bytes),
        s.at_peak
            .largest_free_block
            .map(|b| format!(
                " (largest free block {}, external fragmentation {})",
                units::bytes(b),
                units::percent(s.at_peak.external_fragmentation.unwrap_or(0.0))
            ))
            .unwrap_or_default(),
        units::bytes(s.at_peak.internal_fragmentation_bytes)
    );
    if let Some(i) = f.worst_cached_free.and_then(|i| f.buckets.get(i)) {
        let _ = write!(
            html,
            "<p>The most memory cached but free was {} at {}.</p>",
            units::bytes(i.cached_free_bytes),
            units::duration_ns(i.start_ns)
        );
    }
    html
}

fn ooms_section(s: &SummaryReport) -> String {
    let mut html = String::from(
        "<table><tr><th class=\"num\">time</th><th class=\"num\">requested</th><th>limit</th><th class=\"num\">allocated</th><th class=\"num\">reserved</th><th>phase</th><th>site</th></tr>",
    );
    for o in &s.ooms {
        let _ = write!(
            html,
            "<tr><td class=\"num\"><a href=\"#explorer\" data-event=\"{}\" title=\"show in the explorer\">{}</a></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td><code>{}</code></td><td>{}</td></tr>",
            o.index,
            units::duration_ns(o.time_ns),
            units::bytes(o.requested_bytes),
            if o.survived {
                "survived: a cuDNN workspace; PyTorch tried the next algorithm".to_string()
            } else {
                waterfall::oom_words(o)
            },
            units::bytes(o.allocated_bytes),
            units::bytes(o.reserved_bytes),
            escape(phase_or_none(&o.phase)),
            stack_details(&o.site.site, &o.site.frames)
        );
    }
    html.push_str("</table>");
    for (i, o) in s.fatal_ooms().take(OOM_WATERFALLS).enumerate() {
        let _ = write!(
            html,
            "<h3>Where the limit went at OOM {} ({}, asking for {})</h3>{}",
            i + 1,
            units::duration_ns(o.time_ns),
            units::bytes(o.requested_bytes),
            waterfall::table(&o.waterfall)
        );
    }
    html
}

/// Where the limit went at the allocated peak, and the memory outside the
/// allocator over the run (measured), when the trace samples the device.
fn peak_waterfall(s: &SummaryReport) -> String {
    let mut html = String::new();
    if let Some(w) = &s.waterfall_at_peak {
        let _ = write!(
            html,
            "<h3>Where the limit went at the allocated peak</h3>{}",
            waterfall::table(w)
        );
    }
    if let Some(o) = &s.outside_allocator {
        let _ = write!(
            html,
            "<p>Outside the allocator (the device's used memory less reserved memory at each of {} device-memory samples, measured: the CUDA context, NCCL, cuBLAS workspaces, other processes): {} at the start, {} at the peak, at most {}, {} at the end.</p>",
            units::count(o.samples),
            units::bytes(o.at_start_bytes),
            o.at_peak_bytes.map_or("unknown".to_string(), units::bytes),
            units::bytes(o.max_bytes),
            units::bytes(o.at_end_bytes)
        );
    }
    html
}

/// The OOMs whose waterfall the page shows (the summary's JSON has all).
const OOM_WATERFALLS: usize = 4;

fn consistency_section(s: &SummaryReport) -> String {
    let i = &s.inconsistencies;
    if i.total == 0 {
        return "<p>The trace is consistent: every free matches an allocation, no segment overlaps another, and no segment was released while in use.</p>".into();
    }
    let mut html = format!(
        "<p>{} inconsistencies; the events involved were skipped.</p><table><tr><th>kind</th><th class=\"num\">count</th></tr>",
        units::count(i.total)
    );
    for k in &i.by_kind {
        let _ = write!(
            html,
            "<tr><td>{}</td><td class=\"num\">{}</td></tr>",
            escape(k.description),
            units::count(k.count)
        );
    }
    html.push_str("</table><h3>First examples</h3><table><tr><th class=\"num\">event</th><th class=\"num\">time</th><th>kind</th><th>address</th></tr>");
    for e in i.examples.iter().take(20) {
        let _ = write!(
            html,
            "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td><code>{:#x}</code></td></tr>",
            units::count(e.index),
            units::duration_ns(e.time_ns),
            escape(e.kind.describe()),
            e.addr
        );
    }
    html.push_str("</table>");
    html
}
