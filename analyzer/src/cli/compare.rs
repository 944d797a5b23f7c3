//! `vramtrace compare BASE NEW`: did a change make memory worse, where, and
//! by how much. Both runs are replayed at once (one thread each, on top of
//! the decoding each pass spreads over the cores), then matched by
//! [`analysis::compare`](crate::analysis::compare).

use super::analyze::{CommonArgs, emit, full_stacks};
use super::timeline::{file_name, write_chart};
use crate::analysis::compare::{
    CompareOptions, Comparison, GateResult, RunFigures, Threshold, Unit, compare, gate,
    parse_thresholds,
};
use crate::analysis::leaks::Leaks;
use crate::analysis::phase_totals::PhaseTotals;
use crate::analysis::site_totals::SiteTotals;
use crate::analysis::summary::Summary;
use crate::analysis::timeline::{GroupBy, Timeline, TimelineAnalysis, TimelineOptions};
use crate::render::diff::{
    self, AlignBy, DiffRun, format_delta, format_percent, format_value, repetitions,
};
use crate::render::labels;
use crate::sites::SiteDescription;
use crate::table::{Align, Table};
use crate::units;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit code when a `--fail-on` threshold is crossed.
pub const EXIT_GATE: u8 = 1;

/// Arguments of `vramtrace compare`.
#[derive(clap::Args)]
pub struct Args {
    /// The baseline run: a trace or a PyTorch snapshot.
    #[arg(value_name = "BASE")]
    base: PathBuf,
    /// The run to check against it: a trace or a PyTorch snapshot.
    #[arg(value_name = "NEW")]
    new: PathBuf,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Fail (exit code 1) when a figure changed this much:
    /// METRIC:+CHANGE or METRIC:-CHANGE, comma-separated or repeated.
    /// CHANGE is a percentage or an amount (100MiB, 2s, 1, 5pp); metrics:
    /// peak_allocated, peak_reserved, peak_requested, cached_free,
    /// fragmentation, leak, ooms, duration, events. See docs/compare.md.
    #[arg(long, value_name = "METRIC:CHANGE,...", value_parser = parse_gate)]
    fail_on: Vec<Thresholds>,
    /// Match sites by function and file, not line, so that an edit moving
    /// code does not break the matching.
    #[arg(long)]
    ignore_lines: bool,
    /// Compare duration, events, allocations and retained bytes per
    /// repetition of each run's most repeated phase (runs of different
    /// lengths).
    #[arg(long)]
    per_iteration: bool,
    /// Write the comparison chart (SVG): both timelines, and the sites that
    /// changed most.
    #[arg(short, long, value_name = "FILE.svg")]
    output: Option<PathBuf>,
    /// The chart's horizontal axis.
    #[arg(long, value_enum, default_value_t, requires = "output")]
    align: AlignBy,
    /// Sites and phases listed (and drawn).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..=1000))]
    top: u32,
    /// Start of the analysis in both runs: a time since the trace start
    /// (1.5s, 300ms) or a phase name (its first begin).
    #[arg(long, value_name = "TIME|PHASE")]
    from: Option<String>,
    /// End of the analysis in both runs: a time or a phase name (its last end).
    #[arg(long, value_name = "TIME|PHASE")]
    to: Option<String>,
    /// Make sites whole stacks, matched frame by frame, instead of folding
    /// them to their most telling frame.
    #[arg(long)]
    full_stacks: bool,
    /// Also skip frames matching this regular expression when folding
    /// stacks to sites; repeatable.
    #[arg(long, value_name = "REGEX")]
    skip_frames: Vec<String>,
}

/// One `--fail-on` value: a comma-separated list of thresholds.
#[derive(Clone, Debug)]
pub struct Thresholds(Vec<Threshold>);

fn parse_gate(text: &str) -> Result<Thresholds, String> {
    parse_thresholds(text).map(Thresholds)
}

impl Args {
    fn common(&self) -> CommonArgs {
        CommonArgs {
            traces: vec![self.base.clone(), self.new.clone()],
            json: self.json,
            from: self.from.clone(),
            to: self.to.clone(),
            full_stacks: self.full_stacks,
            skip_frames: self.skip_frames.clone(),
        }
    }
}

/// A run measured for a comparison, with its timeline for the chart.
pub struct Measured {
    /// The figures compared.
    pub figures: RunFigures,
    /// Allocated and reserved memory over time.
    pub timeline: Timeline,
}

/// Replays one run with everything a comparison needs, in one pass.
pub fn measure(common: &CommonArgs, path: &Path) -> anyhow::Result<Measured> {
    let mut prepared = common.prepare(path)?;
    // Every site at the peak, not the top few: a site can only be matched
    // if both runs list it.
    let mut summary = Summary::new(usize::MAX);
    let mut leaks = Leaks::new();
    let mut sites = SiteTotals::new();
    let mut phases = PhaseTotals::new();
    let mut timeline = TimelineAnalysis::new(TimelineOptions {
        group_by: GroupBy::None,
        ..TimelineOptions::default()
    });
    prepared.run(&mut [
        &mut summary,
        &mut leaks,
        &mut sites,
        &mut phases,
        &mut timeline,
    ])?;
    let mut summary = summary.into_report().unwrap_or_default();
    super::analyze::add_free_space(&mut summary, path)?;
    Ok(Measured {
        figures: RunFigures {
            name: file_name(path),
            summary,
            leaks: leaks.into_report().unwrap_or_default(),
            sites: sites.into_report().unwrap_or_default(),
            phases: phases.into_report().unwrap_or_default(),
        },
        timeline: timeline.into_timeline(),
    })
}

#[derive(Serialize)]
struct Output<'a> {
    #[serde(flatten)]
    comparison: &'a Comparison,
    gate: &'a GateResult,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let common = args.common();
    common.validate()?;
    let thresholds: Vec<Threshold> = args.fail_on.iter().flat_map(|t| t.0.clone()).collect();
    let (base, new) = rayon::join(
        || measure(&common, &args.base),
        || measure(&common, &args.new),
    );
    let (base, new) = (base?, new?);
    let options = CompareOptions {
        ignore_lines: args.ignore_lines,
        per_iteration: args.per_iteration,
        full_stacks: args.full_stacks,
    };
    let comparison = compare(&base.figures, &new.figures, options)?;
    let result = gate(&comparison, &thresholds);
    if let Some(output) = &args.output {
        let svg = diff::render(
            &DiffRun {
                name: &comparison.base.name,
                timeline: &base.timeline,
                iterations: comparison.base.iterations.as_ref(),
            },
            &DiffRun {
                name: &comparison.new.name,
                timeline: &new.timeline,
                iterations: comparison.new.iterations.as_ref(),
            },
            &comparison,
            args.align,
            args.top as usize,
        )?;
        write_chart(output, &svg)?;
        if !args.json {
            println!(
                "wrote {} ({})\n",
                output.display(),
                units::bytes(svg.len() as u64)
            );
        }
    }
    if args.json {
        let mut text = serde_json::to_string_pretty(&Output {
            comparison: &comparison,
            gate: &result,
        })?;
        text.push('\n');
        emit(&text)?;
        // Whoever reads the JSON may not show it: say why the exit code is 1.
        for failed in &result.failed {
            eprintln!("threshold crossed: {failed}");
        }
    } else {
        emit(&render(
            &comparison,
            &result,
            args.top as usize,
            args.full_stacks,
        ))?;
    }
    Ok(if result.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_GATE)
    })
}

fn run_line(role: &str, run: &crate::analysis::compare::RunInfo, c: &Comparison) -> String {
    let duration = c
        .metric("duration")
        .map(|m| {
            if role == "baseline" {
                m.change.base
            } else {
                m.change.new
            }
        })
        .unwrap_or(0.0);
    let iterations = match &run.iterations {
        Some(it) => format!(", {} repetitions of {}", units::count(it.count), it.phase),
        None => String::new(),
    };
    let per = if c.per_iteration {
        " per iteration"
    } else {
        ""
    };
    // Both names padded alike, so the details line up.
    let width = c.base.name.chars().count().max(c.new.name.chars().count());
    format!(
        "{role:<10}{:<width$}  ({}{per}{iterations})\n",
        run.name,
        format_value(Unit::Nanoseconds, duration)
    )
}

fn render(c: &Comparison, gate: &GateResult, top: usize, full: bool) -> String {
    let mut text = run_line("baseline", &c.base, c);
    text.push_str(&run_line("new", &c.new, c));
    text.push('\n');

    let mut t = Table::new(&[
        ("", Align::Left),
        ("baseline", Align::Right),
        ("new", Align::Right),
        ("change", Align::Right),
        ("%", Align::Right),
    ]);
    for m in &c.headline {
        let ch = &m.change;
        t.row([
            m.label.clone(),
            format_value(m.unit, ch.base),
            format_value(m.unit, ch.new),
            format_delta(m.unit, ch.delta),
            if m.unit == Unit::Ratio {
                String::new()
            } else {
                format_percent(ch)
            },
        ]);
    }
    text.push_str(&t.render(0));

    let changed: Vec<_> = c.sites.iter().filter(|s| s.changed()).collect();
    let matched_by = match (c.ignore_lines, full) {
        (false, false) => "function, file and line",
        (true, false) => "function and file",
        (false, true) => "whole stack",
        (true, true) => "whole stack without lines",
    };
    text.push_str(&format!(
        "\nsites (matched by {matched_by}): {} of {} changed{}\n",
        units::count(changed.len() as u64),
        units::count(c.sites.len() as u64),
        if changed.is_empty() {
            ""
        } else {
            ", largest change at the peak or at the end first"
        }
    ));
    if !changed.is_empty() {
        let per = if c.per_iteration { "/iter" } else { "" };
        let allocs = format!("allocs{per}");
        let allocated = format!("allocated{per}");
        let mut t = Table::new(&[
            ("at peak", Align::Right),
            ("change", Align::Right),
            ("%", Align::Right),
            ("retained", Align::Right),
            (allocs.as_str(), Align::Right),
            (allocated.as_str(), Align::Right),
            ("site", Align::Left),
        ]);
        for s in changed.iter().take(top) {
            let marker = match s.presence {
                crate::analysis::compare::Presence::New => "[new] ",
                crate::analysis::compare::Presence::Gone => "[gone] ",
                crate::analysis::compare::Presence::Both => "",
            };
            t.row([
                format_value(Unit::Bytes, s.at_peak.new),
                format_delta(Unit::Bytes, s.at_peak.delta),
                format_percent(&s.at_peak),
                format_delta(Unit::Bytes, s.retained.delta),
                format_delta(Unit::Count, s.allocations.delta),
                format_delta(Unit::Bytes, s.allocated_bytes.delta),
                format!("{marker}{}", labels::site_label(&s.site)),
            ]);
        }
        text.push_str(&t.render(2));
        more(&mut text, changed.len(), top);
        if full {
            text.push_str("\n  stacks:\n");
            let sites: Vec<SiteDescription> = changed
                .iter()
                .take(top)
                .map(|s| SiteDescription {
                    site: s.site.clone(),
                    frames: s.frames.clone(),
                })
                .collect();
            text.push_str(&full_stacks(&sites, 4));
        }
    }

    let phases: Vec<_> = c.phases.iter().filter(|p| p.changed()).collect();
    if !c.phases.is_empty() {
        text.push_str(&format!(
            "\nphases: {} of {} changed\n",
            units::count(phases.len() as u64),
            units::count(c.phases.len() as u64)
        ));
    }
    if !phases.is_empty() {
        let retained = if c.per_iteration {
            "retained/rep"
        } else {
            "retained"
        };
        let mut t = Table::new(&[
            ("peak", Align::Right),
            ("change", Align::Right),
            ("%", Align::Right),
            (retained, Align::Right),
            ("leak/rep", Align::Right),
            ("repetitions", Align::Right),
            ("phase", Align::Left),
        ]);
        for p in phases.iter().take(top) {
            let marker = match p.presence {
                crate::analysis::compare::Presence::New => "[new] ",
                crate::analysis::compare::Presence::Gone => "[gone] ",
                crate::analysis::compare::Presence::Both => "",
            };
            t.row([
                format_value(Unit::Bytes, p.peak.new),
                format_delta(Unit::Bytes, p.peak.delta),
                format_percent(&p.peak),
                format_delta(Unit::Bytes, p.retained.delta),
                format_delta(Unit::Bytes, p.leak_per_repetition.delta),
                repetitions(&p.repetitions),
                format!("{marker}{}", p.phase),
            ]);
        }
        text.push_str(&t.render(2));
        more(&mut text, phases.len(), top);
    }

    if !gate.checks.is_empty() {
        let failed = gate.failed.len();
        text.push_str(&format!(
            "\ngate: {} ({} of {} thresholds crossed)\n",
            if gate.passed { "passed" } else { "FAILED" },
            failed,
            gate.checks.len()
        ));
        let mut t = Table::new(&[
            ("", Align::Left),
            ("threshold", Align::Left),
            ("change", Align::Right),
            ("%", Align::Right),
            ("", Align::Left),
        ]);
        for check in &gate.checks {
            let metric = c.metric(check.metric.name());
            let (unit, label) = metric.map_or((Unit::Count, ""), |m| (m.unit, m.label.as_str()));
            let ch = &check.change;
            t.row([
                if check.failed { "FAILED" } else { "ok" }.to_string(),
                check.threshold.clone(),
                format_delta(unit, ch.delta),
                if unit == Unit::Ratio {
                    String::new()
                } else {
                    format_percent(ch)
                },
                format!(
                    "{label}: {} -> {}",
                    format_value(unit, ch.base),
                    format_value(unit, ch.new)
                ),
            ]);
        }
        // The header row of this table says nothing the rows do not.
        for line in t.render(2).lines().skip(1) {
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

fn more(text: &mut String, changed: usize, top: usize) {
    if changed > top {
        text.push_str(&format!(
            "  ... {} more (--top shows more, --json lists all)\n",
            units::count((changed - top) as u64)
        ));
    }
}
