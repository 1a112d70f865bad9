//! Who is on the other end of a unix socket (the kernel's `SO_PEERCRED`).

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

fn peer_pid(stream: &UnixStream) -> Option<libc::pid_t> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, which is a valid ucred.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && cred.pid > 0).then_some(cred.pid)
}

/// The peer's user namespace is ours. Unknown counts as different (fail closed).
pub(crate) fn same_user_namespace(stream: &UnixStream) -> bool {
    let Some(pid) = peer_pid(stream) else {
        return false;
    };
    match (
        std::fs::read_link(format!("/proc/{pid}/ns/user")),
        std::fs::read_link("/proc/self/ns/user"),
    ) {
        (Ok(theirs), Ok(ours)) => theirs == ours,
        _ => false,
    }
}
