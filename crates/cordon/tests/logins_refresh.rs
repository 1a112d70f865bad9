//! Brokered logins, black-box: an agent inside renews its OAuth login (or logs in for the first
//! time) at its provider's token endpoint — here a local TLS stand-in that rotates refresh
//! tokens the way providers do (each one works once). The stand-in only ever sees real tokens;
//! the host's login file holds the new real ones as soon as the answer is in (asserted during
//! the session and after it), every other key kept; inside, the answer and everything else
//! hold placeholders only; a second refresh sends the rotated real token; the agent's own
//! save of its login file never reaches the host. Only a refresh of the host's own login
//! writes the host's file: a login made inside (`authorization_code`, maybe another
//! account's) is held in cordon's state for the user to review, the host's login untouched.

mod common;

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use common::net::{Server, policy, setup, variant_addr, wait_limited};
use common::{Env, show};
use serde_json::Value;

const TOKEN_URL: &str = "https://platform.claude.com/v1/oauth/token";
const ACCESS: &str = "sk-ant-oat01-CanaryAccessClaude0123456789_-CanaryAccessClaude0123456789_-";
const REFRESH: &str = "sk-ant-ort01-CanaryRefreshClaude0123456789CanaryRefreshClaude0123456789";
/// What the stand-in's new tokens start with (then the generation, then `Rotated…`).
const NEW_ACCESS: &str = "sk-ant-oat01-Gen";
const NEW_REFRESH: &str = "sk-ant-ort01-Gen";
/// The authorization code the browser hands the agent (no secret of the host's: it is the
/// agent's to send).
const CODE: &str = "code-AuthorizationCodeOfTheTest0123456789";

/// The stand-in's tokens of generation `n`, as it makes them.
fn issued(n: u32) -> (String, String) {
    (
        format!("{NEW_ACCESS}{n}Rotated{}", "A".repeat(40)),
        format!("{NEW_REFRESH}{n}Rotated{}", "R".repeat(40)),
    )
}

fn claude_file() -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "claudeAiOauth": {
            "accessToken": ACCESS,
            "refreshToken": REFRESH,
            "expiresAt": 1_000_000_000_000_u64,
            "scopes": ["user:inference", "user:profile"],
            "subscriptionType": "max"
        }
    }))
    .unwrap()
}

/// The stand-in of Claude's token endpoint on this variant's `addr:443`, and its CA.
fn stand_in(env: &Env, addr: &str) -> Option<(Server, std::path::PathBuf)> {
    if !common::need(&["curl", "openssl"], "a TLS stand-in of the token endpoint") {
        return None;
    }
    if std::net::TcpListener::bind((addr, 443)).is_err() {
        common::skip(
            "root (port 443)",
            &format!("a stand-in token endpoint on {addr}:443"),
        );
        return None;
    }
    let tls = env.base.join(format!("tls-oauth-{addr}"));
    assert!(common::net::make_tls(&tls, "platform.claude.com"));
    let (cert, key) = (tls.join("srv.pem"), tls.join("srv.key"));
    let srv = Server::start(&[
        "oauth",
        "--rt",
        REFRESH,
        "--code",
        CODE,
        "--access",
        NEW_ACCESS,
        "--refresh",
        NEW_REFRESH,
        "--addr",
        addr,
        "--port",
        "443",
        "--tls",
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
    ]);
    Some((srv, tls.join("ca.pem")))
}

fn login_policy(env: &Env, addr: &str, ca: &std::path::Path) -> String {
    policy(
        env,
        &format!(
            "[dns]\nhosts = {{ \"platform.claude.com\" = \"{addr}\" }}\n\
             [tls]\nupstream_ca = \"{}\"\n",
            ca.display()
        ),
    )
}

/// Lines of the sandbox's script that look for a real token inside: in the home and project,
/// in every process's environment and command line, in the memory of every process it may
/// read. The markers are spelled backwards so the script itself never holds them.
fn scan_lines() -> String {
    let py = common::net::PY;
    format!(
        "printf '%s\\n' detatoR yranaC | rev > /tmp/pats\n\
         echo FILEHITS $(grep -rlF -f /tmp/pats \"$HOME\" \"$PWD\" 2>/dev/null | wc -l)\n\
         echo PROCHITS $(for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f 2>/dev/null; done | grep -cF -f /tmp/pats)\n\
         echo MEMHITS $({py} -c '{MEMSCAN}')\n"
    )
}

/// Counts the processes (other than itself) whose readable memory holds a marker.
const MEMSCAN: &str = r#"import os,re
pats=[p[::-1].encode() for p in ("detatoR","yranaC")]
hits=0
for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p)!=os.getpid()]:
  try:
    maps=open("/proc/%s/maps"%pid).read().splitlines(); mem=open("/proc/%s/mem"%pid,"rb",0)
  except OSError: continue
  found=False
  for m in maps:
    a,b=[int(x,16) for x in m.split()[0].split("-")]
    if m.split()[1][0]!="r" or b-a>1<<28: continue
    try:
      mem.seek(a); d=mem.read(b-a)
    except (OSError,ValueError,OverflowError): continue
    if any(p in d for p in pats): found=True; break
  hits+=found
print(hits)"#;

fn line(out: &str, p: &str) -> String {
    out.lines()
        .find_map(|x| x.strip_prefix(p))
        .unwrap_or("<missing>")
        .trim()
        .to_string()
}

fn host_json(f: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(f).unwrap_or_default()).unwrap_or(Value::Null)
}

fn field<'a>(v: &'a Value, path: &str) -> &'a str {
    path.split('.')
        .fold(v, |v, k| &v[k])
        .as_str()
        .unwrap_or_default()
}

/// Waits (bounded) until `f` holds refresh token `want`.
fn wait_for_refresh(f: &std::path::Path, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = host_json(f);
        if field(&v, "claudeAiOauth.refreshToken") == want || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

both!(a_refresh_inside_rotates_the_host_login_file, |env: Env| {
    let addr = variant_addr(&env, 91);
    setup(&env);
    let Some((srv, ca)) = stand_in(&env, &addr) else {
        return;
    };
    let file = env.home.join(".claude/.credentials.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, claude_file()).unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    env.own(&env.home);
    let owner = std::fs::metadata(&file).unwrap().uid();
    let pol = login_policy(&env, &addr, &ca);
    let py = common::net::PY;
    let get = |expr: &str| format!("{py} -c 'import json,sys; print(json.load(sys.stdin){expr})'");
    // As Claude Code refreshes: JSON with grant_type, refresh_token, client_id and scope. The
    // second as Google's and codex's libraries would: a form.
    let script = format!(
        "F=~/.claude/.credentials.json; U={TOKEN_URL}\n\
         RT0=$({rt} < \"$F\")\n\
         R1=$(curl -sS --max-time 20 -H 'content-type: application/json' -d \"{{\\\"grant_type\\\":\\\"refresh_token\\\",\\\"refresh_token\\\":\\\"$RT0\\\",\\\"client_id\\\":\\\"9d1c250a-e61b-44d9-88ed-5944d1962f5e\\\",\\\"scope\\\":\\\"user:inference user:profile\\\"}}\" $U)\n\
         echo \"R1 $R1\"\n\
         echo STEP1\n\
         n=0; while [ ! -e go ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done\n\
         RT1=$(printf %s \"$R1\" | {rtr})\n\
         echo RT1LEN ${{#RT1}}\n\
         R2=$(curl -sS --max-time 20 -d \"grant_type=refresh_token&refresh_token=$RT1&client_id=c\" $U)\n\
         echo \"R2 $R2\"\n\
         R3=$(curl -sS --max-time 20 -H 'content-type: application/json' -d \"{{\\\"grant_type\\\":\\\"refresh_token\\\",\\\"refresh_token\\\":\\\"$RT0\\\"}}\" $U)\n\
         echo \"R3 $R3\"\n\
         for k in 1 2; do curl -s --max-time 20 -o /dev/null -w '%{{http_code}}' -d \"grant_type=refresh_token&refresh_token=$RT0\" $U > /tmp/c$k & done; wait\n\
         echo TWO-AT-ONCE $(cat /tmp/c1) $(cat /tmp/c2)\n\
         echo INSIDE-RT $({rt} < \"$F\" | cut -c1-13)\n\
         printf '%s' \"$R3\" > \"$F\" 2>/dev/null && echo SAVE ok || echo SAVE refused\n\
         {scan}",
        rt = get("[\"claudeAiOauth\"][\"refreshToken\"]"),
        rtr = get("[\"refresh_token\"]"),
        scan = scan_lines(),
    );
    let _ = std::fs::remove_file(&env.audit);
    let go = env.project.join("go");
    let _ = std::fs::remove_file(&go);
    let child = env
        .cordon()
        .env("XDG_RUNTIME_DIR", common::runtime_dir(&env))
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--profile", "claude", "--policy", &pol, "--"])
        .args([
            "sh",
            "-c",
            &format!("{}{script}", common::as_agent(&env, "claude")),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // During the session: the host's file holds generation 1 as soon as the answer is in.
    let (a1, r1) = issued(1);
    let during = wait_for_refresh(&file, &r1);
    std::fs::write(&go, "").unwrap();
    env.own(&go);
    let o = wait_limited(child, Duration::from_secs(120));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        field(&during, "claudeAiOauth.refreshToken"),
        r1,
        "{}\n{}",
        show(&o),
        srv.log()
    );
    assert_eq!(field(&during, "claudeAiOauth.accessToken"), a1);
    // Every other key kept; the expiry moved to about an hour from now.
    assert_eq!(during["claudeAiOauth"]["subscriptionType"], "max");
    assert_eq!(
        during["claudeAiOauth"]["scopes"],
        serde_json::json!(["user:inference", "user:profile"])
    );
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let exp = during["claudeAiOauth"]["expiresAt"].as_u64().unwrap_or(0);
    assert!(
        exp > now_ms + 3_000_000 && exp < now_ms + 3_700_000,
        "expiresAt {exp}"
    );

    // The stand-in saw the real refresh token each time, never a placeholder: first the
    // host's, then generation 1 (the agent sent the placeholder from the first answer), then
    // generation 2 (the agent sent the stale placeholder of its file: it stands for the
    // newest token, the old one being dead).
    let (_, r2) = issued(2);
    let (_, r3) = issued(3);
    let (_, r4) = issued(4);
    let (a5, r5) = issued(5);
    let log = srv.log();
    let grants: Vec<&str> = log.lines().filter(|l| l.starts_with("TOKEN ")).collect();
    assert_eq!(
        grants,
        vec![
            format!("TOKEN refresh_token {REFRESH} 200"),
            format!("TOKEN refresh_token {r1} 200"),
            format!("TOKEN refresh_token {r2} 200"),
            // Two at once with the same stale placeholder: one after the other, each with
            // the token the one before made.
            format!("TOKEN refresh_token {r3} 200"),
            format!("TOKEN refresh_token {r4} 200"),
        ],
        "{log}\n{}",
        show(&o)
    );
    // Inside: answers of the same shape, with placeholders of the same length.
    for r in ["R1 ", "R2 ", "R3 "] {
        let v: Value = serde_json::from_str(&line(&out, r)).unwrap_or(Value::Null);
        let (at, rt) = (field(&v, "access_token"), field(&v, "refresh_token"));
        assert!(
            at.starts_with("sk-ant-oat01-") && at.len() == a1.len(),
            "{r}{v}\n{}",
            show(&o)
        );
        assert!(
            rt.starts_with("sk-ant-ort01-") && rt.len() == r1.len(),
            "{r}{v}"
        );
        assert!(!at.contains("Rotated") && !rt.contains("Rotated"), "{r}{v}");
        assert_eq!(v["expires_in"], 3600);
    }
    assert_eq!(line(&out, "RT1LEN "), r1.len().to_string());
    // The file inside is the read-only copy taken at start; the agent's save is refused.
    assert_eq!(line(&out, "INSIDE-RT "), "sk-ant-ort01-");
    assert_eq!(line(&out, "SAVE "), "refused", "{}", show(&o));
    assert_eq!(line(&out, "FILEHITS "), "0", "{}", show(&o));
    assert_eq!(line(&out, "PROCHITS "), "0", "{}", show(&o));
    assert_eq!(line(&out, "MEMHITS "), "0", "{}", show(&o));
    // After the session: the newest real tokens, 0600, the owner kept.
    let after = host_json(&file);
    assert_eq!(line(&out, "TWO-AT-ONCE "), "200 200", "{}", show(&o));
    assert_eq!(field(&after, "claudeAiOauth.refreshToken"), r5);
    assert_eq!(field(&after, "claudeAiOauth.accessToken"), a5);
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(meta.uid(), owner);
    // Neither the audit log nor the terminal holds a token.
    let audit = std::fs::read_to_string(&env.audit).unwrap_or_default();
    for v in [ACCESS, REFRESH, &a1, &r1, &r2, &r3, &r4, &a5, &r5] {
        assert!(!audit.contains(v), "the audit log holds a token");
        assert!(!common::all_output(&o).contains(v), "{}", show(&o));
    }
    assert!(audit.contains("renewed (refresh_token)"), "{audit}");
    // Accepting the session does not bring any copy of the login file home.
    accept_session(&env);
    assert_eq!(field(&host_json(&file), "claudeAiOauth.refreshToken"), r5);
});

fn accept_session(env: &Env) {
    let list = env.cordon().args(["state", "list"]).output().unwrap();
    let ids: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    for id in ids {
        let _ = env
            .cordon()
            .args(["state", "accept", &id])
            .output()
            .unwrap();
    }
}

/// The held copies of login files (`$XDG_STATE_HOME/cordon/held-logins/SESSION/…`).
fn held_copies(env: &Env) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let root = env.base.join("state/cordon/held-logins");
    for s in std::fs::read_dir(root).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(s.path()).into_iter().flatten().flatten() {
            out.push(f.path());
        }
    }
    out
}

/// The script of an agent's login inside: it exchanges the browser's code (spelled backwards
/// so the script never holds it), prints the answer, and saves it as its login file.
fn code_login_script() -> String {
    let py = common::net::PY;
    // The shell's double-quoted JSON: its quotes escaped for the shell.
    let body = r#"{\"grant_type\":\"authorization_code\",\"code\":\"$C\",\"redirect_uri\":\"https://platform.claude.com/oauth/code/callback\",\"client_id\":\"c\",\"code_verifier\":\"v\"}"#;
    format!(
        "F=~/.claude/.credentials.json; U={TOKEN_URL}\n\
         C=$(printf %s {rcode} | rev)\n\
         R=$(curl -sS --max-time 20 -H 'content-type: application/json' -d \"{body}\" $U)\n\
         echo \"R $R\"\n\
         printf '%s' \"$R\" | {py} -c 'import json,sys; r=json.load(sys.stdin); print(json.dumps({{\"claudeAiOauth\":{{\"accessToken\":r[\"access_token\"],\"refreshToken\":r[\"refresh_token\"],\"expiresAt\":1}}}}))' > \"$F\" 2>/dev/null && echo SAVE ok || echo SAVE refused\n\
         {scan}",
        rcode = CODE.chars().rev().collect::<String>(),
        scan = scan_lines(),
    )
}

/// `cordon run` of `script` with the claude profile and `pol`, waited for (bounded).
/// [`code_login_script`] ran: the stand-in exchanged the code, and the sandbox got an access
/// token of the real shape (a placeholder: what the file and memory scans check).
#[track_caller]
fn assert_code_login_worked(srv: &Server, o: &std::process::Output, out: &str) {
    assert!(
        srv.log()
            .lines()
            .any(|l| l == format!("TOKEN authorization_code {CODE} 200")),
        "{}\n{}",
        srv.log(),
        show(o)
    );
    let v: Value = serde_json::from_str(&line(out, "R ")).unwrap_or(Value::Null);
    assert!(
        field(&v, "access_token").starts_with("sk-ant-oat01-"),
        "{v}\n{}",
        show(o)
    );
}

fn run_claude(env: &Env, pol: &str, script: &str) -> std::process::Output {
    let _ = std::fs::remove_file(&env.audit);
    let child = env
        .cordon()
        .env("XDG_RUNTIME_DIR", common::runtime_dir(env))
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--profile", "claude", "--policy", pol, "--"])
        .args([
            "sh",
            "-c",
            &format!("{}{script}", common::as_agent(env, "claude")),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_limited(child, Duration::from_secs(120))
}

// The user is logged in on the host; inside, the agent logs in anew (an `authorization_code`
// exchange, which could be another account's): the host's login file is byte for byte what
// it was, the new tokens are held in cordon's state (0600, a whole login file) and the user
// is told. The control, first: a session's refresh of the host's own login does rewrite the
// host's file, so the check sees a write when there is one.
both!(a_login_inside_never_replaces_the_hosts, |env: Env| {
    let addr = variant_addr(&env, 95);
    setup(&env);
    let Some((srv, ca)) = stand_in(&env, &addr) else {
        return;
    };
    let file = env.home.join(".claude/.credentials.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, claude_file()).unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    env.own(&env.home);
    let pol = login_policy(&env, &addr, &ca);
    let py = common::net::PY;
    let refresh = format!(
        "RT0=$({py} -c 'import json,sys; print(json.load(sys.stdin)[\"claudeAiOauth\"][\"refreshToken\"])' < ~/.claude/.credentials.json)\n\
         curl -sS --max-time 20 -o /dev/null -w 'CODE %{{http_code}}\\n' -d \"grant_type=refresh_token&refresh_token=$RT0\" {TOKEN_URL}"
    );
    let o = run_claude(&env, &pol, &refresh);
    let (a1, r1) = issued(1);
    let after = host_json(&file);
    assert_eq!(
        field(&after, "claudeAiOauth.refreshToken"),
        r1,
        "{}\n{}",
        show(&o),
        srv.log()
    );
    assert_eq!(field(&after, "claudeAiOauth.accessToken"), a1);
    assert!(held_copies(&env).is_empty());
    // The login inside.
    let before = std::fs::read(&file).unwrap();
    let o = run_claude(&env, &pol, &code_login_script());
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let (a2, r2) = issued(2);
    // Inside, the login works (placeholders only).
    assert_code_login_worked(&srv, &o, &out);
    assert_eq!(line(&out, "FILEHITS "), "0", "{}", show(&o));
    // The host's login: untouched, accepted or not.
    accept_session(&env);
    assert_eq!(std::fs::read(&file).unwrap(), before, "{}", show(&o));
    // Held, said during the session and at exit, and logged.
    assert!(err.contains("were not written to"), "{}", show(&o));
    assert!(
        err.contains("was not written to your login"),
        "{}",
        show(&o)
    );
    let audit = std::fs::read_to_string(&env.audit).unwrap_or_default();
    assert!(
        audit.contains("not written to the host's login file"),
        "{audit}"
    );
    for t in [&a2, &r2] {
        assert!(!audit.contains(t.as_str()), "the audit log holds a token");
    }
    let held = held_copies(&env);
    assert_eq!(held.len(), 1, "{held:?}\n{}", show(&o));
    let copy = host_json(&held[0]);
    assert_eq!(field(&copy, "claudeAiOauth.accessToken"), a2);
    assert_eq!(field(&copy, "claudeAiOauth.refreshToken"), r2);
    assert_eq!(
        copy["claudeAiOauth"]["subscriptionType"], "max",
        "a whole login file"
    );
    assert_eq!(std::fs::metadata(&held[0]).unwrap().mode() & 0o777, 0o600);
});

both!(a_first_login_inside_is_held_for_review, |env: Env| {
    let addr = variant_addr(&env, 93);
    setup(&env);
    let Some((srv, ca)) = stand_in(&env, &addr) else {
        return;
    };
    std::fs::create_dir_all(env.home.join(".claude")).unwrap();
    env.own(&env.home);
    let file = env.home.join(".claude/.credentials.json");
    let pol = login_policy(&env, &addr, &ca);
    let o = run_claude(&env, &pol, &code_login_script());
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let (a1, r1) = issued(1);
    assert_code_login_worked(&srv, &o, &out);
    assert!(!line(&out, "R ").contains("Rotated"), "{}", show(&o));
    assert_eq!(line(&out, "FILEHITS "), "0", "{}", show(&o));
    assert_eq!(line(&out, "PROCHITS "), "0", "{}", show(&o));
    assert_eq!(line(&out, "MEMHITS "), "0", "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!err.contains("cordon: logged in"), "{}", show(&o));
    assert!(err.contains("were not written to"), "{}", show(&o));
    // The agent saved the placeholders as its login (the file did not exist, so it could):
    // that copy is dropped at exit, said plainly.
    assert_eq!(line(&out, "SAVE "), "ok", "{}", show(&o));
    assert!(
        err.contains(&format!(
            "the sandbox's own copy of {} was dropped",
            file.display()
        )),
        "{}",
        show(&o)
    );
    // On the host: no login file, accepted or not; the real tokens in a held copy only its
    // owner reads.
    accept_session(&env);
    assert!(!file.exists(), "{}", show(&o));
    let held = held_copies(&env);
    assert_eq!(held.len(), 1, "{held:?}");
    let copy = host_json(&held[0]);
    assert_eq!(
        field(&copy, "claudeAiOauth.accessToken"),
        a1,
        "{}",
        show(&o)
    );
    assert_eq!(field(&copy, "claudeAiOauth.refreshToken"), r1);
    assert_eq!(std::fs::metadata(&held[0]).unwrap().mode() & 0o777, 0o600);
});
