//! Test harness: a throwaway HOME full of fake credentials and a project, and a way to run the
//! real `cordon` binary on them as root or as an unprivileged user (via `setpriv`).
//!
//! Two guards keep a green run honest. Strict mode ([`strict`]): a test that cannot run what it
//! claims (a tool missing, a root variant without root) fails instead of skipping. And negative
//! checks go through [`Env::denied`] / [`assert_ran`]: an attack "failed" only if the sandboxed
//! shell was seen to start, so cordon refusing to start (exit 125) is never a pass.
#![allow(dead_code)]

pub mod net;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The unprivileged account the tests use when run as root (created by scripts/setup-test-env.sh).
pub const TEST_USER: &str = "cordon-test";

/// Secrets planted in the fake HOME; none of these strings may ever be printed inside the sandbox.
pub const SECRETS: &[(&str, &str)] = &[
    (".ssh/id_ed25519", "SECRET-ssh-key"),
    (".aws/credentials", "SECRET-aws"),
    (".netrc", "SECRET-netrc"),
    (".config/gh/hosts.yml", "SECRET-gh"),
    (".config/gcloud/credentials.db", "SECRET-gcloud"),
    (".kube/config", "SECRET-kube"),
    (".docker/config.json", "SECRET-docker"),
    (".gnupg/private.key", "SECRET-gnupg"),
    (".git-credentials", "SECRET-gitcred"),
    // As npm writes it: the home's view checks the file and hides it for the token.
    (
        ".npmrc",
        "//registry.npmjs.org/:_authToken=SECRET-npmrc-4e1f\n",
    ),
    (".pypirc", "SECRET-pypirc"),
    (".bash_history", "SECRET-history"),
    (".password-store/x.gpg", "SECRET-pass"),
];

/// The user policy every test home starts with: `~/notes.txt` shown (a test that writes its
/// own user policy and reads notes.txt adds this).
pub const SHOW_NOTES: &str = "[filesystem]\nhome_show = [\"~/notes.txt\"]\n";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    Root,
    User,
}

pub struct Env {
    pub who: Who,
    _dir: tempfile::TempDir,
    pub base: PathBuf,
    pub home: PathBuf,
    pub project: PathBuf,
    pub audit: PathBuf,
    ids: Option<(u32, u32)>,
}

/// Strict mode, `CORDON_TEST_STRICT=1` (scripts/test.sh sets it when run as root, as in CI):
/// every [`skip`] is a failure, so a passing suite ran every variant and every tool it names.
pub fn strict() -> bool {
    std::env::var_os("CORDON_TEST_STRICT").is_some_and(|v| v == "1")
}

/// Whether the environment declared `need` unavailable (`CORDON_TEST_UNAVAILABLE`, comma
/// separated): then a skip for it is allowed even in strict mode, as rust-landlock's CI declares
/// the Landlock ABI its kernel has. scripts/test.sh names each declaration and why.
fn declared_unavailable(need: &str) -> bool {
    std::env::var("CORDON_TEST_UNAVAILABLE").is_ok_and(|v| v.split(',').any(|d| d.trim() == need))
}

/// This test, or a part of it, cannot run here because `need` (a tool, "root", a feature) is
/// missing; `why` says what is not being tested. Outside strict mode: a line on stderr and in
/// `CORDON_TEST_SKIP_LOG` (scripts/test.sh prints that file at the end, since the test harness
/// hides a passing test's output). In strict mode: a failure, unless the environment declared
/// `need` unavailable.
#[track_caller]
pub fn skip(need: &str, why: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let declared = declared_unavailable(need);
    if strict() && !declared {
        panic!(
            "CORDON_TEST_STRICT=1 and this test cannot run what it claims: {why} (missing: {need}; \
             declare it in CORDON_TEST_UNAVAILABLE only if this environment cannot have it)"
        );
    }
    let line = format!(
        "skipped{}: {test}: {why} (missing: {need})",
        if declared {
            " (declared unavailable)"
        } else {
            ""
        }
    );
    eprintln!("{line}");
    if let Some(log) = std::env::var_os("CORDON_TEST_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Whether `tool` is on the host's PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool} >/dev/null 2>&1"))
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether every one of `tools` is on the host's PATH; if not, [`skip`]s for the first missing
/// one (`what`: the part of the test that needs them).
#[track_caller]
pub fn need(tools: &[&str], what: &str) -> bool {
    match tools.iter().find(|t| !have(t)) {
        None => true,
        Some(t) => {
            skip(t, what);
            false
        }
    }
}

/// What the sandboxed shell prints on stderr first, in [`marked`] scripts: proof that cordon
/// started and ran the command.
pub const STARTED: &str = "cordon-test: the sandboxed command started";

/// `script`, run after printing [`STARTED`] on stderr.
pub fn marked(script: &str) -> String {
    format!("echo '{STARTED}' >&2\n{script}")
}

/// The [`marked`] command ran inside the sandbox: whatever it then failed to do, cordon did
/// not refuse to start (exit 125) and the shell was reached.
#[track_caller]
pub fn assert_ran(o: &Output) {
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(STARTED),
        "the command never ran in the sandbox (exit 125 is cordon refusing to start), so \
         nothing was tried\n{}",
        show(o)
    );
}

/// The [`marked`] command `what` ran inside the sandbox and failed there: a non-zero exit, and
/// not 127 (its program was not found, so the attempt was never made).
#[track_caller]
pub fn assert_denied(o: &Output, what: &str) {
    assert_ran(o);
    assert_ne!(o.status.code(), Some(0), "{what} succeeded\n{}", show(o));
    assert_ne!(
        o.status.code(),
        Some(127),
        "{what}: a program was not found, so nothing was tried\n{}",
        show(o)
    );
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

fn user_ids(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&name))
            .then(|| Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?)))?
    })
}

/// The cordon binary, copied where an unprivileged user can execute it.
fn binary_for(who: Who) -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_cordon"));
    if who == Who::Root || !is_root() {
        return built;
    }
    static COPY: OnceLock<PathBuf> = OnceLock::new();
    COPY.get_or_init(|| {
        let m = std::fs::metadata(&built).expect("built binary");
        let dir = PathBuf::from(format!(
            "/var/tmp/cordon-test-bin/{}-{}",
            m.len(),
            m.mtime_nsec() ^ m.mtime()
        ));
        let bin = dir.join("cordon");
        if bin.exists() {
            // Used again: its age counts from now (see `prune_old_binaries`).
            let now = std::time::SystemTime::now();
            let _ = std::fs::File::open(&dir).and_then(|d| d.set_modified(now));
        } else {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::set_permissions(
                "/var/tmp/cordon-test-bin",
                std::fs::Permissions::from_mode(0o755),
            )
            .unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
            let tmp = dir.join(format!("cordon.{}", std::process::id()));
            // A hard link costs no space where the target dir and /var/tmp share a disk; a
            // copy is the fallback. Either way the build's own file is never changed.
            if std::fs::hard_link(&built, &tmp).is_err() {
                std::fs::copy(&built, &tmp).unwrap();
                std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            std::fs::rename(&tmp, &bin).unwrap();
            prune_old_binaries(&dir);
        }
        bin
    })
    .clone()
}

/// Every build leaves one entry under /var/tmp/cordon-test-bin; one unused for a day (each
/// test binary's first use renews its time) belongs to a build long replaced, and kept they
/// add up to gigabytes.
fn prune_old_binaries(keep: &Path) {
    let Ok(entries) = std::fs::read_dir("/var/tmp/cordon-test-bin") else {
        return;
    };
    let day = std::time::Duration::from_secs(24 * 3600);
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > day);
        if old && e.path() != keep {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn chown_tree(p: &Path, uid: u32, gid: u32) {
    let st = Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{gid}"))
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success());
}

impl Env {
    /// `None` when this variant cannot run here (root variant while not root).
    pub fn new(who: Who) -> Option<Env> {
        let ids = match (who, is_root()) {
            (Who::Root, false) => {
                skip("root", "the root variant needs root");
                return None;
            }
            (Who::Root, true) | (Who::User, false) => None,
            (Who::User, true) => Some(user_ids(TEST_USER).unwrap_or_else(|| {
                panic!("user {TEST_USER} missing: run scripts/setup-test-env.sh first")
            })),
        };
        // Not under /tmp: the sandbox gets a private /tmp, and HOME must stay visible.
        let dir = tempfile::Builder::new()
            .prefix("cordon-t")
            .tempdir_in("/var/tmp")
            .unwrap();
        let base = dir.path().canonicalize().unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let home = base.join("home");
        let project = home.join("proj");
        std::fs::create_dir_all(&project).unwrap();
        for (rel, content) in SECRETS {
            let p = home.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, content).unwrap();
        }
        std::fs::write(home.join("notes.txt"), "visible-home-file").unwrap();
        // An ordinary document the tests read and write through the copy-on-write home: shown
        // by the user's policy, as a user shows what their work needs (the built-in view shows
        // no documents).
        let user_policy = home.join(".config/cordon/cordon.toml");
        std::fs::create_dir_all(user_policy.parent().unwrap()).unwrap();
        std::fs::write(&user_policy, SHOW_NOTES).unwrap();
        std::fs::create_dir_all(base.join("audit")).unwrap();
        if let Some((uid, gid)) = ids {
            chown_tree(&base, uid, gid);
        }
        let audit = base.join("audit/session.jsonl");
        Some(Env {
            who,
            _dir: dir,
            base,
            home,
            project,
            audit,
            ids,
        })
    }

    /// The variant this process can run without skipping: root when root, else the user.
    pub fn here() -> Env {
        let who = if is_root() { Who::Root } else { Who::User };
        Env::new(who).expect("this process's own variant always runs")
    }

    /// Make a file or tree belong to the user the sandbox runs as.
    pub fn own(&self, p: &Path) {
        if let Some((uid, gid)) = self.ids {
            chown_tree(p, uid, gid);
        }
    }

    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.project.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        self.own(&self.base);
        p
    }

    /// A crate of one binary, `tiny`, that prints `tiny says 42`.
    pub fn write_tiny_crate(&self) {
        self.write(
            "Cargo.toml",
            "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        );
        self.write(
            "src/main.rs",
            "fn main() { println!(\"tiny says {}\", 6 * 7); }\n",
        );
    }

    /// A file of the host's home at `rel` (its directories made), the home then the variant's
    /// user's; its path.
    pub fn write_home(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.home.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        self.own(&self.home);
        p
    }

    /// A policy file of the test's own outside the project (the user's, so it needs no
    /// `cordon trust`), readable by the variant's user; its path.
    pub fn policy_file(&self, name: &str, text: &str) -> String {
        let p = self.base.join(name);
        std::fs::write(&p, text).unwrap();
        self.own(&p);
        p.display().to_string()
    }

    /// `cordon ARGS…` as the variant's user, with a clean, known environment.
    pub fn cordon(&self) -> Command {
        let bin = binary_for(self.who);
        let mut c = match self.ids {
            Some((uid, gid)) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--clear-groups")
                    .arg("--")
                    .arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let path = match self.who {
            // The unprivileged user cannot enter /root, where rustup lives: Debian's cargo serves it.
            Who::User if is_root() => "/usr/local/bin:/usr/bin:/bin".to_string(),
            _ => std::env::var("PATH").unwrap_or_default(),
        };
        c.env_clear()
            .env("HOME", &self.home)
            .env("PATH", path)
            .env("LANG", "C.UTF-8")
            .env("XDG_STATE_HOME", self.base.join("state"))
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("XDG_DATA_HOME", self.base.join("data"))
            .current_dir(&self.project)
            .stdin(Stdio::null());
        if let Ok(v) = std::env::var("RUSTUP_HOME") {
            c.env("RUSTUP_HOME", v);
        }
        if let Ok(v) = std::env::var("CARGO_HOME") {
            c.env("CARGO_HOME", v);
        }
        c
    }

    /// `cordon run --no-tty --audit … -- sh -c SCRIPT` with extra cordon args before `--`.
    pub fn run_with(&self, args: &[&str], script: &str) -> Output {
        let mut c = self.cordon();
        c.arg("run")
            .arg("--no-tty")
            .arg("--audit")
            .arg(&self.audit)
            .args(args)
            .arg("--")
            .arg("sh")
            .arg("-c")
            .arg(script);
        let _ = std::fs::remove_file(&self.audit);
        c.output().unwrap()
    }

    pub fn run(&self, script: &str) -> Output {
        self.run_with(&[], script)
    }

    /// [`Env::run_with`] of a [`marked`] script, which must have run in the sandbox; for tests
    /// that then look for what did not happen.
    #[track_caller]
    pub fn attempt_with(&self, args: &[&str], script: &str) -> Output {
        let o = self.run_with(args, &marked(script));
        assert_ran(&o);
        o
    }

    #[track_caller]
    pub fn attempt(&self, script: &str) -> Output {
        self.attempt_with(&[], script)
    }

    /// Run `script` (an attack, or anything that must not work) and require that it ran in the
    /// sandbox and failed there ([`assert_denied`]); returns the output for further checks.
    #[track_caller]
    pub fn denied_with(&self, args: &[&str], script: &str) -> Output {
        let o = self.run_with(args, &marked(script));
        assert_denied(&o, script);
        o
    }

    #[track_caller]
    pub fn denied(&self, script: &str) -> Output {
        self.denied_with(&[], script)
    }

    /// [`Env::run_with`] that requires exit 0; returns stdout.
    #[track_caller]
    pub fn ok_with(&self, args: &[&str], script: &str) -> String {
        let o = self.run_with(args, script);
        assert_eq!(
            o.status.code(),
            Some(0),
            "script failed: {script}\n{}",
            show(&o)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Run and require exit 0; returns stdout.
    #[track_caller]
    pub fn ok(&self, script: &str) -> String {
        let o = self.run(script);
        assert_eq!(
            o.status.code(),
            Some(0),
            "script failed: {script}\n{}",
            show(&o)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// The cordon binary this variant runs, for command lines run under `script`.
    pub fn cordon_line(&self) -> String {
        binary_for(self.who).display().to_string()
    }

    /// The home directory /etc/passwd gives the variant's user.
    pub fn passwd_home(&self) -> Option<PathBuf> {
        let name = if self.ids.is_some() {
            TEST_USER.to_string()
        } else {
            std::env::var("USER").ok()?
        };
        let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
        passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&name.as_str())).then(|| f.get(5).map(PathBuf::from))?
        })
    }

    /// The uid the sandboxed command should see.
    pub fn uid(&self) -> u32 {
        self.ids.map_or(0, |(u, _)| u)
    }
}

/// Run a shell command line under a real pty (util-linux `script`), typing `input` slowly,
/// with the environment and user of `env.cordon()`; returns what the terminal showed.
pub fn under_pty(env: &Env, line: &str, input: &str) -> String {
    use std::io::Write;
    let mut child = pty_session(env, line);
    let mut stdin = child.stdin.take().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    for chunk in input.split_inclusive('\n') {
        stdin.write_all(chunk.as_bytes()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    finish_pty_session(child, Duration::from_secs(60))
}

/// [`under_pty`], typing `answer` once `prompt` is on the terminal rather than after a fixed
/// pause: typed early, on a loaded machine, the answer would reach the command instead of
/// the question.
pub fn under_pty_answering(env: &Env, line: &str, prompt: &str, answer: &str) -> String {
    under_pty_answering_within(env, line, (prompt, answer), Duration::from_secs(60))
}

/// [`under_pty_answering`], the session killed after `limit` (a VM's boot under emulation
/// takes longer than a namespace's start).
pub fn under_pty_answering_within(
    env: &Env,
    line: &str,
    (prompt, answer): (&str, &str),
    limit: Duration,
) -> String {
    use std::io::{Read, Write};
    let mut child = pty_session(env, line);
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (prompt, answer) = (prompt.as_bytes().to_vec(), answer.as_bytes().to_vec());
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        let mut answered = false;
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => return seen,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
            if !answered && seen.windows(prompt.len()).any(|w| w == prompt.as_slice()) {
                answered = true;
                let _ = stdin.write_all(&answer);
            }
        }
    });
    let rest = finish_pty_session(child, limit);
    let seen = reader.join().unwrap();
    format!("{}{rest}", String::from_utf8_lossy(&seen))
}

/// `line` run by `script` under a pty of its own, as `env`'s user, stdio piped.
fn pty_session(env: &Env, line: &str) -> std::process::Child {
    let base = env.cordon();
    let mut s = match env.ids {
        Some((uid, gid)) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--clear-groups")
                .arg("--")
                .arg("script");
            c
        }
        None => Command::new("script"),
    };
    s.args(["-qefc", line, "/dev/null"]).env_clear();
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            s.env(k, v);
        }
    }
    s.env("TERM", "xterm")
        .current_dir(&env.project)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    s.spawn().unwrap()
}

/// Waits for a [`pty_session`] (killed after 60 s: a hung session must fail the test, not hang
/// the suite) and returns what it printed that was not taken already.
fn finish_pty_session(child: std::process::Child, limit: Duration) -> String {
    let (done, deadline) = std::sync::mpsc::channel::<()>();
    let pid = child.id();
    std::thread::spawn(move || {
        if deadline.recv_timeout(limit).is_err() {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    });
    let o = child.wait_with_output().unwrap();
    let _ = done.send(());
    all_output(&o)
}

pub fn show(o: &Output) -> String {
    format!(
        "status: {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn all_output(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Define one test per variant: `both!(name, |env| { … });` makes `name::root` and `name::user`.
/// Attributes before the name (`#[ignore = "why"]`) go on both.
#[macro_export]
macro_rules! both {
    ($(#[$attr:meta])* $name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $(#[$attr])*
            #[test]
            fn root() {
                if let Some(env) = common::Env::new(common::Who::Root) {
                    ($body)(env);
                }
            }
            $(#[$attr])*
            #[test]
            fn user() {
                if let Some(env) = common::Env::new(common::Who::User) {
                    ($body)(env);
                }
            }
        }
    };
}

/// The approval brokers' directory the tests point cordon at (`XDG_RUNTIME_DIR`), owned by
/// the variant's user.
pub fn runtime_dir(env: &Env) -> PathBuf {
    let runtime = env.base.join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    env.own(&runtime);
    runtime
}

pub fn approve(env: &Env, args: &[&str]) -> std::process::Output {
    let mut c = env.cordon();
    c.env("XDG_RUNTIME_DIR", env.base.join("runtime"))
        .arg("approve")
        .args(args);
    c.output().unwrap()
}

/// Poll `cordon approve --list` until a question mentioning `needle` appears; returns its id
/// exactly as the listing prints it (`SESSION#N`, what `cordon approve ID` takes) and the whole
/// listing.
pub fn wait_for_question(env: &Env, needle: &str) -> (String, String) {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let o = approve(env, &["--list"]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        if let Some(line) = out.lines().find(|l| l.contains(needle)) {
            let id = line.split_whitespace().next().unwrap().to_string();
            assert!(id.contains('#'), "ids are listed as SESSION#N: {out}");
            return (id, out);
        }
        assert!(
            Instant::now() < end,
            "no question about {needle:?}: {}",
            show(&o)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every file, directory (as `<dir>`) and symlink (its target) under `root` with its content,
/// in path order, outside `skip` — and outside the parents of `skip` that only lead there
/// (cordon makes those for its own directories).
pub fn tree(root: &Path, skip: &[PathBuf]) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if skip.iter().any(|s| p.starts_with(s) || s.starts_with(&p)) {
                if !skip.contains(&p) && p.is_dir() {
                    stack.push(p);
                }
                continue;
            }
            let md = std::fs::symlink_metadata(&p).unwrap();
            let content = if md.file_type().is_symlink() {
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if md.is_dir() {
                stack.push(p.clone());
                b"<dir>".to_vec()
            } else {
                std::fs::read(&p).unwrap_or_default()
            };
            out.push((p, content));
        }
    }
    out.sort();
    out
}

/// `git ARGS` on the host in `dir` (any owner, a fixed identity); its trimmed stdout.
#[track_caller]
pub fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(["-c", "safe.directory=*", "-c", "user.name=t", "-c"])
        .arg("user.email=t@example.invalid")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}\n{}", show(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The replay property: `cordon replay` of the session's log under the policy that ran it
/// (`policy_args`: the run's `--policy FILE`, if any) reproduces every decision — no change.
/// Every session the network tests and the escape battery run is checked this way.
#[track_caller]
pub fn assert_replay_reproduces(env: &Env, policy_args: &[&str]) {
    if !env.audit.is_file() {
        return;
    }
    // Under the same environment as the run: cordon's own directories are masked by path.
    let o = env
        .cordon()
        .env("XDG_RUNTIME_DIR", runtime_dir(env))
        .arg("replay")
        .arg(&env.audit)
        .args(policy_args)
        .arg("--json")
        .output()
        .unwrap();
    let report: serde_json::Value = match serde_json::from_slice(&o.stdout) {
        Ok(v) => v,
        Err(_) => panic!("cordon replay gave no report: {}", show(&o)),
    };
    let changes = report["changes"].as_array().map_or(0, Vec::len);
    assert_eq!(
        report["rule_changed"], 0,
        "replaying the session under its own policy named other rules: {report:#}"
    );
    assert_eq!(
        changes,
        0,
        "replaying the session under its own policy changed decisions:\n{}",
        serde_json::to_string_pretty(&report["changes"]).unwrap_or_default()
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
}

/// The `--policy FILE` pair of a run's arguments, for [`assert_replay_reproduces`].
pub fn policy_args<'a>(args: &[&'a str]) -> Vec<&'a str> {
    args.windows(2)
        .find(|w| w[0] == "--policy")
        .map(|w| w.to_vec())
        .unwrap_or_default()
}

/// The session's audit log, one value per event.
pub fn events(env: &Env) -> Vec<serde_json::Value> {
    std::fs::read_to_string(&env.audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A shell prelude that makes `curl` run as `agent` (the program a profile keeps its
/// credentials for, `programs = [...]`): a link named after the agent to the real curl,
/// made here on the host where the sandbox cannot write, so the process is taken for the
/// agent by the name it was started by, as a real agent's link (`~/.local/bin/claude`) is.
pub fn as_agent(env: &Env, agent: &str) -> String {
    let dir = env.base.join("agentbin");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join(agent);
    let curl = ["/usr/bin/curl", "/bin/curl", "/usr/local/bin/curl"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("curl");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(curl, &link).unwrap();
    format!("curl() {{ {} \"$@\"; }}\n", link.display())
}

/// The children of `parent` named `comm`.
pub fn children(parent: u32, comm: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let ppid: u32 = rest.split_whitespace().nth(1).unwrap().parse().unwrap();
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if ppid == parent && name.trim_end() == comm {
            found.push(pid);
        }
    }
    found
}
