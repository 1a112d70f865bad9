//! `cordon explain PATH`: what a session's filesystem does with a path, answered from the
//! layout a session would build (its copy-on-write home, caches and host-executed surface,
//! sketched by the state layer's own planning) and the review rules applied at exit.

use std::path::Path;

use cordon_policy::{HomeMode, PathRule, Plan};
use cordon_sandbox::Staged;
use cordon_sandbox::explain::PathAccess;
use cordon_state::ExitFate;

use super::Explanation;

/// The home's view (`[filesystem] home = "needed"`): a path in the home that nothing shows is
/// not in the sandbox at all, whatever the host holds there. `None`: the view does not decide
/// (outside the home, or shown: then the mounts do).
fn home_view(plan: &Plan, path: &Path, verb: &str) -> Option<Explanation> {
    let fs = &plan.filesystem;
    if fs.home != cordon_policy::HomeView::Needed
        || !path.starts_with(&plan.home)
        || path == plan.home
    {
        return None;
    }
    // `[state] home = "readonly"`: the same view, bound read-only.
    let overlay = plan.state.home == HomeMode::Overlay;
    let read_only_home = "the home is read-only ([state] home = \"readonly\"): nothing can be \
                          written there";
    let home = plan.home.as_path();
    let shown_paths: Vec<&Path> = std::iter::once(plan.project.as_path())
        .chain(fs.writable.iter().map(|r| r.path.as_path()))
        .chain(fs.readable.iter().map(|r| r.path.as_path()))
        .chain(fs.home_show.iter().map(|r| r.path.as_path()))
        .chain(fs.home_tools.iter().map(|r| r.path.as_path()))
        .chain(plan.state.protect.iter().map(|r| r.path.as_path()))
        .chain(plan.state.caches.iter().map(|r| r.path.as_path()))
        .chain(plan.ssh.show.iter().map(|r| r.path.as_path()))
        .filter(|s| s.starts_with(home) && *s != home)
        .collect();
    // A deny rule answers first, the same inside and outside: no home_show line re-opens
    // it. Its mask is made only where the view holds something there (a shown file inside
    // it, or it inside a shown directory); elsewhere the path is simply not in the view.
    let mut denied: Vec<&PathRule> = fs
        .deny
        .iter()
        .filter(|d| path.starts_with(&d.path))
        .collect();
    denied.sort_by_key(|d| d.path.components().count());
    if let Some(d) = denied.first() {
        let masked = shown_paths.iter().any(|s| {
            d.path.starts_with(s)
                || (s.starts_with(&d.path) && std::fs::symlink_metadata(s).is_ok())
        });
        let mut x = Explanation {
            subject: format!("{verb} {}", path.display()),
            decision: "deny",
            rule: format!("filesystem.deny {}", d.path.display()),
            origin: Some(d.origin.clone()),
            why: format!(
                "{} is masked: nothing of it is visible, and deny wins over readable and writable",
                d.path.display()
            ),
            notes: vec![
                "no readable, writable or home_show line added elsewhere re-opens a masked path"
                    .into(),
            ],
            ..Explanation::default()
        };
        if !masked {
            x.why = format!(
                "{} is denied and not in the home's view: nothing the host holds there is seen",
                d.path.display()
            );
            if verb == "write" && overlay {
                x.decision = "allow";
                x.allowed = true;
                x.why.push_str(
                    "; the home is copy-on-write: a write makes a new file in the session's \
                     layer, discarded at exit",
                );
            } else if verb == "write" {
                x.why = format!("{}; {read_only_home}", x.why);
            }
        }
        return Some(x);
    }
    let shown = shown_paths.iter().any(|s| path.starts_with(s));
    if shown {
        return None;
    }
    let tilde = match path.strip_prefix(home) {
        Ok(r) => format!("~/{}", r.display()),
        Err(_) => path.display().to_string(),
    };
    if verb == "write" && overlay {
        // The home is copy-on-write: a write makes a file of the session's own there.
        return Some(Explanation {
            subject: format!("{verb} {}", path.display()),
            decision: "allow",
            allowed: true,
            rule: "filesystem.home".into(),
            origin: Some("[filesystem] home = \"needed\"".into()),
            why: "not in the home's view, so whatever the host holds there is not seen; the \
                  home is copy-on-write: a write makes a new file in the session's layer, \
                  discarded at exit"
                .into(),
            allow_with: Some(format!(
                "[filesystem]\nhome_show = [{}]",
                cordon_policy::explain::toml_string(&tilde)
            )),
            ..Explanation::default()
        });
    }
    Some(Explanation {
        subject: format!("{verb} {}", path.display()),
        decision: "deny",
        rule: "filesystem.home".into(),
        origin: Some("[filesystem] home = \"needed\"".into()),
        why: "not in the home's view: the sandbox's home holds only what `home_show` \
              (configuration, checked for secrets), `home_tools` (toolchains), the agent's state, \
              the caches and the project show; nothing else of the home is there, whatever the \
              host holds"
            .into(),
        notes: vec![
            "a shown file that holds a secret (a token, a password line) is hidden too".into(),
        ],
        allow_with: Some(format!(
            "[filesystem]\nhome_show = [{}]",
            cordon_policy::explain::toml_string(&tilde)
        )),
        ..Explanation::default()
    })
}

pub(super) fn filesystem(plan: &Plan, path: &Path, write: bool) -> Explanation {
    if let Some(x) = home_view(plan, path, if write { "write" } else { "read" }) {
        return x;
    }
    let sketch = crate::state::sketch(plan);
    let layout = cordon_sandbox::prepare_with_state(&plan.filesystem, &sketch.staged);
    let access = cordon_sandbox::explain::path_access(&layout, path);
    let fs = &plan.filesystem;
    let origin_of = |at: &Path| {
        [&fs.read_only, &fs.writable, &fs.readable]
            .iter()
            .flat_map(|v| v.iter())
            .find(|r| r.path == at)
            .map(|r| r.origin.clone())
    };
    let verb = if write { "write" } else { "read" };
    let mut x = Explanation {
        subject: format!("{verb} {}", path.display()),
        ..Explanation::default()
    };
    let writable_line = format!(
        "[filesystem]\nwritable = [{}]",
        cordon_policy::explain::toml_string(&path.display().to_string())
    );
    match access {
        PathAccess::Hidden { at, rule } => {
            x.decision = "deny";
            x.rule = format!("filesystem.deny {}", at.display());
            x.why = format!(
                "{} is masked: nothing of it is visible, and deny wins over readable and writable",
                at.display()
            );
            x.notes.push(
                "no readable or writable line added elsewhere re-opens a masked path".to_string(),
            );
            x.origin = Some(rule.into());
        }
        PathAccess::Absent => {
            x.decision = "deny";
            x.rule = "filesystem.readable".into();
            x.why = "no readable or writable rule puts it in the sandbox's view".into();
        }
        PathAccess::Writable { at } => {
            x.decision = "allow";
            x.allowed = true;
            x.rule = format!("filesystem.writable {}", at.display());
            x.origin = origin_of(&at);
            x.why = format!(
                "{} is bound read-write: writes reach the host",
                at.display()
            );
            if let Some(w) = sketch.watch.iter().find(|w| path.starts_with(w)) {
                x.rule = format!("state: host-executed name {}", w.display());
                x.origin = Some("[state] project_files = \"staged\"".into());
                x.why = format!(
                    "{} does not exist yet and is a name the host runs or loads: what the \
                     session makes there is taken off the host at exit and waits for review",
                    w.display()
                );
            }
        }
        PathAccess::Private { at } => {
            x.decision = "allow";
            x.allowed = true;
            let staged = sketch
                .staged
                .iter()
                .find(|s| cordon_sandbox::layout::normalize(s.path()) == at);
            copy_on_write(plan, path, &at, staged, write, &mut x);
        }
        PathAccess::ReadOnly { at } if !write => {
            x.decision = "allow";
            x.allowed = true;
            x.rule = format!("filesystem.readable {}", at.display());
            x.origin = origin_of(&at);
            x.why = format!("{} is visible read-only", at.display());
        }
        PathAccess::ReadOnly { at } => {
            let carve_out = fs.read_only.iter().any(|r| r.path == at);
            if !carve_out && plan.state.home == HomeMode::Overlay && path.starts_with(&plan.home) {
                x.decision = "allow";
                x.allowed = true;
                x.rule = "state.home overlay".into();
                x.origin = Some("[state] home = \"overlay\"".into());
                x.why = "the home is copy-on-write: writes land in the session's layer (agent \
                         state goes to review with `cordon state`, the rest is discarded at exit)"
                    .into();
                return x;
            }
            x.decision = "deny";
            x.rule = if carve_out {
                format!("filesystem.read_only {}", at.display())
            } else {
                format!("filesystem.readable {}", at.display())
            };
            x.origin = origin_of(&at);
            x.why = format!(
                "{} is visible read-only{}",
                at.display(),
                if carve_out {
                    " even inside a writable directory (files the host executes)"
                } else {
                    ""
                }
            );
            if !carve_out {
                x.allow_with = Some(writable_line);
            }
        }
    }
    x
}

/// The answer for a path under one of the session's own layers: the private `/tmp`, the
/// copy-on-write home, a cache, or a staged host-executed path.
fn copy_on_write(
    plan: &Plan,
    path: &Path,
    at: &Path,
    staged: Option<&Staged>,
    write: bool,
    x: &mut Explanation,
) {
    fn under<'a>(rules: &'a [PathRule], path: &Path) -> Option<&'a PathRule> {
        rules.iter().find(|r| path.starts_with(&r.path))
    }
    let agent_state = under(&plan.state.protect, path);
    match staged {
        None => {
            x.rule = format!("sandbox's own {}", at.display());
            x.origin = Some(cordon_events::Origin::BuiltIn);
            x.why = format!(
                "{} is the session's own: writes never reach the host",
                at.display()
            );
        }
        Some(Staged::Home { .. }) => {
            let whole = PathRule::new(at, "[filesystem] home = \"whole\"");
            let (rule, how) = if let Some(r) = agent_state {
                (r, "the agent's state, shown as it is")
            } else if let Some(r) = under(&plan.filesystem.home_tools, path) {
                (r, "a toolchain, shown as it is")
            } else if let Some(r) = under(&plan.filesystem.home_show, path) {
                (r, "a copy taken at the start, checked for secrets first")
            } else {
                (&whole, "the whole home is shown, minus what deny masks")
            };
            x.rule = format!("home {}", rule.path.display());
            x.origin = Some(rule.origin.clone());
            x.why = match (write, agent_state.is_some()) {
                (false, _) => format!("in the home's view: {how}"),
                (true, true) => "the home is copy-on-write: writes land in the session's layer, \
                                 and the agent's state waits for review at exit (`cordon state`)"
                    .into(),
                (true, false) => "the home is copy-on-write: writes land in the session's layer \
                                  and are discarded at exit"
                    .into(),
            };
        }
        Some(Staged::Cache { .. }) => {
            x.rule = format!("state.caches {}", at.display());
            x.origin = Some("[state] caches".into());
            x.why = "a cache of the project's own: what a session writes there is kept for this \
                     project's next session; the host's cache is never written"
                .into();
        }
        Some(_) if agent_state.is_some() => {
            x.rule = format!("state.protect {}", at.display());
            x.origin = agent_state.map(|r| r.origin.clone());
            x.why = "the agent's state, copy-on-write: changes wait for review at exit \
                     (`cordon state`)"
                .into();
        }
        Some(_) => {
            x.rule = format!("state: host-executed {}", at.display());
            x.origin = Some("[state] project_files = \"staged\"".into());
            let fate = match cordon_state::exit_fate(path) {
                ExitFate::AppliedUnasked => {
                    "git data that runs nothing: applied to the host at exit without asking \
                     (an object removed or rewritten waits for review)"
                }
                ExitFate::AppliedWhenInert => {
                    "applied at exit without asking when the change runs and hides nothing; \
                     otherwise FLAGGED, and it waits for review"
                }
                ExitFate::Flagged => "the host runs it: FLAGGED, and it waits for review at exit",
                ExitFate::Reviewed => "the host reads or runs it: changes wait for review at exit",
            };
            x.why = format!(
                "{} is copy-on-write (writes land in the session's layer); {fate}",
                at.display()
            );
        }
    }
}

/// `cordon check`'s `read_only` entries as a session treats them: under
/// `[state] project_files = "staged"` the project's host-executed files are copy-on-write
/// and reviewed at exit (or written in place, `.gitmodules`), not read-only; the note goes
/// beside each entry's origin.
pub(crate) fn annotate_read_only(plan: &mut Plan) {
    if plan.state.project_files != cordon_policy::ProjectFiles::Staged {
        return;
    }
    let sketch = crate::state::sketch(plan);
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    for r in &mut plan.filesystem.read_only {
        let path = real(&r.path);
        let staged = sketch.staged.iter();
        let note = if staged
            .clone()
            .any(|s| matches!(s, Staged::InPlace { path: p } if *p == r.path))
        {
            "in a session: writable in place (git renames over it); it runs nothing by itself, and changes are not reviewed"
        } else if staged.clone().any(|s| {
            matches!(s, Staged::Dir { path: p, .. } | Staged::File { path: p, .. }
                if path.starts_with(p))
        }) {
            "in a session: copy-on-write, its changes reviewed at exit"
        } else if sketch
            .watch
            .iter()
            .any(|w| path.starts_with(w) || r.path.starts_with(w))
        {
            "in a session: what is made here is taken off the host at exit and reviewed"
        } else {
            continue;
        };
        r.origin = format!("{}; {note}", r.origin).into();
    }
}
