//! What the start builds beside the rest of it (the egress gateway with its CA and HTTP layer,
//! on a thread beside the state layer's preparation) is in place before the command runs, and
//! a failure to build it still ends the run before the command starts.

mod common;

use common::{Env, show};

fn audit(env: &Env) -> Vec<serde_json::Value> {
    std::fs::read_to_string(&env.audit)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn first(evs: &[serde_json::Value], layer: &str, action: &str) -> Option<usize> {
    evs.iter()
        .position(|e| e["layer"] == layer && e["action"] == action)
}

// A missing `[tls] upstream_ca` file fails the HTTP layer's start: exit 125 with the file named,
// the command (which would leave a file in the project) never ran, no process was started.
both!(
    a_gateway_that_cannot_start_ends_the_run_before_the_command,
    |env: Env| {
        let missing = env.base.join("no-such-ca.pem");
        // Outside the project: a user's policy, trusted (a project's would be refused unread).
        let pol = env.base.join("startup-policy.toml");
        std::fs::write(
            &pol,
            format!("[tls]\nupstream_ca = \"{}\"\n", missing.display()),
        )
        .unwrap();
        env.own(&pol);
        let ran = env.project.join("ran");
        let o = env.run_with(
            &["--policy", &pol.display().to_string()],
            &format!("touch '{}'", ran.display()),
        );
        assert_eq!(o.status.code(), Some(125), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("cannot start the egress gateway") && err.contains("no-such-ca.pem"),
            "{}",
            show(&o)
        );
        assert!(!ran.exists(), "the command ran without its gateway");
        let evs = audit(&env);
        assert!(first(&evs, "process", "start").is_none(), "{evs:?}");
        assert!(first(&evs, "session", "stop").is_some(), "{evs:?}");
    }
);

// With the built-in policy the command starts with the gateway, the HTTP layer and the trust
// bundle in place: the proxy variables point at the gateway, the bundle holds cordon's CA, and
// the log has the HTTP layer and the network applied before the process starts.
both!(
    the_gateway_is_in_place_before_the_command_starts,
    |env: Env| {
        let out = env.ok("test \"$HTTPS_PROXY\" = http://127.0.0.1:3128 && \
         grep -c \"cordon's interception CA\" \"$SSL_CERT_FILE\"");
        assert_eq!(out.trim(), "1", "{out}");
        let evs = audit(&env);
        let start = first(&evs, "process", "start").expect("a process start");
        let http = first(&evs, "http", "apply").expect("the HTTP layer applied");
        let net = first(&evs, "network", "apply").expect("the network applied");
        assert!(http < start && net < start, "{evs:?}");
        assert!(
            first(&evs, "session", "start").is_some_and(|s| s < http),
            "{evs:?}"
        );
    }
);
