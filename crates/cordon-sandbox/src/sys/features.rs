//! What the running kernel supports, asked of it directly (for `doctor` and best-effort
//! layers).

use std::io;

/// The kernel's Landlock ABI version, or the errno that says why there is none.
pub fn landlock_abi() -> Result<i32, io::Error> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attr and size 0, this only queries the version.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

/// Whether the kernel supports a seccomp return action (`SECCOMP_GET_ACTION_AVAIL`).
pub(crate) fn seccomp_action_available(action: u32) -> bool {
    const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
    // SAFETY: the kernel reads one u32 from the pointer, which is valid for the call.
    unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0,
            &action as *const u32,
        ) == 0
    }
}
