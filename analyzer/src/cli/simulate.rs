//! `vramtrace simulate`: replay a trace's requests under another device
//! capacity or allocator setting and say what the run would have done.

use super::analyze::emit;
use super::{open_input_with_report, warn};
use crate::progress;
use crate::simulate::{self, Extracted, Fidelity, Scenario, ScenarioResult, SimOptions};
use crate::table::{Align, Table};
use crate::units;
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace_format::EventSource;
use vramtrace_recorder::allocator::AllocatorConfig;

/// Arguments of `vramtrace simulate`.
#[derive(clap::Args)]
pub struct Args {
    /// The trace (or PyTorch snapshot) whose requests to replay.
    #[arg(value_name = "TRACE")]
    trace: PathBuf,
    /// Device memory to simulate (24GiB, 80GB, 1.5GiB); unlimited if not given.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_bytes)]
    capacity: Option<u64>,
    /// Allocator settings to simulate, in PYTORCH_CUDA_ALLOC_CONF syntax
    /// (`expandable_segments:True,max_split_size_mb:128`); repeatable, one
    /// policy each. Default: the trace's recorded settings.
    #[arg(long = "alloc-conf", value_name = "CONF")]
    alloc_conf: Vec<String>,
    /// Compare the recorded settings with PyTorch's default, expandable
    /// segments, and max_split_size_mb 128 and 512.
    #[arg(long)]
    compare_policies: bool,
    /// Also find each policy's smallest capacity without an OOM (bisection,
    /// to 2 MiB).
    #[arg(long)]
    min_capacity: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Draw reserved and allocated memory over time for each policy as an
    /// SVG chart.
    #[arg(short, long, value_name = "FILE.svg")]
    output: Option<PathBuf>,
    /// Print how long reading and simulating took on stderr (for
    /// docs/performance.md).
    #[arg(long, hide = true)]
    timing: bool,
}

/// Time buckets of the chart: about one per two pixels of its width.
const CHART_BUCKETS: usize = 500;

/// Parses the `--alloc-conf` values: a bad one is a usage error naming it.
fn parse_confs(confs: &[String]) -> anyhow::Result<Vec<Scenario>> {
    confs
        .iter()
        .map(|c| {
            AllocatorConfig::parse(c)
                .map(Scenario::new)
                .map_err(|e| anyhow::anyhow!("invalid --alloc-conf '{c}': {e}"))
        })
        .collect()
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let requested = parse_confs(&args.alloc_conf)?;
    let opened = open_input_with_report(&args.trace)?;
    let mut reader = opened.input;
    let bar = progress::replay_bar(&reader, &args.trace);
    let started = std::time::Instant::now();
    let extracted = simulate::extract(&mut reader, Some(&bar))
        .with_context(|| format!("cannot read {}", args.trace.display()))?;
    bar.finish_and_clear();
    if let Some(t) = &extracted.info.truncation {
        warn(format!("{}: {t}", args.trace.display()));
    }
    if let Some(e) = &extracted.list.error {
        bail!("{}: {e}", args.trace.display());
    }
    let recorded = match &extracted.recorded_config {
        Ok((config, _)) => Some(config.clone()),
        Err(e) => {
            warn(format!(
                "{}: the recorded allocator settings cannot be read ({e})",
                args.trace.display()
            ));
            None
        }
    };
    let mut scenarios = Vec::new();
    if requested.is_empty() || args.compare_policies {
        match &recorded {
            Some(config) => {
                let mut s = Scenario::new(config.clone());
                s.name = format!("recorded ({})", s.name);
                scenarios.push(s);
            }
            None if requested.is_empty() && !args.compare_policies => {
                bail!(
                    "{}: no usable recorded settings; give --alloc-conf",
                    args.trace.display()
                )
            }
            None => {}
        }
    }
    let extra = requested.into_iter().chain(if args.compare_policies {
        Scenario::standard()
    } else {
        Vec::new()
    });
    for s in extra {
        if !scenarios.iter().any(|x| x.config == s.config) {
            scenarios.push(s);
        }
    }

    let options = SimOptions {
        capacity: args.capacity,
        samples: if args.output.is_some() {
            CHART_BUCKETS
        } else {
            0
        },
        ..Default::default()
    };
    let list = &extracted.list;
    let read_s = started.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    let (results, fidelity) = rayon::join(
        || simulate::sweep(list, &scenarios, &options, args.min_capacity),
        || {
            recorded
                .as_ref()
                .map(|c| simulate::fidelity(list, c, extracted.recorded_capacity))
        },
    );

    if args.timing {
        let sim_s = started.elapsed().as_secs_f64();
        // Without --min-capacity: one simulation per policy, plus the fidelity run.
        let runs = scenarios.len() + usize::from(fidelity.is_some());
        eprintln!(
            "timing: read {} events into {} requests ({} bytes) in {read_s:.3} s; {runs} simulations in {sim_s:.3} s on {} threads: {:.2} M events/s per simulation and thread",
            list.events,
            list.requests.len(),
            list.memory_bytes(),
            rayon::current_num_threads(),
            list.events as f64 * runs as f64
                / sim_s
                / rayon::current_num_threads().min(runs) as f64
                / 1e6
        );
    }
    let symbols = reader.symbols();
    let describe_oom = |r: &ScenarioResult| -> Value {
        match &r.result.first_oom {
            None => Value::Null,
            Some(o) => json!({
                "event_index": o.event_index,
                "time_ns": o.time_ns,
                "requested_bytes": o.requested_bytes,
                "stream": o.stream,
                "phase": extracted.state.phase_path(o.phase, symbols),
                "site": extracted.state.sites().name(o.site, symbols),
                "free_bytes": o.free_bytes,
                "reserved_bytes": o.reserved_bytes,
                "allocated_bytes": o.allocated_bytes,
                "shortfall_bytes": o.shortfall_bytes,
                "recorded": o.recorded,
            }),
        }
    };

    if let Some(svg_path) = &args.output {
        let series: Vec<_> = results
            .iter()
            .map(|r| crate::render::simulate::Series {
                name: &r.policy,
                samples: &r.result.samples,
                oom: r.result.first_oom.as_ref().map(|o| {
                    (
                        o.time_ns,
                        format!(
                            "{}: out of memory at {} requesting {}",
                            r.policy,
                            units::duration_ns(o.time_ns),
                            units::bytes(o.requested_bytes)
                        ),
                    )
                }),
            })
            .collect();
        let capacity = args
            .capacity
            .map_or_else(|| "unlimited".into(), units::bytes);
        let title = format!(
            "What-if: {} on {capacity}",
            super::timeline::file_name(&args.trace)
        );
        let svg = crate::render::simulate::render(&series, args.capacity, &title)?;
        super::timeline::write_chart(svg_path, &svg)?;
    }

    if args.json {
        let policies: Vec<Value> = results
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).expect("results serialize");
                if let Value::Object(m) = &mut v {
                    m.remove("first_oom");
                    m.insert("oom".into(), describe_oom(r));
                    m.insert(
                        "min_capacity_bytes".into(),
                        json!(r.min_capacity.map(|m| m.bytes)),
                    );
                }
                v
            })
            .collect();
        let first = &results[0];
        let out = json!({
            "path": args.trace.display().to_string(),
            "events": list.events,
            "requests": list.requests.len(),
            "capacity_bytes": args.capacity,
            "policy": first.policy,
            "peak_reserved_bytes": first.result.peak_reserved_bytes,
            "peak_allocated_bytes": first.result.peak_allocated_bytes,
            "fragmentation": first.result.fragmentation,
            "alloc_retries": first.result.alloc_retries,
            "cache_flushes": first.result.cache_flushes,
            "oom": describe_oom(first),
            "min_capacity_bytes": first.min_capacity.map(|m| m.bytes),
            "recorded": {
                "peak_reserved_bytes": list.recorded_peak_reserved,
                "peak_allocated_bytes": list.recorded_peak_allocated,
                "ooms": list.recorded_ooms,
                "alloc_conf": recorded.as_ref().map(|c| c.to_conf_string()),
            },
            "fidelity": fidelity,
            "notes": notes(&extracted),
            "policies": policies,
        });
        super::print_json(&out);
    } else {
        emit(&render_text(
            &args,
            &extracted,
            &results,
            fidelity.as_ref(),
            &describe_oom,
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What the reader should know about how the requests were read.
fn notes(e: &Extracted) -> Vec<String> {
    let l = &e.list;
    let mut notes = Vec::new();
    if l.inferred_empty_cache > 0 {
        notes.push(format!(
            "{} empty_cache() calls inferred from bursts of segment frees not followed by an OOM (the trace records none)",
            l.inferred_empty_cache
        ));
    }
    if l.recorded_ooms > 0 {
        notes.push(format!(
            "the recorded run ran out of memory {} times; those requests are tried again, and freed at once where they fit, since the program went on without them",
            l.recorded_ooms
        ));
    }
    if l.initial_live_blocks > 0 {
        notes.push(format!(
            "the trace starts mid-run: {} live blocks ({}) are allocated first",
            l.initial_live_blocks,
            units::bytes(l.initial_live_bytes)
        ));
    }
    notes
}

fn render_text(
    args: &Args,
    e: &Extracted,
    results: &[ScenarioResult],
    fidelity: Option<&Fidelity>,
    describe_oom: &dyn Fn(&ScenarioResult) -> Value,
) -> String {
    let l = &e.list;
    let mut text = format!(
        "trace      {}: {} events, {} requests\n",
        args.trace.display(),
        units::count(l.events),
        units::count(l.requests.len() as u64)
    );
    text.push_str(&format!(
        "recorded   peak reserved {}, peak allocated {}, {} OOMs\n",
        units::bytes(l.recorded_peak_reserved),
        units::bytes(l.recorded_peak_allocated),
        l.recorded_ooms
    ));
    if let Some(f) = fidelity {
        let on = f.capacity_bytes.map_or_else(
            || "a device without limit".into(),
            |c| format!("the recorded {}", units::bytes(c)),
        );
        if f.exact {
            text.push_str(&format!(
                "fidelity   exact: the recorded settings on {on} reproduce all {} device actions and the peak reserved {}\n",
                f.recorded_segment_actions,
                units::bytes(f.recorded_peak_reserved_bytes)
            ));
        } else {
            text.push_str(&format!(
                "fidelity   not exact: with the recorded settings on {on}, {} device actions against {} recorded (first difference at action {}), peak reserved {} against {}\n",
                f.simulated_segment_actions,
                f.recorded_segment_actions,
                f.first_difference.map_or_else(|| "none".into(), |i| i.to_string()),
                units::bytes(f.simulated_peak_reserved_bytes),
                units::bytes(f.recorded_peak_reserved_bytes)
            ));
        }
        for c in &f.caveats {
            text.push_str(&format!("           {c}\n"));
        }
    }
    text.push_str(&format!(
        "capacity   {}\n\n",
        args.capacity
            .map_or_else(|| "unlimited".into(), units::bytes)
    ));
    let mut t = Table::new(&[
        ("policy", Align::Left),
        ("peak reserved", Align::Right),
        ("peak allocated", Align::Right),
        ("cached at peak", Align::Right),
        ("retries", Align::Right),
        ("flushes", Align::Right),
        ("OOMs", Align::Right),
        ("min capacity", Align::Right),
    ]);
    for r in results {
        let s = &r.result;
        t.row([
            r.policy.clone(),
            units::bytes(s.peak_reserved_bytes),
            units::bytes(s.peak_allocated_bytes),
            format!(
                "{} ({})",
                units::bytes(s.cached_at_peak_bytes),
                units::percent(s.fragmentation)
            ),
            units::count(s.alloc_retries),
            units::count(s.cache_flushes),
            units::count(s.ooms),
            r.min_capacity
                .map_or_else(|| "-".into(), |m| units::bytes(m.bytes)),
        ]);
    }
    text.push_str(&t.render(0));
    text.push_str(
        "\ncached at peak: reserved memory holding no allocation at the peak of reserved memory\n",
    );
    for r in results {
        let Some(o) = &r.result.first_oom else {
            continue;
        };
        let d = describe_oom(r);
        let phase = d["phase"].as_str().unwrap_or_default();
        text.push_str(&format!(
            "\n{}: out of memory at event {} ({}){}, site {}: requested {} with {} free after flushing the cache; needed at least {} more{}\n",
            r.policy,
            units::count(o.event_index),
            units::duration_ns(o.time_ns),
            if phase.is_empty() { String::new() } else { format!(" in {phase}") },
            d["site"].as_str().unwrap_or("?"),
            units::bytes(o.requested_bytes),
            units::bytes(o.free_bytes),
            units::bytes(o.shortfall_bytes),
            if o.recorded { " (the recorded run ran out of memory here too)" } else { "" }
        ));
        if r.result.ooms > 1 {
            text.push_str(&format!(
                "  {} OOMs in all; the run was replayed on as recorded, skipping the frees of failed allocations\n",
                r.result.ooms
            ));
        }
    }
    let notes = notes(e);
    if !notes.is_empty() {
        text.push('\n');
        for n in notes {
            text.push_str(&format!("note: {n}\n"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_alloc_conf_names_its_key() {
        let e = parse_confs(&["expandable_segments:True,bogus_key:3".into()]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("bogus_key"), "{text}");
        assert!(!text.contains('\n'));
        assert_eq!(
            parse_confs(&["max_split_size_mb:128".into()])
                .unwrap()
                .len(),
            1
        );
    }
}
