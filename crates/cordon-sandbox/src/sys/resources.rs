//! Resource limits and allocator tuning: the command's rlimits, and the supervisor's own
//! descriptor limit and malloc threshold.

use std::io;

use super::cvt;

/// Raise this process's soft descriptor limit to its hard limit: the gateway holds two or more
/// descriptors per sandbox flow, and the usual soft limit (1024) is below what
/// the gateway's flow cap needs.
pub fn raise_nofile_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 && lim.rlim_cur < lim.rlim_max
    {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads the struct we own; raising soft up to hard is always allowed.
        unsafe {
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Serve allocations of 256 KiB and more straight from the kernel (fresh, already-zero pages)
/// instead of letting glibc's threshold drift up and recycle them from the heap, where
/// `calloc` must clear them: the gateway allocates several zeroed windows per connection,
/// and clearing them dominated connection setup (~1 ms of memset per flow).
pub fn prefer_fresh_pages_for_large_allocations() {
    // SAFETY: mallopt only changes the allocator's tuning; any value is valid for this key.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
    }
}

pub(crate) fn setrlimit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: lim is a valid rlimit.
    cvt(unsafe { libc::setrlimit(resource, &lim) }).map(drop)
}
