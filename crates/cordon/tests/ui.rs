//! The dashboard, black-box: `cordon ui`'s URL and token, a sandbox that cannot reach it even
//! with a rule naming its port and the token, and the page itself in headless Chromium (driven
//! over WebDriver by chromedriver): a sandboxed request appears live, clicking allow lets a
//! held request through, event text stays text.

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
        let post = |path: &str, id: &str| {
            ask(
                &env,
                port,
                "POST",
                &format!("{path}?token={token}"),
                &format!("Origin: http://127.0.0.1:{port}\r\nContent-Type: application/json\r\n"),
                &format!("{{\"session\":\"{id}\"}}"),
            )
        };
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

// ---- the page in Chromium ------------------------------------------------------------------

/// A minimal W3C WebDriver client over chromedriver's HTTP port: the handful of commands this
/// test needs (navigate, run a script, click, screenshot). A client crate would bring an HTTP
/// client stack and an async runtime for six JSON requests.
struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    fn start() -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Its own process group, so dropping the driver ends the browser it started too, even
        // when the test fails before the WebDriver session is deleted.
        let driver = Command::new("chromedriver")
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let end = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < end, "chromedriver never listened");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::Builder::new()
            .prefix("cordon-ui-chromium")
            .tempdir_in("/var/tmp")
            .unwrap();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
        }}});
        let mut b = Browser {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        let v = b.call("POST", "/session", Some(caps));
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"))
            .to_string();
        b
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let (status, text) = http(
            self.port,
            method,
            path,
            "Content-Type: application/json\r\n",
            &body,
        );
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {status} {e}: {text}"));
        assert_eq!(status, 200, "WebDriver {method} {path}: {v}");
        v["value"].clone()
    }

    fn cmd(&self, method: &str, what: &str, body: Option<Value>) -> Value {
        self.call(method, &format!("/session/{}/{what}", self.session), body)
    }

    fn goto(&self, url: &str) {
        self.cmd("POST", "url", Some(json!({ "url": url })));
    }

    fn js(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
    }

    /// Polls `script` until it returns something truthy (not null/false/""/[]).
    fn wait_for(&self, what: &str, script: &str, limit: Duration) -> Value {
        let end = Instant::now() + limit;
        loop {
            let v = self.js(script);
            let truthy = !(v.is_null()
                || v == json!(false)
                || v == json!("")
                || v.as_array().is_some_and(|a| a.is_empty()));
            if truthy {
                return v;
            }
            if Instant::now() > end {
                let page = self.js("return document.body.innerText");
                panic!("the page never showed {what}; it shows:\n{page}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn click(&self, element: &Value) {
        let id = element[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("not an element: {element}"));
        self.cmd("POST", &format!("element/{id}/click"), Some(json!({})));
    }

    fn screenshot(&self, path: &Path) {
        let b64 = self.cmd("GET", "screenshot", None);
        let png = base64_decode(b64.as_str().expect("base64 PNG"));
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http(
                self.port,
                "DELETE",
                &format!("/session/{}", self.session),
                "",
                "",
            );
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--"])
            .arg(format!("-{}", self.driver.id()))
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0);
    for v in s.bytes().filter_map(val) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// Where the screenshots go: `target/ui-test/`.
fn shots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-test")
}

/// A session log in the dashboard's log directory whose text is markup, as a sandbox could
/// make a URL or command line look.
fn plant_hostile_log(env: &Env) {
    let dir = env.base.join("state/cordon/sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let log = cordon_events::AuditLog::create(
        &dir.join("20261201T000000Z-0badc0de.jsonl"),
        "20261201T000000Z-0badc0de",
    )
    .unwrap();
    use cordon_events::{Action, Layer, NewEvent};
    log.emit(NewEvent::new(
        Layer::Session,
        Action::Start,
        "session started",
    ))
    .unwrap();
    log.emit(
        NewEvent::new(
            Layer::Exec,
            Action::Deny,
            "<img src=x onerror=\"document.title='pwned'\"><b id=injected>bold</b>",
        )
        .rule("built-in")
        .detail("program", "<script>document.title='pwned'</script>"),
    )
    .unwrap();
    env.own(&env.base.join("state"));
}

#[test]
fn dashboard_in_chromium() {
    // Checked before anything else, so the strict-mode test below sees this skip.
    if !common::need(
        &["chromium", "chromedriver", "curl"],
        "the dashboard's end-to-end browser test",
    ) {
        return;
    }
    let Some(env) = Env::new(Who::Root) else {
        return;
    };
    setup(&env);
    let root = www(&env, "asked", "unused");
    std::fs::create_dir_all(root.join("ask")).unwrap();
    std::fs::write(root.join("ask/a.txt"), "the-upstream-body").unwrap();
    std::fs::write(root.join("ask/c.txt"), "c-body").unwrap();
    env.own(&root);
    std::fs::create_dir_all(root.join("judged")).unwrap();
    std::fs::write(root.join("judged/ok.txt"), "judged-ok").unwrap();
    env.own(&root);
    let srv = Server::http(&root);
    // A stand-in for the LLM judge's API (a remote paid service), over real HTTP.
    let judge = Server::start(&["judge"]);
    let (name, p) = ("api.example.test", srv.port);
    let pol = policy(
        &env,
        &format!(
            "[dns]\nhosts = {{ \"{name}\" = \"127.0.0.1\" }}\n\
             [[network.allow]]\nhost = \"{name}\"\nports = [{p}]\n\
             [[http.rule]]\nname = \"a-person-decides\"\nhost = \"{name}\"\npath = \"/ask/*\"\naction = \"ask\"\n\
             [[http.rule]]\nname = \"ask-the-judge\"\nhost = \"{name}\"\npath = \"/judged/*\"\naction = \"judge\"\n\
             [judge]\napi = \"openai\"\nurl = \"http://127.0.0.1:{}\"\nmodel = \"fake\"\n\
             policy = \"Reading public files is fine.\"\n\
             [exec]\nask_timeout = 120\nask = [\"touch asked-exec\"]\n",
            judge.port
        ),
    );
    plant_hostile_log(&env);
    let ui = Dashboard::start(&env);
    let b = Browser::start();

    // Without the token the page is refused.
    b.goto(&format!("http://127.0.0.1:{}/", ui.port));
    let text = b.js("return document.body.innerText");
    assert!(
        text.as_str()
            .is_some_and(|t| t.contains("missing or wrong token")),
        "{text}"
    );

    b.goto(&ui.url);
    b.wait_for(
        "the live stream",
        "return document.getElementById('conn').textContent === 'live'",
        Duration::from_secs(20),
    );
    // Event text from a session is shown as text, never run or parsed as markup.
    let hostile = b.wait_for(
        "the planted event, as text",
        "return [...document.querySelectorAll('#events tr')].map(r => r.textContent)\
         .find(t => t.includes('onerror')) || null",
        Duration::from_secs(20),
    );
    assert!(
        hostile
            .as_str()
            .unwrap()
            .contains("<b id=injected>bold</b>"),
        "{hostile}"
    );
    assert_eq!(
        b.js(
            "return [document.title, document.querySelectorAll('#injected, main img, main script').length]"
        ),
        json!(["cordon dashboard", 0])
    );

    // A session whose request waits for a person.
    let script = format!(
        "touch asked-exec && echo EXEC ran\n\
         echo JUDGED $(curl -s --max-time 30 http://{name}:{p}/judged/ok.txt)\n\
         echo DIRECT $(curl -s --max-time 30 --noproxy '*' http://{name}:{p}/hello.txt)\n\
         echo GOT $(curl -s --max-time 100 -w ' %{{http_code}}' http://{name}:{p}/ask/a.txt)\n\
         echo GOT2 $(curl -s --max-time 100 -o /dev/null -w '%{{http_code}}' http://{name}:{p}/ask/b.txt)\n\
         echo GOT3 $(curl -s --max-time 100 -w ' %{{http_code}}' http://{name}:{p}/ask/c.txt)\n\
         echo GOT3 $(curl -s --max-time 100 -w ' %{{http_code}}' http://{name}:{p}/ask/c.txt)"
    );
    let run = env
        .cordon()
        .env("XDG_RUNTIME_DIR", common::runtime_dir(&env))
        .args([
            "run", "--no-tty", "--policy", &pol, "--", "sh", "-c", &script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A held command is answered the same way.
    let exec = b.wait_for(
        "the held command's allow button",
        "const li = [...document.querySelectorAll('li.approval')]\
         .find(l => l.textContent.includes('touch asked-exec') && l.textContent.includes('[exec]'));\
         return li ? li.querySelector('button.allow-once') : null",
        Duration::from_secs(60),
    );
    b.click(&exec);
    b.wait_for(
        "the allowed command's exec event",
        "return [...document.querySelectorAll('#events tr.event')]\
         .some(r => r.dataset.layer === 'exec' && r.dataset.action === 'allow' \
         && r.textContent.includes('asked-exec'))",
        Duration::from_secs(20),
    );
    // It appears live: the held request in the approvals list and as an event.
    let button = b.wait_for(
        "the held request's allow button",
        "const li = [...document.querySelectorAll('li.approval')]\
         .find(l => l.textContent.includes('/ask/a.txt'));\
         return li ? li.querySelector('button.allow-once') : null",
        Duration::from_secs(60),
    );
    // The session's start streamed in too (the HTTP layer logs the request once decided).
    b.wait_for(
        "the session's start event",
        "return [...document.querySelectorAll('#events tr.event')]\
         .some(r => r.dataset.layer === 'session' && r.dataset.action === 'start' \
         && r.textContent.includes('/ask/a.txt'))",
        Duration::from_secs(20),
    );
    b.wait_for(
        "the session's card",
        "return document.querySelectorAll('#sessions .session').length >= 1",
        Duration::from_secs(20),
    );
    b.screenshot(&shots().join("dashboard-waiting.png"));
    assert_eq!(
        srv.count("REQ GET /ask/a.txt"),
        0,
        "held, not forwarded yet"
    );

    b.click(&button);
    // The next request is held in turn; Deny refuses it.
    let deny = b.wait_for(
        "the second held request's deny button",
        "const li = [...document.querySelectorAll('li.approval')]\
         .find(l => l.textContent.includes('/ask/b.txt'));\
         return li ? li.querySelector('button.deny') : null",
        Duration::from_secs(60),
    );
    b.click(&deny);
    // Allow always: the same rule, method and host are not asked again this session.
    let always = b.wait_for(
        "the third held request's allow-always button",
        "const li = [...document.querySelectorAll('li.approval')]\
         .find(l => l.textContent.includes('/ask/c.txt'));\
         return li ? li.querySelector('button.allow-always') : null",
        Duration::from_secs(60),
    );
    b.click(&always);
    after_the_answers(&b, run, &srv, name, p);
}

/// What the page and the session show once every held question of [`dashboard_in_chromium`]
/// was answered.
fn after_the_answers(b: &Browser, run: std::process::Child, srv: &Server, name: &str, p: u16) {
    let o = wait_limited(run, Duration::from_secs(90));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.lines().any(|l| l == "GOT the-upstream-body 200"),
        "{}",
        show(&o)
    );
    assert!(out.lines().any(|l| l == "GOT2 403"), "{}", show(&o));
    assert!(out.lines().any(|l| l == "JUDGED judged-ok"), "{}", show(&o));
    assert!(out.lines().any(|l| l == "DIRECT unused"), "{}", show(&o));
    assert!(out.lines().any(|l| l == "EXEC ran"), "{}", show(&o));
    assert_eq!(
        out.lines().filter(|l| *l == "GOT3 c-body 200").count(),
        2,
        "{}",
        show(&o)
    );
    assert_eq!(srv.count("REQ GET /ask/a.txt"), 1, "{}", srv.log());
    assert_eq!(srv.count("REQ GET /ask/b.txt"), 0, "{}", srv.log());
    assert_eq!(srv.count("REQ GET /ask/c.txt"), 2, "{}", srv.log());
    // The decision shows up too, and the host's numbers.
    b.wait_for(
        "the allowed request",
        "return [...document.querySelectorAll('#events tr.event')]\
         .some(r => r.dataset.action === 'allow' && r.dataset.layer === 'http' \
         && r.textContent.includes('/ask/a.txt'))",
        Duration::from_secs(20),
    );
    b.wait_for(
        "the host's row: 5 allowed (4 requests, 1 connection), 1 denied",
        &format!(
            "return [...document.querySelectorAll('tr.host-row')]\
             .some(r => r.dataset.host === '{name}:{p}' && \
             [...r.cells].slice(1).map(c => c.textContent).join(',') === '5,1,0')"
        ),
        Duration::from_secs(20),
    );
    assert_eq!(
        b.js("return document.querySelectorAll('li.approval').length"),
        json!(0)
    );
    // The direct connection: its name lookup and its bytes.
    let card = b.wait_for(
        "the direct flow's DNS answer and bytes on the session's card",
        "return [...document.querySelectorAll('#sessions .session')]\
         .map(c => c.textContent)\
         .find(t => /dns [1-9]\\d* answered/.test(t) && !/down 0 B/.test(t)) || null",
        Duration::from_secs(20),
    );
    assert!(card.as_str().unwrap().contains("judge calls 1"), "{card}");
    // The judge was asked once: counted, with its latency.
    b.wait_for(
        "the judge call on the session's card",
        "return [...document.querySelectorAll('#sessions .session')]\
         .some(c => /judge calls 1 \\(mean \\d+ ms, max \\d+ ms\\)/.test(c.textContent))",
        Duration::from_secs(20),
    );
    // The layer filter keeps only that layer's rows.
    assert_eq!(
        b.js(
            "const f = document.getElementById('f-layer'); f.value = 'http';\
              f.dispatchEvent(new Event('input'));\
              const rows = [...document.querySelectorAll('#events tr.event')];\
              return [rows.length >= 2, rows.every(r => r.dataset.layer === 'http')]"
        ),
        json!([true, true])
    );
    b.js(
        "const f = document.getElementById('f-layer'); f.value = '';\
          f.dispatchEvent(new Event('input')); return null",
    );
    b.screenshot(&shots().join("dashboard.png"));
}

/// The browser test is a failure, not a silent pass, where CI has no Chromium: run it with a
/// PATH without chromium, strict and not.
#[test]
fn browser_test_fails_in_strict_mode_without_chromium() {
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/bin/sh", bin.path().join("sh")).unwrap();
    let run = |strict: bool| {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "dashboard_in_chromium", "--nocapture"])
            .env("PATH", bin.path())
            .env_remove("CORDON_TEST_UNAVAILABLE")
            .env_remove("CORDON_TEST_SKIP_LOG");
        if strict {
            c.env("CORDON_TEST_STRICT", "1");
        } else {
            c.env_remove("CORDON_TEST_STRICT");
        }
        c.output().unwrap()
    };
    let o = run(true);
    let all = common::all_output(&o);
    assert!(!o.status.success(), "{}", show(&o));
    assert!(
        all.contains("CORDON_TEST_STRICT=1 and this test cannot run what it claims")
            && all.contains("missing: chromium"),
        "{}",
        show(&o)
    );
    let o = run(false);
    let all = common::all_output(&o);
    assert!(o.status.success(), "{}", show(&o));
    assert!(
        all.contains("skipped: dashboard_in_chromium"),
        "{}",
        show(&o)
    );
}
