use super::*;
use crate::{ExecAction, HttpAction, LoadOptions, load};

const NOTE: Note<'static> = Note {
    by: "cordon approve",
    date: "2026-12-06",
    session: "20261206T150405Z-0000beef",
    what: "git push origin main",
};

/// The policy as `cordon check` from the home reads it, with `text` as the user's file.
fn load_user(text: &str) -> Result<crate::Plan, PolicyError> {
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("cordon.toml");
    std::fs::write(&user, text).unwrap();
    let mut o = LoadOptions::new(dir.path(), dir.path(), dir.path().join("trusted.json"));
    o.no_project = true;
    o.user_config = Some(user);
    load(&o).map(|l| l.plan)
}

#[test]
fn an_exec_block_says_who_when_and_what_and_loads() {
    let b = block(
        &Grant::Exec {
            pattern: "git push origin main".into(),
        },
        None,
        &NOTE,
    );
    assert_eq!(
        b,
        "# added by cordon approve on 2026-12-06 for session 20261206T150405Z-0000beef: git push origin main\n\
         [[exec.rule]]\npattern = \"git push origin main\"\naction = \"allow\"\n"
    );
    let plan = load_user(&appended(Some("[exec]\nask = [\"git push *\"]\n"), &b)).unwrap();
    // `[[exec.rule]]` comes before the same file's `ask` list: the allow decides.
    let args: Vec<String> = ["push", "origin", "main"].map(String::from).to_vec();
    let rule = plan.exec.decide("git", &args).unwrap();
    assert_eq!(
        (rule.pattern.as_str(), rule.action),
        ("git push origin main", ExecAction::Allow)
    );
    let other: Vec<String> = ["push", "--force"].map(String::from).to_vec();
    assert_eq!(
        plan.exec.decide("git", &other).unwrap().action,
        ExecAction::Ask
    );
}

#[test]
fn quotes_backslashes_and_newlines_stay_inside_their_strings() {
    // What an agent may put on a command line, trying to end the string or the comment and
    // add a rule of its own.
    let line = "sh -c \"echo 'hi' \\\\ \\\"x\"\n[[exec.rule]]\npattern = \"*\"\naction = \"allow\"";
    let grant = Grant::exact_exec(line);
    let b = block(&grant, None, &Note { what: line, ..NOTE });
    assert_eq!(b.lines().count(), 4, "{b}");
    assert!(b.lines().next().unwrap().starts_with("# added by"), "{b}");
    assert!(!b.contains('\r'));
    let plan = load_user(&b).unwrap();
    let rules: Vec<_> = plan
        .exec
        .rules
        .iter()
        .filter(|r| r.action == ExecAction::Allow)
        .collect();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert!(crate::exec_glob(&rules[0].pattern, line), "{rules:?}");
    assert_eq!(rules[0].pattern, line.replace("[[", "??"));
}

#[test]
fn an_exact_line_becomes_a_pattern_the_policy_takes() {
    let p = |line: &str| match Grant::exact_exec(line) {
        Grant::Exec { pattern } => pattern,
        _ => unreachable!(),
    };
    assert_eq!(p("git push origin main"), "git push origin main");
    // A class-looking `[` and whitespace at the ends become `?`; a lone `[` (test) stays.
    assert_eq!(p("git log --format=[%h]"), "git log --format=?%h]");
    assert_eq!(p("[ -f x ]"), "[ -f x ]");
    assert_eq!(p("echo a "), "echo a?");
    for line in ["git log --format=[%h]", "echo a ", "echo [", "x [[y"] {
        let pattern = p(line);
        assert!(crate::exec_glob(&pattern, line), "{pattern:?} {line:?}");
        let b = block(&Grant::exact_exec(line), None, &NOTE);
        load_user(&b).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    }
}

#[test]
fn an_http_block_names_host_port_method_and_path_and_loads() {
    let b = block(
        &Grant::Http {
            host: "api.example.com".into(),
            port: 443,
            method: "POST".into(),
            path: "/v1/items/\"x\"".into(),
        },
        None,
        &Note {
            what: "POST https://api.example.com/v1/items/\"x\"?q=…&page=…",
            ..NOTE
        },
    );
    assert!(
        b.ends_with(
            "[[http.rule]]\nhost = \"api.example.com\"\nport = 443\nmethods = [\"POST\"]\n\
             path = \"/v1/items/\\\"x\\\"\"\naction = \"allow\"\n"
        ),
        "{b}"
    );
    // A URL with a query in the comment: it is a comment, whatever `?`, `&` or `#` it holds.
    assert!(b.starts_with("# added by cordon approve on 2026-12-06 for session 20261206T150405Z-0000beef: POST https://api.example.com/v1/items/\"x\"?q=…&page=…\n"));
    let plan = load_user(&b).unwrap();
    let r = &plan.http.rules[0];
    assert_eq!(r.action, HttpAction::Allow);
    assert!(r.host.matches("api.example.com"));
    assert_eq!(
        (r.port, r.methods.as_slice(), r.path.as_deref()),
        (
            Some(443),
            &["POST".to_string()][..],
            Some("/v1/items/\"x\"")
        )
    );
}

#[test]
fn a_network_block_loads() {
    let b = block(
        &Grant::Network {
            host: "db.example.com".into(),
            port: 5432,
        },
        None,
        &NOTE,
    );
    assert!(
        b.ends_with("[[network.allow]]\nhost = \"db.example.com\"\nports = [5432]\n"),
        "{b}"
    );
    let plan = load_user(&b).unwrap();
    assert!(
        plan.network
            .allow
            .iter()
            .any(|r| r.host.matches("db.example.com") && r.ports == [5432])
    );
}

#[test]
fn a_grant_for_a_while_carries_until() {
    let b = block(
        &Grant::Exec {
            pattern: "npm publish".into(),
        },
        Some("2026-12-06T16:04:05Z"),
        &NOTE,
    );
    assert!(
        b.ends_with(
            "pattern = \"npm publish\"\naction = \"allow\"\nuntil = \"2026-12-06T16:04:05Z\"\n"
        ),
        "{b}"
    );
}

#[test]
fn a_grant_for_a_while_loads_once_until_exists() {
    let b = block(
        &Grant::Exec {
            pattern: "npm publish".into(),
        },
        Some("2999-12-06T16:04:05Z"),
        &NOTE,
    );
    let plan = load_user(&b).unwrap();
    assert_eq!(
        plan.exec.decide("npm", &["publish".into()]).unwrap().action,
        ExecAction::Allow
    );
}

#[test]
fn control_characters_in_the_comment_are_escaped() {
    let b = block(
        &Grant::Exec {
            pattern: "printf x".into(),
        },
        None,
        &Note {
            what: "printf x\u{1b}[2K\r\tSAFE\u{7f}",
            ..NOTE
        },
    );
    let first = b.lines().next().unwrap();
    assert!(
        first.ends_with("printf x\\u{1b}[2K\\u{d}\\u{9}SAFE\\u{7f}"),
        "{first}"
    );
    load_user(&b).unwrap();
}

#[test]
fn appending_keeps_every_byte_before_it() {
    let b = "# added\n[[exec.rule]]\npattern = \"x\"\naction = \"allow\"\n";
    let theirs = "# my policy\n[exec]\nask = [\"git push *\"]   # keep asking\n\n\n";
    let after = appended(Some(theirs), b);
    assert_eq!(after, format!("{theirs}\n{b}"));
    // A file without its last newline gets one, and nothing else of it changes.
    let bare = "[env]\npass = [\"X\"]";
    assert_eq!(appended(Some(bare), b), format!("{bare}\n\n{b}"));
    assert_eq!(appended(Some(""), b), b);
    assert_eq!(appended(None, b), b);
}

#[test]
fn the_diff_of_an_append_has_context_and_line_numbers() {
    let before = "a\nb\nc\nd\ne\n";
    let after = appended(Some(before), "# x\n[y]\n");
    assert_eq!(
        unified_diff("cordon.toml", Some(before), &after),
        "--- cordon.toml\n+++ cordon.toml\n@@ -3,3 +3,6 @@\n c\n d\n e\n+\n+# x\n+[y]\n"
    );
}

#[test]
fn the_diff_of_a_new_file_and_of_a_missing_last_newline() {
    assert_eq!(
        unified_diff("p.toml", None, "# x\n[y]\n"),
        "--- /dev/null\n+++ p.toml\n@@ -0,0 +1,2 @@\n+# x\n+[y]\n"
    );
    assert_eq!(
        unified_diff("p.toml", Some(""), "# x\n"),
        "--- p.toml\n+++ p.toml\n@@ -0,0 +1,1 @@\n+# x\n"
    );
    let before = "[env]\npass = [\"X\"]";
    let after = appended(Some(before), "# x\n");
    assert_eq!(
        unified_diff("p.toml", Some(before), &after),
        "--- p.toml\n+++ p.toml\n@@ -1,2 +1,4 @@\n [env]\n-pass = [\"X\"]\n\\ No newline at end of file\n+pass = [\"X\"]\n+\n+# x\n"
    );
    assert_eq!(unified_diff("p.toml", Some("a\n"), "a\n"), "");
}

#[test]
fn a_change_in_the_middle_keeps_context_on_both_sides() {
    let before = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
    let after = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
    assert_eq!(
        unified_diff("f", Some(before), after),
        "--- f\n+++ f\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
    );
}

#[test]
fn replacing_is_atomic_keeps_the_mode_and_makes_a_private_directory() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    // A missing directory and file: both made, private.
    let path = t.path().join("config/cordon/cordon.toml");
    assert_eq!(read(&path).unwrap(), None);
    replace(&path, "[exec]\n").unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    assert_eq!(mode(&path), 0o600);
    assert_eq!(read(&path).unwrap().as_deref(), Some("[exec]\n"));
    // An existing file keeps its mode; nothing is left beside it.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    replace(&path, "[env]\n").unwrap();
    assert_eq!(mode(&path), 0o640);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "[env]\n");
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["cordon.toml"]);
}

#[test]
fn a_linked_policy_file_stays_a_link() {
    let t = tempfile::tempdir().unwrap();
    let real = t.path().join("dotfiles/cordon.toml");
    std::fs::create_dir_all(real.parent().unwrap()).unwrap();
    std::fs::write(&real, "# mine\n").unwrap();
    let link = t.path().join("cordon.toml");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    replace(&link, "# mine\n\n# added\n").unwrap();
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(&real).unwrap(),
        "# mine\n\n# added\n"
    );
}
