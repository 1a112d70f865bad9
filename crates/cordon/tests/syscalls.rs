//! Layer 4, black-box: the seccomp filter and supervised exec rules, in real sandboxes,
//! as root and as an unprivileged user.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

use common::{Env, all_output, approve, runtime_dir, show, wait_for_question};

/// A python3 snippet that calls `syscall(nr, args…)` via ctypes and prints `errno=N`
/// (0 on success).
fn raw_syscall(nr: &str, args: &str) -> String {
    format!(
        "/usr/bin/python3 -c 'import ctypes, os; l = ctypes.CDLL(None, use_errno=True); \
         r = l.syscall({nr}{args}); print(\"errno=%d\" % (0 if r >= 0 else ctypes.get_errno()))'"
    )
}

fn errno_of(env: &Env, nr: &str, args: &str) -> String {
    let o = env.run(&raw_syscall(nr, args));
    let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(
        out.starts_with("errno="),
        "no result for syscall {nr}\n{}",
        show(&o)
    );
    out
}

/// Each denied family, called directly: EPERM, never a kill, and an event naming the rule.
macro_rules! denied {
    ($name:ident, $nr:expr, $args:expr, $syscall:expr) => {
        both!($name, |env: Env| {
            assert_eq!(
                errno_of(&env, $nr, $args),
                "errno=1",
                "{} should fail with EPERM",
                $syscall
            );
            let log = std::fs::read_to_string(&env.audit).unwrap();
            assert!(
                log.lines().any(|l| l.contains("\"layer\":\"syscall\"")
                    && l.contains("\"action\":\"deny\"")
                    && l.contains(&format!("\"syscall\":\"{}\"", $syscall))),
                "no deny event for {}:\n{log}",
                $syscall
            );
        });
    };
}

// x86_64 numbers (the tests run on x86_64; aarch64 would need its own table here).
denied!(
    denies_mount,
    "165",
    ", b\"none\", b\"/tmp\", b\"tmpfs\", 0, 0",
    "mount"
);
denied!(denies_umount2, "166", ", b\"/tmp\", 0", "umount2");
denied!(denies_kexec_load, "246", ", 0, 0, 0, 0", "kexec_load");
denied!(denies_init_module, "175", ", 0, 0, b\"\"", "init_module");
denied!(denies_bpf, "321", ", 0, 0, 0", "bpf");
denied!(
    denies_perf_event_open,
    "298",
    ", 0, 0, -1, -1, 0",
    "perf_event_open"
);
denied!(denies_userfaultfd, "323", ", 0", "userfaultfd");
denied!(denies_io_uring_setup, "425", ", 1, 0", "io_uring_setup");
denied!(denies_keyctl, "250", ", 0, 0", "keyctl");
denied!(
    denies_add_key,
    "248",
    ", b\"user\", b\"x\", b\"y\", 1, -2",
    "add_key"
);
denied!(denies_ptrace, "101", ", 0, 0, 0, 0", "ptrace");
denied!(
    denies_process_vm_readv,
    "310",
    ", 1, 0, 0, 0, 0, 0",
    "process_vm_readv"
);
denied!(denies_setns, "308", ", 0, 0", "setns");
denied!(denies_pivot_root, "155", ", b\"/\", b\"/\"", "pivot_root");
denied!(denies_fsopen, "430", ", b\"tmpfs\", 0", "fsopen");
denied!(denies_open_tree, "428", ", -100, b\"/\", 0", "open_tree");
denied!(denies_acct, "163", ", 0", "acct");
denied!(denies_swapon, "167", ", b\"/x\", 0", "swapon");
denied!(denies_reboot, "169", ", 0, 0, 0, 0", "reboot");
denied!(denies_settimeofday, "164", ", 0, 0", "settimeofday");
denied!(denies_clock_settime, "227", ", 0, 0", "clock_settime");
// unshare(CLONE_NEWUSER)
denied!(denies_nested_userns, "272", ", 0x10000000", "unshare");
// socket(AF_PACKET, SOCK_RAW, 0) and socket(AF_VSOCK, SOCK_STREAM, 0)
denied!(denies_af_packet, "41", ", 17, 3, 0", "socket");
denied!(denies_af_vsock, "41", ", 40, 1, 0", "socket");

both!(allowed_socket_families_work, |env: Env| {
    assert_eq!(errno_of(&env, "41", ", 1, 1, 0"), "errno=0", "AF_UNIX");
    assert_eq!(errno_of(&env, "41", ", 2, 1, 0"), "errno=0", "AF_INET");
    assert_eq!(errno_of(&env, "41", ", 10, 1, 0"), "errno=0", "AF_INET6");
    assert_eq!(
        errno_of(&env, "41", ", 16, 3, 0"),
        "errno=0",
        "AF_NETLINK route"
    );
    assert_eq!(
        errno_of(&env, "41", ", 16, 3, 9"),
        "errno=1",
        "AF_NETLINK audit"
    );
});

both!(foreign_abis_are_denied, |env: Env| {
    // x32: the x32 bit on an x86_64 syscall number (getpid).
    assert_eq!(errno_of(&env, "0x40000000 | 39", ""), "errno=1");
    // A number no syscall has.
    assert_eq!(errno_of(&env, "999", ""), "errno=1");
    // i386 through `int 0x80` from 64-bit code: the kernel reports AUDIT_ARCH_I386, the classic
    // way around a filter written for one ABI. getpid is 20 on i386.
    let dir = env.base.join("i386");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("int80.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(void){long r;__asm__ volatile(\"int $0x80\":\"=a\"(r):\"a\"(20L):\"memory\");\
         printf(\"int80=%ld\\n\", r);return 0;}\n",
    )
    .unwrap();
    let bin = dir.join("int80");
    let built = std::process::Command::new("gcc")
        .arg("-O0")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    env.own(&dir);
    // Outside, int 0x80 getpid answers a pid (unless the kernel lacks IA32 emulation).
    let outside = std::process::Command::new(&bin).output().unwrap();
    let outside = String::from_utf8_lossy(&outside.stdout).trim().to_string();
    let o = env.run(&bin.display().to_string());
    let inside = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(
        inside,
        "int80=-1",
        "i386 getpid inside should be -EPERM\n{}",
        show(&o)
    );
    if outside != "int80=-38" {
        assert_ne!(
            outside, inside,
            "control: outside the sandbox int 0x80 works"
        );
    }
});

both!(positive_controls_still_work, |env: Env| {
    // Threads (pthread_create tries clone3 first, gets ENOSYS, falls back to clone).
    let out = env.ok(
        "/usr/bin/python3 -c 'import threading; r=[]; t=[threading.Thread(target=lambda i=i: r.append(i)) for i in range(8)]; \
         [x.start() for x in t]; [x.join() for x in t]; print(sorted(r))'",
    );
    assert_eq!(out.trim(), "[0, 1, 2, 3, 4, 5, 6, 7]");
    env.ok("git init -q . && git status --short && yes | head -n 3 >/dev/null");
    env.write(
        "Cargo.toml",
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    env.write(
        "src/main.rs",
        "fn main() { std::thread::spawn(|| println!(\"thread ok\")).join().unwrap(); }\n",
    );
    let out = env
        .ok("export CARGO_HOME=$PWD/.cargo-home; cargo build --offline -q && ./target/debug/tiny");
    assert_eq!(out.trim(), "thread ok");
    if std::path::Path::new("/usr/bin/node").exists() {
        env.ok("/usr/bin/node -e 'console.log(1+1)'");
    } else {
        common::skip("/usr/bin/node", "the node positive control");
    }
    // Debuggers stay off: strace needs ptrace.
    if common::need(&["strace"], "strace failing for want of ptrace") {
        let o = env.denied("strace -f true");
        assert!(
            all_output(&o).contains("Operation not permitted"),
            "strace failed for another reason\n{}",
            show(&o)
        );
    }
});

both!(ptrace_can_be_allowed_by_policy, |env: Env| {
    let policy = env.base.join("ptrace.toml");
    std::fs::write(&policy, "[syscalls]\nallow = [\"ptrace\"]\n").unwrap();
    env.own(&policy);
    // PTRACE_TRACEME (0) on itself: allowed now.
    let o = env.run_with(
        &["--policy", policy.to_str().unwrap()],
        &raw_syscall("101", ", 0, 0, 0, 0"),
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "errno=0",
        "{}",
        show(&o)
    );
});

both!(policy_can_deny_more_syscalls, |env: Env| {
    let policy = env.base.join("deny.toml");
    std::fs::write(&policy, "[syscalls]\ndeny = [\"chroot\"]\n").unwrap();
    env.own(&policy);
    let o = env.run_with(
        &["--policy", policy.to_str().unwrap()],
        &raw_syscall("161", ", b\"/\""),
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "errno=1",
        "{}",
        show(&o)
    );
    let log = std::fs::read_to_string(&env.audit).unwrap();
    assert!(
        log.contains(&format!("{}:3", policy.display()))
            || log.contains(&policy.display().to_string()),
        "{log}"
    );
});

both!(set_id_files_never_reach_the_host_as_root, |env: Env| {
    if !common::need(&["python3", "tar", "install"], "set-id modes as root") {
        return;
    }
    // An archive holding a setuid file (as root: a setuid-root one), made on the host.
    let fixture = env.base.join("setid");
    std::fs::create_dir_all(fixture.join("t")).unwrap();
    let member = fixture.join("t/member");
    std::fs::copy("/bin/true", &member).unwrap();
    let setuid = std::fs::Permissions::from_mode(0o4755);
    std::fs::set_permissions(&member, setuid).unwrap();
    let archive = fixture.join("setid.tar");
    let made = std::process::Command::new("tar")
        .arg("-C")
        .arg(fixture.join("t"))
        .arg("-cpf")
        .arg(&archive)
        .arg("member")
        .status()
        .unwrap();
    assert!(made.success());
    env.own(&fixture);
    // Every way a set-id file is made: chmod (octal, u+s, g+s; fchmodat), install -m
    // (fchmodat after creating), open(O_CREAT) with the mode, mknod of a regular file, tar -p
    // (fchmod), cp -p of a setuid file, a setgid directory; then what must still work.
    let o = env.attempt(&format!(
        "cp /bin/true a; chmod 4755 a; echo OCTAL=$?\n\
         cp /bin/true b; chmod u+s b; echo U_S=$?\n\
         cp /bin/true c; chmod g+s c; echo G_S=$?\n\
         install -m 4755 /bin/true d; echo INSTALL=$?\n\
         python3 -c 'import os; os.close(os.open(\"e\", os.O_CREAT | os.O_WRONLY, 0o4755))'; echo OPEN=$?\n\
         python3 -c 'import os, stat; os.mknod(\"f\", stat.S_IFREG | 0o2755)'; echo MKNOD=$?\n\
         mkdir -p x && tar -C x -xpf {archive}; echo TAR=$?\n\
         cp -p {member} g; echo CP_P=$?\n\
         mkdir sgid; chmod g+s sgid; echo DIR=$?\n\
         cp /bin/true h; chmod 755 h; echo PLAIN=$?\n\
         cp /bin/true i; chmod 600 i; chmod +x i && ./i; echo PLUS_X=$?\n\
         mkdir sticky; chmod 1777 sticky; echo STICKY=$?\n\
         {}\n",
        raw_syscall("437", ", -100, b\"j\", 0, 24").replace("print(\"", "print(\"OPENAT2 "),
        archive = archive.display(),
        member = member.display(),
    ));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let got = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("{k} missing\n{}", show(&o)))
            .to_string()
    };
    let host_mode = |rel: &str| {
        std::fs::symlink_metadata(env.project.join(rel))
            .map(|m| m.permissions().mode() & 0o7777)
            .ok()
    };
    // Ordinary modes work for both.
    for k in ["PLAIN=", "PLUS_X=", "STICKY="] {
        assert_eq!(got(k), "0", "{k}\n{}", show(&o));
    }
    assert_eq!(host_mode("h"), Some(0o755));
    assert_eq!(host_mode("sticky"), Some(0o1777));
    let log = std::fs::read_to_string(&env.audit).unwrap();
    let rule = |syscall: &str| {
        log.lines().any(|l| {
            l.contains(&format!("\"syscall\":\"{syscall}\""))
                && l.contains(&format!(
                    "built-in: {syscall} with set-id bits as root (a set-id file would reach the host)"
                ))
        })
    };
    // Nor from a nested user namespace, whose root is the sandbox's (so, as root, the host's).
    let nested = env.base.join("nested.toml");
    std::fs::write(&nested, "[syscalls]\nnested_userns = true\n").unwrap();
    env.own(&nested);
    let n = env.attempt_with(
        &["--policy", nested.to_str().unwrap()],
        "cp /bin/true n && unshare -r sh -c 'echo IN=$(id -u); chmod 4755 n; echo NESTED=$?'",
    );
    let nested_rc = String::from_utf8_lossy(&n.stdout).into_owned();
    // `[syscalls] allow` cannot lift it: the policy is refused, saying why.
    let lift = env.base.join("lift.toml");
    std::fs::write(&lift, "[syscalls]\nallow = [\"fchmodat\"]\n").unwrap();
    env.own(&lift);
    let checked = env.cordon().arg("check").arg(&lift).output().unwrap();
    assert!(
        !checked.status.success()
            && all_output(&checked).contains("only as root, with a setuid or setgid mode"),
        "{}",
        show(&checked)
    );
    match env.who {
        common::Who::Root => {
            for k in [
                "OCTAL=", "U_S=", "G_S=", "INSTALL=", "OPEN=", "MKNOD=", "TAR=", "CP_P=", "DIR=",
            ] {
                assert_ne!(got(k), "0", "{k} succeeded\n{}", show(&o));
            }
            // What the host sees: no set-id bit anywhere (a file may be left without it).
            for rel in ["a", "b", "c", "d", "e", "f", "x/member", "g", "sgid"] {
                let m = host_mode(rel);
                assert!(
                    m.is_none_or(|m| m & 0o6000 == 0),
                    "{rel} reached the host with mode {m:?}"
                );
            }
            assert_eq!(host_mode("a"), Some(0o755), "cp worked, chmod did not");
            assert!(
                nested_rc.contains("IN=0\nNESTED=") && !nested_rc.contains("NESTED=0"),
                "{}",
                show(&n)
            );
            assert_eq!(host_mode("n"), Some(0o755), "{}", show(&n));
            assert!(host_mode("e").is_none(), "open(O_CREAT, 04755) created it");
            // openat2 carries its mode out of the filter's reach: ENOSYS, so callers fall back.
            assert_eq!(got("OPENAT2 "), "errno=38", "{}", show(&o));
            for syscall in ["fchmodat", "openat", "mknodat", "fchmod"] {
                assert!(rule(syscall), "no {syscall} denial naming the rule:\n{log}");
            }
        }
        common::Who::User => {
            // A user's set-id file runs as the user, which the user is already (and the
            // sandbox's own mounts are nosuid): the kernel's to judge inside, as on the host.
            // At exit the bits go all the same (no set-id file the session made reaches the
            // host, for root or a user: carry.rs), the file stays.
            assert_eq!(got("OCTAL="), "0", "{}", show(&o));
            assert_eq!(got("U_S="), "0", "{}", show(&o));
            assert_eq!(host_mode("b"), Some(0o755));
            let uid = std::fs::metadata(env.project.join("b")).unwrap().uid();
            assert_eq!(uid, env.uid(), "owned by the user, not root");
            assert_eq!(got("OPEN="), "0", "{}", show(&o));
            assert_eq!(host_mode("e").map(|m| m & 0o6000), Some(0));
            // openat2 reaches the kernel, which finds no `struct open_how` at NULL.
            assert_eq!(got("OPENAT2 "), "errno=14", "{}", show(&o));
            assert!(!log.contains("set-id bits as root"), "{log}");
        }
    }
});

// ---- supervised exec ----

fn exec_policy(env: &Env, body: &str) -> String {
    let policy = env.base.join("exec.toml");
    std::fs::write(&policy, body).unwrap();
    env.own(&policy);
    policy.to_str().unwrap().to_string()
}

/// A command named without a `/` is found on `PATH` as a shell finds it: directories
/// without the name are passed over (no exec is attempted there, so no exec event), one
/// holding a file that cannot be executed is tried and passed over, the first executable one
/// runs; and an exec rule still decides what is run.
fn path_lookup(env: &Env, policy: &str) -> (std::process::Output, Vec<String>) {
    let dirs = ["p1", "p2", "p3"].map(|d| env.project.join(d));
    let plain = env.write("p2/pathtool", "#!/bin/sh\necho from-p2\n");
    let tool = env.write("p3/pathtool", "#!/bin/sh\necho from-p3\n");
    std::fs::create_dir_all(&dirs[0]).unwrap();
    env.own(&dirs[0]);
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}/absent:{}:{}:{}:/usr/bin:/bin",
        env.project.display(),
        dirs[0].display(),
        dirs[1].display(),
        dirs[2].display()
    );
    let _ = std::fs::remove_file(&env.audit);
    let o = env
        .cordon()
        .env("PATH", path)
        .args(["run", "--no-tty", "--policy", policy, "--audit"])
        .arg(&env.audit)
        .args(["--", "pathtool"])
        .output()
        .unwrap();
    let log = std::fs::read_to_string(&env.audit).unwrap_or_default();
    let execs = log
        .lines()
        .filter(|l| l.contains("\"layer\":\"exec\""))
        .map(str::to_string)
        .collect();
    (o, execs)
}

both!(
    path_lookup_runs_the_first_executable_and_rules_still_decide,
    |env: Env| {
        let p = exec_policy(&env, "[exec]\nallow = [\"pathtool\"]\n");
        let (o, execs) = path_lookup(&env, &p);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            "from-p3\n",
            "{}",
            show(&o)
        );
        // p2's file (EACCES) and p3's: the directories without it cost no exec.
        assert_eq!(execs.len(), 2, "{execs:#?}");
        assert!(
            execs.iter().all(|l| l.contains("\"action\":\"allow\"")),
            "{execs:#?}"
        );
        let p = exec_policy(&env, "[exec]\ndeny = [\"pathtool\"]\n");
        let (o, execs) = path_lookup(&env, &p);
        assert_eq!(o.status.code(), Some(126), "{}", show(&o));
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("from-"),
            "{}",
            show(&o)
        );
        assert!(
            execs
                .iter()
                .any(|l| l.contains("\"action\":\"deny\"") && l.contains("pathtool")),
            "{execs:#?}"
        );
    }
);

// The command's own exec is decided as it traps, before the start's events are written (issue
// #18); its event still comes after `command started` in the log, allowed or denied.
both!(
    the_commands_own_exec_is_decided_and_logged_after_its_start,
    |env: Env| {
        // The audit log after each run: the exec's event comes after `command started` and
        // carries the rule's action.
        let decided_after_start = |action: &str| {
            let log = std::fs::read_to_string(&env.audit).unwrap();
            let lines: Vec<&str> = log.lines().collect();
            let at = |layer: &str, has: &str| {
                lines
                    .iter()
                    .position(|l| l.contains(&format!("\"layer\":\"{layer}\"")) && l.contains(has))
                    .unwrap_or_else(|| panic!("no {layer} event with {has}:\n{log}"))
            };
            let start = at("process", "\"action\":\"start\"");
            let exec = at("exec", "marker-for-exec-order");
            assert!(start < exec, "{log}");
            assert!(
                lines[exec].contains(&format!("\"action\":\"{action}\"")),
                "{log}"
            );
        };
        let script = "echo ran; : marker-for-exec-order";
        let p = exec_policy(&env, "[exec]\nallow = [\"sh *\"]\n");
        let o = env.run_with(&["--policy", &p], script);
        assert_eq!(String::from_utf8_lossy(&o.stdout), "ran\n", "{}", show(&o));
        decided_after_start("allow");

        let p = exec_policy(&env, "[exec]\ndeny = [\"sh *\"]\n");
        let o = env.run_with(&["--policy", &p], script);
        assert_eq!(o.status.code(), Some(126), "{}", show(&o));
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("ran"),
            "{}",
            show(&o)
        );
        decided_after_start("deny");
    }
);

both!(
    exec_deny_rule_blocks_git_push_but_not_git_status,
    |env: Env| {
        let p = exec_policy(&env, "[exec]\ndeny = [\"git push *\"]\n");
        env.ok("git init -q . && git config user.email t@e.invalid && git config user.name t && git commit -q --allow-empty -m x");
        let o = env.run_with(&["--policy", &p], "git status --short && echo status-ok");
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("status-ok"),
            "{}",
            show(&o)
        );
        let o = env.attempt_with(&["--policy", &p], "git push /nonexistent main; echo rc=$?");
        let out = all_output(&o);
        assert!(
            out.contains("rc=") && !out.contains("rc=0"),
            "git push ran:\n{out}"
        );
        assert!(
            out.contains("denied `git push /nonexistent main`"),
            "no message to the terminal:\n{out}"
        );
        let log = std::fs::read_to_string(&env.audit).unwrap();
        let line = log
            .lines()
            .find(|l| l.contains("\"layer\":\"exec\"") && l.contains("\"action\":\"deny\""))
            .expect("exec deny event");
        assert!(
            line.contains("git push *") && line.contains(&p),
            "the event names the rule: {line}"
        );
        // Nested shells and env do not get around it.
        let o = env.attempt_with(
            &["--policy", &p],
            "sh -c 'env git push /nonexistent main'; echo rc=$?",
        );
        let out = all_output(&o);
        assert!(out.contains("rc=") && !out.contains("rc=0"), "{}", show(&o));
    }
);

both!(builtin_rule_refuses_sudo_explicitly, |env: Env| {
    // Rules match the program's name, so a stand-in named sudo meets the rule where the host
    // has no sudo, and the test never passes on "sudo: not found".
    env.write("bin/sudo", "#!/bin/sh\necho STAND-IN-RAN\n");
    std::fs::set_permissions(
        env.project.join("bin/sudo"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let o = env.attempt("PATH=$PWD/bin:$PATH; sudo true; echo rc=$?");
    let out = all_output(&o);
    assert!(out.contains("rc=") && !out.contains("rc=0"), "{out}");
    assert!(out.contains("denied `sudo true`"), "{out}");
    assert!(!out.contains("STAND-IN-RAN"), "{out}");
    if std::path::Path::new("/usr/bin/sudo").exists() {
        let o = env.attempt("/usr/bin/sudo true; echo rc=$?");
        let out = all_output(&o);
        assert!(out.contains("rc=") && !out.contains("rc=0"), "{out}");
        assert!(out.contains("denied `sudo true`"), "{out}");
    }
});

/// `cordon run --no-tty [--audit] [--policy P] -- ARGV…` with the tests' approval runtime
/// directory. The audit file is optional: two sessions running at once cannot share it.
fn broker_run(
    env: &Env,
    audit: bool,
    policy: Option<&str>,
    argv: &[&str],
) -> std::process::Command {
    let mut c = env.cordon();
    c.env("XDG_RUNTIME_DIR", runtime_dir(env))
        .args(["run", "--no-tty"]);
    if audit {
        c.arg("--audit").arg(&env.audit);
    }
    if let Some(p) = policy {
        c.args(["--policy", p]);
    }
    c.arg("--").args(argv);
    c
}

both!(exec_ask_waits_for_cordon_approve, |env: Env| {
    let p = exec_policy(&env, "[exec]\nask = [\"touch approved*\"]\n");
    let child = broker_run(
        &env,
        true,
        Some(&p),
        &["sh", "-c", "touch approved-file && echo made"],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    // Wait for the question to show up, then allow it with the id exactly as listed.
    let (id, _) = wait_for_question(&env, "touch approved-file");
    assert!(
        !env.project.join("approved-file").exists(),
        "ran before approval"
    );
    // A bare number is refused when it names no question, with the way to find one.
    let o = approve(&env, &["999", "--allow"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        all_output(&o).contains("cordon approve --list"),
        "{}",
        show(&o)
    );
    let o = approve(&env, &[&id, "--allow"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with(&format!("allowed {id}: ")),
        "{}",
        show(&o)
    );
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // The held command's terminal said at once what to run.
    let waiting = format!("cordon: waiting for approval: cordon approve {id} --allow");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&waiting),
        "{}",
        show(&o)
    );
    assert!(env.project.join("approved-file").exists());
    let log = std::fs::read_to_string(&env.audit).unwrap();
    assert!(
        log.contains("\"action\":\"ask\"") && log.contains("person, once"),
        "{log}"
    );
});

both!(exec_ask_times_out_to_deny, |env: Env| {
    let p = exec_policy(&env, "[exec]\nask = [\"touch late*\"]\nask_timeout = 1\n");
    let start = Instant::now();
    let o = broker_run(
        &env,
        true,
        Some(&p),
        &["sh", "-c", "touch late-file; echo rc=$?"],
    )
    .output()
    .unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "the timeout did not fire"
    );
    assert!(
        all_output(&o).contains("rc=126") || !all_output(&o).contains("rc=0"),
        "{}",
        show(&o)
    );
    assert!(!env.project.join("late-file").exists());
    let log = std::fs::read_to_string(&env.audit).unwrap();
    assert!(log.contains("\"approval\":\"timeout\""), "{log}");
});

both!(the_agent_cannot_reach_the_broker, |env: Env| {
    let p = exec_policy(&env, "[exec]\nask = [\"touch never*\"]\nask_timeout = 3\n");
    let runtime = runtime_dir(&env);
    // The sandbox tries to answer its own question through the socket directory.
    let script = format!(
        "(sleep 1; ls {0}/cordon; for s in {0}/cordon/*.sock; do echo '{{\"op\":\"answer\",\"id\":1,\"allow\":true,\"remember\":false}}' | python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(sys.stdin.buffer.read()); print(s.recv(100))' $s; done) & touch never-file; echo rc=$?; wait",
        runtime.display()
    );
    let o = broker_run(
        &env,
        true,
        Some(&p),
        &["sh", "-c", &common::marked(&script)],
    )
    .output()
    .unwrap();
    common::assert_ran(&o);
    assert!(
        !env.project.join("never-file").exists(),
        "the agent approved itself\n{}",
        show(&o)
    );
    let out = all_output(&o);
    assert!(out.contains("rc=") && !out.contains("rc=0"), "{}", show(&o));
});

// ---- fixes from the security review, each pinned ----

both!(another_session_cannot_answer_questions, |env: Env| {
    let p = exec_policy(&env, "[exec]\nask = [\"touch victim*\"]\nask_timeout = 4\n");
    let runtime = runtime_dir(&env);
    // Session A holds a question.
    let a = broker_run(
        &env,
        false,
        Some(&p),
        &["sh", "-c", &common::marked("touch victim-file")],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    wait_for_question(&env, "touch victim-file");
    // Session B, default policy (no ask rules), tries to answer it.
    let answer = format!(
        "ls {0}/cordon; for s in {0}/cordon/*.sock; do python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); \
         s.sendall(b\"{{\\\"op\\\":\\\"answer\\\",\\\"id\\\":1,\\\"allow\\\":true,\\\"remember\\\":true}}\\n\"); print(s.recv(100))' $s; done",
        runtime.display()
    );
    let o = broker_run(&env, false, None, &["sh", "-c", &common::marked(&answer)])
        .output()
        .unwrap();
    common::assert_ran(&o);
    assert!(
        !all_output(&o).contains("\"ok\":true"),
        "session B answered A's question\n{}",
        show(&o)
    );
    let a = a.wait_with_output().unwrap();
    common::assert_denied(&a, "session A's held touch");
    assert!(
        !env.project.join("victim-file").exists(),
        "the held exec ran"
    );
});

both!(approved_exec_cannot_be_swapped_while_waiting, |env: Env| {
    let p = exec_policy(&env, "[exec]\nask = [\"echo *\"]\n");
    // execve from one thread; another rewrites the argument while the question waits.
    let script = r#"
import ctypes, threading, time
libc = ctypes.CDLL(None, use_errno=True)
arg = ctypes.create_string_buffer(b"benign-looking-arg")
argv = (ctypes.c_char_p * 3)(b"echo", ctypes.cast(arg, ctypes.c_char_p), None)
def swap():
    time.sleep(1.5)
    ctypes.memmove(arg, b"EVIL-REWRITTEN-ARG", 18)
threading.Thread(target=swap, daemon=True).start()
libc.execve(b"/bin/echo", argv, None)
print("execve failed errno=%d" % ctypes.get_errno())
"#;
    let f = env.write("swap.py", script);
    let child = broker_run(
        &env,
        true,
        Some(&p),
        &["/usr/bin/python3", f.to_str().unwrap()],
    )
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let (id, _) = wait_for_question(&env, "benign-looking-arg");
    std::thread::sleep(Duration::from_millis(2500));
    approve(&env, &[&id, "--allow"]);
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !out.contains("EVIL-REWRITTEN-ARG"),
        "the swapped command ran:\n{out}"
    );
    assert!(out.contains("execve failed errno=1"), "{out}");
});

both!(
    approval_questions_show_no_raw_control_characters,
    |env: Env| {
        let p = exec_policy(&env, "[exec]\nask = [\"printf *\"]\nask_timeout = 3\n");
        let mut child = broker_run(
            &env,
            false,
            Some(&p),
            &["/usr/bin/printf", "x\u{1b}[2K\rSAFE-LOOKING"],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
        let (_, listed) = wait_for_question(&env, "SAFE-LOOKING");
        child.wait().unwrap();
        assert!(
            !listed.contains('\u{1b}') && !listed.contains('\r'),
            "raw control characters: {listed:?}"
        );
        assert!(
            listed.contains("\\u{1b}") || listed.contains("\\x1b") || listed.contains("\\e"),
            "{listed:?}"
        );
    }
);
