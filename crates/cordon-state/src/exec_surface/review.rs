//! How a change on the host-executed surface is flagged for review: what it makes the host
//! run or load, hidden work (index flags, `info/exclude`), and what the object store lost or
//! gained.

use super::*;

/// What a reviewer must see about a change on the host-executed surface (empty elsewhere).
pub(crate) fn flags(s: &Subject<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let Some(after) = s.after else { return out };
    if after.kind == NodeKind::Dir {
        return out;
    }
    let name = s
        .host_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let before = s.before_text.unwrap_or("");
    if name == ".git" && after.kind != NodeKind::Dir {
        out.push("gitfile changed: it chooses the git dir every host git command uses".into());
        return out;
    }
    if name == ".gitmodules" {
        match s.after_text {
            Some(t) if !gitconfig_update_keys(t) => {}
            _ => out.push("`.gitmodules` sets a submodule update command".into()),
        }
        return out;
    }
    let Some(gitdir) = gitdir_of(s.host_path) else {
        if let Some(by) = named_by_tool_config(s.host_path) {
            out.push(format!("named by {by}: a host tool runs or reads it"));
        }
        if let Some(key) = named_by_git_config(s.host_path) {
            out.push(format!(
                "named by the repository's git config `{key}`: the host's git runs or reads it"
            ));
        }
        out.extend(loaded_by_host_tools(
            s.host_path,
            s.after_text,
            s.before.is_none(),
        ));
        return out;
    };
    let rel = s.host_path.strip_prefix(&gitdir).unwrap_or(Path::new(""));
    if after.kind == NodeKind::Symlink {
        out.push("symlink in a git dir (git follows it)".into());
        return out;
    }
    match name.as_str() {
        "config" | "config.worktree" => match s.after_text {
            Some(t) => out.extend(gitconfig::flags(before, t)),
            None => out.push("git config that cannot be read as text: held".into()),
        },
        "commondir" | "gitdir" => out.push(format!(
            "git indirection `{name}`: points git at another directory"
        )),
        "attributes" => out.push("git attributes: choose filter, diff and merge drivers".into()),
        "index" if !under_objects(rel) => out.extend(index_flags(s)),
        "exclude" if rel.parent().is_some_and(|p| p.ends_with("info")) => {
            let old: std::collections::HashSet<&str> = before.lines().map(str::trim).collect();
            let added: Vec<&str> = s
                .after_text
                .unwrap_or("\0")
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#') && !old.contains(l))
                .collect();
            if !added.is_empty() {
                out.push(format!(
                    "`info/exclude` hides more files from the host's `git status`: {}",
                    short_list(&added.join(", "))
                ));
            }
        }
        "alternates" | "http-alternates" => {
            out.push("object alternates: git reads objects from another place".into())
        }
        "git-rebase-todo" => {
            let exec = s.after_text.is_none_or(|t| {
                t.lines()
                    .any(|l| matches!(l.split_whitespace().next(), Some("exec" | "x")))
            });
            if exec {
                out.push(
                    "rebase plan with `exec` lines (the next `rebase --continue` runs them)".into(),
                );
            }
        }
        _ if under_objects_info(rel) => {
            out.push("`objects/info`: where git finds objects (alternates, packs, graphs)".into())
        }
        _ if under_objects(rel) && s.before.is_some() => out.push(
            "an object that was already in the store rewritten (objects are never changed)".into(),
        ),
        _ if under_objects(rel) && name.starts_with("multi-pack-index") => out.push(
            "a multi-pack index: it maps object names to packs, ahead of their own indexes".into(),
        ),
        _ if under_objects(rel)
            && rel.parent().is_some_and(|p| p.ends_with("pack"))
            && (name.ends_with(".pack") || name.ends_with(".idx"))
            && !pack_verified(s) =>
        {
            out.push(
                "a new pack git cannot verify (its objects could stand in for the host's): held"
                    .into(),
            )
        }
        _ if rel.components().any(|c| c.as_os_str() == "hooks") => {}
        _ if inert_in_gitdir(rel) => {}
        _ => out.push("a file in a git dir that git may read: held for review".into()),
    }
    out
}

pub(super) fn short_list(s: &str) -> String {
    if s.chars().count() > 80 {
        format!("{}...", s.chars().take(77).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// Whether the pack a new `.pack` or `.idx` belongs to verifies (both in the session's layer,
/// see [`asker::pack_verified`]); remembered per content, since review describes a change
/// more than once.
pub(super) fn pack_verified(s: &Subject<'_>) -> bool {
    use std::sync::{Mutex, OnceLock};
    static SEEN: OnceLock<Mutex<std::collections::HashMap<PathBuf, bool>>> = OnceLock::new();
    let Some(file) = s.after_file else {
        return false;
    };
    let idx = file.with_extension("idx");
    let key = match (
        fs::metadata(&idx),
        fs::metadata(file.with_extension("pack")),
    ) {
        (Ok(_), Ok(_)) => idx.clone(),
        _ => return false,
    };
    let mut seen = SEEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    *seen
        .entry(key)
        .or_insert_with(|| asker::pack_verified(&idx))
}

/// Whether `rel` (inside a git dir) is in an object store.
pub(super) fn under_objects(rel: &Path) -> bool {
    rel.components().any(|c| c.as_os_str() == "objects")
}

/// Whether `rel` is in an object store's `info` (alternates, `packs`, commit graphs): what git
/// reads to find objects, not objects.
pub(super) fn under_objects_info(rel: &Path) -> bool {
    let parts: Vec<&std::ffi::OsStr> = rel.components().map(|c| c.as_os_str()).collect();
    parts
        .windows(2)
        .any(|w| w[0] == "objects" && w[1] == "info")
}

/// An index the session changed, read by git: entries it marks so that the host's `git status`
/// and `git diff` do not look at their files (`skip-worktree`, `assume-unchanged`) hide work
/// from the user; a backdoored `Makefile` would show clean.
pub(super) fn index_flags(s: &Subject<'_>) -> Vec<String> {
    let Some(after) = s.after_file.and_then(asker::index_entries) else {
        return vec!["a git index git itself cannot read here: held".into()];
    };
    let before = s
        .before_file
        .and_then(asker::index_entries)
        .unwrap_or_default();
    let was_hidden: std::collections::HashSet<(&str, bool, bool)> = before
        .iter()
        .map(|e| (e.path.as_str(), e.skip_worktree, e.assume_unchanged))
        .collect();
    let hidden: Vec<&str> = after
        .iter()
        .filter(|e| e.skip_worktree || e.assume_unchanged)
        .filter(|e| !was_hidden.contains(&(e.path.as_str(), e.skip_worktree, e.assume_unchanged)))
        .map(|e| e.path.as_str())
        .collect();
    if hidden.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "the index marks files skip-worktree or assume-unchanged (the host's `git status` and `git diff` will not show changes to them): {}",
        short_list(&hidden.join(", "))
    )]
}

/// Why a file outside git dirs is one a host tool loads on its own, with what in it runs.
/// `created`: it did not exist before the session.
pub(super) fn loaded_by_host_tools(path: &Path, text: Option<&str>, created: bool) -> Vec<String> {
    let has = |p: &str| path.components().any(|c| c.as_os_str() == p);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let t = text.unwrap_or("");
    let mut out = Vec::new();
    if has(".vscode") || has(".cursor") || has(".windsurf") {
        if name == "tasks.json" && t.contains("folderOpen") {
            out.push("editor task that runs when the folder opens (`runOn: folderOpen`)".into());
        } else if name == "settings.json"
            && [
                "path\"",
                "Path\"",
                "executable",
                "command",
                "terminal.integrated",
                "interpreter",
            ]
            .iter()
            .any(|k| t.contains(k))
        {
            out.push("editor setting that names a program the editor runs".into());
        } else if name == "extensions.json" || name == "launch.json" || name == "tasks.json" {
            out.push("editor workspace file (tasks, launch configs, extensions)".into());
        }
    }
    let why = match name {
        ".envrc" => "direnv runs it when a shell enters the directory",
        // A changed one is judged line by line (flags.rs: what a new line runs); a new one is
        // held whatever it holds.
        ".bashrc" | ".zshrc" | ".profile" | ".bash_profile" | ".zshenv" | ".zprofile"
            if created =>
        {
            "shell startup file (runs in every new shell that reads it)"
        }
        ".npmrc" | ".yarnrc" | ".yarnrc.yml" => {
            "package-manager config (may set script-shell, node-options)"
        }
        ".pre-commit-config.yaml" => "pre-commit hooks (run by `git commit` once installed)",
        "config.toml" | "config" if has(".cargo") => {
            "cargo config (may set rustc-wrapper, runner, aliases)"
        }
        "config.toml" if has(".codex") && t.contains("mcp_servers") => {
            "codex MCP servers (commands it starts)"
        }
        _ if has(".devcontainer") => {
            "dev container config (its commands run when the container is built)"
        }
        _ if has(".idea") => "IDE project file (run configurations, external tools)",
        _ => return out,
    };
    out.push(why.into());
    out
}

pub(super) fn gitconfig_update_keys(text: &str) -> bool {
    match gitconfig::parse(text) {
        Some(k) => k.keys().any(|n| n.ends_with(".update")),
        None => true,
    }
}

/// What review does at exit with a write the session makes at `p`, a path on the
/// host-executed surface (staged copy-on-write): said ahead of time, by the rules
/// [`applies_unasked`] and [`flags`] apply to the change itself, for `cordon explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitFate {
    /// Data git only stores (objects added, refs, logs, `HEAD`): applied at exit
    /// without asking. An object removed or rewritten waits for review.
    AppliedUnasked,
    /// Configuration and what can hide work (a git config, `.gitmodules`, the index,
    /// `info/exclude`): applied without asking when the change runs and hides nothing;
    /// otherwise FLAGGED, and it waits.
    AppliedWhenInert,
    /// Something the host runs (a hook): waits for review, FLAGGED.
    Flagged,
    /// Waits for review.
    Reviewed,
}

/// See [`ExitFate`].
pub fn exit_fate(p: &Path) -> ExitFate {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name == ".gitmodules" {
        return ExitFate::AppliedWhenInert;
    }
    let Some(gitdir) = gitdir_of(p).filter(|g| g != p) else {
        return ExitFate::Reviewed;
    };
    let rel = p.strip_prefix(&gitdir).unwrap_or(Path::new(""));
    if rel.components().any(|c| c.as_os_str() == "hooks") {
        return ExitFate::Flagged;
    }
    let top = rel.parent() == Some(Path::new(""));
    let in_info = rel.parent().is_some_and(|d| d == Path::new("info"));
    // The index can hide work (skip-worktree), `info/exclude` can hide files: flagged then.
    if (top && matches!(name, "config" | "config.worktree" | "index"))
        || (in_info && name == "exclude")
    {
        return ExitFate::AppliedWhenInert;
    }
    if under_objects_info(rel) {
        return ExitFate::Reviewed;
    }
    if under_objects(rel) || inert_in_gitdir(rel) {
        return ExitFate::AppliedUnasked;
    }
    ExitFate::Reviewed
}

#[cfg(test)]
mod fate_tests {
    use super::*;

    #[test]
    fn exit_fates_follow_what_review_does() {
        let g = Path::new("/p/.git");
        for (rel, fate) in [
            ("HEAD", ExitFate::AppliedUnasked),
            ("refs/heads/main", ExitFate::AppliedUnasked),
            ("logs/HEAD", ExitFate::AppliedUnasked),
            ("index", ExitFate::AppliedWhenInert),
            ("info/exclude", ExitFate::AppliedWhenInert),
            ("objects/ab/cdef", ExitFate::AppliedUnasked),
            ("objects/info/alternates", ExitFate::Reviewed),
            ("config", ExitFate::AppliedWhenInert),
            ("hooks/pre-commit", ExitFate::Flagged),
            ("hooks", ExitFate::Flagged),
            ("info/attributes", ExitFate::Reviewed),
        ] {
            assert_eq!(exit_fate(&g.join(rel)), fate, "{rel}");
        }
        assert_eq!(
            exit_fate(Path::new("/p/.gitmodules")),
            ExitFate::AppliedWhenInert
        );
        assert_eq!(
            exit_fate(Path::new("/p/.vscode/tasks.json")),
            ExitFate::Reviewed
        );
        assert_eq!(exit_fate(Path::new("/p/.envrc")), ExitFate::Reviewed);
    }
}
