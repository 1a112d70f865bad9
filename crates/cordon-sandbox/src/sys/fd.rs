//! Descriptors: raw reads and writes (async-signal-safe where a post-fork child needs them),
//! pipes, socket pairs, descriptor passing (SCM_RIGHTS), `poll`, flags and closing.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::{cvt, cvt_long};

pub(crate) fn dup2(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: dup2 on plain descriptors.
    cvt(unsafe { libc::dup2(from, to) }).map(drop)
}

/// Write all of `buf` to a raw descriptor using only async-signal-safe calls.
pub(crate) fn write_all_raw(fd: RawFd, mut buf: &[u8]) {
    while !buf.is_empty() {
        // SAFETY: buf is a valid slice.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n <= 0 {
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        buf = &buf[n as usize..];
    }
}

/// Read into `buf` from a raw descriptor (async-signal-safe); retried on EINTR.
pub(crate) fn read_raw(fd: RawFd, buf: &mut [u8]) -> isize {
    loop {
        // SAFETY: buf is a valid mutable slice.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return n;
    }
}

/// One `write`; with a non-blocking descriptor, `WouldBlock` when it cannot take anything.
pub(crate) fn write_some(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: buf is a valid slice.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One `read`, retried on EINTR; `WouldBlock` on an empty non-blocking descriptor.
pub(crate) fn read_some(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: buf is a valid mutable slice.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

pub(crate) fn clear_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor with integer arguments.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) }).map(drop)
}

/// A connected pair of unix stream sockets, close-on-exec.
pub(crate) fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: the kernel returned two fresh descriptors that only we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A pipe, close-on-exec.
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: fresh descriptors owned only by us.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Send `data` with one descriptor attached (SCM_RIGHTS).
pub(crate) fn send_with_fd(sock: RawFd, data: &[u8], fd: RawFd) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut _,
        iov_len: data.len(),
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    // u64 elements: the control buffer must be aligned for `cmsghdr`.
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: msghdr is plain old data; zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: msg_control points to a buffer of CMSG_SPACE bytes, so the first header fits and
    // CMSG_DATA has room for one descriptor; iov points to `data`, which outlives the call.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::copy_nonoverlapping(
            &fd as *const RawFd as *const u8,
            libc::CMSG_DATA(cmsg),
            std::mem::size_of::<RawFd>(),
        );
        let n = cvt_long(libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) as libc::c_long)?;
        if (n as usize) != data.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short sendmsg"));
        }
    }
    Ok(())
}

/// Receive up to `buf.len()` bytes and any descriptors that came with them.
pub(crate) fn recv_with_fds(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: pure computation.
    let space = unsafe { libc::CMSG_SPACE((4 * std::mem::size_of::<RawFd>()) as u32) } as usize;
    // u64 elements: the control buffer must be aligned for `cmsghdr`.
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: msg points at live buffers sized as declared.
        let r = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        break cvt_long(r as libc::c_long)? as usize;
    };
    let mut fds = Vec::new();
    // SAFETY: we walk the control buffer with the CMSG_* macros the kernel filled it for; each
    // SCM_RIGHTS payload holds (len - CMSG_LEN(0)) / 4 descriptors that are now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let mut fd: RawFd = 0;
                    std::ptr::copy_nonoverlapping(
                        data.add(i * std::mem::size_of::<RawFd>()),
                        &mut fd as *mut RawFd as *mut u8,
                        std::mem::size_of::<RawFd>(),
                    );
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n, fds))
}

/// `poll` on a set of descriptors; returns on EINTR with `Ok(0)`.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: fds is a valid slice of pollfd.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

/// Close every descriptor from `lowest` up, except those in `keep` (before exec).
///
/// `close_range(2)` (Linux 5.9) closes each run between kept descriptors in one call. Both the
/// command's process and init do this on the way to the command's exec, where listing
/// `/proc/self/fd` and closing one by one cost an open, a directory read and a call per
/// descriptor. Kernels without it get that listing.
pub(crate) fn close_fds_from(lowest: RawFd, keep: &[RawFd]) {
    if close_ranges(lowest, keep).is_err() {
        close_listed_from(lowest, keep);
    }
}

/// The runs of descriptors from `lowest` up that `keep` leaves, each as `(first, last)`; the
/// last run ends at the largest descriptor number (`u32::MAX`, as `close_range` takes it).
fn runs_between(lowest: RawFd, keep: &[RawFd]) -> Vec<(u32, u32)> {
    let lowest = u32::try_from(lowest).unwrap_or(0);
    let mut kept: Vec<u32> = keep
        .iter()
        .filter_map(|&k| u32::try_from(k).ok())
        .filter(|&k| k >= lowest)
        .collect();
    kept.sort_unstable();
    kept.dedup();
    let mut runs = Vec::new();
    let mut from = lowest;
    for k in kept {
        if k > from {
            runs.push((from, k - 1));
        }
        from = k + 1;
    }
    runs.push((from, u32::MAX));
    runs
}

fn close_ranges(lowest: RawFd, keep: &[RawFd]) -> io::Result<()> {
    for (first, last) in runs_between(lowest, keep) {
        // SAFETY: closing descriptors we are about to lose at exec anyway; none is used after.
        // The raw call, not glibc's wrapper, which needs glibc 2.34.
        let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn close_listed_from(lowest: RawFd, keep: &[RawFd]) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<RawFd> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd >= lowest && !keep.contains(fd))
        .collect();
    for fd in fds {
        // SAFETY: closing descriptors we are about to lose at exec anyway; none is used after.
        unsafe { libc::close(fd) };
    }
}

pub(crate) fn set_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl with integer arguments.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    let flags = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags) }).map(drop)
}

pub(crate) fn close_raw(fd: RawFd) {
    // SAFETY: closing a descriptor number the caller no longer uses (async-signal-safe).
    unsafe { libc::close(fd) };
}

#[cfg(test)]
mod tests {
    use super::runs_between;

    #[test]
    fn the_runs_leave_out_exactly_the_kept_descriptors() {
        assert_eq!(runs_between(3, &[]), vec![(3, u32::MAX)]);
        assert_eq!(
            runs_between(3, &[7, 5]),
            vec![(3, 4), (6, 6), (8, u32::MAX)]
        );
        // Kept ones at the start, side by side, twice, or below `lowest` make no empty run.
        assert_eq!(runs_between(3, &[3, 4, 4, 1]), vec![(5, u32::MAX)]);
        assert_eq!(runs_between(0, &[2]), vec![(0, 1), (3, u32::MAX)]);
        assert_eq!(runs_between(-1, &[]), vec![(0, u32::MAX)]);
    }
}
