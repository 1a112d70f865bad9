//! What this kernel supports, layer by layer, for `cordon doctor` (host side).
//!
//! Each probe really tries the feature (clones namespaces, mounts overlayfs in a user
//! namespace, asks Landlock for its ABI) rather than reading version numbers.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::sys;

mod container;
pub(crate) use container::proc_refused;
pub use container::{ContainerAdvice, container_checks, on_overlayfs};

/// How a feature stands on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Works.
    Ok,
    /// Works, with a limitation stated in the detail.
    Partial,
    /// Does not work here.
    Missing,
}

/// The doctor's sections, in the order the layers stack up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    Isolation,
    Credentials,
    Network,
    Http,
    Syscalls,
    State,
    Audit,
    EndToEnd,
}

impl Layer {
    /// The section's heading.
    pub fn title(self) -> &'static str {
        match self {
            Layer::Isolation => {
                "1  filesystem and process isolation (user namespaces, mounts, Landlock, limits)"
            }
            Layer::Credentials => "1b credentials (placeholders inside, real values at the wire)",
            Layer::Network => "2  network egress (TUN, DNS, the gateway)",
            Layer::Http => "3  HTTP interception (cordon's CA, the sandbox's trust bundle)",
            Layer::Syscalls => "4  syscalls (seccomp filter, supervised exec)",
            Layer::State => "agent-state protection (copy-on-write home, protected paths)",
            Layer::Audit => "audit log",
            Layer::EndToEnd => "end to end",
        }
    }
}

/// Where the probes read the host's knobs (`/proc/sys/…`, `/dev/net/tun`, container markers):
/// `/` in production; a directory of fake files in tests.
#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
}

impl Host {
    /// This machine.
    pub fn real() -> Self {
        Host { root: "/".into() }
    }

    /// Files under `root` stand for the host's.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Host { root: root.into() }
    }

    fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    fn knob(&self, abs: &str) -> Option<i64> {
        std::fs::read_to_string(self.path(abs))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// The container runtime this runs under, when it leaves a mark.
    fn container(&self) -> Option<&'static str> {
        if self.path("/.dockerenv").exists() {
            return Some("Docker");
        }
        if self.path("/run/.containerenv").exists() {
            return Some("Podman");
        }
        let cg = std::fs::read_to_string(self.path("/proc/1/cgroup")).unwrap_or_default();
        [
            ("kubepods", "Kubernetes"),
            ("docker", "Docker"),
            ("lxc", "LXC"),
            ("libpod", "Podman"),
        ]
        .into_iter()
        .find(|(mark, _)| cg.contains(mark))
        .map(|(_, name)| name)
    }
}

/// One line of the doctor's report.
#[derive(Debug, Clone)]
pub struct Check {
    pub layer: Layer,
    pub feature: &'static str,
    pub support: Support,
    /// What was found.
    pub detail: String,
    /// What cordon does about it, or does instead.
    pub cordon: String,
    /// The built-in default policy cannot be enforced without this.
    pub required: bool,
    /// How to lift the limitation, when something can.
    pub fix: Option<String>,
}

impl Check {
    fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// Run every probe, in layer order, reading the host's knobs through `host`.
pub fn probe(host: &Host) -> Vec<Check> {
    probe_with_advice(host).0
}

/// [`probe`], and what a container this runs in needs for `cordon run` to work.
pub fn probe_with_advice(host: &Host) -> (Vec<Check>, ContainerAdvice) {
    let ns = namespaces();
    let works = ns.support == Support::Ok;
    let mut v = vec![ns];
    v.extend(userns_restrictions(host, works));
    let tun = tun(host);
    let (checks, advice) = container_checks(host, works, tun.support == Support::Ok);
    v.extend(checks);
    v.push(landlock(sys::landlock_abi()));
    v.push(cgroups());
    v.push(tun);
    v.push(seccomp());
    v.push(seccomp_notify());
    v.push(nested_sandboxes(works));
    v.push(overlay());
    (v, advice)
}

/// What `[syscalls] nested_userns` lifts, for agents that sandbox their own tools (bwrap,
/// Codex, Claude Code). Nested sandboxes need the user namespaces the first line probes.
pub fn nested_sandboxes(userns_work: bool) -> Check {
    check(
        Layer::Syscalls,
        "nested sandboxes (bwrap, unshare -r, Codex's and Claude Code's own)",
        if userns_work {
            Support::Ok
        } else {
            Support::Missing
        },
        "off unless the policy or the agent's profile sets [syscalls] nested_userns = true".into(),
        format!(
            "{}. nested_userns lifts the denial of new user namespaces and of the mount family \
             (mounts succeed only in namespaces the nested sandbox made, where cordon's are \
             locked); as root it keeps CAP_SETFCAP, which mapping uid 0 needs. The rest of the \
             filter, the masks and the gateway still apply inside. Root's /proc stays sealed: a \
             nested sandbox binds it instead of mounting its own (Codex falls back by itself; \
             Claude Code needs sandbox.enableWeakerNestedSandbox)",
            capitalized(crate::fence::NESTED_COST)
        ),
        false,
    )
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// How to let cordon (at `exe`) have user namespaces under AppArmor's restriction: the
/// profile the .deb ships (installed by its postinst where the parser takes it) when `exe` is
/// the package's, else the profile to write by hand; or lifting the restriction for all.
fn apparmor_fix(host: &Host, exe: &str) -> String {
    let lift = "or lift it for every program: `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`";
    let load = "sudo apparmor_parser -r /etc/apparmor.d/cordon";
    if exe == "/usr/bin/cordon" && host.path("/etc/apparmor.d/cordon").exists() {
        return format!("load the package's profile: `{load}`; {lift}");
    }
    if exe == "/usr/bin/cordon" && host.path("/usr/share/cordon/apparmor/cordon").exists() {
        return format!(
            "install the package's profile (it needs AppArmor 4.0 or later): `sudo cp /usr/share/cordon/apparmor/cordon /etc/apparmor.d/ && {load}`; {lift}"
        );
    }
    format!(
        "allow cordon alone with a profile, /etc/apparmor.d/cordon:\n  abi <abi/4.0>,\n  include <tunables/global>\n  profile cordon {exe} flags=(unconfined) {{\n    userns,\n  }}\nthen `{load}`; {lift}"
    )
}

/// The known reasons unprivileged user namespaces fail, each with its fix. `works` says
/// whether the real probe succeeded anyway (root, or a profile that exempts cordon): the
/// restriction is then reported, not held against the machine.
pub fn userns_restrictions(host: &Host, works: bool) -> Vec<Check> {
    let support = if works { Support::Ok } else { Support::Missing };
    let cordon = if works {
        "user namespaces work for cordon here despite it (root, or a profile allows cordon)"
    } else {
        "cannot sandbox: cordon run refuses to start (exit 125)"
    };
    let container = host.container();
    let container_fix = |runtime: &str| {
        format!(
            "this runs in a {runtime} container, whose runtime blocks user namespaces: run cordon on the host, or start the container with the options the report's last line names (exactly those make cordon run work)"
        )
    };
    let mut v = Vec::new();
    if host.knob("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
        let exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "/usr/local/bin/cordon".into());
        v.push(
            check(
                Layer::Isolation,
                "AppArmor user-namespace restriction",
                support,
                "kernel.apparmor_restrict_unprivileged_userns = 1 (Ubuntu 23.10 and later): unprivileged programs get user namespaces without capabilities".into(),
                cordon.into(),
                !works,
            )
            .fix(apparmor_fix(host, &exe)),
        );
    }
    if host.knob("/proc/sys/user/max_user_namespaces") == Some(0) {
        v.push(
            check(
                Layer::Isolation,
                "user namespaces switched off",
                support,
                "user.max_user_namespaces = 0".into(),
                cordon.into(),
                !works,
            )
            .fix(match container {
                Some(rt) => container_fix(rt),
                None => {
                    "`sudo sysctl -w user.max_user_namespaces=15000` (keep it in /etc/sysctl.d/)"
                        .into()
                }
            }),
        );
    }
    if host.knob("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        v.push(
            check(
                Layer::Isolation,
                "unprivileged user namespaces switched off",
                support,
                "kernel.unprivileged_userns_clone = 0".into(),
                cordon.into(),
                !works,
            )
            .fix("`sudo sysctl -w kernel.unprivileged_userns_clone=1` (keep it in /etc/sysctl.d/)"),
        );
    }
    if !works
        && v.is_empty()
        && let Some(rt) = container
    {
        v.push(
            check(
                Layer::Isolation,
                "container without user namespaces",
                Support::Missing,
                format!("running in a {rt} container; unshare(CLONE_NEWUSER) fails"),
                cordon.into(),
                true,
            )
            .fix(container_fix(rt)),
        );
    }
    v
}

fn check(
    layer: Layer,
    feature: &'static str,
    support: Support,
    detail: String,
    cordon: String,
    required: bool,
) -> Check {
    Check {
        layer,
        feature,
        support,
        detail,
        cordon,
        required,
        fix: None,
    }
}

/// Clone into the sandbox's namespaces, map the ids as the sandbox does, and run `step` in the
/// child (async-signal-safe: no allocation). Err: the clone or the maps failed; Ok(Err(errno)):
/// `step` failed.
pub(crate) fn in_sandbox_namespaces(
    step: fn() -> Result<(), i32>,
) -> Result<Result<(), i32>, String> {
    let (r, w) = sys::pipe().map_err(|e| e.to_string())?;
    // SAFETY: the child only reads a pipe, runs `step` (mount calls on static data) and exits
    // (async-signal-safe, no allocation).
    let child = unsafe { sys::clone_into_namespaces(sys::SANDBOX_NAMESPACES) }
        .map_err(|e| format!("clone: {e}"))?;
    let Some(child) = child else {
        // Our copy of the write end must go, or the read below never sees the parent's EOF.
        sys::close_raw(w.as_raw_fd());
        let mut b = [0u8; 1];
        sys::read_raw(r.as_raw_fd(), &mut b);
        sys::exit_now(match step() {
            Ok(()) => 0,
            Err(errno) => errno.clamp(1, 255),
        })
    };
    drop(r);
    let base = format!("/proc/{}", child.pid);
    let res = std::fs::write(format!("{base}/setgroups"), "deny")
        .and_then(|_| std::fs::write(format!("{base}/uid_map"), format!("0 {} 1", sys::getuid())))
        .and_then(|_| std::fs::write(format!("{base}/gid_map"), format!("0 {} 1", sys::getgid())))
        .map_err(|e| format!("uid/gid map: {e}"));
    drop(w);
    let ended = sys::waitpid(child.pid, false);
    res?;
    match ended {
        Ok(Some((_, sys::WaitStatus::Exited(0)))) => Ok(Ok(())),
        Ok(Some((_, sys::WaitStatus::Exited(errno)))) => Ok(Err(errno)),
        other => Err(format!("the namespace probe ended with {other:?}")),
    }
}

fn namespaces() -> Check {
    let feature = "user, mount, pid, ipc, uts, net, cgroup namespaces";
    // The first mount the sandbox makes. A namespace without capabilities (Ubuntu's AppArmor
    // restriction, a container's AppArmor profile) clones and maps fine and fails here.
    let result = in_sandbox_namespaces(sys::make_root_private_raw).and_then(|step| {
        step.map_err(|errno| {
            format!(
                "the namespace has no capabilities: its first mount failed ({})",
                std::io::Error::from_raw_os_error(errno)
            )
        })
    });
    match result {
        Ok(()) => check(
            Layer::Isolation,
            feature,
            Support::Ok,
            "unprivileged clone and a mount inside it work".into(),
            "the command runs in namespaces of its own, with your uid and no capabilities; read-only root, writable project, masked credentials".into(),
            true,
        ),
        Err(e) => check(
            Layer::Isolation,
            feature,
            Support::Missing,
            e,
            "cannot sandbox: cordon run refuses to start (exit 125)".into(),
            true,
        )
        .fix("enable unprivileged user namespaces (the lines below name what blocks them here)"),
    }
}

/// The Landlock line for what the kernel answered when asked for its ABI.
pub fn landlock(abi: Result<i32, std::io::Error>) -> Check {
    match abi {
        Ok(abi) if abi >= 6 => check(
            Layer::Isolation,
            "Landlock",
            Support::Ok,
            format!("ABI {abi}"),
            "second fence on reads, writes and execs; abstract unix sockets and signals scoped"
                .into(),
            true,
        ),
        Ok(abi) => check(
            Layer::Isolation,
            "Landlock",
            Support::Partial,
            format!("ABI {abi} (ABI 6 adds socket and signal scoping)"),
            "applied best-effort with the rights this ABI has".into(),
            true,
        )
        .fix("a kernel of 6.12 or later (Landlock ABI 6) adds abstract-socket and signal scoping"),
        Err(e) => check(
            Layer::Isolation,
            "Landlock",
            Support::Missing,
            match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) => {
                    "built in but disabled (add landlock to the lsm= boot parameter)".into()
                }
                _ => format!("not available: {e}"),
            },
            "refuses to start unless the policy sets [filesystem] landlock = \"best-effort\""
                .into(),
            true,
        )
        .fix("no Landlock: add `landlock` to the kernel's lsm= boot parameter (see /sys/kernel/security/lsm; e.g. GRUB_CMDLINE_LINUX=\"lsm=landlock,…\", `sudo update-grub`, reboot) on a kernel of 5.13 or later built with CONFIG_SECURITY_LANDLOCK; or run without it: [filesystem] landlock = \"best-effort\""),
    }
}

fn seccomp() -> Check {
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    let ok = sys::seccomp_action_available(SECCOMP_RET_ERRNO);
    check(
        Layer::Syscalls,
        "seccomp-bpf filter",
        if ok { Support::Ok } else { Support::Missing },
        if ok {
            "available".into()
        } else {
            "not available".into()
        },
        "a seccomp-bpf filter installed just before the command: denied syscalls get EPERM and a log line".into(),
        false,
    )
}

fn seccomp_notify() -> Check {
    const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;
    let ok = sys::seccomp_action_available(SECCOMP_RET_USER_NOTIF);
    check(
        Layer::Syscalls,
        "seccomp user notification",
        if ok { Support::Ok } else { Support::Missing },
        if ok {
            "available".into()
        } else {
            "not available".into()
        },
        "supervised exec: [exec] rules allow, deny or hold a program for `cordon approve`".into(),
        false,
    )
}

fn tun(host: &Host) -> Check {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(host.path("/dev/net/tun"))
    {
        Ok(_) => check(
            Layer::Network,
            "/dev/net/tun",
            Support::Ok,
            "openable".into(),
            "the egress gateway covers every program (transparent TCP, DNS, explicit proxy)".into(),
            false,
        ),
        Err(e) => {
            // The device is there but not open to users (0600): the mode is the fix, in a
            // container as on a host.
            let closed_mode = std::fs::metadata("/dev/net/tun").is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.permissions().mode() & 0o006 != 0o006
            });
            let fix = match (e.kind(), host.container()) {
                (std::io::ErrorKind::PermissionDenied, _) if closed_mode => "`sudo chmod 0666 /dev/net/tun` (distributions ship it 0666; a udev rule KERNEL==\"tun\", MODE=\"0666\" keeps it)".into(),
                (std::io::ErrorKind::NotFound, Some(rt)) => format!(
                    "no /dev/net/tun in this {rt} container: start it with `--device /dev/net/tun`"
                ),
                (std::io::ErrorKind::NotFound, None) => "no /dev/net/tun: `sudo modprobe tun` (and `echo tun | sudo tee /etc/modules-load.d/tun.conf` to keep it)".into(),
                (_, Some(rt)) => format!(
                    "this {rt} container does not let it be opened: start it with `--device /dev/net/tun`"
                ),
                _ => "`sudo chmod 0666 /dev/net/tun` (distributions ship it 0666; a udev rule KERNEL==\"tun\", MODE=\"0666\" keeps it)".into(),
            };
            check(
                Layer::Network,
                "/dev/net/tun",
                Support::Partial,
                format!("cannot open: {e}"),
                "explicit-proxy mode only: programs honouring HTTP_PROXY get out through the gateway's policy; others have no network (still fenced)".into(),
                false,
            )
            .fix(fix)
        }
    }
}

/// Whether the copy-on-write home can be mounted as the sandbox will mount it: an overlay of
/// `home` itself, its upper and work directories made for the try in `beside` (the directory
/// the session's layer will live in, so on the same filesystem), tried for real in a throwaway
/// user and mount namespace. Err says why not (NFS, an old kernel, a home path overlayfs cannot
/// name, an upper filesystem without user xattrs…). Call it before any thread is started: it
/// forks.
pub fn home_overlay(home: &Path, beside: &Path) -> Result<(), String> {
    let dir = beside.join(format!(".probe-{}", std::process::id()));
    with_probe_dirs(&dir, &["upper", "work"], || {
        overlay_in_userns(
            &[home.to_path_buf()],
            &dir.join("upper"),
            &dir.join("work"),
            home,
        )
    })
}

/// Run `f` with the directories `names` made under `dir`, then remove `dir` whatever happened
/// (overlayfs leaves `work/work` at mode 000, which `remove_dir_all` could not list).
fn with_probe_dirs(
    dir: &Path,
    names: &[&str],
    f: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let made = names
        .iter()
        .try_for_each(|d| std::fs::create_dir_all(dir.join(d)))
        .map_err(|e| format!("cannot prepare the probe in {}: {e}", dir.display()));
    let r = made.and_then(|()| f());
    let inner = dir.join("work").join("work");
    if inner.is_dir() {
        let _ = std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o700));
    }
    let _ = std::fs::remove_dir_all(dir);
    r
}

/// Mount an unprivileged overlay of `lower` with `upper`/`work` at `at` in a throwaway user
/// and mount namespace (a forked child; nothing it mounts is seen anywhere else).
fn overlay_in_userns(
    lower: &[std::path::PathBuf],
    upper: &Path,
    work: &Path,
    at: &Path,
) -> Result<(), String> {
    let opts =
        crate::mounts::overlay_options_at("/", lower, upper, work).map_err(|e| e.to_string())?;
    let (uid, gid) = (sys::getuid(), sys::getgid());
    let ov = std::ffi::CString::new("overlay").map_err(|e| e.to_string())?;
    let pid = sys::fork().map_err(|e| e.to_string())?;
    if pid == 0 {
        let r = (|| -> std::io::Result<()> {
            sys::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS)?;
            std::fs::write("/proc/self/setgroups", "deny")?;
            std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
            std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
            sys::mount(
                None,
                Path::new("/"),
                None,
                libc::MS_REC | libc::MS_PRIVATE,
                None,
            )?;
            sys::mount(
                Some(&ov),
                at,
                Some(&ov),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(&opts),
            )
        })();
        sys::exit_now(match r {
            Ok(()) => 0,
            Err(e) => e.raw_os_error().unwrap_or(255).clamp(1, 255),
        });
    }
    match sys::waitpid(pid, false).map_err(|e| e.to_string())? {
        Some((_, sys::WaitStatus::Exited(0))) => Ok(()),
        Some((_, sys::WaitStatus::Exited(errno))) => Err(format!(
            "overlayfs refused it: {}",
            std::io::Error::from_raw_os_error(errno)
        )),
        other => Err(format!("the probe ended with {other:?}")),
    }
}

fn overlay() -> Check {
    // Where the layers' upper directories go: cordon's state (overlayfs takes an upper
    // directory on some filesystems only, a container's own overlayfs not among them).
    let base = cordon_events::state_dir()
        .filter(|d| std::fs::create_dir_all(d).is_ok())
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!(".probe-overlay-{}", std::process::id()));
    let result = with_probe_dirs(&dir, &["lower", "upper", "work", "merged"], || {
        overlay_in_userns(
            &[dir.join("lower")],
            &dir.join("upper"),
            &dir.join("work"),
            &dir.join("merged"),
        )
    });
    match result {
        Ok(()) => check(
            Layer::State,
            "overlayfs in a user namespace",
            Support::Ok,
            "works".into(),
            "copy-on-write home and agent state (protected paths reviewed at exit)".into(),
            false,
        ),
        Err(e) => check(
            Layer::State,
            "overlayfs in a user namespace",
            Support::Missing,
            e,
            "the home is read-only (no copy-on-write home) and protected paths cannot be staged"
                .into(),
            false,
        ),
    }
}

fn cgroups() -> Check {
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    let v2 = sys::fs_magic(Path::new("/sys/fs/cgroup"))
        .map(|m| m == CGROUP2_SUPER_MAGIC)
        .unwrap_or(false);
    if !v2 && sys::getuid() == 0 {
        return check(
            Layer::Isolation,
            "cgroup v2 delegation",
            Support::Partial,
            "/sys/fs/cgroup is cgroup v1 or hybrid; running as root".into(),
            "[limits] use the cgroup v1 memory, pids and cpu controllers".into(),
            false,
        );
    }
    if !v2 {
        return check(
            Layer::Isolation,
            "cgroup v2 delegation",
            Support::Missing,
            "/sys/fs/cgroup is cgroup v1 or hybrid".into(),
            "[limits] memory, pids and nofile use rlimits; cpu cannot be enforced".into(),
            false,
        );
    }
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        })
        .unwrap_or_default();
    let dir = Path::new("/sys/fs/cgroup").join(own.trim_start_matches('/'));
    let writable = std::fs::metadata(dir.join("cgroup.procs"))
        .map(|m| !m.permissions().readonly())
        .unwrap_or(false);
    check(
        Layer::Isolation,
        "cgroup v2 delegation",
        Support::Partial,
        format!(
            "cgroup v2 at {} ({})",
            dir.display(),
            if writable {
                "looks delegated"
            } else {
                "not delegated"
            }
        ),
        "[limits] memory, pids and nofile use rlimits; cpu is not enforced yet".into(),
        false,
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn nested_sandboxes_say_what_they_lift() {
        let c = super::nested_sandboxes(true);
        assert_eq!(c.support, Support::Ok);
        for needle in [
            "nested_userns",
            "mount family",
            "Landlock",
            "CAP_SETFCAP",
            "gateway",
        ] {
            assert!(
                c.cordon.contains(needle) || c.detail.contains(needle),
                "{needle}"
            );
        }
        assert_eq!(super::nested_sandboxes(false).support, Support::Missing);
    }

    use super::*;

    /// A fake host root holding `files` (path, text).
    pub(super) fn fake(files: &[(&str, &str)]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for (p, text) in files {
            let p = t.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        t
    }

    #[test]
    fn a_blocked_user_namespace_names_its_cause_and_fix() {
        let t = fake(&[(
            "proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1\n",
        )]);
        let v = userns_restrictions(&Host::at(t.path()), false);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].support, Support::Missing);
        assert!(v[0].required);
        assert!(v[0].fix.as_deref().unwrap().contains("apparmor_parser"));
        // Allowed anyway (root, a profile): reported, not a failure.
        let v = userns_restrictions(&Host::at(t.path()), true);
        assert_eq!(v[0].support, Support::Ok);
        assert!(!v[0].required);
    }

    #[test]
    fn the_apparmor_fix_names_the_packaged_profile_for_the_packaged_binary() {
        let t = fake(&[("usr/share/cordon/apparmor/cordon", "")]);
        let fix = apparmor_fix(&Host::at(t.path()), "/usr/bin/cordon");
        assert!(
            fix.contains("sudo cp /usr/share/cordon/apparmor/cordon /etc/apparmor.d/"),
            "{fix}"
        );
        let fix = apparmor_fix(&Host::at(t.path()), "/home/u/.cargo/bin/cordon");
        assert!(
            fix.contains("profile cordon /home/u/.cargo/bin/cordon flags=(unconfined)"),
            "{fix}"
        );
        let t = fake(&[("etc/apparmor.d/cordon", "")]);
        let fix = apparmor_fix(&Host::at(t.path()), "/usr/bin/cordon");
        assert!(
            fix.starts_with(
                "load the package's profile: `sudo apparmor_parser -r /etc/apparmor.d/cordon`"
            ),
            "{fix}"
        );
    }

    #[test]
    fn a_container_without_user_namespaces_says_so() {
        let t = fake(&[
            (".dockerenv", ""),
            ("proc/sys/user/max_user_namespaces", "0"),
        ]);
        let v = userns_restrictions(&Host::at(t.path()), false);
        assert_eq!(v.len(), 1);
        assert!(v[0].fix.as_deref().unwrap().contains("Docker container"));
        let t = fake(&[("run/.containerenv", "")]);
        let v = userns_restrictions(&Host::at(t.path()), false);
        assert_eq!(v[0].feature, "container without user namespaces");
        assert!(userns_restrictions(&Host::at(t.path()), true).is_empty());
    }

    #[test]
    fn no_landlock_and_no_tun_come_with_a_fix() {
        let c = landlock(Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP)));
        assert_eq!(c.support, Support::Missing);
        assert!(c.fix.unwrap().contains("lsm="));
        let t = fake(&[]);
        let c = tun(&Host::at(t.path()));
        assert_eq!(c.support, Support::Partial);
        assert!(c.fix.unwrap().contains("modprobe tun"));
    }

    /// The namespace probe does what the sandbox does first (clone, map ids, make the mount
    /// tree private), so a namespace that clones but cannot mount is not reported as working.
    /// On this machine (root, or a user with unrestricted user namespaces) it works.
    #[test]
    fn the_namespace_probe_mounts_inside() {
        let c = namespaces();
        assert_eq!(c.support, Support::Ok, "{}", c.detail);
        assert!(c.detail.contains("mount"), "{}", c.detail);
    }
}
