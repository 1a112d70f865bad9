//! Remembering an answer, black-box: `cordon approve ID --allow --always` writes the rule into
//! the user's policy file, the held command runs, `cordon check` takes the file, and the next
//! session runs the same command without a question. (The dashboard's way to the same writing:
//! `ui/remember.rs`.)

mod common;

use std::process::{Command, Stdio};

use common::{Env, all_output, approve, runtime_dir, show, wait_for_question};

/// `cordon run --no-tty --audit AUDIT -- sh -c SCRIPT` with the tests' approval directory.
fn session(env: &Env, script: &str) -> Command {
    let mut c = env.cordon();
    c.env("XDG_RUNTIME_DIR", runtime_dir(env))
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--", "sh", "-c", script]);
    c
}

both!(
    allow_always_writes_the_rule_and_the_next_session_is_not_asked,
    |env: Env| {
        // The user's own policy asks; the rule appended after it decides first
        // (`[[exec.rule]]` tables come before a file's `ask` list).
        let user = env.home.join(".config/cordon/cordon.toml");
        let theirs = format!(
            "{}# ask before touching\n[exec]\nask = [\"touch remembered*\"]   # mine\n",
            common::SHOW_NOTES
        );
        std::fs::write(&user, &theirs).unwrap();
        env.own(&user);
        let child = session(&env, "touch remembered-file && echo made")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (id, _) = wait_for_question(&env, "touch remembered-file");
        let sid = id.split('#').next().unwrap().to_string();

        // No terminal and no --yes: the diff is shown, nothing is written, the question waits.
        let o = approve(&env, &[&id, "--allow", "--always"]);
        assert_eq!(o.status.code(), Some(1), "{}", show(&o));
        assert!(all_output(&o).contains("--yes"), "{}", show(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("+pattern = \"touch remembered-file\""),
            "{}",
            show(&o)
        );
        assert_eq!(std::fs::read_to_string(&user).unwrap(), theirs);

        let o = approve(&env, &[&id, "--allow", "--always", "--yes"]);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&format!("+++ {}\n", user.display())) && out.contains("+[[exec.rule]]\n"),
            "{}",
            show(&o)
        );
        assert!(out.contains(&format!("allowed {id}: ")), "{}", show(&o));
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(env.project.join("remembered-file").exists());

        // What the user wrote is kept byte for byte; the rule follows, with who, when, what.
        let now = std::fs::read_to_string(&user).unwrap();
        let added = now
            .strip_prefix(&format!("{theirs}\n"))
            .unwrap_or_else(|| panic!("the user's text is not kept as it was:\n{now}"));
        let (comment, rule) = added.split_once('\n').unwrap();
        assert!(
            comment.starts_with("# added by cordon approve on 20")
                && comment.ends_with(&format!(" for session {sid}: touch remembered-file")),
            "{comment}"
        );
        assert_eq!(
            rule,
            "[[exec.rule]]\npattern = \"touch remembered-file\"\naction = \"allow\"\n"
        );

        // `cordon check` takes the file as written.
        let o = env.cordon().arg("check").output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("pattern = \"touch remembered-file\""),
            "{}",
            show(&o)
        );

        // The next session runs it with no question.
        std::fs::remove_file(env.project.join("remembered-file")).unwrap();
        std::fs::remove_file(&env.audit).unwrap();
        let o = session(&env, "touch remembered-file && echo again")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(env.project.join("remembered-file").exists());
        assert!(
            !all_output(&o).contains("waiting for approval"),
            "{}",
            show(&o)
        );
        let log = std::fs::read_to_string(&env.audit).unwrap();
        assert!(!log.contains("\"action\":\"ask\""), "{log}");
    }
);

both!(
    a_rule_above_that_decides_first_is_named_and_nothing_is_written,
    |env: Env| {
        // The user's own rule table asks first: an appended rule could never decide, so the
        // answer writes nothing and says which rule is in the way.
        let user = env.home.join(".config/cordon/cordon.toml");
        let theirs = format!(
            "{}[[exec.rule]]\npattern = \"touch firstrule*\"\naction = \"ask\"\n",
            common::SHOW_NOTES
        );
        std::fs::write(&user, &theirs).unwrap();
        env.own(&user);
        let mut child = session(&env, "touch firstrule-file")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (id, _) = wait_for_question(&env, "touch firstrule-file");
        let o = approve(&env, &[&id, "--allow", "--always", "--yes"]);
        assert_eq!(o.status.code(), Some(1), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("exec rule \"touch firstrule*\" (ask)") && err.contains("decides first"),
            "{}",
            show(&o)
        );
        assert_eq!(std::fs::read_to_string(&user).unwrap(), theirs);
        // The question still waits, and an answer without a rule lets it go.
        let o = approve(&env, &[&id, "--allow"]);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(child.wait().unwrap().success());
    }
);

both!(
    an_http_answer_writes_its_method_host_port_and_path,
    |env: Env| {
        use common::net::{Server, policy, setup, spawn_run, wait_limited, www};
        use std::time::Duration;
        if !common::need(&["curl"], "this test's client") {
            return;
        }
        setup(&env);
        let root = www(&env, "asked", "unused");
        std::fs::create_dir_all(root.join("ask")).unwrap();
        for f in ["a", "b"] {
            std::fs::write(root.join(format!("ask/{f}.txt")), format!("asked-{f}")).unwrap();
        }
        env.own(&root);
        let srv = Server::http(&root);
        let (name, p) = ("api.example.test", srv.port);
        // The asking rule is in the session's `--policy` file, merged after the user's: the
        // user's remembered rule comes first.
        let pol = policy(
            &env,
            &format!(
                "[dns]\nhosts = {{ \"{name}\" = \"127.0.0.1\" }}\n\
                 [[network.allow]]\nhost = \"{name}\"\nports = [{p}]\n\
                 [[http.rule]]\nname = \"a-person-decides\"\nhost = \"{name}\"\npath = \"/ask/*\"\naction = \"ask\"\n\
                 [exec]\nask_timeout = 3\n"
            ),
        );
        let get = |f: &str| {
            format!(
                "echo {f} $(curl -s --max-time 30 -w ' %{{http_code}}' 'http://{name}:{p}/ask/{f}.txt?page=2&sort=new')"
            )
        };
        let child = spawn_run(&env, &pol, &get("a"));
        let (id, _) = wait_for_question(&env, "/ask/a.txt");
        let o = approve(&env, &[&id, "--allow", "--always", "--yes"]);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let o = wait_limited(child, Duration::from_secs(60));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("a asked-a 200"),
            "{}",
            show(&o)
        );
        let user = env.home.join(".config/cordon/cordon.toml");
        let now = std::fs::read_to_string(&user).unwrap();
        // The query is not part of the rule (nor its values, in the comment).
        assert!(
            now.ends_with(&format!(
                "[[http.rule]]\nhost = \"{name}\"\nport = {p}\nmethods = [\"GET\"]\npath = \"/ask/a.txt\"\naction = \"allow\"\n"
            )),
            "{now}"
        );
        assert!(
            now.contains(&format!(
                ": GET http://{name}:{p}/ask/a.txt?page=…&sort=…\n"
            )),
            "{now}"
        );
        // The next session: a is not asked, b still is (and, unanswered, denied).
        let o = wait_limited(
            spawn_run(&env, &pol, &[get("a"), get("b")].join("\n")),
            Duration::from_secs(60),
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.lines().any(|l| l == "a asked-a 200"), "{}", show(&o));
        assert!(
            out.lines()
                .any(|l| l.starts_with("b ") && l.ends_with(" 403")),
            "{}",
            show(&o)
        );
        // a was decided by the remembered rule, at once; b waited for a person.
        let log = std::fs::read_to_string(&env.audit).unwrap();
        let event = |f: &str| {
            log.lines()
                .find(|l| l.contains("\"layer\":\"http\"") && l.contains(&format!("/ask/{f}.txt")))
                .unwrap_or_else(|| panic!("no event for {f}: {log}"))
                .to_string()
        };
        let rule = format!("\"rule\":\"http.rule {}:", user.display());
        assert!(event("a").contains(&rule), "{}", event("a"));
        assert!(
            event("b").contains("nobody answered in time"),
            "{}",
            event("b")
        );
    }
);

/// `cordon approve ARGS` as a shell line for [`common::under_pty`], with the tests' approval
/// directory.
fn approve_line(env: &Env, args: &str) -> String {
    format!(
        "XDG_RUNTIME_DIR={} {} approve {args}",
        runtime_dir(env).display(),
        env.cordon_line()
    )
}

both!(
    on_a_terminal_the_diff_is_confirmed_before_writing,
    |env: Env| {
        if !common::need(&["script"], "a terminal for cordon approve") {
            return;
        }
        let user = env.home.join(".config/cordon/cordon.toml");
        let theirs = format!("{}[exec]\nask = [\"touch asked*\"]\n", common::SHOW_NOTES);
        std::fs::write(&user, &theirs).unwrap();
        env.own(&user);
        let child = session(&env, "touch asked-file")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (id, _) = wait_for_question(&env, "touch asked-file");
        // Declined: nothing written, the question still waits.
        let line = approve_line(&env, &format!("{id} --allow --always"));
        let out = common::under_pty_answering(&env, &line, "[y/N]", "n\n");
        assert!(
            out.contains("+pattern = \"touch asked-file\"") && out.contains("not written"),
            "{out}"
        );
        assert_eq!(std::fs::read_to_string(&user).unwrap(), theirs);
        // Listed without an id, each question offers the rule; `w`, then `y` to the diff.
        let out = common::under_pty(&env, &approve_line(&env, ""), "w\ny\n");
        assert!(out.contains("allow [w]ith a rule in your policy"), "{out}");
        assert!(out.contains(&format!("allowed {id}")), "{out}");
        let now = std::fs::read_to_string(&user).unwrap();
        assert!(now.starts_with(&theirs), "{now}");
        assert!(
            now.ends_with("[[exec.rule]]\npattern = \"touch asked-file\"\naction = \"allow\"\n"),
            "{now}"
        );
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    }
);

both!(
    allow_for_an_hour_writes_until_and_the_next_session_is_not_asked,
    |env: Env| {
        let user = env.home.join(".config/cordon/cordon.toml");
        let theirs = format!("{}[exec]\nask = [\"touch hour*\"]\n", common::SHOW_NOTES);
        std::fs::write(&user, &theirs).unwrap();
        env.own(&user);
        let child = session(&env, "touch hour-file")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (id, _) = wait_for_question(&env, "touch hour-file");
        let o = approve(&env, &[&id, "--allow", "--for", "1h", "--yes"]);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let now = std::fs::read_to_string(&user).unwrap();
        let until = now.lines().last().unwrap();
        assert!(
            until.starts_with("until = \"20") && until.ends_with("Z\""),
            "{now}"
        );
        std::fs::remove_file(&env.audit).unwrap();
        let o = session(&env, "touch hour-file && echo again")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(
            !all_output(&o).contains("waiting for approval"),
            "{}",
            show(&o)
        );
    }
);
