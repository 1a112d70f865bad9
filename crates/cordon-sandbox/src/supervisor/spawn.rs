//! Init's clone: into the namespaces the plan needs, with its id maps, exec'd or forked
//! early ([`EarlyInit`]), and sent its network setup; an init never given its spec is
//! killed and reaped.

use std::ffi::CString;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};

use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::Plan;

use super::{Unborn, io_err, net_setup};
use crate::init::CONTROL_FD;
use crate::protocol::{self, NetSetup};
use crate::sys;
use crate::{INIT_ARG, SandboxError};

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
