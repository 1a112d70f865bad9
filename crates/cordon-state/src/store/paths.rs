//! The paths callers name, resolved without trusting them, and the checks every write to the
//! host makes first so that nothing is written through a symlink swapped in meanwhile.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::error::StateError;
use crate::fsops;
use crate::manifest::join_rel;

/// Whether every component of `rel` is a plain name (no `..`, `.`, root or prefix).
pub(super) fn all_normal(rel: &Path) -> bool {
    rel.components().all(|c| matches!(c, Component::Normal(_)))
}

/// A path the caller named must not climb with `..` (it could name something outside a
/// protected path that still starts with it lexically).
pub(super) fn check_caller_path(p: &Path) -> Result<(), StateError> {
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(StateError::UnsafePath {
            path: p.to_path_buf(),
        });
    }
    Ok(())
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

/// Check that every directory from `root` down to `rel`'s parent is a real directory on the
/// host (not missing, not a symlink), so nothing is written through a swapped-in link.
pub(super) fn check_parents(root: &Path, rel: &Path) -> Result<(), String> {
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
pub(super) fn set_host_dir_mode(root: &Path, rel: &Path, mode: u32) -> Result<(), String> {
    if !all_normal(rel) {
        return Err(format!("{}: unsafe relative path", rel.display()));
    }
    check_parents(root, rel)?;
    fsops::set_dir_mode_nofollow(&join_rel(root, rel), mode).map_err(|e| e.to_string())
}
