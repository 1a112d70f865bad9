//! The dashboard's numbers for what the HTTP layer carries, and its state review, in Chromium
//! (issue #45): a sandboxed `curl` through the proxy's `CONNECT` and one through the
//! transparent interception, both to an HTTPS server on loopback, show their bytes on the
//! session's card and the host's row (the gateway hands those connections over uncounted); a
//! session still running is offered no Accept or Discard, in the page or by the server, and a
//! finished one is.

use super::browser::{Browser, shots};
use super::*;
use common::net::{UNPROXIED, https_443, variant_addr};

/// What the page shows of the session `id`: `[ended, up, down, host row's up, host row's
/// down, host row's allowed]`, once its card carries the host `name` and shows the session
/// ended (else null): its rows may be drawn while its last events are still on their way.
fn card_js(id: &str, name: &str) -> String {
    format!(
        "const c = document.querySelector('#sessions .session[data-session=\"{id}\"]');\
         const r = c && [...c.querySelectorAll('tr.host-row')]\
           .find(r => r.dataset.host.startsWith('{name}'));\
         return r && c.dataset.ended === 'true' ? [c.dataset.ended === 'true', +c.dataset.up, +c.dataset.down,\
           +r.dataset.up, +r.dataset.down, +r.cells[1].textContent] : null"
    )
}

/// A session left running: killed should the test fail before it ends it.
struct Running(Option<std::process::Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The events log of each session, by id: `cordon run` writes them under the state home.
fn session_logs(env: &Env) -> Vec<(String, Vec<Value>)> {
    let dir = env.base.join("state/cordon/sessions");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "jsonl") {
            let id = p.file_stem().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).unwrap();
            let events = text
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            out.push((id, events));
        }
    }
    out
}

/// The id of the session whose log holds an HTTP event for `url`, and that event.
fn request_event(env: &Env, url: &str) -> (String, Value) {
    session_logs(env)
        .into_iter()
        .find_map(|(id, events)| {
            events
                .into_iter()
                .find(|e| e["layer"] == "http" && e["detail"]["url"] == url)
                .map(|e| (id, e))
        })
        .unwrap_or_else(|| panic!("no HTTP event for {url}"))
}

#[test]
fn dashboard_counts_proxied_bytes_and_reviews_only_ended_sessions() {
    if !common::need(
        &["chromium", "chromedriver", "curl", "openssl"],
        "the dashboard's bytes for proxied HTTPS, in a browser",
    ) {
        return;
    }
    let Some(env) = Env::new(Who::Root) else {
        return;
    };
    setup(&env);
    let (name, addr) = ("pkg.example.test", variant_addr(&env, 137));
    let root = www(&env, "www-bytes", "hello-intercepted");
    std::fs::write(root.join("big.bin"), vec![b'x'; 200_000]).unwrap();
    env.own(&root);
    let Some((_srv, ca)) = https_443(&env, name, &addr, &root) else {
        return;
    };
    env.write_home(".claude/settings.json", "{}\n");
    let pol = policy(
        &env,
        &format!(
            "[dns]\nhosts = {{ \"{name}\" = \"{addr}\" }}\n\
             [[network.allow]]\nhost = \"{name}\"\nports = [443]\n\
             [tls]\nupstream_ca = \"{}\"\n\
             [state]\nprotect = [\"~/.claude\"]\non_exit = \"pending\"\n",
            ca.display()
        ),
    );
    let ui = Dashboard::start(&env);
    let b = Browser::start();
    b.goto(&ui.url);
    b.wait_for(
        "the live stream",
        "return document.getElementById('conn').textContent === 'live'",
        Duration::from_secs(20),
    );
    let run = |script: &str| {
        env.cordon()
            .env("XDG_RUNTIME_DIR", common::runtime_dir(&env))
            .args([
                "run", "--no-tty", "--policy", &pol, "--", "sh", "-c", script,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Through HTTPS_PROXY (CONNECT, then cordon's TLS) and past it (the transparent path).
    let settings = r#"{"ended": 1}"#;
    let ended = run(&format!(
        "echo PROXY $(curl -sS --max-time 30 -o /dev/null -w '%{{size_download}}' https://{name}/big.bin)\n\
         echo DIRECT $({UNPROXIED} curl -sS --max-time 30 https://{name}/hello.txt)\n\
         echo '{settings}' > ~/.claude/settings.json"
    ));
    let o = wait_limited(ended, Duration::from_secs(90));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", show(&o));
    assert!(out.contains("PROXY 200000"), "{}", show(&o));
    assert!(out.contains("DIRECT hello-intercepted"), "{}", show(&o));
    // Each request's event carries its bytes, head and body (the gateway counts neither).
    let (done_id, big) = request_event(&env, &format!("https://{name}/big.bin"));
    let (_, small) = request_event(&env, &format!("https://{name}/hello.txt"));
    for (e, body) in [(&big, 200_000), (&small, "hello-intercepted".len() as u64)] {
        let (up, down) = (&e["detail"]["bytes_up"], &e["detail"]["bytes_down"]);
        assert!(up.as_u64().is_some_and(|n| n > 20), "{e}");
        assert!(down.as_u64().is_some_and(|n| n > body), "{e}");
    }
    let shown = b.wait_for(
        "the finished session's bytes",
        &card_js(&done_id, name),
        Duration::from_secs(30),
    );
    let n = |i: usize| shown[i].as_u64().unwrap_or(0);
    assert_eq!(shown[0], json!(true), "{shown}");
    assert!(n(1) > 40 && n(2) > 200_000, "{shown}");
    assert!(n(3) > 40 && n(4) > 200_000 && n(5) == 2, "{shown}");
    let card = b.js(&format!(
        "return document.querySelector('#sessions .session[data-session=\"{done_id}\"]').textContent"
    ));
    let card = card.as_str().unwrap_or_default();
    assert!(!card.contains("up 0 B") && card.contains(" KiB"), "{card}");

    // A session that runs until the project holds `go`, its own request counted meanwhile.
    let running = Running(Some(run(&format!(
        "echo '{{\"running\": 1}}' > ~/.claude/notes.md\n\
         curl -sS --max-time 30 -o /dev/null https://{name}/hello.txt\n\
         while [ ! -e go ]; do sleep 0.2; done"
    ))));
    reviews_wait_for_the_end(&env, &ui, &b, &done_id, running);
}

/// The state panel with `done_id` ended and `running` still running: review without Accept and
/// Discard (the server refusing them too) until it ends, then with them.
fn reviews_wait_for_the_end(
    env: &Env,
    ui: &Dashboard,
    b: &Browser,
    done_id: &str,
    mut running: Running,
) {
    let live_id = b.wait_for(
        "the running session's state row",
        "const r = document.querySelector('li.state-row[data-running=\"true\"]');\
         return r ? r.dataset.session : null",
        Duration::from_secs(60),
    );
    let live_id = live_id.as_str().unwrap().to_string();
    assert_ne!(live_id, done_id);
    b.wait_for(
        "the running session's bytes, live",
        &format!(
            "const c = document.querySelector('#sessions .session[data-session=\"{live_id}\"]');\
             return c && c.dataset.ended === 'false' && +c.dataset.up > 0 && +c.dataset.down > 0"
        ),
        Duration::from_secs(30),
    );
    let review = |id: &str| {
        let button = b.js(&format!(
            "return document.querySelector('li.state-row[data-session=\"{id}\"] button.review')"
        ));
        b.click(&button);
    };
    // The decision buttons and the note once the review loaded: [accept shown, discard shown,
    // note shown]; with `decidable`, not before Accept shows.
    let offered = |what: &str, decidable: bool| {
        let script = format!(
            "const v = (id) => !document.getElementById(id).hidden;\
             const s = [v('diff-accept'), v('diff-discard'), v('diff-running')];\
             const loaded = document.getElementById('diff-text').textContent !== 'loading…';\
             return loaded && (s[0] || !{decidable}) ? s : null"
        );
        b.wait_for(what, &script, Duration::from_secs(30))
    };
    review(&live_id);
    let shown = offered("the running session's review", false);
    assert_eq!(shown, json!([false, false, true]));
    b.screenshot(&shots().join("dashboard-review-running.png"));
    // Nor does the server take them, whoever asks.
    for path in ["/api/state/accept", "/api/state/discard"] {
        let (status, body) = decide(env, ui, path, &live_id);
        assert_eq!(status, 409, "{body}");
        assert!(body.contains("still running"), "{body}");
    }
    review(done_id);
    let shown = offered("the finished session's Accept and Discard", true);
    assert_eq!(shown, json!([true, true, false]));
    b.click(&b.js("return document.getElementById('diff-accept')"));
    b.wait_for(
        "the accepted review's note",
        "return document.getElementById('note').textContent.includes('applied')",
        Duration::from_secs(20),
    );
    assert_eq!(
        std::fs::read_to_string(env.home.join(".claude/settings.json")).unwrap(),
        "{\"ended\": 1}\n"
    );
    // The running one, still open in the panel, is offered both once it has ended.
    review(&live_id);
    offered("the running session's review", false);
    env.write("go", "");
    let o = wait_limited(running.0.take().unwrap(), Duration::from_secs(60));
    assert!(o.status.success(), "{}", show(&o));
    let shown = offered("Accept and Discard once the session ended", true);
    assert_eq!(shown, json!([true, true, false]));
    b.screenshot(&shots().join("dashboard-review-ended.png"));
    let (status, body) = decide(env, ui, "/api/state/discard", &live_id);
    assert_eq!(status, 200, "{body}");
    assert!(!env.home.join(".claude/notes.md").exists());
}
