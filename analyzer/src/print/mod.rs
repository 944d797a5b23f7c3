//! Printers: the [commands](crate::command)' results as people and
//! programs read them, side by side in one layer. None of them reads an
//! input or replays anything.
//!
//! - [`text`]: aligned tables with human units, for terminals.
//! - [`json`] and [`json_sorted`]: the results as serde serializes them.
//! - [`svg`]: charts, drawn with plotters.
//! - [`html`]: the self-contained report page, charts inline.
//!
//! [`labels`] and [`table`] are what the printers share: how figures and
//! sites read, and tables whose columns line up; [`printable`], how a name
//! from the input is shown without its control characters acting.

pub mod html;
pub mod labels;
pub mod pprof;
mod printable;
pub mod svg;
pub mod table;
pub mod text;

pub use printable::{printable, printable_cut};

use serde::Serialize;

/// Why a chart cannot be drawn.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChartError {
    /// The drawing library failed.
    #[error("cannot draw the chart: {0}")]
    Draw(String),
    /// Runs aligned by repetition, with one that repeats no phase (its name).
    #[error(
        "aligning runs by repetition needs a phase repeated three times or more in both runs; {0} has none"
    )]
    NoRepetitions(String),
    /// Nothing to draw: no phase repeats (the leak chart).
    #[error("no phase repeats three times or more: there is no growth to draw")]
    NoRepeatedPhase,
}

/// A result as pretty JSON, its keys in the order of its fields, with a
/// final newline. Several results (one per input) print as an array.
pub fn json<T: Serialize + ?Sized>(value: &T) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("results serialize to JSON");
    text.push('\n');
    // Names from the input may hold characters a terminal obeys.
    printable::json_safe(text)
}

/// A result as pretty JSON with every object's keys in alphabetical order,
/// with a final newline: the order `info`, `import`, `synth` and `simulate`
/// have always printed.
pub fn json_sorted<T: Serialize + ?Sized>(value: &T) -> String {
    // `serde_json::Value` keeps its objects' keys sorted.
    let value = serde_json::to_value(value).expect("results serialize to JSON");
    json(&value)
}
