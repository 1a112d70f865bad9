//! The supervisor's half of a sandbox (host side): create it, relay the terminal, forward
//! signals, wait, and report.
//!
//! Of the crossings ([`crate::Crossing`]), the host's ends of the control channel, the pty
//! master, the forwarded signals, the exit pipe and the seccomp descriptor are handled here.
//! This module holds what a run is given and the order of its steps; init's clone
//! ([`spawn`]), the view and environment ([`view`]), init's handover ([`handover`]), the
//! relay ([`relay`]) and the events of each ([`report`]) are its submodules.

mod handover;
mod relay;
mod report;
mod spawn;
mod view;

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use cordon_approval::{Approvals, Mailbox};
use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::{ExecAction, FilesystemPlan, NetMode, Plan};

use crate::SandboxError;
use crate::layout::{self, Staged};
use crate::net::{Inward, NetAttach};
use crate::protocol::{self, InitSpec, NetSetup};
use crate::sys::{self, WaitStatus};

use handover::Sandbox;
use relay::Signals;
use report::{report_seccomp, report_started};
pub use spawn::{EarlyInit, adopt_init, clone_init};
use view::{HOSTNAME, environment, view};

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
    /// Host files bound read-only inside masked directories, as (path inside, host file): a
    /// VM's kernel and initramfs, which QEMU reads inside the sandbox. One that cannot be
    /// placed stops the start.
    pub bound: Vec<(PathBuf, PathBuf)>,
    /// Where caught signals go instead of the sandbox's init (a VM guest's control port, so
    /// that Ctrl-C reaches the command in the guest, not QEMU). TERM and HUP still start the
    /// grace after which init is killed.
    pub signals_to: Option<SignalSink>,
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

/// Receives the signals the supervisor catches, in place of the sandbox's init
/// ([`Command::signals_to`]).
#[derive(Clone)]
pub struct SignalSink(pub std::sync::Arc<dyn Fn(i32) + Send + Sync>);

impl std::fmt::Debug for SignalSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SignalSink")
    }
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
        let at = view::gateway_at(net.as_deref());
        let env = environment(
            plan,
            cmd,
            net_setup,
            &at,
            bundle_at.as_deref(),
            &layout,
            emit,
        );
        let mut spec = init_spec(plan, cmd, layout, env, net_setup);
        let (sock, child) = self.parts.take().expect("init is there until run takes it");
        let sandbox = Sandbox::into_cgroup(child, plan, &mut spec, emit)?;
        // Caught from before the command runs on: a signal sent once it has started (it may
        // print before the start's events are written) is forwarded, never cordon's death.
        let signals = match Signals::catch() {
            Ok(mut s) => {
                s.to = cmd.signals_to.clone();
                s
            }
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
