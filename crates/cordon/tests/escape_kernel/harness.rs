//! What the kernel/process battery's tests share: the attack program, compiled once; its
//! `KEY=RESULT` output; the audit log's seccomp denials; host processes (a sleeper, a victim
//! whose memory the sandbox tries to read and write) run as the variant's user.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::common::{self, Env, Who, all_output, show};

pub(crate) const ESC_C: &str = include_str!("../fixtures/escape_kernel/esc.c");

pub(crate) fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The attack program, compiled once per test process where every variant can run it (not
/// /tmp: the sandbox has a private one). `None` (after a skip) when there is no compiler.
pub(crate) fn esc() -> Option<String> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(|| {
        if !common::need(&["gcc"], "compiling the attack program") {
            return None;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        ESC_C.hash(&mut h);
        let uid = std::fs::metadata("/proc/self")
            .map(|m| m.uid())
            .unwrap_or(0);
        let dir = PathBuf::from(format!(
            "/var/tmp/cordon-escape-kernel-{uid}-{:016x}",
            h.finish()
        ));
        let bin = dir.join("esc");
        if !bin.exists() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
            let pid = std::process::id();
            let src = dir.join(format!("esc.{pid}.c"));
            let tmp = dir.join(format!("esc.{pid}"));
            std::fs::write(&src, ESC_C).unwrap();
            let o = Command::new("gcc")
                .args(["-O1", "-Wall", "-pthread", "-o"])
                .arg(&tmp)
                .arg(&src)
                .output()
                .unwrap();
            assert!(o.status.success(), "gcc esc.c: {}", show(&o));
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::rename(&tmp, &bin).unwrap();
            let _ = std::fs::remove_file(&src);
        }
        Some(bin)
    })
    .as_ref()
    .map(|p| p.display().to_string())
}

/// What an attack printed: its `KEY=RESULT` lines, and the whole output for messages.
pub(crate) struct Got {
    pub(crate) o: Output,
    kv: BTreeMap<String, String>,
}

impl Got {
    pub(crate) fn parse(o: Output) -> Got {
        let kv = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(k, _)| !k.is_empty() && !k.contains(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Got { o, kv }
    }

    #[track_caller]
    pub(crate) fn get(&self, k: &str) -> &str {
        self.kv
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("the attack printed no {k}\n{}", show(&self.o)))
    }

    #[track_caller]
    pub(crate) fn is(&self, k: &str, want: &str) {
        assert_eq!(self.get(k), want, "{k}\n{}", show(&self.o));
    }

    /// Every key in `keys` answered `want`.
    #[track_caller]
    pub(crate) fn all(&self, keys: &[&str], want: &str) {
        for k in keys {
            self.is(k, want);
        }
    }

    pub(crate) fn text(&self) -> String {
        all_output(&self.o)
    }
}

pub(crate) const EPERM: &str = "errno=1";
pub(crate) const ENOENT: &str = "errno=2";
pub(crate) const ESRCH: &str = "errno=3";
pub(crate) const EACCES: &str = "errno=13";
pub(crate) const EINVAL: &str = "errno=22";
pub(crate) const ENOSYS: &str = "errno=38";

/// Run `script` (it must start in the sandbox) with extra cordon args; parse what it printed.
#[track_caller]
pub(crate) fn attack(env: &Env, args: &[&str], script: &str) -> Got {
    let got = Got::parse(env.attempt_with(args, script));
    common::assert_replay_reproduces(env, &common::policy_args(args));
    got
}

pub(crate) fn events(env: &Env) -> Vec<serde_json::Value> {
    std::fs::read_to_string(&env.audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The seccomp filter's denials in the audit log: (syscall, rule).
pub(crate) fn denials(env: &Env) -> Vec<(String, String)> {
    events(env)
        .iter()
        .filter(|e| e["layer"] == "syscall" && e["action"] == "deny")
        .map(|e| {
            (
                e["detail"]["syscall"].as_str().unwrap_or("").to_string(),
                e["rule"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The filter denied `syscall` and logged it with a rule naming `rule`.
#[track_caller]
pub(crate) fn assert_logged(env: &Env, syscall: &str, rule: &str) {
    let d = denials(env);
    assert!(
        d.iter().any(|(s, r)| s == syscall && r.contains(rule)),
        "no seccomp denial of {syscall} with rule {rule:?} in the audit log: {d:?}"
    );
}

/// The filter had no part in refusing `syscall` (the kernel's own boundary did).
#[track_caller]
pub(crate) fn assert_not_logged(env: &Env, syscall: &str) {
    let d = denials(env);
    assert!(
        !d.iter().any(|(s, _)| s == syscall),
        "{syscall} was denied by the filter, which this run lifted: {d:?}"
    );
}

/// A host process, killed when dropped.
pub(crate) struct HostProc(pub(crate) Child);

impl HostProc {
    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }

    pub(crate) fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for HostProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `prog` on the host as the variant's user (the same user the sandbox runs as).
pub(crate) fn host_cmd(env: &Env, prog: &str) -> Command {
    let mut c = Command::new(prog);
    if env.who == Who::User && is_root() {
        let gid = std::fs::metadata(&env.base).unwrap().gid();
        // std drops root's supplementary groups when it sets the uid.
        c.uid(env.uid()).gid(gid);
    }
    c.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &env.home)
        .stdin(Stdio::null());
    c
}

/// A `sleep` on the host with a secret in its environment and its cwd in `cwd`.
pub(crate) fn host_sleeper(env: &Env, secret: &str, cwd: &Path) -> HostProc {
    let child = host_cmd(env, "sleep")
        .arg("300")
        .env("ESCAPE_SECRET", secret)
        .current_dir(cwd)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    HostProc(child)
}

/// A host victim of the attack program: its pid, its buffer's address; [`Victim::finish`]
/// returns what the buffer held at the end.
pub(crate) struct Victim {
    proc: HostProc,
    pub(crate) addr: String,
    out: PathBuf,
}

impl Victim {
    pub(crate) fn start(env: &Env, esc: &str, name: &str) -> Victim {
        let addr_file = env.base.join(format!("{name}.addr"));
        let out = env.base.join(format!("{name}.out"));
        let child = host_cmd(env, esc)
            .arg("victim")
            .arg(&addr_file)
            .arg(&out)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let proc = HostProc(child);
        let end = Instant::now() + Duration::from_secs(10);
        let line = loop {
            if let Ok(l) = std::fs::read_to_string(&addr_file) {
                break l;
            }
            assert!(Instant::now() < end, "the victim never started");
            std::thread::sleep(Duration::from_millis(20));
        };
        let (pid, addr) = line.trim().split_once(' ').unwrap();
        assert_eq!(pid, proc.pid().to_string());
        Victim {
            proc,
            addr: addr.to_string(),
            out,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// The tracer of the victim, from the host's /proc (0: none).
    pub(crate) fn tracer(&self) -> String {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("TracerPid:"))
            .unwrap()
            .trim()
            .to_string()
    }

    pub(crate) fn finish(mut self) -> String {
        assert!(self.proc.alive(), "the victim died");
        let st = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        self.proc.0.wait().unwrap();
        std::fs::read_to_string(&self.out).unwrap()
    }
}

/// A unique token for secrets and names.
pub(crate) fn token(what: &str) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (std::process::id(), Instant::now(), what).hash(&mut h);
    format!("{what}-{:016x}", h.finish())
}

/// [`attack`] with `CORDON_TEST_LAYER_OFF=off` (debug builds: the layer is left out; the
/// session says so in its log, checked).
#[track_caller]
pub(crate) fn attack_off(env: &Env, off: &str, args: &[&str], script: &str) -> Got {
    let _ = std::fs::remove_file(&env.audit);
    let o = env
        .cordon()
        .env("CORDON_TEST_LAYER_OFF", off)
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(args)
        .args(["--", "sh", "-c"])
        .arg(common::marked(script))
        .output()
        .unwrap();
    common::assert_ran(&o);
    for layer in off.split(',') {
        assert!(
            events(env)
                .iter()
                .any(|e| e["action"] == "degraded" && e["detail"]["layer_off"] == layer),
            "the session did not say {layer} was off\n{}",
            show(&o)
        );
    }
    Got::parse(o)
}
