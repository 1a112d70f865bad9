//! What `cordon explain` and `cordon check` say against what a real session does: for each
//! kind of path (project file, git metadata, a hook, a host-executed name not there yet,
//! the agent's state, a cache, a home file shown, one the view hides, a masked one, one
//! outside every bind, the private `/tmp`), the answer is read for where a write ends, the
//! same write is made in a session, and the host is checked after exit.

mod common;

use std::path::PathBuf;
use std::process::Output;

use common::{Env, git, show};

/// Where an answer says a write ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Bound read-write: on the host at once.
    ReachesHost,
    /// Git data: applied at exit without asking.
    AppliedUnasked,
    /// Held for review at exit (not on the host after a session without a terminal).
    Reviewed,
    /// The copy-on-write home: gone at exit.
    Discarded,
    /// The project's own cache layer.
    Cache,
    /// The sandbox's own `/tmp`.
    Private,
    /// Refused inside.
    Denied,
}

/// The fate an answer states; the test fails on an answer that states none.
fn fate_of(answer: &str) -> Fate {
    let why = answer
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("why: "))
        .unwrap_or_else(|| panic!("no why line:\n{answer}"));
    if answer.lines().next().is_some_and(|l| l.ends_with(": deny")) {
        return Fate::Denied;
    }
    let says = |s: &str| why.contains(s);
    if says("writes reach the host") {
        Fate::ReachesHost
    } else if says("applied to the host at exit without asking") {
        Fate::AppliedUnasked
    } else if says("wait for review") || says("waits for review") || says("reviewed") {
        Fate::Reviewed
    } else if says("discarded at exit") {
        Fate::Discarded
    } else if says("kept for this project's next session") {
        Fate::Cache
    } else if says("writes never reach the host") {
        Fate::Private
    } else {
        panic!("the answer states no fate:\n{answer}")
    }
}

struct Case {
    /// The path asked about, as the user would type it.
    path: PathBuf,
    /// What the answer must say.
    want: Fate,
}

fn explain(env: &Env, args: &[&str]) -> Output {
    env.cordon()
        .args(["explain", "--profile", "claude"])
        .args(args)
        .output()
        .unwrap()
}

both!(
    explain_says_what_a_session_does_with_each_kind_of_path,
    |env: Env| {
        if !common::need(&["git"], "a project with a git repository") {
            return;
        }
        let (home, proj) = (env.home.clone(), env.project.clone());
        git(&proj, &["init", "-q", "-b", "main"]);
        std::fs::write(proj.join("file.txt"), "v1\n").unwrap();
        git(&proj, &["add", "file.txt"]);
        git(&proj, &["commit", "-qm", "first"]);
        let before = git(&proj, &["rev-parse", "main"]);
        std::fs::create_dir_all(home.join(".claude")).unwrap();
        std::fs::write(home.join(".claude/settings.json"), "{}\n").unwrap();
        std::fs::write(home.join(".bashrc"), "# host rc\n").unwrap();
        std::fs::write(home.join("private.txt"), "not shown\n").unwrap();
        env.own(&env.base);
        let cases = [
            (proj.join("src.txt"), Fate::ReachesHost),
            (proj.join(".git/refs/heads/main"), Fate::AppliedUnasked),
            (proj.join(".git/hooks/pre-commit"), Fate::Reviewed),
            (proj.join(".git/config"), Fate::Reviewed),
            (proj.join(".envrc"), Fate::Reviewed),
            (home.join(".claude/settings.json"), Fate::Reviewed),
            (home.join(".cargo/registry/cordon-explain"), Fate::Cache),
            (home.join(".bashrc"), Fate::Discarded),
            (home.join("private.txt"), Fate::Discarded),
            // Denied and not in the view (no shown ssh file): a write is the session's own.
            (home.join(".ssh/id_ed25519"), Fate::Discarded),
            // Denied and masked outside the home.
            (PathBuf::from("/etc/shadow"), Fate::Denied),
            (PathBuf::from("/usr/lib/cordon-explain-test"), Fate::Denied),
            (PathBuf::from("/tmp/cordon-explain-test"), Fate::Private),
        ]
        .map(|(path, want)| Case { path, want });
        // Reads first: what the view hides or masks is not there; what it shows is the host's.
        let mut script = String::from(
            "cat ~/private.txt 2>/dev/null || echo R1-refused\n\
             cat ~/.ssh/id_ed25519 2>/dev/null || echo R2-refused\n\
             grep -q 'host rc' ~/.bashrc && echo R-shown\n",
        );
        for (i, c) in cases.iter().enumerate() {
            let o = explain(&env, &["--write", c.path.to_str().unwrap()]);
            let answer = String::from_utf8_lossy(&o.stdout).into_owned();
            let fate = fate_of(&answer);
            assert_eq!(fate, c.want, "{}: {}", c.path.display(), show(&o));
            let allowed = fate != Fate::Denied;
            assert_eq!(
                o.status.code(),
                Some(if allowed { 0 } else { 1 }),
                "{}",
                show(&o)
            );
            if c.path.ends_with("refs/heads/main") {
                // Git writes the ref: a commit.
                script.push_str(
                    "echo v2 > file.txt && git -c user.name=t -c user.email=t@example.invalid \
                 commit -qam second && git rev-parse main > /tmp/head && echo W1-ok\n",
                );
                continue;
            }
            script.push_str(&format!(
                "mkdir -p '{dir}' 2>/dev/null; (echo written-{i} > '{p}') 2>/dev/null && \
             echo W{i}-ok || echo W{i}-refused\n",
                dir = c.path.parent().unwrap().display(),
                p = c.path.display()
            ));
        }
        script.push_str("cat /tmp/head\n");
        for (p, allowed) in [
            (home.join("private.txt"), false),
            (home.join(".ssh/id_ed25519"), false),
            (home.join(".bashrc"), true),
        ] {
            let o = explain(&env, &[p.to_str().unwrap()]);
            assert_eq!(
                o.status.code(),
                Some(if allowed { 0 } else { 1 }),
                "{}",
                show(&o)
            );
        }
        let o = env.run_with(&["--profile", "claude"], &common::marked(&script));
        common::assert_ran(&o);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let head_inside = out.lines().last().unwrap_or_default().to_string();
        assert!(
            out.contains("R1-refused")
                && out.contains("R2-refused")
                && out.contains("R-shown")
                && !out.contains("SECRET")
                && !out.contains("not shown"),
            "{}",
            show(&o)
        );
        for (i, c) in cases.iter().enumerate() {
            let on_host = std::fs::read_to_string(&c.path).unwrap_or_default();
            let landed = on_host.contains(&format!("written-{i}"));
            let what = format!("{} ({:?})\n{}", c.path.display(), c.want, show(&o));
            match c.want {
                Fate::AppliedUnasked => {
                    assert!(
                        out.contains(&format!("W{i}-ok")),
                        "the commit failed: {what}"
                    );
                    assert_eq!(git(&proj, &["rev-parse", "main"]), head_inside, "{what}");
                    assert_ne!(head_inside, before, "{what}");
                }
                Fate::Denied => assert!(out.contains(&format!("W{i}-refused")), "{what}"),
                Fate::ReachesHost => {
                    assert!(out.contains(&format!("W{i}-ok")) && landed, "{what}")
                }
                Fate::Reviewed | Fate::Discarded | Fate::Cache | Fate::Private => {
                    assert!(out.contains(&format!("W{i}-ok")), "refused inside: {what}");
                    assert!(!landed, "on the host after exit: {what}");
                }
            }
        }
        // Held, not lost: the reviewed writes are the session's pending changes.
        let o = env.cordon().args(["state", "list"]).output().unwrap();
        let listed = String::from_utf8_lossy(&o.stdout);
        assert!(listed.contains("pending"), "{}", show(&o));

        // `cordon check` lists the same files as copy-on-write and reviewed, not read-only.
        let o = env.cordon().arg("check").output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        let line = |name: &str| {
            text.lines()
                .find(|l| l.contains(&format!("{}\"", proj.join(name).display())))
                .unwrap_or_else(|| panic!("{name} not listed:\n{text}"))
                .to_string()
        };
        assert!(
            line(".git/hooks").contains("copy-on-write, its changes reviewed at exit"),
            "{text}"
        );
        assert!(
            line(".envrc").contains("taken off the host at exit and reviewed"),
            "{text}"
        );
        assert!(!line("cordon.toml").contains("in a session"), "{text}");
    }
);

both!(a_relative_path_is_taken_from_here, |env: Env| {
    std::fs::create_dir_all(env.project.join("src")).unwrap();
    env.own(&env.project);
    let o = explain(&env, &["--write", "src/main.rs"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        out.starts_with(&format!(
            "write {}: allow",
            env.project.join("src/main.rs").display()
        )),
        "{out}"
    );
});

// Hosts and commands: each answer's allow or deny is what the session then does with a
// real connection to a loopback listener and a real command.
both!(
    explain_says_what_a_session_does_with_hosts_and_commands,
    |env: Env| {
        if !common::need(&["git", "python3"], "connections and commands in a session") {
            return;
        }
        common::net::tun_ready();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = listener.local_addr().unwrap().port();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = other.local_addr().unwrap().port();
        for l in [listener, other] {
            std::thread::spawn(move || {
                for mut s in l.incoming().flatten() {
                    let _ = std::io::Write::write_all(&mut s, b"hello\n");
                }
            });
        }
        let policy = common::net::policy(
            &env,
            &common::net::named(
                &["ok.test", "nope.test"],
                &[("ok.test", &[open])],
                "[exec]\ndeny = [\"git push *\"]\n",
            ),
        );
        let asks: Vec<(Vec<String>, String)> = [
        (format!("ok.test:{open}"), true),
        (format!("ok.test:{closed}"), false),
        (format!("nope.test:{open}"), false),
    ]
    .into_iter()
    .map(|(hp, _)| {
        let (h, p) = hp.split_once(':').unwrap();
        (
            vec![hp.clone()],
            format!(
                "/usr/bin/python3 -c \"import socket; s = socket.create_connection(('{h}', {p}), \
                 timeout=5); print(s.recv(6).decode().strip())\" 2>/dev/null"
            ),
        )
    })
    .chain([
        (
            ["--", "git", "push", "origin", "main"].map(String::from).to_vec(),
            // 126: the shell's status for a program execve refused (the exec rule's EPERM).
            "git push origin main 2>/dev/null; [ $? -eq 126 ] || echo hello"
                .to_string(),
        ),
        (
            ["--", "git", "--version"].map(String::from).to_vec(),
            "git --version >/dev/null && echo hello".to_string(),
        ),
    ])
    .collect();
        let mut script = String::new();
        for (i, (_, try_it)) in asks.iter().enumerate() {
            script.push_str(&format!("echo \"T{i}=$({try_it})\"\n"));
        }
        let o = common::net::wait_limited(
            common::net::spawn_run(&env, &policy, &common::marked(&script)),
            std::time::Duration::from_secs(120),
        );
        common::assert_ran(&o);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        for (i, (args, _)) in asks.iter().enumerate() {
            let e = env
                .cordon()
                .args(["explain", "--policy", &policy])
                .args(args)
                .output()
                .unwrap();
            let said = e.status.code() == Some(0);
            let did = out.contains(&format!("T{i}=hello"));
            assert_eq!(
                said,
                did,
                "{args:?}: explain says {} but the session {}\n{}\n{}",
                if said { "allow" } else { "deny" },
                if did { "did it" } else { "was refused" },
                show(&e),
                show(&o)
            );
        }
    }
);

// `[state] home = "readonly"`: the same view, bound read-only. explain says so, and the
// session agrees.
both!(
    a_read_only_home_is_answered_as_the_session_shows_it,
    |env: Env| {
        env.write_home(
            ".config/cordon/cordon.toml",
            &format!("{}[state]\nhome = \"readonly\"\n", common::SHOW_NOTES),
        );
        std::fs::write(env.home.join("private.txt"), "not shown\n").unwrap();
        env.own(&env.home);
        let hidden = env.home.join("private.txt");
        let notes = env.home.join("notes.txt");
        let o = explain(&env, &[hidden.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{}", show(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("not in the home's view"),
            "{}",
            show(&o)
        );
        let o = explain(&env, &["--write", notes.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{}", show(&o));
        let o = explain(&env, &[notes.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let o = env.attempt(
            "cat ~/private.txt 2>/dev/null || echo R-refused; cat ~/notes.txt; \
         (echo x >> ~/notes.txt) 2>/dev/null || echo W-refused",
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("R-refused")
                && out.contains("visible-home-file")
                && out.contains("W-refused"),
            "{}",
            show(&o)
        );
    }
);
