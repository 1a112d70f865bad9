//! Who a sandbox process is, for rules keyed on programs (see [`cordon_policy::program`]),
//! found from the host side only: the kernel's `/proc/PID/exe`, the sandbox's own mount
//! table, the host's file at the same path, and the exec the supervisor saw. Nothing the
//! process says of itself (its command line, its name) counts.
//!
//! An executable is trusted when it is the host's own file at the same path, unchanged, where
//! the sandbox cannot change it: the very file (device and inode) on a read-only mount, or,
//! through a copy-on-write layer (the home's tools), the lower file itself (overlayfs gives
//! its inode; a file the sandbox wrote or changed there is a new one in the upper layer).
//! A copy, a file made in the project or `/tmp`, a deleted one, all fail. An interpreter's
//! script is what the supervisor saw it exec'd with (the first argument, with no option
//! before it that could load other code, or the file whose `#!` line named the
//! interpreter), held to the same test, and so is every link from the name it was started
//! by to the file.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cordon_events::lexical::normalize;
use cordon_policy::{ExecSeen, Owner, Process};

use super::owner::ns_pid;

/// The last exec host pid `pid`, started at the given time, is known to have made (see
/// `cordon_sandbox::ExecsSeen`).
pub type ExecsOf = Arc<dyn Fn(u32, u64) -> Option<ExecSeen> + Send + Sync>;

/// Ancestors followed at most.
const DEPTH: usize = 32;
/// Processes described at most; past it the cache starts again.
const KEPT: usize = 1024;

/// The identities of one sandbox's processes.
pub(crate) struct Identify {
    /// The sandbox's init (host pid): ancestors stop below it.
    init: i32,
    execs: Option<ExecsOf>,
    /// By [`Key`]: an exec is a new entry.
    known: Mutex<HashMap<Key, Process>>,
    /// Whole owners by [`Key`] and parent: a connection of a process seen before costs one
    /// `stat` of its executable and one read of its `/proc/PID/stat`.
    owners: Mutex<HashMap<(Key, i32), Owner>>,
    /// Mount tables by mount namespace.
    mounts: Mutex<HashMap<u64, Arc<Vec<Mount>>>>,
}

/// A process as it is now: host pid, start time, its executable's device and inode, and
/// which exec started what it runs (0: none seen).
type Key = (i32, u64, u64, u64, u64);

/// One mount as the sandbox sees it: where, whether it may be written through, and whether
/// it is a copy-on-write layer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    at: PathBuf,
    writable: bool,
    overlay: bool,
}

impl Identify {
    pub(crate) fn new(init: i32, execs: Option<ExecsOf>) -> Self {
        Identify {
            init,
            execs,
            known: Mutex::new(HashMap::new()),
            owners: Mutex::new(HashMap::new()),
            mounts: Mutex::new(HashMap::new()),
        }
    }

    /// The process with host pid `pid` and those that started it (up to the sandbox's init);
    /// `None` when it is gone (exited, its executable no longer there to read).
    pub(crate) fn owner(&self, pid: i32) -> Option<Owner> {
        let (me, ppid, seen) = self.now(pid)?;
        if let Some(o) = lock(&self.owners).get(&(me, ppid)) {
            return Some(o.clone());
        }
        let process = self.process(pid, Some((me, seen)));
        if process.exe.is_empty() {
            return None;
        }
        let mut run_by = Vec::new();
        let mut at = Some(ppid);
        while let Some(p) = at {
            if p == self.init || p <= 1 || run_by.len() >= DEPTH {
                break;
            }
            let k = self.now(p);
            at = k.as_ref().map(|k| k.1);
            run_by.push(self.process(p, k.map(|(k, _, s)| (k, s))));
        }
        let o = Owner { process, run_by };
        let mut owners = lock(&self.owners);
        if owners.len() >= KEPT {
            owners.clear();
        }
        owners.insert((me, ppid), o.clone());
        Some(o)
    }

    /// Process `pid` as it is now, its parent, and the exec that started what it runs: its
    /// own, or, for a process that forked without an exec, its parent's when that runs the
    /// same file. `None` when it is gone.
    fn now(&self, pid: i32) -> Option<(Key, i32, Option<ExecSeen>)> {
        let (k, ppid) = key(pid)?;
        let mut seen = None;
        if let Some(execs) = &self.execs {
            let (mut at, mut start, mut parent) = (pid, k.1, ppid);
            for _ in 0..DEPTH {
                if let Some(s) = execs(u32::try_from(at).ok()?, start) {
                    seen = Some(s);
                    break;
                }
                match key(parent) {
                    Some((pk, pp)) if (pk.2, pk.3) == (k.2, k.3) && parent != self.init => {
                        (at, start, parent) = (parent, pk.1, pp);
                    }
                    _ => break,
                }
            }
        }
        let serial = seen.as_ref().map_or(0, |s| s.serial);
        Some(((k.0, k.1, k.2, k.3, serial), ppid, seen))
    }

    /// Process `pid`, described or as kept under its key (`None`: it could not be read).
    fn process(&self, pid: i32, now: Option<(Key, Option<ExecSeen>)>) -> Process {
        let (key, seen) = match now {
            Some((k, s)) => (Some(k), s),
            None => (None, None),
        };
        if let Some(k) = key
            && let Some(p) = lock(&self.known).get(&k)
        {
            return p.clone();
        }
        let p = self.describe(pid, seen.as_ref());
        // Kept only if it is still the same process (its start time and file unchanged).
        if let Some(k) = key
            && self.now(pid).is_some_and(|(now, _, _)| now == k)
        {
            let mut known = lock(&self.known);
            if known.len() >= KEPT {
                known.clear();
            }
            known.insert(k, p.clone());
        }
        p
    }

    fn describe(&self, pid: i32, seen: Option<&ExecSeen>) -> Process {
        let dir = PathBuf::from(format!("/proc/{pid}"));
        let exe = std::fs::read_link(dir.join("exe"))
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let running = std::fs::metadata(dir.join("exe"));
        let mut p = Process {
            pid: ns_pid(&dir).unwrap_or(i64::from(pid)),
            untrusted: match &running {
                Ok(m) => self.untrusted(pid, m, &exe),
                Err(_) => Some("its executable cannot be read".into()),
            },
            exe,
            ..Process::default()
        };
        if p.untrusted.is_some() {
            return p;
        }
        match (&self.execs, seen) {
            // The supervisor records every exec: one it did not see is not vouched for.
            (Some(_), None) => {
                p.untrusted = Some("cordon's exec supervisor did not see it start".into());
                return p;
            }
            (_, Some(s)) if s.tainted.is_some() => {
                let var = s.tainted.clone().unwrap_or_default();
                p.untrusted = Some(format!(
                    "it was started with {var} set, which loads other code"
                ));
                return p;
            }
            _ => {}
        }
        let Some((named, script)) = seen.and_then(|s| self.started_as(pid, &p.exe, s)) else {
            return p;
        };
        // The name it was started by counts only if every link from it is the host's.
        let Some(file) = self.trusted_links(pid, &named) else {
            return p;
        };
        match script {
            Some(script) if script == file => {
                p.package = cordon_policy::detect::package_of(&script);
                p.script = Some(script);
            }
            None if file == p.exe => {}
            // The links lead elsewhere than what runs: the name says nothing.
            _ => return p,
        }
        p.invoked = Some(named);
        p
    }

    /// Follows `path` link by link as process `pid` sees it, each link and the file at the end
    /// held to [`Identify::untrusted`]: the file, or `None` when any fails.
    fn trusted_links(&self, pid: i32, path: &str) -> Option<String> {
        let mut p = normalize(Path::new(path));
        for _ in 0..40 {
            let at = p.display().to_string();
            let meta = std::fs::symlink_metadata(inside(pid, &at)).ok()?;
            if self.untrusted_at(pid, &meta, &at, true).is_some() {
                return None;
            }
            if !meta.file_type().is_symlink() {
                return Some(at);
            }
            let t = std::fs::read_link(inside(pid, &at)).ok()?;
            p = match t.is_absolute() {
                true => normalize(&t),
                false => normalize(&p.parent().map_or(t.clone(), |d| d.join(&t))),
            };
        }
        None
    }

    /// Why the file the sandbox sees at `path` (its metadata `seen`, read from the host) is not
    /// to be trusted as a program; `None` when it is the host's own, unchanged, where the
    /// sandbox cannot change it.
    fn untrusted(&self, pid: i32, seen: &std::fs::Metadata, path: &str) -> Option<String> {
        self.untrusted_at(pid, seen, path, false)
    }

    /// [`Identify::untrusted`], of the link itself when `link`.
    fn untrusted_at(
        &self,
        pid: i32,
        seen: &std::fs::Metadata,
        path: &str,
        link: bool,
    ) -> Option<String> {
        if path.is_empty() {
            return Some("its executable cannot be read".into());
        }
        if path.ends_with(" (deleted)") {
            return Some(format!("{path}: its file was deleted or replaced"));
        }
        let host = match link {
            true => std::fs::symlink_metadata(path),
            false => std::fs::metadata(path),
        };
        let not_ours = || {
            Some(format!(
                "{path} is not the host's file of that name (made or changed inside the sandbox)"
            ))
        };
        let Ok(host) = host else {
            return not_ours();
        };
        let Some(m) = self.mount_of(pid, Path::new(path)) else {
            return Some(format!("{path}: its mount cannot be read"));
        };
        let same_file = seen.dev() == host.dev() && seen.ino() == host.ino();
        // Through a copy-on-write layer: overlayfs shows the lower file's inode (its own
        // device); one the sandbox wrote is a new inode in the upper layer.
        // ctime too: a rewrite after copy-up keeps the inode number overlayfs shows, and
        // `touch` can put the mtime back, but nothing sets the ctime.
        let lower = m.overlay
            && seen.ino() == host.ino()
            && seen.len() == host.len()
            && seen.mtime() == host.mtime()
            && seen.mtime_nsec() == host.mtime_nsec()
            && seen.ctime() == host.ctime()
            && seen.ctime_nsec() == host.ctime_nsec();
        match (same_file, lower) {
            (true, _) if !m.writable => None,
            (true, _) => Some(format!(
                "{path} is on a mount the sandbox can write ({})",
                m.at.display()
            )),
            (false, true) => None,
            (false, false) => not_ours(),
        }
    }

    /// The mount `path` is on, as process `pid` sees the mounts: the deepest one above it.
    fn mount_of(&self, pid: i32, path: &Path) -> Option<Mount> {
        let ns = std::fs::metadata(format!("/proc/{pid}/ns/mnt")).ok()?.ino();
        let table = {
            let cached = lock(&self.mounts).get(&ns).cloned();
            match cached {
                Some(t) => t,
                None => {
                    let text = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
                    let t = Arc::new(parse_mountinfo(&text));
                    lock(&self.mounts).insert(ns, t.clone());
                    t
                }
            }
        };
        // The last mount at the deepest point wins: it covers the ones before it (and
        // `max_by_key` keeps the last of equal keys).
        table
            .iter()
            .filter(|m| path.starts_with(&m.at))
            .max_by_key(|m| m.at.components().count())
            .cloned()
    }

    /// How process `pid`, running `exe`, was started, from the exec the supervisor saw: the
    /// path it was started by, and for an interpreter the script it runs (symlinks
    /// followed). `None` when the supervisor saw no exec of this process's, or one of
    /// another file.
    fn started_as(&self, pid: i32, exe: &str, seen: &ExecSeen) -> Option<(String, Option<String>)> {
        let seen = seen.clone();
        let running = std::fs::metadata(format!("/proc/{pid}/exe")).ok()?;
        let same = |p: &Path| {
            std::fs::metadata(p).is_ok_and(|m| m.dev() == running.dev() && m.ino() == running.ino())
        };
        if same(&inside(pid, &seen.file)) {
            // Only an interpreter runs a script: `curl /usr/bin/git URL` is curl.
            if !interpreter(exe) {
                return Some((seen.path, None));
            }
            // `node SCRIPT ARGS`: an option before the script (`-r`, `--import`, `-e`…) may
            // run other code, so there is no script then, but for those that only size or
            // quiet the interpreter ([`harmless`]).
            let first = seen.argv.iter().skip(1).find(|a| !harmless(a));
            let script = first.filter(|a| !a.is_empty() && !a.starts_with('-'));
            // A `..` is resolved by the kernel after the links before it, not lexically: a
            // path with one names nothing here.
            let script = script.filter(|a| !a.split('/').any(|c| c == ".."));
            return match script {
                Some(first) => {
                    let path = match first.starts_with('/') {
                        true => PathBuf::from(first),
                        false => Path::new(&seen.cwd).join(first),
                    };
                    let named = normalize(&path).display().to_string();
                    let file = resolve(pid, &path);
                    // A binary handed to an interpreter as its script is not run by it.
                    let elf =
                        read_head(&inside(pid, &file)).is_some_and(|h| h.starts_with("\u{7f}ELF"));
                    match elf {
                        true => Some((seen.path, None)),
                        false => Some((named, Some(file))),
                    }
                }
                None => Some((seen.path, None)),
            };
        }
        // A script run directly: the kernel started the interpreter its `#!` line names.
        let head = read_head(&inside(pid, &seen.file))?;
        let line = head.strip_prefix("#!")?.lines().next()?.trim().to_string();
        let interp = line.split_whitespace().next()?;
        (same(&inside(pid, interp)) && !exe.is_empty()).then_some((seen.path, Some(seen.file)))
    }
}

/// Whether `exe` is an interpreter, whose first argument is the program it runs.
fn interpreter(exe: &str) -> bool {
    let b = exe.rsplit('/').next().unwrap_or(exe);
    matches!(
        b,
        "node" | "nodejs" | "bun" | "deno" | "bash" | "sh" | "dash" | "zsh" | "perl" | "ruby"
    ) || b
        .strip_prefix("python")
        .is_some_and(|v| v.bytes().all(|c| c.is_ascii_digit() || c == b'.'))
}

/// Whether an interpreter option only sizes or quiets it, loading no other code: node's V8
/// limits (`--max-old-space-size=…`, which agents relaunch themselves with) and warnings
/// switches, Python's single-letter flags that take no value and run nothing (`-u`, `-B`,
/// `-E`, `-s`, `-S`, `-I`, `-O`, `-q`). Anything else (`-r`, `--import`, `-e`, `-c`, `-m`,
/// `-X`, `-W`, `--env-file`…) ends the search: no script.
fn harmless(arg: &str) -> bool {
    const NODE: &[&str] = &[
        "--no-warnings",
        "--no-deprecation",
        "--enable-source-maps",
        "--expose-gc",
        "--trace-warnings",
        "--trace-deprecation",
    ];
    const SIZES: &[&str] = &[
        "--max-old-space-size=",
        "--max-semi-space-size=",
        "--max-external-pointer-table-size=",
        "--stack-size=",
    ];
    let number = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    let node_size = SIZES
        .iter()
        .any(|p| arg.strip_prefix(p).is_some_and(number));
    let python_flags = arg
        .strip_prefix('-')
        .is_some_and(|f| !f.is_empty() && f.bytes().all(|b| b"uBEsSIOq".contains(&b)));
    NODE.contains(&arg) || node_size || python_flags
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `path` as process `pid` sees it, reached from the host.
fn inside(pid: i32, path: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root{path}"))
}

/// `path` with symlinks followed as process `pid` sees them (40 hops at most, as the kernel).
fn resolve(pid: i32, path: &Path) -> String {
    let mut p = normalize(path);
    for _ in 0..40 {
        match std::fs::read_link(inside(pid, &p.display().to_string())) {
            Ok(t) if t.is_absolute() => p = normalize(&t),
            Ok(t) => p = normalize(&p.parent().map_or(t.clone(), |d| d.join(&t))),
            Err(_) => break,
        }
    }
    p.display().to_string()
}

fn read_head(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut buf = [0u8; 256];
    let n = std::fs::File::open(path).ok()?.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// The mounts of a `mountinfo` text: mount point (field 5, octal escapes undone) and whether
/// the mount itself is writable (field 6, `rw`).
fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let at = unescape(f.get(4)?);
            let writable = f.get(5)?.split(',').any(|o| o == "rw");
            // The filesystem type follows the ` - ` separator.
            let dash = f.iter().position(|x| *x == "-")?;
            Some(Mount {
                at: PathBuf::from(at),
                writable,
                overlay: f.get(dash + 1) == Some(&"overlay"),
            })
        })
        .collect()
}

/// `\040`-style escapes of mountinfo undone.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) if d[0] <= b'3' => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Process `pid` as it is now (host pid, start time, executable's device and inode), and
/// its parent; `None` when it is gone.
fn key(pid: i32) -> Option<((i32, u64, u64, u64), i32)> {
    let exe = std::fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    let stat = cordon_policy::program::proc_stat(u32::try_from(pid).ok()?)?;
    let (start, ppid) = (stat.start_time, stat.ppid);
    Some(((pid, start, exe.dev(), exe.ino()), ppid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_is_read_with_escapes_and_flags() {
        let text = "22 1 8:1 / / ro,relatime shared:1 - ext4 /dev/sda1 rw\n\
                    30 22 8:1 /home/u/p /home/u/my\\040project rw,nosuid - ext4 /dev/sda1 rw\n\
                    31 22 0:40 / /home/u/.nvm rw shared:2 - overlay overlay rw,lowerdir=/a\n";
        let m = parse_mountinfo(text);
        assert_eq!(
            m,
            [
                Mount {
                    at: "/".into(),
                    writable: false,
                    overlay: false,
                },
                Mount {
                    at: "/home/u/my project".into(),
                    writable: true,
                    overlay: false,
                },
                Mount {
                    at: "/home/u/.nvm".into(),
                    writable: true,
                    overlay: true,
                }
            ]
        );
    }

    // This test process itself: its executable is the host's own file, so trust depends
    // only on its mount here (writable on a developer's disk: untrusted, and said why).
    #[test]
    fn a_process_is_described_from_outside() {
        let me = std::process::id() as i32;
        let id = Identify::new(1, None);
        let o = id.owner(me).expect("this process");
        assert_eq!(
            o.process.exe,
            std::env::current_exe().unwrap().display().to_string()
        );
        assert!(o.process.script.is_none(), "no exec was seen");
        let exe = std::env::current_exe().unwrap();
        let m = id.mount_of(me, &exe).expect("a mount");
        match &o.process.untrusted {
            None => assert!(!m.writable),
            Some(why) => assert!(m.writable && why.contains("can write"), "{why}"),
        }
        assert!(!o.run_by.is_empty(), "cargo's test runner started it");
        assert_eq!(
            id.owner(me),
            Some(o.clone()),
            "the second look comes from what is kept"
        );
        assert_eq!(
            id.process(me, id.now(me).map(|(k, _, s)| (k, s))),
            o.process
        );
    }

    // A copy of a program is not the program: the host's file of that name differs.
    #[test]
    fn a_copy_in_a_writable_place_is_not_the_program() {
        let dir = std::env::temp_dir().join(format!("cordon-id-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join("sleep");
        std::fs::copy("/bin/sleep", &copy).unwrap();
        let mut child = std::process::Command::new(&copy).arg("30").spawn().unwrap();
        let id = Identify::new(1, None);
        let pid = child.id() as i32;
        let p = id.process(pid, id.now(pid).map(|(k, _, s)| (k, s)));
        // The same file at the same path on the host, but on a writable mount.
        assert!(p.untrusted.is_some(), "{p:?}");
        assert!(!p.is("sleep"));
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn scripts_are_found_from_the_exec_seen() {
        let me = std::process::id() as i32;
        let file = std::env::current_exe().unwrap().display().to_string();
        let seen = |argv: &[&str]| ExecSeen {
            start: 0,
            path: "/bin/node".into(),
            file: file.clone(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: "/srv".into(),
            tainted: None,
            serial: 1,
        };
        let id = Identify::new(1, None);
        // This test binary stands in for the interpreter the exec named.
        let script = |argv: &[&str]| id.started_as(me, "/usr/bin/node", &seen(argv));
        assert_eq!(
            script(&["node", "/opt/x/cli.js", "-p"]),
            Some(("/opt/x/cli.js".into(), Some("/opt/x/cli.js".into())))
        );
        assert_eq!(
            script(&["node", "app/cli.js"]),
            Some(("/srv/app/cli.js".into(), Some("/srv/app/cli.js".into())))
        );
        // An option first could load anything: no script, only the name it was started by.
        let none = Some(("/bin/node".to_string(), None));
        assert_eq!(
            script(&["node", "-r", "/tmp/evil.js", "/opt/x/cli.js"]),
            none
        );
        assert_eq!(
            script(&["node", "--import=/tmp/evil.js", "/opt/x/cli.js"]),
            none
        );
        assert_eq!(script(&["python3", "-c", "evil", "/opt/x/cli.py"]), none);
        assert_eq!(
            script(&["node", "--max-old-space-size=x", "/opt/x/cli.js"]),
            none
        );
        // `..` is the kernel's to resolve after links: no script.
        assert_eq!(script(&["node", "/tmp/l/../../opt/x/cli.js"]), none);
        assert_eq!(script(&["node"]), none);
        // Options that only size or quiet the interpreter: the script after them counts.
        let cli = Some(("/opt/x/cli.js".into(), Some("/opt/x/cli.js".into())));
        let sized = [
            "node",
            "--max-old-space-size=4096",
            "--no-warnings",
            "/opt/x/cli.js",
        ];
        assert_eq!(script(&sized), cli);
        let py = Some(("/opt/x/t.py".into(), Some("/opt/x/t.py".into())));
        assert_eq!(script(&["python3", "-uB", "/opt/x/t.py"]), py);
        // Not an interpreter: its first argument is no script (`curl /usr/bin/git URL`).
        let curl = id.started_as(me, "/usr/bin/curl", &seen(&["curl", "/usr/bin/git"]));
        assert_eq!(curl, Some(("/bin/node".to_string(), None)));
        // A binary handed to an interpreter is not its script.
        assert_eq!(script(&["node", &file]), none);
    }
}
