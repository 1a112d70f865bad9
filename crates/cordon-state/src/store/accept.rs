//! Accept: a session's reviewed changes applied to the host, each file atomically, refusing
//! what the host changed meanwhile.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::paths::{all_normal, check_caller_path, check_parents, set_host_dir_mode};
use super::{AcceptReport, Conflict, Planned, RelMatch, Session};
use crate::error::{StateError, io_err};
use crate::fsops;
use crate::manifest::{self, ChangeKind, NodeKind, join_rel};
use crate::meta::{EntryKind, Status, now_ms};

impl Session {
    /// Apply the session's changes to the host, each file atomically. `only` limits it to these
    /// host paths and anything under them (empty = all). A file changed on the host since the
    /// session began is a [`Conflict`] and is left alone; the others still apply. Progress is
    /// recorded in `meta.json`, so accepting again after a crash continues. When every change
    /// is applied, the session is marked accepted and its upper dirs and working copies are
    /// deleted (the snapshot stays, for [`StateStore::restore`](crate::StateStore::restore)).
    pub fn accept(&self, only: &[PathBuf]) -> Result<AcceptReport, StateError> {
        let _lock = self.hold_running()?;
        for o in only {
            check_caller_path(o)?;
        }
        let mut meta = self.meta()?;
        let plans = self.plan()?;
        if !plans.is_empty() {
            self.make_durable()?;
        }
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
