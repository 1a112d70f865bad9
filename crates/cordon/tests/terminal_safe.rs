//! Text from inside the sandbox reaches the person's terminal escaped, black-box: an argv, a
//! URL path and a file name holding an escape sequence (`ESC [2J`, clear the screen) and a bidi
//! override (U+202E, which reverses what follows) come out as `\u{1b}[2J\u{202e}` on every
//! terminal surface cordon has: the denial lines, the exit summary and review, `cordon log`,
//! `cordon state diff` and `cordon approve` — never as the raw characters.

mod common;

use common::net::{Server, setup, www};
use common::{Env, approve, show, wait_for_question};

/// What the agent puts in an argument, a URL path and a file name.
const EVIL: &str = "e\u{1b}[2J\u{202e}vil";
/// A host name a request claims in its `Host` header (HTTP allows no ESC there; the HTTP layer
/// shows a header that is not visible ASCII as `�` before the terminal is reached, and DNS names
/// are ASCII by then, so only "never raw" is checked for a host here: the summary's and denial
/// lines' own unit tests escape a hostile host).
const HOST: &str = "x\u{202e}lmth.test";
/// [`EVIL`] as `cordon_events::terminal` shows it.
const SHOWN: &str = "e\\u{1b}[2J\\u{202e}vil";
/// [`EVIL`] percent-encoded, as a client sends it in a URL.
const ENCODED: &str = "e%1B%5B2J%E2%80%AEvil";

/// Fails when `out` holds the raw escape sequence or the raw override. (A bare ESC is not
/// looked for: cordon may colour its own words on a terminal.)
#[track_caller]
fn no_raw(what: &str, out: &str) {
    assert!(
        !out.contains("\u{1b}[2J") && !out.contains('\u{202e}'),
        "{what} let the raw text through:\n{out:?}"
    );
}

fn write_policy(env: &Env, text: &str) -> String {
    let p = env.base.join("terminal.toml");
    std::fs::write(&p, text).unwrap();
    env.own(&p);
    p.display().to_string()
}

both!(denials_summary_log_and_review_show_escapes, |env: Env| {
    if !common::need(&["curl", "script"], "a denied request on a terminal") {
        return;
    }
    setup(&env);
    let root = www(&env, "site", "unused");
    env.own(&root);
    let srv = Server::http(&root);
    let (name, port) = ("api.example.test", srv.port);
    std::fs::create_dir_all(env.home.join(".claude")).unwrap();
    env.own(&env.home.join(".claude"));
    let pol = write_policy(
        &env,
        &format!(
            "[dns]\nhosts = {{ \"{name}\" = \"127.0.0.1\" }}\n\
                 [[network.allow]]\nhost = \"{name}\"\nports = [{port}]\n\
                 [[http.rule]]\nname = \"no-secrets\"\nhost = \"{name}\"\n\
                 path = \"/secret*\"\naction = \"deny\"\n\
                 [exec]\ndeny = [\"printf *\"]\n\
                 [state]\nprotect = [\"~/.claude\"]\non_exit = \"ask\"\n"
        ),
    );
    // The agent's own output goes nowhere: what the terminal shows is cordon's.
    let script = env.write(
        "evil.sh",
        &format!(
            "exec >/dev/null 2>&1\n\
                 /usr/bin/printf '{EVIL}'\n\
                 curl -s --max-time 10 'http://{name}:{port}/secret/{ENCODED}'\n\
                 curl -s --max-time 10 -H 'Host: {HOST}' 'http://{name}:{port}/x'\n\
                 echo planted > ~/.claude/'{EVIL}'\n\
                 exit 0\n"
        ),
    );
    let line = format!(
        "{} run --audit {} --policy {pol} -- sh {}",
        env.cordon_line(),
        env.audit.display(),
        script.display()
    );
    // The exit review lists the planted file; `p` leaves it pending for `state diff`.
    let out = common::under_pty_answering(&env, &line, "[k]eep", "p\n");
    no_raw("the terminal of `cordon run`", &out);
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with('+') && l.contains(&format!("\"{SHOWN}\""))),
        "the exit review does not list the file escaped:\n{out}"
    );
    let exec = out
        .lines()
        .find(|l| l.contains("cordon: denied `printf"))
        .unwrap_or_else(|| panic!("no exec denial line:\n{out}"));
    assert!(exec.contains(SHOWN), "{exec}");
    let http = out
        .lines()
        .find(|l| l.contains("cordon: denied") && l.contains("/secret/"))
        .unwrap_or_else(|| panic!("no HTTP denial line:\n{out}"));
    assert!(http.contains(SHOWN), "{http}");
    let exit = out
        .lines()
        .find(|l| l.contains("cordon: exit "))
        .unwrap_or_else(|| panic!("no exit line:\n{out}"));
    assert!(exit.contains("1 denied"), "{exit}");
    let session = exit
        .split("`cordon state diff ")
        .nth(1)
        .and_then(|r| r.split('`').next())
        .unwrap_or_else(|| panic!("no pending state in the exit line: {exit}"))
        .to_string();

    let o = env
        .cordon()
        .args(["log", "--file"])
        .arg(&env.audit)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", show(&o));
    no_raw("`cordon log`", &log);
    assert!(log.contains(SHOWN), "{log}");
    assert!(log.contains("\\u{202e}"), "{log}");

    let o = env
        .cordon()
        .args(["state", "diff", &session])
        .output()
        .unwrap();
    let diff = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", show(&o));
    no_raw("`cordon state diff`", &diff);
    assert!(diff.contains(&format!("\"{SHOWN}\"")), "{diff}");
});

both!(approve_lists_a_held_argv_escaped, |env: Env| {
    let pol = write_policy(&env, "[exec]\nask = [\"printf *\"]\nask_timeout = 5\n");
    let arg = format!("{EVIL} SAFE-LOOKING");
    let child = env
        .cordon()
        .env("XDG_RUNTIME_DIR", common::runtime_dir(&env))
        .args(["run", "--no-tty", "--policy", &pol, "--"])
        .args(["/usr/bin/printf", &arg])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (id, listed) = wait_for_question(&env, "SAFE-LOOKING");
    no_raw("`cordon approve --list`", &listed);
    assert!(listed.contains(SHOWN), "{listed}");
    let o = approve(&env, &[&id, "--deny"]);
    let answered = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", show(&o));
    no_raw("`cordon approve --deny`", &answered);
    assert!(answered.contains(SHOWN), "{answered}");
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    no_raw("the terminal of a held exec", &err);
    assert!(err.contains(SHOWN), "{err}");
});
