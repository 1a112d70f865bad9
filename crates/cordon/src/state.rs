//! Wiring for agent-state protection: the state store (cordon-state) prepares copy-on-write
//! layers before the sandbox starts; after it ends, the change is reviewed and applied,
//! dropped or left pending. `cordon state …` reviews pending changes later.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::{OnExit, Plan};
use cordon_sandbox::Staged;
use cordon_state::{EntryKind, Session, StateStore, Status};

use crate::cli::StateCmd;

mod sketch;

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
        ),
    );
    Ok(Prepared {
        session: Some(s),
        staged,
        caches,
        unmounted,
        surface,
        masked,
    })
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
fn accept(s: &Session, paths: &[PathBuf]) -> Result<cordon_state::AcceptReport> {
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
fn missing_state_hint(skipped: &[PathBuf], home: Option<&Path>) -> Option<String> {
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
fn missing_outside_hint(
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
        StateCmd::List => {
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
                println!("REFUSED {c}");
            }
            println!("{} already as in the snapshot", r.unchanged);
            Ok(if r.refused.is_empty() { 0 } else { 1 })
        }
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
