//! Package and build caches that persist across sessions, sandbox-side only.
//!
//! Each cache path in the home (`~/.npm`, `~/.cargo/registry`, …) is mounted in the sandbox as
//! an overlay: the host's cache (or an empty directory when the host has none) below, an upper
//! directory of the project's own above, under
//! `$XDG_CACHE_HOME/cordon/home-caches/p/<project>/<cache>`. Later sessions of the same
//! project find it warm; nothing is ever written back to the host's cache, so a poisoned
//! download cannot reach the user's own builds.
//!
//! Why a layer per project and none shared between projects: what a session writes in a cache
//! is code a later build runs without checking it. Cargo and Go re-check neither the sources
//! they extracted nor the archives they downloaded (cargo opens a `registry/cache/*.crate` that
//! is there and unpacks it; Go trusts `pkg/mod/cache/download/…/v.ziphash` and an extracted
//! `pkg/mod/m@v`, and checks `go.sum` against that recorded hash), and build caches (go-build,
//! ccache, sccache) hold objects keyed by their inputs' hash, not their own. A layer shared
//! across projects would let one project's session run code in another project's builds; a
//! project's own layer gives its sessions nothing they could not already do by editing the
//! project itself, which is writable. The host's own cache, read below every layer, is the
//! part shared by all.
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

/// Where cache layers live: `p/<project>/` per project (`project`, the project's canonical
/// path, and one directory per cache: `upper/`, `work/`, `lock`, and `path`, the host path it
/// stands for), plus `empty/`, the lower layer of a cache the host lacks. A cache directory
/// directly under the root is a layer from before layers were per project, shared by every
/// project: listed and cleared, never mounted.
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
    /// The project whose sessions use it; `None` for a layer from before layers were per
    /// project (shared, never mounted again: `cordon cache clear` drops it).
    pub project: Option<PathBuf>,
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

/// Write `value` to the record file `record` unless it is there.
fn record(record: &Path, value: &Path) -> Result<(), StateError> {
    if !record.exists() {
        fsops::write_atomic(record, 0o600, |f| {
            io::Write::write_all(f, value.as_os_str().as_encoded_bytes())
        })?;
    }
    Ok(())
}

fn read_record(record: &Path) -> Option<PathBuf> {
    let raw = fs::read(record).ok()?;
    Some(PathBuf::from(std::ffi::OsString::from(
        String::from_utf8_lossy(&raw).into_owned(),
    )))
}

/// Where the projects' directories are, under the root.
const PROJECTS: &str = "p";

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

    /// The directory of `project`'s layers (not created).
    fn project_dir(&self, project: &Path) -> PathBuf {
        self.root.join(PROJECTS).join(slug(project))
    }

    /// The directory of `project`'s layer for the cache at `path`, created with its records.
    fn layer_dir(&self, project: &Path, path: &Path) -> Result<PathBuf, StateError> {
        let pdir = self.project_dir(project);
        fsops::private_dir_all(&pdir)?;
        record(&pdir.join("project"), project)?;
        let dir = pdir.join(slug(path));
        fsops::private_dir_all(&dir)?;
        record(&dir.join("path"), path)?;
        Ok(dir)
    }

    /// Prepare `project`'s layer of the cache at `path` (a host path, canonical where it
    /// exists) for one session; `project` is the session's project directory, canonical.
    /// `private` is a directory of the session's own, used when the layer is busy.
    pub fn open(
        &self,
        project: &Path,
        path: &Path,
        private: &Path,
    ) -> Result<CacheLayer, StateError> {
        fsops::private_dir_all(&self.root)?;
        let empty = self.root.join("empty");
        if !empty.is_dir() {
            fsops::private_dir(&empty)?;
        }
        fs::set_permissions(&empty, fs::Permissions::from_mode(0o555))
            .map_err(io_err("set mode of", &empty))?;
        let dir = self.layer_dir(project, path)?;
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

    /// Whether a session of `project` has a reason to mount the cache at `path`: the host has
    /// it, or the project's layer holds something from an earlier session. A cache that is
    /// neither stays unmounted (a mount less at every start); what a session writes there is
    /// [`CacheStore::adopt`]ed.
    pub fn wanted(&self, project: &Path, path: &Path) -> bool {
        self.wanted_all(project, std::slice::from_ref(&path.to_path_buf()))[0]
    }

    /// [`CacheStore::wanted`] for each of `paths`, reading the project's directory once.
    pub fn wanted_all(&self, project: &Path, paths: &[PathBuf]) -> Vec<bool> {
        // The slug (a BLAKE3 hash, whose first use probes the CPU: each CPUID traps to the
        // hypervisor here) only when the store has a project directory at all.
        let layers: std::collections::HashSet<std::ffi::OsString> =
            if self.root.join(PROJECTS).is_dir() {
                fs::read_dir(self.project_dir(project))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.file_name())
                    .collect()
            } else {
                Default::default()
            };
        let pdir = (!layers.is_empty()).then(|| self.project_dir(project));
        paths
            .iter()
            .map(|p| {
                p.is_dir()
                    || pdir.as_ref().is_some_and(|pdir| {
                        let name = slug(p);
                        layers.contains(std::ffi::OsStr::new(&name))
                            && fs::read_dir(pdir.join(&name).join("upper"))
                                .is_ok_and(|mut rd| rd.next().is_some())
                    })
            })
            .collect()
    }

    /// Make `written` — what a session of `project` wrote at the unmounted cache `path` (a
    /// directory in its home layer, all its own since the host had nothing there) — the
    /// project's layer of the cache, so its next session mounts it warm. Renamed, never
    /// copied: `Ok(false)` when it is not there, the layer is busy or already holds something,
    /// or it lives on another filesystem.
    pub fn adopt(&self, project: &Path, path: &Path, written: &Path) -> Result<bool, StateError> {
        if !fs::symlink_metadata(written).is_ok_and(|m| m.is_dir()) || self.wanted(project, path) {
            return Ok(false);
        }
        fsops::private_dir_all(&self.root)?;
        let dir = self.layer_dir(project, path)?;
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
        if !dir.join("work").is_dir() {
            fsops::private_dir(&dir.join("work"))?;
        }
        Ok(true)
    }

    /// Every cache layer, in path order (then project order).
    pub fn list(&self) -> Result<Vec<CacheInfo>, StateError> {
        let rd = match fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("list", &self.root)(e)),
        };
        // (layer directory, its project): the projects' layers, and the old shared ones.
        let mut dirs: Vec<(PathBuf, Option<PathBuf>)> = Vec::new();
        for d in rd.flatten() {
            if d.file_name() == PROJECTS {
                for p in fs::read_dir(d.path()).into_iter().flatten().flatten() {
                    let Some(project) = read_record(&p.path().join("project")) else {
                        continue;
                    };
                    for l in fs::read_dir(p.path()).into_iter().flatten().flatten() {
                        dirs.push((l.path(), Some(project.clone())));
                    }
                }
            } else {
                dirs.push((d.path(), None));
            }
        }
        let mut out = Vec::new();
        for (dir, project) in dirs {
            let Some(path) = read_record(&dir.join("path")) else {
                continue;
            };
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
                project,
                bytes,
                in_use,
                dir,
            });
        }
        out.sort_by(|a, b| (&a.path, &a.project).cmp(&(&b.path, &b.project)));
        Ok(out)
    }

    /// Drop the layers of `which` (all when empty; each a host path as `list` shows it, or a
    /// project: all its layers). A layer in use is left alone and listed in the second list;
    /// the first lists what was cleared, as `list` shows it.
    pub fn clear(&self, which: &[PathBuf]) -> Result<(Vec<CacheInfo>, Vec<CacheInfo>), StateError> {
        let mut cleared = Vec::new();
        let mut busy = Vec::new();
        let mut matched = vec![false; which.len()];
        for info in self.list()? {
            let hits: Vec<usize> = (0..which.len())
                .filter(|&i| which[i] == info.path || Some(&which[i]) == info.project.as_ref())
                .collect();
            if !which.is_empty() && hits.is_empty() {
                continue;
            }
            for i in hits {
                matched[i] = true;
            }
            // Held while the layer goes, so no session starts on a half-removed one.
            match try_lock(&info.dir.join("lock"))? {
                Some(_lock) => {
                    fsops::remove_tree(&info.dir.join("upper"))?;
                    fsops::remove_tree(&info.dir.join("work"))?;
                    fsops::remove_tree(&info.dir.join("path"))?;
                    cleared.push(info);
                }
                None => busy.push(info),
            }
        }
        if let Some(i) = matched.iter().position(|m| !m) {
            return Err(StateError::Unsupported {
                path: which[i].clone(),
                what: "no cache layer for this path or project (`cordon cache list` shows them)"
                    .into(),
            });
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
        let proj = t.path().join("proj");
        let host = t.path().join("npm");
        fs::create_dir(&host).unwrap();
        let first = store.open(&proj, &host, &t.path().join("s1")).unwrap();
        assert!(first.shared);
        assert_eq!(first.lower, vec![host.clone()]);
        assert_eq!(
            fs::metadata(&first.upper).unwrap().permissions().mode() & 0o777,
            fs::metadata(&host).unwrap().permissions().mode() & 0o777,
            "the merged root shows the host's mode"
        );
        let second = store.open(&proj, &host, &t.path().join("s2")).unwrap();
        assert!(!second.shared);
        assert_eq!(second.lower, vec![first.upper.clone(), host.clone()]);
        assert!(second.upper.starts_with(t.path().join("s2")));
        // A cache the host lacks sits on the empty directory.
        let none = store
            .open(&proj, &t.path().join("missing"), &t.path().join("s1"))
            .unwrap();
        assert_eq!(none.lower, vec![store.root().join("empty")]);
        let list = store.list().unwrap();
        assert_eq!(list.len(), 2);
        assert!(list.iter().all(|c| c.in_use));
        assert!(list.iter().all(|c| c.project.as_deref() == Some(&*proj)));
        let (cleared, busy) = store.clear(&[]).unwrap();
        assert!(cleared.is_empty() && busy.len() == 2);
        drop((first, none));
        fs::write(second.lower[0].join("x"), "1").unwrap();
        let (cleared, busy) = store.clear(std::slice::from_ref(&host)).unwrap();
        assert_eq!(cleared.len(), 1);
        assert_eq!(cleared[0].path, host);
        assert!(busy.is_empty());
        assert!(store.clear(&[t.path().join("nope")]).is_err());
    }

    // What one project's sessions write in a cache (an extracted crate, a Go module's tree)
    // is never below another project's sessions: each project has a layer of its own.
    #[test]
    fn a_project_never_reads_another_projects_layer() {
        let t = tempfile::tempdir().unwrap();
        let store = CacheStore::new(t.path().join("caches"));
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        let path = t.path().join("home/.cargo/registry");
        let la = store.open(&a, &path, &t.path().join("sa")).unwrap();
        fs::create_dir_all(la.upper.join("src/x")).unwrap();
        fs::write(la.upper.join("src/x/lib.rs"), "poison").unwrap();
        drop(la);
        assert!(store.wanted(&a, &path), "warm for the same project");
        assert!(!store.wanted(&b, &path), "nothing for another project");
        let lb = store.open(&b, &path, &t.path().join("sb")).unwrap();
        assert!(lb.shared, "b's own layer, not a's busy one");
        assert!(
            lb.lower
                .iter()
                .chain([&lb.upper])
                .all(|l| !l.join("src").exists())
        );
        drop(lb);
        let la = store.open(&a, &path, &t.path().join("sa")).unwrap();
        assert_eq!(
            fs::read_to_string(la.upper.join("src/x/lib.rs")).unwrap(),
            "poison",
            "the same project's next session finds it"
        );
        drop(la);
        // Clearing a project drops its layers only.
        let (cleared, _) = store.clear(std::slice::from_ref(&a)).unwrap();
        assert_eq!(cleared.len(), 1);
        assert_eq!(cleared[0].project.as_deref(), Some(&*a));
        assert!(!store.wanted(&a, &path));
    }

    // A layer from before layers were per project (shared by all) is listed and cleared, and
    // never mounted.
    #[test]
    fn an_old_shared_layer_is_listed_never_opened() {
        let t = tempfile::tempdir().unwrap();
        let store = CacheStore::new(t.path().join("caches"));
        let path = t.path().join("home/go/pkg/mod");
        let old = store.root().join(slug(&path));
        fs::create_dir_all(old.join("upper/m@v1")).unwrap();
        fs::write(old.join("upper/m@v1/x.go"), "poison").unwrap();
        fs::write(old.join("path"), path.as_os_str().as_encoded_bytes()).unwrap();
        let proj = t.path().join("p");
        assert!(!store.wanted(&proj, &path));
        let l = store.open(&proj, &path, &t.path().join("s")).unwrap();
        assert!(!l.lower.contains(&old.join("upper")) && l.upper != old.join("upper"));
        drop(l);
        let list = store.list().unwrap();
        assert!(
            list.iter().any(|c| c.project.is_none() && c.path == path),
            "{list:?}"
        );
        store.clear(&[]).unwrap();
        assert!(!old.join("upper").exists());
    }

    #[test]
    fn an_unmounted_cache_adopts_what_a_session_wrote() {
        let t = tempfile::tempdir().unwrap();
        let store = CacheStore::new(t.path().join("caches"));
        let proj = t.path().join("proj");
        let path = t.path().join("home/.npm");
        assert!(!store.wanted(&proj, &path));
        let written = t.path().join("layer/.npm");
        fs::create_dir_all(written.join("_cacache")).unwrap();
        fs::write(written.join("_cacache/x"), "1").unwrap();
        assert!(store.adopt(&proj, &path, &written).unwrap());
        assert!(!written.exists());
        assert!(store.wanted(&proj, &path), "the next session mounts it");
        assert!(!store.wanted(&t.path().join("other"), &path));
        let layer = store.open(&proj, &path, &t.path().join("s")).unwrap();
        assert_eq!(
            fs::read_to_string(layer.upper.join("_cacache/x")).unwrap(),
            "1"
        );
        // A layer that holds something is never replaced.
        fs::create_dir_all(&written).unwrap();
        drop(layer);
        assert!(!store.adopt(&proj, &path, &written).unwrap());
        assert!(written.exists());
    }
}
