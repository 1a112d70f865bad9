//! The dashboard, black-box: `cordon ui`'s URL and token, a sandbox that cannot reach it even
//! with a rule naming its port and the token, and the page itself in headless Chromium (driven
//! over WebDriver by chromedriver, `ui/browser.rs`): a sandboxed request appears live, clicking
//! allow lets a held request through, event text stays text (`ui/chromium.rs`); proxied HTTPS
//! shows its bytes, and only a session that ended is offered Accept and Discard
//! (`ui/proxied.rs`); "Allow always" writes the user's policy (`ui/remember.rs`).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::net::{Server, policy, setup, wait_limited, www};
use common::{Env, Who, show};
use serde_json::{Value, json};

#[path = "ui/browser.rs"]
mod browser;
#[path = "ui/chromium.rs"]
mod chromium;
#[path = "ui/proxied.rs"]
mod proxied;
#[path = "ui/remember.rs"]
mod remember;

/// `cordon ui` as the variant's user; killed on drop.
struct Dashboard {
    child: Child,
    url: String,
    port: u16,
    token: String,
}

impl Dashboard {
    fn start(env: &Env) -> Dashboard {
        let mut child = env
            .cordon()
            .env("XDG_RUNTIME_DIR", common::runtime_dir(env))
            .arg("ui")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let url = first.trim_end().to_string();
        let rest = url
            .strip_prefix("http://127.0.0.1:")
            .unwrap_or_else(|| panic!("the first line is the URL on 127.0.0.1: {first:?}"));
        let (port, token) = rest.split_once("/?token=").expect("URL with a token");
        assert_eq!(token.len(), 64, "{url}");
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{url}");
        Dashboard {
            child,
            port: port.parse().unwrap(),
            token: token.to_string(),
            url,
        }
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request to 127.0.0.1:`port`; the status and body.
fn http(port: u16, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // Read the head, then exactly the body it announces: chromedriver keeps connections open.
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed before the response head");
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let mut rest = raw[head_end + 4..].to_vec();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let length = head.lines().find_map(|l| {
        l.strip_prefix("content-length:")
            .and_then(|v| v.trim().parse::<usize>().ok())
    });
    let chunked = head.contains("transfer-encoding: chunked");
    loop {
        let done = match length {
            Some(n) => rest.len() >= n,
            None if chunked => rest.windows(5).any(|w| w == b"0\r\n\r\n"),
            None => false,
        };
        if done {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => rest.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&rest).into_owned();
    let body = if chunked { dechunk(&text) } else { text };
    (status, body)
}

fn root_here() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// One request to 127.0.0.1:`port` as `user` (curl under setpriv), or from this process.
fn http_as(
    user: Option<&str>,
    port: u16,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String) {
    let Some(user) = user else {
        return http(port, method, path, headers, body);
    };
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={user}"))
        .arg(format!("--regid={user}"))
        .args(["--clear-groups", "--", "curl", "-s", "-X", method])
        .args(["-w", "\n%{http_code}", "--max-time", "30"]);
    for h in headers.split("\r\n").filter(|h| !h.is_empty()) {
        c.args(["-H", h]);
    }
    if !body.is_empty() {
        c.args(["--data-binary", body]);
    }
    let o = c
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A request to the dashboard as the variant's user: the dashboard refuses other users.
fn ask(env: &Env, port: u16, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let user = (env.who == Who::User && root_here()).then_some(common::TEST_USER);
    http_as(user, port, method, path, headers, body)
}

/// `POST path` with a JSON `body`, as the page sends it (its token, its origin).
fn post_page(env: &Env, ui: &Dashboard, path: &str, body: &str) -> (u16, String) {
    ask(
        env,
        ui.port,
        "POST",
        &format!("{path}?token={}", ui.token),
        &format!(
            "Origin: http://127.0.0.1:{}\r\nContent-Type: application/json\r\n",
            ui.port
        ),
        body,
    )
}

/// `POST path` (accept or discard) of session `id`'s state review, as the page sends it.
fn decide(env: &Env, ui: &Dashboard, path: &str, id: &str) -> (u16, String) {
    post_page(env, ui, path, &format!("{{\"session\":\"{id}\"}}"))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

// ---- the token, as the variant's user ------------------------------------------------------

both!(
    ui_url_holds_a_token_and_nothing_opens_without_it,
    |env: Env| {
        let ui = Dashboard::start(&env);
        let (status, body) = ask(&env, ui.port, "GET", "/", "", "");
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("missing or wrong token"), "{body}");
        assert!(!body.contains(&ui.token));
        let wrong = "0".repeat(64);
        for path in [
            format!("/?token={wrong}"),
            "/app.js".to_string(),
            format!("/events?token={wrong}"),
            "/api/snapshot".to_string(),
        ] {
            let (status, body) = ask(&env, ui.port, "GET", &path, "", "");
            assert_eq!(status, 403, "{path}: {body}");
        }
        let (status, body) = ask(
            &env,
            ui.port,
            "GET",
            &format!("/?token={}", ui.token),
            "",
            "",
        );
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("cordon dashboard"), "{body}");
        // A state-changing request with the token but from another site is refused.
        let (status, body) = ask(
            &env,
            ui.port,
            "POST",
            &format!("/api/answer?token={}", ui.token),
            "Origin: http://evil.test\r\nContent-Type: application/json\r\n",
            r#"{"session":"S","id":1,"allow":true}"#,
        );
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("cross-origin"), "{body}");
        // The same from the page's own origin reaches the broker client (nothing held: 409).
        let (status, body) = ask(
            &env,
            ui.port,
            "POST",
            &format!("/api/answer?token={}", ui.token),
            &format!(
                "Origin: http://127.0.0.1:{}\r\nContent-Type: application/json\r\n",
                ui.port
            ),
            r#"{"session":"S","id":1,"allow":true}"#,
        );
        assert_eq!(status, 409, "{body}");
        assert!(body.contains("not answered"), "{body}");
        assert!(ui.url.ends_with(&ui.token));
        // Another account, even with the token, is refused: the dashboard is one user's.
        if root_here() {
            let other = match env.who {
                Who::Root => Some(common::TEST_USER),
                Who::User => None,
            };
            let (status, body) = http_as(
                other,
                ui.port,
                "GET",
                &format!("/?token={}", ui.token),
                "",
                "",
            );
            assert_eq!(status, 403, "{body}");
            assert!(body.contains("this dashboard is another user's"), "{body}");
        }
    }
);

// ---- a sandbox never reaches it ------------------------------------------------------------

both!(
    a_sandbox_cannot_open_the_dashboard_even_with_a_rule_and_the_token,
    |env: Env| {
        if !common::need(&["curl"], "the sandbox's client") {
            return;
        }
        setup(&env);
        let ui = Dashboard::start(&env);
        let srv = Server::http(&www(&env, "www", "hello-through-the-rule"));
        let alias = "host.cordon.internal";
        let (u, p, t) = (ui.port, srv.port, &ui.token);
        let pol = policy(
            &env,
            &format!(
                "[[network.allow]]\nhost = \"{alias}\"\nports = [{u}, {p}]\n\
                 [[network.allow]]\nhost = \"ui.example.test\"\nports = [{u}]\n\
                 [dns]\nhosts = {{ \"ui.example.test\" = \"127.0.0.1\" }}\n"
            ),
        );
        let curl = |label: &str, args: &str| {
            format!(
                "echo {label} $(curl -s --max-time 20 -w ' %{{http_code}}' {args} | tr -d '\\n' | tail -c 200)"
            )
        };
        let script = [
            // The rule does open the host's loopback: the same rule, another port.
            curl(
                "CONTROL",
                &format!("--noproxy '*' http://{alias}:{p}/hello.txt"),
            ),
            // Straight through the gateway, with the token and a Host the dashboard would take.
            curl(
                "DIRECT",
                &format!("--noproxy '*' -H 'Host: 127.0.0.1:{u}' 'http://{alias}:{u}/?token={t}'"),
            ),
            // Through the HTTP layer (which keeps the Host it connects to).
            curl(
                "PROXIED",
                &format!("'http://{alias}:{u}/api/snapshot?token={t}'"),
            ),
            // A name the policy points at the host's loopback.
            curl(
                "HOSTS",
                &format!(
                    "--noproxy '*' -H 'Host: 127.0.0.1:{u}' 'http://ui.example.test:{u}/?token={t}'"
                ),
            ),
        ]
        .join("\n");
        let child = env
            .cordon()
            .env("XDG_RUNTIME_DIR", common::runtime_dir(&env))
            .args(["run", "--no-tty", "--audit"])
            .arg(&env.audit)
            .args(["--policy", &pol, "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = wait_limited(child, Duration::from_secs(120));
        let out = String::from_utf8_lossy(&o.stdout);
        let line = |label: &str| {
            out.lines()
                .find(|l| l.starts_with(&format!("{label} ")))
                .unwrap_or_else(|| panic!("no {label} line: {}", show(&o)))
                .to_string()
        };
        assert!(
            line("CONTROL").contains("hello-through-the-rule") && line("CONTROL").ends_with(" 200"),
            "{}",
            show(&o)
        );
        for label in ["DIRECT", "PROXIED", "HOSTS"] {
            let l = line(label);
            assert!(!l.ends_with(" 200"), "{l}\n{}", show(&o));
            assert!(
                !l.contains("cordon dashboard") && !l.contains("sessions"),
                "{l}"
            );
        }
        // Both ways, the dashboard saw a connection from a cordon process and said why.
        for label in ["DIRECT", "PROXIED", "HOSTS"] {
            assert!(
                line(label).contains("connections from a cordon sandbox are refused"),
                "{label}: {}\n{}",
                line(label),
                show(&o)
            );
        }
        // From the host, the same URL works: the refusal is about who asks.
        let (status, _) = ask(&env, u, "GET", &format!("/api/snapshot?token={t}"), "", "");
        assert_eq!(status, 200);
    }
);

// ---- cordon run --ui ------------------------------------------------------------------------

both!(run_ui_serves_the_session_while_it_runs, |env: Env| {
    let mut child = env
        .cordon()
        .env("XDG_RUNTIME_DIR", common::runtime_dir(&env))
        .args(["run", "--ui", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--", "sh", "-c", "echo started; sleep 8; echo done"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let url = loop {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "no dashboard line on stderr"
        );
        if let Some(u) = line.trim_end().strip_prefix("cordon: dashboard: ") {
            break u.to_string();
        }
    };
    let rest = url
        .strip_prefix("http://127.0.0.1:")
        .expect("a 127.0.0.1 URL");
    let (port, token) = rest.split_once("/?token=").expect("URL with a token");
    let port: u16 = port.parse().unwrap();
    let (status, _) = ask(&env, port, "GET", "/api/snapshot", "", "");
    assert_eq!(status, 403);
    // The session's own log (--audit elsewhere) is followed.
    let end = Instant::now() + Duration::from_secs(20);
    let snap = loop {
        let (status, body) = ask(
            &env,
            port,
            "GET",
            &format!("/api/snapshot?token={token}"),
            "",
            "",
        );
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let started = v["sessions"].as_array().is_some_and(|s| {
            s.iter().any(|s| {
                s["events"].as_array().is_some_and(|e| {
                    e.iter()
                        .any(|e| e["layer"] == "session" && e["action"] == "start")
                })
            })
        });
        if started {
            break v;
        }
        assert!(Instant::now() < end, "the session never showed: {body}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        snap["sessions"][0]["log"].as_str(),
        Some(env.audit.to_str().unwrap()),
        "{snap}"
    );
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    let o = wait_limited(child, Duration::from_secs(60));
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "started\ndone\n");
    // Gone with the session.
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
});

// ---- a state review, accepted and discarded through the dashboard ----------------------------

both!(
    state_review_is_accepted_and_discarded_through_the_dashboard,
    |env: Env| {
        let claude = env.home.join(".claude");
        std::fs::create_dir_all(&claude).unwrap();
        std::fs::write(claude.join("settings.json"), "{}\n").unwrap();
        env.own(&env.home);
        let pol = env.base.join("state.toml");
        std::fs::write(
            &pol,
            "[state]\nprotect = [\"~/.claude\"]\non_exit = \"pending\"\n",
        )
        .unwrap();
        env.own(&pol);
        let pol = pol.to_str().unwrap();
        let session = |script: &str| {
            let o = env
                .cordon()
                .args(["run", "--no-tty", "--policy", pol, "--", "sh", "-c", script])
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", show(&o));
        };
        session("echo '{\"hooks\": 1}' > ~/.claude/settings.json");
        session("echo kept-out > ~/.claude/notes.md");
        let ui = Dashboard::start(&env);
        let (port, token) = (ui.port, ui.token.clone());
        let end = Instant::now() + Duration::from_secs(20);
        let pending: Vec<String> = loop {
            let (_, body) = ask(
                &env,
                port,
                "GET",
                &format!("/api/snapshot?token={token}"),
                "",
                "",
            );
            let v: Value = serde_json::from_str(&body).unwrap();
            let ids: Vec<String> = v["state"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s["session"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            if ids.len() == 2 {
                break ids;
            }
            assert!(Instant::now() < end, "two pending reviews expected: {body}");
            std::thread::sleep(Duration::from_millis(300));
        };
        // Oldest first in the store's own order is not promised: find each by its diff.
        let diff = |id: &str| {
            let (status, body) = ask(
                &env,
                port,
                "GET",
                &format!("/api/state?session={id}&token={token}"),
                "",
                "",
            );
            assert_eq!(status, 200, "{body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            v["summary"].as_str().unwrap_or_default().to_string()
        };
        let (edit, add): (Vec<&String>, Vec<&String>) = pending
            .iter()
            .partition(|id| diff(id).contains("settings.json"));
        assert_eq!((edit.len(), add.len()), (1, 1), "{pending:?}");
        assert!(diff(add[0]).contains("notes.md"));
        let post = |path: &str, id: &str| decide(&env, &ui, path, id);
        // Not from another site, even with the token.
        let (status, _) = ask(
            &env,
            port,
            "POST",
            &format!("/api/state/accept?token={token}"),
            "Origin: http://evil.test\r\nContent-Type: application/json\r\n",
            &format!("{{\"session\":\"{}\"}}", edit[0]),
        );
        assert_eq!(status, 403);
        assert_eq!(
            std::fs::read_to_string(claude.join("settings.json")).unwrap(),
            "{}\n"
        );

        let (status, body) = post("/api/state/accept", edit[0]);
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            std::fs::read_to_string(claude.join("settings.json")).unwrap(),
            "{\"hooks\": 1}\n"
        );
        let (status, body) = post("/api/state/discard", add[0]);
        assert_eq!(status, 200, "{body}");
        assert!(!claude.join("notes.md").exists());
        let o = env.cordon().args(["state", "list"]).output().unwrap();
        let list = String::from_utf8_lossy(&o.stdout);
        assert!(
            list.lines()
                .any(|l| l.starts_with(edit[0].as_str()) && l.contains("accepted")),
            "{list}"
        );
        assert!(
            list.lines()
                .any(|l| l.starts_with(add[0].as_str()) && l.contains("discarded")),
            "{list}"
        );
    }
);
