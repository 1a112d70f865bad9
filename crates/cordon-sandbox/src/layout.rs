//! Turns a policy [`Plan`](cordon_policy::Plan) into a concrete [`Layout`]: the ordered mount
//! operations and the Landlock rule sets that build the sandbox's filesystem view.
//!
//! Runs on the host side, before the sandbox exists, so it sees the host's real paths:
//! symlinks are resolved here (a denied `~/.ssh` that links elsewhere masks its target too),
//! missing paths are dropped with a note, and nested masks are folded together.

use std::path::{Component, Path, PathBuf};

use cordon_policy::{FilesystemPlan, PathRule};
use serde::{Deserialize, Serialize};

/// Lexical path normalisation: the one shared meaning (see `cordon_events::lexical`).
pub use cordon_events::lexical::normalize;

mod describe;

/// One step of building the filesystem view, in the order they must run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MountOp {
    /// Bind the host path at the same place; read-only unless `writable`.
    Bind { path: PathBuf, writable: bool },
    /// A fresh private tmpfs (`/tmp`, `/dev/shm`).
    Tmpfs { path: PathBuf },
    /// A minimal `/dev`: null, zero, full, random, urandom, tty, a new devpts instance, shm.
    Dev { path: PathBuf },
    /// A fresh procfs for the sandbox's PID namespace, with kernel knobs read-only.
    Proc { path: PathBuf },
    /// Copy-on-write directory: an overlay of the host directory (lower) with a per-session
    /// upper directory, so writes land in the session's state, not on the host. `lower`, when
    /// not empty, names the lower layers (top first) instead of the host directory itself.
    Overlay {
        path: PathBuf,
        upper: PathBuf,
        work: PathBuf,
        #[serde(default)]
        lower: Vec<PathBuf>,
    },
    /// Copy-on-write file: the session's private working copy bound over the host file.
    StagedFile { path: PathBuf, copy: PathBuf },
    /// Bind a path onto itself so it cannot be renamed or removed (the parent of a protected file).
    Pin { path: PathBuf },
    /// Make an already-visible path read-only, even inside a writable bind.
    ReadOnly { path: PathBuf },
    /// Hide a directory under an empty, unreadable, read-only tmpfs — or, where `shown` has
    /// files (masked copies of credential files, by path relative to the directory), a
    /// read-only tmpfs holding only those.
    MaskDir {
        path: PathBuf,
        rule: String,
        #[serde(default)]
        shown: Vec<(PathBuf, String)>,
        /// The mask's own directory cannot be listed (mode 0111): what cordon placed in it
        /// ([`Layout::place_file`]) is reached by its path only, and a mask still says
        /// nothing of what it hides.
        #[serde(default)]
        sealed: bool,
    },
    /// Hide a file (or socket) under an empty, unreadable file.
    MaskFile { path: PathBuf, rule: String },
    /// A read-only file with this content bound over an existing file (`/etc/resolv.conf`).
    Content { path: PathBuf, content: String },
    /// A file of cordon's own on the host, bound read-only over an existing file: the
    /// sandbox's trust bundle, kept where no sandbox sees it ([`crate::bundle_file`]).
    File { path: PathBuf, host: PathBuf },
    /// A boundary crossing: the unix socket `host` of a service cordon runs host-side (the
    /// filtering ssh agent), bound at `path` inside a masked directory. What the sandbox can
    /// do through it is only what that service answers.
    Socket { path: PathBuf, host: PathBuf },
    /// cordon's own executable, bound read-only at `path` inside a masked directory when the
    /// view hides where it lives (a private `/tmp`, a masked directory), so the `cordon
    /// explain` line every denial names runs inside. The same binary as the supervisor's.
    Program { path: PathBuf, host: PathBuf },
}

impl MountOp {
    /// The sandbox path this step acts on.
    pub fn path(&self) -> &Path {
        match self {
            MountOp::Bind { path, .. }
            | MountOp::Tmpfs { path }
            | MountOp::Overlay { path, .. }
            | MountOp::StagedFile { path, .. }
            | MountOp::Dev { path }
            | MountOp::Proc { path }
            | MountOp::Pin { path }
            | MountOp::ReadOnly { path }
            | MountOp::MaskDir { path, .. }
            | MountOp::MaskFile { path, .. }
            | MountOp::Content { path, .. }
            | MountOp::File { path, .. }
            | MountOp::Socket { path, .. }
            | MountOp::Program { path, .. } => path,
        }
    }
}

/// A protected path made copy-on-write for this session (prepared by the state store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Staged {
    /// Overlay `upper`/`work` (same filesystem) over the host directory `path`.
    Dir {
        path: PathBuf,
        upper: PathBuf,
        work: PathBuf,
    },
    /// Bind the working copy `copy` over the host file `path`.
    File { path: PathBuf, copy: PathBuf },
    /// The copy-on-write home: an overlay of its lower layer with the session's layer. Binds,
    /// protected paths and masks inside it are mounted on top, so they stay as they are.
    Home {
        path: PathBuf,
        upper: PathBuf,
        work: PathBuf,
        /// The home's view (`cordon_state::build_view`): the lower layer, holding only what
        /// is shown; `None`: the host home itself (`[filesystem] home = "whole"`).
        #[serde(default)]
        view: Option<PathBuf>,
    },
    /// A directory of the host's home shown as it is inside a home with a view (a toolchain,
    /// the agent's state): an overlay of the host directory with `upper` (its place in the
    /// home's layer, so what the session writes there is the home's like everything else).
    Shown {
        path: PathBuf,
        upper: PathBuf,
        work: PathBuf,
    },
    /// The home's view without a copy-on-write layer (`[state] home = "readonly"`, or where
    /// overlayfs refuses the home): the view directory bound read-only at the home.
    View { path: PathBuf, view: PathBuf },
    /// A host directory bound read-only: a toolchain on a read-only home's view.
    Bound { path: PathBuf },
    /// A host-executed file left writable in place (a read-only rule's path that tools replace
    /// by a rename, which neither a read-only bind nor a working copy can take): no mount.
    InPlace { path: PathBuf },
    /// A persistent cache inside the home: an overlay of `lower` (top first: the host's cache,
    /// or an empty directory when the host has none) with cordon's cache layer as upper. Its
    /// mount point may not exist on the host (it is made in the home's layer).
    Cache {
        path: PathBuf,
        lower: Vec<PathBuf>,
        upper: PathBuf,
        work: PathBuf,
    },
}

impl Staged {
    /// The overlay mount this staged path becomes in the view, for those that are overlays.
    /// The view's own step is this one, so an overlay init mounted ahead of its spec from
    /// this ([`crate::supervisor::Unborn::prepare`]) is equal to the view's.
    pub(crate) fn overlay(&self) -> Option<MountOp> {
        let (upper, work, lower) = match self {
            Staged::Dir { upper, work, .. }
            | Staged::Shown { upper, work, .. }
            | Staged::Home {
                upper,
                work,
                view: None,
                ..
            } => (upper, work, Vec::new()),
            Staged::Home {
                upper,
                work,
                view: Some(view),
                ..
            } => (upper, work, vec![view.clone()]),
            Staged::Cache {
                lower, upper, work, ..
            } => (upper, work, lower.clone()),
            Staged::File { .. }
            | Staged::InPlace { .. }
            | Staged::View { .. }
            | Staged::Bound { .. } => return None,
        };
        Some(MountOp::Overlay {
            path: normalize(self.path()),
            upper: upper.clone(),
            work: work.clone(),
            lower,
        })
    }

    /// The host path it covers.
    pub fn path(&self) -> &Path {
        match self {
            Staged::Dir { path, .. }
            | Staged::File { path, .. }
            | Staged::Home { path, .. }
            | Staged::Shown { path, .. }
            | Staged::View { path, .. }
            | Staged::Bound { path }
            | Staged::InPlace { path }
            | Staged::Cache { path, .. } => path,
        }
    }

    /// Whether this is reviewed state, whose parents are pinned like read-only files (a home
    /// or a cache layer is never applied to the host, so swapping it out gains nothing).
    fn reviewed(&self) -> bool {
        matches!(self, Staged::Dir { .. } | Staged::File { .. })
    }
}

/// Paths Landlock grants, as a second fence built from the same plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockRules {
    /// Read, list and execute beneath each.
    pub read: Vec<PathBuf>,
    /// Read and execute: entries the carve found to be no directory (their type from the
    /// directory listing), so each rule is added with a file's rights at once instead of
    /// being refused with a directory's first. One that became a directory since gets no
    /// more than a file's rights beneath it.
    #[serde(default)]
    pub read_files: Vec<PathBuf>,
    /// List only: ancestors of a denied path, whose other entries are granted one by one.
    pub list_only: Vec<PathBuf>,
    /// Full access beneath each (writable binds and the sandbox's own tmpfs).
    pub write: Vec<PathBuf>,
}

impl LandlockRules {
    /// Whether `p` has a read rule of its own.
    pub fn grants_read(&self, p: &Path) -> bool {
        self.read.iter().chain(&self.read_files).any(|r| r == p)
    }
}

/// The concrete, ordered filesystem plan one sandbox is built from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub mounts: Vec<MountOp>,
    pub landlock: LandlockRules,
    /// Rules that had nothing to act on (path missing), for the log.
    pub skipped: Vec<String>,
    /// Denied paths the sandbox does not see anyway (nothing there to mask), each with its
    /// rule and why.
    #[serde(default)]
    pub unseen: Vec<Unseen>,
    /// The home is shown by its view (not whole).
    #[serde(default)]
    pub home_view: bool,
    /// Test-only (debug builds): the mount fence is off, so init leaves the new root
    /// writable as well ([`crate::test_off`]).
    #[cfg(debug_assertions)]
    #[serde(default)]
    pub mounts_off: bool,
}

impl Layout {
    /// Masked paths with the rule that masked them.
    pub fn masks(&self) -> impl Iterator<Item = (&Path, &str)> {
        self.mounts.iter().filter_map(|m| match m {
            MountOp::MaskDir { path, rule, .. } | MountOp::MaskFile { path, rule } => {
                Some((path.as_path(), rule.as_str()))
            }
            _ => None,
        })
    }
}

/// A denied path that needs no mask: the host's file there is not in the sandbox's view at
/// all, and a mask over it would have no place to go (the private `/tmp` has no
/// `/tmp/ssh-…/agent.N`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unseen {
    pub path: PathBuf,
    /// The rule that denied it.
    pub rule: String,
    pub why: UnseenWhy,
}

/// Where the sandbox sees something else than the host at a denied path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnseenWhy {
    /// Under the home, which is shown by its view, and the view does not hold it.
    HomeView,
    /// Under a filesystem of the sandbox's own (the private `/tmp` or `/dev/shm`).
    OwnFs(PathBuf),
    /// Under no mount at all: no readable or writable rule shows it.
    Outside,
}

/// Why a host file cannot be shown as a masked copy.
#[derive(Debug, thiserror::Error)]
pub enum ShowCopyError {
    /// The path does not lead anywhere (or not to something readable).
    #[error("{}: {source}", path.display())]
    Resolve {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// It leads to something other than a regular file.
    #[error("{} is not a regular file", path.display())]
    NotAFile { path: PathBuf },
}

impl Layout {
    /// Shows `content` at the host file `path` instead of what it holds — a masked copy of a
    /// credential file, its secret replaced: inside a masked directory the mask holds just
    /// this file; a masked file becomes this content; an unmasked one is covered by it.
    /// Landlock may read it (the mask's exclusion stays for everything else). Returns where
    /// it is shown, or why it cannot be.
    pub fn show_copy(&mut self, path: &Path, content: &str) -> Result<PathBuf, ShowCopyError> {
        let target = std::fs::canonicalize(path).map_err(|source| ShowCopyError::Resolve {
            path: path.to_path_buf(),
            source,
        })?;
        if !target.is_file() {
            return Err(ShowCopyError::NotAFile { path: target });
        }
        let mut placed = false;
        for m in &mut self.mounts {
            match m {
                MountOp::MaskFile { path, .. } if *path == target => {
                    *m = MountOp::Content {
                        path: target.clone(),
                        content: content.to_string(),
                    };
                    placed = true;
                    break;
                }
                MountOp::MaskDir { path, shown, .. } if target.starts_with(&*path) => {
                    let rel = target
                        .strip_prefix(&*path)
                        .map(Path::to_path_buf)
                        .unwrap_or_default();
                    shown.retain(|(p, _)| *p != rel);
                    shown.push((rel, content.to_string()));
                    placed = true;
                    break;
                }
                _ => {}
            }
        }
        if !placed {
            self.mounts
                .retain(|m| !matches!(m, MountOp::Content { path, .. } if *path == target));
            self.mounts.push(MountOp::Content {
                path: target.clone(),
                content: content.to_string(),
            });
        }
        if !self.landlock.grants_read(&target) {
            self.landlock.read.push(target.clone());
        }
        Ok(target)
    }
}

/// Why a file of cordon's own cannot be placed in the view.
#[derive(Debug, thiserror::Error)]
#[error("{} is not inside a masked directory, where cordon's own files go", path.display())]
pub struct PlaceError {
    /// The path asked for.
    pub path: PathBuf,
}

impl Layout {
    /// Places a read-only file of cordon's own (not a host file) at `path` inside a masked
    /// directory — `/run` is masked in every plan, so `/run/cordon/…` never covers anything
    /// of the host's. Readable through Landlock too; the rest of the mask stays hidden.
    pub fn place_file(&mut self, path: &Path, content: &str) -> Result<(), PlaceError> {
        let target = normalize(path);
        for m in self.mounts.iter_mut().rev() {
            if let MountOp::MaskDir {
                path,
                shown,
                sealed,
                ..
            } = m
                && target.starts_with(&*path)
                && target != *path
            {
                *sealed = true;
                let rel = target
                    .strip_prefix(&*path)
                    .map(Path::to_path_buf)
                    .unwrap_or_default();
                shown.retain(|(p, _)| *p != rel);
                shown.push((rel, content.to_string()));
                if !self.landlock.grants_read(&target) {
                    self.landlock.read.push(target);
                }
                return Ok(());
            }
        }
        Err(PlaceError { path: target })
    }
}

impl Layout {
    /// Binds the host-side socket `host` at `path` inside a masked directory (`/run/cordon/…`,
    /// like [`Layout::place_file`]): an empty file there is its mount point.
    pub fn place_socket(&mut self, path: &Path, host: &Path) -> Result<(), PlaceError> {
        self.place_bound(path, |path| MountOp::Socket {
            path,
            host: host.to_path_buf(),
        })
    }

    /// An empty file placed at `path` (its mount point), then `op` bound onto it.
    fn place_bound(
        &mut self,
        path: &Path,
        op: impl FnOnce(PathBuf) -> MountOp,
    ) -> Result<(), PlaceError> {
        let target = normalize(path);
        self.place_file(&target, "")?;
        self.mounts.push(op(target));
        Ok(())
    }
}

impl Layout {
    /// Binds the host file `host` (cordon's own executable) read-only at `path` inside a
    /// masked directory, like [`Layout::place_socket`].
    pub fn place_program(&mut self, path: &Path, host: &Path) -> Result<(), PlaceError> {
        self.place_bound(path, |path| MountOp::Program {
            path,
            host: host.to_path_buf(),
        })
    }
}

fn depth(p: &Path) -> usize {
    p.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
}

/// `p` equals `base` or lies beneath it.
fn within(p: &Path, base: &Path) -> bool {
    p.starts_with(base)
}

/// The path and, if it differs, its canonical form (symlinks resolved) when it exists.
fn forms(p: &Path, canon: &mut Canon) -> Vec<PathBuf> {
    let n = normalize(p);
    let mut v = vec![n.clone()];
    if let Some(c) = canon.get(&n)
        && c != n
    {
        v.push(c);
    }
    v
}

/// `std::fs::canonicalize`, remembering each parent directory's canonical form. The ~80 deny
/// paths share a few parents (the home, `~/.config`, the project), which `realpath` would
/// walk again for every path, one `readlink` per component (~450 of them per start). A path
/// whose last component is a link, or that is not absolute and plain, is resolved whole.
#[derive(Default)]
struct Canon(std::collections::HashMap<PathBuf, Option<PathBuf>>);

impl Canon {
    fn get(&mut self, p: &Path) -> Option<PathBuf> {
        let plain = p.is_absolute()
            && p.components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        let (Some(parent), Some(name), true) = (p.parent(), p.file_name(), plain) else {
            return std::fs::canonicalize(p).ok();
        };
        let dir = match self.0.get(parent) {
            Some(d) => d.clone()?,
            None => {
                let d = std::fs::canonicalize(parent).ok();
                self.0.insert(parent.to_path_buf(), d.clone());
                d?
            }
        };
        let at = dir.join(name);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(&at).ok(),
            Ok(_) => Some(at),
            Err(_) => None,
        }
    }
}

/// Build the layout for `fs`. `project` is always writable (the plan already lists it).
pub fn prepare(fs: &FilesystemPlan) -> Layout {
    prepare_with_state(fs, &[])
}

/// Build the layout for `fs` with `staged` paths mounted copy-on-write (they are writable
/// inside, and no longer read-only carve-outs). The mounts come in the order they must be
/// made: binds (parents first), read-only carve-outs, masks; then the Landlock rules.
pub fn prepare_with_state(fs: &FilesystemPlan, staged: &[Staged]) -> Layout {
    let mut layout = Layout::default();
    let deny = denied(fs);
    let binds = binds(fs, staged, &deny, &mut layout.skipped);
    let writable_roots: Vec<PathBuf> = binds
        .iter()
        .filter_map(|b| match b {
            MountOp::Bind {
                path,
                writable: true,
            }
            | MountOp::Overlay { path, .. }
            | MountOp::StagedFile { path, .. } => Some(path.clone()),
            _ => None,
        })
        .collect();
    let staged_paths: Vec<PathBuf> = staged
        .iter()
        .filter(|s| s.reviewed())
        .map(|s| normalize(s.path()))
        .collect();
    let in_place: Vec<PathBuf> = staged
        .iter()
        .filter(|s| matches!(s, Staged::InPlace { .. }))
        .map(|s| normalize(s.path()))
        .collect();
    layout.mounts.extend(binds);
    let shown = HomeView::of(staged, &layout.mounts);
    layout.home_view = shown.home.is_some();
    carve_outs(
        fs,
        (&staged_paths, &in_place),
        &writable_roots,
        &deny,
        &mut layout.mounts,
    );
    // A denied path the sandbox does not see anyway has nothing to hide there.
    let mut in_view = Vec::new();
    for (path, rule) in deny.iter().cloned() {
        let why = match not_in_view(&path, &layout.mounts) {
            Some(why) => why,
            None if !shown.holds(&path) => UnseenWhy::HomeView,
            None => {
                in_view.push((path, rule));
                continue;
            }
        };
        // Said only of what the host has there, as a mask is made only over what exists.
        if std::fs::symlink_metadata(&path).is_ok() {
            layout.unseen.push(Unseen { path, rule, why });
        }
    }
    masks(&in_view, &mut layout.mounts);
    landlock_rules(&deny, &writable_roots, &mut layout);
    layout
}

/// Why the host's file at `p` is not in the sandbox's view at all, whatever the host holds
/// there: it lies under a filesystem of the sandbox's own (the private `/tmp`, `/dev/shm`,
/// the minimal `/dev`) with no mount bringing the host's files back, or under no mount at
/// all. A mask there would have no place to go, wherever `SSH_AUTH_SOCK` or
/// `XDG_RUNTIME_DIR` points.
fn not_in_view(p: &Path, mounts: &[MountOp]) -> Option<UnseenWhy> {
    let Some(deepest) = mounts
        .iter()
        .filter(|m| p.starts_with(m.path()))
        .max_by_key(|m| depth(m.path()))
    else {
        return Some(UnseenWhy::Outside);
    };
    let own = match deepest {
        MountOp::Tmpfs { .. } => true,
        // The minimal /dev binds a few of the host's devices: a deny on one (`/dev/tty`,
        // against terminal injection) still needs its mask.
        MountOp::Dev { path } => !DEV_NODES
            .iter()
            .any(|n| p.strip_prefix(path).is_ok_and(|r| r.starts_with(n))),
        _ => false,
    };
    own.then(|| UnseenWhy::OwnFs(deepest.path().to_path_buf()))
}

/// The host's character devices the sandbox's minimal `/dev` binds (the rest of it is its own).
pub(crate) const DEV_NODES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// The home's view, when the home has one: which host paths under the home the sandbox can
/// see at all (those the view holds, and those below a directory shown as it is).
struct HomeView {
    home: Option<(PathBuf, PathBuf)>,
    shown: Vec<PathBuf>,
}

impl HomeView {
    fn of(staged: &[Staged], binds: &[MountOp]) -> Self {
        let home = staged.iter().find_map(|s| match s {
            Staged::Home {
                path,
                view: Some(view),
                ..
            }
            | Staged::View { path, view } => Some((normalize(path), view.clone())),
            _ => None,
        });
        // Whatever has a mount of its own inside the home (the project, writable and readable
        // binds, caches, shown directories, protected paths) is seen as it is there.
        let mut shown: Vec<PathBuf> = staged
            .iter()
            .filter(|s| {
                !matches!(
                    s,
                    Staged::Home { .. } | Staged::View { .. } | Staged::InPlace { .. }
                )
            })
            .map(|s| normalize(s.path()))
            .collect();
        shown.extend(binds.iter().filter_map(|b| match b {
            MountOp::Bind { path, .. } => Some(path.clone()),
            _ => None,
        }));
        if let Some((home, _)) = &home {
            shown.retain(|p| p != home && p.starts_with(home));
        }
        HomeView { home, shown }
    }

    /// Whether the host path `p` can be in the sandbox's view (always, outside a home with a
    /// view).
    fn holds(&self, p: &Path) -> bool {
        let Some((home, view)) = &self.home else {
            return true;
        };
        let Ok(rel) = p.strip_prefix(home) else {
            return true;
        };
        self.shown.iter().any(|s| p.starts_with(s))
            || std::fs::symlink_metadata(view.join(rel)).is_ok()
    }
}

/// Canonical deny paths: both the spelling in the policy and where it really points, each
/// with the rule's origin.
fn denied(fs: &FilesystemPlan) -> Vec<(PathBuf, String)> {
    let mut deny: Vec<(PathBuf, String)> = Vec::new();
    // The first rule naming a path keeps it; a set says which are in (`Path`'s hash and
    // equality compare components, as comparing with each one in the list did).
    let mut seen = std::collections::HashSet::new();
    let mut canon = Canon::default();
    for r in &fs.deny {
        for f in forms(&r.path, &mut canon) {
            if seen.insert(f.clone()) {
                deny.push((f, r.origin.to_string()));
            }
        }
    }
    deny
}

/// Step 1. Binds and the sandbox's own filesystems, parents before children, with the
/// session's staged paths as overlays; paths that cannot be bound are noted in `skipped`.
fn binds(
    fs: &FilesystemPlan,
    staged: &[Staged],
    deny: &[(PathBuf, String)],
    skipped: &mut Vec<String>,
) -> Vec<MountOp> {
    let mut binds: Vec<MountOp> = vec![
        MountOp::Dev {
            path: "/dev".into(),
        },
        MountOp::Proc {
            path: "/proc".into(),
        },
        MountOp::Tmpfs {
            path: "/tmp".into(),
        },
        MountOp::Tmpfs {
            path: "/dev/shm".into(),
        },
    ];
    let mut add_binds = |rules: &[PathRule], writable: bool, skipped: &mut Vec<String>| {
        for r in rules {
            let p = normalize(&r.path);
            let real = match std::fs::canonicalize(&p) {
                Ok(c) => c,
                Err(_) => {
                    skipped.push(format!(
                        "{} path {} does not exist ({})",
                        if writable { "writable" } else { "readable" },
                        p.display(),
                        r.origin
                    ));
                    continue;
                }
            };
            if deny.iter().any(|(d, _)| within(&real, d)) {
                skipped.push(format!(
                    "{} is inside a denied path; deny wins",
                    real.display()
                ));
                continue;
            }
            binds.retain(|b| !(matches!(b, MountOp::Bind { .. }) && b.path() == real));
            binds.push(MountOp::Bind {
                path: real,
                writable,
            });
        }
    };
    add_binds(&fs.readable, false, skipped);
    add_binds(&fs.writable, true, skipped);
    for st in staged
        .iter()
        .filter(|s| !matches!(s, Staged::InPlace { .. }))
    {
        let path = normalize(st.path());
        if deny.iter().any(|(d, _)| within(&path, d)) {
            skipped.push(format!(
                "protected {} is inside a denied path; deny wins",
                path.display()
            ));
            continue;
        }
        // The home's overlay replaces nothing: binds inside it (the project, writable paths)
        // are mounted on top of it.
        if !matches!(st, Staged::Home { .. }) {
            binds.retain(|b| b.path() != path);
        }
        binds.push(match (st.overlay(), st) {
            (Some(overlay), _) => overlay,
            (None, Staged::File { copy, .. }) => MountOp::StagedFile {
                path,
                copy: copy.clone(),
            },
            (None, Staged::View { view, .. }) => MountOp::File {
                path,
                host: view.clone(),
            },
            (None, Staged::Bound { .. }) => MountOp::Bind {
                path,
                writable: false,
            },
            (None, _) => continue,
        });
        // A staged git dir's object stores stay in its copy-on-write layer (they were bound
        // writable in place, so a session could delete every object or plant
        // `objects/info/alternates` on the host at once, issue #44): what is added is applied
        // at exit without asking, what is removed or rewritten waits for review.
    }
    // Stable: at equal depth the sandbox's own mounts (pushed first) come before user binds.
    binds.sort_by_key(|b| depth(b.path()));
    binds
}

/// Step 2. Read-only carve-outs, with their parents pinned so they cannot be swapped out by a
/// rename; staged paths are pinned the same way but stay writable (reviewed at exit instead).
fn carve_outs(
    fs: &FilesystemPlan,
    (staged_paths, in_place): (&[PathBuf], &[PathBuf]),
    writable_roots: &[PathBuf],
    deny: &[(PathBuf, String)],
    mounts: &mut Vec<MountOp>,
) {
    let mut pins: Vec<PathBuf> = Vec::new();
    let mut read_only: Vec<PathBuf> = Vec::new();
    // The plan holds every read-only path, including the git files the loader derived from
    // `.git/config`'s rule (submodules', worktrees').
    let ro_rules: &[PathRule] = &fs.read_only;
    // Staged paths need their parents pinned just like read-only ones: renaming `.git` away
    // and making a new one would otherwise slip a hook past both the mount and the review.
    let mut guarded: Vec<PathBuf> = ro_rules
        .iter()
        .map(|r| normalize(&r.path))
        .filter(|p| !in_place.contains(p))
        .collect();
    for p in staged_paths {
        if !guarded.contains(p) {
            guarded.push(p.clone());
        }
    }
    for mut p in guarded {
        // Inside a staged path (a whole git dir copy-on-write): reviewed with it, and writable
        // there so that git's lock-and-rename writes work.
        if staged_paths.iter().any(|s| within(&p, s) && *s != p) {
            continue;
        }
        // Under the private `/tmp`, or outside every bind: the host's file is not there to
        // protect.
        if not_in_view(&p, mounts).is_some() {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            // A symlink cannot be a mount point: protect where it points when that is inside
            // a writable path (elsewhere it is read-only already). The link itself can still
            // be replaced; the state layer puts it back at exit.
            match std::fs::canonicalize(&p) {
                Ok(t) if writable_roots.iter().any(|w| within(&t, w) && t != *w) => p = t,
                _ => continue,
            }
        }
        let staged = staged_paths.contains(&p);
        if deny.iter().any(|(d, _)| within(&p, d)) {
            continue;
        }
        if let Some(root) = writable_roots
            .iter()
            .filter(|w| within(&p, w) && **w != p)
            .max_by_key(|w| depth(w))
        {
            let mut a = p.parent();
            while let Some(anc) = a {
                if anc == root.as_path() || !within(anc, root) {
                    break;
                }
                if !pins.iter().any(|x| x == anc) {
                    pins.push(anc.to_path_buf());
                }
                a = anc.parent();
            }
        }
        // A staged path is writable copy-on-write and reviewed at exit instead.
        if !staged && !read_only.contains(&p) {
            read_only.push(p);
        }
    }
    pins.sort_by_key(|p| depth(p));
    read_only.sort_by_key(|p| depth(p));
    mounts.extend(pins.into_iter().map(|path| MountOp::Pin { path }));
    mounts.extend(read_only.into_iter().map(|path| MountOp::ReadOnly { path }));
}

/// Step 3. Masks last, so nothing can be bound over them. A mask inside another is redundant.
fn masks(deny: &[(PathBuf, String)], mounts: &mut Vec<MountOp>) {
    let mut masks: Vec<(PathBuf, String)> = deny.to_vec();
    masks.sort_by_key(|(p, _)| depth(p));
    let mut done: Vec<PathBuf> = Vec::new();
    for (p, rule) in masks {
        if done.iter().any(|d| within(&p, d)) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            // Its canonical target is in the list too; the link itself then leads nowhere.
            continue;
        }
        done.push(p.clone());
        if meta.is_dir() {
            mounts.push(MountOp::MaskDir {
                path: p,
                rule,
                shown: Vec::new(),
                sealed: false,
            });
        } else {
            mounts.push(MountOp::MaskFile { path: p, rule });
        }
    }
}

/// Step 4. Landlock: read beneath each readable root except denied subtrees; write where
/// writable.
fn landlock_rules(deny: &[(PathBuf, String)], writable_roots: &[PathBuf], layout: &mut Layout) {
    let excluded = Holes::new(deny.iter().map(|(p, _)| p.as_path()));
    for b in &layout.mounts {
        if let MountOp::Bind {
            path,
            writable: false,
        } = b
        {
            carve(path, &excluded, &mut layout.landlock);
        }
    }
    for w in writable_roots {
        layout.landlock.write.push(w.clone());
    }
    for p in ["/tmp", "/dev", "/dev/shm"] {
        layout.landlock.write.push(p.into());
    }
}

/// The denied subtrees Landlock must leave out, indexed for the two questions [`carve`] asks of
/// every directory entry on its way down (hundreds of entries in `/etc`, `/var/tmp`, ...,
/// against every denied path): does this path lie in a hole, and does it hold one. Asked of
/// each entry by comparing it with each denied path, `Path::starts_with` walking components
/// every time, those questions were the largest CPU cost of building the layout. Both answers
/// are the same as `starts_with`'s: a path lies within `e` exactly when one of its ancestors
/// (itself included) equals `e`, and `Path`'s equality and hash compare components alike.
struct Holes {
    /// The denied paths themselves.
    holes: std::collections::HashSet<PathBuf>,
    /// Every denied path and each of its ancestors: the paths that hold a hole.
    holding: std::collections::HashSet<PathBuf>,
}

impl Holes {
    fn new<'a>(excluded: impl Iterator<Item = &'a Path>) -> Self {
        let mut holes = std::collections::HashSet::new();
        let mut holding = std::collections::HashSet::new();
        for e in excluded {
            holes.insert(e.to_path_buf());
            for a in e.ancestors() {
                if !holding.insert(a.to_path_buf()) {
                    // Its ancestors are in already.
                    break;
                }
            }
        }
        Holes { holes, holding }
    }

    /// `p` is a denied path or lies beneath one.
    fn covers(&self, p: &Path) -> bool {
        p.ancestors().any(|a| self.holes.contains(a))
    }

    /// `p` is a denied path itself.
    fn is_hole(&self, p: &Path) -> bool {
        self.holes.contains(p)
    }

    /// `p` is a denied path or one lies beneath it.
    fn holds(&self, p: &Path) -> bool {
        self.holding.contains(p)
    }
}

/// Grant read beneath `root` except for the `excluded` subtrees. Landlock rules only allow, so a
/// hole is made by granting each sibling on the way down to it; the directories on that way get
/// list-only access (entry names, no file contents).
fn carve(root: &Path, excluded: &Holes, rules: &mut LandlockRules) {
    if excluded.covers(root) {
        return;
    }
    if !excluded.holds(root) {
        rules.read.push(root.to_path_buf());
        return;
    }
    rules.list_only.push(root.to_path_buf());
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    // The entry type comes from getdents (d_type): no stat per entry for large dirs like /etc.
    let mut entries: Vec<(std::ffi::OsString, std::fs::FileType)> = entries
        .filter_map(|e| {
            e.ok()
                .and_then(|e| Some((e.file_name(), e.file_type().ok()?)))
        })
        .collect();
    // By name: the same order as comparing the paths (one parent), without parsing paths'
    // components at every comparison (~150 entries in /etc).
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind) in entries {
        let p = root.join(name);
        // `root` lies in no hole (checked above): `p` does only if it is one.
        if excluded.is_hole(&p) {
            continue;
        }
        if kind.is_symlink() {
            // Landlock follows the link: grant it only if its target neither is nor holds a hole.
            match std::fs::canonicalize(&p) {
                Ok(t) if !excluded.covers(&t) && !excluded.holds(&t) => rules.read.push(p),
                _ => {}
            }
            continue;
        }
        if kind.is_dir() {
            if excluded.holds(&p) {
                carve(&p, excluded, rules);
            } else {
                rules.read.push(p);
            }
        } else {
            rules.read_files.push(p);
        }
    }
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
