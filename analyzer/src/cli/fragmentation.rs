//! `vramtrace fragmentation`: cached and fragmented memory over time.

use super::analyze::{CommonArgs, for_each_trace};
use super::open_input;
use crate::analysis::fragmentation::{Fragmentation, FragmentationReport};
use crate::analysis::window::Window;
use crate::table::{Align, Table};
use crate::units;
use serde::Serialize;
use std::process::ExitCode;

/// Arguments of `vramtrace fragmentation`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// How many time buckets to show (with a window bounded by phases,
    /// between this and twice it).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    buckets: u32,
    /// Also draw reserved, allocated, free memory and fragmentation over
    /// time as an SVG chart (with finer buckets than the table).
    #[arg(short, long, value_name = "FILE.svg")]
    output: Option<std::path::PathBuf>,
}

/// Buckets of the chart: about one per two pixels of its width.
const CHART_BUCKETS: usize = 400;

#[derive(Serialize)]
struct Output {
    path: String,
    #[serde(flatten)]
    report: FragmentationReport,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    args.common.validate()?;
    if args.output.is_some() && args.common.traces.len() > 1 {
        anyhow::bail!("-o takes one trace; draw several traces one at a time");
    }
    for_each_trace(
        &args.common,
        |path| {
            let mut prepared = args.common.prepare(path)?;
            let buckets = args.buckets as usize;
            let chart_span = span(path, &prepared.window)?;
            let make = |n: usize| match chart_span {
                Some((start, end)) => Fragmentation::with_span(n, start, end),
                None => Fragmentation::new(n),
            };
            let mut analysis = make(buckets);
            // The chart gets its own, finer buckets from the same pass.
            let mut fine = make(CHART_BUCKETS);
            if args.output.is_some() {
                prepared.run(&mut [&mut analysis, &mut fine])?;
            } else {
                prepared.run(&mut [&mut analysis])?;
            }
            if let Some(svg_path) = &args.output {
                let report = fine.into_report().unwrap_or_default();
                let title = format!("Fragmentation: {}", super::timeline::file_name(path));
                let svg = crate::render::fragmentation::render(&report, &title)?;
                super::timeline::write_chart(svg_path, &svg)?;
            }
            let output = Output {
                path: path.display().to_string(),
                report: analysis.into_report().unwrap_or_default(),
            };
            Ok(output)
        },
        render,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The times of the window's first and last events, from the chunks'
/// headers (no decoding); `None` for a window bounded by phases, whose times
/// are not known before replaying.
fn span(path: &std::path::Path, window: &Window) -> anyhow::Result<Option<(u64, u64)>> {
    if window.from_index.is_some() || window.to_index.is_some() {
        return Ok(None);
    }
    let Some((first, last)) = open_input(path)?.scan()?.times else {
        return Ok(None);
    };
    let start = first.max(window.from_ns.unwrap_or(0));
    let end = last.min(window.to_ns.unwrap_or(u64::MAX));
    Ok((start <= end).then_some((start, end)))
}

fn render(out: &Output) -> String {
    let r = &out.report;
    let mut text = format!(
        "trace     {}\nbuckets   {} of {}\n\n",
        out.path,
        r.buckets.len(),
        units::duration_ns(r.bucket_ns)
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
