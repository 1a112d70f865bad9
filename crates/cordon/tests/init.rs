//! `cordon init`: a commented cordon.toml that `cordon check` accepts, never written over
//! an existing one without --force, showing what a profile adds.

mod common;

use common::{Env, show};

fn init(env: &Env, args: &[&str]) -> std::process::Output {
    env.cordon().arg("init").args(args).output().unwrap()
}

fn check(env: &Env) -> std::process::Output {
    env.cordon().arg("check").output().unwrap()
}

both!(the_file_it_writes_is_a_policy_check_accepts, |env: Env| {
    let o = init(&env, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let path = env.project.join("cordon.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    // Every section of the schema, commented out.
    for section in [
        "[filesystem]",
        "[[network.allow]]",
        "[[http.rule]]",
        "[exec]",
        "[credentials.NAME]",
    ] {
        assert!(
            text.contains(&format!("# {section}")),
            "{section} missing\n{text}"
        );
    }
    assert!(
        text.lines().all(|l| l.is_empty() || l.starts_with('#')),
        "{text}"
    );
    let o = check(&env);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // Uncommented, a section's lines are policy too: the examples come from the schema.
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at = lines
        .iter()
        .position(|l| l == "# [[network.allow]]")
        .unwrap();
    for l in lines.iter_mut().skip(at).take(4) {
        if l.starts_with("# ") && !l.starts_with("#   ") {
            *l = l
                .trim_start_matches("# ")
                .split("  #")
                .next()
                .unwrap()
                .to_string();
        }
    }
    std::fs::write(&path, lines.join("\n")).unwrap();
    // It loosens the built-in policy, so it needs the user's trust first.
    let o = env.cordon().arg("trust").arg(&path).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let o = check(&env);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        lines.join("\n"),
        show(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("github.com"),
        "{}",
        show(&o)
    );
});

both!(an_existing_file_is_kept_without_force, |env: Env| {
    let path = env.write("cordon.toml", "# mine\n");
    let o = init(&env, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("exists already") && err.contains("--force"),
        "{}",
        show(&o)
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "# mine\n");
    let o = init(&env, &["--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("# [filesystem]")
    );
});

both!(a_profile_shows_what_it_adds, |env: Env| {
    let o = init(&env, &["--profile", "claude"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let text = std::fs::read_to_string(env.project.join("cordon.toml")).unwrap();
    assert!(text.contains("cordon run --profile claude"), "{text}");
    assert!(
        text.contains("#   hosts = [\"api.anthropic.com\"]"),
        "{text}"
    );
    let o = check(&env);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let o = init(&env, &["--force", "--profile", "no-such-agent"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no-such-agent"),
        "{}",
        show(&o)
    );
});
