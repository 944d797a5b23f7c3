//! `vramtrace fragmentation`: cached and fragmented memory over time.

use super::analyze::{CommonArgs, emit, print_reports};
use crate::analysis::fragmentation::{Fragmentation, FragmentationReport};
use crate::table::{Align, Table};
use crate::units;
use serde::Serialize;
use std::process::ExitCode;

/// Arguments of `vramtrace fragmentation`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// About how many time buckets to show (between this and twice it).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    buckets: u32,
}

#[derive(Serialize)]
struct Output {
    path: String,
    #[serde(flatten)]
    report: FragmentationReport,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    args.common.validate()?;
    let mut outputs = Vec::new();
    for path in &args.common.traces {
        let mut prepared = args.common.prepare(path)?;
        let mut analysis = Fragmentation::new(args.buckets as usize);
        prepared.run(&mut [&mut analysis])?;
        let output = Output {
            path: path.display().to_string(),
            report: analysis.into_report().unwrap_or_default(),
        };
        if !args.common.json {
            if !outputs.is_empty() {
                emit("\n")?;
            }
            emit(&render(&output))?;
        }
        outputs.push(output);
    }
    if args.common.json {
        print_reports(&outputs)?;
    }
    Ok(ExitCode::SUCCESS)
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
