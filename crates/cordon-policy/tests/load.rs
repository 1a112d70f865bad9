//! Loading policies from files: merge order, profiles, homes, trust and output.

use std::fs;
use std::path::PathBuf;

use cordon_policy::{LandlockMode, LoadOptions, Loaded, PathRule, PolicyError, TrustStore, load};

mod common;
use common::*;

#[test]
fn merge_order_lists_append_and_scalars_override() {
    let env = Env::new();
    env.user(
        "[filesystem]\nwritable = [\"~/.cache/cargo\"]\n\
         [env]\npass = [\"MY_VAR\"]\nset = { A = \"user\", B = \"user\" }\n\
         [limits]\nmemory = \"4G\"\npids = 512\n",
    );
    env.project(
        "[filesystem]\ndeny = [\"${PROJECT}/secrets\"]\nread_only = [\"${PROJECT}/Makefile\"]\n\
         [limits]\nmemory = \"2G\"\n",
    );
    let l = env.load();
    assert_eq!(l.sources, [env.user_config.clone(), env.project_file()]);
    let fs = &l.plan.filesystem;
    assert_eq!(fs.writable[0], PathRule::new(&env.project, "project"));
    let uc = env.user_config.display().to_string();
    assert_eq!(
        has(&fs.writable, &env.home.join(".cache/cargo")),
        Some(format!("{uc}:2"))
    );
    let pf = env.project_file().display().to_string();
    assert_eq!(
        has(&fs.deny, &env.project.join("secrets")),
        Some(format!("{pf}:2"))
    );
    assert_eq!(
        has(&fs.read_only, &env.project.join("Makefile")),
        Some(format!("{pf}:3"))
    );
    // Built-in entries are still there, first.
    assert!(fs.deny[0].origin.is_built_in());
    assert!(l.plan.env.pass.contains(&"TERM".to_string()));
    assert!(l.plan.env.pass.contains(&"MY_VAR".to_string()));
    assert_eq!(l.plan.env.set["A"], "user");
    assert_eq!(l.plan.env.set["CORDON_SANDBOX"], "1");
    // The project lowers memory (tightening: fine untrusted) and keeps pids.
    assert_eq!(l.plan.limits.memory, Some(2 << 30));
    assert_eq!(l.plan.limits.pids, Some(512));
    assert!(
        l.untrusted_loosening.is_empty(),
        "{:?}",
        l.untrusted_loosening
    );
}

#[test]
fn duplicates_keep_the_first_origin() {
    let env = Env::new();
    env.user("[filesystem]\ndeny = [\"~/.ssh\", \"~/.x\"]\nwritable = [\"${PROJECT}\"]\n");
    let l = env.load();
    let fs = &l.plan.filesystem;
    assert_eq!(
        has(&fs.deny, &env.home.join(".ssh")),
        Some("built-in".into())
    );
    assert_eq!(
        fs.deny
            .iter()
            .filter(|r| r.path == env.home.join(".ssh"))
            .count(),
        1
    );
    assert_eq!(
        fs.writable.iter().filter(|r| r.path == env.project).count(),
        1
    );
    assert_eq!(has(&fs.writable, &env.project), Some("project".into()));
}

#[test]
fn explicit_policy_file_replaces_the_project_file() {
    let env = Env::new();
    env.project("[env]\nset = { FROM = \"project\" }\n");
    let other = env.home.join("strict.toml");
    fs::write(&other, "[limits]\npids = 64\n").unwrap();
    let mut o = env.opts();
    o.policy_file = Some(other.clone());
    let l = load(&o).unwrap();
    assert_eq!(l.sources, [other]);
    assert_eq!(l.plan.limits.pids, Some(64));
    assert!(!l.plan.env.set.contains_key("FROM"));
}

#[test]
fn missing_files() {
    let env = Env::new();
    // No user config, no project file: the built-in policy alone.
    let l = env.load();
    assert!(l.sources.is_empty());
    // An explicit --policy that does not exist is an error naming it.
    let mut o = env.opts();
    o.policy_file = Some(env.home.join("nope.toml"));
    let e = load(&o).unwrap_err();
    assert!(matches!(e, PolicyError::Io { .. }));
    assert!(e.to_string().contains("nope.toml"), "{e}");
}

#[test]
fn profile_selection_extends_across_layers() {
    let env = Env::new();
    env.user("[profile.claude.filesystem]\nwritable = [\"~/.claude-extra\"]\n[profile.mine.limits]\npids = 99\n");
    let mut o = env.opts();
    o.profile = Some("claude".into());
    let l = load(&o).unwrap();
    let w = &l.plan.filesystem.writable;
    let p = &l.plan.state.protect;
    assert_eq!(has(p, &env.home.join(".claude")), Some("built-in".into()));
    assert!(has(w, &env.home.join(".claude")).is_none());
    assert!(has(w, &env.home.join(".claude-extra")).is_some());
    assert_eq!(l.plan.limits.pids, None);

    // Not selected: no profile paths.
    let l = env.load();
    assert!(has(&l.plan.state.protect, &env.home.join(".claude")).is_none());

    // A profile applies after every layer's base sections.
    env.project("[limits]\npids = 10\n");
    o.profile = Some("mine".into());
    let l = load(&o).unwrap();
    assert_eq!(l.plan.limits.pids, Some(99));
}

#[test]
fn unknown_profile_names_the_available_ones() {
    let env = Env::new();
    env.user("[profile.mine]\n");
    let mut o = env.opts();
    o.profile = Some("claud".into());
    let e = load(&o).unwrap_err();
    let s = e.to_string();
    assert!(s.starts_with("error: unknown profile `claud`"), "{s}");
    assert!(
        s.contains(
            "`aider`, `claude`, `codex`, `copilot`, `crush`, `gemini`, `goose`, `mine`, \
             `opencode`, `qwen`, `shell`"
        ),
        "{s}"
    );
    assert!(s.contains("did you mean `claude`?"), "{s}");
    assert!(s.contains("`--profile none`"), "{s}");
    assert!(s.contains("= help:"), "{s}");
}

#[test]
fn deny_under_home_applies_to_both_homes() {
    let env = Env::new();
    let passwd_home = env.home.parent().unwrap().join("real");
    env.user("[filesystem]\ndeny = [\"$HOME/.my-secrets\"]\nwritable = [\"~/.cache\"]\n");
    let mut o = env.opts();
    o.passwd_home = Some(passwd_home.clone());
    let l = load(&o).unwrap();
    let fs = &l.plan.filesystem;
    for h in [&env.home, &passwd_home] {
        assert_eq!(
            has(&fs.deny, &h.join(".ssh")),
            Some("built-in".into()),
            "{}",
            h.display()
        );
        assert!(has(&fs.deny, &h.join(".my-secrets")).is_some());
    }
    assert!(has(&fs.writable, &env.home.join(".cache")).is_some());
    assert!(has(&fs.writable, &passwd_home.join(".cache")).is_none());
    assert_eq!(l.plan.home, env.home);
}

#[test]
fn untrusted_project_file_loosening_is_reported_until_trusted() {
    let env = Env::new();
    env.project(
        "[filesystem]\n\
         writable = [\"~/.cache\"]\n\
         readable = [\"/opt/x\"]\n\
         landlock = \"best-effort\"\n\
         [env]\n\
         pass = [\"GITHUB_TOKEN\", \"LC_ALL\"]\n\
         set = { EXTRA = \"1\" }\n\
         [profile.claude.filesystem]\n\
         writable = [\"~/.more\"]\n",
    );
    let l = env.load();
    let whats = loosened(&l);
    let cache = env.home.join(".cache");
    assert_eq!(
        whats,
        [
            format!("adds writable path {} (line 2)", cache.display()).as_str(),
            "makes Landlock best-effort (line 4)",
            "passes host variable `GITHUB_TOKEN` (line 6)",
            "sets environment variable `EXTRA` (line 7)",
        ],
        "readable /opt/x is under / already; LC_ALL is covered by LC_*"
    );
    assert!(
        l.untrusted_loosening
            .iter()
            .all(|x| x.file == env.project_file())
    );
    // The plan itself is the full one, so `cordon check` can show it.
    assert_eq!(l.plan.filesystem.landlock, LandlockMode::BestEffort);
    assert!(
        l.untrusted_loosening[0]
            .to_string()
            .starts_with(&env.project_file().display().to_string())
    );

    // The profile section counts when it is selected.
    let mut o = env.opts();
    o.profile = Some("claude".into());
    let l2 = load(&o).unwrap();
    assert!(
        l2.untrusted_loosening
            .iter()
            .any(|x| x.what.contains(".more")),
        "{:?}",
        l2.untrusted_loosening
    );

    // Trusted: nothing to report.
    env.trust_project();
    let l = env.load();
    assert!(
        l.untrusted_loosening.is_empty(),
        "{:?}",
        l.untrusted_loosening
    );
    assert_eq!(l.plan.filesystem.landlock, LandlockMode::BestEffort);

    // Edited after trusting (even a comment): untrusted again.
    let text = fs::read_to_string(env.project_file()).unwrap();
    env.project(&format!("{text}# edited\n"));
    let l = env.load();
    assert_eq!(l.untrusted_loosening.len(), 4);

    // Revoked: untrusted.
    env.trust_project();
    assert!(env.load().untrusted_loosening.is_empty());
    assert!(
        TrustStore::new(&env.trust)
            .revoke(&env.project_file())
            .unwrap()
    );
    assert_eq!(env.load().untrusted_loosening.len(), 4);
}

#[test]
fn untrusted_limits_may_lower_but_not_raise() {
    let env = Env::new();
    env.user("[limits]\nmemory = \"4G\"\npids = 100\ncpu = 2\nnofile = 1024\n");
    env.project("[limits]\nmemory = \"8G\"\npids = 50\ncpu = 4\nnofile = 512\n");
    let l = env.load();
    let whats = loosened(&l);
    assert_eq!(
        whats,
        [
            "raises the memory limit (line 2)",
            "raises the cpu limit (line 4)"
        ]
    );
    assert_eq!(l.plan.limits.memory, Some(8 << 30));
    assert_eq!(l.plan.limits.pids, Some(50));
}

#[test]
fn untrusted_tightening_is_fine() {
    let env = Env::new();
    env.project(
        "[filesystem]\ndeny = [\"~/.config\"]\nread_only = [\"${PROJECT}/build.rs\"]\n\
         writable = [\"${PROJECT}/target\"]\nlandlock = \"required\"\n\
         [env]\npass = [\"TERM\"]\nset = { CORDON_SANDBOX = \"1\" }\n[limits]\npids = 10\n",
    );
    let l = env.load();
    assert!(
        l.untrusted_loosening.is_empty(),
        "{:?}",
        l.untrusted_loosening
    );
    assert!(has(&l.plan.filesystem.deny, &env.home.join(".config")).is_some());
    assert_eq!(l.plan.limits.pids, Some(10));
}

#[test]
fn writable_under_a_read_only_path_is_loosening() {
    let env = Env::new();
    env.project("[filesystem]\nwritable = [\"${PROJECT}/.git/hooks/pre-commit\"]\n");
    let l = env.load();
    assert_eq!(l.untrusted_loosening.len(), 1);
    assert!(
        l.untrusted_loosening[0]
            .what
            .contains(".git/hooks/pre-commit")
    );
}

#[test]
fn explicit_policy_inside_the_project_is_untrusted() {
    let env = Env::new();
    let sub = env.project.join("cfg");
    fs::create_dir_all(&sub).unwrap();
    let p = sub.join("policy.toml");
    fs::write(&p, "[env]\npass = [\"FOO_*\"]\n").unwrap();
    let mut o = env.opts();
    o.policy_file = Some(p.clone());
    let l = load(&o).unwrap();
    assert_eq!(l.untrusted_loosening.len(), 1);
    assert_eq!(
        l.untrusted_loosening[0].what,
        "passes host variables matching `FOO_*` (line 2)"
    );
    assert_eq!(l.untrusted_loosening[0].file, p);
    // Outside the project: trusted as the user's own file.
    let q = env.home.join("policy.toml");
    fs::write(&q, "[env]\npass = [\"FOO_*\"]\n").unwrap();
    o.policy_file = Some(q);
    assert!(load(&o).unwrap().untrusted_loosening.is_empty());
}

#[test]
fn user_config_inside_the_project_is_untrusted_and_protected() {
    let env = Env::new();
    // The project is the home directory.
    let mut o = LoadOptions::new(&env.home, &env.home, &env.trust);
    o.user_config = Some(env.user_config.clone());
    env.user("[filesystem]\nwritable = [\"/srv\"]\n");
    let l = load(&o).unwrap();
    assert_eq!(
        l.untrusted_loosening.len(),
        1,
        "{:?}",
        l.untrusted_loosening
    );
    let ro = &l.plan.filesystem.read_only;
    assert!(
        has(ro, &env.user_config).is_some(),
        "user config must be read-only"
    );
    assert!(
        has(ro, &env.trust).is_some(),
        "trust store must be read-only"
    );
    assert!(
        l.warnings.iter().any(|w| w.contains("trusted.json")),
        "{:?}",
        l.warnings
    );
}

#[test]
fn json_and_toml_output() {
    let env = Env::new();
    env.user("[limits]\nmemory = \"1G\"\n");
    let l = env.load();
    let json = serde_json::to_string_pretty(&l.plan).unwrap();
    assert!(json.contains("\"landlock\": \"required\""), "{json}");
    let text = l.plan.to_toml();
    assert!(
        text.contains(&format!("\"{}\", # project", env.project.display())),
        "{text}"
    );
    assert!(text.contains("memory = \"1G\""));
    // The rendered policy is itself a valid policy with the same effect.
    let l2 = env.reload(&text);
    let paths = |l: &Loaded| -> Vec<PathBuf> {
        l.plan
            .filesystem
            .deny
            .iter()
            .map(|r| r.path.clone())
            .collect()
    };
    assert_eq!(paths(&l2), paths(&l));
    assert_eq!(l2.plan.env, l.plan.env);
    assert_eq!(l2.plan.limits, l.plan.limits);
}

#[test]
fn secret_scanning_is_on_by_default_and_loosening_it_needs_trust() {
    let env = Env::new();
    let l = env.load();
    assert_eq!(l.plan.dlp.action, cordon_policy::DlpAction::Deny);
    assert_eq!(l.plan.dlp.max_body_bytes, 65536);
    // Only the built-in issuers: each token shape may go to its own issuer.
    assert!(l.plan.dlp.allow.iter().all(|a| a.origin.is_built_in()));
    assert!(l.plan.dlp.allow.iter().any(
        |a| a.kinds == ["github-token"] && a.hosts.iter().any(|h| h.matches("api.github.com"))
    ));
    env.project(
        "[dlp]\naction = \"log\"\nmax_body_bytes = 1024\n\
         [[dlp.allow]]\nkinds = [\"jwt\", \"known:DB_PASSWORD\"]\nhosts = [\"auth.example.com\"]\n\
         [credentials.gemini]\nsource = { env = \"GEMINI_KEY\" }\nhosts = [\"*.googleapis.com\"]\nquery = \"key\"\n\
         files = [\"~/.config/x/key.json\"]\n",
    );
    let l = env.load();
    let whats = loosened(&l);
    assert!(
        whats.iter().any(|w| w.contains("[dlp] action = Log")),
        "{whats:?}"
    );
    assert!(
        whats.iter().any(|w| w.contains("first 1024 bytes")),
        "{whats:?}"
    );
    assert!(
        whats
            .iter()
            .any(|w| w.contains("kinds [\"jwt\", \"known:DB_PASSWORD\"]")),
        "{whats:?}"
    );
    let c = &l.plan.credentials[0];
    assert_eq!(
        c.slot,
        cordon_policy::CredentialSlot::Query { name: "key".into() }
    );
    assert_eq!(c.files, [env.home.join(".config/x/key.json")]);
    // What `cordon check` prints loads back to the same plan.
    let text = l.plan.to_toml();
    assert!(text.contains("[dlp]\n"), "{text}");
    assert!(text.contains("query = \"key\""), "{text}");
    let l2 = env.reload(&text);
    assert_eq!(l2.plan.dlp.action, cordon_policy::DlpAction::Log);
    assert_eq!(l2.plan.dlp.max_body_bytes, 1024);
    assert_eq!(l2.plan.dlp.allow[0].kinds, l.plan.dlp.allow[0].kinds);
    assert!(matches!(
        &l2.plan.credentials[0].slot,
        cordon_policy::CredentialSlot::Query { name } if name == "key"
    ));
    env.trust_project();
    assert!(env.load().untrusted_loosening.is_empty());
}

/// The plan is the whole truth: rules derived from the host are in it, so `cordon check`
/// prints them.
#[test]
fn derived_rules_are_in_the_plan() {
    let env = Env::new();
    // A submodule's git dir and a linked worktree: git reads their config and hooks too.
    let module = env.project.join(".git/modules/lib/sub");
    fs::create_dir_all(module.join("hooks")).unwrap();
    fs::write(module.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::create_dir_all(env.project.join(".git/worktrees/wt")).unwrap();
    let secret = env.home.join(".config/k/key");
    env.user(&format!(
        "[credentials.k]\nsource = {{ file = \"{}\" }}\nhosts = [\"api.k.test\"]\n",
        secret.display()
    ));
    let mut o = env.opts();
    let state = env.home.join(".local/state/cordon");
    o.own_dirs = vec![(state.clone(), "own state")];
    let l = load(&o).unwrap();
    let ro = &l.plan.filesystem.read_only;
    for p in [
        module.join("config"),
        module.join("hooks"),
        module.join("config.worktree"),
        env.project.join(".git/config.worktree"),
        env.project.join(".git/worktrees/wt/config.worktree"),
    ] {
        assert_eq!(has(ro, &p).as_deref(), Some("built-in"), "{}", p.display());
    }
    let deny = &l.plan.filesystem.deny;
    assert_eq!(
        has(deny, &state).as_deref(),
        Some("built-in: cordon's own state")
    );
    assert_eq!(has(deny, &secret).as_deref(), Some("credentials.k: source"));
    let text = l.plan.to_toml();
    assert!(text.contains("# built-in: cordon's own state"), "{text}");
    assert!(text.contains("\"ngrok.io\", # built-in"), "{text}");
}
