use super::*;
use crate::seccomp::testing::{nr, rule};

#[test]
fn the_f3_rules() {
    let plan = SyscallsPlan {
        allow: vec![rule("ptrace", "u:1")],
        deny: vec![rule("chroot", "u:2"), rule("socket", "u:3")],
        nested_userns: false,
    };
    let r = notify_rules(&plan, false, false).unwrap();
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
    let r = notify_rules(&nested, true, false).unwrap();
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
    let r = notify_rules(&nested, false, true).unwrap();
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
