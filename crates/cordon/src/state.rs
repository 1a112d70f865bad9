//! Wiring for agent-state protection: the state store (cordon-state) prepares copy-on-write
//! layers before the sandbox starts; after it ends, the change is reviewed and applied,
//! dropped or left pending. `cordon state …` reviews pending changes later.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};
use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::Plan;
use cordon_sandbox::Staged;
use cordon_state::{EntryKind, Session, StateStore};

mod command;
mod exit;
mod sketch;

pub use command::command;
pub use exit::finish;
use exit::{accept, missing_outside_hint, missing_state_hint};

pub use sketch::sketch;
use sketch::{in_place, protected};

fn store() -> Result<StateStore> {
    StateStore::default_root()
        .map(StateStore::new)
        .ok_or_else(|| anyhow!("no state directory: set XDG_STATE_HOME or HOME"))
}

/// What the state layer hands the sandbox for one session.
#[derive(Default)]
pub struct Prepared {
    /// The session's layers, when it has any (a protected path or the copy-on-write home).
    pub session: Option<Session>,
    /// What the sandbox mounts copy-on-write: the home, the caches, the protected paths.
    pub staged: Vec<Staged>,
    /// The cache layers, each held (one writer at a time) until this is dropped.
    #[expect(dead_code, reason = "held for the cache layers' locks, never read")]
    pub caches: Vec<cordon_state::CacheLayer>,
    /// Caches left unmounted (neither the host nor a layer has them yet): what the session
    /// writes there becomes their layer at exit.
    pub unmounted: Vec<PathBuf>,
    /// The host-executed surface found at the start, settled at exit before review.
    pub surface: Option<cordon_state::Surface>,
    /// Files of the agent's state shown in the home that hold a secret: masked.
    pub masked: Vec<PathBuf>,
}

/// The session's copy-on-write home, when the policy and this kernel allow it; without one,
/// the home's view read-only (what to mount, and the agent's files to mask).
type Chosen = (Option<crate::home::HomePlan>, Vec<Staged>, Vec<PathBuf>);

fn choose_home(
    plan: &Plan,
    paths: &[PathBuf],
    store: &StateStore,
    emit: &dyn Fn(NewEvent),
) -> Result<Chosen> {
    // Without a copy-on-write layer the home is still shown by its view, read-only.
    let mut readonly = false;
    let home = match crate::home::plan_home(plan, paths) {
        Ok(Some(h)) => match crate::home::probe_home(&h.spec.path, &ensure_root(store)?) {
            Ok(()) => Some(h),
            Err(why) => {
                degraded(
                    &format!("the copy-on-write home is not available ({why})"),
                    emit,
                );
                readonly = true;
                None
            }
        },
        Ok(None) => {
            readonly = true;
            None
        }
        Err(why) => {
            emit(NewEvent::new(
                Layer::State,
                Action::Log,
                format!("no copy-on-write home: {why}"),
            ));
            None
        }
    };
    let (view_staged, view_masked) = match readonly {
        true => {
            ensure_root(store)?;
            crate::home::readonly_view(plan, paths, store, emit)?.unwrap_or_default()
        }
        false => Default::default(),
    };
    Ok((home, view_staged, view_masked))
}

/// Prepare the session's copy-on-write layers: the home (when the policy and this kernel
/// allow it), its caches, and the protected paths. Warnings go to stderr and the log.
pub fn begin(plan: &Plan, session: &str, emit: &dyn Fn(NewEvent)) -> Result<Prepared> {
    let (paths, surface) = protected(plan);
    let watched = surface
        .as_ref()
        .is_some_and(|s| !s.watch.is_empty() || !s.links.is_empty() || !s.roots.is_empty());
    let store = store()?;
    let (home, view_staged, view_masked) = choose_home(plan, &paths, &store, emit)?;
    if paths.is_empty() && home.is_none() && !watched {
        return Ok(Prepared {
            staged: view_staged,
            masked: view_masked,
            ..Prepared::default()
        });
    }
    let s = store
        .begin_with_home(session, &paths, home.as_ref().map(|h| &h.spec))
        .with_context(
            || "cannot prepare copy-on-write state (protected paths would be unprotected)",
        )?;
    missing_hint(plan, &s, emit);
    if s.entries.is_empty() && s.home.is_none() && !watched {
        let _ = s.forget();
        return Ok(Prepared {
            staged: view_staged,
            masked: view_masked,
            ..Prepared::default()
        });
    }
    let (caches, unmounted) = match &home {
        Some(h) => crate::home::open_caches(&h.caches, &plan.project, &s.dir.join("caches"))?,
        None => (Vec::new(), Vec::new()),
    };
    let mut staged = view_staged;
    let mut masked = view_masked;
    if let Some(layer) = &s.home {
        let view = match home.as_ref().and_then(|h| h.view.as_ref()) {
            Some(v) => {
                let (dir, m) = crate::home::make_view(&store, &s, layer, v, emit, &mut staged)?;
                masked = m;
                Some(dir)
            }
            None => None,
        };
        staged.insert(
            0,
            Staged::Home {
                path: layer.host.clone(),
                upper: layer.upper.clone(),
                work: layer.work.clone(),
                view,
            },
        );
    }
    staged.extend(caches.iter().map(|c| Staged::Cache {
        path: c.path.clone(),
        lower: c.lower.clone(),
        upper: c.upper.clone(),
        work: c.work.clone(),
    }));
    staged.extend(to_sandbox(&s));
    if let Some(w) = unmapped_group(&staged) {
        eprintln!("cordon: warning: {w}");
        emit(NewEvent::new(Layer::State, Action::Degraded, w));
    }
    staged.extend(in_place(plan));
    emit(staged_event(&s, &caches));
    Ok(Prepared {
        session: Some(s),
        staged,
        caches,
        unmounted,
        surface,
        masked,
    })
}

/// A protected path or name the policy lists that does not exist: said with the fix, since
/// nothing of it is protected this session.
fn missing_hint(plan: &Plan, s: &Session, emit: &dyn Fn(NewEvent)) {
    let hint = if s.home.is_none() {
        missing_state_hint(&s.skipped, crate::home::home_dir().as_deref())
    } else {
        // Only the policy's own entries: the staged surface names what exists.
        let own: Vec<PathBuf> = s
            .skipped
            .iter()
            .filter(|p| plan.state.protect.iter().any(|r| r.path == **p))
            .cloned()
            .collect();
        missing_outside_hint(&own, &|n| std::env::var_os(n))
    };
    if let Some(hint) = hint {
        eprintln!("cordon: warning: {hint}");
        emit(NewEvent::new(Layer::State, Action::Degraded, hint));
    }
}

/// The event that says what the session's layers hold: each protected entry's hash before,
/// what was missing, the home and the caches (a busy one private).
fn staged_event(s: &Session, caches: &[cordon_state::CacheLayer]) -> NewEvent {
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
    )
    .detail(
        "home",
        s.home
            .as_ref()
            .map(|h| h.host.display().to_string())
            .unwrap_or_default(),
    )
    .detail(
        "caches",
        caches
            .iter()
            .map(|c| {
                format!(
                    "{}{}",
                    c.path.display(),
                    if c.shared {
                        ""
                    } else {
                        " (busy: private layer)"
                    }
                )
            })
            .collect::<Vec<_>>(),
    )
}

fn ensure_root(store: &StateStore) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(store.root())
        .with_context(|| format!("cannot create {}", store.root().display()))?;
    Ok(store.root().to_path_buf())
}

fn degraded(msg: &str, emit: &dyn Fn(NewEvent)) {
    let _ = writeln!(
        std::io::stderr(),
        "cordon: warning: {msg}: the home is read-only this session"
    );
    emit(NewEvent::new(
        Layer::State,
        Action::Degraded,
        msg.to_string(),
    ));
}

/// Why git cannot write in a staged directory: an entry whose group the sandbox's user
/// namespace does not map (it maps the user's own group alone). The overlay copies such an
/// entry up with its group, which the kernel refuses (EOVERFLOW, "Value too large for defined
/// data type"): a shared repository (`devs`), or one made by root and `chown`ed. Object stores
/// are written in place, so they are not looked at; a walk stops after 20,000 entries.
fn unmapped_group(staged: &[Staged]) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let gid = cordon_sandbox::ids().1;
    for st in staged {
        let Staged::Dir { path, .. } = st else {
            continue;
        };
        let walk = walkdir::WalkDir::new(path)
            .follow_links(false)
            .into_iter()
            .filter_entry(|e| e.file_name() != "objects")
            .take(20_000);
        for e in walk.flatten() {
            let Ok(md) = e.metadata() else { continue };
            if md.gid() == gid {
                continue;
            }
            let name = group_name(md.gid()).unwrap_or_else(|| md.gid().to_string());
            let mine = group_name(gid).unwrap_or_else(|| gid.to_string());
            return Some(format!(
                "{} belongs to group `{name}`, which the sandbox cannot map (only your own \
                 group `{mine}` is): git writes there will fail inside with \"Value too large \
                 for defined data type\". Fix: `chgrp -R {mine} {}`",
                e.path().display(),
                path.display()
            ));
        }
    }
    None
}

/// The name of group `gid` in /etc/group.
fn group_name(gid: u32) -> Option<String> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let id = f.nth(1)?;
        (id.parse::<u32>().ok()? == gid).then(|| name.to_string())
    })
}

/// Protected paths with a mount of their own (embedded ones live in the home's layer).
pub fn to_sandbox(s: &Session) -> Vec<Staged> {
    s.entries
        .iter()
        .filter(|e| !e.embedded)
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
            EntryKind::Absent => None,
        })
        .collect()
}

/// After the command, before anything else reads the host: no set-id or file-capability file
/// the session made stays in its writable roots (the project and the `writable` paths), which
/// are on the host's disk with no review between (see [`cordon_state::strip_set_id`]). Each
/// one stripped is an event and a line on stderr.
pub fn strip_set_id(plan: &Plan, started: std::time::SystemTime, emit: &dyn Fn(NewEvent)) {
    let roots: Vec<PathBuf> = std::iter::once(plan.project.clone())
        .chain(plan.filesystem.writable.iter().map(|w| w.path.clone()))
        .collect();
    let sweep = cordon_state::strip_set_id(&roots, started);
    for s in &sweep.stripped {
        let what = match (s.mode & 0o6000 != 0, s.capability) {
            (true, true) => "set-id bits and file capabilities",
            (true, false) => "set-id bits",
            _ => "file capabilities",
        };
        emit(
            NewEvent::new(
                Layer::State,
                Action::Deny,
                format!("{what} stripped from a file the session made"),
            )
            .detail("path", s.path.display().to_string())
            .detail("mode", format!("{:o}", s.mode))
            .detail("capability", s.capability),
        );
    }
    for (p, e) in &sweep.failed {
        emit(
            NewEvent::new(
                Layer::State,
                Action::Error,
                format!("set-id bits or capabilities not checked or not stripped: {e}"),
            )
            .detail("path", p.display().to_string()),
        );
    }
    if !sweep.stripped.is_empty() {
        let names: Vec<String> = sweep
            .stripped
            .iter()
            .take(3)
            .map(|s| cordon_state::shown_path(&s.path))
            .collect();
        let more = sweep.stripped.len().saturating_sub(names.len());
        eprintln!(
            "cordon: set-id bits or file capabilities stripped from {} file{} the session made \
             (a host user would have run them with their owner's privileges): {}{}",
            sweep.stripped.len(),
            if sweep.stripped.len() == 1 { "" } else { "s" },
            names.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
    }
    for (p, e) in &sweep.failed {
        eprintln!(
            "cordon: warning: {} may keep a set-id bit or file capability the session gave \
             it (look before running anything there): {e}",
            cordon_state::shown_path(p)
        );
    }
}
