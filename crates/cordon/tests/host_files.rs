//! Host-executed files, black-box: what a session plants where the host later loads or runs it
//! (git config and hooks through every git indirection, editor and agent settings, shell rc
//! files) must not reach the host before review. Each attack is judged on the host: a host-side
//! `git status` / `git commit` run by the test after the session, and a marker file the planted
//! fsmonitor or hook would create; or the host file itself. Runs as root and as a user.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Env, all_output, show};

/// Git on the host, as the user would run it after the session (the test runs as root, the
/// repo may belong to the test user: `safe.directory=*` lets git read its config, which is
/// exactly what would run a planted fsmonitor).
fn host_git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args([
            "-c",
            "safe.directory=*",
            "-c",
            "user.email=t@e.invalid",
            "-c",
            "user.name=t",
            "-c",
            "protocol.file.allow=always",
        ])
        .args(args)
        .current_dir(dir)
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap()
}

#[track_caller]
fn host_git_ok(dir: &Path, args: &[&str]) -> String {
    let o = host_git(dir, args);
    assert!(
        o.status.success(),
        "host git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A marker path the planted code would create on the host; outside every writable path.
fn marker(env: &Env, name: &str) -> PathBuf {
    env.base.join(format!("pwned-{name}"))
}

/// After the session, the host's own `git status` and `git commit` in `dir`: neither may run
/// what the session planted.
#[track_caller]
fn host_git_runs_nothing(env: &Env, dir: &Path, name: &str) {
    let _ = host_git(dir, &["status"]);
    let _ = host_git(dir, &["commit", "-q", "--allow-empty", "-m", "host commit"]);
    let m = marker(env, name);
    assert!(
        !m.exists(),
        "{name}: the host's git ran code the session planted ({} exists)",
        m.display()
    );
}

/// A git repository with one commit at `dir`, owned by the sandbox's user.
fn repo(env: &Env, dir: &Path) {
    repo_as_root(dir);
    env.own(&env.base);
}

/// [`repo`] left to the test's own user, for setups that go on with host git (which refuses
/// a repository of another owner when it clones from it).
fn repo_as_root(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    host_git_ok(dir, &["init", "-q"]);
    host_git_ok(dir, &["commit", "-q", "--allow-empty", "-m", "first"]);
}

/// Shell lines (run inside) that make an evil git dir at `evil` (relative): a copy of `.git`'s
/// objects and refs, a config whose fsmonitor and a pre-commit hook touch the marker.
fn evil_gitdir(env: &Env, evil: &str, name: &str) -> String {
    let m = marker(env, name);
    let m = m.display();
    format!(
        "mkdir -p {evil}/hooks && cp -r .git/objects .git/refs .git/HEAD {evil}/ && \
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tfsmonitor = touch {m}; false\\n' > {evil}/config && \
         printf '#!/bin/sh\\ntouch {m}\\n' > {evil}/hooks/pre-commit && chmod +x {evil}/hooks/pre-commit"
    )
}

// The control for every marker assertion: the same plant, made on the host, does fire.
both!(planted_git_code_fires_on_the_host_control, |env: Env| {
    repo(&env, &env.project);
    let m = marker(&env, "control");
    host_git_ok(
        &env.project,
        &[
            "config",
            "core.fsmonitor",
            &format!("touch {}; false", m.display()),
        ],
    );
    let _ = host_git(&env.project, &["status"]);
    assert!(
        m.exists(),
        "the control plant did not fire: the tests prove nothing"
    );
});

both!(
    commondir_written_inside_runs_nothing_on_the_host,
    |env: Env| {
        repo(&env, &env.project);
        let plant = evil_gitdir(&env, "evil", "commondir");
        let _ = env.attempt(&format!("{plant} && echo ../evil > .git/commondir"));
        assert!(
            !env.project.join(".git/commondir").exists(),
            "the commondir reached the host"
        );
        host_git_runs_nothing(&env, &env.project, "commondir");
    }
);

both!(module_and_worktree_commondir_run_nothing, |env: Env| {
    let upstream = env.base.join("upstream");
    repo_as_root(&upstream);
    repo_as_root(&env.project);
    host_git_ok(
        &env.project,
        &["submodule", "add", "-q", upstream.to_str().unwrap(), "sub"],
    );
    host_git_ok(&env.project, &["commit", "-qm", "sub"]);
    host_git_ok(&env.project, &["worktree", "add", "-q", "wt"]);
    env.own(&env.base);
    let plant = evil_gitdir(&env, "evil", "modules");
    let _ = env.attempt(&format!(
        "{plant} && echo ../../../evil > .git/modules/sub/commondir && \
         echo ../../../evil > .git/worktrees/wt/commondir"
    ));
    assert!(!env.project.join(".git/modules/sub/commondir").exists());
    // A linked worktree has a commondir of its own: it must still be the one git wrote.
    assert_eq!(
        std::fs::read_to_string(env.project.join(".git/worktrees/wt/commondir")).unwrap(),
        "../..\n"
    );
    host_git_runs_nothing(&env, &env.project.join("sub"), "modules");
    host_git_runs_nothing(&env, &env.project.join("wt"), "modules");
});

both!(
    a_linked_worktrees_gitfile_cannot_be_redirected,
    |env: Env| {
        // The project is a linked worktree of a repository elsewhere: `.git` is a gitfile.
        let main = env.base.join("mainrepo");
        repo(&env, &main);
        std::fs::remove_dir(&env.project).unwrap();
        host_git_ok(
            &main,
            &["worktree", "add", "-q", env.project.to_str().unwrap()],
        );
        env.own(&env.base);
        assert!(env.project.join(".git").is_file());
        let m = marker(&env, "gitfile");
        let _ = env.attempt(&format!(
        "mkdir -p evil/hooks evil/objects evil/refs && echo 'ref: refs/heads/x' > evil/HEAD && \
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = touch {m}; false\\n' > evil/config && \
         echo 'gitdir: ./evil' > .git",
        m = m.display()
    ));
        let gitfile = std::fs::read_to_string(env.project.join(".git")).unwrap();
        assert!(
            gitfile.contains("mainrepo"),
            "the gitfile changed: {gitfile}"
        );
        host_git_runs_nothing(&env, &env.project, "gitfile");
    }
);

both!(
    symlinked_protected_paths_protect_their_targets,
    |env: Env| {
        repo(&env, &env.project);
        // .git/hooks -> ../decoy-hooks, .vscode -> decoy, .idea -> idea-real, made on the host.
        std::fs::rename(
            env.project.join(".git/hooks"),
            env.project.join("decoy-hooks"),
        )
        .unwrap();
        std::os::unix::fs::symlink("../decoy-hooks", env.project.join(".git/hooks")).unwrap();
        env.write("decoy/settings.json", "{}");
        std::os::unix::fs::symlink("decoy", env.project.join(".vscode")).unwrap();
        env.write("idea-real/workspace.xml", "<project/>");
        std::os::unix::fs::symlink("idea-real", env.project.join(".idea")).unwrap();
        env.own(&env.base);
        let m = marker(&env, "symlink");
        let _ = env.attempt(&format!(
        "printf '#!/bin/sh\\ntouch {m}\\n' > decoy-hooks/pre-commit && chmod +x decoy-hooks/pre-commit; \
         echo '{{\"tasks\":[{{\"runOptions\":{{\"runOn\":\"folderOpen\"}}}}]}}' > .vscode/tasks.json; \
         echo evil > .idea/workspace.xml",
        m = m.display()
    ));
        assert!(!env.project.join("decoy-hooks/pre-commit").exists());
        assert!(!env.project.join("decoy/tasks.json").exists());
        assert_eq!(
            std::fs::read_to_string(env.project.join("idea-real/workspace.xml")).unwrap(),
            "<project/>"
        );
        host_git_runs_nothing(&env, &env.project, "symlink");
        // The review says what would run: the hook, and the task that runs on folder open.
        let d = env.cordon().args(["state", "diff"]).output().unwrap();
        let text = all_output(&d);
        assert!(
            text.contains("folderOpen") && text.contains("hook"),
            "{text}"
        );
    }
);

/// Names the host's tools load without the user running project code, absent at the start.
const ABSENT: &[&str] = &[
    ".mcp.json",
    ".envrc",
    ".vscode/tasks.json",
    ".idea/workspace.xml",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".claude/commands/x.md",
    ".claude/agents/x.md",
    ".claude/hooks/x.sh",
    ".gemini/settings.json",
    ".codex/config.toml",
    "opencode.json",
    ".cursor/mcp.json",
    ".bashrc",
    ".zshrc",
    ".profile",
    ".npmrc",
    ".cargo/config.toml",
    ".devcontainer/devcontainer.json",
    ".pre-commit-config.yaml",
];

both!(absent_host_loaded_files_go_to_review, |env: Env| {
    repo(&env, &env.project);
    let script: Vec<String> = ABSENT
        .iter()
        .map(|f| format!("mkdir -p \"$(dirname {f})\" && echo planted > {f}"))
        .collect();
    let o = env.run(&script.join(" && "));
    assert_eq!(
        o.status.code(),
        Some(0),
        "creating them must work inside\n{}",
        show(&o)
    );
    for f in ABSENT {
        assert!(
            !env.project.join(f).exists(),
            "{f} reached the host unreviewed\n{}",
            show(&o)
        );
    }
    // They wait for review, not lost: the session's diff names them.
    let mut c = env.cordon();
    let d = c.args(["state", "diff"]).output().unwrap();
    let text = all_output(&d);
    for f in [".mcp.json", ".envrc", "settings.local.json", ".bashrc"] {
        assert!(text.contains(f), "{f} not in the review\n{text}");
    }
    assert!(
        text.contains("direnv runs it"),
        "not flagged by what runs it\n{text}"
    );
});

both!(a_nested_repo_added_as_a_gitlink_runs_nothing, |env: Env| {
    repo(&env, &env.project);
    let m = marker(&env, "nested");
    let _ = env.attempt(&format!(
        "git init -q sub && git -C sub -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && \
         git -C sub config core.fsmonitor 'touch {m}; false' && \
         git -c user.email=a@b -c user.name=a add sub && \
         git -c user.email=a@b -c user.name=a commit -qm sub",
        m = m.display()
    ));
    host_git_runs_nothing(&env, &env.project, "nested");
    host_git_runs_nothing(&env, &env.project.join("sub"), "nested");
});

both!(
    git_config_in_an_extra_writable_root_is_reviewed,
    |env: Env| {
        repo(&env, &env.project);
        let other = env.base.join("other");
        repo(&env, &other);
        let policy = env.base.join("w.toml");
        std::fs::write(
            &policy,
            format!("[filesystem]\nwritable = [\"{}\"]\n", other.display()),
        )
        .unwrap();
        env.own(&env.base);
        let m = marker(&env, "writable");
        let _ = env.attempt_with(
        &["--policy", policy.to_str().unwrap()],
        &format!(
            "git -C {o} config core.fsmonitor 'touch {m}; false'; \
             printf '#!/bin/sh\\ntouch {m}\\n' > {o}/.git/hooks/pre-commit; chmod +x {o}/.git/hooks/pre-commit",
            o = other.display(),
            m = m.display()
        ),
    );
        host_git_runs_nothing(&env, &other, "writable");
    }
);

both!(git_loop_works_inside, |env: Env| {
    repo(&env, &env.project);
    let bare = env.base.join("remote.git");
    host_git_ok(&env.base, &["init", "-q", "--bare", bare.to_str().unwrap()]);
    let upstream = env.base.join("upstream");
    repo(&env, &upstream);
    let policy = env.base.join("loop.toml");
    std::fs::write(
        &policy,
        format!("[filesystem]\nwritable = [\"{}\"]\n", bare.display()),
    )
    .unwrap();
    env.own(&env.base);
    let o = env.run_with(
        &["--policy", policy.to_str().unwrap()],
        &format!(
            "set -e; export GIT_CONFIG_NOSYSTEM=1; \
             git config user.name 'Loop Tester' && git config user.email loop@e.invalid && \
             git remote add origin {bare} && \
             git -c protocol.file.allow=always submodule add -q {up} sub && git commit -qm 'add sub' && \
             echo one > a.txt && git add a.txt && git commit -qm one && \
             git worktree add -q wt && \
             git checkout -qb feature && echo two > b.txt && git add b.txt && git commit -qm two && \
             git checkout -q master 2>/dev/null || git checkout -q main; \
             echo three > c.txt && git add c.txt && git commit -qm three && \
             git checkout -q feature && git rebase -q master 2>/dev/null || git rebase -q main; \
             git push -q origin feature && git branch --set-upstream-to=origin/feature && \
             git rev-list --count HEAD",
            bare = bare.display(),
            up = upstream.display()
        ),
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // Pushed: the bare repo on the host has the rebased branch.
    let pushed = host_git_ok(&bare, &["rev-list", "--count", "feature"]);
    assert_eq!(pushed.trim(), "5", "{}", show(&o));
    // Applied at exit without asking (no key that executes), and said so.
    assert!(
        all_output(&o).contains("applied"),
        "the terminal was not told\n{}",
        show(&o)
    );
    let name = host_git_ok(&env.project, &["config", "--local", "user.name"]);
    assert_eq!(name.trim(), "Loop Tester");
    let url = host_git_ok(&env.project, &["remote", "get-url", "origin"]);
    assert_eq!(url.trim(), bare.display().to_string());
    let log = host_git_ok(&env.project, &["log", "--oneline", "feature"]);
    assert!(log.contains("two") && log.contains("three"), "{log}");
    // A second session adds a second submodule: `.gitmodules` exists now, and git replaces
    // it by a rename.
    let o = env.run_with(
        &["--policy", policy.to_str().unwrap()],
        &format!(
            "export GIT_CONFIG_NOSYSTEM=1; git -c protocol.file.allow=always submodule add -q {up} sub2 \
             && git commit -qm 'add sub2'",
            up = upstream.display()
        ),
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let gm = std::fs::read_to_string(env.project.join(".gitmodules")).unwrap();
    assert!(gm.contains("sub2") && gm.contains("\"sub\""), "{gm}");
    // The submodules' gitfiles lead into the reviewed git dir: they stay on the host.
    assert!(env.project.join("sub/.git").is_file() && env.project.join("sub2/.git").is_file());
});

both!(an_executing_git_config_change_is_held, |env: Env| {
    repo(&env, &env.project);
    let m = marker(&env, "held");
    let o = env.run(&format!(
        "git config core.fsmonitor 'touch {m}; false' && git config user.name Held",
        m = m.display()
    ));
    assert_eq!(
        o.status.code(),
        Some(0),
        "git config works inside\n{}",
        show(&o)
    );
    host_git_runs_nothing(&env, &env.project, "held");
    let mut c = env.cordon();
    let d = c.args(["state", "diff"]).output().unwrap();
    let text = all_output(&d);
    assert!(
        text.contains("core.fsmonitor"),
        "not flagged by key\n{text}"
    );
});

both!(a_glob_in_deny_is_enforced_or_refused, |env: Env| {
    env.write("keys/a.pem", "SECRET-pem");
    let policy = env.base.join("g.toml");
    std::fs::write(
        &policy,
        format!(
            "[filesystem]\ndeny = [\"{}/keys/*.pem\"]\n",
            env.project.display()
        ),
    )
    .unwrap();
    env.own(&env.base);
    let o = env.run_with(&["--policy", policy.to_str().unwrap()], "cat keys/a.pem");
    let out = all_output(&o);
    assert!(
        !out.contains("SECRET-pem"),
        "the glob masked nothing\n{out}"
    );
    if o.status.code() == Some(125) {
        assert!(out.contains("g.toml") && out.contains("*.pem"), "{out}");
    }
});

both!(an_exec_pattern_that_cannot_match_is_an_error, |env: Env| {
    let policy = env.base.join("e.toml");
    std::fs::write(&policy, "[exec]\ndeny = [\"rm [abc\"]\n").unwrap();
    env.own(&env.base);
    let o = env.run_with(&["--policy", policy.to_str().unwrap()], "true");
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    assert!(all_output(&o).contains("e.toml"), "{}", show(&o));
});

both!(the_home_as_project_needs_an_explicit_project, |env: Env| {
    // The test home's user policy would be inside the project, so not the user's own.
    std::fs::remove_file(env.home.join(".config/cordon/cordon.toml")).unwrap();
    std::fs::write(env.home.join(".bashrc"), "# host rc\n").unwrap();
    env.own(&env.base);
    let mut c = env.cordon();
    c.current_dir(&env.home).args([
        "run",
        "--no-tty",
        "--",
        "sh",
        "-c",
        "echo evil >> ~/.bashrc",
    ]);
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert!(all_output(&o).contains("--project"), "{}", show(&o));
    let mut c = env.cordon();
    c.current_dir(&env.home).args([
        "run",
        "--no-tty",
        "--project",
        env.home.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo evil >> ~/.bashrc; echo x > ~/plain.txt",
    ]);
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        std::fs::read_to_string(env.home.join(".bashrc")).unwrap(),
        "# host rc\n",
        "the home's rc file changed unreviewed"
    );
    assert!(
        env.home.join("plain.txt").exists(),
        "the home project is writable"
    );
});

// Issue #44, class by class. Each attack is judged on the host after the session (its own
// `git status`/`git commit`, the repository's objects and config); each has a control that
// makes the same plant on the host and shows the same check catching it.

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
