//! Agents' login files at the end of a session: whatever copy of one the sandbox wrote (an
//! agent saving the placeholders it was given, after a login or refresh inside) is dropped
//! from the session's layers before review, so no `cordon state accept` can ever put it over
//! the host's file — which cordon itself keeps current with the real tokens.

use std::path::{Path, PathBuf};

use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::Plan;
use cordon_state::Session;

/// The files the plan's credentials read or list: never brought home.
fn login_files(plan: &Plan) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for c in &plan.credentials {
        for f in c
            .source
            .login_file()
            .into_iter()
            .chain(c.files.iter().map(PathBuf::as_path))
        {
            if !out.iter().any(|x| x == f) {
                out.push(f.to_path_buf());
            }
        }
    }
    out
}

/// Where the session's layers hold a copy of host path `f`: under each protected
/// directory's upper layer, and in the home's layer.
fn copies(s: &Session, f: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in &s.entries {
        if e.kind == cordon_state::EntryKind::Dir
            && let Ok(rel) = f.strip_prefix(&e.host)
            && !rel.as_os_str().is_empty()
        {
            out.push(e.upper.join(rel));
        }
    }
    if let Some(p) = s.home.as_ref().and_then(|h| h.upper_of(f)) {
        out.push(p);
    }
    out
}

/// Drops the session's copies of every login file (a written file, or the whiteout of a
/// removed one), saying so; see the module docs.
pub fn drop_copies(plan: &Plan, s: &Session, emit: &dyn Fn(NewEvent)) {
    for f in login_files(plan) {
        for copy in copies(s, &f) {
            let Ok(meta) = std::fs::symlink_metadata(&copy) else {
                continue;
            };
            let gone = if meta.is_dir() {
                std::fs::remove_dir_all(&copy)
            } else {
                std::fs::remove_file(&copy)
            };
            let line = match gone {
                Ok(()) => format!(
                    "the sandbox's own copy of {} was dropped: a login file never comes back through review (the host's holds the real tokens)",
                    f.display()
                ),
                Err(e) => format!(
                    "the sandbox's own copy of {} could not be dropped ({e}); do not accept it: `cordon state discard` the session",
                    f.display()
                ),
            };
            eprintln!("cordon: {line}");
            emit(
                NewEvent::new(Layer::Credentials, Action::Deny, line)
                    .detail("file", f.display().to_string()),
            );
        }
    }
}
