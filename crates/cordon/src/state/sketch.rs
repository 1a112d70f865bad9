//! What a session's state layer will stage, worked out before (and without) making it: the
//! protected paths with the host-executed surface, the files written in place, and the
//! [`Sketch`] of the whole copy-on-write layout `cordon explain` and `cordon check` answer from.

use std::path::{Path, PathBuf};

use cordon_policy::{Plan, ProjectFiles};
use cordon_sandbox::Staged;

/// The paths to protect: the policy's list, plus — when the policy stages the host-executed
/// files instead of making them read-only — the host-executed surface of every writable path
/// (git dirs through their indirections, agents' and editors' settings, rc files; see
/// `cordon_state::discover`) and the project's other read-only files (its cordon.toml never).
pub(super) fn protected(plan: &Plan) -> (Vec<PathBuf>, Option<cordon_state::Surface>) {
    let mut v: Vec<PathBuf> = plan.state.protect.iter().map(|r| r.path.clone()).collect();
    if plan.state.project_files != ProjectFiles::Staged {
        return (v, None);
    }
    let policy = plan.project.join("cordon.toml");
    let roots: Vec<PathBuf> = plan
        .filesystem
        .writable
        .iter()
        .map(|r| r.path.clone())
        .collect();
    let mut exclude: Vec<PathBuf> = plan
        .filesystem
        .deny
        .iter()
        .map(|r| r.path.clone())
        .collect();
    exclude.push(policy.clone());
    let mut surface = cordon_state::discover(&roots, crate::home::home_dir().as_deref(), &exclude);
    // The policy's own protected paths win where they overlap (one mount, one review each).
    let own: Vec<PathBuf> = v
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let clash = |p: &Path| own.iter().any(|o| p.starts_with(o) || o.starts_with(p));
    surface.stage.retain(|p| !clash(p));
    surface.watch.retain(|p| !clash(p));
    v.extend(surface.stage.iter().cloned());
    for r in &plan.filesystem.read_only {
        let covered = surface.stage.iter().any(|s| r.path.starts_with(s))
            || std::fs::canonicalize(&r.path).is_ok_and(|c| surface.stage.contains(&c));
        // An absent one is on the surface's watch list (or inside a git dir that is).
        let exists = std::fs::symlink_metadata(&r.path).is_ok();
        let in_place = r
            .path
            .file_name()
            .is_some_and(|n| cordon_state::WRITTEN_IN_PLACE.iter().any(|w| n == *w));
        if exists
            && !in_place
            && r.path.starts_with(&plan.project)
            && r.path != policy
            && !covered
            && !v.contains(&r.path)
        {
            v.push(r.path.clone());
        }
    }
    (v, Some(surface))
}

/// Host-executed files git replaces by a rename stay writable in place (see
/// cordon_state::WRITTEN_IN_PLACE), where the read-only rules would bind them.
pub(super) fn in_place(plan: &Plan) -> Vec<Staged> {
    if plan.state.project_files != ProjectFiles::Staged {
        return Vec::new();
    }
    let named = |p: &Path| {
        p.file_name()
            .is_some_and(|n| cordon_state::WRITTEN_IN_PLACE.iter().any(|w| n == *w))
    };
    plan.filesystem
        .read_only
        .iter()
        .filter(|r| named(&r.path) && std::fs::symlink_metadata(&r.path).is_ok_and(|m| m.is_file()))
        .map(|r| Staged::InPlace {
            path: r.path.clone(),
        })
        .collect()
}

/// The session's copy-on-write layout as [`begin`] would make it, made of nothing (no layer
/// is created): what `cordon explain` and `cordon check` answer from, so that they say
/// what a session does.
pub struct Sketch {
    /// What a session would mount copy-on-write (its layers' own paths left empty).
    pub staged: Vec<Staged>,
    /// Host-executed names that do not exist yet: what a session makes there goes to review.
    pub watch: Vec<PathBuf>,
}

pub fn sketch(plan: &Plan) -> Sketch {
    let (paths, surface) = protected(plan);
    let none = PathBuf::new;
    let mut staged = Vec::new();
    if let Ok(Some(h)) = crate::home::plan_home(plan, &paths) {
        staged.push(Staged::Home {
            path: h.spec.path.clone(),
            upper: none(),
            work: none(),
            view: None,
        });
        staged.extend(h.caches.iter().map(|c| Staged::Cache {
            path: c.clone(),
            lower: Vec::new(),
            upper: none(),
            work: none(),
        }));
    }
    for p in &paths {
        let path = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => staged.push(Staged::Dir {
                path,
                upper: none(),
                work: none(),
            }),
            Ok(_) => staged.push(Staged::File { path, copy: none() }),
            Err(_) => {}
        }
    }
    staged.extend(in_place(plan));
    Sketch {
        staged,
        watch: surface.map(|s| s.watch).unwrap_or_default(),
    }
}
