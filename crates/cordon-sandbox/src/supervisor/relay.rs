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
    pub(super) fn catch() -> io::Result<Signals> {
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
