//! The escaper of the report's templates: every value a template
//! interpolates (`{{ value }}`) is written through it, so a name from the
//! input can neither close an element nor open one. A printer opts out only
//! with `|safe`, where it inserts markup built elsewhere (a chart, the
//! explorer, another template of this module).

use crate::print::svg;
use std::fmt;

/// Writes text as HTML the way the SVG charts do ([`svg::escape`]): its
/// control characters shown as escapes ([`printable`](crate::print::printable)),
/// then `&`, `<`, `>`, `"` and `'` as entities. askama's own HTML escaper
/// writes numeric entities (`&#38;`); this one keeps the page's bytes those
/// of the charts inside it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Html;

impl askama::filters::Escaper for Html {
    fn write_escaped_str<W: fmt::Write>(&self, mut dest: W, string: &str) -> fmt::Result {
        dest.write_str(&svg::escape(string))
    }
}

#[cfg(test)]
mod tests {
    use super::Html;
    use askama::filters::Escaper;

    fn escaped(text: &str) -> String {
        let mut out = String::new();
        Html.write_escaped_str(&mut out, text).unwrap();
        out
    }

    #[test]
    fn markup_and_control_characters_are_escaped() {
        assert_eq!(
            escaped("<script>a & 'b'</script>\u{1b}[2J"),
            "&lt;script&gt;a &amp; &#39;b&#39;&lt;/script&gt;\\x1b[2J"
        );
        assert_eq!(escaped("plain text"), "plain text");
    }
}
