//! Session ids and where logs live.

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// A new session id, sortable by start time and unique: `20261129T083012Z-1a2b3c4d`
/// (UTC start second, then 8 random hex digits from `/dev/urandom`).
pub fn new_session_id() -> String {
    let now = SystemTime::now();
    let stamp: String = humantime::format_rfc3339_seconds(now)
        .to_string()
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    let r = random_u32();
    format!("{stamp}-{r:08x}")
}

fn random_u32() -> u32 {
    let mut buf = [0u8; 4];
    let from_urandom = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok();
    if !from_urandom {
        // No /dev/urandom (odd chroot): still unique per process and call, if not unpredictable.
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut h = Sha256::new();
        h.update(nanos.to_le_bytes());
        h.update(std::process::id().to_le_bytes());
        h.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
        let d = h.finalize();
        buf.copy_from_slice(&d[..4]);
    }
    u32::from_le_bytes(buf)
}

/// Whether `id` is safe to use as a session id and file name: non-empty, at most 128 bytes of
/// ASCII letters, digits, `.`, `_` and `-`, not starting with `.`.
pub fn is_valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The start second a session id made by [`new_session_id`] names, in milliseconds since the
/// epoch (floored to the second); `None` for any other id. Lets a scan of many sessions skip
/// reading each one's metadata for its age.
pub fn session_started_ms(id: &str) -> Option<u64> {
    let b = id.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    if b.len() < 16 || !digits(0..8) || b[8] != b'T' || !digits(9..15) || b[15] != b'Z' {
        return None;
    }
    let stamp = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &id[0..4],
        &id[4..6],
        &id[6..8],
        &id[9..11],
        &id[11..13],
        &id[13..15]
    );
    let t = humantime::parse_rfc3339(&stamp).ok()?;
    t.duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok())
}

/// cordon's own state directory: `$XDG_STATE_HOME/cordon`, else `$HOME/.local/state/cordon`;
/// `None` when neither is set to an absolute path. Everything cordon keeps per session lives
/// under it (audit logs, copy-on-write layers, broker sockets without a runtime dir), so one
/// mask hides all of it from the sandbox: every crate derives its directory from this.
pub fn state_dir() -> Option<PathBuf> {
    state_dir_from(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
}

/// `<state_dir()>/sessions`.
pub fn default_log_dir() -> Option<PathBuf> {
    state_dir().map(|d| d.join("sessions"))
}

fn state_dir_from(xdg_state_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    // The XDG spec says relative values are invalid and must be ignored.
    let absolute = |v: Option<OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(state) = absolute(xdg_state_home) {
        return Some(state.join("cordon"));
    }
    absolute(home).map(|h| h.join(".local").join("state").join("cordon"))
}

/// cordon's data directory: `$XDG_DATA_HOME/cordon`, else `~/.local/share/cordon` (the
/// interception CA lives under it); `None` without either variable. Never visible inside a
/// sandbox.
pub fn data_dir() -> Option<PathBuf> {
    let absolute = |v: Option<OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(d) = absolute(std::env::var_os("XDG_DATA_HOME")) {
        return Some(d.join("cordon"));
    }
    absolute(std::env::var_os("HOME")).map(|h| h.join(".local").join("share").join("cordon"))
}

/// `<default_log_dir()>/<session>.jsonl`; `None` when there is no log dir or `session` is not a
/// valid session id (see [`is_valid_session_id`]).
pub fn default_log_path(session: &str) -> Option<PathBuf> {
    if !is_valid_session_id(session) {
        return None;
    }
    default_log_dir().map(|d| d.join(format!("{session}.jsonl")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_sortable_and_unique() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, b);
        assert!(is_valid_session_id(&a), "{a}");
        // 20261129T083012Z-1a2b3c4d
        assert_eq!(a.len(), 25, "{a}");
        assert_eq!(&a[8..9], "T");
        assert_eq!(&a[15..17], "Z-");
        assert!(a[..8].bytes().all(|b| b.is_ascii_digit()));
        assert!(a[17..].bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn a_session_id_names_its_start_second() {
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let id = new_session_id();
        let t = session_started_ms(&id).unwrap();
        assert!(t <= before + 1000 && t + 2000 >= before, "{t} {before}");
        assert_eq!(t % 1000, 0);
        assert_eq!(
            session_started_ms("20261129T083012Z-1a2b3c4d"),
            Some(1_795_941_012_000)
        );
        for other in [
            "",
            "x",
            "20261129T083012-1a2b",
            "2026112xT083012Z-1",
            "20261399T083012Z-1",
        ] {
            assert_eq!(session_started_ms(other), None, "{other}");
        }
    }

    #[test]
    fn session_id_validation() {
        assert!(is_valid_session_id("20261129T083012Z-1a2b3c4d"));
        assert!(!is_valid_session_id(""));
        assert!(!is_valid_session_id("../x"));
        assert!(!is_valid_session_id("a/b"));
        assert!(!is_valid_session_id(".hidden"));
        assert!(!is_valid_session_id("sp ace"));
        assert!(default_log_path("../../etc/passwd").is_none());
    }

    #[test]
    fn state_dir_prefers_xdg_and_ignores_relative() {
        let some = |s: &str| Some(OsString::from(s));
        assert_eq!(
            state_dir_from(some("/x/state"), some("/home/u")),
            Some(PathBuf::from("/x/state/cordon"))
        );
        assert_eq!(
            state_dir_from(some("rel"), some("/home/u")),
            Some(PathBuf::from("/home/u/.local/state/cordon"))
        );
        assert_eq!(
            state_dir_from(None, some("/home/u")),
            Some(PathBuf::from("/home/u/.local/state/cordon"))
        );
        assert_eq!(state_dir_from(None, some("")), None);
        assert_eq!(state_dir_from(None, None), None);
    }
}
