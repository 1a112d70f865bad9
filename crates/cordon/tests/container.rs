//! cordon inside a container, black-box: Debian's Docker engine (started here when none runs,
//! stopped after), an image made here from Debian's packages (scripts/debian-root.sh) with this
//! build's cordon and a user `tester` — nothing from an image registry. `cordon doctor` in a
//! container started with no options names the options; the same container started with
//! exactly those runs the smoke set (a masked credential, a write outside the project, a
//! denied host answered with cordon's 403, an allowed host, the exit review) as root and as
//! `tester`, without a TTY, in explicit-proxy mode (no /dev/net/tun) and with the TUN. Each
//! named option left out is named again, alone, and `cordon run` fails without it.
//!
//! Podman (Debian's 4.3, daemonless) runs the same, with this machine's workarounds to start
//! any container at all (runc and cgroupfs on its hybrid cgroup layout, rlimits under its hard
//! limits) given before the options doctor names: they are the machine's, not cordon's.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::net::{https_443, www};
use common::{Env, Who, all_output, show, skip};

const DOCKER: &str = "/usr/bin/docker";
const TAG: &str = "cordon-test-container:latest";

/// A container runtime as the test drives it.
struct Runtime {
    /// The command and its global options.
    cli: &'static [&'static str],
    /// What doctor's line says before the options (`docker run`).
    run: &'static str,
    /// Options every container needs on this machine, cordon or not.
    machine: &'static [&'static str],
    /// The bridge on this side, whose address the containers reach the test's server at.
    bridge: &'static str,
    /// How `--security-opt` names the fresh /proc.
    proc_opt: &'static str,
}

const DOCKER_RT: Runtime = Runtime {
    cli: &[DOCKER],
    run: "docker run",
    machine: &[],
    bridge: "docker0",
    proc_opt: "systempaths=unconfined",
};

const PODMAN_RT: Runtime = Runtime {
    cli: &["podman", "--cgroup-manager=cgroupfs", "--runtime=runc"],
    run: "podman run",
    machine: &[
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
    ],
    bridge: "cni-podman0",
    proc_opt: "unmask=ALL",
};
const ENGINE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scripts/container-engine.sh"
);
const SMOKE: &str = include_str!("fixtures/container/smoke.sh");

/// The engine this test runs in; stops it after if the test started it, and removes the image.
struct Engine {
    started: bool,
}

impl Engine {
    fn start() -> Option<Engine> {
        if !Path::new(DOCKER).exists() || !common::have("dockerd") {
            skip(
                "docker.io",
                "cordon in a Docker container (scripts/setup-test-env.sh installs docker.io)",
            );
            return None;
        }
        let o = Command::new("bash")
            .args([ENGINE, "start"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", show(&o));
        let started = String::from_utf8_lossy(&o.stdout).trim() == "started";
        let engine = Engine { started };
        let bin = env!("CARGO_BIN_EXE_cordon");
        let o = Command::new("bash")
            .args([ENGINE, "image", bin, TAG])
            .output()
            .unwrap();
        assert!(o.status.success(), "the image: {}", show(&o));
        Some(engine)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = Command::new(DOCKER).args(["rmi", "-f", TAG]).output();
        if self.started {
            let _ = Command::new("bash").args([ENGINE, "stop"]).output();
        }
    }
}

impl Runtime {
    fn cmd(&self, args: &[&str]) -> Output {
        Command::new(self.cli[0])
            .args(&self.cli[1..])
            .args(args)
            .output()
            .unwrap()
    }
}

/// Run `cmd` in a fresh container of the image started with `opts` (and `--user tester` for
/// the user), with the files of `smoke` at /smoke; the container is removed after.
fn run_in(rt: &Runtime, opts: &[String], who: Who, smoke: &Path, cmd: &[&str]) -> Output {
    let mut create = vec!["create".to_string()];
    create.extend(rt.machine.iter().map(|s| s.to_string()));
    if who == Who::User {
        create.extend(["--user".into(), "tester".into()]);
    }
    create.extend(opts.iter().cloned());
    create.push(TAG.into());
    create.extend(cmd.iter().map(|s| s.to_string()));
    let args: Vec<&str> = create.iter().map(String::as_str).collect();
    let o = rt.cmd(&args);
    assert!(o.status.success(), "create: {}", show(&o));
    let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let o = rt.cmd(&["cp", smoke.to_str().unwrap(), &format!("{id}:/smoke")]);
    assert!(o.status.success(), "cp: {}", show(&o));
    let o = rt.cmd(&["start", "-a", &id]);
    let _ = rt.cmd(&["rm", "-f", &id]);
    o
}

/// The options doctor's closing line names (`… exactly: `docker run OPTS`.`), split as a shell
/// would; empty when it says none are needed.
fn named_options(rt: &Runtime, doctor: &str) -> Vec<String> {
    if doctor.contains("needs no further option") {
        return Vec::new();
    }
    let lead = format!("exactly: `{} ", rt.run);
    let at = doctor
        .find(&lead)
        .unwrap_or_else(|| panic!("no options line:\n{doctor}"));
    let rest = &doctor[at + lead.len()..];
    rest[..rest.find('`').unwrap()]
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The option pairs of `opts` (`--security-opt X`, `--tmpfs D --env V`) as groups, in order.
fn groups(opts: &[String]) -> Vec<Vec<String>> {
    let mut v: Vec<Vec<String>> = Vec::new();
    for pair in opts.chunks(2) {
        match v.last_mut() {
            // The state directory's two options lift one thing together.
            Some(last) if pair[0] == "--env" => last.extend(pair.iter().cloned()),
            _ => v.push(pair.to_vec()),
        }
    }
    v
}

/// The smoke set's tagged line `tag …`.
fn tagged<'a>(out: &'a str, tag: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{tag} ")))
        .unwrap_or_else(|| panic!("no {tag} line:\n{out}"))
}

fn assert_smoke(o: &Output, what: &str) {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let all = all_output(o);
    assert!(out.contains("STARTED"), "{what}: {}", show(o));
    assert_eq!(tagged(&out, "RUN"), "rc=0", "{what}: {}", show(o));
    let cred = tagged(&out, "CRED");
    assert!(!all.contains("SECRET-aws-in-container"), "{what}: {cred}");
    assert_ne!(tagged(&out, "OUTSIDE"), "rc=0", "{what}: {}", show(o));
    assert_eq!(tagged(&out, "OUTSIDE-ON-HOST"), "no", "{what}");
    assert!(
        tagged(&out, "DENIED").contains("denied by rule http.default-deny"),
        "{what}: {}",
        show(o)
    );
    assert_eq!(
        tagged(&out, "ALLOWED"),
        "hello-smoke",
        "{what}: {}",
        show(o)
    );
    // The exit review: the planted hook waits for review, the container's project lacks it.
    assert_eq!(tagged(&out, "PLANTED"), "rc=0", "{what}");
    assert_eq!(tagged(&out, "HOOK-ON-HOST"), "no", "{what}: {}", show(o));
    assert_eq!(tagged(&out, "STATE"), "1", "{what}: {}", show(o));
    assert!(all.contains("is pending"), "{what}: {}", show(o));
}

/// The smoke set's files: the script, the policy, the allowed server's CA.
fn smoke_files(env: &Env, gateway: &str, ca: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = env.base.join("smoke");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("smoke.sh"), SMOKE).unwrap();
    std::fs::set_permissions(dir.join("smoke.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::copy(ca, dir.join("ca.pem")).unwrap();
    std::fs::write(
        dir.join("policy.toml"),
        format!(
            "[dns]\nhosts = {{ \"allowed.example.test\" = \"{gateway}\", \"denied.example.test\" = \"{gateway}\" }}\n\
             [[network.allow]]\nhost = \"allowed.example.test\"\nports = [443]\n\
             [tls]\nupstream_ca = \"/smoke/ca.pem\"\n"
        ),
    )
    .unwrap();
    for f in ["ca.pem", "policy.toml"] {
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

const DOCTOR: &[&str] = &["cordon", "doctor"];
const SMOKE_SH: &[&str] = &["/smoke/smoke.sh"];

/// The bridge's address on this side (`ip -4 addr show BRIDGE`).
fn bridge_addr(bridge: &str) -> String {
    let o = Command::new("ip")
        .args(["-4", "-o", "addr", "show", bridge])
        .output()
        .unwrap();
    let addr = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|a| a.split('/').next())
        .unwrap_or_default()
        .to_string();
    assert!(!addr.is_empty(), "no address on {bridge}: {}", show(&o));
    addr
}

/// A container with no options: doctor's line (and the TUN's cost), the same for root and a
/// user; cordon run fails.
fn no_options(rt: &Runtime, smoke: &Path) -> Vec<String> {
    let o = run_in(rt, &[], Who::User, smoke, DOCTOR);
    let as_user = named_options(rt, &String::from_utf8_lossy(&o.stdout));
    let o = run_in(rt, &[], Who::Root, smoke, DOCTOR);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(out.contains("cannot be enforced"), "{out}");
    let opts = named_options(rt, &out);
    for want in [
        "seccomp=unconfined",
        rt.proc_opt,
        "XDG_STATE_HOME=/var/lib/cordon-state",
    ] {
        assert!(
            opts.iter().any(|o| o == want),
            "{want} not named: {opts:?}\n{out}"
        );
    }
    assert!(
        out.contains("Without `--device /dev/net/tun` it runs in explicit-proxy mode"),
        "{out}"
    );
    assert_eq!(as_user, opts, "the user is told the same:\n{out}");
    let o = run_in(rt, &[], Who::Root, smoke, SMOKE_SH);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(tagged(&out, "RUN"), "rc=125", "{}", show(&o));
    opts
}

/// Each named option left out: doctor names it alone, and the smoke set cannot start.
fn each_left_out(rt: &Runtime, smoke: &Path, opts: &[String]) {
    let named = groups(opts);
    for (i, left_out) in named.iter().enumerate() {
        let rest: Vec<String> = named
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .flat_map(|(_, g)| g.iter().cloned())
            .collect();
        let o = run_in(rt, &rest, Who::Root, smoke, DOCTOR);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(
            &named_options(rt, &out),
            left_out,
            "without {left_out:?}:\n{out}"
        );
        let o = run_in(rt, &rest, Who::Root, smoke, SMOKE_SH);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(
            tagged(&out, "RUN"),
            "rc=125",
            "without {left_out:?}: {}",
            show(&o)
        );
        if left_out.iter().any(|o| o == rt.proc_opt) {
            assert!(
                all_output(&o).contains(&format!("--security-opt {}", rt.proc_opt)),
                "the refusal names the fix: {}",
                show(&o)
            );
        }
    }
}

/// Exactly the named options, as root and as a user, in explicit-proxy mode (said on stderr)
/// and with the TUN.
fn with_exactly(rt: &Runtime, smoke: &Path, opts: &[String]) {
    let mut with_tun = opts.to_vec();
    with_tun.extend(["--device".into(), "/dev/net/tun".into()]);
    for (opts, tun) in [(opts, false), (&with_tun[..], true)] {
        for who in [Who::Root, Who::User] {
            let what = format!("{} {who:?}, TUN {tun}, {opts:?}", rt.run);
            let o = run_in(rt, opts, who, smoke, DOCTOR);
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            assert_eq!(o.status.code(), Some(0), "{what}: {}", show(&o));
            assert!(out.contains("needs no further option"), "{what}: {out}");
            assert_eq!(out.contains("explicit-proxy mode"), !tun, "{what}: {out}");
            let o = run_in(rt, opts, who, smoke, SMOKE_SH);
            assert_smoke(&o, &what);
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert_eq!(
                stderr.contains("explicit-proxy mode only"),
                !tun,
                "{what}: {}",
                show(&o)
            );
        }
    }
}

/// The whole proof in `rt`, whose image is built and whose engine runs.
fn exercise(rt: &Runtime, env: &Env) {
    // The first container also brings up the runtime's bridge (Podman makes it on demand).
    let no_opts_dir = env.base.join("empty");
    std::fs::create_dir_all(&no_opts_dir).unwrap();
    let probe = run_in(rt, &[], Who::Root, &no_opts_dir, &["true"]);
    assert!(probe.status.success(), "{}", show(&probe));
    let gateway = bridge_addr(rt.bridge);
    let root = www(env, "smoke", "hello-smoke");
    let Some((_srv, ca)) = https_443(env, "allowed.example.test", &gateway, &root) else {
        return;
    };
    let smoke = smoke_files(env, &gateway, &ca);
    let opts = no_options(rt, &smoke);
    each_left_out(rt, &smoke, &opts);
    with_exactly(rt, &smoke, &opts);
}

#[test]
fn docker_doctor_names_exactly_the_options_and_the_smoke_set_passes_with_them() {
    let Some(env) = Env::new(Who::Root) else {
        return;
    };
    let Some(_engine) = Engine::start() else {
        return;
    };
    exercise(&DOCKER_RT, &env);
}

#[test]
fn podman_doctor_names_exactly_the_options_and_the_smoke_set_passes_with_them() {
    let Some(env) = Env::new(Who::Root) else {
        return;
    };
    if !common::need(&["podman", "runc"], "cordon in a Podman container") {
        return;
    }
    let o = Command::new("bash")
        .args([ENGINE, "podman-image", env!("CARGO_BIN_EXE_cordon"), TAG])
        .output()
        .unwrap();
    assert!(o.status.success(), "the image: {}", show(&o));
    exercise(&PODMAN_RT, &env);
    let _ = PODMAN_RT.cmd(&["rmi", "-f", TAG]);
}
