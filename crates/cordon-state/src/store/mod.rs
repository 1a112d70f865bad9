//! The state store and its sessions. The job of each part:
//!
//! - here: the public types, a session's record on disk, the running lock;
//! - [`session`]: preparing a session (`begin`), opening and listing sessions, discarding;
//! - [`spare`]: the directories of sessions that left nothing, kept for the next to start in;
//! - [`review`]: what a session changed (`plan`), described and summarised for a reviewer;
//! - [`accept`]: applying reviewed changes to the host, one file at a time;
//! - [`restore`]: bringing protected paths back to a snapshot;
//! - [`paths`]: resolving the paths callers name, and the checks that keep every host write
//!   from going through a symlink.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use crate::error::{StateError, io_err};
use crate::manifest::{ChangeKind, Node};
use crate::meta::{EntryKind, Meta, Status};

mod accept;
mod paths;
mod restore;
mod review;
pub use review::listed;
mod session;
mod spare;

pub(crate) use accept::apply_one;
use paths::all_normal;
pub use paths::{resolve_path, resolve_path_below};
pub(crate) use spare::park;

pub use cordon_events::is_valid_session_id;

fn check_id(id: &str) -> Result<(), StateError> {
    if is_valid_session_id(id) {
        Ok(())
    } else {
        Err(StateError::InvalidSessionId(id.to_owned()))
    }
}

/// Where sessions live: one directory per session (mode 0700) holding `meta.json` and, per
/// protected path, `eN/` with `manifest.json`, `snapshot` and `upper` + `work` (a directory) or
/// `working` (a file).
#[derive(Clone, Debug)]
pub struct StateStore {
    root: PathBuf,
}

/// One protected path of a session.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The path on the host (canonical: symlinks resolved).
    pub host: PathBuf,
    /// Directory (overlay) or file (working copy).
    pub kind: EntryKind,
    /// The overlay upper dir (directory) or the private working copy (file) the sandbox binds.
    pub upper: PathBuf,
    /// The overlay workdir, on the same filesystem as `upper` (directories only).
    pub work: Option<PathBuf>,
    /// Root hash of the snapshot manifest.
    pub before_hash: String,
    /// The snapshot copy (hard links where possible).
    pub snapshot: PathBuf,
    /// The snapshot's manifest (`manifest.json`).
    pub manifest: PathBuf,
    /// Inside the copy-on-write home: `upper` is its place in the home's layer and the
    /// sandbox mounts nothing for it.
    pub embedded: bool,
}

/// A session: its protected paths and where their state lives.
#[derive(Clone, Debug)]
pub struct Session {
    /// The session id.
    pub id: String,
    /// The session's directory in the store.
    pub dir: PathBuf,
    /// Protected paths that existed (in the order given).
    pub entries: Vec<Entry>,
    /// Protected paths that did not exist, so are not protected this session.
    pub skipped: Vec<PathBuf>,
    /// The copy-on-write home, when the session has one.
    pub home: Option<crate::home::HomeLayer>,
}

/// One changed file (or directory, or symlink) under a protected path.
#[derive(Clone, Debug)]
pub struct Change {
    /// The file on the host.
    pub host_path: PathBuf,
    /// What happened to it.
    pub kind: ChangeKind,
    /// What a reviewer must not miss (hooks, allow-lists, MCP servers, shell rc lines…).
    pub flags: Vec<String>,
    /// A unified diff, for text files of at most 64 KiB (at most 200 lines).
    pub diff: Option<String>,
    /// The protected path it is under.
    pub protected: PathBuf,
    /// Its path relative to `protected` (empty for a protected file itself).
    pub rel: PathBuf,
    /// The snapshot's entry (before the session).
    pub before: Option<Node>,
    /// The session's result.
    pub after: Option<Node>,
    /// For a symlink in the session's result: its target (raw; use the summary to print it).
    pub link_target: Option<PathBuf>,
}

/// What [`Session::accept`] did.
#[derive(Clone, Debug, Default)]
pub struct AcceptReport {
    /// Host paths now holding the session's result (including ones applied by an earlier,
    /// interrupted accept).
    pub applied: Vec<PathBuf>,
    /// Host paths left alone, and why.
    pub conflicts: Vec<Conflict>,
    /// Every change of the session is applied and the session is marked accepted; otherwise it
    /// stays pending (accept again after resolving conflicts, or discard the rest).
    pub accepted: bool,
}

/// A host path that could not be changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The host path.
    pub path: PathBuf,
    /// Why, e.g. "changed on the host since the session started".
    pub why: String,
}

impl std::fmt::Display for Conflict {
    /// `PATH: WHY` for a terminal: the path names a file the session made, so it is shown
    /// escaped and quoted when odd ([`cordon_events::terminal::quoted`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use cordon_events::terminal;
        let path = terminal::quoted(self.path.as_os_str());
        write!(f, "{path}: {}", terminal::safe(&self.why))
    }
}

/// One session, as [`StateStore::list`] shows it.
#[derive(Clone, Debug)]
pub struct SessionInfo {
    /// The session id.
    pub id: String,
    /// When `begin` started, milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// `None` when the metadata cannot be read (see `error`).
    pub status: Option<Status>,
    /// The protected paths.
    pub protected: Vec<PathBuf>,
    /// Number of changes (computed now for pending sessions, recorded for finished ones).
    pub changed: Option<usize>,
    /// Number of host paths an accept has applied.
    pub applied: usize,
    /// Why the session could not be read, or its changes not computed.
    pub error: Option<String>,
}

/// What [`StateStore::restore`] did.
#[derive(Clone, Debug, Default)]
pub struct RestoreReport {
    /// Host paths written back from the snapshot.
    pub restored: Vec<PathBuf>,
    /// Host paths removed because the snapshot did not have them.
    pub removed: Vec<PathBuf>,
    /// Entries already equal to the snapshot.
    pub unchanged: usize,
    /// Host paths left alone, and why (e.g. an untrustworthy snapshot copy).
    pub refused: Vec<Conflict>,
    /// Where everything removed or overwritten was moved (`SESSION/restore-backup-<unix-ms>`,
    /// holding each host path at its absolute path below it); `None` when nothing was, and
    /// always for [`StateStore::restore_plan`].
    pub backup: Option<PathBuf>,
}

/// Held while a session's sandbox runs: an exclusive `flock` on `SESSION/lock`, released when
/// the guard is dropped. See [`Session::hold_running`].
#[derive(Debug)]
pub struct RunningGuard {
    _file: fs::File,
}

/// A change with everything needed to apply it.
pub(crate) struct Planned {
    pub entry: usize,
    pub rel: PathBuf,
    pub host_path: PathBuf,
    pub kind: ChangeKind,
    pub before: Option<Node>,
    pub after: Option<Node>,
    pub source: Option<PathBuf>,
}

enum RelMatch {
    /// The path is the protected path or inside it: this relative path.
    Inside(PathBuf),
    /// The path contains the protected path.
    Contains,
}

impl StateStore {
    /// A store rooted at `root` (created on first `begin`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StateStore { root: root.into() }
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `$XDG_STATE_HOME/cordon/state`, else `~/.local/state/cordon/state`; `None` when neither
    /// variable holds an absolute path.
    pub fn default_root() -> Option<PathBuf> {
        cordon_events::state_dir().map(|d| d.join("state"))
    }

    fn session_dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }
}

impl Session {
    fn meta_path(&self) -> PathBuf {
        self.dir.join("meta.json")
    }

    pub(crate) fn meta(&self) -> Result<Meta, StateError> {
        Meta::load(&self.meta_path())
    }

    fn lock_path(&self) -> PathBuf {
        self.dir.join("lock")
    }

    /// Mark the session as running for as long as the guard lives: an exclusive `flock` on
    /// `SESSION/lock`. `cordon run` holds it for the sandbox's lifetime and drops it before its
    /// own accept/discard; while it is held, [`Session::accept`], [`Session::discard`] and
    /// [`StateStore::restore`] fail with [`StateError::Running`] (so does a second
    /// `hold_running`, in this process too: the lock is per open file).
    pub fn hold_running(&self) -> Result<RunningGuard, StateError> {
        let path = self.lock_path();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io_err("open session lock", &path))?;
        // A held lock is a running sandbox (minutes), or a child this process forked a moment
        // ago that has not reached `exec` yet: the lock belongs to the open file, which the
        // child shares until `exec` closes it (review forks git, cordon forks helpers). A
        // short wait tells the two apart.
        for attempt in 0.. {
            match file.try_lock() {
                Ok(()) => return Ok(RunningGuard { _file: file }),
                Err(fs::TryLockError::WouldBlock) if attempt < 20 => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                Err(fs::TryLockError::WouldBlock) => break,
                Err(fs::TryLockError::Error(e)) => return Err(io_err("lock", &path)(e)),
            }
        }
        Err(StateError::Running {
            session: self.id.clone(),
        })
    }

    /// Whether the session's sandbox is running now (someone holds [`Session::hold_running`]).
    pub fn is_running(&self) -> bool {
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.lock_path())
        else {
            return false;
        };
        matches!(file.try_lock_shared(), Err(fs::TryLockError::WouldBlock))
    }

    /// The session's status, read from disk.
    pub fn status(&self) -> Result<Status, StateError> {
        Ok(self.meta()?.status)
    }

    /// Where `p` (a caller-supplied path) lies relative to `e`'s protected path. A path with
    /// `..` matches nothing, and a relative remainder is always plain names only.
    fn rel_in(&self, e: &Entry, p: &Path) -> Option<RelMatch> {
        if p.components().any(|c| c == Component::ParentDir) {
            return None;
        }
        let try_one = |p: &Path| -> Option<RelMatch> {
            if let Ok(rel) = p.strip_prefix(&e.host) {
                all_normal(rel).then(|| RelMatch::Inside(rel.to_path_buf()))
            } else if e.host.starts_with(p) {
                Some(RelMatch::Contains)
            } else {
                None
            }
        };
        if let Some(m) = try_one(p) {
            return Some(m);
        }
        // The caller may name a path through a symlink, or one that does not exist (yet).
        let canon = fs::canonicalize(p).ok().or_else(|| {
            let parent = fs::canonicalize(p.parent()?).ok()?;
            Some(parent.join(p.file_name()?))
        })?;
        try_one(&canon)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_below_a_known_base_as_in_full() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        fs::create_dir_all(base.join("real/sub")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        // Spelled through a symlinked base, as $HOME may be.
        let spelled = t.path().join("..").join(t.path().file_name().unwrap());
        for rel in [
            "real/sub",
            "real/missing/deeper",
            "link/sub",
            "link/missing",
            "nothing/x",
        ] {
            let p = spelled.join(rel);
            assert_eq!(
                resolve_path_below(&p, &spelled, &base),
                resolve_path(&base.join(rel)),
                "{rel}"
            );
        }
        assert_eq!(
            resolve_path_below(&base.join("link/missing"), &base, &base),
            Some(base.join("real/missing"))
        );
        assert_eq!(resolve_path(Path::new("relative")), None);
    }

    #[test]
    fn session_ids() {
        for ok in ["a", "2026-01-01T00_00.x", "A-b_c.d"] {
            assert!(is_valid_session_id(ok), "{ok}");
        }
        for bad in ["", ".", "..", ".x", "a/b", "a b", "ü", &"x".repeat(129)] {
            assert!(!is_valid_session_id(bad), "{bad}");
        }
    }
}
