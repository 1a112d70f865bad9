//! Dropping privilege before the command runs: no_new_privs, every capability, and the
//! dumpable flag that keeps init out of the command's reach.

use std::io;

use super::{cvt, cvt_long};

pub(crate) fn set_dumpable(on: bool) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, on as libc::c_ulong, 0, 0, 0) }).map(drop)
}

pub(crate) fn set_no_new_privs() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }).map(drop)
}

/// Drop every capability: bounding set, ambient set, then effective/permitted/inheritable.
/// With an empty bounding set even uid 0 gains nothing at the next `execve`.
pub(crate) fn drop_all_capabilities() -> io::Result<()> {
    let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<libc::c_ulong>().ok())
        .unwrap_or(63);
    for cap in 0..=last {
        // SAFETY: prctl with integer arguments only.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(e);
            }
        }
    }
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    })?;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let data = [Data::default(); 2];
    // SAFETY: capset reads one header and two data structs (version 3 layout), all valid here.
    cvt_long(unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) })?;
    Ok(())
}
