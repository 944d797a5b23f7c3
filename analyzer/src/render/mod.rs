//! Charts (SVG, drawn with plotters) and the HTML report. Renderers take
//! plain data computed by the analyses; they never read traces.

pub mod palette;
pub mod svg;
pub mod timeline;
