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

#[path = "host_files/git_classes.rs"]
mod git_classes;
