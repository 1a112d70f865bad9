//! The escape battery, kernel and process part (issue #19): black-box attacks, each a real
//! program (`fixtures/escape_kernel/esc.c`, compiled here with `gcc`; shell tools where they
//! are the attack) run inside `cordon run` on the built-in policy, as root and as the
//! unprivileged user. Each test asserts that the attack failed where it matters, ON THE HOST
//! (a host process alive and unchanged, a host file or keyring untouched, nothing reached a
//! host socket, nothing typed into the host's shell), and that the audit log recorded the
//! refusal where a layer sees it (the seccomp filter's denials, which the supervisor logs
//! through user notification). Where no layer can see an attack — a pid namespace hides a
//! process, a read-only mount answers EROFS — the test says so and why.
//!
//! Where two layers each stop an attack, each is tested with the other off: the filter's
//! denial is lifted through the policy's own `[syscalls] allow` (or `nested_userns`), so the
//! kernel's boundary (namespaces, locked mounts, missing capabilities) must stop it alone; the
//! mount fence and Landlock are turned off one at a time with the debug-only
//! `CORDON_TEST_LAYER_OFF` (io_uring's open, which no filter sees). The filter has no such
//! switch (`TIOCSTI`, `TIOCLINUX` cannot be lifted by policy), nor has the pid namespace; those
//! tests say which layer is left untested alone.
//!
//! | # | attack | layer(s) | test |
//! |---|--------|----------|------|
//! | 1 | read a host process's `/proc/PID/{root,cwd,environ,mem,fd,maps,cmdline}` | pid namespace | `host_process_proc_entries_are_invisible` |
//! | 2 | `/proc/1/{root,cwd,environ,mem,maps,exe,ns/*}` of cordon-init, write a host file through `/proc/1/root`; with ptrace lifted: attach, process_vm_*, pidfd_getfd of init | non-dumpable init (kernel), read-only root | `cordon_init_is_closed` |
//! | 3 | `kill -9`, pidfd_open, rt_sigqueueinfo, tgkill of a host process | pid namespace (+ Landlock signal scoping) | `host_process_survives_signals` |
//! | 4 | `kill(-1, SIGKILL)` from inside | pid namespace | `kill_everything_stays_inside` |
//! | 5 | ptrace attach/seize, process_vm_readv/writev, pidfd_getfd, `/proc/PID/mem` of a host process | seccomp + pid namespace | `ptrace_of_a_host_process_is_denied` |
//! | 6 | the same with the ptrace family lifted | pid namespace alone | `ptrace_of_a_host_process_without_the_filter` |
//! | 7 | ptrace attach/seize, process_vm_readv/writev, pidfd_getfd of a sibling inside | seccomp | `ptrace_of_a_sibling_is_denied` |
//! | 8 | write a sibling's memory through `/proc/PID/mem` | none (GAP, ignored) | `proc_mem_of_a_sibling_is_not_writable` |
//! | 9 | write `/proc/sys` knobs | read-only mount; user namespace (DAC) | `sysctl_writes_stay_in_the_sandbox` |
//! | 10 | write `/sys` | read-only mount | `sysfs_writes_fail` |
//! | 11 | umount/overmount/bind/rbind/open_tree/move_mount a mask, remount `/` rw, mount_setattr, fsopen proc, mount proc, pivot_root | seccomp | `mount_games_are_denied` |
//! | 12 | the same in a user+mount namespace of its own (`nested_userns = true`, and the codex and claude profiles) | locked mounts (kernel) | `mount_games_in_a_nested_namespace` |
//! | 13 | `unshare -rm` then mount/umount (shell) | seccomp; locked mounts | `unshare_rm_mount_over_a_mask` |
//! | 14 | unshare of every namespace kind, clone(CLONE_NEWUSER), clone3 | seccomp (user), capabilities (the rest), ENOSYS (clone3) | `new_namespaces_are_refused` |
//! | 15 | setns into a host process's namespaces and into its own | pid namespace + seccomp | `setns_into_host_namespaces_fails` |
//! | 16 | setns with the filter's denial lifted | capabilities | `setns_without_the_filter` |
//! | 17 | open host disks, `/dev/mem`, `/dev/kmsg`, `/proc/kmsg`, `/proc/kcore`; mknod a block and a char device | minimal /dev, capabilities | `raw_devices_are_out_of_reach` |
//! | 18 | TIOCSTI/TIOCLINUX into the host terminal (`--no-tty`) and into cordon's pty | seccomp + new session / own pty | `terminal_injection_never_reaches_the_host_shell` |
//! | 19 | add_key/keyctl/request_key on the user and session keyrings | seccomp | `keyrings_are_denied` |
//! | 20 | the same with the keyring calls lifted | user namespace (own keyrings) | `keyrings_without_the_filter` |
//! | 21 | io_uring_setup | seccomp | `io_uring_is_denied` |
//! | 22 | io_uring lifted: IORING_OP_OPENAT of a masked file (no filter sees it) | mount mask + Landlock | `io_uring_open_of_a_mask_fails` |
//! | 23 | the same open of a masked file outside the home, mounts or Landlock off | mount mask alone; Landlock alone | `io_uring_open_each_layer_alone` |
//! | 24 | bpf, userfaultfd, perf_event_open, syslog, iopl, ioperm, open_by_handle_at, quotactl, vhangup | seccomp | `kernel_interfaces_are_denied` |
//! | 25 | kexec_load, kexec_file_load, init/finit/delete_module, reboot, acct, swapon, clock setting | seccomp | `modules_kexec_and_clock_are_denied` |
//! | 26 | the same with the filter's denials lifted | capabilities (kernel) | `modules_kexec_and_clock_without_the_filter` |
//! | 27 | a 32-bit personality, then denied calls | seccomp (arch per call) | `personality_does_not_change_the_filter` |
//! | 28 | a seccomp filter of its own: allow-all, and one with its own listener to answer "continue" | seccomp (strictest wins; one listener per chain) | `a_filter_of_its_own_lifts_nothing` |
//! | 29 | chroot breakout (chroot into a subdir, climb `..`), in the sandbox and in a nested user namespace | capabilities; mount namespace root | `chroot_breakout_reaches_only_the_sandbox_root` |
//! | 30 | bubblewrap's try-syscall.c list (TIOCSTI with high bits, CVE-2019-10063) | seccomp | `bubblewrap_try_syscall` |
//! | 31 | codex-linux-sandbox: no_new_privs, capabilities; a setuid-root program | process (NNP, no caps) | `no_privileges_and_no_setuid` |
//! | 32 | connect to host unix sockets under the home, /run, /run/user/UID/bus (D-Bus), docker.sock | copy-on-write home, /run mask | `host_unix_sockets_are_unreachable` |
//! | 33 | connect to a host abstract unix socket | network namespace (+ Landlock scoping) | `host_abstract_socket_is_unreachable` |
//! | 34 | a D-Bus socket in `$XDG_RUNTIME_DIR` outside /run | `$XDG_RUNTIME_DIR` mask | `runtime_dir_outside_run_is_masked` |
//!
//! x86_64 only where raw numbers matter (the fixture uses the C library's `SYS_*` names, so
//! it compiles for either architecture; the TIOCSTI high-bits case is 64-bit only).

mod common;
#[path = "escape_kernel/harness.rs"]
mod harness;
#[path = "escape_kernel/sockets.rs"]
mod sockets;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use std::time::Duration;

use common::{Env, Who, all_output, show, skip};
use harness::*;

// ---- processes -------------------------------------------------------------------------------

// Layer: pid namespace. The sandbox has a pid namespace of its own and a /proc mounted for it,
// so a host process has no entry there: nothing to read, nothing for any layer to log (no
// syscall is refused; the path does not exist). A number the host uses may exist inside as
// another process, so the check is that nothing of the host process shows.
both!(host_process_proc_entries_are_invisible, |env: Env| {
    let secret = token("SECRET-environ");
    let cwd = env.base.join("host-cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let marker = token("SECRET-cwd-marker");
    std::fs::write(cwd.join("marker"), &marker).unwrap();
    env.own(&cwd);
    let sleeper = host_sleeper(&env, &secret, &cwd);
    let pid = sleeper.pid();
    let got = attack(
        &env,
        &[],
        &format!(
            "for e in root/ cwd/ environ mem fd/ maps cmdline status; do \
               ls /proc/{pid}/$e 2>&1; cat /proc/{pid}/$e 2>&1; done\n\
             cat /proc/{pid}/cwd/marker /proc/{pid}/root{cwd}/marker 2>&1\n\
             echo CMD=$(tr '\\0' ' ' < /proc/{pid}/cmdline 2>/dev/null)\n\
             echo LISTED=$(ls /proc | grep -cx {pid})",
            cwd = cwd.display()
        ),
    );
    let text = got.text();
    assert!(!text.contains(&secret), "the host's environ leaked\n{text}");
    assert!(!text.contains(&marker), "the host's cwd leaked\n{text}");
    // The number may be another process's inside (pids are per namespace): never the host's.
    assert_ne!(got.get("CMD").trim(), "sleep 300", "{text}");
    if got.get("CMD").is_empty() {
        got.is("LISTED", "0");
    }
    // Control: on the host, the same user reads that environ.
    let o = host_cmd(&env, "cat")
        .arg(format!("/proc/{pid}/environ"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&secret),
        "control: the host can read it\n{}",
        show(&o)
    );
});

// Layer: cordon-init is non-dumpable (the kernel's ptrace access check refuses its /proc
// links and memory even to the same user), and the root is read-only. Not logged: these are
// open() and readlink() answers, which no layer sees.
both!(cordon_init_is_closed, |env: Env| {
    let Some(esc) = esc() else { return };
    let outside = env.base.join("outside.txt");
    std::fs::write(&outside, "host-original").unwrap();
    env.own(&outside);
    let got = attack(
        &env,
        &[],
        &format!(
            "echo CMDLINE=$(tr '\\0' ' ' < /proc/1/cmdline)\n\
             for e in root cwd exe; do echo LINK_$e=$(readlink /proc/1/$e >/dev/null 2>&1 && echo ok || echo refused); done\n\
             for e in environ mem maps; do echo READ_$e=$(cat /proc/1/$e >/dev/null 2>&1 && echo ok || echo refused); done\n\
             echo pwned > /proc/1/root{o} 2>/dev/null; echo WRITE_THROUGH_ROOT=$?\n\
             {esc} namespaces 1",
            o = outside.display()
        ),
    );
    assert!(
        got.get("CMDLINE").starts_with("cordon-init"),
        "{}",
        got.text()
    );
    got.all(
        &[
            "LINK_root",
            "LINK_cwd",
            "LINK_exe",
            "READ_environ",
            "READ_mem",
            "READ_maps",
        ],
        "refused",
    );
    assert_ne!(got.get("WRITE_THROUGH_ROOT"), "0");
    got.all(&["OPEN_net", "OPEN_mnt", "OPEN_user", "OPEN_pid"], EACCES);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "host-original");
    // With the ptrace family lifted, the kernel alone refuses every way into init's memory
    // and descriptors (non-dumpable): attach, process_vm_*, pidfd_getfd, /proc/1/mem.
    let p = env.policy_file("ptrace.toml", "[syscalls]\nallow = [\"ptrace\"]\n");
    let got = attack(&env, &["--policy", &p], &format!("{esc} memory 1 4194304"));
    got.all(
        &["ATTACH", "SEIZE", "VM_READ", "VM_WRITE", "PIDFD_GETFD"],
        EPERM,
    );
    got.is("PROC_MEM_OPEN", EACCES);
    assert_not_logged(&env, "ptrace");
    // Control: a process of the command's own is readable, so "refused" is init's alone.
    let o = env.ok("readlink /proc/self/root && cat /proc/self/maps >/dev/null && echo own-ok");
    assert!(o.contains("own-ok"), "{o}");
});

// Layer: pid namespace (the host pid does not exist inside: ESRCH); Landlock's signal scoping
// (ABI 6) would refuse it too but cannot be shown alone here, since the pid namespace cannot
// be turned off. No layer logs it: kill() answers ESRCH, no filter rule is involved.
both!(host_process_survives_signals, |env: Env| {
    let Some(esc) = esc() else { return };
    let cwd = env.base.clone();
    let mut target = host_sleeper(&env, "x", &cwd);
    let pid = target.pid();
    let got = attack(
        &env,
        &[],
        &format!("kill -9 {pid}; echo SHELL_KILL=$?\n{esc} signals {pid}"),
    );
    assert_ne!(got.get("SHELL_KILL"), "0");
    got.all(&["KILL", "PIDFD_OPEN", "SIGQUEUE", "TGKILL"], ESRCH);
    std::thread::sleep(Duration::from_millis(200));
    assert!(target.alive(), "the host process was killed from inside");
    assert!(denials(&env).is_empty(), "{:?}", denials(&env));
    // Control: the same program run on the host kills a second sleep of the same user.
    let mut control = host_sleeper(&env, "x", &cwd);
    let o = host_cmd(&env, &esc)
        .args(["signals", &control.pid().to_string()])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("KILL=ok"),
        "{}",
        show(&o)
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(!control.alive(), "control: the host kill works");
    assert!(target.alive());
});

// Layer: pid namespace. kill(-1, SIGKILL) reaches every process the caller may signal in its
// pid namespace: the sandbox's own, never the host's. Not logged (kill is not filtered).
both!(kill_everything_stays_inside, |env: Env| {
    let Some(esc) = esc() else { return };
    let cwd = env.base.clone();
    let mut target = host_sleeper(&env, "x", &cwd);
    let o = env.run(&common::marked(&format!(
        "sleep 30 & {esc} kill-everything; echo SURVIVED-IN-SANDBOX"
    )));
    common::assert_ran(&o);
    let out = all_output(&o);
    assert!(out.contains("KILL_ALL=sending"), "{}", show(&o));
    // The command's own shell was among those killed: the signal did go out.
    assert!(!out.contains("SURVIVED-IN-SANDBOX"), "{}", show(&o));
    std::thread::sleep(Duration::from_millis(200));
    assert!(target.alive(), "a host process was killed by kill(-1)");
});

// Layers: seccomp (ptrace, process_vm_* and pidfd_getfd are denied and logged, whatever the
// target; pidfd_open of the host pid fails first here, ESRCH) and the
// pid namespace (the host pid does not exist inside). Here both are on; the next test lifts
// the filter's denial so the pid namespace stands alone.
both!(ptrace_of_a_host_process_is_denied, |env: Env| {
    let Some(esc) = esc() else { return };
    let victim = Victim::start(&env, &esc, "victim");
    let got = attack(
        &env,
        &[],
        &format!("{esc} memory {} {}", victim.pid(), victim.addr),
    );
    got.all(&["ATTACH", "SEIZE", "VM_READ", "VM_WRITE"], EPERM);
    got.is("PIDFD_GETFD", ESRCH);
    got.is("PROC_MEM_OPEN", ENOENT);
    assert_logged(&env, "ptrace", "built-in: ptrace");
    assert_logged(&env, "process_vm_readv", "built-in: process_vm_readv");
    assert_logged(&env, "process_vm_writev", "built-in: process_vm_writev");
    assert_eq!(victim.tracer(), "0");
    assert_eq!(victim.finish(), "UNTOUCHED-VICTIM");
    // Control: the same program on the host, as the same user, does write a victim's memory.
    let control = Victim::start(&env, &esc, "control");
    let o = host_cmd(&env, &esc)
        .args(["memory", &control.pid().to_string(), &control.addr])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("VM_WRITE=ok"),
        "{}",
        show(&o)
    );
    assert_eq!(control.finish(), "PWNED-BY-SANDBOX");
});

// Layer: pid namespace alone: `[syscalls] allow = ["ptrace"]` lifts ptrace and process_vm_*,
// and the host process is still out of reach (ESRCH). Not logged: no filter rule is left.
both!(ptrace_of_a_host_process_without_the_filter, |env: Env| {
    let Some(esc) = esc() else { return };
    let p = env.policy_file("ptrace.toml", "[syscalls]\nallow = [\"ptrace\"]\n");
    let victim = Victim::start(&env, &esc, "victim");
    let got = attack(
        &env,
        &["--policy", &p],
        &format!("{esc} memory {} {}", victim.pid(), victim.addr),
    );
    got.all(
        &["ATTACH", "SEIZE", "VM_READ", "VM_WRITE", "PIDFD_GETFD"],
        ESRCH,
    );
    got.is("PROC_MEM_OPEN", ENOENT);
    for s in ["ptrace", "process_vm_readv", "process_vm_writev"] {
        assert_not_logged(&env, s);
    }
    assert_eq!(victim.tracer(), "0");
    assert_eq!(victim.finish(), "UNTOUCHED-VICTIM");
});

// Layer: seccomp. A child of the command's own is in the same namespaces, so only the filter
// stands between them; with the lift (the policy's word for debuggers) attach works, which
// shows the denial is the filter's.
both!(ptrace_of_a_sibling_is_denied, |env: Env| {
    let Some(esc) = esc() else { return };
    let got = attack(&env, &[], &format!("{esc} sibling"));
    got.all(
        &[
            "SIB_ATTACH",
            "SIB_SEIZE",
            "SIB_VM_READ",
            "SIB_VM_WRITE",
            "SIB_PIDFD_GETFD",
        ],
        EPERM,
    );
    assert_logged(&env, "ptrace", "built-in: ptrace");
    assert_logged(&env, "process_vm_writev", "built-in: process_vm_writev");
    assert_logged(&env, "pidfd_getfd", "built-in: pidfd_getfd");
    let p = env.policy_file("ptrace.toml", "[syscalls]\nallow = [\"ptrace\"]\n");
    let got = attack(&env, &["--policy", &p], &format!("{esc} sibling"));
    got.all(
        &[
            "SIB_ATTACH",
            "SIB_VM_READ",
            "SIB_VM_WRITE",
            "SIB_PIDFD_GETFD",
        ],
        "ok",
    );
    assert_not_logged(&env, "ptrace");
    assert_not_logged(&env, "pidfd_getfd");
});

// GAP (no layer): the filter denies ptrace, process_vm_writev and pidfd_getfd (its descriptors;
// `ptrace_of_a_sibling_is_denied`), but /proc/PID/mem of a child is open to its parent by the
// kernel's ptrace access rules (no Yama on this kernel; Landlock does not scope it within one
// domain), so a sandboxed process writes its child's memory. It
// stays inside the sandbox (every process there is the same untrusted command under the same
// filter; cordon-init is non-dumpable, the host's processes are out of the pid namespace), so
// it is not a way out, but "ptrace is denied" does not hold for /proc/PID/mem. seccomp cannot
// see the path of an open(); closing it needs Yama (`kernel.yama.ptrace_scope`) or a
// per-process non-dumpable flag, which exec resets.
#[test]
#[ignore = "GAP: /proc/PID/mem of a sandboxed child is writable by its parent although ptrace, \
            process_vm_writev and pidfd_getfd are denied (inside the sandbox only; see the comment)"]
fn proc_mem_of_a_sibling_is_not_writable() {
    let env = Env::here();
    let Some(esc) = esc() else { return };
    let got = attack(&env, &[], &format!("{esc} sibling"));
    got.is("SIBLING_HOLDS", "UNTOUCHED-SIBLING");
}

// ---- kernel knobs ----------------------------------------------------------------------------

/// The host's value of a knob.
fn knob(path: &str) -> String {
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

// Layers: the read-only mount of /proc/sys (EROFS, for root and users alike), and, where
// nested sandboxes leave a user's /proc/sys a plain proc mount, the user namespace: the knobs
// belong to the host's root (EACCES). Root's stays sealed with nested sandboxes (a fresh proc
// would let uid 0 write the host's sysctls). Not logged: a write() answered by the kernel.
both!(sysctl_writes_stay_in_the_sandbox, |env: Env| {
    let path = "/proc/sys/kernel/printk_ratelimit_burst";
    let before = knob(path);
    let other: u64 = before.parse::<u64>().unwrap() + 1;
    let stat_before = knob("/proc/sys/vm/stat_interval");
    let script = format!(
        "echo {other} > {path}; echo RC=$?; echo {other} > /proc/sys/vm/stat_interval; echo RC2=$?"
    );
    let got = attack(&env, &[], &script);
    assert_ne!(got.get("RC"), "0");
    assert_ne!(got.get("RC2"), "0");
    assert!(
        got.text().contains("Read-only file system"),
        "{}",
        got.text()
    );
    let p = env.policy_file("nested.toml", "[syscalls]\nnested_userns = true\n");
    let got_nested = attack(&env, &["--policy", &p], &script);
    assert_ne!(got_nested.get("RC"), "0");
    let restore = |v: &str| {
        let _ = std::fs::write(path, v);
    };
    if knob(path) != before {
        restore(&before);
        panic!("a sysctl of the host was changed from inside");
    }
    assert_eq!(knob("/proc/sys/vm/stat_interval"), stat_before);
    match env.who {
        Who::Root => assert!(got_nested.text().contains("Read-only file system")),
        Who::User => assert!(
            got_nested.text().contains("Permission denied"),
            "{}",
            got_nested.text()
        ),
    }
    // Control: as root on the host the knob is writable (written back unchanged).
    if is_root() {
        std::fs::write(path, &before).expect("control: root writes the knob on the host");
    }
});

// Layer: the read-only mount of /sys. Not logged (EROFS from the kernel).
both!(sysfs_writes_fail, |env: Env| {
    let path = "/sys/kernel/mm/transparent_hugepage/enabled";
    if !Path::new(path).exists() {
        skip(path, "a sysfs knob to write");
        return;
    }
    let before = std::fs::read_to_string(path).unwrap();
    let current = before
        .split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
        .unwrap()
        .to_string();
    let got = attack(
        &env,
        &[],
        &format!(
            "echo {current} > {path}; echo RC=$?; echo add > /sys/class/net/lo/uevent; echo RC2=$?"
        ),
    );
    assert_ne!(got.get("RC"), "0");
    assert_ne!(got.get("RC2"), "0");
    assert!(
        got.text().contains("Read-only file system"),
        "{}",
        got.text()
    );
    assert_eq!(std::fs::read_to_string(path).unwrap(), before);
    if is_root() {
        std::fs::write(path, &current).expect("control: root writes it on the host");
    }
});

// ---- mounts ----------------------------------------------------------------------------------

/// The mount games of the attack program against ~/.ssh, as `nested` or not.
fn mount_games(env: &Env, esc: &str, args: &[&str], nested: bool) -> Got {
    attack(
        env,
        args,
        &format!(
            "{esc} mounts $HOME/.ssh $HOME/.ssh/id_ed25519 $PWD{}",
            if nested { " nested" } else { "" }
        ),
    )
}

/// What every mount game must leave: no secret printed, nothing written under /usr, the host
/// file untouched.
#[track_caller]
fn assert_view_intact(env: &Env, got: &Got) {
    assert!(!got.text().contains("SECRET-"), "{}", got.text());
    assert!(!Path::new("/usr/cordon-escape-kernel").exists());
    assert_eq!(
        std::fs::read_to_string(env.home.join(".ssh/id_ed25519")).unwrap(),
        "SECRET-ssh-key"
    );
    for k in [
        "BEFORE",
        "AFTER_UMOUNT",
        "AFTER_OWN_TMPFS",
        "THROUGH_BIND",
        "THROUGH_RBIND",
        "AFTER_ALL",
    ] {
        assert!(got.get(k).starts_with("errno="), "{k}\n{}", got.text());
    }
    assert_ne!(got.get("WRITE_USR"), "ok");
}

// Layer: seccomp. In the sandbox's own namespaces every call of the mount family is denied
// (EPERM) and logged before the kernel looks at it; the next test shows the kernel's mount
// locks holding alone.
both!(mount_games_are_denied, |env: Env| {
    let Some(esc) = esc() else { return };
    let got = mount_games(&env, &esc, &[], false);
    assert_view_intact(&env, &got);
    got.all(
        &[
            "UMOUNT_MASK",
            "UMOUNT_MASK_LAZY",
            "UMOUNT_SECRET",
            "TMPFS_OVER_MASK",
            "BIND_PARENT",
            "RBIND_PARENT",
            "OPEN_TREE",
            "OPEN_TREE_REC",
            "REMOUNT_ROOT_RW",
            "REMOUNT_USR_RW",
            "SETATTR_USR_RW",
            "FSOPEN_PROC",
            "MOUNT_PROC",
            "PIVOT_ROOT",
        ],
        EPERM,
    );
    for s in [
        "umount2",
        "mount",
        "open_tree",
        "mount_setattr",
        "fsopen",
        "pivot_root",
    ] {
        assert_logged(&env, s, &format!("built-in: {s}"));
    }
});

// Layer: the kernel's mount locks. `nested_userns = true` (the codex and claude profiles turn
// it on) lifts the filter's mount denials, and the program makes a user and mount namespace of
// its own, where it holds every capability: cordon's mounts came in locked, so a mask cannot
// be unmounted (EINVAL), a bind of its parent without it is refused, a recursive clone
// (open_tree) keeps it locked, the read-only root stays read-only, no proc can be made (its
// pid namespace is not ours). Its own tmpfs over the mask mounts and unmounts, and the mask is
// still under it. Not logged: the filter did not refuse (checked), the kernel did.
both!(mount_games_in_a_nested_namespace, |env: Env| {
    let Some(esc) = esc() else { return };
    // The whole home, so that ~/.ssh is a mask to play with (the home's view would not hold
    // it at all).
    let p = env.policy_file(
        "nested.toml",
        "[syscalls]\nnested_userns = true\n[filesystem]\nhome = \"whole\"\n",
    );
    let whole = env.policy_file("whole.toml", "[filesystem]\nhome = \"whole\"\n");
    let got = mount_games(&env, &esc, &["--policy", &p], true);
    got.is("USERNS", "ok");
    assert_view_intact(&env, &got);
    got.all(
        &[
            "UMOUNT_MASK",
            "UMOUNT_MASK_LAZY",
            "BIND_PARENT",
            "UMOUNT_MASK_IN_RBIND",
            "OPEN_TREE",
            "UMOUNT_MASK_IN_TREE",
            "REMOUNT_USR_RW",
            "SETATTR_USR_RW",
            "PIVOT_ROOT",
        ],
        EINVAL,
    );
    // What a nested sandbox may do in its own namespace works: the refusals are the locks'.
    got.all(
        &["TMPFS_OVER_MASK", "UMOUNT_OWN_TMPFS", "RBIND_PARENT"],
        "ok",
    );
    assert!(got.get("THROUGH_OPEN_TREE_REC").starts_with("errno="));
    got.is("REMOUNT_ROOT_RW", EPERM);
    got.is("MOUNT_PROC", EPERM);
    assert_ne!(got.get("FSCONFIG_CREATE"), "ok");
    for s in ["mount", "umount2", "open_tree", "move_mount", "fsopen"] {
        assert_not_logged(&env, s);
    }
    // The same under the profiles that turn nested sandboxes on by themselves.
    for profile in ["codex", "claude"] {
        let got = mount_games(
            &env,
            &esc,
            &["--profile", profile, "--policy", &whole],
            true,
        );
        got.is("USERNS", "ok");
        assert_view_intact(&env, &got);
        got.all(
            &["UMOUNT_MASK", "BIND_PARENT", "UMOUNT_MASK_IN_TREE"],
            EINVAL,
        );
    }
});

// Layers: seccomp (by default `unshare -r` is refused, CLONE_NEWUSER logged) and, with nested
// sandboxes on, the mount locks: util-linux's own `unshare -rm` then mount/umount over and
// under the mask. tests/nested.rs has the bwrap forms; this is the shell form in battery shape.
both!(unshare_rm_mount_over_a_mask, |env: Env| {
    if !common::need(
        &["unshare", "mount", "umount"],
        "util-linux's unshare and mount",
    ) {
        return;
    }
    let script = "unshare -rm sh -c 'umount -l ~/.ssh; mount --bind ~/notes.txt ~/.ssh/id_ed25519; \
                  umount ~/.ssh/id_ed25519; mount -o remount,rw /; cat ~/.ssh/id_ed25519'; \
                  echo RC=$?";
    let got = attack(&env, &[], script);
    assert_ne!(got.get("RC"), "0");
    assert!(!got.text().contains("SECRET-"), "{}", got.text());
    assert_logged(&env, "unshare", "CLONE_NEWUSER");
    let p = env.policy_file("nested.toml", "[syscalls]\nnested_userns = true\n");
    let got = attack(&env, &["--policy", &p], script);
    assert_ne!(got.get("RC"), "0");
    assert!(!got.text().contains("SECRET-"), "{}", got.text());
    assert_not_logged(&env, "unshare");
    assert_not_logged(&env, "umount2");
});

// Layers: seccomp for CLONE_NEWUSER (unshare and clone: EPERM, logged), capabilities for every
// other kind (the command holds none in the sandbox's user namespace: EPERM from the kernel,
// not logged), and clone3 fails with ENOSYS for every flag (its flags are in memory, out of
// BPF's reach, so glibc falls back to clone, which the filter reads; not logged).
both!(new_namespaces_are_refused, |env: Env| {
    let Some(esc) = esc() else { return };
    let got = attack(&env, &[], &format!("{esc} new-namespaces"));
    got.all(
        &[
            "UNSHARE_USER",
            "UNSHARE_NS",
            "UNSHARE_NET",
            "UNSHARE_PID",
            "UNSHARE_IPC",
            "UNSHARE_UTS",
            "UNSHARE_CGROUP",
            "UNSHARE_TIME",
            "CLONE_NEWUSER",
        ],
        EPERM,
    );
    got.is("CLONE3_NEWUSER", ENOSYS);
    assert_logged(&env, "unshare", "built-in: unshare CLONE_NEWUSER");
    assert_logged(&env, "clone", "built-in: clone CLONE_NEWUSER");
    let unshares = denials(&env).iter().filter(|(s, _)| s == "unshare").count();
    assert_eq!(
        unshares,
        1,
        "only CLONE_NEWUSER is the filter's: {:?}",
        denials(&env)
    );
    // The host's namespaces are untouched by construction; what shows the refusal bites is
    // that with nested sandboxes on, the same calls succeed in a namespace of its own.
    let p = env.policy_file("nested.toml", "[syscalls]\nnested_userns = true\n");
    let got = attack(&env, &["--policy", &p], &format!("{esc} new-namespaces"));
    got.all(&["UNSHARE_USER", "UNSHARE_NS", "UNSHARE_NET"], "ok");
});

/// A host TCP listener on loopback; how many connections reached it.
fn loopback_sink() -> (std::net::TcpListener, u16) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

fn accepted(l: &std::net::TcpListener) -> usize {
    std::iter::from_fn(|| l.accept().ok()).count()
}

// Layers: the pid namespace (a host process's /proc/PID/ns files do not exist inside: ENOENT)
// and seccomp (setns is denied and logged whatever the descriptor: here the command's own
// namespace). What setns into the host's network namespace would give, the host's loopback,
// is checked on the host: nothing connected.
both!(setns_into_host_namespaces_fails, |env: Env| {
    let Some(esc) = esc() else { return };
    let cwd = env.base.clone();
    let host = host_sleeper(&env, "x", &cwd);
    let (sink, port) = loopback_sink();
    let got = attack(
        &env,
        &[],
        &format!(
            "{esc} namespaces {pid}\n\
             /usr/bin/python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)' 2>/dev/null; \
             echo CONNECT=$?",
            pid = host.pid()
        ),
    );
    got.all(
        &[
            "OPEN_net",
            "OPEN_mnt",
            "OPEN_pid",
            "OPEN_user",
            "OPEN_ipc",
            "OPEN_uts",
        ],
        ENOENT,
    );
    got.is("OWN_OPEN", "ok");
    got.is("OWN_SETNS", EPERM);
    assert_logged(&env, "setns", "built-in: setns");
    assert_ne!(got.get("CONNECT"), "0");
    assert_eq!(accepted(&sink), 0, "something reached the host's loopback");
    // Control: the sink takes connections from the host.
    std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(accepted(&sink), 1);
});

// Layer: capabilities. With the filter's setns denial lifted (`[syscalls] allow = ["setns"]`),
// the kernel still refuses: joining a namespace needs CAP_SYS_ADMIN over it, which the command
// does not hold. Not logged.
both!(setns_without_the_filter, |env: Env| {
    let Some(esc) = esc() else { return };
    let p = env.policy_file("setns.toml", "[syscalls]\nallow = [\"setns\"]\n");
    let got = attack(&env, &["--policy", &p], &format!("{esc} namespaces 1"));
    got.is("OWN_SETNS", EPERM);
    assert_not_logged(&env, "setns");
});

// ---- devices and terminals -------------------------------------------------------------------

// Layers: the minimal /dev (no disk, memory, kmsg, kvm, console node: ENOENT; /proc/kcore
// masked), and capabilities: mknod of a device needs CAP_MKNOD in the host's user namespace
// (EPERM), /proc/kmsg needs CAP_SYSLOG. Not logged: open() and mknod() answered by the kernel
// (as root the filter only catches set-id modes of mknod, checked absent).
both!(raw_devices_are_out_of_reach, |env: Env| {
    let Some(esc) = esc() else { return };
    let got = attack(&env, &[], &format!("{esc} devices"));
    got.all(
        &[
            "OPEN_dev_sda",
            "OPEN_dev_vda",
            "OPEN_dev_nvme0n1",
            "OPEN_dev_mem",
            "OPEN_dev_kmem",
            "OPEN_dev_port",
            "OPEN_dev_kmsg",
            "OPEN_dev_kvm",
            "OPEN_dev_loop-control",
            "OPEN_dev_console",
            "OPEN_dev_tty0",
            "OPEN_proc_kcore",
        ],
        ENOENT,
    );
    let kmsg = match env.who {
        Who::Root => EPERM,
        Who::User => EACCES,
    };
    got.is("OPEN_proc_kmsg", kmsg);
    got.all(&["MKNOD_BLOCK", "MKNOD_CHAR"], EPERM);
    for node in ["esc-sda", "esc-mem"] {
        let m = std::fs::symlink_metadata(env.project.join(node));
        let device = m
            .as_ref()
            .is_ok_and(|m| m.file_type().is_block_device() || m.file_type().is_char_device());
        assert!(!device, "a device node reached the project: {m:?}");
    }
    assert_not_logged(&env, "mknodat");
    assert_not_logged(&env, "mknod");
    // Control: the host has kernel memory and a kmsg device, which the sandbox does not show.
    assert!(Path::new("/dev/kmsg").exists() && Path::new("/proc/kmsg").exists());
});

// Layers: seccomp (TIOCSTI and TIOCLINUX are denied and logged, also with junk in the upper 32
// bits of the request, CVE-2019-10063) and the terminal: with `--no-tty` the command runs in a
// new session without a controlling terminal (/dev/tty: ENXIO), under a terminal it gets a pty
// of cordon's own. The filter cannot be lifted for these requests, so the session/pty layer is
// not shown alone. Host side: what the injection types would be run by the host shell that
// reads the terminal after cordon exits (`read; eval`), creating a marker; it must not exist.
both!(
    terminal_injection_never_reaches_the_host_shell,
    |env: Env| {
        let Some(esc) = esc() else { return };
        if !common::need(&["script"], "a real terminal (util-linux script)") {
            return;
        }
        let host_reads = |marker: &Path, cmd: &str| {
            format!(
                "{cmd}; line=$(timeout --foreground 3 head -n 1); eval \"$line\"; echo DONE-{}",
                marker.file_name().unwrap().to_string_lossy()
            )
        };
        let inject = |marker: &Path| format!("{esc} terminal 'touch {}'", marker.display());
        let audit = env.audit.display().to_string();
        let cordon = env.cordon_line();
        for (name, flags) in [("notty", "--no-tty"), ("pty", "")] {
            let marker = env.base.join(format!("injected-{name}"));
            let line = host_reads(
                &marker,
                &format!(
                    "{cordon} run {flags} --audit {audit} -- {}",
                    inject(&marker)
                ),
            );
            let _ = std::fs::remove_file(&env.audit);
            let out = common::under_pty(&env, &line, "");
            assert!(
                out.contains("TIOCSTI"),
                "the attack did not run ({name}):\n{out}"
            );
            assert!(
                out.contains(&format!("DONE-injected-{name}")),
                "the host shell did not read the terminal after cordon ({name}):\n{out}"
            );
            assert!(
                !marker.exists(),
                "typed into the host's terminal ({name}):\n{out}"
            );
            assert!(
                !out.contains("TIOCSTI_TTY=ok") && !out.contains("TIOCSTI_STDIN=ok"),
                "{out}"
            );
            let d = denials(&env);
            assert!(
                d.iter()
                    .any(|(s, r)| s == "ioctl" && r == "built-in: ioctl TIOCSTI"),
                "{name}: {d:?}\n{out}"
            );
            assert!(
                d.iter()
                    .any(|(s, r)| s == "ioctl" && r == "built-in: ioctl TIOCLINUX"),
                "{name}: {d:?}\n{out}"
            );
            if name == "notty" {
                assert!(
                    out.contains("OPEN_TTY=errno=6"),
                    "a controlling terminal inside:\n{out}"
                );
            }
        }
        // Control: the same program outside cordon types into the terminal, and the host shell
        // runs it (unless this kernel refuses TIOCSTI to everyone).
        if std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
            .is_ok_and(|v| v.trim() == "1")
        {
            let marker = env.base.join("injected-control");
            let out = common::under_pty(&env, &host_reads(&marker, &inject(&marker)), "");
            assert!(marker.exists(), "control: TIOCSTI works outside\n{out}");
        }
    }
);

// Keyrings, io_uring, kernel interfaces.
#[path = "escape_kernel/kernel_interfaces.rs"]
mod kernel_interfaces;
