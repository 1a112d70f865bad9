//! The dashboard in Chromium: a sandboxed request appears live, clicking allow lets a held
//! request through, event text stays text.

use super::browser::{Browser, shots};
use super::*;

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

/// The policy of [`dashboard_in_chromium`]: a rule that asks a person, one that asks the judge
/// (at `judge_port`), and a held command.
fn chromium_policy(env: &Env, name: &str, p: u16, judge_port: u16) -> String {
    policy(
        env,
        &format!(
            "[dns]\nhosts = {{ \"{name}\" = \"127.0.0.1\" }}\n\
             [[network.allow]]\nhost = \"{name}\"\nports = [{p}]\n\
             [[http.rule]]\nname = \"a-person-decides\"\nhost = \"{name}\"\npath = \"/ask/*\"\naction = \"ask\"\n\
             [[http.rule]]\nname = \"ask-the-judge\"\nhost = \"{name}\"\npath = \"/judged/*\"\naction = \"judge\"\n\
             [judge]\napi = \"openai\"\nurl = \"http://127.0.0.1:{}\"\nmodel = \"fake\"\n\
             policy = \"Reading public files is fine.\"\n\
             [exec]\nask_timeout = 120\nask = [\"touch asked-exec\"]\n",
            judge_port
        ),
    )
}

/// Without the token the page is refused; with it, a session's event text is shown as text,
/// never run or parsed as markup.
fn token_and_markup_are_guarded(b: &Browser, ui: &Dashboard) {
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
}

/// What the session of [`dashboard_in_chromium`] runs: the held command, a judged request,
/// one past the proxy, and three held requests.
fn held_script(name: &str, p: u16) -> String {
    format!(
        "touch asked-exec && echo EXEC ran\n\
         echo JUDGED $(curl -s --max-time 30 http://{name}:{p}/judged/ok.txt)\n\
         echo DIRECT $(curl -s --max-time 30 --noproxy '*' http://{name}:{p}/hello.txt)\n\
         echo GOT $(curl -s --max-time 100 -w ' %{{http_code}}' http://{name}:{p}/ask/a.txt)\n\
         echo GOT2 $(curl -s --max-time 100 -o /dev/null -w '%{{http_code}}' http://{name}:{p}/ask/b.txt)\n\
         echo GOT3 $(curl -s --max-time 100 -w ' %{{http_code}}' http://{name}:{p}/ask/c.txt)\n\
         echo GOT3 $(curl -s --max-time 100 -w ' %{{http_code}}' http://{name}:{p}/ask/c.txt)"
    )
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
    let pol = chromium_policy(&env, name, p, judge.port);
    plant_hostile_log(&env);
    let ui = Dashboard::start(&env);
    let b = Browser::start();

    token_and_markup_are_guarded(&b, &ui);

    // A session whose request waits for a person.
    let script = held_script(name, p);
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
             [...r.cells].slice(1, 4).map(c => c.textContent).join(',') === '5,1,0')"
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
        c.args(["--exact", "chromium::dashboard_in_chromium", "--nocapture"])
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
        all.contains("skipped: chromium::dashboard_in_chromium"),
        "{}",
        show(&o)
    );
}
