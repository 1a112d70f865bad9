//! Namespaces: the clone that makes the sandbox, the nested `unshare` that locks its mounts,
//! and the hostname of its UTS namespace.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::{cvt, cvt_long};

/// Namespaces a sandbox gets. Network is empty (loopback only) until the gateway gives it a way out.
pub(crate) const SANDBOX_NAMESPACES: u64 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u64;

#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// The result of [`clone_into_namespaces`] in the parent.
#[derive(Debug)]
pub(crate) struct Child {
    pub pid: libc::pid_t,
    pub pidfd: OwnedFd,
}

/// Fork into fresh namespaces. Returns `Ok(None)` in the child, `Ok(Some(child))` in the parent.
///
/// # Safety
/// Like `fork`: in the child, only async-signal-safe operations may run until `execve`
/// (the caller must not allocate, lock or touch other threads' state).
pub(crate) unsafe fn clone_into_namespaces(flags: u64) -> io::Result<Option<Child>> {
    let mut pidfd: RawFd = -1;
    let args = CloneArgs {
        flags: flags | libc::CLONE_PIDFD as u64,
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    // SAFETY: clone3 with no CLONE_VM and no stack behaves like fork; the args struct and the
    // pidfd slot live across the call. The caller upholds the post-fork restrictions.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    let pid = cvt_long(ret)? as libc::pid_t;
    if pid == 0 {
        return Ok(None);
    }
    // SAFETY: the kernel wrote a fresh pidfd that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok(Some(Child { pid, pidfd }))
}

pub(crate) fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes no pointers; the callers are single-threaded processes.
    cvt(unsafe { libc::unshare(flags) }).map(drop)
}

pub(crate) fn sethostname(name: &str) -> io::Result<()> {
    // SAFETY: the pointer and length describe `name`'s bytes.
    cvt(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) }).map(drop)
}
