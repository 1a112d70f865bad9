//! Policy from behaviour: a learning run of real package managers and git against loopback
//! stand-ins under their real names, `cordon policy suggest`, a clean run under the
//! suggestion; `cordon replay` flipping exactly what a policy change touches.

mod common;

use std::process::Command;

use common::net::{PY, Server, make_fixture, named, policy, setup, spawn_run_full, wait_limited};
use common::{Env, events, have, show, skip};
use serde_json::Value;

/// Denials of the layers a policy's rules decide (network, HTTP, exec).
fn denials(evs: &[Value]) -> Vec<&Value> {
    evs.iter()
        .filter(|e| {
            e["action"] == "deny"
                && matches!(
                    e["layer"].as_str(),
                    Some("network" | "http" | "exec" | "dns")
                )
        })
        .collect()
}

fn tools_present() -> bool {
    let ok = |c: &mut Command| c.output().is_ok_and(|o| o.status.success());
    if !ok(Command::new("npm").arg("--version")) {
        skip("npm", "the learning run");
        return false;
    }
    if !ok(Command::new(PY).args(["-m", "pip", "--version"])) {
        skip("pip", "the learning run");
        return false;
    }
    have("git")
}

both!(
    a_learning_run_suggests_exactly_what_a_clean_run_needs,
    |env: Env| {
        if !tools_present() {
            return;
        }
        setup(&env);
        // The stand-ins, each under its real name on a port of its own.
        let npm_root = env.base.join("npm");
        std::fs::create_dir_all(&npm_root).unwrap();
        let npm = Server::http(&npm_root);
        let npm_url = format!("http://registry.npmjs.org:{}", npm.port);
        make_fixture(&["npm", npm_root.to_str().unwrap(), &npm_url]);
        env.own(&npm_root);
        let pypi_root = env.base.join("pypi");
        let o = Command::new(PY)
            .arg(format!("{}/netfix.py", common::net::FIXTURES))
            .args(["wheel", pypi_root.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", show(&o));
        env.own(&pypi_root);
        let pypi = Server::http(&pypi_root);
        let forge_root = env.base.join("forge");
        let bare = forge_root.join("org/repo.git");
        std::fs::create_dir_all(&forge_root).unwrap();
        let work = env.base.join("work");
        let git = |args: &[&str], dir: &std::path::Path| {
            let o = Command::new("git")
                .args(["-c", "user.email=t@example.test", "-c", "user.name=T"])
                .args(args)
                .current_dir(dir)
                .output()
                .unwrap();
            assert!(o.status.success(), "git {args:?}: {}", show(&o));
        };
        std::fs::create_dir_all(&work).unwrap();
        git(&["init", "-q", "-b", "main"], &work);
        std::fs::write(work.join("README"), "cordon-forge-ok\n").unwrap();
        git(&["add", "README"], &work);
        git(&["commit", "-qm", "first"], &work);
        git(
            &[
                "clone",
                "-q",
                "--bare",
                work.to_str().unwrap(),
                bare.to_str().unwrap(),
            ],
            &env.base,
        );
        git(&["update-server-info"], &bare);
        env.own(&forge_root);
        let forge = Server::http(&forge_root);
        let names = ["registry.npmjs.org", "pypi.org", "github.com"];
        let base_policy = named(&names, &[], "");
        let script = format!(
            "set -e\n\
         rm -rf n dl r && mkdir n && cd n && echo '{{}}' > package.json\n\
         timeout 90 npm install --registry {npm_url}/ --cache ../npmcache --no-audit --no-fund \
           --no-update-notifier --fetch-retries 0 cordonprobe >&2\n\
         node -e \"console.log('NPM', require('cordonprobe').probe)\"\n\
         cd ..\n\
         timeout 60 {PY} -m pip download --no-deps --no-cache-dir --disable-pip-version-check \
           --no-input --timeout 10 --retries 0 --trusted-host pypi.org \
           --index-url http://pypi.org:{}/simple/ cordonprobe -d dl >&2\n\
         ls dl | sed 's/^/PIP /'\n\
         timeout 60 git clone -q http://github.com:{}/org/repo.git r\n\
         echo GIT $(cat r/README)\n",
            pypi.port, forge.port
        );
        // 1. The learning run: the task completes although the policy names none of the hosts.
        let p = policy(&env, &base_policy);
        let o = wait_limited(
            spawn_run_full(&env, &p, &script, &[], &["--learn"]),
            std::time::Duration::from_secs(240),
        );
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        for want in ["NPM cordon-npm-ok", "PIP cordon", "GIT cordon-forge-ok"] {
            assert!(out.contains(want), "{want}: {}", show(&o));
        }
        assert!(err.contains("LEARNING RUN:"), "the start says so: {err}");
        assert!(
            err.contains("LEARNING RUN ended"),
            "the exit says so: {err}"
        );
        assert!(err.contains("policy suggest"), "{err}");
        let learned = events(&env);
        assert_eq!(learned[0]["detail"]["learn"], true, "the log says so");
        assert!(
            learned.iter().any(|e| e["detail"]["learn"] == "would deny"),
            "nothing was recorded as would-deny"
        );
        common::assert_replay_reproduces(&env, &["--policy", &p]);
        let learn_log = env.base.join("learn.jsonl");
        std::fs::copy(&env.audit, &learn_log).unwrap();
        env.own(&learn_log);

        // 2. The suggestion: exactly those hosts and ports, the forge as an HTTP rule.
        let o = env
            .cordon()
            .args(["policy", "suggest"])
            .arg(&learn_log)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let suggestion = String::from_utf8_lossy(&o.stdout).to_string();
        let hosts: Vec<&str> = suggestion
            .lines()
            .filter_map(|l| l.strip_prefix("host = "))
            .collect();
        assert_eq!(
            hosts,
            ["\"pypi.org\"", "\"registry.npmjs.org\"", "\"github.com\""],
            "{suggestion}"
        );
        assert!(!suggestion.contains('*') || suggestion.contains("path = \"/org/repo.git/*\""));
        assert!(
            suggestion.contains(&format!("ports = [{}]", pypi.port))
                && suggestion.contains(&format!("ports = [{}]", npm.port))
                && suggestion.contains(&format!("port = {}", forge.port)),
            "{suggestion}"
        );
        assert_eq!(suggestion.matches("ports = [").count(), 2, "{suggestion}");
        assert!(
            suggestion.contains("github.com takes free-form uploads")
                && suggestion.contains("methods = [\"GET\"]"),
            "the forge gets an HTTP rule for what git asked: {suggestion}"
        );
        let file = policy(&env, &format!("{base_policy}\n{suggestion}"));
        let o = env.cordon().args(["check", &file]).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "cordon check: {}", show(&o));

        // 3. A normal run under it: the same task, not one denial.
        let o = wait_limited(
            spawn_run_full(&env, &file, &script, &[], &[]),
            std::time::Duration::from_secs(240),
        );
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("GIT cordon-forge-ok"),
            "{}",
            show(&o)
        );
        let evs = events(&env);
        assert!(denials(&evs).is_empty(), "denied: {:#?}", denials(&evs));
        common::assert_replay_reproduces(&env, &["--policy", &file]);

        // 4. The learning run's log under the suggested policy: only denied → allowed.
        let o = env
            .cordon()
            .env("XDG_RUNTIME_DIR", common::runtime_dir(&env))
            .arg("replay")
            .arg(&learn_log)
            .args(["--policy", &file, "--json"])
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "nothing newly denied: {}",
            show(&o)
        );
        let r: Value = serde_json::from_slice(&o.stdout).unwrap();
        let changes = r["changes"].as_array().unwrap();
        assert!(!changes.is_empty(), "{r:#}");
        for c in changes {
            assert_eq!(
                (c["was"].as_str(), c["now"].as_str()),
                (Some("denied"), Some("allowed")),
                "{c}"
            );
        }
    }
);

// One allowed host, one that a policy change removes, an exec rule that changes.
both!(
    replay_flips_exactly_what_a_policy_change_touches,
    |env: Env| {
        if !have("curl") {
            return;
        }
        setup(&env);
        let www = common::net::www(&env, "www", "hello\n");
        let srv = Server::http(&www);
        let port = srv.port;
        let allow = |h: &str| format!("[[network.allow]]\nhost = \"{h}\"\nports = [{port}]\n");
        let dns =
            "[dns]\nhosts = { \"kept.test\" = \"127.0.0.1\", \"gone.test\" = \"127.0.0.1\" }\n";
        let before = format!(
            "{}{}{dns}[exec]\ndeny = [\"touch *\"]\n",
            allow("kept.test"),
            allow("gone.test")
        );
        let after = format!("{}{dns}[exec]\ndeny = [\"cat *\"]\n", allow("kept.test"));
        let script = format!(
            "curl -sf http://kept.test:{port}/hello.txt; curl -sf http://gone.test:{port}/hello.txt; \
         curl -sf http://gone.test:{port}/hello.txt; cat /etc/hostname >/dev/null; touch x; echo done"
        );
        let o = common::net::run(&env, &before, &script);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).matches("hello").count(),
            3,
            "{}",
            show(&o)
        );
        let after_file = policy(&env, &after);
        let replay = |json: bool| {
            let mut c = env.cordon();
            c.env("XDG_RUNTIME_DIR", common::runtime_dir(&env));
            c.arg("replay")
                .arg(&env.audit)
                .args(["--policy", &after_file]);
            if json {
                c.arg("--json");
            }
            c.output().unwrap()
        };
        let o = replay(true);
        assert_eq!(
            o.status.code(),
            Some(1),
            "something allowed is now denied: {}",
            show(&o)
        );
        let r: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(r["schema"], "cordon-replay/1");
        for key in [
            "sessions",
            "events",
            "decisions",
            "unchanged",
            "kept",
            "by_layer",
            "changes",
        ] {
            assert!(r.get(key).is_some(), "{key} missing: {r:#}");
        }
        let changes = r["changes"].as_array().unwrap();
        // A shell tries each PATH entry: one command may be several execs, each replayed.
        let got: std::collections::BTreeSet<(String, String, String, String)> = changes
            .iter()
            .map(|c| {
                let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
                (s("layer"), s("subject"), s("was"), s("now"))
            })
            .collect();
        let gone = format!("GET gone.test:{port}/hello.txt");
        let row = |l: &str, s: &str, w: &str, n: &str| {
            (l.to_string(), s.to_string(), w.to_string(), n.to_string())
        };
        let want = std::collections::BTreeSet::from([
            row("exec", "cat /etc/hostname", "allowed", "denied"),
            row("exec", "touch x", "denied", "allowed"),
            row("http", &gone, "allowed", "denied"),
        ]);
        let http = changes.iter().filter(|c| c["layer"] == "http").count();
        assert_eq!(http, 2, "both requests to gone.test, nothing else: {r:#}");
        assert_eq!(got, want, "{r:#}");
        for c in changes {
            for key in [
                "session", "seq", "layer", "subject", "was", "was_rule", "now", "now_rule",
                "learned",
            ] {
                assert!(c.get(key).is_some(), "{key} missing in {c}");
            }
        }
        let text = replay(false);
        let out = String::from_utf8_lossy(&text.stdout);
        assert!(out.contains("allowed → denied"), "{out}");
        assert!(out.contains(&format!("gone.test:{port}")), "{out}");
    }
);

// What a learning run still refuses: the host's own services on a port no rule names (the
// host alias is allowed on another port), a raw address, a blocklisted name. Nothing reaches
// the host's server, and nothing of it is suggested.
both!(
    a_learning_run_keeps_the_walls_that_are_not_rules,
    |env: Env| {
        if !have("curl") {
            return;
        }
        setup(&env);
        let www = common::net::www(&env, "www", "hello\n");
        let srv = Server::http(&www);
        let port = srv.port;
        let other = if port == 65535 { port - 1 } else { port + 1 };
        let pol =
            format!("[[network.allow]]\nhost = \"host.cordon.internal\"\nports = [{other}]\n");
        let p = policy(&env, &pol);
        let get = |url: &str, tag: &str| {
            format!("echo {tag}=$(curl -s -m 8 -o /dev/null -w '%{{http_code}}' {url})\n")
        };
        let script = [
            get(
                &format!("http://host.cordon.internal:{port}/hello.txt"),
                "ALIAS",
            ),
            get(
                &format!("--noproxy '*' http://host.cordon.internal:{port}/hello.txt"),
                "ALIASTUN",
            ),
            get(&format!("http://127.0.0.1:{port}/hello.txt"), "RAW"),
            get("http://webhook.site/x", "BLOCKED"),
        ]
        .concat();
        let o = wait_limited(
            spawn_run_full(&env, &p, &script, &[], &["--learn"]),
            std::time::Duration::from_secs(120),
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        for tag in ["ALIAS", "ALIASTUN", "RAW", "BLOCKED"] {
            let line = out
                .lines()
                .find(|l| l.starts_with(&format!("{tag}=")))
                .unwrap_or_else(|| panic!("{tag} did not run: {}", show(&o)));
            assert!(!line.ends_with("=200"), "{tag} got through: {}", show(&o));
        }
        assert_eq!(
            srv.count("REQ"),
            0,
            "the host's server was reached: {}",
            srv.log()
        );
        let evs = events(&env);
        let let_through: Vec<&Value> = evs
            .iter()
            .filter(|e| e["detail"]["learn"].is_string() && e["action"] == "allow")
            .filter(|e| {
                let s = e.to_string();
                s.contains("host.cordon.internal")
                    || s.contains("webhook.site")
                    || s.contains("127.0.0.1")
            })
            .collect();
        assert!(let_through.is_empty(), "{let_through:#?}");
        let o = env
            .cordon()
            .args(["policy", "suggest"])
            .arg(&env.audit)
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&o.stdout);
        assert!(
            !s.contains("webhook.site")
                && !s.contains("127.0.0.1")
                && !s.contains(&format!("{port}]")),
            "{s}"
        );
    }
);
