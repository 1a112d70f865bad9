//! Layer 1, black-box: a real command in a real sandbox, asserting what it could and could not do.
//! Every test runs twice: as root and as an unprivileged user.

mod common;

use common::{Env, SECRETS, all_output, show};

// ---- positive controls ----

both!(reads_home_files, |env: Env| {
    let out = env.ok("cat ~/notes.txt");
    assert_eq!(out, "visible-home-file");
});

both!(writes_the_project, |env: Env| {
    env.ok("echo built > out.txt && mkdir -p sub/dir && mv out.txt sub/dir/ && rm -r sub/dir");
    env.ok("echo kept > kept.txt");
    assert_eq!(
        std::fs::read_to_string(env.project.join("kept.txt")).unwrap(),
        "kept\n"
    );
});

both!(git_commit_works, |env: Env| {
    let out = env.ok(
        "git init -q . && git config user.email t@example.invalid && git config user.name t \
         && echo hi > a.txt && git add a.txt && git commit -qm first && git log --oneline | wc -l",
    );
    assert_eq!(out.trim(), "1");
    // And a second session can commit on top, with .git/config and hooks read-only by then.
    let out = env.ok("echo more >> a.txt && git commit -qam second && git rev-list --count HEAD");
    assert_eq!(out.trim(), "2");
});

both!(cargo_builds_a_tiny_crate, |env: Env| {
    env.write_tiny_crate();
    let o = env.run_with(
        &[],
        "export CARGO_HOME=$PWD/.cargo-home; cargo build --offline -q && ./target/debug/tiny",
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "tiny says 42");
});

both!(python_runs, |env: Env| {
    let out = env.ok("/usr/bin/python3 -c 'import os; print(sum(range(10)), os.getcwd())'");
    assert_eq!(out.trim(), format!("45 {}", env.project.display()));
});

// ---- credential paths ----

/// The planted secret at `rel` cannot be read, listed or found, and its directory cannot be listed.
fn assert_masked(env: &Env, rel: &str) {
    let secret = SECRETS.iter().find(|(r, _)| *r == rel).unwrap().1;
    let o = env.denied(&format!("cat ~/{rel}"));
    assert!(
        !all_output(&o).contains(secret),
        "{rel} leaked\n{}",
        show(&o)
    );
    let top = rel.split('/').next().unwrap();
    let o = env.attempt(&format!("ls -la ~/{top}/ 2>&1; grep -r SECRET ~/{top} 2>&1; cp -r ~/{top} copy 2>&1; cat copy copy/* 2>&1; true"));
    assert!(
        !all_output(&o).contains(secret),
        "{rel} leaked through ls/grep/cp\n{}",
        show(&o)
    );
}

both!(masks_ssh, |env: Env| assert_masked(&env, ".ssh/id_ed25519"));
both!(masks_aws, |env: Env| assert_masked(
    &env,
    ".aws/credentials"
));
both!(masks_netrc, |env: Env| assert_masked(&env, ".netrc"));
both!(masks_gh, |env: Env| assert_masked(
    &env,
    ".config/gh/hosts.yml"
));
both!(masks_gcloud, |env: Env| assert_masked(
    &env,
    ".config/gcloud/credentials.db"
));
both!(masks_kube, |env: Env| assert_masked(&env, ".kube/config"));
both!(masks_docker, |env: Env| assert_masked(
    &env,
    ".docker/config.json"
));
both!(masks_gnupg, |env: Env| assert_masked(
    &env,
    ".gnupg/private.key"
));
both!(masks_git_credentials, |env: Env| assert_masked(
    &env,
    ".git-credentials"
));
both!(npmrc_shows_a_placeholder_for_its_token, |env: Env| {
    // ~/.npmrc is configuration npm needs: shown, its registry token replaced by a placeholder
    // (swapped back at the wire for that registry alone).
    let o = env.attempt("cat ~/.npmrc; grep -r SECRET-npmrc ~ 2>/dev/null; true");
    let out = all_output(&o);
    assert!(!out.contains("SECRET-npmrc"), "leaked\n{}", show(&o));
    assert!(
        out.contains("//registry.npmjs.org/:_authToken=cordon-"),
        "{}",
        show(&o)
    );
});
both!(masks_pypirc, |env: Env| assert_masked(&env, ".pypirc"));
both!(masks_shell_history, |env: Env| assert_masked(
    &env,
    ".bash_history"
));
both!(masks_password_store, |env: Env| assert_masked(
    &env,
    ".password-store/x.gpg"
));

both!(no_secret_anywhere_in_home, |env: Env| {
    let o = env.attempt("grep -r SECRET ~ 2>/dev/null; true");
    assert!(!all_output(&o).contains("SECRET-"), "{}", show(&o));
    // The listing of home still works: only the masked entries are unreadable.
    let out = env.ok("ls -a ~ | tr '\\n' ' '");
    assert!(out.contains("notes.txt") && out.contains("proj"), "{out}");
});

#[test]
fn deny_covers_the_passwd_home_when_home_differs() {
    // As the unprivileged user, HOME points at the fake home; the account's real home from
    // /etc/passwd gets the same deny list.
    let Some(env) = Env::new(common::Who::User) else {
        return;
    };
    let Some(real_home) = env.passwd_home().filter(|h| *h != env.home) else {
        common::skip(
            "a passwd home other than HOME",
            "the deny list over the passwd home",
        );
        return;
    };
    let netrc = real_home.join(".netrc");
    if std::fs::write(&netrc, "SECRET-passwd-home").is_err() {
        common::skip(
            "a writable passwd home",
            &format!("planting a file in {}", real_home.display()),
        );
        return;
    }
    env.own(&netrc);
    let o = env.run(&common::marked(&format!("cat {}", netrc.display())));
    let _ = std::fs::remove_file(&netrc);
    common::assert_denied(&o, "reading the passwd home's .netrc");
    assert!(
        !all_output(&o).contains("SECRET-passwd-home"),
        "{}",
        show(&o)
    );
}

both!(system_secrets_and_sockets_are_masked, |env: Env| {
    let o = env.denied("cat /etc/shadow");
    assert!(!all_output(&o).contains("root:"), "{}", show(&o));
    env.denied("ls /run /var/run");
});

both!(user_deny_wins_inside_the_project, |env: Env| {
    env.write(".env", "SECRET-dotenv");
    let policy = env.base.join("policy.toml");
    std::fs::write(&policy, "[filesystem]\ndeny = [\"${PROJECT}/.env\"]\n").unwrap();
    env.own(&policy);
    let o = env.denied_with(&["--policy", policy.to_str().unwrap()], "cat .env");
    assert!(!all_output(&o).contains("SECRET-dotenv"));
    env.denied_with(&["--policy", policy.to_str().unwrap()], "echo x > .env");
    assert_eq!(
        std::fs::read_to_string(env.project.join(".env")).unwrap(),
        "SECRET-dotenv"
    );
});

both!(symlink_and_hardlink_to_a_secret_fail, |env: Env| {
    let o = env.denied("ln -s ~/.ssh/id_ed25519 link && cat link");
    assert!(!all_output(&o).contains("SECRET-"), "{}", show(&o));
    let o = env.denied("ln ~/.netrc hard && cat hard");
    assert!(!all_output(&o).contains("SECRET-"), "{}", show(&o));
});

// ---- read-only root and host-executed files ----

both!(root_is_read_only, |env: Env| {
    // The home is copy-on-write: writable inside, untouched on the host (tests/home.rs).
    let o = env.run("touch ~/cordon-x");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(!env.home.join("cordon-x").exists(), "reached the host home");
    for target in ["/usr/cordon-x", "/etc/cordon-x", "/var/tmp/cordon-x"] {
        env.denied(&format!("touch {target}"));
    }
    assert!(!env.home.join("cordon-x").exists());
});

both!(private_tmp_and_shm, |env: Env| {
    let marker = format!("/tmp/cordon-marker-{}", std::process::id());
    let out = env.ok(&format!(
        "echo x > {marker} && echo y > /dev/shm/m && cat {marker} /dev/shm/m"
    ));
    assert_eq!(out, "x\ny\n");
    assert!(
        !std::path::Path::new(&marker).exists(),
        "sandbox /tmp leaked to the host"
    );
});

both!(host_executed_files_do_not_reach_the_host, |env: Env| {
    // Staged by default: writable inside (copy-on-write), held for review at exit; the
    // project's own policy and the git dir's place stay fixed. tests/host_files.rs has the
    // attacks judged by host-side git.
    env.ok("git init -q .");
    env.write(".envrc", "echo ok");
    env.write(".vscode/tasks.json", "{}");
    env.write(".mcp.json", "{}");
    env.write("cordon.toml", "");
    for script in [
        "echo evil > .git/hooks/pre-commit",
        "git config core.hooksPath /tmp/h",
        "echo evil >> .envrc",
        "echo evil > .vscode/tasks.json",
        "echo evil > .mcp.json",
        "rm -rf .git/hooks",
        "rm -f .envrc",
    ] {
        common::assert_ran(&env.run(&common::marked(script)));
    }
    for (what, script) in [
        ("cordon.toml", "echo '[env]' > cordon.toml"),
        ("rename .git", "mv .git .git-old"),
    ] {
        common::assert_denied(&env.run(&common::marked(script)), what);
    }
    assert!(!env.project.join(".git/hooks/pre-commit").exists());
    assert!(env.project.join(".git/hooks").is_dir());
    assert_eq!(
        std::fs::read_to_string(env.project.join(".envrc")).unwrap(),
        "echo ok"
    );
    assert_eq!(
        std::fs::read_to_string(env.project.join(".mcp.json")).unwrap(),
        "{}"
    );
    assert!(
        !std::fs::read_to_string(env.project.join(".git/config"))
            .unwrap()
            .contains("hooksPath")
    );
});

// ---- escape attempts ----

both!(masks_cannot_be_unmounted_or_remounted, |env: Env| {
    for script in [
        "umount ~/.ssh",
        "umount -l ~/.ssh",
        "mount -o remount,rw /",
        "mount --bind ~/notes.txt ~/.netrc",
        "unshare -rm sh -c 'umount ~/.ssh && cat ~/.ssh/id_ed25519'",
        "unshare -rm sh -c 'umount -l ~/.netrc && cat ~/.netrc'",
        "unshare -rm sh -c 'mount -o remount,rw / && touch /usr/cordon-x'",
    ] {
        let o = env.denied(script);
        assert!(
            !all_output(&o).contains("SECRET-"),
            "{script}\n{}",
            show(&o)
        );
    }
});

both!(no_privileges_inside, |env: Env| {
    let out =
        env.ok("grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd|CapAmb):' /proc/self/status; id -u");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    for cap in ["CapEff", "CapPrm", "CapBnd", "CapAmb"] {
        assert!(
            out.contains(&format!("{cap}:\t0000000000000000")),
            "{cap}: {out}"
        );
    }
    assert!(out.trim_end().ends_with(&env.uid().to_string()), "{out}");
});

both!(pid_one_is_cordon_and_unreachable, |env: Env| {
    let out = env.ok("cat /proc/1/cmdline | tr '\\0' ' '; echo; ls /proc | grep -cE '^[0-9]+$'");
    assert!(out.starts_with("cordon-init"), "{out}");
    env.denied("ls /proc/1/root/");
    env.denied("cat /proc/1/environ");
});

/// Every readable mapping of `pid`, read through /proc/PID/mem (the test runs as root, which
/// may read a non-dumpable process), and how often `needle` occurs in it.
fn occurrences_in_memory(pid: u32, needle: &[u8]) -> usize {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut hits = 0;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (range, perms) = (f.next().unwrap(), f.next().unwrap());
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        );
        // [vvar] and the like refuse reads: they hold nothing of the process's own.
        let mut data = vec![0; (b - a) as usize];
        if !perms.starts_with('r')
            || mem.seek(SeekFrom::Start(a)).is_err()
            || mem.read_exact(&mut data).is_err()
        {
            continue;
        }
        hits += data.windows(needle.len()).filter(|w| *w == needle).count();
    }
    hits
}

/// The child of `parent` named `comm`, once there is one.
fn child_named(parent: u32, comm: &str) -> Option<u32> {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < end {
        if let Some(&pid) = common::children(parent, comm).first() {
            return Some(pid);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    None
}

// Init is forked from cordon, not exec'd (issue #18): its memory starts as a copy of cordon's,
// and cordon's environment holds the user's real keys. None of it may be in init's.
both!(init_holds_none_of_the_hosts_environment, |env: Env| {
    let secret = format!("cordon-real-key-{}-e5c1a9f04b", std::process::id());
    let ready = env.project.join("init-memory-ready");
    let mut child = env
        .cordon()
        .env("ANTHROPIC_API_KEY", &secret)
        .env("CORDON_TEST_SECRET_TOKEN", &secret)
        .args(["run", "--no-tty", "--", "sh", "-c"])
        .arg(format!(
            "touch {r} && while [ -e {r} ]; do sleep 0.05; done",
            r = ready.display()
        ))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ready.exists() {
        assert!(std::time::Instant::now() < end, "the command never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let host = child.id();
    let init = child_named(host, "cordon-init").expect("cordon has a child named cordon-init");
    let in_init = occurrences_in_memory(init, secret.as_bytes());
    let environ = std::fs::read(format!("/proc/{init}/environ")).unwrap();
    let cmdline = std::fs::read(format!("/proc/{init}/cmdline")).unwrap();
    // Control: the value is there to be copied, in cordon's own memory.
    let in_host = occurrences_in_memory(host, secret.as_bytes());
    std::fs::remove_file(&ready).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(
        in_host > 0,
        "the scan found the key nowhere in cordon itself"
    );
    assert_eq!(
        in_init, 0,
        "init's memory holds the host's key {in_init} times"
    );
    assert!(
        environ.iter().all(|&b| b == 0),
        "init's environ: {environ:?}"
    );
    // Named as an exec'd init is, not with cordon's command line.
    assert_eq!(
        cmdline,
        b"cordon-init\0",
        "{:?}",
        String::from_utf8_lossy(&cmdline)
    );
});

both!(host_processes_cannot_be_signalled, |env: Env| {
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    env.denied(&format!("kill -0 {}", sleeper.id()));
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "host process was killed"
    );
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
});

both!(minimal_dev_without_disks, |env: Env| {
    let out = env.ok("ls /dev | tr '\\n' ' '");
    for must in [
        "null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm",
    ] {
        assert!(
            out.split_whitespace().any(|x| x == must),
            "missing /dev/{must}: {out}"
        );
    }
    for never in [
        "vda", "sda", "nvme0n1", "kvm", "mem", "kmem", "port", "loop0",
    ] {
        assert!(
            !out.split_whitespace().any(|x| x == never),
            "/dev/{never} visible: {out}"
        );
    }
    env.ok("echo x > /dev/null && head -c 4 /dev/urandom | wc -c");
    env.denied("mknod /dev/shm/disk b 8 0");
});

both!(network_namespace_is_private, |env: Env| {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Loopback and the egress gateway's device; none of the host's interfaces.
    let out =
        env.ok("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '");
    assert_eq!(out.trim(), "lo tun0");
    // The host's loopback is not the sandbox's loopback.
    env.denied(&format!(
        "/usr/bin/python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)'"
    ));
    // Loopback inside works.
    let out = env.ok(
        "/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); \
         c=socket.create_connection(s.getsockname()); print(\"loopback ok\")'",
    );
    assert_eq!(out.trim(), "loopback ok");
});

both!(hostname_and_ipc_are_private, |env: Env| {
    let out = env.ok("hostname");
    assert_eq!(out.trim(), "cordon");
    env.denied("hostname evil");
});

// Descriptors the caller left open (here 7 and 9, on a file in the caller's home) and those
// of cordon's own setup (the control channel, the report socket, the seccomp listener) never
// reach the command: it holds its standard three and what it opens itself.
both!(
    only_the_standard_descriptors_reach_the_command,
    |env: Env| {
        let held = env.write("held-open.txt", "a file the caller holds open\n");
        let inner = env.cordon();
        let mut c = std::process::Command::new("sh");
        c.arg("-c")
            .arg(format!("exec 7<'{0}' 9<'{0}'; exec \"$@\"", held.display()))
            .arg("sh")
            .arg(inner.get_program())
            .args(inner.get_args())
            .args(["run", "--no-tty", "--", "ls", "-l", "/proc/self/fd"])
            .env_clear()
            .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .stdin(std::process::Stdio::null());
        if let Some(dir) = inner.get_current_dir() {
            c.current_dir(dir);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", show(&o));
        let listing = String::from_utf8_lossy(&o.stdout);
        // `ls -l` lines end `N -> target`; ls's own handle on the directory it lists is the one
        // more it may hold.
        let fds: Vec<(u32, &str)> = listing
            .lines()
            .filter_map(|l| {
                let (left, target) = l.split_once(" -> ")?;
                Some((left.rsplit(' ').next()?.parse().ok()?, target))
            })
            .collect();
        assert!(fds.len() >= 3, "{listing}");
        for (fd, target) in &fds {
            assert!(
                *fd <= 2 || target.starts_with("/proc/"),
                "descriptor {fd} -> {target} reached the command:\n{listing}"
            );
            assert!(!target.contains("held-open"), "{listing}");
        }
    }
);

// ---- environment ----

both!(environment_is_scrubbed, |env: Env| {
    let mut c = env.cordon();
    c.env("GITHUB_TOKEN", "SECRET-gh-token")
        .env("AWS_SECRET_ACCESS_KEY", "SECRET-aws-env")
        .env("MY_API_KEY", "SECRET-api-key")
        .env("DB_PASSWORD", "SECRET-db")
        .env("LD_PRELOAD", "/nonexistent/evil.so")
        .env("BASH_ENV", "/nonexistent/evil.sh")
        .env("RANDOM_UNLISTED", "dropped-too")
        .env("TERM", "xterm-256color")
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--", "env"]);
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for bad in ["SECRET-", "LD_PRELOAD", "BASH_ENV", "RANDOM_UNLISTED"] {
        assert!(!out.contains(bad), "{bad} passed:\n{out}");
    }
    for good in ["TERM=xterm-256color", "PATH=", "HOME=", "CORDON_SANDBOX=1"] {
        assert!(out.contains(good), "{good} missing:\n{out}");
    }
    // The agent is told which rule masks what, and that retrying will not help.
    let notice = out
        .lines()
        .find(|l| l.starts_with("CORDON_NOTICE="))
        .expect("CORDON_NOTICE set");
    assert!(
        notice.contains("will not help")
            && notice.contains("/etc/shadow (rule: built-in)")
            && notice.contains("The home shows only what tools need"),
        "{notice}"
    );
});

both!(secrets_pass_only_when_named, |env: Env| {
    let policy = env.base.join("policy.toml");
    std::fs::write(
        &policy,
        "[env]\npass = [\"GITHUB_TOKEN\"]\nset = { GREETING = \"hello\" }\n",
    )
    .unwrap();
    env.own(&policy);
    let mut c = env.cordon();
    c.env("GITHUB_TOKEN", "named-token")
        .env("GITLAB_TOKEN", "SECRET-unnamed")
        .args(["run", "--no-tty", "--policy"])
        .arg(&policy)
        .args(["--", "env"]);
    let o = c.output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("GITHUB_TOKEN=named-token"), "{}", show(&o));
    assert!(out.contains("GREETING=hello"), "{}", show(&o));
    assert!(!out.contains("SECRET-unnamed"), "{}", show(&o));
});

// ---- terminal ----

both!(no_terminal_injection_without_a_pty, |env: Env| {
    // The caller's terminal is the command's stdin (--no-tty passes it through); TIOCSTI on it
    // must fail because the command runs in a new session without a controlling terminal.
    let inject = "/usr/bin/python3 -c 'import fcntl,termios; fcntl.ioctl(0, termios.TIOCSTI, b\\\"x\\\")' && echo INJECTED";
    let control = common::under_pty(&env, &format!("sh -c \"{inject}\""), "");
    let sandboxed = common::under_pty(
        &env,
        &format!("{} run --no-tty -- sh -c \"{inject}\"", env.cordon_line()),
        "",
    );
    assert!(
        !sandboxed.contains("INJECTED"),
        "TIOCSTI worked inside the sandbox:\n{sandboxed}"
    );
    assert!(sandboxed.contains("Operation not permitted"), "{sandboxed}");
    // Unless the kernel forbids TIOCSTI for everyone, the same call works outside: the test bites.
    if std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .map(|v| v.trim() == "1")
        .unwrap_or(false)
    {
        assert!(
            control.contains("INJECTED"),
            "control without cordon failed:\n{control}"
        );
    }
});

// ---- Landlock, limits ----

both!(landlock_is_enforced_and_logged, |env: Env| {
    env.ok("true");
    let log = std::fs::read_to_string(&env.audit).unwrap();
    assert!(
        log.contains("\"layer\":\"landlock\"") && log.contains("fully enforced"),
        "{log}"
    );
});

both!(limits_are_enforced, |env: Env| {
    let policy = env.base.join("limits.toml");
    std::fs::write(
        &policy,
        "[limits]\nmemory = \"256M\"\npids = 64\nnofile = 100\n",
    )
    .unwrap();
    env.own(&policy);
    let p = policy.to_str().unwrap();
    let o = env.run_with(&["--policy", p], "ulimit -n");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "100\n", "{}", show(&o));
    let o = env.denied_with(
        &["--policy", p],
        "/usr/bin/python3 -c 'x = bytearray(512 * 1024 * 1024); print(\"allocated\")'",
    );
    assert!(!all_output(&o).contains("allocated"));
    let o = env.run_with(
        &["--policy", p],
        "for i in $(seq 100); do sleep 5 & done; wait",
    );
    assert!(
        all_output(&o).contains("fork"),
        "100 processes started under pids = 64\n{}",
        show(&o)
    );
    // The private /tmp is capped too (tmpfs pages escape RLIMIT_AS).
    let o = env.run_with(
        &["--policy", p],
        "df -B1 --output=size /tmp /dev/shm | tail -n 2",
    );
    let sizes: Vec<u64> = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    assert_eq!(sizes, vec![268435456, 268435456], "{}", show(&o));
    // The log says how each limit was enforced (cgroup for root here, rlimits for a user).
    let log = std::fs::read_to_string(&env.audit).unwrap();
    assert!(log.contains("pids=64 via"), "{log}");
    assert!(log.contains("memory=268435456 via"), "{log}");
});

both!(escapes_fail_with_the_syscall_denials_lifted, |env: Env| {
    // Lift the filter's mount and user-namespace denials (nested_userns also turns Landlock's
    // filesystem rules off, so Landlock plays no part): the escapes must still fail on the
    // kernel's own rules. In the sandbox's namespaces the command holds no capability over
    // them (EPERM); in a user and mount namespace it makes itself, every mount of cordon's view
    // is locked (no umount, no remount read-write), so the masks stay over what they mask.
    let policy = env.base.join("lift.toml");
    std::fs::write(
        &policy,
        "[syscalls]\nallow = [\"mount\", \"umount2\"]\nnested_userns = true\n",
    )
    .unwrap();
    env.own(&policy);
    let p = policy.to_str().unwrap();
    for script in [
        "umount ~/.ssh && cat ~/.ssh/id_ed25519",
        "umount -l ~/.netrc; cat ~/.netrc",
        "mount -o remount,rw / && touch /usr/cordon-x",
        "unshare -rm sh -c 'umount ~/.ssh && cat ~/.ssh/id_ed25519'",
        "unshare -Um sh -c 'umount -l ~/.netrc; cat ~/.netrc'",
    ] {
        let o = env.denied_with(&["--policy", p], script);
        assert!(
            !all_output(&o).contains("SECRET-"),
            "{script}\n{}",
            show(&o)
        );
    }
    // The lift itself applied: the filter did not deny (and log) the umount attempts.
    let o = env.run_with(&["--policy", p], "umount ~/.ssh; true");
    assert_eq!(o.status.code(), Some(0));
    let log = std::fs::read_to_string(&env.audit).unwrap();
    assert!(
        !log.contains("\"syscall\":\"umount2\""),
        "umount2 still filtered: {log}"
    );
    // And Landlock's filesystem rules were not there to help.
    assert!(log.contains("off for nested sandboxes"), "{log}");
});

both!(submodule_git_config_is_reviewed, |env: Env| {
    // A repo with a submodule: a host `git status` reads the submodule's own config, whose
    // core.fsmonitor is a command, so it is host-executed like .git/config.
    let upstream = env.base.join("upstream");
    std::fs::create_dir_all(&upstream).unwrap();
    let git = |dir: &std::path::Path, args: &[&str]| {
        let o = std::process::Command::new("git")
            .args([
                "-c",
                "user.email=t@e.invalid",
                "-c",
                "user.name=t",
                "-c",
                "protocol.file.allow=always",
                "-c",
                "safe.directory=*",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    git(&upstream, &["init", "-q"]);
    git(&upstream, &["commit", "-q", "--allow-empty", "-m", "up"]);
    git(&env.project, &["init", "-q"]);
    git(
        &env.project,
        &["submodule", "add", "-q", upstream.to_str().unwrap(), "sub"],
    );
    env.own(&env.base);
    assert!(env.project.join(".git/modules/sub/config").exists());
    // Writable inside (the git dir is copy-on-write), held for review: not on the host.
    for script in [
        "git config -f .git/modules/sub/config core.fsmonitor 'touch /var/tmp/pwned; false'",
        "echo evil > .git/modules/sub/hooks/post-checkout",
        "mv .git/modules .git/modules-old",
    ] {
        common::assert_ran(&env.run(&common::marked(script)));
    }
    assert!(
        !env.project
            .join(".git/modules/sub/hooks/post-checkout")
            .exists()
    );
    assert!(!env.project.join(".git/modules-old/sub/config").exists());
    assert!(
        !std::fs::read_to_string(env.project.join(".git/modules/sub/config"))
            .unwrap()
            .contains("fsmonitor")
    );
    // Git in the superproject and the submodule still works.
    env.ok("git status --short && git -C sub log --oneline | wc -l");
});
