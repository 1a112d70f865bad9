//! The state store, sessions, review, accept, discard and restore.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs::{self, DirBuilder, OpenOptions, Permissions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::error::{StateError, io_err};
use crate::escape;
use crate::flags::{self, Subject};
use crate::fsops;
use crate::manifest::{self, ChangeKind, Manifest, Node, NodeKind, diff_manifests, join_rel};
use crate::meta::{EntryKind, Meta, MetaEntry, Status, now_ms};
use crate::overlay;
use crate::textdiff;

/// Largest file (either side) shown as a diff.
const DIFF_MAX_BYTES: u64 = 64 * 1024;
/// Most diff lines shown per file.
const DIFF_MAX_LINES: usize = 200;
/// Largest file read to look for flags (e.g. `~/.claude.json` grows large).
const FLAG_MAX_BYTES: u64 = 16 * 1024 * 1024;

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

/// A parsed restore reference: the session, its metadata, and per matched entry (by index)
/// the relative prefix to restore.
type RestoreTargets = (Session, Meta, Vec<(usize, PathBuf)>);

/// Held while a session's sandbox runs: an exclusive `flock` on `SESSION/lock`, released when
/// the guard is dropped. See [`Session::hold_running`].
#[derive(Debug)]
pub struct RunningGuard {
    _file: fs::File,
}

/// Whether every component of `rel` is a plain name (no `..`, `.`, root or prefix).
fn all_normal(rel: &Path) -> bool {
    rel.components().all(|c| matches!(c, Component::Normal(_)))
}

/// A path the caller named must not climb with `..` (it could name something outside a
/// protected path that still starts with it lexically).
fn check_caller_path(p: &Path) -> Result<(), StateError> {
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(StateError::UnsafePath {
            path: p.to_path_buf(),
        });
    }
    Ok(())
}

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

/// [`resolve_path`] for a path below `base`, whose resolved form `base_resolved` the caller
/// knows: one `lstat` per component below it, a full resolution only where one is a symlink.
pub fn resolve_path_below(p: &Path, base: &Path, base_resolved: &Path) -> Option<PathBuf> {
    let Ok(rel) = p.strip_prefix(base) else {
        return resolve_path(p);
    };
    let mut cur = base_resolved.to_path_buf();
    let mut parts = rel.components();
    for c in parts.by_ref() {
        let Component::Normal(name) = c else {
            return resolve_path(p);
        };
        cur.push(name);
        match fs::symlink_metadata(&cur) {
            Ok(md) if md.file_type().is_symlink() => return resolve_path(p),
            Ok(_) => {}
            // Nothing below a missing component can be a symlink.
            Err(_) => break,
        }
    }
    for c in parts {
        match c {
            Component::Normal(name) => cur.push(name),
            _ => return None,
        }
    }
    Some(cur)
}

/// Where `p` is, or would be if it does not exist: its nearest existing ancestor with symlinks
/// resolved, the rest appended (plain names only; `None` for `..` or a relative path).
pub fn resolve_path(p: &Path) -> Option<PathBuf> {
    if !p.is_absolute() {
        return None;
    }
    // Climb with lstat (one call a level) and resolve only the ancestor that exists: a
    // realpath per level would walk the whole path each time.
    let mut rest = Vec::new();
    let mut cur = p;
    while fs::symlink_metadata(cur).is_err() {
        match cur.file_name() {
            Some(n) if all_normal(Path::new(n)) => rest.push(n.to_owned()),
            _ => return None,
        }
        cur = cur.parent()?;
    }
    let c = fs::canonicalize(cur).ok()?;
    Some(rest.iter().rev().fold(c, |acc: PathBuf, n| acc.join(n)))
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

fn home_display(p: &Path) -> String {
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from)
        && home.is_absolute()
        && home != Path::new("/")
        && let Ok(rest) = p.strip_prefix(&home)
    {
        return if rest.as_os_str().is_empty() {
            "~".to_owned()
        } else {
            format!("~/{}", rest.display())
        };
    }
    p.display().to_string()
}

/// A mode worth showing for a new entry: setuid/setgid, world-writable, or an executable file.
fn unusual_mode(n: &Node) -> bool {
    n.kind != NodeKind::Symlink
        && (n.mode & 0o6002 != 0 || (n.kind == NodeKind::File && n.mode & 0o111 != 0))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), StateError> {
    fs::set_permissions(path, Permissions::from_mode(mode & 0o7777))
        .map_err(io_err("set mode of", path))
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

    /// Prepare a session: for each existing protected path, take a snapshot (manifest +
    /// hard-linked copy of every regular file where possible, else a copy) and create the overlay
    /// dirs (for a dir) or the working copy (for a file). Paths that do not exist are skipped
    /// (reported in [`Session::skipped`]). Writes `SESSION/meta.json` first and fsyncs it, so a
    /// kill -9 at any later point leaves a listable pending session.
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
        home: Option<&crate::home::HomeSpec>,
    ) -> Result<Session, StateError> {
        check_id(session)?;
        let in_home = |p: &Path| {
            home.is_some_and(|h| {
                p.starts_with(&h.path) && p != h.path && !h.skip.iter().any(|s| p.starts_with(s))
            })
        };
        // Resolve and validate everything before creating anything.
        let mut resolved: Vec<(PathBuf, EntryKind)> = Vec::new();
        let mut embedded: Vec<PathBuf> = Vec::new();
        let mut skipped = Vec::new();
        for p in protect {
            match fs::symlink_metadata(p) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // Not there yet: inside the home, the session may create it.
                    let at = resolve_path(p);
                    match at.filter(|a| in_home(a)) {
                        Some(a) if !resolved.iter().any(|(c, _)| *c == a) => {
                            embedded.push(a.clone());
                            resolved.push((a, EntryKind::Absent));
                        }
                        Some(_) => {}
                        None => skipped.push(p.clone()),
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
                    skipped.push(p.clone());
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
            if !resolved.iter().any(|(c, _)| *c == canon) {
                if in_home(&canon) {
                    embedded.push(canon.clone());
                }
                resolved.push((canon, kind));
            }
        }
        fsops::private_dir_all(&self.root)?;
        let root_canon = fs::canonicalize(&self.root).map_err(io_err("resolve", &self.root))?;
        for (a, _) in &resolved {
            for (b, _) in &resolved {
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
                    inner: root_canon.clone(),
                });
            }
            if a.starts_with(&root_canon) {
                return Err(StateError::Overlap {
                    outer: root_canon.clone(),
                    inner: a.clone(),
                });
            }
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
        // Nothing to review means nothing a crash could lose but scratch: no fsyncs for it.
        let durable = !resolved.is_empty();
        if durable {
            fsops::fsync_dir(&self.root)?;
        }
        let meta_path = dir.join("meta.json");
        let mut meta = Meta {
            version: 1,
            id: session.to_owned(),
            created_ms: now_ms(),
            status: Status::Pending,
            protect: protect.to_vec(),
            entries: Vec::new(),
            skipped: skipped.clone(),
            prepared: false,
            applied: Vec::new(),
            changed: None,
            finished_ms: None,
            snapshot_removed: false,
            home: home.map(crate::home::MetaHome::of),
        };
        if !durable {
            meta.prepared = true;
            meta.save_quick(&meta_path)?;
            if let Some(h) = home {
                crate::home::prepare(&dir, h)?;
                self.prune_homes();
            }
            return self.open(session);
        }
        meta.save(&meta_path)?;
        if let Some(h) = home {
            crate::home::prepare(&dir, h)?;
            self.prune_homes();
        }

        for (i, (host, kind)) in resolved.into_iter().enumerate() {
            let name = format!("e{i}");
            let edir = dir.join(&name);
            fsops::private_dir(&edir)?;
            let is_embedded = embedded.contains(&host);
            // Nothing to snapshot where nothing was: an empty manifest (what is there at the
            // end is added).
            let (m, root_node) = if kind == EntryKind::Absent {
                fsops::private_dir(&edir.join("snapshot"))?;
                (Manifest::default(), None)
            } else {
                let (m, root) = snapshot_entry(&host, kind, &edir.join("snapshot"))?;
                (m, Some(root))
            };
            m.save(&edir.join("manifest.json"))?;
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
                                path: host.clone(),
                                source,
                            },
                            other => other,
                        })?;
                }
            }
            fsops::fsync_dir(&edir)?;
            meta.entries.push(MetaEntry {
                host,
                kind,
                dir: name,
                before_hash: m.root_hash(),
                embedded: is_embedded,
            });
            meta.save(&meta_path)?;
        }
        meta.prepared = true;
        meta.save(&meta_path)?;
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
                        match self.open(&id).and_then(|s| s.plan()) {
                            Ok(p) => info.changed = Some(p.len()),
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

    /// Parse a restore reference and find what it names: the session and, per matched entry,
    /// the relative prefix to restore.
    fn restore_targets(
        &self,
        snapshot: &str,
        path: Option<&Path>,
    ) -> Result<RestoreTargets, StateError> {
        let (id, spec_path) = match snapshot.split_once(':') {
            Some((id, p)) if !p.is_empty() => (id, Some(PathBuf::from(p))),
            Some(_) => return Err(StateError::BadSnapshotRef(snapshot.to_owned())),
            None => (snapshot, None),
        };
        let target = match (path, spec_path) {
            (Some(a), Some(b)) if a != b => {
                return Err(StateError::BadSnapshotRef(format!(
                    "{snapshot} (and a different path {})",
                    a.display()
                )));
            }
            (Some(a), _) => Some(a.to_path_buf()),
            (None, b) => b,
        };
        if let Some(t) = &target {
            check_caller_path(t)?;
        }
        let session = self.open(id)?;
        let meta = session.meta()?;
        if meta.snapshot_removed {
            return Err(StateError::WrongStatus {
                id: id.to_owned(),
                status: meta.status.to_string(),
                msg:
                    "its snapshot copies were removed when it was discarded (only manifests remain)"
                        .into(),
            });
        }
        let mut targets = Vec::new();
        for (i, e) in session.entries.iter().enumerate() {
            // Nothing was there to restore to (the first run created it; accept put it there).
            if e.kind == EntryKind::Absent {
                continue;
            }
            let prefix = match &target {
                None => PathBuf::new(),
                Some(t) => match session.rel_in(e, t) {
                    Some(RelMatch::Inside(rel)) => rel,
                    Some(RelMatch::Contains) => PathBuf::new(),
                    None => continue,
                },
            };
            if !all_normal(&prefix) {
                return Err(StateError::UnsafePath {
                    path: target.unwrap_or_default(),
                });
            }
            targets.push((i, prefix));
        }
        if targets.is_empty() {
            return Err(StateError::NotProtected {
                id: id.to_owned(),
                path: target.unwrap_or_default(),
            });
        }
        Ok((session, meta, targets))
    }

    /// What [`StateStore::restore`] would do, without touching anything: `restored` lists the
    /// host paths it would write, `removed` those it would move away (into the backup
    /// directory), `refused` what it would leave alone. Fails with [`StateError::Running`]
    /// while the session runs. It does not check whether the session was ever accepted.
    pub fn restore_plan(
        &self,
        snapshot: &str,
        path: Option<&Path>,
    ) -> Result<RestoreReport, StateError> {
        let (session, _meta, targets) = self.restore_targets(snapshot, path)?;
        if session.is_running() {
            return Err(StateError::Running {
                session: session.id.clone(),
            });
        }
        let mut report = RestoreReport::default();
        for (i, prefix) in targets {
            let e = &session.entries[i];
            let plan = plan_restore(e, &prefix)?;
            report.refused.extend(plan.refused);
            report
                .removed
                .extend(plan.extras.iter().map(|(rel, _)| join_rel(&e.host, rel)));
            report.unchanged += plan.unchanged;
            report
                .restored
                .extend(plan.writes.iter().map(|(rel, _)| join_rel(&e.host, rel)));
        }
        Ok(report)
    }

    /// Bring protected paths back to a session's snapshot (the host as it was when the session
    /// began). `snapshot` is `SESSION` or `SESSION:PATH`; `path` (or `:PATH`) limits the restore
    /// to one protected path or anything inside one; neither means every protected path.
    /// Show [`StateStore::restore_plan`] first: this is destructive.
    ///
    /// Every snapshot file's hash is verified first: a hard-linked copy shares its inode with the
    /// host file, so if that file was modified in place the copy changed too and is refused.
    /// Files the snapshot did not have, and files about to be overwritten, are moved into
    /// `SESSION/restore-backup-<unix-ms>/` (each at its absolute host path below it; see
    /// [`RestoreReport::backup`]), never deleted. Nothing is written through a symlink.
    ///
    /// A session none of whose changes were ever applied is refused (there is nothing of the
    /// agent's to undo; restoring would only roll back the user's own later edits) unless
    /// `force`. A running session is refused ([`StateError::Running`]).
    pub fn restore(
        &self,
        snapshot: &str,
        path: Option<&Path>,
        force: bool,
    ) -> Result<RestoreReport, StateError> {
        let (session, meta, targets) = self.restore_targets(snapshot, path)?;
        let _lock = session.hold_running()?;
        if !force && meta.status != Status::Accepted && meta.applied.is_empty() {
            return Err(StateError::WrongStatus {
                id: session.id.clone(),
                status: meta.status.to_string(),
                msg: "none of its changes were ever applied, so there is nothing of the session's to undo (restoring would only roll back later edits; force it to do that anyway)".into(),
            });
        }
        let backup = session.dir.join(format!("restore-backup-{}", now_ms()));
        let mut report = RestoreReport::default();
        for (i, prefix) in targets {
            restore_entry(&session.entries[i], &prefix, &backup, &mut report)?;
        }
        Ok(report)
    }
}

enum RelMatch {
    /// The path is the protected path or inside it: this relative path.
    Inside(PathBuf),
    /// The path contains the protected path.
    Contains,
}

/// Read a file as text for review: regular, at most `limit` bytes, hashing to `expect`, UTF-8
/// without NUL bytes; otherwise `None`.
fn read_text(path: &Path, expect: Option<&str>, limit: u64) -> Option<String> {
    let mut f = fsops::open_regular(path).ok()?;
    if f.metadata().ok()?.len() > limit {
        return None;
    }
    let mut buf = Vec::new();
    f.by_ref().take(limit + 1).read_to_end(&mut buf).ok()?;
    if buf.len() as u64 > limit {
        return None;
    }
    if let Some(want) = expect
        && blake3::hash(&buf).to_hex().as_str() != want
    {
        return None;
    }
    if buf.contains(&0) {
        return None;
    }
    String::from_utf8(buf).ok()
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
        match file.try_lock() {
            Ok(()) => Ok(RunningGuard { _file: file }),
            Err(fs::TryLockError::WouldBlock) => Err(StateError::Running {
                session: self.id.clone(),
            }),
            Err(fs::TryLockError::Error(e)) => Err(io_err("lock", &path)(e)),
        }
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

    fn plan(&self) -> Result<Vec<Planned>, StateError> {
        let meta = self.meta()?;
        if meta.status != Status::Pending {
            return Err(StateError::WrongStatus {
                id: self.id.clone(),
                status: meta.status.to_string(),
                msg: "its changes are no longer held".into(),
            });
        }
        let mut out = Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            let before = Manifest::load(&e.manifest)?;
            let (after, sources) = match e.kind {
                _ if e.embedded => crate::home::embedded_after(&before, &e.upper)?,
                EntryKind::Dir => overlay::merged(&before, &e.upper)?,
                EntryKind::File | EntryKind::Absent => {
                    let mut m = Manifest::default();
                    let mut s = BTreeMap::new();
                    if let Some(n) = manifest::node_of(&e.upper)? {
                        m.entries.insert(PathBuf::new(), n);
                        s.insert(PathBuf::new(), e.upper.clone());
                    }
                    (m, s)
                }
            };
            for c in diff_manifests(&before, &after) {
                out.push(Planned {
                    entry: i,
                    host_path: join_rel(&e.host, &c.path),
                    kind: c.kind,
                    before: before.entries.get(&c.path).cloned(),
                    after: after.entries.get(&c.path).cloned(),
                    source: sources.get(&c.path).cloned(),
                    rel: c.path,
                });
            }
        }
        Ok(out)
    }

    /// Every change the sandbox made to the protected paths, in path order, with flags and
    /// diffs. Only for pending sessions.
    pub fn changes(&self) -> Result<Vec<Change>, StateError> {
        let plans = self.plan()?;
        Ok(plans.iter().map(|p| self.describe(p)).collect())
    }

    fn describe(&self, p: &Planned) -> Change {
        let e = &self.entries[p.entry];
        let file_hash = |n: &Option<Node>| -> Option<String> {
            n.as_ref()
                .filter(|n| n.kind == NodeKind::File)
                .and_then(|n| n.hash.clone())
        };
        let before_text = file_hash(&p.before)
            .and_then(|h| read_text(&join_rel(&e.snapshot, &p.rel), Some(&h), FLAG_MAX_BYTES));
        let after_text = file_hash(&p.after)
            .and_then(|h| read_text(p.source.as_deref()?, Some(&h), FLAG_MAX_BYTES));
        // The symlink target, only if it is still what the manifest recorded.
        let link_target = p
            .after
            .as_ref()
            .filter(|a| a.kind == NodeKind::Symlink)
            .and_then(|a| {
                let t = fs::read_link(p.source.as_deref()?).ok()?;
                let h = blake3::hash(std::os::unix::ffi::OsStrExt::as_bytes(t.as_os_str()));
                (a.hash.as_deref() == Some(h.to_hex().as_str())).then_some(t)
            });
        let flags = flags::flags(&Subject {
            host_path: &p.host_path,
            rel: &p.rel,
            kind: p.kind,
            before: p.before.as_ref(),
            after: p.after.as_ref(),
            before_text: before_text.as_deref(),
            after_text: after_text.as_deref(),
            link_target: link_target.as_deref(),
        })
        .iter()
        .map(|f| escape::text(f))
        .collect();
        let before_ok = match &p.before {
            None => true,
            Some(n) if n.kind == NodeKind::File => {
                n.size <= DIFF_MAX_BYTES && before_text.is_some()
            }
            Some(_) => p.kind == ChangeKind::TypeChanged,
        };
        let diff = match (&p.after, &after_text) {
            (Some(a), Some(t)) if a.size <= DIFF_MAX_BYTES && before_ok => {
                let label = if p.rel.as_os_str().is_empty() {
                    e.host.file_name().map(escape::name).unwrap_or_default()
                } else {
                    escape::name(p.rel.as_os_str())
                };
                let d = textdiff::unified(
                    before_text.as_deref().unwrap_or(""),
                    t,
                    &label,
                    DIFF_MAX_LINES,
                );
                (!d.is_empty()).then(|| escape::lines(&d))
            }
            _ => None,
        };
        Change {
            host_path: p.host_path.clone(),
            kind: p.kind,
            flags,
            diff,
            protected: e.host.clone(),
            rel: p.rel.clone(),
            before: p.before.clone(),
            after: p.after.clone(),
            link_target,
        }
    }

    /// A compact, human summary: per protected path, `+` added, `-` removed, `~` changed, `!`
    /// type changed, flagged lines first, then unified diffs of small text files.
    pub fn summary(&self) -> Result<String, StateError> {
        let changes = self.changes()?;
        let flagged = changes.iter().filter(|c| !c.flags.is_empty()).count();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "session {}: {} change{} under {} protected path{}{}",
            self.id,
            changes.len(),
            if changes.len() == 1 { "" } else { "s" },
            self.entries.len(),
            if self.entries.len() == 1 { "" } else { "s" },
            if flagged > 0 {
                format!(", {flagged} FLAGGED")
            } else {
                String::new()
            }
        );
        let mut diffs = String::new();
        for e in &self.entries {
            let mine: Vec<&Change> = changes.iter().filter(|c| c.protected == e.host).collect();
            let kind = match e.kind {
                EntryKind::Dir => "dir",
                EntryKind::File => "file",
                EntryKind::Absent => "new",
            };
            let host_shown = escape::name(OsStr::new(&home_display(&e.host)));
            if mine.is_empty() {
                let _ = writeln!(out, "{host_shown} ({kind}): unchanged");
                continue;
            }
            let count = |k: ChangeKind| mine.iter().filter(|c| c.kind == k).count();
            let _ = writeln!(
                out,
                "{host_shown} ({kind}): +{} -{} ~{}{}",
                count(ChangeKind::Added),
                count(ChangeKind::Removed),
                count(ChangeKind::Modified),
                match count(ChangeKind::TypeChanged) {
                    0 => String::new(),
                    n => format!(" !{n} type changed"),
                }
            );
            // Added/removed directories with other changes below them say nothing new.
            let is_dir = |n: &Option<Node>| n.as_ref().is_some_and(|n| n.kind == NodeKind::Dir);
            let mut shown: Vec<&Change> = mine
                .iter()
                .copied()
                .filter(|c| {
                    let implied = match c.kind {
                        ChangeKind::Added => is_dir(&c.after),
                        ChangeKind::Removed => is_dir(&c.before),
                        _ => false,
                    };
                    !(implied
                        && mine
                            .iter()
                            .any(|o| o.rel != c.rel && o.rel.starts_with(&c.rel)))
                })
                .collect();
            shown.sort_by_key(|c| c.flags.is_empty());
            for c in shown {
                let name = if c.rel.as_os_str().is_empty() {
                    ".".to_owned()
                } else {
                    escape::name(c.rel.as_os_str())
                };
                let slash = if is_dir(&c.after) || (c.after.is_none() && is_dir(&c.before)) {
                    "/"
                } else {
                    ""
                };
                let mode = match (&c.before, &c.after) {
                    (Some(b), Some(a)) if b.kind == a.kind && b.mode != a.mode => {
                        format!(" (mode {:o} -> {:o})", b.mode, a.mode)
                    }
                    (None, Some(a)) if unusual_mode(a) => format!(" (mode {:o})", a.mode),
                    _ => String::new(),
                };
                let target = match (&c.after, &c.link_target) {
                    (Some(a), Some(t)) if a.kind == NodeKind::Symlink => {
                        format!(" -> {}", escape::name(t.as_os_str()))
                    }
                    (Some(a), None) if a.kind == NodeKind::Symlink => {
                        " -> (target changed since the review started)".to_owned()
                    }
                    _ => String::new(),
                };
                if c.flags.is_empty() {
                    let _ = writeln!(out, "  {} {name}{slash}{target}{mode}", c.kind.sign());
                } else {
                    let flags: Vec<String> = c.flags.iter().map(|f| escape::text(f)).collect();
                    let _ = writeln!(
                        out,
                        "  {} {name}{slash}{target}{mode}  FLAGGED: {}",
                        c.kind.sign(),
                        flags.join("; ")
                    );
                }
                if let Some(d) = &c.diff {
                    diffs.push_str(&escape::lines(d));
                }
            }
        }
        for s in &self.skipped {
            let _ = writeln!(
                out,
                "not protected (did not exist): {}",
                escape::name(OsStr::new(&home_display(s)))
            );
        }
        if !diffs.is_empty() {
            out.push('\n');
            out.push_str(&diffs);
        }
        Ok(out)
    }

    /// Apply the session's changes to the host, each file atomically. `only` limits it to these
    /// host paths and anything under them (empty = all). A file changed on the host since the
    /// session began is a [`Conflict`] and is left alone; the others still apply. Progress is
    /// recorded in `meta.json`, so accepting again after a crash continues. When every change
    /// is applied, the session is marked accepted and its upper dirs and working copies are
    /// deleted (the snapshot stays, for [`StateStore::restore`]).
    pub fn accept(&self, only: &[PathBuf]) -> Result<AcceptReport, StateError> {
        let _lock = self.hold_running()?;
        for o in only {
            check_caller_path(o)?;
        }
        let mut meta = self.meta()?;
        let plans = self.plan()?;
        let mut selected: Vec<&Planned> = if only.is_empty() {
            plans.iter().collect()
        } else {
            let mut prefixes = Vec::new();
            for o in only {
                let mut hit = None;
                for e in &self.entries {
                    match self.rel_in(e, o) {
                        Some(RelMatch::Inside(rel)) => hit = Some(join_rel(&e.host, &rel)),
                        Some(RelMatch::Contains) => hit = Some(e.host.clone()),
                        None => continue,
                    }
                    prefixes.push(hit.clone().unwrap_or_default());
                }
                if hit.is_none() {
                    return Err(StateError::NotProtected {
                        id: self.id.clone(),
                        path: o.clone(),
                    });
                }
            }
            let chosen: Vec<&Planned> = plans
                .iter()
                .filter(|p| prefixes.iter().any(|x| p.host_path.starts_with(x)))
                .collect();
            // New directories the chosen files need come along.
            plans
                .iter()
                .filter(|p| {
                    chosen.iter().any(|c| std::ptr::eq(*c, *p))
                        || (p.kind == ChangeKind::Added
                            && p.after.as_ref().is_some_and(|a| a.kind == NodeKind::Dir)
                            && chosen.iter().any(|c| {
                                c.entry == p.entry && c.rel != p.rel && c.rel.starts_with(&p.rel)
                            }))
                })
                .collect()
        };
        // Removals deepest first, then everything else parents first.
        selected.sort_by(|a, b| {
            let ra = a.after.is_none();
            let rb = b.after.is_none();
            match (ra, rb) {
                (true, false) => std::cmp::Ordering::Less,
                (false, true) => std::cmp::Ordering::Greater,
                (true, true) => b.host_path.cmp(&a.host_path),
                (false, false) => a.host_path.cmp(&b.host_path),
            }
        });
        let mut report = AcceptReport::default();
        let mut dir_modes: Vec<(PathBuf, PathBuf, u32)> = Vec::new();
        // A path created by the session (an agent's first run) may need its parents, as a
        // tool creating it on the host would have made them.
        for p in &selected {
            let e = &self.entries[p.entry];
            if e.kind == EntryKind::Absent
                && let Some(parent) = e.host.parent()
                && fs::symlink_metadata(parent).is_err()
            {
                fs::create_dir_all(parent).map_err(io_err("create parent of", &e.host))?;
            }
        }
        for p in selected {
            if meta.applied.contains(&p.host_path) {
                report.applied.push(p.host_path.clone());
                continue;
            }
            match apply_one(&self.entries[p.entry].host, p, &mut dir_modes) {
                Ok(()) => {
                    meta.applied.push(p.host_path.clone());
                    meta.save(&self.meta_path())?;
                    report.applied.push(p.host_path.clone());
                }
                Err(why) => report.conflicts.push(Conflict {
                    path: p.host_path.clone(),
                    why,
                }),
            }
        }
        for (root, rel, mode) in dir_modes.iter().rev() {
            if let Err(why) = set_host_dir_mode(root, rel, *mode) {
                report.conflicts.push(Conflict {
                    path: join_rel(root, rel),
                    why,
                });
            }
        }
        let done: BTreeSet<&PathBuf> = meta.applied.iter().collect();
        if plans.iter().all(|p| done.contains(&p.host_path)) {
            meta.status = Status::Accepted;
            meta.changed = Some(plans.len());
            meta.finished_ms = Some(now_ms());
            meta.save(&self.meta_path())?;
            report.accepted = true;
            self.remove_working_state()?;
        }
        Ok(report)
    }

    fn remove_working_state(&self) -> Result<(), StateError> {
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

    /// The manifest root hash of each protected path's result (snapshot with the session's
    /// changes), for the audit log. Only for pending sessions.
    pub fn after_hashes(&self) -> Result<Vec<(PathBuf, String)>, StateError> {
        let plans = self.plan()?;
        let mut out = Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            let mut m = Manifest::load(&e.manifest)?;
            for p in plans.iter().filter(|p| p.entry == i) {
                match &p.after {
                    Some(n) => {
                        m.entries.insert(p.rel.clone(), n.clone());
                    }
                    None => {
                        m.entries.remove(&p.rel);
                    }
                }
            }
            out.push((e.host.clone(), m.root_hash()));
        }
        Ok(out)
    }
}

/// Check that every directory from `root` down to `rel`'s parent is a real directory on the
/// host (not missing, not a symlink), so nothing is written through a swapped-in link.
fn check_parents(root: &Path, rel: &Path) -> Result<(), String> {
    if rel.as_os_str().is_empty() {
        return Ok(());
    }
    let mut cur = root.to_path_buf();
    let check = |p: &Path| -> Result<(), String> {
        match fs::symlink_metadata(p) {
            Ok(md) if md.is_dir() => Ok(()),
            Ok(md) if md.file_type().is_symlink() => {
                Err(format!("{} is a symlink on the host now", p.display()))
            }
            Ok(_) => Err(format!(
                "{} is no longer a directory on the host",
                p.display()
            )),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(format!("{} is missing on the host", p.display()))
            }
            Err(e) => Err(format!("{}: {e}", p.display())),
        }
    };
    check(&cur)?;
    if let Some(parent) = rel.parent() {
        for c in parent.components() {
            cur.push(c);
            check(&cur)?;
        }
    }
    Ok(())
}

/// Set a host directory's mode (setuid/setgid stripped) after checking that no ancestor from
/// `root` down is a symlink, without following a symlink at the directory itself.
fn set_host_dir_mode(root: &Path, rel: &Path, mode: u32) -> Result<(), String> {
    if !all_normal(rel) {
        return Err(format!("{}: unsafe relative path", rel.display()));
    }
    check_parents(root, rel)?;
    fsops::set_dir_mode_nofollow(&join_rel(root, rel), mode).map_err(|e| e.to_string())
}

pub(crate) fn apply_one(
    root: &Path,
    p: &Planned,
    dir_modes: &mut Vec<(PathBuf, PathBuf, u32)>,
) -> Result<(), String> {
    if !all_normal(&p.rel) {
        return Err(format!("{}: unsafe relative path", p.rel.display()));
    }
    check_parents(root, &p.rel)?;
    let dst = &p.host_path;
    let current = manifest::node_of(dst).map_err(|e| e.to_string())?;
    // Already there (an accept interrupted after the rename, before the record)?
    if let (Some(c), Some(a)) = (&current, &p.after)
        && (c.same_as(a)
            || (c.kind == NodeKind::Dir && a.kind == NodeKind::Dir && p.before.is_none()))
    {
        if a.kind == NodeKind::Dir {
            dir_modes.push((root.to_path_buf(), p.rel.clone(), a.mode));
        }
        return Ok(());
    }
    match (&current, &p.before) {
        (None, None) => {}
        (Some(c), Some(b)) if c.same_as(b) => {}
        (Some(_), None) => return Err("created on the host since the session started".into()),
        (None, Some(_)) => return Err("removed on the host since the session started".into()),
        (Some(_), Some(_)) => return Err("changed on the host since the session started".into()),
    }
    let Some(after) = &p.after else {
        let is_dir = p.before.as_ref().is_some_and(|b| b.kind == NodeKind::Dir);
        return fsops::remove_node(dst, is_dir).map_err(|e| match &e {
            StateError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOTEMPTY) => {
                "directory not empty on the host (new files, or conflicts, inside)".to_owned()
            }
            _ => e.to_string(),
        });
    };
    if after.kind == NodeKind::Other {
        return Err("special files (FIFOs, sockets, devices) are not applied".into());
    }
    if let Some(c) = &current
        && c.kind != after.kind
    {
        fsops::remove_node(dst, c.kind == NodeKind::Dir).map_err(|e| e.to_string())?;
    }
    let source = || {
        p.source
            .as_deref()
            .ok_or_else(|| "the session's copy is missing".to_owned())
    };
    match after.kind {
        NodeKind::Dir => {
            if current.as_ref().is_none_or(|c| c.kind != NodeKind::Dir) {
                fsops::private_dir(dst).map_err(|e| e.to_string())?;
                fsops::fsync_dir(dst.parent().unwrap_or(Path::new("/")))
                    .map_err(|e| e.to_string())?;
            }
            dir_modes.push((root.to_path_buf(), p.rel.clone(), after.mode));
            Ok(())
        }
        NodeKind::File => fsops::copy_atomic(source()?, dst, after.mode, after.hash.as_deref())
            .map(|_| ())
            .map_err(|e| e.to_string()),
        NodeKind::Symlink => {
            let src = source()?;
            let target = fs::read_link(src).map_err(|e| format!("{}: {e}", src.display()))?;
            let h = blake3::hash(std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str()));
            if after.hash.as_deref() != Some(h.to_hex().as_str()) {
                return Err(format!("{} changed since it was reviewed", src.display()));
            }
            fsops::symlink_atomic(&target, dst).map_err(|e| e.to_string())
        }
        NodeKind::Other => Err("special files are not applied".into()),
    }
}

/// What restoring one entry (below `prefix`) takes.
struct RestorePlan {
    refused: Vec<Conflict>,
    /// Host entries (relative) the snapshot does not have, or has as another kind: moved away,
    /// deepest first.
    extras: Vec<(PathBuf, bool)>,
    /// Trusted snapshot entries that differ from the host, parents first.
    writes: Vec<(PathBuf, Node)>,
    unchanged: usize,
}

fn plan_restore(e: &Entry, prefix: &Path) -> Result<RestorePlan, StateError> {
    if !all_normal(prefix) {
        return Err(StateError::UnsafePath {
            path: prefix.to_path_buf(),
        });
    }
    let m = Manifest::load(&e.manifest)?;
    let mut plan = RestorePlan {
        refused: Vec::new(),
        extras: Vec::new(),
        writes: Vec::new(),
        unchanged: 0,
    };
    // 1. Which snapshot copies can be trusted.
    let mut trusted: BTreeMap<PathBuf, Node> = BTreeMap::new();
    let mut refused_rel: Vec<PathBuf> = Vec::new();
    for (rel, node) in m
        .entries
        .range::<Path, _>((
            std::ops::Bound::Included(prefix),
            std::ops::Bound::Unbounded,
        ))
        .take_while(|(k, _)| k.starts_with(prefix))
    {
        let src = join_rel(&e.snapshot, rel);
        let host = join_rel(&e.host, rel);
        let ok = if !all_normal(rel) {
            Err("unsafe path in the snapshot's manifest".to_owned())
        } else {
            match node.kind {
                NodeKind::Dir => Ok(()),
                NodeKind::File | NodeKind::Symlink => {
                    let got = if node.kind == NodeKind::File {
                        manifest::hash_file(&src)
                    } else {
                        manifest::hash_link(&src)
                    };
                    match got {
                        Ok((h, _)) if Some(&h) == node.hash.as_ref() => Ok(()),
                        Ok(_) => Err(format!(
                            "the snapshot copy {} no longer matches the snapshot's manifest (it is hard-linked to the host file, which was modified in place since); not restoring it",
                            src.display()
                        )),
                        Err(err) => Err(format!("snapshot copy unusable: {err}")),
                    }
                }
                NodeKind::Other => Err("FIFOs, sockets and devices are not restored".into()),
            }
        };
        match ok {
            Ok(()) => {
                trusted.insert(rel.clone(), node.clone());
            }
            Err(why) => {
                refused_rel.push(rel.clone());
                plan.refused.push(Conflict { path: host, why });
            }
        }
    }
    // 2. What the snapshot did not have (or had as another kind). An ancestor of a refused
    // entry is kept only when it has the snapshot's kind (a directory swapped for a symlink
    // is never kept).
    let host_root = join_rel(&e.host, prefix);
    if fs::symlink_metadata(&host_root).is_ok() {
        let walk = walkdir::WalkDir::new(&host_root)
            .follow_links(false)
            .follow_root_links(false)
            .same_file_system(true);
        for item in walk {
            let item = item.map_err(|err| {
                let path = err.path().unwrap_or(&host_root).to_path_buf();
                StateError::Io {
                    what: "walk",
                    path,
                    source: err
                        .into_io_error()
                        .unwrap_or_else(|| io::Error::other("filesystem loop")),
                }
            })?;
            let rel = join_rel(
                prefix,
                item.path()
                    .strip_prefix(&host_root)
                    .unwrap_or(Path::new("")),
            );
            let kind = if item.file_type().is_dir() {
                NodeKind::Dir
            } else if item.file_type().is_file() {
                NodeKind::File
            } else if item.file_type().is_symlink() {
                NodeKind::Symlink
            } else {
                NodeKind::Other
            };
            let keep = m.entries.get(&rel).is_some_and(|n| n.kind == kind)
                || refused_rel.iter().any(|r| rel.starts_with(r));
            if !keep {
                plan.extras.push((rel, kind == NodeKind::Dir));
            }
        }
    }
    plan.extras.sort_by(|a, b| b.0.cmp(&a.0));
    // 3. What differs and gets written back.
    let extra_set: BTreeSet<&PathBuf> = plan.extras.iter().map(|(r, _)| r).collect();
    let moved_away = |rel: &Path| {
        rel.ancestors()
            .any(|a| extra_set.contains(&a.to_path_buf()))
    };
    for (rel, node) in trusted {
        if !moved_away(&rel) {
            let current = manifest::node_of(&join_rel(&e.host, &rel));
            match current {
                Ok(Some(c)) if c.same_as(&node) => {
                    plan.unchanged += 1;
                    continue;
                }
                Ok(_) => {}
                Err(err) => {
                    plan.refused.push(Conflict {
                        path: join_rel(&e.host, &rel),
                        why: err.to_string(),
                    });
                    continue;
                }
            }
        }
        plan.writes.push((rel, node));
    }
    Ok(plan)
}

fn restore_entry(
    e: &Entry,
    prefix: &Path,
    backup: &Path,
    report: &mut RestoreReport,
) -> Result<(), StateError> {
    let plan = plan_restore(e, prefix)?;
    report.refused.extend(plan.refused);
    let refuse = |report: &mut RestoreReport, path: PathBuf, why: String| {
        report.refused.push(Conflict { path, why });
    };
    // Where a host path goes in the backup: at its absolute path below `backup`.
    let backup_of = |rel: &Path| -> PathBuf {
        let host = join_rel(&e.host, rel);
        backup.join(host.strip_prefix("/").unwrap_or(&host))
    };
    // 1. Move away what the snapshot did not have: whole subtrees, topmost first.
    let extra_set: BTreeSet<&PathBuf> = plan.extras.iter().map(|(r, _)| r).collect();
    let mut tops: Vec<&PathBuf> = extra_set
        .iter()
        .copied()
        .filter(|r| {
            !r.ancestors()
                .skip(1)
                .any(|a| extra_set.contains(&a.to_path_buf()))
        })
        .collect();
    tops.sort();
    let mut moved: Vec<&PathBuf> = Vec::new();
    for rel in tops {
        let host = join_rel(&e.host, rel);
        if let Err(why) = check_parents(&e.host, rel) {
            refuse(report, host, why);
            continue;
        }
        match fsops::move_aside(&host, &backup_of(rel)) {
            Ok(()) => {
                report.backup = Some(backup.to_path_buf());
                moved.push(rel);
            }
            Err(err) => refuse(report, host, err.to_string()),
        }
    }
    for (rel, _) in &plan.extras {
        if moved.iter().any(|m| rel.starts_with(m)) {
            report.removed.push(join_rel(&e.host, rel));
        }
    }
    // 2. Write back everything that differs, parents first; directory modes last.
    let mut dir_modes = Vec::new();
    for (rel, node) in &plan.writes {
        let dst = join_rel(&e.host, rel);
        if let Err(why) = check_parents(&e.host, rel) {
            refuse(report, dst, why);
            continue;
        }
        let current = match manifest::node_of(&dst) {
            Ok(c) => c,
            Err(err) => {
                refuse(report, dst, err.to_string());
                continue;
            }
        };
        if let Some(c) = &current {
            if c.same_as(node) {
                report.unchanged += 1;
                continue;
            }
            if c.kind != node.kind {
                refuse(
                    report,
                    dst,
                    "a different kind of file is there on the host; not replaced".into(),
                );
                continue;
            }
            if c.kind != NodeKind::Dir {
                if let Err(err) = fsops::keep_copy(&dst, &backup_of(rel)) {
                    refuse(report, dst, format!("cannot back it up first: {err}"));
                    continue;
                }
                report.backup = Some(backup.to_path_buf());
            }
        }
        let src = join_rel(&e.snapshot, rel);
        let res = match node.kind {
            NodeKind::Dir => {
                let made = if current.is_none() {
                    fsops::private_dir(&dst)
                } else {
                    Ok(())
                };
                dir_modes.push((rel.clone(), node.mode));
                made
            }
            NodeKind::File => {
                fsops::copy_atomic(&src, &dst, node.mode, node.hash.as_deref()).map(|_| ())
            }
            NodeKind::Symlink => fs::read_link(&src)
                .map_err(io_err("read symlink", &src))
                .and_then(|t| fsops::symlink_atomic(&t, &dst)),
            NodeKind::Other => Ok(()),
        };
        match res {
            Ok(()) => report.restored.push(dst),
            Err(err) => refuse(report, dst, err.to_string()),
        }
    }
    for (rel, mode) in dir_modes.into_iter().rev() {
        if let Err(why) = set_host_dir_mode(&e.host, &rel, mode) {
            refuse(report, join_rel(&e.host, &rel), why);
        }
    }
    Ok(())
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
