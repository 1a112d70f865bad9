//! What this kernel supports, layer by layer, for `cordon doctor` (host side).
//!
//! Each probe really tries the feature (clones namespaces, mounts overlayfs in a user
//! namespace, asks Landlock for its ABI) rather than reading version numbers.

use std::os::fd::AsRawFd;
use std::path::Path;

use crate::sys;

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

/// One line of the doctor's report.
#[derive(Debug, Clone)]
pub struct Check {
    /// The layer this belongs to, e.g. "1 filesystem & process".
    pub layer: &'static str,
    pub feature: &'static str,
    pub support: Support,
    /// What was found.
    pub detail: String,
    /// What cordon does about it, or does instead.
    pub cordon: String,
    /// The built-in default policy cannot be enforced without this.
    pub required: bool,
}

/// Run every probe.
pub fn probe() -> Vec<Check> {
    vec![
        namespaces(),
        landlock(),
        seccomp(),
        seccomp_notify(),
        tun(),
        overlay(),
        cgroups(),
    ]
}

fn check(
    layer: &'static str,
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
    }
}

fn namespaces() -> Check {
    let feature = "user, mount, pid, ipc, uts, net, cgroup namespaces";
    let result = (|| -> Result<(), String> {
        let (r, w) = sys::pipe().map_err(|e| e.to_string())?;
        // SAFETY: the child only reads a pipe and exits (async-signal-safe).
        let child = unsafe { sys::clone_into_namespaces(sys::SANDBOX_NAMESPACES) }
            .map_err(|e| format!("clone: {e}"))?;
        let Some(child) = child else {
            // Our copy of the write end must go, or the read below never sees the parent's EOF.
            sys::close_raw(w.as_raw_fd());
            let mut b = [0u8; 1];
            sys::read_raw(r.as_raw_fd(), &mut b);
            sys::exit_now(0)
        };
        drop(r);
        let base = format!("/proc/{}", child.pid);
        let res = std::fs::write(format!("{base}/setgroups"), "deny")
            .and_then(|_| {
                std::fs::write(format!("{base}/uid_map"), format!("0 {} 1", sys::getuid()))
            })
            .and_then(|_| {
                std::fs::write(format!("{base}/gid_map"), format!("0 {} 1", sys::getgid()))
            })
            .map_err(|e| format!("uid/gid map: {e}"));
        drop(w);
        let _ = sys::waitpid(child.pid, false);
        res
    })();
    match result {
        Ok(()) => check("1 filesystem & process", feature, Support::Ok, "unprivileged clone works".into(), "used".into(), true),
        Err(e) => check(
            "1 filesystem & process",
            feature,
            Support::Missing,
            e,
            "cannot sandbox: enable user namespaces (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone, AppArmor's restrict_unprivileged_userns)".into(),
            true,
        ),
    }
}

fn landlock() -> Check {
    match sys::landlock_abi() {
        Ok(abi) if abi >= 6 => check(
            "1 filesystem & process",
            "Landlock",
            Support::Ok,
            format!("ABI {abi}"),
            "second fence on reads, writes and execs; abstract unix sockets and signals scoped"
                .into(),
            true,
        ),
        Ok(abi) => check(
            "1 filesystem & process",
            "Landlock",
            Support::Partial,
            format!("ABI {abi} (ABI 6 adds socket and signal scoping)"),
            "applied best-effort with the rights this ABI has".into(),
            true,
        ),
        Err(e) => check(
            "1 filesystem & process",
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
        ),
    }
}

fn seccomp() -> Check {
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    let ok = sys::seccomp_action_available(SECCOMP_RET_ERRNO);
    check(
        "4 syscalls",
        "seccomp-bpf filter",
        if ok { Support::Ok } else { Support::Missing },
        if ok {
            "available".into()
        } else {
            "not available".into()
        },
        "the syscall filter layer is not built yet".into(),
        false,
    )
}

fn seccomp_notify() -> Check {
    const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;
    let ok = sys::seccomp_action_available(SECCOMP_RET_USER_NOTIF);
    check(
        "4 syscalls",
        "seccomp user notification",
        if ok { Support::Ok } else { Support::Missing },
        if ok {
            "available".into()
        } else {
            "not available".into()
        },
        "supervised exec rules are not built yet".into(),
        false,
    )
}

fn tun() -> Check {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
    {
        Ok(_) => check(
            "2 network",
            "/dev/net/tun",
            Support::Ok,
            "openable".into(),
            "the egress gateway covers every program (transparent TCP, DNS, explicit proxy)".into(),
            false,
        ),
        Err(e) => check(
            "2 network",
            "/dev/net/tun",
            Support::Partial,
            format!("cannot open: {e} (distributions ship it 0666; `chmod 0666 /dev/net/tun` as root)"),
            "explicit-proxy mode only: programs honouring HTTP_PROXY get out through the gateway's policy; others have no network (still fenced)".into(),
            false,
        ),
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
    let dir = std::env::temp_dir().join(format!("cordon-probe-{}", std::process::id()));
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
            "state",
            "overlayfs in a user namespace",
            Support::Ok,
            "works".into(),
            "copy-on-write home and agent state (protected paths reviewed at exit)".into(),
            false,
        ),
        Err(e) => check(
            "state",
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
            "1 filesystem & process",
            "cgroup v2 delegation",
            Support::Partial,
            "/sys/fs/cgroup is cgroup v1 or hybrid; running as root".into(),
            "[limits] use the cgroup v1 memory, pids and cpu controllers".into(),
            false,
        );
    }
    if !v2 {
        return check(
            "1 filesystem & process",
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
        "1 filesystem & process",
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
