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
    /// The frame's height in pixels: the graph's own, and room for the
    /// scroll bar of a graph wider than the page, so no blank space is
    /// left under a short graph and no tall one is cut.
    height: u32,
}

/// Room under the graph for the frame's horizontal scroll bar.
const SCROLL_BAR: u32 = 20;

/// The height an SVG document states on its root element (inferno's
/// `<svg ... height="350" ...>`), if it does.
fn svg_height(svg: &str) -> Option<u32> {
    let root = &svg[svg.find("<svg")?..];
    let root = &root[..root.find('>')?];
    let at = root.find(" height=\"")? + " height=\"".len();
    root[at..].split('"').next()?.parse().ok()
}

impl Flame {
    /// The section of one report.
    pub fn new(input: &ReportInput<'_>) -> Flame {
        Flame {
            graph: match (&input.report.flame, &input.charts.flame) {
                (Some(graph), Some(svg)) => Some(Graph {
                    svg_base64: data::base64(svg.as_bytes()),
                    moment: svg::flame::moment_line(graph),
                    // 480 px, the frame's old fixed height, if none is stated.
                    height: svg_height(svg).unwrap_or(480 - SCROLL_BAR) + SCROLL_BAR,
                }),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_frame_is_as_tall_as_the_graph_says() {
        let svg = r#"<?xml version="1.0"?><svg version="1.1" width="1200" height="350" viewBox="0 0 1200 350"><rect height="15"/></svg>"#;
        assert_eq!(super::svg_height(svg), Some(350));
        assert_eq!(super::svg_height("<svg width=\"1\">"), None);
    }
}
