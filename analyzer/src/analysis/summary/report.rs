//! The summary's result types: what [`super::Summary`] reports, and how it
//! reads in JSON.

use super::{Peak, PeakState};
use crate::analysis::categories::{Category, CategoryReport};
use crate::analysis::limits::{Limit, OutsideReport};
use crate::analysis::pools::PoolsReport;
use crate::analysis::waterfall::Waterfall;
use crate::replay::{DroppedReport, Inconsistency, InconsistencyKind, ReplayState, Totals};
use crate::sites::SiteDescription;
use serde::Serialize;
use std::collections::BTreeMap;

/// A site's share of the allocated peak.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteShare {
    /// The site.
    #[serde(flatten)]
    pub site: SiteDescription,
    /// Bytes live from the site at the peak.
    pub bytes: u64,
    /// Blocks live from the site at the peak.
    pub count: u64,
    /// `bytes` over the peak's allocated bytes.
    pub share: f64,
    /// What most of the site's bytes at the peak are.
    pub category: Option<Category>,
}

/// An out-of-memory event with its context.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OomReport {
    /// When it happened.
    pub time_ns: u64,
    /// Its event index.
    pub index: u64,
    /// The failed request.
    pub requested_bytes: u64,
    /// Free device memory according to the driver.
    pub device_free_bytes: u64,
    /// Allocated bytes then.
    pub allocated_bytes: u64,
    /// Reserved bytes then.
    pub reserved_bytes: u64,
    /// The open phase path (empty outside phases; JSON `null`).
    #[serde(with = "open_phase")]
    pub phase: String,
    /// The requesting site.
    #[serde(flatten)]
    pub site: SiteDescription,
    /// Where every byte under the limit was then (see
    /// [`crate::analysis::waterfall`]); its `limit_line` says what the limit was.
    pub waterfall: Waterfall,
    /// Whether the program survived it: a request under a convolution
    /// after which the program allocated again (PyTorch's cuDNN code
    /// catches the failure of an algorithm's workspace and tries the next
    /// algorithm, which needs less).
    pub survived: bool,
}

/// How many inconsistencies of one kind were found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InconsistencyCount {
    /// The kind.
    pub kind: InconsistencyKind,
    /// What it means.
    pub description: &'static str,
    /// How many.
    pub count: u64,
}

/// The inconsistencies of a replay.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InconsistencyReport {
    /// All of them.
    pub total: u64,
    /// Counts of the kinds found.
    pub by_kind: Vec<InconsistencyCount>,
    /// The first few of each kind, with their event index.
    pub examples: Vec<Inconsistency>,
}

impl InconsistencyReport {
    /// The report of a replay's inconsistencies.
    pub fn of(state: &ReplayState) -> Self {
        InconsistencyReport {
            total: state.inconsistency_total(),
            by_kind: InconsistencyKind::ALL
                .iter()
                .map(|&kind| InconsistencyCount {
                    kind,
                    description: kind.describe(),
                    count: state.inconsistency_count(kind),
                })
                .filter(|c| c.count > 0)
                .collect(),
            examples: state.inconsistencies().to_vec(),
        }
    }
}

/// The summary of a trace (or of a window of it).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SummaryReport {
    /// Events in the window.
    pub events: u64,
    /// Events by kind name.
    pub counts: BTreeMap<String, u64>,
    /// Time from the first to the last event.
    pub duration_ns: u64,
    /// Time of the first event.
    pub first_time_ns: u64,
    /// Time of the last event.
    pub last_time_ns: u64,
    /// Peak allocated bytes.
    pub peak_allocated_bytes: u64,
    /// Peak reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Peak requested bytes.
    pub peak_requested_bytes: u64,
    /// Peak active bytes (blocks the caller had not freed).
    pub peak_active_bytes: u64,
    /// When allocated bytes peaked.
    pub peak_time_ns: u64,
    /// The phase path at the allocated peak (empty outside phases; JSON
    /// `null`).
    #[serde(with = "open_phase")]
    pub peak_phase: String,
    /// Each peak with its time, event and phase.
    pub peak_allocated: Peak,
    /// See [`Peak`].
    pub peak_reserved: Peak,
    /// See [`Peak`].
    pub peak_requested: Peak,
    /// The state at the allocated peak.
    pub at_peak: PeakState,
    /// The sites with the most bytes live at the allocated peak.
    pub top_sites_at_peak: Vec<SiteShare>,
    /// Out-of-memory events (the first [`MAX_OOMS`](super::MAX_OOMS)).
    pub ooms: Vec<OomReport>,
    /// All out-of-memory events.
    pub oom_count: u64,
    /// Those the program survived (cuDNN workspaces, see
    /// [`OomReport::survived`]).
    pub survived_oom_count: u64,
    /// The state at the end of the window (in JSON, its byte totals are
    /// named `*_bytes`, as at the peak).
    #[serde(serialize_with = "end_state")]
    pub end: Totals,
    /// Contradictions found while replaying.
    pub inconsistencies: InconsistencyReport,
    /// Allocated memory by category at the peaks and at the end.
    pub categories: CategoryReport,
    /// The allocator's limit analyses take as the recorded capacity
    /// (recorded, or a cap inferred from an OOM), when known.
    pub limit: Option<Limit>,
    /// Memory outside the allocator (the device's used memory less
    /// reserved, at each device-memory sample: measured), when sampled.
    pub outside_allocator: Option<OutsideReport>,
    /// Where every byte under the limit was at the allocated peak.
    pub waterfall_at_peak: Option<Waterfall>,
    /// Memory by private pool (CUDA graphs, `MemPool`s; format 1.6), when
    /// the trace has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pools: Option<PoolsReport>,
    /// Bad limit or device-memory events left out, and a limit that changed.
    #[serde(skip)]
    pub limit_warnings: Vec<String>,
    /// The events the recorder dropped (its output could not keep up), when
    /// the trace marks any: figures over their span are a lower bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped_events: Option<DroppedReport>,
    /// Whether the window holds no event (one past the trace's end): then
    /// no peak was reached inside it, and the peaks, the state at the peak
    /// and the sites at the peak are empty ([`SummaryReport::of_empty_window`]).
    pub empty_window: bool,
}

impl SummaryReport {
    /// The kept out-of-memory events the program did not survive.
    pub fn fatal_ooms(&self) -> impl Iterator<Item = &OomReport> {
        self.ooms.iter().filter(|o| !o.survived)
    }

    /// The summary of a window that holds no event. Its peaks would be the
    /// state carried in from before it (at the time of an event outside
    /// it), so none is reported: the peaks are zero, and so are the state
    /// at the peak, its sites and categories. The state at the window's
    /// end, its inconsistencies and its event counts stay.
    pub fn of_empty_window(self) -> SummaryReport {
        SummaryReport {
            events: self.events,
            counts: self.counts,
            end: self.end,
            inconsistencies: self.inconsistencies,
            dropped_events: self.dropped_events,
            categories: CategoryReport {
                source: self.categories.source,
                at_end: self.categories.at_end,
                ..CategoryReport::default()
            },
            empty_window: true,
            ..SummaryReport::default()
        }
    }
}

/// A phase path in JSON: `null` outside phases (the empty path), as a
/// reader tests for "no phase" without knowing the text's convention.
pub mod open_phase {
    use serde::{Deserialize, Deserializer, Serializer};

    /// The empty path as `null`, any other as itself.
    pub fn serialize<S: Serializer>(phase: &str, serializer: S) -> Result<S::Ok, S::Error> {
        if phase.is_empty() {
            serializer.serialize_none()
        } else {
            serializer.serialize_some(phase)
        }
    }

    /// `null` (or an empty string, as JSON before version 2 had it) as the
    /// empty path.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
        Ok(Option::<String>::deserialize(deserializer)?.unwrap_or_default())
    }
}

/// The state at the end in JSON: byte totals named as the state at the peak
/// names them (`allocated_bytes`, ...), then the counts.
fn end_state<S: serde::Serializer>(end: &Totals, serializer: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut s = serializer.serialize_struct("End", 6)?;
    s.serialize_field("allocated_bytes", &end.allocated)?;
    s.serialize_field("requested_bytes", &end.requested)?;
    s.serialize_field("active_bytes", &end.active)?;
    s.serialize_field("reserved_bytes", &end.reserved)?;
    s.serialize_field("live_blocks", &end.live_blocks)?;
    s.serialize_field("segments", &end.segments)?;
    s.end()
}
