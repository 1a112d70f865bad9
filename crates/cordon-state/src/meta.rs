//! `SESSION/meta.json`: the session's record, rewritten atomically at every step.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{StateError, io_err};
use crate::fsops;

/// Where a session stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Prepared (or being prepared, or the sandbox ran or was killed): waiting for a decision.
    Pending,
    /// Every change was applied to the host.
    Accepted,
    /// The changes were dropped; the host was left as it was (apart from anything a partial
    /// accept applied before).
    Discarded,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Pending => "pending",
            Status::Accepted => "accepted",
            Status::Discarded => "discarded",
        })
    }
}

/// Whether a protected path is a directory (overlay) or a file (private working copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A directory: the sandbox mounts an overlay with the host path as lower layer.
    Dir,
    /// A file: the sandbox binds the working copy over the host path.
    File,
    /// Nothing there when the session began (inside the copy-on-write home only): whatever
    /// the session created there is added.
    Absent,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct MetaEntry {
    #[serde(with = "crate::pathser::one")]
    pub host: PathBuf,
    pub kind: EntryKind,
    /// Name of the entry's directory inside the session directory (`e0`, `e1`, …).
    pub dir: String,
    pub before_hash: String,
    /// Its changes live in the session's home layer, not in a mount of its own.
    #[serde(default)]
    pub embedded: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub version: u32,
    pub id: String,
    pub created_ms: u64,
    pub status: Status,
    /// The paths the caller asked to protect, as given.
    #[serde(with = "crate::pathser::many")]
    pub protect: Vec<PathBuf>,
    /// Entries fully prepared so far (a kill during `begin` leaves fewer than asked).
    pub entries: Vec<MetaEntry>,
    #[serde(with = "crate::pathser::many")]
    pub skipped: Vec<PathBuf>,
    /// `begin` finished.
    pub prepared: bool,
    /// Host paths an accept has applied (so an accept after a crash continues).
    #[serde(with = "crate::pathser::many", default)]
    pub applied: Vec<PathBuf>,
    /// Number of changes, recorded when the session was accepted or discarded.
    #[serde(default)]
    pub changed: Option<usize>,
    #[serde(default)]
    pub finished_ms: Option<u64>,
    /// The snapshot copies were deleted (discard); manifests remain.
    #[serde(default)]
    pub snapshot_removed: bool,
    /// The copy-on-write home, when the session has one.
    #[serde(default)]
    pub home: Option<crate::home::MetaHome>,
}

impl Meta {
    pub(crate) fn load(path: &Path) -> Result<Meta, StateError> {
        let bytes = std::fs::read(path).map_err(io_err("read session metadata", path))?;
        let m: Meta = serde_json::from_slice(&bytes).map_err(|e| StateError::Corrupt {
            path: path.to_path_buf(),
            msg: e.to_string(),
        })?;
        if m.version != 1 {
            return Err(StateError::Corrupt {
                path: path.to_path_buf(),
                msg: format!("unknown version {}", m.version),
            });
        }
        for e in &m.entries {
            let ok = e.dir.starts_with('e')
                && e.dir[1..].bytes().all(|b| b.is_ascii_digit())
                && e.dir.len() > 1;
            if !ok || !e.host.is_absolute() {
                return Err(StateError::Corrupt {
                    path: path.to_path_buf(),
                    msg: format!("bad entry {:?} for {}", e.dir, e.host.display()),
                });
            }
        }
        Ok(m)
    }

    pub(crate) fn save(&self, path: &Path) -> Result<(), StateError> {
        fsops::write_json(path, self, true)
    }

    /// [`Meta::save`] without fsyncs, for a session with nothing to review (only its home
    /// layer's scratch, which a crash may lose).
    pub(crate) fn save_quick(&self, path: &Path) -> Result<(), StateError> {
        fsops::write_json(path, self, false)
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
