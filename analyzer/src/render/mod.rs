//! Charts (SVG, drawn with plotters) and the HTML report. Renderers take
//! plain data computed by the analyses; they never read traces.

pub mod diff;
pub mod fragmentation;
pub mod labels;
pub mod leaks;
pub mod palette;
pub mod report;
pub mod simulate;
pub mod svg;
pub mod timeline;
