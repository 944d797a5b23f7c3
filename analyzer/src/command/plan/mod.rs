//! `plan`: the largest batch size (or sequence length) that fits, from runs
//! of one program recorded at different values (see
//! [`crate::simulate::plan`] and `docs/plan.md`).

mod kv;
mod read;

pub use kv::{CapturePlan, KvPlace, KvPlanOptions, KvPlanResult, kv_cache};

pub use crate::simulate::plan::checks::request_words;
pub use crate::simulate::plan::figures::loose_allocations;
pub use crate::simulate::plan::result::{
    Answer, AtValue, Basis, FitsUpTo, Framing, LawRow, NoLawSite, Note, Place, PlanResult,
    PlanTiming, Point, PolicyAnswer, RunSummary,
};

use read::{Run, read_run};

use super::simulate::Device;
use crate::Error;
use crate::analysis::categories::CategoryTable;
use crate::analysis::limits::Limit;
use crate::input::Input;
use crate::progress::Progress;
use crate::simulate::plan::PlanError;
use crate::simulate::plan::checks::{self, RunFacts};
use crate::simulate::plan::figures::{law_rows, no_law_sites, notes, place_of, point};
use crate::simulate::plan::{self, Evaluated, Found, Keys, Model, RunInput, Target, Varied};
use crate::simulate::requests::RequestList;
use crate::simulate::{self as sim, Reserve, Scenario, SimOptions, SimulateError, scenarios};
use crate::units;
use rayon::prelude::*;
use vramtrace_allocator::AllocatorConfig;
use vramtrace_format::EventSource;

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

/// Plans from `inputs`, runs of one program at different values of the
/// batch size or the sequence length.
pub fn plan(
    inputs: &[&Input],
    options: &PlanOptions,
    progress: &dyn Progress,
) -> Result<PlanResult, Error> {
    let started = std::time::Instant::now();
    let (read, names, varied) = read_runs(inputs, options, progress)?;
    let read_s = started.elapsed().as_secs_f64();
    let fitted = std::time::Instant::now();
    checks::check_runs(&facts(&read, &names))?;
    let model = fit_model(&read, &facts(&read, &names), varied)?;
    let fit_s = fitted.elapsed().as_secs_f64();
    let reference = &read[model.reference];
    let list = &reference.extracted.list;
    let symbols = reference.events.symbols();
    let state = &reference.extracted.state;

    let policies = policies_of(options, reference)?;
    let Aim {
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
    let searches = search_policies(&policies, &model, list, &target);
    let with_workspaces = workspaces.then(|| {
        let kept = Target {
            without_workspaces: false,
            ..target.clone()
        };
        plan::largest_fitting(&model, list, &kept)
    });
    let runs = run_summaries(&read, &model, &target.config);
    let found = searches[0];
    // The largest value that fits and the next one, simulated in full.
    let (fits_at, next_at) = match (found.largest, found.unbounded) {
        (Some(v), _) => (Some(v), (!found.at_ceiling).then(|| v + options.step)),
        (None, true) => (Some(model.reference_value()), None),
        (None, false) => (None, Some(options.step)),
    };
    let mut values: Vec<u64> = model.values.clone();
    values.extend(fits_at);
    values.extend(next_at);
    values.extend(options.at);
    let evaluated = evaluate_values(&read, &model, &target, values);
    let simulate_s = simulating.elapsed().as_secs_f64();
    let capacity = target.options.capacity.unwrap_or(0);
    let point_of = |e: &Evaluated| point(e, &model, capacity, state, symbols);
    let points: Vec<Point> = evaluated.iter().map(point_of).collect();
    let find = |v: Option<u64>| v.and_then(|v| points.iter().find(|p| p.value == v).cloned());
    let fits = find(fits_at);
    let next = find(next_at);
    let basis = if model.is_assumed() {
        Basis::OneRun
    } else {
        Basis::Runs
    };
    let framing = Framing {
        varied,
        basis,
        recorded: (
            model.values.iter().min().copied().unwrap_or(0),
            model.values.iter().max().copied().unwrap_or(0),
        ),
        place: place_of(capacity, cap, limit, place_device.as_ref()),
    };
    let answer = Answer {
        largest: found.largest,
        unbounded: found.unbounded,
        at_ceiling: found.at_ceiling,
        range: found.largest.map(|v| model.range(v)),
        fits,
        next,
        with_workspaces,
        simulations: found.simulations + with_workspaces.map_or(0, |f| f.simulations),
        framing: framing.clone(),
    };
    let peak_of = |v: u64| evaluated.iter().find(|e| e.value == v);
    let at_peak = fits_at
        .and_then(peak_of)
        .or_else(|| peak_of(model.reference_value()));
    let laws = law_rows(&model, &reference.extracted, symbols, at_peak);
    let no_law = no_law_sites(&model, list, state, symbols);
    let at = options.at.and_then(|v| {
        let e = peak_of(v)?;
        Some(AtValue {
            categories: CategoryTable::of(&e.categories),
            laws: e.by_law.clone(),
            point: point_of(e),
            framing: framing.clone(),
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
    let mut notes = plan_notes(&read, &model, varied, &laws, found.largest, options.step);
    if options.reserve.is_some() && reserve.is_none() {
        notes.push(Note::ReserveOffCap);
    }
    Ok(PlanResult {
        varied,
        basis,
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

/// Reads every run, after checking the options against them: each run's
/// value set (from the options, else the trace's notes), what they vary,
/// and their names; the runs' GPUs checked alike.
fn read_runs<'i>(
    inputs: &[&'i Input],
    options: &PlanOptions,
    progress: &dyn Progress,
) -> Result<(Vec<Run<'i>>, Vec<String>, Varied), Error> {
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
    let names: Vec<String> = read
        .iter()
        .map(|r| r.input.path().display().to_string())
        .collect();
    let (varied, values) = checks::values_of(&facts(&read, &names), options.values.as_ref())?;
    for (r, v) in read.iter_mut().zip(values) {
        r.value = v;
    }
    checks::check_gpus(&facts(&read, &names))?;
    Ok((read, names, varied))
}

/// The policies planned for: the settings named, the first planned for and
/// each other one's answer given beside it; else the reference run's own.
fn policies_of(options: &PlanOptions, reference: &Run<'_>) -> Result<Vec<Scenario>, Error> {
    let recorded = reference
        .extracted
        .recorded_config
        .as_ref()
        .map(|(c, _)| c.clone())
        .map_err(|e| e.clone());
    scenarios(&recorded, options.settings.clone(), false).map_err(|source| Error::Simulate {
        path: reference.input.path().to_owned(),
        source,
    })
}

/// The largest value that fits under each policy, searched in parallel.
fn search_policies(
    policies: &[Scenario],
    model: &Model,
    list: &RequestList,
    target: &Target,
) -> Vec<Found> {
    policies
        .par_iter()
        .map(|p| {
            let t = Target {
                config: p.config.clone(),
                ..target.clone()
            };
            plan::largest_fitting(model, list, &t)
        })
        .collect()
}

/// Simulates each of `values` in full, in parallel, by value; a recorded
/// value lays its segments out as its run did.
fn evaluate_values(
    read: &[Run<'_>],
    model: &Model,
    target: &Target,
    mut values: Vec<u64>,
) -> Vec<Evaluated> {
    values.sort_unstable();
    values.dedup();
    let list = &read[model.reference].extracted.list;
    let addresses: Vec<Option<&[(u64, u64)]>> = values
        .iter()
        .map(|&v| {
            read.iter()
                .find(|r| r.value == v)
                .map(|r| r.extracted.list.recorded_allocations.as_slice())
        })
        .collect();
    values
        .par_iter()
        .zip(&addresses)
        .map(|(&v, &a)| plan::evaluate(model, list, target, v, false, a))
        .collect()
}

/// The plan's notes on the runs, and which run to record next: sizes
/// that follow no law are read off the runs, and past the largest run
/// they are a line's guess, so when they are many, a run at twice the
/// largest; with two runs, which cannot show a size that stops growing
/// past them, the third run that would, inside what fits.
fn plan_notes(
    read: &[Run<'_>],
    model: &Model,
    varied: Varied,
    laws: &[LawRow],
    largest: Option<u64>,
    step: u64,
) -> Vec<Note> {
    let paths: Vec<&std::path::Path> = read.iter().map(|r| r.input.path()).collect();
    let list = &read[model.reference].extracted.list;
    let mut notes = notes(model, &paths, list, varied);
    let (loose, total) = loose_allocations(laws);
    let top = read.iter().map(|r| r.value).max().unwrap_or(0);
    if !model.is_assumed() && loose * 4 > total {
        notes.push(Note::Loose {
            varied,
            loose,
            total,
            next: top.saturating_mul(2),
        });
    } else if let (2, Some(largest)) = (model.values.len(), largest) {
        let step = step.max(1);
        let third = largest.saturating_mul(9) / 10 / step * step;
        if third > top {
            notes.push(Note::ThirdRun {
                varied,
                value: third,
            });
        }
    }
    notes
}

/// The runs as the planner's checks see them, each named by `names`.
fn facts<'b>(read: &'b [Run<'_>], names: &'b [String]) -> Vec<RunFacts<'b>> {
    read.iter().zip(names).map(|(r, n)| r.facts(n)).collect()
}

/// The model of the runs: laws fitted through two or more, an assumption
/// from one.
fn fit_model(read: &[Run<'_>], facts: &[RunFacts<'_>], varied: Varied) -> Result<Model, Error> {
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
    Model::fit(&runs, varied).map_err(|e| checks::model_error(e, facts, varied).into())
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
            planned: Ok(Box::new(p.answer)),
        }),
        // A baseline of the same workload, runs that do not say their
        // values, or a device of unknown size: no line.
        Err(Error::Plan(
            PlanError::NoValue { .. } | PlanError::SameValue { .. } | PlanError::NoCapacity,
        )) => None,
        Err(e) => Some(FitsUpTo {
            varied: None,
            largest: None,
            planned: Err(e.to_string()),
        }),
    }
}

/// What a plan is for: the simulation's device and cap.
struct Aim {
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
fn target_of(options: &PlanOptions, reference: &Run<'_>) -> Result<Aim, Error> {
    if let Some(device) = &options.device {
        let nccl = sim::shows_nccl(reference.events.header(), reference.events.symbols());
        let limits = &reference.extracted.limits;
        // (A measured reserve past the device gives way to the estimate, as
        // in `simulate`.)
        let (reserve, _) = Reserve::for_device(
            options.reserve,
            limits.outside.map(|o| o.max_bytes),
            nccl,
            device.total_bytes,
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
        return Ok(Aim {
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
    Ok(Aim {
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
            name: format!(
                "the card the runs ran on ({name}, {})",
                units::capacity(total)
            ),
            total_bytes: total,
            source: None,
        },
        None => Device {
            name: format!("the card the runs ran on ({})", units::capacity(total)),
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
