// Keyrings, io_uring and the kernel's other interfaces, reached for from inside (part of
// tests/escape_kernel.rs: its table and harness).

use super::*;

/// Whether the variant user's keyring on the host holds a key named `desc` (and drop it).
fn host_has_key(env: &Env, esc: &str, desc: &str) -> bool {
    let o = host_cmd(env, esc)
        .args(["key-find", desc, "drop"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).contains("FOUND=ok")
}

// Layer: seccomp. add_key, keyctl and request_key are denied and logged; the host's keyring of
// the same user does not hold the key (checked on the host with keyctl's search).
both!(keyrings_are_denied, |env: Env| {
    let Some(esc) = esc() else { return };
    let desc = token("cordon-escape-key");
    let got = attack(&env, &[], &format!("{esc} keyrings {desc}"));
    got.all(
        &[
            "ADD_KEY_USER",
            "ADD_KEY_SESSION",
            "KEYCTL_JOIN",
            "KEYCTL_GET_ID",
            "REQUEST_KEY",
        ],
        EPERM,
    );
    assert_logged(&env, "add_key", "built-in: add_key");
    assert_logged(&env, "keyctl", "built-in: keyctl");
    assert_logged(&env, "request_key", "built-in: request_key");
    assert!(!host_has_key(&env, &esc, &desc), "the key reached the host");
    // Control: the same program on the host does add the key (then drops it).
    let o = host_cmd(&env, &esc)
        .args(["keyrings", &desc])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("ADD_KEY_USER=ok"),
        "{}",
        show(&o)
    );
    assert!(
        host_has_key(&env, &esc, &desc),
        "control: the host keyring takes keys"
    );
});

// Layer: the user namespace. With the keyring calls lifted, keys go to the sandbox's own user
// keyring (keyrings are per user namespace), never to the host user's. Not logged.
both!(keyrings_without_the_filter, |env: Env| {
    let Some(esc) = esc() else { return };
    let desc = token("cordon-escape-key");
    let p = env.policy_file(
        "keys.toml",
        "[syscalls]\nallow = [\"add_key\", \"keyctl\", \"request_key\"]\n",
    );
    let got = attack(&env, &["--policy", &p], &format!("{esc} keyrings {desc}"));
    got.is("ADD_KEY_USER", "ok");
    assert_not_logged(&env, "add_key");
    assert!(
        !host_has_key(&env, &esc, &desc),
        "the key reached the host's keyring"
    );
});

// Layer: seccomp (io_uring_setup denied, logged).
both!(io_uring_is_denied, |env: Env| {
    let Some(esc) = esc() else { return };
    let got = attack(&env, &[], &format!("{esc} io-uring $HOME/.ssh/id_ed25519"));
    got.is("SETUP", EPERM);
    assert_logged(&env, "io_uring_setup", "built-in: io_uring_setup");
});

// Layers: the mask over ~/.ssh and Landlock. With io_uring lifted, an IORING_OP_OPENAT runs in
// the kernel's io worker where no seccomp filter sees it: the mask and Landlock (which io_uring
// honours, its credentials are the caller's) must refuse it. Control: the same ring opens and
// reads a visible file. Not logged: the open is refused by the filesystem.
both!(io_uring_open_of_a_mask_fails, |env: Env| {
    let Some(esc) = esc() else { return };
    let p = env.policy_file(
        "uring.toml",
        "[syscalls]\nallow = [\"io_uring_setup\", \"io_uring_enter\", \"io_uring_register\"]\n",
    );
    env.write("visible.txt", "VISIBLE-THROUGH-URING");
    let got = attack(
        &env,
        &["--policy", &p],
        &format!("{esc} io-uring $HOME/.ssh/id_ed25519; {esc} io-uring $PWD/visible.txt"),
    );
    let text = got.text();
    assert!(!text.contains("SECRET-"), "{text}");
    assert!(text.contains("URING_OPEN=errno="), "{text}");
    assert!(
        text.contains("URING_READ=VISIBLE-THROUGH-URING"),
        "control: {text}"
    );
    assert_not_logged(&env, "io_uring_setup");
});

// Layers: the mount mask and Landlock, each alone (CORDON_TEST_LAYER_OFF), for an io_uring open
// the filter never sees, of a masked file outside the copy-on-write home (/etc/ssh; inside the
// home the mask is the only fence, as the README says). Control: both off, the ring reads it.
both!(io_uring_open_each_layer_alone, |env: Env| {
    let Some(esc) = esc() else { return };
    let target = "/etc/ssh/ssh_config";
    let Ok(host) = std::fs::read_to_string(target) else {
        skip(target, "a masked system file to open through io_uring");
        return;
    };
    let first = host
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_string();
    let p = env.policy_file(
        "uring.toml",
        "[syscalls]\nallow = [\"io_uring_setup\", \"io_uring_enter\", \"io_uring_register\"]\n",
    );
    let script = format!("{esc} io-uring {target}");
    for off in ["mounts", "landlock"] {
        let got = attack_off(&env, off, &["--policy", &p], &script);
        got.is("SETUP", "ok");
        assert!(
            got.get("URING_OPEN").starts_with("errno="),
            "{off} off\n{}",
            got.text()
        );
        assert!(!got.text().contains(&first), "{off} off\n{}", got.text());
    }
    let got = attack_off(&env, "mounts,landlock", &["--policy", &p], &script);
    got.is("URING_OPEN", "ok");
    assert!(got.text().contains(&first), "control: {}", got.text());
});

// Layer: seccomp: each call denied (EPERM) and logged by name.
both!(kernel_interfaces_are_denied, |env: Env| {
    let Some(esc) = esc() else { return };
    let got = attack(&env, &[], &format!("{esc} kernel {esc}"));
    for (key, syscall) in [
        ("BPF", "bpf"),
        ("USERFAULTFD", "userfaultfd"),
        ("PERF_EVENT_OPEN", "perf_event_open"),
        ("SYSLOG_READ", "syslog"),
        ("IOPL", "iopl"),
        ("IOPERM", "ioperm"),
        ("OPEN_BY_HANDLE_AT", "open_by_handle_at"),
        ("QUOTACTL", "quotactl"),
        ("VHANGUP", "vhangup"),
    ] {
        got.is(key, EPERM);
        assert_logged(&env, syscall, &format!("built-in: {syscall}"));
    }
});

fn modules() -> String {
    std::fs::read_to_string("/proc/modules").unwrap_or_default()
}

// Layer: seccomp: denied and logged. Host side: the loaded modules are the same.
both!(modules_kexec_and_clock_are_denied, |env: Env| {
    let Some(esc) = esc() else { return };
    let before = modules();
    let got = attack(&env, &[], &format!("{esc} kernel {esc}"));
    for (key, syscall) in [
        ("KEXEC_LOAD", "kexec_load"),
        ("KEXEC_FILE_LOAD", "kexec_file_load"),
        ("INIT_MODULE", "init_module"),
        ("FINIT_MODULE", "finit_module"),
        ("DELETE_MODULE", "delete_module"),
        ("REBOOT", "reboot"),
        ("ACCT", "acct"),
        ("SWAPON", "swapon"),
        ("SETTIMEOFDAY", "settimeofday"),
        ("CLOCK_SETTIME", "clock_settime"),
        ("ADJTIMEX", "adjtimex"),
    ] {
        got.is(key, EPERM);
        assert_logged(&env, syscall, &format!("built-in: {syscall}"));
    }
    assert_eq!(modules(), before);
});

// Layer: capabilities (the kernel). With the filter's denials lifted, reboot needs
// CAP_SYS_BOOT of the host's user namespace (checked before the magic numbers: EPERM), loading
// a module CAP_SYS_MODULE and kexec CAP_SYS_BOOT (EPERM where the kernel has modules and kexec;
// a kernel built without them answers ENOSYS, as this test's CI kernel may): nothing logged,
// nothing loaded. settimeofday with a bad pointer shows the call did reach the kernel (EFAULT).
both!(modules_kexec_and_clock_without_the_filter, |env: Env| {
    let Some(esc) = esc() else { return };
    let before = modules();
    let p = env.policy_file(
        "lift.toml",
        "[syscalls]\nallow = [\"init_module\", \"finit_module\", \"delete_module\", \"kexec_load\", \
         \"kexec_file_load\", \"reboot\", \"settimeofday\"]\n",
    );
    let got = attack(&env, &["--policy", &p], &format!("{esc} kernel {esc}"));
    got.is("REBOOT", EPERM);
    for k in [
        "INIT_MODULE",
        "FINIT_MODULE",
        "DELETE_MODULE",
        "KEXEC_LOAD",
        "KEXEC_FILE_LOAD",
    ] {
        let r = got.get(k);
        assert!(r == EPERM || r == ENOSYS, "{k}={r}\n{}", got.text());
    }
    for s in [
        "init_module",
        "finit_module",
        "delete_module",
        "kexec_load",
        "kexec_file_load",
        "reboot",
        "settimeofday",
    ] {
        assert_not_logged(&env, s);
    }
    got.is("SETTIMEOFDAY", "errno=14");
    assert_eq!(modules(), before);
});

// Layer: seccomp: the filter checks the architecture of every call, not the personality: a
// 32-bit personality (uname says i686) changes nothing about what is denied.
both!(personality_does_not_change_the_filter, |env: Env| {
    let Some(esc) = esc() else { return };
    let got = attack(&env, &[], &format!("{esc} personality"));
    got.is("PER_LINUX32", "ok");
    if std::env::consts::ARCH == "x86_64" {
        got.is("MACHINE", "i686");
    }
    got.all(&["KEYCTL_AFTER", "PTRACE_AFTER", "KEYCTL_AFTER_ALL"], EPERM);
    assert_logged(&env, "keyctl", "built-in: keyctl");
    assert_logged(&env, "ptrace", "built-in: ptrace");
});

// Layer: seccomp, as the kernel stacks filters: a filter the command adds runs beside cordon's
// and the strictest answer wins, so an allow-everything filter lifts nothing; and a filter with
// a listener of its own (which would answer "continue" in the supervisor's place: of two
// notifying filters the newest gets the call) is refused, one listener per chain (EBUSY).
// Logged: the keyctl denials still reach cordon's supervisor. No host effect to check here (the
// lifted call would be a keyring's; keyrings_are_denied checks the host side).
both!(a_filter_of_its_own_lifts_nothing, |env: Env| {
    let Some(esc) = esc() else { return };
    let got = attack(&env, &[], &format!("{esc} seccomp-stack"));
    got.is("ALLOW_FILTER", "ok");
    got.is("KEYCTL_UNDER_ALLOW", EPERM);
    got.is("OWN_LISTENER", "errno=16");
    got.is("KEYCTL_UNDER_OWN_LISTENER", EPERM);
    let keyctl = denials(&env).iter().filter(|(s, _)| s == "keyctl").count();
    assert_eq!(keyctl, 2, "{:?}", denials(&env));
});

// Layers: capabilities (in the sandbox's namespaces chroot needs CAP_SYS_CHROOT: EPERM, not
// logged) and the mount namespace: in a user namespace of its own the classic breakout (chroot
// into a subdirectory, climb "..", chroot there) lands at the root of the sandbox's view —
// /run/cordon, which only the sandbox has, is there — with the masks and the read-only root
// in place. Host side: the secret not printed, nothing written under /usr.
both!(chroot_breakout_reaches_only_the_sandbox_root, |env: Env| {
    let Some(esc) = esc() else { return };
    let script = format!("{esc} chroot-escape $HOME/.ssh/id_ed25519");
    let got = attack(&env, &[], &script);
    got.all(&["CHROOT_JAIL", "CHROOT_UP"], EPERM);
    assert_not_logged(&env, "chroot");
    let p = env.policy_file("nested.toml", "[syscalls]\nnested_userns = true\n");
    let got = attack(&env, &["--policy", &p], &format!("{script} nested"));
    got.all(
        &["USERNS", "CHROOT_JAIL", "CHROOT_UP", "SEES_CORDON_RUN"],
        "ok",
    );
    assert!(
        got.get("SECRET_AFTER").starts_with("errno="),
        "{}",
        got.text()
    );
    assert_ne!(got.get("WRITE_USR"), "ok");
    assert!(!got.text().contains("SECRET-"), "{}", got.text());
    assert!(!Path::new("/usr/cordon-escape-kernel").exists());
    // Control: the host has no /run/cordon, so seeing it means the sandbox's root.
    assert!(!Path::new("/run/cordon").exists());
});

// Peer: bubblewrap tests/try-syscall.c with tests/test-seccomp.py. Each call gets a bad
// argument, so the filter's answer (EPERM, ENOSYS) is told apart from the kernel's (EBADF,
// EFAULT): chmod, chroot, listen, prctl and TIOCNOTTY reach the kernel; TIOCSTI is denied, also
// with junk in the upper half of the request (CVE-2019-10063: the kernel truncates it to 32
// bits, so a filter that compares 64 bits is bypassed); clone3 is ENOSYS (glibc falls back to
// clone). Layer: seccomp; TIOCSTI's denials logged.
both!(bubblewrap_try_syscall, |env: Env| {
    let Some(esc) = esc() else { return };
    let got = attack(&env, &[], &format!("{esc} try-syscall"));
    got.all(&["CHMOD", "CHROOT", "PRCTL"], "errno=14");
    got.all(&["IOCTL_TIOCNOTTY", "LISTEN"], "errno=9");
    got.is("CLONE3", ENOSYS);
    got.is("IOCTL_TIOCSTI", EPERM);
    got.is("IOCTL_TIOCSTI_CVE_2019_10063", EPERM);
    let tiocsti = denials(&env)
        .iter()
        .filter(|(s, r)| s == "ioctl" && r == "built-in: ioctl TIOCSTI")
        .count();
    assert_eq!(tiocsti, 2, "{:?}", denials(&env));
});

// Peer: codex-rs/linux-sandbox/tests/suite/sandbox.rs (test_no_new_privs_is_enabled,
// sandboxed_command_has_no_effective_or_permitted_capabilities). Layer: process: no_new_privs
// and an empty capability set, so a setuid-root program runs as the user it was started by.
// Host side: what the setuid `chfn` would change, /etc/passwd, is unchanged. Not logged.
both!(no_privileges_and_no_setuid, |env: Env| {
    let Some(esc) = esc() else { return };
    let passwd = std::fs::read("/etc/passwd").unwrap();
    let got = attack(
        &env,
        &[],
        &format!(
            "{esc} privileges\n\
             chfn -f cordon-escape 2>/dev/null </dev/null; echo CHFN=$?\n\
             echo EUID_VIA_SETUID=$(/usr/bin/env python3 -c 'import os; print(os.geteuid())')"
        ),
    );
    got.is("NO_NEW_PRIVS", "1");
    got.is("CAPGET", "ok");
    got.is("CAPS", "0 0 0 0");
    assert_ne!(got.get("CHFN"), "0");
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd);
    // Control: the host's chfn is setuid root, so the refusal is the sandbox's.
    let m = std::fs::metadata("/usr/bin/chfn").unwrap();
    assert!(
        m.mode() & 0o4000 != 0 && m.uid() == 0,
        "chfn is not setuid root here"
    );
});
