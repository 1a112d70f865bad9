//! The one pattern language of policy files, parsed once at load and matched by every layer.
//!
//! - [`glob_match`]: `*` matches any run of characters (including none, and including `/` and
//!   spaces), `?` exactly one character, everything else is literal. Used for HTTP paths,
//!   queries and headers, exec command lines and `[env] pass` names.
//! - [`HostPattern`]: how a rule names hosts, with the meaning made explicit instead of
//!   inferred from the text at each use: [`Exact`](HostPattern::Exact), strictly
//!   [`Below`](HostPattern::Below) a name (`*.example.com`), [`AtOrBelow`](HostPattern::AtOrBelow)
//!   (a `[dns] block` entry), [`Any`](HostPattern::Any) (`*`), or a general
//!   [`Glob`](HostPattern::Glob) over the name (`api-*.example.com`).
//!
//! Host names are compared in their canonical form: ASCII lower case, no trailing dot.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Whether `text` matches the glob `pattern` (see the module docs).
///
/// The classic backtrack-to-the-last-star algorithm over bytes: no recursion and no
/// allocation, so a hostile path or command line can neither blow the stack nor take
/// quadratic memory. `?` only ever starts at a character boundary and takes a whole UTF-8
/// character, and literal bytes of a valid pattern cannot match inside a character, so this
/// is exactly the character-level meaning.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    // The last `*` seen and the text position it currently extends to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
            continue;
        }
        if pi < p.len() && p[pi] == b'?' && is_char_start(t[ti]) {
            pi += 1;
            ti += utf8_width(t[ti]).min(t.len() - ti);
            continue;
        }
        if pi < p.len() && p[pi] == t[ti] && p[pi] != b'?' {
            pi += 1;
            ti += 1;
            continue;
        }
        match star {
            Some((sp, st)) => {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

fn is_char_start(b: u8) -> bool {
    b & 0xC0 != 0x80
}

fn utf8_width(b: u8) -> usize {
    match b {
        0xF0.. => 4,
        0xE0.. => 3,
        0xC0.. => 2,
        _ => 1,
    }
}

/// How a rule names hosts. Matching is on canonical names (see [`HostPattern::matches`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostPattern {
    /// Every host (`*`).
    Any,
    /// This name only.
    Exact(String),
    /// Names strictly below this one, at any depth (`*.example.com`), not the name itself.
    Below(String),
    /// This name and every name below it (a bare `[dns] block` entry).
    AtOrBelow(String),
    /// A glob over the whole name (`api-*.example.com`).
    Glob(String),
}

/// What a bare name means where a pattern is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bare {
    /// The name only (`[[network.allow]] host`, `[[http.rule]] host`, …).
    Exact,
    /// The name and everything below it (`[dns] block`).
    AtOrBelow,
}

/// Why a host pattern was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPatternError {
    /// Empty, or contains whitespace, `/` or `:` (a URL or `host:port` was written).
    NotAHost,
    /// An IP address where names are required.
    IpAddress,
    /// Too long overall (253) or a label too long (63) or empty.
    Length,
    /// A character outside letters, digits, `-`, `_` and dots.
    Character,
    /// A wildcard anywhere but a leading `*.` where only that form is accepted.
    Wildcard,
}

impl HostPatternError {
    /// Why, in words that finish "invalid host … : ".
    pub fn why(self) -> &'static str {
        match self {
            Self::NotAHost => "a host has no scheme, port, path or spaces",
            Self::IpAddress => {
                "it is an IP address; names only here (raw addresses go in [network] allow_ips)"
            }
            Self::Length => {
                "a host name has 1 to 253 characters and each dot-separated label 1 to 63"
            }
            Self::Character => "only letters, digits, `-`, `_` and dots",
            Self::Wildcard => "a wildcard may only be a leading `*.`",
        }
    }
}

fn canonical(text: &str) -> String {
    text.trim().trim_end_matches('.').to_ascii_lowercase()
}

fn check_name(name: &str) -> Result<(), HostPatternError> {
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Err(HostPatternError::IpAddress);
    }
    if name.is_empty() || name.len() > 253 || name.split('.').any(|l| l.is_empty() || l.len() > 63)
    {
        return Err(HostPatternError::Length);
    }
    if name.contains(['*', '?']) {
        return Err(HostPatternError::Wildcard);
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        return Err(HostPatternError::Character);
    }
    Ok(())
}

impl HostPattern {
    /// A DNS-strict pattern: a valid host name, or `*.` and one (what the gateway and the
    /// resolver decide by). `bare` says what a name without `*.` means.
    pub fn name(text: &str, bare: Bare) -> Result<Self, HostPatternError> {
        let c = canonical(text);
        let (below, name) = match c.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, c.as_str()),
        };
        check_name(name)?;
        Ok(match (below, bare) {
            (true, _) => Self::Below(name.to_string()),
            (false, Bare::Exact) => Self::Exact(name.to_string()),
            (false, Bare::AtOrBelow) => Self::AtOrBelow(name.to_string()),
        })
    }

    /// An HTTP-layer host glob: `*`, `*.name`, a name, or any glob over the name (no scheme,
    /// port, path or spaces).
    pub fn glob(text: &str) -> Result<Self, HostPatternError> {
        let c = canonical(text);
        if c.is_empty()
            || c.bytes()
                .any(|b| b.is_ascii_whitespace() || b == b'/' || b == b':')
        {
            return Err(HostPatternError::NotAHost);
        }
        if c == "*" {
            return Ok(Self::Any);
        }
        if let Some(rest) = c.strip_prefix("*.")
            && !rest.contains(['*', '?'])
        {
            return Ok(Self::Below(rest.to_string()));
        }
        if c.contains(['*', '?']) {
            return Ok(Self::Glob(c));
        }
        Ok(Self::Exact(c))
    }

    /// Whether `host` matches. `host` may be in any case and carry a trailing dot; nothing is
    /// allocated.
    pub fn matches(&self, host: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        match self {
            Self::Any => true,
            Self::Exact(n) => host.eq_ignore_ascii_case(n),
            Self::Below(n) => strictly_below(host, n),
            Self::AtOrBelow(n) => host.eq_ignore_ascii_case(n) || strictly_below(host, n),
            Self::Glob(g) => {
                if host.bytes().any(|b| b.is_ascii_uppercase()) {
                    glob_match(g, &host.to_ascii_lowercase())
                } else {
                    glob_match(g, host)
                }
            }
        }
    }

    /// The name a pattern is anchored at (`None` for `*` and general globs).
    pub fn anchor(&self) -> Option<&str> {
        match self {
            Self::Exact(n) | Self::Below(n) | Self::AtOrBelow(n) => Some(n),
            Self::Any | Self::Glob(_) => None,
        }
    }
}

fn strictly_below(host: &str, name: &str) -> bool {
    let (h, n) = (host.as_bytes(), name.as_bytes());
    h.len() > n.len() + 1
        && h[h.len() - n.len() - 1] == b'.'
        && h[h.len() - n.len()..].eq_ignore_ascii_case(n)
}

/// Parses an HTTP-layer host glob ([`HostPattern::glob`]).
impl std::str::FromStr for HostPattern {
    type Err = HostPatternError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::glob(s)
    }
}

/// As written in a policy file: `*`, `*.name`, `name` or the glob.
impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("*"),
            Self::Exact(n) | Self::AtOrBelow(n) | Self::Glob(n) => f.write_str(n),
            Self::Below(n) => write!(f, "*.{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("/v1/messages*", "/v1/messages"));
        assert!(glob_match("/v1/messages*", "/v1/messages/batches/x"));
        assert!(!glob_match("/v1/messages*", "/v2/messages"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("*make", "cmake"));
        assert!(!glob_match("su *", "sudo x"));
        assert!(glob_match("LC_*", "LC_ALL"));
        assert!(glob_match("*a*b*", "xxaxxbxx"));
        assert!(!glob_match("*a*b", "xxaxxbxxc"));
        // `?` is one character, not one byte.
        assert!(glob_match("?", "é"));
        assert!(glob_match("x?y", "x€y"));
        assert!(!glob_match("??", "é"));
        assert!(!glob_match("*??", "€"));
        assert!(glob_match("*??", "€a"));
        assert!(glob_match("*é", "aé"));
        // A long hostile text stays linear.
        let long = "a".repeat(20_000);
        assert!(!glob_match("*a*a*a*a*b", &long));
    }

    #[test]
    fn host_patterns_say_what_they_mean() {
        let exact = HostPattern::name("GitHub.com.", Bare::Exact).unwrap();
        assert_eq!(exact, HostPattern::Exact("github.com".into()));
        assert!(exact.matches("github.com") && exact.matches("GITHUB.COM."));
        assert!(!exact.matches("api.github.com"));

        let below = HostPattern::name("*.example.com", Bare::Exact).unwrap();
        assert!(below.matches("a.example.com") && below.matches("a.b.example.com"));
        assert!(!below.matches("example.com") && !below.matches("badexample.com"));

        let block = HostPattern::name("bad.test", Bare::AtOrBelow).unwrap();
        assert!(block.matches("bad.test") && block.matches("deep.sub.BAD.test"));
        assert!(!block.matches("notbad.test"));

        assert_eq!(HostPattern::glob("*").unwrap(), HostPattern::Any);
        let g = HostPattern::glob("api-*.example.com").unwrap();
        assert!(g.matches("api-eu.example.com") && g.matches("API-EU.example.com"));
        assert!(!g.matches("www.example.com"));
        assert_eq!(
            HostPattern::glob("*.x.test").unwrap(),
            HostPattern::Below("x.test".into())
        );
        assert_eq!(g.to_string(), "api-*.example.com");
        assert_eq!(below.to_string(), "*.example.com");
    }

    #[test]
    fn bad_host_patterns() {
        for (text, why) in [
            ("*", HostPatternError::Wildcard),
            ("a.*.b", HostPatternError::Wildcard),
            ("**.x", HostPatternError::Wildcard),
            ("", HostPatternError::Length),
            ("x..y", HostPatternError::Length),
            ("exa mple.com", HostPatternError::Character),
            ("10.0.0.1", HostPatternError::IpAddress),
        ] {
            assert_eq!(HostPattern::name(text, Bare::Exact), Err(why), "{text:?}");
        }
        for text in ["", "https://x", "x:443", "a b", "x/y"] {
            assert_eq!(
                HostPattern::glob(text),
                Err(HostPatternError::NotAHost),
                "{text:?}"
            );
        }
    }
}

#[cfg(test)]
#[path = "pattern_proptests.rs"]
mod proptests;
