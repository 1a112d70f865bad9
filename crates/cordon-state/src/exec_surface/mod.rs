//! The host-executed surface of writable paths: what the host loads or runs later without the
//! user running project code (git dirs reached through every indirection, editor and agent
//! settings, shell rc files), so that it goes through review before the host sees it.
//!
//! Three parts. [`discover`] runs before the sandbox: it follows git's indirections (`.git`
//! dir or gitfile, `commondir`, `worktrees/*`, nested repositories) and symlinks to what exists
//! (to be staged copy-on-write: changes land in the session and wait for review) and names what
//! does not exist yet (to be watched). [`settle`] runs after the sandbox and before review: what
//! the session created at a watched name, a swapped symlink, the executable parts of a git dir
//! made during the session — each is moved off the host into the session as a pending change.
//! [`flags`] and [`applies_unasked`] classify a change for review: a git change that executes
//! nothing (commits, refs, `user.*`, `remote.*.url`) is applied at exit without asking.
//!
//! Everything here reads paths the untrusted session could have shaped: discovery resolves
//! links on the host before the sandbox exists, and settling moves things without following
//! symlinks.

mod asker;
mod gitconfig;
mod review;
mod tools;

pub(crate) use review::flags;
use review::*;
pub use review::{ExitFate, exit_fate};

#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    /// What review says about a config change from `before` to `after` (empty: applied
    /// without asking).
    pub fn config_flags(before: &str, after: &str) -> Vec<String> {
        super::gitconfig::flags(before, after)
    }
    /// Why a key (as git names it) makes git run something, if it does.
    pub fn executes(name: &str, values: &[String]) -> Option<&'static str> {
        super::gitconfig::executes(name, values)
    }
    /// Whether a key may change without review.
    pub fn inert(name: &str) -> bool {
        super::gitconfig::inert(name)
    }
}

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{StateError, io_err};
use crate::flags::Subject;
use crate::fsops;
use crate::manifest::{Manifest, NodeKind};
use crate::meta::{EntryKind, MetaEntry};
use crate::store::{Change, Session};

pub(crate) use cordon_events::lexical::normalize;

/// Names under a writable root that host tools load on their own: agents' project settings
/// (their hooks and MCP servers run), editors' workspace settings and tasks, direnv, shell rc
/// files, package-manager and build config, dev containers, pre-commit.
pub const ROOT_NAMES: &[&str] = &[
    ".gitmodules",
    ".mcp.json",
    ".envrc",
    ".env.local",
    ".vscode",
    ".idea",
    ".claude",
    ".gemini",
    ".codex",
    ".cursor",
    ".windsurf",
    ".zed",
    "opencode.json",
    "opencode.jsonc",
    ".opencode",
    ".devcontainer",
    ".pre-commit-config.yaml",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".cargo/config.toml",
    ".cargo/config",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
];

/// Names git replaces by renaming a new file over them, which a bind of a working copy cannot
/// take (`EBUSY`): when they exist they stay writable in place. `.gitmodules` runs nothing by
/// itself (git refuses `update = !command` from it) and is tracked content; the repositories
/// it names are what runs, and those are git dirs on the surface. When absent it is watched.
pub const WRITTEN_IN_PLACE: &[&str] = &[".gitmodules"];

/// When the home itself is writable (it is the project, or inside one): what the user's own
/// session runs or loads from it.
pub const HOME_NAMES: &[&str] = &[
    ".bash_logout",
    ".xprofile",
    ".xsessionrc",
    ".pam_environment",
    ".gitconfig",
    ".config/git",
    ".config/fish",
    ".config/autostart",
    ".config/systemd/user",
    ".config/environment.d",
    ".config/opencode",
    ".config/Code/User",
    ".ssh",
    ".claude.json",
    ".local/bin",
];

/// What [`discover`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Surface {
    /// Existing paths to stage copy-on-write (canonical, none inside another).
    pub stage: Vec<PathBuf>,
    /// Paths that do not exist yet: whatever the session makes there is moved to review.
    pub watch: Vec<PathBuf>,
    /// Symlinks among the names, with their targets: a session that replaces one has its
    /// replacement moved to review and the link put back.
    pub links: Vec<(PathBuf, PathBuf)>,
    /// Every `.git` (dir or gitfile) and bare repository under the roots at the start.
    pub dotgits: Vec<PathBuf>,
    /// The writable roots searched (canonical).
    pub roots: Vec<PathBuf>,
}

/// The text of a regular file of at most 16 MiB. What this module reads may have been made
/// by the session (a gitfile, a linked worktree's `gitdir`, a project's `.yarnrc.yml`): a
/// FIFO there would block a plain read forever (opened non-blocking and refused), and
/// `/dev/zero` behind a symlink would never end (only regular files, and a cap).
pub(crate) fn read_regular(p: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    const MAX: u64 = 16 * 1024 * 1024;
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(p)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    f.take(MAX).read_to_string(&mut text).ok()?;
    Some(text)
}

fn canon(p: &Path) -> Option<PathBuf> {
    fs::canonicalize(p).ok()
}

/// The directory a gitfile (`gitdir: X`) names, resolved against the file's directory.
fn gitfile_target(file: &Path) -> Option<PathBuf> {
    let text = read_regular(file)?;
    let t = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let base = file.parent()?;
    Some(normalize(&base.join(t)))
}

/// `commondir`'s directory, resolved against the git dir.
fn commondir_of(gitdir: &Path) -> Option<PathBuf> {
    let text = read_regular(&gitdir.join("commondir"))?;
    Some(normalize(&gitdir.join(text.trim())))
}

struct Found<'a> {
    roots: &'a [PathBuf],
    /// The excluded paths as a set: a path is excluded when one of its ancestors (itself
    /// included) is in it, the same answer as `starts_with` against each, without comparing
    /// every name with every denied path component by component.
    exclude: std::collections::HashSet<&'a Path>,
    /// `s.stage` and `s.watch` as sets, for the same reason: a project has dozens of names.
    staged: std::collections::HashSet<PathBuf>,
    watched: std::collections::HashSet<PathBuf>,
    s: Surface,
}

impl Found<'_> {
    fn inside_roots(&self, p: &Path) -> bool {
        self.roots.iter().any(|r| p.starts_with(r) && p != r)
    }

    fn excluded(&self, p: &Path) -> bool {
        p.ancestors().any(|a| self.exclude.contains(a))
    }

    fn stage(&mut self, p: PathBuf) {
        if self.inside_roots(&p) && !self.excluded(&p) && self.staged.insert(p.clone()) {
            self.s.stage.push(p);
        }
    }

    fn watch(&mut self, p: PathBuf) {
        if self.inside_roots(&p) && !self.excluded(&p) && self.watched.insert(p.clone()) {
            self.s.watch.push(p);
        }
    }

    /// A name at `p`: staged when it exists; its target staged (or watched) when it is a
    /// symlink into a writable root; watched when absent.
    fn name(&mut self, p: &Path) {
        let Ok(md) = fs::symlink_metadata(p) else {
            // An absent name inside an absent directory is watched by its full path: the
            // directory itself (`.cargo`) is not host-loaded, the file (`config.toml`) is.
            self.watch(p.to_path_buf());
            return;
        };
        if !md.file_type().is_symlink() {
            let in_place = p
                .file_name()
                .is_some_and(|n| WRITTEN_IN_PLACE.iter().any(|w| n == *w));
            if let Some(c) = canon(p).filter(|_| !in_place) {
                self.stage(c);
            }
            return;
        }
        let Ok(raw) = fs::read_link(p) else { return };
        self.s.links.push((p.to_path_buf(), raw.clone()));
        match canon(p) {
            Some(t) => self.stage(t),
            None => {
                let t = normalize(&p.parent().unwrap_or(Path::new("/")).join(&raw));
                self.watch(t);
            }
        }
    }

    /// A `.git` entry (dir or gitfile): every git dir it reaches, and the gitfile itself.
    fn dotgit(&mut self, dotgit: &Path) {
        let Ok(md) = fs::symlink_metadata(dotgit) else {
            self.watch(dotgit.to_path_buf());
            return;
        };
        self.s.dotgits.push(dotgit.to_path_buf());
        let gitdir = if md.is_file() {
            self.stage(dotgit.to_path_buf());
            gitfile_target(dotgit).and_then(|t| canon(&t))
        } else {
            canon(dotgit)
        };
        let Some(gitdir) = gitdir else { return };
        let mut todo = vec![gitdir];
        let mut seen: Vec<PathBuf> = Vec::new();
        while let Some(g) = todo.pop() {
            if seen.contains(&g) || seen.len() > 32 {
                continue;
            }
            seen.push(g.clone());
            self.stage(g.clone());
            self.links_in_gitdir(&g);
            // What the config names (a hooks directory, included config, filter programs
            // inside the tree) is as host-executed as the git dir's own hooks.
            for (p, _) in config_named(&g) {
                self.name(&p);
            }
            if let Some(c) = commondir_of(&g).and_then(|c| canon(&c)) {
                todo.push(c);
            }
            // Linked worktrees: their gitfiles (elsewhere) point back here.
            if let Ok(rd) = fs::read_dir(g.join("worktrees")) {
                for e in rd.flatten() {
                    if let Some(f) = read_regular(&e.path().join("gitdir"))
                        .map(|t| normalize(Path::new(t.trim())))
                    {
                        self.stage(f);
                    }
                }
            }
        }
    }

    /// Symlinks git follows out of a git dir (`hooks -> ../scripts`, `hooks/pre-commit -> …`,
    /// `config -> …`): their targets are host-executed too.
    fn links_in_gitdir(&mut self, g: &Path) {
        let mut candidates: Vec<PathBuf> = ["hooks", "config", "config.worktree", "info"]
            .iter()
            .map(|n| g.join(n))
            .collect();
        if let Ok(rd) = fs::read_dir(g.join("hooks")) {
            candidates.extend(rd.flatten().map(|e| e.path()));
        }
        for c in candidates {
            let is_link = fs::symlink_metadata(&c).is_ok_and(|m| m.file_type().is_symlink());
            if !is_link {
                continue;
            }
            match canon(&c) {
                Some(t) if !t.starts_with(g) => self.stage(t),
                Some(_) => {}
                None => {
                    if let Ok(raw) = fs::read_link(&c) {
                        let t = normalize(&c.parent().unwrap_or(g).join(raw));
                        self.watch(t);
                    }
                }
            }
        }
    }
}

/// Paths the git dir `g`'s own config names, that git runs or reads config from, with the key
/// that names each: `core.hooksPath`, `include.path`, `includeIf.*.path`,
/// `core.attributesFile`, and programs given by path (`core.fsmonitor`, `filter.*.clean`,
/// `smudge` and `process`, `diff.*.command` and `textconv`, `merge.*.driver`). Resolved as git
/// resolves them: includes against the config file's directory, the rest against the work
/// tree (where git runs hooks and drivers); `~/` against `HOME`. A husky `.githooks` or a
/// `../.gitconfig` include is ordinary project content until git runs it.
fn config_named(g: &Path) -> Vec<(PathBuf, String)> {
    let Some(keys) = read_regular(&g.join("config")).and_then(|t| gitconfig::parse(&t)) else {
        return Vec::new();
    };
    let worktree = worktree_of(g, g).unwrap_or_else(|| g.to_path_buf());
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let resolve = |v: &str, base: &Path| -> Option<PathBuf> {
        let v = v.trim();
        if v.is_empty() {
            return None;
        }
        if let Some(rest) = v.strip_prefix("~/") {
            return home.as_ref().map(|h| normalize(&h.join(rest)));
        }
        Some(normalize(&base.join(v)))
    };
    let mut out = Vec::new();
    for (name, values) in &keys {
        let (sec, key) = (
            name.split('.').next().unwrap_or(""),
            name.rsplit('.').next().unwrap_or(""),
        );
        let has_sub = name.matches('.').count() >= 2;
        for v in values {
            let p = match (sec, key) {
                ("core", "hookspath" | "attributesfile") => resolve(v, &worktree),
                ("include", "path") => resolve(v, g),
                ("includeif", "path") if has_sub => resolve(v, g),
                ("core", "fsmonitor")
                | ("filter", "clean" | "smudge" | "process")
                | ("diff", "command" | "textconv")
                | ("merge", "driver") => {
                    // A program given by path: its first word, when it names a file (git runs
                    // the value through the shell from the work tree's top).
                    let first = v.split_whitespace().next().unwrap_or("");
                    (first.contains('/') && (sec != "core" || has_sub || !is_bool(v)))
                        .then(|| resolve(first, &worktree))
                        .flatten()
                }
                _ => None,
            };
            if let Some(p) = p {
                out.push((p, name.clone()));
            }
        }
    }
    out
}

fn is_bool(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0" | ""
    )
}

/// What a directory's configs name, read once per process for each directory (`make` on the
/// first ask).
type Named = std::collections::HashMap<PathBuf, Vec<(PathBuf, String)>>;

fn memo(
    cache: &std::sync::OnceLock<std::sync::Mutex<Named>>,
    key: &Path,
    make: impl FnOnce() -> Vec<(PathBuf, String)>,
) -> Vec<(PathBuf, String)> {
    let mut cache = cache
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    cache.entry(key.to_path_buf()).or_insert_with(make).clone()
}

/// Which key of an enclosing repository's config names `path` (see [`config_named`]), read from
/// the host's config as it is now: the repository's own pointers, not the session's (a change
/// to those is a config change, flagged by key).
fn named_by_git_config(path: &Path) -> Option<String> {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<Named>> = std::sync::OnceLock::new();
    for a in path.ancestors().skip(1) {
        let dotgit = a.join(".git");
        let Ok(md) = fs::symlink_metadata(&dotgit) else {
            continue;
        };
        let gitdir = if md.is_dir() {
            dotgit
        } else if md.is_file() {
            match gitfile_target(&dotgit) {
                Some(t) => t,
                None => continue,
            }
        } else {
            continue;
        };
        let named = memo(&CACHE, &gitdir, || config_named(&gitdir));
        if let Some((_, key)) = named.iter().find(|(p, _)| path.starts_with(p)) {
            return Some(key.clone());
        }
    }
    None
}

/// Which tool config in an ancestor of `path` names it ([`tools::named_in`]), as the host's
/// files are now.
fn named_by_tool_config(path: &Path) -> Option<String> {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<Named>> = std::sync::OnceLock::new();
    for a in path.ancestors().skip(1) {
        let named = memo(&CACHE, a, || tools::named_in(a));
        if let Some((_, by)) = named.iter().find(|(p, _)| path.starts_with(p)) {
            return Some(by.clone());
        }
    }
    None
}

/// Whether git's discovery takes `dir` for a git dir (setup.c's `is_git_directory`): a `HEAD`,
/// and `objects/` and `refs/` or a `commondir`. A bare repository planted in a project
/// subdirectory is one: the host's git run beneath it (a shell prompt's, on `cd`) uses its
/// config — `core.worktree` gives it a work tree, `core.fsmonitor` then runs.
fn looks_like_gitdir(dir: &Path) -> bool {
    fs::symlink_metadata(dir.join("HEAD")).is_ok()
        && (dir.join("commondir").is_file()
            || (dir.join("objects").is_dir() && dir.join("refs").is_dir()))
}

/// Every `.git` below `root` other than `root/.git`, and every directory git would take for a
/// git dir by itself (a bare repository), at any depth and under any directory: the host's git
/// enters a repository wherever a gitlink or a shell's working directory puts it, ignored
/// directories (`node_modules`, `target`) and deep paths included (issue #44). Only git dirs
/// themselves are not entered. No bound: a bound that passed what lies beyond it would be a
/// place to plant a repository; the walk opens no file: one `readdir` and one
/// `stat` (for `HEAD`) per directory.
fn find_dotgits(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut it = walkdir::WalkDir::new(root).follow_links(false).into_iter();
    while let Some(e) = it.next() {
        let Ok(e) = e else { continue };
        if e.depth() == 0 {
            continue;
        }
        let name = e.file_name();
        let dir = e.file_type().is_dir();
        if name == ".git" {
            if e.depth() > 1 {
                out.push(e.path().to_path_buf());
            }
            if dir {
                it.skip_current_dir();
            }
        } else if dir && looks_like_gitdir(e.path()) {
            out.push(e.path().to_path_buf());
            it.skip_current_dir();
        }
    }
    out
}

/// The host-executed surface of `roots` (writable paths, canonical): `home`, when given, is a
/// home directory that is itself inside a root (its own rc files join the surface). Nothing
/// inside `exclude` (denied paths, files kept read-only) is included.
pub fn discover(roots: &[PathBuf], home: Option<&Path>, exclude: &[PathBuf]) -> Surface {
    let roots: Vec<PathBuf> = roots.iter().filter_map(|r| canon(r)).collect();
    // The session writes there: review never runs a git found there.
    asker::distrust(&roots);
    let mut f = Found {
        roots: &roots,
        exclude: exclude.iter().map(PathBuf::as_path).collect(),
        staged: Default::default(),
        watched: Default::default(),
        s: Surface::default(),
    };
    let home_env = std::env::var_os("HOME").map(PathBuf::from);
    for r in &roots {
        for n in ROOT_NAMES {
            f.name(&r.join(n));
        }
        for (p, _) in tools::named_in(r) {
            f.name(&p);
        }
        // What the agent's settings run (a hook's script, the status line, an MCP server's
        // program) is as host-executed as the settings themselves.
        for s in crate::flags::AGENT_SETTINGS {
            for (p, _) in crate::flags::programs_in_settings(&r.join(s), r, home_env.as_deref()) {
                f.name(&p);
            }
        }
        f.dotgit(&r.join(".git"));
        for d in find_dotgits(r) {
            f.dotgit(&d);
        }
    }
    if let Some(h) = home
        .and_then(canon)
        .filter(|h| f.inside_roots(h) || roots.contains(h))
    {
        for n in ROOT_NAMES.iter().chain(HOME_NAMES) {
            f.name(&h.join(n));
        }
    }
    let mut s = f.s;
    s.roots = roots;
    // None inside another: the outer one's mount and review cover it.
    s.stage.sort_by_key(|p| p.components().count());
    let mut kept: Vec<PathBuf> = Vec::new();
    for p in s.stage {
        if !kept.iter().any(|k| p.starts_with(k)) {
            kept.push(p);
        }
    }
    s.stage = kept;
    let staged = s.stage.clone();
    s.watch.retain(|w| !staged.iter().any(|k| w.starts_with(k)));
    s
}

/// Whether `p` lies in a git dir: a `.git` component, or a directory holding `HEAD` and
/// `objects` on the way up (a linked worktree's or a module's git dir under another name).
fn gitdir_of(p: &Path) -> Option<PathBuf> {
    let mut at = PathBuf::new();
    let mut found = None;
    for c in p.components() {
        at.push(c);
        if c.as_os_str() == ".git" {
            found = Some(at.clone());
        }
    }
    found.or_else(|| {
        p.ancestors()
            .find(|a| a.join("HEAD").is_file() && a.join("objects").is_dir())
            .map(Path::to_path_buf)
    })
}

/// A git dir's object store (`objects` beside `HEAD`).
pub fn is_git_objects(p: &Path) -> bool {
    p.file_name().is_some_and(|n| n == "objects")
        && p.parent().is_some_and(|g| g.join("HEAD").is_file())
}

/// The state files of a merge, cherry-pick, revert, rebase or fetch at a git dir's top:
/// inert, and removed by git itself when the operation ends.
const OPERATION_FILES: &[&str] = &[
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "MERGE_MSG",
    "MERGE_MODE",
    "MERGE_RR",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "REBASE_HEAD",
    "AUTO_MERGE",
];

/// Files in a git dir git only stores data in (never runs, never follows elsewhere).
fn inert_in_gitdir(rel: &Path) -> bool {
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let name = parts.last().map(String::as_str).unwrap_or("");
    if matches!(name, "alternates" | "http-alternates") {
        return false;
    }
    if parts
        .iter()
        .any(|p| matches!(p.as_str(), "objects" | "refs" | "logs" | "rr-cache" | "lfs"))
    {
        return true;
    }
    OPERATION_FILES.contains(&name)
        || matches!(
            name,
            "index"
                | "HEAD"
                | "BISECT_LOG"
                | "BISECT_START"
                | "BISECT_TERMS"
                | "BISECT_EXPECTED_REV"
                | "COMMIT_EDITMSG"
                | "TAG_EDITMSG"
                | "SQUASH_MSG"
                | "packed-refs"
                | "description"
                | "shallow"
                | "exclude"
                | "sparse-checkout"
                | "locked"
                | "gc.pid"
                | "gc.log"
                | "sharedindex"
                | "done"
                | "head-name"
                | "onto"
                | "orig-head"
                | "interactive"
                | "message"
                | "author-script"
                | "amend"
                | "stopped-sha"
                | "msgnum"
                | "end"
                | "git-rebase-todo.backup"
                | "drop_redundant_commits"
                | "keep_redundant_commits"
                | "quiet"
                | "verbose"
                | "no-reschedule-failed-exec"
                | "opt"
                | "patch"
        )
        || name.starts_with("sharedindex.")
        || name.ends_with(".lock")
        || parts.iter().any(|p| p == "sequencer")
}

/// What git itself removes in everyday work (a deleted branch, a finished merge or rebase):
/// removed without asking. Anything else removed from a git dir — objects, `HEAD`, the index,
/// hooks, config — waits for review, so a session cannot empty the host's repository unseen.
fn removable(rel: &Path) -> bool {
    let parts: Vec<&std::ffi::OsStr> = rel.components().map(|c| c.as_os_str()).collect();
    let name = parts.last().and_then(|n| n.to_str()).unwrap_or("");
    if parts.iter().any(|p| *p == "objects" || *p == "hooks") {
        return false;
    }
    parts.iter().any(|p| {
        matches!(
            p.to_str(),
            Some("refs" | "logs" | "sequencer" | "rebase-merge" | "rebase-apply")
        )
    }) || name.ends_with(".lock")
        || name.starts_with("BISECT_")
        || matches!(name, "COMMIT_EDITMSG" | "SQUASH_MSG" | "gc.pid" | "gc.log")
        || OPERATION_FILES.contains(&name)
}

/// A directory git itself removes in everyday work: a branch namespace emptied
/// (`refs/heads/feature/`, `logs/refs/heads/feature/`), a finished rebase's or sequencer's
/// state. Never `refs/`, `refs/heads/` or `logs/` themselves (git needs them to know its own
/// directory), nothing of `objects/` or `hooks/`.
fn removable_dir(rel: &Path) -> bool {
    let parts: Vec<&std::ffi::OsStr> = rel.components().map(|c| c.as_os_str()).collect();
    if parts.iter().any(|p| *p == "objects" || *p == "hooks") {
        return false;
    }
    if let [one] = parts.as_slice() {
        return matches!(
            one.to_str(),
            Some("rebase-merge" | "rebase-apply" | "sequencer")
        );
    }
    parts
        .iter()
        .position(|p| *p == "refs")
        .is_some_and(|i| parts.len() >= i + 3)
}

/// A change applied at exit without asking: in a git dir, nothing flagged, and either a
/// config change that sets only inert keys or a change to what git only stores (objects, refs,
/// logs, the index) — a hook or config removed is held like one added; or the project's
/// `.gitmodules` with no update command. Directories come along with the files that need them.
pub fn applies_unasked(c: &Change) -> bool {
    use crate::manifest::ChangeKind;
    let is_dir =
        |n: &Option<crate::manifest::Node>| n.as_ref().is_some_and(|n| n.kind == NodeKind::Dir);
    // A directory named alone would take everything below it along, flagged or not; one git
    // removed (a namespaced branch deleted, a rebase's state) holds only removals, each
    // removable by the same rule, and goes only when empty.
    let removed_dir = c.kind == ChangeKind::Removed && is_dir(&c.before) && c.after.is_none();
    let rel_of = |p: &Path| gitdir_of(p).map(|g| p.strip_prefix(&g).unwrap_or(p).to_path_buf());
    if removed_dir && !rel_of(&c.host_path).is_some_and(|r| removable_dir(&r)) {
        return false;
    }
    if !c.flags.is_empty() || is_dir(&c.after) || (is_dir(&c.before) && !removed_dir) {
        return false;
    }
    let name = c.host_path.file_name().unwrap_or_default();
    if name == ".gitmodules" {
        return c.kind != ChangeKind::Removed;
    }
    if name == ".git" {
        return false;
    }
    let Some(g) = gitdir_of(&c.host_path) else {
        return false;
    };
    let rel = c.host_path.strip_prefix(&g).unwrap_or(Path::new(""));
    let config = matches!(name.to_str(), Some("config" | "config.worktree"));
    if c.kind == ChangeKind::Removed || c.before.as_ref().is_some_and(|b| b.kind == NodeKind::Dir) {
        return removable(rel);
    }
    // The object store is only ever added to: an object rewritten, or `objects/info`
    // (alternates), waits for review.
    if under_objects(rel) {
        return c.kind == ChangeKind::Added && !under_objects_info(rel);
    }
    (config || inert_in_gitdir(rel)) && !rel.components().any(|x| x.as_os_str() == "hooks")
}

impl Session {
    /// Move `host` (file, symlink or tree, not followed) off the host into this session as a
    /// new change: it is shown in review and reaches the host again only when accepted.
    pub fn quarantine(&self, host: &Path) -> Result<(), StateError> {
        let meta_path = self.dir.join("meta.json");
        let mut meta = self.meta()?;
        if meta.entries.iter().any(|e| host.starts_with(&e.host)) {
            return Ok(());
        }
        let name = format!("e{}", meta.entries.len());
        let edir = self.dir.join(&name);
        fsops::private_dir(&edir)?;
        fsops::private_dir(&edir.join("snapshot"))?;
        let m = Manifest::default();
        m.save(&edir.join("manifest.json"))?;
        fsops::move_aside(host, &edir.join("working"))?;
        meta.entries.push(MetaEntry {
            host: host.to_path_buf(),
            kind: EntryKind::Absent,
            dir: name,
            before_hash: m.root_hash(),
            embedded: false,
        });
        meta.save(&meta_path)
    }
}

/// Where `p` really is when its parent directories are followed, if that is inside a root: the
/// session may have turned a parent (`.cargo`) into a symlink, and what it points to outside
/// the writable roots is nothing the session could have written (nor anything to move).
fn on_host(p: &Path, roots: &[PathBuf], parents: &mut Parents) -> Option<PathBuf> {
    let at = parents.canon(p.parent()?)?.join(p.file_name()?);
    roots
        .iter()
        .any(|r| at.starts_with(r) && at != *r)
        .then_some(at)
}

/// The parents [`settle`] has resolved, each resolved once while nothing moves: a project's
/// ~30 watched names share one parent, and `realpath` reads every component of it again for
/// each name. Forgotten after every move, since a move can change what a parent resolves to.
#[derive(Default)]
struct Parents(std::collections::HashMap<PathBuf, Option<PathBuf>>);

impl Parents {
    fn canon(&mut self, dir: &Path) -> Option<PathBuf> {
        if let Some(known) = self.0.get(dir) {
            return known.clone();
        }
        let c = canon(dir);
        self.0.insert(dir.to_path_buf(), c.clone());
        c
    }

    fn forget(&mut self) {
        self.0.clear();
    }
}

/// After the session, before review: what it made at watched names, swapped symlinks and the
/// executable parts of git dirs that are new are moved into `session` (see
/// [`Session::quarantine`]). Returns the host paths moved.
pub fn settle(session: &Session, surface: &Surface) -> Result<Vec<PathBuf>, StateError> {
    let mut moved = Vec::new();
    let mut parents = Parents::default();
    let exists = |p: &Path| fs::symlink_metadata(p).is_ok();
    for w in &surface.watch {
        let Some(w) = on_host(w, &surface.roots, &mut parents) else {
            continue;
        };
        let w = &w;
        if !exists(w) {
            continue;
        }
        if w.file_name().is_some_and(|n| n == ".git") {
            sanitize_dotgit(session, surface, w, &mut moved)?;
        } else {
            session.quarantine(w)?;
            moved.push(w.clone());
        }
        parents.forget();
    }
    for (link, target) in &surface.links {
        let Some(link) = on_host(link, &surface.roots, &mut parents) else {
            continue;
        };
        let link = &link;
        let same = fs::read_link(link).is_ok_and(|t| t == *target);
        if same {
            continue;
        }
        if exists(link) {
            session.quarantine(link)?;
            moved.push(link.clone());
        }
        std::os::unix::fs::symlink(target, link).map_err(io_err("put back symlink", link))?;
        parents.forget();
    }
    let new_dotgit = |d: &Path| {
        !surface.dotgits.iter().any(|k| k == d) && !surface.stage.iter().any(|s| d.starts_with(s))
    };
    for r in &surface.roots {
        for d in find_dotgits(r) {
            if new_dotgit(&d) {
                sanitize_dotgit(session, surface, &d, &mut moved)?;
            }
        }
    }
    // Every gitlink in an index the session changed: the host's `git status` enters the
    // repository at its path, wherever that is (a mount the walk above does not cross).
    for d in gitlinked_dotgits(session) {
        let Some(d) = on_host(&d, &surface.roots, &mut parents) else {
            continue;
        };
        if new_dotgit(&d) && exists(&d) {
            sanitize_dotgit(session, surface, &d, &mut moved)?;
        }
    }
    Ok(moved)
}

/// The `.git` of every gitlink in every index the session changed (an index in a staged git
/// dir's layer), at the gitlink's path in that git dir's work tree.
fn gitlinked_dotgits(session: &Session) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in session
        .entries
        .iter()
        .filter(|e| e.kind == crate::meta::EntryKind::Dir)
    {
        let walk = walkdir::WalkDir::new(&e.upper)
            .follow_links(false)
            .into_iter()
            .filter_entry(|x| x.file_name() != "objects");
        for x in walk.flatten() {
            if x.file_name() != "index" || !x.file_type().is_file() {
                continue;
            }
            let Ok(rel) = x.path().strip_prefix(&e.upper) else {
                continue;
            };
            let gitdir = e.host.join(rel.parent().unwrap_or(Path::new("")));
            let Some(worktree) = worktree_of(
                &gitdir,
                &e.upper.join(rel.parent().unwrap_or(Path::new(""))),
            ) else {
                continue;
            };
            for g in asker::index_entries(x.path()).unwrap_or_default() {
                if g.is_gitlink() {
                    out.push(normalize(&worktree.join(&g.path).join(".git")));
                }
            }
        }
    }
    out
}

/// The work tree of the git dir `gitdir` (whose session layer is `layer`): the parent of a
/// `.git`, the worktree a linked worktree's `gitdir` file names, or `core.worktree`.
fn worktree_of(gitdir: &Path, layer: &Path) -> Option<PathBuf> {
    if gitdir.file_name().is_some_and(|n| n == ".git") {
        return gitdir.parent().map(Path::to_path_buf);
    }
    let read =
        |name: &str| read_regular(&layer.join(name)).or_else(|| read_regular(&gitdir.join(name)));
    if let Some(t) = read("gitdir") {
        return Path::new(t.trim()).parent().map(normalize);
    }
    let keys = gitconfig::parse(&read("config")?)?;
    let wt = keys.get("core.worktree")?.last()?;
    Some(normalize(&gitdir.join(wt)))
}

/// A `.git` the session made: a gitfile goes to review whole unless it leads into a staged git
/// dir; in a git dir, what would run
/// (hooks other than samples, config with keys that execute, indirections, attributes).
fn sanitize_dotgit(
    session: &Session,
    surface: &Surface,
    dotgit: &Path,
    moved: &mut Vec<PathBuf>,
) -> Result<(), StateError> {
    let md = match fs::symlink_metadata(dotgit) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("inspect", dotgit)(e)),
    };
    if !md.is_dir() {
        // A submodule's gitfile into a git dir that was staged (`.git/modules/sub`) leads
        // only to reviewed state; one that leads anywhere else goes to review.
        // Read lexically: the module's git dir is in the session's layer, not on the host yet.
        let reviewed = gitfile_target(dotgit)
            .is_some_and(|t| surface.stage.iter().any(|s| t.starts_with(s) && t != *s));
        if reviewed {
            return Ok(());
        }
        session.quarantine(dotgit)?;
        moved.push(dotgit.to_path_buf());
        return Ok(());
    }
    let mut dirs = vec![dotgit.to_path_buf()];
    while let Some(g) = dirs.pop() {
        for sub in ["modules", "worktrees"] {
            if let Ok(rd) = fs::read_dir(g.join(sub)) {
                dirs.extend(
                    rd.flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
        let mut risky: Vec<PathBuf> = Vec::new();
        for f in ["config", "config.worktree"] {
            let p = g.join(f);
            match fs::symlink_metadata(&p) {
                Ok(m) if m.is_file() => {
                    let text = read_regular(&p).unwrap_or_else(|| "\0".into());
                    if !gitconfig::flags("", &text).is_empty() {
                        risky.push(p);
                    }
                }
                Ok(_) => risky.push(p),
                Err(_) => {}
            }
        }
        for f in [
            "commondir",
            "gitdir",
            "info/attributes",
            "objects/info/alternates",
        ] {
            if exists_nofollow(&g.join(f)) {
                risky.push(g.join(f));
            }
        }
        let hooks = g.join("hooks");
        match fs::symlink_metadata(&hooks) {
            Ok(m) if m.is_dir() => {
                if let Ok(rd) = fs::read_dir(&hooks) {
                    risky.extend(
                        rd.flatten()
                            .map(|e| e.path())
                            .filter(|p| !p.to_string_lossy().ends_with(".sample")),
                    );
                }
            }
            Ok(_) => risky.push(hooks),
            Err(_) => {}
        }
        for p in risky
            .iter()
            .filter_map(|p| on_host(p, &[dotgit.to_path_buf()], &mut Parents::default()))
        {
            session.quarantine(&p)?;
            moved.push(p);
        }
    }
    Ok(())
}

fn exists_nofollow(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

#[cfg(test)]
mod tests;
