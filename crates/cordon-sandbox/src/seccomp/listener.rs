//! The supervisor's side of the user-notification listener: receive a held syscall, check it
//! is still pending, answer it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6).
const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: libc::c_ulong = 1;

/// The supervisor's side of the listener.
#[derive(Debug)]
pub(crate) struct Listener {
    fd: OwnedFd,
}

/// One held syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Notification {
    /// The notification's id, for the answer.
    pub id: u64,
    /// The calling thread, in the supervisor's PID namespace (0 if not visible there).
    pub pid: u32,
    /// The syscall number.
    pub nr: i64,
    /// The raw arguments.
    pub args: [u64; 6],
    /// The caller's `AUDIT_ARCH_*`.
    pub arch: u32,
}

impl Listener {
    pub(crate) fn new(fd: OwnedFd) -> Self {
        Listener { fd }
    }

    /// Wake the notifying thread on the supervisor's CPU when answering
    /// (`SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`, Linux 6.6): faster supervised execs. Err if the
    /// kernel lacks it; nothing else changes then.
    pub(crate) fn set_sync_wakeup(&self) -> io::Result<()> {
        // SAFETY: SET_FLAGS takes its flags by value; no memory is passed.
        let r = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
            )
        };
        cvt(r)
    }

    /// Wait for the next notification. EINTR, and ENOENT (the caller died or was interrupted
    /// before it was received), are returned as errors for the caller to retry.
    pub(crate) fn recv(&self) -> io::Result<Notification> {
        // SAFETY: seccomp_notif is plain integers; all-zero is valid, and the kernel requires
        // the buffer to be zeroed.
        let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl's size matches seccomp_notif, which is live and writable.
        let r = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut n as *mut libc::seccomp_notif,
            )
        };
        cvt(r)?;
        Ok(Notification {
            id: n.id,
            pid: n.pid,
            nr: i64::from(n.data.nr),
            args: n.data.args,
            arch: n.data.arch,
        })
    }

    /// Whether notification `id` is still pending (its caller alive and waiting): check it
    /// after reading the caller's memory, before acting on what was read.
    pub(crate) fn id_valid(&self, id: u64) -> bool {
        // SAFETY: the kernel reads one u64 through the pointer, which is live.
        let r = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &id as *const u64,
            )
        };
        r == 0
    }

    fn send(&self, resp: libc::seccomp_notif_resp) -> io::Result<()> {
        let mut resp = resp;
        // SAFETY: the ioctl's size matches seccomp_notif_resp, which is live.
        let r = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &mut resp as *mut libc::seccomp_notif_resp,
            )
        };
        cvt(r)
    }

    /// Let the syscall run (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`).
    pub(crate) fn allow(&self, id: u64) -> io::Result<()> {
        self.send(libc::seccomp_notif_resp {
            id,
            val: 0,
            error: 0,
            flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        })
    }

    /// Fail the syscall with `errno`.
    pub(crate) fn deny(&self, id: u64, errno: i32) -> io::Result<()> {
        self.send(libc::seccomp_notif_resp {
            id,
            val: 0,
            error: -errno,
            flags: 0,
        })
    }

    /// The descriptor, to poll (readable: a notification is waiting; hang-up: no process is
    /// left under the filter).
    pub(crate) fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn cvt(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
