//! The control port between host and guest (a virtio-serial port, `cordon.control`): the one
//! crossing besides the 9p view and the Ethernet link. It carries the command and its policy
//! in, the command's stdio (or terminal) both ways, signals and window sizes in, and the
//! sandbox's events and the exit code out.
//!
//! Frames are `[u32 little-endian length][u8 kind][body]`, the length counting the kind and
//! the body. Everything the host reads was written by the guest: a frame over
//! [`MAX_FRAME`] or of an unknown kind ends the session, and an event's JSON is checked like
//! any other input.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The largest frame either side accepts (the spec carries the whole plan).
pub const MAX_FRAME: usize = 16 << 20;
/// The port's name, as QEMU's `virtserialport,name=` gives it and the guest finds it in
/// `/sys/class/virtio-ports/*/name`.
pub const PORT_NAME: &str = "cordon.control";

/// What the guest needs to run the command: sent once, after [`Frame::Hello`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GuestSpec {
    /// The session plan, as the host enforces it.
    pub plan: cordon_policy::Plan,
    /// The command, as bytes (argv is not always UTF-8).
    pub argv: Vec<Vec<u8>>,
    pub cwd: PathBuf,
    /// The environment the host's policy let through (the guest's supervisor filters it again
    /// with the same plan).
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    /// The host's terminal size when stdin is a terminal: the guest then runs the command on a
    /// pty; otherwise stdio are pipes.
    pub tty: Option<(u16, u16)>,
    pub uid: u32,
    pub gid: u32,
    pub session: String,
    /// Whether the view holds the HTTP layer's trust bundle over the system's.
    pub trust_bundle: bool,
    /// cordon's own files placed inside masked directories (the session's policy for `cordon
    /// explain`): the guest's sandbox masks those directories again, so it places them again.
    pub placed: Vec<(PathBuf, String)>,
}

impl GuestSpec {
    pub fn argv(&self) -> Vec<OsString> {
        self.argv
            .iter()
            .map(|a| OsString::from_vec(a.clone()))
            .collect()
    }

    pub fn env_pairs(&self) -> impl Iterator<Item = (OsString, OsString)> + '_ {
        self.env
            .iter()
            .map(|(k, v)| (OsString::from_vec(k.clone()), OsString::from_vec(v.clone())))
    }

    /// Byte form of an OS string, for [`GuestSpec::argv`] and [`GuestSpec::env`].
    pub fn bytes(s: &std::ffi::OsStr) -> Vec<u8> {
        s.as_bytes().to_vec()
    }
}

/// One event of the guest's sandbox, as it crosses (cordon-events' `NewEvent` without its
/// serde form).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireEvent {
    pub layer: cordon_events::Layer,
    pub action: cordon_events::Action,
    pub reason: String,
    pub rule: Option<String>,
    pub detail: serde_json::Map<String, serde_json::Value>,
}

impl From<cordon_events::NewEvent> for WireEvent {
    fn from(e: cordon_events::NewEvent) -> Self {
        Self {
            layer: e.layer,
            action: e.action,
            reason: e.reason,
            rule: e.rule,
            detail: e.detail,
        }
    }
}

impl From<WireEvent> for cordon_events::NewEvent {
    fn from(e: WireEvent) -> Self {
        let mut ev = cordon_events::NewEvent::new(e.layer, e.action, e.reason);
        ev.rule = e.rule;
        ev.detail = e.detail;
        ev
    }
}

/// One message on the control port.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// Guest → host: the guest's init is up and reads the port.
    Hello,
    /// Host → guest: the [`GuestSpec`], as JSON.
    Start(Vec<u8>),
    /// Host → guest: bytes for the command's stdin (or typed into its terminal).
    Stdin(Vec<u8>),
    /// Host → guest: the host's stdin ended.
    StdinEnd,
    /// Host → guest: a signal the host caught, for the command.
    Signal(i32),
    /// Host → guest: the host's terminal has a new size (rows, columns).
    Winsize(u16, u16),
    /// Guest → host: the command's output.
    Stdout(Vec<u8>),
    /// Guest → host: the command's error output.
    Stderr(Vec<u8>),
    /// Guest → host: one event of the guest's sandbox ([`WireEvent`], as JSON).
    Event(Vec<u8>),
    /// Guest → host: the command ended: its exit code, or 128+N after signal N.
    Exit(i32),
    /// Guest → host: the guest could not run the command (the stage and why).
    Failed(String),
}

impl Frame {
    fn kind(&self) -> u8 {
        match self {
            Frame::Hello => 1,
            Frame::Start(_) => 2,
            Frame::Stdin(_) => 3,
            Frame::StdinEnd => 4,
            Frame::Signal(_) => 5,
            Frame::Winsize(..) => 6,
            Frame::Stdout(_) => 7,
            Frame::Stderr(_) => 8,
            Frame::Event(_) => 9,
            Frame::Exit(_) => 10,
            Frame::Failed(_) => 11,
        }
    }

    fn body(&self) -> Vec<u8> {
        match self {
            Frame::Hello | Frame::StdinEnd => Vec::new(),
            Frame::Start(b) | Frame::Stdin(b) | Frame::Stdout(b) | Frame::Stderr(b) => b.clone(),
            Frame::Event(b) => b.clone(),
            Frame::Signal(n) | Frame::Exit(n) => n.to_le_bytes().to_vec(),
            Frame::Winsize(r, c) => [r.to_le_bytes(), c.to_le_bytes()].concat(),
            Frame::Failed(s) => s.as_bytes().to_vec(),
        }
    }

    /// The frame's bytes on the port, written with one `write_all`.
    pub fn encode(&self) -> Vec<u8> {
        let body = self.body();
        let mut out = Vec::with_capacity(5 + body.len());
        out.extend_from_slice(&((body.len() + 1) as u32).to_le_bytes());
        out.push(self.kind());
        out.extend_from_slice(&body);
        out
    }

    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(&self.encode())?;
        w.flush()
    }

    fn decode(kind: u8, body: Vec<u8>) -> io::Result<Frame> {
        let int = |b: &[u8]| -> io::Result<i32> {
            b.try_into()
                .map(i32::from_le_bytes)
                .map_err(|_| bad("a number frame is not 4 bytes"))
        };
        Ok(match kind {
            1 => Frame::Hello,
            2 => Frame::Start(body),
            3 => Frame::Stdin(body),
            4 => Frame::StdinEnd,
            5 => Frame::Signal(int(&body)?),
            6 if body.len() == 4 => Frame::Winsize(
                u16::from_le_bytes([body[0], body[1]]),
                u16::from_le_bytes([body[2], body[3]]),
            ),
            7 => Frame::Stdout(body),
            8 => Frame::Stderr(body),
            9 => Frame::Event(body),
            10 => Frame::Exit(int(&body)?),
            11 => Frame::Failed(String::from_utf8_lossy(&body).into_owned()),
            k => return Err(bad(&format!("unknown frame kind {k}"))),
        })
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("control port: {what}"))
}

/// Reads frames from a byte stream, whole ones only.
#[derive(Default)]
pub struct Reader {
    buf: Vec<u8>,
}

impl Reader {
    /// Adds bytes read from the port.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame, if one has arrived; an error for a frame that is too large,
    /// empty or of an unknown kind (the stream cannot be trusted past it).
    pub fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        let Some(len) = self.buf.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        if len == 0 || len > MAX_FRAME {
            return Err(bad(&format!("a frame of {len} bytes")));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let kind = self.buf[4];
        let body = self.buf[5..4 + len].to_vec();
        self.buf.drain(..4 + len);
        Frame::decode(kind, body).map(Some)
    }

    /// Blocks on `r` until a whole frame has arrived; `None` at the end of the stream.
    pub fn read_from(&mut self, r: &mut impl Read) -> io::Result<Option<Frame>> {
        let mut chunk = [0u8; 64 << 10];
        loop {
            if let Some(f) = self.next_frame()? {
                return Ok(Some(f));
            }
            match r.read(&mut chunk) {
                Ok(0) => return Ok(None),
                Ok(n) => self.push(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_cross_whole_and_in_pieces() {
        let frames = [
            Frame::Hello,
            Frame::Start(b"{}".to_vec()),
            Frame::Stdin(vec![3]),
            Frame::StdinEnd,
            Frame::Signal(2),
            Frame::Winsize(40, 120),
            Frame::Stdout(b"out".to_vec()),
            Frame::Stderr(b"err".to_vec()),
            Frame::Event(b"{\"x\":1}".to_vec()),
            Frame::Exit(-3),
            Frame::Failed("mount: no".into()),
        ];
        let bytes: Vec<u8> = frames.iter().flat_map(|f| f.encode()).collect();
        let mut r = Reader::default();
        let mut got = Vec::new();
        for b in bytes.chunks(3) {
            r.push(b);
            while let Some(f) = r.next_frame().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, frames);
    }

    #[test]
    fn a_hostile_frame_ends_the_stream() {
        let mut r = Reader::default();
        r.push(&(MAX_FRAME as u32 + 1).to_le_bytes());
        assert!(r.next_frame().is_err());
        let mut r = Reader::default();
        r.push(&[1, 0, 0, 0, 99]);
        assert!(r.next_frame().is_err());
        let mut r = Reader::default();
        r.push(&[3, 0, 0, 0, 5, 1, 2]);
        assert!(r.next_frame().is_err(), "a signal frame of 2 bytes");
    }
}
