//! One palette for every chart of a report: the same site gets the same
//! colour wherever it appears.

use crate::replay::categories::Category;
use plotters::style::RGBColor;
use rustc_hash::FxHashMap as HashMap;

/// Colours for categories, distinguishable by most colour-blind readers
/// (Okabe–Ito, extended with Tableau tones).
const COLOURS: [RGBColor; 12] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(121, 94, 168),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
    RGBColor(127, 127, 127),
];

/// The colour of "other": everything outside the top categories.
pub const OTHER: RGBColor = RGBColor(190, 190, 190);
/// Reserved memory, drawn as a line over the allocated areas.
pub const RESERVED: RGBColor = RGBColor(40, 40, 40);
/// Markers of trouble: peaks, OOMs, leaks.
pub const ALERT: RGBColor = RGBColor(200, 30, 30);
/// Phase bands, alternating.
pub const BANDS: [RGBColor; 2] = [RGBColor(236, 240, 247), RGBColor(247, 243, 232)];

/// Allocated memory as one quantity (the report explorer's line): Paul
/// Tol's indigo, a colour no category or site has, so the line never reads
/// as one of the areas under it.
pub const ALLOCATED: RGBColor = RGBColor(51, 34, 136);
/// Cached free memory: reserved, in no block in use (Tol's wine: no
/// category's or site's colour either).
pub const CACHED_FREE: RGBColor = RGBColor(136, 34, 85);
/// Bytes reserved in private pools (CUDA graphs, `MemPool`s): a dashed
/// line in the timeline and the explorer, in a teal no category or site has.
pub const POOLS: RGBColor = RGBColor(0, 128, 128);
/// A block freed by the program, waiting for another stream's work.
pub const PENDING_FREE: RGBColor = RGBColor(240, 163, 94);
/// The free space of a segment.
pub const SEGMENT_FREE: RGBColor = RGBColor(238, 240, 243);
/// A block in use whose allocation is not kept one by one.
pub const BLOCK_IN_USE: RGBColor = RGBColor(74, 120, 168);
/// What is not highlighted, beside what is.
pub const DIMMED: RGBColor = RGBColor(217, 221, 227);
/// The explorer's phases, each tinted by its name ([`phase_tint`]), so a
/// phase and its repetitions look alike.
pub const PHASE_TINTS: [RGBColor; 4] = [
    RGBColor(219, 231, 243),
    RGBColor(227, 238, 219),
    RGBColor(243, 230, 214),
    RGBColor(233, 222, 240),
];

/// Which of [`PHASE_TINTS`] a phase of this name gets: a hash of its
/// UTF-16 code units (as a page's JavaScript would hash it).
pub fn phase_tint(name: &str) -> usize {
    let hash = name
        .encode_utf16()
        .fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as i32));
    (hash.unsigned_abs() % PHASE_TINTS.len() as u32) as usize
}

/// The fixed colours of what blocks hold, by [`Category`]: a category keeps
/// its colour in every chart ("other" is [`OTHER`]).
pub fn of_category(category: Category) -> RGBColor {
    match category {
        Category::Parameter => RGBColor(0, 114, 178),
        Category::Buffer => RGBColor(86, 180, 233),
        Category::Gradient => RGBColor(0, 158, 115),
        Category::OptimizerState => RGBColor(230, 159, 0),
        Category::Activation => RGBColor(213, 94, 0),
        Category::Temporary => RGBColor(204, 121, 167),
        // "other", and a category a later format adds.
        _ => OTHER,
    }
}

/// Assigns colours to category names in order of first request; the names
/// of what blocks hold (`parameters`, `optimizer state`, ...) have their
/// fixed colours ([`of_category`]), which no site's or phase's name is.
#[derive(Clone, Debug, Default)]
pub struct Palette {
    assigned: HashMap<String, RGBColor>,
}

impl Palette {
    /// An empty palette.
    pub fn new() -> Self {
        Self::default()
    }

    /// The colour of `name`, assigning the next free one on first use;
    /// `"other"` is always grey.
    pub fn colour(&mut self, name: &str) -> RGBColor {
        if let Some(category) = Category::ALL.into_iter().find(|c| c.label() == name) {
            return of_category(category);
        }
        let next = self.assigned.len();
        *self
            .assigned
            .entry(name.to_string())
            .or_insert(COLOURS[next % COLOURS.len()])
    }
}

/// How `colour` drawn at `alpha` looks on white, as an opaque colour (for
/// a legend's swatch of a translucent area).
pub fn on_white(colour: RGBColor, alpha: f64) -> RGBColor {
    let blend = |c: u8| (c as f64 * alpha + 255.0 * (1.0 - alpha)).round() as u8;
    RGBColor(blend(colour.0), blend(colour.1), blend(colour.2))
}

/// `#rrggbb` for a colour, for HTML next to the charts.
pub fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The format's categories may grow (`#[non_exhaustive]`), so no match
    /// says when one lacks a colour: this does.
    #[test]
    fn every_category_has_a_colour_of_its_own() {
        let colours: Vec<RGBColor> = Category::ALL.into_iter().map(of_category).collect();
        for (i, c) in colours.iter().enumerate() {
            let other = Category::ALL[i] == Category::Other;
            assert_eq!(*c == OTHER, other, "{:?}", Category::ALL[i]);
            assert_eq!(colours.iter().filter(|d| *d == c).count(), 1);
        }
    }

    /// The explorer draws the allocated and cached-free lines over areas
    /// coloured by category or by site: neither line may share a colour
    /// with one (allocated was parameters' blue, cached free optimizer
    /// state's orange).
    #[test]
    fn the_lines_have_colours_no_category_or_site_has() {
        for line in [ALLOCATED, CACHED_FREE, RESERVED, POOLS] {
            for c in Category::ALL {
                assert_ne!(line, of_category(c), "{c:?}");
            }
            assert!(!COLOURS.contains(&line), "{line:?}");
            assert_ne!(line, OTHER);
        }
        assert_ne!(ALLOCATED, CACHED_FREE);
        assert!(![ALLOCATED, CACHED_FREE, RESERVED].contains(&POOLS));
    }

    #[test]
    fn phases_get_the_tint_of_their_name() {
        // Java's String.hashCode of "forward" is -677145915, "backward"
        // 2121976803: their absolute values modulo 4.
        assert_eq!(phase_tint("forward"), 3);
        assert_eq!(phase_tint("backward"), 3);
        assert_eq!(phase_tint(""), 0);
        assert_eq!(phase_tint("iter1"), phase_tint("iter1"));
    }

    #[test]
    fn the_same_name_keeps_its_colour() {
        let mut p = Palette::new();
        let a = p.colour("forward (model.py:41)");
        let b = p.colour("backward (model.py:60)");
        assert_ne!(a, b);
        assert_eq!(p.colour("forward (model.py:41)"), a);
        assert_eq!(p.colour("other"), OTHER);
        assert_eq!(hex(a), "#0072b2");
    }
}
