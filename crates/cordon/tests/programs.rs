//! Rules keyed on the program (`programs = […]`): in one session real git reaches a loopback
//! forge under its real name while curl and Python's urllib are refused, over plain TCP and
//! through the HTTP layer; a connection whose process cannot be found is refused; `cordon
//! explain --program` answers as the gateway decides.

mod common;

use common::net::{
    PY, Server, UNPROXIED, https_443, make_repo, named, policy, run, setup, spawn_run,
    variant_addr, wait_limited,
};
use common::{Env, events, show};
use serde_json::Value;

/// Python's urllib to the forge over TLS (the HTTP layer) and on the plain port (argv[1]).
const CLIENT: &str = r#"
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen("https://github.com/repo.git/HEAD", timeout=10)
    print("PY-TLS got through")
except urllib.error.HTTPError as e:
    print("PY-TLS", e.code, e.read().decode()[:300].replace("\n", " "))
try:
    urllib.request.urlopen("http://github.com:%s/repo.git/HEAD" % sys.argv[1], timeout=5)
    print("PY-PLAIN got through")
except Exception as e:
    print("PY-PLAIN refused", type(e).__name__)
"#;

/// Refusals in the log with `rule`.
fn refused<'a>(evs: &'a [Value], rule: &str) -> Vec<&'a Value> {
    evs.iter()
        .filter(|e| e["action"] == "deny" && e["rule"] == rule)
        .collect()
}

both!(
    git_reaches_the_forge_and_curl_and_python_do_not,
    |env: Env| {
        if !common::need(&["git", "curl", "openssl"], "the forge's clients") {
            return;
        }
        setup(&env);
        let addr = variant_addr(&env, 71);
        let root = env.base.join("forge");
        std::fs::create_dir_all(&root).unwrap();
        assert!(make_repo(&root), "the forge's repository");
        env.own(&root);
        let Some((_tls, ca)) = https_443(&env, "github.com", &addr, &root) else {
            return;
        };
        let plain = Server::start(&["http", root.to_str().unwrap(), "--addr", &addr]);
        let p = plain.port;
        let pol = format!(
            "[dns]\nhosts = {{ \"github.com\" = \"{addr}\" }}\n\
             [tls]\nupstream_ca = \"{}\"\n\
             [[network.allow]]\nhost = \"github.com\"\nports = [443, {p}]\n\
             programs = [\"git\", \"git-remote-http\", \"git-remote-https\"]\n",
            ca.display()
        );
        let script = format!(
            "git clone -q http://github.com:{p}/repo.git r1 && echo GIT-PLAIN $(cat r1/README)\n\
             git clone -q https://github.com/repo.git r2 && echo GIT-TLS $(cat r2/README)\n\
             echo CURL-TLS $({UNPROXIED} curl -s -o body.txt -w '%{{http_code}}' --max-time 10 https://github.com/repo.git/HEAD)\n\
             echo CURL-BODY $(head -c 400 body.txt | tr '\\n' ' ')\n\
             echo CURL-PROXIED $(curl -s -o /dev/null -w '%{{http_code}}' --max-time 10 https://github.com/repo.git/HEAD)\n\
             {UNPROXIED} curl -s --max-time 5 http://github.com:{p}/repo.git/HEAD || echo CURL-PLAIN refused\n\
             echo CURL-AS-GIT $({UNPROXIED} curl -s -o /dev/null -w '%{{http_code}} ' --max-time 10 /usr/bin/git https://github.com/repo.git/HEAD)\n\
             cp \"$(command -v curl)\" /tmp/git && echo COPY-AS-GIT $({UNPROXIED} /tmp/git -s -o /dev/null -w '%{{http_code}}' --max-time 10 https://github.com/repo.git/HEAD)\n\
             LD_PRELOAD=/nonexistent/x.so git clone -q https://github.com/repo.git r3 2>/dev/null && echo PRELOAD-GIT cloned || echo PRELOAD-GIT refused\n\
             {UNPROXIED} {PY} client.py {p}\n"
        );
        env.write("client.py", CLIENT);
        let o = run(&env, &pol, &script);
        let out = String::from_utf8_lossy(&o.stdout);
        let line = |k: &str| {
            out.lines()
                .find(|l| l.starts_with(k))
                .unwrap_or_else(|| panic!("no {k} line\n{}", show(&o)))
                .to_string()
        };
        assert_eq!(line("GIT-PLAIN"), "GIT-PLAIN repo-content", "{}", show(&o));
        assert_eq!(line("GIT-TLS"), "GIT-TLS repo-content", "{}", show(&o));
        assert_eq!(line("CURL-TLS"), "CURL-TLS 403", "{}", show(&o));
        assert_eq!(line("CURL-PROXIED"), "CURL-PROXIED 403", "{}", show(&o));
        let body = line("CURL-BODY");
        assert!(
            body.contains("only for git") && body.contains("this request came from curl"),
            "cordon's words: {body}"
        );
        assert_eq!(line("CURL-PLAIN"), "CURL-PLAIN refused", "{}", show(&o));
        // Named after git in its arguments, curl is still curl; git made to load a library
        // from elsewhere is no longer git.
        let as_git = line("CURL-AS-GIT");
        assert!(
            as_git.contains("403") && !as_git.contains("200"),
            "{as_git}"
        );
        assert_eq!(line("PRELOAD-GIT"), "PRELOAD-GIT refused", "{}", show(&o));
        assert_eq!(
            line("COPY-AS-GIT"),
            "COPY-AS-GIT 403",
            "a copy named git: {}",
            show(&o)
        );
        let py = line("PY-TLS");
        assert!(
            py.starts_with("PY-TLS 403") && py.contains("came from python3"),
            "{py}"
        );
        assert!(
            line("PY-PLAIN").starts_with("PY-PLAIN refused"),
            "{}",
            show(&o)
        );
        assert!(!out.contains("got through"), "{}", show(&o));
        // Nothing but git's requests reached the forge over TLS.
        let evs = events(&env);
        let plain_refused = refused(&evs, "network.program");
        assert!(
            plain_refused.len() >= 2,
            "curl's and python's plain connections: {plain_refused:#?}"
        );
        for e in &plain_refused {
            let exe = e["detail"]["program"]["process"]["exe"]
                .as_str()
                .unwrap_or("");
            assert!(
                exe.ends_with("/curl") || exe.contains("python3"),
                "the process is named from outside: {e}"
            );
            assert!(
                e["reason"]
                    .as_str()
                    .unwrap()
                    .contains("allowed only for git"),
                "{e}"
            );
        }
        let http_ok: Vec<&Value> = evs
            .iter()
            .filter(|e| e["layer"] == "http" && e["action"] == "allow")
            .collect();
        assert!(!http_ok.is_empty(), "git's requests through the HTTP layer");
        for e in &http_ok {
            let exe = e["detail"]["program"]["process"]["exe"]
                .as_str()
                .unwrap_or("");
            // git's HTTP helper (plain through the proxy, or TLS), or git itself.
            assert!(
                exe.contains("/git-remote-http") || exe.ends_with("/git"),
                "{e}"
            );
        }
    }
);

both!(
    a_connection_whose_process_cannot_be_found_is_refused,
    |env: Env| {
        setup(&env);
        let sink = Server::echo();
        let python = std::fs::canonicalize(PY).unwrap();
        // The one program that tries is the one the rule names: only an owner that cannot be
        // found is refused. Each try connects without waiting and exits at once, so the
        // socket is gone before the gateway asks whose it is (most of the time: a try whose
        // process is still found is let through, and said so).
        let pol = named(
            &["forge.test"],
            &[],
            &format!(
                "[[network.allow]]\nhost = \"forge.test\"\nports = [{}]\nprograms = [\"{}\"]\n",
                sink.port,
                python.display()
            ),
        );
        let script = format!(
            "for i in $(seq 1 15); do {PY} -c \"\n\
import socket, os\n\
a = socket.getaddrinfo('forge.test', {port}, socket.AF_INET)[0][4]\n\
s = socket.socket(); s.setblocking(False); s.connect_ex(a); os._exit(0)\n\
\"; done\n\
             {PY} -c \"import socket; s = socket.create_connection(('forge.test', {port}), 5); print('FOUND ok')\"\n",
            port = sink.port
        );
        let p = policy(&env, &pol);
        let o = wait_limited(
            spawn_run(&env, &p, &script),
            std::time::Duration::from_secs(120),
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("FOUND ok"),
            "{}",
            show(&o)
        );
        let evs = events(&env);
        let unknown = refused(&evs, "network.owner-unknown");
        assert!(!unknown.is_empty(), "no try was refused as unattributed");
        for e in &unknown {
            assert!(
                e["reason"].as_str().unwrap().contains("could not be found"),
                "{e}"
            );
        }
        // Every flow to it was either refused for that, or let out for the program named.
        for e in evs
            .iter()
            .filter(|e| e["layer"] == "network" && e["detail"]["host"] == "forge.test")
        {
            match e["action"].as_str() {
                Some("deny") => assert_eq!(e["rule"], "network.owner-unknown", "{e}"),
                _ => assert!(
                    e["detail"]["program"]["process"]["exe"]
                        .as_str()
                        .is_some_and(|x| x.contains("python3")),
                    "{e}"
                ),
            }
        }
        common::assert_replay_reproduces(&env, &["--policy", &p]);
    }
);

/// Python makes a socket, lets a git child inherit it (so both hold it), then connects it
/// itself: the connection is not git's.
const INHERIT: &str = r#"
import socket, subprocess, sys
s = socket.socket()
s.set_inheritable(True)
g = subprocess.Popen(["git", "hash-object", "--stdin"], stdin=subprocess.PIPE, pass_fds=[s.fileno()])
try:
    s.settimeout(5)
    s.connect(("forge.test", int(sys.argv[1])))
    s.sendall(b"ping\n")
    print("INHERIT got", s.recv(100))
except Exception as e:
    print("INHERIT refused", type(e).__name__)
g.stdin.close()
g.wait()
"#;

both!(
    a_socket_a_program_shares_with_git_is_not_gits,
    |env: Env| {
        if !common::need(&["git"], "a git child") {
            return;
        }
        setup(&env);
        let sink = Server::echo();
        env.write("inherit.py", INHERIT);
        let pol = named(
            &["forge.test"],
            &[],
            &format!(
                "[[network.allow]]\nhost = \"forge.test\"\nports = [{}]\nprograms = [\"git\"]\n",
                sink.port
            ),
        );
        let o = run(&env, &pol, &format!("{PY} inherit.py {}", sink.port));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("INHERIT refused"), "{}", show(&o));
        let evs = events(&env);
        let refusals = refused(&evs, "network.program");
        assert!(
            refusals.iter().any(|e| e["reason"]
                .as_str()
                .unwrap()
                .contains("held by another program")),
            "{refusals:#?}"
        );
    }
);

/// Python asks to exec itself as a trusted script (the standard library's http/server.py),
/// with an argument the kernel refuses (E2BIG): the exec is let through by the supervisor but
/// never happens, and Python goes on to connect as itself.
const FAILED_EXEC: &str = r#"
import http.server, os, socket, sys
try:
    os.execv("/usr/bin/python3", ["python3", http.server.__file__, "x" * 200000])
except OSError as e:
    print("EXEC failed", e.errno)
try:
    s = socket.create_connection(("forge.test", int(sys.argv[1])), 5)
    s.sendall(b"ping\n")
    print("AFTER got", s.recv(100))
except Exception as e:
    print("AFTER refused", type(e).__name__)
"#;

both!(
    an_exec_that_failed_does_not_make_a_process_what_it_asked_to_run,
    |env: Env| {
        setup(&env);
        let sink = Server::echo();
        env.write("failed.py", FAILED_EXEC);
        let pol = named(
            &["forge.test"],
            &[],
            &format!(
                "[[network.allow]]\nhost = \"forge.test\"\nports = [{}]\nprograms = [\"server.py\"]\n",
                sink.port
            ),
        );
        let o = run(
            &env,
            &pol,
            &format!("/usr/bin/python3 failed.py {}", sink.port),
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("EXEC failed 7"), "E2BIG: {}", show(&o));
        assert!(out.contains("AFTER refused"), "{}", show(&o));
        let evs = events(&env);
        assert!(!refused(&evs, "network.program").is_empty(), "{}", show(&o));
    }
);

// explain answers for the program asked about as the gateway decides, with the built-in
// policy's forge rule.
#[test]
fn explain_takes_the_program() {
    let env = Env::here();
    let ask = |program: &str| {
        env.cordon()
            .args([
                "explain",
                "--program",
                program,
                "https://github.com/org/repo.git/info/refs",
            ])
            .output()
            .unwrap()
    };
    let git = ask("git");
    assert_eq!(git.status.code(), Some(0), "{}", show(&git));
    let curl = ask("curl");
    assert_ne!(curl.status.code(), Some(0), "{}", show(&curl));
    let text = String::from_utf8_lossy(&curl.stdout);
    assert!(text.contains("only for git"), "{text}");
    // Without a program: a process no rule names, as for an unknown owner.
    let none = env
        .cordon()
        .args(["explain", "https://github.com/org/repo.git/info/refs"])
        .output()
        .unwrap();
    assert_ne!(none.status.code(), Some(0), "{}", show(&none));
}
