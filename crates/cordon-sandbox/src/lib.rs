//! cordon-sandbox: filesystem and process isolation (layer 1) — namespaces, mounts, Landlock,
//! the pty, init and reaper, resource limits.
//!
//! Both sides of the boundary live here, kept in separate modules:
//! - host side (the supervisor, the user's uid): [`run`] turns a [`Plan`] into a [`Layout`],
//!   clones the sandbox, relays the terminal and forwards signals;
//! - sandbox side: [`init_main`], PID 1 inside the new namespaces, builds the view and starts
//!   the command in a locked, capability-free, Landlock-fenced nested namespace.
//!
//! The crossings: the control channel (setup only), the pty master, forwarded signals, and
//! the network handoff ([`net`]: TUN device, DNS and proxy sockets, the publish helper).
//! All `unsafe` of cordon lives in the private `sys` module, and the kernel-facing `unsafe` of
//! the syscall filter (the `seccomp` syscall, the notification listener's ioctls) in the
//! private `seccomp` module.
//!
//! ```no_run
//! # fn demo(plan: &cordon_policy::Plan) -> Result<(), cordon_sandbox::SandboxError> {
//! use cordon_sandbox::{Command, TtyMode};
//! let cmd = Command { argv: vec!["true".into()], cwd: plan.project.clone(), tty: TtyMode::Never, session: "demo".into(), staged: vec![], shown: vec![] };
//! let outcome = cordon_sandbox::run(plan, &cmd, &|event| eprintln!("{event:?}"))?;
//! assert_eq!(outcome.code(), 0);
//! # Ok(()) }
//! ```
//! A binary using this crate must call [`init_main`] first thing when its first argument is
//! [`INIT_ARG`]: the sandbox's init is the same executable, re-executed inside the namespaces.

mod cgroup;
mod exec_supervisor;
mod fence;
mod init;
pub mod layout;
mod mounts;
pub mod net;
pub mod probe;
mod protocol;
mod seccomp;
mod supervisor;
mod sys;

pub use cordon_policy::Plan;
pub use fence::FenceStatus;
pub use layout::{Layout, MountOp, Staged, prepare, prepare_with_state};
pub use net::{Inward, NetAttach, NetHandoff, SocketTable, host_bundle};
pub use supervisor::{Command, Outcome, TtyMode, run, run_with_network};
pub use sys::{
    WaitStatus, ids, landlock_abi, passwd_home, prefer_fresh_pages_for_large_allocations,
    raise_nofile_limit,
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
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Namespaces(String),
    #[error("sandbox setup failed at {stage}: {message}")]
    Setup { stage: String, message: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}
