//! The `cordon explain` line a denial message names, so whoever was refused (a person or an
//! agent inside the sandbox) can ask which rule decided instead of retrying around it.
//!
//! Every layer that refuses something calls one of these, so the line is spelled one way
//! everywhere and always parses back as `cordon explain`'s own arguments.

/// `cordon explain METHOD URL` for an HTTP request a rule refused.
///
/// ```
/// assert_eq!(
///     cordon_policy::explain::hint_for_request("post", "https://api.example.com/v1/x"),
///     "cordon explain POST https://api.example.com/v1/x"
/// );
/// ```
pub fn hint_for_request(method: &str, url: &str) -> String {
    format!(
        "cordon explain {} {}",
        method.to_ascii_uppercase(),
        shell_word(url)
    )
}

/// `cordon explain HOST:PORT` for a connection refused before any HTTP was seen.
pub fn hint_for_host(host: &str, port: u16) -> String {
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    format!("cordon explain {}", shell_word(&format!("{host}:{port}")))
}

/// `cordon explain -- ARGV…` for a command an exec rule refused or held.
pub fn hint_for_command<S: AsRef<str>>(argv: &[S]) -> String {
    let mut out = String::from("cordon explain --");
    for a in argv {
        out.push(' ');
        out.push_str(&shell_word(a.as_ref()));
    }
    out
}

/// `cordon explain [--write] PATH` for a path.
pub fn hint_for_path(path: &str, write: bool) -> String {
    format!(
        "cordon explain {}{}",
        if write { "--write " } else { "" },
        shell_word(path)
    )
}

/// `plan` as the sandbox may read it (`cordon explain` inside a session): no credential
/// value is ever in a plan, but how one is fetched may hold one (a command's arguments), and
/// a judge URL may carry a key in its user info or query. Those are replaced by `…`; every
/// rule, pattern and origin stays, so decisions come out the same.
pub fn redacted(plan: &crate::Plan) -> crate::Plan {
    let mut p = plan.clone();
    for c in &mut p.credentials {
        if let crate::CredentialSource::Command(argv) = &mut c.source {
            argv.truncate(1);
            argv.push("…".into());
        }
    }
    if let Some(j) = &mut p.judge {
        j.url = redact_url(&j.url);
    }
    p
}

/// A URL with its user info and query replaced by `…`.
fn redact_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) => format!("…@{host}"),
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, _)) => format!("{path}?…"),
        None => tail.to_string(),
    };
    let sep = if scheme.is_empty() { "" } else { "://" };
    format!("{scheme}{sep}{authority}{tail}")
}

/// A TOML basic string (always double-quoted, escaped by hand so the spelling is fixed): the
/// one quoting of the TOML lines a denial or `cordon explain` offers to allow something. What
/// would be unsafe on a terminal ([`cordon_events::terminal::is_unsafe`]: controls, bidi
/// overrides) is written as a TOML `\uXXXX` escape, the same value, so neither the line shown
/// nor the rule written can reorder or drive what the person reads.
pub fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if cordon_events::terminal::is_unsafe(c) => {
                out.push_str(&format!("\\u{:04X}", u32::from(c)))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A word a POSIX shell reads back as itself: bare when it holds only safe characters,
/// otherwise single-quoted.
pub fn shell_word(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:@%+=,~^".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_line_uppercases_the_method_and_quotes_a_query() {
        assert_eq!(
            hint_for_request("get", "https://h.example/a?b=1&c=2"),
            "cordon explain GET 'https://h.example/a?b=1&c=2'"
        );
    }

    #[test]
    fn command_line_quotes_what_the_shell_would_split() {
        assert_eq!(
            hint_for_command(&["git", "commit", "-m", "it's done"]),
            r"cordon explain -- git commit -m 'it'\''s done'"
        );
        assert_eq!(
            hint_for_command(&["git", "push", "origin", "main"]),
            "cordon explain -- git push origin main"
        );
    }

    #[test]
    fn host_line_brackets_ipv6() {
        assert_eq!(hint_for_host("::1", 443), "cordon explain '[::1]:443'");
        assert_eq!(
            hint_for_host("example.com", 22),
            "cordon explain example.com:22"
        );
    }

    #[test]
    fn urls_lose_user_info_and_query() {
        assert_eq!(
            redact_url("https://u:sk-123@judge.example/v1?key=sk-9"),
            "https://…@judge.example/v1?…"
        );
        assert_eq!(
            redact_url("https://api.example.com"),
            "https://api.example.com"
        );
    }

    #[test]
    fn path_line_says_write_when_asked() {
        assert_eq!(
            hint_for_path("/home/u/.ssh/id_rsa", false),
            "cordon explain /home/u/.ssh/id_rsa"
        );
        assert_eq!(
            hint_for_path("/etc/x y", true),
            "cordon explain --write '/etc/x y'"
        );
        assert_eq!(shell_word(""), "''");
    }
}
