//! The sections that merge in order (exec, syscalls, state): merge, loosening and rendering.

use std::fs;
use std::path::PathBuf;

use cordon_policy::{ExecAction, LoadOptions, Loaded, OnExit, ProjectFiles, load};

mod common;
use common::*;

#[test]
fn built_in_exec_and_syscall_sections() {
    let env = Env::new();
    let l = env.load();
    let rules = exec_rules(&l);
    let deny = |p: &str| (p.to_string(), ExecAction::Deny, "built-in".to_string());
    assert_eq!(
        rules,
        [
            deny("sudo *"),
            deny("su *"),
            deny("doas *"),
            deny("pkexec *")
        ]
    );
    assert_eq!(l.plan.exec.ask_timeout_secs, 60);
    assert!(l.plan.syscalls.allow.is_empty());
    assert!(l.plan.syscalls.deny.is_empty());
    assert!(!l.plan.syscalls.nested_userns);
    let decide = |p: &str, a: &[&str]| {
        let a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        l.plan.exec.decide(p, &a).map(|r| r.action)
    };
    assert_eq!(decide("sudo", &["-i"]), Some(ExecAction::Deny));
    assert_eq!(decide("su", &[]), Some(ExecAction::Deny));
    assert_eq!(decide("sudoedit", &["x"]), None);
}

#[test]
fn exec_rules_merge_earlier_layers_first() {
    let env = Env::new();
    env.user(
        "[exec]\nask = [\"git push *\"]\nask_timeout = 120\n\
         [profile.p.exec]\ndeny = [\"npm publish *\"]\n",
    );
    env.project(
        "[exec]\nallow = [\"git push --dry-run *\"]\ndeny = [\"curl *\"]\nask_timeout = 30\n\
         [[exec.rule]]\npattern = \"git push *\"\naction = \"allow\"\n\
         [profile.p.exec]\nallow = [\"npm publish *\"]\n",
    );
    env.trust_project();
    let mut o = env.opts();
    o.profile = Some("p".into());
    let l = load(&o).unwrap();
    let uc = env.user_config.display().to_string();
    let pf = env.project_file().display().to_string();
    let got: Vec<(String, ExecAction, String)> = exec_rules(&l).into_iter().skip(4).collect();
    let r = |p: &str, a, o: String| (p.to_string(), a, o);
    assert_eq!(
        got,
        [
            r("git push *", ExecAction::Ask, format!("{uc}:2")),
            // The project: [[exec.rule]] first, then deny, ask, allow.
            r("git push *", ExecAction::Allow, format!("{pf}:6")),
            r("curl *", ExecAction::Deny, format!("{pf}:3")),
            r("git push --dry-run *", ExecAction::Allow, format!("{pf}:2")),
            // Profiles after every base section, in layer order.
            r("npm publish *", ExecAction::Deny, format!("{uc}:5")),
            r("npm publish *", ExecAction::Allow, format!("{pf}:9")),
        ]
    );
    // First match wins: the project cannot override the user's ask or deny.
    let decide = |p: &str, a: &[&str]| {
        let a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        l.plan
            .exec
            .decide(p, &a)
            .map(|r| (r.action, r.origin.to_string()))
    };
    assert_eq!(
        decide("git", &["push", "--dry-run", "x"]),
        Some((ExecAction::Ask, format!("{uc}:2")))
    );
    assert_eq!(
        decide("npm", &["publish"]),
        Some((ExecAction::Deny, format!("{uc}:5")))
    );
    // A scalar: the last layer wins (a shorter timeout is no loosening, nor a longer one).
    assert_eq!(l.plan.exec.ask_timeout_secs, 30);
}

#[test]
fn syscalls_merge_and_warn() {
    let env = Env::new();
    env.user("[syscalls]\nallow = [\"ptrace\"]\ndeny = [\"chroot\", \"open_tree_attr\"]\n");
    env.project("[syscalls]\ndeny = [\"chroot\", \"ptrace\"]\n");
    let l = env.load();
    let uc = env.user_config.display().to_string();
    let pf = env.project_file().display().to_string();
    let s = &l.plan.syscalls;
    assert_eq!(s.allow.len(), 1);
    assert_eq!(s.allow[0].origin.to_string(), format!("{uc}:2"));
    let deny: Vec<(&str, String)> = s
        .deny
        .iter()
        .map(|r| (r.name.as_str(), r.origin.to_string()))
        .collect();
    let (c, o) = (format!("{uc}:3"), format!("{pf}:2"));
    assert_eq!(
        deny,
        [
            ("chroot", c.clone()),
            ("open_tree_attr", c.clone()),
            ("ptrace", o.clone())
        ]
    );
    // Deny wins over the user's lift: ptrace stays denied, by the project's rule.
    let denied = s.denied();
    assert_eq!(
        denied
            .iter()
            .find(|r| r.name == "ptrace")
            .map(|r| r.origin.to_string()),
        Some(o)
    );
    assert!(!denied.iter().any(|r| r.name == "process_vm_readv"));
    // open_tree_attr is newer than the syscall tables: a warning naming the line.
    assert!(
        l.warnings
            .iter()
            .any(|w| w.starts_with(&format!("{uc}:3: syscall `open_tree_attr`"))),
        "{:?}",
        l.warnings
    );
    assert!(
        l.untrusted_loosening.is_empty(),
        "{:?}",
        l.untrusted_loosening
    );
}

#[test]
fn untrusted_syscall_and_exec_loosening() {
    let env = Env::new();
    env.user("[syscalls]\nallow = [\"bpf\"]\n[exec]\nallow = [\"make *\"]\n");
    env.project(
        "[syscalls]\nallow = [\"ptrace\", \"bpf\"]\ndeny = [\"chroot\"]\nnested_userns = true\n\
         [exec]\nallow = [\"curl *\", \"make *\"]\ndeny = [\"wget *\"]\nask = [\"git push *\"]\nask_timeout = 3600\n\
         [[exec.rule]]\npattern = \"rm -rf *\"\naction = \"allow\"\n",
    );
    let l = env.load();
    let whats = loosened(&l);
    assert_eq!(
        whats,
        [
            "allows syscall `ptrace` (line 2)",
            "allows nested user namespaces (line 4)",
            "adds exec allow rule `rm -rf *` (line 11)",
            "adds exec allow rule `curl *` (line 6)",
        ],
        "bpf and make * are allowed by the user already; deny, ask and ask_timeout tighten"
    );
    assert!(l.plan.syscalls.nested_userns);
    env.trust_project();
    assert!(env.load().untrusted_loosening.is_empty());
}

#[test]
fn syscalls_and_exec_render_and_load_back() {
    let env = Env::new();
    env.user(
        "[syscalls]\nallow = [\"ptrace\"]\ndeny = [\"chroot\"]\nnested_userns = true\n\
         [exec]\nask = [\"git push *\"]\nallow = [\"git \\\"x\\\" *\"]\nask_timeout = 90\n",
    );
    let l = env.load();
    let text = l.plan.to_toml();
    let uc = env.user_config.display().to_string();
    assert!(text.contains(&format!("\"ptrace\", # {uc}:2")), "{text}");
    assert!(
        text.contains(&format!(
            "[[exec.rule]] # {uc}:6\npattern = \"git push *\"\naction = \"ask\""
        )),
        "{text}"
    );
    let l2 = env.reload(&text);
    let strip = |l: &Loaded| {
        exec_rules(l)
            .into_iter()
            .map(|(p, a, _)| (p, a))
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&l2), strip(&l));
    assert_eq!(l2.plan.exec.ask_timeout_secs, 90);
    let names = |l: &Loaded| {
        let s = &l.plan.syscalls;
        (
            s.allow.iter().map(|r| r.name.clone()).collect::<Vec<_>>(),
            s.deny.iter().map(|r| r.name.clone()).collect::<Vec<_>>(),
            s.nested_userns,
        )
    };
    assert_eq!(names(&l2), names(&l));
}

// ---------------------------------------------------------------------------------------------
// [state]

#[test]
fn state_merges_across_layers_and_profiles() {
    let env = Env::new();
    env.user(
        "[state]\nprotect = [\"~/.bashrc\", \"$HOME/.notes\"]\non_exit = \"pending\"\n\
         [profile.claude.state]\nprotect = [\"${PROJECT}/../shared\", \"~/.claude\"]\n\
         on_exit = \"discard\"\n",
    );
    env.project("[state]\nprotect = [\"~/.agent-memory\"]\nproject_files = \"staged\"\n");
    let uc = env.user_config.display().to_string();
    let pf = env.project_file().display().to_string();

    let l = env.load();
    let s = &l.plan.state;
    // Layers in order; duplicates keep the first origin.
    assert_eq!(s.protect[0].path, env.home.join(".bashrc"));
    assert_eq!(s.protect[0].origin.to_string(), format!("{uc}:2"));
    assert_eq!(
        s.protect
            .iter()
            .filter(|r| r.path == env.home.join(".bashrc"))
            .count(),
        1
    );
    assert_eq!(
        has(&s.protect, &env.home.join(".notes")),
        Some(format!("{uc}:2"))
    );
    assert_eq!(
        has(&s.protect, &env.home.join(".agent-memory")),
        Some(format!("{pf}:2"))
    );
    assert!(has(&s.protect, &env.home.join(".claude")).is_none());
    assert_eq!(
        s.on_exit,
        OnExit::Pending,
        "the user's value; no later layer sets it"
    );
    assert_eq!(s.project_files, ProjectFiles::Staged);
    assert!(
        l.untrusted_loosening.is_empty(),
        "protecting and staging only add review: {:?}",
        l.untrusted_loosening
    );

    // The profile applies after every base section; ${PROJECT} expands.
    let mut o = env.opts();
    o.profile = Some("claude".into());
    let l = load(&o).unwrap();
    let s = &l.plan.state;
    let shared = env.project.parent().unwrap().join("shared");
    assert_eq!(has(&s.protect, &shared), Some(format!("{uc}:5")));
    assert_eq!(
        has(&s.protect, &env.home.join(".claude")),
        Some("built-in".into()),
        "the built-in profile's entry comes first"
    );
    assert_eq!(s.on_exit, OnExit::Discard);
    let last = s.protect.last().unwrap();
    assert_eq!(last.path, shared, "profile entries come after base ones");
}

#[test]
fn profiles_protect_agent_state_instead_of_making_it_writable() {
    let env = Env::new();
    for (profile, dirs) in [
        ("claude", &[".claude", ".claude.json", ".config/claude"][..]),
        ("codex", &[".codex"]),
        ("gemini", &[".gemini"]),
        ("aider", &[".aider"]),
        (
            "opencode",
            &[
                ".config/opencode",
                ".local/share/opencode",
                ".local/state/opencode",
            ],
        ),
    ] {
        let mut o = env.opts();
        o.profile = Some(profile.into());
        let l = load(&o).unwrap();
        for d in dirs {
            let path = env.home.join(d);
            assert_eq!(
                has(&l.plan.state.protect, &path),
                Some("built-in".into()),
                "{profile}: {d}"
            );
            assert!(
                has(&l.plan.filesystem.writable, &path).is_none(),
                "{profile}: {d} is no longer plainly writable"
            );
        }
        assert_eq!(
            l.plan.filesystem.writable.len(),
            1,
            "{profile}: only the project"
        );
        assert_eq!(l.plan.state.on_exit, OnExit::Ask);
    }
}

#[test]
fn built_in_state_protects_nothing_by_default() {
    // Outside the project everything is read-only by default, which is stronger than review;
    // profiles and policies add what may change under review.
    let env = Env::new();
    let l = env.load();
    let s = &l.plan.state;
    assert!(s.protect.is_empty(), "{:?}", s.protect);
    assert_eq!(s.on_exit, OnExit::Ask);
    assert_eq!(s.project_files, ProjectFiles::Staged);
    let json = serde_json::to_value(&l.plan).unwrap();
    assert_eq!(json["state"]["on_exit"], "ask");
    assert_eq!(json["state"]["project_files"], "staged");
}

#[test]
fn protect_inside_writable_is_fine() {
    let env = Env::new();
    env.user(
        "[filesystem]\nwritable = [\"~/.cache\"]\n\
         [state]\nprotect = [\"~/.cache\", \"~/.cache/agent\", \"${PROJECT}/.git/hooks\"]\n",
    );
    let l = env.load();
    let s = &l.plan.state;
    assert!(has(&s.protect, &env.home.join(".cache")).is_some());
    assert!(has(&s.protect, &env.home.join(".cache/agent")).is_some());
    assert!(has(&s.protect, &env.project.join(".git/hooks")).is_some());
    assert!(has(&l.plan.filesystem.writable, &env.home.join(".cache")).is_some());
}

#[test]
fn untrusted_on_exit_keep_is_loosening() {
    let env = Env::new();
    env.project("[filesystem]\n\n[state]\non_exit = \"keep\"\nprotect = [\"~/.x\"]\n");
    let l = env.load();
    let whats = loosened(&l);
    let x = env.home.join(".x");
    assert_eq!(
        whats,
        [
            "applies changes to protected state without review (on_exit = \"keep\") (line 4)"
                .to_string(),
            format!(
                "protects {}, whose changes are kept without review (on_exit = \"keep\") (line 5)",
                x.display()
            ),
        ]
    );
    assert!(
        l.untrusted_loosening
            .iter()
            .all(|x| x.file == env.project_file())
    );
    assert_eq!(l.plan.state.on_exit, OnExit::Keep);
    env.trust_project();
    assert!(env.load().untrusted_loosening.is_empty());

    // Other values, and staging, only add review.
    for v in ["ask", "discard", "pending"] {
        env.project(&format!(
            "[state]\non_exit = \"{v}\"\nproject_files = \"staged\"\nprotect = [\"~/.y\"]\n"
        ));
        let l = env.load();
        assert!(
            l.untrusted_loosening.is_empty(),
            "{v}: {:?}",
            l.untrusted_loosening
        );
    }

    // The user keeps changes (and keeps the project's host-executed files read-only, where
    // the built-in policy stages them): an untrusted file that protects more, or stages them,
    // makes them writable without review.
    env.user(
        "[state]\non_exit = \"keep\"\nprotect = [\"~/.mine\"]\nproject_files = \"readonly\"\n",
    );
    env.project("[state]\nprotect = [\"~/.mine/sub\", \"~/.other\"]\nproject_files = \"staged\"\n");
    let l = env.load();
    let whats = loosened(&l);
    assert_eq!(whats.len(), 2, "{whats:?}");
    assert!(whats[0].starts_with("protects ") && whats[0].contains(".other"));
    assert!(whats[1].starts_with("stages the project's read-only files"));

    // A profile section in the untrusted file counts when selected.
    env.user("");
    env.project("[profile.claude.state]\non_exit = \"keep\"\n");
    assert!(env.load().untrusted_loosening.is_empty());
    let mut o = env.opts();
    o.profile = Some("claude".into());
    let l = load(&o).unwrap();
    // The profile's own protected paths are the built-in ones: only on_exit loosens.
    let whats = loosened(&l);
    assert_eq!(
        whats,
        ["applies changes to protected state without review (on_exit = \"keep\") (line 2)"]
    );
}

#[test]
fn state_renders_and_loads_back() {
    let env = Env::new();
    env.user(
        "[state]\nprotect = [\"~/.notes \\\"q\\\"\"]\non_exit = \"discard\"\nproject_files = \"staged\"\n",
    );
    let mut o = env.opts();
    o.profile = Some("codex".into());
    let l = load(&o).unwrap();
    let text = l.plan.to_toml();
    let uc = env.user_config.display().to_string();
    assert!(
        text.contains(&format!(
            "\"{}\", # built-in\n",
            env.home.join(".codex").display()
        )),
        "{text}"
    );
    assert!(text.contains(&format!("q\"', # {uc}:2\n")), "{text}");
    assert!(
        text.contains("on_exit = \"discard\"\nproject_files = \"staged\"\n"),
        "{text}"
    );
    let l2 = env.reload(&text);
    let paths = |l: &Loaded| -> Vec<PathBuf> {
        l.plan
            .state
            .protect
            .iter()
            .map(|r| r.path.clone())
            .collect()
    };
    assert_eq!(paths(&l2), paths(&l));
    assert_eq!(l2.plan.state.on_exit, OnExit::Discard);
    assert_eq!(l2.plan.state.project_files, ProjectFiles::Staged);
}

#[test]
fn built_in_protection_around_the_project_gives_way() {
    // Working on the agent's own state as a project: it is writable as any project.
    let env = Env::new();
    let project = env.home.join(".claude");
    fs::create_dir_all(&project).unwrap();
    let mut o = LoadOptions::new(&project, &env.home, &env.trust);
    o.profile = Some("claude".into());
    let l = load(&o).unwrap();
    assert!(has(&l.plan.state.protect, &project).is_none());
    assert!(has(&l.plan.state.protect, &env.home.join(".claude.json")).is_some());
    assert!(
        l.warnings
            .iter()
            .any(|w| w.contains("contains the project directory")),
        "{:?}",
        l.warnings
    );
}
