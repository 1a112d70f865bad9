//! Init's handover, from its clone's move into cgroups to the command's end: what init
//! passes back until the command has started (terminal, network, seccomp listener), the exec
//! supervisor around that listener, and the wait; any failure on the way kills init.

use std::os::fd::{OwnedFd, RawFd};

use cordon_approval::{Approvals, Mailbox};
use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::Plan;

use super::relay::{Ended, Signals, relay};
use super::report::report_limits;
use super::{HomeTrace, Outcome, io_err};
use crate::SandboxError;
use crate::cgroup::Cgroup;
use crate::exec_supervisor::ExecSupervisor;
use crate::fence::FenceStatus;
use crate::limits::AppliedLimit;
use crate::net::{NetAttach, NetHandoff};
use crate::protocol::{self, FromInit, InitSpec};
use crate::seccomp::Listener;
use crate::sys;

/// What init hands over, besides the network, before the command starts.
pub(super) struct Handover {
    /// The pty master, when the command has a terminal of its own.
    pub(super) master: Option<OwnedFd>,
    /// The seccomp notification listener.
    pub(super) listener: Option<OwnedFd>,
    /// Where init reports the command's end once everything inside is gone.
    pub(super) exit_pipe: Option<OwnedFd>,
    /// What init said of the start, for its events.
    pub(super) started: StartReport,
}

/// Init's news of the command's start, emitted by [`report_started`].
pub(super) struct StartReport {
    pub(super) pid: i32,
    pub(super) landlock: FenceStatus,
    pub(super) limits: Vec<AppliedLimit>,
    pub(super) overlays_ahead: usize,
    pub(super) pty: bool,
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
pub(super) struct Sandbox {
    child: sys::Child,
    cgroup: Cgroup,
}

impl Sandbox {
    /// Move init into cgroups carrying `[limits]`, as far as this user may, before it starts
    /// anything. What a cgroup carries, the command's rlimits need not also approximate, so
    /// those are taken out of `spec`.
    pub(super) fn into_cgroup(
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
    pub(super) fn abort(&self, e: SandboxError) -> SandboxError {
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
    pub(super) fn receive_setup(
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
    pub(super) fn exec_supervisor<'a>(
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
    pub(super) fn supervise(
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
