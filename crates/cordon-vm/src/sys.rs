//! The crate's only `unsafe`: the system calls the guest's init and the host's terminal need,
//! checked, and the CPU's time-stamp counter; each block says why it is sound.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// `mount(2)`; `data` is the filesystem's options.
pub(crate) fn mount(
    src: &str,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let src = cstr(OsStr::new(src))?;
    let target = cstr(target.as_os_str())?;
    let fstype = fstype.map(|t| cstr(OsStr::new(t))).transpose()?;
    let data = data.map(|d| cstr(OsStr::new(d))).transpose()?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call, or null.
    cvt(unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            flags,
            data.as_ref()
                .map_or(std::ptr::null(), |d| d.as_ptr().cast()),
        )
    })
    .map(drop)
}

/// Loads the kernel module in `file` (`finit_module(2)`); one already loaded is fine.
pub(crate) fn load_module(file: &std::fs::File) -> io::Result<()> {
    let params = c"";
    // SAFETY: the descriptor is open for the call; the parameters are an empty C string.
    let r = unsafe {
        libc::syscall(
            libc::SYS_finit_module,
            file.as_raw_fd(),
            params.as_ptr(),
            0 as libc::c_int,
        )
    };
    match r {
        0 => Ok(()),
        _ => match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
            e => Err(e),
        },
    }
}

/// Makes the current directory the root (`switch_root`): moves its mount onto `/` and
/// enters it. The initramfs stays beneath, unreachable.
pub(crate) fn switch_root(new: &Path) -> io::Result<()> {
    std::env::set_current_dir(new)?;
    mount(".", Path::new("/"), None, libc::MS_MOVE, None)?;
    std::os::unix::fs::chroot(".")?;
    std::env::set_current_dir("/")
}

/// Powers the guest off: QEMU (`-no-reboot`) then exits.
pub(crate) fn power_off() -> ! {
    // SAFETY: sync and reboot take no pointers; reboot does not return when it succeeds.
    unsafe {
        libc::sync();
        libc::reboot(libc::RB_POWER_OFF);
    }
    std::process::exit(125)
}

/// `fork(2)` of this single-threaded process; the child gets `Ok(None)`.
pub(crate) fn fork() -> io::Result<Option<libc::pid_t>> {
    // SAFETY: called by the guest's init before it starts any thread, so the child's copy is
    // whole (no lock held by a thread that does not exist in it).
    let pid = cvt(unsafe { libc::fork() })?;
    Ok((pid != 0).then_some(pid))
}

/// Waits for any child without blocking: (pid, exit code as the shell gives it).
pub(crate) fn reap_any() -> Option<(libc::pid_t, i32)> {
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    if pid <= 0 {
        return None;
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    Some((pid, code))
}

pub(crate) fn kill(pid: libc::pid_t, sig: i32) {
    // SAFETY: no pointers; a pid that is gone gets ESRCH.
    unsafe { libc::kill(pid, sig) };
}

/// The child's side of the start: a session of its own with `tty` (if any) as its
/// controlling terminal, `stdio` as fds 0–2, then the user's ids.
pub(crate) fn become_command(stdio: [RawFd; 3], tty: bool, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: plain syscalls on descriptors this process holds; no pointers but the empty
    // group list.
    unsafe {
        cvt(libc::setsid())?;
        for (to, &from) in stdio.iter().enumerate() {
            cvt(libc::dup2(from, to as RawFd))?;
        }
        if tty {
            cvt(libc::ioctl(0, libc::TIOCSCTTY, 0))?;
        }
        if libc::getuid() != uid || libc::getgid() != gid {
            cvt(libc::setgroups(0, std::ptr::null()))?;
            cvt(libc::setgid(gid))?;
            cvt(libc::setuid(uid))?;
            // The change of ids made this process undumpable, which leaves its children's
            // /proc files root's: the sandbox could not write its id maps.
            cvt(libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0))?;
        }
    }
    Ok(())
}

/// Replaces this process's environment (the forked child's, before any thread).
pub(crate) fn set_environment(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) {
    for (k, _) in std::env::vars_os() {
        // SAFETY: the forked child runs one thread, so no other thread reads the environment.
        unsafe { std::env::remove_var(k) };
    }
    for (k, v) in vars {
        if !k.is_empty() && !k.as_bytes().contains(&b'=') {
            // SAFETY: as above.
            unsafe { std::env::set_var(k, v) };
        }
    }
}

/// A pty pair (master, slave) of the given size.
pub(crate) fn openpty(rows: u16, cols: u16) -> io::Result<(OwnedFd, OwnedFd)> {
    let (mut m, mut s) = (-1, -1);
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: out-pointers to two ints and a winsize that live for the call.
    cvt(unsafe { libc::openpty(&mut m, &mut s, std::ptr::null_mut(), std::ptr::null(), &ws) })?;
    // SAFETY: openpty returned two new descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(m), OwnedFd::from_raw_fd(s)) })
}

pub(crate) fn set_winsize(fd: RawFd, rows: u16, cols: u16) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize that lives for the call.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) }).map(drop)
}

pub(crate) fn winsize(fd: RawFd) -> Option<(u16, u16)> {
    // SAFETY: zeroed winsize is a valid value; TIOCGWINSZ writes into it.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: as above, the out-pointer lives for the call.
    let r = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    (r == 0).then_some((ws.ws_row, ws.ws_col))
}

pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both are new descriptors nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Clears `O_CLOEXEC`, for descriptors the forked child keeps as its stdio.
pub(crate) fn set_blocking(fd: RawFd, blocking: bool) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor this process holds, no pointers.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    let flags = match blocking {
        true => flags & !libc::O_NONBLOCK,
        false => flags | libc::O_NONBLOCK,
    };
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags) }).map(drop)
}

/// `poll(2)` on (fd, events); returns the revents in the same order.
pub(crate) fn poll(fds: &[(RawFd, i16)], timeout_ms: i32) -> io::Result<Vec<i16>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&(fd, events)| libc::pollfd {
            fd,
            events,
            revents: 0,
        })
        .collect();
    // SAFETY: `p` holds `p.len()` pollfds for the call.
    let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(p.iter().map(|p| p.revents).collect())
}

/// Brings the interface `name` up (`SIOCSIFFLAGS`), returning its index.
pub(crate) fn link_up(name: &str) -> io::Result<i32> {
    let sock = socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    // SAFETY: an all-zero ifreq is valid; the name is copied in below, NUL-terminated.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req
        .ifr_name
        .iter_mut()
        .zip(name.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = s as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS/SIOCGIFINDEX read and write the ifreq, which lives
    // for each call.
    unsafe {
        cvt(libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req))?;
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        cvt(libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req))?;
        cvt(libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFINDEX, &mut req))?;
        Ok(req.ifr_ifru.ifru_ifindex)
    }
}

fn socket(domain: i32, ty: i32, proto: i32) -> io::Result<OwnedFd> {
    // SAFETY: no pointers; the result is a new descriptor.
    let fd = cvt(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) })?;
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `AF_PACKET` datagram socket on interface `ifindex`: IP packets in and out, the kernel
/// adding and removing the Ethernet header.
pub(crate) fn packet_socket(ifindex: i32) -> io::Result<OwnedFd> {
    let all = (libc::ETH_P_ALL as u16).to_be();
    let sock = socket(libc::AF_PACKET, libc::SOCK_DGRAM, i32::from(all))?;
    let mut addr = sockaddr_ll(ifindex, all, None);
    addr.sll_protocol = all;
    // SAFETY: bind reads a sockaddr_ll of the size given, which lives for the call.
    cvt(unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    Ok(sock)
}

fn sockaddr_ll(ifindex: i32, proto_be: u16, mac: Option<[u8; 6]>) -> libc::sockaddr_ll {
    // SAFETY: an all-zero sockaddr_ll is valid.
    let mut a: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    a.sll_family = libc::AF_PACKET as u16;
    a.sll_protocol = proto_be;
    a.sll_ifindex = ifindex;
    if let Some(mac) = mac {
        a.sll_halen = 6;
        a.sll_addr[..6].copy_from_slice(&mac);
    }
    a
}

/// Sends one IP packet to `mac` with EtherType `ethertype`.
pub(crate) fn packet_send(
    fd: RawFd,
    ifindex: i32,
    mac: [u8; 6],
    ethertype: u16,
    pkt: &[u8],
) -> io::Result<()> {
    let addr = sockaddr_ll(ifindex, ethertype.to_be(), Some(mac));
    // SAFETY: the buffer and the address live for the call, with the lengths given.
    let r = unsafe {
        libc::sendto(
            fd,
            pkt.as_ptr().cast(),
            pkt.len(),
            0,
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Receives one packet that arrived on the interface (not one this host sent): its length
/// and EtherType.
pub(crate) fn packet_recv(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, u16)> {
    loop {
        // SAFETY: an all-zero sockaddr_ll is valid; recvfrom writes at most its size.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: the buffer, address and length live for the call.
        let n = unsafe {
            libc::recvfrom(
                fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                (&mut addr as *mut libc::sockaddr_ll).cast(),
                &mut len,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if addr.sll_pkttype == libc::PACKET_OUTGOING {
            continue;
        }
        return Ok((n as usize, u16::from_be(addr.sll_protocol)));
    }
}

/// The terminal on `fd` in raw mode until the guard drops (the host's, while the guest's
/// terminal takes every key).
pub(crate) struct RawMode {
    fd: RawFd,
    saved: libc::termios,
}

impl RawMode {
    pub(crate) fn enter(fd: RawFd) -> io::Result<RawMode> {
        // SAFETY: zeroed termios is a valid out-value; tcgetattr/tcsetattr take pointers
        // to termios structs that live for each call.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            cvt(libc::tcgetattr(fd, &mut t))?;
            let saved = t;
            libc::cfmakeraw(&mut t);
            cvt(libc::tcsetattr(fd, libc::TCSANOW, &t))?;
            Ok(RawMode { fd, saved })
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the termios saved at entry, which lives in self.
        unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved) };
    }
}

pub(crate) fn isatty(fd: RawFd) -> bool {
    // SAFETY: no pointers.
    unsafe { libc::isatty(fd) == 1 }
}

/// The time-stamp counter of the CPU this thread runs on, or `None` on an architecture
/// without one the guest shares.
pub(crate) fn rdtsc() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86-64 CPU, takes no operands and touches no memory;
        // the intrinsic is `unsafe` only because it is a raw instruction.
        Some(unsafe { core::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}
