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
        let pol = env.policy_file(
            "startup-policy.toml",
            &format!("[tls]\nupstream_ca = \"{}\"\n", missing.display()),
        );
        let ran = env.project.join("ran");
        let o = env.run_with(&["--policy", &pol], &format!("touch '{}'", ran.display()));
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

// The session's overlays (the copy-on-write home, its caches) are mounted by init while the
// host still makes the rest of the view, then moved into it: every overlay the sandbox sees is
// one mounted ahead (the count the log gives), and it is the overlay it was (the host's cache
// below, the write in the session's layer, none on the host).
both!(
    the_sessions_overlays_are_mounted_ahead_of_the_view,
    |env: Env| {
        env.write_home(".npm/host-entry", "from-host");
        let out = env.ok(
            "grep -c ' - overlay ' /proc/self/mountinfo; cat ~/.npm/host-entry; echo; \
             echo new > ~/.npm/new; cat ~/.npm/new",
        );
        let mut lines = out.lines();
        let seen: u64 = lines.next().unwrap_or_default().trim().parse().unwrap();
        // The home and ~/.npm at least.
        assert!(seen >= 2, "{out}");
        assert_eq!(lines.collect::<Vec<_>>(), ["from-host", "new"], "{out}");
        assert!(
            !env.home.join(".npm/new").exists(),
            "the write reached the host"
        );
        let evs = audit(&env);
        let start = first(&evs, "process", "start").expect("a process start");
        assert_eq!(
            evs[start]["detail"]["overlays_mounted_ahead"], seen,
            "{:?}",
            evs[start]
        );
    }
);

/// `cordon ARGS…` as `env`'s user under a subreaper (python's prctl), which then reaps what
/// cordon left behind and reports how each ended (`exit N` or `signal N`): anything cordon did
/// not reap itself becomes the subreaper's child when cordon exits.
fn left_behind(env: &Env, args: &[&str]) -> (std::process::Output, Vec<String>) {
    let c = env.cordon();
    let mut w = std::process::Command::new("python3");
    w.arg("-c")
        .arg(
            "import ctypes, os, subprocess, sys\n\
             ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)\n\
             code = subprocess.run(sys.argv[1:]).returncode\n\
             ends = []\n\
             while True:\n\
             \x20   try:\n\
             \x20       _, st = os.waitpid(-1, 0)\n\
             \x20   except ChildProcessError:\n\
             \x20       break\n\
             \x20   ends.append('exit %d' % os.WEXITSTATUS(st) if os.WIFEXITED(st)\n\
             \x20               else 'signal %d' % os.WTERMSIG(st))\n\
             print('LEFT', ','.join(ends), file=sys.stderr)\n\
             sys.exit(code)\n",
        )
        .arg(c.get_program())
        .args(c.get_args())
        .args(args)
        .env_clear()
        .envs(c.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(&env.project);
    let o = w.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let ends = err
        .lines()
        .find_map(|l| l.strip_prefix("LEFT"))
        .unwrap_or_else(|| panic!("no report from the subreaper: {}", show(&o)))
        .split(',')
        .map(|e| e.trim().to_string())
        .filter(|e| !e.is_empty())
        .collect();
    (o, ends)
}

/// `pid`'s children, with their command names, from every one of its threads.
fn children(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        for k in kids.split_whitespace() {
            let comm = std::fs::read_to_string(format!("/proc/{k}/comm")).unwrap_or_default();
            out.push(format!("{k} {}", comm.trim()));
        }
    }
    out
}

// Init is cloned while the policy loads, before cordon knows it will run anything: a run that
// ends there (a policy that does not parse, an untrusted project policy that loosens) kills and
// reaps it. `mode = "host"` needs an init without a network namespace of its own: the early
// one is killed and reaped, and the command sees the host's network.
both!(
    an_init_cloned_before_the_policy_is_read_is_never_left_behind,
    |env: Env| {
        let bad = env.policy_file("bad-policy.toml", "[network\nmode = 1\n");
        let (o, left) = left_behind(&env, &["run", "--no-tty", "--policy", &bad, "--", "true"]);
        assert_eq!(o.status.code(), Some(125), "{}", show(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains("bad-policy.toml"));
        assert!(
            left.is_empty(),
            "a policy error left {left:?}: {}",
            show(&o)
        );

        env.write("cordon.toml", "[network]\nmode = \"host\"\n");
        let (o, left) = left_behind(&env, &["run", "--no-tty", "--", "true"]);
        assert_eq!(o.status.code(), Some(125), "{}", show(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains("not trusted"));
        assert!(left.is_empty(), "a refused run left {left:?}: {}", show(&o));

        let host = env.policy_file("host-policy.toml", "[network]\nmode = \"host\"\n");
        std::fs::remove_file(env.project.join("cordon.toml")).unwrap();
        let own_net = std::fs::read_link("/proc/self/ns/net").unwrap();
        // While the command runs, cordon's children are looked at: its init alone, not also
        // the early one (which waits for a network setup that never comes until killed). After
        // the run this cannot be told: the session's own init may still be exiting then.
        let (started, done) = (env.project.join("started"), env.project.join("done"));
        let child = env
            .cordon()
            .args(["run", "--no-tty", "--policy", &host, "--", "sh", "-c"])
            .arg(format!(
                "readlink /proc/self/ns/net; : > '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
                started.display(),
                done.display()
            ))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !started.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let kids = children(child.id());
        std::fs::write(&done, "").unwrap();
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            own_net.display().to_string(),
            "mode = \"host\" runs in the host's network namespace"
        );
        assert_eq!(
            kids.len(),
            1,
            "cordon's children while the command ran, init alone: {kids:?}"
        );
    }
);
