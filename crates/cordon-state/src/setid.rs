//! Set-id and file-capability files a session made in its writable roots, stripped at exit.
//!
//! What a session writes in the project and the other writable paths is on the host's disk at
//! once, mode bits and extended attributes included: no review stands between. The seccomp
//! filter refuses root the calls that set set-id bits or write extended attributes, but the
//! kernel sets them itself where no such call is made: an overlay's copy-up (a nested sandbox
//! of root's, `[syscalls] nested_userns`) keeps the lower file's owner and setuid bit, so
//! `/usr/bin/su` becomes a setuid-root file in the project, which an `mmap` write (one that
//! does not clear the bit) can then fill with other code, and which the host runs with euid 0.
//! So the rule is by structure, not by the calls that could get there: at exit, every regular
//! file under the writable roots whose inode changed during the session loses its set-uid and
//! set-gid bits and its `security.capability` attribute. "Changed during the session" is its
//! ctime, which no call can set back (only a clock change could, and the sandbox holds no
//! `CAP_SYS_TIME`). A file the session did not touch keeps what the user gave it.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{StateError, io_err};

/// The extended attribute that holds a file's capabilities.
const CAPABILITY: &str = "security.capability";

/// Inode times come from the kernel's coarse clock, up to a tick behind the precise clock the
/// session's start is read from: a file changed in the session's first milliseconds must not
/// look older than the session.
const CLOCK_SLACK: Duration = Duration::from_secs(2);

/// One file whose privileges were taken away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stripped {
    pub path: PathBuf,
    /// Its permission bits before (`mode & 0o7777`).
    pub mode: u32,
    /// It carried file capabilities.
    pub capability: bool,
}

/// What [`strip_set_id`] did.
#[derive(Debug, Default)]
pub struct SetIdSweep {
    /// Files made ordinary.
    pub stripped: Vec<Stripped>,
    /// Files that keep a set-id bit or a capability: the error that kept it.
    pub failed: Vec<(PathBuf, StateError)>,
}

/// A path the session named, for a terminal line (control characters and non-UTF-8 bytes
/// escaped).
pub fn shown_path(p: &Path) -> String {
    cordon_events::terminal::quoted(p.as_os_str())
}

/// Whether `md`'s inode changed at or after `since` (less [`CLOCK_SLACK`]).
fn changed_since(md: &fs::Metadata, since: SystemTime) -> bool {
    let since = since
        .checked_sub(CLOCK_SLACK)
        .unwrap_or(UNIX_EPOCH)
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let ctime = (md.ctime(), md.ctime_nsec());
    ctime >= (since.as_secs() as i64, i64::from(since.subsec_nanos()))
}

/// Strip set-uid/set-gid bits and file capabilities from every regular file under `roots`
/// (the session's writable paths, walked without following symlinks) changed since `since`
/// (the session's start). Nothing else is touched.
pub fn strip_set_id(roots: &[PathBuf], since: SystemTime) -> SetIdSweep {
    let mut out = SetIdSweep::default();
    // A root inside another is walked with it.
    let roots: Vec<&PathBuf> = roots
        .iter()
        .filter(|r| !roots.iter().any(|o| o != *r && r.starts_with(o)))
        .collect();
    for root in roots {
        for e in walkdir::WalkDir::new(root).follow_links(false) {
            let e = match e {
                Ok(e) => e,
                // A directory the walk may not read: the session may have made it so (a
                // user's own directory, mode 000) to hide what is inside; said, not skipped.
                Err(err)
                    if err.io_error().map(io::Error::kind)
                        == Some(io::ErrorKind::PermissionDenied) =>
                {
                    if let Some(p) = err.path() {
                        out.failed.push((
                            p.to_path_buf(),
                            StateError::Unsupported {
                                path: p.to_path_buf(),
                                what: "cannot be searched for set-id files".into(),
                            },
                        ));
                    }
                    continue;
                }
                // Vanished entries are gone.
                Err(_) => continue,
            };
            if !e.file_type().is_file() {
                continue;
            }
            let Ok(md) = e.metadata() else { continue };
            if !changed_since(&md, since) {
                continue;
            }
            let setid = md.mode() & 0o6000 != 0;
            let capability = has_capability(e.path());
            if !setid && !capability {
                continue;
            }
            match strip(e.path(), &md, capability) {
                Ok(()) => out.stripped.push(Stripped {
                    path: e.path().to_path_buf(),
                    mode: md.mode() & 0o7777,
                    capability,
                }),
                Err(err) => out.failed.push((e.path().to_path_buf(), err)),
            }
        }
    }
    out
}

/// Whether the file at `p` (not a symlink's target) has a capability attribute. One that
/// cannot be read is taken as present: the strip then says what it found.
fn has_capability(p: &Path) -> bool {
    match xattr::get(p, CAPABILITY) {
        Ok(v) => v.is_some(),
        Err(e) => !matches!(
            e.raw_os_error(),
            Some(libc::ENODATA | libc::ENOTSUP | libc::ENOENT)
        ),
    }
}

/// Take the set-id bits and the capability from the regular file `p` (`md`, its `lstat`).
/// The sandbox is gone when this runs, so nothing swaps the file meanwhile; the type is
/// checked again all the same before each change.
fn strip(p: &Path, md: &fs::Metadata, capability: bool) -> Result<(), StateError> {
    let regular = || -> Result<fs::Metadata, StateError> {
        let now = fs::symlink_metadata(p).map_err(io_err("stat", p))?;
        if !now.file_type().is_file() || now.ino() != md.ino() {
            return Err(StateError::Unsupported {
                path: p.to_path_buf(),
                what: "replaced while its set-id bits were being stripped".into(),
            });
        }
        Ok(now)
    };
    if capability {
        regular()?;
        match xattr::remove(p, CAPABILITY) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
            // A user without CAP_SETFCAP cannot remove it (the capability a nested root of
            // the user's wrote, scoped to the user's namespaces): a copy of the file has none.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => return replace_by_copy(p, md),
            Err(e) => return Err(io_err("remove the file capability of", p)(e)),
        }
    }
    let now = regular()?;
    if now.mode() & 0o6000 != 0 {
        fs::set_permissions(p, fs::Permissions::from_mode(now.mode() & 0o1777))
            .map_err(io_err("strip the set-id bits of", p))?;
    }
    Ok(())
}

/// Replace `p` by a copy of its content (no extended attributes, no set-id bits), renamed over
/// it in the same directory.
fn replace_by_copy(p: &Path, md: &fs::Metadata) -> Result<(), StateError> {
    let dir = p.parent().unwrap_or(Path::new("."));
    let name = p.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.cordon-strip"));
    let copied = (|| -> io::Result<()> {
        let _ = fs::remove_file(&tmp);
        let mut src = fs::File::open(p)?;
        let mut dst = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        io::copy(&mut src, &mut dst)?;
        dst.set_permissions(fs::Permissions::from_mode(md.mode() & 0o1777))?;
        dst.sync_all()?;
        fs::rename(&tmp, p)
    })();
    copied.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_err("replace (to drop its file capability)", p)(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn set_id_bits_of_files_changed_in_the_session_go() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("proj");
        fs::create_dir_all(root.join("deep/er")).unwrap();
        let old = root.join("old-tool");
        fs::write(&old, "x").unwrap();
        fs::set_permissions(&old, fs::Permissions::from_mode(0o2755)).unwrap();
        // The session starts after `old` was made (its ctime is older than the start,
        // slack included).
        let start = SystemTime::now() + CLOCK_SLACK + Duration::from_secs(1);
        let sweep = strip_set_id(std::slice::from_ref(&root), start);
        assert!(sweep.stripped.is_empty() && sweep.failed.is_empty());
        if mode(&old) & 0o2000 == 0 {
            // A filesystem or user that does not keep set-gid (not in the group): nothing to
            // test here.
            return;
        }
        let new = root.join("deep/er/su");
        fs::write(&new, "x").unwrap();
        fs::set_permissions(&new, fs::Permissions::from_mode(0o6755)).unwrap();
        let plain = root.join("plain");
        fs::write(&plain, "x").unwrap();
        std::os::unix::fs::symlink(&old, root.join("link")).unwrap();
        let start = SystemTime::now() - Duration::from_secs(60);
        let sweep = strip_set_id(&[root.clone(), root.join("deep")], start);
        assert!(sweep.failed.is_empty(), "{:?}", sweep.failed);
        let mut paths: Vec<_> = sweep.stripped.iter().map(|s| s.path.clone()).collect();
        paths.sort();
        assert_eq!(paths, vec![new.clone(), old.clone()], "each once");
        assert_eq!(mode(&new), 0o755);
        assert_eq!(mode(&old), 0o755);
        assert_eq!(mode(&plain) & 0o6000, 0);
        let s = sweep.stripped.iter().find(|s| s.path == new).unwrap();
        assert_eq!(s.mode & 0o6000, 0o6000);
    }

    #[test]
    fn a_copy_keeps_the_content_and_drops_the_bits() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("x");
        fs::write(&p, "payload").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o4750)).unwrap();
        let md = fs::symlink_metadata(&p).unwrap();
        replace_by_copy(&p, &md).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "payload");
        assert_eq!(mode(&p), 0o750);
        assert!(!t.path().join(".x.cordon-strip").exists());
    }

    #[test]
    fn ctime_is_compared_with_slack() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("x");
        fs::write(&p, "x").unwrap();
        let md = fs::metadata(&p).unwrap();
        assert!(changed_since(&md, SystemTime::now()), "within the slack");
        assert!(!changed_since(
            &md,
            SystemTime::now() + CLOCK_SLACK + Duration::from_secs(5)
        ));
    }
}
