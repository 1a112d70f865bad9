//! Grants that end, black-box: a `[[network.allow]]` with a real, short `for` lets a session
//! reach a loopback stand-in, `check` and `explain` say the time left, and once it has ended
//! the next session starts without it (said at start and in the log) and is refused in
//! cordon's words.

mod common;

use std::time::{Duration, SystemTime};

use common::net::{Server, policy, setup, spawn_run, wait_limited, www};
use common::{Env, show};

const NAME: &str = "grant.example.test";
/// Long enough for `check`, `explain` and one start of a debug build on a shared machine.
const LASTS: u64 = 6;

both!(
    a_grant_that_has_ended_is_ignored_at_the_next_start,
    |env: Env| {
        if !common::need(&["curl"], "the client") {
            return;
        }
        setup(&env);
        let srv = Server::http(&www(&env, "www", "granted"));
        let port = srv.port;
        let file = policy(
            &env,
            &format!(
                "[[network.allow]]\nhost = \"{NAME}\"\nports = [{port}]\nfor = \"{LASTS}s\"\n\
             [dns]\nhosts = {{ \"{NAME}\" = \"127.0.0.1\" }}\n"
            ),
        );
        let written = std::fs::metadata(&file).unwrap().modified().unwrap();
        let origin = format!("{file}:1");
        let script =
            format!("curl -sS --max-time 10 http://{NAME}:{port}/hello.txt; echo \"RC $?\"");

        let o = env.cordon().args(["check", &file]).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains(&format!("host = \"{NAME}\"")), "{out}");
        let until = out
            .lines()
            .find(|l| l.starts_with("until = "))
            .unwrap_or_else(|| panic!("no until line: {out}"));
        assert!(until.ends_with(" s left"), "{until}");
        let o = env
            .cordon()
            .args(["explain", "--policy", &file, &format!("{NAME}:{port}")])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(out.contains("note: this grant ends "), "{out}");
        assert!(
            out.contains(" s left); a session started before then keeps it"),
            "{out}"
        );

        // Inside, `explain` answers from the session's policy, which keeps the grant to the end.
        let first = format!("{script}\ncordon explain {NAME}:{port}");
        let o = wait_limited(spawn_run(&env, &file, &first), Duration::from_secs(60));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("granted") && out.contains("RC 0"),
            "{}",
            show(&o)
        );
        assert!(
            out.contains(" left); this session keeps it until it exits"),
            "{}",
            show(&o)
        );
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains("expired"),
            "{}",
            show(&o)
        );

        // The end is the second the file was written plus the duration.
        let end = written + Duration::from_secs(LASTS + 1);
        if let Ok(wait) = end.duration_since(SystemTime::now()) {
            std::thread::sleep(wait);
        }
        let o = wait_limited(spawn_run(&env, &file, &script), Duration::from_secs(60));
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            out.contains(&format!(
                "http://{NAME}:{port}/hello.txt was denied by rule http.default-deny"
            )) && !out.contains("granted"),
            "{}",
            show(&o)
        );
        let said = format!(
            "cordon: expired grant ignored: connections to {NAME} on port {port} (network.allow, {origin}, ended "
        );
        assert!(err.contains(&said), "{}", show(&o));
        assert!(
            err.lines()
                .any(|l| l.starts_with("cordon: denied ") && l.contains(NAME)),
            "{}",
            show(&o)
        );
        let log = std::fs::read_to_string(&env.audit).unwrap();
        let event = log
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|e| e["layer"] == "session" && e["rule"] == origin.as_str())
            .unwrap_or_else(|| panic!("no event for the expired grant:\n{log}"));
        assert_eq!(event["action"], "log", "{event}");
        assert_eq!(event["detail"]["kind"], "network.allow", "{event}");
        assert!(
            event["detail"]["ended"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z')),
            "{event}"
        );

        // `check` and `explain` judge it as a session starting now would.
        let o = env.cordon().args(["check", &file]).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains(&format!("host = \"{NAME}\"")),
            "{}",
            show(&o)
        );
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(&said),
            "{}",
            show(&o)
        );
        let o = env
            .cordon()
            .args(["explain", "--policy", &file, &format!("{NAME}:{port}")])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", show(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(&said),
            "{}",
            show(&o)
        );
    }
);
