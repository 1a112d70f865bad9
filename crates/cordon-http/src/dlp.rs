//! Outbound secret scanning: well-known token shapes (AWS access keys, GitHub, GitLab, Slack,
//! Stripe, OpenAI and Anthropic keys, private-key PEM blocks, JWTs) and exact secret values the
//! caller knows (configured credentials, secret-looking host variables) — also in their
//! base64 and percent-encoded forms — in a request's URL, headers or body prefix.
//!
//! A token going to its own issuer (an Anthropic key to `*.anthropic.com`) is how it is used,
//! not a leak: the policy's [`Exemption`]s say where each kind may go (the built-in policy
//! names each shape's issuers), each known value the hosts it may go to. Findings never carry
//! the secret: only its kind, where it was, and a redacted preview.
//!
//! ```
//! use cordon_http::dlp::{Exemption, Place, Scanner};
//! let issuers = cordon_policy::built_in_dlp_allow().iter().map(Exemption::from).collect();
//! let s = Scanner::new(Vec::new(), issuers);
//! let key = format!("AKIA{}", "Q".repeat(16));
//! let url = format!("https://paste.example/?k={key}");
//! let f = s.scan_request("paste.example", &url, &[], b"");
//! assert_eq!(f[0].kind, "aws-access-key");
//! assert_eq!(f[0].place, Place::Url);
//! // The same key going to AWS is not a finding.
//! assert!(s.scan_request("sts.amazonaws.com", &url, &[], b"").is_empty());
//! ```

use aho_corasick::AhoCorasick;
use cordon_policy::HostPattern;
use regex::bytes::{Regex, RegexSet};

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

impl Place {
    /// `URL`, `header` or `body`, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Place::Url => "URL",
            Place::Header => "header",
            Place::Body => "body",
        }
    }
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

/// A secret known by value.
#[derive(Clone)]
pub struct Known {
    /// Its name (`known:NAME` in findings).
    pub name: String,
    /// The value (never shown).
    pub value: String,
    /// The hosts it may go to.
    pub hosts: Vec<HostPattern>,
}

impl std::fmt::Debug for Known {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Known")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

/// Kinds of secret that may go to some hosts (`[[dlp.allow]]`).
#[derive(Debug, Clone, Default)]
pub struct Exemption {
    /// Finding kinds; `*` for all.
    pub kinds: Vec<String>,
    /// The hosts they may go to.
    pub hosts: Vec<HostPattern>,
}

impl From<&cordon_policy::DlpAllow> for Exemption {
    fn from(a: &cordon_policy::DlpAllow) -> Self {
        Exemption {
            kinds: a.kinds.clone(),
            hosts: a.hosts.clone(),
        }
    }
}

/// The token shapes: (kind, pattern), long enough that ordinary text, hashes, lockfiles and
/// base64 images do not match. Where each kind may go (its issuer's hosts) is policy: the
/// built-in `[[dlp.allow]]` entries. Shapes with a distinctive prefix are not word-bounded —
/// `xghp_…` or `AKIA…Q` must not slip past by touching a letter; the generic `sk-` and `eyJ`
/// ones are (`task-…` is ordinary text).
const SHAPES: &[(&str, &str)] = &[
    ("aws-access-key", r"(?-u)(?:AKIA|ASIA)[0-9A-Z]{16}"),
    ("github-token", r"(?-u)gh[pousr]_[A-Za-z0-9]{36,255}"),
    ("github-token", r"(?-u)github_pat_[A-Za-z0-9_]{60,255}"),
    ("gitlab-token", r"(?-u)glpat-[A-Za-z0-9_\-]{20,}"),
    ("slack-token", r"(?-u)xox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("stripe-key", r"(?-u)[sr]k_live_[A-Za-z0-9]{20,}"),
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

mod at_rest;
pub use at_rest::secret_in_file;

/// Secrets known by value are only matched when at least this long (shorter values would
/// match ordinary text).
const MIN_KNOWN: usize = 8;

/// The built-in shapes, compiled once per process when first needed (the first body scanned,
/// or a known value checked for its shape): compiling them was the largest CPU cost of
/// building the HTTP layer, paid before the sandbox could start, whether or not it ever sent
/// a request.
static COMPILED: std::sync::LazyLock<(RegexSet, Vec<(&'static str, Regex)>)> =
    std::sync::LazyLock::new(|| {
        let set =
            RegexSet::new(SHAPES.iter().map(|(_, p)| *p)).unwrap_or_else(|_| RegexSet::empty());
        let shapes = SHAPES
            .iter()
            .filter_map(|(k, p)| Regex::new(p).ok().map(|r| (*k, r)))
            .collect();
        (set, shapes)
    });

/// The scanner: the built-in shapes plus known values (and their encodings), and where each kind
/// may go.
#[derive(Debug)]
pub struct Scanner {
    /// Every form of every known value, one automaton; `forms[i]` names pattern `i`.
    known: Option<AhoCorasick>,
    forms: Vec<(String, usize)>,
    /// Per kind: the hosts it may go to.
    allowed: Vec<(String, Vec<HostPattern>)>,
    /// Credentials' placeholders: they keep their key's shape (`sk-ant-…`) but open nothing,
    /// so a token-shaped match inside one is no finding.
    placeholders: Vec<Vec<u8>>,
    /// Placeholders made during the session (a login's tokens rotated), ignored the same way.
    later: std::sync::RwLock<Vec<Vec<u8>>>,
}

impl Scanner {
    /// A scanner for the built-in shapes and `known` secrets; `exemptions` say where each kind
    /// may go (the plan's `[[dlp.allow]]`, the built-in issuers among them: see
    /// [`cordon_policy::built_in_dlp_allow`]). A known value that also has a known shape may go
    /// where that shape may (the host's `GITHUB_TOKEN` to GitHub).
    pub fn new(known: Vec<Known>, exemptions: Vec<Exemption>) -> Self {
        let mut allowed: Vec<(String, Vec<HostPattern>)> = Vec::new();
        let mut allow =
            |kind: &str, hosts: &[HostPattern]| match allowed.iter_mut().find(|(k, _)| k == kind) {
                Some((_, h)) => h.extend(hosts.iter().cloned()),
                None => allowed.push((kind.to_string(), hosts.to_vec())),
            };
        // The exemptions (the built-in issuers among them) first: a known value of a known
        // shape may go wherever that shape may.
        for e in &exemptions {
            for kind in &e.kinds {
                allow(kind, &e.hosts);
            }
        }
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut forms = Vec::new();
        for k in &known {
            if k.value.len() < MIN_KNOWN {
                continue;
            }
            let kind = format!("known:{}", k.name);
            let mut hosts = k.hosts.clone();
            for (shape, re) in &COMPILED.1 {
                if re.is_match(k.value.as_bytes()) {
                    let issuers = exemptions
                        .iter()
                        .filter(|e| e.kinds.iter().any(|x| x == shape));
                    hosts.extend(issuers.flat_map(|e| e.hosts.iter().cloned()));
                }
            }
            allow(&kind, &hosts);
            let v = k.value.as_bytes();
            let mut all = vec![v.to_vec(), crate::encoding::percent_encode(v).into_bytes()];
            for b in base64_forms(v) {
                // And its base64url twin (JWT payloads, URL-safe tokens).
                all.push(base64url(&b));
                all.push(b);
            }
            for form in all {
                if form.len() >= MIN_KNOWN && !patterns.contains(&form) {
                    forms.push((kind.clone(), form.len()));
                    patterns.push(form);
                }
            }
        }
        let known = (!patterns.is_empty())
            .then(|| AhoCorasick::new(&patterns).ok())
            .flatten();
        Self {
            known,
            forms,
            allowed,
            placeholders: Vec::new(),
            later: std::sync::RwLock::new(Vec::new()),
        }
    }

    /// Ignores token shapes that are part of `placeholder` from now on, as those given to
    /// [`Scanner::ignoring_placeholders`]: one made when a login's tokens rotated.
    pub fn ignore_placeholder(&self, placeholder: &str) {
        let mut later = self.later.write().unwrap_or_else(|p| p.into_inner());
        let p = placeholder.as_bytes().to_vec();
        if !p.is_empty() && !self.placeholders.contains(&p) && !later.contains(&p) {
            later.push(p);
        }
    }

    /// The same scanner, ignoring token shapes that are part of one of `placeholders`
    /// (credentials' placeholders keep their key's prefix; where one may go is the swap's
    /// business, which refuses it anywhere else).
    pub fn ignoring_placeholders(mut self, placeholders: &[String]) -> Self {
        self.placeholders = placeholders
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| p.as_bytes().to_vec())
            .collect();
        self
    }

    /// Every secret in `data`, found at `place` (wherever it goes).
    pub fn scan(&self, data: &[u8], place: Place) -> Vec<Finding> {
        let mut out = Vec::new();
        // One pass says whether any shape is there at all; most data has none.
        let hits = COMPILED.0.matches(data);
        if hits.matched_any() {
            // Where two shapes match the same bytes, the earlier (more specific) one names
            // them: `sk-ant-oat01-…` is an Anthropic token, though the generic `sk-…` of
            // OpenAI's shape matches it too — named after both, it would be refused on its
            // way to its own issuer.
            let mut taken: Vec<std::ops::Range<usize>> = Vec::new();
            for (i, (kind, re)) in COMPILED.1.iter().enumerate() {
                if !hits.matched(i) {
                    continue;
                }
                for m in re.find_iter(data) {
                    // AWS's documentation keys (`AKIAIOSFODNN7EXAMPLE`) are everywhere in
                    // tests and READMEs, and open nothing; nor do placeholders.
                    let within = |p: &Vec<u8>| memchr::memmem::find(p, m.as_bytes()).is_some();
                    if m.as_bytes().ends_with(b"EXAMPLE")
                        || self.placeholders.iter().any(within)
                        || self
                            .later
                            .read()
                            .unwrap_or_else(|p| p.into_inner())
                            .iter()
                            .any(within)
                    {
                        continue;
                    }
                    // An AWS key id is not part of a longer run of [0-9A-Z] (base32 text,
                    // run-together capitals), though it may touch lowercase or punctuation.
                    if *kind == "aws-access-key" {
                        let upper = |b: &u8| b.is_ascii_digit() || b.is_ascii_uppercase();
                        let before = m.start().checked_sub(1).map(|i| data[i]);
                        let after = data.get(m.end());
                        if before.as_ref().is_some_and(upper) || after.is_some_and(upper) {
                            continue;
                        }
                    }
                    if taken.iter().any(|t| t.start < m.end() && m.start() < t.end) {
                        continue;
                    }
                    taken.push(m.range());
                    out.push(finding(kind, place, m.as_bytes()));
                }
            }
        }
        if let Some(ac) = &self.known {
            for m in ac.find_overlapping_iter(data) {
                let (kind, len) = &self.forms[m.pattern().as_usize()];
                let f = finding(kind, place, &data[m.start()..m.start() + len]);
                if !out.contains(&f) {
                    out.push(f);
                }
            }
        }
        out
    }

    /// How many bytes a scan of a stream must see together so that no secret it knows can
    /// begin before them unseen: the longest known form, or what the shortest match of every
    /// shape needs (256 covers a PEM header with a long key type).
    pub fn window(&self) -> usize {
        self.forms
            .iter()
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(0)
            .max(256)
    }

    /// Whether a secret of `kind` may go to `host`.
    pub fn exempt(&self, kind: &str, host: &str) -> bool {
        self.allowed
            .iter()
            .filter(|(k, _)| k == kind || k == "*")
            .flat_map(|(_, hosts)| hosts)
            .any(|h| h.matches(host))
    }

    /// `text` with every secret this scanner knows replaced: token shapes by a redacted
    /// preview ([`redact`]), known values (in any of their encodings) by their name — for
    /// what goes into events and questions.
    pub fn redact<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        let shaped = redact(text);
        let Some(ac) = &self.known else {
            return shaped;
        };
        if !ac.is_match(shaped.as_bytes()) {
            return shaped;
        }
        let mut out = Vec::new();
        ac.replace_all_with_bytes(shaped.as_bytes(), &mut out, |m, _, dst| {
            dst.extend_from_slice(format!("‹{}›", self.forms[m.pattern().as_usize()].0).as_bytes());
            true
        });
        std::borrow::Cow::Owned(String::from_utf8_lossy(&out).into_owned())
    }

    /// Scans a whole request to `host`: URL, each header value, the body prefix. Secrets that
    /// may go to `host` are left out.
    pub fn scan_request(
        &self,
        host: &str,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Vec<Finding> {
        let mut out = self.scan(url.as_bytes(), Place::Url);
        // The server reads the URL decoded: so does the scan (a PEM header's spaces are %20).
        if url.contains(['%', '+']) {
            for f in self.scan(&crate::encoding::form_decode(url.as_bytes()), Place::Url) {
                if !out.contains(&f) {
                    out.push(f);
                }
            }
        }
        for (_, v) in headers {
            out.extend(self.scan(v.as_bytes(), Place::Header));
        }
        out.extend(self.scan(body, Place::Body));
        out.retain(|f| !self.exempt(&f.kind, host));
        out
    }
}

/// `text` with every token shape replaced by its redacted preview (`ghp_… (40 chars)`): for
/// what goes into events — command lines, URL paths — which may carry a secret.
pub fn redact(text: &str) -> std::borrow::Cow<'_, str> {
    static SHAPES_ONE: std::sync::LazyLock<Option<Regex>> = std::sync::LazyLock::new(|| {
        let all: Vec<String> = SHAPES.iter().map(|(_, p)| format!("(?:{p})")).collect();
        Regex::new(&all.join("|")).ok()
    });
    let Some(re) = SHAPES_ONE.as_ref() else {
        return std::borrow::Cow::Borrowed(text);
    };
    if !re.is_match(text.as_bytes()) {
        return std::borrow::Cow::Borrowed(text);
    }
    let out = re.replace_all(text.as_bytes(), |c: &regex::bytes::Captures<'_>| {
        let m = c.get(0).map_or(&b""[..], |m| m.as_bytes());
        let head = String::from_utf8_lossy(&m[..m.len().min(4)]).into_owned();
        format!("{head}… ({} chars)", m.len()).into_bytes()
    });
    std::borrow::Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// Whether a host variable is worth scanning for by value: a name that says it holds a
/// secret (not merely a vendor prefix: `AWS_REGION` is not one) and a value that looks like
/// one (long, no spaces, letters and digits) — so ordinary words never become findings.
pub fn secret_variable(name: &str, value: &str) -> bool {
    let named = cordon_policy::names_secret(name);
    let v = value.trim();
    named
        && v.len() >= 16
        && !v.bytes().any(|b| b.is_ascii_whitespace())
        && !v.starts_with('/')
        && v.bytes().any(|b| b.is_ascii_digit())
        && v.bytes().any(|b| b.is_ascii_alphabetic())
}

fn finding(kind: &str, place: Place, secret: &[u8]) -> Finding {
    let head: String = String::from_utf8_lossy(&secret[..secret.len().min(4)]).into_owned();
    Finding {
        kind: kind.to_string(),
        place,
        preview: format!("{head}… ({} chars)", secret.len()),
    }
}

/// The base64 text a value becomes inside longer base64, at each of the three byte offsets
/// it can start at (`Basic base64("user:" + secret)` puts it at offset 5): only the characters
/// that the value's own bits decide.
fn base64_forms(v: &[u8]) -> Vec<Vec<u8>> {
    (0..3usize)
        .filter_map(|k| {
            let mut padded = vec![0u8; k];
            padded.extend_from_slice(v);
            let text = crate::encoding::b64_encode(&padded, false).into_bytes();
            let first = (8 * k).div_ceil(6);
            let last = (8 * (k + v.len())).checked_sub(6)? / 6;
            (first <= last && last < text.len()).then(|| text[first..=last].to_vec())
        })
        .collect()
}

/// Standard base64 text as base64url.
fn base64url(b: &[u8]) -> Vec<u8> {
    b.iter()
        .map(|c| match c {
            b'+' => b'-',
            b'/' => b'_',
            c => *c,
        })
        .collect()
}

#[cfg(test)]
fn base64(v: &[u8]) -> Vec<u8> {
    crate::encoding::b64_encode(v, false).into_bytes()
}

/// Replaces real values with their placeholders in a stream of chunks (a response body on its
/// way into the sandbox), also where a value is split across chunks: bytes at the end of a
/// chunk that could begin a value are held back until the next chunk (or the end) shows
/// whether they do — only those, so a stream that pauses is not delayed. Where one value
/// begins another, the longest wins, as in one pass over the whole.
#[derive(Debug, Clone)]
pub struct Scrubber {
    ac: AhoCorasick,
    reals: Vec<Vec<u8>>,
    with: Vec<Vec<u8>>,
    hold: usize,
    tail: Vec<u8>,
    resize: bool,
}

impl Scrubber {
    /// `None` when there is nothing to scrub. Each pair is (real, placeholder).
    pub fn new(pairs: &[(String, String)]) -> Option<Self> {
        let mut seen: Vec<&(String, String)> = Vec::new();
        for p in pairs {
            if !p.0.is_empty() && !seen.iter().any(|q| q.0 == p.0) {
                seen.push(p);
            }
        }
        let hold = seen.iter().map(|(r, _)| r.len()).max()?.saturating_sub(1);
        let ac = AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .build(seen.iter().map(|(r, _)| r.as_bytes()))
            .ok()?;
        Some(Self {
            ac,
            reals: seen.iter().map(|(r, _)| r.as_bytes().to_vec()).collect(),
            with: seen.iter().map(|(_, p)| p.as_bytes().to_vec()).collect(),
            hold,
            tail: Vec::new(),
            resize: seen.iter().any(|(r, p)| r.len() != p.len()),
        })
    }

    /// Whether scrubbing can change a body's length (a placeholder not as long as its value).
    pub fn changes_length(&self) -> bool {
        self.resize
    }

    /// Replaces the matches in `buf` that start before `upto`; returns the output and where
    /// the consumed part ends.
    fn replace(&self, buf: &[u8], upto: usize) -> (Vec<u8>, usize) {
        let mut out = Vec::with_capacity(buf.len());
        let mut at = 0;
        for m in self.ac.find_iter(buf) {
            if m.start() >= upto {
                break;
            }
            out.extend_from_slice(&buf[at..m.start()]);
            out.extend_from_slice(&self.with[m.pattern().as_usize()]);
            at = m.end();
        }
        (out, at)
    }

    /// Takes the next chunk; returns what can be passed on now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.tail);
        buf.extend_from_slice(chunk);
        // The first place from which the rest could still grow into a value.
        let len = buf.len();
        let pend = (len.saturating_sub(self.hold)..len)
            .find(|&i| {
                self.reals
                    .iter()
                    .any(|r| r.len() > len - i && r.starts_with(&buf[i..]))
            })
            .unwrap_or(len);
        let (mut out, at) = self.replace(&buf, pend);
        let cut = at.max(pend);
        out.extend_from_slice(&buf[at..cut]);
        self.tail = buf.split_off(cut);
        out
    }

    /// Whether `v` holds a value to replace.
    pub fn finds(&self, v: &[u8]) -> bool {
        self.ac.is_match(v)
    }

    /// How many bytes are held back now.
    pub fn holding(&self) -> usize {
        self.tail.len()
    }

    /// The end of the stream: what was held back, scrubbed.
    pub fn finish(&mut self) -> Vec<u8> {
        let buf = std::mem::take(&mut self.tail);
        let (mut out, at) = self.replace(&buf, buf.len());
        out.extend_from_slice(&buf[at..]);
        out
    }

    /// One whole value (a header), scrubbed.
    pub fn scrub_all(&self, v: &[u8]) -> Vec<u8> {
        let (mut out, at) = self.replace(v, v.len());
        out.extend_from_slice(&v[at..]);
        out
    }
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
    fn a_placeholder_made_later_is_ignored_like_the_first_ones() {
        let r = |c: char, n: usize| std::iter::repeat_n(c, n).collect::<String>();
        let first = format!("sk-ant-ort01-{}", r('f', 60));
        let later = format!("sk-ant-ort01-{}", r('l', 60));
        let s = Scanner::new(Vec::new(), Vec::new())
            .ignoring_placeholders(std::slice::from_ref(&first));
        assert!(s.scan(first.as_bytes(), Place::Body).is_empty());
        assert_eq!(
            kinds(&s.scan(later.as_bytes(), Place::Body)),
            ["anthropic-key"]
        );
        s.ignore_placeholder(&later);
        assert!(s.scan(later.as_bytes(), Place::Body).is_empty());
    }

    #[test]
    fn an_anthropic_oauth_token_is_an_anthropic_key_only() {
        let r = |c: char, n: usize| std::iter::repeat_n(c, n).collect::<String>();
        let s = Scanner::new(Vec::new(), Vec::new());
        for token in [
            format!("sk-ant-oat01-{}-{}", r('o', 86), r('A', 8)),
            format!("sk-ant-ort01-{}", r('r', 90)),
            format!("sk-ant-api03-{}", r('k', 93)),
        ] {
            let f = s.scan(format!("Bearer {token}").as_bytes(), Place::Body);
            assert_eq!(kinds(&f), vec!["anthropic-key"], "{token}");
        }
        // OpenAI's own still are OpenAI's, beside an Anthropic one.
        let both = format!("sk-proj-{} sk-ant-oat01-{}", r('p', 48), r('o', 90));
        let f = s.scan(both.as_bytes(), Place::Body);
        assert_eq!(kinds(&f), vec!["anthropic-key", "openai-key"]);
    }

    #[test]
    fn each_shape_is_caught_in_url_header_and_body() {
        let s = Scanner::new(Vec::new(), Vec::new());
        for (kind, token) in samples() {
            let url = format!("https://x.test/upload?d={token}");
            let headers = vec![("x-data".to_string(), format!("Bearer {token}"))];
            let body = format!("{{\"note\": \"{token}\"}}");
            let f = s.scan_request("x.test", &url, &headers, body.as_bytes());
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
        let known = |name: &str, value: &str| Known {
            name: name.into(),
            value: value.into(),
            hosts: vec!["db.example".parse().unwrap()],
        };
        let s = Scanner::new(
            vec![known("db", &secret), known("short", "abc")],
            Vec::new(),
        );
        assert_eq!(kinds(&s.scan(secret.as_bytes(), Place::Body)), ["known:db"]);
        assert_eq!(
            kinds(&s.scan(&base64(secret.as_bytes()), Place::Body)),
            ["known:db"]
        );
        assert_eq!(
            kinds(&s.scan(
                &crate::encoding::percent_encode(secret.as_bytes()).into_bytes(),
                Place::Url
            )),
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
    fn distinctive_tokens_are_caught_touching_other_characters() {
        let s = Scanner::new(Vec::new(), Vec::new());
        for (kind, token) in samples() {
            if matches!(kind, "openai-key" | "anthropic-key" | "jwt" | "private-key") {
                continue;
            }
            let glued = format!("x{token}-q");
            assert!(
                kinds(&s.scan(glued.as_bytes(), Place::Body)).contains(&kind),
                "{kind} glued to letters"
            );
        }
    }

    #[test]
    fn ordinary_traffic_is_clean() {
        let s = Scanner::new(Vec::new(), Vec::new());
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
            b"aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
            b"JBSWY3DPEHPK3PXPAKIAQQQQQQQQQQQQQQQQJBSWY3DP",
            b"EASTASIAPACIFICDATACENTER1",
        ] {
            let f = s.scan(data, Place::Body);
            assert!(
                f.is_empty(),
                "false positive: {f:?} in {:?}",
                String::from_utf8_lossy(&data[..data.len().min(80)])
            );
        }
    }

    #[test]
    fn the_kinds_are_the_policys() {
        let mut kinds: Vec<&str> = SHAPES.iter().map(|(k, _)| *k).collect();
        kinds.dedup();
        assert_eq!(kinds, cordon_policy::DLP_KINDS);
    }

    #[test]
    fn secrets_may_go_to_their_issuers_and_exempted_hosts_only() {
        let ghp = format!("ghp_{}", "a".repeat(36));
        let jwt = format!(
            "eyJ{}.eyJ{}.{}",
            "h".repeat(20),
            "p".repeat(20),
            "s".repeat(30)
        );
        let s = Scanner::new(
            vec![
                Known {
                    name: "GITHUB_TOKEN".into(),
                    value: ghp.clone(),
                    hosts: Vec::new(),
                },
                Known {
                    name: "db".into(),
                    value: "db-password-0123456789".into(),
                    hosts: vec!["db.internal".parse().unwrap()],
                },
            ],
            cordon_policy::built_in_dlp_allow()
                .iter()
                .map(Exemption::from)
                .chain([Exemption {
                    kinds: vec!["jwt".into()],
                    hosts: vec!["*.auth.example".parse().unwrap()],
                }])
                .collect(),
        );
        let h = |v: &str| vec![("authorization".to_string(), format!("Bearer {v}"))];
        assert!(
            s.scan_request("api.github.com", "/user", &h(&ghp), b"")
                .is_empty()
        );
        let leak = s.scan_request("paste.example", "/", &h(&ghp), b"");
        assert_eq!(kinds(&leak), ["github-token", "known:GITHUB_TOKEN"]);
        assert!(
            s.scan_request("id.auth.example", "/", &h(&jwt), b"")
                .is_empty()
        );
        assert_eq!(
            kinds(&s.scan_request("auth.example", "/", &h(&jwt), b"")),
            ["jwt"]
        );
        let body = b"password=db-password-0123456789";
        assert!(s.scan_request("db.internal", "/", &[], body).is_empty());
        assert_eq!(
            kinds(&s.scan_request("elsewhere.example", "/", &[], body)),
            ["known:db"]
        );
    }

    #[test]
    fn known_values_are_caught_in_base64_at_any_offset() {
        let secret = "s3cr3t-value-0123456789";
        let s = Scanner::new(
            vec![Known {
                name: "x".into(),
                value: secret.into(),
                hosts: Vec::new(),
            }],
            Vec::new(),
        );
        for prefix in ["", "u:", "ab:", "user:", "x-access-token:"] {
            let b = base64(format!("{prefix}{secret}!?").as_bytes());
            assert_eq!(
                kinds(&s.scan(&base64url(&b), Place::Body)),
                ["known:x"],
                "base64url after {prefix:?}"
            );
            assert_eq!(
                kinds(&s.scan(&b, Place::Header)),
                ["known:x"],
                "after {prefix:?}"
            );
        }
    }

    #[test]
    fn redaction_keeps_only_a_preview() {
        for (_, token) in samples() {
            let line = format!("curl -H 'x: {token}' https://x.test/");
            let r = redact(&line);
            assert!(!r.contains(&token[4..]), "{r}");
            assert!(
                r.contains(&format!("{}… ({} chars)", &token[..4], token.len())),
                "{r}"
            );
        }
        assert!(matches!(
            redact("cargo build -j2"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_scanner_redacts_its_known_values_by_name() {
        let s = Scanner::new(
            vec![Known {
                name: "DB_PASSWORD".into(),
                value: "db pass/0123456789".into(),
                hosts: Vec::new(),
            }],
            Vec::new(),
        );
        let ghp = format!("ghp_{}", "a".repeat(36));
        let line = format!("/x/db%20pass%2F0123456789/{ghp} psql -W 'db pass/0123456789'");
        let r = s.redact(&line);
        assert!(!r.contains("0123456789"), "{r}");
        assert_eq!(r.matches("‹known:DB_PASSWORD›").count(), 2, "{r}");
        assert!(r.contains("ghp_… (40 chars)"), "{r}");
    }

    #[test]
    fn only_variables_that_hold_secrets_are_scanned_for() {
        assert!(secret_variable(
            "GITHUB_TOKEN",
            "ghp_0123456789abcdefABCDEF"
        ));
        assert!(secret_variable(
            "MY_SERVICE_API_KEY",
            "k3y-0123456789abcdef"
        ));
        assert!(!secret_variable("AWS_REGION", "us-east-1"));
        assert!(!secret_variable("GIT_AUTHOR_NAME", "Jane Doe the Second 2"));
        assert!(!secret_variable(
            "GITHUB_WORKSPACE",
            "/home/runner/work/x/x1"
        ));
        assert!(!secret_variable("NPM_TOKEN", "short1"));
        assert!(!secret_variable(
            "PASSWORD_HINT",
            "the name of my first dog 1"
        ));
    }

    #[test]
    fn the_scrubber_replaces_values_split_across_chunks() {
        let real = "REAL-0123456789-secret";
        let ph = "cordon-abcdefghijklmno";
        assert_eq!(real.len(), ph.len());
        let text = format!("a{real}b{real}c and {real}");
        let want = text.replace(real, ph);
        for split in [1, 2, 3, 5, 7, 11, 64] {
            let mut s = Scrubber::new(&[(real.to_string(), ph.to_string())]).unwrap();
            let mut got = Vec::new();
            for chunk in text.as_bytes().chunks(split) {
                got.extend(s.push(chunk));
            }
            got.extend(s.finish());
            assert_eq!(String::from_utf8(got).unwrap(), want, "chunks of {split}");
        }
        assert!(Scrubber::new(&[]).is_none());
    }

    #[test]
    fn the_scrubber_agrees_with_one_pass_at_every_split() {
        let pairs = vec![
            ("abcd".to_string(), "PH-1".to_string()),
            ("abcdefgh".to_string(), "PH-LONG!".to_string()),
            ("cdxy".to_string(), "zz".to_string()),
        ];
        let text = "xxabcdefgh..abcd..abcdxy..cdxy.abc";
        let whole = {
            let s = Scrubber::new(&pairs).unwrap();
            String::from_utf8(s.scrub_all(text.as_bytes())).unwrap()
        };
        assert_eq!(whole, "xxPH-LONG!..PH-1..PH-1xy..zz.abc");
        for i in 0..=text.len() {
            for j in i..=text.len() {
                let mut s = Scrubber::new(&pairs).unwrap();
                let mut got = s.push(&text.as_bytes()[..i]);
                got.extend(s.push(&text.as_bytes()[i..j]));
                got.extend(s.push(&text.as_bytes()[j..]));
                got.extend(s.finish());
                assert_eq!(String::from_utf8(got).unwrap(), whole, "split at {i}, {j}");
            }
        }
        assert!(Scrubber::new(&pairs).unwrap().changes_length());
    }

    #[test]
    fn the_scrubber_holds_back_only_what_could_begin_a_value() {
        let mut s = Scrubber::new(&[("secret-value".into(), "cordon-xxxxx".into())]).unwrap();
        assert_eq!(s.push(b"data: hello\n\n"), b"data: hello\n\n");
        assert_eq!(s.holding(), 0);
        assert_eq!(s.push(b"x secr"), b"x ");
        assert_eq!(s.holding(), 4);
        assert_eq!(s.push(b"et-value!"), b"cordon-xxxxx!");
        assert!(!s.changes_length());
    }
}
