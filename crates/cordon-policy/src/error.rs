//! Errors, rendered like rustc diagnostics: file, line, column, the source line, a caret under
//! the offending text and a `help` line with the fix.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Everything that can go wrong while loading a policy or using the trust store.
///
/// `Display` renders the complete message, starting with `error: ` and possibly spanning
/// several lines (location, source line, caret, `= help:`); print it as is.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The policy is invalid; the diagnostic says where and how to fix it.
    #[error("{0}")]
    Invalid(Box<Diagnostic>),
    /// A file could not be read or written.
    #[error("error: cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done: `read`, `write`, `create`, ...
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The trust store exists but is not a JSON map of path to SHA-256.
    #[error("error: trust store {} is corrupt: {message}\n  = help: fix or delete it (every project policy then needs `cordon trust` again)", path.display())]
    TrustStore {
        /// The trust store file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

impl PolicyError {
    /// The diagnostic, for [`PolicyError::Invalid`].
    pub fn diagnostic(&self) -> Option<&Diagnostic> {
        match self {
            PolicyError::Invalid(d) => Some(d),
            _ => None,
        }
    }

    pub(crate) fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        PolicyError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

impl From<Diagnostic> for PolicyError {
    fn from(d: Diagnostic) -> Self {
        PolicyError::Invalid(Box::new(d))
    }
}

/// A point in a policy file, with the text around it for display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// The whole source line (without its newline).
    pub source_line: String,
    /// How many characters to underline (at least 1).
    pub width: usize,
}

/// One policy problem: what, where (when known) and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// One line, without the `error: ` prefix.
    pub message: String,
    /// The policy file, or `None` for the built-in policy and command-line input.
    pub file: Option<PathBuf>,
    /// Where in the file; `None` when only the file is known.
    pub location: Option<Location>,
    /// How to fix it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A diagnostic with no file and no location.
    pub fn new(message: impl Into<String>) -> Self {
        Diagnostic {
            message: message.into(),
            file: None,
            location: None,
            help: None,
        }
    }

    /// Adds a help line.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Names the file.
    pub fn in_file(mut self, file: Option<&Path>) -> Self {
        self.file = file.map(Path::to_path_buf);
        self
    }

    /// Locates the diagnostic at a byte span of `src`.
    pub(crate) fn at(mut self, src: &str, span: Range<usize>) -> Self {
        self.location = Some(locate(src, span));
        self
    }
}

/// Turns a byte span into line, column, source line and underline width.
pub(crate) fn locate(src: &str, span: Range<usize>) -> Location {
    let start = floor_char_boundary(src, span.start.min(src.len()));
    let end = floor_char_boundary(src, span.end.clamp(start, src.len()));
    let line_start = src[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = src[start..].find('\n').map_or(src.len(), |i| start + i);
    let line = src[..start].matches('\n').count() + 1;
    let source_line = src[line_start..line_end].trim_end_matches('\r').to_string();
    let column = src[line_start..start].chars().count() + 1;
    let width = src[start..end.min(line_end)].chars().count().max(1);
    Location {
        line,
        column,
        source_line,
        width,
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error: {}", self.message)?;
        let digits = self
            .location
            .as_ref()
            .map_or(1, |l| l.line.to_string().len());
        let pad = " ".repeat(digits + 1);
        match (&self.file, &self.location) {
            (Some(file), Some(loc)) => write!(
                f,
                "\n{pad}--> {}:{}:{}",
                file.display(),
                loc.line,
                loc.column
            )?,
            (Some(file), None) => write!(f, "\n{pad}--> {}", file.display())?,
            (None, Some(loc)) => write!(
                f,
                "\n{pad}--> <built-in policy>:{}:{}",
                loc.line, loc.column
            )?,
            (None, None) => {}
        }
        if let Some(loc) = &self.location {
            let source = printable(&loc.source_line);
            // Keep tabs so that the caret lines up under tab-indented text.
            let lead: String = source
                .chars()
                .take(loc.column - 1)
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            write!(f, "\n{pad} |")?;
            write!(f, "\n{:>w$} | {source}", loc.line, w = digits + 1)?;
            write!(f, "\n{pad} | {lead}{}", "^".repeat(loc.width))?;
        }
        if let Some(help) = &self.help {
            write!(f, "\n{pad} = help: {help}")?;
        }
        Ok(())
    }
}

/// Replaces what is unsafe on a terminal (other than tab) so a source line cannot mess up a
/// terminal: by one U+FFFD each rather than a visible escape, so the `^` under the line still
/// points at the right column.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if cordon_events::terminal::is_unsafe(c) && c != '\t' {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect()
}

/// The candidate closest to `word`, if it is close enough to be a plausible typo.
pub(crate) fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let word_l = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (edit_distance(&word_l, &c.to_ascii_lowercase()), *c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance where swapping two neighbours costs one edit (optimal string
/// alignment): `hots` is one typo from `host`, not two, so short keys get their suggestion.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j - 1] + cost)
                .min(d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// "`a`, `b`, `c`"
pub(crate) fn backticked(items: &[&str]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_rustc() {
        let src = "[filesystem]\nreadable = []\nwriteable = [\"/x\"]\n";
        let start = src.find("writeable").unwrap();
        let d = Diagnostic::new("unknown key `writeable` in [filesystem]")
            .in_file(Some(Path::new("/home/u/proj/cordon.toml")))
            .at(src, start..start + 9)
            .with_help("expected one of `readable`, `writable`; did you mean `writable`?");
        let expected = "error: unknown key `writeable` in [filesystem]
  --> /home/u/proj/cordon.toml:3:1
   |
 3 | writeable = [\"/x\"]
   | ^^^^^^^^^
   = help: expected one of `readable`, `writable`; did you mean `writable`?";
        assert_eq!(d.to_string(), expected);
        assert_eq!(PolicyError::from(d).to_string(), expected);
    }

    #[test]
    fn two_digit_lines_widen_the_gutter() {
        let src = format!("{}x = 1\n", "\n".repeat(11));
        let d = Diagnostic::new("m")
            .in_file(Some(Path::new("f")))
            .at(&src, 11..12);
        let s = d.to_string();
        assert!(
            s.contains("\n   --> f:12:1\n    |\n 12 | x = 1\n    | ^"),
            "{s}"
        );
    }

    #[test]
    fn locate_counts_characters_and_clamps() {
        let src = "a = \"é\" # x\nb";
        let i = src.find('#').unwrap();
        let loc = locate(src, i..i + 1);
        assert_eq!((loc.line, loc.column, loc.width), (1, 9, 1));
        // Past the end, and inside a multibyte character: no panic.
        let loc = locate(src, 100..200);
        assert_eq!(loc.line, 2);
        #[allow(clippy::reversed_empty_ranges)]
        let loc = locate(src, 6..5);
        assert_eq!(loc.line, 1);
        let loc = locate("", 0..0);
        assert_eq!((loc.line, loc.column, loc.width), (1, 1, 1));
    }

    #[test]
    fn control_characters_are_not_printed() {
        let src = "x = \"\u{1b}[31m\"";
        let d = Diagnostic::new("m").at(src, 0..1);
        assert!(!d.to_string().contains('\u{1b}'));
    }

    #[test]
    fn suggestions() {
        let keys = ["readable", "writable", "deny", "read_only", "landlock"];
        assert_eq!(did_you_mean("writeable", &keys), Some("writable"));
        assert_eq!(did_you_mean("readonly", &keys), Some("read_only"));
        assert_eq!(did_you_mean("Deny", &keys), Some("deny"));
        assert_eq!(did_you_mean("network", &keys), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn a_swapped_pair_is_one_typo() {
        assert_eq!(edit_distance("hots", "host"), 1);
        assert_eq!(did_you_mean("hots", &["host", "ports"]), Some("host"));
        assert_eq!(did_you_mean("mdoe", &["mode", "allow_ips"]), Some("mode"));
        assert_eq!(did_you_mean("evn", &["env", "file"]), Some("env"));
        assert_eq!(did_you_mean("prot", &["port", "host_port"]), Some("port"));
        assert_eq!(did_you_mean("xyz", &["env", "file"]), None);
    }
}
