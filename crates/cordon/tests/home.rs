//! The copy-on-write home, black-box: writes in the home succeed inside and never reach the
//! host until accepted; protected paths (also ones that did not exist) go to review; caches
//! persist across sessions in cordon's own layers; where the overlay cannot be had, the home
//! is read-only with a warning.

mod common;

use std::path::{Path, PathBuf};

use common::{Env, show, tree};

/// cordon's own directories in the test home (its caches) and the project.
fn own_dirs(env: &Env) -> Vec<PathBuf> {
    vec![env.home.join(".cache/cordon"), env.project.clone()]
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The session id in "keep one with `cordon state accept ID PATH`".
fn kept_session(err: &str) -> String {
    let at = err
        .find("cordon state accept ")
        .unwrap_or_else(|| panic!("no accept hint in:\n{err}"));
    err[at + "cordon state accept ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// `cordon ARGS…` as the variant's user.
fn cordon(env: &Env, args: &[&str]) -> std::process::Output {
    env.cordon().args(args).output().unwrap()
}

/// `cordon state ARGS…`.
fn state(env: &Env, args: &[&str]) -> std::process::Output {
    env.cordon().arg("state").args(args).output().unwrap()
}

/// `cordon state accept ID PATH`.
fn accept(env: &Env, id: &str, path: &Path) -> std::process::Output {
    env.cordon()
        .args(["state", "accept", id])
        .arg(path)
        .output()
        .unwrap()
}

both!(writes_in_the_home_stay_in_the_session, |env: Env| {
    let before = tree(&env.home, &own_dirs(&env));
    let o = env.run(
        "set -e; echo new > ~/newfile; echo more >> ~/notes.txt; \
         mkdir -p ~/.local/share/tool && echo t > ~/.local/share/tool/db; \
         rm ~/notes.txt; echo again > ~/notes.txt; \
         cat ~/newfile ~/notes.txt ~/.local/share/tool/db; \
         if cat ~/.ssh/id_ed25519 2>/dev/null; then echo LEAK; fi; \
         if echo x > ~/.ssh/planted 2>/dev/null; then echo PLANTED; fi",
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(out, "new\nagain\nt\n", "{}", show(&o));
    assert_eq!(
        tree(&env.home, &own_dirs(&env)),
        before,
        "the host home changed"
    );
    let err = stderr(&o);
    assert!(
        err.contains("3 paths written in the home outside protected state were not kept"),
        "{err}"
    );
    assert!(err.contains("~/.local/share 1"), "{err}");
    // Kept on request: exactly that path, nothing else.
    let id = kept_session(&err);
    let newfile = env.home.join("newfile");
    let a = accept(&env, &id, &newfile);
    assert_eq!(a.status.code(), Some(0), "{}", show(&a));
    assert_eq!(std::fs::read_to_string(&newfile).unwrap(), "new\n");
    assert_eq!(
        std::fs::read_to_string(env.home.join("notes.txt")).unwrap(),
        "visible-home-file"
    );
    assert!(!env.home.join(".local/share/tool").exists());
    // A path the session never wrote is refused, by name.
    let none = accept(&env, &id, &env.home.join("never-written"));
    assert_ne!(none.status.code(), Some(0), "{}", show(&none));
    // Discarding drops the layer: nothing left to keep.
    let d = state(&env, &["discard", &id]);
    assert_eq!(d.status.code(), Some(0), "{}", show(&d));
    let again = accept(&env, &id, &env.home.join("notes.txt"));
    assert_ne!(again.status.code(), Some(0), "{}", show(&again));
    assert_eq!(
        std::fs::read_to_string(env.home.join("notes.txt")).unwrap(),
        "visible-home-file"
    );
});

both!(a_session_that_writes_nothing_leaves_nothing, |env: Env| {
    let o = env.run("cat ~/notes.txt >/dev/null");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(!stderr(&o).contains("not kept"), "{}", show(&o));
    let l = state(&env, &["list"]);
    assert_eq!(
        String::from_utf8_lossy(&l.stdout).trim(),
        "no sessions with protected agent state yet (a profile such as `cordon run --profile claude` protects its agent's state)",
        "{}",
        show(&l)
    );
});

/// The skeletons sessions that wrote nothing left for later ones (cordon-state's `spare`).
fn spares(env: &Env) -> Vec<String> {
    let pool = env.base.join("state/cordon/state/.spare");
    let mut names: Vec<String> = std::fs::read_dir(&pool)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

both!(
    a_session_starts_in_the_directories_an_earlier_empty_one_left,
    |env: Env| {
        let before = tree(&env.home, &own_dirs(&env));
        let listing = "ls -A ~; stat -c %a ~";
        // Two sessions whose layer ends empty: a file made and removed, the home's mode changed and
        // changed back. What each sees of the home is what a fresh session sees.
        let mut fresh = Vec::new();
        for _ in 0..2 {
            let o = env.run(&format!(
                "set -e; {listing}; echo x > ~/scratch; rm ~/scratch; m=$(stat -c %a ~); \
             chmod 700 ~; chmod $m ~"
            ));
            assert_eq!(o.status.code(), Some(0), "{}", show(&o));
            assert!(!stderr(&o).contains("not kept"), "{}", show(&o));
            fresh.push(String::from_utf8_lossy(&o.stdout).into_owned());
        }
        assert_eq!(fresh[0], fresh[1]);
        let parked = spares(&env);
        assert_eq!(parked.len(), 2, "{parked:?}");
        // The third starts in the first one's: the same home, nothing of theirs, and what it writes
        // is its own and not kept.
        let o = env.run(&format!("set -e; {listing}; echo mine > ~/x; cat ~/x"));
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            format!("{}mine\n", fresh[0]),
            "{}",
            show(&o)
        );
        assert!(
            stderr(&o).contains("1 path written in the home"),
            "{}",
            show(&o)
        );
        assert_eq!(
            spares(&env),
            vec![parked[1].clone()],
            "the oldest was taken"
        );
        assert_eq!(
            tree(&env.home, &own_dirs(&env)),
            before,
            "the host home changed"
        );
    }
);

/// The state paths each built-in profile protects, as the first run of the agent creates them.
const PROFILES: &[(&str, &[&str])] = &[
    ("claude", &[".claude/settings.json", ".claude.json"]),
    ("codex", &[".codex/config.toml"]),
    ("gemini", &[".gemini/settings.json"]),
    ("aider", &[".aider/history"]),
    (
        "opencode",
        &[
            ".config/opencode/opencode.json",
            ".local/share/opencode/auth-free.json",
            ".local/state/opencode/state",
        ],
    ),
];

both!(
    a_first_run_of_each_profile_goes_to_review_as_added,
    |env: Env| {
        let pol = env.policy_file("pending.toml", "[state]\non_exit = \"pending\"\n");
        for (profile, files) in PROFILES {
            let script: String = files
                .iter()
                .map(|f| format!("mkdir -p \"$(dirname ~/{f})\" && echo first-run > ~/{f} && "))
                .collect::<String>()
                + "cat ~/"
                + files[0];
            let o = env.run_with(&["--policy", &pol, "--profile", profile], &script);
            assert_eq!(o.status.code(), Some(0), "{profile}: {}", show(&o));
            assert_eq!(String::from_utf8_lossy(&o.stdout), "first-run\n");
            for f in *files {
                assert!(
                    !env.home.join(f).exists(),
                    "{profile}: {f} reached the host"
                );
            }
            let err = stderr(&o);
            assert!(
                err.contains(" to protected state (0 flagged) is pending")
                    || err.contains(" to protected state (0 flagged) are pending"),
                "{profile}: {err}"
            );
            assert!(!err.contains("not kept"), "{profile}: {err}");
            let id = err
                .split("cordon state diff ")
                .nth(1)
                .and_then(|r| r.split('`').next())
                .unwrap()
                .to_string();
            let diff = state(&env, &["diff", &id]);
            let text = String::from_utf8_lossy(&diff.stdout);
            assert!(!text.contains("FLAGGED"), "{profile}: {text}");
            for f in *files {
                let name = Path::new(f).file_name().unwrap().to_str().unwrap();
                let as_file = format!("~/{f} (new): +1");
                assert!(
                    text.contains(&as_file)
                        || text
                            .lines()
                            .any(|l| l.trim_start().starts_with("+ ") && l.contains(name)),
                    "{profile}: {f} not shown as added:\n{text}"
                );
            }
            assert!(text.contains("(new)"), "{profile}: {text}");
            let a = state(&env, &["accept", &id]);
            assert_eq!(a.status.code(), Some(0), "{profile}: {}", show(&a));
            for f in *files {
                assert_eq!(
                    std::fs::read_to_string(env.home.join(f)).unwrap(),
                    "first-run\n",
                    "{profile}: {f}"
                );
            }
        }
    }
);

both!(
    a_lock_file_and_rename_save_of_a_protected_file,
    |env: Env| {
        // What Claude Code does with ~/.claude.json: a sibling lock, a temp file, a rename over.
        std::fs::write(env.home.join(".claude.json"), "{\"n\": 1}\n").unwrap();
        env.own(&env.home);
        let pol = env.policy_file("pending.toml", "[state]\non_exit = \"pending\"\n");
        let o = env.run_with(
            &["--policy", &pol, "--profile", "claude"],
            "set -e; mkdir ~/.claude.json.lock; echo '{\"n\": 2}' > ~/.claude.json.tmp.42; \
         mv ~/.claude.json.tmp.42 ~/.claude.json; rmdir ~/.claude.json.lock; cat ~/.claude.json",
        );
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout), "{\"n\": 2}\n");
        assert_eq!(
            std::fs::read_to_string(env.home.join(".claude.json")).unwrap(),
            "{\"n\": 1}\n"
        );
        let err = stderr(&o);
        assert!(
            err.contains("1 change to protected state (0 flagged) is pending"),
            "{err}"
        );
        assert!(
            !err.contains("not kept"),
            "the lock and temp file left nothing: {err}"
        );
        let id = err
            .split("cordon state accept ")
            .nth(1)
            .and_then(|r| r.split('`').next())
            .unwrap()
            .to_string();
        let a = state(&env, &["accept", &id]);
        assert_eq!(a.status.code(), Some(0), "{}", show(&a));
        assert_eq!(
            std::fs::read_to_string(env.home.join(".claude.json")).unwrap(),
            "{\"n\": 2}\n"
        );
    }
);

both!(
    caches_persist_across_sessions_and_never_reach_the_host,
    |env: Env| {
        // The host has an npm cache (warm from the first session) and no pip cache.
        env.write_home(".npm/_cacache/host-entry", "from-host");
        let before = tree(&env.home, &own_dirs(&env));
        let o = env.run(
            "set -e; cat ~/.npm/_cacache/host-entry; echo; echo s1 > ~/.npm/_cacache/new-entry; \
         mkdir -p ~/.cache/pip/http && echo wheel > ~/.cache/pip/http/w; \
         echo scratch > ~/scratch",
        );
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout), "from-host\n");
        assert!(
            stderr(&o).contains("1 path written in the home outside protected state was not kept"),
            "caches are not scratch: {}",
            show(&o)
        );
        assert_eq!(
            tree(&env.home, &own_dirs(&env)),
            before,
            "the host home changed"
        );
        let o =
            env.run("cat ~/.npm/_cacache/new-entry ~/.cache/pip/http/w; ls ~/scratch 2>&1 || true");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.starts_with("s1\nwheel\n"), "{}", show(&o));
        assert!(!out.contains("scratch\n"), "scratch is per session: {out}");
        let list = cordon(&env, &["cache", "list"]);
        let text = String::from_utf8_lossy(&list.stdout);
        assert!(text.contains(".npm"), "{}", show(&list));
        assert!(text.contains(".cache/pip"), "{}", show(&list));
        let clear = cordon(&env, &["cache", "clear"]);
        assert_eq!(clear.status.code(), Some(0), "{}", show(&clear));
        let o = env.run("ls ~/.npm/_cacache; ls ~/.cache/pip 2>&1 || true");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("host-entry") && !out.contains("new-entry") && !out.contains("http"),
            "{}",
            show(&o)
        );
    }
);

both!(
    a_missing_writable_path_is_created_and_said_so,
    |env: Env| {
        let pol = env.policy_file("w.toml", "[filesystem]\nwritable = [\"~/.wanted/dir\"]\n");
        let o = env.run_with(&["--policy", &pol], "echo kept > ~/.wanted/dir/f");
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(
            stderr(&o).contains("created the writable directory"),
            "{}",
            show(&o)
        );
        assert_eq!(
            std::fs::read_to_string(env.home.join(".wanted/dir/f")).unwrap(),
            "kept\n"
        );
    }
);

both!(home_readonly_keeps_the_home_read_only, |env: Env| {
    let pol = env.policy_file("ro.toml", "[state]\nhome = \"readonly\"\n");
    let o = env.run_with(
        &["--policy", &pol],
        "echo x > ~/newfile 2>&1 || echo REFUSED",
    );
    let out = common::all_output(&o);
    assert!(out.contains("Read-only file system"), "{}", show(&o));
    assert!(out.contains("REFUSED"), "{}", show(&o));
    assert!(!env.home.join("newfile").exists());
});

both!(
    an_overlay_the_kernel_refuses_falls_back_to_a_read_only_home,
    |env: Env| {
        // overlayfs cannot name a layer whose path holds a comma: a real refusal.
        let odd = env.base.join("home,odd");
        std::fs::create_dir_all(&odd).unwrap();
        // A shown file (configuration) and a document the home's view hides, read-only too.
        std::fs::write(odd.join(".gitconfig"), "host").unwrap();
        std::fs::write(odd.join("f"), "hidden-doc").unwrap();
        env.own(&odd);
        let o = env
            .cordon()
            .env("HOME", &odd)
            .args(["run", "--no-tty", "--", "sh", "-c"])
            .arg("echo x > ~/.gitconfig 2>&1 || echo REFUSED; cat ~/.gitconfig; cat ~/f; true")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let out = common::all_output(&o);
        assert!(
            out.contains("Read-only file system") && out.contains("REFUSED\nhost"),
            "{}",
            show(&o)
        );
        assert!(
            stderr(&o).contains("the copy-on-write home is not available")
                && stderr(&o).contains("the home is read-only this session"),
            "{}",
            show(&o)
        );
        assert!(!out.contains("hidden-doc"), "{}", show(&o));
        assert_eq!(
            std::fs::read_to_string(odd.join(".gitconfig")).unwrap(),
            "host"
        );
    }
);
