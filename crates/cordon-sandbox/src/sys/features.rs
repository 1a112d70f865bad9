//! What the running kernel supports, asked of it directly (for `doctor` and best-effort
//! layers).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

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

/// `landlock_add_rule(2)` with one `LANDLOCK_RULE_PATH_BENEATH` rule: `allowed` (the
/// `LANDLOCK_ACCESS_FS_*` bits) beneath the file `parent` refers to, added to `ruleset`.
/// EINVAL when `allowed` holds a right only directories take and `parent` is not one, or a
/// right the ruleset does not handle; ENOMSG when `allowed` is empty.
pub(crate) fn landlock_add_path_rule(
    ruleset: BorrowedFd<'_>,
    parent: BorrowedFd<'_>,
    allowed: u64,
) -> io::Result<()> {
    /// `struct landlock_path_beneath_attr` (uapi/linux/landlock.h), which is packed.
    #[repr(C, packed)]
    struct PathBeneathAttr {
        allowed_access: u64,
        parent_fd: i32,
    }
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
    let attr = PathBeneathAttr {
        allowed_access: allowed,
        parent_fd: parent.as_raw_fd(),
    };
    // SAFETY: the kernel reads one attribute struct of the rule type's layout from a pointer
    // valid for the call; both descriptors are borrowed, so open for its length.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
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
