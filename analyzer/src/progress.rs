//! How long work reports how far it got, without the library knowing who
//! shows it: the `vramtrace` binary draws progress bars on a terminal,
//! tests and library users pass [`NoProgress`].

/// What a [`Meter`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressUnit {
    /// Bytes of an input read (of a decompressed pickle, or of a trace file).
    Bytes,
    /// Events replayed.
    Events,
    /// Iterations of a synthetic run.
    Iterations,
}

/// A piece of long work, as it begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Work {
    /// What is being done, one word: `reading`, `importing`, `replaying`.
    pub label: &'static str,
    /// How many units the work has in all, when known.
    pub total: Option<u64>,
    /// What the counts are in.
    pub unit: ProgressUnit,
}

/// Receives progress reports. Shared by passes running side by side (the
/// two runs of a comparison), so it is `Sync`.
pub trait Progress: Sync {
    /// Work begins; the returned meter hears how far it got, and is dropped
    /// when the work ends.
    fn begin(&self, work: Work) -> Box<dyn Meter + '_>;
}

/// The progress of one piece of work.
pub trait Meter: Send + Sync {
    /// `done` units of the work are done (a running total, not an increment).
    fn update(&self, done: u64);
}

/// Progress reported to no one.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn begin(&self, _work: Work) -> Box<dyn Meter + '_> {
        Box::new(NoProgress)
    }
}

impl Meter for NoProgress {
    fn update(&self, _done: u64) {}
}
