//! Agent-state protection, host side.
//!
//! Protected paths (`~/.claude`, `~/.claude.json`, `~/.bashrc`, a project's `.git/hooks`…) are
//! copy-on-write for one sandbox session. [`StateStore::begin`] snapshots each one (a manifest of
//! kinds, modes, sizes and BLAKE3 hashes plus a hard-linked copy) and prepares what the sandbox
//! mounts: an overlayfs upper and work directory for a directory (the host path is the lower
//! layer), a private working copy for a file (bound over the host path). After the session,
//! [`Session::changes`] reads the upper dirs and working copies, [`Session::summary`] shows them
//! with what a reviewer must not miss flagged, and [`Session::accept`] applies them (per file,
//! atomically, refusing files the host changed meanwhile), [`Session::discard`] drops them, or
//! the session stays pending. [`StateStore::restore`] brings a protected path back to a
//! snapshot. Host copies stay byte-identical until an accept.
//!
//! Layout, by job: `store/` holds the store and its sessions (`session`: begin, open, list,
//! discard; `review`: changes, summary; `accept`; `restore`; `paths`: resolving callers' paths
//! and the no-symlink checks before every host write), `manifest` the snapshots and their diff,
//! `overlay` reading an overlayfs upper dir, `flags` what a reviewer must not miss (names and
//! text from inside are made safe to print by `cordon_events::terminal`), `exec_surface` what
//! the host loads or runs later (git dirs through their indirections, agents' and editors'
//! settings: found, settled at exit, classified), `fsops` the atomic, no-follow file operations,
//! `meta` the session record, `home` and `caches` the copy-on-write home and its cache layers.
//!
//! Trust boundary: this crate runs on the host side only, and everything it reads from a
//! session (upper dirs, working copies, the home layer) was written by the untrusted sandbox:
//! names are escaped before they are shown, hashes are checked against what was reviewed, and
//! no write to the host follows a symlink. The sandbox never touches the state store except
//! through the overlay mounts and binds cordon sets up from a [`Session`]'s [`Entry`]s. No
//! `unsafe` here: the kernel calls it needs go through std and `xattr`.

#![forbid(unsafe_code)]

mod caches;
mod error;
mod exec_surface;
mod flags;
mod fsops;
mod home;
mod manifest;
mod meta;
mod overlay;
mod pathser;
mod setid;
mod store;
mod textdiff;
mod view;

pub use caches::{CacheInfo, CacheLayer, CacheStore, cache_dir};
pub use error::StateError;
pub use exec_surface::{
    ExitFate, HOME_NAMES, ROOT_NAMES, Surface, WRITTEN_IN_PLACE, applies_unasked, discover,
    exit_fate, is_git_objects, settle,
};
/// What the differential fuzz target compares with git's own reading of a config file.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    pub use crate::exec_surface::fuzzing::*;
}
pub use home::{HomeLayer, HomeSpec, HomeWrite, home_writes_line};
pub use manifest::{
    ChangeKind, Manifest, ManifestChange, Node, NodeKind, diff_manifests, hash_file, node_of, scan,
    snapshot,
};
pub use meta::{EntryKind, Status};
pub use setid::{SetIdSweep, Stripped, shown_path, strip_set_id};
pub use store::{
    AcceptReport, Change, Conflict, Entry, RestoreReport, RunningGuard, Session, SessionInfo,
    StateStore, is_valid_session_id, listed, resolve_path, resolve_path_below,
};
pub use view::{Hidden, SHOW_MAX_BYTES, SHOW_MAX_FILES, SecretCheck, View, ViewSpec, build_view};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_security;
