use super::*;
use crate::seccomp::testing::{nr, rule};

#[test]
fn the_f3_rules() {
    let plan = SyscallsPlan {
        allow: vec![rule("ptrace", "u:1")],
        deny: vec![rule("chroot", "u:2"), rule("socket", "u:3")],
        nested_userns: false,
    };
    let r = notify_rules(&plan, false, false, false).unwrap();
    assert!(r[&nr("mount")].is_empty());
    assert!(r[&nr("chroot")].is_empty());
    assert!(!r.contains_key(&nr("ptrace")));
    assert!(!r.contains_key(&nr("process_vm_readv")));
    assert!(!r.contains_key(&nr("execve")));
    assert_eq!(r[&nr("ioctl")].len(), 2);
    assert_eq!(r[&nr("unshare")].len(), 1);
    // Denied as a whole by the policy: the conditional rule does not narrow it.
    assert!(r[&nr("socket")].is_empty());
    let nested = SyscallsPlan {
        nested_userns: true,
        ..Default::default()
    };
    let r = notify_rules(&nested, true, false, false).unwrap();
    assert!(!r.contains_key(&nr("unshare")));
    assert!(!r.contains_key(&nr("clone")));
    assert!(r[&nr("execve")].is_empty());
    assert!(r[&nr("execveat")].is_empty());
    assert!(r.contains_key(&nr("ptrace")));
    // A nested sandbox builds its view with the mount family; setns stays denied.
    for name in [
        "mount",
        "umount2",
        "pivot_root",
        "mount_setattr",
        "open_tree",
    ] {
        assert!(!r.contains_key(&nr(name)), "{name}");
    }
    assert!(r[&nr("setns")].is_empty());
    // A user's nested sandbox may write extended attributes; root's, which keeps
    // CAP_SETFCAP, may not.
    for name in FILE_CAPABILITY_WRITERS {
        assert!(!r.contains_key(&nr(name)), "{name}");
    }
    let r = notify_rules(&nested, false, false, true).unwrap();
    for name in FILE_CAPABILITY_WRITERS {
        assert!(r[&nr(name)].is_empty(), "{name}");
    }
    assert!(!r.contains_key(&nr("getxattr")));
    assert!(!r.contains_key(&nr("removexattr")));
    assert!(!r.contains_key(&nr("mount")));
}

#[test]
fn denial_rules_name_the_rule() {
    let plan = SyscallsPlan {
        allow: vec![],
        deny: vec![rule("chroot", "/u/cordon.toml:3")],
        nested_userns: false,
    };
    let none = [0u64; 6];
    assert_eq!(
        denial_rule(&plan, false, nr("mount"), &none),
        "built-in: mount"
    );
    assert_eq!(
        denial_rule(&plan, false, nr("chroot"), &none),
        "/u/cordon.toml:3: chroot"
    );
    let sock = |f: i32, proto: u64| [f as u64, libc::SOCK_RAW as u64, proto, 0, 0, 0];
    assert_eq!(
        denial_rule(&plan, false, nr("socket"), &sock(libc::AF_PACKET, 0)),
        "built-in: socket family 17 (AF_PACKET)"
    );
    assert_eq!(
        denial_rule(&plan, false, nr("socket"), &sock(libc::AF_NETLINK, 15)),
        "built-in: socket AF_NETLINK protocol 15"
    );
    assert_eq!(
        denial_rule(&plan, false, nr("socket"), &sock(1000, 0)),
        "built-in: socket family 1000"
    );
    let ioctl = |cmd: u64| [0, cmd, 0, 0, 0, 0];
    assert_eq!(
        denial_rule(
            &plan,
            false,
            nr("ioctl"),
            &ioctl(u64::from(libc::TIOCSTI as u32))
        ),
        "built-in: ioctl TIOCSTI"
    );
    // Upper bits are ignored, as in the filter.
    assert_eq!(
        denial_rule(
            &plan,
            false,
            nr("ioctl"),
            &ioctl(u64::from(libc::TIOCLINUX as u32) | 1 << 40)
        ),
        "built-in: ioctl TIOCLINUX"
    );
    let newuser = [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0];
    assert_eq!(
        denial_rule(&plan, false, nr("unshare"), &newuser),
        "built-in: unshare CLONE_NEWUSER"
    );
    assert_eq!(
        denial_rule(&plan, false, nr("getpid"), &none),
        "no rule: getpid"
    );
    assert_eq!(
        denial_rule(&plan, false, 99_999, &none),
        "built-in: unknown syscall 99999"
    );
    // A lifted denial that the policy denies again names the policy's rule.
    let both = SyscallsPlan {
        allow: vec![rule("ptrace", "a:1")],
        deny: vec![rule("ptrace", "b:2")],
        nested_userns: false,
    };
    assert_eq!(
        denial_rule(&both, false, nr("ptrace"), &none),
        "b:2: ptrace"
    );
    assert_eq!(
        denial_rule(&both, false, nr("process_vm_readv"), &none),
        "no rule: process_vm_readv"
    );
    // The xattr writes of a command holding CAP_SETFCAP say why; a policy's own denial of
    // one names the policy.
    let denied_too = SyscallsPlan {
        deny: vec![rule("fsetxattr", "c:3")],
        nested_userns: true,
        ..Default::default()
    };
    assert_eq!(
        denial_rule(&denied_too, true, nr("setxattr"), &none),
        "built-in: setxattr as root with nested sandboxes (file capabilities would reach the host)"
    );
    assert_eq!(
        denial_rule(&denied_too, true, nr("fsetxattr"), &none),
        "c:3: fsetxattr"
    );
    assert_eq!(
        denial_rule(&denied_too, false, nr("lsetxattr"), &none),
        "no rule: lsetxattr"
    );
    assert!(is_exec(nr("execve")) && is_exec(nr("execveat")));
    assert!(!is_exec(nr("getpid")) && !is_exec(-1));
}

#[test]
fn set_id_modes_as_root() {
    let plan = SyscallsPlan {
        deny: vec![rule("fchmod", "d:1")],
        ..Default::default()
    };
    // A user's set-id files are the user's own: nothing is sent.
    let r = notify_rules(&plan, false, false, false).unwrap();
    for (name, ..) in SET_ID_MODE_SETTERS {
        if name != "fchmod"
            && let Some(n) = syscall_table::nr(name)
        {
            assert!(!r.contains_key(&n), "{name}");
        }
    }
    let r = notify_rules(&plan, false, false, true).unwrap();
    // S_ISUID or S_ISGID; with O_CREAT or O_TMPFILE for the open family.
    for (name, want) in [("fchmodat", 2), ("mknodat", 2), ("openat", 4)] {
        assert_eq!(r[&nr(name)].len(), want, "{name}");
    }
    #[cfg(target_arch = "x86_64")]
    for (name, want) in [("chmod", 2), ("creat", 2), ("open", 4), ("mknod", 2)] {
        assert_eq!(r[&nr(name)].len(), want, "{name}");
    }
    assert!(
        r[&nr("fchmod")].is_empty(),
        "the policy's whole denial stays"
    );
    // Root without nested sandboxes keeps no CAP_SETFCAP: xattr writes are the kernel's.
    assert!(!r.contains_key(&nr("setxattr")));

    let args = |i: usize, mode: u64, j: usize, flags: u64| {
        let mut a = [0u64; 6];
        a[i] = mode;
        a[j] |= flags;
        a
    };
    let say = |name: &str| {
        format!("built-in: {name} with set-id bits as root (a set-id file would reach the host)")
    };
    let creat = libc::O_CREAT as u64 | libc::O_WRONLY as u64;
    let tmpfile = libc::O_TMPFILE as u64 | libc::O_RDWR as u64;
    let cases: [(&str, [u64; 6], bool); 10] = [
        ("fchmodat", args(2, 0o4755, 3, 0), true),
        ("fchmodat", args(2, 0o2775, 3, 0), true),
        ("fchmodat", args(2, 0o1777, 3, 0), false),
        ("fchmodat", args(2, 0o755 | 0o4000 << 32, 3, 0), false),
        (
            "mknodat",
            args(2, u64::from(libc::S_IFREG) | 0o4755, 3, 0),
            true,
        ),
        ("openat", args(3, 0o4755, 2, creat), true),
        ("openat", args(3, 0o2755, 2, tmpfile), true),
        ("openat", args(3, 0o4755, 2, libc::O_RDONLY as u64), false),
        ("openat", args(3, 0o644, 2, creat), false),
        ("fchmod", args(1, 0o4755, 2, 0), false),
    ];
    for (name, a, denied) in cases {
        let got = denial_rule(&plan, true, nr(name), &a);
        if denied {
            assert_eq!(got, say(name), "{name} {a:?}");
        } else {
            assert_ne!(got, say(name), "{name} {a:?}");
        }
        assert_ne!(denial_rule(&plan, false, nr(name), &a), say(name));
    }
    // `[syscalls] allow` of one explains why it cannot be allowed.
    let conditional = cordon_policy::BUILTIN_CONDITIONAL_SYSCALLS;
    for name in SET_ID_MODE_SETTERS.iter().map(|s| s.0).chain(ROOT_ENOSYS) {
        assert!(conditional.iter().any(|(n, _)| *n == name), "{name}");
    }
    // The policy's own denial of fchmod names the policy.
    assert_eq!(
        denial_rule(&plan, true, nr("fchmod"), &args(1, 0o4755, 2, 0)),
        "d:1: fchmod"
    );
}

#[test]
fn tracing_sends_the_path_lookups_and_nothing_else_more() {
    let plan = SyscallsPlan::default();
    let plain = notify_rules(&plan, false, false, false).unwrap();
    let traced = notify_rules(&plan, false, true, false).unwrap();
    for name in ["openat", "newfstatat", "statx", "faccessat2", "readlinkat"] {
        let nr = syscall_table::nr(name).unwrap();
        assert!(!plain.contains_key(&nr), "{name} without the trace");
        assert_eq!(traced.get(&nr).map(Vec::len), Some(0), "{name}: every call");
        assert_eq!(path_probe(nr), Some(1), "{name}");
    }
    let extra: Vec<_> = traced.keys().filter(|k| !plain.contains_key(k)).collect();
    assert!(
        extra.iter().all(|nr| path_probe(**nr).is_some()),
        "{extra:?}"
    );
    assert_eq!(path_probe(syscall_table::nr("execve").unwrap()), None);
}
