//! The summary's out-of-memory events: each kept with its moment, and
//! those under a convolution the program went on past marked survived.

use super::{MAX_OOMS, OomReport, Summary};
use crate::analysis::Step;
use crate::analysis::categories::CategoryMoment;
use crate::analysis::waterfall::{Waterfall, moment_now};
use crate::replay::ReplayState;
use crate::replay::categories::is_convolution_stack;
use crate::sites::SiteId;
use vramtrace_format::{EventData, StackId};

impl Summary {
    /// An allocation after failures under a convolution: the program went
    /// on past them.
    #[cold]
    #[inline(never)]
    pub(super) fn survived(&mut self) {
        for i in self.awaiting.drain(..) {
            self.ooms[i].survived = true;
        }
        self.survived_count += std::mem::take(&mut self.awaiting_count);
    }

    /// An out-of-memory event, from `site`.
    #[cold]
    #[inline(never)]
    pub(super) fn oom(&mut self, step: &Step<'_>, state: &ReplayState, site: SiteId) {
        let t = state.totals();
        self.oom_count += 1;
        let (requested, free, stack) = match step.event.data {
            EventData::Oom(o) => (o.requested, o.free_bytes, o.stack),
            _ => (0, 0, StackId::NONE),
        };
        let convolution = is_convolution_stack(stack, step.symbols);
        if convolution {
            self.awaiting_count += 1;
            if self.ooms.len() < MAX_OOMS {
                self.awaiting.push(self.ooms.len());
            }
        }
        if self.ooms.len() < MAX_OOMS {
            let limit = self.limits.limit_at_oom(requested, free, t.reserved);
            let moment = moment_now(
                state,
                step.symbols,
                limit,
                Some(requested),
                self.limits.outside_now(),
            );
            // Filled in at the end, when the categories are settled.
            let waterfall = Waterfall::of(&moment);
            self.oom_moments.push((moment, CategoryMoment::now(state)));
            self.ooms.push(OomReport {
                time_ns: step.event.time_ns,
                index: step.index,
                requested_bytes: requested,
                device_free_bytes: free,
                allocated_bytes: t.allocated,
                reserved_bytes: t.reserved,
                phase: state.phase_path(state.current_phase(), step.symbols),
                site: state.sites().describe(site, step.symbols),
                waterfall,
                survived: false,
            });
        }
    }

    /// Settles each kept OOM's categories at the end, and draws its waterfall
    /// with them.
    pub(super) fn finish_ooms(&mut self, state: &ReplayState) {
        for ((moment, categories), oom) in self.oom_moments.iter_mut().zip(&mut self.ooms) {
            categories.follow(state);
            moment.categories = categories.table();
            oom.waterfall = Waterfall::of(moment);
        }
    }
}
