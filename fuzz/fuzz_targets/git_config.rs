//! Differential: random git config text read by cordon's review (which asks git itself,
//! `cordon_state::fuzzing::config_flags`) and by `git config --list` run here, independently.
//! No disagreement about what runs: every key git reads that cordon's table says executes
//! (`core.fsmonitor`, `include.path`, …) is named in cordon's flags, any key not known inert
//! makes cordon hold, and text git refuses is held. The same text read as a repository's own
//! config (`git config --local`, how the host's `git status` loads it) gives the same keys as
//! reading it as a file, whenever git accepts the repository at all. Input that is not UTF-8
//! or holds NUL is held before it gets here (review reads config only as text). Forks git for
//! every input: CI runs a few thousand.
#![no_main]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use cordon_state::fuzzing::{config_flags, executes, inert};
use libfuzzer_sys::fuzz_target;

type Keys = BTreeMap<String, Vec<String>>;

/// A scratch dir of this process's own: an empty home, a file to read, a git dir whose config
/// is rewritten for each input.
fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("cordon-fuzz-gitconfig-{}", std::process::id()));
        for sub in ["home", "repo.git/objects", "repo.git/refs"] {
            std::fs::create_dir_all(d.join(sub)).expect("scratch dir");
        }
        std::fs::write(d.join("repo.git/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        d
    })
}

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir.join("home"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CEILING_DIRECTORIES", dir)
        .current_dir(dir);
    c
}

fn list(mut c: Command) -> Option<Keys> {
    let o = c.output().expect("git runs");
    if !o.status.success() {
        return None;
    }
    let mut keys = Keys::new();
    for item in o.stdout.split(|b| *b == 0).filter(|s| !s.is_empty()) {
        let item = String::from_utf8(item.to_vec()).expect("git lists UTF-8 for UTF-8 input");
        let (k, v) = match item.split_once('\n') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (item, "true".to_owned()),
        };
        keys.entry(k).or_default().push(v);
    }
    Some(keys)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if text.contains('\0') {
        return;
    }
    let d = scratch();
    let file = d.join("config");
    std::fs::write(&file, text).expect("write config");
    let mut c = git(d);
    c.args(["config", "--no-includes", "--null", "--list", "--file"])
        .arg(&file);
    let as_file = list(c);
    let flags = config_flags("", text);
    match &as_file {
        None => assert!(
            !flags.is_empty(),
            "git refuses {text:?}, cordon would apply it unasked"
        ),
        Some(keys) => {
            for (k, v) in keys {
                if executes(k, v).is_some() {
                    assert!(
                        flags.iter().any(|f| f.contains(&format!("`{k} = "))),
                        "git reads `{k}` (it runs something) in {text:?}; cordon's flags: {flags:?}"
                    );
                } else if !inert(k) {
                    assert!(
                        !flags.is_empty(),
                        "git reads `{k}` (not known inert) in {text:?}; cordon holds nothing"
                    );
                }
            }
        }
    }
    // How the host's git loads it: as the repository's config.
    std::fs::write(d.join("repo.git/config"), text).expect("write repo config");
    let mut c = git(d);
    c.env("GIT_DIR", d.join("repo.git")).args([
        "config",
        "--local",
        "--no-includes",
        "--null",
        "--list",
    ]);
    if let Some(as_repo) = list(c) {
        assert_eq!(
            Some(&as_repo),
            as_file.as_ref(),
            "{text:?} reads one way as a file and another as a repository's config"
        );
    }
});
