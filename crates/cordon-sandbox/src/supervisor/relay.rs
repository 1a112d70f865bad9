//! The relay while the command runs: the terminal's bytes both ways through the pty, the
//! forwarded signals (caught into a pipe), the exec supervisor's notifications, and the
//! news of the sandbox's end.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crate::exec_supervisor::ExecSupervisor;
use crate::init::FORWARDED;
use crate::sys::{self, WaitStatus};

/// Typed input held for a command that is not reading its terminal, before we stop reading ours.
const MAX_PENDING_INPUT: usize = 1 << 20;

/// How long a sandbox gets to exit after TERM/HUP before it is killed outright.
const GRACE: Duration = Duration::from_secs(5);

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

/// How the relay learnt that the sandbox ended.
pub(super) enum Ended {
    /// Init was reaped.
    Reaped(WaitStatus),
    /// Init reported the command's status with every process inside gone, and is still
    /// exiting (the namespaces' teardown).
    Reported(WaitStatus),
}

/// Relay the terminal and signals until the sandbox ends: until init reports the command's
/// status on `exit_pipe` (every process inside gone) or is reaped.
pub(super) fn relay(
    child: &sys::Child,
    master: Option<OwnedFd>,
    exec: Option<ExecSupervisor>,
    exit_pipe: Option<OwnedFd>,
    signals: &Signals,
) -> io::Result<Ended> {
    let _guard = match &master {
        Some(_) => RawGuard {
            fd: 0,
            saved: sys::make_raw(0).ok(),
        },
        None => RawGuard { fd: 0, saved: None },
    };
    let mut relay = Relay::new(child, master, exec, exit_pipe, signals)?;
    let status = loop {
        let mut fds = relay.poll_set();
        sys::poll(&mut fds, relay.timeout())?;
        if let Some(ended) = relay.on_ready(&fds)? {
            break ended;
        }
    };
    relay.drain_terminal();
    Ok(status)
}

/// Where each descriptor stands in [`Relay::poll_set`]; the last two only with a pty.
const SIGNALS: usize = 0;
const INIT: usize = 1;
const EXIT: usize = 2;
const NOTIFY: usize = 3;
const ANSWERS: usize = 4;
const STDIN: usize = 5;
const MASTER: usize = 6;

/// The relay's state between two polls.
struct Relay<'r, 'e> {
    child: &'r sys::Child,
    signals: &'r Signals,
    master: Option<OwnedFd>,
    exec: Option<ExecSupervisor<'e>>,
    exit_pipe: Option<OwnedFd>,
    stdin_open: bool,
    master_open: bool,
    kill_at: Option<Instant>,
    notify_open: bool,
    pending_input: Vec<u8>,
    buf: Vec<u8>,
}

impl<'r, 'e> Relay<'r, 'e> {
    fn new(
        child: &'r sys::Child,
        master: Option<OwnedFd>,
        exec: Option<ExecSupervisor<'e>>,
        exit_pipe: Option<OwnedFd>,
        signals: &'r Signals,
    ) -> io::Result<Self> {
        if let Some(m) = &master {
            sys::set_nonblocking(m.as_raw_fd(), true)?;
        }
        // Only the terminal's bytes pass through it: without a pty it is never touched, and
        // zeroing 64 KiB (16 page faults here) at every start is not worth it.
        let buf = if master.is_some() {
            vec![0u8; 64 * 1024]
        } else {
            Vec::new()
        };
        Ok(Relay {
            child,
            signals,
            stdin_open: master.is_some(),
            master_open: master.is_some(),
            master,
            exec,
            exit_pipe,
            kill_at: None,
            notify_open: true,
            pending_input: Vec::new(),
            buf,
        })
    }

    /// The descriptors to wait on, at the places the constants above name.
    fn poll_set(&self) -> Vec<libc::pollfd> {
        let pollin = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds = vec![
            pollin(self.signals.read.as_raw_fd()),
            pollin(self.child.pidfd.as_raw_fd()),
            pollin(self.exit_pipe.as_ref().map_or(-1, |p| p.as_raw_fd())),
        ];
        let (notify_fd, broker_fd) = match &self.exec {
            Some(e) => (
                if self.notify_open { e.notify_fd() } else { -1 },
                e.answers_fd().unwrap_or(-1),
            ),
            None => (-1, -1),
        };
        fds.push(pollin(notify_fd));
        fds.push(pollin(broker_fd));
        if let Some(m) = &self.master {
            // Typed input waits in `pending_input` until the pty takes it: the master is
            // non-blocking, so a command that stops reading its terminal cannot freeze the
            // supervisor (which also answers the sandbox's seccomp notifications).
            let room = self.pending_input.len() < MAX_PENDING_INPUT;
            fds.push(pollin(if self.stdin_open && room { 0 } else { -1 }));
            let out = if self.pending_input.is_empty() {
                0
            } else {
                libc::POLLOUT
            };
            fds.push(libc::pollfd {
                fd: if self.master_open { m.as_raw_fd() } else { -1 },
                events: libc::POLLIN | out,
                revents: 0,
            });
        }
        fds
    }

    /// Until the grace after TERM/HUP is over, or for ever.
    fn timeout(&self) -> i32 {
        self.kill_at.map_or(-1, |t| {
            t.saturating_duration_since(Instant::now()).as_millis() as i32 + 1
        })
    }

    /// Serve what the poll found ready; `Some` once the sandbox has ended.
    fn on_ready(&mut self, fds: &[libc::pollfd]) -> io::Result<Option<Ended>> {
        self.serve_exec(fds);
        self.kill_after_grace();
        if fds[SIGNALS].revents != 0 {
            self.forward_signals();
        }
        self.relay_terminal(fds);
        if fds[EXIT].revents != 0
            && let Some(ended) = self.read_exit_pipe()
        {
            return Ok(Some(ended));
        }
        if fds[INIT].revents != 0
            && let Some((_, st)) = sys::waitpid(self.child.pid, false)?
        {
            return Ok(Some(Ended::Reaped(st)));
        }
        Ok(None)
    }

    /// The exec supervisor's seccomp notifications and the broker's answers.
    fn serve_exec(&mut self, fds: &[libc::pollfd]) {
        let Some(e) = self.exec.as_mut() else {
            return;
        };
        if fds[NOTIFY].revents & libc::POLLIN != 0 {
            e.on_notification();
        } else if fds[NOTIFY].revents & (libc::POLLHUP | libc::POLLERR) != 0 {
            // No process uses the filter any more; polling it would only spin.
            self.notify_open = false;
        }
        if fds[ANSWERS].revents != 0 {
            e.on_answers();
        }
    }

    fn kill_after_grace(&mut self) {
        if let Some(t) = self.kill_at
            && Instant::now() >= t
        {
            let _ = sys::pidfd_send_signal(&self.child.pidfd, libc::SIGKILL);
            self.kill_at = None;
        }
    }

    /// Each caught signal to init, but a window's resize, which goes to the pty; TERM and HUP
    /// also start the grace after which init is killed.
    fn forward_signals(&mut self) {
        let mut sigs = [0u8; 64];
        let n = sys::read_raw(self.signals.read.as_raw_fd(), &mut sigs);
        for &s in &sigs[..n.max(0) as usize] {
            let s = s as libc::c_int;
            if s == libc::SIGWINCH
                && let Some(m) = &self.master
            {
                if let Ok(ws) = sys::get_winsize(0) {
                    let _ = sys::set_winsize(m.as_raw_fd(), ws);
                }
                continue;
            }
            match &self.signals.to {
                Some(to) => (to.0)(s),
                None => drop(sys::pidfd_send_signal(&self.child.pidfd, s)),
            }
            if (s == libc::SIGTERM || s == libc::SIGHUP) && self.kill_at.is_none() {
                self.kill_at = Some(Instant::now() + GRACE);
            }
        }
    }

    /// Typed input into the pty, the command's output onto our terminal.
    fn relay_terminal(&mut self, fds: &[libc::pollfd]) {
        let Some(m) = self.master.as_ref().map(|m| m.as_raw_fd()) else {
            return;
        };
        if self.stdin_open && fds[STDIN].revents != 0 {
            let n = sys::read_raw(0, &mut self.buf);
            if n <= 0 {
                self.stdin_open = false;
            } else {
                self.pending_input
                    .extend_from_slice(&self.buf[..n as usize]);
            }
        }
        if self.master_open && fds[MASTER].revents & libc::POLLOUT != 0 {
            match sys::write_some(m, &self.pending_input) {
                Ok(n) => drop(self.pending_input.drain(..n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => self.master_open = false,
            }
        }
        if self.master_open && fds[MASTER].revents & !libc::POLLOUT != 0 {
            match sys::read_some(m, &mut self.buf) {
                Ok(0) => self.master_open = false,
                Ok(n) => sys::write_all_raw(1, &self.buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // EIO: every slave descriptor is closed.
                Err(_) => self.master_open = false,
            }
        }
    }

    /// Init's word of the command's status; without one the pipe is dropped.
    fn read_exit_pipe(&mut self) -> Option<Ended> {
        let mut code = [0u8; 1];
        match self
            .exit_pipe
            .as_ref()
            .map_or(-1, |p| sys::read_raw(p.as_raw_fd(), &mut code))
        {
            1 => Some(Ended::Reported(WaitStatus::Exited(i32::from(code[0])))),
            // Init ended without a word (killed): its exit status says what happened.
            _ => {
                self.exit_pipe = None;
                None
            }
        }
    }

    /// Whatever the command wrote last is still in the pty: drain it before restoring the
    /// terminal.
    fn drain_terminal(&mut self) {
        if let Some(m) = &self.master {
            let _ = sys::set_nonblocking(m.as_raw_fd(), true);
            loop {
                let n = sys::read_raw(m.as_raw_fd(), &mut self.buf);
                if n <= 0 {
                    break;
                }
                sys::write_all_raw(1, &self.buf[..n as usize]);
            }
        }
    }
}

/// The forwarded signals, caught: a handler writes each to a pipe the relay reads, from
/// before the command's first exec is answered until the relay has ended (then their default
/// actions are back).
pub(crate) struct Signals {
    read: OwnedFd,
    _write: OwnedFd,
    /// Where they go instead of init ([`super::Command::signals_to`]).
    pub(super) to: Option<super::SignalSink>,
}

impl Signals {
    pub(super) fn catch() -> io::Result<Signals> {
        let (read, write) = sys::pipe()?;
        sys::set_nonblocking(write.as_raw_fd(), true)?;
        sys::set_nonblocking(read.as_raw_fd(), true)?;
        SIGNAL_PIPE.store(write.as_raw_fd(), Ordering::Relaxed);
        let caught = Signals {
            read,
            _write: write,
            to: None,
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
