//! cordon-sandbox: filesystem and process isolation (layer 1) and the syscall filter with
//! supervised exec (layer 4) — namespaces, mounts, Landlock, seccomp, the pty, init and reaper,
//! resource limits.
//!
//! Both sides of the boundary live here, kept in separate modules:
//! - host side (the supervisor, the user's uid): [`run`] turns a [`Plan`] into a [`Layout`],
//!   clones the sandbox, relays the terminal and forwards signals;
//! - sandbox side: [`init_main`], PID 1 inside the new namespaces, builds the view and starts
//!   the command in a locked, capability-free, Landlock-fenced nested namespace.
//!
//! The crossings, all thirteen listed once in [`Crossing`] (who makes each, what travels,
//! how it is trusted, the tests that show it): the filesystem view, the control channel
//! (setup only), stdio or the pty, forwarded signals, the seccomp notification descriptor,
//! the network handoff ([`net`]: TUN device, DNS sockets, proxy listener, sock_diag socket,
//! the publish helper), the exit pipe, and host sockets mounted inside (the ssh agent).
//!
//! The modules, by side:
//! - host side: `supervisor` ([`run`], or [`clone_init`] early and [`Unborn::run`]: view,
//!   clone, setup handshake, relay), `exec_supervisor` (answers the filter's notifications),
//!   `cgroup`, [`probe`] (`cordon doctor`), `bundle` (the sandbox's trust bundle kept as a file
//!   in a directory no sandbox sees, bound read-only: [`bundle_file`]);
//! - sandbox side: `init`, `mounts` (builds the view), `fence` (Landlock), `seccomp` (the
//!   filter, whose `listener` the supervisor uses);
//! - both: `crossing` ([`Crossing`], the inventory of the boundary), [`layout`] (the view as
//!   ordered [`MountOp`]s), `protocol` (the control channel's messages), `limits` (limits
//!   and how each is enforced), [`net`] (the handoff), `sys` (checked syscall wrappers, one
//!   file per job).
//!
//! Where `unsafe` is (nearly all of cordon's; `cordon-approval` has one `SO_PEERCRED` call):
//! the wrappers in `sys` (among them `spawn_in_namespaces`, whose child shares the supervisor's
//! memory until its exec, and `fork_init`, whose init runs in a copy of the supervisor's memory
//! as it was before any thread or secret, its environment overwritten); the filter's
//! installer and listener ioctls in `seccomp`; and the
//! call of `sys::clone_into_namespaces` in `probe`, whose child keeps to async-signal-safe
//! calls until it exits. Every block says why it is sound (`// SAFETY:`).
//! Enforcement status is typed from the kernel call to the event ([`FenceStatus`] with
//! [`cordon_events::Enforcement`], limits with [`cordon_events::LimitVia`]).
//!
//! ```no_run
//! # fn demo(plan: &cordon_policy::Plan) -> Result<(), cordon_sandbox::SandboxError> {
//! use cordon_sandbox::{Command, TtyMode};
//! let cmd = Command { argv: vec!["true".into()], cwd: plan.project.clone(), tty: TtyMode::Never, session: "demo".into(), approvals: None, staged: vec![], shown: vec![], placed: vec![], sockets: vec![], bound: vec![], signals_to: None, trace_home: None, execs: None };
//! let outcome = cordon_sandbox::run(plan, &cmd, &|event| eprintln!("{event:?}"))?;
//! assert_eq!(outcome.code(), 0);
//! # Ok(()) }
//! ```
//! A binary using this crate must call [`init_main`] first thing when its first argument is
//! [`INIT_ARG`]: the sandbox's init is the same executable, re-executed inside the namespaces,
//! unless [`EarlyInit::start`] could fork it (one thread, nothing secret read yet).

mod bundle;
mod cgroup;
mod crossing;
mod exec_supervisor;
mod execs_seen;
pub mod explain;
mod fence;
mod init;
pub mod layout;
mod limits;
mod mcp_stdio;
mod mounts;
pub mod net;
pub mod probe;
mod protocol;
mod seccomp;
mod supervisor;
mod sys;
/// Test-only layer switches; debug builds only (see the module).
#[cfg(debug_assertions)]
pub mod test_off;

pub use bundle::{bundle_file, bundle_pem};
pub use cordon_policy::Plan;
pub use crossing::{Carrier, Crossing, Direction, Holder};
pub use execs_seen::{ExecsSeen, start_time};
pub use fence::{FenceStatus, NESTED_COST};
pub use layout::{Layout, MountOp, ShowCopyError, Staged, prepare, prepare_with_state};
pub use net::{Inward, NetAttach, NetHandoff, SocketTable, TrustBundle, host_bundle};
pub use supervisor::{
    Command, EarlyInit, HomeTrace, Outcome, PlacedSocket, SignalSink, TtyMode, Unborn, adopt_init,
    clone_init, run, run_with_network,
};
pub use sys::{
    TUN_VNET_HDR_LEN, WaitStatus, exit_quietly_on_closed_stdout, ids, landlock_abi, passwd_home,
    prefer_fresh_pages_for_large_allocations, raise_nofile_limit,
};

/// The first argument that turns the cordon executable into the sandbox's init.
pub const INIT_ARG: &str = "__cordon_init";

/// Run the sandbox's init. Call only when `argv[1] == INIT_ARG`; never returns.
pub fn init_main() -> ! {
    init::main()
}

/// Why a sandbox could not be started. Any of these means the command did not run.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// [`Command::argv`] is empty.
    #[error("no command given")]
    NoCommand,
    /// [`Unborn::run`] was given another network than [`clone_init`] was told of (a gateway
    /// that is not there): init built for one, so nothing runs.
    #[error("the sandbox's network changed between its init's start and its run")]
    NetworkChanged,
    /// The plan does not mask the approval brokers' directory: a sandbox could answer its own
    /// (or another session's) questions. Plans from `cordon_policy::load` with
    /// `LoadOptions::own_dirs` always do.
    #[error("the plan leaves the approval brokers' directory {} visible; load it with cordon's own directories (LoadOptions::own_dirs)", path.display())]
    BrokerDirVisible {
        /// The directory.
        path: std::path::PathBuf,
    },
    /// The approval brokers' directory, masked in every session, could not be made.
    #[error("cannot prepare the approval directory: {source}")]
    ApprovalDir {
        #[source]
        source: cordon_approval::ApprovalError,
    },
    /// A host file could not be shown as a masked copy (the real file is never shown instead).
    #[error("cannot show a masked copy of {source}")]
    ShownCopy {
        #[source]
        source: layout::ShowCopyError,
    },
    /// The kernel refused the sandbox's namespaces.
    #[error(
        "cannot create user/mount/pid/net namespaces: {source} (is kernel.unprivileged_userns_clone or \
         user.max_user_namespaces disabled, or an AppArmor userns restriction active? run `cordon doctor`)"
    )]
    Namespaces {
        #[source]
        source: std::io::Error,
    },
    /// The caller's uid/gid could not be mapped into the new user namespace.
    #[error("cannot map uid/gid into the sandbox: {source}")]
    IdMaps {
        #[source]
        source: std::io::Error,
    },
    /// The sandbox's init (this executable, through `/proc/self/exe`) could not be started.
    #[error(
        "cannot start the sandbox's init (/proc/self/exe): {source} (is /proc mounted, and was \
         cordon's executable removed or replaced while it ran?)"
    )]
    InitExec {
        #[source]
        source: std::io::Error,
    },
    /// Init reported that a stage of its setup failed. Text, because it comes across the
    /// control channel from the sandbox side.
    #[error("sandbox setup failed at {stage}: {message}")]
    Setup { stage: String, message: String },
    /// The egress gateway refused the network handoff ([`NetAttach::attach`]'s reason).
    #[error("sandbox setup failed at network: {0}")]
    Network(String),
    /// Init ended (its exit status, if it could be reaped) before the command started.
    #[error(
        "sandbox setup failed at init: the sandbox's init {} before the command started; \
         `cordon doctor` checks what this kernel allows",
        how_it_ended(.0)
    )]
    InitEnded(Option<WaitStatus>),
    /// Init started the command without handing over the seccomp listener.
    #[error("sandbox setup failed at syscalls: no seccomp listener came back")]
    NoListener,
    /// A system call of the supervisor's own failed; `what` says what it was doing.
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// How init ended, in words (for [`SandboxError::InitEnded`]).
fn how_it_ended(st: &Option<WaitStatus>) -> String {
    match st {
        Some(WaitStatus::Exited(c)) => format!("exited with status {c}"),
        Some(WaitStatus::Signaled(s)) => format!("was killed by signal {s}"),
        None => "ended (its status could not be read)".into(),
    }
}
