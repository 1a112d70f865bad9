//! `[syscalls]`: the seccomp filter's built-in denials, lifted or extended by name (layer 4).

use serde_spanned::Spanned;

use crate::PolicyError;
use crate::error::{backticked, did_you_mean};
use crate::schema::{Schema, Shape, toml_string};
use crate::sections::{
    Convert, Loosen, Origin, Render, Scalar, Section, Sections, append_new, set_scalar,
};
use crate::syscall_table;

/// The syscall filter (layer 4): built-in denials, relaxed or extended by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SyscallsPlan {
    /// Built-in denials to lift, by syscall name (e.g. `ptrace`, which also lifts
    /// `process_vm_readv`/`process_vm_writev` and `pidfd_getfd`), each with where it came from.
    pub allow: Vec<NamedRule>,
    /// Extra syscalls to deny, by name.
    pub deny: Vec<NamedRule>,
    /// Nested sandboxes (bubblewrap, `unshare -r`, Codex's and Claude Code's own sandboxes).
    /// Default false. When true, what it lifts, and nothing else:
    /// - `unshare`/`clone` with `CLONE_NEWUSER`;
    /// - the mount family ([`SyscallsPlan::NESTED_USERNS_LIFTS`]): the kernel lets a process
    ///   mount only in a mount namespace owned by a user namespace it made itself, where every
    ///   mount of cordon's view is locked (no umount, no remount read-write, no bind of a masked
    ///   directory's parent without the mask); in the sandbox's own namespaces it still fails
    ///   (EPERM, from the kernel now, so not logged);
    /// - Landlock's filesystem rules for the command (the kernel refuses every mount to a
    ///   process under a Landlock filesystem ruleset); its socket and signal scoping stays;
    /// - as root only, `CAP_SETFCAP` is kept, which the kernel requires to map uid 0 into a new
    ///   user namespace (Linux 5.12); with no_new_privs and an otherwise empty bounding set it
    ///   gains nothing at exec. What it is for, setting file capabilities, the filter then
    ///   denies (`setxattr`, `lsetxattr`, `fsetxattr`, every attribute name: seccomp cannot
    ///   read it): uid 0 of a root-run sandbox is the host's, which would honour them;
    /// - for a non-root sandbox, /proc is not sealed read-only under /proc/sys and the like (a
    ///   sealed /proc makes the kernel refuse a nested sandbox its own /proc): the kernel's own
    ///   ownership checks guard those files, as on the host. As root they stay sealed, so a
    ///   nested sandbox cannot mount a fresh /proc (bwrap's `--bind /proc /proc` works).
    ///
    /// The seccomp filter's other denials (ptrace, keyctl, bpf, setns, …), the gateway and the
    /// mount view still apply to everything inside the nested sandbox; so does, as root, the
    /// denial of set-id modes (see [`BUILTIN_CONDITIONAL_SYSCALLS`]).
    pub nested_userns: bool,
}

/// Syscalls denied by default, whatever their arguments (names missing from the running
/// architecture's table, such as `iopl` on aarch64, are skipped by the filter). Each can be
/// lifted with `[syscalls] allow`; see [`SyscallsPlan::lifted_by`].
pub const BUILTIN_DENIED_SYSCALLS: &[&str] = &[
    // Kernel code and kernel-wide state.
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "lookup_dcookie",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "quotactl",
    "vhangup",
    "iopl",
    "ioperm",
    // io_uring bypasses the syscall filter (its operations are not syscalls).
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    // The kernel keyring: shared with the host user's keys.
    "keyctl",
    "add_key",
    "request_key",
    // Other processes' memory.
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    // Another process's descriptors (the same ptrace access check as `/proc/PID/mem`).
    "pidfd_getfd",
    // The mount tree (locked anyway; denied so attempts are visible).
    "mount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "open_tree_attr",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "setns",
    // Handles bypass path-based checks.
    "open_by_handle_at",
    // The clock.
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
];

/// Syscalls denied by default only for some arguments; not liftable by name.
/// (`unshare`/`clone` with `CLONE_NEWUSER` are lifted by `nested_userns`.)
pub const BUILTIN_CONDITIONAL_SYSCALLS: &[(&str, &str)] = &[
    (
        "unshare",
        "only with CLONE_NEWUSER; set `nested_userns = true` to allow nested user namespaces",
    ),
    (
        "clone",
        "only with CLONE_NEWUSER; set `nested_userns = true` to allow nested user namespaces",
    ),
    (
        "clone3",
        "it always fails with ENOSYS so that programs fall back to `clone`, whose flags the filter can inspect",
    ),
    (
        "ioctl",
        "only TIOCSTI and TIOCLINUX (typing into or controlling the terminal); these cannot be allowed",
    ),
    (
        "socket",
        "only for address families other than AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK (route); these cannot be allowed",
    ),
    ("chmod", SET_ID_AS_ROOT),
    ("fchmod", SET_ID_AS_ROOT),
    ("fchmodat", SET_ID_AS_ROOT),
    ("fchmodat2", SET_ID_AS_ROOT),
    ("creat", SET_ID_AS_ROOT),
    ("mknod", SET_ID_AS_ROOT),
    ("mknodat", SET_ID_AS_ROOT),
    (
        "open",
        "only as root, creating a file (O_CREAT, O_TMPFILE) with a setuid or setgid mode (a set-id root file would reach the host); this cannot be allowed",
    ),
    (
        "openat",
        "only as root, creating a file (O_CREAT, O_TMPFILE) with a setuid or setgid mode (a set-id root file would reach the host); this cannot be allowed",
    ),
    (
        "openat2",
        "only as root, with ENOSYS (its mode is out of the filter's reach), so that programs fall back to `openat`",
    ),
];

/// Why the mode setters are in [`BUILTIN_CONDITIONAL_SYSCALLS`].
const SET_ID_AS_ROOT: &str = "only as root, with a setuid or setgid mode (a set-id root file would reach the host); this cannot be allowed";

impl SyscallsPlan {
    /// Built-in denials that `nested_userns = true` lifts: what a nested sandbox needs to
    /// build its own view. `[syscalls] deny` can deny them again.
    pub const NESTED_USERNS_LIFTS: &'static [&'static str] = &[
        "mount",
        "umount2",
        "pivot_root",
        "move_mount",
        "open_tree",
        "open_tree_attr",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "mount_setattr",
    ];

    /// The built-in denials that `allow = [name]` lifts (`ptrace` also lifts
    /// `process_vm_readv`, `process_vm_writev` and `pidfd_getfd`); empty when `name` is not
    /// denied by default.
    pub fn lifted_by(name: &str) -> &'static [&'static str] {
        const PTRACE: &[&str] = &[
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "pidfd_getfd",
        ];
        if name == "ptrace" {
            return PTRACE;
        }
        match BUILTIN_DENIED_SYSCALLS.iter().position(|n| *n == name) {
            Some(i) => &BUILTIN_DENIED_SYSCALLS[i..=i],
            None => &[],
        }
    }

    /// Every syscall denied whatever its arguments, by name, with the rule that denies it:
    /// the built-in list minus what `allow` lifts and, with `nested_userns`, minus
    /// [`SyscallsPlan::NESTED_USERNS_LIFTS`] (origin `built-in`), then `deny` (its own
    /// origin). A name both lifted and denied again by `deny` stays denied.
    pub fn denied(&self) -> Vec<NamedRule> {
        let lifted = |n: &str| {
            (self.nested_userns && Self::NESTED_USERNS_LIFTS.contains(&n))
                || self
                    .allow
                    .iter()
                    .any(|a| Self::lifted_by(&a.name).contains(&n))
        };
        let mut out: Vec<NamedRule> = BUILTIN_DENIED_SYSCALLS
            .iter()
            .filter(|n| !lifted(n))
            .map(|n| NamedRule {
                name: (*n).to_string(),
                origin: cordon_events::Origin::BuiltIn,
            })
            .collect();
        for d in &self.deny {
            if !out.iter().any(|o| o.name == d.name) {
                out.push(d.clone());
            }
        }
        out
    }
}

/// A name (syscall) with the origin of the rule that named it (`built-in` or `FILE:LINE`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NamedRule {
    /// The syscall name, validated against the syscall tables.
    pub name: String,
    /// `built-in`, or `FILE:LINE`.
    pub origin: cordon_events::Origin,
}

raw_table! {
    /// `[syscalls]` as written.
    pub(crate) struct Raw example "deny = [\"chroot\"]" {
        /// Built-in syscall denials to lift, by name (`ptrace` for debuggers).
        allow: Strings [loosens] = "allow = [\"ptrace\"]",
        /// Extra syscalls to deny, by name.
        deny: Strings = "deny = [\"chroot\"]",
        /// Let the command build nested sandboxes (bubblewrap, agents' own sandboxes): lifts
        /// new user namespaces and the mount family inside them.
        nested_userns: Boolean [loosens] = "nested_userns = true",
    }
}

/// `[syscalls]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Syscalls {
    /// Built-in denials to lift.
    pub allow: Vec<(String, Origin)>,
    pub deny: Vec<(String, Origin)>,
    pub nested_userns: Scalar<bool>,
}

impl Section for Syscalls {
    type Raw = Raw;
    type Plan = SyscallsPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Syscalls::default();
        for a in &raw.allow {
            let name = a.get_ref();
            syscall_name(cx, a, "allow")?;
            if SyscallsPlan::lifted_by(name).is_empty() {
                let (message, help) = match BUILTIN_CONDITIONAL_SYSCALLS
                    .iter()
                    .find(|(n, _)| n == name)
                {
                    Some((_, why)) => (
                        format!("syscall `{name}` is not denied by default as a whole"),
                        format!("the built-in filter denies it {why}"),
                    ),
                    None => (
                        format!(
                            "syscall `{name}` is not denied by default, so there is nothing to allow"
                        ),
                        format!(
                            "`allow` only lifts built-in denials; denied by default: {}",
                            backticked(BUILTIN_DENIED_SYSCALLS)
                        ),
                    ),
                };
                return Err(cx.diag(message, a.span(), help));
            }
            if !out.allow.iter().any(|(n, _)| n == name) {
                out.allow.push((name.clone(), cx.origin(a.span())));
            }
        }
        for d in &raw.deny {
            let name = d.get_ref();
            syscall_name(cx, d, "deny")?;
            if name == "execve" || name == "execveat" {
                return Err(cx.diag(
                    format!("denying `{name}` would stop every program from starting"),
                    d.span(),
                    "to control which programs run, use [exec] rules, e.g. deny = [\"curl *\"]",
                ));
            }
            if !out.deny.iter().any(|(n, _)| n == name) {
                out.deny.push((name.clone(), cx.origin(d.span())));
            }
        }
        out.nested_userns = raw
            .nested_userns
            .map(|n| (*n.get_ref(), cx.origin(n.span())));
        Ok(out)
    }

    fn merge(&mut self, later: &Self) {
        append_new(&mut self.allow, &later.allow, |a, b| a == b);
        append_new(&mut self.deny, &later.deny, |a, b| a == b);
        set_scalar(&mut self.nested_userns, &later.nested_userns);
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        let (f, b) = (&full.syscalls, &base.syscalls);
        for (name, o) in &f.allow {
            if !b.allow.iter().any(|(x, _)| x == name) {
                out.add(o, format!("allows syscall `{name}`"));
            }
        }
        if let (Some((true, o)), None | Some((false, _))) = (&f.nested_userns, &b.nested_userns) {
            out.add(o, "allows nested user namespaces".to_string());
        }
    }

    fn plan(self) -> SyscallsPlan {
        let named = |v: Vec<(String, Origin)>| -> Vec<NamedRule> {
            v.into_iter()
                .map(|(name, o)| NamedRule {
                    name,
                    origin: o.label.into(),
                })
                .collect()
        };
        SyscallsPlan {
            allow: named(self.allow),
            deny: named(self.deny),
            nested_userns: self.nested_userns.is_some_and(|n| n.0),
        }
    }

    fn render(s: &SyscallsPlan, out: &mut Render) {
        fn names(
            v: &[NamedRule],
        ) -> impl ExactSizeIterator<Item = (String, &cordon_events::Origin)> {
            v.iter().map(|r| (r.name.clone(), &r.origin))
        }
        out.header("syscalls");
        out.line("# built-in denials lifted");
        out.with_origins("allow", names(&s.allow));
        out.line("# denied in addition to the built-in filter");
        out.with_origins("deny", names(&s.deny));
        if s.nested_userns {
            out.line(format!(
                "# nested sandboxes: CLONE_NEWUSER and {} allowed, Landlock's filesystem rules \
                 off; as root, xattr writes denied",
                SyscallsPlan::NESTED_USERNS_LIFTS.join(", ")
            ));
        }
        out.line(format!("nested_userns = {}", s.nested_userns));
    }
}

/// Checks a syscall name against the tables: unknown is an error (with a suggestion from
/// the running architecture's table); a name of the other architecture only is a warning.
fn syscall_name(cx: &mut Convert<'_>, s: &Spanned<String>, key: &str) -> Result<(), PolicyError> {
    let name = s.get_ref().as_str();
    if syscall_table::nr(name).is_some() {
        return Ok(());
    }
    let line = cx.origin(s.span()).label;
    let arch = syscall_table::NATIVE_ARCH;
    if syscall_table::foreign().iter().any(|(n, _)| *n == name)
        || BUILTIN_DENIED_SYSCALLS.contains(&name)
    {
        cx.warnings.push(format!(
            "{line}: syscall `{name}` (syscalls.{key}) does not exist on {arch}; the rule has no effect here"
        ));
        return Ok(());
    }
    let bare = name
        .trim()
        .trim_start_matches("SYS_")
        .trim_start_matches("__NR_")
        .to_ascii_lowercase();
    let names: Vec<&str> = syscall_table::native().iter().map(|(n, _)| *n).collect();
    let mut help = format!(
        "syscall names are as in `man 2 syscalls`, without prefixes (the {arch} table has {} names)",
        names.len()
    );
    if bare != name && syscall_table::nr(&bare).is_some() {
        help.push_str(&format!("; did you mean `{bare}`?"));
    } else if let Some(sug) = did_you_mean(&bare, &names) {
        help.push_str(&format!("; did you mean `{sug}`?"));
    }
    Err(cx.diag(
        format!("unknown syscall {} in syscalls.{key}", toml_string(name)),
        s.span(),
        help,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscall_table::{AARCH64, X86_64};

    fn rule(name: &str, origin: &str) -> NamedRule {
        NamedRule {
            name: name.into(),
            origin: origin.into(),
        }
    }

    #[test]
    fn built_in_denials_are_real_syscalls() {
        let known = |n: &str| X86_64.iter().chain(AARCH64).any(|(x, _)| *x == n);
        for n in BUILTIN_DENIED_SYSCALLS {
            // open_tree_attr (Linux 6.15) is newer than the libc tables.
            assert!(known(n) || *n == "open_tree_attr", "{n}");
        }
        for (n, _) in BUILTIN_CONDITIONAL_SYSCALLS {
            assert!(known(n), "{n}");
            assert!(!BUILTIN_DENIED_SYSCALLS.contains(n), "{n}");
        }
        assert!(!BUILTIN_DENIED_SYSCALLS.contains(&"execve"));
    }

    #[test]
    fn ptrace_lifts_the_process_vm_calls() {
        assert_eq!(
            SyscallsPlan::lifted_by("ptrace"),
            [
                "ptrace",
                "process_vm_readv",
                "process_vm_writev",
                "pidfd_getfd"
            ]
        );
        assert_eq!(SyscallsPlan::lifted_by("pidfd_getfd"), ["pidfd_getfd"]);
        assert_eq!(SyscallsPlan::lifted_by("mount"), ["mount"]);
        assert_eq!(
            SyscallsPlan::lifted_by("process_vm_readv"),
            ["process_vm_readv"]
        );
        assert!(SyscallsPlan::lifted_by("getpid").is_empty());
        assert!(SyscallsPlan::lifted_by("socket").is_empty());
    }

    #[test]
    fn denied_is_built_in_minus_lifted_plus_deny() {
        let plan = SyscallsPlan {
            allow: vec![rule("ptrace", "a:1"), rule("bpf", "a:2")],
            deny: vec![
                rule("chroot", "d:1"),
                rule("bpf", "d:2"),
                rule("mount", "d:3"),
            ],
            nested_userns: false,
        };
        let d = plan.denied();
        let find = |n: &str| d.iter().find(|r| r.name == n).map(|r| r.origin.to_string());
        assert_eq!(find("ptrace").as_deref(), None);
        assert_eq!(find("process_vm_writev").as_deref(), None);
        assert_eq!(
            find("mount").as_deref(),
            Some("built-in"),
            "first origin kept"
        );
        assert_eq!(find("chroot").as_deref(), Some("d:1"));
        assert_eq!(
            find("bpf").as_deref(),
            Some("d:2"),
            "denied again after the lift"
        );
        assert_eq!(find("kexec_load").as_deref(), Some("built-in"));
        assert_eq!(d.iter().filter(|r| r.name == "mount").count(), 1);
        let default = SyscallsPlan::default().denied();
        assert_eq!(default.len(), BUILTIN_DENIED_SYSCALLS.len());
    }

    #[test]
    fn nested_userns_lifts_the_mount_family_only() {
        let plan = SyscallsPlan {
            allow: vec![],
            deny: vec![rule("pivot_root", "d:1")],
            nested_userns: true,
        };
        let d = plan.denied();
        let find = |n: &str| d.iter().find(|r| r.name == n).map(|r| r.origin.to_string());
        for n in SyscallsPlan::NESTED_USERNS_LIFTS
            .iter()
            .filter(|n| **n != "pivot_root")
        {
            assert_eq!(find(n).as_deref(), None, "{n}");
        }
        assert_eq!(
            find("pivot_root").as_deref(),
            Some("d:1"),
            "denied again by deny"
        );
        for n in [
            "setns",
            "ptrace",
            "keyctl",
            "bpf",
            "perf_event_open",
            "open_by_handle_at",
        ] {
            assert_eq!(find(n).as_deref(), Some("built-in"), "{n}");
        }
        for n in SyscallsPlan::NESTED_USERNS_LIFTS {
            assert!(BUILTIN_DENIED_SYSCALLS.contains(n), "{n}");
        }
    }
}
