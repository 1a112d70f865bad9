//! Making untrusted text (file names, symlink targets, file contents, flag texts) safe to print
//! on a terminal: control characters (C0, DEL, C1), bidi controls and line/paragraph separators
//! become `\u{..}` escapes, and names that hold anything unusual are quoted so that they cannot
//! fake another line of a summary.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;

/// Whether `c` must not reach a terminal as is.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{061C}'
                | '\u{2028}'
                | '\u{2029}'
        )
}

fn push_escaped(out: &mut String, c: char) {
    let _ = write!(out, "\\u{{{:x}}}", c as u32);
}

/// One line of text (flag text, diff line) with every unsafe character escaped; with
/// `keep_tab`, tabs stay.
pub(crate) fn text_with(s: &str, keep_tab: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if is_unsafe(c) && !(keep_tab && c == '\t') {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// One line of text with every unsafe character (newlines included) escaped.
pub(crate) fn text(s: &str) -> String {
    text_with(s, false)
}

/// Multi-line text (a diff): each line escaped, tabs kept, line breaks kept.
pub(crate) fn lines(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, l) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&text_with(l, true));
    }
    out
}

/// A file name or path for display: as is when plain, otherwise in double quotes with `"`,
/// `\`, unsafe characters and bytes that are not UTF-8 (`\xNN`) escaped.
pub(crate) fn name(s: &OsStr) -> String {
    let bytes = s.as_bytes();
    let plain = match std::str::from_utf8(bytes) {
        Ok(t) => {
            !t.is_empty()
                && !t.starts_with(' ')
                && !t.ends_with(' ')
                && !t.starts_with('"')
                && !t.chars().any(|c| {
                    is_unsafe(c) || c == '\\' || (c.is_whitespace() && c != ' ') || c == '\u{FFFD}'
                })
        }
        Err(_) => false,
    };
    if plain {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let mut out = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if is_unsafe(c) || (c.is_whitespace() && c != ' ') => push_escaped(&mut out, c),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_controls_bidi_and_quotes_odd_names() {
        assert_eq!(
            text("a\u{1b}[31mb\u{9b}c\u{7f}"),
            "a\\u{1b}[31mb\\u{9b}c\\u{7f}"
        );
        assert_eq!(
            text("x\u{202e}y\u{2066}z\u{200f}\u{61c}"),
            "x\\u{202e}y\\u{2066}z\\u{200f}\\u{61c}"
        );
        assert_eq!(lines("a\tb\r\nc"), "a\tb\\u{d}\nc");
        assert_eq!(name(OsStr::new("plain name.txt")), "plain name.txt");
        assert_eq!(name(OsStr::new("x\n  + fake")), "\"x\\u{a}  + fake\"");
        assert_eq!(name(OsStr::new("q\"\\")), "\"q\\\"\\\\\"");
        assert_eq!(name(OsStr::from_bytes(b"a\xffb")), "\"a\\xffb\"");
    }
}
