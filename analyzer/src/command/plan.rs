//! `plan`: the largest batch size (or sequence length) that fits, from runs
//! of one program recorded at different values (see
//! [`crate::simulate::plan`] and `docs/plan.md`).

use super::simulate::{Device, OomDescription, describe};
use crate::Error;
use crate::analysis::Devices;
use crate::analysis::annotations;
use crate::analysis::categories::CategoryTable;
use crate::analysis::limits::Limit;
use crate::input::{EventStream, Input};
use crate::progress::Progress;
use crate::replay::categories::is_step_phase;
use crate::simulate::plan::law::LawKind;
use crate::simulate::plan::{
    self, Evaluated, Found, Keys, Model, ModelError, Range, RunInput, Target, Varied,
};
use crate::simulate::{
    self as sim, Extracted, Op, Reserve, SimOptions, SimulateError, extract, scenarios,
};
use crate::sites::site_label;
use crate::units;
use rayon::prelude::*;
use serde::Serialize;
use vramtrace_format::EventSource;
use vramtrace_recorder::allocator::AllocatorConfig;

/// What `plan` looks for.
#[derive(Clone, Debug, Default)]
pub struct PlanOptions {
    /// What the runs vary and each run's value, in the inputs' order; when
    /// `None`, read from each trace's notes (`batch` or `seq`).
    pub values: Option<(Varied, Vec<u64>)>,
    /// The device planned for: its memory less the reserve is the
    /// allocator's. Without it (and without a cap): the cap the runs
    /// recorded, else the card they were recorded on.
    pub device: Option<Device>,
    /// The allocator's cap planned for (`set_per_process_memory_fraction`
    /// times the device's memory): no reserve comes off it.
    pub cap: Option<u64>,
    /// Memory kept off the device for the CUDA context (and NCCL);
    /// measured or estimated when `None`.
    pub reserve: Option<u64>,
    /// Allocator settings: the first is planned for, each other one's
    /// largest value is given beside it. Default: the recorded ones.
    pub settings: Vec<AllocatorConfig>,
    /// Values are multiples of this (at least 1).
    pub step: u64,
    /// A value to simulate in full.
    pub at: Option<u64>,
    /// The device of each trace planned from; `None`: the one each holds.
    pub recorded_device: Option<u32>,
}

/// Why a plan cannot be made from the runs given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A run says neither its batch size nor its sequence length.
    #[error(
        "{path} does not say its batch size or sequence length (it has no `batch` or `seq` annotation): give each run's value"
    )]
    NoValue {
        /// The run.
        path: String,
    },
    /// A run's value is not a whole number above 0.
    #[error("{path}: its `{key}` annotation, '{value}', is not a whole number above 0")]
    BadValue {
        /// The run.
        path: String,
        /// The annotation's key.
        key: String,
        /// Its value.
        value: String,
    },
    /// As many values as runs are needed.
    #[error("{values} values for {runs} runs: give one value per run, in the runs' order")]
    ValueCount {
        /// Values given.
        values: usize,
        /// Runs given.
        runs: usize,
    },
    /// The runs vary both the batch size and the sequence length.
    #[error(
        "the runs differ in both their batch size and their sequence length: plan over one of them, with the other the same in every run"
    )]
    BothVary,
    /// Two runs were recorded at the same value.
    #[error("two runs were recorded at {varied} {value}: plan from runs at different values")]
    SameValue {
        /// What varies.
        varied: &'static str,
        /// The value.
        value: u64,
    },
    /// The runs were recorded on different GPUs.
    #[error(
        "the runs were recorded on different GPUs ({first}; {other}): plan from runs on one kind"
    )]
    DifferentGpus {
        /// The first run's GPU.
        first: String,
        /// Another's.
        other: String,
    },
    /// A run holds several devices and none was picked.
    #[error("{path} holds devices {seen}: pick the one to plan for")]
    SeveralDevices {
        /// The run.
        path: String,
        /// Its devices.
        seen: String,
    },
    /// The runs made different numbers of optimizer steps.
    #[error(
        "the runs made different numbers of optimizer steps ({counts}): record the same number of steps at each value"
    )]
    StepsDiffer {
        /// Each run's count, in words.
        counts: String,
    },
    /// A run ran out of memory: what came after is not the program's own
    /// path.
    #[error(
        "{path} ran out of memory ({at}): plan from runs that finished (the planner finds where the next value fails)"
    )]
    RecordedOom {
        /// The run.
        path: String,
        /// Where.
        at: String,
    },
    /// Two runs do not line up: different programs or code paths.
    #[error(
        "{path} does not line up with {reference}: {unmatched} of its {allocations} allocations have no partner there, the first difference at {at} (different programs, or code paths that change with the value)"
    )]
    NotLinedUp {
        /// The run.
        path: String,
        /// The run it was lined up with.
        reference: String,
        /// Allocations without a partner.
        unmatched: usize,
        /// Its allocations.
        allocations: usize,
        /// Where they first differ.
        at: String,
    },
    /// Nothing says how much memory to plan for.
    #[error(
        "nothing to plan for: the runs record no cap on the allocator nor their device's memory, and no device or cap is named"
    )]
    NoCapacity,
    /// The step is 0.
    #[error("the step between values must be at least 1")]
    ZeroStep,
}

/// One recorded run, and how the model reproduces it.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    /// The input's path.
    pub path: String,
    /// Its value.
    pub value: u64,
    /// Events read.
    pub events: u64,
    /// Its allocations.
    pub allocations: usize,
    /// Those without a partner in the reference run.
    pub unmatched: usize,
    /// Optimizer steps it made.
    pub steps: u64,
    /// Its recorded peak of reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Its recorded peak of allocated bytes.
    pub peak_allocated_bytes: u64,
    /// Its own requests simulated without a limit: peak reserved.
    pub simulated_peak_reserved_bytes: u64,
    /// And peak allocated.
    pub simulated_peak_allocated_bytes: u64,
    /// The model at its value, simulated without a limit: peak reserved.
    pub model_peak_reserved_bytes: u64,
    /// And peak allocated.
    pub model_peak_allocated_bytes: u64,
    /// Whether the model gives its own simulated peaks back, to the byte.
    pub reproduced: bool,
    /// Whether its requests are the ones replayed (the largest value).
    pub reference: bool,
}

/// A value simulated in full.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// The value.
    pub value: u64,
    /// Whether it runs without an OOM.
    pub fits: bool,
    /// Where it lies against the recorded values.
    pub range: Range,
    /// Its peak reserved bytes (up to the OOM, when it fails).
    pub peak_reserved_bytes: u64,
    /// Its peak allocated bytes.
    pub peak_allocated_bytes: u64,
    /// The memory planned for left over at the peak of reserved memory.
    pub spare_bytes: u64,
    /// Reserved memory holding no allocation at the peak.
    pub cached_at_peak_bytes: u64,
    /// That, as a share of the peak.
    pub fragmentation: f64,
    /// Where it first runs out of memory.
    pub oom: Option<OomDescription>,
    /// Allocations that failed but that the program survives (cuDNN
    /// workspaces: it falls back to algorithms that need less).
    pub survived_failures: u64,
}

/// The answer.
#[derive(Clone, Debug, Serialize)]
pub struct Answer {
    /// The largest value that fits (`None`: not even the step fits, or
    /// memory does not grow; see `unbounded`).
    pub largest: Option<u64>,
    /// Memory does not grow with the value: any value fits.
    pub unbounded: bool,
    /// The search stopped at its ceiling with the value still fitting.
    pub at_ceiling: bool,
    /// Where `largest` lies against the recorded values.
    pub range: Option<Range>,
    /// The answer in one line: the text printer prints exactly this.
    pub line: String,
    /// The run at `largest`.
    pub fits: Option<Point>,
    /// The run at the next value, which fails.
    pub next: Option<Point>,
    /// When the program makes cuDNN workspaces: the largest value that fits
    /// with every workspace asked for at its fitted size (`largest` leaves
    /// them out, as when cuDNN falls back to algorithms without one).
    pub largest_with_workspaces: Option<u64>,
    /// Simulations the search ran.
    pub simulations: u32,
}

/// The allocations of one law.
#[derive(Clone, Debug, Serialize)]
pub struct LawRow {
    /// The law.
    pub law: LawKind,
    /// It in words.
    pub words: &'static str,
    /// Allocations before the end of the first optimizer step (set-up).
    pub setup_allocations: usize,
    /// Allocations after it (the steady state).
    pub steady_allocations: usize,
    /// Bytes its allocations hold at the peak of allocated memory of the
    /// largest value that fits (or of the reference run).
    pub bytes: u64,
}

/// A site whose allocations follow no simple law.
#[derive(Clone, Debug, Serialize)]
pub struct NoLawSite {
    /// The site.
    pub site: String,
    /// Its allocations without a law.
    pub allocations: usize,
    /// The first one's size in each run, by value.
    pub sizes: Vec<(u64, u64)>,
}

/// The full simulated result at one value.
#[derive(Clone, Debug, Serialize)]
pub struct AtValue {
    /// The run.
    #[serde(flatten)]
    pub point: Point,
    /// What the live allocations held at the peak of allocated memory.
    pub categories: CategoryTable,
    /// Bytes of each law live at that peak.
    pub laws: Vec<(LawKind, u64)>,
    /// The result in one line.
    pub line: String,
}

/// Another allocator setting's answer.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyAnswer {
    /// Its name.
    pub policy: String,
    /// Its settings as `PYTORCH_CUDA_ALLOC_CONF`.
    pub alloc_conf: String,
    /// Its largest fitting value.
    pub largest: Option<u64>,
    /// Memory does not grow with the value.
    pub unbounded: bool,
}

/// Whether the figures come from runs fitted, or from one run and an
/// assumption.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Two or more runs, every size fitted exactly.
    Runs,
    /// One run: activations and temporaries assumed to scale.
    OneRun,
}

/// A plan.
#[derive(Clone, Debug, Serialize)]
pub struct PlanResult {
    /// What the runs vary.
    pub varied: Varied,
    /// Where the figures come from.
    pub basis: Basis,
    /// How the figures are to be taken: `inferred` (from laws fitted
    /// exactly through two or more runs) or `estimate` (one run).
    pub figures: &'static str,
    /// The runs, in the order given.
    pub runs: Vec<RunSummary>,
    /// The device planned for, named or the one recorded (none under a
    /// cap).
    pub device: Option<Device>,
    /// The memory the allocator gets.
    pub capacity_bytes: u64,
    /// The allocator's cap planned for, when one is.
    pub cap_bytes: Option<u64>,
    /// The cap recorded by the runs, when it is the one planned for.
    pub limit: Option<Limit>,
    /// The memory kept off the device (only with a device).
    pub reserve: Option<Reserve>,
    /// The policy planned for.
    pub policy: String,
    /// Its settings as `PYTORCH_CUDA_ALLOC_CONF`.
    pub alloc_conf: String,
    /// Values are multiples of this.
    pub step: u64,
    /// The answer.
    pub answer: Answer,
    /// Every value simulated in full, ascending.
    pub points: Vec<Point>,
    /// The allocations of each law.
    pub laws: Vec<LawRow>,
    /// The sites whose allocations follow no simple law, most first.
    pub no_law: Vec<NoLawSite>,
    /// The value asked for in full.
    pub at: Option<AtValue>,
    /// Other settings' answers.
    pub other_policies: Vec<PolicyAnswer>,
    /// What the reader should know.
    pub notes: Vec<String>,
    /// How long reading and planning took.
    #[serde(skip)]
    pub timing: PlanTiming,
}

/// How long a plan took, for the performance notes.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlanTiming {
    /// Seconds reading the runs.
    pub read_s: f64,
    /// Seconds lining up and fitting.
    pub fit_s: f64,
    /// Seconds simulating.
    pub simulate_s: f64,
}

/// The sites listed as following no simple law.
const NO_LAW_SITES: usize = 10;

/// A run read.
struct Run<'a> {
    input: &'a Input,
    events: EventStream,
    extracted: Extracted,
    value: u64,
    steps: u64,
}

/// Plans from `inputs`, runs of one program at different values of the
/// batch size or the sequence length.
pub fn plan(
    inputs: &[&Input],
    options: &PlanOptions,
    progress: &dyn Progress,
) -> Result<PlanResult, Error> {
    let started = std::time::Instant::now();
    if options.step == 0 {
        return Err(PlanError::ZeroStep.into());
    }
    if let Some((_, values)) = &options.values
        && values.len() != inputs.len()
    {
        return Err(PlanError::ValueCount {
            values: values.len(),
            runs: inputs.len(),
        }
        .into());
    }
    let mut read = Vec::with_capacity(inputs.len());
    for &input in inputs {
        read.push(read_run(input, options, progress)?);
    }
    let varied = values_of(&mut read, options)?;
    check_gpus(&read)?;
    let read_s = started.elapsed().as_secs_f64();
    let fitted = std::time::Instant::now();
    check_runs(&read)?;
    let model = fit_model(&read, varied)?;
    let fit_s = fitted.elapsed().as_secs_f64();
    let reference = &read[model.reference];
    let list = &reference.extracted.list;
    let symbols = reference.events.symbols();
    let state = &reference.extracted.state;

    // The settings: the first named, else the reference run's own.
    let recorded = reference
        .extracted
        .recorded_config
        .as_ref()
        .map(|(c, _)| c.clone())
        .map_err(|e| e.clone());
    let policies = scenarios(&recorded, options.settings.clone(), false).map_err(|source| {
        Error::Simulate {
            path: reference.input.path().to_owned(),
            source,
        }
    })?;
    let Place {
        sim: target_options,
        cap,
        limit,
        reserve,
        device: place_device,
    } = target_of(options, reference)?;
    // cuDNN's workspaces, when the program has them, are left out of the
    // answer (near the limit, cuDNN falls back to algorithms that need
    // less); the answer with them is given beside it.
    let workspaces = list.survivable.iter().any(|&s| s);
    let target = Target {
        config: policies[0].config.clone(),
        options: target_options,
        step: options.step,
        without_workspaces: workspaces,
    };

    let simulating = std::time::Instant::now();
    // The search for each policy, in parallel.
    let searches: Vec<Found> = policies
        .par_iter()
        .map(|p| {
            let t = Target {
                config: p.config.clone(),
                ..target.clone()
            };
            plan::largest_fitting(&model, list, &t)
        })
        .collect();
    let with_workspaces = workspaces.then(|| {
        let kept = Target {
            without_workspaces: false,
            ..target.clone()
        };
        plan::largest_fitting(&model, list, &kept)
    });
    let runs = run_summaries(&read, &model, &target.config);
    let found = searches[0];
    let (fits_at, next_at) = match (found.largest, found.unbounded) {
        (Some(v), _) => (Some(v), (!found.at_ceiling).then(|| v + options.step)),
        (None, true) => (Some(model.reference_value()), None),
        (None, false) => (None, Some(options.step)),
    };
    let mut values: Vec<u64> = model.values.clone();
    values.extend(fits_at);
    values.extend(next_at);
    values.extend(options.at);
    values.sort_unstable();
    values.dedup();
    // A recorded value lays its segments out as its run did.
    let addresses: Vec<Option<&[(u64, u64)]>> = values
        .iter()
        .map(|&v| {
            read.iter()
                .find(|r| r.value == v)
                .map(|r| r.extracted.list.recorded_allocations.as_slice())
        })
        .collect();
    let evaluated: Vec<Evaluated> = values
        .par_iter()
        .zip(&addresses)
        .map(|(&v, &a)| plan::evaluate(&model, list, &target, v, false, a))
        .collect();
    let simulate_s = simulating.elapsed().as_secs_f64();
    let capacity = target.options.capacity.unwrap_or(0);
    let point_of = |e: &Evaluated| point(e, &model, capacity, state, symbols);
    let points: Vec<Point> = evaluated.iter().map(point_of).collect();
    let find = |v: Option<u64>| v.and_then(|v| points.iter().find(|p| p.value == v).cloned());
    let fits = find(fits_at);
    let next = find(next_at);
    let where_ = place_words(&target, cap, limit.as_ref(), place_device.as_ref());
    let mut line = answer_line(
        &model,
        varied,
        &found,
        fits.as_ref(),
        next.as_ref(),
        &where_,
    );
    if let Some(kept) = &with_workspaces {
        line.push_str(&workspace_words(varied, kept, &found));
    }
    let answer = Answer {
        largest: found.largest,
        unbounded: found.unbounded,
        at_ceiling: found.at_ceiling,
        range: found.largest.map(|v| model.range(v)),
        line,
        fits,
        next,
        largest_with_workspaces: with_workspaces.and_then(|f| f.largest),
        simulations: found.simulations + with_workspaces.map_or(0, |f| f.simulations),
    };
    let peak_of = |v: u64| evaluated.iter().find(|e| e.value == v);
    let at_peak = fits_at
        .and_then(peak_of)
        .or_else(|| peak_of(model.reference_value()));
    let laws = law_rows(&model, &reference.extracted, symbols, at_peak);
    let no_law = no_law_sites(&model, &read, state, symbols);
    let at = options.at.and_then(|v| {
        let e = peak_of(v)?;
        let point = point_of(e);
        let line = at_line(&point, varied, &model, &where_);
        Some(AtValue {
            categories: CategoryTable::of(&e.categories),
            laws: e.by_law.clone(),
            point,
            line,
        })
    });
    let other_policies = policies[1..]
        .iter()
        .zip(&searches[1..])
        .map(|(p, f)| PolicyAnswer {
            policy: p.name.clone(),
            alloc_conf: p.config.to_conf_string(),
            largest: f.largest,
            unbounded: f.unbounded,
        })
        .collect();
    let mut notes = notes(&model, &read, varied);
    if options.reserve.is_some() && reserve.is_none() {
        notes.push(
            "the reserve stated is not taken off the recorded cap: a cap bounds the allocator alone"
                .into(),
        );
    }
    Ok(PlanResult {
        varied,
        basis: if model.is_assumed() {
            Basis::OneRun
        } else {
            Basis::Runs
        },
        figures: if model.is_assumed() {
            "estimate"
        } else {
            "inferred"
        },
        runs,
        device: place_device,
        capacity_bytes: target.options.capacity.unwrap_or(0),
        cap_bytes: cap,
        limit,
        reserve,
        policy: policies[0].name.clone(),
        alloc_conf: policies[0].config.to_conf_string(),
        step: options.step,
        answer,
        points,
        laws,
        no_law,
        at,
        other_policies,
        notes,
        timing: PlanTiming {
            read_s,
            fit_s,
            simulate_s,
        },
    })
}

/// The runs must be of one path through the program: none may have run out
/// of memory (but on a cuDNN workspace, which it survives), and all must
/// have made the same number of optimizer steps.
fn check_runs(read: &[Run<'_>]) -> Result<(), PlanError> {
    // A run that ran out of memory first: it made fewer steps, and the
    // OOM says why.
    for r in read {
        if let Some(at) = first_fatal_oom(&r.extracted, r.events.symbols()) {
            return Err(PlanError::RecordedOom {
                path: r.input.path().display().to_string(),
                at,
            });
        }
    }
    if read.windows(2).any(|w| w[0].steps != w[1].steps) {
        let words: Vec<String> = read
            .iter()
            .map(|r| format!("{} in {}", r.steps, r.input.path().display()))
            .collect();
        return Err(PlanError::StepsDiffer {
            counts: words.join(", "),
        });
    }
    Ok(())
}

/// The model of the runs: laws fitted through two or more, an assumption
/// from one.
fn fit_model(read: &[Run<'_>], varied: Varied) -> Result<Model, Error> {
    if let [one] = read {
        return Ok(Model::assumed(one.value, &one.extracted.list));
    }
    let mut keys = Keys::default();
    let runs: Vec<RunInput<'_>> = read
        .iter()
        .map(|r| RunInput {
            value: r.value,
            list: &r.extracted.list,
            keys: keys.of(&r.extracted.list, &r.extracted.state, r.events.symbols()),
        })
        .collect();
    Model::fit(&runs, varied).map_err(|e| model_error(e, read, varied))
}

/// A report's line on how far the varied value can go, planned from the
/// run and its baseline recorded at another value.
#[derive(Clone, Debug, Serialize)]
pub struct FitsUpTo {
    /// What the runs vary, when planned.
    pub varied: Option<Varied>,
    /// The largest value that fits, when found.
    pub largest: Option<u64>,
    /// The plan's answer in one line, or why there is none.
    pub line: String,
}

/// Plans from a run and its baseline when each notes its batch size or
/// sequence length and the two differ (on the card they were recorded on,
/// or under its recorded cap); `None` when they do not (a baseline of the
/// same workload), and a line saying why when no plan can be made.
pub fn fits_up_to(
    input: &Input,
    baseline: &Input,
    reserve: Option<u64>,
    device: Option<u32>,
    progress: &dyn Progress,
) -> Option<FitsUpTo> {
    let options = PlanOptions {
        reserve,
        step: 1,
        recorded_device: device,
        ..PlanOptions::default()
    };
    match plan(&[baseline, input], &options, progress) {
        Ok(p) => Some(FitsUpTo {
            varied: Some(p.varied),
            largest: p.answer.largest,
            line: p.answer.line,
        }),
        // A baseline of the same workload, runs that do not say their
        // values, or a device of unknown size: no line.
        Err(Error::Plan(
            PlanError::NoValue { .. } | PlanError::SameValue { .. } | PlanError::NoCapacity,
        )) => None,
        Err(e) => Some(FitsUpTo {
            varied: None,
            largest: None,
            line: format!("no plan from the two runs: {e}"),
        }),
    }
}

/// Reads one run's requests (of its one device, or the one picked).
fn read_run<'a>(
    input: &'a Input,
    options: &PlanOptions,
    progress: &dyn Progress,
) -> Result<Run<'a>, Error> {
    let mut events = input.events()?;
    let meter = progress.begin(input.pass_work(&events));
    let devices = options
        .recorded_device
        .map_or(Devices::Apart, Devices::Only);
    let mut extracted =
        extract(&mut events, devices, &*meter).map_err(|e| super::pass_error(input.path(), e))?;
    drop(meter);
    let path = input.path().display().to_string();
    if let Some(device) = options.recorded_device
        && extracted.devices.is_empty()
    {
        return Err(Error::NoSuchDevice {
            path: input.path().to_owned(),
            device,
            seen: extracted.seen,
        });
    }
    if extracted.devices.len() > 1 {
        let seen: Vec<String> = extracted.seen.iter().map(u32::to_string).collect();
        return Err(PlanError::SeveralDevices {
            path,
            seen: seen.join(", "),
        }
        .into());
    }
    let Some(extracted) = extracted.devices.pop() else {
        return Err(Error::NoSuchDevice {
            path: input.path().to_owned(),
            device: options.recorded_device.unwrap_or(0),
            seen: extracted.seen,
        });
    };
    let symbols = events.symbols();
    let steps = extracted
        .state
        .phases()
        .iter()
        .filter(|p| is_step_phase(symbols.string_or_unknown(p.name)))
        .count() as u64;
    Ok(Run {
        input,
        events,
        extracted,
        value: 0,
        steps,
    })
}

/// Sets each run's value, given or noted, and says what varies.
fn values_of(read: &mut [Run<'_>], options: &PlanOptions) -> Result<Varied, PlanError> {
    if let Some((varied, values)) = &options.values {
        for (r, &v) in read.iter_mut().zip(values) {
            r.value = v;
        }
        return Ok(*varied);
    }
    const BATCH: [&str; 3] = ["batch", "batch_size", "batch-size"];
    const SEQ: [&str; 5] = ["seq", "seq_len", "seq-len", "sequence_length", "seq_length"];
    let noted = |r: &Run<'_>, keys: &[&str]| -> Result<Option<u64>, PlanError> {
        match annotations::last(&r.extracted.annotations, keys) {
            None => Ok(None),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(PlanError::BadValue {
                    path: r.input.path().display().to_string(),
                    key: keys[0].to_string(),
                    value: v.to_string(),
                }),
            },
        }
    };
    let mut batches = Vec::new();
    let mut seqs = Vec::new();
    for r in read.iter() {
        batches.push(noted(r, &BATCH)?);
        seqs.push(noted(r, &SEQ)?);
    }
    let varies =
        |v: &[Option<u64>]| v.iter().all(Option::is_some) && v.windows(2).any(|w| w[0] != w[1]);
    let all = |v: &[Option<u64>]| v.iter().all(Option::is_some);
    let varied = match (varies(&batches), varies(&seqs)) {
        (true, true) => return Err(PlanError::BothVary),
        (true, false) => Varied::Batch,
        (false, true) => Varied::Seq,
        // One run, or runs at one value: the batch when noted.
        (false, false) if all(&batches) => Varied::Batch,
        (false, false) if all(&seqs) => Varied::Seq,
        (false, false) => {
            let missing = read
                .iter()
                .zip(batches.iter().zip(&seqs))
                .find(|(_, (b, s))| b.is_none() && s.is_none())
                .or_else(|| read.iter().zip(batches.iter().zip(&seqs)).next())
                .map(|(r, _)| r.input.path().display().to_string())
                .unwrap_or_default();
            return Err(PlanError::NoValue { path: missing });
        }
    };
    let values = if varied == Varied::Batch {
        batches
    } else {
        seqs
    };
    for (r, v) in read.iter_mut().zip(values) {
        r.value = v.unwrap_or(0);
    }
    Ok(varied)
}

/// The runs must come from one kind of GPU: a library's workspaces and
/// kernels' choices differ between them.
fn check_gpus(read: &[Run<'_>]) -> Result<(), PlanError> {
    let gpu = |r: &Run<'_>| {
        let header = r.events.header();
        let device = r.extracted.device;
        let info = match header.devices.as_slice() {
            [one] => Some(one),
            all => all.iter().find(|d| d.index == device),
        };
        info.map(|d| d.name.clone()).filter(|n| !n.is_empty())
    };
    let names: Vec<Option<String>> = read.iter().map(gpu).collect();
    let known: Vec<&String> = names.iter().flatten().collect();
    if let Some(other) = known.iter().find(|n| **n != known[0]) {
        return Err(PlanError::DifferentGpus {
            first: known[0].clone(),
            other: (*other).clone(),
        });
    }
    Ok(())
}

/// Where a recorded run first ran out of memory, in words: a failure the
/// program does not survive (a cuDNN workspace's is survived).
fn first_fatal_oom(e: &Extracted, symbols: &vramtrace_format::SymbolTable) -> Option<String> {
    let list = &e.list;
    let r = list.requests.iter().find(|r| {
        r.op == Op::FailedAlloc && !list.survivable.get(r.id as usize).copied().unwrap_or(false)
    })?;
    let a = &list.allocs[r.id as usize];
    Some(format!(
        "at {}",
        request_words(
            &e.state.sites().name(a.site, symbols),
            &e.state.phase_path(a.phase, symbols),
            a.requested
        )
    ))
}

/// A request in words: `train_step (train.py:41) in iter2/backward, asking
/// for 1.2 GiB`.
pub fn request_words(site: &str, phase: &str, bytes: u64) -> String {
    format!(
        "{}{}, asking for {}",
        site_label(site),
        if phase.is_empty() {
            String::new()
        } else {
            format!(" in {phase}")
        },
        units::bytes(bytes)
    )
}

/// A model error, with the runs' names and the site where they differ.
fn model_error(e: ModelError, read: &[Run<'_>], varied: Varied) -> Error {
    match e {
        ModelError::SameValue(value) => PlanError::SameValue {
            varied: varied.words(),
            value,
        }
        .into(),
        ModelError::NotLinedUp { run, line_up } => {
            let reference = read
                .iter()
                .max_by_key(|r| r.value)
                .expect("runs were given");
            let at = line_up.first_difference.map_or_else(
                || "the end".to_string(),
                |id| {
                    let e = &reference.extracted;
                    let a = &e.list.allocs[id.min(e.list.allocs.len().saturating_sub(1))];
                    let symbols = reference.events.symbols();
                    let phase = e.state.phase_path(a.phase, symbols);
                    format!(
                        "{}'s allocation {} ({}{})",
                        reference.input.path().display(),
                        id + 1,
                        site_label(&e.state.sites().name(a.site, symbols)),
                        if phase.is_empty() {
                            String::new()
                        } else {
                            format!(" in {phase}")
                        }
                    )
                },
            );
            PlanError::NotLinedUp {
                path: read[run].input.path().display().to_string(),
                reference: reference.input.path().display().to_string(),
                unmatched: line_up.unmatched.max(line_up.reference_unmatched),
                allocations: line_up.allocations,
                at,
            }
            .into()
        }
    }
}

/// What a plan is for: the simulation's device and cap.
struct Place {
    /// The simulation's options.
    sim: SimOptions,
    /// The cap planned for, when one is.
    cap: Option<u64>,
    /// The recorded limit, when it is that cap.
    limit: Option<Limit>,
    /// The reserve, with a device.
    reserve: Option<Reserve>,
    /// The device, named or recorded.
    device: Option<Device>,
}

/// Where the plan is for: a device less its reserve, a cap named, or the
/// cap the reference run recorded.
fn target_of(options: &PlanOptions, reference: &Run<'_>) -> Result<Place, Error> {
    if let Some(device) = &options.device {
        let nccl = sim::shows_nccl(reference.events.header(), reference.events.symbols());
        let limits = &reference.extracted.limits;
        let reserve = Reserve::stated_measured_or_estimated(
            options.reserve,
            limits.outside.map(|o| o.max_bytes),
            nccl,
        );
        if device.total_bytes <= reserve.bytes {
            return Err(Error::Simulate {
                path: reference.input.path().to_owned(),
                source: SimulateError::ReserveExceedsDevice {
                    reserve: reserve.bytes,
                    device: device.total_bytes,
                },
            });
        }
        let sim = SimOptions {
            capacity: Some(device.total_bytes - reserve.bytes),
            ..SimOptions::default()
        };
        return Ok(Place {
            sim,
            cap: None,
            limit: None,
            reserve: Some(reserve),
            device: Some(device.clone()),
        });
    }
    let (cap, limit) = match options.cap {
        Some(cap) => (cap, None),
        None => match reference.extracted.limits.cap() {
            Some(limit) => (limit.bytes, Some(limit)),
            // No cap recorded: the card the runs were recorded on.
            None => match recorded_card(reference) {
                Some(card) => {
                    let on_card = PlanOptions {
                        device: Some(card),
                        ..options.clone()
                    };
                    return target_of(&on_card, reference);
                }
                None => return Err(PlanError::NoCapacity.into()),
            },
        },
    };
    let sim = SimOptions {
        capacity: Some(cap),
        cap: Some(cap),
        ..SimOptions::default()
    };
    Ok(Place {
        sim,
        cap: Some(cap),
        limit,
        reserve: None,
        device: None,
    })
}

/// The card the run was recorded on, when its header gives its memory.
fn recorded_card(run: &Run<'_>) -> Option<Device> {
    let header = run.events.header();
    let total = sim::device_capacity(&header.devices, run.extracted.device)?;
    let name = match header.devices.as_slice() {
        [one] => Some(one),
        all => all.iter().find(|d| d.index == run.extracted.device),
    }
    .map(|d| d.name.clone())
    .filter(|n| !n.is_empty());
    Some(match name {
        Some(name) => Device {
            name: format!("the recorded {name} ({})", units::capacity(total)),
            total_bytes: total,
            source: None,
        },
        None => Device {
            name: format!("the recorded device ({})", units::capacity(total)),
            ..Device::of_size(total)
        },
    })
}

/// Each run, simulated from its own requests and from the model at its
/// value, without a limit: the model reproduces the run when the peaks
/// agree to the byte.
fn run_summaries(read: &[Run<'_>], model: &Model, config: &AllocatorConfig) -> Vec<RunSummary> {
    let reference = &read[model.reference].extracted.list;
    let unlimited = Target {
        config: config.clone(),
        options: SimOptions::default(),
        step: 1,
        without_workspaces: false,
    };
    let lists: Vec<(&sim::RequestList, u64)> =
        read.iter().map(|r| (&r.extracted.list, r.value)).collect();
    let simulated: Vec<(sim::SimResult, Evaluated)> = lists
        .par_iter()
        .map(|&(list, value)| {
            (
                sim::simulate(list, config, &SimOptions::default()),
                plan::evaluate(
                    model,
                    reference,
                    &unlimited,
                    value,
                    false,
                    Some(&list.recorded_allocations),
                ),
            )
        })
        .collect();
    read.iter()
        .zip(simulated)
        .enumerate()
        .map(|(k, (r, (own, modeled)))| {
            let list = &r.extracted.list;
            RunSummary {
                path: r.input.path().display().to_string(),
                value: r.value,
                events: list.events,
                allocations: list.allocs.len(),
                unmatched: model.line_ups[k].unmatched,
                steps: r.steps,
                peak_reserved_bytes: list.recorded_peak_reserved,
                peak_allocated_bytes: list.recorded_peak_allocated,
                simulated_peak_reserved_bytes: own.peak_reserved_bytes,
                simulated_peak_allocated_bytes: own.peak_allocated_bytes,
                model_peak_reserved_bytes: modeled.sim.peak_reserved_bytes,
                model_peak_allocated_bytes: modeled.sim.peak_allocated_bytes,
                reproduced: modeled.sim.peak_reserved_bytes == own.peak_reserved_bytes
                    && modeled.sim.peak_allocated_bytes == own.peak_allocated_bytes,
                reference: k == model.reference,
            }
        })
        .collect()
}

fn point(
    e: &Evaluated,
    model: &Model,
    capacity: u64,
    state: &crate::replay::ReplayState,
    symbols: &vramtrace_format::SymbolTable,
) -> Point {
    Point {
        value: e.value,
        spare_bytes: capacity.saturating_sub(e.sim.peak_reserved_bytes),
        fits: e.sim.ooms == 0,
        range: model.range(e.value),
        peak_reserved_bytes: e.sim.peak_reserved_bytes,
        peak_allocated_bytes: e.sim.peak_allocated_bytes,
        cached_at_peak_bytes: e.sim.cached_at_peak_bytes,
        fragmentation: e.sim.fragmentation,
        oom: e
            .sim
            .first_oom
            .as_ref()
            .map(|o| describe(o, state, symbols)),
        survived_failures: e.sim.survived_failures,
    }
}

/// Where the plan is for, in words: `under the 20.00 GiB cap`, `on H100 80GB`.
fn place_words(
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
fn workspace_words(varied: Varied, kept: &Found, found: &Found) -> String {
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
fn range_words(model: &Model, range: Range) -> String {
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
fn failure_words(p: &Point) -> String {
    match &p.oom {
        Some(o) => format!("at {}", request_words(&o.site, &o.phase, o.requested_bytes)),
        None => "nowhere".into(),
    }
}

fn answer_line(
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
                super::simulate::survived_words(p.survived_failures)
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

fn at_line(p: &Point, varied: Varied, model: &Model, place: &str) -> String {
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

/// The allocations of each law, set-up and steady state apart, with the
/// bytes each holds at `peak`'s peak of allocated memory.
fn law_rows(
    model: &Model,
    reference: &Extracted,
    symbols: &vramtrace_format::SymbolTable,
    peak: Option<&Evaluated>,
) -> Vec<LawRow> {
    let list = &reference.list;
    let setup_end = setup_allocations(reference, symbols);
    let mut rows: Vec<LawRow> = Vec::new();
    for id in 0..list.allocs.len() {
        let law = model.law(id).kind;
        let row = match rows.iter_mut().find(|r| r.law == law) {
            Some(r) => r,
            None => {
                rows.push(LawRow {
                    law,
                    words: law.words(),
                    setup_allocations: 0,
                    steady_allocations: 0,
                    bytes: 0,
                });
                rows.last_mut().expect("just pushed")
            }
        };
        if id < setup_end {
            row.setup_allocations += 1;
        } else {
            row.steady_allocations += 1;
        }
    }
    if let Some(e) = peak {
        for &(law, bytes) in &e.by_law {
            if let Some(r) = rows.iter_mut().find(|r| r.law == law) {
                r.bytes = bytes;
            }
        }
    }
    rows.sort_by_key(|r| r.law);
    rows
}

/// How many of the reference's allocations (alloc ids from 0) come before
/// the end of its first optimizer step: the set-up (model, optimizer state,
/// the first iteration's warm-up). Without a step, none.
fn setup_allocations(e: &Extracted, symbols: &vramtrace_format::SymbolTable) -> usize {
    let list = &e.list;
    // `phase_ends` lists where each phase instance ended.
    let Some(&(end, _)) = list.phase_ends.iter().find(|(_, id)| {
        e.state
            .phase(*id)
            .is_some_and(|p| is_step_phase(symbols.string_or_unknown(p.name)))
    }) else {
        return 0;
    };
    list.initial_ids.len()
        + list.requests[..end.min(list.requests.len())]
            .iter()
            .filter(|r| matches!(r.op, Op::Alloc | Op::FailedAlloc))
            .count()
}

/// The sites with allocations that follow no simple law, most first.
fn no_law_sites(
    model: &Model,
    read: &[Run<'_>],
    state: &crate::replay::ReplayState,
    symbols: &vramtrace_format::SymbolTable,
) -> Vec<NoLawSite> {
    let list = &read[model.reference].extracted.list;
    let mut by_site: rustc_hash::FxHashMap<crate::sites::SiteId, (usize, usize)> =
        Default::default();
    for id in 0..list.allocs.len() {
        if model.law(id).kind == LawKind::NoLaw {
            let e = by_site.entry(list.allocs[id].site).or_insert((0, id));
            e.0 += 1;
        }
    }
    let mut sites: Vec<NoLawSite> = by_site
        .into_iter()
        .map(|(site, (allocations, first))| {
            let mut sizes: Vec<(u64, u64)> = model
                .values
                .iter()
                .map(|&v| (v, model.law(first).at(v)))
                .collect();
            sizes.sort_unstable();
            NoLawSite {
                site: state.sites().name(site, symbols),
                allocations,
                sizes,
            }
        })
        .collect();
    sites.sort_by(|a, b| b.allocations.cmp(&a.allocations).then(a.site.cmp(&b.site)));
    sites.truncate(NO_LAW_SITES);
    sites
}

fn notes(model: &Model, read: &[Run<'_>], varied: Varied) -> Vec<String> {
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
    for (k, r) in read.iter().enumerate() {
        let l = &model.line_ups[k];
        if l.unmatched > 0 || l.reference_unmatched > 0 {
            notes.push(format!(
                "{}: {} of its allocations have no partner in the run replayed (left out), which has {} without one in it (made only above this run's value: left out at it and below; above it, those holding activations or temporaries grow in proportion, the rest keep their size)",
                r.input.path().display(),
                l.unmatched,
                l.reference_unmatched
            ));
        }
    }
    let reference = &read[model.reference].extracted.list;
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
