//! The sandbox's decisions as pure functions, for the supervisor that enforces them and for
//! `cordon explain`, which asks the same questions without a session: which exec rule
//! decides a command line, and what the filesystem view does with a path.

use std::path::{Path, PathBuf};

/// The effective policy (secrets redacted) as JSON, read by `cordon explain` inside.
pub const POLICY_JSON: &str = "/run/cordon/policy.json";
/// The same, as `cordon check` prints it, for people and agents to read.
pub const POLICY_TOML: &str = "/run/cordon/policy.toml";
/// Where cordon's own executable is bound inside when the view hides where it lives (and
/// this directory goes on `PATH`), so `cordon explain` runs inside wherever cordon is.
pub const PROGRAM: &str = "/run/cordon/bin/cordon";

use cordon_policy::{ExecPlan, ExecRule};

use crate::layout::{Layout, MountOp, normalize};

/// The exec rule deciding a command: the first rule (in plan order) matching the program
/// by the name it was called by or by the file it really is (`resolved`, symlinks followed),
/// with the same arguments. `None`: no rule, so it runs.
pub fn decide_exec<'a>(
    plan: &'a ExecPlan,
    program: &str,
    resolved: &str,
    args: &[String],
) -> Option<&'a ExecRule> {
    plan.decide_exec(program, resolved, args)
}

/// What the sandbox can do with a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathAccess {
    /// Masked: nothing of it is visible; `rule` is the deny rule's origin.
    Hidden { at: PathBuf, rule: String },
    /// Visible read-only (`at` is the mount that makes it so).
    ReadOnly { at: PathBuf },
    /// Writable, straight to the host.
    Writable { at: PathBuf },
    /// Writable, but writes land in the session's own layer (a fresh tmpfs, or a
    /// copy-on-write overlay), never on the host.
    Private { at: PathBuf },
    /// Not in the view at all (outside every bind).
    Absent,
}

/// What the layout does with `path` (absolute; `..` is resolved lexically and through the
/// host's symlinks where it exists, as the layout itself resolved its rules): the last mount
/// made at or above it decides, as in the kernel's mount table.
pub fn path_access(layout: &Layout, path: &Path) -> PathAccess {
    let mut forms = vec![normalize(path)];
    if let Ok(c) = std::fs::canonicalize(path)
        && c != forms[0]
    {
        forms.push(c);
    }
    // A mask of either spelling hides it (the layout masks both).
    let mut best = PathAccess::Absent;
    for p in &forms {
        let access = access_of(layout, p);
        if matches!(access, PathAccess::Hidden { .. }) {
            return access;
        }
        if matches!(best, PathAccess::Absent) || p != &forms[0] {
            best = access;
        }
    }
    best
}

fn access_of(layout: &Layout, p: &Path) -> PathAccess {
    let Some(op) = layout.mounts.iter().rev().find(|m| p.starts_with(m.path())) else {
        return PathAccess::Absent;
    };
    let at = op.path().to_path_buf();
    match op {
        MountOp::MaskDir { rule, shown, .. } => {
            // A masked copy shown inside the mask is readable.
            let rel = p.strip_prefix(&at).unwrap_or(p);
            if shown.iter().any(|(r, _)| r == rel) {
                PathAccess::ReadOnly { at }
            } else {
                PathAccess::Hidden {
                    at,
                    rule: rule.clone(),
                }
            }
        }
        MountOp::MaskFile { rule, .. } => PathAccess::Hidden {
            at,
            rule: rule.clone(),
        },
        MountOp::Bind { writable: true, .. } => PathAccess::Writable { at },
        MountOp::Bind { .. }
        | MountOp::ReadOnly { .. }
        | MountOp::Content { .. }
        | MountOp::File { .. } => PathAccess::ReadOnly { at },
        // A pin keeps what the bind under it gave.
        MountOp::Pin { .. } => {
            let rest = Layout {
                mounts: layout
                    .mounts
                    .iter()
                    .filter(|m| !std::ptr::eq(*m, op))
                    .cloned()
                    .collect(),
                ..Layout::default()
            };
            access_of(&rest, p)
        }
        MountOp::Tmpfs { .. } | MountOp::Overlay { .. } | MountOp::StagedFile { .. } => {
            PathAccess::Private { at }
        }
        MountOp::Dev { .. }
        | MountOp::Proc { .. }
        | MountOp::Socket { .. }
        | MountOp::Program { .. } => PathAccess::ReadOnly { at },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_policy::{ExecAction, FilesystemPlan, PathRule};

    fn rule(p: &str, a: ExecAction) -> ExecRule {
        ExecRule {
            pattern: p.into(),
            action: a,
            origin: format!("test:{p}").into(),
            expires: None,
        }
    }

    #[test]
    fn the_earlier_rule_wins_between_name_and_file() {
        let plan = ExecPlan {
            rules: vec![
                rule("git push *", ExecAction::Ask),
                rule("ls *", ExecAction::Deny),
            ],
            ..ExecPlan::default()
        };
        let args = vec!["push".to_string(), "origin".to_string()];
        // Called as `ls` but really git: the git rule comes first.
        let r = decide_exec(&plan, "ls", "git", &args).unwrap();
        assert_eq!(r.pattern, "git push *");
        let r = decide_exec(&plan, "ls", "ls", &[]).unwrap();
        assert_eq!(r.action, ExecAction::Deny);
        assert!(decide_exec(&plan, "cat", "cat", &args).is_none());
    }

    #[test]
    fn masks_binds_and_tmpfs_decide_by_the_last_mount_above() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (proj, secret) = (root.join("proj"), root.join("secret"));
        std::fs::create_dir_all(proj.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(&secret).unwrap();
        let fs = FilesystemPlan {
            readable: vec![PathRule::new("/", "built-in")],
            writable: vec![PathRule::new(&proj, "project")],
            deny: vec![PathRule::new(&secret, "my.toml:3")],
            read_only: vec![PathRule::new(proj.join(".git/hooks"), "built-in")],
            ..FilesystemPlan::default()
        };
        let layout = crate::layout::prepare(&fs);
        assert_eq!(
            path_access(&layout, &secret.join("key")),
            PathAccess::Hidden {
                at: secret.clone(),
                rule: "my.toml:3".into()
            }
        );
        assert!(matches!(
            path_access(&layout, &proj.join("src/main.rs")),
            PathAccess::Writable { at } if at == proj
        ));
        assert!(matches!(
            path_access(&layout, &proj.join(".git/hooks/pre-commit")),
            PathAccess::ReadOnly { .. }
        ));
        assert!(matches!(
            path_access(&layout, &proj.join("../secret/../proj/x")),
            PathAccess::Writable { .. }
        ));
        assert!(matches!(
            path_access(&layout, Path::new("/tmp/x")),
            PathAccess::Private { .. }
        ));
        assert!(matches!(
            path_access(&layout, Path::new("/usr/bin/env")),
            PathAccess::ReadOnly { at } if at == Path::new("/")
        ));
    }

    #[test]
    fn a_placed_file_is_readable_inside_its_mask_and_nowhere_else() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let masked = dir.path().canonicalize().unwrap().join("run");
        std::fs::create_dir_all(&masked).unwrap();
        let fs = FilesystemPlan {
            readable: vec![PathRule::new("/", "built-in")],
            deny: vec![PathRule::new(&masked, "built-in")],
            ..FilesystemPlan::default()
        };
        let mut layout = crate::layout::prepare(&fs);
        let at = masked.join("cordon/policy.json");
        layout.place_file(&at, "{}").unwrap();
        assert!(matches!(
            path_access(&layout, &at),
            PathAccess::ReadOnly { .. }
        ));
        assert!(matches!(
            path_access(&layout, &masked.join("cordon/other")),
            PathAccess::Hidden { .. }
        ));
        assert!(layout.landlock.read.contains(&at));
        assert!(
            layout.mounts.iter().any(
                |m| matches!(m, MountOp::MaskDir { path, sealed: true, .. } if *path == masked)
            )
        );
        assert!(layout.place_file(Path::new("/usr/x"), "").is_err());
    }
}
