//! A WebSocket after its upgrade: the server's frames are relayed as they come; the sandbox's
//! are read whole (up to [`MAX_FRAME`]), unmasked — and inflated when the connection agreed on
//! `permessage-deflate` — and searched for secrets like a request body before a byte of them
//! leaves. A frame that carries one ends the connection (`[dlp] action = "log"`: forwarded and
//! logged). A message's frames are searched with the end of the frame before, so a secret
//! split across frames is seen too. What cannot be checked (a frame over [`MAX_FRAME`], a
//! message inflating past [`MAX_MESSAGE`], deflate data that does not decode) ends it as well.

use std::sync::Arc;

use cordon_events::{Action as EvAction, Layer, NewEvent};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::dlp::{Place, Scanner};
use crate::intercept::Emit;

/// Largest frame from the sandbox that is held to be checked: what one connection may make
/// the supervisor hold (and a sandbox has up to 512).
const MAX_FRAME: u64 = 4 << 20;
/// Largest inflated message (a small compressed frame can inflate a thousandfold).
const MAX_MESSAGE: usize = 16 << 20;

/// What the check of one connection needs.
pub(crate) struct Guard {
    pub scanner: Arc<Scanner>,
    /// The connection's host (exemptions are by host).
    pub host: String,
    /// `permessage-deflate` was agreed (the server's `Sec-WebSocket-Extensions`).
    pub deflate: bool,
    /// Only log what is found (`[dlp] action = "log"`).
    pub log_only: bool,
    /// `GET https://host/path`, for events (redacted by the caller).
    pub label: String,
    pub emit: Emit,
}

/// Why the sandbox's side stopped.
enum Stop {
    /// It closed, or the server did: the other direction may finish.
    Closed,
    /// A secret, or something that could not be checked: the connection ends now.
    Refused,
}

/// Relays both directions until both end, or until the sandbox sends what may not leave.
pub(crate) async fn splice<C, S>(client: C, server: S, g: Guard)
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut sr, mut sw) = tokio::io::split(server);
    let down = async {
        let _ = tokio::io::copy(&mut sr, &mut cw).await;
        let _ = cw.shutdown().await;
    };
    let up = async {
        let stop = g.up(&mut cr, &mut sw).await;
        let _ = sw.shutdown().await;
        stop
    };
    tokio::pin!(down, up);
    tokio::select! {
        stop = &mut up => {
            if matches!(stop, Stop::Closed) {
                down.await;
            }
        }
        () = &mut down => {
            let _ = up.await;
        }
    }
}

impl Guard {
    fn refuse(&self, why: &str, rule: &str) -> Stop {
        (self.emit)(
            NewEvent::new(
                Layer::Credentials,
                EvAction::Deny,
                format!(
                    "{}: a WebSocket frame {why}; the connection was closed",
                    self.label
                ),
            )
            .rule(rule.to_string())
            .detail("url", self.label.clone()),
        );
        Stop::Refused
    }

    /// The sandbox's frames, each checked, then written upstream as they were.
    async fn up<R, W>(&self, r: &mut R, w: &mut W) -> Stop
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let window = self.scanner.window();
        let mut inflater = flate2::Decompress::new(false);
        // The end of what this message already showed, scanned again with the next frame.
        let mut tail: Vec<u8> = Vec::new();
        let mut compressed = false;
        let mut message_len = 0usize;
        loop {
            let (frame, first, mut payload) = match self.read_frame(r).await {
                Ok(f) => f,
                Err(stop) => return stop,
            };
            let op = first & 0x0f;
            let fin = first & 0x80 != 0;
            let data = if op >= 8 {
                // A control frame (close, ping, pong): never compressed, its own text.
                payload
            } else {
                if op != 0 {
                    // A new message.
                    compressed = self.deflate && first & 0x40 != 0;
                    tail.clear();
                    message_len = 0;
                }
                if compressed {
                    if fin {
                        payload.extend_from_slice(&[0, 0, 0xff, 0xff]);
                    }
                    match inflate(&mut inflater, &payload) {
                        Some(d) => d,
                        None => {
                            return self.refuse(
                                "holds deflate data that does not decode",
                                "dlp:unchecked",
                            );
                        }
                    }
                } else {
                    payload
                }
            };
            if op < 8 {
                message_len += data.len();
                if message_len > MAX_MESSAGE {
                    return self.refuse(
                        &format!("message grows past {MAX_MESSAGE} bytes, more than cordon checks"),
                        "dlp:unchecked",
                    );
                }
            }
            let seen: Vec<u8> = if op < 8 {
                tail.iter().chain(data.iter()).copied().collect()
            } else {
                data
            };
            if let Err(stop) = self.check_secrets(&seen) {
                return stop;
            }
            if op < 8 {
                tail = seen[seen.len().saturating_sub(window)..].to_vec();
            }
            if w.write_all(&frame).await.is_err() || w.flush().await.is_err() {
                return Stop::Closed;
            }
        }
    }

    /// One frame from the sandbox: its bytes as they came (to be written upstream
    /// unchanged), its first byte (FIN, RSV1, opcode) and its payload unmasked. A frame
    /// larger than cordon checks is refused.
    async fn read_frame<R>(&self, r: &mut R) -> Result<(Vec<u8>, u8, Vec<u8>), Stop>
    where
        R: AsyncRead + Unpin,
    {
        let mut frame = vec![0u8; 2];
        if r.read_exact(&mut frame).await.is_err() {
            return Err(Stop::Closed);
        }
        let (first, second) = (frame[0], frame[1]);
        let len = match second & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                if r.read_exact(&mut b).await.is_err() {
                    return Err(Stop::Closed);
                }
                frame.extend_from_slice(&b);
                u64::from(u16::from_be_bytes(b))
            }
            127 => {
                let mut b = [0u8; 8];
                if r.read_exact(&mut b).await.is_err() {
                    return Err(Stop::Closed);
                }
                frame.extend_from_slice(&b);
                u64::from_be_bytes(b)
            }
            n => u64::from(n),
        };
        if len > MAX_FRAME {
            return Err(self.refuse(
                &format!("of {len} bytes is larger than cordon checks ({MAX_FRAME})"),
                "dlp:unchecked",
            ));
        }
        let mut mask = [0u8; 4];
        if second & 0x80 != 0 {
            if r.read_exact(&mut mask).await.is_err() {
                return Err(Stop::Closed);
            }
            frame.extend_from_slice(&mask);
        }
        let start = frame.len();
        frame.resize(start + len as usize, 0);
        if r.read_exact(&mut frame[start..]).await.is_err() {
            return Err(Stop::Closed);
        }
        let mut payload = frame[start..].to_vec();
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
        Ok((frame, first, payload))
    }

    /// A secret in what a message showed so far is refused, or only logged when DLP logs.
    fn check_secrets(&self, seen: &[u8]) -> Result<(), Stop> {
        let mut found = self.scanner.scan(seen, Place::Body);
        found.retain(|f| !self.scanner.exempt(&f.kind, &self.host));
        if !found.is_empty() {
            let (kinds, what) = crate::pipeline::check::describe_findings(&found);
            let rule = format!("dlp:{}", kinds.join(","));
            if self.log_only {
                (self.emit)(
                    NewEvent::new(
                        Layer::Credentials,
                        EvAction::Log,
                        format!(
                            "{}: a WebSocket frame carries a secret ({what}); forwarded",
                            self.label
                        ),
                    )
                    .rule(rule)
                    .detail("url", self.label.clone()),
                );
            } else {
                return Err(self.refuse(&format!("carries a secret ({what})"), &rule));
            }
        }
        Ok(())
    }
}

/// `input` inflated with the connection's deflate state; `None` when it does not decode or
/// inflates past [`MAX_MESSAGE`].
fn inflate(d: &mut flate2::Decompress, input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len() * 4 + 64);
    let mut rest = input;
    loop {
        if out.capacity() - out.len() < 4096 {
            out.reserve(out.capacity().max(4096));
        }
        let (in0, out0) = (d.total_in(), d.total_out());
        d.decompress_vec(rest, &mut out, flate2::FlushDecompress::Sync)
            .ok()?;
        let used = usize::try_from(d.total_in() - in0).ok()?;
        rest = &rest[used..];
        if out.len() > MAX_MESSAGE {
            return None;
        }
        let progressed = used > 0 || d.total_out() > out0;
        if (rest.is_empty() && out.len() < out.capacity()) || !progressed {
            return Some(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inflates_a_sync_flushed_message() {
        use std::io::Write;
        let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(b"hello hello hello secret").unwrap();
        z.flush().unwrap();
        let mut raw = z.get_ref().clone();
        // permessage-deflate drops the trailing empty block; the reader adds it back.
        assert!(raw.ends_with(&[0, 0, 0xff, 0xff]));
        raw.truncate(raw.len() - 4);
        raw.extend_from_slice(&[0, 0, 0xff, 0xff]);
        let mut d = flate2::Decompress::new(false);
        assert_eq!(inflate(&mut d, &raw).unwrap(), b"hello hello hello secret");
        assert!(inflate(&mut flate2::Decompress::new(false), b"\xff\xff\xff").is_none());
    }
}
