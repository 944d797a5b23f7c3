//! The "Live at the peak, by stack" section: the flame graph of the memory
//! live at the allocated peak, in a frame of its own, so that inferno's
//! script (click to zoom, search) runs there, apart from the page's.

use super::{ReportInput, data};
use crate::print::svg;
use askama::Template;

/// The section's content.
#[derive(Template)]
#[template(path = "flame.html", config = "src/print/html/askama.toml")]
pub struct Flame {
    /// The graph, when it could be drawn.
    graph: Option<Graph>,
}

/// A drawn flame graph.
struct Graph {
    /// The SVG document, base64-encoded for a data URL: the frame opens
    /// it as the file would open.
    svg_base64: String,
    /// Which moment's memory it shows.
    moment: String,
}

impl Flame {
    /// The section of one report.
    pub fn new(input: &ReportInput<'_>) -> Flame {
        Flame {
            graph: match (&input.report.flame, &input.charts.flame) {
                (Some(graph), Some(svg)) => Some(Graph {
                    svg_base64: data::base64(svg.as_bytes()),
                    moment: svg::flame::moment_line(graph),
                }),
                _ => None,
            },
        }
    }
}
