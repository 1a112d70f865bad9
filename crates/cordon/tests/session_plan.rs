//! What `cordon check` prints and `cordon explain` answers is what a session runs: the host's
//! part of the plan (a local MCP server's exec rule, the host's ssh agent socket denied, a
//! registry token of the home's `.npmrc` as a credential) shows in `check`, decides in
//! `explain`, and is enforced in a real session, whose own placed policy is the plan `check
//! --json` printed.

mod common;

use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::Output;

use common::{Env, show};

/// A local MCP server the project's config names, refused by a rule; an `.npmrc` token in the
/// home; the host's ssh agent socket in a directory the sandbox sees.
struct Host {
    policy: String,
    agent: std::path::PathBuf,
    _listener: UnixListener,
}

fn host(env: &Env) -> Host {
    env.write(
        ".mcp.json",
        r#"{"mcpServers": {"shell": {"command": "/bin/sh", "args": ["-c", "echo shell-server-started"]}}}"#,
    );
    env.write_home(
        ".npmrc",
        "//registry.npmjs.org/:_authToken=npm_plan1234567890abcdefghijklmnopqrstuv\n",
    );
    let policy = env.policy_file(
        "plan.toml",
        "[[mcp.rule]]\nname = \"no-shell-server\"\nserver = \"stdio:shell\"\naction = \"deny\"\n",
    );
    // A socket the host's agent would listen on, in the project: a path the sandbox sees.
    let agent = env.project.join("agent.sock");
    let listener = UnixListener::bind(&agent).unwrap();
    env.own(&agent);
    Host {
        policy,
        agent,
        _listener: listener,
    }
}

fn cordon(env: &Env, h: &Host, args: &[&str]) -> Output {
    let mut c = env.cordon();
    c.args(args).env("SSH_AUTH_SOCK", &h.agent);
    c.output().unwrap()
}

/// A session under the host's policy running `argv`.
fn session(env: &Env, h: &Host, argv: &[&str]) -> Output {
    let audit = env.audit.display().to_string();
    let mut args = vec![
        "run", "--no-tty", "--audit", &audit, "--policy", &h.policy, "--",
    ];
    args.extend_from_slice(argv);
    cordon(env, h, &args)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

both!(
    check_and_explain_show_the_host_part_a_session_enforces,
    |env: Env| {
        let h = host(&env);
        let check = cordon(&env, &h, &["check", &h.policy]);
        assert!(check.status.success(), "{}", show(&check));
        let text = stdout(&check);
        // The local server's exec rule, the agent socket's deny, the home token as a credential.
        assert!(
            text.contains("[[exec.rule]] # ")
                && text.contains("(mcp.rule `no-shell-server`, stdio:shell)"),
            "no exec rule for the local MCP server in check:\n{text}"
        );
        assert!(
            text.contains(&h.agent.display().to_string()),
            "the ssh agent socket is not denied in check:\n{text}"
        );
        assert!(
            text.contains("npmrc-"),
            "no .npmrc credential in check:\n{text}"
        );

        let spawn = ["-c", "echo shell-server-started"];
        let mut args = vec!["explain", "--policy", &h.policy, "--", "/bin/sh"];
        args.extend(spawn);
        let x = cordon(&env, &h, &args);
        assert_eq!(x.status.code(), Some(1), "{}", show(&x));
        assert!(stdout(&x).contains("no-shell-server"), "{}", show(&x));
        let agent = h.agent.display().to_string();
        let x = cordon(&env, &h, &["explain", "--policy", &h.policy, &agent]);
        assert_eq!(x.status.code(), Some(1), "{}", show(&x));

        // The session does what they said.
        let script = format!(
            "/bin/sh -c 'echo shell-server-started' || echo SHELL-REFUSED; \
         test -S {agent} && echo AGENT-SEEN || echo AGENT-HIDDEN"
        );
        let o = session(&env, &h, &["sh", "-c", &script]);
        let out = stdout(&o);
        assert!(out.contains("SHELL-REFUSED"), "{}", show(&o));
        assert!(!out.contains("shell-server-started"), "{}", show(&o));
        assert!(out.contains("AGENT-HIDDEN"), "{}", show(&o));
    }
);

both!(the_session_runs_the_plan_check_prints, |env: Env| {
    let h = host(&env);
    let check = cordon(&env, &h, &["check", "--json", &h.policy]);
    assert!(check.status.success(), "{}", show(&check));
    let printed: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    let o = session(&env, &h, &["cat", "/run/cordon/policy.json"]);
    assert!(o.status.success(), "{}", show(&o));
    let placed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ran = &placed["plan"];
    // The variables a credential sets hold its placeholder in both (check names it, the
    // session has its value); the home view's secret files are only known once a session
    // prepares its view. Everything else is the same plan.
    let env_names = |p: &serde_json::Value| -> Vec<String> {
        p["env"]["set"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    assert_eq!(env_names(&printed), env_names(ran));
    let without = |p: &serde_json::Value| {
        let mut p = p.clone();
        p["env"]["set"] = serde_json::Value::Null;
        let deny = p["filesystem"]["deny"].as_array_mut().unwrap();
        deny.retain(|r| r["origin"] != "the home's view: holds a secret");
        p
    };
    assert_eq!(
        without(&printed),
        without(ran),
        "check printed another plan"
    );
    assert!(
        printed["exec"]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.to_string().contains("no-shell-server")),
        "{printed:#}"
    );
    assert!(Path::new(&h.agent).exists());
});
