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

/// `CAP_SETFCAP`, the one capability a nested sandbox of root's needs (see
/// [`drop_capabilities_but`]).
pub(crate) const CAP_SETFCAP: libc::c_ulong = 31;

/// Whether the command keeps [`CAP_SETFCAP`]: a sandbox of root's (uid 0 inside is uid 0 of
/// the host) with nested sandboxes. The seccomp filter then refuses it every xattr write,
/// lest a file capability it set be honoured on the host. `root`: the sandbox's uid is 0.
pub(crate) fn keeps_setfcap(nested_userns: bool, root: bool) -> bool {
    nested_userns && root
}

/// Drop every capability but `keep`: bounding set, ambient set, then effective/permitted/
/// inheritable. With an empty bounding set even uid 0 gains nothing at the next `execve`; a
/// kept capability stays in the bounding, permitted and effective sets, so uid 0 gets it back
/// at each `execve` (its permitted set becomes the bounding set) and a non-root uid loses it
/// there. Under no_new_privs an exec never adds to it.
pub(crate) fn drop_capabilities_but(keep: Option<libc::c_ulong>) -> io::Result<()> {
    let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<libc::c_ulong>().ok())
        .unwrap_or(63);
    for cap in (0..=last).filter(|c| Some(*c) != keep) {
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
    let mut data = [Data::default(); 2];
    if let Some(cap) = keep {
        let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
        data[word].effective = bit;
        data[word].permitted = bit;
    }
    // SAFETY: capset reads one header and two data structs (version 3 layout), all valid here.
    cvt_long(unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) })?;
    Ok(())
}
