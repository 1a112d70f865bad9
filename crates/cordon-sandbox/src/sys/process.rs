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

unsafe extern "C" {
    /// glibc's (POSIX's) environment block.
    static mut environ: *mut *mut libc::c_char;
}

/// Overwrite every string of this process's environment with zeros and empty it. For a
/// process forked to run code of its own ([`super::fork_init`]): its copy of the parent's
/// memory would otherwise hold the parent's environment, the user's real keys among it, also
/// where `/proc/PID/environ` shows it.
pub(crate) fn scrub_environment() {
    // SAFETY: the caller has one thread, so nothing reads or changes the environment
    // meanwhile. Each entry is a NUL-terminated string in writable memory (the kernel's
    // block on the stack, or the heap's for one set later), overwritten within its length;
    // the array ends with a null pointer.
    unsafe {
        let block = environ;
        if block.is_null() {
            return;
        }
        let mut entry = block;
        while !(*entry).is_null() {
            let s = *entry;
            std::ptr::write_bytes(s, 0, libc::strlen(s));
            entry = entry.add(1);
        }
        *block = std::ptr::null_mut();
    }
}

/// Name this process `cordon-init`, as an exec'd init is named: its `comm`, and its command
/// line, overwritten where the kernel keeps it (the argument strings' own memory; a line
/// shorter than the name keeps what fits). As `setproctitle` does, the area's last byte is
/// left non-zero, so that the kernel shows the line up to its first NUL, not the whole area.
pub(crate) fn name_init() {
    const NAME: &[u8] = b"cordon-init\0";
    // SAFETY: PR_SET_NAME copies at most 16 bytes from a NUL-terminated string.
    unsafe { libc::prctl(libc::PR_SET_NAME, NAME.as_ptr(), 0, 0, 0) };
    let Some((start, end)) = argument_area() else {
        return;
    };
    let len = end.saturating_sub(start);
    if len == 0 {
        return;
    }
    // SAFETY: [start, end) is this process's argument block as the kernel reports it, in its
    // writable stack mapping; the caller has one thread, and init reads no arguments (Rust's
    // `std::env::args` would read these same strings).
    unsafe {
        let area = start as *mut u8;
        std::ptr::write_bytes(area, 0, len);
        std::ptr::copy_nonoverlapping(NAME.as_ptr(), area, NAME.len().min(len) - 1);
        if len > NAME.len() {
            *area.add(len - 1) = b' ';
        }
    }
}

/// `arg_start` and `arg_end` of /proc/self/stat (fields 48 and 49).
fn argument_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, whose parentheses may hold anything: field 3 first.
    let mut fields = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .skip(45);
    let start = fields.next()?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    Some((start, end))
}
