//! The control channel ([`Crossing::ControlChannel`]) between supervisor and sandbox init at
//! setup, and the way the other crossings made inside come out.
//!
//! A unix stream socket pair made before the clone. Frames are a 4-byte little-endian length
//! and a JSON body; a descriptor may ride along with a frame via SCM_RIGHTS, and only with a
//! frame that names its crossing ([`Frame::crossing`], sent by [`hand_over`]).
//! The supervisor sends the [`NetSetup`] at once after the clone, then one [`Prepare`] (the
//! overlays it can name before the view is made), then exactly one [`InitSpec`]
//! ([`send_spec`]: the files' contents it binds follow as raw frames); init answers with
//! [`FromInit`] frames. The
//! channel closes when the command starts, so the sandboxed program never holds it — except
//! with `[[publish]]`, where a helper process of init's (outside the command's namespaces, not
//! dumpable) keeps it to answer [`InwardRequest`]s: "open a connection to your loopback's port
//! N", answered by a frame carrying the connected socket.

use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;

use cordon_policy::{LandlockMode, LimitsPlan, SyscallsPlan};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::crossing::Crossing;
use crate::fence::FenceStatus;
use crate::layout::{Layout, MountOp};
use crate::limits::AppliedLimit;
use crate::sys;

/// Largest frame accepted, so a confused peer cannot make us allocate without bound.
const MAX_FRAME: usize = 64 << 20;

/// Everything init needs to build the sandbox and start the command.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct InitSpec {
    pub layout: Layout,
    #[serde(with = "entries")]
    pub argv: Vec<Vec<u8>>,
    #[serde(with = "entries")]
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
    /// Send opens, stats and accesses to the supervisor, which lets each run and notes the
    /// home paths the view hides (`cordon run --trace-home`).
    #[serde(default)]
    pub trace_paths: bool,
    /// Size cap for the sandbox's own tmpfs mounts (`[limits] memory`).
    pub tmpfs_size: Option<u64>,
    /// What the sandbox's network namespace gets.
    pub net: NetSetup,
}

/// The copy-on-write overlays of the session's staged paths, sent as soon as the state layer
/// has made their layers, before the host has made the rest of the view. Init mounts them
/// aside while it waits for its spec (each overlay's mount creates and probes entries in its
/// work directory: 0.2–0.6 ms on ext4), and [`crate::mounts::build`] moves each into place when
/// the spec's view holds an equal [`MountOp::Overlay`]. Only a head start: the spec alone says
/// what the view is; one it does not hold is never reachable from the sandbox.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Prepare {
    pub overlays: Vec<MountOp>,
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
        /// How many of the view's overlays were mounted ahead of the spec ([`Prepare`]).
        overlays_ahead: usize,
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

/// A frame from the sandbox side, which may carry a descriptor out.
pub(crate) trait Frame {
    /// The crossing whose descriptor rides along with this frame, if one does.
    fn crossing(&self) -> Option<Crossing>;
}

impl Frame for FromInit {
    fn crossing(&self) -> Option<Crossing> {
        // No wildcard: a new frame must say whether it carries a crossing.
        match self {
            FromInit::Pty => Some(Crossing::Pty),
            FromInit::Listener => Some(Crossing::SeccompNotify),
            FromInit::Started { .. } => Some(Crossing::ExitPipe),
            FromInit::NetTun => Some(Crossing::Tun),
            FromInit::NetDns => Some(Crossing::DnsSockets),
            FromInit::NetProxy => Some(Crossing::ProxyListener),
            FromInit::NetDiag => Some(Crossing::SockDiag),
            FromInit::NetTunFailed { .. } | FromInit::NetReady | FromInit::Failed { .. } => None,
        }
    }
}

impl Frame for InwardReply {
    fn crossing(&self) -> Option<Crossing> {
        self.error.is_none().then_some(Crossing::PublishHelper)
    }
}

/// Send `msg` with `fd` riding along; a descriptor on a frame that names no crossing is
/// refused, so nothing leaves the sandbox that the inventory does not list.
pub(crate) fn hand_over<F: Frame + Serialize>(
    sock: RawFd,
    msg: &F,
    fd: Option<RawFd>,
) -> io::Result<()> {
    if fd.is_some() && msg.crossing().is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a descriptor on a frame that names no crossing",
        ));
    }
    send(sock, msg, fd)
}

/// Receive one frame from the sandbox side with the descriptor of the crossing it names;
/// `Ok(None)` on a clean end of stream. A descriptor on a frame that names no crossing, or
/// more than one on a frame, is closed here: only what the inventory lists is kept.
pub(crate) fn recv_handed<F: Frame + DeserializeOwned>(
    sock: RawFd,
) -> io::Result<Option<(F, Option<OwnedFd>)>> {
    Ok(recv::<F>(sock)?.map(|(msg, mut fds)| {
        let fd = msg.crossing().and_then(|_| fds.pop());
        (msg, fd)
    }))
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

/// Send init its spec. The contents of the files the view binds ([`MountOp::Content`]: the
/// session's policy files, and the sandbox's ~220 KB trust bundle when it could not be kept
/// as a file, [`MountOp::File`]) follow the JSON frame as raw frames, one per such mount in
/// layout order, rather than inside it as escaped JSON strings that both sides would have to
/// escape, copy and unescape at every start.
pub(crate) fn send_spec(sock: RawFd, mut spec: InitSpec) -> io::Result<()> {
    let blobs: Vec<String> = contents(&mut spec.layout).map(std::mem::take).collect();
    send(sock, &spec, None)?;
    for b in blobs {
        let len = u32::try_from(b.len()).map_err(|_| too_large(b.len()))?;
        sys::write_all_raw(sock, &len.to_le_bytes());
        sys::write_all_raw(sock, b.as_bytes());
    }
    Ok(())
}

/// Receive what [`send_spec`] sent; `Ok(None)` on a clean end of stream.
pub(crate) fn recv_spec(sock: RawFd) -> io::Result<Option<InitSpec>> {
    let Some((mut spec, _)) = recv::<InitSpec>(sock)? else {
        return Ok(None);
    };
    for content in contents(&mut spec.layout) {
        let mut header = [0u8; 4];
        read_exact(sock, &mut header)?;
        let len = u32::from_le_bytes(header) as usize;
        if len > MAX_FRAME {
            return Err(too_large(len));
        }
        let mut body = vec![0u8; len];
        read_exact(sock, &mut body)?;
        *content =
            String::from_utf8(body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    }
    Ok(Some(spec))
}

/// The files' contents a spec carries: written whole by init, so sent beside the JSON, not
/// escaped inside it (the session's policy shown under `/run/cordon` is ~30 KB of JSON itself).
fn contents(layout: &mut Layout) -> impl Iterator<Item = &mut String> {
    layout.mounts.iter_mut().flat_map(|m| match m {
        MountOp::Content { content, .. } => vec![content],
        MountOp::MaskDir { shown, .. } => shown.iter_mut().map(|(_, c)| c).collect(),
        _ => Vec::new(),
    })
}

/// Arguments and environment entries: text when they are UTF-8 (nearly always), the bytes
/// otherwise. As plain `Vec<u8>` each went as a JSON array of numbers, four to six times its
/// size and the slowest part of the spec to parse.
mod entries {
    use serde::de::{self, SeqAccess, Visitor};
    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for e in v {
            match std::str::from_utf8(e) {
                Ok(text) => seq.serialize_element(text)?,
                Err(_) => seq.serialize_element(e)?,
            }
        }
        seq.end()
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        let v: Vec<Entry> = Deserialize::deserialize(d)?;
        Ok(v.into_iter().map(|e| e.0).collect())
    }

    struct Entry(Vec<u8>);

    impl<'de> Deserialize<'de> for Entry {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(EntryVisitor)
        }
    }

    struct EntryVisitor;

    impl<'de> Visitor<'de> for EntryVisitor {
        type Value = Entry;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or an array of bytes")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Entry, E> {
            Ok(Entry(v.as_bytes().to_vec()))
        }

        fn visit_string<E: de::Error>(self, v: String) -> Result<Entry, E> {
            Ok(Entry(v.into_bytes()))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entry, A::Error> {
            let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(b) = seq.next_element::<u8>()? {
                bytes.push(b);
            }
            Ok(Entry(bytes))
        }
    }
}

fn too_large(len: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("control frame of {len} bytes refused"),
    )
}

fn read_exact(sock: RawFd, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let n = sys::read_raw(sock, &mut buf[got..]);
        if n <= 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "control channel closed mid-frame",
            ));
        }
        got += n as usize;
    }
    Ok(())
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
        return Err(too_large(len));
    }
    let mut body = vec![0u8; len];
    read_exact(sock, &mut body)?;
    let msg =
        serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Some((msg, fds)))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    fn mounts() -> Vec<MountOp> {
        let bundle: String = (0..4000)
            .map(|i| format!("-----BEGIN CERTIFICATE-----\n{i}\"\\é\n"))
            .collect();
        vec![
            MountOp::Content {
                path: "/etc/hosts".into(),
                content: "127.0.1.1\tcordon\n".into(),
            },
            MountOp::Tmpfs {
                path: "/tmp".into(),
            },
            MountOp::Content {
                path: "/etc/ssl/certs/ca-certificates.crt".into(),
                content: bundle,
            },
            MountOp::Content {
                path: "/etc/empty".into(),
                content: String::new(),
            },
            MountOp::MaskDir {
                path: "/run".into(),
                rule: "built-in".into(),
                shown: vec![
                    (
                        "cordon/policy.json".into(),
                        "{\"plan\": \"x\"}\n".repeat(2000),
                    ),
                    ("cordon/policy.toml".into(), String::new()),
                ],
                sealed: true,
            },
        ]
    }

    fn spec(mounts: Vec<MountOp>) -> InitSpec {
        InitSpec {
            layout: Layout {
                mounts,
                ..Default::default()
            },
            argv: vec![b"true".to_vec(), b"caf\xe9".to_vec()],
            env: vec![
                b"PATH=/usr/bin".to_vec(),
                b"LANG=\xff\xfe".to_vec(),
                Vec::new(),
            ],
            cwd: "/".into(),
            project: "/p".into(),
            uid: 1,
            gid: 2,
            tty: None,
            limits: LimitsPlan::default(),
            landlock: LandlockMode::default(),
            hostname: "cordon".into(),
            syscalls: SyscallsPlan::default(),
            supervise_exec: true,
            trace_paths: false,
            tmpfs_size: None,
            net: NetSetup::Loopback,
        }
    }

    #[test]
    fn the_spec_and_its_file_contents_arrive_whole_with_the_contents_outside_the_json() {
        // More than a socket buffer: the sender runs beside the reader.
        let (a, b) = sys::socketpair().unwrap();
        let sender = std::thread::spawn(move || send_spec(a.as_raw_fd(), spec(mounts())));
        let got = recv_spec(b.as_raw_fd()).unwrap().unwrap();
        sender.join().unwrap().unwrap();
        assert_eq!(got.layout.mounts, mounts());
        let want = spec(Vec::new());
        assert_eq!((&got.argv, &got.env, got.uid), (&want.argv, &want.env, 1));

        let (a, b) = sys::socketpair().unwrap();
        let sender = std::thread::spawn(move || send_spec(a.as_raw_fd(), spec(mounts())));
        let mut header = [0u8; 4];
        read_exact(b.as_raw_fd(), &mut header).unwrap();
        let len = u32::from_le_bytes(header) as usize;
        assert!(len < 4096, "{len} bytes of JSON");
        // Entries that are UTF-8 go as text; the others as their bytes.
        let mut json = vec![0u8; len];
        read_exact(b.as_raw_fd(), &mut json).unwrap();
        let json = String::from_utf8(json).unwrap();
        assert!(
            json.contains(r#""env":["PATH=/usr/bin",[76,65,78,71,61,255,254],""]"#),
            "{json}"
        );
        drop(b);
        let _ = sender.join().unwrap();

        // A stream that ends inside a content frame is an error, not a short file.
        let (a, b) = sys::socketpair().unwrap();
        let cut = spec(mounts()[..1].to_vec());
        let mut empty = cut.layout.clone();
        for c in contents(&mut empty) {
            c.clear();
        }
        send(
            a.as_raw_fd(),
            &InitSpec {
                layout: empty,
                ..cut
            },
            None,
        )
        .unwrap();
        sys::write_all_raw(a.as_raw_fd(), &100u32.to_le_bytes());
        sys::write_all_raw(a.as_raw_fd(), b"short");
        drop(a);
        assert!(recv_spec(b.as_raw_fd()).is_err());
    }
}
