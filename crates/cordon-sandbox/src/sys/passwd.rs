//! Who the caller is: real uid/gid, and the home directory the password database gives.

use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;

pub(crate) fn getuid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getuid() }
}

pub(crate) fn getgid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getgid() }
}

/// The home directory of `uid` from the password database (NSS), if any.
pub fn passwd_home(uid: u32) -> Option<std::path::PathBuf> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: passwd is plain old data; getpwuid_r fills it and points its strings into buf.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; buf outlives the use of pw's strings below.
    let r = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if r != 0 || out.is_null() || pw.pw_dir.is_null() {
        return None;
    }
    // SAFETY: pw_dir is a NUL-terminated string inside buf, which is still alive.
    let dir = unsafe { CStr::from_ptr(pw.pw_dir) };
    Some(std::path::PathBuf::from(OsStr::from_bytes(dir.to_bytes())))
}

/// The caller's real uid and gid.
pub fn ids() -> (u32, u32) {
    (getuid(), getgid())
}
