//! `synth`: a synthetic training-loop trace (fixtures, demos, benchmarks at
//! any size).

use crate::progress::{Progress, ProgressUnit, Work};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use vramtrace_allocator::workload::{self, OomReport, WorkloadConfig, WorkloadError};

/// What a synthetic run wrote. Its JSON keys are in alphabetical order, as
/// `synth --json` has always printed them.
#[derive(Clone, Debug, Serialize)]
pub struct SynthResult {
    /// Bytes written.
    pub bytes: u64,
    /// The simulated device's memory (unlimited when absent).
    pub capacity: Option<u64>,
    /// Events by kind name.
    pub counts: BTreeMap<String, u64>,
    /// Simulated time the trace spans.
    pub duration_ns: u64,
    /// Seconds it took to generate.
    pub elapsed_s: f64,
    /// Events written.
    pub events: u64,
    /// Events generated per second.
    pub events_per_second: f64,
    /// Allocated bytes at the end.
    pub final_allocated: u64,
    /// Reserved bytes at the end.
    pub final_reserved: u64,
    /// Iterations completed.
    pub iterations: u64,
    /// Bytes retained by the injected leak.
    pub leaked_bytes: u64,
    /// The out-of-memory that ended the run.
    pub oom: Option<SynthOom>,
    /// Optimizer state bytes in the allocator's blocks (requests rounded
    /// up, or cached blocks handed out whole): the figure `summary` gives.
    pub optimizer_state_block_bytes: u64,
    /// Optimizer state bytes, as requested.
    pub optimizer_state_bytes: u64,
    /// Parameter bytes in the allocator's blocks (see
    /// `optimizer_state_block_bytes`).
    pub parameter_block_bytes: u64,
    /// Parameter bytes, as requested.
    pub parameter_bytes: u64,
    /// Where the trace is written.
    pub path: String,
    /// Peak allocated bytes.
    pub peak_allocated: u64,
    /// Peak reserved bytes.
    pub peak_reserved: u64,
    /// The seed of every random choice.
    pub seed: u64,
    /// The run's settings.
    #[serde(skip)]
    pub config: WorkloadConfig,
}

/// The out-of-memory that ended a synthetic run.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SynthOom {
    /// The device's free memory then.
    pub free_bytes: u64,
    /// The iteration (from 0).
    pub iteration: u64,
    /// The failed request.
    pub requested: u64,
}

/// Runs the synthetic workload, writing its trace to `out`; `path` names it
/// in the result. `progress` hears of the events written (a run to a number
/// of events) or of the iterations done.
pub fn synth(
    config: &WorkloadConfig,
    out: impl Write,
    path: &std::path::Path,
    progress: &dyn Progress,
) -> Result<SynthResult, WorkloadError> {
    let (unit, total) = match config.events {
        Some(n) => (ProgressUnit::Events, n),
        None => (ProgressUnit::Iterations, config.iters),
    };
    let meter = progress.begin(Work {
        label: "writing",
        total: Some(total),
        unit,
    });
    let report = workload::generate_with_progress(config, out, &mut |p| {
        meter.update(match unit {
            ProgressUnit::Events => p.events,
            _ => p.iterations,
        })
    })?;
    drop(meter);
    let secs = report.elapsed.as_secs_f64();
    Ok(SynthResult {
        bytes: report.bytes,
        capacity: config.capacity,
        counts: report
            .counts
            .nonzero()
            .map(|(k, n)| (k.name().to_string(), n))
            .collect(),
        duration_ns: report.duration_ns,
        elapsed_s: secs,
        events: report.events,
        events_per_second: if secs > 0.0 {
            report.events as f64 / secs
        } else {
            0.0
        },
        final_allocated: report.final_allocated,
        final_reserved: report.final_reserved,
        iterations: report.iterations,
        leaked_bytes: report.leaked_bytes,
        oom: report.oom.map(|o: OomReport| SynthOom {
            free_bytes: o.free_bytes,
            iteration: o.iteration,
            requested: o.requested,
        }),
        optimizer_state_block_bytes: report.optimizer_state_block_bytes,
        optimizer_state_bytes: report.optimizer_state_bytes,
        parameter_block_bytes: report.parameter_block_bytes,
        parameter_bytes: report.parameter_bytes,
        path: path.display().to_string(),
        peak_allocated: report.peak_allocated,
        peak_reserved: report.peak_reserved,
        seed: config.seed,
        config: config.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::summary::{SummaryOptions, summary};
    use crate::input::Input;
    use crate::progress::NoProgress;
    use vramtrace_format::Category;

    /// Issue #44: synth's figures of the model's memory are summary's,
    /// block for block (`synth` said 128.1 MiB of optimizer state where
    /// `summary` of its trace said 131.1 MiB).
    #[test]
    fn synth_and_summary_agree_on_the_models_memory() {
        let mut trace = Vec::new();
        let r = synth(
            &WorkloadConfig::default(),
            &mut trace,
            std::path::Path::new("-"),
            &NoProgress,
        )
        .unwrap();
        let input = Input::from_bytes(trace, &NoProgress).unwrap();
        let s = summary(&input, &SummaryOptions::default(), &NoProgress).unwrap();
        let end = &s.devices[0].result.summary.categories.at_end;
        assert_eq!(
            r.optimizer_state_block_bytes,
            end.get(Category::OptimizerState).bytes
        );
        assert_eq!(r.parameter_block_bytes, end.get(Category::Parameter).bytes);
        // The requested figure is below it (the allocator rounds up), and
        // the text gives both, saying which is summary's.
        assert!(r.optimizer_state_bytes < r.optimizer_state_block_bytes);
        let text = crate::print::text::synth(&r);
        assert!(
            text.contains(&format!(
                "{} in the allocator's blocks, as summary counts them",
                crate::units::bytes(r.optimizer_state_block_bytes)
            )),
            "{text}"
        );
    }
}
