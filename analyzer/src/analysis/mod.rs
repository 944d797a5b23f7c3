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

pub mod categories;
pub mod compare;
pub mod explorer;
pub mod flame;
pub mod fragmentation;
pub mod leaks;
pub mod limits;
mod open_instances;
pub mod pauses;
pub mod peaks;
pub mod phase_totals;
pub mod phases;
pub mod pools;
pub mod ranks;
pub mod site_totals;
pub mod summary;
pub mod timeline;
pub mod warning;
pub mod waterfall;
pub mod window;

use crate::bounds::MAX_DEVICES;
use crate::progress::Meter;
use crate::replay::plausible::{ImpossibleValues, impossible, plausible_initial};
use crate::replay::{Applied, ReplayState};
use peaks::Peaks;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeSet;
use std::ops::ControlFlow;
use vramtrace_format::EventSource;
use vramtrace_format::{Event, FormatError, InitialState, SymbolTable, TraceDamage, Truncation};
use window::Window;

/// One replayed event, as analyses see it.
#[derive(Clone, Copy, Debug)]
pub struct Step<'a> {
    /// The event's index in the trace (from 0).
    pub index: u64,
    /// The event.
    pub event: &'a Event,
    /// What the event did to the state (already applied). A reference: the
    /// block an event changed is 64 bytes, and copying it into every step
    /// cost about 18 instructions an event (issue #47).
    pub applied: &'a Applied,
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
    /// Events (and starting segments) left out for values no allocator
    /// records.
    pub impossible: ImpossibleValues,
    /// The events the recorder dropped, as the trace's markers say.
    pub dropped: crate::replay::DroppedReport,
    /// Devices whose events were left out, past the first
    /// [`MAX_DEVICES`] (more than any machine has: the ids are bad).
    pub skipped_devices: u64,
    /// The events of those devices.
    pub skipped_events: u64,
}

impl PassInfo {
    /// The time between the window's first and last events.
    pub fn duration_ns(&self) -> u64 {
        self.last_time_ns
            .saturating_sub(self.first_time_ns.unwrap_or(self.last_time_ns))
    }
}

/// The analyses one device gets in a pass, handed to the pass as one slice.
///
/// Implemented for tuples of analyses (a command's set, typed, so that each
/// report is taken from its own analysis after the pass), for `Option` of an
/// analysis (one a command runs only sometimes) and for a slice of them.
pub trait AnalysisSet: Send {
    /// Calls `f` with every analysis of the set, always in the same order.
    fn with<R>(&mut self, f: impl FnOnce(&mut [&mut dyn Analysis]) -> R) -> R;

    /// Calls [`Analysis::before`] on each analysis whose flag in `done`
    /// (one per member, in the set's order) is not set.
    // Tuples call their members directly, so that the compiler may inline
    // them into the pass's loop: through `dyn Analysis`, the indirect call,
    // the loop over the flags and the analysis's prologue cost the summary
    // about 35 instructions an event (callgrind, issue #47).
    #[inline]
    fn before_each(&mut self, done: &[bool], index: u64, event: &Event, state: &ReplayState) {
        self.with(|analyses| {
            for (a, _) in analyses.iter_mut().zip(done).filter(|(_, d)| !**d) {
                a.before(index, event, state);
            }
        });
    }

    /// Calls [`Analysis::event`] on each analysis whose flag in `done` is
    /// not set, setting it (and taking one off `busy`) when the analysis
    /// says it is [done](Flow::Done). The first error ends the round.
    #[inline]
    fn event_each(
        &mut self,
        done: &mut [bool],
        busy: &mut usize,
        step: &Step<'_>,
        state: &ReplayState,
    ) -> Result<(), AnalysisError> {
        self.with(|analyses| {
            for (a, done) in analyses.iter_mut().zip(done.iter_mut()) {
                if !*done && a.event(step, state)? == Flow::Done {
                    *done = true;
                    *busy -= 1;
                }
            }
            Ok(())
        })
    }
}

impl AnalysisSet for &mut [&mut dyn Analysis] {
    fn with<R>(&mut self, f: impl FnOnce(&mut [&mut dyn Analysis]) -> R) -> R {
        f(self)
    }
}

/// No analysis: a pass for the replay state and the peaks alone.
impl AnalysisSet for () {
    fn with<R>(&mut self, f: impl FnOnce(&mut [&mut dyn Analysis]) -> R) -> R {
        f(&mut [])
    }
}

/// The members of an [`AnalysisSet`], called directly: the body of its
/// `impl`, from each member's place (a tuple's index or a struct's field)
/// and its index in the set's order. For a set of a command's own (a
/// struct of named analyses), so that its members are inlined into the
/// pass's loop as a tuple's are.
macro_rules! analysis_set_members {
    ($($member:tt $index:tt),+) => {
        fn with<R>(
            &mut self,
            f: impl FnOnce(&mut [&mut dyn $crate::analysis::Analysis]) -> R,
        ) -> R {
            f(&mut [$(&mut self.$member),+])
        }

        #[inline(always)]
        fn before_each(
            &mut self,
            done: &[bool],
            index: u64,
            event: &vramtrace_format::Event,
            state: &$crate::replay::ReplayState,
        ) {
            $(
                if !done[$index] {
                    $crate::analysis::Analysis::before(&mut self.$member, index, event, state);
                }
            )+
        }

        #[inline(always)]
        fn event_each(
            &mut self,
            done: &mut [bool],
            busy: &mut usize,
            step: &$crate::analysis::Step<'_>,
            state: &$crate::replay::ReplayState,
        ) -> Result<(), $crate::analysis::AnalysisError> {
            $(
                if !done[$index]
                    && $crate::analysis::Analysis::event(&mut self.$member, step, state)?
                        == $crate::analysis::Flow::Done
                {
                    done[$index] = true;
                    *busy -= 1;
                }
            )+
            Ok(())
        }
    };
}
pub(crate) use analysis_set_members;

macro_rules! analysis_tuple {
    ($($name:ident $index:tt),+) => {
        impl<$($name: Analysis),+> AnalysisSet for ($($name,)+) {
            analysis_set_members!($($index $index),+);
        }
    };
}

analysis_tuple!(A 0);
analysis_tuple!(A 0, B 1);
analysis_tuple!(A 0, B 1, C 2);
analysis_tuple!(A 0, B 1, C 2, D 3);
analysis_tuple!(A 0, B 1, C 2, D 3, E 4);
analysis_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
analysis_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
analysis_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
analysis_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);

/// An analysis a command runs only sometimes: `None` is done at once.
impl<A: Analysis> Analysis for Option<A> {
    fn begin(&mut self, state: &ReplayState, symbols: &SymbolTable) {
        if let Some(a) = self {
            a.begin(state, symbols);
        }
    }

    fn wants_before(&self) -> bool {
        self.as_ref().is_some_and(|a| a.wants_before())
    }

    fn before(&mut self, index: u64, event: &Event, state: &ReplayState) {
        if let Some(a) = self {
            a.before(index, event, state);
        }
    }

    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError> {
        match self {
            Some(a) => a.event(step, state),
            None => Ok(Flow::Done),
        }
    }

    fn finish(&mut self, state: &ReplayState, symbols: &SymbolTable) -> Result<(), AnalysisError> {
        match self {
            Some(a) => a.finish(state, symbols),
            None => Ok(()),
        }
    }
}

/// Which devices a pass replays, and whether apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Devices {
    /// Each device on its own: its own replay state and analyses, made on
    /// the device's first sight (a device with segments in the trace's
    /// initial state is seen at the start).
    #[default]
    Apart,
    /// Only this device; the others' events are skipped.
    Only(u32),
    /// Every device summed into one state, as a single-device tool would:
    /// for tests and for callers that bring their own state.
    Together,
}

/// One device's part of a pass: its replay state, its analyses, and its peaks.
pub struct DevicePass<A> {
    /// The device index (with [`Devices::Together`], the first device seen, or 0).
    pub device: u32,
    /// The device's replay state after the pass.
    pub state: ReplayState,
    /// The device's analyses, finished.
    pub analyses: A,
    /// The device's allocated and reserved peaks, finished.
    pub peaks: Peaks,
    done: Vec<bool>,
    busy: usize,
    wants_before: bool,
}

impl<A: AnalysisSet> DevicePass<A> {
    fn new(device: u32, state: ReplayState, mut analyses: A) -> Self {
        let (count, wants_before) =
            analyses.with(|a| (a.len(), a.iter().any(|a| a.wants_before())));
        DevicePass {
            device,
            state,
            analyses,
            peaks: Peaks::new(),
            done: vec![false; count],
            busy: count,
            wants_before,
        }
    }

    fn begin(&mut self, symbols: &SymbolTable) {
        let state = &self.state;
        self.peaks.begin(state, symbols);
        self.analyses.with(|analyses| {
            for a in analyses.iter_mut() {
                a.begin(state, symbols);
            }
        });
    }

    /// Replays one event on this device, feeding it to the analyses when
    /// `inside` the window.
    // Always inlined into the pass's loop: called once an event, and out of
    // line its prologue, the copy of its result and the check of that cost
    // about 30 instructions an event (callgrind, issue #47).
    #[inline(always)]
    fn replay(
        &mut self,
        index: u64,
        event: &Event,
        symbols: &SymbolTable,
        inside: bool,
    ) -> Result<(), AnalysisError> {
        let DevicePass {
            state,
            analyses,
            peaks,
            done,
            busy,
            wants_before,
            ..
        } = self;
        if inside && *wants_before {
            analyses.before_each(done, index, event, state);
        }
        let applied = state.apply(index, event, symbols);
        if !inside {
            return Ok(());
        }
        let step = Step {
            index,
            event,
            applied: &applied,
            symbols,
        };
        peaks.observe(&step, state);
        analyses.event_each(done, busy, &step, state)
    }

    fn finish(&mut self, symbols: &SymbolTable) -> Result<(), AnalysisError> {
        // What is still open is settled as what it is at the end; the
        // analyses see those changes in `finish`.
        self.state.settle_at_end();
        let state = &self.state;
        self.peaks.finish(state, symbols)?;
        self.analyses.with(|analyses| {
            analyses
                .iter_mut()
                .try_for_each(|a| a.finish(state, symbols))
        })
    }
}

/// What a pass over every device read, and each device's part.
pub struct DevicePasses<A> {
    /// Each device replayed, by device index.
    pub devices: Vec<DevicePass<A>>,
    /// The devices seen in the events, those skipped included (the first
    /// [`MAX_DEVICES`]).
    pub seen: Vec<u32>,
    /// What the pass read.
    pub info: PassInfo,
}

/// The part of an initial state on one device.
pub(crate) fn initial_on(initial: &InitialState, device: u32) -> InitialState {
    InitialState {
        segments: initial
            .segments
            .iter()
            .filter(|s| s.device == device)
            .cloned()
            .collect(),
    }
}

/// Replays a trace from its start (loading its initial state), feeding the
/// events inside `window` to every analysis, and stops after the window, or
/// once every analysis is [done](Flow::Done). `meter` hears the source's
/// position after each batch.
///
/// Events are decoded (on all cores, for a trace file) while the batch before is
/// replayed: see [`EventSource::try_for_each_batch`].
///
/// This pass sums every device into `state` ([`Devices::Together`]); see
/// [`run_device_pass`] for one that keeps them apart.
pub fn run_pass<S: EventSource>(
    reader: &mut S,
    state: &mut ReplayState,
    mut analyses: &mut [&mut dyn Analysis],
    window: &Window,
    meter: &dyn Meter,
) -> Result<PassInfo, PassError> {
    let blank = std::mem::take(state);
    let mut passes = run_device_pass(
        reader,
        blank,
        Devices::Together,
        // Called once: the one slice is handed over, an empty one left.
        |_| std::mem::take(&mut analyses),
        window,
        meter,
    )?;
    if let Some(pass) = passes.devices.pop() {
        *state = pass.state;
    }
    Ok(passes.info)
}

/// How many events ahead a pass asks for the block an event will touch
/// ([`ReplayState::prefetch`]): replaying 8 events takes longer than a load
/// from memory, and 8 blocks' lines are few enough to stay in the L1 cache
/// until their events come.
const PREFETCH_AHEAD: usize = 8;

/// Replays a trace from its start, each device (or the one of [`Devices::Only`])
/// into its own replay state, made from `blank` with the phases so far
/// ([`ReplayState::fork_phases`]) on the device's first event, with its own analyses from `make`. Phases
/// and annotations belong to every device. Events inside `window` go to
/// the analyses of their device; the pass stops after the window, or, with
/// one device known in advance ([`Devices::Only`], [`Devices::Together`]),
/// once its every analysis is [done](Flow::Done).
///
/// A trace with no device event at all still has one device, 0, so that
/// every command has a result to show.
pub fn run_device_pass<S: EventSource, A: AnalysisSet>(
    reader: &mut S,
    blank: ReplayState,
    devices: Devices,
    mut make: impl FnMut(u32) -> A + Send,
    window: &Window,
    meter: &dyn Meter,
) -> Result<DevicePasses<A>, PassError> {
    // The process's phases until a device is seen; a device seen later forks
    // the first device's (the same phases, kept once).
    let mut process = blank;
    let mut passes: Vec<DevicePass<A>> = Vec::new();
    let mut seen = BTreeSet::new();
    // Where each device's pass is in `passes`: one probe an event, however
    // many devices.
    let mut by_device: FxHashMap<u32, usize> = FxHashMap::default();
    let mut skipped: FxHashSet<u32> = FxHashSet::default();
    let mut info = PassInfo::default();
    let initial = reader.initial_state().map(|initial| {
        let (kept, left_out) = plausible_initial(initial);
        info.impossible.initial_segments = left_out;
        kept
    });
    match (devices, initial.as_deref()) {
        (Devices::Together, initial) => {
            if let Some(initial) = initial {
                process.load_initial(initial, reader.symbols());
            }
            let device = initial
                .and_then(|i| i.segments.first())
                .map_or(0, |s| s.device);
            passes.push(DevicePass::new(device, process.clone(), make(device)));
        }
        (devices, Some(initial)) => {
            let mut on: Vec<u32> = initial.segments.iter().map(|s| s.device).collect();
            on.sort_unstable();
            on.dedup();
            if devices == Devices::Apart && on.len() > MAX_DEVICES as usize {
                for &device in &on[MAX_DEVICES as usize..] {
                    skipped.insert(device);
                }
                info.skipped_devices = skipped.len() as u64;
                on.truncate(MAX_DEVICES as usize);
            }
            seen.extend(on.iter().copied());
            for device in on {
                if devices == Devices::Apart || devices == Devices::Only(device) {
                    let mut state = process.clone();
                    state.load_initial(&initial_on(initial, device), reader.symbols());
                    by_device.insert(device, passes.len());
                    passes.push(DevicePass::new(device, state, make(device)));
                }
            }
        }
        (_, None) => {}
    }
    let together = devices == Devices::Together;
    let stops_when_done = devices != Devices::Apart;
    let mut started = false;
    let mut index = 0u64;
    let bounds = window.bounds();
    // The whole trace (nearly every pass) needs no comparison an event.
    let (has_start, has_end) = (bounds.has_start(), bounds.has_end());
    let mut last = 0usize;
    let mut failure = None;
    // Whether a piece holds an impossible event is asked on the decoding
    // side, beside the replay of the batch before: the replay, which bounds
    // the pass, tests the events only of a piece that does (issue #47).
    let suspect = |events: &[Event]| events.iter().any(|e| impossible(e).is_some());
    let flow = reader.try_for_each_checked_batch(suspect, |events, suspect, symbols, at| {
        for (k, event) in events.iter().enumerate() {
            // The block this many events ahead is asked for now, from the
            // device replayed last: its slot's cache line comes while the
            // events before it are replayed (issue #47).
            if let (Some(ahead), Some(pass)) = (events.get(k + PREFETCH_AHEAD), passes.get(last)) {
                pass.state.prefetch(ahead);
            }
            if has_end && bounds.is_after(index, event.time_ns) {
                return ControlFlow::Break(());
            }
            if suspect && let Some(why) = impossible(event) {
                info.impossible.note(index, why);
                index += 1;
                continue;
            }
            let inside = !has_start || bounds.started(index, event.time_ns);
            // The device this event goes to (`None`: all of them).
            let target = match event.data.device() {
                _ if together => Some(0),
                None => None,
                Some(device) => {
                    if passes.get(last).is_none_or(|p| p.device != device) {
                        match by_device.get(&device) {
                            Some(&i) => last = i,
                            None => {
                                if seen.len() < MAX_DEVICES as usize {
                                    seen.insert(device);
                                }
                                let other =
                                    matches!(devices, Devices::Only(only) if only != device);
                                if other || passes.len() >= MAX_DEVICES as usize {
                                    if !other {
                                        // Past the bound, each device would cost a
                                        // state and analyses: its events are left out.
                                        info.skipped_events += 1;
                                        if skipped.insert(device) {
                                            info.skipped_devices += 1;
                                        }
                                    }
                                    index += 1;
                                    continue;
                                }
                                let state = match passes.first() {
                                    Some(first) => first.state.fork_phases(),
                                    None => process.clone(),
                                };
                                let mut pass = DevicePass::new(device, state, make(device));
                                if started {
                                    pass.begin(symbols);
                                }
                                passes.push(pass);
                                last = passes.len() - 1;
                                by_device.insert(device, last);
                            }
                        }
                    }
                    Some(last)
                }
            };
            if inside && !started {
                started = true;
                info.first_time_ns = Some(event.time_ns);
                for pass in passes.iter_mut() {
                    pass.begin(symbols);
                }
            }
            let result = match target {
                Some(i) => passes[i].replay(index, event, symbols, inside),
                None => {
                    if passes.is_empty() {
                        process.apply(index, event, symbols);
                    }
                    passes
                        .iter_mut()
                        .try_for_each(|p| p.replay(index, event, symbols, inside))
                }
            };
            index += 1;
            if let Err(e) = result {
                failure = Some(e);
                return ControlFlow::Break(());
            }
            if inside {
                info.events_in_window += 1;
                info.last_time_ns = event.time_ns;
                if stops_when_done
                    && !passes.is_empty()
                    && passes.iter().all(|p| p.busy == 0 && !p.done.is_empty())
                {
                    return ControlFlow::Break(());
                }
            }
        }
        meter.update(at);
        ControlFlow::Continue(())
    })?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    if passes.is_empty() && devices == Devices::Apart {
        passes.push(DevicePass::new(0, process.clone(), make(0)));
    }
    info.stopped_early = flow.is_break();
    let symbols = reader.symbols();
    for pass in passes.iter_mut() {
        if !started {
            pass.begin(symbols);
        }
        pass.finish(symbols)?;
    }
    passes.sort_by_key(|p| p.device);
    let phases = passes.first().map_or(&process, |p| &p.state);
    info.events_replayed = index;
    info.truncation = reader.truncation().copied();
    info.complete = reader.is_complete();
    info.damage = reader.damage().to_vec();
    info.damage_count = reader.damage_count();
    info.phase_thread = phases.phase_thread();
    info.dropped = phases.dropped().clone();
    info.other_thread_phases = phases
        .other_thread_phases()
        .iter()
        .map(|(&t, &n)| (t, n))
        .collect();
    Ok(DevicePasses {
        devices: passes,
        seen: seen.into_iter().collect(),
        info,
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod framework_tests;
