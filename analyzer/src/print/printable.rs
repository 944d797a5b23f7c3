//! Names from an input made safe to show. A frame's file name, a phase's
//! name or an allocator setting comes from the traced program (or from
//! whoever wrote the file): printed as is, an escape sequence in it would
//! reach the reader's terminal (retitle it, clear it, move the cursor), and
//! in a page a bidirectional override would reorder what is shown. Every
//! printer passes names through here.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` is shown as an escape rather than as itself: control
/// characters (C0 but newline and tab, DEL, C1) and the bidirectional
/// embeddings, overrides and isolates.
fn hidden(c: char) -> bool {
    matches!(c, '\0'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Whether `text` holds a character that [`hidden`] escapes. The UTF-8
/// form of every such character starts with a control byte, DEL, `0xc2`
/// (C1) or `0xe2` (the bidirectional ones), each of which starts a
/// character: only those are decoded. A report's page is megabytes of
/// ASCII, which `chars().any(hidden)` decoded at about 25 instructions a
/// byte.
fn any_hidden(text: &str) -> bool {
    let suspect =
        |b: u8| (b < 0x20) & (b != b'\n') & (b != b'\t') | (b == 0x7f) | (b == 0xc2) | (b == 0xe2);
    let mut start = 0;
    for chunk in text.as_bytes().chunks(32) {
        // No early exit within a chunk, so that the test vectorizes.
        if chunk.iter().fold(false, |any, &b| any | suspect(b)) {
            for (i, &b) in chunk.iter().enumerate() {
                if suspect(b)
                    && (text.get(start + i..))
                        .and_then(|rest| rest.chars().next())
                        .is_some_and(hidden)
                {
                    return true;
                }
            }
        }
        start += chunk.len();
    }
    false
}

/// `text` with every control character (but newline and tab) and every
/// bidirectional override written as a visible escape: `\x1b`, `\u{202e}`.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !any_hidden(text) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !hidden(c) {
            out.push(c);
        } else if (c as u32) < 0x100 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

/// [`printable`], cut to about `max` characters: a message quoting a value
/// from the input (a 10 MB allocator setting) stays one readable line.
pub fn printable_cut(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return printable(text).into_owned();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{}… ({} more characters)", printable(&kept), count - max)
}

/// JSON text (serde's) with the characters [`printable`] escapes, where
/// serde leaves them raw (DEL, C1, the bidirectional overrides), written as
/// JSON escapes: the same document, safe on a terminal. serde already
/// escapes the other control characters, and such characters can only be
/// inside strings.
pub fn json_safe(json: String) -> String {
    if !any_hidden(&json) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if hidden(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_scan_finds_what_the_character_scan_does() {
        let hiddens = [
            '\0', '\r', '\u{1b}', '\u{7f}', '\u{80}', '\u{9f}', '\u{202a}', '\u{202e}', '\u{2066}',
            '\u{2069}',
        ];
        // Characters that share a suspect first byte but are shown as
        // themselves: U+00A0 and U+00E9 (0xc2 / 0xc3), the dash, the
        // ellipsis and U+2065 / U+206A (0xe2), and newline and tab.
        let shown = [
            '\u{a0}', 'é', '—', '…', '\u{2065}', '\u{206a}', '\u{2029}', '\n', '\t', 'a',
        ];
        for &c in &shown {
            assert!(!hidden(c), "{c:?}");
        }
        // Every position around the 32-byte chunks' edges.
        for len in 0..70 {
            for &s in &shown {
                let mut text: String = std::iter::repeat_n(s, len).collect();
                assert!(!any_hidden(&text), "{text:?}");
                for &h in &hiddens {
                    text.push(h);
                    assert!(any_hidden(&text), "{text:?}");
                    assert_eq!(any_hidden(&text), text.chars().any(hidden));
                    text.pop();
                }
            }
        }
    }

    #[test]
    fn escape_sequences_become_visible() {
        let evil = "/u/\u{1b}]0;pwned\u{7}train\u{1b}[31m.py";
        assert_eq!(printable(evil), "/u/\\x1b]0;pwned\\x07train\\x1b[31m.py");
        assert_eq!(
            printable("csi \u{9b}2J del \u{7f}"),
            "csi \\x9b2J del \\x7f"
        );
        assert_eq!(printable("abc\u{202e}fed"), "abc\\u{202e}fed");
    }

    #[test]
    fn plain_text_lines_and_tabs_are_kept_as_they_are() {
        let text = "naïve.py:12\tforward\n→ 日本";
        assert!(matches!(printable(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn long_values_are_cut() {
        let long = "v".repeat(10_000);
        let cut = printable_cut(&long, 100);
        assert!(cut.starts_with(&"v".repeat(100)));
        assert!(cut.ends_with("… (9900 more characters)"), "{cut}");
        assert_eq!(printable_cut("short\u{1b}", 100), "short\\x1b");
    }

    #[test]
    fn json_keeps_its_values() {
        let value = serde_json::json!({"file": "a\u{1b}b\u{9b}c\u{7f}d\u{202e}e"});
        let safe = json_safe(serde_json::to_string(&value).unwrap());
        assert!(!safe.chars().any(hidden), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
    }
}
