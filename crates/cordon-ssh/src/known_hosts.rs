//! The user's `known_hosts`: which hosts a host key belongs to. Plain names, `[host]:port`,
//! wildcards, negations and hashed (`|1|salt|hash`) entries, as OpenSSH reads them; a hashed
//! or wildcard entry can only name hosts it is asked about (the candidates), since its names
//! are not in the file.

use std::path::Path;

use base64::Engine;

/// One host as `known_hosts` spells it: a name and the port (22 unless `[name]:port`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Host {
    pub name: String,
    pub port: u16,
}

impl Host {
    pub fn new(name: &str, port: u16) -> Self {
        Host {
            name: name.to_ascii_lowercase(),
            port,
        }
    }

    /// How OpenSSH writes it (and hashes it): `name` on port 22, else `[name]:port`.
    pub fn spelling(&self) -> String {
        if self.port == 22 {
            self.name.clone()
        } else {
            format!("[{}]:{}", self.name, self.port)
        }
    }

    fn parse(s: &str) -> Option<Host> {
        if let Some(rest) = s.strip_prefix('[') {
            let (name, port) = rest.split_once("]:")?;
            return Some(Host::new(name, port.parse().ok()?));
        }
        Some(Host::new(s, 22))
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.name, self.port)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Plain { negated: bool, text: String },
    Hashed { salt: Vec<u8>, hash: Vec<u8> },
}

impl Pattern {
    fn parse(p: &str) -> Option<Pattern> {
        if let Some(h) = p.strip_prefix("|1|") {
            let (salt, hash) = h.split_once('|')?;
            let b64 = base64::engine::general_purpose::STANDARD;
            return Some(Pattern::Hashed {
                salt: b64.decode(salt).ok()?,
                hash: b64.decode(hash).ok()?,
            });
        }
        let (negated, text) = match p.strip_prefix('!') {
            Some(t) => (true, t),
            None => (false, p),
        };
        Some(Pattern::Plain {
            negated,
            text: text.to_ascii_lowercase(),
        })
    }

    fn matches(&self, spelling: &str) -> bool {
        match self {
            Pattern::Plain { text, .. } => wildcard(text.as_bytes(), spelling.as_bytes()),
            Pattern::Hashed { salt, hash } => {
                let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, salt);
                ring::hmac::verify(&key, spelling.as_bytes(), hash).is_ok()
            }
        }
    }
}

/// OpenSSH's `match_pattern`: `*` any run, `?` any one character.
fn wildcard(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => wildcard(&p[1..], s) || (!s.is_empty() && wildcard(p, &s[1..])),
        (Some(b'?'), Some(_)) => wildcard(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => wildcard(&p[1..], &s[1..]),
        _ => false,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Marker {
    None,
    Revoked,
    CertAuthority,
}

#[derive(Debug, Clone)]
struct Entry {
    marker: Marker,
    patterns: Vec<Pattern>,
    key: Vec<u8>,
}

/// What `known_hosts` says of one host key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A `@revoked` line names it: never trusted, whatever else says so.
    Revoked,
    /// The hosts it belongs to (none: the key is unknown).
    Hosts(Vec<Host>),
}

/// The parsed file. Lines that do not parse are left out, as ssh leaves them out.
#[derive(Debug, Clone, Default)]
pub struct KnownHosts {
    entries: Vec<Entry>,
}

impl KnownHosts {
    pub fn parse(text: &str) -> KnownHosts {
        let entries = text.lines().filter_map(parse_line).collect();
        KnownHosts { entries }
    }

    /// Reads `path`; a missing file knows no hosts.
    pub fn load(path: &Path) -> std::io::Result<KnownHosts> {
        match std::fs::read_to_string(path) {
            Ok(t) => Ok(Self::parse(&t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(KnownHosts::default()),
            Err(e) => Err(e),
        }
    }

    /// Adds another file's entries (ssh reads `known_hosts` and `known_hosts2`).
    pub fn extend(&mut self, other: KnownHosts) {
        self.entries.extend(other.entries);
    }

    /// The hosts `key` (a public key blob) is listed for: every plain name of its lines, and
    /// those of `candidates` its hashed or wildcard names match. A negated name on a line
    /// keeps that host off it.
    pub fn hosts_for(&self, key: &[u8], candidates: &[Host]) -> Lookup {
        let mut out: Vec<Host> = Vec::new();
        for e in self.entries.iter().filter(|e| e.key == key) {
            match e.marker {
                Marker::Revoked => return Lookup::Revoked,
                // A CA signs host certificates; the bound key itself is not a host's.
                Marker::CertAuthority => continue,
                Marker::None => {}
            }
            let negated = |h: &Host| {
                let sp = h.spelling();
                e.patterns
                    .iter()
                    .any(|p| matches!(p, Pattern::Plain { negated: true, .. }) && p.matches(&sp))
            };
            let mut found: Vec<Host> = Vec::new();
            for p in &e.patterns {
                if let Pattern::Plain {
                    negated: false,
                    text,
                } = p
                    && !text.contains(['*', '?'])
                    && let Some(h) = Host::parse(text)
                {
                    found.push(h);
                }
            }
            for c in candidates {
                let sp = c.spelling();
                if e.patterns
                    .iter()
                    .any(|p| !matches!(p, Pattern::Plain { negated: true, .. }) && p.matches(&sp))
                {
                    found.push(c.clone());
                }
            }
            for h in found {
                if !negated(&h) && !out.contains(&h) {
                    out.push(h);
                }
            }
        }
        out.sort();
        Lookup::Hosts(out)
    }
}

fn parse_line(line: &str) -> Option<Entry> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let mut fields = line.split_whitespace();
    let mut first = fields.next()?;
    let marker = match first {
        "@revoked" => Marker::Revoked,
        "@cert-authority" => Marker::CertAuthority,
        m if m.starts_with('@') => return None,
        _ => Marker::None,
    };
    if marker != Marker::None {
        first = fields.next()?;
    }
    let patterns = first
        .split(',')
        .map(Pattern::parse)
        .collect::<Option<Vec<_>>>()?;
    let _type = fields.next()?;
    let key = base64::engine::general_purpose::STANDARD
        .decode(fields.next()?)
        .ok()?;
    Some(Entry {
        marker,
        patterns,
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(b: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    fn hashed(salt: &[u8], spelling: &str) -> String {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, salt);
        let tag = ring::hmac::sign(&key, spelling.as_bytes());
        format!("|1|{}|{}", b64(salt), b64(tag.as_ref()))
    }

    #[test]
    fn plain_bracketed_and_hashed_names_are_found() {
        let (k1, k2, k3) = (b"key-one".to_vec(), b"key-two".to_vec(), b"key-3".to_vec());
        let text = format!(
            "# comment\n\
             GitHub.com,140.82.1.1 ssh-ed25519 {}\n\
             [git.test]:2222 ssh-ed25519 {}\n\
             {} ssh-ed25519 {}\n\
             garbage\n",
            b64(&k1),
            b64(&k2),
            hashed(b"salt-salt-salt-salt-", "[secret.test]:2022"),
            b64(&k3),
        );
        let kh = KnownHosts::parse(&text);
        assert_eq!(
            kh.hosts_for(&k1, &[]),
            Lookup::Hosts(vec![
                Host::new("140.82.1.1", 22),
                Host::new("github.com", 22)
            ])
        );
        assert_eq!(
            kh.hosts_for(&k2, &[]),
            Lookup::Hosts(vec![Host::new("git.test", 2222)])
        );
        // A hashed name is found only among the candidates, with its port.
        assert_eq!(kh.hosts_for(&k3, &[]), Lookup::Hosts(vec![]));
        let c = [Host::new("secret.test", 22), Host::new("secret.test", 2022)];
        assert_eq!(
            kh.hosts_for(&k3, &c),
            Lookup::Hosts(vec![Host::new("secret.test", 2022)])
        );
        assert_eq!(kh.hosts_for(b"unknown", &c), Lookup::Hosts(vec![]));
    }

    #[test]
    fn wildcards_negations_and_markers() {
        let (k, r, ca) = (b"k".to_vec(), b"r".to_vec(), b"ca".to_vec());
        let text = format!(
            "*.corp.test,!bad.corp.test ssh-ed25519 {k}\n\
             ok.test ssh-ed25519 {r}\n@revoked * ssh-ed25519 {r}\n\
             @cert-authority *.test ssh-ed25519 {ca}\n",
            k = b64(&k),
            r = b64(&r),
            ca = b64(&ca),
        );
        let kh = KnownHosts::parse(&text);
        let c = [
            Host::new("a.corp.test", 22),
            Host::new("bad.corp.test", 22),
            Host::new("corp.test", 22),
        ];
        assert_eq!(
            kh.hosts_for(&k, &c),
            Lookup::Hosts(vec![Host::new("a.corp.test", 22)])
        );
        assert_eq!(kh.hosts_for(&r, &c), Lookup::Revoked);
        assert_eq!(kh.hosts_for(&ca, &c), Lookup::Hosts(vec![]));
        assert!(wildcard(b"a*c?e", b"abbbcde") && !wildcard(b"a*c", b"abd"));
    }
}
