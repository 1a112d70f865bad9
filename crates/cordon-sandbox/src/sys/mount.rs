//! Mounts: bind, mount, `mount_setattr`, detach, `pivot_root`, and the filesystem type of a
//! path (`statfs`).

use std::ffi::CStr;
use std::io;
use std::path::Path;

use super::{cstr, cvt, cvt_long};

/// Makes the whole mount tree private (`mount --make-rprivate /`), the first thing the sandbox
/// does in its mount namespace; without allocating, so a freshly cloned child may call it.
/// Returns the errno on failure.
pub(crate) fn make_root_private_raw() -> Result<(), i32> {
    mount_static(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE)
}

/// Mounts a fresh procfs at `/proc` (the probe's child, in namespaces of its own, does what the
/// sandbox's init does at `/newroot/proc`); without allocating. Returns the errno on failure.
pub(crate) fn mount_fresh_proc_raw() -> Result<(), i32> {
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    mount_static(Some(c"proc"), c"/proc", Some(c"proc"), flags)
}

/// mount(2) of static strings and no data, without allocating; Err: the errno.
fn mount_static(
    src: Option<&'static CStr>,
    target: &'static CStr,
    fstype: Option<&'static CStr>,
    flags: libc::c_ulong,
) -> Result<(), i32> {
    let p = |c: Option<&CStr>| c.map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: static NUL-terminated strings or null pointers; mount(2) only reads them.
    let rc = unsafe { libc::mount(p(src), target.as_ptr(), p(fstype), flags, std::ptr::null()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EPERM))
    }
}

pub(crate) fn mount(
    src: Option<&CStr>,
    target: &Path,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let t = cstr(target)?;
    let p = |c: Option<&CStr>| c.map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: all pointers are NUL-terminated strings that outlive the call, or null.
    cvt(unsafe { libc::mount(p(src), t.as_ptr(), p(fstype), flags, p(data).cast()) }).map(drop)
}

pub(crate) fn bind(src: &Path, target: &Path, recursive: bool) -> io::Result<()> {
    let s = cstr(src)?;
    let flags = libc::MS_BIND | if recursive { libc::MS_REC } else { 0 };
    mount(Some(&s), target, None, flags, None)
}

/// Move the mount at `src` (with everything mounted under it) to `target`.
pub(crate) fn move_mount(src: &Path, target: &Path) -> io::Result<()> {
    let s = cstr(src)?;
    mount(Some(&s), target, None, libc::MS_MOVE, None)
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Attributes a mount (and, with `recursive`, every mount below it) can be given in one call.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Attrs {
    pub readonly: bool,
    pub nosuid: bool,
    pub nodev: bool,
}

/// `mount_setattr(2)`: one call makes a whole tree read-only, which `MS_REMOUNT` cannot.
pub(crate) fn mount_setattr(target: &Path, recursive: bool, a: Attrs) -> io::Result<()> {
    let t = cstr(target)?;
    let mut set = 0;
    if a.readonly {
        set |= MOUNT_ATTR_RDONLY;
    }
    if a.nosuid {
        set |= MOUNT_ATTR_NOSUID;
    }
    if a.nodev {
        set |= MOUNT_ATTR_NODEV;
    }
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive {
        libc::AT_RECURSIVE as libc::c_uint
    } else {
        0
    };
    // SAFETY: the path is NUL-terminated and the attr struct is valid for the given size.
    cvt_long(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            t.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

pub(crate) fn umount_detach(target: &Path) -> io::Result<()> {
    let t = cstr(target)?;
    // SAFETY: NUL-terminated path.
    cvt(unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) }).map(drop)
}

pub(crate) fn pivot_root(new_root: &Path, put_old: &Path) -> io::Result<()> {
    let n = cstr(new_root)?;
    let o = cstr(put_old)?;
    // SAFETY: two NUL-terminated paths.
    cvt_long(unsafe { libc::syscall(libc::SYS_pivot_root, n.as_ptr(), o.as_ptr()) }).map(drop)
}

/// The filesystem magic number of the filesystem holding `path`.
pub(crate) fn fs_magic(path: &Path) -> io::Result<i64> {
    let p = cstr(path)?;
    // SAFETY: statfs is plain old data; the kernel fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: NUL-terminated path and a valid out-pointer.
    cvt(unsafe { libc::statfs(p.as_ptr(), &mut st) })?;
    Ok(st.f_type as i64)
}
