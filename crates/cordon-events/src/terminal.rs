//! Text made safe for a terminal: the one place that decides which characters of a string that
//! came from inside the sandbox (a host name, a URL, a path, an argv, a process name, a reason
//! built from those) may reach the person's terminal as they are.
//!
//! A character is *unsafe* when printing it could drive the terminal or make the text read
//! differently from what it is:
//! - C0 controls (U+0000–U+001F: ESC starts escape sequences, CR and LF fake other lines), DEL
//!   (U+007F) and C1 controls (U+0080–U+009F: U+009B is a one-byte CSI);
//! - the Unicode bidi controls U+202A–U+202E (embeddings and overrides, e.g. U+202E RIGHT-TO-LEFT
//!   OVERRIDE), U+2066–U+2069 (isolates), U+200E/U+200F (LRM/RLM) and U+061C (ALM), which reorder
//!   what is shown so `evil.com` can read as something else;
//! - U+2028/U+2029 (line and paragraph separators), which some terminals break lines on.
//!
//! Unsafe characters are written visibly as Rust-style escapes, `\u{1b}`, `\u{202e}`, so the
//! person sees that they were there. Nothing else is touched, backslashes included: a string
//! escaped once (upstream, before it went into an event) comes out of a second pass unchanged,
//! so escaping twice never doubles the backslashes.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;

/// Whether `c` must not reach a terminal as is (see the module documentation).
pub fn is_unsafe(c: char) -> bool {
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

/// Appends `c` as a visible escape, `\u{..}` in lowercase hex.
pub fn push_escaped(out: &mut String, c: char) {
    let _ = write!(out, "\\u{{{:x}}}", c as u32);
}

/// One line of text with every unsafe character (tabs and line breaks included) escaped as
/// `\u{..}`: the form for anything shown on one line of a terminal.
pub fn safe(s: &str) -> String {
    safe_with(s, false)
}

/// As [`safe`]; with `keep_tab`, tabs stay (a diff line, a source line).
pub fn safe_with(s: &str, keep_tab: bool) -> String {
    if !s.chars().any(is_unsafe) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c) && !(keep_tab && c == '\t') {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// Multi-line text (a diff): each line as [`safe_with`] keeping tabs; the `\n` line breaks
/// stay, a `\r` is escaped (it would overwrite the line).
pub fn lines(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, l) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&safe_with(l, true));
    }
    out
}

/// A name or path for display, with room for bytes that are not UTF-8: as is when plain,
/// otherwise in double quotes with `"`, `\`, unsafe characters, whitespace other than a space
/// and bytes that are not UTF-8 (`\xNN`) escaped, so it cannot fake another line or column.
pub fn quoted(s: &OsStr) -> String {
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
    in_quotes(bytes)
}

/// `s` always in double quotes, escaped as [`quoted`] escapes: for a value that must read as
/// one token (a `key=value` pair of `cordon log`).
pub fn quote(s: &str) -> String {
    in_quotes(s.as_bytes())
}

fn in_quotes(bytes: &[u8]) -> String {
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
            safe("a\u{1b}[31mb\u{9b}c\u{7f}"),
            "a\\u{1b}[31mb\\u{9b}c\\u{7f}"
        );
        assert_eq!(
            safe("x\u{202e}y\u{2066}z\u{200f}\u{61c}\u{200e}\u{202a}\u{2069}"),
            "x\\u{202e}y\\u{2066}z\\u{200f}\\u{61c}\\u{200e}\\u{202a}\\u{2069}"
        );
        assert_eq!(safe("a\tb\nc\u{2028}"), "a\\u{9}b\\u{a}c\\u{2028}");
        assert_eq!(safe_with("a\tb", true), "a\tb");
        assert_eq!(lines("a\tb\r\nc"), "a\tb\\u{d}\nc");
        assert_eq!(quoted(OsStr::new("plain name.txt")), "plain name.txt");
        assert_eq!(quoted(OsStr::new("x\n  + fake")), "\"x\\u{a}  + fake\"");
        assert_eq!(quoted(OsStr::new("q\"\\")), "\"q\\\"\\\\\"");
        assert_eq!(quoted(OsStr::from_bytes(b"a\xffb")), "\"a\\xffb\"");
        assert_eq!(quoted(OsStr::new("e\u{202e}t")), "\"e\\u{202e}t\"");
        assert_eq!(quote("two words"), "\"two words\"");
    }

    #[test]
    fn plain_text_and_escaped_text_pass_unchanged() {
        for s in ["example.com", "/home/u/ünïcode ✓", "GET /a?b=c", ""] {
            assert_eq!(safe(s), s);
        }
        let once = safe("x\u{1b}[2J\u{202e}");
        assert_eq!(safe(&once), once, "a second pass must not double-escape");
    }

    #[test]
    fn every_char_is_either_kept_or_escaped() {
        // Exhaustive over the planes that matter, cheaper than sampling and certain.
        for u in (0u32..0x3000).chain(0xFFF0..0x1_0000) {
            let Some(c) = char::from_u32(u) else { continue };
            let out = safe(&c.to_string());
            if is_unsafe(c) {
                assert_eq!(out, format!("\\u{{{u:x}}}"));
            } else {
                assert_eq!(out, c.to_string());
            }
            assert!(!out.chars().any(is_unsafe), "{u:x}");
        }
    }
}
