use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use super::*;

const SESSION: &str = "20261206T150405Z-0000beef";

/// 2026-12-06T15:04:05Z.
fn now() -> SystemTime {
    humantime::parse_rfc3339("2026-12-06T15:04:05Z").unwrap()
}

/// Load options as `cordon check` from the home reads them, with the user's file at
/// `DIR/config/cordon/cordon.toml` (not made).
fn options(dir: &Path) -> cordon_policy::LoadOptions {
    let mut o = cordon_policy::LoadOptions::new(dir, dir, dir.join("trusted.json"));
    o.no_project = true;
    o.user_config = Some(dir.join("config/cordon/cordon.toml"));
    o
}

fn user_file(dir: &Path, text: &str) -> PathBuf {
    let f = dir.join("config/cordon/cordon.toml");
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    std::fs::write(&f, text).unwrap();
    f
}

fn question(what: &str, subject: Subject) -> Question {
    Question {
        id: 3,
        layer: "exec".into(),
        what: what.into(),
        rule: "r".into(),
        seconds_left: 60,
        subject: Some(subject),
    }
}

fn git_push() -> Question {
    question(
        "git push origin main",
        Subject::Exec {
            program: "git".into(),
            args: ["push", "origin", "main"].map(String::from).to_vec(),
            pattern: "git push *".into(),
        },
    )
}

fn change(dir: &Path, q: &Question, keep: Keep, scope: Scope) -> Result<Change> {
    let how = Written {
        keep,
        scope,
        by: "cordon approve",
        now: now(),
    };
    Change::in_policy(options(dir), SESSION, q, &how)
}

fn exec_decides(dir: &Path, program: &str, args: &[&str]) -> cordon_policy::ExecAction {
    let plan = cordon_policy::load(&options(dir)).unwrap().plan;
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    plan.exec.decide(program, &args).unwrap().action
}

#[test]
fn an_exec_answer_is_appended_after_every_byte_of_the_users_file_and_decides() {
    let t = tempfile::tempdir().unwrap();
    let theirs =
        "# my own policy\n[exec]\nask = [\"git push *\"]   # ask me\n\n[env]\npass = [\"EDITOR\"]";
    let f = user_file(t.path(), theirs);
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let c = change(t.path(), &git_push(), Keep::Always, Scope::Exact).unwrap();
    let block = "# added by cordon approve on 2026-12-06 for session 20261206T150405Z-0000beef: git push origin main\n\
                 [[exec.rule]]\npattern = \"git push origin main\"\naction = \"allow\"\n";
    let shown = f.display();
    assert_eq!(
        c.diff,
        format!(
            "--- {shown}\n+++ {shown}\n@@ -3,4 +3,9 @@\n ask = [\"git push *\"]   # ask me\n \n [env]\n-pass = [\"EDITOR\"]\n\\ No newline at end of file\n+pass = [\"EDITOR\"]\n+\n{}",
            block.lines().map(|l| format!("+{l}\n")).collect::<String>()
        )
    );
    c.write().unwrap();
    let now = std::fs::read_to_string(&f).unwrap();
    assert_eq!(now, format!("{theirs}\n\n{block}"));
    assert_eq!(
        std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
        0o644
    );
    use cordon_policy::ExecAction::{Allow, Ask};
    assert_eq!(
        exec_decides(t.path(), "git", &["push", "origin", "main"]),
        Allow
    );
    assert_eq!(exec_decides(t.path(), "git", &["push", "--force"]), Ask);
}

#[test]
fn the_asking_rules_pattern_on_request() {
    let t = tempfile::tempdir().unwrap();
    user_file(t.path(), "[exec]\nask = [\"git push *\"]\n");
    let c = change(t.path(), &git_push(), Keep::Always, Scope::Pattern).unwrap();
    assert!(
        c.after
            .ends_with("pattern = \"git push *\"\naction = \"allow\"\n")
    );
    c.write().unwrap();
    use cordon_policy::ExecAction::Allow;
    assert_eq!(exec_decides(t.path(), "git", &["push", "--force"]), Allow);
}

#[test]
fn a_rule_table_above_that_decides_first_is_named_and_the_file_put_back() {
    let t = tempfile::tempdir().unwrap();
    let theirs = "[[exec.rule]]\npattern = \"git push *\"\naction = \"ask\"\n";
    let f = user_file(t.path(), theirs);
    let c = change(t.path(), &git_push(), Keep::Always, Scope::Exact).unwrap();
    let e = crate::output::chain(&c.write().unwrap_err());
    assert!(e.contains("is as it was"), "{e}");
    assert!(
        e.contains("exec rule \"git push *\" (ask)") && e.contains("decides first"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), theirs);
}

#[test]
fn a_file_that_would_not_load_is_put_back_and_a_new_one_removed() {
    let t = tempfile::tempdir().unwrap();
    // Rules as an inline array: TOML cannot add a `[[exec.rule]]` table to it.
    let theirs = "exec.rule = [{ pattern = \"make *\", action = \"ask\" }]\n";
    let f = user_file(t.path(), theirs);
    let c = change(t.path(), &git_push(), Keep::Always, Scope::Exact).unwrap();
    let e = crate::output::chain(&c.write().unwrap_err());
    assert!(e.contains("would no longer load"), "{e}");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), theirs);

    // No file and no directory: both are made (the directory 0700).
    let t = tempfile::tempdir().unwrap();
    let c = change(t.path(), &git_push(), Keep::Always, Scope::Exact).unwrap();
    assert!(c.diff.starts_with("--- /dev/null\n"), "{}", c.diff);
    c.write().unwrap();
    let f = options(t.path()).user_config.unwrap();
    let dir_mode = std::fs::metadata(f.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    assert!(
        std::fs::read_to_string(&f)
            .unwrap()
            .starts_with("# added by cordon approve")
    );
}

#[test]
fn a_file_changed_since_the_diff_is_not_written() {
    let t = tempfile::tempdir().unwrap();
    let f = user_file(t.path(), "[exec]\n");
    let c = change(t.path(), &git_push(), Keep::Always, Scope::Exact).unwrap();
    let shown = c.digest();
    std::fs::write(&f, "[exec]\nask = [\"npm *\"]\n").unwrap();
    let e = crate::output::chain(&c.write().unwrap_err());
    assert!(e.contains("changed since the diff"), "{e}");
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        "[exec]\nask = [\"npm *\"]\n"
    );
    // The dashboard's digest names the change: the same question now makes another one.
    let again = change(t.path(), &git_push(), Keep::Always, Scope::Exact).unwrap();
    assert_ne!(again.digest(), shown);
}

#[test]
fn an_http_answer_allows_that_method_host_port_and_path() {
    let t = tempfile::tempdir().unwrap();
    user_file(t.path(), "[http]\ndefault = \"ask\"\n");
    let q = question(
        "POST https://api.example.com/v1/items?page=…",
        Subject::Http {
            method: "POST".into(),
            host: "api.example.com".into(),
            port: 443,
            path: "/v1/items".into(),
        },
    );
    let c = change(t.path(), &q, Keep::Always, Scope::Exact).unwrap();
    assert!(
        c.after.ends_with(
            "[[http.rule]]\nhost = \"api.example.com\"\nport = 443\nmethods = [\"POST\"]\npath = \"/v1/items\"\naction = \"allow\"\n"
        ),
        "{}",
        c.after
    );
    c.write().unwrap();
    let plan = cordon_policy::load(&options(t.path())).unwrap().plan;
    let d = |m: &str, p: &str| {
        cordon_http::explain::explain_request(&plan, m, "api.example.com", 443, p, "page=2", None)
            .unwrap()
            .action
    };
    use cordon_policy::HttpAction::{Allow, Ask};
    assert_eq!(d("POST", "/v1/items"), Allow);
    assert_eq!(d("DELETE", "/v1/items"), Ask);
    assert_eq!(d("POST", "/v1/other"), Ask);
}

#[test]
fn a_network_answer_allows_that_host_and_port() {
    let t = tempfile::tempdir().unwrap();
    let q = question(
        "db.example.com:5432",
        Subject::Network {
            host: "db.example.com".into(),
            port: 5432,
        },
    );
    change(t.path(), &q, Keep::Always, Scope::Exact)
        .unwrap()
        .write()
        .unwrap();
    let plan = cordon_policy::load(&options(t.path())).unwrap().plan;
    assert!(
        cordon_net::explain_flow(&plan, "db.example.com", 5432, false, None)
            .unwrap()
            .allow
    );
    assert!(
        !cordon_net::explain_flow(&plan, "db.example.com", 5433, false, None)
            .unwrap()
            .allow
    );
}

#[test]
fn a_question_without_a_subject_cannot_be_remembered() {
    let t = tempfile::tempdir().unwrap();
    let mut q = git_push();
    q.subject = None;
    let e = change(t.path(), &q, Keep::Always, Scope::Exact).unwrap_err();
    assert!(e.to_string().contains("no rule allows"), "{e}");
}

/// An hour from [`now`].
fn in_an_hour() -> Keep {
    Keep::Until(now() + Duration::from_secs(3600))
}

#[test]
fn an_answer_for_an_hour_carries_until_in_utc() {
    let t = tempfile::tempdir().unwrap();
    user_file(t.path(), "[exec]\nask = [\"git push *\"]\n");
    let c = change(t.path(), &git_push(), in_an_hour(), Scope::Exact).unwrap();
    assert!(
        c.after.ends_with(
            "[[exec.rule]]\npattern = \"git push origin main\"\naction = \"allow\"\nuntil = \"2026-12-06T16:04:05Z\"\n"
        ),
        "{}",
        c.after
    );
    assert!(
        c.diff.ends_with("+until = \"2026-12-06T16:04:05Z\"\n"),
        "{}",
        c.diff
    );
}

#[test]
fn an_answer_for_an_hour_loads_and_decides_once_until_exists() {
    let t = tempfile::tempdir().unwrap();
    user_file(t.path(), "[exec]\nask = [\"git push *\"]\n");
    let soon = Keep::Until(SystemTime::now() + Duration::from_secs(3600));
    change(t.path(), &git_push(), soon, Scope::Exact)
        .unwrap()
        .write()
        .unwrap();
    use cordon_policy::ExecAction::Allow;
    assert_eq!(
        exec_decides(t.path(), "git", &["push", "origin", "main"]),
        Allow
    );
}

#[test]
fn an_exact_rule_that_would_allow_more_or_keep_a_secret_is_refused() {
    let t = tempfile::tempdir().unwrap();
    user_file(t.path(), "[exec]\nask = [\"deploy *\"]\n");
    let exec = |args: &[&str]| {
        question(
            &format!("deploy {}", args.join(" ")),
            Subject::Exec {
                program: "deploy".into(),
                args: args.iter().map(|a| a.to_string()).collect(),
                pattern: "deploy *".into(),
            },
        )
    };
    let e = change(t.path(), &exec(&["*"]), Keep::Always, Scope::Exact).unwrap_err();
    assert!(e.to_string().contains("wildcard"), "{e}");
    let token = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB";
    let e = change(
        t.path(),
        &exec(&["--token", token]),
        Keep::Always,
        Scope::Exact,
    )
    .unwrap_err();
    assert!(e.to_string().contains("secret"), "{e}");
    // The asking rule's pattern is still on offer, and the comment keeps no secret.
    let c = change(
        t.path(),
        &exec(&["--token", token]),
        Keep::Always,
        Scope::Pattern,
    )
    .unwrap();
    assert!(!c.diff.contains(token), "{}", c.diff);
    let http = question(
        "POST https://github.com/*",
        Subject::Http {
            method: "POST".into(),
            host: "github.com".into(),
            port: 443,
            path: "/*".into(),
        },
    );
    let e = change(t.path(), &http, Keep::Always, Scope::Exact).unwrap_err();
    assert!(e.to_string().contains("wildcard"), "{e}");
}

#[test]
fn writing_an_answer_does_not_restart_the_files_grants() {
    let t = tempfile::tempdir().unwrap();
    let f = user_file(t.path(), "[exec]\nask = [\"git push *\"]\n");
    let then = SystemTime::now() - std::time::Duration::from_secs(7200);
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(then)
        .unwrap();
    let c = change(t.path(), &git_push(), Keep::Always, Scope::Exact).unwrap();
    c.write().unwrap();
    let at = std::fs::metadata(&f).unwrap().modified().unwrap();
    assert_eq!(
        at, then,
        "`for` counts from the file's time: it must not move"
    );
}
