//! Network interfaces inside the sandbox's namespace: loopback up, and the TUN device that
//! holds the default route for the egress gateway.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::cvt;

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
/// The virtio-net header (`struct virtio_net_hdr`, no `num_buffers`) in front of every packet
/// read from or written to the TUN descriptor the gateway is handed.
pub const TUN_VNET_HDR_LEN: usize = 10;

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

/// Make a TUN device in the current network namespace: IP packets, no packet-info header,
/// each behind a virtio-net header of [`TUN_VNET_HDR_LEN`] bytes. The descriptor is
/// non-blocking: the supervisor reads it from an event loop.
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
    req.ifr_ifru.ifru_flags =
        (libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_VNET_HDR) as libc::c_short;
    // SAFETY: TUNSETIFF reads the ifreq we own.
    cvt(unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETIFF, &req) })?;
    // Every packet crosses with a virtio-net header of TUN_VNET_HDR_LEN bytes in front, so the
    // gateway can hand its TCP segments over with the checksum for this kernel to complete
    // (NEEDS_CSUM; taken as verified on local delivery) instead of summing every byte it
    // sends. The other way, no offload is offered (TUNSETOFFLOAD 0): this kernel completes
    // the checksums of what the sandbox sends, and the gateway's stack verifies them.
    let hdr_len = TUN_VNET_HDR_LEN as libc::c_int;
    // SAFETY: TUNSETVNETHDRSZ reads the int we own.
    cvt(unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETVNETHDRSZ, &hdr_len) })?;
    // SAFETY: TUNSETOFFLOAD takes its flags by value.
    cvt(unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETOFFLOAD, 0 as libc::c_ulong) })?;
    // Persistent, so closing the last descriptor does not unregister the device then and
    // there (~10-20 ms of RCU waits in the closing process, which held up the session's
    // exit): it goes with the sandbox's network namespace, torn down by the kernel's own
    // worker once the session is gone. Nothing outlives that namespace, and nobody else can
    // reach it. Failing, the device is only torn down the slow way.
    // SAFETY: TUNSETPERSIST takes its flag by value.
    let _ = unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETPERSIST, 1 as libc::c_ulong) };
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
