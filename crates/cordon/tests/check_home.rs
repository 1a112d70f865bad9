//! `cordon check` and `cordon explain` read a policy from any directory, the home included —
//! where a user checks their own ~/.config/cordon/cordon.toml — while `cordon run` still
//! refuses to take the home as a project by accident.

mod common;

use common::{Env, show};

/// A user policy that tightens: checking it loosens nothing and needs no trust.
const USER_POLICY: &str =
    "[filesystem]\nhome_show = [\"~/notes.txt\"]\n\n[exec]\ndeny = [\"curl *\"]\n";

fn in_home(env: &Env, args: &[&str]) -> std::process::Output {
    let mut c = env.cordon();
    c.current_dir(&env.home).args(args);
    c.output().unwrap()
}

both!(check_runs_from_the_home, |env: Env| {
    let user = env.write_home(".config/cordon/cordon.toml", USER_POLICY);
    let o = in_home(&env, &["check"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("\"curl *\""),
        "the user's policy is in it:\n{}",
        show(&o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("the project would be"), "{}", show(&o));
    // There is no project: the home is not made writable, and the note says so.
    assert!(err.contains("--project"), "{}", show(&o));
    assert!(out.contains("# project: none"), "{}", show(&o));
    let home = env.home.display().to_string();
    assert!(
        !out.contains(&format!("\"{home}\", # project")),
        "{}",
        show(&o)
    );
    // Nor are the project's rules said of the home (`${PROJECT}/.git/hooks` is no path here).
    assert!(
        !out.contains(&format!("{home}/.git/hooks")) && !out.contains("cordon-no-project"),
        "{}",
        show(&o)
    );
    // The user's file named explicitly: checked once, not merged over itself.
    let o = in_home(&env, &["check", user.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.matches("\"curl *\"").count(), 1, "{}", show(&o));
    // A mistake in it is reported as one, from the home too.
    env.write_home(".config/cordon/cordon.toml", "[limits]\npids = \"many\"\n");
    let o = in_home(&env, &["check"]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("pids"), "{}", show(&o));
    assert!(
        !err.contains("pids = many"),
        "a hint that is itself wrong:\n{}",
        show(&o)
    );
});

both!(explain_runs_from_the_home, |env: Env| {
    env.write_home(".config/cordon/cordon.toml", USER_POLICY);
    let o = in_home(&env, &["explain", "--", "curl", "https://example.com"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("deny"), "{}", show(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("the project would be"),
        "{}",
        show(&o)
    );
});

both!(run_still_refuses_the_home_as_a_project, |env: Env| {
    let o = in_home(&env, &["run", "--no-tty", "--", "true"]);
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the project would be"),
        "{}",
        show(&o)
    );
});
