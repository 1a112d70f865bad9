//! Reading an overlayfs upper directory: what the merged tree (lower + upper) looks like, as a
//! manifest, without mounting anything.
//!
//! Rules (overlayfs, unprivileged `userxattr` mounts and privileged ones):
//! - a character device with rdev 0, or a zero-size regular file carrying the
//!   `user.overlay.whiteout` (or `trusted.overlay.whiteout`) xattr, is a whiteout: the path and
//!   everything below it in the lower tree are gone;
//! - a directory with `user.overlay.opaque` (or `trusted.overlay.opaque`) = `y` hides everything
//!   the lower tree had below it;
//! - a non-directory in upper hides a lower directory of the same name and all it held;
//! - anything else in upper is the merged tree's entry at that path.
//!
//! `redirect_dir` and `metacopy` upper dirs (not available to unprivileged mounts) are refused.

use std::collections::BTreeMap;
use std::fs::Metadata;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::{StateError, io_err};
use crate::manifest::{self, Manifest, NodeKind};

const PREFIXES: [&str; 2] = ["user.overlay.", "trusted.overlay."];

fn overlay_xattr(path: &Path, name: &str) -> Result<Option<Vec<u8>>, StateError> {
    for p in PREFIXES {
        match xattr::get(path, format!("{p}{name}")) {
            Ok(Some(v)) => return Ok(Some(v)),
            Ok(None) => {}
            // trusted.* is unreadable without CAP_SYS_ADMIN, and some filesystems have no xattrs.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPERM | libc::EACCES | libc::ENOTSUP)
                ) => {}
            Err(e) => return Err(io_err("read xattrs of", path)(e)),
        }
    }
    Ok(None)
}

/// Whether the upper entry at `path` is a whiteout.
pub(crate) fn is_whiteout(path: &Path, md: &Metadata) -> Result<bool, StateError> {
    let ft = md.file_type();
    if ft.is_char_device() {
        return Ok(md.rdev() == 0);
    }
    if ft.is_file() && md.len() == 0 {
        return Ok(overlay_xattr(path, "whiteout")?.is_some());
    }
    Ok(false)
}

/// Whether the upper directory at `path` is opaque.
pub(crate) fn is_opaque(path: &Path) -> Result<bool, StateError> {
    Ok(overlay_xattr(path, "opaque")?.as_deref() == Some(b"y".as_slice()))
}

/// The merged tree of `before` (the lower tree's manifest) under `upper`, and for each entry
/// taken from upper, the upper file that holds its content.
pub(crate) fn merged(
    before: &Manifest,
    upper: &Path,
) -> Result<(Manifest, BTreeMap<PathBuf, PathBuf>), StateError> {
    let mut after = before.clone();
    let mut sources = BTreeMap::new();
    let walk = walkdir::WalkDir::new(upper)
        .follow_links(false)
        .follow_root_links(false)
        .sort_by_file_name();
    for e in walk {
        let e = e.map_err(|e| crate::manifest::walk_err(upper, e))?;
        let path = e.path();
        let rel = path
            .strip_prefix(upper)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let md = std::fs::symlink_metadata(path).map_err(io_err("inspect", path))?;
        if e.depth() == 0 && !md.is_dir() {
            return Err(StateError::Unsupported {
                path: path.to_path_buf(),
                what: "overlay upper dir is not a directory".into(),
            });
        }
        if is_whiteout(path, &md)? {
            after.entries.remove(&rel);
            after.remove_below(&rel);
            continue;
        }
        if md.is_dir() || md.is_file() {
            for bad in ["redirect", "metacopy"] {
                if overlay_xattr(path, bad)?.is_some() {
                    return Err(StateError::Unsupported {
                        path: path.to_path_buf(),
                        what: format!(
                            "overlayfs {bad} xattr found; mount the overlay with redirect_dir=off,metacopy=off (userxattr does)"
                        ),
                    });
                }
            }
        }
        let node = manifest::node_with(path, &md)?;
        if node.kind == NodeKind::Dir {
            let was_dir = after.entries.get(&rel).map(|n| n.kind) == Some(NodeKind::Dir);
            if !was_dir || is_opaque(path)? {
                after.remove_below(&rel);
            }
        } else {
            // A non-directory hides whatever the lower tree had at and below this path.
            after.remove_below(&rel);
            sources.insert(rel.clone(), path.to_path_buf());
        }
        after.entries.insert(rel, node);
    }
    Ok((after, sources))
}

/// Whether `rel` lies in a git object store of `lower` (the store itself included): the
/// snapshot leaves stores out ([`crate::manifest`]'s walk), so `before` does not list them.
fn in_object_store(lower: &Path, rel: &Path) -> bool {
    let mut at = PathBuf::new();
    for c in rel.components() {
        at.push(c);
        if c.as_os_str() == "objects" && crate::exec_surface::is_git_objects(&lower.join(&at)) {
            return true;
        }
    }
    false
}

/// The lower tree's entries that the snapshot left out (git object stores) and the upper dir
/// touches: a file copied up or replaced, and everything a whiteout or an opaque directory
/// hides. Added to `before`, they make a deleted or rewritten object a change review sees
/// (and holds) rather than nothing; an object only added stays an addition.
pub(crate) fn unscanned_lower(
    before: &Manifest,
    upper: &Path,
    lower: &Path,
) -> Result<Vec<(PathBuf, manifest::Node)>, StateError> {
    let mut out = Vec::new();
    let walk = walkdir::WalkDir::new(upper)
        .follow_links(false)
        .follow_root_links(false)
        .min_depth(1);
    for e in walk {
        let e = e.map_err(|e| crate::manifest::walk_err(upper, e))?;
        let rel = e
            .path()
            .strip_prefix(upper)
            .unwrap_or(e.path())
            .to_path_buf();
        if before.entries.contains_key(&rel) || !in_object_store(lower, &rel) {
            continue;
        }
        let low = lower.join(&rel);
        let Some(node) = manifest::node_of(&low)? else {
            continue;
        };
        let md = std::fs::symlink_metadata(e.path()).map_err(io_err("inspect", e.path()))?;
        let hides_below = node.kind == NodeKind::Dir
            && (is_whiteout(e.path(), &md)? || !md.is_dir() || is_opaque(e.path())?);
        out.push((rel.clone(), node));
        if hides_below {
            for l in walkdir::WalkDir::new(&low).follow_links(false).min_depth(1) {
                let l = l.map_err(|err| crate::manifest::walk_err(&low, err))?;
                let md = l
                    .metadata()
                    .map_err(|err| crate::manifest::walk_err(&low, err))?;
                let r = l
                    .path()
                    .strip_prefix(lower)
                    .unwrap_or(l.path())
                    .to_path_buf();
                out.push((r, manifest::node_with(l.path(), &md)?));
            }
        }
    }
    Ok(out)
}
