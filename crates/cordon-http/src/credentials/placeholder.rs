//! Placeholders that stay the same across sessions, so a client that remembers its key by
//! value (Claude Code approves an API key by its tail) sees the same one each time — and that
//! no one can work out without the user's key.
//!
//! A placeholder is HMAC-SHA256 of (credential name, real value) under a 32-byte secret kept
//! 0600 in cordon's data directory (which every sandbox has masked): the same credential and
//! value give the same placeholder for this user, a new value a new one, and nothing inside
//! the sandbox can derive the value from it or the next placeholder from this one. A key with
//! a known prefix keeps it, its length and its characters (`sk-ant-api03-…`, `sk-proj-…`,
//! `AIza…`, `ghp_…`), since clients check those; anything else becomes `cordon-` and hex.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The user's placeholder secret. Never leaves the supervisor; never printed.
#[derive(Clone)]
pub struct PlaceholderKey([u8; 32]);

impl std::fmt::Debug for PlaceholderKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlaceholderKey(…)")
    }
}

/// Why the placeholder secret cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Reading, creating or securing the file failed.
    #[error("placeholder secret {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not 32 bytes.
    #[error(
        "placeholder secret {}: {len} bytes, not 32; remove it and cordon makes a new one (placeholders then change once)",
        path.display()
    )]
    Malformed {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: usize,
    },
}

/// Prefixes clients check, longest first wins.
const PREFIXES: &[&str] = &[
    "sk-ant-api03-",
    "sk-ant-admin01-",
    "sk-ant-oat01-",
    "sk-ant-ort01-",
    "sk-ant-",
    "sk-proj-",
    "sk-svcacct-",
    "sk-admin-",
    "sk-or-v1-",
    "sk-",
    "AIza",
    "github_pat_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "hf_",
    "gsk_",
    "xai-",
    // Google OAuth access tokens.
    "ya29.",
];

/// Random characters after a known prefix at least (a short value gets a longer placeholder).
const MIN_RANDOM: usize = 16;

impl PlaceholderKey {
    /// A key from its bytes (tests, or a caller that keeps it elsewhere).
    pub fn from_bytes(b: [u8; 32]) -> Self {
        Self(b)
    }

    /// A key for this process only (placeholders then differ from the next session's): for
    /// when the user's cannot be had.
    pub fn ephemeral() -> std::io::Result<Self> {
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut key))?;
        Ok(Self(key))
    }

    /// The key at `path`, made (0600, from the kernel's random source) on first use. Two
    /// sessions starting at once agree: the file appears whole or not at all (a hard link of
    /// a finished temporary file), and the loser reads the winner's.
    pub fn load_or_create(path: &Path) -> Result<Self, KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io)?;
        }
        match std::fs::read(path) {
            Ok(b) => return Self::checked(path, &b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut key))
            .map_err(io)?;
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&key).and_then(|()| f.sync_all()))
            .map_err(io)?;
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(Self(key)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Self::checked(path, &std::fs::read(path).map_err(io)?)
            }
            Err(e) => Err(io(e)),
        }
    }

    /// The key read from `path`, which is made 0600 if it was looser.
    fn checked(path: &Path, b: &[u8]) -> Result<Self, KeyError> {
        let key: [u8; 32] = b.try_into().map_err(|_| KeyError::Malformed {
            path: path.to_path_buf(),
            len: b.len(),
        })?;
        let meta = std::fs::metadata(path).map_err(|source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(
                |source| KeyError::Io {
                    path: path.to_path_buf(),
                    source,
                },
            )?;
        }
        Ok(Self(key))
    }
}

/// HMAC-SHA256 (RFC 2104) of `msg` under a 32-byte key.
fn hmac(key: &[u8; 32], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    k[..32].copy_from_slice(key);
    let pad = |b: u8| k.map(|x| x ^ b);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// Bytes derived from (name, value, attempt): HMAC blocks with a counter.
struct Derived<'a> {
    key: &'a PlaceholderKey,
    msg: Vec<u8>,
    block: [u8; 32],
    at: usize,
    counter: u32,
}

impl<'a> Derived<'a> {
    fn new(key: &'a PlaceholderKey, name: &str, real: &str, attempt: u32) -> Self {
        // Length-prefixed, so (name, value) pairs never run together ambiguously.
        let mut msg = b"cordon placeholder v1\0".to_vec();
        msg.extend_from_slice(&(name.len() as u64).to_be_bytes());
        msg.extend_from_slice(name.as_bytes());
        msg.extend_from_slice(&(real.len() as u64).to_be_bytes());
        msg.extend_from_slice(real.as_bytes());
        msg.extend_from_slice(&attempt.to_be_bytes());
        Self {
            key,
            msg,
            block: [0; 32],
            at: 32,
            counter: 0,
        }
    }

    fn byte(&mut self) -> u8 {
        if self.at == 32 {
            let mut m = self.msg.clone();
            m.extend_from_slice(&self.counter.to_be_bytes());
            self.block = hmac(&self.key.0, &m);
            self.counter += 1;
            self.at = 0;
        }
        self.at += 1;
        self.block[self.at - 1]
    }

    /// One of `set`, uniformly (rejection sampling).
    fn pick(&mut self, set: &[u8]) -> char {
        let n = set.len();
        let limit = 256 - 256 % n;
        loop {
            let b = usize::from(self.byte());
            if b < limit {
                return char::from(set[b % n]);
            }
        }
    }
}

/// The placeholder for credential `name` holding `real`, under `key` (see the module docs).
/// Never equal to the value, never containing it or contained in it.
pub fn placeholder(key: &PlaceholderKey, name: &str, real: &str) -> String {
    let mut attempt = 0;
    loop {
        let mut d = Derived::new(key, name, real, attempt);
        // A few tries in the value's shape; a value too short to leave a placeholder of that
        // shape without itself inside (`c`, a bare prefix) gets plain hex.
        let p = if attempt < 4 {
            shaped(&mut d, real)
        } else {
            hex(&mut d, real.len().max(12))
        };
        if !p.contains(real) && !real.contains(&p) {
            return p;
        }
        attempt += 1;
    }
}

fn hex(d: &mut Derived<'_>, len: usize) -> String {
    (0..len).map(|_| d.pick(b"0123456789abcdef")).collect()
}

fn shaped(d: &mut Derived<'_>, real: &str) -> String {
    if let Some(p) = jwt_shaped(d, real) {
        return p;
    }
    let prefix = PREFIXES
        .iter()
        .filter(|p| real.starts_with(**p))
        .max_by_key(|p| p.len());
    let rest = prefix.map(|p| &real[p.len()..]);
    match (prefix, rest) {
        (Some(p), Some(rest))
            if !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) =>
        {
            let set = charset(rest);
            let mut out = p.to_string();
            for _ in 0..rest.len().max(MIN_RANDOM) {
                out.push(d.pick(&set));
            }
            out
        }
        _ => {
            // As long as the value (so scrubbing a response keeps its length), at least 12.
            let len = real.len().max(12);
            format!("cordon-{}", hex(d, len.saturating_sub(7)))
        }
    }
}

/// A JWT (an OAuth access or ID token) keeps its header and claims, which agents decode to
/// learn the account, plan and expiry, and gets a signature of cordon's own: the claims are
/// not what makes it a credential, the signature is, and a placeholder's verifies nowhere.
fn jwt_shaped(d: &mut Derived<'_>, real: &str) -> Option<String> {
    let b64url = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let mut parts = real.split('.');
    let (h, c, sig) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !h.starts_with("eyJ") || ![h, c, sig].iter().all(|p| b64url(p)) {
        return None;
    }
    let set: Vec<u8> = (b'A'..=b'Z')
        .chain(b'a'..=b'z')
        .chain(b'0'..=b'9')
        .chain(*b"-_")
        .collect();
    let fresh: String = (0..sig.len().max(MIN_RANDOM))
        .map(|_| d.pick(&set))
        .collect();
    Some(format!("{h}.{c}.{fresh}"))
}

/// The characters a placeholder's random part is drawn from: each class the real value's
/// rest uses (lower, upper, digits, each punctuation mark), all of a class alike — the shape
/// of the value's alphabet, not of the value.
fn charset(rest: &str) -> Vec<u8> {
    let has = |f: fn(&u8) -> bool| rest.as_bytes().iter().any(f);
    let mut set = Vec::new();
    if has(u8::is_ascii_lowercase) {
        set.extend(b'a'..=b'z');
    }
    if has(u8::is_ascii_uppercase) {
        set.extend(b'A'..=b'Z');
    }
    if has(u8::is_ascii_digit) || set.is_empty() {
        set.extend(b'0'..=b'9');
    }
    for p in *b"-_." {
        if rest.as_bytes().contains(&p) {
            set.push(p);
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> PlaceholderKey {
        PlaceholderKey::from_bytes([b; 32])
    }

    #[test]
    fn hmac_matches_a_reference_implementation() {
        // Python's hmac module: hmac.new(b"\x0b" * 32, b"Hi There", "sha256").hexdigest().
        let got = hmac(&[0x0b; 32], b"Hi There");
        let hex: String = got.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7"
        );
    }

    #[test]
    fn same_name_value_and_key_same_placeholder_otherwise_not() {
        let real = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789AA";
        let a = placeholder(&key(1), "anthropic", real);
        assert_eq!(a, placeholder(&key(1), "anthropic", real));
        assert_ne!(a, placeholder(&key(2), "anthropic", real), "another user");
        assert_ne!(a, placeholder(&key(1), "other", real), "another credential");
        let mut changed = real.to_string();
        changed.pop();
        changed.push('B');
        assert_ne!(
            a,
            placeholder(&key(1), "anthropic", &changed),
            "another value"
        );
        assert!(
            a.starts_with("sk-ant-api03-") && a.len() == real.len(),
            "{a}"
        );
        assert!(!a.contains(&real[13..]) && a != real);
    }

    #[test]
    fn known_prefixes_keep_their_shape() {
        for real in [
            "sk-proj-abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789_-T3BlbkFJ",
            "sk-0123456789abcdefghijklmnopqrstuvwxyzABCDEF",
            "AIzaSyA1b2C3d4E5f6G7h8I9j0K_lMnOpQrStU",
            "ghp_0123456789abcdefghijABCDEFGHIJ012345",
        ] {
            let p = placeholder(&key(7), "k", real);
            let prefix = PREFIXES
                .iter()
                .filter(|x| real.starts_with(**x))
                .max_by_key(|x| x.len())
                .unwrap();
            assert!(p.starts_with(prefix), "{real} → {p}");
            assert_eq!(p.len(), real.len(), "{real} → {p}");
            let set = charset(&real[prefix.len()..]);
            assert!(p[prefix.len()..].bytes().all(|b| set.contains(&b)), "{p}");
            assert_ne!(p, real);
        }
        // Digits only stay digits; an unknown shape is cordon's own.
        let p = placeholder(&key(7), "k", "ghp_1234567890123456789012345678901234");
        assert!(p[4..].bytes().all(|b| b.is_ascii_digit()), "{p}");
        let p = placeholder(&key(7), "k", "tok-1234567890abcdef");
        assert!(p.starts_with("cordon-") && p.len() == 20, "{p}");
        assert_eq!(placeholder(&key(7), "k", "abc").len(), 12);
        // Values too short for their shape never end up inside their placeholder.
        for real in ["sk-", "c", "0", "cordon-", "ab"] {
            let p = placeholder(&key(7), "k", real);
            assert!(!p.contains(real) && p.len() >= 12, "{real} → {p}");
        }
        // Short after its prefix: more random characters than the value had.
        let p = placeholder(&key(7), "k", "sk-abc");
        assert!(p.starts_with("sk-") && p.len() == 3 + MIN_RANDOM, "{p}");
    }

    #[test]
    fn a_jwt_keeps_its_header_and_claims_and_gets_another_signature() {
        let real =
            "eyJhbGciOiJSUzI1NiJ9.eyJlbWFpbCI6ImFAYi5jIn0.c2lnbmF0dXJlLXJlYWwtMDEyMzQ1Njc4OQ";
        let p = placeholder(&key(3), "id", real);
        let (head, sig) = p.rsplit_once('.').unwrap();
        assert_eq!(head, "eyJhbGciOiJSUzI1NiJ9.eyJlbWFpbCI6ImFAYi5jIn0");
        assert_eq!(sig.len(), "c2lnbmF0dXJlLXJlYWwtMDEyMzQ1Njc4OQ".len());
        assert_ne!(sig, "c2lnbmF0dXJlLXJlYWwtMDEyMzQ1Njc4OQ");
        assert_eq!(p, placeholder(&key(3), "id", real));
        // Not a JWT: the usual shapes.
        let g = "ya29.a0AfB_byC-0123456789abcdef";
        let p = placeholder(&key(3), "g", g);
        assert!(p.starts_with("ya29.") && p.len() == g.len(), "{p}");
    }

    #[test]
    fn the_secret_is_made_once_0600_and_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/placeholder.key");
        let a = PlaceholderKey::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = PlaceholderKey::load_or_create(&path).unwrap();
        assert_eq!(a.0, b.0);
        assert_eq!(format!("{a:?}"), "PlaceholderKey(…)");
        std::fs::write(&path, b"short").unwrap();
        let e = PlaceholderKey::load_or_create(&path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("5 bytes, not 32") && e.contains("remove it"),
            "{e}"
        );
    }
}
