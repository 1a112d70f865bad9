//! `cordon run`: one session from the command line to the exit review — init started early,
//! the policy loaded, the gateway, the HTTP layer and the state layer prepared beside each
//! other, the sandbox run, the summary and review at exit.

use std::io::Write;
use std::path::Path;
use std::time::SystemTime;

use anyhow::Result;

use cordon_events::{Action, AuditLog, Layer, NewEvent};
use cordon_policy::Loaded;

use crate::cli::RunArgs;
use crate::commands::{EXIT_SETUP, load_options, login_hint, resolve_project, session_approvals};
use crate::session_plan::{Parts, SessionPlan};
use crate::wire::{GatewayAttach, held_logins_line, start_gateway};

pub(crate) fn run(a: RunArgs) -> i32 {
    // Init is started first, while this process has one thread and has read nothing secret
    // (see `EarlyInit::start`), and its namespaces are made while the policy loads. Any
    // return before the session takes it kills it.
    let early = cordon_sandbox::EarlyInit::start();
    let project = match resolve_project(a.policy_args.project.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cordon: {}", crate::output::chain(&e));
            return EXIT_SETUP;
        }
    };
    let mut opts = load_options(a.policy.clone(), &a.policy_args, project.clone());
    // Without --profile, the command picks its agent's profile.
    opts.command = a
        .command
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    // On a thread of its own, so that this one sleeps meanwhile: where the kernel starts a new
    // task on its parent's CPU (docs/benchmarks.md, start-up's twelfth round), init's helper,
    // just forked, would otherwise wait until the policy is loaded.
    let loaded = std::thread::scope(|s| {
        s.spawn(|| cordon_policy::load(&opts))
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
    let loaded = match loaded {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{e}");
            return EXIT_SETUP;
        }
    };
    for w in &loaded.warnings {
        eprintln!("cordon: warning: {w}");
    }
    if let Some(h) = login_hint(&opts.command, &loaded) {
        eprintln!("cordon: {}", h.line());
    }

    let session = cordon_events::new_session_id();
    let audit_path = match a
        .audit
        .clone()
        .or_else(|| cordon_events::default_log_path(&session))
    {
        Some(p) => p,
        None => {
            eprintln!(
                "cordon: no place for the audit log: set HOME or XDG_STATE_HOME, or pass --audit FILE"
            );
            return EXIT_SETUP;
        }
    };
    let log = match AuditLog::create(&audit_path, &session) {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "cordon: cannot create the audit log: {e}; pass --audit FILE to put it elsewhere"
            );
            return EXIT_SETUP;
        }
    };
    // Kept until the session ends: the dashboard lives as long as the run.
    let _ui = match a.ui.then(|| crate::ui::for_run(&audit_path)).transpose() {
        Ok(ui) => ui,
        Err(e) => {
            eprintln!("cordon: {}", crate::output::chain(&e));
            return EXIT_SETUP;
        }
    };
    let verbose = a.verbose;
    let log = std::sync::Arc::new(log);
    // Started before the first event, so a collector sees the chain from its start; not at
    // all when an untrusted project policy loosens the user's (it is refused below, and its
    // `[audit]` could send the log, and the user's collector headers, where it likes).
    let export = match loaded.untrusted_loosening.is_empty() {
        true => crate::export::Export::start(&loaded.plan.audit, &log),
        false => Ok(crate::export::Export::off()),
    };
    let export = match export {
        Ok(x) => x,
        Err(e) => {
            eprintln!("cordon: audit export: {e}");
            return EXIT_SETUP;
        }
    };
    let export_log = log.clone();
    let lines = std::sync::Arc::new(crate::summary::Lines::new(
        a.quiet,
        verbose,
        audit_path.clone(),
    ));
    lines.quiet(&loaded.plan.agent);
    let tap = lines.clone();
    let quiet = loaded.plan.agent.clone();
    let denials = std::sync::Arc::new(crate::denials::DenialLines::new(a.quiet));
    let denials_tap = denials.clone();
    let learned = std::sync::Arc::new(crate::learn::Learned::new(a.learn));
    let learned_tap = learned.clone();
    let audit = log.health();
    let sink = audit_sink(log, verbose, tap, quiet, denials_tap, learned_tap);
    let emit = |ev: NewEvent| sink(ev);
    emit(start_event(&opts.command, &project, &loaded, a.learn));
    let code = run_in_session(&a, &project, &loaded, &session, early, &sink, &audit);
    export.note(&emit);
    emit(NewEvent::new(Layer::Session, Action::Stop, "session ended").detail("code", code));
    export.finish(&export_log);
    if !audit.writable() {
        let _ = writeln!(
            std::io::stderr(),
            "cordon: ERROR: the audit log could still not be written when the session ended: the events held since are lost, and the log has no stop event"
        );
    }
    denials.finish();
    lines.finish(code);
    learned.finish(&session);
    code
}

/// The session's audit sink: each event into the log, then to the exit summary's count, the
/// terminal's denial lines and, with `-v`, stderr. Shared with the egress gateway's threads. A
/// closed or broken stderr must not take the session down (eprintln! would panic).
fn audit_sink(
    log: std::sync::Arc<AuditLog>,
    verbose: bool,
    tap: std::sync::Arc<crate::summary::Lines>,
    quiet: cordon_policy::AgentPlan,
    denials_tap: std::sync::Arc<crate::denials::DenialLines>,
    learned_tap: std::sync::Arc<crate::learn::Learned>,
) -> cordon_net::Emit {
    // Said once per outage, not once per event: while the log cannot be written the layers
    // refuse what they would let out, and the events wait in memory.
    let failing = std::sync::atomic::AtomicBool::new(false);
    std::sync::Arc::new(
        move |ev: NewEvent| match log.emit(crate::redact::exec_event(ev)) {
            Ok(e) => {
                if failing.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    let _ = writeln!(
                        std::io::stderr(),
                        "cordon: the audit log can be written again; the events held meanwhile are in it (see its audit.unwritable event)"
                    );
                }
                if verbose {
                    let _ = writeln!(
                        std::io::stderr(),
                        "cordon: {}",
                        cordon_events::format_human(&e)
                    );
                }
                tap.observe(&e);
                learned_tap.observe(&e);
                if !crate::summary::is_quiet_denial(&quiet, &e) {
                    denials_tap.observe(&e);
                }
            }
            Err(e) => {
                if !failing.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    let _ = writeln!(
                        std::io::stderr(),
                        "cordon: ERROR: the audit log cannot be written ({e}): every new connection and request is refused until it can; events wait in memory (up to {})",
                        cordon_events::MAX_HELD
                    );
                }
            }
        },
    )
}

/// The session's first event: what runs, where, under which policy files and profile.
fn start_event(argv: &[String], project: &Path, loaded: &Loaded, learn: bool) -> NewEvent {
    let (profile, detected) = match &loaded.profile {
        Some(p) => (p.name.clone(), p.detected.clone().unwrap_or_default()),
        None => Default::default(),
    };
    NewEvent::new(Layer::Session, Action::Start, "session started")
        .detail("command", argv.to_vec())
        .detail("project", project.display().to_string())
        .detail(
            "policy_files",
            loaded
                .sources
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>(),
        )
        .detail("profile", profile)
        .detail("profile_detected", detected)
        .detail("uid", cordon_sandbox::ids().0)
        .detail("learn", learn)
        .detail("version", env!("CARGO_PKG_VERSION"))
}

/// What the start resolved beside the state layer: the gateway (when on), the ssh agent's
/// filter, and what they add to the session plan.
type BuiltBeside = (
    Option<Result<GatewayAttach>>,
    Option<cordon_ssh::AgentProxy>,
    crate::ssh::SshView,
);

fn run_in_session(
    a: &RunArgs,
    project: &Path,
    loaded: &Loaded,
    session: &str,
    early: cordon_sandbox::EarlyInit,
    sink: &cordon_net::Emit,
    audit: &cordon_events::AuditHealth,
) -> i32 {
    let emit = |ev: NewEvent| sink(ev);
    let emit: &dyn Fn(NewEvent) = &emit;
    if refuse_untrusted(loaded, emit) {
        return EXIT_SETUP;
    }
    let (plan, vm) = match resolve_plan(a, loaded, emit) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cordon: {e}");
            return EXIT_SETUP;
        }
    };
    let base = base_command(a, project, &plan, session);
    let gateway_on = plan.network.mode == cordon_policy::NetMode::Gateway;
    if gateway_on {
        cordon_sandbox::prefer_fresh_pages_for_large_allocations(cordon_net::FLOW_WINDOW_BYTES);
        cordon_sandbox::raise_nofile_limit();
    }
    // Init, cloned at the start, is told its network now: its side of it is built beside
    // everything below (the gateway's build, the state layer, the view), and any return
    // before the run kills it: nothing ran.
    let inward = !plan.publish.is_empty();
    let adopted =
        cordon_sandbox::adopt_init(Some(early), &plan, gateway_on.then_some(inward), emit);
    let mut unborn = match adopted {
        Ok(u) => u,
        Err(e) => {
            eprintln!("cordon: {e}");
            emit(NewEvent::new(Layer::Process, Action::Error, e.to_string()));
            return EXIT_SETUP;
        }
    };
    // The gateway, the CA, the credentials and the HTTP layer are built beside the state
    // layer's preparation (neither reads what the other makes) and joined before the session
    // plan is assembled, so the command never starts without them and a failure still ends
    // the run before it. So is the ssh agent's filter.
    // With the VM backend the gateway serves the guest's link, not the TUN of QEMU's sandbox.
    let gateway = gateway_on.then_some(vm.is_some());
    let building = build_beside(gateway, &plan, sink, audit, &base, a.quiet, session);
    let building = match building {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cordon: cannot start the egress gateway: no thread for it: {e}");
            return EXIT_SETUP;
        }
    };
    if let Err(e) = prepare_host(&plan, emit) {
        eprintln!("cordon: {e}");
        return EXIT_SETUP;
    }
    let prepared = match crate::state::begin(&plan, session, emit) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cordon: {}", crate::output::chain(&e));
            return EXIT_SETUP;
        }
    };
    // Init mounts the session's overlays while the rest of the view is made.
    if let Err(e) = unborn.prepare(&prepared.staged) {
        eprintln!("cordon: {e}");
        emit(NewEvent::new(Layer::Process, Action::Error, e.to_string()));
        return EXIT_SETUP;
    }
    // Held while the sandbox can still write its layers: accept/discard/restore refuse meanwhile.
    let running = match prepared
        .session
        .as_ref()
        .map(|s| s.hold_running())
        .transpose()
    {
        Ok(g) => g,
        Err(e) => {
            eprintln!("cordon: {e}");
            return EXIT_SETUP;
        }
    };
    let (gateway, ssh_agent, ssh) = building.join();
    let mut gateway = match gateway.transpose() {
        Ok(g) => g,
        Err(e) => {
            eprintln!(
                "cordon: cannot start the egress gateway: {}",
                crate::output::chain(&e)
            );
            return EXIT_SETUP;
        }
    };
    let whole = SessionPlan::assemble(plan, parts(gateway.as_mut(), ssh, &prepared), session);
    let (plan, cmd) = whole.into_run(base);
    let net = gateway
        .as_mut()
        .map(|g| g as &mut dyn cordon_sandbox::NetAttach);
    // What the session changes in its writable roots is known by ctime from here on.
    let started = SystemTime::now();
    let result = crate::vm::run(unborn, (&plan, &cmd), sink, net, vm.as_ref());
    // The sandbox is gone: nothing is left for the gateway to serve.
    drop(gateway);
    drop(ssh_agent);
    // The sandbox is gone: its layers can no longer change.
    drop(running);
    crate::state::strip_set_id(&plan, started, emit);
    held_logins_line(session);
    let trace = cmd.trace_home.as_ref().filter(|_| !a.learn);
    ended(result, &plan, prepared, trace, emit)
}

/// The session plan for this start (the host's part resolved, grants that ended said), with
/// the VM's options when the session runs in one.
fn resolve_plan(
    a: &RunArgs,
    loaded: &Loaded,
    emit: &dyn Fn(NewEvent),
) -> Result<(cordon_policy::Plan, Option<cordon_vm::host::VmOptions>), String> {
    let now = SystemTime::now();
    let resolved = crate::session_plan::resolve(loaded, a.learn, now, emit);
    crate::grants::say(&resolved.expired, now);
    crate::grants::log(&resolved.expired, emit);
    let plan = test_layers_off(resolved.plan, emit)?;
    let vm = crate::vm::options(a, &plan)?;
    Ok((plan, vm))
}

/// The session's end: the command's exit code and the state layer's review at exit, or, when
/// the sandbox could not run it, cordon's own failure with the unrun session's layers forgotten.
fn ended(
    result: Result<cordon_sandbox::Outcome, cordon_sandbox::SandboxError>,
    plan: &cordon_policy::Plan,
    prepared: crate::state::Prepared,
    trace: Option<&cordon_sandbox::HomeTrace>,
    emit: &dyn Fn(NewEvent),
) -> i32 {
    match result {
        Ok(outcome) => {
            let code = outcome.code();
            emit(
                NewEvent::new(
                    Layer::Process,
                    Action::Exit,
                    format!("command exited with {code}"),
                )
                .detail("code", code),
            );
            crate::state::finish(plan, &prepared, emit);
            drop(prepared);
            if let Some(t) = trace {
                crate::home::report_trace(t);
            }
            code
        }
        Err(e) => {
            eprintln!("cordon: {e}");
            emit(NewEvent::new(Layer::Process, Action::Error, e.to_string()));
            if let Some(s) = &prepared.session {
                forget_unrun(s);
            }
            EXIT_SETUP
        }
    }
}

/// Starts the gateway (when `gateway` is `Some(link)`: `link` when it serves a VM guest's link),
/// with the CA, the credentials and the HTTP layer, and the
/// ssh agent's filter, on a thread of their own (see `Beside`).
fn build_beside(
    gateway: Option<bool>,
    plan: &cordon_policy::Plan,
    sink: &cordon_net::Emit,
    audit: &cordon_events::AuditHealth,
    base: &cordon_sandbox::Command,
    quiet: bool,
    session: &str,
) -> std::io::Result<crate::beside::Beside<BuiltBeside>> {
    let (plan, sink, audit) = (plan.clone(), sink.clone(), audit.clone());
    let (asks, execs) = (base.approvals.clone(), base.execs.clone());
    let session = session.to_string();
    crate::beside::Beside::start(gateway.is_some(), move || -> BuiltBeside {
        // Rules keyed on programs read what the exec supervisor saw.
        let execs = execs.map(|e| -> cordon_net::ExecsOf {
            std::sync::Arc::new(move |pid, start| e.get(pid, start))
        });
        let g = gateway
            .map(|link| start_gateway(&plan, &sink, &audit, asks.as_ref(), execs, &session, link));
        if let Some(Err(_)) = &g {
            return (g, None, Default::default());
        }
        // Serves the sandbox's SSH_AUTH_SOCK until the sandbox is gone.
        let (ssh_agent, ssh) = crate::ssh::setup(&plan, &sink, quiet);
        (g, ssh_agent, ssh)
    })
}

/// Test-only layer switches (debug builds, `crate::layer_off`): before anything is enforced.
#[cfg(debug_assertions)]
fn test_layers_off(
    mut plan: cordon_policy::Plan,
    emit: &dyn Fn(NewEvent),
) -> Result<cordon_policy::Plan, String> {
    crate::layer_off::apply(&mut plan, emit).map(|()| plan)
}

/// A release binary has no layer switches.
#[cfg(not(debug_assertions))]
fn test_layers_off(
    plan: cordon_policy::Plan,
    _emit: &dyn Fn(NewEvent),
) -> Result<cordon_policy::Plan, String> {
    Ok(plan)
}

/// A project policy that loosens the user's own and is not trusted stops the run before
/// anything starts: said with the command that trusts it, and logged.
fn refuse_untrusted(loaded: &Loaded, emit: &dyn Fn(NewEvent)) -> bool {
    if loaded.untrusted_loosening.is_empty() {
        return false;
    }
    let mut msg =
        String::from("cordon: the project policy loosens your own policy and is not trusted:\n");
    let mut files: Vec<&Path> = Vec::new();
    for l in &loaded.untrusted_loosening {
        msg.push_str(&format!("  - {}: {}\n", l.file.display(), l.what));
        if !files.contains(&l.file.as_path()) {
            files.push(&l.file);
        }
    }
    for f in &files {
        msg.push_str(&format!(
            "Review it, then run `cordon trust {}` to allow it.\n",
            f.display()
        ));
    }
    eprint!("{msg}");
    emit(
        NewEvent::new(
            Layer::Session,
            Action::Deny,
            "untrusted project policy loosens the user's policy",
        )
        .rule("trust")
        .detail(
            "loosening",
            loaded
                .untrusted_loosening
                .iter()
                .map(|l| format!("{}: {}", l.file.display(), l.what))
                .collect::<Vec<_>>(),
        ),
    );
    true
}

/// What to run, where and how: the sandbox's command before the session plan's view is
/// added (`SessionPlan::command`).
fn base_command(
    a: &RunArgs,
    project: &Path,
    plan: &cordon_policy::Plan,
    session: &str,
) -> cordon_sandbox::Command {
    let cwd = std::env::current_dir()
        .ok()
        .and_then(|c| c.canonicalize().ok())
        .unwrap_or_else(|| project.to_path_buf());
    cordon_sandbox::Command {
        argv: a.command.clone(),
        cwd,
        tty: if a.no_tty {
            cordon_sandbox::TtyMode::Never
        } else {
            cordon_sandbox::TtyMode::Auto
        },
        session: session.to_string(),
        approvals: session_approvals(plan, session),
        staged: Vec::new(),
        shown: Vec::new(),
        placed: Vec::new(),
        sockets: Vec::new(),
        bound: Vec::new(),
        signals_to: None,
        trace_home: ((a.trace_home || a.learn)
            && plan.filesystem.home == cordon_policy::HomeView::Needed)
            .then(crate::home::home_dir)
            .flatten()
            .map(|home| cordon_sandbox::HomeTrace {
                home,
                found: Default::default(),
            }),
        // Rules keyed on programs tell an interpreter's script by the exec the supervisor saw.
        execs: plan.names_programs().then(cordon_sandbox::ExecsSeen::new),
    }
}

/// What the host needs before the sandbox: the writable paths that do not exist yet, and
/// cordon's own state directories. cordon's own state (audit logs, copy-on-write layers and
/// snapshots, broker sockets) is never visible inside: snapshots hold hard links to files a
/// deny rule hides elsewhere. Its cache layers too: a session must not reach another's.
fn prepare_host(plan: &cordon_policy::Plan, emit: &dyn Fn(NewEvent)) -> Result<(), String> {
    let notes = crate::home::create_missing_writable(plan)
        .map_err(|e| crate::output::chain(&e).to_string())?;
    for n in notes {
        eprintln!("cordon: {n}");
        emit(NewEvent::new(Layer::Filesystem, Action::Apply, n));
    }
    let own = cordon_events::state_dir().into_iter();
    for dir in own.chain(cordon_state::cache_dir()) {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// The session plan's parts that the start resolved: the credentials' placeholders and masked
/// files, the HTTP layer's presence, the ssh agent's socket and files, and the state layer's
/// view.
fn parts(
    gateway: Option<&mut GatewayAttach>,
    ssh: crate::ssh::SshView,
    prepared: &crate::state::Prepared,
) -> Parts {
    let (env, mut shown, http_layer) = match gateway {
        Some(g) => (
            std::mem::take(&mut g.env),
            std::mem::take(&mut g.shown),
            g.bundle.is_some(),
        ),
        None => Default::default(),
    };
    shown.extend(ssh.shown);
    Parts {
        env,
        masked: prepared.masked.clone(),
        staged: prepared.staged.clone(),
        shown,
        sockets: ssh.sockets,
        http_layer,
    }
}

/// A session whose command never ran: its empty layers are not worth a review, and the next
/// start tries the home's overlay afresh, whatever failed.
fn forget_unrun(s: &cordon_state::Session) {
    let _ = s.discard();
    let _ = s.forget();
    if s.home.is_some()
        && let Some(root) = cordon_state::StateStore::default_root()
    {
        crate::home::forget_probe(&root);
    }
}
