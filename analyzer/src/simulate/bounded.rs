//! The request extractor a report's pass runs beside its analyses: given
//! up past [`WHAT_IF_MAX_EVENTS`] (a longer trace's requests take more
//! memory and time than the rest of the report), and at the pass's end,
//! where the recorded run ran out of memory, the fixes tried.

use super::fixes::FixesTried;
use super::{RequestExtractor, RequestList, SimOptions};
use crate::analysis::Analysis;
use vramtrace_allocator::AllocatorConfig;

/// Events past which a report leaves out its what-if section: the requests
/// of a longer trace take more memory (about 8 bytes an event) and time
/// than the rest of the report; `vramtrace simulate` runs them on its own.
pub const WHAT_IF_MAX_EVENTS: u64 = 20_000_000;

/// The request extractor, given up (its requests dropped) past
/// [`WHAT_IF_MAX_EVENTS`]. At the pass's end, where the recorded run ran out
/// of memory, it tries the fixes (the pass's state names their sites).
pub struct BoundedRequests {
    extractor: RequestExtractor,
    events: u64,
    over: bool,
    /// The recorded settings (when readable) and the device's memory (when
    /// the header gives it).
    fixes_under: Option<(AllocatorConfig, Option<u64>)>,
    /// The recorded (or inferred) cap, which the fixes are tried under.
    limits: crate::analysis::limits::LimitWatch,
    list: Option<RequestList>,
    fixes: Option<FixesTried>,
}

impl BoundedRequests {
    /// An extractor for a device of `recorded_capacity` bytes (when the
    /// header gives it) that tries the fixes under the recorded settings
    /// (when readable).
    pub fn new(
        recorded_capacity: Option<u64>,
        recorded_config: Option<AllocatorConfig>,
    ) -> BoundedRequests {
        BoundedRequests {
            extractor: RequestExtractor::new(recorded_capacity),
            events: 0,
            over: false,
            fixes_under: recorded_config.map(|c| (c, recorded_capacity)),
            limits: crate::analysis::limits::LimitWatch::new(),
            list: None,
            fixes: None,
        }
    }

    /// Whether the trace went past [`WHAT_IF_MAX_EVENTS`] (the requests
    /// were dropped).
    pub fn over(&self) -> bool {
        self.over
    }

    /// The fixes tried where the recorded run ran out of memory, once the
    /// pass is over (`None` past [`WHAT_IF_MAX_EVENTS`] or without an OOM).
    pub fn take_fixes(&mut self) -> Option<FixesTried> {
        self.fixes.take()
    }

    /// The requests, once the pass is over.
    pub fn into_list(self) -> Result<RequestList, crate::analysis::AnalysisError> {
        self.list.ok_or(crate::analysis::AnalysisError::NoResult(
            "request extraction",
        ))
    }
}

impl Analysis for BoundedRequests {
    fn begin(
        &mut self,
        state: &crate::replay::ReplayState,
        symbols: &vramtrace_format::SymbolTable,
    ) {
        self.extractor.begin(state, symbols);
        self.limits.begin(state, symbols);
    }

    fn event(
        &mut self,
        step: &crate::analysis::Step<'_>,
        state: &crate::replay::ReplayState,
    ) -> Result<crate::analysis::Flow, crate::analysis::AnalysisError> {
        self.events += 1;
        if self.events > WHAT_IF_MAX_EVENTS {
            self.over = true;
            self.extractor = RequestExtractor::new(None);
            return Ok(crate::analysis::Flow::Done);
        }
        self.limits.event(step, state)?;
        self.extractor.event(step, state)
    }

    fn finish(
        &mut self,
        state: &crate::replay::ReplayState,
        symbols: &vramtrace_format::SymbolTable,
    ) -> Result<(), crate::analysis::AnalysisError> {
        if self.over {
            return Ok(());
        }
        self.extractor.finish(state, symbols)?;
        let list = std::mem::take(&mut self.extractor).into_list()?;
        self.limits.finish(state, symbols)?;
        if let Some((config, device)) = self.fixes_under.as_ref().filter(|_| list.recorded_ooms > 0)
        {
            // Under the recorded cap, as `simulate` replays it; else on the
            // recorded device.
            let cap = self.limits.report_now().cap().map(|c| c.bytes);
            let options = SimOptions {
                capacity: cap.or(*device),
                cap,
                ..SimOptions::default()
            };
            if options.capacity.is_some() {
                self.fixes =
                    crate::simulate::fixes::for_first_oom(&list, config, &options, state, symbols);
            }
        }
        self.list = Some(list);
        Ok(())
    }
}
