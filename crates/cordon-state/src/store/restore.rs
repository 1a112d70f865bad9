//! Restore: protected paths brought back to a session's snapshot, with everything removed or
//! overwritten moved into a backup directory first.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::paths::{all_normal, check_caller_path, check_parents, set_host_dir_mode};
use super::{Conflict, Entry, RelMatch, RestoreReport, Session, StateStore};
use crate::error::{StateError, io_err};
use crate::fsops;
use crate::manifest::{self, Manifest, Node, NodeKind, join_rel};
use crate::meta::{EntryKind, Meta, Status, now_ms};

/// A parsed restore reference: the session, its metadata, and per matched entry (by index)
/// the relative prefix to restore.
type RestoreTargets = (Session, Meta, Vec<(usize, PathBuf)>);

impl StateStore {
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
        let ok = trust_copy(rel, node, &src);
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
            let item = item.map_err(|err| crate::manifest::walk_err(&host_root, err))?;
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

/// Whether the snapshot's copy `src` of `rel` can be trusted: a safe path, and a file or
/// link whose content still has the manifest's hash; the error says why not.
fn trust_copy(rel: &Path, node: &Node, src: &Path) -> Result<(), String> {
    if !all_normal(rel) {
        Err("unsafe path in the snapshot's manifest".to_owned())
    } else {
        match node.kind {
            NodeKind::Dir => Ok(()),
            NodeKind::File | NodeKind::Symlink => {
                let got = if node.kind == NodeKind::File {
                    manifest::hash_file(src)
                } else {
                    manifest::hash_link(src)
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
    }
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
