//! Process lifecycle: fork, exec (including the allocation-free exec a cloned child needs),
//! sessions, parent-death signals, waiting and `_exit`.

use std::ffi::{CStr, CString};
use std::io;

use super::cvt;

/// Plain fork, used by the sandbox's init (single-threaded) to start the command.
pub(crate) fn fork() -> io::Result<libc::pid_t> {
    // SAFETY: the init process that calls this is single-threaded, so the child may allocate.
    cvt(unsafe { libc::fork() })
}

pub(crate) fn set_pdeathsig(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) }).map(drop)
}

pub(crate) fn setsid() -> io::Result<()> {
    // SAFETY: no arguments.
    cvt(unsafe { libc::setsid() }).map(drop)
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStatus {
    Exited(i32),
    Signaled(i32),
}

impl WaitStatus {
    /// The shell convention: the exit code, or 128+N after signal N.
    pub fn code(self) -> i32 {
        match self {
            WaitStatus::Exited(c) => c,
            WaitStatus::Signaled(s) => 128 + s,
        }
    }
}

fn decode(status: libc::c_int) -> Option<WaitStatus> {
    if libc::WIFEXITED(status) {
        Some(WaitStatus::Exited(libc::WEXITSTATUS(status)))
    } else if libc::WIFSIGNALED(status) {
        Some(WaitStatus::Signaled(libc::WTERMSIG(status)))
    } else {
        None
    }
}

/// `waitpid`, retried on EINTR unless `nohang`. Returns `None` when nothing has exited yet.
pub(crate) fn waitpid(
    pid: libc::pid_t,
    nohang: bool,
) -> io::Result<Option<(libc::pid_t, WaitStatus)>> {
    loop {
        let mut status = 0;
        let flags = if nohang { libc::WNOHANG } else { 0 };
        // SAFETY: status points to a live c_int.
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                if nohang {
                    return Ok(None);
                }
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Ok(None);
        }
        if let Some(ws) = decode(status) {
            return Ok(Some((r, ws)));
        }
    }
}

/// Blocking `waitpid(-1)` that returns on EINTR so the caller can look at pending signals.
pub(crate) fn wait_any_interruptible() -> io::Result<Option<(libc::pid_t, WaitStatus)>> {
    let mut status = 0;
    // SAFETY: status points to a live c_int.
    let r = unsafe { libc::waitpid(-1, &mut status, 0) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(decode(status).map(|ws| (r, ws)))
}

/// `execve`; returns only on failure.
pub(crate) fn execve(path: &CStr, argv: &[CString], envp: &[CString]) -> io::Error {
    let mut a: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    a.push(std::ptr::null());
    let mut e: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    e.push(std::ptr::null());
    // SAFETY: argv and envp are NULL-terminated arrays of NUL-terminated strings that outlive the call.
    unsafe { libc::execve(path.as_ptr(), a.as_ptr(), e.as_ptr()) };
    io::Error::last_os_error()
}

/// `_exit`: leave without running destructors or atexit handlers (post-fork children).
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and is async-signal-safe.
    unsafe { libc::_exit(code) }
}

/// An `execve` whose argument arrays are built in advance, so the call itself allocates
/// nothing and can run in a freshly cloned child.
pub(crate) struct PreparedExec {
    path: CString,
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

impl PreparedExec {
    pub(crate) fn new(path: CString, argv: Vec<CString>, envp: Vec<CString>) -> Self {
        let mut a: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
        a.push(std::ptr::null());
        let mut e: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
        e.push(std::ptr::null());
        let mut strings = argv;
        strings.extend(envp);
        // The pointers stay valid: moving a CString moves only its heap handle, not the bytes.
        PreparedExec {
            path,
            _strings: strings,
            argv: a,
            envp: e,
        }
    }

    /// Returns only on failure.
    pub(crate) fn exec(&self) -> io::Error {
        // SAFETY: both arrays are NULL-terminated and point into strings owned by self.
        unsafe { libc::execve(self.path.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr()) };
        io::Error::last_os_error()
    }
}
