//! The escape battery's harness (`tests/escape_fs.rs`): running an attack with layers off,
//! reading the audit log, host-side snapshots and the host's own git.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{self, Env, all_output, marked, show};
use serde_json::Value;

pub const LAYER_OFF: &str = "CORDON_TEST_LAYER_OFF";

/// `cordon run` of a [`marked`] script with extra cordon arguments, host variables and layers
/// left off; it must have run inside.
#[track_caller]
pub fn attack(
    env: &Env,
    off: Option<&str>,
    args: &[&str],
    vars: &[(&str, &str)],
    script: &str,
) -> Output {
    let mut c = env.cordon();
    if let Some(o) = off {
        c.env(LAYER_OFF, o);
    }
    for (k, v) in vars {
        c.env(k, v);
    }
    c.arg("run")
        .arg("--no-tty")
        .arg("--audit")
        .arg(&env.audit)
        .args(args)
        .arg("--")
        .arg("sh")
        .arg("-c")
        .arg(marked(script));
    let _ = std::fs::remove_file(&env.audit);
    let o = c.output().unwrap();
    common::assert_ran(&o);
    // With a layer left out the session ran under less than its policy: replay would differ.
    if off.is_none() {
        common::assert_replay_reproduces(env, &common::policy_args(args));
    }
    o
}

/// Every entry under `root` with its kind and, for a regular file, its content; a FIFO a
/// session made is listed, never opened (reading it would block).
pub fn snapshot(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let ft = md.file_type();
            let content = if ft.is_symlink() {
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if ft.is_dir() {
                stack.push(p.clone());
                b"<dir>".to_vec()
            } else if ft.is_file() {
                std::fs::read(&p).unwrap_or_default()
            } else {
                format!("<special {:o}>", md.mode()).into_bytes()
            };
            out.push((p, content));
        }
    }
    out.sort();
    out
}

/// The session's audit log, one value per event.
pub fn events(env: &Env) -> Vec<Value> {
    std::fs::read_to_string(&env.audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub fn is(e: &Value, layer: &str, action: &str) -> bool {
    e["layer"] == layer && e["action"] == action
}

/// The event of `layer` and `action` that `pred` accepts; the log is shown when none does.
#[track_caller]
pub fn event(env: &Env, layer: &str, action: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let evs = events(env);
    evs.iter()
        .find(|e| is(e, layer, action) && pred(e))
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no {layer}/{action} event as expected in the audit log:\n{}",
                evs.iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        })
}

/// The strings of a `detail` list.
pub fn list(e: &Value, key: &str) -> Vec<String> {
    e["detail"][key]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The mount layer says it masked `path` by a built-in rule, or left it out of the home's view
/// (by a built-in deny rule, or because its content holds a secret).
#[track_caller]
pub fn assert_masked(env: &Env, path: &Path) {
    let p = path.display().to_string();
    // Or shown as a copy with placeholders in place of its secrets (a registry token's file).
    let copy = format!("{p} is shown as a masked copy");
    if events(env)
        .iter()
        .any(|e| is(e, "filesystem", "apply") && e["reason"] == copy.as_str())
    {
        return;
    }
    let e = event(env, "filesystem", "deny", |e| {
        e["detail"]["path"] == p.as_str()
    });
    assert!(
        e["rule"]
            .as_str()
            .is_some_and(|r| r.starts_with("built-in") || r == "filesystem.home_show"),
        "{e}"
    );
}

/// The view the session got: the mount layer's writable binds (the project alone, as the
/// built-in policy says), and what Landlock and the switch say: `off` names the layers the
/// session ran without, each of which must be in the log as TEST-ONLY.
#[track_caller]
pub fn assert_fenced(env: &Env, off: Option<&str>) {
    let off: Vec<&str> = off.map(|o| o.split(',').collect()).unwrap_or_default();
    let fs = event(env, "filesystem", "apply", |e| {
        e["detail"]["writable"].is_array()
    });
    let mut writable = vec![env.project.display().to_string()];
    if off.contains(&"mounts") {
        // The log says what the switch made of the view: the root bound writable.
        writable.insert(0, "/".into());
    }
    assert_eq!(list(&fs, "writable"), writable, "{fs}");
    for layer in &off {
        event(env, "session", "degraded", |e| {
            e["detail"]["layer_off"] == *layer
        });
    }
    if off.contains(&"mounts") {
        event(env, "filesystem", "degraded", |e| {
            e["reason"]
                .as_str()
                .is_some_and(|r| r.contains("TEST-ONLY"))
        });
    }
    if off.contains(&"landlock") {
        event(env, "landlock", "degraded", |e| {
            e["reason"]
                .as_str()
                .is_some_and(|r| r.contains("TEST-ONLY"))
        });
    } else {
        event(env, "landlock", "apply", |e| {
            e["detail"]["enforcement"] == "full"
        });
    }
}

/// Nothing a planted secret holds was printed, or left in the project.
#[track_caller]
pub fn assert_no_secret(env: &Env, o: &Output, secrets: &[&str]) {
    let out = all_output(o);
    let files = snapshot(&env.project);
    for s in secrets {
        assert!(!out.contains(s), "{s} was read inside\n{}", show(o));
        for (p, content) in &files {
            assert!(
                !String::from_utf8_lossy(content).contains(s),
                "{s} reached the host in {}",
                p.display()
            );
        }
    }
}

pub fn planted() -> Vec<&'static str> {
    common::SECRETS.iter().map(|(_, s)| *s).collect()
}

/// The built-in rule's path that masks each of [`common::SECRETS`].
pub const MASK_ROOTS: &[&str] = &[
    ".ssh",
    ".aws",
    ".netrc",
    ".config/gh",
    ".config/gcloud",
    ".kube",
    ".docker/config.json",
    ".gnupg",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".bash_history",
    ".password-store",
];

/// The host files planted in the home are as they were.
#[track_caller]
pub fn assert_secrets_unchanged(env: &Env) {
    for (rel, content) in common::SECRETS {
        assert_eq!(
            std::fs::read_to_string(env.home.join(rel)).unwrap(),
            *content,
            "{rel} changed on the host"
        );
    }
}

/// Git on the host after the session, as its user runs it (`safe.directory=*`: the test runs
/// as root on a repository the sandbox's user may own, and the config is what would run).
pub fn host_git(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(["-c", "safe.directory=*", "-c", "user.email=h@e.invalid"])
        .args(["-c", "user.name=h", "-c", "protocol.file.allow=always"])
        .args(args)
        .current_dir(dir)
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap()
}

#[track_caller]
pub fn host_git_ok(dir: &Path, args: &[&str]) {
    let o = host_git(dir, args);
    assert!(o.status.success(), "host git {args:?}: {}", show(&o));
}

/// A repository with one commit at `dir`, made by the test's own user.
pub fn repo(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    host_git_ok(dir, &["init", "-q", "-b", "main"]);
    host_git_ok(dir, &["commit", "-q", "--allow-empty", "-m", "first"]);
}

/// Where planted code would leave its mark on the host: outside every writable path.
pub fn marker(env: &Env) -> PathBuf {
    env.base.join("pwned")
}

/// Shell lines that make `file` an executable script touching the marker.
pub fn hook_lines(env: &Env, file: &str) -> String {
    format!(
        "mkdir -p \"$(dirname {file})\"; printf '#!/bin/sh\\ntouch {m}\\n' > {file}; chmod +x {file}",
        m = marker(env).display()
    )
}

/// What the host does with a repository after a session: status, a commit, a checkout, the
/// `st` alias. None of it may run what the session planted.
#[track_caller]
pub fn assert_host_git_runs_nothing(env: &Env, dir: &Path) {
    let _ = host_git(dir, &["status"]);
    let _ = host_git(dir, &["st"]);
    let _ = host_git(dir, &["commit", "-q", "--allow-empty", "-m", "host"]);
    let _ = host_git(
        dir,
        &["checkout", "-q", "-b", &format!("b{}", std::process::id())],
    );
    assert!(
        !marker(env).exists(),
        "the host's git in {} ran code the session planted",
        dir.display()
    );
}

/// The session's changes to protected state wait for review, some flagged.
#[track_caller]
pub fn assert_pending_flagged(env: &Env) {
    let e = event(env, "state", "ask", |e| e["detail"]["flagged"].is_u64());
    assert!(e["detail"]["flagged"].as_u64() > Some(0), "{e}");
}

/// `cordon state diff` of the last session.
pub fn review(env: &Env) -> String {
    all_output(&env.cordon().args(["state", "diff"]).output().unwrap())
}
