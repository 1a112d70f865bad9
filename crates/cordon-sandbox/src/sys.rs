//! Thin, checked wrappers over the Linux system calls the sandbox needs.
//!
//! This module is the only place with `unsafe` in cordon: every
//! block says why it is sound. Everything here returns `io::Result`; callers add context.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_long(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

pub(crate) fn cstr(path: &Path) -> io::Result<CString> {
    cstring(path.as_os_str())
}

pub(crate) fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in string"))
}

/// Namespaces a sandbox gets. Network is empty (loopback only) until the gateway gives it a way out.
pub(crate) const SANDBOX_NAMESPACES: u64 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u64;

#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// The result of [`clone_into_namespaces`] in the parent.
pub(crate) struct Child {
    pub pid: libc::pid_t,
    pub pidfd: OwnedFd,
}

/// Fork into fresh namespaces. Returns `Ok(None)` in the child, `Ok(Some(child))` in the parent.
///
/// # Safety
/// Like `fork`: in the child, only async-signal-safe operations may run until `execve`
/// (the caller must not allocate, lock or touch other threads' state).
pub(crate) unsafe fn clone_into_namespaces(flags: u64) -> io::Result<Option<Child>> {
    let mut pidfd: RawFd = -1;
    let args = CloneArgs {
        flags: flags | libc::CLONE_PIDFD as u64,
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    // SAFETY: clone3 with no CLONE_VM and no stack behaves like fork; the args struct and the
    // pidfd slot live across the call. The caller upholds the post-fork restrictions.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    let pid = cvt_long(ret)? as libc::pid_t;
    if pid == 0 {
        return Ok(None);
    }
    // SAFETY: the kernel wrote a fresh pidfd that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok(Some(Child { pid, pidfd }))
}

/// Plain fork, used by the sandbox's init (single-threaded) to start the command.
pub(crate) fn fork() -> io::Result<libc::pid_t> {
    // SAFETY: the init process that calls this is single-threaded, so the child may allocate.
    cvt(unsafe { libc::fork() })
}

pub(crate) fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes no pointers; the callers are single-threaded processes.
    cvt(unsafe { libc::unshare(flags) }).map(drop)
}

pub(crate) fn set_pdeathsig(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) }).map(drop)
}

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

pub(crate) fn sethostname(name: &str) -> io::Result<()> {
    // SAFETY: the pointer and length describe `name`'s bytes.
    cvt(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) }).map(drop)
}

pub(crate) fn setsid() -> io::Result<()> {
    // SAFETY: no arguments.
    cvt(unsafe { libc::setsid() }).map(drop)
}

pub(crate) fn set_controlling_tty(fd: RawFd) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) }).map(drop)
}

pub(crate) fn dup2(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: dup2 on plain descriptors.
    cvt(unsafe { libc::dup2(from, to) }).map(drop)
}

pub(crate) fn kill(pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill takes integers only.
    cvt(unsafe { libc::kill(pid, sig) }).map(drop)
}

pub(crate) fn pidfd_send_signal(pidfd: &OwnedFd, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: pidfd_send_signal with a valid pidfd and no siginfo.
    cvt_long(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })
    .map(drop)
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStatus {
    Exited(i32),
    Signaled(i32),
}

impl WaitStatus {
    /// The shell convention: the exit code, or 128+N after signal N.
    pub fn code(self) -> i32 {
        match self {
            WaitStatus::Exited(c) => c,
            WaitStatus::Signaled(s) => 128 + s,
        }
    }
}

fn decode(status: libc::c_int) -> Option<WaitStatus> {
    if libc::WIFEXITED(status) {
        Some(WaitStatus::Exited(libc::WEXITSTATUS(status)))
    } else if libc::WIFSIGNALED(status) {
        Some(WaitStatus::Signaled(libc::WTERMSIG(status)))
    } else {
        None
    }
}

/// `waitpid`, retried on EINTR unless `nohang`. Returns `None` when nothing has exited yet.
pub(crate) fn waitpid(
    pid: libc::pid_t,
    nohang: bool,
) -> io::Result<Option<(libc::pid_t, WaitStatus)>> {
    loop {
        let mut status = 0;
        let flags = if nohang { libc::WNOHANG } else { 0 };
        // SAFETY: status points to a live c_int.
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                if nohang {
                    return Ok(None);
                }
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Ok(None);
        }
        if let Some(ws) = decode(status) {
            return Ok(Some((r, ws)));
        }
    }
}

/// Blocking `waitpid(-1)` that returns on EINTR so the caller can look at pending signals.
pub(crate) fn wait_any_interruptible() -> io::Result<Option<(libc::pid_t, WaitStatus)>> {
    let mut status = 0;
    // SAFETY: status points to a live c_int.
    let r = unsafe { libc::waitpid(-1, &mut status, 0) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(decode(status).map(|ws| (r, ws)))
}

// ---- mounts ----

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

/// Bring the loopback interface of the current network namespace up.
pub(crate) fn loopback_up() -> io::Result<()> {
    // SAFETY: socket() with constant arguments.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: the kernel just returned this descriptor to us.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *d = *s as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we own.
    unsafe {
        cvt(libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req))?;
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        cvt(libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req))?;
    }
    Ok(())
}

/// The TUN interface's name inside the sandbox.
pub(crate) const TUN_NAME: &str = "tun0";

fn ifreq_named(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req
        .ifr_name
        .iter_mut()
        .zip(name.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = s as libc::c_char;
    }
    req
}

fn sockaddr_v4(addr: std::net::Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(addr).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size; the bytes are a valid sockaddr.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

/// Make a TUN device (IP packets, no packet-info header) in the current network namespace.
/// The descriptor is non-blocking: the supervisor reads it from an event loop.
pub(crate) fn open_tun() -> io::Result<OwnedFd> {
    // SAFETY: open() of a constant NUL-terminated path.
    let fd = cvt(unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    })?;
    // SAFETY: the kernel just returned this descriptor to us.
    let tun = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = ifreq_named(TUN_NAME);
    req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads the ifreq we own.
    cvt(unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETIFF, &req) })?;
    Ok(tun)
}

/// The kernel's `struct rtentry` (net/route.h), which the libc crate has for musl only.
#[repr(C)]
struct RtEntry {
    rt_pad1: libc::c_ulong,
    rt_dst: libc::sockaddr,
    rt_gateway: libc::sockaddr,
    rt_genmask: libc::sockaddr,
    rt_flags: libc::c_ushort,
    rt_pad2: libc::c_short,
    rt_pad3: libc::c_ulong,
    rt_pad4: *mut libc::c_void,
    rt_metric: libc::c_short,
    rt_dev: *mut libc::c_char,
    rt_mtu: libc::c_ulong,
    rt_window: libc::c_ulong,
    rt_irtt: libc::c_ushort,
}

/// Give `name` the address `addr/32` and `mtu`, bring it up, and route everything through it.
pub(crate) fn tun_configure(name: &str, addr: std::net::Ipv4Addr, mtu: u32) -> io::Result<()> {
    // SAFETY: socket() with constant arguments.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: the kernel just returned this descriptor to us.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let s = sock.as_raw_fd();
    let mut req = ifreq_named(name);
    req.ifr_ifru.ifru_addr = sockaddr_v4(addr);
    // SAFETY: each ioctl reads (or fills) the ifreq we own.
    unsafe {
        cvt(libc::ioctl(s, libc::SIOCSIFADDR, &req))?;
        req.ifr_ifru.ifru_netmask = sockaddr_v4(std::net::Ipv4Addr::BROADCAST);
        cvt(libc::ioctl(s, libc::SIOCSIFNETMASK, &req))?;
        req.ifr_ifru.ifru_mtu = mtu as libc::c_int;
        cvt(libc::ioctl(s, libc::SIOCSIFMTU, &req))?;
        cvt(libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req))?;
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        cvt(libc::ioctl(s, libc::SIOCSIFFLAGS, &req))?;
    }
    let dev = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
    let route = RtEntry {
        rt_pad1: 0,
        rt_dst: sockaddr_v4(std::net::Ipv4Addr::UNSPECIFIED),
        rt_gateway: sockaddr_v4(std::net::Ipv4Addr::UNSPECIFIED),
        rt_genmask: sockaddr_v4(std::net::Ipv4Addr::UNSPECIFIED),
        rt_flags: libc::RTF_UP,
        rt_pad2: 0,
        rt_pad3: 0,
        rt_pad4: std::ptr::null_mut(),
        rt_metric: 0,
        rt_dev: dev.as_ptr() as *mut libc::c_char,
        rt_mtu: 0,
        rt_window: 0,
        rt_irtt: 0,
    };
    // SAFETY: SIOCADDRT reads the rtentry, whose rt_dev points at `dev`, alive across the call.
    cvt(unsafe { libc::ioctl(s, libc::SIOCADDRT, &route) })?;
    Ok(())
}

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
/// `Ok(None)` when there is no such socket. The caller serialises calls on one descriptor.
pub(crate) fn sock_diag_inode(
    fd: RawFd,
    seq: u32,
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
    loop {
        // SAFETY: recv into a buffer we own, non-blocking.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n <= 0 {
            break;
        }
    }
    // SAFETY: send of a buffer we own; netlink's default destination is the kernel.
    let sent = unsafe { libc::send(fd, req.as_ptr().cast(), req.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
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

/// `execve`; returns only on failure.
pub(crate) fn execve(path: &CStr, argv: &[CString], envp: &[CString]) -> io::Error {
    let mut a: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    a.push(std::ptr::null());
    let mut e: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    e.push(std::ptr::null());
    // SAFETY: argv and envp are NULL-terminated arrays of NUL-terminated strings that outlive the call.
    unsafe { libc::execve(path.as_ptr(), a.as_ptr(), e.as_ptr()) };
    io::Error::last_os_error()
}

/// `_exit`: leave without running destructors or atexit handlers (post-fork children).
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and is async-signal-safe.
    unsafe { libc::_exit(code) }
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

// ---- signals ----

/// Install `handler` for `sig` with SA_RESTART off, so blocking calls return EINTR.
pub(crate) fn install_handler(
    sig: libc::c_int,
    handler: extern "C" fn(libc::c_int),
) -> io::Result<()> {
    // SAFETY: sigaction is plain old data; zero is valid. The handler is a plain extern fn.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        cvt(libc::sigaction(sig, &sa, std::ptr::null_mut())).map(drop)
    }
}

/// Reset `sig` to its default action (before exec, so the command starts clean).
pub(crate) fn default_handler(sig: libc::c_int) {
    // SAFETY: SIG_DFL is always valid.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
}

/// Unblock every signal (the child of a process that blocked some must not inherit that).
pub(crate) fn unblock_all_signals() {
    // SAFETY: the set is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
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

pub(crate) fn getuid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getuid() }
}

pub(crate) fn getgid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getgid() }
}

pub(crate) fn isatty(fd: RawFd) -> bool {
    // SAFETY: isatty takes an integer.
    unsafe { libc::isatty(fd) == 1 }
}

/// Close every descriptor from `lowest` up, except those in `keep` (before exec).
pub(crate) fn close_fds_from(lowest: RawFd, keep: &[RawFd]) {
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

// ---- terminals ----

/// Open a new pseudo-terminal pair from `/dev/ptmx`; returns (master, slave).
pub(crate) fn open_pty() -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: posix_openpt with constant flags.
    let m = cvt(unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) })?;
    // SAFETY: fresh descriptor owned by us.
    let master = unsafe { OwnedFd::from_raw_fd(m) };
    // SAFETY: grantpt/unlockpt on the master we just opened.
    unsafe {
        cvt(libc::grantpt(master.as_raw_fd()))?;
        cvt(libc::unlockpt(master.as_raw_fd()))?;
    }
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: name has the declared length.
    let r = unsafe { libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    // SAFETY: ptsname_r NUL-terminated the buffer on success.
    let path = unsafe { CStr::from_ptr(name.as_ptr()) };
    // SAFETY: open with a NUL-terminated path.
    let s = cvt(unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: fresh descriptor owned by us.
    Ok((master, unsafe { OwnedFd::from_raw_fd(s) }))
}

/// Window size of a terminal: (rows, cols, xpixel, ypixel).
pub(crate) fn get_winsize(fd: RawFd) -> io::Result<[u16; 4]> {
    // SAFETY: winsize is plain old data.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes into the winsize we own.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) })?;
    Ok([ws.ws_row, ws.ws_col, ws.ws_xpixel, ws.ws_ypixel])
}

pub(crate) fn set_winsize(fd: RawFd, w: [u16; 4]) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: w[0],
        ws_col: w[1],
        ws_xpixel: w[2],
        ws_ypixel: w[3],
    };
    // SAFETY: TIOCSWINSZ reads the winsize we own.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) }).map(drop)
}

/// Terminal attributes, saved so raw mode can be undone.
pub(crate) struct Termios(libc::termios);

pub(crate) fn get_termios(fd: RawFd) -> io::Result<Termios> {
    // SAFETY: termios is plain old data; tcgetattr fills it.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: t is a valid termios.
    cvt(unsafe { libc::tcgetattr(fd, &mut t) })?;
    Ok(Termios(t))
}

pub(crate) fn set_termios(fd: RawFd, t: &Termios) -> io::Result<()> {
    // SAFETY: t.0 is a valid termios.
    cvt(unsafe { libc::tcsetattr(fd, libc::TCSADRAIN, &t.0) }).map(drop)
}

/// Put a terminal in raw mode; returns the previous attributes.
pub(crate) fn make_raw(fd: RawFd) -> io::Result<Termios> {
    let old = get_termios(fd)?;
    let mut raw = Termios(old.0);
    // SAFETY: cfmakeraw edits the termios we own.
    unsafe { libc::cfmakeraw(&mut raw.0) };
    set_termios(fd, &raw)?;
    Ok(old)
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

/// An `execve` whose argument arrays are built in advance, so the call itself allocates
/// nothing and can run in a freshly cloned child.
pub(crate) struct PreparedExec {
    path: CString,
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

impl PreparedExec {
    pub(crate) fn new(path: CString, argv: Vec<CString>, envp: Vec<CString>) -> Self {
        let mut a: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
        a.push(std::ptr::null());
        let mut e: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
        e.push(std::ptr::null());
        let mut strings = argv;
        strings.extend(envp);
        // The pointers stay valid: moving a CString moves only its heap handle, not the bytes.
        PreparedExec {
            path,
            _strings: strings,
            argv: a,
            envp: e,
        }
    }

    /// Returns only on failure.
    pub(crate) fn exec(&self) -> io::Error {
        // SAFETY: both arrays are NULL-terminated and point into strings owned by self.
        unsafe { libc::execve(self.path.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr()) };
        io::Error::last_os_error()
    }
}

pub(crate) fn close_raw(fd: RawFd) {
    // SAFETY: closing a descriptor number the caller no longer uses (async-signal-safe).
    unsafe { libc::close(fd) };
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

/// The filesystem magic number of the filesystem holding `path`.
pub(crate) fn fs_magic(path: &Path) -> io::Result<i64> {
    let p = cstr(path)?;
    // SAFETY: statfs is plain old data; the kernel fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: NUL-terminated path and a valid out-pointer.
    cvt(unsafe { libc::statfs(p.as_ptr(), &mut st) })?;
    Ok(st.f_type as i64)
}

/// The home directory of `uid` from the password database (NSS), if any.
pub fn passwd_home(uid: u32) -> Option<std::path::PathBuf> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: passwd is plain old data; getpwuid_r fills it and points its strings into buf.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; buf outlives the use of pw's strings below.
    let r = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if r != 0 || out.is_null() || pw.pw_dir.is_null() {
        return None;
    }
    // SAFETY: pw_dir is a NUL-terminated string inside buf, which is still alive.
    let dir = unsafe { CStr::from_ptr(pw.pw_dir) };
    Some(std::path::PathBuf::from(OsStr::from_bytes(dir.to_bytes())))
}

/// The caller's real uid and gid.
pub fn ids() -> (u32, u32) {
    (getuid(), getgid())
}
