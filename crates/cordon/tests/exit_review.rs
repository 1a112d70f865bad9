//! The exit review's text on a terminal, as a user reads it: an ordinary commit is one line
//! (what was applied unasked), a planted hook is asked about FLAGGED first with its diff,
//! git's bookkeeping diffs folded away, and every count agrees with what really waits.

mod common;

use common::{Env, git, show};

/// A repository with one commit in the project.
fn repo(env: &Env) {
    git(&env.project, &["init", "-q", "-b", "main"]);
    std::fs::write(env.project.join("a.txt"), "one\n").unwrap();
    git(&env.project, &["add", "a.txt"]);
    git(&env.project, &["commit", "-qm", "one"]);
    // A namespaced branch: deleting it removes its directory under refs/ and logs/ too.
    git(&env.project, &["branch", "feature/old"]);
    env.own(&env.project);
}

const COMMIT: &str = "echo two >> a.txt && git -c user.name=t -c user.email=t@example.invalid \
                      commit -qam two";

/// The lines cordon itself printed (its own, not the command's).
fn cordon_lines(out: &str) -> Vec<&str> {
    out.lines()
        .map(|l| l.trim_start_matches('\0'))
        .filter(|l| l.starts_with("cordon: ") || l.starts_with("session "))
        .collect()
}

both!(
    an_ordinary_commit_is_one_line_and_nothing_waits,
    |env: Env| {
        if !common::need(&["git", "script"], "a commit under a terminal") {
            return;
        }
        repo(&env);
        let line = format!(
            "{} run -- sh -c \"{COMMIT} && git branch -qD feature/old\"",
            env.cordon_line()
        );
        let out = common::under_pty(&env, &line, "");
        let ours = cordon_lines(&out);
        let applied: Vec<&&str> = ours
            .iter()
            .filter(|l| l.contains("without asking"))
            .collect();
        assert_eq!(applied.len(), 1, "one line says what was applied:\n{out}");
        for gone in ["[k]eep", "FLAGGED", "pending", "logs/HEAD", "refs/heads"] {
            assert!(
                !out.contains(gone),
                "`{gone}` after an ordinary commit:\n{out}"
            );
        }
        assert_eq!(
            git(&env.project, &["log", "-1", "--format=%s"]),
            "two",
            "{out}"
        );
        assert_eq!(
            git(&env.project, &["branch", "--list", "feature/*"]),
            "",
            "{out}"
        );
    }
);

both!(
    a_planted_hook_is_asked_about_first_and_counts_agree,
    |env: Env| {
        if !common::need(&["git", "script"], "a commit under a terminal") {
            return;
        }
        repo(&env);
        let script = format!(
            "{COMMIT} && printf '#!/bin/sh\\\\necho planted\\\\n' > .git/hooks/post-checkout && \
         chmod +x .git/hooks/post-checkout && mkdir -p .vscode && echo '{{}}' > .vscode/tasks.json"
        );
        let line = format!("{} run -- sh -c \"{script}\"", env.cordon_line());
        let out = common::under_pty_answering(&env, &line, "[k]eep", "p\n");
        let ours = cordon_lines(&out);
        // The commit itself is on the host already, and said so once.
        assert_eq!(
            git(&env.project, &["log", "-1", "--format=%s"]),
            "two",
            "{out}"
        );
        assert!(
            !env.project.join(".git/hooks/post-checkout").exists(),
            "the hook reached the host unasked:\n{out}"
        );
        let header = ours
            .iter()
            .find(|l| l.starts_with("session "))
            .unwrap_or_else(|| panic!("no summary:\n{out}"));
        // What the summary lists: one line per change, `+`/`-`/`~`/`!` after two spaces.
        let listed: Vec<&str> = out
            .lines()
            .filter(|l| {
                l.starts_with("  ")
                    && l.trim_start().starts_with(['+', '-', '~', '!'])
                    && l.chars().nth(3) == Some(' ')
            })
            .collect();
        let n = listed.len();
        assert!(n >= 2, "the hook and the tasks file wait:\n{out}");
        assert!(
            header.contains(&format!(" {n} changes ")),
            "the header counts what is listed ({n}):\n{out}"
        );
        assert!(
            listed[0].contains("FLAGGED") && listed[0].contains("post-checkout"),
            "the hook is not first:\n{out}"
        );
        let diff_at = out.find("+echo planted").expect("the hook's diff is shown");
        assert!(
            !out.contains("logs/HEAD") && !out.contains("refs/heads/main"),
            "git's bookkeeping is not asked about:\n{out}"
        );
        let pending = ours
            .iter()
            .find(|l| l.contains("is pending") || l.contains("are pending"))
            .unwrap_or_else(|| panic!("no pending line:\n{out}"));
        assert!(
            pending.contains(&format!("{n} changes to protected state")),
            "{out}"
        );
        assert!(
            ours.iter()
                .any(|l| l.contains(&format!("{n} state changes pending"))),
            "the exit line counts the same:\n{out}"
        );
        assert!(diff_at < out.find(pending).unwrap(), "{out}");
        // And `cordon state diff` and `list` count exactly what was asked about.
        let o = env.cordon().args(["state", "diff"]).output().unwrap();
        let diff = String::from_utf8_lossy(&o.stdout);
        assert!(diff.contains(&format!(" {n} changes ")), "{}", show(&o));
        assert!(
            !diff.contains("folded"),
            "state diff shows everything: {diff}"
        );
        let o = env.cordon().args(["state", "list"]).output().unwrap();
        let list = String::from_utf8_lossy(&o.stdout);
        assert!(
            list.contains(&format!("pending  {n} changed")),
            "{}",
            show(&o)
        );
    }
);
