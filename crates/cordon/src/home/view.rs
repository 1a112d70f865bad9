//! The home's view, wired: what it is built from (`home_show`, `home_tools`, the agent's state,
//! the places of everything mounted in the home), the overlays of the directories shown as they
//! are, the read-only form, the credentials a shown `~/.npmrc` holds, and `--trace-home`'s report.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::{HomeMode, HomeView, Plan};
use cordon_state::{HomeLayer, resolve_path_below};

use super::{Paths, denied_and_taken, home_dir};

/// What the home's view is built from, and the host directories shown as they are on it.
pub struct ViewPlan {
    pub spec: cordon_state::ViewSpec,
    /// Host directories inside the home shown as they are, copy-on-write: toolchains and the
    /// agent's state directories.
    pub shown: Vec<PathBuf>,
}

/// The home's view for `plan`: the configuration it shows (checked for secrets), the
/// toolchains and the agent's state directories shown as they are, and a place for
/// everything else mounted in the home. `denied`: the home's deny rules (deny wins);
/// `taken`: what has a mount of its own (the project, writable paths, protected paths).
pub(super) fn plan_view(
    plan: &Plan,
    home: &Path,
    resolve: &dyn Fn(&Path) -> Option<PathBuf>,
    protected: &[PathBuf],
    denied: &Paths,
    taken: &Paths,
    caches: &[PathBuf],
) -> ViewPlan {
    let fs = &plan.filesystem;
    // The home's own names, read once: most listed toolchains and configuration are not
    // there, and a name not at the top needs no lookup at all (three or four per path).
    let top: std::collections::HashSet<std::ffi::OsString> = std::fs::read_dir(home)
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    // Policy paths spell the home as $HOME does, which may be a link to it.
    let raw_home = std::env::var_os("HOME").map(PathBuf::from);
    let present = |p: &Path| {
        p.strip_prefix(home)
            .ok()
            .or_else(|| p.strip_prefix(raw_home.as_deref()?).ok())
            .and_then(|r| r.components().next())
            .is_some_and(|c| top.contains(c.as_os_str()))
    };
    let inside = |p: &Path| p.starts_with(home) && p != home;
    let mut spec = cordon_state::ViewSpec {
        home: home.to_path_buf(),
        ..Default::default()
    };
    let mut shown: Vec<PathBuf> = Vec::new();
    // The agent's own state: shown as it is (review covers what the session changes there).
    // Its login and key files at its top are checked: one that holds a secret is masked
    // (a login a profile knows is then shown with placeholders, see `cordon::logins`).
    for p in protected.iter().filter(|p| inside(p)) {
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => shown.push(p.clone()),
            Ok(m) if m.is_file() => spec.as_is.push(p.clone()),
            _ => continue,
        }
        spec.check.push(p.clone());
    }
    for t in fs.home_tools.iter().filter(|t| present(&t.path)) {
        let Some(p) = resolve(&t.path).filter(|p| inside(p)) else {
            continue;
        };
        if denied.within(&p) || taken.overlaps(&p) || shown.iter().any(|s| p.starts_with(s)) {
            continue;
        }
        match std::fs::metadata(&p) {
            Ok(m) if m.is_dir() => shown.push(p),
            Ok(m) if m.is_file() => spec.as_is.push(p),
            _ => {}
        }
    }
    let npmrcs = shown_npmrcs(plan);
    for c in fs.home_show.iter().filter(|c| present(&c.path)) {
        let Some(p) = resolve(&c.path).filter(|p| inside(p)) else {
            continue;
        };
        if denied.within(&p) || taken.within(&p) || shown.iter().any(|s| p.starts_with(s)) {
            continue;
        }
        // A registry token's file: shown as a copy with placeholders (`add_home_credentials`).
        let tokens = npmrcs.contains(&p)
            && std::fs::read_to_string(&p)
                .is_ok_and(|t| !cordon_http::credentials::npmrc::tokens(&t).is_empty());
        if tokens {
            spec.files.push(p);
            continue;
        }
        spec.show.push(p);
    }
    // Places for what is mounted in the home: the shown directories, the caches, the project
    // and the writable and readable paths, the masked copies of credential and ssh files.
    spec.dirs.extend(shown.iter().cloned());
    spec.dirs.extend(caches.iter().cloned());
    // The XDG base directories, empty where nothing in them is shown: tools expect them.
    for d in [".config", ".cache", ".local/share", ".local/state"] {
        spec.dirs.push(home.join(d));
    }
    let bound = fs
        .writable
        .iter()
        .chain(&fs.readable)
        .map(|r| r.path.as_path());
    for p in std::iter::once(plan.project.as_path()).chain(bound) {
        let Some(p) = resolve(p).filter(|p| inside(p)) else {
            continue;
        };
        match std::fs::metadata(&p) {
            Ok(m) if !m.is_dir() => spec.files.push(p),
            _ => spec.dirs.push(p),
        }
    }
    let copies = plan
        .credentials
        .iter()
        .flat_map(|c| {
            c.files
                .iter()
                .map(PathBuf::as_path)
                .chain(c.source.login_file())
        })
        .chain(plan.ssh.show.iter().map(|r| r.path.as_path()));
    for f in copies {
        let Some(p) = resolve(f).filter(|p| inside(p)) else {
            continue;
        };
        if std::fs::symlink_metadata(&p).is_ok() && !shown.iter().any(|s| p.starts_with(s)) {
            spec.files.push(p);
        }
    }
    ViewPlan { spec, shown }
}

/// The home's view where the home has no copy-on-write layer (`[state] home = "readonly"`, or
/// where overlayfs refuses it): the view bound read-only at the home, the toolchains bound
/// read-only on top; the agent's state keeps its own copy-on-write mounts. `None`: the whole
/// home is shown, or this home cannot have a view (the project holds it, it is writable or
/// denied as a whole). Returns what to mount and the agent's files to mask.
pub fn readonly_view(
    plan: &Plan,
    protected: &[PathBuf],
    store: &cordon_state::StateStore,
    emit: &dyn Fn(NewEvent),
) -> Result<Option<(Vec<cordon_sandbox::Staged>, Vec<PathBuf>)>> {
    if plan.filesystem.home != HomeView::Needed {
        return Ok(None);
    }
    let Some(home) = home_dir().filter(|h| h != Path::new("/")) else {
        return Ok(None);
    };
    let fs = &plan.filesystem;
    let whole = |p: &Path| home.starts_with(p);
    if whole(&plan.project)
        || fs.writable.iter().any(|w| whole(&w.path))
        || fs.deny.iter().any(|d| whole(&d.path))
    {
        return Ok(None);
    }
    let raw_home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let resolve = |p: &Path| resolve_path_below(p, &raw_home, &home);
    let (denied, taken) = denied_and_taken(plan, &home, protected);
    let mut v = plan_view(plan, &home, &resolve, protected, &denied, &taken, &[]);
    // The agent's state has mounts of its own here (no home layer to embed it in).
    v.shown.retain(|d| !protected.contains(d));
    v.spec.as_is.retain(|f| !protected.contains(f));
    v.spec.files.extend(
        protected
            .iter()
            .filter(|p| p.starts_with(&home) && p.is_file())
            .cloned(),
    );
    v.spec.dirs.extend(
        protected
            .iter()
            .filter(|p| p.starts_with(&home) && p.is_dir())
            .cloned(),
    );
    let view = cordon_state::build_view(store.root(), &v.spec, &|c: &[u8]| {
        cordon_http::dlp::secret_in_file(c)
    })
    .map_err(|e| anyhow!("cannot build the home's view: {e}"))?;
    report_hidden(&home, &view, emit);
    let mut staged = vec![cordon_sandbox::Staged::View {
        path: home.clone(),
        view: view.dir,
    }];
    staged.extend(
        v.shown
            .into_iter()
            .map(|path| cordon_sandbox::Staged::Bound { path }),
    );
    Ok(Some((
        staged,
        view.masked.into_iter().map(|h| h.path).collect(),
    )))
}

/// One event per shown path the view left out, and why (in the log, not on the terminal at
/// every start: `cordon explain PATH` and `cordon check` say it when asked).
fn report_hidden(home: &Path, view: &cordon_state::View, emit: &dyn Fn(NewEvent)) {
    let tilde = |p: &Path| match p.strip_prefix(home) {
        Ok(r) => format!("~/{}", r.display()),
        Err(_) => p.display().to_string(),
    };
    for h in view.hidden.iter().chain(&view.masked) {
        emit(
            NewEvent::new(
                Layer::Filesystem,
                Action::Deny,
                format!("{} is hidden: it {}", tilde(&h.path), h.why),
            )
            .rule("filesystem.home_show")
            .detail("path", h.path.display().to_string()),
        );
    }
}

/// Build the home's view for the session `s` (or reuse an unchanged one) and add an overlay
/// for each directory shown as it is, its upper directory at its place in the home's layer.
/// Returns the view's directory, the home overlay's lower layer, and the files of the agent's
/// state that hold a secret, to mask. Shown files that hold a secret are hidden, each with
/// an event.
pub fn make_view(
    store: &cordon_state::StateStore,
    s: &cordon_state::Session,
    layer: &HomeLayer,
    v: &ViewPlan,
    emit: &dyn Fn(NewEvent),
    staged: &mut Vec<cordon_sandbox::Staged>,
) -> Result<(PathBuf, Vec<PathBuf>)> {
    let view = cordon_state::build_view(store.root(), &v.spec, &|c: &[u8]| {
        cordon_http::dlp::secret_in_file(c)
    })
    .map_err(|e| anyhow!("cannot build the home's view: {e}"))?;
    report_hidden(&layer.host, &view, emit);
    let work_root = s.dir.join("home").join("work");
    for (i, dir) in v.shown.iter().enumerate() {
        let Some(upper) = layer.upper_of(dir) else {
            continue;
        };
        make_upper(&layer.host, &layer.upper, &upper)?;
        let work = work_root.join(format!("s{i}"));
        std::fs::create_dir(&work)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => Ok(()),
                _ => Err(e),
            })
            .with_context(|| format!("cannot create {}", work.display()))?;
        staged.push(cordon_sandbox::Staged::Shown {
            path: dir.clone(),
            upper,
            work,
        });
    }
    let masked = view.masked.into_iter().map(|h| h.path).collect();
    Ok((view.dir, masked))
}

/// Create `upper` (inside the home's layer `root`) and its missing parents, each with the
/// mode of the host directory it stands for: the merged directory takes its upper's.
fn make_upper(host: &Path, root: &Path, upper: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let rel = upper.strip_prefix(root).unwrap_or(upper);
    let (mut at, mut from) = (root.to_path_buf(), host.to_path_buf());
    for c in rel.components() {
        at.push(c);
        from.push(c);
        let mode = std::fs::metadata(&from).map_or(0o755, |m| m.mode() & 0o7777);
        match std::fs::DirBuilder::new().mode(mode).create(&at) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(anyhow!("cannot create {}: {e}", at.display())),
        }
    }
    Ok(())
}

/// After the session: the shown directories' work directories go, and so do their upper
/// directories (and the parents made for them) where the session wrote nothing there, so a
/// session that left nothing leaves an empty layer, as without a view.
pub fn tidy_view(staged: &[cordon_sandbox::Staged], layer: &HomeLayer) {
    for st in staged {
        let cordon_sandbox::Staged::Shown { upper, work, .. } = st else {
            continue;
        };
        let _ = std::fs::remove_dir(work.join("work"));
        let _ = std::fs::remove_dir(work);
        let mut at = Some(upper.as_path());
        while let Some(d) = at.filter(|d| d.starts_with(&layer.upper) && *d != layer.upper) {
            if std::fs::remove_dir(d).is_err() {
                break;
            }
            at = d.parent();
        }
    }
}

/// The npm config files the home's view shows (`home_show` entries named `.npmrc`), resolved;
/// none when the whole home is shown (then nothing stands between the file and the sandbox).
fn shown_npmrcs(plan: &Plan) -> Vec<PathBuf> {
    if plan.filesystem.home != HomeView::Needed || plan.state.home != HomeMode::Overlay {
        return Vec::new();
    }
    plan.filesystem
        .home_show
        .iter()
        .filter(|r| r.path.file_name().is_some_and(|n| n == ".npmrc"))
        .filter_map(|r| std::fs::canonicalize(&r.path).ok())
        .filter(|p| p.is_file())
        .collect()
}

/// The registry tokens of a shown `~/.npmrc` become credentials: the file is shown with each
/// token replaced by its placeholder, which the HTTP layer swaps back in the `authorization`
/// header of requests to that registry alone (npm sends `Bearer TOKEN`). Without them the file
/// would be hidden whole (it holds a secret), and with it the registry's address.
pub fn add_home_credentials(plan: &mut Plan) {
    for f in shown_npmrcs(plan) {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let tokens = cordon_http::credentials::npmrc::tokens(&text);
        for t in &tokens {
            let name = format!("npmrc-{}", t.registry);
            let Ok(host) = cordon_policy::HostPattern::glob(t.host()) else {
                continue;
            };
            if plan.credentials.iter().any(|c| c.name == name) {
                continue;
            }
            plan.credentials.push(cordon_policy::CredentialPlan {
                programs: Default::default(),
                name,
                env: None,
                source: cordon_policy::CredentialSource::Npmrc {
                    file: f.clone(),
                    registry: t.registry.clone(),
                },
                hosts: vec![host],
                slot: cordon_policy::CredentialSlot::Header {
                    name: "authorization".into(),
                    format: "Bearer {}".into(),
                },
                // Its source's file is shown as a masked copy already, as a login file is.
                files: Vec::new(),
                inject: false,
                refresh: None,
                origin: format!("the home's view: {}", f.display()).into(),
            });
        }
        if !tokens.is_empty() {
            // Masked unless its copy with placeholders can be shown.
            plan.filesystem.deny.push(cordon_policy::PathRule::new(
                &f,
                "the home's view: a registry token's file",
            ));
        }
    }
}

/// The `--trace-home` report at exit: each home path the command looked for that the view
/// hides, with the program and the policy line that would show it (at most eight, then a
/// count; all of them are in the log).
pub fn report_trace(t: &cordon_sandbox::HomeTrace) {
    let found = t.found.lock().unwrap_or_else(|p| p.into_inner());
    if found.is_empty() {
        eprintln!("cordon: --trace-home: the command looked for nothing the home's view hides");
        return;
    }
    eprintln!(
        "cordon: --trace-home: {} path{} of your home the command looked for {} hidden by the home's view:",
        found.len(),
        if found.len() == 1 { "" } else { "s" },
        if found.len() == 1 { "is" } else { "are" }
    );
    for (path, program) in found.iter().take(8) {
        let tilde = match path.strip_prefix(&t.home) {
            Ok(r) => format!("~/{}", r.display()),
            Err(_) => path.display().to_string(),
        };
        let clean = cordon_events::terminal::safe(&tilde);
        let program = cordon_events::terminal::safe(program);
        eprintln!("cordon:   {clean} ({program}): `cordon explain {clean}` says how to show it");
    }
    if found.len() > 8 {
        eprintln!("cordon:   and {} more (in the log)", found.len() - 8);
    }
}
