//! One function per subcommand: gather inputs, call the layer crates, print, pick an exit code.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::CommandFactory;
use cordon_events::{Action, AuditLog, Layer, NewEvent};
use cordon_policy::{LoadOptions, Loaded, TrustStore};

use crate::cli::{Cli, Cmd, LogArgs, PolicyArgs, RunArgs, TrustArgs};
pub(crate) use crate::project::{PolicyProject, resolve_policy_project, resolve_project};

/// cordon's own failure before the command started.
pub(crate) const EXIT_SETUP: i32 = 125;
pub(crate) const EXIT_USAGE: i32 = 2;

pub fn dispatch(cmd: Cmd) -> i32 {
    match cmd {
        Cmd::Run(a) => run(a),
        Cmd::Check(a) => crate::check::check(a),
        Cmd::Explain(a) => crate::explain::explain(a),
        Cmd::Init(a) => crate::init::init(a),
        Cmd::Doctor => crate::doctor::doctor(),
        Cmd::Trust(a) => report(trust(a)),
        Cmd::Log(a) => match log(a) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("cordon: {}", crate::output::chain(&e));
                1
            }
        },
        Cmd::Approve(a) => report(crate::approve::approve(a)),
        Cmd::Ui => report(crate::ui::ui()),
        Cmd::Replay(a) => crate::replay::replay(a),
        Cmd::Policy(crate::cli::PolicyCmd::Suggest { sessions }) => {
            crate::replay::suggest(&sessions)
        }
        Cmd::State(c) => crate::state::command(c),
        Cmd::Cache(c) => crate::home::cache_command(c),
        Cmd::Mcp(c) => crate::mcp::command(c),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "cordon", &mut std::io::stdout());
            0
        }
        Cmd::Man { dir } => man(dir.as_deref()),
    }
}

/// The man page on stdout, or every page (one per subcommand) written into `dir`.
fn man(dir: Option<&Path>) -> i32 {
    let done = match dir {
        None => clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()),
        Some(d) => clap_mangen::generate_to(Cli::command(), d),
    };
    match done {
        Ok(()) => 0,
        Err(e) => {
            let at = dir
                .map(|d| format!(" into {}", d.display()))
                .unwrap_or_default();
            eprintln!("cordon: man: cannot write the pages{at}: {e}");
            1
        }
    }
}

fn report(r: Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cordon: {}", crate::output::chain(&e));
            1
        }
    }
}

pub(crate) fn home() -> PathBuf {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| cordon_sandbox::passwd_home(cordon_sandbox::ids().0))
        .unwrap_or_else(|| PathBuf::from("/"))
}

fn xdg(var: &str, fallback: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home().join(fallback))
}

fn trust_store() -> TrustStore {
    TrustStore::new(xdg("XDG_DATA_HOME", ".local/share").join("cordon/trusted.json"))
}

/// The login `argv` starts that cannot be brokered inside, under the active profile.
pub(crate) fn login_hint(
    argv: &[String],
    loaded: &Loaded,
) -> Option<cordon_policy::login_hint::LoginHint> {
    let profile = loaded.profile.as_ref()?;
    let host = cordon_policy::login_hint::HostLogins::read(&home(), &|n| std::env::var(n).ok());
    cordon_policy::login_hint::login_hint(
        argv,
        &profile.name,
        &host,
        &cordon_policy::detect::package_of,
    )
}

/// [`load_options`] for reading a policy (`check`, `explain`), with or without a project.
pub(crate) fn policy_load_options(
    policy: Option<PathBuf>,
    args: &PolicyArgs,
    project: PolicyProject,
) -> LoadOptions {
    let mut o = load_options(policy, args, project.dir);
    o.no_project = project.none;
    // `cordon check ~/.config/cordon/cordon.toml` reads the user's file: once, not merged
    // over itself.
    let same = |x: &Path, y: &Path| {
        x.canonicalize()
            .ok()
            .is_some_and(|c| y.canonicalize().ok() == Some(c))
    };
    if let (Some(f), Some(u)) = (&o.policy_file, &o.user_config)
        && same(f, u)
    {
        o.user_config = None;
    }
    o
}

pub(crate) fn load_options(
    policy: Option<PathBuf>,
    args: &PolicyArgs,
    project: PathBuf,
) -> LoadOptions {
    let home = home();
    let passwd_home = cordon_sandbox::passwd_home(cordon_sandbox::ids().0).filter(|p| *p != home);
    LoadOptions {
        project_dir: project,
        no_project: false,
        home,
        passwd_home,
        policy_file: policy,
        user_config: Some(xdg("XDG_CONFIG_HOME", ".config").join("cordon/cordon.toml")),
        profile: args.profile.clone(),
        command: Vec::new(),
        trust_store: trust_store().path().to_path_buf(),
        own_dirs: own_dirs(),
    }
}

/// The session's one approval broker, when a layer may ask a person: every layer puts its
/// questions to it, so `cordon approve` shows the session once. Without it, `ask` denies.
fn session_approvals(
    plan: &cordon_policy::Plan,
    session: &str,
) -> Option<cordon_approval::Approvals> {
    use cordon_policy::{DlpAction, ExecAction, HttpAction, JudgeOnError};
    let asks = plan.exec.rules.iter().any(|r| r.action == ExecAction::Ask)
        || plan.http.default == HttpAction::Ask
        || plan.http.rules.iter().any(|r| r.action == HttpAction::Ask)
        || plan.dlp.action == DlpAction::Ask
        || plan
            .judge
            .as_ref()
            .is_some_and(|j| j.on_error == JudgeOnError::Ask);
    if !asks {
        return None;
    }
    let dir = cordon_approval::default_dir()?;
    match cordon_approval::Approvals::start(&dir, session) {
        Ok(a) => Some(a),
        Err(e) => {
            eprintln!("cordon: warning: no approval broker ({e}): `ask` decisions deny");
            None
        }
    }
}

/// cordon's own directories, masked in every sandbox (the loader puts them in the plan):
/// snapshots hold hard links to files a deny rule hides elsewhere, cache layers belong to
/// every session, the data directory holds the CA's key, brokers take approvals.
pub(crate) fn own_dirs() -> Vec<(PathBuf, &'static str)> {
    let mut v = Vec::new();
    v.extend(cordon_events::state_dir().map(|d| (d, "own state")));
    v.extend(cordon_state::cache_dir().map(|d| (d, "own caches")));
    v.extend(cordon_events::data_dir().map(|d| (d, "CA and data")));
    v.extend(cordon_approval::default_dir().map(|d| (d, "approval brokers")));
    v
}

fn run(a: RunArgs) -> i32 {
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
    let mut loaded = match loaded {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{e}");
            return EXIT_SETUP;
        }
    };
    loaded.plan.learning = a.learn;
    // Rules that end are judged once, here: one that ends while the session runs holds.
    let expired = crate::grants::expire(&mut loaded.plan, std::time::SystemTime::now());
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
    emit(start_event(&opts.command, &project, &loaded));
    crate::grants::log(&expired, &emit);
    let code = run_in_session(&a, &project, &loaded, &session, early, &sink, &audit);
    emit(NewEvent::new(Layer::Session, Action::Stop, "session ended").detail("code", code));
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
fn start_event(argv: &[String], project: &Path, loaded: &Loaded) -> NewEvent {
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
        .detail("learn", loaded.plan.learning)
        .detail("version", env!("CARGO_PKG_VERSION"))
}

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
    if !loaded.untrusted_loosening.is_empty() {
        let mut msg = String::from(
            "cordon: the project policy loosens your own policy and is not trusted:\n",
        );
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
        return EXIT_SETUP;
    }
    let cwd = std::env::current_dir()
        .ok()
        .and_then(|c| c.canonicalize().ok())
        .unwrap_or_else(|| project.to_path_buf());
    let cmd = cordon_sandbox::Command {
        argv: a.command.clone(),
        cwd,
        tty: if a.no_tty {
            cordon_sandbox::TtyMode::Never
        } else {
            cordon_sandbox::TtyMode::Auto
        },
        session: session.to_string(),
        approvals: session_approvals(&loaded.plan, session),
        staged: Vec::new(),
        shown: Vec::new(),
        placed: Vec::new(),
        sockets: Vec::new(),
        trace_home: ((a.trace_home || a.learn)
            && loaded.plan.filesystem.home == cordon_policy::HomeView::Needed)
            .then(crate::home::home_dir)
            .flatten()
            .map(|home| cordon_sandbox::HomeTrace {
                home,
                found: Default::default(),
            }),
        // Rules keyed on programs tell an interpreter's script by the exec the supervisor saw.
        execs: loaded
            .plan
            .names_programs()
            .then(cordon_sandbox::ExecsSeen::new),
    };
    let mut cmd = cmd;
    let mut plan = loaded.plan.clone();
    // Registry tokens of the home's shown configuration: placeholders inside.
    crate::home::add_home_credentials(&mut plan);
    // Local MCP servers of the agents' configs: their spawns tagged, held or refused.
    crate::mcp::stdio(&mut plan, emit);
    // Test-only layer switches (debug builds): before anything is enforced.
    #[cfg(debug_assertions)]
    if let Err(e) = crate::layer_off::apply(&mut plan, emit) {
        eprintln!("cordon: {e}");
        return EXIT_SETUP;
    }
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
    // The gateway, the CA and the HTTP layer are built beside the state layer's preparation
    // (neither reads what the other makes) and joined before the sandbox's spec is made, so
    // the command never starts without them and a failure still ends the run before it.
    // So are the ssh agent's filter and the session's own policy files, which read the plan
    // as the gateway leaves it.
    let (sink2, audit2, asks) = (sink.clone(), audit.clone(), cmd.approvals.clone());
    let (quiet, session2, mut scratch) = (a.quiet, session.to_string(), cmd.clone());
    let building = crate::beside::Beside::start(gateway_on, move || {
        let g =
            gateway_on.then(|| start_gateway(&mut plan, &sink2, &audit2, asks.as_ref(), &session2));
        if let Some(Err(_)) = &g {
            return (plan, g, None, scratch);
        }
        if let Some(Ok(g)) = &g {
            scratch.shown.clone_from(&g.shown);
            if let Some(execs) = scratch.execs.clone() {
                g.gateway
                    .set_execs(std::sync::Arc::new(move |pid, start| execs.get(pid, start)));
            }
        }
        // Serves the sandbox's SSH_AUTH_SOCK until the sandbox is gone.
        let ssh_agent = crate::ssh::setup(&mut plan, &sink2, quiet, &mut scratch);
        // The session's own policy, for `cordon explain` inside (secrets redacted).
        let http_layer = matches!(&g, Some(Ok(g)) if g.bundle.is_some());
        scratch.placed = crate::explain::placed_files(&plan, &session2, http_layer);
        (plan, g, ssh_agent, scratch)
    });
    let building = match building {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cordon: cannot start the egress gateway: no thread for it: {e}");
            return EXIT_SETUP;
        }
    };
    match crate::home::create_missing_writable(&loaded.plan) {
        Ok(notes) => {
            for n in notes {
                eprintln!("cordon: {n}");
                emit(NewEvent::new(Layer::Filesystem, Action::Apply, n));
            }
        }
        Err(e) => {
            eprintln!("cordon: {}", crate::output::chain(&e));
            return EXIT_SETUP;
        }
    }
    let prepared = match crate::state::begin(&loaded.plan, session, emit) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cordon: {}", crate::output::chain(&e));
            return EXIT_SETUP;
        }
    };
    let staged = &prepared.session;
    cmd.staged.clone_from(&prepared.staged);
    // Init mounts the session's overlays while the rest of the view is made.
    if let Err(e) = unborn.prepare(&cmd.staged) {
        eprintln!("cordon: {e}");
        emit(NewEvent::new(Layer::Process, Action::Error, e.to_string()));
        return EXIT_SETUP;
    }
    // Held while the sandbox can still write its layers: accept/discard/restore refuse meanwhile.
    let mut running = None;
    if let Some(s) = staged {
        match s.hold_running() {
            Ok(g) => running = Some(g),
            Err(e) => {
                eprintln!("cordon: {e}");
                return EXIT_SETUP;
            }
        }
    }
    // cordon's own state (audit logs, copy-on-write layers and snapshots, broker sockets) is
    // never visible inside: snapshots hold hard links to files a deny rule hides elsewhere.
    // Its cache layers too: a session must not reach another's through them.
    let own = cordon_events::state_dir().into_iter();
    for dir in own.chain(cordon_state::cache_dir()) {
        use std::os::unix::fs::DirBuilderExt;
        let made = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir);
        if let Err(e) = made {
            eprintln!("cordon: cannot create {}: {e}", dir.display());
            return EXIT_SETUP;
        }
    }
    let (mut plan, gateway, ssh_agent, built) = building.join();
    // The agent's own files that hold a secret: masked where its state is shown.
    for p in &prepared.masked {
        plan.filesystem.deny.push(cordon_policy::PathRule::new(
            p,
            "the home's view: holds a secret",
        ));
    }
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
    cmd.shown = built.shown;
    cmd.sockets = built.sockets;
    cmd.placed = built.placed;
    let net = gateway
        .as_mut()
        .map(|g| g as &mut dyn cordon_sandbox::NetAttach);
    // What the session changes in its writable roots is known by ctime from here on.
    let started = std::time::SystemTime::now();
    let result = unborn.run(&plan, &cmd, emit, net);
    // The sandbox is gone: nothing is left for the gateway to serve.
    drop(gateway);
    drop(ssh_agent);
    // The sandbox is gone: its layers can no longer change.
    drop(running);
    crate::state::strip_set_id(&loaded.plan, started, emit);
    held_logins_line(session);
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
            crate::state::finish(&loaded.plan, &prepared, emit);
            drop(prepared);
            if let Some(t) = cmd.trace_home.as_ref().filter(|_| !a.learn) {
                crate::home::report_trace(t);
            }
            code
        }
        Err(e) => {
            eprintln!("cordon: {e}");
            emit(NewEvent::new(Layer::Process, Action::Error, e.to_string()));
            if let Some(s) = staged {
                // Nothing ran; the empty session is not worth a review.
                let _ = s.discard();
                let _ = s.forget();
                // Whatever failed, the next start tries the home's overlay afresh.
                if s.home.is_some()
                    && let Some(root) = cordon_state::StateStore::default_root()
                {
                    crate::home::forget_probe(&root);
                }
            }
            EXIT_SETUP
        }
    }
}

/// At exit, the login files the session's token exchanges were held in instead of the host's
/// (see `cordon_http::credentials::refresh`), so the user hears of them once more.
fn held_logins_line(session: &str) {
    let Some(dir) = cordon_events::state_dir().map(|d| d.join("held-logins").join(session)) else {
        return;
    };
    let held: Vec<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().display().to_string())
        .collect();
    if !held.is_empty() {
        eprintln!(
            "cordon: a login made or renewed in the session was not written to your login \
             files (it may be another account's); held in {}: review it and copy it over the \
             login file to use it on the host",
            held.join(", ")
        );
    }
}

/// The host's variables that look like secrets, by value (for secret scanning); those that
/// are a credential's value are known through the credential already.
fn host_secrets(credentials: &[cordon_http::WireCredential]) -> Vec<cordon_http::dlp::Known> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .map(|(k, v)| (k, v.trim().to_string()))
        .filter(|(k, v)| {
            cordon_http::dlp::secret_variable(k, v) && !credentials.iter().any(|c| &c.real == v)
        })
        .map(|(name, value)| cordon_http::dlp::Known {
            name,
            value,
            hosts: Vec::new(),
        })
        .collect()
}

/// A built-in profile's key variable the user has not set: that agent is used another way (a
/// login, another provider), so its credential is simply absent, without a warning.
fn unset_built_in(c: &cordon_policy::CredentialPlan) -> bool {
    let unset = |v: &str| std::env::var_os(v).is_none();
    // A login file without this token (no file, an API-key login): nothing to hide.
    c.origin == "built-in"
        && match &c.source {
            cordon_policy::CredentialSource::Env(v) => unset(v),
            cordon_policy::CredentialSource::Json { file, .. } => {
                cordon_http::credentials::login::absent_or_json(file)
            }
            _ => false,
        }
}

/// What [`resolve_credentials`] gives: the credentials at the wire, the masked copies of
/// their files, the host's secret-looking variables, and the logins whose token exchanges
/// are brokered.
type Resolved = (
    Vec<cordon_http::WireCredential>,
    Vec<(PathBuf, String)>,
    Vec<cordon_http::dlp::Known>,
    Option<cordon_http::credentials::refresh::Logins>,
);

/// Reads each `[credentials.NAME]` source on the host, makes the session's placeholder for it,
/// and puts the placeholder (never the value) in the sandbox's environment and in masked
/// copies of the files credentials list (returned: path, content). A source that does not
/// resolve is a warning: that credential is simply absent inside. A file is shown only when
/// every credential listing it had its value replaced there and nothing secret is left in it
/// (no token shape, no other known value); otherwise it stays hidden, with a warning. Also
/// returns the host's secret-looking variables (read once, for secret scanning too).
fn resolve_credentials(
    plan: &mut cordon_policy::Plan,
    sink: &cordon_net::Emit,
    session: &str,
) -> Resolved {
    let mut out: Vec<cordon_http::WireCredential> = Vec::new();
    let key = match plan.credentials.is_empty() {
        true => None,
        false => placeholder_key(sink),
    };
    // Logins renewed (or first made) inside: brokered whether or not their file exists yet.
    // An exchange that is not a refresh of the host's own login is held in cordon's state
    // (never visible inside), not written to the host's login file.
    let held = cordon_events::state_dir().map(|d| d.join("held-logins").join(session));
    let logins = key
        .clone()
        .and_then(|k| cordon_http::credentials::refresh::Logins::new(k, &plan.credentials))
        .map(|l| match held {
            Some(d) => l.with_held_dir(d),
            None => l,
        });
    for c in plan.credentials.clone() {
        let Some(key) = &key else { break };
        let wire = match cordon_http::credentials::resolve(&c, key) {
            Ok(w) => w,
            Err(_) if unset_built_in(&c) => continue,
            Err(e) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "cordon: warning: {e}; it is absent in the sandbox"
                );
                sink(
                    NewEvent::new(
                        Layer::Credentials,
                        Action::Degraded,
                        format!("credential `{}` did not resolve", c.name),
                    )
                    .rule(format!("credentials.{}", c.name)),
                );
                continue;
            }
        };
        if let Some(env) = &c.env {
            plan.env.set.insert(env.clone(), wire.placeholder.clone());
        }
        let hosts: Vec<String> = c.hosts.iter().map(ToString::to_string).collect();
        sink(
            NewEvent::new(
                Layer::Credentials,
                Action::Apply,
                format!(
                    "credential `{}`: the sandbox holds a placeholder; the real value goes only to {} in {}",
                    c.name,
                    hosts.join(", "),
                    wire.place()
                ),
            )
            .rule(format!("credentials.{}", c.name)),
        );
        out.push(wire);
    }
    // Masked copies: one per file, every credential's value replaced.
    let mut files: Vec<(PathBuf, Vec<String>)> = Vec::new();
    for c in &plan.credentials {
        // A login file is shown when a token of it resolved (otherwise it holds none).
        let login = c
            .source
            .login_file()
            .filter(|_| out.iter().any(|w| w.name == c.name));
        for f in c.files.iter().map(PathBuf::as_path).chain(login) {
            match files.iter_mut().find(|(p, _)| p == f) {
                Some((_, names)) => names.push(c.name.clone()),
                None => files.push((f.to_path_buf(), vec![c.name.clone()])),
            }
        }
    }
    let host = host_secrets(&out);
    let mut shown = Vec::new();
    if files.is_empty() {
        return (out, shown, host, logins);
    }
    let mut known: Vec<cordon_http::dlp::Known> = out
        .iter()
        .map(|c| cordon_http::dlp::Known {
            name: c.name.clone(),
            value: c.real.clone(),
            hosts: Vec::new(),
        })
        .collect();
    known.extend(host.iter().cloned());
    let placeholders: Vec<String> = out.iter().map(|c| c.placeholder.clone()).collect();
    let leftover =
        cordon_http::dlp::Scanner::new(known, Vec::new()).ignoring_placeholders(&placeholders);
    for (path, names) in files {
        let masked = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|mut text| {
                for name in &names {
                    let c = out
                        .iter()
                        .find(|c| &c.name == name)
                        .ok_or_else(|| format!("credential `{name}` did not resolve"))?;
                    if !text.contains(&c.real) {
                        return Err(format!(
                            "it does not hold credential `{name}`'s value as written"
                        ));
                    }
                    text = text.replace(&c.real, &c.placeholder);
                }
                let fields: Vec<(&str, &str)> = plan
                    .credentials
                    .iter()
                    .filter(|c| names.contains(&c.name))
                    .filter_map(|c| match &c.source {
                        cordon_policy::CredentialSource::Json { file, field } if *file == path => {
                            let w = out.iter().find(|w| w.name == c.name)?;
                            Some((field.as_str(), w.placeholder.as_str()))
                        }
                        _ => None,
                    })
                    .collect();
                if !fields.is_empty() {
                    cordon_http::credentials::login::check_masked(&text, &fields)?;
                }
                // A YAML login's field holds exactly its placeholder once replaced.
                for c in plan.credentials.iter().filter(|c| names.contains(&c.name)) {
                    if let cordon_policy::CredentialSource::Yaml { file, field } = &c.source
                        && *file == path
                        && let Some(w) = out.iter().find(|w| w.name == c.name)
                        && cordon_http::credentials::login::yaml_value(&text, field).as_deref()
                            != Some(w.placeholder.as_str())
                    {
                        return Err(format!(
                            "field {field} does not hold its placeholder in the masked copy"
                        ));
                    }
                }
                let left = leftover.scan(text.as_bytes(), cordon_http::dlp::Place::Body);
                if let Some(f) = left.first() {
                    return Err(format!(
                        "it holds another secret ({}), which no credential covers",
                        f.kind
                    ));
                }
                Ok(text)
            });
        match masked {
            Ok(content) => shown.push((path, content)),
            Err(why) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "cordon: warning: {} stays hidden: {why}",
                    path.display()
                );
                sink(
                    NewEvent::new(
                        Layer::Credentials,
                        Action::Degraded,
                        format!(
                            "no masked copy of {} ({why}); it stays hidden",
                            path.display()
                        ),
                    )
                    .rule(format!("credentials.{}", names.join(","))),
                );
            }
        }
    }
    (out, shown, host, logins)
}

/// Where the user's placeholder secret lives: beside the CA, in the data directory that every
/// sandbox has masked.
pub(crate) fn placeholder_key_path() -> Option<PathBuf> {
    cordon_events::data_dir().map(|d| d.join("credentials").join("placeholder.key"))
}

/// The user's placeholder secret (made on first use), so a credential keeps its placeholder
/// from one session to the next. Without it, one for this session only, said in a warning
/// and an event; `None` only when not even that can be had (credentials are then absent).
fn placeholder_key(sink: &cordon_net::Emit) -> Option<cordon_http::credentials::PlaceholderKey> {
    use cordon_http::credentials::PlaceholderKey;
    let why = match placeholder_key_path().map(|p| PlaceholderKey::load_or_create(&p)) {
        Some(Ok(k)) => return Some(k),
        Some(Err(e)) => e.to_string(),
        None => "no data directory (set HOME or XDG_DATA_HOME)".to_string(),
    };
    let _ = writeln!(
        std::io::stderr(),
        "cordon: warning: {why}; credential placeholders are new this session"
    );
    sink(NewEvent::new(
        Layer::Credentials,
        Action::Degraded,
        format!("placeholders last this session only: {why}"),
    ));
    match PlaceholderKey::ephemeral() {
        Ok(k) => Some(k),
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "cordon: warning: no random source for placeholders ({e}); credentials are absent in the sandbox"
            );
            None
        }
    }
}

/// The HTTP layer as the gateway's flow handler: the one place layer 2 hands flows to layer
/// 3 (neither crate knows the other; they meet here).
struct HttpFlows(std::sync::Arc<cordon_http::HttpLayer>);

impl cordon_net::FlowHandler for HttpFlows {
    fn serve(
        &self,
        stream: Box<dyn cordon_net::FlowIo>,
        to: cordon_net::FlowTarget,
    ) -> cordon_net::FlowFuture {
        let layer = self.0.clone();
        Box::pin(async move {
            let (name, port, owner) = (to.name, to.port, to.owner);
            match to.kind {
                cordon_net::FlowKind::Tls => layer.serve_tls(stream, name, port, owner).await,
                cordon_net::FlowKind::Plain => layer.serve_plain(stream, name, port, owner).await,
            }
        })
    }

    fn redact(&self, text: &str) -> String {
        self.0.redact(text)
    }

    fn refuse(
        &self,
        stream: Box<dyn cordon_net::FlowIo>,
        to: cordon_net::FlowTarget,
        denial: cordon_net::FlowDenial,
    ) -> cordon_net::FlowFuture {
        let layer = self.0.clone();
        let denied = cordon_http::Denied {
            rule: denial.rule,
            reason: denial.reason,
            allow_with: denial.allow_with,
        };
        Box::pin(async move { layer.refuse_tls(stream, to.name, to.port, denied).await })
    }
}

/// The sandbox's trust bundle: a file beside the CA (masked in every sandbox), made again only
/// when the host's roots or the CA change, so a start neither reads nor sends ~220 KB of
/// roots. When that file cannot be made the bundle is built in memory, as before.
fn trust_bundle(
    dir: &Path,
    ca: &cordon_http::CertAuthority,
    sink: &cordon_net::Emit,
) -> cordon_sandbox::TrustBundle {
    match cordon_sandbox::bundle_file(dir, ca.cert_pem()) {
        Ok(file) => cordon_sandbox::TrustBundle::File(file),
        Err(e) => {
            sink(NewEvent::new(
                Layer::Http,
                Action::Log,
                format!(
                    "the sandbox's trust bundle is built at each start: cannot keep it in {}: {e}",
                    dir.display()
                ),
            ));
            cordon_sandbox::TrustBundle::Inline(cordon_sandbox::bundle_pem(ca.cert_pem()))
        }
    }
}

/// The egress gateway as the sandbox crate sees it.
struct GatewayAttach {
    gateway: cordon_net::Gateway,
    emit: cordon_net::Emit,
    /// The sandbox's trust bundle when the HTTP layer intercepts.
    bundle: Option<cordon_sandbox::TrustBundle>,
    /// Masked copies of credential files.
    shown: Vec<(PathBuf, String)>,
}

/// The gateway, with the HTTP layer when cordon's CA can be had (made on first use under the
/// data directory, which no sandbox sees). Without it, HTTPS is decided per connection only,
/// said loudly.
fn start_gateway(
    plan: &mut cordon_policy::Plan,
    sink: &cordon_net::Emit,
    audit: &cordon_events::AuditHealth,
    approvals: Option<&cordon_approval::Approvals>,
    session: &str,
) -> Result<GatewayAttach> {
    // Command lines in events are redacted by token shape until the HTTP layer, which knows
    // the credentials' values too, takes over.
    let redact: cordon_net::Redact =
        std::sync::Arc::new(|s: &str| cordon_http::dlp::redact(s).into_owned());
    let gateway = cordon_net::Gateway::new(plan, sink.clone(), redact)?;
    // A decision nobody could audit is not made: new flows and requests are refused while
    // the log cannot be written.
    gateway.watch_audit(audit.clone());
    // The data directory is masked in every sandbox (the plan says so): the CA key is safe there.
    let ca = cordon_events::data_dir()
        .ok_or_else(|| anyhow!("no data directory (set HOME or XDG_DATA_HOME)"))
        .and_then(|d| {
            let dir = d.join("ca");
            let ca = cordon_http::CertAuthority::load_or_create(&dir)?;
            Ok((ca, dir))
        });
    match ca {
        Ok((ca, ca_dir)) => {
            let ca = std::sync::Arc::new(ca);
            let bundle = trust_bundle(&ca_dir, &ca, sink);
            // `ask` decisions go to the session's one broker, the exec layer's too.
            let ask = approvals.map(|a| cordon_http::AskConfig {
                approvals: a.clone(),
                timeout: Duration::from_secs(plan.exec.ask_timeout_secs),
            });
            let (credentials, shown, host_secrets, logins) =
                resolve_credentials(plan, sink, session);
            // Secret scanning also looks for the host's secret-looking variables by value.
            let layer = cordon_http::HttpLayer::from_plan(
                plan,
                ca,
                ask,
                credentials,
                host_secrets,
                sink.clone(),
                gateway.connector(),
            )
            .context("start the HTTP layer")?;
            layer.watch_audit(audit.clone());
            crate::mcp::govern(&layer, plan)?;
            if let Some(l) = logins {
                layer.broker_logins(l);
            }
            let layer = std::sync::Arc::new(layer);
            crate::redact::know(layer.clone());
            let gateway = gateway.with_http(std::sync::Arc::new(HttpFlows(layer)));
            sink(NewEvent::new(
                Layer::Http,
                Action::Apply,
                "HTTP layer: each request decided by rule; HTTPS intercepted with cordon's CA",
            ));
            Ok(GatewayAttach {
                gateway,
                emit: sink.clone(),
                bundle: Some(bundle),
                shown,
            })
        }
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "cordon: warning: no HTTPS inspection ({}); HTTP(S) is decided by host and port only",
                crate::output::chain(&e)
            );
            sink(NewEvent::new(
                Layer::Http,
                Action::Degraded,
                format!("no HTTPS inspection: {}", crate::output::chain(&e)),
            ));
            Ok(GatewayAttach {
                gateway,
                emit: sink.clone(),
                bundle: None,
                shown: Vec::new(),
            })
        }
    }
}

impl cordon_sandbox::NetAttach for GatewayAttach {
    fn attach(&mut self, h: cordon_sandbox::NetHandoff) -> Result<(), String> {
        let tun = match h.tun {
            Ok(fd) => {
                (self.emit)(NewEvent::new(
                    Layer::Network,
                    Action::Apply,
                    "egress gateway: every TCP flow and DNS query goes through cordon",
                ));
                Some(fd)
            }
            Err(reason) => {
                // Still fenced: without the TUN there is no route out at all, only the proxy.
                let _ = writeln!(
                    std::io::stderr(),
                    "cordon: warning: {reason}; explicit-proxy mode only: programs that ignore \
                     HTTP_PROXY have no network (see `cordon doctor`)"
                );
                (self.emit)(
                    NewEvent::new(
                        Layer::Network,
                        Action::Degraded,
                        "explicit-proxy mode only: no TUN device",
                    )
                    .detail("reason", reason),
                );
                None
            }
        };
        if let Some(table) = h.sockets {
            let table = std::sync::Arc::new(table);
            self.gateway.set_sandbox(
                h.init_pid,
                std::sync::Arc::new(move |local, remote| {
                    table.tcp_inode(local, remote).ok().flatten()
                }),
            );
        }
        // The sandbox opens the TUN, the gateway reads it: one framing for both.
        const _: () = assert!(cordon_sandbox::TUN_VNET_HDR_LEN == cordon_net::TUN_VNET_HDR_LEN);
        self.gateway
            .start(tun, h.dns, h.proxy)
            .map_err(|e| e.to_string())
    }

    fn wants_inward(&self) -> bool {
        self.gateway.wants_inward()
    }

    fn ca_bundle(&self) -> Option<cordon_sandbox::TrustBundle> {
        self.bundle.clone()
    }

    fn inward(&mut self, inward: cordon_sandbox::Inward) {
        let inward = std::sync::Arc::new(inward);
        self.gateway
            .set_inward(std::sync::Arc::new(move |port| inward.connect(port)));
    }
}

fn trust(a: TrustArgs) -> Result<()> {
    let file = a.file.unwrap_or_else(|| PathBuf::from("cordon.toml"));
    let store = trust_store();
    if a.revoke {
        if store.revoke(&file).map_err(|e| anyhow!("{e}"))? {
            println!("revoked trust in {}", file.display());
        } else {
            println!("{} was not trusted", file.display());
        }
        return Ok(());
    }
    let hash = store.trust(&file).map_err(|e| anyhow!("{e}"))?;
    println!(
        "trusted {} (sha256 {hash}); any edit to it revokes this",
        file.display()
    );
    Ok(())
}

fn log(a: LogArgs) -> Result<i32> {
    let dir = cordon_events::default_log_dir();
    if a.list {
        let dir = dir.ok_or_else(|| anyhow!("no state directory: set HOME or XDG_STATE_HOME"))?;
        for s in cordon_events::list_sessions(&dir)? {
            let exit = s.exit_code.map_or("-".to_string(), |c| c.to_string());
            let state = if s.stopped {
                "ended"
            } else {
                "running or crashed"
            };
            println!(
                "{}  {}  {} events  exit {exit}  {state}",
                s.session,
                s.start.unwrap_or_default(),
                s.events
            );
        }
        return Ok(0);
    }
    let path = match (&a.file, &a.session) {
        (Some(f), _) => f.clone(),
        (None, Some(id)) => cordon_events::default_log_path(id)
            .ok_or_else(|| anyhow!("invalid session id {id:?}"))?,
        (None, None) => crate::replay::newest_log()?,
    };
    if a.verify {
        let r = cordon_events::verify(&path)?;
        for p in &r.problems {
            println!("{}:{}: {}", path.display(), p.line, p.what);
        }
        if r.ok() {
            println!(
                "{}: {} events, hash chain intact, session complete",
                path.display(),
                r.events
            );
            return Ok(0);
        }
        println!(
            "{}: verification FAILED ({})",
            path.display(),
            crate::output::count(r.problems.len(), "problem", "problems")
        );
        return Ok(1);
    }
    let print = |e: &cordon_events::Event| {
        if a.json {
            println!("{}", serde_json::to_string(e).unwrap_or_default());
        } else {
            println!("{}", cordon_events::format_human(e));
        }
    };
    if !a.follow {
        for e in cordon_events::read_log(&path)? {
            print(&e);
        }
        return Ok(0);
    }
    let mut f = cordon_events::Follower::open(&path)?;
    loop {
        if let Some(e) = f.next_event(Duration::from_millis(500))? {
            print(&e);
            let _ = std::io::stdout().flush();
            if e.is_session_stop() {
                return Ok(0);
            }
        }
    }
}
