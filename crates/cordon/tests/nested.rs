//! Nested sandboxes, black-box: with `[syscalls] nested_userns = true`, real bubblewrap,
//! `unshare -r`, Codex's own sandbox (`codex sandbox`, the pinned npm CLI) and Claude Code's
//! sandbox invocation run inside a real `cordon run`, as root and as an unprivileged user —
//! and can only narrow: cordon's mounts stay locked, its masks hide what they hide, its
//! seccomp filter, exec rules and gateway apply to everything inside. Without the key, none
//! of it starts.
//!
//! bwrap is always given `--unshare-user` here: bwrap run by uid 0 assumes it holds root's
//! capabilities and makes no user namespace unless told, and root inside cordon holds none
//! (Claude Code and Codex pass it themselves). The user variant also runs bwrap bare.

mod common;

use std::path::Path;
use std::process::Output;

use common::net::{PY, Server, named, run as net_run, setup, www};
use common::{Env, Who, all_output, need, show, skip};

/// bwrap with a read-only root, cordon's /proc bound (no `--unshare-pid`: bwrap binds the
/// /proc it has instead of mounting one) and a fresh /dev.
const BWRAP: &str = "bwrap --unshare-user --die-with-parent --ro-bind / / --dev /dev --proc /proc";

/// The npm Codex CLI that scripts/setup-agents.sh installs (pinned).
const CODEX: &str = "/opt/cordon-agents/bin/codex";

fn policy(env: &Env, extra: &str) -> String {
    let p = env.base.join("nested.toml");
    std::fs::write(&p, format!("[syscalls]\nnested_userns = true\n{extra}")).unwrap();
    env.own(&p);
    p.to_str().unwrap().to_string()
}

fn tools() -> bool {
    need(&["bwrap", "unshare"], "nested sandboxes")
}

/// Run `script` with the nested policy; returns the output.
fn nested(env: &Env, script: &str) -> Output {
    let p = policy(env, "");
    env.run_with(&["--policy", &p], script)
}

/// Run `script` with the nested policy and require exit 0; returns stdout.
#[track_caller]
fn nested_ok(env: &Env, script: &str) -> String {
    let o = nested(env, script);
    assert_eq!(o.status.code(), Some(0), "{script}\n{}", show(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn events(env: &Env) -> String {
    std::fs::read_to_string(&env.audit).unwrap_or_default()
}

both!(nested_namespaces_are_off_by_default, |env: Env| {
    if !tools() {
        return;
    }
    for script in [
        "unshare -r true",
        &format!("{BWRAP} true"),
        "unshare -rm sh -c 'mount -t tmpfs x /mnt'",
    ] {
        let o = env.denied(script);
        assert!(
            events(&env).contains("CLONE_NEWUSER"),
            "{script}: no denial naming CLONE_NEWUSER\n{}",
            show(&o)
        );
    }
    // /proc/sys is sealed read-only by default, for root and users alike.
    let sealed = "awk '$5 == \"/proc/sys\" {print \"SEALED\", $6}' /proc/self/mountinfo";
    let out = env.ok(sealed);
    assert!(out.starts_with("SEALED ro"), "{out}");
    // With nested sandboxes, root's stays sealed; a user's is the plain proc mount.
    let out = nested_ok(&env, sealed);
    match env.who {
        Who::Root => assert!(out.starts_with("SEALED ro"), "{out}"),
        Who::User => assert_eq!(out, "", "{out}"),
    }
    // The default Landlock fence is the full one.
    env.ok("true");
    assert!(
        !events(&env).contains("off for nested sandboxes"),
        "{}",
        events(&env)
    );
});

both!(bwrap_and_unshare_run_inside, |env: Env| {
    if !tools() {
        return;
    }
    let out = nested_ok(
        &env,
        &format!(
            "set -e\n\
             {BWRAP} true\n\
             {BWRAP} --unshare-net true\n\
             {BWRAP} --unshare-ipc --unshare-uts --unshare-net --hostname inner sh -c 'echo HOST=$(hostname)'\n\
             {BWRAP} --tmpfs /mnt sh -c 'echo x > /mnt/f && echo TMPFS=$(cat /mnt/f)'\n\
             echo UNSHARE=$(unshare -r id -u)\n\
             unshare -rm sh -c 'mount -t tmpfs x /mnt && touch /mnt/f && echo MOUNTED=$(ls /mnt)'\n"
        ),
    );
    for want in ["HOST=inner", "TMPFS=x", "UNSHARE=0", "MOUNTED=f"] {
        assert!(out.lines().any(|l| l == want), "{want} missing:\n{out}");
    }
    // What was lifted is said in the log, and why: Landlock's filesystem rules are off. It
    // is what the policy asked for, so no warning on the terminal.
    let log = events(&env);
    assert!(log.contains("off for nested sandboxes"), "{log}");
    let o = nested(&env, "true");
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("warning: Landlock"),
        "{}",
        show(&o)
    );
    if env.who == Who::User {
        // Bare bwrap makes its own user namespace for a user, and may mount its own /proc.
        nested_ok(&env, "bwrap --ro-bind / / --dev /dev --proc /proc true");
        nested_ok(
            &env,
            "bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc true",
        );
    } else {
        // Root's sandbox keeps /proc sealed (its /proc/sys would be the host's, writable by
        // uid 0): the kernel refuses a nested sandbox a fresh /proc; binding it works.
        let o = nested(
            &env,
            &format!("{BWRAP} --unshare-pid --proc /proc true 2>&1; echo rc=$?"),
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("Can't mount proc") && !out.contains("rc=0"),
            "{}",
            show(&o)
        );
        nested_ok(
            &env,
            "bwrap --unshare-all --ro-bind / / --dev /dev --bind /proc /proc true",
        );
    }
});

// What no nested sandbox may do: undo a mount of cordon's, read what a mask hides, write
// outside the project, write a kernel knob. Each tried inside bwrap and `unshare -rm`.
both!(nested_sandboxes_cannot_undo_the_view, |env: Env| {
    if !tools() {
        return;
    }
    let outside = env.base.join("outside.txt");
    std::fs::write(&outside, "host-original").unwrap();
    env.own(&outside);
    let o_path = outside.display();
    let key = "~/.ssh/id_ed25519";
    let p = policy(&env, "");
    let attacks = [
        // Inside bwrap with the whole view bound read-write.
        format!("bwrap --unshare-user --bind / / --dev /dev --proc /proc cat {key}"),
        format!("bwrap --unshare-user --bind / / --dev /dev --proc /proc sh -c 'echo pwned > {o_path}'"),
        "bwrap --unshare-user --bind / / --dev /dev --proc /proc sh -c 'echo pwned > /usr/cordon-nested'".to_string(),
        "bwrap --unshare-user --bind / / --dev /dev --proc /proc sh -c 'cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern'".to_string(),
        // Revealing the masked file: umount it, bind its parent without it, overmount it.
        format!("unshare -rm sh -c 'umount {key}; umount -l ~/.ssh; cat {key}'"),
        "unshare -rm sh -c 'mount --bind ~ /mnt && cat /mnt/.ssh/id_ed25519'".to_string(),
        "unshare -rm sh -c 'mount --rbind ~ /mnt && umount -l /mnt/.ssh; cat /mnt/.ssh/id_ed25519'".to_string(),
        format!("unshare -rm sh -c 'mount -t tmpfs x ~/.ssh && umount ~/.ssh && cat {key}'"),
        format!("{BWRAP} --bind ~ /mnt cat /mnt/.ssh/id_ed25519"),
        // Making the read-only view writable.
        "unshare -rm sh -c 'mount -o remount,bind,rw / ; mount -o remount,bind,rw /usr; touch /usr/cordon-nested'".to_string(),
        format!("unshare -rm sh -c 'mount -o remount,bind,rw {dir} && echo pwned > {o_path}'", dir = env.base.display()),
        // Mounting a /proc of its own (root) or writing a knob through it (user).
        "unshare -rm --pid --fork sh -c 'mount -t proc proc /proc && cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern'".to_string(),
        // The new mount API (open_tree 428, move_mount 429 on x86_64): a clone of the home
        // without its submounts, attached at /mnt, would show what the masks cover.
        format!(
            "unshare -rm {PY} -c 'import ctypes, os; l = ctypes.CDLL(None, use_errno=True); \
             fd = l.syscall(428, -100, os.path.expanduser(\"~\").encode(), 1); \
             assert fd >= 0, ctypes.get_errno(); \
             assert l.syscall(429, fd, b\"\", -100, b\"/mnt\", 4) == 0, ctypes.get_errno(); \
             print(open(\"/mnt/.ssh/id_ed25519\").read())'"
        ),
    ];
    for script in &attacks {
        let o = env.denied_with(&["--policy", &p], script);
        assert!(
            !all_output(&o).contains("SECRET-"),
            "{script}\n{}",
            show(&o)
        );
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "host-original");
    assert!(!Path::new("/usr/cordon-nested").exists());
    // Sanity: the same bwrap can write the project, so the refusals above are the view's.
    nested_ok(
        &env,
        "bwrap --unshare-user --bind / / --dev /dev --proc /proc sh -c 'echo ok > nested-wrote'",
    );
    assert_eq!(
        std::fs::read_to_string(env.project.join("nested-wrote")).unwrap(),
        "ok\n"
    );
});

/// A python3 snippet calling `syscall(nr, args…)`, printing `errno=N` (0 on success).
fn raw_syscall(nr: &str, args: &str) -> String {
    format!(
        "{PY} -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); \
         r = l.syscall({nr}{args}); print(\"errno=%d\" % (0 if r >= 0 else ctypes.get_errno()))'"
    )
}

both!(the_syscall_filter_applies_inside, |env: Env| {
    if !tools() {
        return;
    }
    if std::env::consts::ARCH != "x86_64" {
        skip("x86_64", "syscall numbers here are x86_64's");
        return;
    }
    // x86_64: keyctl 250 (KEYCTL_GET_KEYRING_ID of the session keyring), perf_event_open 298,
    // setns 308, ptrace 101 (PTRACE_TRACEME).
    for (name, nr, args) in [
        ("keyctl", "250", ", 0, -3, 0"),
        ("perf_event_open", "298", ", 0, 0, -1, -1, 0"),
        ("setns", "308", ", 0, 0"),
        ("ptrace", "101", ", 0, 0, 0, 0"),
    ] {
        let o = nested(&env, &format!("{BWRAP} {}", raw_syscall(nr, args)));
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(out.trim(), "errno=1", "{name} inside bwrap\n{}", show(&o));
        let log = events(&env);
        assert!(
            log.lines().any(|l| l.contains("\"action\":\"deny\"")
                && l.contains(&format!("\"syscall\":\"{name}\""))),
            "cordon's filter did not deny {name}:\n{log}"
        );
    }
    // A new user namespace inside the nested one: the lift is the same all the way down, and
    // the filter still applies two levels in.
    let o = nested(
        &env,
        &format!("unshare -r unshare -r {}", raw_syscall("250", ", 0, -3, 0")),
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "errno=1",
        "{}",
        show(&o)
    );
    // Supervised exec too: an [exec] deny rule decides a program run inside bwrap.
    let p = policy(&env, "[exec]\ndeny = [\"env *\"]\n");
    let o = env.run_with(
        &["--policy", &p],
        &format!("{BWRAP} env true; echo rc=$?; {BWRAP} true && echo ALLOWED"),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("ALLOWED") && !out.contains("rc=0"),
        "{}",
        show(&o)
    );
    let log = events(&env);
    assert!(
        log.lines().any(|l| l.contains("\"layer\":\"exec\"")
            && l.contains("\"action\":\"deny\"")
            && l.contains("env *")),
        "no exec denial from inside bwrap:\n{log}"
    );
});

both!(the_gateway_applies_inside, |env: Env| {
    if !tools() || !need(&["curl"], "requests from inside bwrap") {
        return;
    }
    setup(&env);
    let srv = Server::http(&www(&env, "www", "hello-from-host"));
    let port = srv.port;
    let pol = named(
        &["api.example.test", "denied.example.test"],
        &[("api.example.test", &[port])],
        "[syscalls]\nnested_userns = true\n",
    );
    let curl = |label: &str, host: &str, extra: &str| {
        format!(
            "echo {label}=$({BWRAP} curl -sS --max-time 10 {extra} http://{host}:{port}/hello.txt 2>&1)"
        )
    };
    let script = [
        curl("ALLOWED", "api.example.test", ""),
        curl("ALLOWED_DIRECT", "api.example.test", "--noproxy '*'"),
        curl("DENIED", "denied.example.test", ""),
        curl("DENIED_DIRECT", "denied.example.test", "--noproxy '*'"),
        curl("RAW", "127.0.0.1", "--noproxy '*' --max-time 5"),
    ]
    .join("\n");
    let o = net_run(&env, &pol, &script);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = |prefix: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{prefix}=")))
            .unwrap_or_else(|| panic!("no {prefix} line\n{}", show(&o)))
            .to_string()
    };
    assert_eq!(line("ALLOWED"), "ALLOWED=hello-from-host", "{}", show(&o));
    assert_eq!(
        line("ALLOWED_DIRECT"),
        "ALLOWED_DIRECT=hello-from-host",
        "{}",
        show(&o)
    );
    for denied in ["DENIED", "DENIED_DIRECT", "RAW"] {
        assert!(
            !line(denied).contains("hello-from-host"),
            "{denied} got through\n{}",
            show(&o)
        );
    }
    assert_eq!(srv.count("REQ GET /hello.txt"), 2, "{}", srv.log());
});

// Codex's own sandbox, as its shell tool starts it (`codex sandbox` runs a command under the
// same codex-linux-sandbox + bwrap pipeline): its read-only default narrows cordon's view.
both!(codex_sandbox_runs_inside, |env: Env| {
    if !tools() {
        return;
    }
    if !Path::new(CODEX).exists() {
        skip(
            "codex",
            "Codex's sandbox inside cordon (scripts/setup-agents.sh installs it)",
        );
        return;
    }
    let out = nested_ok(
        &env,
        &format!(
            "export PATH=/opt/cordon-agents/bin:$PATH\n\
             echo OUTER=$(readlink /proc/self/ns/user)\n\
             {CODEX} sandbox -- sh -c 'echo INNER=$(readlink /proc/self/ns/user); \
             echo READ=$(cat /etc/hostname >/dev/null && echo ok); \
             touch \"$HOME/codex-wrote\" 2>/dev/null && echo WROTE=yes || echo WROTE=no'\n\
             touch \"$HOME/cordon-wrote\" && echo CONTROL=yes"
        ),
    );
    assert!(out.lines().any(|l| l == "READ=ok"), "{out}");
    // It really ran in a user namespace of Codex's, not unsandboxed.
    let ns = |k: &str| out.lines().find_map(|l| l.strip_prefix(k)).unwrap_or("");
    assert!(ns("INNER=").starts_with("user:["), "{out}");
    assert_ne!(ns("INNER="), ns("OUTER="), "{out}");
    // Codex's default sandbox is read-only where cordon's home is writable: its narrowing
    // applied inside cordon's.
    assert!(out.lines().any(|l| l == "WROTE=no"), "{out}");
    assert!(out.lines().any(|l| l == "CONTROL=yes"), "{out}");
});

both!(file_capabilities_never_reach_the_host, |env: Env| {
    if !tools() || !need(&["setcap", "getcap", "python3"], "file capabilities") {
        return;
    }
    // Root of a root-run sandbox is root of the host, and keeps CAP_SETFCAP so that nested
    // sandboxes may map uid 0: a capability it set on a project file would be honoured for
    // any host user who runs the file. Set directly, from a nested user namespace, or from
    // bwrap's; then an xattr of no consequence, which the filter cannot tell apart.
    let out = nested_ok(
        &env,
        &format!(
            "cp /bin/true ./x\n\
             setcap cap_net_raw+ep ./x; echo DIRECT=$?\n\
             unshare -r setcap cap_net_raw+ep ./x; echo UNSHARE=$?\n\
             {BWRAP} --bind \"$PWD\" \"$PWD\" setcap cap_net_raw+ep ./x; echo BWRAP=$?\n\
             python3 -c 'import os; os.setxattr(\"x\", \"user.cordon\", b\"1\")'; \
             echo USER_XATTR=$?\n\
             unshare -r sh -c 'echo NESTED_UID=$(id -u)'\n\
             {BWRAP} true && echo BWRAP_RUNS=yes"
        ),
    );
    let got = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("{k} missing:\n{out}"))
            .to_string()
    };
    // Nested sandboxes still work.
    assert_eq!(got("NESTED_UID="), "0", "{out}");
    assert_eq!(got("BWRAP_RUNS="), "yes", "{out}");
    // What the host sees: the kernel's own view of the attribute, as host root.
    let x = env.project.join("x");
    let host = std::process::Command::new("getcap")
        .arg(&x)
        .output()
        .unwrap();
    let host = String::from_utf8_lossy(&host.stdout).into_owned();
    let log = events(&env);
    match env.who {
        Who::Root => {
            for k in ["DIRECT=", "UNSHARE=", "BWRAP=", "USER_XATTR="] {
                assert_ne!(got(k), "0", "{k}\n{out}");
            }
            assert_eq!(
                host.trim(),
                "",
                "a capability reached the host file: {host}"
            );
            assert!(
                log.contains("built-in: setxattr as root with nested sandboxes"),
                "{log}"
            );
        }
        Who::User => {
            // A user holds no CAP_SETFCAP of the host's: the kernel refuses it directly, and
            // what a nested root of the user's writes is scoped to the user's namespaces
            // (rootid is the user's uid), never honoured for the host. xattr writes are the
            // kernel's to judge.
            assert_ne!(got("DIRECT="), "0", "{out}");
            assert_eq!(got("USER_XATTR="), "0", "{out}");
            assert!(
                host.trim().is_empty() || host.contains(&format!("[rootid={}]", env.uid())),
                "{host}"
            );
            assert!(!log.contains("as root with nested sandboxes"), "{log}");
        }
    }
});

both!(
    the_fence_without_filesystem_rules_is_said_degraded,
    |env: Env| {
        // Landlock's filesystem rules are off with nested sandboxes, and profiles turn those on
        // by themselves: the start line, `cordon check` and `cordon doctor` say so.
        let start = |args: &str| {
            let line = format!("{} run {args} -- true", env.cordon_line());
            let out = common::under_pty(&env, &line, "");
            out.lines()
                .find(|l| l.contains("cordon: profile "))
                .unwrap_or_else(|| panic!("no start line for {args}:\n{out}"))
                .to_string()
        };
        let degraded = "landlock(scoping only, nested sandboxes: DEGRADED)";
        let p = policy(&env, "");
        let l = start(&format!("--policy {p}"));
        assert!(l.contains(degraded), "{l}");
        let l = start("--profile codex");
        assert!(l.contains(degraded), "{l}");
        assert!(l.contains("profile codex"), "{l}");
        let l = start("");
        assert!(l.contains(" landlock") && !l.contains("nested"), "{l}");

        let check = |args: &[&str]| {
            let o = env.cordon().arg("check").args(args).output().unwrap();
            assert_eq!(o.status.code(), Some(0), "{}", show(&o));
            String::from_utf8_lossy(&o.stderr).into_owned()
        };
        let off = "Landlock's filesystem rules are OFF for the command";
        let err = check(&["--profile", "codex"]);
        assert!(err.contains(off), "{err}");
        assert!(err.contains("profile `codex` in use"), "{err}");
        let err = check(&[&p]);
        assert!(err.contains(off), "{err}");
        let err = check(&["--profile", "none"]);
        assert!(!err.contains(off), "{err}");

        let o = env.cordon().arg("doctor").output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        // The check's line, then what cordon does about it.
        let nested = out
            .lines()
            .skip_while(|l| !l.contains("nested sandboxes (bwrap"))
            .nth(1)
            .unwrap_or_else(|| panic!("no nested sandboxes line:\n{}", show(&o)));
        assert!(nested.contains(off), "{nested}");
    }
);

/// `python3 -c` that makes the process non-dumpable (`undumpable`), optionally in a user
/// namespace of its own (`userns`), then execs the rest of its arguments: the shape of
/// Claude Code's apply-seccomp step inside its bwrap.
const THEN_EXEC: &str = "import ctypes, os, sys\n\
l = ctypes.CDLL(None, use_errno=True)\n\
assert l.prctl(4, 0, 0, 0, 0) == 0\n\
if sys.argv[1] == 'userns':\n    assert l.unshare(0x10000000) == 0, ctypes.get_errno()\n\
os.execvp(sys.argv[2], sys.argv[2:])\n";

fn then_exec(env: &Env, mode: &str, cmd: &str) -> String {
    let p = env.base.join("then_exec.py");
    if !p.exists() {
        std::fs::write(&p, THEN_EXEC).unwrap();
        env.own(&p);
    }
    format!("{PY} {} {mode} {cmd}", p.display())
}

// A process that made itself non-dumpable (ssh-agent, gpg, Claude Code's apply-seccomp) still
// has its execs decided by the exec rules: the supervisor reads the arguments all the same.
both!(
    a_non_dumpable_process_execs_under_the_exec_rules,
    |env: Env| {
        let p = env.base.join("exec.toml");
        std::fs::write(&p, "[exec]\ndeny = [\"env *\"]\n").unwrap();
        env.own(&p);
        let p = p.to_str().unwrap();
        let o = env.run_with(
            &["--policy", p],
            &format!(
                "{}; echo rc=$?",
                then_exec(&env, "undumpable", "echo ran-undumpable")
            ),
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("ran-undumpable"),
            "{}",
            show(&o)
        );
        let o = env.run_with(
            &["--policy", p],
            &format!("{}; echo rc=$?", then_exec(&env, "undumpable", "env true")),
        );
        let log = events(&env);
        assert!(
            log.lines().any(|l| l.contains("\"layer\":\"exec\"")
                && l.contains("\"action\":\"deny\"")
                && l.contains("env *")),
            "the exec rule did not decide the non-dumpable exec:\n{log}\n{}",
            show(&o)
        );
        assert!(!log.contains("unreadable"), "{log}");
    }
);

// Claude Code's sandbox, as @anthropic-ai/sandbox-runtime 0.0.83 (which Claude Code bundles)
// starts a command: bwrap with its own user, pid and network namespaces, the view read-only
// but the project, then a non-dumpable step in one more user namespace that execs the
// command. As root the capability it keeps for that is CAP_SETFCAP, and /proc is bound (its
// `enableWeakerNestedSandbox`): root's sandbox cannot have a fresh /proc.
both!(claude_code_sandbox_invocation_runs_inside, |env: Env| {
    if !tools() {
        return;
    }
    let proj = env.project.display().to_string();
    let (caps, proc) = match env.who {
        Who::Root => ("--cap-drop ALL --cap-add CAP_SETFCAP", "--bind /proc /proc"),
        Who::User => ("--cap-drop ALL", "--proc /proc"),
    };
    let inner = then_exec(
        &env,
        "userns",
        "sh -c 'echo made > claude-wrote; touch /usr/claude-x 2>/dev/null && echo BAD; cat claude-wrote'",
    );
    let out = nested_ok(
        &env,
        &format!(
            "bwrap --new-session --die-with-parent --unshare-net --ro-bind / / --bind {proj} {proj} \
             --dev /dev --unshare-pid --unshare-user {caps} {proc} --chdir {proj} -- {inner}"
        ),
    );
    assert_eq!(out.trim(), "made", "{out}");
    assert!(!Path::new("/usr/claude-x").exists());
    // The real sandbox-runtime CLI, when this machine has it (with its socat and ripgrep).
    let srt = "/opt/cordon-agents/node/lib/node_modules/@anthropic-ai/sandbox-runtime/dist/cli.js";
    if Path::new(srt).exists() && common::have("socat") && common::have("rg") {
        let settings = env.base.join("srt.json");
        std::fs::write(
            &settings,
            format!(
                "{{\"enableWeakerNestedSandbox\": {}, \"filesystem\": {{\"denyRead\": [], \
                 \"allowWrite\": [\"{proj}\"], \"denyWrite\": []}}, \"network\": \
                 {{\"allowedDomains\": [], \"deniedDomains\": []}}}}",
                env.who == Who::Root
            ),
        )
        .unwrap();
        env.own(&settings);
        let out = nested_ok(
            &env,
            &format!(
                "node {srt} -s {} -c 'echo srt-ran > srt-wrote; touch /usr/srt-x 2>/dev/null \
                 && echo BAD; cat srt-wrote'",
                settings.display()
            ),
        );
        assert!(out.lines().any(|l| l == "srt-ran"), "{out}");
        assert!(!out.contains("BAD"), "{out}");
    }
});
