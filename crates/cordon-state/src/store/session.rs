//! A session's lifecycle: prepared (`begin`: snapshots, overlay dirs, working copies), opened,
//! listed, held while its sandbox runs, and discarded.

use std::collections::BTreeSet;
use std::fs::{self, DirBuilder, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{Entry, Session, SessionInfo, StateStore, check_id, is_valid_session_id, resolve_path};
use crate::error::{StateError, io_err};
use crate::fsops;
use crate::home::HomeSpec;
use crate::manifest::{self, Manifest, Node, NodeKind};
use crate::meta::{EntryKind, Meta, MetaEntry, Status, now_ms};

/// Snapshot the protected path `host` into `snap`; its manifest and root node, which must
/// still be of `kind`.
fn snapshot_entry(
    host: &Path,
    kind: EntryKind,
    snap: &Path,
) -> Result<(Manifest, Node), StateError> {
    let m = manifest::snapshot(host, snap)?;
    let root_node =
        m.entries
            .get(Path::new(""))
            .cloned()
            .ok_or_else(|| StateError::Unsupported {
                path: host.to_path_buf(),
                what: "protected path vanished while the snapshot was taken".into(),
            })?;
    let expected = match kind {
        EntryKind::Dir => NodeKind::Dir,
        EntryKind::File | EntryKind::Absent => NodeKind::File,
    };
    if root_node.kind != expected {
        return Err(StateError::Unsupported {
            path: host.to_path_buf(),
            what: "protected path changed type while the snapshot was taken".into(),
        });
    }
    Ok((m, root_node))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), StateError> {
    fs::set_permissions(path, Permissions::from_mode(mode & 0o7777))
        .map_err(io_err("set mode of", path))
}

/// The protected paths of a session about to begin, resolved.
struct Protected {
    /// Canonical host paths (each once) and what they are.
    resolved: Vec<(PathBuf, EntryKind)>,
    /// Those of `resolved` inside the copy-on-write home: reviewed from its layer.
    embedded: Vec<PathBuf>,
    /// Paths given that did not exist (outside the home), so are not protected.
    skipped: Vec<PathBuf>,
}

/// Resolve the paths to protect; nothing is created yet.
fn resolve_protected(
    protect: &[PathBuf],
    home: Option<&HomeSpec>,
) -> Result<Protected, StateError> {
    let in_home = |p: &Path| {
        home.is_some_and(|h| {
            p.starts_with(&h.path) && p != h.path && !h.skip.iter().any(|s| p.starts_with(s))
        })
    };
    let mut out = Protected {
        resolved: Vec::new(),
        embedded: Vec::new(),
        skipped: Vec::new(),
    };
    for p in protect {
        match fs::symlink_metadata(p) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Not there yet: inside the home, the session may create it.
                let at = resolve_path(p);
                match at.filter(|a| in_home(a)) {
                    Some(a) if !out.resolved.iter().any(|(c, _)| *c == a) => {
                        out.embedded.push(a.clone());
                        out.resolved.push((a, EntryKind::Absent));
                    }
                    Some(_) => {}
                    None => out.skipped.push(p.clone()),
                }
                continue;
            }
            Err(e) => return Err(io_err("inspect protected path", p)(e)),
            Ok(_) => {}
        }
        let canon = match fs::canonicalize(p) {
            Ok(c) => c,
            // A dangling symlink: nothing to protect yet.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                out.skipped.push(p.clone());
                continue;
            }
            Err(e) => return Err(io_err("resolve protected path", p)(e)),
        };
        let md = fs::metadata(&canon).map_err(io_err("inspect protected path", &canon))?;
        let kind = if md.is_dir() {
            EntryKind::Dir
        } else if md.is_file() {
            EntryKind::File
        } else {
            return Err(StateError::Unsupported {
                path: canon,
                what: "a protected path must be a regular file or a directory".into(),
            });
        };
        if !out.resolved.iter().any(|(c, _)| *c == canon) {
            if in_home(&canon) {
                out.embedded.push(canon.clone());
            }
            out.resolved.push((canon, kind));
        }
    }
    Ok(out)
}

/// Protected paths must not nest (one would be snapshotted and mounted twice), nor hold the
/// state store or lie inside it (the store would be reviewing itself).
fn check_overlaps(resolved: &[(PathBuf, EntryKind)], root_canon: &Path) -> Result<(), StateError> {
    for (a, _) in resolved {
        for (b, _) in resolved {
            if a != b && b.starts_with(a) {
                return Err(StateError::Overlap {
                    outer: a.clone(),
                    inner: b.clone(),
                });
            }
        }
        if root_canon.starts_with(a) {
            return Err(StateError::Overlap {
                outer: a.clone(),
                inner: root_canon.to_path_buf(),
            });
        }
        if a.starts_with(root_canon) {
            return Err(StateError::Overlap {
                outer: root_canon.to_path_buf(),
                inner: a.clone(),
            });
        }
    }
    Ok(())
}

/// Make one entry's directory `edir`: its snapshot and manifest, and what the sandbox mounts
/// (overlay dirs for a directory, a working copy for a file; nothing when embedded in the
/// home's layer). Returns the manifest's root hash.
fn prepare_entry(
    edir: &Path,
    host: &Path,
    kind: EntryKind,
    is_embedded: bool,
) -> Result<String, StateError> {
    fsops::private_dir(edir)?;
    // Nothing to snapshot where nothing was: an empty manifest (what is there at the end is
    // added).
    let (m, root_node) = if kind == EntryKind::Absent {
        fsops::private_dir(&edir.join("snapshot"))?;
        (Manifest::default(), None)
    } else {
        let (m, root) = snapshot_entry(host, kind, &edir.join("snapshot"))?;
        (m, Some(root))
    };
    m.save_quick(&edir.join("manifest.json"))?;
    match (kind, root_node) {
        // Its changes land in the home's layer.
        _ if is_embedded => {}
        (_, None) | (EntryKind::Absent, _) => {}
        (EntryKind::Dir, Some(root_node)) => {
            // The merged root takes the upper root's attributes: give it the host's mode.
            let upper = edir.join("upper");
            fsops::private_dir(&upper)?;
            set_mode(&upper, root_node.mode)?;
            fsops::private_dir(&edir.join("work"))?;
        }
        (EntryKind::File, Some(root_node)) => {
            let working = edir.join("working");
            let snap = edir.join("snapshot");
            fsops::copy_atomic(&snap, &working, root_node.mode, root_node.hash.as_deref())
                .map_err(|e| match e {
                    StateError::Io { source, .. } => StateError::Io {
                        what: "make working copy (did the file change while the session was prepared?) of",
                        path: host.to_path_buf(),
                        source,
                    },
                    other => other,
                })?;
        }
    }
    Ok(m.root_hash())
}

impl StateStore {
    /// Prepare a session: for each existing protected path, take a snapshot (manifest +
    /// hard-linked copy of every regular file where possible, else a copy) and create the overlay
    /// dirs (for a dir) or the working copy (for a file). Paths that do not exist are skipped
    /// (reported in [`Session::skipped`]). Writes `SESSION/meta.json` first, so a kill at any
    /// later point leaves a listable pending session.
    ///
    /// Nothing here is fsynced: a kill needs no fsync, and an OS crash during the session can
    /// only lose the session's record with the sandbox's writes (which are not fsynced either),
    /// never a host file: the host's protected paths are untouched until an accept, which makes
    /// the snapshot (the way back) and the record durable before it changes the host. A restore
    /// checks every copy it takes from the snapshot against the manifest.
    pub fn begin(&self, session: &str, protect: &[PathBuf]) -> Result<Session, StateError> {
        self.begin_with_home(session, protect, None)
    }

    /// [`StateStore::begin`] with a copy-on-write home: the session gets a home layer
    /// ([`Session::home`]) and protected paths inside the home (outside `home.skip`) are
    /// reviewed from it instead of getting a mount of their own — including those that do not
    /// exist yet ([`EntryKind::Absent`]: what the session creates there is added).
    pub fn begin_with_home(
        &self,
        session: &str,
        protect: &[PathBuf],
        home: Option<&HomeSpec>,
    ) -> Result<Session, StateError> {
        check_id(session)?;
        // Resolve and validate everything before creating anything.
        let found = resolve_protected(protect, home)?;
        fsops::private_dir_all(&self.root)?;
        let root_canon = fs::canonicalize(&self.root).map_err(io_err("resolve", &self.root))?;
        check_overlaps(&found.resolved, &root_canon)?;

        // Nothing to review: only the home layer's scratch, which the next session can start in.
        let durable = !found.resolved.is_empty();
        let mut meta = Meta {
            version: 1,
            id: session.to_owned(),
            created_ms: now_ms(),
            status: Status::Pending,
            protect: protect.to_vec(),
            entries: Vec::new(),
            skipped: found.skipped,
            prepared: false,
            applied: Vec::new(),
            changed: None,
            finished_ms: None,
            snapshot_removed: false,
            home: home.map(crate::home::MetaHome::of),
        };
        if !durable && let Some(h) = home {
            meta.prepared = true;
            let mode = fs::metadata(&h.path)
                .map_err(io_err("inspect home", &h.path))?
                .mode();
            if super::spare::claim(&self.root, &meta, mode)? {
                self.prune_homes();
                return self.open(session);
            }
            meta.prepared = false;
        }
        let dir = self.session_dir(session);
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(StateError::SessionExists {
                    id: session.to_owned(),
                    path: dir,
                });
            }
            Err(e) => return Err(io_err("create session directory", &dir)(e)),
        }
        let meta_path = dir.join("meta.json");
        if !durable {
            meta.prepared = true;
            meta.save_quick(&meta_path)?;
            if let Some(h) = home {
                crate::home::prepare(&dir, h)?;
                self.prune_homes();
            }
            return self.open(session);
        }
        meta.save_quick(&meta_path)?;
        if let Some(h) = home {
            crate::home::prepare(&dir, h)?;
            self.prune_homes();
        }

        let last = found.resolved.len() - 1;
        for (i, (host, kind)) in found.resolved.into_iter().enumerate() {
            let name = format!("e{i}");
            let is_embedded = found.embedded.contains(&host);
            let before_hash = prepare_entry(&dir.join(&name), &host, kind, is_embedded)?;
            meta.entries.push(MetaEntry {
                host,
                kind,
                dir: name,
                before_hash,
                embedded: is_embedded,
            });
            // The last entry is recorded with `prepared` below.
            if i < last {
                meta.save_quick(&meta_path)?;
            }
        }
        meta.prepared = true;
        meta.save_quick(&meta_path)?;
        self.open(session)
    }

    /// Open an existing session (any status).
    pub fn open(&self, session: &str) -> Result<Session, StateError> {
        check_id(session)?;
        let dir = self.session_dir(session);
        let meta_path = dir.join("meta.json");
        if !meta_path.exists() {
            return Err(StateError::NoSession {
                id: session.to_owned(),
                root: self.root.clone(),
            });
        }
        let meta = Meta::load(&meta_path)?;
        let home = meta
            .home
            .as_ref()
            .map(|m| crate::home::HomeLayer::at(&dir, m));
        let entries = meta
            .entries
            .iter()
            .map(|e| {
                let edir = dir.join(&e.dir);
                let in_layer = home
                    .as_ref()
                    .filter(|_| e.embedded)
                    .and_then(|h| h.upper_of(&e.host));
                let (upper, work) = match (in_layer, e.kind) {
                    (Some(u), _) => (u, None),
                    (None, EntryKind::Dir) => (edir.join("upper"), Some(edir.join("work"))),
                    (None, _) => (edir.join("working"), None),
                };
                Entry {
                    host: e.host.clone(),
                    kind: e.kind,
                    upper,
                    work,
                    before_hash: e.before_hash.clone(),
                    snapshot: edir.join("snapshot"),
                    manifest: edir.join("manifest.json"),
                    embedded: e.embedded,
                }
            })
            .collect();
        Ok(Session {
            id: session.to_owned(),
            dir,
            entries,
            skipped: meta.skipped,
            home,
        })
    }

    /// Every session in the store, newest first.
    pub fn list(&self) -> Result<Vec<SessionInfo>, StateError> {
        let rd = match fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("list", &self.root)(e)),
        };
        let mut out = Vec::new();
        for d in rd {
            let d = d.map_err(io_err("list", &self.root))?;
            let Some(id) = d.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !is_valid_session_id(&id) || !d.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let meta_path = d.path().join("meta.json");
            let mut info = SessionInfo {
                id: id.clone(),
                created_ms: 0,
                status: None,
                protected: Vec::new(),
                changed: None,
                applied: 0,
                error: None,
            };
            match Meta::load(&meta_path) {
                Err(e) => info.error = Some(e.to_string()),
                Ok(meta) => {
                    info.created_ms = meta.created_ms;
                    info.status = Some(meta.status);
                    info.protected = meta.entries.iter().map(|e| e.host.clone()).collect();
                    info.applied = meta.applied.len();
                    info.changed = meta.changed;
                    if meta.status == Status::Pending {
                        // What still waits, counted as review lists it.
                        match self.open(&id).and_then(|s| s.changes()) {
                            Ok(c) => info.changed = Some(super::listed(&c).len()),
                            Err(e) => info.error = Some(e.to_string()),
                        }
                    }
                }
            }
            out.push(info);
        }
        out.sort_by(|a, b| {
            b.created_ms
                .cmp(&a.created_ms)
                .then_with(|| b.id.cmp(&a.id))
        });
        Ok(out)
    }
}

impl Session {
    /// Make durable what `begin` wrote without fsyncs: every entry's snapshot and manifest,
    /// the session's record and its place in the store. Called before an accept changes the
    /// host: the snapshot is then the way back.
    pub(crate) fn make_durable(&self) -> Result<(), StateError> {
        for e in &self.entries {
            let Some(edir) = e.manifest.parent() else {
                continue;
            };
            for node in walkdir::WalkDir::new(&e.snapshot).follow_links(false) {
                let node = node.map_err(|err| manifest::walk_err(&e.snapshot, err))?;
                let t = node.file_type();
                // A symlink cannot be opened to be synced; its directory's fsync keeps its name.
                if t.is_dir() {
                    fsops::fsync_dir(node.path())?;
                } else if t.is_file() {
                    fsops::fsync_file(node.path())?;
                }
            }
            if e.manifest.exists() {
                fsops::fsync_file(&e.manifest)?;
            }
            fsops::fsync_dir(edir)?;
        }
        fsops::fsync_file(&self.dir.join("meta.json"))?;
        fsops::fsync_dir(&self.dir)?;
        if let Some(root) = self.dir.parent() {
            fsops::fsync_dir(root)?;
        }
        Ok(())
    }

    pub(super) fn remove_working_state(&self) -> Result<(), StateError> {
        // An embedded entry's changes are part of the home layer, dropped on its own.
        for e in self.entries.iter().filter(|e| !e.embedded) {
            fsops::remove_tree(&e.upper)?;
            if let Some(w) = &e.work {
                fsops::remove_tree(w)?;
            }
        }
        Ok(())
    }

    /// Drop the session's changes: delete the upper dirs, workdirs and working copies, and mark
    /// it discarded. The manifests and `meta.json` stay for the audit trail. The snapshot copies
    /// are deleted too (the host never saw this session's changes, so there is nothing to
    /// restore), unless an earlier partial accept applied some changes; then they stay so the
    /// session can still be restored. Discarding a discarded session does nothing.
    pub fn discard(&self) -> Result<(), StateError> {
        let _lock = self.hold_running()?;
        let mut meta = self.meta()?;
        match meta.status {
            Status::Discarded => return Ok(()),
            Status::Accepted => {
                return Err(StateError::WrongStatus {
                    id: self.id.clone(),
                    status: meta.status.to_string(),
                    msg: "it was already applied; use restore to undo it".into(),
                });
            }
            Status::Pending => {}
        }
        let changed = self.plan().ok().map(|p| p.len());
        meta.status = Status::Discarded;
        meta.changed = changed;
        meta.finished_ms = Some(now_ms());
        meta.snapshot_removed = meta.applied.is_empty();
        meta.save(&self.meta_path())?;
        self.remove_working_state()?;
        if meta.snapshot_removed {
            for e in &self.entries {
                fsops::remove_tree(&e.snapshot)?;
            }
        }
        // Entry dirs a killed `begin` left half made.
        let known: BTreeSet<&str> = meta.entries.iter().map(|e| e.dir.as_str()).collect();
        let rd = fs::read_dir(&self.dir).map_err(io_err("list", &self.dir))?;
        for d in rd.flatten() {
            let name = d.file_name();
            let Some(name) = name.to_str() else { continue };
            let is_entry = name.len() > 1
                && name.starts_with('e')
                && name[1..].bytes().all(|b| b.is_ascii_digit());
            if is_entry && !known.contains(name) {
                fsops::remove_tree(&d.path())?;
            }
        }
        Ok(())
    }
}
