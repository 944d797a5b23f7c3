//! A flame graph of live memory: each stack's width is its bytes, frames
//! outermost at the bottom; click a frame to zoom into it, search by name.
//! Drawn by inferno, the maintained renderer of the folded-stack format.

use crate::command::flamegraph::{FlameGraph, Moment};
use crate::units;
use inferno::flamegraph::color::{BasicPalette, Palette};
use inferno::flamegraph::{self, Options};

/// The chart could not be drawn (inferno refused the stacks).
#[derive(Debug, thiserror::Error)]
#[error("the flame graph could not be drawn: {0}")]
pub struct FlameError(String);

/// What a graph shows, in words: "allocated peak, 1.2 GiB at 3.4 s".
pub fn moment_line(graph: &FlameGraph) -> String {
    let what = match graph.at.moment {
        Moment::AllocatedPeak => "live at the allocated peak",
        Moment::FirstOom => "live at the first out-of-memory error",
        Moment::Time(_) => "live at",
    };
    format!(
        "{what} {}: {} in {} blocks (exact)",
        units::duration_ns(graph.at.time_ns),
        units::bytes(graph.stacks.total_bytes),
        units::count(graph.stacks.blocks),
    )
}

/// The graph as a self-contained SVG (its script gives zoom and search).
/// The same stacks always give the same file: colours follow frame names.
pub fn render(graph: &FlameGraph, title: &str) -> Result<String, FlameError> {
    // Frames as the tables name them (paths from their package); names
    // reach the page as text: control characters as escapes.
    let lines: Vec<String> = graph
        .stacks
        .folded_lines_named(crate::sites::frame_label)
        .iter()
        .map(|l| crate::print::printable(l).into_owned())
        .collect();
    let mut options = Options::default();
    options.title = title.to_string();
    options.subtitle = Some(moment_line(graph));
    options.colors = Palette::Basic(BasicPalette::Mem);
    options.deterministic = true;
    options.count_name = "bytes".to_string();
    options.name_type = "Frame:".to_string();
    // A label is `function (file:line)`: cut from the right, it keeps the
    // function's name (inferno's script cuts from the left by default).
    options.text_truncate_direction = flamegraph::TextTruncateDirection::Right;
    let mut out = Vec::new();
    if lines.is_empty() {
        // inferno refuses an empty input; a graph of nothing says so.
        let empty = ["(no live memory) 1".to_string()];
        flamegraph::from_lines(&mut options, empty.iter().map(String::as_str), &mut out)
    } else {
        flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut out)
    }
    .map_err(|e| FlameError(e.to_string()))?;
    String::from_utf8(out).map_err(|e| FlameError(e.to_string()))
}
