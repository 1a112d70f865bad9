//! Inside a container: what its runtime blocks (its seccomp filter, its AppArmor profile, the
//! paths it masks under `/proc`) and the one line of runtime options that lifts exactly that.
//!
//! The sandbox needs three things a default Docker or Podman container refuses: a user
//! namespace (Docker's seccomp profile denies `unshare(CLONE_NEWUSER)` without
//! CAP_SYS_ADMIN), mounts in it (the `docker-default` AppArmor profile denies `mount`), and a
//! fresh procfs for its pid namespace (the kernel refuses one in a user namespace while the
//! container's `/proc` has paths mounted over: `/proc/kcore`, `/proc/sys`…). Each is tried for
//! real where it can be; where an earlier one blocks the try, the container's state predicts it.

use std::path::PathBuf;

use super::{Check, Host, Layer, Support, check, in_sandbox_namespaces};
use crate::sys;

/// What the container needs for `cordon run` to work: the runtime's options, exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerAdvice {
    /// The runtime, when this runs in a container ("Docker", "Podman", …).
    pub runtime: Option<&'static str>,
    /// The options without which `cordon run` cannot start here (empty: none).
    pub required: Vec<&'static str>,
    /// The option that gives the TUN gateway, when `/dev/net/tun` cannot be opened here
    /// (without it `cordon run` works in explicit-proxy mode).
    pub tun: Option<&'static str>,
    /// User namespaces fail for a reason no runtime option names.
    pub unknown: bool,
}

/// What a runtime option is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Seccomp,
    AppArmor,
    Proc,
    State,
    Tun,
}

/// The option that lifts `need` in `runtime` (Docker's words when the runtime is unknown).
fn option(runtime: Option<&str>, need: Need) -> &'static str {
    match (runtime, need) {
        (Some("Podman"), Need::Proc) => "--security-opt unmask=ALL",
        (Some("Kubernetes"), Need::Seccomp) => "securityContext.seccompProfile.type: Unconfined",
        (Some("Kubernetes"), Need::AppArmor) => "securityContext.appArmorProfile.type: Unconfined",
        (Some("Kubernetes"), Need::Proc) => "securityContext.procMount: Unmasked",
        (Some("Kubernetes"), Need::Tun) => "a /dev/net/tun device (a device plugin)",
        (Some("Kubernetes"), Need::State) => {
            "an emptyDir volume at /var/lib/cordon-state and XDG_STATE_HOME=/var/lib/cordon-state"
        }
        (_, Need::State) => {
            "--tmpfs /var/lib/cordon-state:exec --env XDG_STATE_HOME=/var/lib/cordon-state"
        }
        (_, Need::Seccomp) => "--security-opt seccomp=unconfined",
        (_, Need::AppArmor) => "--security-opt apparmor=unconfined",
        (_, Need::Proc) => "--security-opt systempaths=unconfined",
        (_, Need::Tun) => "--device /dev/net/tun",
    }
}

/// `Seccomp:` of this process (0 none, 1 strict, 2 a filter), from `/proc/self/status`.
fn seccomp_mode(host: &Host) -> Option<u32> {
    std::fs::read_to_string(host.path("/proc/self/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The AppArmor profile confining this process (`docker-default (enforce)`), if one does.
fn apparmor_label(host: &Host) -> Option<String> {
    let read = |p: &str| std::fs::read_to_string(host.path(p)).ok();
    // The LSM-specific file first: /proc/self/attr/current may be SELinux's label.
    let label = match read("/proc/self/attr/apparmor/current") {
        Some(l) => l,
        None => read("/proc/self/attr/current").filter(|l| l.trim_end().ends_with(')'))?,
    };
    let label = label.trim_end_matches(['\n', '\0']).trim().to_string();
    (!label.is_empty() && label != "unconfined").then_some(label)
}

/// The mounts on paths inside `/proc` (a container runtime's masked and read-only paths): while
/// any hides part of it, the kernel refuses a fresh procfs in a user namespace.
fn proc_overmounts(host: &Host) -> Vec<PathBuf> {
    let info = std::fs::read_to_string(host.path("/proc/self/mountinfo")).unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with("/proc/"))
        .map(PathBuf::from)
        .collect()
}

/// `step` in the sandbox's namespaces; Err: why the try or the step failed.
fn tried(step: fn() -> Result<(), i32>) -> Result<(), String> {
    in_sandbox_namespaces(step)?
        .map_err(|errno| std::io::Error::from_raw_os_error(errno).to_string())
}

/// The sandbox's hostname, set in its namespaces as its init does. Err: the errno's text.
fn sandbox_hostname() -> Result<(), String> {
    fn step() -> Result<(), i32> {
        sys::sethostname("cordon").map_err(|e| e.raw_os_error().unwrap_or(libc::EPERM))
    }
    tried(step)
}

/// The sandbox's own procfs, tried for real: the namespaces the sandbox makes, then a fresh
/// `proc` mounted over `/proc` in them. Err: the errno.
fn fresh_proc() -> Result<(), String> {
    fn step() -> Result<(), i32> {
        sys::make_root_private_raw()?;
        sys::mount_fresh_proc_raw()
    }
    tried(step)
}

/// The container's lines for the doctor and the options it needs. `userns_work`: the
/// namespace probe (clone and a first mount) succeeded; `tun_open`: `/dev/net/tun` opened.
pub fn container_checks(
    host: &Host,
    userns_work: bool,
    tun_open: bool,
) -> (Vec<Check>, ContainerAdvice) {
    let runtime = host.container();
    let mut found = Found {
        checks: Vec::new(),
        advice: ContainerAdvice {
            runtime,
            required: Vec::new(),
            tun: (!tun_open).then(|| option(runtime, Need::Tun)),
            unknown: false,
        },
    };
    if runtime.is_some() {
        runtime_filters(host, userns_work, &mut found);
    }
    proc_check(host, userns_work, &mut found);
    if runtime.is_some() {
        state_check(&mut found);
    }
    let Found { checks, mut advice } = found;
    advice.unknown |= !userns_work && advice.required.is_empty();
    (checks, advice)
}

/// The lines so far and the options they need.
struct Found {
    checks: Vec<Check>,
    advice: ContainerAdvice,
}

impl Found {
    /// `c` blocks the sandbox; `n`'s option lifts it.
    fn need(&mut self, c: Check, n: Need) {
        let opt = option(self.advice.runtime, n);
        self.advice.required.push(opt);
        self.checks
            .push(c.fix(format!("start the container with `{opt}`")));
    }

    fn note_or_need(&mut self, c: Check, n: Need, works: bool) {
        if works {
            self.checks.push(c);
        } else {
            self.need(c, n);
        }
    }
}

/// The runtime's seccomp filter and AppArmor profile: named when user namespaces fail.
fn runtime_filters(host: &Host, userns_work: bool, found: &mut Found) {
    let support = if userns_work {
        Support::Ok
    } else {
        Support::Missing
    };
    if seccomp_mode(host) == Some(2) {
        // Podman's profile lets user namespaces through and denies sethostname(2) without
        // CAP_SYS_ADMIN, even in a UTS namespace of the process's own: tried as the sandbox
        // does it.
        let hostname = if userns_work {
            sandbox_hostname()
        } else {
            Ok(())
        };
        let works = userns_work && hostname.is_ok();
        let c = check(
            Layer::Isolation,
            "the container's seccomp filter",
            if works { Support::Ok } else { Support::Missing },
            "this process runs under a seccomp filter (Seccomp: 2 in /proc/self/status)".into(),
            match (&hostname, userns_work) {
                (_, false) => "it denies new user namespaces (unshare(CLONE_NEWUSER) without CAP_SYS_ADMIN): cordon run refuses to start".into(),
                (Err(e), true) => format!("it lets user namespaces through but denies sethostname(2) in the sandbox's own UTS namespace ({e}): sandbox setup fails at hostname"),
                (Ok(()), true) => "it lets user namespaces and the sandbox's setup through; cordon's own filter stacks on it".into(),
            },
            !works,
        );
        found.note_or_need(c, Need::Seccomp, works);
    }
    if let Some(label) = apparmor_label(host) {
        let c = check(
            Layer::Isolation,
            "the container's AppArmor profile",
            support,
            format!("confined by {label}"),
            if userns_work {
                "it lets the sandbox's mounts through".into()
            } else {
                "a runtime's default profile denies mount(2), which the sandbox needs in its own namespace".into()
            },
            !userns_work,
        );
        found.note_or_need(c, Need::AppArmor, userns_work);
    }
}

/// The sandbox's fresh procfs: tried for real when user namespaces work, predicted from the
/// paths mounted over `/proc` when they do not.
fn proc_check(host: &Host, userns_work: bool, found: &mut Found) {
    let feature = "a fresh /proc for the sandbox";
    let in_container = found.advice.runtime.is_some();
    let masked = proc_overmounts(host);
    let mut shown = masked
        .iter()
        .take(4)
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if masked.len() > 4 {
        shown.push_str(", …");
    }
    let refused = |detail: String| {
        check(
            Layer::Isolation,
            feature,
            Support::Missing,
            detail,
            "cordon run refuses to start (sandbox setup fails at mounting the sandbox's /proc); it never falls back to the container's /proc, which would show the processes outside the sandbox".into(),
            true,
        )
    };
    if !userns_work {
        if in_container && !masked.is_empty() {
            let detail = format!(
                "not tried (no user namespace); paths of /proc are mounted over ({shown}), so the kernel will refuse a new procfs in one"
            );
            found.need(refused(detail), Need::Proc);
        }
        return;
    }
    let e = match fresh_proc() {
        Ok(()) => {
            found.checks.push(check(
                Layer::Isolation,
                feature,
                Support::Ok,
                "a new procfs mounts in the sandbox's namespaces".into(),
                "the sandbox sees its own processes only".into(),
                true,
            ));
            return;
        }
        Err(e) => e,
    };
    let detail = if masked.is_empty() {
        format!("a new procfs in the sandbox's namespaces: {e}")
    } else {
        format!(
            "a new procfs in the sandbox's namespaces: {e} (the kernel refuses it while paths of /proc are mounted over: {shown})"
        )
    };
    if in_container {
        found.need(refused(detail), Need::Proc);
    } else {
        found.advice.unknown = true;
        found.checks.push(refused(detail).fix(
            "mount a full procfs without paths mounted over it where cordon runs (the parent sandbox or container masks parts of /proc)",
        ));
    }
}

/// overlayfs's magic number (`statfs`).
const OVERLAYFS_SUPER_MAGIC: i64 = 0x794c_7630;

/// Whether `path` (or, where it does not exist yet, its nearest existing parent) is on an
/// overlayfs, which overlayfs refuses as a layer's upper directory: cordon's own layers
/// cannot go there (a container's root filesystem).
pub fn on_overlayfs(path: &std::path::Path) -> bool {
    overlayfs(path).unwrap_or(false)
}

/// [`on_overlayfs`], or `None` when no part of `path` can be looked at.
fn overlayfs(path: &std::path::Path) -> Option<bool> {
    path.ancestors()
        .find_map(|p| sys::fs_magic(p).ok())
        .map(|m| m == OVERLAYFS_SUPER_MAGIC)
}

/// cordon's state (the copy-on-write layers' upper directories) on the container's own
/// overlayfs: overlayfs refuses an upper directory there, so the copy-on-write home is off and
/// a project with protected state (`.git`) cannot start.
fn state_check(found: &mut Found) {
    let Some(state) = cordon_events::state_dir() else {
        return;
    };
    let Some(overlay) = overlayfs(&state) else {
        return;
    };
    let c = check(
        Layer::State,
        "cordon's state off the container's overlayfs",
        if overlay {
            Support::Missing
        } else {
            Support::Ok
        },
        format!(
            "{} is on {}",
            state.display(),
            if overlay {
                "the container's overlayfs, which overlayfs refuses as an upper directory"
            } else {
                "a filesystem that takes overlayfs upper directories"
            }
        ),
        if overlay {
            "the copy-on-write home is off, and a project with protected state (.git) cannot start: sandbox setup fails at showing it copy-on-write (exit 125)".into()
        } else {
            "the copy-on-write home and protected state work".into()
        },
        true,
    );
    found.note_or_need(c, Need::State, !overlay);
}

impl ContainerAdvice {
    /// The doctor's closing line for a container, None outside one.
    pub fn line(&self) -> Option<String> {
        let rt = self.runtime?;
        let cmd = match rt {
            "Docker" => Some("docker run"),
            "Podman" => Some("podman run"),
            _ => None,
        };
        let mut s = if self.unknown {
            format!(
                "In this {rt} container no runtime option known to cordon lifts what blocks it (see the MISSING lines above)."
            )
        } else if self.required.is_empty() {
            format!("In this {rt} container cordon run needs no further option.")
        } else {
            let opts = self.required.join(" ");
            match cmd {
                Some(cmd) => format!(
                    "In this {rt} container cordon run needs it started with exactly: `{cmd} {opts}`."
                ),
                None => format!(
                    "In this {rt} container cordon run needs: {}.",
                    self.required.join("; ")
                ),
            }
        };
        if let Some(tun) = self.tun {
            s.push_str(&format!(
                "\nWithout `{tun}` it runs in explicit-proxy mode: only programs honouring HTTPS_PROXY/HTTP_PROXY get out (through the gateway's policy); add `{tun}` for the TUN gateway to cover every program."
            ));
        }
        Some(s)
    }
}

/// The sandbox's procfs was refused: the error names the fix. `e` is the mount's error.
pub(crate) fn proc_refused(e: std::io::Error) -> std::io::Error {
    if e.raw_os_error() != Some(libc::EPERM) {
        return e;
    }
    let runtime = Host::real().container();
    let fix = match runtime {
        Some(rt @ ("Docker" | "Podman")) => format!(
            "this {rt} container masks paths of /proc: start it with `{}` (`cordon doctor` names every option this container needs)",
            option(Some(rt), Need::Proc)
        ),
        _ => "paths of /proc are mounted over here (a container or a parent sandbox): give cordon a full /proc (Docker: `--security-opt systempaths=unconfined`, Podman: `--security-opt unmask=ALL`; `cordon doctor` says)".into(),
    };
    std::io::Error::new(
        e.kind(),
        format!("{e}: the kernel refuses a fresh procfs in a user namespace while {fix}"),
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::fake;
    use super::*;

    const MASKED: &str = "1 0 0:1 / / rw - overlay overlay rw\n\
        2 1 0:2 / /proc rw - proc proc rw\n\
        3 2 0:3 / /proc/kcore rw - tmpfs tmpfs rw\n\
        4 2 0:2 /sys /proc/sys ro - proc proc rw\n";

    /// A default Docker container: seccomp filter, docker-default, masked /proc, no TUN.
    #[test]
    fn a_default_docker_container_names_every_option() {
        let t = fake(&[
            (".dockerenv", ""),
            ("proc/self/status", "Name:\tx\nSeccomp:\t2\n"),
            (
                "proc/self/attr/apparmor/current",
                "docker-default (enforce)\n",
            ),
            ("proc/self/mountinfo", MASKED),
        ]);
        let (v, a) = container_checks(&Host::at(t.path()), false, false);
        assert_eq!(
            a.required,
            [
                "--security-opt seccomp=unconfined",
                "--security-opt apparmor=unconfined",
                "--security-opt systempaths=unconfined"
            ]
        );
        assert_eq!(a.tun, Some("--device /dev/net/tun"));
        // (Where cordon's state lives is this machine's: not overlayfs here.)
        let missing: Vec<&Check> = v.iter().filter(|c| c.support == Support::Missing).collect();
        assert_eq!(missing.len(), 3);
        assert!(missing.iter().all(|c| c.required && c.fix.is_some()));
        let line = a.line().unwrap();
        assert!(
            line.contains("exactly: `docker run --security-opt seccomp=unconfined"),
            "{line}"
        );
        assert!(line.contains("explicit-proxy mode"), "{line}");
    }

    #[test]
    fn podman_unmasks_and_a_host_gets_no_line() {
        let t = fake(&[
            ("run/.containerenv", ""),
            ("proc/self/status", "Seccomp:\t0\n"),
            ("proc/self/mountinfo", MASKED),
        ]);
        let (_, a) = container_checks(&Host::at(t.path()), false, true);
        assert_eq!(a.required, ["--security-opt unmask=ALL"]);
        assert_eq!(a.tun, None);
        let t = fake(&[("proc/self/status", "Seccomp:\t2\n")]);
        let (v, a) = container_checks(&Host::at(t.path()), false, true);
        assert!(v.is_empty() && a.line().is_none() && a.unknown);
    }
}
