//! Wiring for the copy-on-write home: which home, which caches, whether this kernel and
//! filesystem take the overlay; the writable paths that must exist; `cordon cache …`. The
//! home's view (what of the home the sandbox sees) is `view`.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::{HomeMode, HomeView, Plan};
use cordon_state::{CacheLayer, CacheStore, HomeLayer, HomeSpec, resolve_path, resolve_path_below};

use crate::cli::CacheCmd;

/// What the copy-on-write home covers this session.
pub struct HomePlan {
    pub spec: HomeSpec,
    /// Cache paths (resolved, inside the home) to mount from cordon's cache layers.
    pub caches: Vec<PathBuf>,
    /// The home's view, unless the policy shows the whole home.
    pub view: Option<ViewPlan>,
}

/// A set of paths that answers "is this path inside one" and "does it hold one" by looking its
/// ancestors up.
#[derive(Default)]
struct Paths {
    exact: std::collections::HashSet<Vec<u8>>,
    parents: std::collections::HashSet<Vec<u8>>,
}

impl Paths {
    fn key(p: &Path) -> Vec<u8> {
        p.as_os_str().as_encoded_bytes().to_vec()
    }

    fn add(&mut self, p: &Path) {
        self.exact.insert(Self::key(p));
        for a in p.ancestors().skip(1) {
            self.parents.insert(Self::key(a));
        }
    }

    /// `p` is one of the paths or inside one.
    fn within(&self, p: &Path) -> bool {
        p.ancestors()
            .any(|a| self.exact.contains(a.as_os_str().as_encoded_bytes()))
    }

    /// `p` is inside one of the paths, or holds one.
    fn overlaps(&self, p: &Path) -> bool {
        self.within(p) || self.parents.contains(p.as_os_str().as_encoded_bytes())
    }
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
    // Policy paths spell the home as $HOME does; resolve below it without walking it again.
    let raw_home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let resolve = |p: &Path| resolve_path_below(p, &raw_home, &home);
    let mut skip: Vec<PathBuf> = Vec::new();
    if project.starts_with(&home) {
        skip.push(project.clone());
    }
    for w in &fs.writable {
        if let Some(p) = resolve(&w.path).filter(|p| p.starts_with(&home) && *p != home) {
            skip.push(p);
        }
    }
    let (denied, mut taken) = denied_and_taken(plan, &home, protected);
    let mut caches: Vec<PathBuf> = Vec::new();
    for c in &plan.state.caches {
        let Some(p) = resolve(&c.path) else {
            continue;
        };
        if !p.starts_with(&home) || p == home || denied.within(&p) || taken.overlaps(&p) {
            continue;
        }
        taken.add(&p);
        caches.push(p);
    }
    skip.extend(caches.iter().cloned());
    let view = (plan.filesystem.home == HomeView::Needed).then(|| {
        plan_view(
            plan,
            &home,
            &|p: &Path| resolve(p),
            protected,
            &denied,
            &taken,
            &caches,
        )
    });
    Ok(Some(HomePlan {
        spec: HomeSpec { path: home, skip },
        caches,
        view,
    }))
}

/// The home's deny rules, and what has a mount of its own in the home (the writable paths,
/// the protected paths, the project), as sets. Set lookups, not `Path::starts_with` in nested
/// loops: it parses both paths each time, the home's deny rules are many, and this runs at
/// every start.
fn denied_and_taken(plan: &Plan, home: &Path, protected: &[PathBuf]) -> (Paths, Paths) {
    let fs = &plan.filesystem;
    let mut denied = Paths::default();
    for d in fs.deny.iter().filter(|d| d.path.starts_with(home)) {
        denied.add(&d.path);
    }
    let mut taken = Paths::default();
    for x in fs
        .writable
        .iter()
        .map(|w| w.path.as_path())
        .chain(protected.iter().map(PathBuf::as_path))
        .chain(std::iter::once(plan.project.as_path()))
    {
        taken.add(x);
    }
    (denied, taken)
}

use view::plan_view;
pub use view::{ViewPlan, add_home_credentials, make_view, readonly_view, report_trace, tidy_view};

mod view;

fn cache_store() -> Result<CacheStore> {
    Ok(CacheStore::new(CacheStore::default_root().ok_or_else(
        || anyhow!("no cache directory: set XDG_CACHE_HOME or HOME"),
    )?))
}

/// Open `project`'s layers of the caches worth mounting (held until the returned layers are
/// dropped); the others are returned unmounted, for [`adopt_caches`] at exit.
pub fn open_caches(
    caches: &[PathBuf],
    project: &Path,
    private: &Path,
) -> Result<(Vec<CacheLayer>, Vec<PathBuf>)> {
    let store = cache_store()?;
    let mut layers = Vec::new();
    let mut unmounted = Vec::new();
    // A cache layer's upper directory cannot be on an overlayfs (a container's root): the
    // caches are then written in the session's home layer only, and not kept.
    let wanted = store.wanted_all(project, caches);
    if wanted.iter().any(|w| *w) && cordon_sandbox::probe::on_overlayfs(store.root()) {
        eprintln!(
            "cordon: warning: cache layers are off: {} is on an overlayfs (a container's root \
             filesystem); set XDG_CACHE_HOME to a volume or tmpfs to keep them \
             (docs/guide/containers.md)",
            store.root().display()
        );
        return Ok((Vec::new(), Vec::new()));
    }
    for (c, wanted) in caches.iter().zip(wanted) {
        if !wanted {
            unmounted.push(c.clone());
            continue;
        }
        layers.push(
            store
                .open(project, c, private)
                .map_err(|e| anyhow!("cannot prepare the cache layer for {}: {e}", c.display()))?,
        );
    }
    Ok((layers, unmounted))
}

/// What the session wrote at caches it did not mount becomes `project`'s layers of them.
pub fn adopt_caches(
    unmounted: &[PathBuf],
    project: &Path,
    home: &HomeLayer,
    emit: &dyn Fn(NewEvent),
) {
    let Ok(store) = cache_store() else { return };
    // Only where the session wrote at all: the top of its layer, read once.
    let top: Vec<std::ffi::OsString> = std::fs::read_dir(&home.upper)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    for c in unmounted {
        let first = c
            .strip_prefix(&home.host)
            .ok()
            .and_then(|r| r.components().next());
        if !first.is_some_and(|f| top.iter().any(|t| *t == f.as_os_str())) {
            continue;
        }
        let Some(written) = home.upper_of(c) else {
            continue;
        };
        match store.adopt(project, c, &written) {
            Ok(true) => emit(
                NewEvent::new(Layer::State, Action::Apply, "a new cache layer kept")
                    .detail("path", c.display().to_string()),
            ),
            Ok(false) => {}
            Err(e) => eprintln!(
                "cordon: warning: what the session wrote at {} is not kept as a cache: {e}",
                c.display()
            ),
        }
    }
}

/// The copy-on-write home's probe, remembered: a success holds while the kernel, the home and
/// the filesystem of cordon's state stay the same (a sandbox that then fails to start forgets
/// it, see [`forget_probe`]), so the throwaway namespace is not made at every start.
pub fn probe_home(home: &Path, root: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let key = (|| -> Option<String> {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
        let h = std::fs::metadata(home).ok()?;
        let r = std::fs::metadata(root).ok()?;
        Some(format!(
            "{} {} {}:{} {}",
            kernel.trim(),
            home.display(),
            h.dev(),
            h.ino(),
            r.dev()
        ))
    })();
    let file = root.join(PROBE_FILE);
    if let (Some(key), Ok(text)) = (&key, std::fs::read_to_string(&file))
        && let Some((k, verdict)) = text.split_once('\n')
        && k == key
        && verdict == "ok"
    {
        return Ok(());
    }
    let r = cordon_sandbox::probe::home_overlay(home, root);
    // Only a success is remembered: a refusal is tried again next time (it costs a start
    // that is degraded anyway, and whatever caused it may be fixed).
    if let (Some(key), Ok(())) = (key, &r) {
        let tmp = root.join(format!("{PROBE_FILE}.{}", std::process::id()));
        if std::fs::write(&tmp, format!("{key}\nok")).is_ok() {
            let _ = std::fs::rename(&tmp, &file);
        }
    }
    r
}

const PROBE_FILE: &str = "home-probe";

/// Forget the remembered probe verdict (the sandbox could not be built with it).
pub fn forget_probe(root: &Path) {
    let _ = std::fs::remove_file(root.join(PROBE_FILE));
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
            eprintln!("cordon: {}", crate::output::chain(&e));
            1
        }
    }
}

/// Whose layer it is, for `cordon cache list` and `clear`.
fn of_project(c: &cordon_state::CacheInfo) -> String {
    match &c.project {
        Some(p) => format!("(project {})", p.display()),
        None => "(shared by all projects, from an older cordon: never mounted, clear it)".into(),
    }
}

fn cache(c: CacheCmd) -> Result<i32> {
    let store = cache_store()?;
    let root = store.root().to_path_buf();
    match c {
        CacheCmd::List => {
            let list = store.list()?;
            if list.is_empty() {
                println!("no cache layers yet ({})", root.display());
            }
            for c in list {
                println!(
                    "{}  {}{}  {}",
                    c.path.display(),
                    human_bytes(c.bytes),
                    if c.in_use { "  (in use)" } else { "" },
                    of_project(&c)
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
            for c in &cleared {
                println!("cleared {}  {}", c.path.display(), of_project(c));
            }
            for c in &busy {
                println!(
                    "in use, left alone: {}  {}",
                    c.path.display(),
                    of_project(c)
                );
            }
            if cleared.is_empty() && busy.is_empty() {
                println!("no cache layers to clear");
            }
            Ok(if busy.is_empty() { 0 } else { 1 })
        }
    }
}
