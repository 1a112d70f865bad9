//! The start and exit lines of `cordon run`: on a terminal only, silenced by `-q`.

mod common;

use common::{Env, show};

/// A denied request (a host no rule allows) and the command's own exit status.
const SCRIPT: &str = "curl -s -m 5 http://denied.invalid/ >/dev/null; exit 3";

fn session_of(out: &str) -> Option<String> {
    let rest = out.split("session ").nth(1)?;
    Some(rest.split_whitespace().next()?.to_string())
}

both!(start_and_exit_lines_on_a_terminal, |env: Env| {
    if !common::need(&["curl"], "a denied request counted in the exit line") {
        return;
    }
    let line = format!("{} run -- sh -c '{SCRIPT}'", env.cordon_line());
    let out = common::under_pty(&env, &line, "");
    let start = out
        .lines()
        .find(|l| l.contains("cordon: profile "))
        .unwrap_or_else(|| panic!("no start line:\n{out}"));
    assert!(start.contains("profile none"), "{start}");
    assert!(
        start.contains(&format!("project {}", env.project.display())),
        "{start}"
    );
    for layer in ["fs", "net(gateway)", "seccomp"] {
        assert!(start.contains(layer), "{layer} missing: {start}");
    }
    let session = session_of(start).unwrap_or_else(|| panic!("no session id: {start}"));
    let exit = out
        .lines()
        .find(|l| l.contains("cordon: exit "))
        .unwrap_or_else(|| panic!("no exit line:\n{out}"));
    assert!(exit.contains("exit 3 after"), "{exit}");
    assert!(exit.contains("1 denied (denied.invalid ×1)"), "{exit}");
    assert!(exit.contains("exec rules hit"), "{exit}");
    let log = env
        .base
        .join(format!("state/cordon/sessions/{}.jsonl", session.trim()));
    assert!(exit.contains(&format!("log {}", log.display())), "{exit}");
    assert!(
        log.exists(),
        "the named log is not there: {}",
        log.display()
    );
});

both!(a_denied_exec_is_counted_once, |env: Env| {
    let pol = env.base.join("exec.toml");
    std::fs::write(&pol, "[exec]\ndeny = [\"env *\"]\n").unwrap();
    env.own(&pol);
    // sh tries `env` in each PATH directory: still one command denied.
    let line = format!(
        "{} run --policy {} -- sh -c 'env x; exit 0'",
        env.cordon_line(),
        pol.display()
    );
    let out = common::under_pty(&env, &line, "");
    assert!(out.contains("exec rules hit 1 (1 denied)"), "{out}");
});

both!(quiet_silences_the_lines, |env: Env| {
    let line = format!("{} run -q -- sh -c 'echo ran'", env.cordon_line());
    let out = common::under_pty(&env, &line, "");
    assert!(out.contains("ran"), "{out}");
    assert!(
        !out.contains("cordon: profile") && !out.contains("cordon: exit"),
        "{out}"
    );
});

both!(nothing_extra_without_a_terminal, |env: Env| {
    let o = env.run("exit 4");
    assert_eq!(o.status.code(), Some(4), "{}", show(&o));
    assert_eq!(String::from_utf8_lossy(&o.stderr), "", "{}", show(&o));
    // -v prints the events, and the lines too.
    let o = env.run_with(&["-v"], "exit 4");
    assert_eq!(o.status.code(), Some(4), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("[session] start"), "{err}");
    assert!(err.contains("cordon: profile none"), "{err}");
    assert!(
        err.contains(&format!("log {}", env.audit.display())),
        "{err}"
    );
});

both!(judge_calls_are_counted_by_the_events_field, |env: Env| {
    use common::net::{Server, policy, setup, www};
    if !common::need(&["curl"], "this test's client") {
        return;
    }
    setup(&env);
    let root = www(&env, "judged-summary", "unused");
    std::fs::create_dir_all(root.join("judged")).unwrap();
    std::fs::write(root.join("judged/ok.txt"), "judged-ok").unwrap();
    std::fs::write(root.join("judged/no.txt"), "judged-no").unwrap();
    env.own(&root);
    let srv = Server::http(&root);
    let judge = Server::start(&["judge"]);
    let (name, p) = ("api.example.test", srv.port);
    let pol = policy(
        &env,
        &format!(
            "[dns]\nhosts = {{ \"{name}\" = \"127.0.0.1\" }}\n\
             [[network.allow]]\nhost = \"{name}\"\nports = [{p}]\n\
             [[http.rule]]\nname = \"judged\"\nhost = \"{name}\"\npath = \"/judged/*\"\naction = \"judge\"\n\
             [[http.rule]]\nname = \"no-other\"\nhost = \"{name}\"\npath = \"/other\"\naction = \"deny\"\n\
             [judge]\napi = \"openai\"\nurl = \"http://127.0.0.1:{}\"\nmodel = \"fake\"\n\
             policy = \"Reading public files is fine.\"\n",
            judge.port
        ),
    );
    let script = format!(
        "curl -s -m 10 http://{name}:{p}/judged/ok.txt; curl -s -m 10 http://{name}:{p}/judged/no.txt; \
         curl -s -m 10 http://{name}:{p}/other; exit 0"
    );
    let o = env.run_with(&["--policy", &pol, "-v"], &script);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("judge calls 2 "), "{}", show(&o));
    let log = std::fs::read_to_string(&env.audit).unwrap();
    let calls: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|e| {
            e["detail"]["judge_call"]
                .as_object()
                .cloned()
                .map(serde_json::Value::Object)
        })
        .collect();
    let verdicts: Vec<&str> = calls.iter().filter_map(|c| c["verdict"].as_str()).collect();
    assert_eq!(verdicts, ["allow", "deny"], "{log}");
    assert!(calls.iter().all(|c| c["latency_ms"].is_u64()), "{log}");
});
