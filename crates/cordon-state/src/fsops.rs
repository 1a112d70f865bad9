//! Small filesystem helpers: private dirs, no-follow opens, atomic replace (temp file in the same
//! directory, fsync, rename, fsync the directory).

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{StateError, io_err};

/// Permission bits ever applied to the host: setuid and setgid are stripped (a sandboxed agent
/// must not be able to plant a set-id program), the sticky bit stays.
pub(crate) const HOST_MODE_MASK: u32 = 0o1777;

/// Create one directory with mode 0700 (the parent must exist).
pub(crate) fn private_dir(path: &Path) -> Result<(), StateError> {
    DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(io_err("create directory", path))
}

/// Create a directory and its missing parents, each 0700.
pub(crate) fn private_dir_all(path: &Path) -> Result<(), StateError> {
    DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(path)
        .map_err(io_err("create directory", path))
}

/// Open a regular file for reading without following a symlink and without blocking on a FIFO
/// swapped in behind our back; anything but a regular file is an error.
pub(crate) fn open_regular(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(f)
}

/// fsync a directory, so a rename or create inside it is durable.
/// fsync a regular file (opened without following a symlink).
pub(crate) fn fsync_file(path: &Path) -> Result<(), StateError> {
    open_regular(path)
        .and_then(|f| f.sync_all())
        .map_err(io_err("fsync", path))
}

pub(crate) fn fsync_dir(path: &Path) -> Result<(), StateError> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(io_err("fsync directory", path))
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A fresh name next to `dst` for a temporary file.
fn temp_name(dst: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let base = dst
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let short: String = base.chars().take(64).collect();
    parent_of(dst).join(format!(".{short}.cordon-{}-{n}.tmp", std::process::id()))
}

/// Replace `dst` atomically with what `fill` writes, with permission bits `mode`: a crash leaves
/// the old or the new file, never a torn one.
pub(crate) fn write_atomic(
    dst: &Path,
    mode: u32,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<(), StateError> {
    replace(dst, mode, true, fill)
}

/// The temp-file-and-rename under [`write_atomic`]; `durable` adds the fsyncs (of the file
/// before the rename, of the directory after) without which a crash may lose the new file.
fn replace(
    dst: &Path,
    mode: u32,
    durable: bool,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<(), StateError> {
    let tmp = temp_name(dst);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err("create temporary file", &tmp))?;
        fill(&mut f).map_err(io_err("write", &tmp))?;
        f.set_permissions(Permissions::from_mode(mode & HOST_MODE_MASK))
            .map_err(io_err("set mode of", &tmp))?;
        if durable {
            f.sync_all().map_err(io_err("fsync", &tmp))?;
        }
        drop(f);
        fs::rename(&tmp, dst).map_err(io_err("rename over", dst))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
        return result;
    }
    if durable {
        fsync_dir(parent_of(dst))?;
    }
    Ok(())
}

/// Write JSON to `dst` atomically (mode 0600); `durable` as in [`replace`]: without it, for
/// records whose loss costs nothing (a session with only scratch to lose).
pub(crate) fn write_json(
    dst: &Path,
    value: &impl serde::Serialize,
    durable: bool,
) -> Result<(), StateError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| StateError::Corrupt {
        path: dst.to_path_buf(),
        msg: format!("cannot serialise: {e}"),
    })?;
    replace(dst, 0o600, durable, |f| f.write_all(&bytes))
}

/// Copy the regular file `src` over `dst` atomically with mode `mode`, returning the BLAKE3 hex
/// hash of the bytes written. With `expect`, the bytes are hashed as they are copied and `dst` is
/// left untouched unless they hash to `expect` (what the reviewer saw).
pub(crate) fn copy_atomic(
    src: &Path,
    dst: &Path,
    mode: u32,
    expect: Option<&str>,
) -> Result<String, StateError> {
    let mut input = open_regular(src).map_err(io_err("open", src))?;
    let mut hasher = blake3::Hasher::new();
    let mut read_err: Option<io::Error> = None;
    let res = write_atomic(dst, mode, |out| {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match input.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    read_err = Some(io::Error::new(e.kind(), e.to_string()));
                    return Err(e);
                }
            };
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])?;
        }
        match expect {
            Some(want) if hasher.finalize().to_hex().as_str() != want => Err(io::Error::other(
                format!("{} changed since it was reviewed", src.display()),
            )),
            _ => Ok(()),
        }
    });
    if let Some(e) = read_err {
        return Err(StateError::Io {
            what: "read",
            path: src.to_path_buf(),
            source: e,
        });
    }
    res?;
    Ok(hasher.finalize().to_hex().to_string())
}

/// Create (or replace) `dst` as a symlink to `target`, atomically.
pub(crate) fn symlink_atomic(target: &Path, dst: &Path) -> Result<(), StateError> {
    let tmp = temp_name(dst);
    std::os::unix::fs::symlink(target, &tmp).map_err(io_err("create symlink", &tmp))?;
    if let Err(e) = fs::rename(&tmp, dst) {
        let _ = fs::remove_file(&tmp);
        return Err(StateError::Io {
            what: "rename over",
            path: dst.to_path_buf(),
            source: e,
        });
    }
    fsync_dir(parent_of(dst))
}

/// Remove a file, symlink or (empty) directory; fsync its parent.
pub(crate) fn remove_node(path: &Path, is_dir: bool) -> Result<(), StateError> {
    if is_dir {
        fs::remove_dir(path).map_err(io_err("remove directory", path))?;
    } else {
        fs::remove_file(path).map_err(io_err("remove", path))?;
    }
    fsync_dir(parent_of(path))
}

/// Remove a tree we own (upper dir, snapshot); a missing one is fine.
pub(crate) fn remove_tree(path: &Path) -> Result<(), StateError> {
    let md = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("inspect", path)(e)),
    };
    if md.is_dir() {
        // Overlay upper dirs can hold directories the sandbox made read-only; open them up first.
        make_writable(path);
        fs::remove_dir_all(path).map_err(io_err("remove directory tree", path))
    } else {
        fs::remove_file(path).map_err(io_err("remove", path))
    }
}

fn make_writable(root: &Path) {
    for e in walkdir::WalkDir::new(root)
        .follow_links(false)
        .same_file_system(true)
        .into_iter()
        .flatten()
    {
        if e.file_type().is_dir()
            && let Ok(md) = e.metadata()
        {
            let mode = md.permissions().mode();
            if mode & 0o700 != 0o700 {
                let _ = fs::set_permissions(e.path(), Permissions::from_mode(mode | 0o700));
            }
        }
    }
}

/// Set a directory's permission bits (setuid/setgid stripped) without following a symlink: the
/// directory is opened `O_NOFOLLOW | O_DIRECTORY` and changed through the descriptor (fchmod).
/// A directory we may not open for reading is checked with `lstat` right before a path chmod.
pub(crate) fn set_dir_mode_nofollow(path: &Path, mode: u32) -> Result<(), StateError> {
    let perms = Permissions::from_mode(mode & HOST_MODE_MASK);
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY)
        .open(path)
    {
        Ok(f) => f
            .set_permissions(perms)
            .map_err(io_err("set mode of", path)),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let md = fs::symlink_metadata(path).map_err(io_err("inspect", path))?;
            if !md.is_dir() {
                return Err(io_err("set mode of", path)(io::Error::other(
                    "not a directory (a symlink?)",
                )));
            }
            fs::set_permissions(path, perms).map_err(io_err("set mode of", path))
        }
        Err(e) => Err(io_err("open directory (without following symlinks)", path)(
            e,
        )),
    }
}

/// Keep a copy of the file or symlink `path` at `to` (parents created, 0700): a hard link
/// where possible (`path` is about to be replaced by a rename, so the link keeps the old
/// content), else a copy.
pub(crate) fn keep_copy(path: &Path, to: &Path) -> Result<(), StateError> {
    private_dir_all(parent_of(to))?;
    if fs::hard_link(path, to).is_ok() {
        return Ok(());
    }
    let md = fs::symlink_metadata(path).map_err(io_err("inspect", path))?;
    if md.file_type().is_symlink() {
        let t = fs::read_link(path).map_err(io_err("read symlink", path))?;
        std::os::unix::fs::symlink(&t, to).map_err(io_err("create symlink", to))
    } else {
        copy_atomic(path, to, md.permissions().mode(), None).map(|_| ())
    }
}

/// Move `path` (a file, symlink or whole directory tree) to `to` (parents created, 0700): a
/// rename, else (another filesystem) a copy followed by removal of the original. FIFOs, sockets
/// and devices are not copied across filesystems.
pub(crate) fn move_aside(path: &Path, to: &Path) -> Result<(), StateError> {
    private_dir_all(parent_of(to))?;
    match fs::rename(path, to) {
        Ok(()) => return fsync_dir(parent_of(path)),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {}
        Err(e) => return Err(io_err("move aside", path)(e)),
    }
    for item in walkdir::WalkDir::new(path).follow_links(false) {
        let item = item.map_err(|e| {
            io_err("walk", path)(
                e.into_io_error()
                    .unwrap_or_else(|| io::Error::other("loop")),
            )
        })?;
        let rel = item.path().strip_prefix(path).unwrap_or(Path::new(""));
        let dst = if rel.as_os_str().is_empty() {
            to.to_path_buf()
        } else {
            to.join(rel)
        };
        let ft = item.file_type();
        if ft.is_dir() {
            private_dir(&dst)?;
        } else if ft.is_symlink() || ft.is_file() {
            keep_copy(item.path(), &dst)?;
        }
    }
    let md = fs::symlink_metadata(path).map_err(io_err("inspect", path))?;
    if md.is_dir() {
        fs::remove_dir_all(path).map_err(io_err("remove directory tree", path))?;
    } else {
        fs::remove_file(path).map_err(io_err("remove", path))?;
    }
    fsync_dir(parent_of(path))
}
