//! `NETLINK_SOCK_DIAG`: which socket (by inode) owns a flow, so flow events can name the
//! process behind them.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::cvt;

/// A `NETLINK_SOCK_DIAG` socket: made inside the sandbox's network namespace, it answers for
/// that namespace's sockets (what `ss` uses), by exact address instead of a table walk.
pub(crate) fn sock_diag_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket() with constant arguments.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    })?;
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The inode of the TCP socket whose local end is `local` and remote end `remote`, asked of a
/// [`sock_diag_socket`]: one `SOCK_DIAG_BY_FAMILY` request for that exact socket (no dump).
/// `Ok(None)` when there is no such socket. The caller serialises calls on one descriptor, and
/// sets `*stale` when an earlier call left without its answer (kept true here until one
/// arrives): only then can an old answer be waiting to be read first.
pub(crate) fn sock_diag_inode(
    fd: RawFd,
    seq: u32,
    stale: &mut bool,
    local: std::net::SocketAddrV4,
    remote: std::net::SocketAddrV4,
) -> io::Result<Option<u64>> {
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    let mut req = [0u8; 72];
    req[0..4].copy_from_slice(&72u32.to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req[8..12].copy_from_slice(&seq.to_ne_bytes());
    // struct inet_diag_req_v2
    req[16] = libc::AF_INET as u8;
    req[17] = libc::IPPROTO_TCP as u8;
    req[20..24].copy_from_slice(&u32::MAX.to_ne_bytes()); // every state
    // struct inet_diag_sockid: ports and addresses in network order
    req[24..26].copy_from_slice(&local.port().to_be_bytes());
    req[26..28].copy_from_slice(&remote.port().to_be_bytes());
    req[28..32].copy_from_slice(&local.ip().octets());
    req[44..48].copy_from_slice(&remote.ip().octets());
    req[64..72].copy_from_slice(&[0xff; 8]); // INET_DIAG_NOCOOKIE
    // Drop answers to earlier, abandoned requests.
    let mut buf = [0u8; 8192];
    if *stale {
        loop {
            // SAFETY: recv into a buffer we own, non-blocking.
            let n =
                unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if n <= 0 {
                break;
            }
        }
    }
    // SAFETY: send of a buffer we own; netlink's default destination is the kernel.
    let sent = unsafe { libc::send(fd, req.as_ptr().cast(), req.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    // Until this request's one answer (a reply or an error, never more) has been read.
    *stale = true;
    // The kernel answers a single-socket request before send returns.
    for _ in 0..4 {
        // SAFETY: recv into a buffer we own, non-blocking.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                std::thread::sleep(std::time::Duration::from_micros(200));
                continue;
            }
            return Err(e);
        }
        let msg = &buf[..n as usize];
        if msg.len() < 16 {
            return Ok(None);
        }
        let kind = u16::from_ne_bytes([msg[4], msg[5]]);
        let got_seq = u32::from_ne_bytes([msg[8], msg[9], msg[10], msg[11]]);
        if got_seq != seq {
            continue;
        }
        *stale = false;
        if kind == SOCK_DIAG_BY_FAMILY && msg.len() >= 88 {
            // struct inet_diag_msg: 4 bytes, sockid (48), expires, rqueue, wqueue, uid, inode.
            let inode = u32::from_ne_bytes([msg[84], msg[85], msg[86], msg[87]]);
            return Ok((inode != 0).then_some(u64::from(inode)));
        }
        // NLMSG_ERROR (ENOENT: no such socket) or anything else.
        return Ok(None);
    }
    Ok(None)
}
