//! The one error type of this crate.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in the state store. Every variant that concerns a file names it.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// An I/O operation on `path` failed; `what` says which (e.g. "read", "hard-link").
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// The operation, as a verb phrase.
        what: &'static str,
        /// The file or directory it was applied to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A session id that cannot safely be a directory name.
    #[error(
        "invalid session id {0:?}: use 1 to 128 ASCII letters, digits, '-', '_' or '.', not starting with '.'"
    )]
    InvalidSessionId(String),
    /// `begin` on an id that is already taken.
    #[error("session {id} already exists at {}", path.display())]
    SessionExists {
        /// The session id.
        id: String,
        /// Its directory.
        path: PathBuf,
    },
    /// `open`/`restore` on an id the store does not hold.
    #[error("no session {id} in {}", root.display())]
    NoSession {
        /// The session id.
        id: String,
        /// The state store's root.
        root: PathBuf,
    },
    /// A metadata or manifest file that does not parse or does not make sense.
    #[error("{}: corrupt or unreadable: {msg}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// Something this crate deliberately does not handle (e.g. overlayfs redirect_dir/metacopy
    /// upper dirs, a protected path that is neither file nor directory).
    #[error("{}: {what}", path.display())]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// What is not supported.
        what: String,
    },
    /// The operation does not fit the session's status (e.g. accept after discard).
    #[error("session {id} is {status}: {msg}")]
    WrongStatus {
        /// The session id.
        id: String,
        /// Its current status.
        status: String,
        /// Why that rules the operation out.
        msg: String,
    },
    /// A path the caller named is not (inside) a protected path of the session.
    #[error("{} is not protected by session {id}", path.display())]
    NotProtected {
        /// The session id.
        id: String,
        /// The path.
        path: PathBuf,
    },
    /// Two protected paths nest inside each other; each would be applied twice.
    #[error("protected paths overlap: {} contains {}", outer.display(), inner.display())]
    Overlap {
        /// The containing path.
        outer: PathBuf,
        /// The contained path.
        inner: PathBuf,
    },
    /// A restore reference that is neither `SESSION` nor `SESSION:PATH`.
    #[error("invalid snapshot reference {0:?}: expected SESSION or SESSION:PATH")]
    BadSnapshotRef(String),
    /// The session's sandbox still runs (its `SESSION/lock` is held), so its changes cannot be
    /// accepted, discarded or restored yet.
    #[error("session {session} is still running; wait for it to end")]
    Running {
        /// The session id.
        session: String,
    },
    /// A path the caller named that could point outside a protected path (`..`, `.`).
    #[error("{}: path must not contain '..' or '.' components", path.display())]
    UnsafePath {
        /// The path as given.
        path: PathBuf,
    },
}

/// Shorthand for building [`StateError::Io`] in `map_err`.
pub(crate) fn io_err(
    what: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(io::Error) -> StateError {
    let path = path.into();
    move |source| StateError::Io { what, path, source }
}
