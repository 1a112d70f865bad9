//! Outbound secret scanning: well-known token shapes (AWS access keys, GitHub, GitLab, Slack,
//! Stripe, OpenAI and Anthropic keys, private-key PEM blocks, JWTs) and exact secret values the
//! caller knows (configured credentials, secret-looking host variables) — also in their
//! base64 and percent-encoded forms — in a request's URL, headers or body prefix.
//!
//! Findings never carry the secret: only its kind, where it was, and a redacted preview.
//! Not wired into the interceptor yet (issue 6 decides where and with what action).

use regex::bytes::Regex;

/// Where in a request a secret was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The URL (path or query).
    Url,
    /// A header value.
    Header,
    /// The body (prefix).
    Body,
}

/// One secret seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What it looks like (`aws-access-key`, `github-token`, …, or `known:NAME`).
    pub kind: String,
    /// Where.
    pub place: Place,
    /// The first four characters and the length, never more.
    pub preview: String,
}

/// The token shapes, as (kind, pattern). Word-bounded and long enough that ordinary text,
/// hashes, lockfiles and base64 images do not match.
const SHAPES: &[(&str, &str)] = &[
    ("aws-access-key", r"(?-u)\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("github-token", r"(?-u)\bgh[pousr]_[A-Za-z0-9]{36,255}\b"),
    ("github-token", r"(?-u)\bgithub_pat_[A-Za-z0-9_]{60,255}\b"),
    ("gitlab-token", r"(?-u)\bglpat-[A-Za-z0-9_\-]{20,}"),
    ("slack-token", r"(?-u)\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("stripe-key", r"(?-u)\b[sr]k_live_[A-Za-z0-9]{20,}\b"),
    ("anthropic-key", r"(?-u)\bsk-ant-[A-Za-z0-9_\-]{32,}"),
    (
        "openai-key",
        r"(?-u)\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{40,}",
    ),
    (
        "private-key",
        r"(?-u)-----BEGIN (?:[A-Z0-9]+ )?PRIVATE KEY-----",
    ),
    (
        "jwt",
        r"(?-u)\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{16,}",
    ),
];

/// Secrets known by value are only matched when at least this long (shorter values would
/// match ordinary text).
const MIN_KNOWN: usize = 8;

/// The scanner: compiled shapes plus known values (and their encodings).
#[derive(Debug)]
pub struct Scanner {
    shapes: Vec<(&'static str, Regex)>,
    known: Vec<(String, Vec<u8>)>,
}

impl Scanner {
    /// A scanner for the built-in shapes and `known` (name, value) secrets.
    pub fn new(known: &[(String, String)]) -> Self {
        let shapes = SHAPES
            .iter()
            .filter_map(|(k, p)| Regex::new(p).ok().map(|r| (*k, r)))
            .collect();
        let mut k = Vec::new();
        for (name, value) in known {
            if value.len() < MIN_KNOWN {
                continue;
            }
            let v = value.as_bytes();
            for form in [v.to_vec(), base64(v), percent(v)] {
                if !k.iter().any(|(_, f): &(String, Vec<u8>)| *f == form) {
                    k.push((format!("known:{name}"), form));
                }
            }
        }
        Self { shapes, known: k }
    }

    /// Every secret in `data`, found at `place`.
    pub fn scan(&self, data: &[u8], place: Place) -> Vec<Finding> {
        let mut out = Vec::new();
        for (kind, re) in &self.shapes {
            for m in re.find_iter(data) {
                out.push(finding(kind, place, m.as_bytes()));
            }
        }
        for (kind, form) in &self.known {
            if find(data, form) {
                out.push(finding(kind, place, form));
            }
        }
        out
    }

    /// Scans a whole request: URL, each header value, the body prefix.
    pub fn scan_request(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Vec<Finding> {
        let mut out = self.scan(url.as_bytes(), Place::Url);
        for (_, v) in headers {
            out.extend(self.scan(v.as_bytes(), Place::Header));
        }
        out.extend(self.scan(body, Place::Body));
        out
    }
}

fn finding(kind: &str, place: Place, secret: &[u8]) -> Finding {
    let head: String = String::from_utf8_lossy(&secret[..secret.len().min(4)]).into_owned();
    Finding {
        kind: kind.to_string(),
        place,
        preview: format!("{head}… ({} chars)", secret.len()),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

fn base64(v: &[u8]) -> Vec<u8> {
    // Unpadded: the encoded secret is searched for inside longer base64 text.
    crate::b64::encode(v, false).into_bytes()
}

fn percent(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for &b in v {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b);
        } else {
            out.extend(format!("%{b:02X}").bytes());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(f: &[Finding]) -> Vec<&str> {
        f.iter().map(|x| x.kind.as_str()).collect()
    }

    /// Built at run time so no real-looking token sits in the source as one string.
    fn samples() -> Vec<(&'static str, String)> {
        let r = |c: char, n: usize| std::iter::repeat_n(c, n).collect::<String>();
        vec![
            ("aws-access-key", format!("AKIA{}", r('Q', 16))),
            ("github-token", format!("ghp_{}", r('a', 36))),
            ("github-token", format!("github_pat_{}", r('B', 70))),
            ("gitlab-token", format!("glpat-{}", r('x', 20))),
            ("slack-token", format!("xoxb-{}", r('1', 24))),
            ("stripe-key", format!("sk_live_{}", r('Z', 24))),
            ("anthropic-key", format!("sk-ant-api03-{}", r('k', 40))),
            ("openai-key", format!("sk-proj-{}", r('p', 48))),
            (
                "private-key",
                "-----BEGIN OPENSSH PRIVATE KEY-----".to_string(),
            ),
            (
                "jwt",
                format!("eyJ{}.eyJ{}.{}", r('h', 20), r('p', 20), r('s', 30)),
            ),
        ]
    }

    #[test]
    fn each_shape_is_caught_in_url_header_and_body() {
        let s = Scanner::new(&[]);
        for (kind, token) in samples() {
            let url = format!("https://x.test/upload?d={token}");
            let headers = vec![("x-data".to_string(), format!("Bearer {token}"))];
            let body = format!("{{\"note\": \"{token}\"}}");
            let f = s.scan_request(&url, &headers, body.as_bytes());
            let places: Vec<Place> = f
                .iter()
                .filter(|x| x.kind == kind)
                .map(|x| x.place)
                .collect();
            assert!(places.contains(&Place::Url), "{kind} in URL: {f:?}");
            assert!(places.contains(&Place::Header), "{kind} in header: {f:?}");
            assert!(places.contains(&Place::Body), "{kind} in body: {f:?}");
            for x in &f {
                assert!(!x.preview.contains(&token[4..]), "preview leaks {kind}");
            }
        }
    }

    #[test]
    fn known_values_are_caught_in_their_encodings() {
        let secret = "hunter2-but-longer!".to_string();
        let s = Scanner::new(&[
            ("db".into(), secret.clone()),
            ("short".into(), "abc".into()),
        ]);
        assert_eq!(kinds(&s.scan(secret.as_bytes(), Place::Body)), ["known:db"]);
        assert_eq!(
            kinds(&s.scan(&base64(secret.as_bytes()), Place::Body)),
            ["known:db"]
        );
        assert_eq!(
            kinds(&s.scan(&percent(secret.as_bytes()), Place::Url)),
            ["known:db"]
        );
        assert!(
            s.scan(b"abc abc abc", Place::Body).is_empty(),
            "too short to match"
        );
        assert_eq!(base64(b"Man"), b"TWFu");
        assert_eq!(base64(b"Ma"), b"TWE");
    }

    #[test]
    fn ordinary_traffic_is_clean() {
        let s = Scanner::new(&[]);
        let json = br#"{"model":"claude","messages":[{"role":"user","content":"Refactor the parser; keep the skeleton and ask before deleting files."}],"max_tokens":1024}"#;
        let lock = br#""node_modules/left-pad": {"version": "1.3.0", "resolved": "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz", "integrity": "sha512-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQ9Zc+JvMJ7nv7yrYzwk3M5FLAZBd03fV9rH0hwW8rtrG1PQ=="}"#;
        let mut png = b"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==".to_vec();
        png.extend(std::iter::repeat_n(b'A', 4096));
        let sha = b"commit 9fceb02d0ae598e95dc970b74767f19372d61af8 sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        for data in [
            &json[..],
            &lock[..],
            &png[..],
            &sha[..],
            b"task-skeleton sk-learn",
            b"AKIA is a prefix",
        ] {
            let f = s.scan(data, Place::Body);
            assert!(
                f.is_empty(),
                "false positive: {f:?} in {:?}",
                String::from_utf8_lossy(&data[..data.len().min(80)])
            );
        }
    }
}
