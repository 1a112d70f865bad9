//! The CLI contract: check, doctor, trust, log, profiles, completions, man, version.

mod common;

use common::{Env, all_output, show};

fn cordon(env: &Env, args: &[&str]) -> std::process::Output {
    env.cordon().args(args).output().unwrap()
}

both!(check_prints_the_effective_policy, |env: Env| {
    let o = cordon(&env, &["check"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("\"{}\"", env.home.join(".ssh").display())),
        "{out}"
    );
    assert!(
        out.contains("[filesystem]") && out.contains("[env]"),
        "{out}"
    );
    let o = cordon(&env, &["check", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("check --json prints JSON");
    assert_eq!(v["project"], env.project.display().to_string());
    assert!(
        v["filesystem"]["deny"]
            .as_array()
            .is_some_and(|d| !d.is_empty())
    );
});

// The built-in policy masks the host's runtime directory wherever `$XDG_RUNTIME_DIR` points (a
// D-Bus bus outside /run, without logind), and the plan says so with its origin; unset, the
// entry is dropped (no literal `$XDG_RUNTIME_DIR` path, no error); one that holds the project
// would refuse every run, so it is dropped with a warning instead.
both!(check_masks_the_runtime_dir_wherever_it_is, |env: Env| {
    let deny = |o: &std::process::Output| -> Vec<(String, String)> {
        assert_eq!(o.status.code(), Some(0), "{}", show(o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["filesystem"]["deny"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                (s("path"), s("origin"))
            })
            .collect()
    };
    let runtime = env.base.join("xdg-runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    env.own(&runtime);
    let check = |dir: &std::path::Path| {
        env.cordon()
            .env("XDG_RUNTIME_DIR", dir)
            .args(["check", "--json"])
            .output()
            .unwrap()
    };
    let set = deny(&check(&runtime));
    assert!(
        set.contains(&(runtime.display().to_string(), "built-in".to_string())),
        "{set:?}"
    );
    let o = env.cordon().args(["check"]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!text.contains("XDG_RUNTIME_DIR"), "{text}");
    let unset = deny(&env.cordon().args(["check", "--json"]).output().unwrap());
    assert!(
        !unset
            .iter()
            .any(|(p, _)| p.contains("XDG") || p.ends_with("xdg-runtime")),
        "{unset:?}"
    );
    assert_eq!(unset.len() + 1, set.len(), "only the runtime dir differs");
    // A runtime directory holding the project: not masked, and a warning says why.
    let o = check(&env.base);
    let held = deny(&o);
    assert!(
        !held
            .iter()
            .any(|(p, _)| *p == env.base.display().to_string()),
        "{held:?}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("$XDG_RUNTIME_DIR") && err.contains("not masked"),
        "{err}"
    );
});

// Broken policies, one message each that name file, line and column and say how to fix it.
both!(
    check_says_which_credentials_resolve_without_values,
    |env: Env| {
        let f = env.base.join("creds.toml");
        let secret = env.base.join("token.txt");
        std::fs::write(&secret, "s3cr3t-value-here\n").unwrap();
        let text = format!(
            "[credentials.here]\nsource = {{ command = [\"cat\", \"{}\"] }}\nhosts = [\"a.test\"]\n\
         [credentials.gone]\nsource = {{ env = \"CORDON_TEST_UNSET_VAR\" }}\nhosts = [\"a.test\"]\n",
            secret.display()
        );
        std::fs::write(&f, text).unwrap();
        env.own(&f);
        env.own(&secret);
        let o = cordon(&env, &["check", f.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(err.contains("credential `here` resolves"), "{err}");
        assert!(err.contains("credential `gone` does not resolve"), "{err}");
        assert!(
            !all_output(&o).contains("s3cr3t-value-here"),
            "{}",
            show(&o)
        );
    }
);

both!(broken_policies_get_located_messages, |env: Env| {
    let cases: &[(&str, &str, &str)] = &[
        ("[filesystem\n", ":1:12", "invalid TOML"),
        (
            "[network]\nmode = \"open\"\n",
            ":2:8",
            "\"gateway\", \"none\" or \"host\"",
        ),
        (
            "[[network.allow]]\nhost = \"a.*.example\"\nports = [443]\n",
            ":2:8",
            "wildcard may only be a leading",
        ),
        (
            "[[network.allow]]\nhost = \"example.com\"\nports = [\"443\"]\n",
            ":3:10",
            "ports = [443]",
        ),
        (
            "[[network.allow]]\nhost = \"example.com\"\n",
            ":1:",
            "no `ports`",
        ),
        (
            "[network]\nallow_ips = [\"10.0.0.0/33\"]\n",
            ":2:14",
            "prefix length",
        ),
        ("[dns]\nupstream = \"localhost\"\n", ":2:12", "ADDRESS:PORT"),
        (
            "[dns]\nhosts = { \"db.test\" = \"not-an-ip\" }\n",
            ":2:",
            "IPv4 or IPv6",
        ),
        ("[[publish]]\nport = 70000\n", ":2:8", "65535"),
        (
            "[credentials.x]\nsource = { env = \"A\", file = \"/b\" }\nhosts = [\"a.test\"]\n",
            ":2:",
            "exactly one source",
        ),
        (
            "[credentials.x]\nsource = { env = \"A\" }\nhosts = [\"a.test\"]\nformat = \"Bearer\"\n",
            ":4:",
            "`{}`",
        ),
        (
            "[credentials.x]\nsource = { env = \"A\" }\nhosts = [\"a.test\"]\nheader = \"x-k\"\nquery = \"key\"\n",
            ":5:",
            "one place",
        ),
        (
            "[dlp]\naction = \"warn\"\n",
            ":2:10",
            "\"deny\", \"ask\", \"log\" or \"off\"",
        ),
        (
            "[[dlp.allow]]\nkinds = [\"jwts\"]\nhosts = [\"a.test\"]\n",
            ":2:",
            "did you mean",
        ),
        (
            "[[dlp.allow]]\nkinds = [\"jwt\"]\n",
            ":1:",
            "has no `hosts`",
        ),
        ("[dlp]\nmax_body_bytes = -1\n", ":2:", "16777216"),
        (
            "[filesystem]\nwriteable = [\"/x\"]\n",
            ":2:1",
            "did you mean `writable`",
        ),
        // Two letters swapped is one typo, in every table.
        (
            "[[network.allow]]\nhots = \"a.test\"\nports = [443]\n",
            ":2:1",
            "did you mean `host`?",
        ),
        (
            "[[http.rule]]\nhots = \"a.test\"\naction = \"allow\"\n",
            ":2:1",
            "did you mean `host`?",
        ),
        (
            "[credentials.x]\nsource = { env = \"A\" }\nhots = [\"a.test\"]\n",
            ":3:1",
            "did you mean `hosts`?",
        ),
        (
            "[credentials.x]\nsource = { evn = \"A\" }\nhosts = [\"a.test\"]\n",
            ":2:12",
            "did you mean `env`?",
        ),
        (
            "[network]\nmdoe = \"none\"\n",
            ":2:1",
            "did you mean `mode`?",
        ),
        ("[[publish]]\nprot = 3000\n", ":2:1", "did you mean `port`?"),
        ("[filesystem]\nwritable = \"/x\"\n", ":2:12", "array"),
        (
            "[filesystem]\nwritable = [\"relative/dir\"]\n",
            ":2:",
            "absolute",
        ),
        ("[filesystem]\ndeny = [\"${FOO}/x\"]\n", ":2:", "FOO"),
        ("[env]\npass = [\"**\"]\n", ":2:", "pass"),
        ("[limits]\nmemory = \"4 gigs\"\n", ":2:10", "memory"),
        (
            "[filesystem]\nwritable = [\"~/x\"]\ndeny = [\"~/x\"]\n",
            ":",
            "deny",
        ),
        (
            "[env]\nset = { LD_PRELOAD = \"/evil.so\" }\n",
            ":2:",
            "LD_PRELOAD",
        ),
        ("[limits]\npids = 0\n", ":2:", "pids"),
        ("[filesystem]\nlandlock = \"maybe\"\n", ":2:", "landlock"),
    ];
    for (i, (text, at, phrase)) in cases.iter().enumerate() {
        let f = env.base.join(format!("bad{i}.toml"));
        std::fs::write(&f, text).unwrap();
        env.own(&f);
        let o = cordon(&env, &["check", f.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "case {i}: {text:?}\n{}", show(&o));
        assert!(
            err.contains(&format!("{}{at}", f.display())),
            "case {i}: location {at} missing:\n{err}"
        );
        assert!(err.contains(phrase), "case {i}: {phrase:?} missing:\n{err}");
        assert!(err.contains("help:"), "case {i}: no fix offered:\n{err}");
        assert!(!err.contains("panicked"), "case {i}: panic:\n{err}");
    }
});

#[test]
fn doctor_reports_every_layer() {
    let env = Env::here();
    let o = cordon(&env, &["doctor"]);
    let out = String::from_utf8_lossy(&o.stdout);
    for feature in [
        "namespaces",
        "Landlock",
        "seccomp-bpf filter",
        "seccomp user notification",
        "/dev/net/tun",
        "overlayfs in a user namespace",
        "cgroup v2 delegation",
        "default policy, end to end",
    ] {
        assert!(
            out.contains(feature),
            "doctor does not mention {feature}:\n{out}"
        );
    }
    assert!(
        out.contains("cordon:"),
        "each line says what cordon does:\n{out}"
    );
    // This machine can enforce the default policy, so doctor must say so and exit 0.
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(out.contains("can be enforced"), "{out}");
}

both!(
    untrusted_project_policy_that_loosens_is_refused,
    |env: Env| {
        let extra = env.home.join("extra");
        std::fs::create_dir_all(&extra).unwrap();
        env.own(&extra);
        env.write("cordon.toml", "[filesystem]\nwritable = [\"~/extra\"]\n");
        let o = env.run("touch ~/extra/x");
        assert_eq!(o.status.code(), Some(125), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("cordon trust") && err.contains("extra"),
            "{err}"
        );
        assert!(!extra.join("x").exists());
        // `check` agrees with `run`: not a pass, and it says what to run.
        let o = cordon(&env, &["check"]);
        assert_eq!(o.status.code(), Some(1), "{}", show(&o));
        let file = env.project.join("cordon.toml");
        let err = String::from_utf8_lossy(&o.stderr);
        let untrusted: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("cordon: untrusted: "))
            .collect();
        assert!(!untrusted.is_empty(), "{}", show(&o));
        for l in untrusted {
            assert!(
                l.starts_with(&format!("cordon: untrusted: {}: ", file.display()))
                    && l.ends_with(&format!("(run `cordon trust {}`)", file.display())),
                "{l}"
            );
        }
        assert!(
            err.ends_with(
                "cordon: `cordon run` refuses this policy until you trust the project policy\n"
            ),
            "{}",
            show(&o)
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("[filesystem]"),
            "the effective policy is still printed\n{}",
            show(&o)
        );

        let o = cordon(&env, &["trust", "cordon.toml"]);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let o = cordon(&env, &["check"]);
        assert_eq!(o.status.code(), Some(0), "trusted now\n{}", show(&o));
        env.ok("touch ~/extra/x");
        assert!(extra.join("x").exists());

        // Any edit revokes the trust.
        env.write(
            "cordon.toml",
            "[filesystem]\nwritable = [\"~/extra\", \"~/notes.txt\"]\n",
        );
        let o = env.run("true");
        assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    }
);

both!(project_policy_may_tighten_without_trust, |env: Env| {
    env.write("cordon.toml", "[filesystem]\ndeny = [\"~/notes.txt\"]\n");
    let o = env.denied("cat ~/notes.txt");
    assert_ne!(
        o.status.code(),
        Some(125),
        "tightening needs no trust\n{}",
        show(&o)
    );
    assert!(!all_output(&o).contains("visible-home-file"));
});

both!(audit_log_is_hash_chained_and_verifiable, |env: Env| {
    env.ok("echo hi");
    let audit = env.audit.to_str().unwrap().to_string();
    let o = cordon(&env, &["log", "--file", &audit, "--verify"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let o = cordon(&env, &["log", "--file", &audit]);
    let out = String::from_utf8_lossy(&o.stdout);
    for must in [
        "[session] start",
        "[filesystem] deny",
        "[landlock]",
        "[process] exit",
        "[session] stop",
    ] {
        assert!(out.contains(must), "{must} missing:\n{out}");
    }
    let text = std::fs::read_to_string(&env.audit).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // Edit one value.
    let edited = text.replacen("session started", "session  started", 1);
    std::fs::write(&env.audit, edited).unwrap();
    let o = cordon(&env, &["log", "--file", &audit, "--verify"]);
    assert_eq!(o.status.code(), Some(1), "edit not detected\n{}", show(&o));
    // Drop a middle line.
    let mut dropped = lines.clone();
    dropped.remove(2);
    std::fs::write(&env.audit, dropped.join("\n") + "\n").unwrap();
    let o = cordon(&env, &["log", "--file", &audit, "--verify"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "removal not detected\n{}",
        show(&o)
    );
    // Truncate the end.
    std::fs::write(&env.audit, lines[..lines.len() - 1].join("\n") + "\n").unwrap();
    let o = cordon(&env, &["log", "--file", &audit, "--verify"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "truncation not detected\n{}",
        show(&o)
    );
});

both!(default_audit_log_lives_in_the_state_dir, |env: Env| {
    let o = env
        .cordon()
        .args(["run", "--no-tty", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let dir = env.base.join("state/cordon/sessions");
    let logs: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(logs.len(), 1, "one log per session in {}", dir.display());
    let o = cordon(&env, &["log", "--list"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("exit 0"),
        "{}",
        show(&o)
    );
    let o = cordon(&env, &["log", "--json"]);
    let first = String::from_utf8_lossy(&o.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    let v: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(v["layer"], "session");
    assert_eq!(v["action"], "start");
    // The sandbox cannot touch the log of its own session.
    env.denied(&format!("echo forged >> {}/*.jsonl", dir.display()));
});

both!(profiles_protect_agent_state_dirs, |env: Env| {
    let claude = env.home.join(".claude");
    std::fs::create_dir_all(&claude).unwrap();
    env.own(&claude);
    // With the profile, the agent may write its state dir, copy-on-write: the host copy only
    // changes once the change is accepted (no terminal here, so it is left pending).
    let o = env.run_with(
        &["--profile", "claude"],
        "echo remembered > ~/.claude/memory.md && cat ~/.claude/memory.md",
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "remembered\n");
    assert!(
        !claude.join("memory.md").exists(),
        "reached the host without review"
    );
    let o = env.cordon().args(["state", "list"]).output().unwrap();
    let id = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let o = env
        .cordon()
        .args(["state", "accept", &id])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        std::fs::read_to_string(claude.join("memory.md")).unwrap(),
        "remembered\n"
    );
    // Without the profile ~/.claude is another agent's state: not in the home's view at all.
    let o = env.attempt("cat ~/.claude/memory.md || echo HIDDEN");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("HIDDEN"),
        "{}",
        show(&o)
    );
    // What the session makes there lands in its layer, is not reviewed, and is discarded.
    let o = env.run("mkdir -p ~/.claude && echo x > ~/.claude/other.md");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(
            "1 path written in the home outside protected state was not kept (~/.claude 1)"
        ),
        "{}",
        show(&o)
    );
    assert!(!claude.join("other.md").exists(), "reached the host");
    let o = env.run_with(&["--profile", "no-such-agent"], "true");
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("claude"),
        "lists the profiles\n{}",
        show(&o)
    );
});

#[test]
fn completions_man_and_version() {
    let bin = env!("CARGO_BIN_EXE_cordon");
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).output().unwrap();
    let o = run(&["completions", "bash"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("_cordon"));
    let o = run(&["man"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains(".TH cordon"));
    let o = run(&["--version"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("cordon {}", env!("CARGO_PKG_VERSION"))
    );
    let o = run(&["run", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(
        help.contains("125") && help.contains("127") && help.contains("128+N"),
        "{help}"
    );
    let o = run(&["no-such-subcommand"]);
    assert_eq!(o.status.code(), Some(2));
}

both!(log_follow_tracks_a_live_session, |env: Env| {
    let mut run = env
        .cordon()
        .args(["run", "--no-tty", "--", "sh", "-c", "sleep 1.5; exit 4"])
        .spawn()
        .unwrap();
    // Wait for the session's log to exist, then follow it from another process.
    let dir = env.base.join("state/cordon/sessions");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let session = loop {
        if let Some(f) = std::fs::read_dir(&dir)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
        {
            break f.path().file_stem().unwrap().to_string_lossy().into_owned();
        }
        assert!(std::time::Instant::now() < end, "no session log appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let follow = env
        .cordon()
        .args(["log", "--follow", "--session", &session])
        .output()
        .unwrap();
    assert_eq!(run.wait().unwrap().code(), Some(4));
    let out = String::from_utf8_lossy(&follow.stdout);
    assert!(
        out.contains("[session] start") && out.contains("[session] stop"),
        "{out}"
    );
    assert!(out.contains("code=4"), "{out}");
    assert_eq!(
        follow.status.code(),
        Some(0),
        "follow ends with the session"
    );
});

// ---- everyday papercuts (#17) ---------------------------------------------------------------

/// `cordon ARGS` with its stdout a pipe nobody reads any more, as `cordon log | head` after
/// `head` left.
fn into_closed_pipe(env: &Env, args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    env.cordon()
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
}

both!(a_closed_stdout_ends_quietly, |env: Env| {
    use std::os::unix::process::ExitStatusExt;
    env.ok("echo hi");
    let o = cordon(&env, &["run", "--no-tty", "--", "true"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "a session in the state dir\n{}",
        show(&o)
    );
    let audit = env.audit.to_str().unwrap().to_string();
    for args in [
        &["log", "--file", &audit][..],
        &["log", "--file", &audit, "--json"],
        &["log", "--file", &audit, "--verify"],
        &["log", "--list"],
        &["check"],
        &["check", "--json"],
        &["state", "list"],
        &["cache", "list"],
        &["completions", "bash"],
        &["man"],
        &["approve", "--list"],
    ] {
        let prints = !cordon(&env, args).stdout.is_empty();
        let o = into_closed_pipe(&env, args);
        // As `git log | head`: SIGPIPE ends it, with nothing on stderr.
        if prints {
            assert_eq!(
                o.status.signal(),
                Some(libc::SIGPIPE),
                "cordon {args:?}\n{}",
                show(&o)
            );
        } else {
            assert_eq!(o.status.code(), Some(0), "cordon {args:?}\n{}", show(&o));
        }
        assert_eq!(
            String::from_utf8_lossy(&o.stderr),
            "",
            "cordon {args:?}\n{}",
            show(&o)
        );
    }
});

both!(
    an_unknown_option_before_the_command_is_a_usage_error,
    |env: Env| {
        let o = cordon(&env, &["run", "--bogus", "--", "true"]);
        assert_eq!(o.status.code(), Some(125), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.starts_with("error: unexpected argument '--bogus' found\n"),
            "{err}"
        );
        assert!(err.contains("Usage: cordon run"), "{err}");
        assert!(!err.contains("not found"), "--bogus was run\n{err}");
        let o = cordon(&env, &["run", "--verbos", "--", "true"]);
        assert_eq!(o.status.code(), Some(125), "{}", show(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr)
                .contains("tip: a similar argument exists: '--verbose'"),
            "{}",
            show(&o)
        );
        // The command's own flags stay its own, after `--` or not.
        let o = cordon(
            &env,
            &[
                "run",
                "--no-tty",
                "--",
                "sh",
                "-c",
                "echo \"$@\"",
                "sh",
                "--its-own",
                "-x",
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout), "--its-own -x\n");
        let o = cordon(&env, &["run", "--no-tty", "sh", "-c", "exit 3", "--x"]);
        assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    }
);

both!(log_errors_are_said_once_and_counted_right, |env: Env| {
    let gone = env.base.join("no-such.jsonl");
    let o = cordon(&env, &["log", "--file", gone.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!(
            "cordon: {}: No such file or directory (os error 2)\n",
            gone.display()
        )
    );
    // One problem is `1 problem`.
    env.ok("true");
    let text = std::fs::read_to_string(&env.audit).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(&env.audit, lines[..lines.len() - 1].join("\n") + "\n").unwrap();
    let audit = env.audit.to_str().unwrap();
    let o = cordon(&env, &["log", "--file", audit, "--verify"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        out.lines().last(),
        Some(format!("{audit}: verification FAILED (1 problem)").as_str()),
        "{out}"
    );
});

both!(a_missing_agent_state_dir_gets_a_hint, |env: Env| {
    // Without the copy-on-write home the home is read-only: the agent cannot make ~/.claude.
    let pol = env.base.join("readonly-home.toml");
    std::fs::write(&pol, "[state]\nhome = \"readonly\"\n").unwrap();
    env.own(&pol);
    let o = env.run_with(
        &["--profile", "claude", "--policy", pol.to_str().unwrap()],
        "true",
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.lines().any(|l| l
            == "cordon: warning: ~/.claude, ~/.claude.json, ~/.config/claude do not exist and \
                the home is read-only in this sandbox, so the agent cannot create them: create \
                what it needs on the host first (`mkdir -p ~/.claude` for a directory), or run \
                the agent once outside cordon"),
        "{err}"
    );
    // Once it exists, no warning.
    std::fs::create_dir_all(env.home.join(".claude")).unwrap();
    env.own(&env.home.join(".claude"));
    let o = env.run_with(
        &["--profile", "claude", "--policy", pol.to_str().unwrap()],
        "true",
    );
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("~/.claude,"),
        "{}",
        show(&o)
    );
});

/// `cordon run --no-tty -- ARGV` with `envs` added; ARGV[0] is a stand-in in the project.
fn run_standin(env: &Env, argv: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    let bin = env.project.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["codex", "gemini"] {
        let p = bin.join(name);
        std::fs::write(&p, "#!/bin/sh\necho STANDIN \"$@\"\n").unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    env.own(&bin);
    let _ = std::fs::remove_file(&env.audit);
    let prog = bin.join(argv[0]);
    env.cordon()
        .envs(envs.iter().copied())
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .arg("--")
        .arg(&prog)
        .args(&argv[1..])
        .output()
        .unwrap()
}

/// The start-up line of a login that cannot finish inside (a browser redirect to the
/// sandbox's loopback), if it was printed.
fn login_line(o: &std::process::Output) -> Option<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .find(|l| l.starts_with("cordon: login: "))
        .map(str::to_string)
}

// `codex login` (ChatGPT's browser login, redirected to localhost:1455) cannot finish inside:
// cordon says so at start and names `codex login --device-auth`; the device flow, an API-key
// login and any other codex command get no such line. The profile is detected from the
// stand-in's name, and the command still runs.
both!(codex_browser_login_is_named_at_start, |env: Env| {
    let o = run_standin(&env, &["codex", "login"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("STANDIN login"),
        "{}",
        show(&o)
    );
    let line = login_line(&o).unwrap_or_else(|| panic!("no login line: {}", show(&o)));
    assert!(line.contains("codex login --device-auth"), "{line}");
    assert!(line.contains("localhost:1455"), "{line}");
    for argv in [
        &["codex", "login", "--device-auth"][..],
        &["codex", "login", "--with-api-key"],
        &["codex", "exec", "hello"],
    ] {
        let o = run_standin(&env, argv, &[]);
        assert_eq!(o.status.code(), Some(0), "{argv:?}: {}", show(&o));
        assert_eq!(login_line(&o), None, "{argv:?}: {}", show(&o));
    }
});

// A first gemini run with no login on the host offers Google's browser login (redirected to a
// localhost port): cordon says so at start and names `NO_BROWSER=true gemini`. With a login
// file on the host, an API key, or NO_BROWSER=true, no line.
both!(
    gemini_first_run_without_a_login_is_named_at_start,
    |env: Env| {
        let o = run_standin(&env, &["gemini"], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let line = login_line(&o).unwrap_or_else(|| panic!("no login line: {}", show(&o)));
        assert!(line.contains("NO_BROWSER=true gemini"), "{line}");
        for envs in [
            &[("GEMINI_API_KEY", "AIzaSyStandInKeyNotReal0123456789abcdef")][..],
            &[("NO_BROWSER", "true")],
        ] {
            let o = run_standin(&env, &["gemini"], envs);
            assert_eq!(o.status.code(), Some(0), "{envs:?}: {}", show(&o));
            assert_eq!(login_line(&o), None, "{envs:?}: {}", show(&o));
        }
        let dir = env.home.join(".gemini");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
        dir.join("oauth_creds.json"),
        r#"{"access_token":"ya29.CanaryCliHint0123456789abcdefghijklmnop","token_type":"Bearer","expiry_date":4102444800000}"#,
    )
    .unwrap();
        env.own(&env.home);
        let o = run_standin(&env, &["gemini"], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert_eq!(login_line(&o), None, "{}", show(&o));
    }
);
