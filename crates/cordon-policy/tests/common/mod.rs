//! What the policy tests share: a temporary home, project and data directory, and helpers.
// Each test file uses part of this.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use cordon_policy::{ExecAction, LoadOptions, Loaded, PathRule, PolicyError, TrustStore, load};

/// A temporary home, project and data directory.
pub struct Env {
    _dir: tempfile::TempDir,
    pub home: PathBuf,
    pub project: PathBuf,
    pub user_config: PathBuf,
    pub trust: PathBuf,
}

impl Env {
    pub fn new() -> Self {
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

    pub fn opts(&self) -> LoadOptions {
        let mut o = LoadOptions::new(&self.project, &self.home, &self.trust);
        o.user_config = Some(self.user_config.clone());
        o
    }

    pub fn user(&self, text: &str) -> &Self {
        fs::create_dir_all(self.user_config.parent().unwrap()).unwrap();
        fs::write(&self.user_config, text).unwrap();
        self
    }

    pub fn project_file(&self) -> PathBuf {
        self.project.join("cordon.toml")
    }

    pub fn project(&self, text: &str) -> &Self {
        fs::write(self.project_file(), text).unwrap();
        self
    }

    pub fn load(&self) -> Loaded {
        load(&self.opts()).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn load_err(&self) -> PolicyError {
        match load(&self.opts()) {
            Ok(l) => panic!("expected an error, got {:#?}", l.plan),
            Err(e) => e,
        }
    }

    /// Loads `text` (a rendered plan) as the only policy file: what `cordon check` prints must
    /// itself be a policy with the same effect.
    pub fn reload(&self, text: &str) -> Loaded {
        let again = self.home.join("again.toml");
        fs::write(&again, text).unwrap();
        let mut o = self.opts();
        o.user_config = None;
        o.policy_file = Some(again);
        load(&o).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    pub fn trust_project(&self) {
        TrustStore::new(&self.trust)
            .trust(&self.project_file())
            .unwrap();
    }
}

pub fn has(rules: &[PathRule], path: &Path) -> Option<String> {
    rules
        .iter()
        .find(|r| r.path == path)
        .map(|r| r.origin.to_string())
}

pub fn exec_rules(l: &Loaded) -> Vec<(String, ExecAction, String)> {
    l.plan
        .exec
        .rules
        .iter()
        .map(|r| (r.pattern.clone(), r.action, r.origin.to_string()))
        .collect()
}

/// Loads `text` as the user config and returns the rendered error and its location.
pub fn broken(text: &str) -> (String, usize, usize) {
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

/// What the untrusted files loosen, as the user is told.
pub fn loosened(l: &Loaded) -> Vec<&str> {
    l.untrusted_loosening
        .iter()
        .map(|x| x.what.as_str())
        .collect()
}
