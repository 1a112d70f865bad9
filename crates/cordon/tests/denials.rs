//! Readable denials, black-box: a denied HTTPS flow (through the proxy's CONNECT or straight
//! through the TUN) reaches real clients — curl, python requests, pip, npm — as a 403 in
//! cordon's words, naming the rule, the reason and the policy lines that would allow it; other
//! ports stay refused at the SYN; the user's terminal gets a line for every denial, in
//! cordon's words, whoever decided it.

mod common;

use common::net::{PY, UNPROXIED, policy, setup, spawn_run, wait_limited};
use common::{Env, show};
use std::time::Duration;

const NAME: &str = "denied.example.test";

/// A name cordon's DNS answers (so clients connect) that no rule allows.
fn pol(env: &Env) -> String {
    policy(
        env,
        &format!("[dns]\nhosts = {{ \"{NAME}\" = \"127.0.0.1\" }}\n"),
    )
}

fn run(env: &Env, script: &str) -> std::process::Output {
    let p = pol(env);
    wait_limited(spawn_run(env, &p, script), Duration::from_secs(120))
}

both!(
    a_denied_https_flow_is_answered_with_cordons_403,
    |env: Env| {
        if !common::need(&["curl"], "the client") {
            return;
        }
        setup(&env);
        let script = [
        // Through HTTPS_PROXY (CONNECT) and straight through the TUN, on 443 and on 8443.
        format!("echo P443; curl -sS --max-time 10 https://{NAME}/simple/pkg/; echo \"RC $?\""),
        format!("echo T443; curl -sS --noproxy '*' --max-time 10 https://{NAME}/x; echo \"RC $?\""),
        format!("echo P8443; curl -sS --max-time 10 https://{NAME}:8443/y; echo \"RC $?\""),
        format!("echo T8443; {UNPROXIED} curl -sS --max-time 10 https://{NAME}:8443/z; echo \"RC $?\""),
        // Plain HTTP through the proxy: the proxy's own 403, in the same words.
        format!("echo P80; curl -sS --max-time 10 http://{NAME}/plain; echo \"RC $?\""),
        // A TLS port that is sent something else is closed; any other port is refused at once.
        format!("echo PLAIN8443; {UNPROXIED} curl -sS --max-time 10 http://{NAME}:8443/; echo \"RC $?\""),
        format!("echo SYN; {UNPROXIED} curl -sS --max-time 10 http://{NAME}:8081/; echo \"RC $?\""),
    ]
    .join("\n");
        let o = run(&env, &script);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let section = |tag: &str| -> String {
            let start = out
                .find(&format!("{tag}\n"))
                .unwrap_or_else(|| panic!("no {tag}: {}", show(&o)));
            let rest = &out[start..];
            let end = rest.find("RC ").map_or(rest.len(), |i| {
                i + rest[i..].find('\n').unwrap_or(rest.len() - i)
            });
            rest[..end].to_string()
        };
        for (tag, port, path, rule) in [
            ("P443", 443, "/simple/pkg/", "http.default-deny"),
            ("T443", 443, "/x", "http.default-deny"),
            ("P8443", 8443, "/y", "network.default-deny"),
            ("T8443", 8443, "/z", "network.default-deny"),
        ] {
            let s = section(tag);
            assert!(
                s.contains(&format!("denied by rule {rule}")),
                "{tag}: {s}\n{}",
                show(&o)
            );
            assert!(
                s.contains("RC 0"),
                "{tag}: curl read the 403 as an answer: {s}"
            );
            let ports = format!("[[network.allow]]\nhost = \"{NAME}\"\nports = [{port}]\n");
            assert!(s.contains(&ports), "{tag}: the lines that allow it: {s}");
            let url = if port == 443 {
                format!("https://{NAME}{path}")
            } else {
                format!("https://{NAME}:{port}{path}")
            };
            assert!(
                s.contains(&format!("To see why: cordon explain GET {url}")),
                "{tag}: {s}"
            );
            assert!(!s.contains("CONNECT tunnel failed"), "{tag}: {s}");
        }
        let p80 = section("P80");
        for want in [
            format!("cordon: GET http://{NAME}/plain was denied by rule http.default-deny"),
            format!("[[network.allow]]\nhost = \"{NAME}\"\nports = [80]\n"),
            format!("To see why: cordon explain GET http://{NAME}/plain\n"),
        ] {
            assert!(p80.contains(&want), "P80: {p80}\n{}", show(&o));
        }
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        // Not TLS: closed without an answer (curl 52, empty reply), never relayed.
        assert!(section("PLAIN8443").contains("RC 52"), "{}", show(&o));
        // Any other port: refused at the SYN (curl 7).
        assert!(section("SYN").contains("RC 7"), "{}", show(&o));
        // A terminal line for each of the seven denials, retries and other ports included:
        // the clients may show only a status.
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("cordon: denied ") && l.contains(NAME))
            .collect();
        assert_eq!(lines.len(), 7, "{}", show(&o));
        assert!(lines.iter().all(|l| l.contains("(rule ")), "{lines:?}");
        assert!(!stderr.contains("not shown"), "{}", show(&o));
    }
);

both!(python_requests_and_pip_show_the_rule, |env: Env| {
    setup(&env);
    let requests = format!(
        "import requests\ntry:\n    r = requests.get('https://{NAME}/api', timeout=10)\n    print('BODY', r.text)\n    r.raise_for_status()\nexcept Exception as e:\n    print('EXC', e)\n"
    );
    env.write("req.py", &requests);
    let script = [
        format!("echo REQ-PROXY; {PY} req.py"),
        format!("echo REQ-TUN; {UNPROXIED} {PY} req.py"),
        // An index no rule allows (pip logs an index's HTTP errors at debug level only, so
        // -vv), and a file from it (an error at the default level).
        format!(
            "echo PIP-INDEX; {PY} -m pip download -vv --no-cache-dir --retries 0 --timeout 10 -d dl --index-url https://{NAME}/simple/ somepkg 2>&1"
        ),
        format!(
            "echo PIP-URL; {UNPROXIED} {PY} -m pip download --no-cache-dir --retries 0 --timeout 10 -d dl https://{NAME}/files/somepkg-1.0.tar.gz 2>&1"
        ),
        "echo END".to_string(),
    ]
    .join("\n");
    let o = run(&env, &script);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let between = |a: &str, b: &str| -> String {
        let i = out
            .find(a)
            .unwrap_or_else(|| panic!("no {a}: {}", show(&o)));
        let j = out[i..].find(b).map_or(out.len(), |j| i + j);
        out[i..j].to_string()
    };
    for (tag, next) in [("REQ-PROXY", "REQ-TUN"), ("REQ-TUN", "PIP-INDEX")] {
        let s = between(tag, next);
        // The body, and the exception itself, name the rule.
        assert!(s.contains("BODY cordon: GET https://denied.example.test/api was denied by rule http.default-deny"), "{tag}: {s}");
        assert!(
            s.contains("EXC 403 Client Error: Forbidden by cordon rule http.default-deny"),
            "{tag}: {s}"
        );
    }
    for (tag, next) in [("PIP-INDEX", "PIP-URL"), ("PIP-URL", "END")] {
        let s = between(tag, next);
        assert!(s.contains("403"), "{tag}: {s}");
        assert!(
            s.contains("Forbidden by cordon rule http.default-deny"),
            "{tag}: {s}"
        );
    }
});

both!(
    a_request_no_http_rule_allows_names_the_rule_that_would,
    |env: Env| {
        if !common::need(&["curl"], "the client") {
            return;
        }
        setup(&env);
        let host = "rules.example.test";
        // The host is reachable (a rule allows part of it), so cordon reads each request: one
        // outside that rule falls to the default.
        let p = policy(
            &env,
            &format!(
                "[dns]\nhosts = {{ \"{host}\" = \"127.0.0.1\" }}\n\
             [[http.rule]]\nname = \"only-ok\"\nhost = \"{host}\"\npath = \"/ok/*\"\naction = \"allow\"\n"
            ),
        );
        let script =
            format!("{UNPROXIED} curl -sS --max-time 10 https://{host}/other?x=1; echo \"RC $?\"");
        let o = wait_limited(spawn_run(&env, &p, &script), Duration::from_secs(120));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("was denied by rule \"default\""),
            "{}",
            show(&o)
        );
        let lines = format!(
            "To allow it, add to the policy:\n[[http.rule]]\nname = \"allow-{host}\"\nhost = \"{host}\"\nport = 443\nmethods = [\"GET\"]\npath = \"/other\"\naction = \"allow\"\n"
        );
        assert!(out.contains(&lines), "{}", show(&o));
        assert!(
            out.contains(&format!(
                "To see why: cordon explain GET https://{host}/other\n"
            )),
            "{}",
            show(&o)
        );
        assert!(out.contains("RC 0"), "{}", show(&o));
    }
);

both!(npm_shows_the_rule, |env: Env| {
    if !common::need(&["npm"], "the client") {
        return;
    }
    setup(&env);
    // Through HTTPS_PROXY (npm reads it) and straight through the TUN.
    let npm = format!(
        "npm view somepkg --registry https://{NAME}/ --cache ./npmcache --fetch-retries 0 \
         --no-update-notifier 2>&1"
    );
    let script = format!("echo NPM-PROXY; {npm}\necho NPM-TUN; {UNPROXIED} {npm}\necho END");
    let o = run(&env, &script);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    for (tag, next) in [("NPM-PROXY", "NPM-TUN"), ("NPM-TUN", "END")] {
        let i = out
            .find(tag)
            .unwrap_or_else(|| panic!("no {tag}: {}", show(&o)));
        let j = out[i..].find(next).map_or(out.len(), |j| i + j);
        let s = &out[i..j];
        assert!(
            s.contains("403 Forbidden by cordon rule http.default-deny: no [[http.rule]]"),
            "{tag}: {s}"
        );
    }
});

// A person's deny (`cordon approve --deny`) and a denial repeated within seconds reach the
// terminal in cordon's words, not only as `Operation not permitted` or `error: 403`.
both!(
    a_persons_deny_and_a_repeat_are_said_by_cordon,
    |env: Env| {
        if !common::need(&["curl"], "the client") {
            return;
        }
        setup(&env);
        let p = policy(
            &env,
            &format!(
                "[dns]\nhosts = {{ \"{NAME}\" = \"127.0.0.1\" }}\n\
             [exec]\nask_timeout = 30\nask = [\"touch asked-exec\"]\n"
            ),
        );
        let script = format!(
            "touch asked-exec; echo \"EXEC $?\"\n\
         curl -fsS --max-time 10 https://{NAME}/a; echo \"RC $?\"\n\
         curl -fsS --max-time 10 https://{NAME}/a; echo \"RC $?\"\n\
         curl -sS --max-time 10 -x http://127.0.0.1:3128 https://{NAME}:8443/b; echo \"RC $?\"\n\
         {UNPROXIED} curl -sS --max-time 10 https://t.ngrok.io/; echo \"RC $?\"\n"
        );
        let child = spawn_run(&env, &p, &script);
        let (id, _) = common::wait_for_question(&env, "touch asked-exec");
        let o = common::approve(&env, &[&id, "--deny"]);
        assert!(o.status.success(), "{}", show(&o));
        let o = wait_limited(child, Duration::from_secs(120));
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            out.contains("EXEC 126") || out.contains("EXEC 1"),
            "{}",
            show(&o)
        );
        assert!(!env.project.join("asked-exec").exists(), "{}", show(&o));
        assert!(
            err.contains("cordon: denied `touch asked-exec` by a person"),
            "{}",
            show(&o)
        );
        let said = err
            .lines()
            .filter(|l| l.starts_with("cordon: denied ") && l.contains(NAME))
            .count();
        assert_eq!(
            said,
            3,
            "each HTTP denial is said, the repeat too\n{}",
            show(&o)
        );
        // A name the blocklist refuses: the client says only that it does not resolve.
        assert!(
            err.contains("cordon: denied the name t.ngrok.io: it does not resolve inside"),
            "{}",
            show(&o)
        );
    }
);
