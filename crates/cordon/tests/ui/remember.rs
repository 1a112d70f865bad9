//! "Allow always" and "Allow for 1 h" through the dashboard's API, as the page sends them: the
//! change is asked for first (its diff shown), and the answer carries its digest back, so what
//! is written into the user's policy is what was shown — by `cordon ui`'s own process, the way
//! `cordon approve --always` writes it.

use super::browser::{Browser, shots};
use super::*;
use common::{runtime_dir, wait_for_question};

/// `POST path` with `body`, as the page sends it.
fn post(env: &Env, ui: &Dashboard, path: &str, body: &str) -> (u16, Value) {
    let (status, text) = post_page(env, ui, path, body);
    let v = serde_json::from_str(&text).unwrap_or_else(|_| json!({ "text": text }));
    (status, v)
}

both!(
    allow_always_through_the_dashboard_writes_the_users_policy,
    |env: Env| {
        let user = env.home.join(".config/cordon/cordon.toml");
        let theirs = format!("{}[exec]\nask = [\"touch viaui*\"]\n", common::SHOW_NOTES);
        std::fs::write(&user, &theirs).unwrap();
        env.own(&user);
        let ui = Dashboard::start(&env);
        let child = env
            .cordon()
            .env("XDG_RUNTIME_DIR", runtime_dir(&env))
            .args(["run", "--no-tty", "--audit"])
            .arg(&env.audit)
            .args(["--", "sh", "-c", "touch viaui-file && echo made"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (id, _) = wait_for_question(&env, "touch viaui-file");
        let (session, n) = id.split_once('#').unwrap();
        let n: u64 = n.parse().unwrap();
        // The page is told the question can be remembered.
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let (_, body) = ask(
                &env,
                ui.port,
                "GET",
                &format!("/api/snapshot?token={}", ui.token),
                "",
                "",
            );
            let v: Value = serde_json::from_str(&body).unwrap();
            let listed = v["approvals"]
                .as_array()
                .unwrap()
                .iter()
                .find(|q| q["id"] == n);
            if let Some(q) = listed {
                assert_eq!(q["rememberable"], true, "{q}");
                break;
            }
            assert!(Instant::now() < end, "the question never showed: {body}");
            std::thread::sleep(Duration::from_millis(200));
        }
        let which = json!({ "session": session, "id": n });
        // For an hour: the rule carries `until`, in UTC.
        let mut hour = which.clone();
        hour["for"] = json!("1h");
        let (status, p) = post(&env, &ui, "/api/remember", &hour.to_string());
        assert_eq!(status, 200, "{p}");
        assert!(p["diff"].as_str().unwrap().contains("+until = \"20"), "{p}");
        assert!(p["until"].as_str().unwrap().ends_with('Z'), "{p}");
        // Always: the diff of the user's file, nothing written yet.
        let (status, p) = post(&env, &ui, "/api/remember", &which.to_string());
        assert_eq!(status, 200, "{p}");
        assert_eq!(p["file"], user.display().to_string(), "{p}");
        let diff = p["diff"].as_str().unwrap();
        assert!(
            diff.contains("+[[exec.rule]]\n+pattern = \"touch viaui-file\"\n+action = \"allow\"\n"),
            "{diff}"
        );
        assert_eq!(std::fs::read_to_string(&user).unwrap(), theirs);
        // A digest that is not the shown change's writes nothing and answers nothing.
        let mut stale = which.clone();
        stale["allow"] = json!(true);
        stale["write"] = json!({ "until": null, "digest": "0".repeat(64) });
        let (status, r) = post(&env, &ui, "/api/answer", &stale.to_string());
        assert_eq!(status, 409, "{r}");
        assert!(r.to_string().contains("changed since"), "{r}");
        assert_eq!(std::fs::read_to_string(&user).unwrap(), theirs);
        // The shown change, confirmed.
        let mut answer = which.clone();
        answer["allow"] = json!(true);
        answer["write"] = json!({ "until": null, "digest": p["digest"] });
        let (status, r) = post(&env, &ui, "/api/answer", &answer.to_string());
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["written"], user.display().to_string(), "{r}");
        let o = wait_limited(child, Duration::from_secs(60));
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(env.project.join("viaui-file").exists());
        let now = std::fs::read_to_string(&user).unwrap();
        let added = now
            .strip_prefix(&format!("{theirs}\n"))
            .unwrap_or_else(|| panic!("{now}"));
        assert!(
            added.starts_with("# added by cordon ui on 20")
                && added.contains(&format!(" for session {session}: touch viaui-file\n")),
            "{added}"
        );
        let o = env.cordon().arg("check").output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    }
);

#[test]
fn allow_always_in_chromium() {
    if !common::need(
        &["chromium", "chromedriver"],
        "the dashboard's allow-always button in a browser",
    ) {
        return;
    }
    let Some(env) = Env::new(Who::Root) else {
        return;
    };
    let user = env.home.join(".config/cordon/cordon.toml");
    let theirs = format!("{}[exec]\nask = [\"touch clicked*\"]\n", common::SHOW_NOTES);
    std::fs::write(&user, &theirs).unwrap();
    let ui = Dashboard::start(&env);
    let b = Browser::start();
    b.goto(&ui.url);
    let child = env
        .cordon()
        .env("XDG_RUNTIME_DIR", runtime_dir(&env))
        .args(["run", "--no-tty", "--", "sh", "-c", "touch clicked-file"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let button = b.wait_for(
        "the held command's allow-always (policy) button",
        "const li = [...document.querySelectorAll('li.approval')]\
         .find(l => l.textContent.includes('touch clicked-file'));\
         return li ? li.querySelector('button.allow-policy') : null",
        Duration::from_secs(60),
    );
    b.click(&button);
    // The diff is shown, and nothing is written before it is confirmed.
    let diff = b.wait_for(
        "the rule's diff",
        "const d = document.getElementById('remember');\
         return d.hidden ? null : document.getElementById('remember-diff').textContent",
        Duration::from_secs(20),
    );
    assert!(
        diff.as_str()
            .unwrap()
            .contains("+pattern = \"touch clicked-file\""),
        "{diff}"
    );
    b.screenshot(&shots().join("dashboard-remember.png"));
    assert_eq!(std::fs::read_to_string(&user).unwrap(), theirs);
    let write = b.js("return document.getElementById('remember-write')");
    b.click(&write);
    b.wait_for(
        "the note that the rule is written",
        "return document.getElementById('note').textContent.includes('the rule is in')",
        Duration::from_secs(20),
    );
    let o = wait_limited(child, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let now = std::fs::read_to_string(&user).unwrap();
    assert!(
        now.starts_with(&theirs)
            && now
                .ends_with("[[exec.rule]]\npattern = \"touch clicked-file\"\naction = \"allow\"\n"),
        "{now}"
    );
}
