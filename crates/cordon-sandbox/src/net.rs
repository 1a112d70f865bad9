//! The network handoff (host side): what init makes inside the sandbox's network namespace for
//! the egress gateway, and the one way back in for published ports.
//!
//! Crossings handled here ([`crate::Crossing`]): the TUN device (every IP packet the sandbox
//! sends or receives), the UDP sockets on the sandbox's loopback port 53, the explicit-proxy
//! listener, the sock_diag socket ([`SocketTable`]), and — only with `[[publish]]` — the
//! control channel kept by init's publish helper ([`Inward`]). All but sock_diag carry bytes
//! written by the sandboxed program: whoever reads them treats them as hostile.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;

use crate::protocol::{self, InwardReply, InwardRequest};

/// The sandbox's own address on its TUN interface (a /32; every route points at the TUN).
pub const SANDBOX_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 100);
/// The TUN's MTU: as large as loopback's, so a bulk transfer moves 64 KiB per packet.
pub const TUN_MTU: u32 = 65520;
/// The explicit proxy's port on the sandbox's loopback (`HTTP_PROXY=http://127.0.0.1:3128`).
pub const PROXY_PORT: u16 = 3128;

/// Everything the gateway needs, handed over before the command starts.
#[derive(Debug)]
pub struct NetHandoff {
    /// The TUN device (non-blocking, raw IPv4/IPv6 packets without a header), or why none
    /// could be made — then only the explicit proxy and DNS are a way out.
    pub tun: Result<OwnedFd, String>,
    /// UDP sockets bound to the sandbox's loopback port 53 (`resolv.conf` points there).
    pub dns: Vec<OwnedFd>,
    /// The explicit proxy's listening socket on the sandbox's `127.0.0.1:PROXY_PORT`.
    pub proxy: OwnedFd,
    /// The sandbox's init, as a host pid: its process tree is the sandbox's.
    pub init_pid: i32,
    /// Finds the sandbox's sockets by address (`None` if the kernel lacks sock_diag).
    pub sockets: Option<SocketTable>,
}

/// The sandbox network namespace's socket table, asked one socket at a time (sock_diag).
#[derive(Debug)]
pub struct SocketTable {
    /// The netlink socket, the last request's number, and whether an answer may be left
    /// unread on it.
    fd: Mutex<(OwnedFd, u32, bool)>,
}

impl SocketTable {
    pub(crate) fn new(fd: OwnedFd) -> Self {
        Self {
            fd: Mutex::new((fd, 0, false)),
        }
    }

    /// The inode of the sandbox's TCP socket from `local` to `remote` (IPv4), if it exists.
    pub fn tcp_inode(
        &self,
        local: std::net::SocketAddrV4,
        remote: std::net::SocketAddrV4,
    ) -> io::Result<Option<u64>> {
        let mut g = self.fd.lock().unwrap_or_else(|p| p.into_inner());
        let (fd, seq, stale) = &mut *g;
        *seq = seq.wrapping_add(1);
        crate::sys::sock_diag_inode(fd.as_raw_fd(), *seq, stale, local, remote)
    }
}

/// Opens connections to the sandbox's loopback through init's publish helper.
#[derive(Debug)]
pub struct Inward {
    sock: Mutex<OwnedFd>,
}

impl Inward {
    pub(crate) fn new(sock: OwnedFd) -> Self {
        Self {
            sock: Mutex::new(sock),
        }
    }

    /// A TCP connection to `127.0.0.1:port` inside the sandbox (blocking, a few ms; requests
    /// are served one at a time).
    pub fn connect(&self, port: u16) -> io::Result<std::net::TcpStream> {
        let sock = self.sock.lock().unwrap_or_else(|p| p.into_inner());
        protocol::send(sock.as_raw_fd(), &InwardRequest { port }, None)?;
        match protocol::recv_handed::<InwardReply>(sock.as_raw_fd())? {
            Some((InwardReply { error: None }, fd)) => fd
                .map(std::net::TcpStream::from)
                .ok_or_else(|| io::Error::other("the publish helper sent no socket")),
            Some((InwardReply { error: Some(e) }, _)) => Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("inside the sandbox: {e}"),
            )),
            None => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the sandbox is gone",
            )),
        }
    }
}

/// The egress gateway, as the sandbox sees it: given the handoff before the command starts,
/// and the way in once it runs.
pub trait NetAttach {
    /// Start serving the sandbox's network. An error stops the sandbox before the command
    /// runs (fail closed).
    fn attach(&mut self, handoff: NetHandoff) -> Result<(), String>;
    /// The trust bundle (PEM) the sandbox should use — the host's roots plus the HTTP layer's
    /// CA — when the gateway intercepts TLS. It is bound over the distribution's bundle files
    /// and named by the usual variables (`SSL_CERT_FILE`, `NODE_EXTRA_CA_CERTS`, …).
    fn ca_bundle(&self) -> Option<TrustBundle> {
        None
    }
    /// Whether `[[publish]]` needs [`Inward`].
    fn wants_inward(&self) -> bool {
        false
    }
    /// The way in, once the command runs (only when [`wants_inward`](Self::wants_inward)).
    fn inward(&mut self, _inward: Inward) {}
    /// Where the gateway is reached through the TUN device instead of the sandbox's loopback
    /// (a VM guest's relay, which carries the TUN over a link): the resolver and the proxy
    /// variables name this address, and the loopback DNS sockets and proxy listener handed
    /// over go unserved.
    fn link_gateway(&self) -> Option<Ipv4Addr> {
        None
    }
}

/// The sandbox's trust bundle, as the gateway has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustBundle {
    /// A file no sandbox sees ([`crate::bundle_file`]), bound read-only: nothing is read or
    /// sent at start.
    File(std::path::PathBuf),
    /// The PEM itself, when no such file could be made: written into the sandbox at start.
    Inline(String),
}

/// Where distributions keep the system's trust bundle; the first is Debian's.
pub const BUNDLE_PATHS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
];

/// Variables that tell tools which bundle to trust.
pub const BUNDLE_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
    "PIP_CERT",
    "DENO_CERT",
    "AWS_CA_BUNDLE",
];

/// The host's own trust bundle (the first of [`BUNDLE_PATHS`] that can be read).
pub fn host_bundle() -> Option<String> {
    BUNDLE_PATHS
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn inode_of(s: &impl AsRawFd) -> u64 {
        std::fs::metadata(format!("/proc/self/fd/{}", s.as_raw_fd()))
            .unwrap()
            .ino()
    }

    fn v4(a: std::net::SocketAddr) -> std::net::SocketAddrV4 {
        match a {
            std::net::SocketAddr::V4(a) => a,
            other => panic!("not IPv4: {other}"),
        }
    }

    // One request per socket, asked over and over on one netlink socket (this process's own
    // network namespace): each answer is the asked socket's, whatever was asked before.
    #[test]
    fn the_socket_table_names_each_connection_by_its_addresses() {
        let table = SocketTable::new(crate::sys::sock_diag_socket().unwrap());
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let b = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let ends =
            |s: &std::net::TcpStream| (v4(s.local_addr().unwrap()), v4(s.peer_addr().unwrap()));
        let (al, ar) = ends(&a);
        let (bl, br) = ends(&b);
        let nobody = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 9);
        for _ in 0..3 {
            assert_eq!(table.tcp_inode(al, ar).unwrap(), Some(inode_of(&a)));
            assert_eq!(table.tcp_inode(nobody, ar).unwrap(), None);
            assert_eq!(table.tcp_inode(bl, br).unwrap(), Some(inode_of(&b)));
        }
        assert_ne!(inode_of(&a), inode_of(&b));
    }
}
