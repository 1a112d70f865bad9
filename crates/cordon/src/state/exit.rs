//! The session's end for its copy-on-write layers: what changed is settled, applied where
//! review would not ask, and the rest reviewed (asked at a terminal, else left pending).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::Result;
use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::{OnExit, Plan};
use cordon_state::{Session, Status};

use super::{Prepared, store};

/// After the command: review protected state (see [`review`]), then say what else the
/// session wrote in the home; drop the session's layers once nothing in them is wanted.
pub fn finish(plan: &Plan, p: &Prepared, emit: &dyn Fn(NewEvent)) {
    let Some(s) = &p.session else { return };
    let settled = p
        .surface
        .as_ref()
        .and_then(|surface| settle(s, surface, emit));
    let s = settled.as_ref().unwrap_or(s);
    crate::logins::drop_copies(plan, s, emit);
    if let Some(home) = &s.home {
        crate::home::tidy_view(&p.staged, home);
        crate::home::adopt_caches(&p.unmounted, &plan.project, home, emit);
    }
    let reviewed = if s.entries.is_empty() {
        Reviewed::Unchanged
    } else {
        review(plan, s, emit)
    };
    let writes = match s.home_writes() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("cordon: cannot read what the session wrote in the home: {e}; it stays");
            if reviewed == Reviewed::Unchanged {
                let _ = s.discard();
            }
            return;
        }
    };
    let line = s
        .home
        .as_ref()
        .and_then(|h| cordon_state::home_writes_line(&s.id, &writes, &h.host));
    let Some(line) = line else {
        match (reviewed, s.status()) {
            // Nothing changed anywhere: nothing to keep, not even the session.
            (Reviewed::Unchanged, _) => {
                if s.forget().is_err() {
                    let _ = s.discard();
                }
            }
            (_, Ok(Status::Pending)) => {}
            _ => {
                let _ = s.discard_home();
            }
        }
        return;
    };
    if reviewed == Reviewed::Unchanged {
        let _ = s.discard();
    }
    eprintln!("cordon: {line}");
    emit(
        NewEvent::new(
            Layer::State,
            Action::Log,
            "writes in the home outside protected state were not kept",
        )
        .detail("files", writes.len())
        .detail(
            "flagged",
            writes
                .iter()
                .filter(|w| !w.flags.is_empty())
                .map(|w| w.host_path.display().to_string())
                .collect::<Vec<_>>(),
        ),
    );
}

/// What the session made on the host-executed surface outside its mounts (a new `.mcp.json`,
/// a swapped symlink, a new git dir's hooks) is moved into it, so review sees it and the host
/// does not; the session is reopened when its entries grew.
fn settle(
    s: &Session,
    surface: &cordon_state::Surface,
    emit: &dyn Fn(NewEvent),
) -> Option<Session> {
    match cordon_state::settle(s, surface) {
        Ok(moved) if moved.is_empty() => None,
        Ok(moved) => {
            let names: Vec<String> = moved.iter().map(|p| p.display().to_string()).collect();
            eprintln!(
                "cordon: {} the host would load or run, made outside review, moved to review: {}",
                crate::output::count(moved.len(), "file", "files"),
                names.join(", ")
            );
            emit(
                NewEvent::new(
                    Layer::State,
                    Action::Ask,
                    "host-executed files made in the session moved to review",
                )
                .detail("paths", names),
            );
            store().and_then(|st| Ok(st.open(&s.id)?)).ok()
        }
        Err(e) => {
            eprintln!(
                "cordon: warning: checking host-executed files after the session failed: {e}"
            );
            emit(NewEvent::new(
                Layer::State,
                Action::Error,
                format!("settling host-executed files failed: {e}"),
            ));
            None
        }
    }
}

/// Accept `paths` of a session (all protected changes when empty): those under a protected
/// path through the review's accept, those elsewhere in the home from its layer.
pub(super) fn accept(s: &Session, paths: &[PathBuf]) -> Result<cordon_state::AcceptReport> {
    let changed = if paths.iter().any(|p| p.is_relative()) {
        changed_paths(s)
    } else {
        Vec::new()
    };
    let abs: Vec<PathBuf> = paths.iter().map(|p| locate(s, &changed, p)).collect();
    let (protected, home): (Vec<PathBuf>, Vec<PathBuf>) = abs.into_iter().partition(|p| {
        let at = cordon_state::resolve_path(p).unwrap_or_else(|| p.clone());
        s.home.is_none()
            || s.entries
                .iter()
                .any(|e| at.starts_with(&e.host) || e.host.starts_with(&at))
    });
    let mut report = cordon_state::AcceptReport::default();
    if !protected.is_empty() || home.is_empty() {
        report = s.accept(&protected)?;
    }
    if !home.is_empty() {
        let canon: Vec<PathBuf> = home
            .iter()
            .map(|p| cordon_state::resolve_path(p).unwrap_or_else(|| p.clone()))
            .collect();
        let r = s.keep_home(&canon)?;
        report.applied.extend(r.applied);
        report.conflicts.extend(r.conflicts);
    }
    Ok(report)
}

/// Protected agent state that does not exist yet, in a session without the copy-on-write home:
/// the home is read-only there, so the agent cannot create its state and fails in its own
/// words. Say which paths and how to fix it, before it starts.
pub(super) fn missing_state_hint(skipped: &[PathBuf], home: Option<&Path>) -> Option<String> {
    if skipped.is_empty() {
        return None;
    }
    let tilde = |p: &PathBuf| match home.and_then(|h| p.strip_prefix(h).ok()) {
        Some(rest) => format!("~/{}", rest.display()),
        None => p.display().to_string(),
    };
    let names: Vec<String> = skipped.iter().map(tilde).collect();
    Some(format!(
        "{} {} not exist and the home is read-only in this sandbox, so the agent cannot create \
         {}: create {} on the host first (`mkdir -p {}` for a directory), or run the agent once \
         outside cordon",
        names.join(", "),
        if names.len() == 1 { "does" } else { "do" },
        if names.len() == 1 { "it" } else { "them" },
        if names.len() == 1 {
            "it"
        } else {
            "what it needs"
        },
        names[0],
    ))
}

/// Protected state outside the copy-on-write home that does not exist yet (an agent's XDG
/// directory pointed outside the home): only what exists can be mounted copy-on-write, and the
/// rest of the host is read-only, so the agent's first mkdir there fails. Say which path, the
/// variable that put it there, and the fix, before it starts.
pub(super) fn missing_outside_hint(
    skipped: &[PathBuf],
    env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> Option<String> {
    let first = skipped.first()?;
    let var = [
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "XDG_CACHE_HOME",
    ]
    .into_iter()
    .find(|n| env(n).is_some_and(|v| !v.is_empty() && first.starts_with(&v)));
    let names: Vec<String> = skipped.iter().map(|p| p.display().to_string()).collect();
    let (it, does) = if names.len() == 1 {
        ("it", "does")
    } else {
        ("them", "do")
    };
    Some(match var {
        Some(var) => format!(
            "{} (protected state under ${var}) {does} not exist, and outside the home the \
             agent cannot create {it} in this sandbox: create {it} on the host first (`mkdir -p \
             {}`), or point {var} inside the home",
            names.join(", "),
            names.join(" "),
        ),
        None => format!(
            "{} (protected state outside the home) {does} not exist, and the agent cannot \
             create {it} in this sandbox: create {it} on the host first (`mkdir -p {}`)",
            names.join(", "),
            names.join(" "),
        ),
    })
}

/// Every host path the session changed, protected or elsewhere in the home. What cannot be
/// read (a discarded session's protected layer) is left out: accepting reports it by name.
fn changed_paths(s: &Session) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = s
        .changes()
        .map(|c| c.into_iter().map(|c| c.host_path).collect())
        .unwrap_or_default();
    v.extend(
        s.home_writes()
            .map(|w| w.into_iter().map(|w| w.host_path).collect::<Vec<_>>())
            .unwrap_or_default(),
    );
    v
}

/// The host path a path given to `state accept` names, as git reads a pathspec: `~/…` in the
/// home; a relative path against the current directory, else against each protected path and
/// the home, the first that holds one of the session's changes (`CLAUDE.md` for
/// `~/.claude/CLAUDE.md`). One that names nothing stays as the current directory reads it, so
/// the error names the path the user meant.
fn locate(s: &Session, changed: &[PathBuf], p: &Path) -> PathBuf {
    let home = crate::home::home_dir();
    if let (Ok(rest), Some(h)) = (p.strip_prefix("~"), &home) {
        return h.join(rest);
    }
    let here = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    if p.is_absolute() {
        return here;
    }
    let names_a_change = |c: &Path| {
        let at = cordon_state::resolve_path(c).unwrap_or_else(|| c.to_path_buf());
        changed
            .iter()
            .any(|x| x.starts_with(c) || x.starts_with(&at))
    };
    std::iter::once(here.clone())
        .chain(s.entries.iter().map(|e| e.host.join(p)))
        .chain(s.home.as_ref().map(|h| h.host.join(p)))
        .chain(home.map(|h| h.join(p)))
        .find(|c| names_a_change(c))
        .unwrap_or(here)
}

/// How the protected-state review ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reviewed {
    Unchanged,
    Decided,
}

/// Summarise protected state, then apply the policy's choice (asking on a terminal).
fn review(plan: &Plan, s: &Session, emit: &dyn Fn(NewEvent)) -> Reviewed {
    let changes = match s.changes() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cordon: cannot read this session's state changes: {e}; they stay pending");
            emit(NewEvent::new(
                Layer::State,
                Action::Error,
                format!("reading changes failed: {e}"),
            ));
            return Reviewed::Decided;
        }
    };
    if let Ok(after) = s.after_hashes() {
        emit(
            NewEvent::new(
                Layer::State,
                Action::Log,
                format!("{} protected files changed", changes.len()),
            )
            .detail(
                "after",
                after
                    .iter()
                    .map(|(p, h)| format!("{} blake3:{h}", p.display()))
                    .collect::<Vec<_>>(),
            ),
        );
    }
    if changes.is_empty() {
        // Dropped by the caller, with the rest of the session when nothing else is kept.
        return Reviewed::Unchanged;
    }
    let changes = match apply_unasked(plan, s, changes, emit) {
        Some(rest) => rest,
        None => return Reviewed::Decided,
    };
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let choice = match plan.state.on_exit {
        OnExit::Ask if interactive => ask(s),
        OnExit::Ask => OnExit::Pending,
        other => other,
    };
    // Counted as review lists them (a new directory comes with its files, uncounted).
    let (listed, flagged) = {
        let l = cordon_state::listed(&changes);
        (l.len(), l.iter().filter(|c| !c.flags.is_empty()).count())
    };
    match choice {
        OnExit::Keep => match s.accept(&[]) {
            Ok(r) => {
                for c in &r.conflicts {
                    eprintln!("cordon: not applied: {c}");
                }
                emit(
                    NewEvent::new(
                        Layer::State,
                        Action::Allow,
                        "protected state changes applied",
                    )
                    .detail("applied", r.applied.len())
                    .detail(
                        "conflicts",
                        r.conflicts
                            .iter()
                            .map(|c| c.path.display().to_string())
                            .collect::<Vec<_>>(),
                    ),
                );
            }
            Err(e) => eprintln!(
                "cordon: applying state changes failed: {e}; run `cordon state accept {}` to retry",
                s.id
            ),
        },
        OnExit::Discard => {
            let _ = s.discard();
            emit(
                NewEvent::new(
                    Layer::State,
                    Action::Deny,
                    "protected state changes discarded",
                )
                .detail("files", listed),
            );
        }
        OnExit::Ask | OnExit::Pending => {
            eprintln!(
                "cordon: {} to protected state ({flagged} flagged) {} pending: \
                 `cordon state diff {id}`, then `cordon state accept {id}` or `cordon state discard {id}`",
                crate::output::count(listed, "change", "changes"),
                if listed == 1 { "is" } else { "are" },
                id = s.id
            );
            emit(
                NewEvent::new(
                    Layer::State,
                    Action::Ask,
                    "protected state changes pending review",
                )
                .detail("files", listed)
                .detail("flagged", flagged),
            );
        }
    }
    Reviewed::Decided
}

/// Git changes that run nothing (commits, refs, `user.*`, `remote.*.url`, `branch.*`) are
/// applied at once, and said so; the rest goes on to review. `None`: nothing is left.
fn apply_unasked(
    plan: &Plan,
    s: &Session,
    changes: Vec<cordon_state::Change>,
    emit: &dyn Fn(NewEvent),
) -> Option<Vec<cordon_state::Change>> {
    let auto: Vec<PathBuf> = changes
        .iter()
        .filter(|c| cordon_state::applies_unasked(c))
        .map(|c| c.host_path.clone())
        .collect();
    if auto.is_empty() || plan.state.on_exit == OnExit::Discard {
        return Some(changes);
    }
    match s.accept(&auto) {
        Ok(r) => {
            eprintln!(
                "cordon: applied {} to git metadata without asking: none sets a key that runs anything (commits, refs, identity, remotes, upstreams)",
                crate::output::count(r.applied.len(), "change", "changes"),
            );
            for c in &r.conflicts {
                eprintln!("cordon: not applied: {c}");
            }
            emit(
                NewEvent::new(
                    Layer::State,
                    Action::Allow,
                    "git changes that run nothing applied",
                )
                .detail("applied", r.applied.len()),
            );
            if r.accepted {
                return None;
            }
        }
        Err(e) => {
            eprintln!("cordon: applying git changes failed: {e}; they stay for review");
            return Some(changes);
        }
    }
    match s.changes() {
        Ok(rest) if rest.is_empty() => None,
        Ok(rest) => Some(rest),
        Err(_) => None,
    }
}

fn ask(s: &Session) -> OnExit {
    match s.review_summary() {
        Ok(text) => eprintln!("{text}"),
        Err(e) => eprintln!("cordon: cannot summarise: {e}"),
    }
    eprint!("cordon: apply these changes to your files? [k]eep, [d]iscard, [p]ending (default): ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    match line.trim() {
        "k" | "keep" => OnExit::Keep,
        "d" | "discard" => OnExit::Discard,
        _ => OnExit::Pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_agent_state_names_the_paths_and_the_fix() {
        let home = Path::new("/h");
        assert_eq!(missing_state_hint(&[], Some(home)), None);
        let env = |n: &str| (n == "XDG_CONFIG_HOME").then(|| "/srv/cfg".into());
        assert_eq!(missing_outside_hint(&[], &env), None);
        let one = missing_outside_hint(&[PathBuf::from("/srv/cfg/opencode")], &env).unwrap();
        assert!(
            one.contains("/srv/cfg/opencode (protected state under $XDG_CONFIG_HOME)"),
            "{one}"
        );
        assert!(one.contains("`mkdir -p /srv/cfg/opencode`"), "{one}");
        assert!(
            one.contains("point XDG_CONFIG_HOME inside the home"),
            "{one}"
        );
        let other = missing_outside_hint(&[PathBuf::from("/opt/x")], &env).unwrap();
        assert!(
            other.contains("/opt/x (protected state outside the home) does not"),
            "{other}"
        );
        assert_eq!(
            missing_state_hint(&[PathBuf::from("/h/.claude")], Some(home)).unwrap(),
            "~/.claude does not exist and the home is read-only in this sandbox, so the agent \
             cannot create it: create it on the host first (`mkdir -p ~/.claude` for a \
             directory), or run the agent once outside cordon"
        );
        let two = missing_state_hint(
            &[PathBuf::from("/h/.claude"), PathBuf::from("/elsewhere/x")],
            Some(home),
        )
        .unwrap();
        assert!(
            two.starts_with("~/.claude, /elsewhere/x do not exist"),
            "{two}"
        );
    }
}
