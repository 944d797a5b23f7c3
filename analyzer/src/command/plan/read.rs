//! Reading the runs a plan is made from: one device each, their optimizer
//! steps counted. The checks that they can be planned from are
//! [`crate::simulate::plan::checks`]'s, on each run's [`RunFacts`].

use super::PlanOptions;
use crate::Error;
use crate::analysis::Devices;
use crate::input::{EventStream, Input};
use crate::progress::Progress;
use crate::replay::categories::is_step_phase;
use crate::simulate::plan::PlanError;
use crate::simulate::plan::checks::RunFacts;
use crate::simulate::{Extracted, extract};
use vramtrace_format::EventSource;

/// A run read.
pub(super) struct Run<'a> {
    /// The input it came from.
    pub(super) input: &'a Input,
    /// Its pass's stream: the header and the symbols that name its sites.
    pub(super) events: EventStream,
    /// Its requests, and the replay's state after them.
    pub(super) extracted: Extracted,
    /// The value it was recorded at (0 until [`values_of`] sets it).
    pub(super) value: u64,
    /// The optimizer steps it made.
    pub(super) steps: u64,
}

/// Reads one run's requests (of its one device, or the one picked).
pub(super) fn read_run<'a>(
    input: &'a Input,
    options: &PlanOptions,
    progress: &dyn Progress,
) -> Result<Run<'a>, Error> {
    let mut events = input.events()?;
    let meter = progress.begin(input.pass_work(&events));
    let devices = options
        .recorded_device
        .map_or(Devices::Apart, Devices::Only);
    let mut extracted = extract(&mut events, devices, &*meter)
        .map_err(|e| super::super::pass_error(input.path(), e))?;
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

impl Run<'_> {
    /// The run as the planner's checks see it (its name, `name`: its
    /// input's path).
    pub(super) fn facts<'b>(&'b self, name: &'b str) -> RunFacts<'b> {
        let header = self.events.header();
        let device = self.extracted.device;
        let info = match header.devices.as_slice() {
            [one] => Some(one),
            all => all.iter().find(|d| d.index == device),
        };
        RunFacts {
            name,
            extracted: &self.extracted,
            symbols: self.events.symbols(),
            gpu: info.map(|d| d.name.as_str()).filter(|n| !n.is_empty()),
            steps: self.steps,
            value: self.value,
        }
    }
}
