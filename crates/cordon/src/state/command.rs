//! `cordon state …`: the sessions' changes listed, shown, accepted, discarded or restored
//! from a snapshot, after the sessions ended.

use std::io::{IsTerminal, Write};

use anyhow::{Result, anyhow};
use cordon_state::{StateStore, Status};

use super::{accept, store};
use crate::cli::StateCmd;

pub fn command(c: StateCmd) -> i32 {
    match run(c) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cordon: {}", crate::output::chain(&e));
            1
        }
    }
}

fn run(c: StateCmd) -> Result<i32> {
    let store = store()?;
    match c {
        StateCmd::List => list(&store),
        StateCmd::Diff { session } => diff(&store, session),
        StateCmd::Accept { session, paths } => {
            let s = store.open(&session)?;
            let r = accept(&s, &paths)?;
            for p in &r.applied {
                println!("applied {}", p.display());
            }
            for c in &r.conflicts {
                println!("CONFLICT {c}");
            }
            Ok(if r.conflicts.is_empty() { 0 } else { 1 })
        }
        StateCmd::Discard { session } => {
            let s = store.open(&session)?;
            s.discard()?;
            s.discard_home()?;
            println!("discarded the changes of {session}");
            Ok(0)
        }
        StateCmd::Restore {
            snapshot,
            path,
            yes,
            force,
        } => restore(&store, &snapshot, path.as_deref(), yes, force),
    }
}

/// `cordon state list`: every session with layers, its status and what it changed.
fn list(store: &StateStore) -> Result<i32> {
    let sessions = store.list()?;
    if sessions.is_empty() {
        println!(
            "no sessions with protected agent state yet (a profile such as \
             `cordon run --profile claude` protects its agent's state)"
        );
    }
    for s in sessions {
        let status = match s.status {
            Some(Status::Pending) => "pending",
            Some(Status::Accepted) => "accepted",
            Some(Status::Discarded) => "discarded",
            None => "unreadable",
        };
        let paths: Vec<String> = s
            .protected
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        // A session that changed nothing has nothing to review: say so, not
        // `discarded 0 changed`; its before-snapshot still serves `state restore`.
        let what = match s.changed {
            Some(0) => "nothing changed".to_string(),
            Some(n) => format!("{status}  {n} changed"),
            None => format!("{status}  ? changed"),
        };
        print!("{}  {what}  {}", s.id, paths.join(" "));
        if let Some(e) = &s.error {
            print!("  ({e})");
        }
        println!();
    }
    Ok(0)
}

/// `cordon state diff [SESSION]`: what a session changed (the newest pending by default).
fn diff(store: &StateStore, session: Option<String>) -> Result<i32> {
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

/// `cordon state restore SNAPSHOT [PATH]`: what would change, asked (or `--yes`), then done.
fn restore(
    store: &StateStore,
    snapshot: &str,
    path: Option<&std::path::Path>,
    yes: bool,
    force: bool,
) -> Result<i32> {
    let plan = store.restore_plan(snapshot, path)?;
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
    let r = store.restore(snapshot, path, force)?;
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
        println!("REFUSED {c}");
    }
    println!("{} already as in the snapshot", r.unchanged);
    Ok(if r.refused.is_empty() { 0 } else { 1 })
}
