//! Wiring for the copy-on-write home: which home, which caches, whether this kernel and
//! filesystem take the overlay; the writable paths that must exist; `cordon cache …`.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use cordon_policy::{HomeMode, Plan};
use cordon_state::{CacheLayer, CacheStore, HomeSpec, resolve_path};

use crate::cli::CacheCmd;

/// What the copy-on-write home covers this session.
pub struct HomePlan {
    pub spec: HomeSpec,
    /// Cache paths (resolved, inside the home) to mount from cordon's cache layers.
    pub caches: Vec<PathBuf>,
}

/// The user's home (canonical), from `$HOME`.
pub fn home_dir() -> Option<PathBuf> {
    let h = PathBuf::from(std::env::var_os("HOME")?);
    if !h.is_absolute() {
        return None;
    }
    std::fs::canonicalize(h).ok().filter(|h| h.is_dir())
}

/// The copy-on-write home for `plan`, or why there is none (`Ok(None)`: the policy says
/// read-only; `Err`: the policy asks for it but this home cannot have it).
pub fn plan_home(plan: &Plan, protected: &[PathBuf]) -> Result<Option<HomePlan>, String> {
    if plan.state.home == HomeMode::Readonly {
        return Ok(None);
    }
    let home = home_dir().ok_or("$HOME is not set to an existing directory")?;
    if home == Path::new("/") {
        return Err("the home is /".into());
    }
    let project = &plan.project;
    if home.starts_with(project) {
        return Err(format!(
            "the project {} holds the home: it is writable as a whole",
            project.display()
        ));
    }
    let fs = &plan.filesystem;
    if let Some(w) = fs.writable.iter().find(|w| home.starts_with(&w.path)) {
        return Err(format!("the home is writable as a whole ({})", w.origin));
    }
    if let Some(d) = fs.deny.iter().find(|d| home.starts_with(&d.path)) {
        return Err(format!("the home is denied ({})", d.origin));
    }
    let mut skip: Vec<PathBuf> = Vec::new();
    if project.starts_with(&home) {
        skip.push(project.clone());
    }
    for w in &fs.writable {
        if let Some(p) = resolve_path(&w.path).filter(|p| p.starts_with(&home) && *p != home) {
            skip.push(p);
        }
    }
    let mut caches: Vec<PathBuf> = Vec::new();
    for c in &plan.state.caches {
        let Some(p) = resolve_path(&c.path) else {
            continue;
        };
        let overlaps = |x: &Path| p.starts_with(x) || x.starts_with(&p);
        if !p.starts_with(&home)
            || p == home
            || overlaps(project)
            || fs.writable.iter().any(|w| overlaps(&w.path))
            || fs.deny.iter().any(|d| p.starts_with(&d.path))
            || protected.iter().any(|x| overlaps(x))
            || caches.iter().any(|x| overlaps(x))
        {
            continue;
        }
        caches.push(p);
    }
    skip.extend(caches.iter().cloned());
    Ok(Some(HomePlan {
        spec: HomeSpec { path: home, skip },
        caches,
    }))
}

/// Open the session's cache layers (held until the returned layers are dropped).
pub fn open_caches(caches: &[PathBuf], private: &Path) -> Result<Vec<CacheLayer>> {
    let store = CacheStore::new(
        CacheStore::default_root()
            .ok_or_else(|| anyhow!("no cache directory: set XDG_CACHE_HOME or HOME"))?,
    );
    caches
        .iter()
        .map(|c| {
            store
                .open(c, private)
                .map_err(|e| anyhow!("cannot prepare the cache layer for {}: {e}", c.display()))
        })
        .collect()
}

/// Create the writable paths that do not exist (the user asked for them), returning a line
/// for each. A path inside a denied one is left alone (deny wins; the loader said so).
pub fn create_missing_writable(plan: &Plan) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    for w in &plan.filesystem.writable {
        if std::fs::symlink_metadata(&w.path).is_ok()
            || plan
                .filesystem
                .deny
                .iter()
                .any(|d| w.path.starts_with(&d.path))
        {
            continue;
        }
        std::fs::create_dir_all(&w.path).map_err(|e| {
            anyhow!(
                "writable path {} ({}) does not exist and cannot be created: {e}",
                w.path.display(),
                w.origin
            )
        })?;
        notes.push(format!(
            "created the writable directory {} ({}): it did not exist",
            w.path.display(),
            w.origin
        ));
    }
    Ok(notes)
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn cache_command(c: CacheCmd) -> i32 {
    match cache(c) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cordon: {e:#}");
            1
        }
    }
}

fn cache(c: CacheCmd) -> Result<i32> {
    let root = CacheStore::default_root()
        .ok_or_else(|| anyhow!("no cache directory: set XDG_CACHE_HOME or HOME"))?;
    let store = CacheStore::new(&root);
    match c {
        CacheCmd::List => {
            let list = store.list()?;
            if list.is_empty() {
                println!("no cache layers yet ({})", root.display());
            }
            for c in list {
                println!(
                    "{}  {}{}",
                    c.path.display(),
                    human_bytes(c.bytes),
                    if c.in_use { "  (in use)" } else { "" }
                );
            }
            Ok(0)
        }
        CacheCmd::Clear { paths } => {
            let paths: Vec<PathBuf> = paths
                .iter()
                .map(|p| resolve_path(&std::path::absolute(p).unwrap_or_else(|_| p.clone())))
                .map(|p| p.unwrap_or_default())
                .collect();
            let (cleared, busy) = store.clear(&paths)?;
            for p in &cleared {
                println!("cleared {}", p.display());
            }
            for p in &busy {
                println!("in use, left alone: {}", p.display());
            }
            if cleared.is_empty() && busy.is_empty() {
                println!("no cache layers to clear");
            }
            Ok(if busy.is_empty() { 0 } else { 1 })
        }
    }
}
