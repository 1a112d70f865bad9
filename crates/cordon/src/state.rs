//! Wiring for agent-state protection: the state store (cordon-state) prepares copy-on-write
//! layers before the sandbox starts; after it ends, the change is reviewed and applied,
//! dropped or left pending. `cordon state …` reviews pending changes later.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};
use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::{OnExit, Plan, ProjectFiles};
use cordon_sandbox::Staged;
use cordon_state::{EntryKind, Session, StateStore, Status};

use crate::cli::StateCmd;

fn store() -> Result<StateStore> {
    StateStore::default_root()
        .map(StateStore::new)
        .ok_or_else(|| anyhow!("no state directory: set XDG_STATE_HOME or HOME"))
}

/// The paths to protect: the policy's list, plus the project's host-executed files when the
/// policy stages them instead of making them read-only (the project's cordon.toml never is).
fn protected(plan: &Plan) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = plan.state.protect.iter().map(|r| r.path.clone()).collect();
    if plan.state.project_files == ProjectFiles::Staged {
        let policy = plan.project.join("cordon.toml");
        for r in &plan.filesystem.read_only {
            if r.path.starts_with(&plan.project) && r.path != policy && !v.contains(&r.path) {
                v.push(r.path.clone());
            }
        }
    }
    v
}

/// Prepare the session's copy-on-write layers; `None` when nothing is protected or exists.
pub fn begin(plan: &Plan, session: &str, emit: &dyn Fn(NewEvent)) -> Result<Option<Session>> {
    let paths = protected(plan);
    if paths.is_empty() {
        return Ok(None);
    }
    let store = store()?;
    let s = store.begin(session, &paths).with_context(
        || "cannot prepare copy-on-write state (protected paths would be unprotected)",
    )?;
    if s.entries.is_empty() {
        let _ = s.discard();
        return Ok(None);
    }
    emit(
        NewEvent::new(
            Layer::State,
            Action::Apply,
            "protected paths are copy-on-write for this session",
        )
        .detail(
            "before",
            s.entries
                .iter()
                .map(|e| format!("{} blake3:{}", e.host.display(), e.before_hash))
                .collect::<Vec<_>>(),
        )
        .detail(
            "skipped_missing",
            s.skipped
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>(),
        ),
    );
    Ok(Some(s))
}

pub fn to_sandbox(s: &Session) -> Vec<Staged> {
    s.entries
        .iter()
        .filter_map(|e| match e.kind {
            EntryKind::Dir => Some(Staged::Dir {
                path: e.host.clone(),
                upper: e.upper.clone(),
                work: e.work.clone()?,
            }),
            EntryKind::File => Some(Staged::File {
                path: e.host.clone(),
                copy: e.upper.clone(),
            }),
        })
        .collect()
}

/// After the command: summarise, then apply the policy's choice (asking on a terminal).
pub fn finish(plan: &Plan, s: &Session, emit: &dyn Fn(NewEvent)) {
    let changes = match s.changes() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cordon: cannot read this session's state changes: {e}; they stay pending");
            emit(NewEvent::new(
                Layer::State,
                Action::Error,
                format!("reading changes failed: {e}"),
            ));
            return;
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
        let _ = s.discard();
        return;
    }
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let choice = match plan.state.on_exit {
        OnExit::Ask if interactive => ask(s),
        OnExit::Ask => OnExit::Pending,
        other => other,
    };
    let flagged = changes.iter().filter(|c| !c.flags.is_empty()).count();
    match choice {
        OnExit::Keep => match s.accept(&[]) {
            Ok(r) => {
                for c in &r.conflicts {
                    eprintln!("cordon: not applied: {}: {}", c.path.display(), c.why);
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
                .detail("files", changes.len()),
            );
        }
        OnExit::Ask | OnExit::Pending => {
            eprintln!(
                "cordon: {} change(s) to protected state ({flagged} flagged) are pending: \
                 `cordon state diff {id}`, then `cordon state accept {id}` or `cordon state discard {id}`",
                changes.len(),
                id = s.id
            );
            emit(
                NewEvent::new(
                    Layer::State,
                    Action::Ask,
                    "protected state changes pending review",
                )
                .detail("files", changes.len())
                .detail("flagged", flagged),
            );
        }
    }
}

fn ask(s: &Session) -> OnExit {
    match s.summary() {
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

pub fn command(c: StateCmd) -> i32 {
    match run(c) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cordon: {e:#}");
            1
        }
    }
}

fn run(c: StateCmd) -> Result<i32> {
    let store = store()?;
    match c {
        StateCmd::List => {
            for s in store.list()? {
                let status = match s.status {
                    Some(Status::Pending) => "pending",
                    Some(Status::Accepted) => "accepted",
                    Some(Status::Discarded) => "discarded",
                    None => "unreadable",
                };
                let changed = s.changed.map_or("?".to_string(), |n| n.to_string());
                let paths: Vec<String> = s
                    .protected
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                print!("{}  {status}  {changed} changed  {}", s.id, paths.join(" "));
                if let Some(e) = &s.error {
                    print!("  ({e})");
                }
                println!();
            }
            Ok(0)
        }
        StateCmd::Diff { session } => {
            let id = match session {
                Some(id) => id,
                None => store
                    .list()?
                    .into_iter()
                    .find(|s| s.status == Some(Status::Pending))
                    .map(|s| s.id)
                    .ok_or_else(|| anyhow!("no pending session"))?,
            };
            let session = store.open(&id)?;
            if session.is_running() {
                eprintln!(
                    "cordon: session {id} is still running: its changes may still grow; review again once it ends"
                );
            }
            print!("{}", session.summary()?);
            Ok(0)
        }
        StateCmd::Accept { session, paths } => {
            let r = store.open(&session)?.accept(&paths)?;
            for p in &r.applied {
                println!("applied {}", p.display());
            }
            for c in &r.conflicts {
                println!("CONFLICT {}: {}", c.path.display(), c.why);
            }
            Ok(if r.conflicts.is_empty() { 0 } else { 1 })
        }
        StateCmd::Discard { session } => {
            store.open(&session)?.discard()?;
            println!("discarded the changes of {session}");
            Ok(0)
        }
        StateCmd::Restore {
            snapshot,
            path,
            yes,
            force,
        } => {
            let plan = store.restore_plan(&snapshot, path.as_deref())?;
            if plan.restored.is_empty() && plan.removed.is_empty() && plan.refused.is_empty() {
                println!("nothing to restore: already as in the snapshot");
                return Ok(0);
            }
            for p in &plan.restored {
                println!("would restore {}", p.display());
            }
            for p in &plan.removed {
                println!("would remove {} (kept in a backup folder)", p.display());
            }
            if !yes {
                if !std::io::stdin().is_terminal() {
                    return Err(anyhow!(
                        "restore changes your files: add --yes to do it without a terminal"
                    ));
                }
                print!("restore these? [y/N] ");
                let _ = std::io::stdout().flush();
                let mut line = String::new();
                std::io::stdin().read_line(&mut line)?;
                if !matches!(line.trim(), "y" | "yes") {
                    println!("nothing changed");
                    return Ok(0);
                }
            }
            let r = store.restore(&snapshot, path.as_deref(), force)?;
            if let Some(b) = &r.backup {
                println!("replaced files are kept in {}", b.display());
            }
            for p in &r.restored {
                println!("restored {}", p.display());
            }
            for p in &r.removed {
                println!("removed {}", p.display());
            }
            for c in &r.refused {
                println!("REFUSED {}: {}", c.path.display(), c.why);
            }
            println!("{} already as in the snapshot", r.unchanged);
            Ok(if r.refused.is_empty() { 0 } else { 1 })
        }
    }
}
