//! How the binary words what it prints: counts and error chains.

use std::fmt::Write as _;

/// `1 problem`, `2 problems`: a count with its noun in the right number.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// An error and its causes on one line, `outer: cause: root`, like anyhow's `{:#}` — except a
/// cause the message before it already says is not repeated. Library errors that put their
/// source in their own message (`"{path}: {source}"`) and also expose it as the source would
/// otherwise print `… (os error 2): … (os error 2)`.
pub fn chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        let _ = write!(out, "{text}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What thiserror's `#[error("{path}: {source}")]` on a field named `source` makes.
    #[derive(Debug)]
    struct Io {
        path: String,
        source: std::io::Error,
    }

    impl std::fmt::Display for Io {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}: {}", self.path, self.source)
        }
    }

    impl std::error::Error for Io {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        let e = Io {
            path: "/x/y.jsonl".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOENT),
        };
        let e = anyhow::Error::new(e).context("cannot read the session log");
        assert_eq!(
            chain(&e),
            "cannot read the session log: /x/y.jsonl: No such file or directory (os error 2)"
        );
        assert_eq!(
            format!("{e:#}").matches("os error 2").count(),
            2,
            "anyhow alone repeats it"
        );
    }

    #[test]
    fn a_cause_said_mid_message_is_not_repeated_either() {
        let e = anyhow::Error::new(Io {
            path: "cannot publish on 127.0.0.1:3000".into(),
            source: std::io::Error::from_raw_os_error(libc::EADDRINUSE),
        })
        .context("start the gateway");
        let s = chain(&e);
        assert_eq!(s.matches("(os error 98)").count(), 1, "{s}");
    }

    #[test]
    fn counts_agree_with_their_noun() {
        assert_eq!(count(1, "problem", "problems"), "1 problem");
        assert_eq!(count(0, "problem", "problems"), "0 problems");
        assert_eq!(count(2, "problem", "problems"), "2 problems");
    }
}
