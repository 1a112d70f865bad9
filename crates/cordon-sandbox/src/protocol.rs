//! The control channel: the one crossing between supervisor and sandbox init at setup.
//!
//! A unix stream socket pair made before the clone. Frames are a 4-byte little-endian length
//! and a JSON body; a descriptor (the pty master) may ride along with a frame via SCM_RIGHTS.
//! The supervisor sends the [`NetSetup`] at once after the clone, then exactly one
//! [`InitSpec`]; init answers with [`FromInit`] frames. The
//! channel closes when the command starts, so the sandboxed program never holds it — except
//! with `[[publish]]`, where a helper process of init's (outside the command's namespaces, not
//! dumpable) keeps it to answer [`InwardRequest`]s: "open a connection to your loopback's port
//! N", answered by a frame carrying the connected socket.

use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;

use cordon_policy::{LandlockMode, LimitsPlan, SyscallsPlan};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::fence::FenceStatus;
use crate::layout::Layout;
use crate::limits::AppliedLimit;
use crate::sys;

/// Largest frame accepted, so a confused peer cannot make us allocate without bound.
const MAX_FRAME: usize = 64 << 20;

/// Everything init needs to build the sandbox and start the command.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct InitSpec {
    pub layout: Layout,
    pub argv: Vec<Vec<u8>>,
    pub env: Vec<Vec<u8>>,
    pub cwd: PathBuf,
    pub project: PathBuf,
    pub uid: u32,
    pub gid: u32,
    /// Window size of the user's terminal when the command gets a pty of its own.
    pub tty: Option<[u16; 4]>,
    pub limits: LimitsPlan,
    pub landlock: LandlockMode,
    pub hostname: String,
    pub syscalls: SyscallsPlan,
    /// Trap execve/execveat for the supervisor (there are `[exec]` rules).
    pub supervise_exec: bool,
    /// Size cap for the sandbox's own tmpfs mounts (`[limits] memory`).
    pub tmpfs_size: Option<u64>,
    /// What the sandbox's network namespace gets.
    pub net: NetSetup,
}

/// What init builds in the sandbox's network namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum NetSetup {
    /// Loopback only.
    Loopback,
    /// Loopback, plus what the egress gateway needs: a TUN device holding the default route,
    /// UDP sockets on the loopback's port 53 and the explicit-proxy listener.
    Gateway {
        addr: std::net::Ipv4Addr,
        mtu: u32,
        proxy_port: u16,
        /// Keep a helper that opens connections to the sandbox's loopback (`[[publish]]`).
        inward: bool,
    },
    /// No network namespace of its own: the host's network.
    Host,
}

/// What init tells the supervisor.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum FromInit {
    /// The pty master is attached to this frame.
    Pty,
    /// The command's seccomp notification descriptor is attached to this frame.
    Listener,
    /// The command was started (or failed to exec with 126/127, which is its own result).
    Started {
        pid: i32,
        landlock: FenceStatus,
        /// The rlimits the command's setup set (the cgroups' are known to the supervisor).
        limits: Vec<AppliedLimit>,
    },
    /// The TUN device is attached to this frame.
    NetTun,
    /// No TUN device could be made: the gateway runs in explicit-proxy-only mode.
    NetTunFailed { reason: String },
    /// A UDP socket bound to the sandbox's loopback port 53 is attached.
    NetDns,
    /// The explicit-proxy listener (the sandbox's 127.0.0.1) is attached.
    NetProxy,
    /// A sock_diag netlink socket of the sandbox's network namespace is attached.
    NetDiag,
    /// Everything for the gateway has been sent.
    NetReady,
    /// Setup failed; nothing of the command ran.
    Failed { stage: String, message: String },
}

/// A request to the publish helper.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct InwardRequest {
    pub port: u16,
}

/// The publish helper's answer; the connected socket rides along when `error` is `None`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct InwardReply {
    pub error: Option<String>,
}

pub(crate) fn send<T: Serialize>(sock: RawFd, msg: &T, fd: Option<RawFd>) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    match fd {
        Some(fd) => sys::send_with_fd(sock, &frame, fd),
        None => {
            sys::write_all_raw(sock, &frame);
            Ok(())
        }
    }
}

/// Receive one frame; `Ok(None)` on a clean end of stream.
pub(crate) fn recv<T: DeserializeOwned>(sock: RawFd) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
    let mut header = [0u8; 4];
    let mut got = 0;
    let mut fds = Vec::new();
    while got < 4 {
        let (n, mut f) = sys::recv_with_fds(sock, &mut header[got..])?;
        fds.append(&mut f);
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "control channel closed mid-frame",
            ));
        }
        got += n;
    }
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("control frame of {len} bytes refused"),
        ));
    }
    let mut body = vec![0u8; len];
    let mut got = 0;
    while got < len {
        let n = sys::read_raw(sock, &mut body[got..]);
        if n <= 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "control channel closed mid-frame",
            ));
        }
        got += n as usize;
    }
    let msg =
        serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Some((msg, fds)))
}
