//! Asking git itself what a config file or an index says, instead of a reader of our own: a
//! second parser is a second opinion, and every place it differs from git's is a way to show
//! review one thing while the host's git runs another (issue #44: `# \` before `[core]`).
//!
//! Asking git means running a program on the host after the session, so the git asked is one
//! the session cannot have planted or changed ([`trusted_git`]): never a `git` in a writable
//! root or a directory others may write, whatever `PATH` says.
//!
//! git runs here in a clean environment: no system or global config, an empty `HOME`, none of
//! the caller's `GIT_*` variables, a scratch directory as its working directory (so it finds
//! no repository), with a timeout. Nothing it is asked to do runs a configured program:
//! `config --file … --no-includes` only reads that file, and `ls-files` reads an index under a
//! git dir made here, whose config is empty. Whatever git cannot answer (absent, refuses the
//! input, too slow) comes back as `None`, and callers hold the change for review.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `section[.subsection].key` → values, in file order, as git names them (section and key
/// lowercased, the subsection as written).
pub(crate) type Keys = BTreeMap<String, Vec<String>>;

/// How long git may take to read one config file or index.
const CONFIG_TIMEOUT: Duration = Duration::from_secs(10);
const INDEX_TIMEOUT: Duration = Duration::from_secs(60);

/// A scratch directory of this process's own (0700): an empty home, and whatever git reads.
fn scratch() -> Option<tempfile::TempDir> {
    let d = tempfile::Builder::new()
        .prefix("cordon-git-")
        .tempdir()
        .ok()?;
    std::fs::create_dir(d.path().join("home")).ok()?;
    Some(d)
}

/// Paths the session could write (the writable roots): no git there is run. Set by
/// [`super::discover`]; a later process (`cordon state …`) relies on the ownership rule alone.
static UNTRUSTED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

pub(crate) fn distrust(roots: &[PathBuf]) {
    let mut u = UNTRUSTED.lock().unwrap_or_else(|e| e.into_inner());
    for r in roots {
        if !u.contains(r) {
            u.push(r.clone());
        }
    }
}

/// The git to ask: the first in `PATH` that the session cannot have planted or changed. Asking
/// git means running it on the host, as the user, after the session: a `git` in a project's
/// `node_modules/.bin` or `bin` on `PATH` would be the session's code. So: an absolute `PATH`
/// entry, the file and every directory above it (symlinks resolved) owned by root or by this
/// user and writable by neither group nor others, and nothing inside a writable root. None
/// found: git counts as absent, and what needs it is held.
fn trusted_git() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    trusted_git_in(&path)
}

fn trusted_git_in(path: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    // This process's effective uid, as the kernel shows it (the owner of /proc/self).
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok()?;
    let untrusted = UNTRUSTED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    std::env::split_paths(path)
        .filter(|d| d.is_absolute())
        .filter_map(|d| std::fs::canonicalize(d.join("git")).ok())
        .find(|git| {
            !untrusted.iter().any(|r| git.starts_with(r))
                && std::fs::metadata(git).is_ok_and(|m| m.is_file())
                && git.ancestors().all(|a| {
                    std::fs::metadata(a)
                        .is_ok_and(|m| (m.uid() == 0 || m.uid() == me) && m.mode() & 0o022 == 0)
                })
        })
}

/// git with nothing of the caller's configuration; `None` when no trusted git is found.
fn clean_git(scratch: &Path) -> Option<Command> {
    let git = trusted_git()?;
    let mut c = Command::new(&git);
    let mut path = std::ffi::OsString::from(git.parent().unwrap_or(Path::new("/")));
    path.push(":/usr/bin:/bin");
    c.env_clear()
        .env("PATH", path)
        .env("HOME", scratch.join("home"))
        .env("XDG_CONFIG_HOME", scratch.join("home"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CEILING_DIRECTORIES", scratch)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .current_dir(scratch)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    Some(c)
}

/// Run `c` for its stdout; `None` when it cannot start, fails, or outlives `timeout` (then it
/// is killed).
fn output(mut c: Command, timeout: Duration) -> Option<Vec<u8>> {
    let mut child = c.spawn().ok()?;
    let mut stdout = child.stdout.take()?;
    // Read while waiting: a large index's listing would fill the pipe and stall git.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = tx.send(stdout.read_to_end(&mut buf).map(|_| buf));
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(2)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    // Killed (too slow) or failed: nothing to read.
    status.filter(|s| s.success())?;
    // git has exited; a child of its own (verify-pack runs index-pack) that outlived it may
    // still hold the pipe: its reader is left behind rather than waited for.
    rx.recv_timeout(Duration::from_secs(2)).ok()?.ok()
}

/// The keys of `text` read as a git config file, as `git config --list` reports them;
/// includes are not followed (an include is itself a key that review flags). `None`: git is
/// absent or refuses the text.
pub(crate) fn config_keys(text: &str) -> Option<Keys> {
    let d = scratch()?;
    let file = d.path().join("config");
    std::fs::write(&file, text).ok()?;
    let mut c = clean_git(d.path())?;
    c.args(["config", "--no-includes", "--null", "--list", "--file"])
        .arg(&file);
    let out = output(c, CONFIG_TIMEOUT)?;
    parse_list(&out)
}

/// `git config --list --null` output: `key\nvalue\0`, or `key\0` for a key with no `=`.
pub(crate) fn parse_list(out: &[u8]) -> Option<Keys> {
    let mut keys = Keys::new();
    let text = std::str::from_utf8(out).ok()?;
    for item in text.split('\0').filter(|s| !s.is_empty()) {
        let (k, v) = match item.split_once('\n') {
            Some((k, v)) => (k, v.to_owned()),
            // git's own reading of a bare key is boolean true.
            None => (item, "true".to_owned()),
        };
        keys.entry(k.to_owned()).or_default().push(v);
    }
    Some(keys)
}

/// One entry of an index, as `git ls-files --stage -v` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub path: String,
    pub mode: u32,
    /// `skip-worktree`: git neither reads nor writes the work-tree file (status is blind to it).
    pub skip_worktree: bool,
    /// `assume-unchanged`: git does not look at the work-tree file for changes.
    pub assume_unchanged: bool,
}

impl IndexEntry {
    /// A gitlink: a commit of another repository, which git enters at `path`.
    pub fn is_gitlink(&self) -> bool {
        self.mode == 0o160000
    }
}

/// Empty git dirs under `scratch`, one per object format (SHA-1, then SHA-256), for reading
/// an index or a pack whose format is not known; their config sets nothing that runs.
fn empty_gitdirs(scratch: &Path) -> Option<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    for format in ["sha1", "sha256"] {
        let g = scratch.join(format!("{format}.git"));
        std::fs::create_dir_all(g.join("objects")).ok()?;
        std::fs::create_dir_all(g.join("refs")).ok()?;
        std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").ok()?;
        let config = match format {
            "sha1" => "[core]\n\trepositoryformatversion = 0\n\tbare = true\n".to_owned(),
            f => format!(
                "[core]\n\trepositoryformatversion = 1\n\tbare = true\n[extensions]\n\tobjectformat = {f}\n"
            ),
        };
        std::fs::write(g.join("config"), config).ok()?;
        out.push(g);
    }
    Some(out)
}

/// The entries of the index file `index`, read by git under a git dir made here (empty config,
/// SHA-1 then SHA-256). `None`: git is absent or cannot read it.
pub(crate) fn index_entries(index: &Path) -> Option<Vec<IndexEntry>> {
    let d = scratch()?;
    for g in empty_gitdirs(d.path())? {
        let mut c = clean_git(d.path())?;
        c.env("GIT_DIR", &g)
            .env("GIT_INDEX_FILE", index)
            .args(["ls-files", "--stage", "-v", "-z"]);
        if let Some(out) = output(c, INDEX_TIMEOUT) {
            return parse_ls_files(&out);
        }
    }
    None
}

/// Whether git verifies the pack whose index is `idx` (the pack beside it): every object's
/// name recomputed from its content (`git verify-pack`). A new pack is read before older packs
/// and loose objects, so one whose index names an object the host has, with other content,
/// would replace that object for every later checkout; a verified pack cannot.
pub(crate) fn pack_verified(idx: &Path) -> bool {
    let Some(d) = scratch() else { return false };
    let Some(dirs) = empty_gitdirs(d.path()) else {
        return false;
    };
    dirs.iter().any(|g| {
        let Some(mut c) = clean_git(d.path()) else {
            return false;
        };
        c.env("GIT_DIR", g).arg("verify-pack").arg(idx);
        output(c, INDEX_TIMEOUT).is_some()
    })
}

/// `git ls-files --stage -v -z`: `T MODE OID STAGE\tPATH\0`; the tag `S` is skip-worktree, a
/// lowercase tag assume-unchanged.
fn parse_ls_files(out: &[u8]) -> Option<Vec<IndexEntry>> {
    let mut entries = Vec::new();
    for item in out.split(|b| *b == 0).filter(|s| !s.is_empty()) {
        let tab = item.iter().position(|b| *b == b'\t')?;
        let head = std::str::from_utf8(&item[..tab]).ok()?;
        let path = String::from_utf8_lossy(&item[tab + 1..]).into_owned();
        let mut f = head.split(' ');
        let tag = f.next()?;
        let mode = u32::from_str_radix(f.next()?, 8).ok()?;
        entries.push(IndexEntry {
            path,
            mode,
            skip_worktree: tag.eq_ignore_ascii_case("s"),
            assume_unchanged: tag.chars().any(|c| c.is_ascii_lowercase()),
        });
    }
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_reads_what_a_continued_comment_hides_from_a_naive_reader() {
        // `# \` ends at the newline for git: `[core]` starts a section, fsmonitor is in it.
        let Some(k) = config_keys("[user]\n# \\\n[core]\n\tfsmonitor = touch x\n") else {
            return; // no git here: callers hold
        };
        assert_eq!(k["core.fsmonitor"], ["touch x"]);
        let k = config_keys("[core] # \\\n\tfsmonitor = a\n[x]\n\tbare\n").unwrap();
        assert_eq!(k["core.fsmonitor"], ["a"]);
        assert_eq!(k["x.bare"], ["true"]);
        assert!(config_keys("[core\n").is_none());
    }

    #[test]
    fn the_list_format_is_read_as_git_writes_it() {
        let k =
            parse_list(b"core.fsmonitor\ntouch x\0x.bare\0remote.Origin.url\n/a\n/b\0").unwrap();
        assert_eq!(k["core.fsmonitor"], ["touch x"]);
        assert_eq!(k["x.bare"], ["true"]);
        assert_eq!(k["remote.Origin.url"], ["/a\n/b"]);
        let e =
            parse_ls_files(b"S 100644 ab 0\ta\0h 100644 ab 0\tb c\0H 160000 ab 0\tsub\0").unwrap();
        assert!(e[0].skip_worktree && !e[0].assume_unchanged);
        assert!(e[1].assume_unchanged && e[1].path == "b c");
        assert!(e[2].is_gitlink() && !e[2].skip_worktree);
    }

    /// A `git` the session could have written (in a writable root, or in a directory others
    /// may write) is never the one asked, even first on `PATH` (as a project's `bin` is for
    /// direnv users).
    #[test]
    fn git_in_a_writable_place_is_not_run() {
        let Some(system) = trusted_git() else {
            return; // no trusted git here at all
        };
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        let plant = |dir: &Path, mode: u32| {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("git"), "#!/bin/sh\necho planted\n").unwrap();
            std::fs::set_permissions(
                dir.join("git"),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
            std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap();
        };
        let with_first = |dir: &Path| {
            let mut p = std::ffi::OsString::from(dir);
            p.push(":");
            p.push(std::env::var_os("PATH").unwrap_or_default());
            p
        };
        // In a writable root: under the home, where the ownership rule alone would pass it
        // (a temporary directory's sticky, world-writable parent would not).
        let home = std::env::var_os("HOME").map(PathBuf::from);
        if let Some(h) = home.and_then(|h| tempfile::tempdir_in(h).ok()) {
            let root = h.path().canonicalize().unwrap().join("proj");
            plant(&root.join("bin"), 0o755);
            let first = with_first(&root.join("bin"));
            let owned_well = trusted_git_in(&first).is_some_and(|g| g.starts_with(&root));
            distrust(std::slice::from_ref(&root));
            assert_eq!(trusted_git_in(&first), Some(system.clone()));
            if !owned_well {
                eprintln!("the home is not owned well here: only the writable-root rule shown");
            }
        }
        // In a directory others may write.
        let shared = base.join("shared");
        plant(&shared, 0o777);
        assert_eq!(trusted_git_in(&with_first(&shared)), Some(system.clone()));
        // Relative entries are never searched.
        assert_eq!(trusted_git_in(std::ffi::OsStr::new("bin:.")), None);
    }
}
