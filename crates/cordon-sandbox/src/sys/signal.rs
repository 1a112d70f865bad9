//! Signals: handlers, the default action, the mask, and sending (by pid or pidfd).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use super::{cvt, cvt_long};

pub(crate) fn kill(pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill takes integers only.
    cvt(unsafe { libc::kill(pid, sig) }).map(drop)
}

pub(crate) fn pidfd_send_signal(pidfd: &OwnedFd, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: pidfd_send_signal with a valid pidfd and no siginfo.
    cvt_long(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })
    .map(drop)
}

/// Install `handler` for `sig` with SA_RESTART off, so blocking calls return EINTR.
pub(crate) fn install_handler(
    sig: libc::c_int,
    handler: extern "C" fn(libc::c_int),
) -> io::Result<()> {
    // SAFETY: sigaction is plain old data; zero is valid. The handler is a plain extern fn.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        cvt(libc::sigaction(sig, &sa, std::ptr::null_mut())).map(drop)
    }
}

/// Reset `sig` to its default action (before exec, so the command starts clean).
pub(crate) fn default_handler(sig: libc::c_int) {
    // SAFETY: SIG_DFL is always valid.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
}

/// Let a write to a closed pipe end the process, as it ends `git log | head` or `cat`: Rust's
/// runtime ignores SIGPIPE, so every `println!` after the reader went away would panic. Only
/// for subcommands that just print; `run` must outlive a peer closing one of its sockets.
pub fn exit_quietly_on_closed_stdout() {
    default_handler(libc::SIGPIPE);
}

/// Block every signal in the calling thread; returns the mask it had, for [`set_signal_mask`].
pub(crate) fn block_all_signals() -> libc::sigset_t {
    // SAFETY: both sets are plain old data, filled by sigfillset and by the call.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        old
    }
}

/// Give the calling thread `mask` (async-signal-safe).
pub(crate) fn set_signal_mask(mask: &libc::sigset_t) {
    // SAFETY: `mask` is a valid set.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
}

/// Reset every signal that has a handler to its default action; ignored ones stay ignored, as
/// an exec keeps them (async-signal-safe: for a child that shares its parent's memory).
pub(crate) fn reset_caught_signals() {
    for sig in 1..=libc::SIGRTMAX() {
        // glibc keeps 32 and 33 (and any up to SIGRTMIN) for itself.
        if sig == libc::SIGKILL || sig == libc::SIGSTOP || (32..libc::SIGRTMIN()).contains(&sig) {
            continue;
        }
        // SAFETY: sigaction reads into plain old data on this stack.
        let caught = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, std::ptr::null(), &mut sa) == 0
                && sa.sa_sigaction != libc::SIG_DFL
                && sa.sa_sigaction != libc::SIG_IGN
        };
        if caught {
            default_handler(sig);
        }
    }
}

/// Unblock every signal (the child of a process that blocked some must not inherit that).
pub(crate) fn unblock_all_signals() {
    // SAFETY: the set is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}
