//! `cordon explain`: the decision, the rule and its origin, and the lines that would allow a
//! denial, for URLs, connections, paths and commands — outside a session and inside one,
//! where it reads the session's own (redacted) policy. Exit 0 allowed, 1 not, 125 bad input.

mod common;

use std::process::Output;

use common::{Env, show};

/// A credential whose value comes from a command line: the command's arguments are in the
/// plan, so the sandbox's copy of the policy must redact them.
const CMD_SECRET: &str = "cmdsecret-5b1f0a9e77";
/// A credential's real value, from the host's environment.
const ENV_SECRET: &str = "envsecret-c04d2e81aa";

/// The user's own policy (trusted: not the project's), with one rule of each kind.
fn policy(env: &Env) {
    let dir = env.home.join(".config/cordon");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("cordon.toml"),
        format!(
            "[[http.rule]]\nname = \"no-uploads\"\nhost = \"pypi.org\"\nmethods = [\"POST\"]\n\
             action = \"deny\"\n\
             [exec]\ndeny = [\"git push *\"]\nask = [\"npm publish *\"]\n\
             [credentials.fromcmd]\nenv = \"FROMCMD\"\nsource = {{ command = [\"printf\", \"{CMD_SECRET}\"] }}\n\
             hosts = [\"api.example.test\"]\nheader = \"x-a\"\n\
             [credentials.fromenv]\nenv = \"FROMENV\"\nsource = {{ env = \"CORDON_TEST_EXPLAIN_KEY\" }}\n\
             hosts = [\"api.example.test\"]\nheader = \"x-b\"\n"
        ),
    )
    .unwrap();
    env.own(&env.base);
}

fn explain(env: &Env, args: &[&str]) -> Output {
    env.cordon()
        .arg("explain")
        .args(args)
        .env("CORDON_TEST_EXPLAIN_KEY", ENV_SECRET)
        .output()
        .unwrap()
}

/// `sh -c SCRIPT` in a session, with the credential's variable set on the host.
fn inside(env: &Env, script: &str) -> Output {
    let _ = std::fs::remove_file(&env.audit);
    env.cordon()
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--", "sh", "-c", script])
        .env("CORDON_TEST_EXPLAIN_KEY", ENV_SECRET)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The decision and rule lines of an explanation (what must match inside and out).
fn verdict(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with("  (the policy of this session"))
        .map(str::to_string)
        .collect()
}

both!(
    a_request_is_decided_by_the_http_rule_with_its_origin,
    |env: Env| {
        policy(&env);
        let o = explain(&env, &["POST", "https://pypi.org/upload/x"]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(1), "{}", show(&o));
        assert!(
            out.starts_with("POST https://pypi.org/upload/x: deny\n"),
            "{out}"
        );
        assert!(out.contains("rule: http.rule no-uploads"), "{out}");
        assert!(
            out.contains("from: ") && out.contains("cordon/cordon.toml:1"),
            "{out}"
        );
        assert!(
            out.contains("[[http.rule]]") && out.contains("action = \"allow\""),
            "{out}"
        );
        // A GET to the same host is allowed by the built-in [[network.allow]].
        let o = explain(&env, &["https://pypi.org/simple/"]);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(stdout(&o).contains(": allow\n"), "{}", show(&o));
        // A host no rule names: refused at the connection, with the line that opens it.
        let o = explain(&env, &["https://nothing-allows.example/"]);
        assert_eq!(o.status.code(), Some(1), "{}", show(&o));
        let out = stdout(&o);
        assert!(
            out.contains(
                "[[network.allow]]\n    host = \"nothing-allows.example\"\n    ports = [443]"
            ),
            "{out}"
        );
    }
);

both!(paths_are_decided_by_the_filesystem_view, |env: Env| {
    let key = env.home.join(".ssh/id_ed25519");
    let o = explain(&env, &[key.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let out = stdout(&o);
    assert!(
        out.contains(": deny") && out.contains(".ssh") && out.contains("from: built-in"),
        "{out}"
    );
    let inproject = env.project.join("src/main.rs");
    let o = explain(&env, &["--write", inproject.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(stdout(&o).contains("filesystem.writable"), "{}", show(&o));
    let o = explain(&env, &["--write", "/usr/lib/cordon-explain-test"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        stdout(&o).contains("writable = [\"/usr/lib/cordon-explain-test\"]"),
        "{}",
        show(&o)
    );
    // The copy-on-write home takes writes without reaching the host.
    let o = explain(
        &env,
        &["--write", env.home.join(".bashrc").to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(stdout(&o).contains("discarded at exit"), "{}", show(&o));
});

both!(commands_are_decided_by_the_exec_rules, |env: Env| {
    policy(&env);
    let o = explain(&env, &["--", "git", "push", "origin", "main"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let out = stdout(&o);
    assert!(out.contains("run `git push origin main`: deny"), "{out}");
    assert!(out.contains("rule: exec deny \"git push *\""), "{out}");
    assert!(out.contains("cordon/cordon.toml:"), "{out}");
    let o = explain(&env, &["--", "git", "status"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // Held for a person: not allowed yet, so exit 1, and it says who decides.
    let o = explain(&env, &["--", "npm", "publish", "--tag", "x"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let out = stdout(&o);
    assert!(
        out.contains(": ask\n") && out.contains("cordon approve"),
        "{out}"
    );
});

both!(bad_input_is_125_with_what_to_give, |env: Env| {
    for (args, says) in [
        (&[][..], "nothing to explain"),
        (&["foo"][..], "cannot tell what `foo` is"),
        (&["ftp://x/"][..], "only http and https"),
        (&["GET", "https://x:99999/"][..], "is not a port"),
        (&["--bogus"][..], "unexpected argument '--bogus'"),
        (&["/x", "--", "ls"][..], "not both"),
    ] {
        let o = explain(&env, args);
        assert_eq!(o.status.code(), Some(125), "{args:?}\n{}", show(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(says),
            "{args:?}\n{}",
            show(&o)
        );
    }
    // A policy that does not load is bad input too.
    env.write("cordon.toml", "[network]\nhots = 1\n");
    let o = explain(&env, &["https://pypi.org/"]);
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cordon.toml"),
        "{}",
        show(&o)
    );
});

both!(
    inside_a_session_the_answer_is_the_same_and_no_secret_is_readable,
    |env: Env| {
        policy(&env);
        let asks: [&[&str]; 7] = [
            &["POST", "https://pypi.org/upload/x"],
            &["https://nothing-allows.example/"],
            &["--", "git", "push", "origin", "main"],
            &["--write", "/usr/lib/cordon-explain-test"],
            // Masked inside, so the view differs there: the answer must not.
            &["~/.ssh/id_ed25519"],
            &["--write", "~/.bashrc"],
            &["github.com:22"],
        ];
        let mut script = String::new();
        for a in asks {
            let words: Vec<String> = a.iter().map(|w| format!("'{w}'")).collect();
            // By name: the session puts its own cordon on PATH.
            script.push_str(&format!(
                "cordon explain {}; echo \"rc=$?\"; echo ===\n",
                words.join(" ")
            ));
        }
        // The policy files, copied out for the host to search (the script names no secret).
        script.push_str(
            "cp /run/cordon/policy.json /run/cordon/policy.toml \"$PWD\"/ && echo copied\n\
         (echo x > /run/cordon/policy.json) 2>/dev/null && echo WRITABLE; \
         ls /run >/dev/null 2>&1 && echo LISTED; true\n",
        );
        let o = inside(&env, &script);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(
            out.contains("copied") && !out.contains("WRITABLE"),
            "{}",
            show(&o)
        );
        // The mask over /run still lists nothing: the policy is reached by its path only.
        assert!(!out.contains("LISTED"), "{}", show(&o));
        let answers: Vec<&str> = out.split("===\n").collect();
        for (i, a) in asks.iter().enumerate() {
            let outside = explain(&env, a);
            let code = outside.status.code().unwrap();
            let want = format!("{}rc={code}\n", stdout(&outside));
            let got = answers[i];
            assert!(
                got.contains("(the policy of this session, from /run/cordon/policy.json)"),
                "{got}"
            );
            assert_eq!(
                verdict(got),
                verdict(&want),
                "{a:?}: inside and outside differ\n{}",
                show(&o)
            );
        }
        for f in ["policy.json", "policy.toml"] {
            let text = std::fs::read_to_string(env.project.join(f)).unwrap();
            assert!(
                text.contains("fromcmd") && text.contains("no-uploads"),
                "{f}: not the policy\n{text}"
            );
            assert!(
                !text.contains(CMD_SECRET),
                "{f} holds the command's secret argument"
            );
            assert!(
                !text.contains(ENV_SECRET),
                "{f} holds the credential's value"
            );
        }
    }
);

both!(an_exec_denial_names_its_explain_line, |env: Env| {
    if !common::need(&["git"], "a denied git push") {
        return;
    }
    policy(&env);
    let o = inside(&env, &common::marked("git push origin main"));
    common::assert_denied(&o, "git push");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("(why: `cordon explain -- git push origin main`)"),
        "{}",
        show(&o)
    );
});

both!(a_network_denial_names_its_explain_line, |env: Env| {
    if !common::need(&["curl"], "a denied connection") {
        return;
    }
    common::net::tun_ready();
    let o = inside(
        &env,
        &common::marked("curl -s -m 5 http://nothing-allows.example:8080/ >/dev/null; true"),
    );
    common::assert_ran(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("why: `cordon explain nothing-allows.example:8080`"),
        "{}",
        show(&o)
    );
});

/// cordon run from where the view hides it (here: inside cordon's own data dir, masked in
/// every sandbox; a build under a private /tmp is the same case) still has `cordon explain`
/// inside: its executable is bound at /run/cordon/bin/cordon and that directory is on PATH.
#[test]
fn explain_runs_inside_when_the_executable_is_hidden() {
    let Some(env) = Env::new(common::Who::Root) else {
        return;
    };
    let hidden = env.base.join("data/cordon/hidden-bin");
    std::fs::create_dir_all(&hidden).unwrap();
    let bin = hidden.join("cordon");
    std::fs::copy(env!("CARGO_BIN_EXE_cordon"), &bin).unwrap();
    let o = std::process::Command::new(&bin)
        .env_clear()
        .env("HOME", &env.home)
        .env("PATH", "/usr/bin:/bin")
        .env("XDG_STATE_HOME", env.base.join("state"))
        .env("XDG_CONFIG_HOME", env.home.join(".config"))
        .env("XDG_DATA_HOME", env.base.join("data"))
        .current_dir(&env.project)
        .args(["run", "--no-tty", "--", "sh", "-c"])
        .arg(format!(
            "test -r {0} && echo BIN-HIDDEN; echo \"PATH=$PATH\"; \
             cordon explain https://nothing-allows.example/; echo \"rc=$?\"",
            bin.display()
        ))
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        !out.contains("BIN-HIDDEN"),
        "the copy must be hidden: {}",
        show(&o)
    );
    assert!(out.contains(":/run/cordon/bin\n"), "{}", show(&o));
    assert!(
        out.contains("https://nothing-allows.example/: deny"),
        "{}",
        show(&o)
    );
    assert!(out.contains("rc=1"), "{}", show(&o));
}
