//! Thin, checked wrappers over the Linux system calls the sandbox needs, one file per job.
//!
//! Most of cordon-sandbox's `unsafe` is here (the rest: the syscall filter's installer and
//! listener in `seccomp`, and the caller of [`clone_into_namespaces`] in `probe`, which must
//! keep the post-fork rules). Every block says why it is sound. Everything returns `io::Result`
//! (or a plain value where the call cannot fail); callers add context.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

mod fd;
mod features;
mod mount;
mod namespace;
mod netif;
mod passwd;
mod privilege;
mod process;
mod pty;
mod remote;
mod resources;
mod signal;
mod sock_diag;

// Items the crate re-exports (`WaitStatus`, `ids`, `landlock_abi`, …).
pub use features::*;
pub use netif::TUN_VNET_HDR_LEN;
pub use passwd::*;
pub use process::*;
pub use resources::*;
pub use signal::exit_quietly_on_closed_stdout;

pub(crate) use fd::*;
pub(crate) use mount::*;
pub(crate) use namespace::*;
pub(crate) use netif::*;
pub(crate) use privilege::*;
pub(crate) use pty::*;
pub(crate) use remote::*;
pub(crate) use signal::*;
pub(crate) use sock_diag::*;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_long(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

pub(crate) fn cstr(path: &Path) -> io::Result<CString> {
    cstring(path.as_os_str())
}

pub(crate) fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in string"))
}
