//! Analyses of a replayed trace.
//!
//! Data flows one way: the decoder hands events to the [replay
//! engine](crate::replay), and each event, with what it did to the state, to
//! every [`Analysis`] of the pass. Several analyses share one pass: a command
//! builds the ones it needs and calls [`run_pass`] once. Results are plain
//! `serde::Serialize` values, which the [printers](crate::print) turn into
//! text, JSON, charts and pages.
//!
//! An analysis can end its part of a pass early ([`Flow::Done`]) or fail it
//! ([`AnalysisError`]); one whose pass did not finish has no result, and
//! asking for it is an error ([`AnalysisError::NoResult`]), never a report of
//! zeros.

pub mod compare;
pub mod explorer;
pub mod fragmentation;
pub mod leaks;
pub mod pauses;
pub mod phase_totals;
pub mod phases;
pub mod site_totals;
pub mod summary;
pub mod timeline;
pub mod window;

use crate::progress::Meter;
use crate::replay::{Applied, ReplayState};
use std::ops::ControlFlow;
use vramtrace_format::EventSource;
use vramtrace_format::{Event, FormatError, SymbolTable, TraceDamage, Truncation};
use window::Window;

/// One replayed event, as analyses see it.
#[derive(Clone, Copy, Debug)]
pub struct Step<'a> {
    /// The event's index in the trace (from 0).
    pub index: u64,
    /// The event.
    pub event: &'a Event,
    /// What the event did to the state (already applied).
    pub applied: Applied,
    /// The trace's symbols, complete for every id this event uses.
    pub symbols: &'a SymbolTable,
}

/// What an analysis tells the pass after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Send the next event.
    Continue,
    /// This analysis needs no more events. The pass ends when every analysis
    /// of it is done (or its window ends); each is still [finished](Analysis::finish).
    Done,
}

/// Why an analysis failed, or has no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnalysisError {
    /// The result was asked for before the analysis's pass finished.
    #[error("the {0} analysis has no result: its pass did not run to its end")]
    NoResult(&'static str),
    /// The trace holds something the analysis cannot take.
    #[error("{0}")]
    Unsupported(String),
}

/// Why a pass stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// The events could not be read.
    #[error(transparent)]
    Read(#[from] FormatError),
    /// An analysis failed.
    #[error(transparent)]
    Analysis(#[from] AnalysisError),
}

/// An analysis fed by a replay pass.
pub trait Analysis: Send {
    /// The window opens: `state` is the state before its first event.
    fn begin(&mut self, state: &ReplayState, symbols: &SymbolTable) {
        let _ = (state, symbols);
    }

    /// Whether [`before`](Self::before) should be called: only analyses
    /// that need the state just before an event pay for the call.
    fn wants_before(&self) -> bool {
        false
    }

    /// An event inside the window, before the replay applies it (only when
    /// [`wants_before`](Self::wants_before) says so).
    fn before(&mut self, index: u64, event: &Event, state: &ReplayState) {
        let _ = (index, event, state);
    }

    /// An event inside the window, after the replay applied it. An error ends
    /// the pass.
    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError>;

    /// The window closed (or the trace ended, or every analysis was done):
    /// `state` is the final state.
    fn finish(&mut self, state: &ReplayState, symbols: &SymbolTable) -> Result<(), AnalysisError> {
        let _ = (state, symbols);
        Ok(())
    }
}

/// What a pass read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassInfo {
    /// Events replayed (those before the window included).
    pub events_replayed: u64,
    /// Events inside the window.
    pub events_in_window: u64,
    /// Time of the first event inside the window.
    pub first_time_ns: Option<u64>,
    /// Time of the last event inside the window.
    pub last_time_ns: u64,
    /// Where the trace was cut short, if it was.
    pub truncation: Option<Truncation>,
    /// Whether the trace has its footer (it was closed cleanly).
    pub complete: bool,
    /// Whether the pass stopped before the trace's end: at the window's end,
    /// or with every analysis done.
    pub stopped_early: bool,
    /// The thread whose phases were replayed.
    pub phase_thread: u32,
    /// Phase begins of the other threads (not replayed), by thread.
    pub other_thread_phases: Vec<(u32, u64)>,
    /// What was skipped as damaged, or found amiss (some of it).
    pub damage: Vec<TraceDamage>,
    /// How much damage there was, listed or not.
    pub damage_count: u64,
}

impl PassInfo {
    /// The time between the window's first and last events.
    pub fn duration_ns(&self) -> u64 {
        self.last_time_ns
            .saturating_sub(self.first_time_ns.unwrap_or(self.last_time_ns))
    }
}

/// Replays a trace from its start (loading its initial state), feeding the
/// events inside `window` to every analysis, and stops after the window, or
/// once every analysis is [done](Flow::Done). `meter` hears the source's
/// position after each batch.
///
/// Events are decoded (on all cores, for a trace file) while the batch before is
/// replayed: see [`EventSource::try_for_each_batch`].
pub fn run_pass<S: EventSource>(
    reader: &mut S,
    state: &mut ReplayState,
    analyses: &mut [&mut dyn Analysis],
    window: &Window,
    meter: &dyn Meter,
) -> Result<PassInfo, PassError> {
    if let Some(initial) = reader.initial_state() {
        state.load_initial(initial, reader.symbols());
    }
    let mut info = PassInfo::default();
    let mut started = false;
    let mut index = 0u64;
    let any_before = analyses.iter().any(|a| a.wants_before());
    let bounds = window.bounds();
    // Which analyses still want events; a pass without analyses replays its window.
    let mut done = vec![false; analyses.len()];
    let mut busy = analyses.len();
    let mut failure = None;
    let flow = reader.try_for_each_batch(|events, symbols, position| {
        for event in events {
            if bounds.is_after(index, event.time_ns) {
                return ControlFlow::Break(());
            }
            let inside = bounds.started(index, event.time_ns);
            if inside && !started {
                started = true;
                info.first_time_ns = Some(event.time_ns);
                for a in analyses.iter_mut() {
                    a.begin(state, symbols);
                }
            }
            if inside && any_before {
                for (a, _) in analyses.iter_mut().zip(&done).filter(|(_, d)| !**d) {
                    a.before(index, event, state);
                }
            }
            let applied = state.apply(index, event, symbols);
            index += 1;
            if inside {
                info.events_in_window += 1;
                info.last_time_ns = event.time_ns;
                let step = Step {
                    index: index - 1,
                    event,
                    applied,
                    symbols,
                };
                for (a, done) in analyses.iter_mut().zip(done.iter_mut()) {
                    if *done {
                        continue;
                    }
                    match a.event(&step, state) {
                        Ok(Flow::Continue) => {}
                        Ok(Flow::Done) => {
                            *done = true;
                            busy -= 1;
                        }
                        Err(e) => {
                            failure = Some(e);
                            return ControlFlow::Break(());
                        }
                    }
                }
                if busy == 0 && !done.is_empty() {
                    return ControlFlow::Break(());
                }
            }
        }
        meter.update(position);
        ControlFlow::Continue(())
    })?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    info.stopped_early = flow.is_break();
    let symbols = reader.symbols();
    if !started {
        for a in analyses.iter_mut() {
            a.begin(state, symbols);
        }
    }
    for a in analyses.iter_mut() {
        a.finish(state, symbols)?;
    }
    info.events_replayed = index;
    info.truncation = reader.truncation().copied();
    info.complete = reader.is_complete();
    info.damage = reader.damage().to_vec();
    info.damage_count = reader.damage_count();
    info.phase_thread = state.phase_thread();
    info.other_thread_phases = state
        .other_thread_phases()
        .iter()
        .map(|(&t, &n)| (t, n))
        .collect();
    Ok(info)
}

#[cfg(test)]
mod tests;
