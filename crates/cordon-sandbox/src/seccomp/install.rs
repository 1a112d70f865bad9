//! Installing the programs on the calling thread (the sandbox side, just before exec).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use seccompiler::BpfProgram;

use super::program::Filters;

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, prog)`; returns the syscall's result.
fn set_filter(p: &BpfProgram, flags: libc::c_ulong) -> io::Result<libc::c_long> {
    let len = u16::try_from(p.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    let prog = libc::sock_fprog {
        len,
        // seccompiler's sock_filter is #[repr(C)] with the kernel's layout (u16, u8, u8, u32),
        // the same as libc's; the kernel only reads through the pointer.
        filter: p.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prog points to `len` valid instructions that outlive the call; the kernel copies
    // the program and does not keep the pointer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Install every filter on the calling thread (requires no_new_privs); the last gets
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER` (and `WAIT_KILLABLE_RECV` where the kernel has it, 5.19+:
/// once the supervisor has received a notification, only a fatal signal interrupts the wait,
/// so an exec held for `ask` is not restarted by every signal a runtime sends itself); returns
/// its listener fd (close-on-exec). Fails with EBUSY inside another sandbox that already has a
/// listener in its filter chain.
pub(crate) fn install(f: &Filters) -> io::Result<OwnedFd> {
    let Some((last, first)) = f.programs.split_last() else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    for p in first {
        set_filter(p, 0)?;
    }
    let listener = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER;
    let fd = match set_filter(
        last,
        listener | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
    ) {
        // An older kernel: the flag is unknown and nothing was installed.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => set_filter(last, listener)?,
        r => r?,
    };
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: with NEW_LISTENER the kernel returns a new descriptor (O_CLOEXEC) that nothing
    // else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
