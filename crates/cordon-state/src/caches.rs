//! Package and build caches that persist across sessions, sandbox-side only.
//!
//! Each cache path in the home (`~/.npm`, `~/.cargo/registry`, …) is mounted in the sandbox as
//! an overlay: the host's cache (or an empty directory when the host has none) below, one
//! upper directory per cache under `$XDG_CACHE_HOME/cordon/home-caches` above. Later sessions
//! find it warm; nothing is ever written back to the host's cache, so a poisoned download
//! cannot reach the user's own builds (cargo, for one, does not re-check extracted sources).
//!
//! One session at a time writes a cache layer (an exclusive `flock` on its `lock` file, held
//! for the session). A session that finds it busy reads it as a second lower layer and writes
//! to a layer of its own, dropped with the session.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{StateError, io_err};
use crate::fsops;

/// Where cache layers live: one directory per cache (`upper/`, `work/`, `lock`, and `path`,
/// the host path it stands for), plus `empty/`, the lower layer of a cache the host lacks.
#[derive(Clone, Debug)]
pub struct CacheStore {
    root: PathBuf,
}

/// One cache prepared for a session: what the sandbox mounts at `path`.
#[derive(Debug)]
pub struct CacheLayer {
    /// The cache's path in the home (need not exist on the host).
    pub path: PathBuf,
    /// Lower layers, top first.
    pub lower: Vec<PathBuf>,
    /// The upper directory the session writes.
    pub upper: PathBuf,
    /// Its overlay workdir.
    pub work: PathBuf,
    /// `false` when another session holds the shared layer: this session's writes are its own.
    pub shared: bool,
    _lock: Option<File>,
}

/// A cache layer as [`CacheStore::list`] shows it.
#[derive(Clone, Debug)]
pub struct CacheInfo {
    /// The host path the layer stands for.
    pub path: PathBuf,
    /// Bytes held in the layer (what sessions added on top of the host's cache).
    pub bytes: u64,
    /// A session is using it now.
    pub in_use: bool,
    /// The layer's directory.
    pub dir: PathBuf,
}

/// A directory name for `path`: its last component (letters, digits, `.-_` only) and a hash,
/// so no name can hold what overlayfs options cannot (`,` `:` `\`).
fn slug(path: &Path) -> String {
    let hash = blake3::hash(path.as_os_str().as_encoded_bytes()).to_hex();
    let tail: String = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(24)
        .collect();
    format!("{}-{}", tail.trim_start_matches('_'), &hash[..16])
}

fn try_lock(path: &Path) -> Result<Option<File>, StateError> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(io_err("open cache lock", path))?;
    match f.try_lock() {
        Ok(()) => Ok(Some(f)),
        Err(fs::TryLockError::WouldBlock) => Ok(None),
        Err(fs::TryLockError::Error(e)) => Err(io_err("lock", path)(e)),
    }
}

impl CacheStore {
    /// A store rooted at `root` (created on first use).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        CacheStore { root: root.into() }
    }

    /// `$XDG_CACHE_HOME/cordon/home-caches`, else `~/.cache/cordon/home-caches`.
    pub fn default_root() -> Option<PathBuf> {
        cache_dir().map(|d| d.join("home-caches"))
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Prepare the cache at `path` (a host path, canonical where it exists) for one session.
    /// `private` is a directory of the session's own, used when the shared layer is busy.
    pub fn open(&self, path: &Path, private: &Path) -> Result<CacheLayer, StateError> {
        fsops::private_dir_all(&self.root)?;
        let empty = self.root.join("empty");
        if !empty.is_dir() {
            fsops::private_dir(&empty)?;
        }
        fs::set_permissions(&empty, fs::Permissions::from_mode(0o555))
            .map_err(io_err("set mode of", &empty))?;
        let dir = self.root.join(slug(path));
        fsops::private_dir_all(&dir)?;
        let record = dir.join("path");
        if !record.exists() {
            fsops::write_atomic(&record, 0o600, |f| {
                io::Write::write_all(f, path.as_os_str().as_encoded_bytes())
            })?;
        }
        for d in ["upper", "work"] {
            if !dir.join(d).is_dir() {
                fsops::private_dir(&dir.join(d))?;
            }
        }
        let (host, host_mode) = match fs::metadata(path) {
            Ok(md) if md.is_dir() => (path.to_path_buf(), Some(md.permissions().mode() & 0o7777)),
            _ => (empty, None),
        };
        // The merged root takes the upper root's attributes: give it the host's mode.
        let set_mode = |upper: &Path| match host_mode {
            Some(m) => fs::set_permissions(upper, fs::Permissions::from_mode(m))
                .map_err(io_err("set mode of", upper)),
            None => Ok(()),
        };
        if let Some(lock) = try_lock(&dir.join("lock"))? {
            set_mode(&dir.join("upper"))?;
            return Ok(CacheLayer {
                path: path.to_path_buf(),
                lower: vec![host],
                upper: dir.join("upper"),
                work: dir.join("work"),
                shared: true,
                _lock: Some(lock),
            });
        }
        let mine = private.join(slug(path));
        fsops::private_dir_all(&mine.join("upper"))?;
        fsops::private_dir_all(&mine.join("work"))?;
        set_mode(&mine.join("upper"))?;
        Ok(CacheLayer {
            path: path.to_path_buf(),
            lower: vec![dir.join("upper"), host],
            upper: mine.join("upper"),
            work: mine.join("work"),
            shared: false,
            _lock: None,
        })
    }

    /// Whether a session has a reason to mount the cache at `path`: the host has it, or its
    /// layer holds something from an earlier session. A cache that is neither stays unmounted
    /// (a mount less at every start); what a session writes there is [`CacheStore::adopt`]ed.
    pub fn wanted(&self, path: &Path) -> bool {
        self.wanted_all(std::slice::from_ref(&path.to_path_buf()))[0]
    }

    /// [`CacheStore::wanted`] for each of `paths`, reading the store's directory once.
    pub fn wanted_all(&self, paths: &[PathBuf]) -> Vec<bool> {
        let layers: std::collections::HashSet<std::ffi::OsString> = fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        // The slug (a BLAKE3 hash, whose first use probes the CPU: each CPUID traps to the
        // hypervisor here) only when there is a layer it could name.
        paths
            .iter()
            .map(|p| {
                p.is_dir()
                    || (!layers.is_empty() && {
                        let name = slug(p);
                        layers.contains(std::ffi::OsStr::new(&name))
                            && fs::read_dir(self.root.join(&name).join("upper"))
                                .is_ok_and(|mut rd| rd.next().is_some())
                    })
            })
            .collect()
    }

    /// Make `written` — what a session wrote at the unmounted cache `path` (a directory in its
    /// home layer, all its own since the host had nothing there) — the cache's layer, so the
    /// next session mounts it warm. Renamed, never copied: `Ok(false)` when it is not there, the
    /// layer is busy or already holds something, or it lives on another filesystem.
    pub fn adopt(&self, path: &Path, written: &Path) -> Result<bool, StateError> {
        if !fs::symlink_metadata(written).is_ok_and(|m| m.is_dir()) || self.wanted(path) {
            return Ok(false);
        }
        fsops::private_dir_all(&self.root)?;
        let dir = self.root.join(slug(path));
        fsops::private_dir_all(&dir)?;
        let Some(_lock) = try_lock(&dir.join("lock"))? else {
            return Ok(false);
        };
        let upper = dir.join("upper");
        fsops::remove_tree(&upper)?;
        match fs::rename(written, &upper) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                fsops::private_dir(&upper)?;
                return Ok(false);
            }
            Err(e) => return Err(io_err("adopt into the cache layer", written)(e)),
        }
        let record = dir.join("path");
        if !record.exists() {
            fsops::write_atomic(&record, 0o600, |f| {
                io::Write::write_all(f, path.as_os_str().as_encoded_bytes())
            })?;
        }
        if !dir.join("work").is_dir() {
            fsops::private_dir(&dir.join("work"))?;
        }
        Ok(true)
    }

    /// Every cache layer, in path order.
    pub fn list(&self) -> Result<Vec<CacheInfo>, StateError> {
        let rd = match fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("list", &self.root)(e)),
        };
        let mut out = Vec::new();
        for d in rd.flatten() {
            let dir = d.path();
            let Ok(raw) = fs::read(dir.join("path")) else {
                continue;
            };
            let path = PathBuf::from(std::ffi::OsString::from(
                String::from_utf8_lossy(&raw).into_owned(),
            ));
            let bytes = walkdir::WalkDir::new(dir.join("upper"))
                .follow_links(false)
                .into_iter()
                .flatten()
                .filter(|e| e.file_type().is_file())
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum();
            let in_use = match try_lock(&dir.join("lock")) {
                Ok(Some(_)) => false,
                Ok(None) => true,
                Err(_) => false,
            };
            out.push(CacheInfo {
                path,
                bytes,
                in_use,
                dir,
            });
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Drop the layers of `which` (all when empty; each a host path as `list` shows it). A
    /// layer in use is left alone and returned in the second list.
    pub fn clear(&self, which: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<PathBuf>), StateError> {
        let mut cleared = Vec::new();
        let mut busy = Vec::new();
        for info in self.list()? {
            if !which.is_empty() && !which.contains(&info.path) {
                continue;
            }
            // Held while the layer goes, so no session starts on a half-removed one.
            match try_lock(&info.dir.join("lock"))? {
                Some(_lock) => {
                    fsops::remove_tree(&info.dir.join("upper"))?;
                    fsops::remove_tree(&info.dir.join("work"))?;
                    fsops::remove_tree(&info.dir.join("path"))?;
                    cleared.push(info.path);
                }
                None => busy.push(info.path),
            }
        }
        for w in which {
            if !cleared.contains(w) && !busy.contains(w) {
                return Err(StateError::Unsupported {
                    path: w.clone(),
                    what: "no cache layer for this path (`cordon cache list` shows them)".into(),
                });
            }
        }
        Ok((cleared, busy))
    }
}

/// cordon's cache directory: `$XDG_CACHE_HOME/cordon`, else `~/.cache/cordon`; `None` without
/// either (absolute) variable. Never visible inside a sandbox.
pub fn cache_dir() -> Option<PathBuf> {
    let absolute = |v: Option<std::ffi::OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(d) = absolute(std::env::var_os("XDG_CACHE_HOME")) {
        return Some(d.join("cordon"));
    }
    absolute(std::env::var_os("HOME")).map(|h| h.join(".cache").join("cordon"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_safe_for_overlay_options_and_distinct() {
        let a = slug(Path::new("/home/u/.cargo/registry"));
        let b = slug(Path::new("/home/v/.cargo/registry"));
        assert_ne!(a, b);
        assert!(a.starts_with("registry-"), "{a}");
        let odd = slug(Path::new("/home/u/we:ird,name\\x"));
        assert!(!odd.contains([',', ':', '\\', '/']), "{odd}");
    }

    #[test]
    fn a_busy_layer_is_read_below_a_private_one() {
        let t = tempfile::tempdir().unwrap();
        let store = CacheStore::new(t.path().join("caches"));
        let host = t.path().join("npm");
        fs::create_dir(&host).unwrap();
        let first = store.open(&host, &t.path().join("s1")).unwrap();
        assert!(first.shared);
        assert_eq!(first.lower, vec![host.clone()]);
        assert_eq!(
            fs::metadata(&first.upper).unwrap().permissions().mode() & 0o777,
            fs::metadata(&host).unwrap().permissions().mode() & 0o777,
            "the merged root shows the host's mode"
        );
        let second = store.open(&host, &t.path().join("s2")).unwrap();
        assert!(!second.shared);
        assert_eq!(second.lower, vec![first.upper.clone(), host.clone()]);
        assert!(second.upper.starts_with(t.path().join("s2")));
        // A cache the host lacks sits on the empty directory.
        let none = store
            .open(&t.path().join("missing"), &t.path().join("s1"))
            .unwrap();
        assert_eq!(none.lower, vec![store.root().join("empty")]);
        let list = store.list().unwrap();
        assert_eq!(list.len(), 2);
        assert!(list.iter().all(|c| c.in_use));
        let (cleared, busy) = store.clear(&[]).unwrap();
        assert!(cleared.is_empty() && busy.len() == 2);
        drop((first, none));
        fs::write(second.lower[0].join("x"), "1").unwrap();
        let (cleared, busy) = store.clear(std::slice::from_ref(&host)).unwrap();
        assert_eq!((cleared, busy), (vec![host.clone()], vec![]));
        assert!(store.clear(&[t.path().join("nope")]).is_err());
    }

    #[test]
    fn an_unmounted_cache_adopts_what_a_session_wrote() {
        let t = tempfile::tempdir().unwrap();
        let store = CacheStore::new(t.path().join("caches"));
        let path = t.path().join("home/.npm");
        assert!(!store.wanted(&path));
        let written = t.path().join("layer/.npm");
        fs::create_dir_all(written.join("_cacache")).unwrap();
        fs::write(written.join("_cacache/x"), "1").unwrap();
        assert!(store.adopt(&path, &written).unwrap());
        assert!(!written.exists());
        assert!(store.wanted(&path), "the next session mounts it");
        let layer = store.open(&path, &t.path().join("s")).unwrap();
        assert_eq!(
            fs::read_to_string(layer.upper.join("_cacache/x")).unwrap(),
            "1"
        );
        // A layer that holds something is never replaced.
        fs::create_dir_all(&written).unwrap();
        drop(layer);
        assert!(!store.adopt(&path, &written).unwrap());
        assert!(written.exists());
    }
}
