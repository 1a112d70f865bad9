//! The home's view: the lower layer of the session's copy-on-write home.
//!
//! The sandbox does not see the user's home minus a list of names; it sees a directory built
//! here from what development needs: copies of the configuration the policy shows
//! (`home_show`), each file checked for secrets first, and empty directories and files where
//! the rest of the view is mounted (toolchains, the agent's state, caches, the project). A
//! name the view does not hold is not in the sandbox's home, whatever the host's home holds
//! now or creates later: that is the wall, by structure.
//!
//! A view is immutable once built and named by a hash of everything it was built from (each
//! source file's device, inode, size, mode and modification time), so a start whose sources
//! did not change reuses it without reading a file, and sessions running side by side share
//! it as their overlay's lower layer.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::error::{StateError, io_err};
use crate::fsops;

/// How many files one shown directory may hold before it is hidden instead (copied and checked
/// at every change, a large tree would make starts slow).
pub const SHOW_MAX_FILES: usize = 512;
/// How many bytes one shown entry may hold in all.
pub const SHOW_MAX_BYTES: u64 = 8 * 1024 * 1024;
/// A file larger than this is not configuration: hidden, not read.
const FILE_MAX_BYTES: u64 = 2 * 1024 * 1024;
/// Views not used for this long are removed when another is built.
const KEEP_UNUSED: Duration = Duration::from_secs(24 * 3600);
/// Bumped when what a view holds for the same sources changes.
const FORMAT: &str = "cordon-home-view-1";

/// What the view is built from.
#[derive(Clone, Debug, Default)]
pub struct ViewSpec {
    /// The home (canonical).
    pub home: PathBuf,
    /// Configuration to copy, each file checked for secrets (absolute, inside the home).
    pub show: Vec<PathBuf>,
    /// Files copied as they are: the active agent's own state, which review covers.
    pub as_is: Vec<PathBuf>,
    /// Directories that must exist in the view (mount points and their parents).
    pub dirs: Vec<PathBuf>,
    /// Empty files that must exist in the view (mount points for files).
    pub files: Vec<PathBuf>,
    /// Shown as they are, but checked for secrets: each file, and each file directly inside
    /// each directory (the agent's state: its login and key files sit at its top).
    pub check: Vec<PathBuf>,
}

/// Why a shown path is not in the view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hidden {
    /// The host path.
    pub path: PathBuf,
    /// Why, in words (`holds a secret (github-token)`, `holds more than 512 files`…).
    pub why: String,
}

/// A built view.
#[derive(Clone, Debug)]
pub struct View {
    /// The directory to use as the home overlay's lower layer.
    pub dir: PathBuf,
    /// Shown paths left out, and why.
    pub hidden: Vec<Hidden>,
    /// Files of [`ViewSpec::check`] that hold a secret: to be masked where they are shown.
    pub masked: Vec<Hidden>,
    /// Whether this start built it (false: an unchanged view was reused).
    pub built: bool,
}

/// What a build found, kept beside the view for the starts that reuse it.
#[derive(Default, Serialize, Deserialize)]
struct Report {
    hidden: Vec<Hidden>,
    masked: Vec<Hidden>,
}

/// Says whether file content holds a secret, and which kind (`None`: nothing found).
pub type SecretCheck<'a> = &'a dyn Fn(&[u8]) -> Option<String>;

/// One source file or directory found under a shown path.
struct Source {
    /// Host path (symlinks resolved for reading).
    real: PathBuf,
    /// Where it goes, relative to the home.
    rel: PathBuf,
    dir: bool,
    md: fs::Metadata,
}

/// Where the views live: `<state root>/.views` (a dot name: never a session's).
pub fn views_dir(state_root: &Path) -> PathBuf {
    state_root.join(".views")
}

/// Build (or reuse) the view for `spec` under `state_root`.
pub fn build_view(
    state_root: &Path,
    spec: &ViewSpec,
    secret: SecretCheck<'_>,
) -> Result<View, StateError> {
    let views = views_dir(state_root);
    fsops::private_dir_all(&views)?;
    let Gathered {
        mut hidden,
        found,
        checked,
        key,
    } = gather(spec);
    let dir = views.join(&key[..32]);
    let report = views.join(format!("{}.json", &key[..32]));
    if dir.is_dir()
        && let Ok(text) = fs::read(&report)
        && let Ok(r) = serde_json::from_slice::<Report>(&text)
    {
        // Marks it used (at most hourly), so a prune leaves it while sessions start on it.
        let stale = fs::metadata(&report)
            .and_then(|m| m.modified())
            .map(|t| SystemTime::now().duration_since(t).unwrap_or_default() > KEEP_UNUSED / 24)
            .unwrap_or(true);
        if stale {
            let _ = fs::File::open(&report).and_then(|f| f.set_modified(SystemTime::now()));
        }
        hidden.extend(r.hidden);
        return Ok(View {
            dir,
            hidden,
            masked: r.masked,
            built: false,
        });
    }
    let tmp = views.join(format!(".new-{}-{}", std::process::id(), &key[..16]));
    let _ = fs::remove_dir_all(&tmp);
    fsops::private_dir(&tmp)?;
    let mut secrets = Vec::new();
    let made = fill(&tmp, spec, &found, secret, &mut secrets);
    if let Err(e) = made {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    // The view's root is the home's lower layer: the home's own mode.
    if let Ok(md) = fs::metadata(&spec.home) {
        let _ = fs::set_permissions(&tmp, fs::Permissions::from_mode(md.mode() & 0o7777));
    }
    let masked = check_files(&checked, secret);
    let r = Report {
        hidden: secrets,
        masked,
    };
    let text = serde_json::to_vec(&r).unwrap_or_default();
    fs::write(&report, text).map_err(io_err("write", &report))?;
    match fs::rename(&tmp, &dir) {
        Ok(()) => {}
        // Another start built the same view meanwhile: it is the same.
        Err(_) if dir.is_dir() => {
            let _ = fs::remove_dir_all(&tmp);
        }
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp);
            return Err(io_err("move into place", &dir)(e));
        }
    }
    prune(&views, &dir);
    hidden.extend(r.hidden);
    Ok(View {
        dir,
        hidden,
        masked: r.masked,
        built: true,
    })
}

/// The files [`ViewSpec::check`] names: each file, and the files directly inside each
/// directory, up to [`FILE_MAX_BYTES`] (larger ones are data, not keys).
fn checked_files(check: &[PathBuf]) -> Vec<(PathBuf, fs::Metadata)> {
    let mut out = Vec::new();
    for p in check {
        let Ok(md) = fs::metadata(p) else { continue };
        if md.is_file() {
            out.push((p.clone(), md));
            continue;
        }
        let Ok(rd) = fs::read_dir(p) else { continue };
        let mut inside: Vec<(PathBuf, fs::Metadata)> = rd
            .flatten()
            .filter_map(|e| {
                let md = fs::metadata(e.path()).ok()?;
                md.is_file().then(|| (e.path(), md))
            })
            .collect();
        inside.sort_by(|a, b| a.0.cmp(&b.0));
        out.extend(inside);
    }
    out.retain(|(_, md)| md.len() <= FILE_MAX_BYTES);
    out
}

fn check_files(files: &[(PathBuf, fs::Metadata)], secret: SecretCheck<'_>) -> Vec<Hidden> {
    files
        .iter()
        .filter_map(|(p, _)| {
            let kind = secret(&fs::read(p).ok()?)?;
            Some(Hidden {
                path: p.clone(),
                why: format!("holds a secret ({kind})"),
            })
        })
        .collect()
}

/// What a view is built from, read from the host: the shown files (each with its stamp), the
/// shown paths left out, the agent's files to check, and the key every stamp makes.
struct Gathered {
    hidden: Vec<Hidden>,
    found: Vec<(Vec<Source>, bool)>,
    checked: Vec<(PathBuf, fs::Metadata)>,
    key: String,
}

fn gather(spec: &ViewSpec) -> Gathered {
    let mut hidden = Vec::new();
    let mut found: Vec<(Vec<Source>, bool)> = Vec::new();
    let mut hasher = blake3::Hasher::new();
    hasher.update(FORMAT.as_bytes());
    hasher.update(spec.home.as_os_str().as_encoded_bytes());
    for (list, tag) in [(&spec.dirs, "d"), (&spec.files, "f")] {
        for p in list {
            hasher.update(tag.as_bytes());
            hasher.update(p.as_os_str().as_encoded_bytes());
            hasher.update(b"\0");
        }
    }
    let shown = spec.show.iter().map(|p| (p, true));
    for (p, checked) in shown.chain(spec.as_is.iter().map(|p| (p, false))) {
        let Ok(rel) = p.strip_prefix(&spec.home) else {
            continue;
        };
        match sources(p, rel) {
            Ok(None) => continue,
            Ok(Some(s)) => {
                let (files, bytes) = s
                    .iter()
                    .filter(|s| !s.dir)
                    .fold((0, 0), |(n, b), s| (n + 1, b + s.md.len()));
                if files > SHOW_MAX_FILES || bytes > SHOW_MAX_BYTES {
                    hidden.push(Hidden {
                        path: p.clone(),
                        why: format!(
                            "holds more than {SHOW_MAX_FILES} files or {} MiB, too much to check \
                             at every start",
                            SHOW_MAX_BYTES >> 20
                        ),
                    });
                    continue;
                }
                hasher.update(if checked { b"s" } else { b"a" });
                for s in &s {
                    stamp(&mut hasher, s);
                }
                found.push((s, checked));
            }
            Err(e) => hidden.push(Hidden {
                path: p.clone(),
                why: format!("cannot be read: {e}"),
            }),
        }
    }
    let checked = checked_files(&spec.check);
    for (p, md) in &checked {
        hasher.update(b"c");
        stamp(
            &mut hasher,
            &Source {
                real: p.clone(),
                rel: p.clone(),
                dir: false,
                md: md.clone(),
            },
        );
    }
    Gathered {
        hidden,
        found,
        checked,
        key: hasher.finalize().to_hex().to_string(),
    }
}

/// Every file and directory under the shown path `p` (itself first), following symlinks
/// (dotfile managers link `~/.bashrc` elsewhere); `None` when it does not exist.
fn sources(p: &Path, rel: &Path) -> io::Result<Option<Vec<Source>>> {
    let md = match fs::metadata(p) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    // The caller's paths are resolved already; only a link at the end needs following.
    let real = match fs::symlink_metadata(p)?.file_type().is_symlink() {
        true => fs::canonicalize(p)?,
        false => p.to_path_buf(),
    };
    let mut out = vec![Source {
        real: real.clone(),
        rel: rel.to_path_buf(),
        dir: md.is_dir(),
        md: md.clone(),
    }];
    if !md.is_dir() {
        return Ok(if md.is_file() { Some(out) } else { None });
    }
    let walk = walkdir::WalkDir::new(&real)
        .follow_links(true)
        .min_depth(1)
        .sort_by_file_name();
    for e in walk {
        // A loop or a dangling link: left out, as a tool would fail to read it.
        let Ok(e) = e else { continue };
        let Ok(md) = e.metadata() else { continue };
        if !md.is_dir() && !md.is_file() {
            continue;
        }
        let sub = e.path().strip_prefix(&real).unwrap_or(e.path());
        out.push(Source {
            real: e.path().to_path_buf(),
            rel: rel.join(sub),
            dir: md.is_dir(),
            md,
        });
        if out.len() > SHOW_MAX_FILES * 2 {
            break;
        }
    }
    Ok(Some(out))
}

fn stamp(h: &mut blake3::Hasher, s: &Source) {
    h.update(s.rel.as_os_str().as_encoded_bytes());
    h.update(b"\0");
    for n in [
        s.md.dev(),
        s.md.ino(),
        s.md.len(),
        u64::from(s.md.mode()),
        s.md.mtime() as u64,
        s.md.mtime_nsec() as u64,
        s.md.ctime() as u64,
        s.md.ctime_nsec() as u64,
    ] {
        h.update(&n.to_le_bytes());
    }
}

fn fill(
    tmp: &Path,
    spec: &ViewSpec,
    found: &[(Vec<Source>, bool)],
    secret: SecretCheck<'_>,
    hidden: &mut Vec<Hidden>,
) -> Result<(), StateError> {
    let dir_mode = |host: &Path| {
        fs::metadata(host)
            .ok()
            .filter(|m| m.is_dir())
            .map_or(0o755, |m| m.mode() & 0o777)
    };
    let mkdirs = |rel: &Path| -> Result<(), StateError> {
        let mut at = tmp.to_path_buf();
        let mut host = spec.home.clone();
        for c in rel.components() {
            at.push(c);
            host.push(c);
            match fs::DirBuilder::new().mode(dir_mode(&host)).create(&at) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err("create directory", &at)(e)),
            }
        }
        Ok(())
    };
    for d in &spec.dirs {
        if let Ok(rel) = d.strip_prefix(&spec.home) {
            mkdirs(rel)?;
        }
    }
    for (sources, checked) in found {
        for s in sources {
            let at = tmp.join(&s.rel);
            if s.dir {
                mkdirs(&s.rel)?;
                continue;
            }
            if let Some(parent) = s.rel.parent() {
                mkdirs(parent)?;
            }
            let host = spec.home.join(&s.rel);
            if s.md.len() > FILE_MAX_BYTES {
                hidden.push(Hidden {
                    path: host,
                    why: format!("larger than {} MiB", FILE_MAX_BYTES >> 20),
                });
                continue;
            }
            let content = match fs::read(&s.real) {
                Ok(c) => c,
                Err(e) => {
                    hidden.push(Hidden {
                        path: host,
                        why: format!("cannot be read: {e}"),
                    });
                    continue;
                }
            };
            if *checked && let Some(kind) = secret(&content) {
                hidden.push(Hidden {
                    path: host,
                    why: format!("holds a secret ({kind})"),
                });
                continue;
            }
            fs::write(&at, &content).map_err(io_err("write", &at))?;
            // Never a set-id bit: the view is the user's own copy.
            let mode = s.md.mode() & 0o777;
            fs::set_permissions(&at, fs::Permissions::from_mode(mode))
                .map_err(io_err("set mode of", &at))?;
        }
    }
    for f in &spec.files {
        let Ok(rel) = f.strip_prefix(&spec.home) else {
            continue;
        };
        if let Some(parent) = rel.parent() {
            mkdirs(parent)?;
        }
        let at = tmp.join(rel);
        if fs::symlink_metadata(&at).is_err() {
            fs::File::create(&at).map_err(io_err("create", &at))?;
        }
    }
    Ok(())
}

/// Remove views (and their reports) not used for a day, except `keep`. A running session's
/// view is its overlay's lower layer, already open: removing its directory does not disturb
/// the mount.
fn prune(views: &Path, keep: &Path) {
    let Ok(rd) = fs::read_dir(views) else { return };
    let now = SystemTime::now();
    for e in rd.flatten() {
        let p = e.path();
        if p == keep || p.extension().is_some_and(|x| x == "json") {
            continue;
        }
        let name = e.file_name();
        let stale_tmp = name.as_encoded_bytes().starts_with(b".new-");
        let report = views.join(format!("{}.json", name.to_string_lossy()));
        let used = fs::metadata(&report)
            .or_else(|_| e.metadata())
            .and_then(|m| m.modified())
            .ok();
        let old = used.is_none_or(|u| now.duration_since(u).unwrap_or_default() > KEEP_UNUSED);
        if old {
            let _ = fs::remove_dir_all(&p);
            if !stale_tmp {
                let _ = fs::remove_file(&report);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(c: &[u8]) -> Option<String> {
        String::from_utf8_lossy(c)
            .contains("ghp_")
            .then(|| "github-token".to_string())
    }

    #[test]
    fn the_view_holds_what_is_shown_and_nothing_else() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        let state = t.path().join("state");
        for (f, c) in [
            (".gitconfig", "[user]\nname = a\n"),
            (".config/git/ignore", "*.o\n"),
            (
                ".config/git/credentials",
                "https://u:ghp_xxxxxxxx@github.com\n",
            ),
            (".aws/credentials", "[default]\n"),
            (".config/gh/hosts.yml", "oauth_token: x\n"),
        ] {
            let p = home.join(f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, c).unwrap();
        }
        let spec = ViewSpec {
            home: home.clone(),
            show: vec![
                home.join(".gitconfig"),
                home.join(".config/git"),
                home.join(".nope"),
            ],
            as_is: vec![],
            dirs: vec![home.join(".cargo/bin")],
            files: vec![home.join(".ssh/known_hosts")],
            check: vec![home.join(".config/gh")],
        };
        let v = build_view(&state, &spec, &check).unwrap();
        assert!(v.built);
        let d = &v.dir;
        assert_eq!(
            fs::read_to_string(d.join(".gitconfig")).unwrap(),
            "[user]\nname = a\n"
        );
        assert!(d.join(".config/git/ignore").is_file());
        assert!(!d.join(".config/git/credentials").exists());
        assert!(!d.join(".aws").exists());
        assert!(!d.join(".config/gh").exists());
        assert!(d.join(".cargo/bin").is_dir());
        assert_eq!(fs::read(d.join(".ssh/known_hosts")).unwrap(), b"");
        assert_eq!(v.hidden.len(), 1);
        assert_eq!(v.masked.len(), 0, "oauth_token: x is too short to be one");
        assert!(v.hidden[0].why.contains("github-token"), "{:?}", v.hidden);
        // Unchanged sources: the same view, not rebuilt, the same report.
        let again = build_view(&state, &spec, &check).unwrap();
        assert!(!again.built);
        assert_eq!(again.dir, v.dir);
        assert_eq!(again.hidden, v.hidden);
        // A changed source: a new view.
        fs::write(home.join(".gitconfig"), "[user]\nname = b\n").unwrap();
        let changed = build_view(&state, &spec, &check).unwrap();
        assert!(changed.built);
        assert_ne!(changed.dir, v.dir);
    }

    #[test]
    fn a_large_shown_directory_is_hidden_not_copied() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        let big = home.join(".config/big");
        fs::create_dir_all(&big).unwrap();
        for i in 0..=SHOW_MAX_FILES {
            fs::write(big.join(format!("f{i}")), "x").unwrap();
        }
        let spec = ViewSpec {
            home: home.clone(),
            show: vec![big.clone()],
            ..ViewSpec::default()
        };
        let v = build_view(&t.path().join("s"), &spec, &check).unwrap();
        assert!(!v.dir.join(".config/big").exists());
        assert!(v.hidden.iter().any(|h| h.path == big), "{:?}", v.hidden);
    }
}
