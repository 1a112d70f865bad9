//! The git classes of issue #44, each attack against its control: git config read as git
//! reads it, gitlinks at any depth, the object store and config, hidden work, the files a
//! config names, what agent settings run, forged packs.

use super::*;

/// `sh -c script` on the host, as root, in `dir`: the controls' plants (git trusts the
/// variant user's repository here as the host user's own git would).
fn host_sh(dir: &Path, script: &str) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "safe.directory")
        .env("GIT_CONFIG_VALUE_0", "*")
        .output()
        .unwrap()
}

/// Git config text that a reader joining `\`-continued lines before stripping comments reads
/// as `user.fsmonitor`, and git as `core.fsmonitor`.
fn continued_comment_config(m: &Path) -> String {
    format!(
        "[user]\n\tname = x\n# \\\n[core]\n\tfsmonitor = touch {}; false\n",
        m.display()
    )
}

both!(
    a_continued_comment_in_git_config_fires_control,
    |env: Env| {
        repo(&env, &env.project);
        let m = marker(&env, "continued-control");
        let cfg = env.project.join(".git/config");
        let mut text = std::fs::read_to_string(&cfg).unwrap();
        text.push_str(&continued_comment_config(&m));
        std::fs::write(&cfg, text).unwrap();
        let _ = host_git(&env.project, &["status"]);
        assert!(
            m.exists(),
            "git did not read core.fsmonitor: the test proves nothing"
        );
    }
);

both!(a_continued_comment_hides_no_git_config_key, |env: Env| {
    repo(&env, &env.project);
    let m = marker(&env, "continued");
    let text = continued_comment_config(&m)
        .replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\t', "\\t");
    // In the project's repository, and in one made during the session.
    let o = env.attempt(&format!(
        "printf '{text}' >> .git/config && git init -q sub && printf '{text}' >> sub/.git/config \
         && git config --list"
    ));
    assert!(
        all_output(&o).contains("core.fsmonitor="),
        "git inside did not read it as core.fsmonitor\n{}",
        show(&o)
    );
    let host_cfg = std::fs::read_to_string(env.project.join(".git/config")).unwrap();
    assert!(
        !host_cfg.contains("fsmonitor"),
        "applied unasked:\n{host_cfg}"
    );
    host_git_runs_nothing(&env, &env.project, "continued");
    host_git_runs_nothing(&env, &env.project.join("sub"), "continued");
    let d = env.cordon().args(["state", "diff"]).output().unwrap();
    assert!(
        all_output(&d).contains("core.fsmonitor"),
        "review does not name the key git reads\n{}",
        all_output(&d)
    );
});

/// Shell lines: a repository at `dir` with one commit and an fsmonitor that touches `m`,
/// added to the project's index as a gitlink. `git` is whatever runs them (inside or host).
fn gitlinked_repo(dir: &str, m: &Path) -> String {
    format!(
        "git init -q {dir} && git -C {dir} -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && \
         git -C {dir} config core.fsmonitor 'touch {m}; false' && \
         git -c user.email=a@b -c user.name=a add {dir} 2>/dev/null && \
         git -c user.email=a@b -c user.name=a commit -qm {dir}",
        m = m.display()
    )
}

const GITLINKED: &[&str] = &[
    "node_modules/left-pad",
    "target/debug/build/x",
    ".venv/lib/y",
    "a/b/c/d/e/f/g/deep",
];

both!(a_gitlink_under_an_ignored_dir_fires_control, |env: Env| {
    repo_as_root(&env.project);
    for dir in GITLINKED {
        let m = marker(&env, &format!("gitlink-control-{}", dir.replace('/', "-")));
        let o = host_sh(&env.project, &gitlinked_repo(dir, &m));
        assert!(o.status.success(), "{dir}: {}", show(&o));
        std::fs::remove_file(&m).ok();
        let _ = host_git(&env.project, &["status"]);
        assert!(
            m.exists(),
            "{dir}: the host's git status did not enter the gitlink"
        );
    }
});

both!(
    gitlinks_at_any_depth_and_under_ignored_dirs_run_nothing,
    |env: Env| {
        repo(&env, &env.project);
        let script: Vec<String> = GITLINKED
            .iter()
            .map(|dir| gitlinked_repo(dir, &marker(&env, "gitlink")))
            .collect();
        let o = env.run(&script.join(" && "));
        assert_eq!(
            o.status.code(),
            Some(0),
            "the plant must work inside\n{}",
            show(&o)
        );
        host_git_runs_nothing(&env, &env.project, "gitlink");
        for dir in GITLINKED {
            host_git_runs_nothing(&env, &env.project.join(dir), "gitlink");
        }
    }
);

/// How many objects `git count-objects -v` counts (loose and packed), and whether `git fsck`
/// finds the repository whole.
fn objects_whole(dir: &Path) -> (String, bool) {
    let count = host_git_ok(dir, &["count-objects", "-v"]);
    let fsck = host_git(dir, &["fsck", "--full", "--no-progress"]);
    (count, fsck.status.success())
}

/// A repository with a few commits of real content (loose objects and a pack).
fn repo_with_history(env: &Env) {
    repo_as_root(&env.project);
    for i in 0..3 {
        std::fs::write(env.project.join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
        host_git_ok(&env.project, &["add", "."]);
        host_git_ok(&env.project, &["commit", "-qm", &format!("c{i}")]);
    }
    host_git_ok(&env.project, &["repack", "-q", "-a", "-d"]);
    std::fs::write(env.project.join("loose.txt"), "loose\n").unwrap();
    host_git_ok(&env.project, &["add", "."]);
    host_git_ok(&env.project, &["commit", "-qm", "loose"]);
    host_git_ok(
        &env.project,
        &["remote", "add", "origin", "/nonexistent/upstream.git"],
    );
    env.own(&env.base);
}

const WRECK_OBJECTS: &str = "find .git/objects -type f -delete; mkdir -p .git/objects/info && \
     echo /nonexistent/objects > .git/objects/info/alternates";

both!(
    deleting_objects_breaks_the_repository_control,
    |env: Env| {
        repo_with_history(&env);
        assert!(
            objects_whole(&env.project).1,
            "fsck fails before anything happened"
        );
        let o = host_sh(&env.project, WRECK_OBJECTS);
        assert!(o.status.success(), "{}", show(&o));
        assert!(
            !objects_whole(&env.project).1,
            "fsck passes with every object gone: the check proves nothing"
        );
    }
);

both!(the_object_store_and_config_survive_a_session, |env: Env| {
    repo_with_history(&env);
    assert!(objects_whole(&env.project).1);
    let config = std::fs::read_to_string(env.project.join(".git/config")).unwrap();
    // Everyday work inside still writes objects, and they reach the host unasked.
    let o = env.run(
        "echo new > new.txt && git add new.txt && \
         git -c user.email=a@b -c user.name=a commit -qm inside && git rev-parse HEAD",
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let head = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    assert_eq!(
        host_git_ok(&env.project, &["rev-parse", "HEAD"]).trim(),
        head
    );
    let (count, whole) = objects_whole(&env.project);
    assert!(whole, "{}", show(&o));
    // Then the attack: every object deleted, alternates planted, the config truncated.
    let o = env.run(&format!("{WRECK_OBJECTS} && : > .git/config"));
    assert_eq!(
        o.status.code(),
        Some(0),
        "the attack must work inside\n{}",
        show(&o)
    );
    let (after, whole) = objects_whole(&env.project);
    assert!(whole, "the host's repository is broken after the session");
    assert_eq!(after, count, "objects changed");
    assert!(!env.project.join(".git/objects/info/alternates").exists());
    let now = std::fs::read_to_string(env.project.join(".git/config")).unwrap();
    assert_eq!(now, config, "the config changed unasked");
    let d = env.cordon().args(["state", "diff"]).output().unwrap();
    let text = all_output(&d);
    assert!(
        text.contains("alternates") && text.contains("removed"),
        "{text}"
    );
});

/// A Makefile backdoored and hidden from the index's view, a conftest.py hidden by
/// `info/exclude`: `git status --porcelain` shows neither.
const BLIND: &str = "echo 'all:; touch /nonexistent/pwned' > Makefile && \
     git update-index --skip-worktree Makefile && \
     echo 'import os' > conftest.py && mkdir -p .git/info && echo conftest.py >> .git/info/exclude";

fn repo_with_makefile(env: &Env) {
    repo_as_root(&env.project);
    std::fs::write(env.project.join("Makefile"), "all:\n\ttrue\n").unwrap();
    host_git_ok(&env.project, &["add", "Makefile"]);
    host_git_ok(&env.project, &["commit", "-qm", "make"]);
    env.own(&env.base);
}

both!(blinding_git_status_works_on_the_host_control, |env: Env| {
    repo_with_makefile(&env);
    let o = host_sh(&env.project, BLIND);
    assert!(o.status.success(), "{}", show(&o));
    let st = host_git_ok(&env.project, &["status", "--porcelain"]);
    assert_eq!(st, "", "status is not blinded: the check proves nothing");
});

both!(
    skip_worktree_and_info_exclude_do_not_blind_the_host,
    |env: Env| {
        repo_with_makefile(&env);
        let o = env.run(BLIND);
        assert_eq!(
            o.status.code(),
            Some(0),
            "the plant must work inside\n{}",
            show(&o)
        );
        let st = host_git_ok(&env.project, &["status", "--porcelain"]);
        assert!(
            st.contains("Makefile") && st.contains("conftest.py"),
            "the host's git status is blind to the session's work:\n{st}"
        );
        let d = env.cordon().args(["state", "diff"]).output().unwrap();
        let text = all_output(&d);
        assert!(
            text.contains("skip-worktree") && text.contains("info/exclude"),
            "{text}"
        );
    }
);

/// A repository whose own config points git at project files: a husky-style hooks directory
/// and an included config file, both ordinary tracked content.
fn repo_with_pointers(env: &Env) {
    repo_as_root(&env.project);
    std::fs::create_dir_all(env.project.join(".githooks")).unwrap();
    std::fs::write(
        env.project.join(".githooks/pre-commit"),
        "#!/bin/sh\nexit 0\n",
    )
    .unwrap();
    std::fs::set_permissions(
        env.project.join(".githooks/pre-commit"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(
        env.project.join("shared.gitconfig"),
        "[user]\n\tname = Shared\n",
    )
    .unwrap();
    host_git_ok(&env.project, &["config", "core.hooksPath", ".githooks"]);
    host_git_ok(
        &env.project,
        &["config", "include.path", "../shared.gitconfig"],
    );
    env.own(&env.base);
}

/// Shell lines that edit what the pointers name: the hook and the included config.
fn edit_pointed_files(m: &Path) -> String {
    format!(
        "printf '#!/bin/sh\\ntouch {m}\\n' > .githooks/pre-commit && \
         printf '[core]\\n\\tfsmonitor = touch {m}; false\\n' >> shared.gitconfig",
        m = m.display()
    )
}

both!(files_a_repositorys_config_names_fire_control, |env: Env| {
    repo_with_pointers(&env);
    let m = marker(&env, "pointers-control");
    let o = host_sh(&env.project, &edit_pointed_files(&m));
    assert!(o.status.success(), "{}", show(&o));
    let _ = host_git(&env.project, &["status"]);
    assert!(
        m.exists(),
        "the included fsmonitor did not run: the test proves nothing"
    );
    std::fs::remove_file(&m).unwrap();
    let _ = host_git(&env.project, &["commit", "-q", "--allow-empty", "-m", "c"]);
    assert!(
        m.exists(),
        "the hooksPath hook did not run: the test proves nothing"
    );
});

both!(files_a_repositorys_config_names_are_held, |env: Env| {
    repo_with_pointers(&env);
    let m = marker(&env, "pointers");
    let o = env.run(&edit_pointed_files(&m));
    assert_eq!(
        o.status.code(),
        Some(0),
        "the edit must work inside\n{}",
        show(&o)
    );
    host_git_runs_nothing(&env, &env.project, "pointers");
    let d = env.cordon().args(["state", "diff"]).output().unwrap();
    let text = all_output(&d);
    assert!(
        text.contains("core.hookspath") && text.contains("include.path"),
        "review does not say which key names them\n{text}"
    );
});

/// A project whose Claude settings run a script of its own from a hook.
fn project_with_hook_script(env: &Env) {
    repo_as_root(&env.project);
    env.write(
        ".claude/settings.json",
        r#"{"hooks":{"PreToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"sh \"$CLAUDE_PROJECT_DIR\"/scripts/guard.sh"}]}]}}"#,
    );
    env.write("scripts/guard.sh", "exit 0\n");
}

both!(
    a_script_agent_settings_run_changes_on_the_host_control,
    |env: Env| {
        project_with_hook_script(&env);
        let o = host_sh(
            &env.project,
            "echo 'touch /nonexistent/pwned' >> scripts/guard.sh",
        );
        assert!(o.status.success(), "{}", show(&o));
        let now = std::fs::read_to_string(env.project.join("scripts/guard.sh")).unwrap();
        assert!(
            now.contains("pwned"),
            "the plant did not land: the test proves nothing"
        );
    }
);

both!(
    a_script_agent_settings_run_is_held_and_flagged,
    |env: Env| {
        project_with_hook_script(&env);
        let o = env.run("echo 'touch /nonexistent/pwned' >> scripts/guard.sh");
        assert_eq!(
            o.status.code(),
            Some(0),
            "the edit must work inside\n{}",
            show(&o)
        );
        let now = std::fs::read_to_string(env.project.join("scripts/guard.sh")).unwrap();
        assert_eq!(now, "exit 0\n", "the hook's script changed unreviewed");
        let d = env.cordon().args(["state", "diff"]).output().unwrap();
        let text = all_output(&d);
        assert!(
            text.contains("agent's settings"),
            "not flagged by what runs it\n{text}"
        );
    }
);

/// Tool configs of a project that name files of its own for the host to run.
const TOOL_POINTERS: &[(&str, &str)] = &[
    (".yarnrc.yml", "yarnPath: .yarn/releases/yarn-4.cjs\n"),
    (".envrc", "source ./env.sh\n"),
    (
        ".cargo/config.toml",
        "[target.x86_64-unknown-linux-gnu]\nrunner = \"scripts/runner.sh\"\n",
    ),
    (
        ".pre-commit-config.yaml",
        "repos:\n  - repo: local\n    hooks:\n      - id: lint\n        name: lint\n        language: system\n        entry: ./tools/lint.sh\n",
    ),
];
const TOOL_TARGETS: &[&str] = &[
    ".yarn/releases/yarn-4.cjs",
    "env.sh",
    "scripts/runner.sh",
    "tools/lint.sh",
];

fn project_with_tool_pointers(env: &Env) {
    repo_as_root(&env.project);
    for (f, text) in TOOL_POINTERS {
        env.write(f, text);
    }
    for t in TOOL_TARGETS {
        env.write(t, "true\n");
    }
}

const EDIT_TOOL_TARGETS: &str = "for f in .yarn/releases/yarn-4.cjs env.sh scripts/runner.sh tools/lint.sh; do \
     echo 'touch /nonexistent/pwned' >> $f; done";

both!(
    files_tool_configs_name_change_on_the_host_control,
    |env: Env| {
        project_with_tool_pointers(&env);
        let o = host_sh(&env.project, EDIT_TOOL_TARGETS);
        assert!(o.status.success(), "{}", show(&o));
        for t in TOOL_TARGETS {
            let now = std::fs::read_to_string(env.project.join(t)).unwrap();
            assert!(now.contains("pwned"), "{t}: the plant did not land");
        }
    }
);

both!(files_tool_configs_name_are_held_and_flagged, |env: Env| {
    project_with_tool_pointers(&env);
    let o = env.run(EDIT_TOOL_TARGETS);
    assert_eq!(
        o.status.code(),
        Some(0),
        "the edit must work inside\n{}",
        show(&o)
    );
    for t in TOOL_TARGETS {
        let now = std::fs::read_to_string(env.project.join(t)).unwrap();
        assert_eq!(now, "true\n", "{t} changed on the host unreviewed");
    }
    let d = env.cordon().args(["state", "diff"]).output().unwrap();
    let text = all_output(&d);
    for by in ["yarnPath", ".envrc `source`", "runner", "entry"] {
        assert!(text.contains(by), "not flagged by {by}\n{text}");
    }
});

/// Python that rewrites a one-object pack index so that it names `x` (an object the host has)
/// for the pack's object `y` (other content), and fixes the index's checksum: a forged pack.
const FORGE_IDX: &str = r#"
import sys, hashlib, struct
x, y, path = sys.argv[1], sys.argv[2], sys.argv[3]
d = open(path, 'rb').read()
assert d[:8] == b'\xfftOc\x00\x00\x00\x02' and struct.unpack('>I', d[8+255*4:8+256*4])[0] == 1
at = 8 + 256*4
assert d[at:at+20].hex() == y
rest = d[at+20:at+20+4+4+20]
new = bytes.fromhex(x)
fan = b''.join(struct.pack('>I', 1 if new[0] <= i else 0) for i in range(256))
body = d[:8] + fan + new + rest
open(path, 'wb').write(body + hashlib.sha1(body).digest())
"#;

/// A repository with a Makefile, and in `forged/` a pack (with its index) whose index says it
/// holds the Makefile's blob while it holds other content: put in the object store, it stands
/// in for the blob on the next checkout.
fn repo_with_forged_pack(env: &Env) {
    repo_with_makefile(env);
    let x = host_git_ok(&env.project, &["rev-parse", "HEAD:Makefile"]);
    let evil = env.project.join("evil.mk");
    std::fs::write(&evil, "all:\n\ttouch /nonexistent/pwned\n").unwrap();
    let y = host_git_ok(&env.project, &["hash-object", "-w", "evil.mk"]);
    std::fs::remove_file(&evil).unwrap();
    let forged = env.project.join("forged");
    std::fs::create_dir_all(&forged).unwrap();
    let o = host_sh(
        &env.project,
        &format!("echo {y} | git pack-objects -q forged/pack", y = y.trim()),
    );
    assert!(o.status.success(), "{}", show(&o));
    let idx = std::fs::read_dir(&forged)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "idx"))
        .unwrap();
    for e in std::fs::read_dir(&forged).unwrap().flatten() {
        if !matches!(
            e.path().extension().and_then(|x| x.to_str()),
            Some("idx" | "pack")
        ) {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let o = Command::new("python3")
        .args(["-c", FORGE_IDX, x.trim(), y.trim()])
        .arg(&idx)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    // Only the forged pack carries the evil content.
    let loose = env
        .project
        .join(".git/objects")
        .join(&y.trim()[..2])
        .join(&y.trim()[2..]);
    std::fs::remove_file(loose).unwrap();
    env.own(&env.base);
}

/// The Makefile the host's `git checkout` writes from the object store.
fn checked_out_makefile(env: &Env) -> String {
    std::fs::remove_file(env.project.join("Makefile")).unwrap();
    host_git_ok(&env.project, &["checkout", "Makefile"]);
    std::fs::read_to_string(env.project.join("Makefile")).unwrap()
}

both!(a_forged_pack_replaces_an_object_control, |env: Env| {
    repo_with_forged_pack(&env);
    let o = host_sh(&env.project, "mv forged/* .git/objects/pack/");
    assert!(o.status.success(), "{}", show(&o));
    assert!(
        checked_out_makefile(&env).contains("pwned"),
        "the forged pack did not stand in for the blob: the test proves nothing"
    );
});

both!(a_forged_pack_does_not_reach_the_host, |env: Env| {
    repo_with_forged_pack(&env);
    let o = env.run("mv forged/* .git/objects/pack/");
    assert_eq!(
        o.status.code(),
        Some(0),
        "the plant must work inside\n{}",
        show(&o)
    );
    let made = checked_out_makefile(&env);
    assert!(
        !made.contains("pwned"),
        "the host checked out the forged blob:\n{made}"
    );
    let d = env.cordon().args(["state", "diff"]).output().unwrap();
    let text = all_output(&d);
    assert!(text.contains("cannot verify"), "{text}");
});
