//! How bulk bytes cross an upstream TLS connection with few system calls and few hops.
//!
//! rustls takes what the socket gives 4 KiB at a time (its own read size), and tokio-rustls
//! hands back one record's plaintext (≤ 16 KiB) per read. A 10 MiB answer was then ~2,600
//! `recv`s and ~640 body chunks, each chunk a hand-off between the upstream connection's task
//! and the sandbox connection's. Here the socket is read in large pieces ([`BufTcp`]) and a
//! read takes every record already decrypted or decryptable from what is buffered
//! ([`poll_read_gathered`]), so hyper's read buffer fills and its chunks grow. Nothing is
//! skipped: every byte still goes through rustls (decrypted and authenticated) in order.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How much of the socket is read at once while it streams.
const READ_AHEAD: usize = 64 << 10;

/// A TCP stream read through a buffer of [`READ_AHEAD`] bytes while it streams; writes go
/// straight through. The buffer is there only while the socket keeps more than is asked of
/// it (a bulk answer): a read that fills the reader's buffer brings it, a refill that gets
/// little lets it go once drained, so idle pooled connections hold none.
pub(crate) struct BufTcp {
    tcp: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl BufTcp {
    pub(crate) fn new(tcp: TcpStream) -> Self {
        Self {
            tcp,
            buf: Vec::new(),
            start: 0,
            end: 0,
        }
    }

    /// Whether a read-ahead buffer is held now (tests).
    #[cfg(test)]
    pub(crate) fn buffering(&self) -> bool {
        !self.buf.is_empty()
    }
}

impl AsyncRead for BufTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.start == me.end {
            if me.buf.is_empty() || out.remaining() >= READ_AHEAD {
                // Straight from the socket; one that had all that was asked streams.
                let (want, before) = (out.remaining(), out.filled().len());
                std::task::ready!(Pin::new(&mut me.tcp).poll_read(cx, out))?;
                if me.buf.is_empty() && want > 0 && out.filled().len() - before == want {
                    me.buf = vec![0; READ_AHEAD];
                }
                return Poll::Ready(Ok(()));
            }
            let mut rb = ReadBuf::new(&mut me.buf);
            std::task::ready!(Pin::new(&mut me.tcp).poll_read(cx, &mut rb))?;
            me.start = 0;
            me.end = rb.filled().len();
            if me.end == 0 {
                return Poll::Ready(Ok(()));
            }
        }
        let n = out.remaining().min(me.end - me.start);
        out.put_slice(&me.buf[me.start..me.start + n]);
        me.start += n;
        if me.start == me.end && me.end < READ_AHEAD / 4 {
            // The stream slowed down: back to reading the socket directly.
            me.buf = Vec::new();
            (me.start, me.end) = (0, 0);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for BufTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// Reads from `r` until `out` is full or `r` has nothing more now: what it had is returned
/// at once (never waiting for more), an end or an error after some bytes is left for the
/// next read, which meets it again (`pending_err` keeps an error until then).
pub(crate) fn poll_read_gathered<R: AsyncRead + Unpin>(
    r: &mut R,
    pending_err: &mut Option<io::Error>,
    cx: &mut Context<'_>,
    out: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    if let Some(e) = pending_err.take() {
        return Poll::Ready(Err(e));
    }
    let start = out.filled().len();
    loop {
        let before = out.filled().len();
        match Pin::new(&mut *r).poll_read(cx, out) {
            Poll::Ready(Ok(())) if out.filled().len() == before => {
                // The end: said now if nothing was read, else by the next read.
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Ok(())) if out.remaining() == 0 => return Poll::Ready(Ok(())),
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) if out.filled().len() > start => {
                *pending_err = Some(e);
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            // Nothing more now: what was read goes; the waker stays registered.
            Poll::Pending if out.filled().len() > start => return Poll::Ready(Ok(())),
            Poll::Pending => return Poll::Pending,
        }
    }
}

#[cfg(test)]
#[path = "tls_io_tests.rs"]
mod tests;
