//! What a pass found worth telling, short of an error: a trace cut short
//! or damaged, events dropped or left out, a window with nothing in it.
//! The warnings are worded by
//! [`print::words::warning`](crate::print::words::warning) (their
//! `Display`).

use super::PassInfo;
use super::window::Window;
use crate::replay::plausible::ImpossibleValues;
use vramtrace_format::{TraceDamage, Truncation};

/// Something worth telling about a pass, short of an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warning {
    /// The trace was cut short: its readable part was analyzed.
    Truncated(Truncation),
    /// Part of the trace was damaged and skipped (or found amiss): the rest
    /// was analyzed.
    Damaged(TraceDamage),
    /// More damage than was listed.
    MoreDamage(u64),
    /// The trace has no footer: the process that recorded it did not close it.
    Unfinished,
    /// The recorder dropped events (its output could not keep up): the
    /// analyses went on across the gaps, and say how.
    EventsDropped(crate::replay::DroppedReport),
    /// No event lies inside the window.
    EmptyWindow,
    /// The recorded allocator settings cannot be read (the reason).
    UnreadableSettings(String),
    /// A bad limit or device-memory event was left out, or the allocator's
    /// limit changed during the run (what analyses did about it).
    Memory(String),
    /// Events or starting segments with impossible values were left out.
    Impossible(ImpossibleValues),
    /// Other threads than the one followed began phases, which are not
    /// shown: `(thread, phase begins)`, and the thread followed.
    OtherThreadPhases {
        /// The thread whose phases are shown.
        shown: u32,
        /// The other threads with phases, and how many each began.
        others: Vec<(u32, u64)>,
    },
    /// Converting a PyTorch snapshot found this (its import report: missing
    /// fields of older snapshots, unknown actions, a replayed end state that
    /// differs from the recorded one).
    Conversion(String),
    /// More devices than any machine has: the events of those past the
    /// first [`MAX_DEVICES`](crate::bounds::MAX_DEVICES) were left out.
    TooManyDevices {
        /// The devices left out.
        devices: u64,
        /// Their events.
        events: u64,
    },
}

impl Warning {
    /// The warning's kind, as JSON names it: stable, to match on.
    pub fn kind(&self) -> &'static str {
        match self {
            Warning::Truncated(_) => "truncated",
            Warning::Damaged(_) => "damaged",
            Warning::MoreDamage(_) => "more_damage",
            Warning::Unfinished => "unfinished",
            Warning::EventsDropped(_) => "events_dropped",
            Warning::EmptyWindow => "empty_window",
            Warning::UnreadableSettings(_) => "unreadable_settings",
            Warning::Memory(_) => "memory",
            Warning::Impossible(_) => "impossible_values",
            Warning::OtherThreadPhases { .. } => "other_thread_phases",
            Warning::TooManyDevices { .. } => "too_many_devices",
            Warning::Conversion(_) => "conversion",
        }
    }

    /// What a pass's end says about the trace and the window.
    pub fn of_pass(info: &PassInfo, window: &Window) -> Vec<Warning> {
        let mut warnings: Vec<Warning> =
            info.damage.iter().cloned().map(Warning::Damaged).collect();
        if info.damage_count > info.damage.len() as u64 {
            warnings.push(Warning::MoreDamage(
                info.damage_count - info.damage.len() as u64,
            ));
        }
        if let Some(t) = info.truncation {
            warnings.push(Warning::Truncated(t));
        } else if !info.complete && !info.stopped_early {
            warnings.push(Warning::Unfinished);
        }
        if !info.impossible.is_empty() {
            warnings.push(Warning::Impossible(info.impossible));
        }
        if info.dropped.any() {
            warnings.push(Warning::EventsDropped(info.dropped.clone()));
        }
        if info.events_in_window == 0 && !window.is_all() {
            warnings.push(Warning::EmptyWindow);
        }
        if info.skipped_devices > 0 {
            warnings.push(Warning::TooManyDevices {
                devices: info.skipped_devices,
                events: info.skipped_events,
            });
        }
        if !info.other_thread_phases.is_empty() {
            warnings.push(Warning::OtherThreadPhases {
                shown: info.phase_thread,
                others: info.other_thread_phases.clone(),
            });
        }
        warnings
    }
}
