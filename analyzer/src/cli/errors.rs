//! Errors on one line: clap's usage errors, and the library's errors with
//! their causes, told in the flags' terms where they concern a flag.

use std::path::Path;
use vramtrace::Error;
use vramtrace::analysis::compare::CompareError;
use vramtrace::analysis::window::WindowError;
use vramtrace::input::ExpansionExceeded;
use vramtrace::print::ChartError;
use vramtrace::simulate::SimulateError;
use vramtrace::simulate::plan::PlanError;
use vramtrace::sites::PatternError;
use vramtrace::units;

/// A usage error on one line. clap's run over several (tips, usage): the
/// first says what is wrong, and --help the rest; but a missing argument's
/// name is on the lines after it.
pub(super) fn usage_error(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("invalid usage");
    let mut line = first.strip_prefix("error: ").unwrap_or(first).to_string();
    if e.kind() == clap::error::ErrorKind::MissingRequiredArgument {
        let missing: Vec<&str> = lines
            .take_while(|l| !l.trim().is_empty())
            .map(str::trim)
            .collect();
        line = format!("{} {}", line.trim_end(), missing.join(", "));
    }
    // A value outside a fixed set: name the set ("[possible values: a, b]").
    if e.kind() == clap::error::ErrorKind::InvalidValue
        && let Some(possible) = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("[possible values: "))
    {
        line = format!(
            "{}; one of: {}",
            line.trim_end(),
            possible.trim_end_matches(']')
        );
    }
    line
}

/// An error and its causes on one line: `cannot open x: No such file`.
/// A cause whose text the message already holds is not repeated. Errors of
/// the library that concern a flag are told in the flag's terms.
pub(super) fn one_line(e: &anyhow::Error) -> String {
    if let Some(text) = in_flag_terms(e) {
        return text.replace('\n', " ");
    }
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    let expansion = e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .and_then(ExpansionExceeded::in_io)
            .is_some()
    });
    if expansion {
        line.push_str(" (--max-expansion RATIO, or none, raises the limit)");
    }
    line.replace('\n', " ")
}

/// A library error about what a flag asked for, told with the flag's name
/// (the library's own messages name no flags).
pub(super) fn in_flag_terms(e: &anyhow::Error) -> Option<String> {
    let in_input = |path: &Path, text: String| format!("{}: {text}", path.display());
    if let Some(e) = e.downcast_ref::<Error>() {
        return match e {
            Error::Window { path, source } => {
                window_in_flag_terms(source).map(|t| in_input(path, t))
            }
            Error::Compare(e) => compare_in_flag_terms(e),
            Error::Plan(e) => plan_in_flag_terms(e),
            Error::Simulate {
                path,
                source: SimulateError::NoSettings(_),
            } => Some(in_input(
                path,
                "no usable recorded settings; give --alloc-conf".into(),
            )),
            _ => None,
        };
    }
    if let Some(e) = e.downcast_ref::<WindowError>() {
        return window_in_flag_terms(e);
    }
    if let Some(e) = e.downcast_ref::<PatternError>() {
        return Some(format!(
            "bad --skip-frames pattern '{}': {}",
            e.pattern, e.source
        ));
    }
    if let Some(e) = e.downcast_ref::<CompareError>() {
        return compare_in_flag_terms(e);
    }
    if let Some(e) = e.downcast_ref::<ChartError>() {
        return chart_in_flag_terms(e);
    }
    None
}

pub(super) fn plan_in_flag_terms(e: &PlanError) -> Option<String> {
    match e {
        PlanError::NoValue { path } => Some(format!(
            "{path} does not say its batch size or sequence length (no `batch` or `seq` annotation): give each trace's value with --batch 4,8 or --seq 512,1024, in the traces' order"
        )),
        PlanError::NoCapacity => Some(
            "nothing to plan for: the runs record no cap on the allocator; give --gpu, --capacity or --cap".into(),
        ),
        PlanError::SeveralDevices { path, seen } => Some(format!(
            "{path} holds devices {seen}: pick one with --device"
        )),
        _ => None,
    }
}

pub(super) fn window_in_flag_terms(e: &WindowError) -> Option<String> {
    Some(match e {
        WindowError::EmptyBound => "an empty --from/--to bound".into(),
        WindowError::StartAfterEnd { from_ns, to_ns } => format!(
            "--from ({}) is after --to ({})",
            units::duration_ns(*from_ns),
            units::duration_ns(*to_ns)
        ),
        WindowError::NoSuchPhase(name) => format!("--from: no phase named '{name}' in the trace"),
        WindowError::PhaseNeverEnds(name) => {
            format!("--to: phase '{name}' never ends in the trace")
        }
        WindowError::PhasesOutOfOrder => "--from's phase begins after --to's phase ends".into(),
        _ => return None,
    })
}

pub(super) fn compare_in_flag_terms(e: &CompareError) -> Option<String> {
    match e {
        CompareError::NoIterations(name) => Some(format!(
            "--per-iteration needs a phase repeated three times or more in both runs; {name} has none"
        )),
        _ => None,
    }
}

pub(super) fn chart_in_flag_terms(e: &ChartError) -> Option<String> {
    match e {
        ChartError::NoRepetitions(name) => Some(format!(
            "--align repetition needs a phase repeated three times or more in both runs; {name} has none"
        )),
        _ => None,
    }
}
