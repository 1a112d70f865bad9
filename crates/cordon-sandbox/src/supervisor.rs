//! The supervisor's half of a sandbox (host side): create it, relay the terminal, forward
//! signals, wait, and report.
//!
//! Of the crossings ([`crate::Crossing`]), the host's ends of the control channel, the pty
//! master, the forwarded signals, the exit pipe and the seccomp descriptor are handled here.

use std::ffi::{CString, OsString};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use cordon_approval::{Approvals, Mailbox};
use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::{ExecAction, FilesystemPlan, NetMode, Plan};

use crate::cgroup::Cgroup;
use crate::exec_supervisor::ExecSupervisor;
use crate::fence::FenceStatus;
use crate::init::{CONTROL_FD, FORWARDED};
use crate::layout::{self, MountOp, Staged};
use crate::limits::{self, AppliedLimit, Limit};
use crate::net::{Inward, NetAttach, NetHandoff};
use crate::protocol::{self, FromInit, InitSpec, NetSetup};
use crate::seccomp::Listener;
use crate::sys::{self, WaitStatus};
use crate::{INIT_ARG, SandboxError};

/// Typed input held for a command that is not reading its terminal, before we stop reading ours.
const MAX_PENDING_INPUT: usize = 1 << 20;

/// How long a sandbox gets to exit after TERM/HUP before it is killed outright.
const GRACE: Duration = Duration::from_secs(5);

/// Whether the command gets a terminal of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TtyMode {
    /// A pty when both stdin and stdout are terminals, else the descriptors as they are.
    #[default]
    Auto,
    /// Never a pty: stdin/stdout/stderr are passed through (the command still gets a new session).
    Never,
}

/// What to run and how.
#[derive(Debug, Clone)]
pub struct Command {
    /// The program and its arguments; the program is looked up in the sandbox's `PATH`.
    pub argv: Vec<OsString>,
    /// The directory to start in; the project directory is used if it is not in the view.
    pub cwd: PathBuf,
    pub tty: TtyMode,
    /// The audit session id.
    pub session: String,
    /// The session's approval broker, shared with the HTTP layer; without one, `ask` rules
    /// deny.
    pub approvals: Option<Approvals>,
    /// Protected paths made copy-on-write for this session.
    pub staged: Vec<crate::layout::Staged>,
    /// Host files shown with other content (masked copies of credential files, the secret
    /// replaced by its placeholder), wherever they are masked or not.
    pub shown: Vec<(PathBuf, String)>,
    /// cordon's own read-only files, placed inside masked directories (the effective policy
    /// at [`POLICY_JSON`](crate::explain::POLICY_JSON) for `cordon explain`); one that cannot
    /// be placed is reported and left out.
    pub placed: Vec<(PathBuf, String)>,
    /// Sockets of services cordon runs host-side, bound inside masked directories, each
    /// with the variable that points programs at it; one that cannot be placed is
    /// reported and left out (its variable too).
    pub sockets: Vec<PlacedSocket>,
    /// Report the home paths the command looks for that the home's view hides (`cordon run
    /// --trace-home`): every open, stat and access is then a round trip to the supervisor.
    pub trace_home: Option<HomeTrace>,
    /// Where the exec supervisor notes every exec it lets through, for the gateway to tell
    /// which script an interpreter runs (rules keyed on programs). Execs are supervised
    /// whenever this is given.
    pub execs: Option<crate::ExecsSeen>,
}

/// What `--trace-home` found: each host path under `home` the command looked for that exists
/// on the host but not in the sandbox's view, with the program that looked first.
#[derive(Debug, Clone)]
pub struct HomeTrace {
    /// The home, as the sandbox names it.
    pub home: PathBuf,
    /// Path → the program (`comm`) that looked for it first.
    pub found: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<PathBuf, String>>>,
}

/// A host-side service's socket seen inside the sandbox (the filtering ssh agent): a
/// crossing of the boundary, served only by what listens on `host`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedSocket {
    /// Where the sandbox sees it (inside a masked directory: `/run/cordon/…`).
    pub path: PathBuf,
    /// The listening socket on the host.
    pub host: PathBuf,
    /// The variable set to `path` inside (`SSH_AUTH_SOCK`).
    pub env: String,
}

/// How the sandboxed command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub status: WaitStatus,
}

impl Outcome {
    /// The exit code cordon itself should exit with: the command's own, or 128+N after signal N.
    pub fn code(&self) -> i32 {
        self.status.code()
    }
}

static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        sys::write_all_raw(fd, &[sig as u8]);
    }
}

/// Restores the user's terminal however the relay ends.
struct RawGuard {
    fd: RawFd,
    saved: Option<sys::Termios>,
}

impl Drop for RawGuard {
    fn drop(&mut self) {
        if let Some(t) = &self.saved {
            let _ = sys::set_termios(self.fd, t);
        }
    }
}

fn io_err(what: &'static str, source: io::Error) -> SandboxError {
    SandboxError::Io { what, source }
}

/// Run `cmd` inside a new sandbox built from `plan`, reporting to `emit`, and wait for it.
/// Without a gateway the sandbox has loopback only, whatever `[network] mode` says (except
/// `host`); see [`run_with_network`].
pub fn run(plan: &Plan, cmd: &Command, emit: &dyn Fn(NewEvent)) -> Result<Outcome, SandboxError> {
    run_with_network(plan, cmd, emit, None)
}

/// [`run`], with the egress gateway that serves the sandbox's network when `[network] mode`
/// is `gateway`: [`clone_init`], then [`Unborn::run`].
pub fn run_with_network(
    plan: &Plan,
    cmd: &Command,
    emit: &dyn Fn(NewEvent),
    net: Option<&mut dyn NetAttach>,
) -> Result<Outcome, SandboxError> {
    if cmd.argv.is_empty() {
        return Err(SandboxError::NoCommand);
    }
    let gateway = net.as_deref().map(|n| n.wants_inward());
    clone_init(plan, gateway, emit)?.run(plan, cmd, emit, net)
}

/// The sandbox's init, cloned into its namespaces with its id maps and sent its network
/// setup: it execs this binary (or was forked, [`EarlyInit`]) and builds its side of the
/// network (loopback, TUN, the gateway's sockets) beside whatever the host does next, then
/// waits for its spec, which only [`Unborn::run`] sends. Dropped before that, it is killed and
/// reaped: nothing ran.
#[derive(Debug)]
pub struct Unborn {
    /// Both taken together when the sandbox takes over init (then a drop kills nothing).
    parts: Option<(OwnedFd, sys::Child)>,
    net_setup: NetSetup,
    /// The [`protocol::Prepare`] frame went out ([`Unborn::prepare`]).
    prepared: bool,
}

/// Clone the sandbox's init as early as the plan allows, so its exec and network setup run
/// beside the host-side preparation (the state layer, the gateway's build, the view).
/// `gateway` is `Some(wants_inward)` when a gateway will serve the sandbox's network (the
/// [`NetAttach`] later given to [`Unborn::run`] must then be there, or nothing runs).
pub fn clone_init(
    plan: &Plan,
    gateway: Option<bool>,
    emit: &dyn Fn(NewEvent),
) -> Result<Unborn, SandboxError> {
    adopt_init(None, plan, gateway, emit)
}

/// [`clone_init`], taking the init `early` cloned when it is in the namespaces the plan needs.
/// When it is not (`[network] mode = "host"` shares the host's network namespace), or its clone
/// failed, it is killed and init is cloned again here, so the error reported is this clone's.
pub fn adopt_init(
    early: Option<EarlyInit>,
    plan: &Plan,
    gateway: Option<bool>,
    emit: &dyn Fn(NewEvent),
) -> Result<Unborn, SandboxError> {
    let net_setup = net_setup(plan, gateway);
    let namespaces = namespaces(net_setup, emit);
    let early = early
        .filter(|_| namespaces == sys::SANDBOX_NAMESPACES)
        .and_then(|mut e| e.take());
    let (sock, child) = match early {
        Some(parts) => parts,
        None => launch(namespaces, sys::getuid(), sys::getgid())?,
    };
    // Init's frames of the network handoff wait in the channel for `receive_setup`.
    let sent = protocol::send(sock.as_raw_fd(), &net_setup, None);
    let unborn = Unborn {
        parts: Some((sock, child)),
        net_setup,
        prepared: false,
    };
    sent.map_err(|e| io_err("send the network setup to the sandbox", e))?;
    Ok(unborn)
}

/// The sandbox's init, started before the policy is read: the clone of its namespaces (a
/// network namespace's among them, ~0.5 ms of the kernel's work) runs beside the policy's
/// load instead of after it (issue #18). It is started in the namespaces every mode but
/// `host` uses, and told nothing: it waits for its network setup, which only [`adopt_init`]
/// sends once the plan says what it is. Dropped before that, it is killed and reaped: nothing
/// ran.
#[derive(Debug)]
pub struct EarlyInit {
    started: Option<Started>,
}

/// How [`EarlyInit`] started init.
#[derive(Debug)]
enum Started {
    /// Forked, no exec ([`sys::fork_init`]); its helper's report not read yet.
    Forked(OwnedFd, sys::ForkedInit),
    /// Exec'd ([`launch`]), when this process already had threads.
    Spawned(OwnedFd, sys::Child),
}

impl EarlyInit {
    /// Start init now. Call it from the thread that will run the session (init dies with it),
    /// and before this process has read anything secret: while the process has one thread,
    /// init is forked without an exec and runs in a copy of this process's memory (its
    /// environment overwritten; see `sys::fork_init`). With threads, init is exec'd. A
    /// failed start is not reported here; [`adopt_init`] starts init again and reports what
    /// that start meets.
    pub fn start() -> EarlyInit {
        let (uid, gid) = (sys::getuid(), sys::getgid());
        let started = if sys::single_threaded() {
            fork_launch(sys::SANDBOX_NAMESPACES, uid, gid)
                .ok()
                .map(|(sock, forked)| Started::Forked(sock, forked))
        } else {
            launch(sys::SANDBOX_NAMESPACES, uid, gid)
                .ok()
                .map(|(sock, child)| Started::Spawned(sock, child))
        };
        EarlyInit { started }
    }

    /// Its init, once started; `None` when the start failed (a failed one is reaped).
    fn take(&mut self) -> Option<(OwnedFd, sys::Child)> {
        match self.started.take()? {
            Started::Forked(sock, forked) => forked.confirm().ok().map(|child| (sock, child)),
            Started::Spawned(sock, child) => Some((sock, child)),
        }
    }
}

/// An init that was never given its spec: nothing ran in it, so it is killed and reaped.
fn kill_unstarted(parts: Option<(OwnedFd, sys::Child)>) {
    if let Some((_, child)) = parts {
        let _ = sys::pidfd_send_signal(&child.pidfd, libc::SIGKILL);
        let _ = sys::waitpid(child.pid, false);
    }
}

impl Drop for EarlyInit {
    fn drop(&mut self) {
        kill_unstarted(self.take());
    }
}

impl Drop for Unborn {
    fn drop(&mut self) {
        kill_unstarted(self.parts.take());
    }
}

impl Unborn {
    /// Send init the overlays of the session's `staged` paths as soon as the state layer has
    /// made them, so that init mounts them while the host makes the rest of the view (the
    /// gateway's join, the layout, the spec): 0.2–0.6 ms each on ext4. Once per sandbox;
    /// [`Unborn::run`] sends it, with what its command has staged, when this was not called.
    /// The view still comes from the spec alone (see [`protocol::Prepare`]).
    pub fn prepare(&mut self, staged: &[Staged]) -> Result<(), SandboxError> {
        if self.prepared {
            return Ok(());
        }
        let Some((sock, _)) = &self.parts else {
            return Ok(());
        };
        let prepare = protocol::Prepare {
            overlays: staged.iter().filter_map(Staged::overlay).collect(),
        };
        self.prepared = true;
        protocol::send(sock.as_raw_fd(), &prepare, None)
            .map_err(|e| io_err("send the session's overlays to the sandbox", e))
    }

    /// Run `cmd` in this sandbox and wait for it. The steps, in order: what the sandbox will
    /// see (approvals, view, environment, init's spec); then cgroups and the spec sent; then
    /// what init hands back until the command has started (terminal, network, exec
    /// supervision), then the relay until it ends. Any failure before the command starts
    /// kills init: nothing ran (before the spec, init has built its loopback and TUN and
    /// waited).
    pub fn run(
        mut self,
        plan: &Plan,
        cmd: &Command,
        emit: &dyn Fn(NewEvent),
        mut net: Option<&mut dyn NetAttach>,
    ) -> Result<Outcome, SandboxError> {
        if cmd.argv.is_empty() {
            return Err(SandboxError::NoCommand);
        }
        // Init was told to build for a gateway: without that gateway now, nothing runs.
        let gateway = net.as_deref().map(|n| n.wants_inward());
        if net_setup(plan, gateway) != self.net_setup {
            return Err(SandboxError::NetworkChanged);
        }
        let net_setup = self.net_setup;
        self.prepare(&cmd.staged)?;
        let (fs, broker) = approvals(plan, cmd, emit)?;
        let (layout, bundle_at) = view(&fs, cmd, net_setup, net.as_deref(), emit)?;
        let env = environment(plan, cmd, net_setup, bundle_at.as_deref(), &layout, emit);
        let mut spec = init_spec(plan, cmd, layout, env, net_setup);
        let (sock, child) = self.parts.take().expect("init is there until run takes it");
        let sandbox = Sandbox::into_cgroup(child, plan, &mut spec, emit)?;
        // Caught from before the command runs on: a signal sent once it has started (it may
        // print before the start's events are written) is forwarded, never cordon's death.
        let signals = match Signals::catch() {
            Ok(s) => s,
            Err(e) => return Err(sandbox.abort(io_err("catch the signals to forward", e))),
        };
        if let Err(e) = protocol::send_spec(sock.as_raw_fd(), spec) {
            return Err(sandbox.abort(io_err("send the plan to the sandbox", e)));
        }
        let handed = sandbox.receive_setup(sock.as_raw_fd(), net.as_deref_mut())?;
        match (net_setup, net) {
            (NetSetup::Gateway { inward: true, .. }, Some(n)) => n.inward(Inward::new(sock)),
            _ => drop(sock),
        }
        let started = &handed.started;
        let trace = cmd.trace_home.clone();
        let mut supervisor =
            match sandbox.exec_supervisor(handed.listener, plan, broker, trace, emit) {
                Ok(s) => s.noting(cmd.execs.clone()),
                Err(e) => {
                    report_started(started, cmd, emit);
                    return Err(e);
                }
            };
        // The command's exec has most likely trapped already: answer it before the start's
        // events are written (its own events still follow them).
        supervisor.answer_waiting_exec();
        report_started(started, cmd, emit);
        report_seccomp(plan, emit);
        supervisor.release_events();
        sandbox.supervise(handed.master, supervisor, handed.exit_pipe, signals)
    }
}

/// The approval brokers' directory must be masked in every session, with or without `ask`
/// rules: a sandbox runs as the user's uid, so file modes alone would not keep it from
/// answering another session's questions. The plan says so (the loader adds cordon's own
/// directories); a plan that does not is refused. The directory is created (0700) up front so
/// there is something to mask. Returns the filesystem plan, and the session's broker with a
/// mailbox for this layer's answers when there are `ask` rules (without one, they deny).
fn approvals(
    plan: &Plan,
    cmd: &Command,
    emit: &dyn Fn(NewEvent),
) -> Result<(FilesystemPlan, Option<(Approvals, Mailbox)>), SandboxError> {
    let fs = plan.filesystem.clone();
    let broker_dir = cordon_approval::default_dir();
    if let Some(dir) = &broker_dir {
        if !fs.deny.iter().any(|d| dir.starts_with(&d.path)) {
            return Err(SandboxError::BrokerDirVisible { path: dir.clone() });
        }
        cordon_approval::ensure_dir(dir).map_err(|source| SandboxError::ApprovalDir { source })?;
    }
    if !plan.exec.rules.iter().any(|r| r.action == ExecAction::Ask) {
        return Ok((fs, None));
    }
    let degraded = |why: String| {
        emit(NewEvent::new(
            Layer::Exec,
            Action::Degraded,
            format!("no approval broker ({why}): `ask` rules deny"),
        ));
        None
    };
    let broker = match (&cmd.approvals, Mailbox::new()) {
        (Some(a), Ok(m)) => Some((a.clone(), m)),
        (Some(_), Err(e)) => degraded(e.to_string()),
        (None, _) => degraded("none for this session".into()),
    };
    Ok((fs, broker))
}

/// What the sandbox's network namespace gets: `[network] mode`, except that `gateway` without
/// a gateway to serve it is loopback only (fail closed).
fn net_setup(plan: &Plan, gateway: Option<bool>) -> NetSetup {
    match (plan.network.mode, gateway) {
        (NetMode::Host, _) => NetSetup::Host,
        (NetMode::Gateway, Some(inward)) => NetSetup::Gateway {
            addr: crate::net::SANDBOX_ADDR,
            mtu: crate::net::TUN_MTU,
            proxy_port: crate::net::PROXY_PORT,
            inward,
        },
        (NetMode::Gateway, None) | (NetMode::None, _) => NetSetup::Loopback,
    }
}

/// The filesystem view, reported: the layout of `fs` with the session's staged paths, the
/// masked copies shown in place of credential files, and, with a network of its own, the
/// sandbox's resolver and (with an intercepting gateway) its trust bundle. Returns the layout
/// and where that bundle is, for the environment.
fn view(
    fs: &FilesystemPlan,
    cmd: &Command,
    net_setup: NetSetup,
    net: Option<&dyn NetAttach>,
    emit: &dyn Fn(NewEvent),
) -> Result<(layout::Layout, Option<String>), SandboxError> {
    let mut layout = layout::prepare_with_state(fs, &cmd.staged);
    for (path, content) in &cmd.shown {
        // Never the real file instead: the command does not start.
        let at = layout
            .show_copy(path, content)
            .map_err(|source| SandboxError::ShownCopy { source })?;
        emit(NewEvent::new(
            Layer::Filesystem,
            Action::Apply,
            format!("{} is shown as a masked copy", at.display()),
        ));
    }
    for (path, content) in &cmd.placed {
        if let Err(e) = layout.place_file(path, content) {
            emit(NewEvent::new(
                Layer::Filesystem,
                Action::Degraded,
                format!("{e}: not placed"),
            ));
        }
    }
    for sock in &cmd.sockets {
        if let Err(e) = layout.place_socket(&sock.path, &sock.host) {
            emit(NewEvent::new(
                Layer::Filesystem,
                Action::Degraded,
                format!("{e}: {} not set", sock.env),
            ));
        }
    }
    place_program(&mut layout, emit);
    if net_setup != NetSetup::Host {
        resolv_conf(&mut layout);
    }
    hosts_file(&mut layout);
    let bundle_at = match (&net_setup, net.and_then(|n| n.ca_bundle())) {
        (NetSetup::Gateway { .. }, Some(bundle)) => trust_bundle(&mut layout, bundle),
        _ => None,
    };
    #[cfg(debug_assertions)]
    crate::test_off::apply(&mut layout, emit);
    report_layout(&layout, emit);
    Ok((layout, bundle_at))
}

/// The command's environment, reported: the policy's allow-list of the host's, the proxy
/// variables that point programs honouring them at the gateway's explicit proxy, the trust
/// bundle's variables, and `CORDON_NOTICE`.
fn environment(
    plan: &Plan,
    cmd: &Command,
    net_setup: NetSetup,
    bundle_at: Option<&str>,
    layout: &layout::Layout,
    emit: &dyn Fn(NewEvent),
) -> Vec<(OsString, OsString)> {
    let mut env = plan.env.apply(std::env::vars_os());
    let explain_at = explain_path(&env, layout);
    let mut set = |k: &str, v: &str| {
        env.retain(|(n, _)| n != k);
        env.push((k.into(), v.into()));
    };
    if let NetSetup::Gateway { proxy_port, .. } = net_setup {
        let proxy = format!("http://127.0.0.1:{proxy_port}");
        for k in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            set(k, &proxy);
        }
        for k in ["NO_PROXY", "no_proxy"] {
            set(k, "localhost,127.0.0.1,::1");
        }
        set("NODE_USE_ENV_PROXY", "1");
    }
    if let Some(path) = bundle_at {
        for k in crate::net::BUNDLE_VARS {
            set(k, path);
        }
    }
    if let Some(path) = explain_at {
        set("PATH", &path);
    }
    for sock in &cmd.sockets {
        let placed = layout
            .mounts
            .iter()
            .any(|m| matches!(m, MountOp::Socket { path, .. } if *path == sock.path));
        if placed {
            set(&sock.env, &sock.path.to_string_lossy());
        }
    }
    env.push(("CORDON_NOTICE".into(), denial_notice(layout).into()));
    let passed: Vec<String> = env
        .iter()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    let dropped: Vec<String> = std::env::vars_os()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .filter(|k| !passed.contains(k))
        .collect();
    emit(
        NewEvent::new(
            Layer::Env,
            Action::Apply,
            format!(
                "{} variables passed, {} dropped",
                passed.len(),
                dropped.len()
            ),
        )
        .detail("passed", passed.clone())
        .detail("dropped", dropped),
    );
    env
}

/// Everything init needs, in one message: it is the whole of what crosses to the sandbox at
/// setup besides the descriptors.
fn init_spec(
    plan: &Plan,
    cmd: &Command,
    layout: layout::Layout,
    env: Vec<(OsString, OsString)>,
    net_setup: NetSetup,
) -> InitSpec {
    let tty = cmd.tty == TtyMode::Auto && sys::isatty(0) && sys::isatty(1);
    let winsize = tty.then(|| sys::get_winsize(0).unwrap_or([24, 80, 0, 0]));
    InitSpec {
        layout,
        argv: cmd.argv.iter().map(|a| a.clone().into_vec()).collect(),
        env: env
            .into_iter()
            .map(|(k, v)| {
                let mut kv = k.into_vec();
                kv.push(b'=');
                kv.extend(v.into_vec());
                kv
            })
            .collect(),
        cwd: cmd.cwd.clone(),
        project: plan.project.clone(),
        uid: sys::getuid(),
        gid: sys::getgid(),
        tty: winsize,
        limits: plan.limits.clone(),
        landlock: plan.filesystem.landlock,
        hostname: HOSTNAME.into(),
        syscalls: plan.syscalls.clone(),
        supervise_exec: !plan.exec.rules.is_empty() || cmd.execs.is_some(),
        trace_paths: cmd.trace_home.is_some(),
        tmpfs_size: plan.limits.memory,
        net: net_setup,
    }
}

/// The namespaces to clone: all of them, except the network one in `host` mode, which is
/// said loudly (on the terminal and in the log) since it leaves egress unguarded.
fn namespaces(net_setup: NetSetup, emit: &dyn Fn(NewEvent)) -> u64 {
    if net_setup != NetSetup::Host {
        return sys::SANDBOX_NAMESPACES;
    }
    let _ = writeln!(
        io::stderr(),
        "cordon: warning: [network] mode = \"host\": the sandbox shares the host's network, \
         with no egress policy, no DNS filtering and the host's loopback services in reach"
    );
    emit(
        NewEvent::new(
            Layer::Network,
            Action::Degraded,
            "network isolation off (mode = \"host\"): no egress policy",
        )
        .shortfall(cordon_events::Shortfall::HostNetwork),
    );
    sys::SANDBOX_NAMESPACES & !(libc::CLONE_NEWNET as u64)
}

/// Clone the sandbox's init into `namespaces`, mapping the caller's uid/gid to 0 there, and
/// exec it; returns the control channel's supervisor end and the child. Init then waits for
/// its network setup.
fn launch(namespaces: u64, uid: u32, gid: u32) -> Result<(OwnedFd, sys::Child), SandboxError> {
    let (sock, child_sock) = sys::socketpair().map_err(|e| io_err("control socketpair", e))?;
    let exe = sys::PreparedExec::new(
        CString::new("/proc/self/exe").expect("no NUL"),
        vec![
            CString::new("cordon-init").expect("no NUL"),
            CString::new(INIT_ARG).expect("no NUL"),
        ],
        Vec::new(),
    );
    let spawned = sys::spawn_in_namespaces(
        namespaces,
        &sys::SpawnInit {
            exe: &exe,
            control: child_sock.as_raw_fd(),
            control_at: CONTROL_FD,
            parent_end: sock.as_raw_fd(),
            uid,
            gid,
        },
    );
    let child = spawned.map_err(spawn_error)?;
    drop(child_sock);
    Ok((sock, child))
}

/// [`launch`] without an exec, for a process with one thread ([`sys::fork_init`]).
fn fork_launch(
    namespaces: u64,
    uid: u32,
    gid: u32,
) -> Result<(OwnedFd, sys::ForkedInit), SandboxError> {
    let (sock, child_sock) = sys::socketpair().map_err(|e| io_err("control socketpair", e))?;
    let forked = sys::fork_init(
        namespaces,
        &sys::ForkInit {
            control: child_sock.as_raw_fd(),
            control_at: CONTROL_FD,
            uid,
            gid,
            entry: crate::init::main,
        },
    )
    .map_err(spawn_error)?;
    drop(child_sock);
    Ok((sock, forked))
}

fn spawn_error(e: sys::SpawnError) -> SandboxError {
    match e {
        sys::SpawnError::Clone(source) => SandboxError::Namespaces { source },
        sys::SpawnError::IdMaps(source) => SandboxError::IdMaps { source },
        sys::SpawnError::Exec(source) => SandboxError::InitExec { source },
    }
}

/// What init hands over, besides the network, before the command starts.
struct Handover {
    /// The pty master, when the command has a terminal of its own.
    master: Option<OwnedFd>,
    /// The seccomp notification listener.
    listener: Option<OwnedFd>,
    /// Where init reports the command's end once everything inside is gone.
    exit_pipe: Option<OwnedFd>,
    /// What init said of the start, for its events.
    started: StartReport,
}

/// Init's news of the command's start, emitted by [`report_started`].
struct StartReport {
    pid: i32,
    landlock: FenceStatus,
    limits: Vec<AppliedLimit>,
    overlays_ahead: usize,
    pty: bool,
}

/// The network handoff, as init sends it piece by piece until `NetReady`.
struct NetParts {
    tun: Result<OwnedFd, String>,
    dns: Vec<OwnedFd>,
    proxy: Option<OwnedFd>,
    diag: Option<OwnedFd>,
}

impl NetParts {
    /// Give the gateway what came, so it serves the sandbox before the command starts.
    fn attach(
        &mut self,
        net: Option<&mut (dyn NetAttach + '_)>,
        init_pid: libc::pid_t,
    ) -> Result<(), String> {
        match (net, self.proxy.take()) {
            (Some(n), Some(proxy)) => n.attach(NetHandoff {
                tun: std::mem::replace(&mut self.tun, Err("handed over".into())),
                dns: std::mem::take(&mut self.dns),
                proxy,
                init_pid,
                sockets: self.diag.take().map(crate::net::SocketTable::new),
            }),
            _ => Err("the sandbox's proxy listener did not come back".into()),
        }
    }
}

/// The cloned init and the cgroups it was moved into: what must be undone when setup fails.
struct Sandbox {
    child: sys::Child,
    cgroup: Cgroup,
}

impl Sandbox {
    /// Move init into cgroups carrying `[limits]`, as far as this user may, before it starts
    /// anything. What a cgroup carries, the command's rlimits need not also approximate, so
    /// those are taken out of `spec`.
    fn into_cgroup(
        child: sys::Child,
        plan: &Plan,
        spec: &mut InitSpec,
        emit: &dyn Fn(NewEvent),
    ) -> Result<Sandbox, SandboxError> {
        let mut cgroup = Cgroup::create(
            &format!("cordon-{}-{}", std::process::id(), child.pid),
            &plan.limits,
        );
        let added = cgroup.add(child.pid);
        let sandbox = Sandbox { child, cgroup };
        if let Err(e) = added {
            return Err(sandbox.abort(io_err("move the sandbox into its cgroup", e)));
        }
        if sandbox.cgroup.memory {
            spec.limits.memory = None;
        }
        if sandbox.cgroup.pids {
            spec.limits.pids = None;
        }
        report_limits(plan, &sandbox.cgroup, spec.uid, emit);
        Ok(sandbox)
    }

    /// Setup failed while init lives: kill it, reap it, remove its cgroups; returns `e`.
    fn abort(&self, e: SandboxError) -> SandboxError {
        let _ = sys::pidfd_send_signal(&self.child.pidfd, libc::SIGKILL);
        self.ended(e)
    }

    /// Init is ending on its own (it reported a failure, or hung up): reap it, remove its
    /// cgroups; returns `e`.
    fn ended(&self, e: SandboxError) -> SandboxError {
        let _ = sys::waitpid(self.child.pid, false);
        self.cgroup.remove();
        e
    }

    /// Read init's frames until the command has started: the pty master and the seccomp
    /// listener it passes on, the network handoff (given to the gateway as soon as it is
    /// complete: the command may use the network at once), and the report of Landlock and
    /// the rlimits, whose events [`report_started`] writes.
    fn receive_setup(
        &self,
        sock: RawFd,
        mut net: Option<&mut (dyn NetAttach + '_)>,
    ) -> Result<Handover, SandboxError> {
        let mut master = None;
        let mut listener = None;
        let mut parts = NetParts {
            tun: Err("not made".into()),
            dns: Vec::new(),
            proxy: None,
            diag: None,
        };
        loop {
            match protocol::recv_handed::<FromInit>(sock) {
                Ok(Some((FromInit::Pty, fd))) => master = fd,
                Ok(Some((FromInit::Listener, fd))) => listener = fd,
                Ok(Some((FromInit::NetTun, fd))) => {
                    parts.tun = fd.ok_or_else(|| "no TUN descriptor came back".to_string())
                }
                Ok(Some((FromInit::NetTunFailed { reason }, _))) => parts.tun = Err(reason),
                Ok(Some((FromInit::NetDns, fd))) => parts.dns.extend(fd),
                Ok(Some((FromInit::NetProxy, fd))) => parts.proxy = fd,
                Ok(Some((FromInit::NetDiag, fd))) => parts.diag = fd,
                Ok(Some((FromInit::NetReady, _))) => {
                    if let Err(e) = parts.attach(net.as_deref_mut(), self.child.pid) {
                        return Err(self.abort(SandboxError::Network(e)));
                    }
                }
                Ok(Some((
                    FromInit::Started {
                        pid,
                        landlock,
                        limits,
                        overlays_ahead,
                    },
                    exit_pipe,
                ))) => {
                    let started = StartReport {
                        pid,
                        landlock,
                        limits,
                        overlays_ahead,
                        pty: master.is_some(),
                    };
                    return Ok(Handover {
                        master,
                        listener,
                        exit_pipe,
                        started,
                    });
                }
                Ok(Some((FromInit::Failed { stage, message }, _))) => {
                    return Err(self.ended(SandboxError::Setup { stage, message }));
                }
                Ok(None) | Err(_) => {
                    let st = sys::waitpid(self.child.pid, false)
                        .ok()
                        .flatten()
                        .map(|(_, s)| s);
                    self.cgroup.remove();
                    return Err(SandboxError::InitEnded(st));
                }
            }
        }
    }

    /// The exec supervisor around the listener init passed on. The filter always has one, so
    /// its absence means setup went wrong: the command must not run unsupervised.
    fn exec_supervisor<'a>(
        &self,
        listener: Option<OwnedFd>,
        plan: &'a Plan,
        broker: Option<(Approvals, Mailbox)>,
        trace: Option<HomeTrace>,
        emit: &'a dyn Fn(NewEvent),
    ) -> Result<ExecSupervisor<'a>, SandboxError> {
        let Some(fd) = listener else {
            return Err(self.abort(SandboxError::NoListener));
        };
        let l = Listener::new(fd);
        if let Err(e) = l.set_sync_wakeup() {
            emit(NewEvent::new(
                Layer::Syscall,
                Action::Log,
                format!("notification sync wake-up unavailable: {e}"),
            ));
        }
        Ok(
            ExecSupervisor::new(l, &plan.exec, &plan.syscalls, broker, emit)
                .tracing_home(trace)
                .learning(plan.learning)
                .mcp_servers(&plan.mcp.stdio),
        )
    }

    /// Relay the terminal, signals and exec decisions until the sandbox ends, then wait for
    /// init only as far as its cgroups need, and remove them.
    fn supervise(
        self,
        master: Option<OwnedFd>,
        exec: ExecSupervisor,
        exit_pipe: Option<OwnedFd>,
        signals: Signals,
    ) -> Result<Outcome, SandboxError> {
        let ended = relay(&self.child, master, Some(exec), exit_pipe, &signals);
        drop(signals);
        let status = match ended {
            Ok(Ended::Reaped(st)) => Ok(st),
            // Everything inside is gone; the kernel is still tearing the namespaces down. Only
            // a cgroup (removable once init is reaped) is worth waiting for.
            Ok(Ended::Reported(st)) if self.cgroup.is_empty() => {
                let pid = self.child.pid;
                std::thread::spawn(move || sys::waitpid(pid, false));
                Ok(st)
            }
            Ok(Ended::Reported(st)) => {
                let _ = sys::waitpid(self.child.pid, false);
                Ok(st)
            }
            Err(e) => Err(e),
        };
        self.cgroup.remove();
        let status = status.map_err(|e| io_err("supervise the sandbox", e))?;
        Ok(Outcome { status })
    }
}

/// The events of a started command: how Landlock is enforced (a warning on the terminal too
/// when less than fully), the rlimits, and the start itself.
fn report_started(started: &StartReport, cmd: &Command, emit: &dyn Fn(NewEvent)) {
    let StartReport {
        pid,
        landlock,
        limits,
        overlays_ahead,
        pty,
    } = started;
    emit(landlock.event());
    if landlock.is_degraded() {
        let _ = writeln!(io::stderr(), "cordon: warning: Landlock {landlock}");
    }
    for l in limits {
        emit(l.event());
    }
    emit(
        NewEvent::new(Layer::Process, Action::Start, "command started")
            .detail("pid_in_sandbox", *pid)
            .detail(
                "command",
                cmd.argv
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect::<Vec<_>>(),
            )
            .detail(
                "terminal",
                if *pty {
                    "pty"
                } else {
                    "inherited, new session"
                },
            )
            .detail("overlays_mounted_ahead", *overlays_ahead),
    );
}

/// The filter is installed and its listener supervised: say so, with the exec rules.
fn report_seccomp(plan: &Plan, emit: &dyn Fn(NewEvent)) {
    emit(
        NewEvent::new(
            Layer::Syscall,
            Action::Apply,
            "seccomp filter installed; denied syscalls return EPERM",
        )
        .detail(
            "exec_rules",
            plan.exec
                .rules
                .iter()
                .map(|r| format!("{:?} {} ({})", r.action, r.pattern, r.origin))
                .collect::<Vec<_>>(),
        ),
    );
}

/// The sandbox's hostname (its own UTS namespace).
const HOSTNAME: &str = "cordon";

/// The host's `/etc/hosts` with the sandbox's hostname on its loopback, as container runtimes
/// do: programs that look up their own name (`hostname -f`, Java's `getLocalHost`) find it
/// without asking DNS, where a single-label name is NXDOMAIN.
fn hosts_file(layout: &mut layout::Layout) {
    let mut hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    if !hosts.is_empty() && !hosts.ends_with('\n') {
        hosts.push('\n');
    }
    hosts.push_str(&format!(
        "# added by cordon: the sandbox's hostname\n127.0.1.1\t{HOSTNAME}\n"
    ));
    bind_content(layout, "/etc/hosts", &hosts);
}

/// Point the sandbox's resolver at its loopback, where the gateway's DNS sockets are. Where
/// `/etc/resolv.conf` is a link into a masked directory (systemd-resolved's stub under /run),
/// it is left dangling: glibc then asks 127.0.0.1, which is the same place.
fn resolv_conf(layout: &mut layout::Layout) {
    bind_content(
        layout,
        "/etc/resolv.conf",
        "# written by cordon: the egress gateway answers here\nnameserver 127.0.0.1\noptions edns0\n",
    );
}

/// Binds a read-only file holding `content` over the regular file `path` leads to (through
/// links), unless that lies in a masked directory; returns the file it covered.
fn bind_content(layout: &mut layout::Layout, path: &str, content: &str) -> Option<PathBuf> {
    bind_over(layout, path, |path| MountOp::Content {
        path,
        content: content.to_string(),
    })
}

/// [`bind_content`] with the file `op` makes for the target.
fn bind_over(
    layout: &mut layout::Layout,
    path: &str,
    op: impl FnOnce(PathBuf) -> MountOp,
) -> Option<PathBuf> {
    let target = std::fs::canonicalize(path).ok()?;
    if !target.is_file() || layout.masks().any(|(m, _)| target.starts_with(m)) {
        return None;
    }
    let covered = layout.mounts.iter().any(|m| {
        matches!(m, MountOp::Content { path, .. } | MountOp::File { path, .. } if *path == target)
    });
    if covered {
        return None;
    }
    layout.mounts.push(op(target.clone()));
    Some(target)
}

/// Binds `bundle` over every distribution bundle file this host has (once per real file);
/// returns the path the variables should name.
fn trust_bundle(layout: &mut layout::Layout, bundle: crate::TrustBundle) -> Option<String> {
    let mut first = None;
    for p in crate::net::BUNDLE_PATHS {
        let bound = match &bundle {
            crate::TrustBundle::File(host) => bind_over(layout, p, |path| MountOp::File {
                path,
                host: host.clone(),
            }),
            crate::TrustBundle::Inline(pem) => bind_content(layout, p, pem),
        };
        if bound.is_some() {
            first.get_or_insert_with(|| (*p).to_string());
        }
    }
    first
}

/// This cordon executable, bound at [`crate::explain::PROGRAM`] when the view hides where
/// it lives (a private `/tmp`, a masked directory).
fn place_program(layout: &mut layout::Layout, emit: &dyn Fn(NewEvent)) {
    let Ok(exe) = std::env::current_exe().and_then(|e| e.canonicalize()) else {
        return;
    };
    if program_visible(layout, &exe) {
        return;
    }
    if let Err(e) = layout.place_program(Path::new(crate::explain::PROGRAM), &exe) {
        emit(NewEvent::new(
            Layer::Filesystem,
            Action::Degraded,
            format!("{e}: `cordon explain` is not available inside"),
        ));
    }
}

fn program_visible(layout: &layout::Layout, exe: &Path) -> bool {
    // A fresh tmpfs (the private /tmp) is "private" to explain, but holds nothing of the host.
    let deciding = layout
        .mounts
        .iter()
        .rev()
        .find(|m| exe.starts_with(m.path()));
    if matches!(deciding, Some(MountOp::Tmpfs { .. })) {
        return false;
    }
    !matches!(
        crate::explain::path_access(layout, exe),
        crate::explain::PathAccess::Hidden { .. } | crate::explain::PathAccess::Absent
    )
}

/// `PATH` with the directory of this cordon executable appended (where the view shows it, or
/// [`crate::explain::PROGRAM`]'s when it was placed there), unless it is on `PATH` already:
/// the denial messages name `cordon explain …`, and the agent must be able to run it. `None`
/// when nothing changes (or it could be neither seen nor placed: a degraded event said so).
fn explain_path(env: &[(OsString, OsString)], layout: &layout::Layout) -> Option<String> {
    let host_exe = std::env::current_exe().ok()?.canonicalize().ok()?;
    let placed = Path::new(crate::explain::PROGRAM);
    let exe = if program_visible(layout, &host_exe) {
        host_exe
    } else if layout
        .mounts
        .iter()
        .any(|m| matches!(m, MountOp::Program { path, .. } if path == placed))
    {
        placed.to_path_buf()
    } else {
        return None;
    };
    let dir = exe.parent()?;
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .unwrap_or_default();
    let on_path = path.split(':').any(|d| {
        Path::new(d)
            .join("cordon")
            .canonicalize()
            .is_ok_and(|p| p == exe)
    });
    if on_path || dir.to_str()?.contains(':') {
        return None;
    }
    Some(if path.is_empty() {
        dir.display().to_string()
    } else {
        format!("{path}:{}", dir.display())
    })
}

/// What the agent is told about denials: agents otherwise retry a masked read through other
/// paths, links or tools. The sandboxed program sees this as `CORDON_NOTICE`.
fn denial_notice(layout: &layout::Layout) -> String {
    let masked: Vec<String> = layout
        .masks()
        .map(|(p, rule)| format!("{} (rule: {rule})", p.display()))
        .collect();
    // Agents look for a missing config file elsewhere: say the home holds only part of itself.
    let home = if !layout.home_view {
        ""
    } else {
        "The home shows only what tools need (toolchains, configuration without secrets, the \
         agent's own state); anything else there is not missing by accident but hidden. "
    };
    format!(
        "This program runs inside cordon. Denials are deliberate policy, not errors to work around: \
         retrying another way (other paths, links, copies, tools, proxies) will not help. \
         Outside the project the filesystem is read-only; these paths are masked: {}. {home}\
         To learn which rule decides and why, ask `cordon explain -- COMMAND…`, `cordon explain \
         [METHOD] URL` or `cordon explain [--write] PATH`; the effective policy is in {}.",
        masked.join(", "),
        crate::explain::POLICY_TOML
    )
}

/// The limits events of the host side: what the cgroups carry, and the limits nothing will
/// enforce (the command's rlimits are reported when it starts), with a warning for each.
fn report_limits(plan: &Plan, cgroup: &Cgroup, uid: u32, emit: &dyn Fn(NewEvent)) {
    for l in &cgroup.applied {
        emit(l.event());
    }
    let mut missing = Vec::new();
    if let Some(c) = plan.limits.cpu
        && !cgroup.cpu
    {
        missing.push((
            Limit::Cpu(c),
            "needs a delegated cgroup; there is no rlimit for it",
        ));
    }
    if let Some(p) = plan.limits.pids
        && !cgroup.pids
        && uid == 0
    {
        missing.push((
            Limit::Pids(p),
            "the kernel exempts host root from RLIMIT_NPROC; needs a cgroup",
        ));
    }
    for (limit, why) in missing {
        emit(limits::unenforced(limit, why));
        let _ = writeln!(
            io::stderr(),
            "cordon: warning: [limits] {} ({why}) is not enforced",
            limit.name()
        );
    }
}

fn report_layout(layout: &layout::Layout, emit: &dyn Fn(NewEvent)) {
    let mut writable = Vec::new();
    let mut read_only = Vec::new();
    let mut staged = Vec::new();
    for m in &layout.mounts {
        match m {
            MountOp::Bind {
                path,
                writable: true,
            } => writable.push(path.display().to_string()),
            MountOp::ReadOnly { path } => read_only.push(path.display().to_string()),
            MountOp::Overlay { path, .. } | MountOp::StagedFile { path, .. } => {
                staged.push(path.display().to_string())
            }
            _ => {}
        }
    }
    emit(
        NewEvent::new(
            Layer::Filesystem,
            Action::Apply,
            "read-only root, private /tmp, minimal /dev, fresh /proc",
        )
        .detail("writable", writable)
        .detail("read_only", read_only),
    );
    for (path, rule) in layout.masks() {
        emit(
            NewEvent::new(
                Layer::Filesystem,
                Action::Deny,
                "masked: reads fail, no content visible",
            )
            .rule(rule.to_string())
            .detail("path", path.display().to_string()),
        );
    }
    for u in &layout.unseen {
        emit(
            NewEvent::new(Layer::Filesystem, Action::Deny, u.why.to_string())
                .rule(u.rule.clone())
                .detail("path", u.path.display().to_string()),
        );
    }
    for s in &layout.skipped {
        emit(NewEvent::new(Layer::Filesystem, Action::Log, s.clone()));
    }
}

/// How the relay learnt that the sandbox ended.
enum Ended {
    /// Init was reaped.
    Reaped(WaitStatus),
    /// Init reported the command's status with every process inside gone, and is still
    /// exiting (the namespaces' teardown).
    Reported(WaitStatus),
}

/// Relay the terminal and signals until the sandbox ends: until init reports the command's
/// status on `exit_pipe` (every process inside gone) or is reaped.
fn relay(
    child: &sys::Child,
    master: Option<OwnedFd>,
    mut exec: Option<ExecSupervisor>,
    mut exit_pipe: Option<OwnedFd>,
    signals: &Signals,
) -> io::Result<Ended> {
    let sig_r = &signals.read;
    let _guard = match &master {
        Some(_) => RawGuard {
            fd: 0,
            saved: sys::make_raw(0).ok(),
        },
        None => RawGuard { fd: 0, saved: None },
    };
    let mut stdin_open = master.is_some();
    let mut master_open = master.is_some();
    let mut kill_at: Option<Instant> = None;
    let mut notify_open = true;
    let mut pending_input: Vec<u8> = Vec::new();
    if let Some(m) = &master {
        sys::set_nonblocking(m.as_raw_fd(), true)?;
    }
    // Only the terminal's bytes pass through it: without a pty it is never touched, and
    // zeroing 64 KiB (16 page faults here) at every start is not worth it.
    let mut buf = if master.is_some() {
        vec![0u8; 64 * 1024]
    } else {
        Vec::new()
    };
    let status = loop {
        let mut fds = vec![
            libc::pollfd {
                fd: sig_r.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: child.pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let exit_at = fds.len();
        fds.push(libc::pollfd {
            fd: exit_pipe.as_ref().map_or(-1, |p| p.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        });
        let (notify_fd, broker_fd) = match &exec {
            Some(e) => (
                if notify_open { e.notify_fd() } else { -1 },
                e.answers_fd().unwrap_or(-1),
            ),
            None => (-1, -1),
        };
        fds.push(libc::pollfd {
            fd: notify_fd,
            events: libc::POLLIN,
            revents: 0,
        });
        fds.push(libc::pollfd {
            fd: broker_fd,
            events: libc::POLLIN,
            revents: 0,
        });
        if let Some(m) = &master {
            // Typed input waits in `pending_input` until the pty takes it: the master is
            // non-blocking, so a command that stops reading its terminal cannot freeze the
            // supervisor (which also answers the sandbox's seccomp notifications).
            let room = pending_input.len() < MAX_PENDING_INPUT;
            fds.push(libc::pollfd {
                fd: if stdin_open && room { 0 } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            });
            let out = if pending_input.is_empty() {
                0
            } else {
                libc::POLLOUT
            };
            fds.push(libc::pollfd {
                fd: if master_open { m.as_raw_fd() } else { -1 },
                events: libc::POLLIN | out,
                revents: 0,
            });
        }
        let timeout = kill_at.map_or(-1, |t| {
            t.saturating_duration_since(Instant::now()).as_millis() as i32 + 1
        });
        sys::poll(&mut fds, timeout)?;
        if let Some(e) = exec.as_mut() {
            if fds[3].revents & libc::POLLIN != 0 {
                e.on_notification();
            } else if fds[3].revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                // No process uses the filter any more; polling it would only spin.
                notify_open = false;
            }
            if fds[4].revents != 0 {
                e.on_answers();
            }
        }
        if let Some(t) = kill_at
            && Instant::now() >= t
        {
            let _ = sys::pidfd_send_signal(&child.pidfd, libc::SIGKILL);
            kill_at = None;
        }
        if fds[0].revents != 0 {
            let mut sigs = [0u8; 64];
            let n = sys::read_raw(sig_r.as_raw_fd(), &mut sigs);
            for &s in &sigs[..n.max(0) as usize] {
                let s = s as libc::c_int;
                if s == libc::SIGWINCH
                    && let Some(m) = &master
                {
                    if let Ok(ws) = sys::get_winsize(0) {
                        let _ = sys::set_winsize(m.as_raw_fd(), ws);
                    }
                    continue;
                }
                let _ = sys::pidfd_send_signal(&child.pidfd, s);
                if (s == libc::SIGTERM || s == libc::SIGHUP) && kill_at.is_none() {
                    kill_at = Some(Instant::now() + GRACE);
                }
            }
        }
        if let Some(m) = &master {
            if stdin_open && fds[5].revents != 0 {
                let n = sys::read_raw(0, &mut buf);
                if n <= 0 {
                    stdin_open = false;
                } else {
                    pending_input.extend_from_slice(&buf[..n as usize]);
                }
            }
            if master_open && fds[6].revents & libc::POLLOUT != 0 {
                match sys::write_some(m.as_raw_fd(), &pending_input) {
                    Ok(n) => drop(pending_input.drain(..n)),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => master_open = false,
                }
            }
            if master_open && fds[6].revents & !libc::POLLOUT != 0 {
                match sys::read_some(m.as_raw_fd(), &mut buf) {
                    Ok(0) => master_open = false,
                    Ok(n) => sys::write_all_raw(1, &buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    // EIO: every slave descriptor is closed.
                    Err(_) => master_open = false,
                }
            }
        }
        if fds[exit_at].revents != 0 {
            let mut code = [0u8; 1];
            match exit_pipe
                .as_ref()
                .map_or(-1, |p| sys::read_raw(p.as_raw_fd(), &mut code))
            {
                1 => break Ended::Reported(WaitStatus::Exited(i32::from(code[0]))),
                // Init ended without a word (killed): its exit status says what happened.
                _ => exit_pipe = None,
            }
        }
        if fds[1].revents != 0
            && let Some((_, st)) = sys::waitpid(child.pid, false)?
        {
            break Ended::Reaped(st);
        }
    };
    // Whatever the command wrote last is still in the pty: drain it before restoring the terminal.
    if let Some(m) = &master {
        let _ = sys::set_nonblocking(m.as_raw_fd(), true);
        loop {
            let n = sys::read_raw(m.as_raw_fd(), &mut buf);
            if n <= 0 {
                break;
            }
            sys::write_all_raw(1, &buf[..n as usize]);
        }
    }
    Ok(status)
}

/// The forwarded signals, caught: a handler writes each to a pipe the relay reads, from
/// before the command's first exec is answered until the relay has ended (then their default
/// actions are back).
pub(crate) struct Signals {
    read: OwnedFd,
    _write: OwnedFd,
}

impl Signals {
    fn catch() -> io::Result<Signals> {
        let (read, write) = sys::pipe()?;
        sys::set_nonblocking(write.as_raw_fd(), true)?;
        sys::set_nonblocking(read.as_raw_fd(), true)?;
        SIGNAL_PIPE.store(write.as_raw_fd(), Ordering::Relaxed);
        let caught = Signals {
            read,
            _write: write,
        };
        for sig in FORWARDED {
            sys::install_handler(sig, on_signal)?;
        }
        Ok(caught)
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for sig in FORWARDED {
            sys::default_handler(sig);
        }
        SIGNAL_PIPE.store(-1, Ordering::Relaxed);
    }
}
