//! Loading policies from files: merge order, profiles, homes, trust and broken policies.

use std::fs;
use std::path::{Path, PathBuf};

use cordon_policy::{
    ExecAction, LandlockMode, LoadOptions, Loaded, OnExit, PathRule, PolicyError, ProjectFiles,
    TrustStore, load,
};

/// A temporary home, project and data directory.
struct Env {
    _dir: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
    user_config: PathBuf,
    trust: PathBuf,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        let home = root.join("home/u");
        let project = root.join("work/proj");
        fs::create_dir_all(&home).unwrap();
        fs::create_dir_all(&project).unwrap();
        Env {
            user_config: home.join(".config/cordon/cordon.toml"),
            trust: home.join(".local/share/cordon/trusted.json"),
            home,
            project,
            _dir: dir,
        }
    }

    fn opts(&self) -> LoadOptions {
        let mut o = LoadOptions::new(&self.project, &self.home, &self.trust);
        o.user_config = Some(self.user_config.clone());
        o
    }

    fn user(&self, text: &str) -> &Self {
        fs::create_dir_all(self.user_config.parent().unwrap()).unwrap();
        fs::write(&self.user_config, text).unwrap();
        self
    }

    fn project_file(&self) -> PathBuf {
        self.project.join("cordon.toml")
    }

    fn project(&self, text: &str) -> &Self {
        fs::write(self.project_file(), text).unwrap();
        self
    }

    fn load(&self) -> Loaded {
        load(&self.opts()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn load_err(&self) -> PolicyError {
        match load(&self.opts()) {
            Ok(l) => panic!("expected an error, got {:#?}", l.plan),
            Err(e) => e,
        }
    }

    fn trust_project(&self) {
        TrustStore::new(&self.trust)
            .trust(&self.project_file())
            .unwrap();
    }
}

fn has(rules: &[PathRule], path: &Path) -> Option<String> {
    rules
        .iter()
        .find(|r| r.path == path)
        .map(|r| r.origin.clone())
}

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
    assert_eq!(fs.deny[0].origin, "built-in");
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
        s.contains("`aider`, `claude`, `codex`, `gemini`, `mine`, `opencode`"),
        "{s}"
    );
    assert!(s.contains("did you mean `claude`?"), "{s}");
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
    let whats: Vec<&str> = l
        .untrusted_loosening
        .iter()
        .map(|x| x.what.as_str())
        .collect();
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
    let whats: Vec<&str> = l
        .untrusted_loosening
        .iter()
        .map(|x| x.what.as_str())
        .collect();
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
    let again = env.home.join("again.toml");
    fs::write(&again, &text).unwrap();
    let mut o = env.opts();
    o.user_config = None;
    o.policy_file = Some(again);
    let l2 = load(&o).unwrap();
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

fn exec_rules(l: &Loaded) -> Vec<(String, ExecAction, String)> {
    l.plan
        .exec
        .rules
        .iter()
        .map(|r| (r.pattern.clone(), r.action, r.origin.clone()))
        .collect()
}

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
            .map(|r| (r.action, r.origin.clone()))
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
    assert_eq!(s.allow[0].origin, format!("{uc}:2"));
    let deny: Vec<(&str, &str)> = s
        .deny
        .iter()
        .map(|r| (r.name.as_str(), r.origin.as_str()))
        .collect();
    let (c, o) = (format!("{uc}:3"), format!("{pf}:2"));
    assert_eq!(
        deny,
        [
            ("chroot", c.as_str()),
            ("open_tree_attr", c.as_str()),
            ("ptrace", o.as_str())
        ]
    );
    // Deny wins over the user's lift: ptrace stays denied, by the project's rule.
    let denied = s.denied();
    assert_eq!(
        denied
            .iter()
            .find(|r| r.name == "ptrace")
            .map(|r| r.origin.as_str()),
        Some(o.as_str())
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
    let whats: Vec<&str> = l
        .untrusted_loosening
        .iter()
        .map(|x| x.what.as_str())
        .collect();
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
    let again = env.home.join("again.toml");
    fs::write(&again, &text).unwrap();
    let mut o = env.opts();
    o.user_config = None;
    o.policy_file = Some(again);
    let l2 = load(&o).unwrap();
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
    assert_eq!(s.protect[0].origin, format!("{uc}:2"));
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
    assert_eq!(s.project_files, ProjectFiles::Readonly);
    let json = serde_json::to_value(&l.plan).unwrap();
    assert_eq!(json["state"]["on_exit"], "ask");
    assert_eq!(json["state"]["project_files"], "readonly");
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
    let whats: Vec<&str> = l
        .untrusted_loosening
        .iter()
        .map(|x| x.what.as_str())
        .collect();
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

    // The user keeps changes: an untrusted file that protects more, or stages the project's
    // host-executed files, makes them writable without review.
    env.user("[state]\non_exit = \"keep\"\nprotect = [\"~/.mine\"]\n");
    env.project("[state]\nprotect = [\"~/.mine/sub\", \"~/.other\"]\nproject_files = \"staged\"\n");
    let l = env.load();
    let whats: Vec<&str> = l
        .untrusted_loosening
        .iter()
        .map(|x| x.what.as_str())
        .collect();
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
    let whats: Vec<&str> = l
        .untrusted_loosening
        .iter()
        .map(|x| x.what.as_str())
        .collect();
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
    let again = env.home.join("again.toml");
    fs::write(&again, &text).unwrap();
    let mut o = env.opts();
    o.user_config = None;
    o.policy_file = Some(again);
    let l2 = load(&o).unwrap();
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

// ---------------------------------------------------------------------------------------------
// Broken policies: each is located (file:line:col) and carries a help line.

/// Loads `text` as the user config and returns the rendered error and its location.
fn broken(text: &str) -> (String, usize, usize) {
    let env = Env::new();
    env.user(text);
    let e = env.load_err();
    let s = e.to_string();
    let d = e
        .diagnostic()
        .unwrap_or_else(|| panic!("not a diagnostic: {s}"));
    assert_eq!(d.file.as_deref(), Some(env.user_config.as_path()), "{s}");
    assert!(s.contains("\n   = help: "), "no help line: {s}");
    let loc = d
        .location
        .clone()
        .unwrap_or_else(|| panic!("not located: {s}"));
    let arrow = format!(
        "--> {}:{}:{}",
        env.user_config.display(),
        loc.line,
        loc.column
    );
    assert!(s.contains(&arrow), "{s}");
    (s, loc.line, loc.column)
}

#[test]
fn broken_01_toml_syntax() {
    let (s, line, col) = broken("[filesystem]\nreadable = [\"/\"\n");
    assert_eq!((line, col), (2, 16), "{s}");
    assert!(s.contains("unclosed array"), "{s}");
    assert!(s.contains("invalid TOML"), "{s}");
}

#[test]
fn broken_01b_unclosed_string() {
    let (s, line, _) = broken("[env]\npass = [\"TERM]\n");
    assert_eq!(line, 2, "{s}");
    assert!(s.contains("invalid TOML"), "{s}");
}

#[test]
fn broken_02_unknown_section() {
    let (s, line, col) = broken("[filesystem]\n\n[firewall]\nallow = true\n");
    assert_eq!((line, col), (3, 2), "{s}");
    assert!(s.contains("unknown section `firewall`"), "{s}");
    assert!(
        s.contains("a section exists only where something enforces it"),
        "{s}"
    );
}

#[test]
fn broken_03_unknown_key_with_suggestion() {
    let (s, line, col) = broken("[filesystem]\nreadable = []\nwriteable = [\"/x\"]\n");
    assert_eq!((line, col), (3, 1));
    assert!(
        s.starts_with("error: unknown key `writeable` in [filesystem]\n"),
        "{s}"
    );
    assert!(
        s.contains("\n 3 | writeable = [\"/x\"]\n   | ^^^^^^^^^\n"),
        "{s}"
    );
    assert!(
        s.ends_with(
            "= help: expected one of `readable`, `writable`, `deny`, `read_only`, `landlock`; did you mean `writable`?"
        ),
        "{s}"
    );
}

#[test]
fn broken_03b_unknown_key_in_profile_section() {
    let (s, line, col) = broken("[profile.x.limits]\nmemroy = \"1G\"\n");
    assert_eq!((line, col), (2, 1));
    assert!(
        s.contains("unknown key `memroy` in [profile.x.limits]"),
        "{s}"
    );
    assert!(s.contains("did you mean `memory`?"), "{s}");
}

#[test]
fn broken_04_wrong_type() {
    let (s, line, col) = broken("[filesystem]\nwritable = \"/x\"\n");
    assert_eq!((line, col), (2, 12));
    assert!(
        s.contains("`writable` in [filesystem] must be an array of strings, found a string"),
        "{s}"
    );
    assert!(
        s.contains("help: write it as an array: writable = [\"/x\"]"),
        "{s}"
    );
}

#[test]
fn broken_04b_wrong_element_type() {
    let (s, line, col) = broken("[env]\npass = [\"TERM\", 3]\n");
    assert_eq!((line, col), (2, 17));
    assert!(s.contains("must be strings, found an integer"), "{s}");
}

#[test]
fn broken_05_relative_path() {
    let (s, line, col) = broken("[filesystem]\nwritable = [\n  \"/ok\",\n  \"build/out\",\n]\n");
    assert_eq!((line, col), (4, 3));
    assert!(s.contains("relative path \"build/out\" in writable"), "{s}");
    assert!(
        s.contains("paths must be absolute or start with ~, $HOME or ${PROJECT}"),
        "{s}"
    );
}

#[test]
fn broken_06_unknown_variable() {
    let (s, line, col) = broken("[filesystem]\ndeny = [\"${FOO}/x\"]\n");
    assert_eq!((line, col), (2, 10));
    assert!(s.contains("unknown variable `FOO`"), "{s}");
    assert!(
        s.contains("only $HOME (or ${HOME}, ~) and ${PROJECT} expand"),
        "{s}"
    );
    assert!(
        s.contains("|          ^^^^^^\n"),
        "caret under ${{FOO}}: {s}"
    );
}

#[test]
fn broken_07_bad_globs() {
    for (glob, why) in [
        ("", "is empty"),
        ("LC_**", "contains `**`"),
        ("LC-ALL", "letters, digits"),
        ("1ABC", "starts with a digit"),
    ] {
        let (s, line, col) = broken(&format!("[env]\npass = [\"TERM\", \"{glob}\"]\n"));
        assert_eq!((line, col), (2, 17), "{s}");
        assert!(s.contains("invalid variable name or glob"), "{s}");
        assert!(s.contains(why), "{glob}: {s}");
    }
}

#[test]
fn broken_08_bad_memory_size() {
    let (s, line, col) = broken("[limits]\npids = 10\nmemory = \"4 gigs\"\n");
    assert_eq!((line, col), (3, 10));
    assert!(s.contains("invalid memory size \"4 gigs\""), "{s}");
    assert!(s.contains("K, M, G or T (1024-based)"), "{s}");
}

#[test]
fn broken_09_writable_and_denied() {
    let (s, line, col) = broken("[filesystem]\nwritable = [\"~/.ssh\"]\n");
    assert_eq!((line, col), (2, 13));
    assert!(s.contains("is both writable and denied (built-in)"), "{s}");
    assert!(s.contains("deny always wins"), "{s}");
}

#[test]
fn broken_09b_writable_inside_denied() {
    let (s, line, col) = broken("[filesystem]\ndeny = [\"/data\"]\nwritable = [\"/data/cache\"]\n");
    assert_eq!((line, col), (3, 13));
    assert!(
        s.contains("writable path /data/cache is inside denied path /data"),
        "{s}"
    );
}

#[test]
fn broken_09c_deny_added_later_over_a_writable() {
    // The user's profile denies a parent of the user's base writable path: the deny is blamed.
    let env = Env::new();
    env.user(
        "[filesystem]\nwritable = [\"/data/cache\"]\n[profile.p.filesystem]\ndeny = [\"/data\"]\n",
    );
    let mut o = env.opts();
    o.profile = Some("p".into());
    let e = load(&o).unwrap_err();
    let d = e.diagnostic().unwrap();
    assert_eq!(
        d.location.as_ref().map(|l| (l.line, l.column)),
        Some((4, 9)),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("denied path /data contains writable path /data/cache"),
        "{e}"
    );
}

#[test]
fn broken_09d_project_inside_denied() {
    let env = Env::new();
    env.user(&format!(
        "[filesystem]\ndeny = [\"{}\"]\n",
        env.project.parent().unwrap().display()
    ));
    let e = env.load_err();
    let s = e.to_string();
    assert!(s.contains("the project directory"), "{s}");
    assert_eq!(
        e.diagnostic()
            .unwrap()
            .location
            .as_ref()
            .map(|l| (l.line, l.column)),
        Some((2, 9))
    );
}

#[test]
fn broken_10_never_passable_variables() {
    let (s, line, col) = broken("[env]\npass = [\"TERM\", \"LD_PRELOAD\"]\n");
    assert_eq!((line, col), (2, 17));
    assert!(s.contains("`LD_PRELOAD`, which is never passed"), "{s}");
    assert!(s.contains("these are always dropped"), "{s}");

    let (s, line, col) = broken("[env]\npass = [\"LD_*\"]\n");
    assert_eq!((line, col), (2, 9));
    assert!(s.contains("these are always dropped"), "{s}");

    let (s, line, col) = broken("[env]\n[env.set]\nOK = \"1\"\nBASH_ENV = \"/x\"\n");
    assert_eq!((line, col), (4, 1));
    assert!(s.contains("env.set names `BASH_ENV`"), "{s}");
    assert!(s.contains("these are always dropped"), "{s}");
}

#[test]
fn broken_11_limits_out_of_range() {
    for (text, (line, col), key) in [
        ("[limits]\npids = 0\n", (2, 8), "pids"),
        ("[limits]\ncpu = -1\n", (2, 7), "cpu"),
        ("[limits]\nmemory = 0\n", (2, 10), "memory"),
        ("[limits]\nmemory = \"0G\"\n", (2, 10), "memory"),
        ("[limits]\nnofile = -5\n", (2, 10), "nofile"),
        ("[limits]\npids = 99999999999\n", (2, 8), "pids"),
    ] {
        let (s, l, c) = broken(text);
        assert_eq!((l, c), (line, col), "{s}");
        assert!(s.contains(&format!("`{key}` is out of range")), "{s}");
        assert!(s.contains("for no limit"), "{s}");
    }
}

#[test]
fn broken_12_bad_landlock_value() {
    let (s, line, col) = broken("[filesystem]\nlandlock = \"maybe\"\n");
    assert_eq!((line, col), (2, 12));
    assert!(s.contains("invalid value \"maybe\" for `landlock`"), "{s}");
    assert!(
        s.contains("expected \"required\" or \"best-effort\""),
        "{s}"
    );

    let (s, _, _) = broken("[filesystem]\nlandlock = \"best_effort\"\n");
    assert!(s.contains("did you mean \"best-effort\"?"), "{s}");

    let (s, line, col) = broken("[filesystem]\nlandlock = true\n");
    assert_eq!((line, col), (2, 12));
    assert!(s.contains("must be a string, found a boolean"), "{s}");
}

#[test]
fn broken_13_profile_table_shapes() {
    let (s, line, col) = broken("[profile]\nclaude = 1\n");
    assert_eq!((line, col), (2, 10));
    assert!(s.contains("must be a table, found an integer"), "{s}");

    let (s, line, col) = broken("[profile.x]\nwritable = [\"/x\"]\n");
    assert_eq!((line, col), (2, 1));
    assert!(s.contains("unknown key `writable` in [profile.x]"), "{s}");
}

#[test]
fn broken_14_unknown_syscall_with_suggestion() {
    let (s, line, col) = broken("[syscalls]\ndeny = [\"chroot\", \"mout\"]\n");
    assert_eq!((line, col), (2, 19), "{s}");
    assert!(
        s.starts_with("error: unknown syscall \"mout\" in syscalls.deny\n"),
        "{s}"
    );
    assert!(s.contains("did you mean `mount`?"), "{s}");
    assert!(s.contains("without prefixes"), "{s}");

    let (s, _, _) = broken("[syscalls]\nallow = [\"__NR_ptrace\"]\n");
    assert!(s.contains("did you mean `ptrace`?"), "{s}");
}

#[test]
fn broken_15_bad_exec_action() {
    let (s, line, col) = broken(
        "[exec]\nask_timeout = 5\n\n[[exec.rule]]\npattern = \"npm publish *\"\naction = \"prompt\"\n",
    );
    assert_eq!((line, col), (6, 10), "{s}");
    assert!(
        s.contains("invalid value \"prompt\" for `action` in [[exec.rule]]"),
        "{s}"
    );
    assert!(s.contains("expected \"allow\", \"deny\" or \"ask\""), "{s}");

    let (s, _, _) = broken("[[exec.rule]]\npattern = \"x\"\naction = \"alow\"\n");
    assert!(s.contains("did you mean \"allow\"?"), "{s}");
}

#[test]
fn broken_16_allow_of_a_syscall_not_denied() {
    let (s, line, col) = broken("[syscalls]\nallow = [\"ptrace\", \"chroot\"]\n");
    assert_eq!((line, col), (2, 20), "{s}");
    assert!(
        s.contains("syscall `chroot` is not denied by default, so there is nothing to allow"),
        "{s}"
    );
    assert!(s.contains("denied by default: `kexec_load`"), "{s}");
    assert!(s.contains("`ptrace`"), "{s}");

    let (s, _, _) = broken("[syscalls]\nallow = [\"clone\"]\n");
    assert!(s.contains("nested_userns = true"), "{s}");
}

#[test]
fn broken_17_bad_exec_patterns_and_timeout() {
    let (s, line, col) = broken("[exec]\ndeny = [\"sudo *\", \"\"]\n");
    assert_eq!((line, col), (2, 19), "{s}");
    assert!(s.contains("empty exec pattern in exec.deny"), "{s}");

    let (s, line, col) = broken("[[exec.rule]]\npattern = \" \"\naction = \"deny\"\n");
    assert_eq!((line, col), (2, 11), "{s}");
    assert!(s.contains("empty exec pattern in [[exec.rule]]"), "{s}");

    let (s, line, col) = broken("[exec]\nask_timeout = 0\n");
    assert_eq!((line, col), (2, 15), "{s}");
    assert!(s.contains("`ask_timeout` is out of range: 0"), "{s}");

    let (s, line, col) = broken("[profile.x.exec]\nask_timout = 5\n");
    assert_eq!((line, col), (2, 1), "{s}");
    assert!(s.contains("did you mean `ask_timeout`?"), "{s}");

    // A pattern need not start with a program name.
    let env = Env::new();
    env.user("[exec]\nask = [\"* --force *\"]\n");
    assert_eq!(env.load().plan.exec.rules[4].pattern, "* --force *");
}

#[test]
fn broken_18_bad_on_exit_value() {
    let (s, line, col) = broken("[state]\nprotect = []\non_exit = \"save\"\n");
    assert_eq!((line, col), (3, 11), "{s}");
    assert!(
        s.starts_with("error: invalid value \"save\" for `on_exit` in [state]\n"),
        "{s}"
    );
    assert!(
        s.contains("expected \"ask\", \"keep\", \"discard\" or \"pending\""),
        "{s}"
    );

    let (s, _, _) = broken("[profile.p.state]\non_exit = \"dicsard\"\n");
    assert!(s.contains("did you mean \"discard\"?"), "{s}");

    let (s, line, col) = broken("[state]\nproject_files = \"writable\"\n");
    assert_eq!((line, col), (2, 17), "{s}");
    assert!(s.contains("expected \"readonly\" or \"staged\""), "{s}");

    let (s, line, col) = broken("[state]\nprotect = [\"~/.a\", \"rel\"]\n");
    assert_eq!((line, col), (2, 20), "{s}");
    assert!(s.contains("relative path \"rel\" in protect"), "{s}");

    let (s, _, _) = broken("[state]\nkeep = true\n");
    assert!(
        s.contains("expected one of `protect`, `on_exit`, `project_files`"),
        "{s}"
    );
}

#[test]
fn broken_19_protected_inside_denied() {
    let (s, line, col) = broken("[state]\nprotect = [\"~/.ssh/config\"]\n");
    assert_eq!((line, col), (2, 12), "{s}");
    assert!(
        s.contains("protected path ") && s.contains(".ssh/config is inside denied path"),
        "{s}"
    );
    assert!(s.contains("(built-in)"), "{s}");
    assert!(s.contains("remove it from `protect`"), "{s}");

    let (s, line, col) =
        broken("[filesystem]\ndeny = [\"/data\"]\n[state]\nprotect = [\"/data\"]\n");
    assert_eq!((line, col), (4, 12), "{s}");
    assert!(s.contains("/data is both protected and denied"), "{s}");

    // The deny written later is blamed.
    let env = Env::new();
    env.user("[state]\nprotect = [\"/data/x\"]\n[profile.p.filesystem]\ndeny = [\"/data\"]\n");
    let mut o = env.opts();
    o.profile = Some("p".into());
    let e = load(&o).unwrap_err();
    assert!(
        e.to_string()
            .contains("denied path /data contains protected path /data/x"),
        "{e}"
    );
}

#[test]
fn broken_20_protected_path_contains_the_project() {
    let env = Env::new();
    env.user(&format!(
        "[state]\nprotect = [\"~/.x\", \"{}\"]\n",
        env.project.parent().unwrap().display()
    ));
    let e = env.load_err();
    let s = e.to_string();
    assert!(s.contains("contains the project directory"), "{s}");
    assert!(s.contains("the project itself cannot be staged"), "{s}");
    let loc = e.diagnostic().unwrap().location.clone().unwrap();
    assert_eq!((loc.line, loc.column), (2, 20), "{s}");

    let env = Env::new();
    env.user("[state]\nprotect = [\"${PROJECT}\"]\n");
    let s = env.load_err().to_string();
    assert!(s.contains("is the project directory"), "{s}");
    assert!(s.contains("the project itself cannot be staged"), "{s}");
}

#[test]
fn broken_not_utf8() {
    let env = Env::new();
    fs::create_dir_all(env.user_config.parent().unwrap()).unwrap();
    fs::write(&env.user_config, b"[env]\npass = [\"\xff\"]\n").unwrap();
    let e = env.load_err();
    let d = e.diagnostic().unwrap();
    assert!(d.message.contains("not valid UTF-8"));
    assert_eq!(
        d.location.as_ref().map(|l| (l.line, l.column)),
        Some((2, 10))
    );
}

#[test]
fn broken_project_file_is_located_in_the_project_file() {
    let env = Env::new();
    env.project("[limits]\ncpu = \"lots\"\n");
    let e = env.load_err();
    let d = e.diagnostic().unwrap();
    assert_eq!(d.file.as_deref(), Some(env.project_file().as_path()));
    assert_eq!(
        d.location.as_ref().map(|l| (l.line, l.column)),
        Some((2, 7))
    );
    assert!(
        e.to_string().contains("must be a number, found a string"),
        "{e}"
    );
}

#[test]
fn no_panic_on_odd_inputs() {
    for text in [
        "",
        "\n\n\n",
        "[[filesystem]]\nreadable = []\n",
        "filesystem = 3",
        "[env]\nset = 3",
        "[env]\nset = { A = 1 }",
        "[env.set]\n\"\" = \"x\"",
        "[env.set]\n\"A=B\" = \"x\"",
        "[filesystem]\nreadable = [\"\"]",
        "[filesystem]\nreadable = [\"/a\\u0000b\"]",
        "[filesystem]\nreadable = [\"~root\"]",
        "[filesystem]\nreadable = [\"/x$\"]",
        "[limits]\ncpu = nan",
        "[limits]\ncpu = inf",
        "[limits]\nmemory = 99999999999999999999",
        "[limits]\nmemory = \"99999999999999T\"",
        "[limits]\nmemory = 1.5",
        "[profile.\"\"]\n",
        "[profile.\"a b\".env]\npass = [\"X\"]",
        "a.b.c = 1",
        "\u{feff}[filesystem]\n",
        "[filesystem]\r\nreadable = [1]\r\n",
        "[syscalls]\nallow = [\"\u{0}\"]",
        "[syscalls]\ndeny = [\"ПТРАСЕ\"]",
        "[syscalls]\nnested_userns = 1",
        "[exec]\nask_timeout = 99999999999999999999",
        "[exec]\nask_timeout = -1",
        "[exec]\nrule = []",
        "[exec]\nrule = [{}]",
        "[exec.rule]\npattern = \"x\"",
        "[[exec.rule]]\npattern = [\"x\"]\naction = \"ask\"",
        "[[exec.rule]]\npattern = \"\u{0}\"\naction = \"ask\"",
        "[[exec]]\n",
        "[[syscalls]]\n",
        "exec = []",
    ] {
        let env = Env::new();
        env.user(text);
        match load(&env.opts()) {
            Ok(_) => {}
            Err(e) => {
                let s = e.to_string();
                assert!(s.starts_with("error: "), "{s}");
                assert!(s.contains("help:"), "{text:?}: {s}");
            }
        }
    }
}

#[test]
fn secret_scanning_is_on_by_default_and_loosening_it_needs_trust() {
    let env = Env::new();
    let l = env.load();
    assert_eq!(l.plan.dlp.action, cordon_policy::DlpAction::Deny);
    assert_eq!(l.plan.dlp.max_body_bytes, 65536);
    assert!(l.plan.dlp.allow.is_empty());
    env.project(
        "[dlp]\naction = \"log\"\nmax_body_bytes = 1024\n\
         [[dlp.allow]]\nkinds = [\"jwt\", \"known:DB_PASSWORD\"]\nhosts = [\"auth.example.com\"]\n\
         [credentials.gemini]\nsource = { env = \"GEMINI_KEY\" }\nhosts = [\"*.googleapis.com\"]\nquery = \"key\"\n\
         files = [\"~/.config/x/key.json\"]\n",
    );
    let l = env.load();
    let whats: Vec<&str> = l
        .untrusted_loosening
        .iter()
        .map(|x| x.what.as_str())
        .collect();
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
    let again = env.home.join("again.toml");
    fs::write(&again, &text).unwrap();
    let mut o = env.opts();
    o.user_config = None;
    o.policy_file = Some(again);
    let l2 = load(&o).unwrap();
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
