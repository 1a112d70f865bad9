//! A flow's two directions relayed between the sandbox's side and upstream, each ending on its
//! own (a FIN passed on at once), counted while live.

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::{HALF_CLOSE_IDLE, Shared};

/// Copy buffer per direction: large, so a bulk transfer moves in few big writes.
const RELAY_BUFFER: usize = 128 << 10;

/// Relays both directions until both have ended, or the session ends; returns bytes a→b,
/// b→a and the first error (`Interrupted` when the session ended first).
///
/// Unlike `tokio::io::copy_bidirectional`, the end of one direction *starts* the other side's
/// shutdown without waiting for it to finish: the userspace stack reports a shutdown done only
/// when the socket is fully closed (after TIME-WAIT), which would hold every flow open — and
/// its closing event back — for seconds after the last byte.
pub(crate) async fn relay<A, B>(shared: &Shared, a: A, b: B) -> (u64, u64, Option<io::Error>)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let _live = LiveGuard::new(&shared.live);
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let (a_done, b_done) = (
        tokio::sync::watch::Sender::new(false),
        tokio::sync::watch::Sender::new(false),
    );
    let both = async {
        tokio::join!(
            pump(&mut ar, &mut bw, &up, &a_done, &b_done),
            pump(&mut br, &mut aw, &down, &b_done, &a_done)
        )
    };
    let mut stop = shared.stop.subscribe();
    let err = tokio::select! {
        (u, d) = both => u.err().or(d.err()),
        _ = stop.wait_for(|s| *s) => Some(io::Error::new(
            io::ErrorKind::Interrupted,
            "the session ended",
        )),
    };
    (up.into_inner(), down.into_inner(), err)
}

/// One direction of [`relay`]: copies until end of stream, counting, then sends the FIN and
/// says so (`done`). Once the other direction is done (`other`), a read idle for
/// [`HALF_CLOSE_IDLE`] ends this one too.
async fn pump<R, W>(
    r: &mut R,
    w: &mut W,
    count: &AtomicU64,
    done: &tokio::sync::watch::Sender<bool>,
    other: &tokio::sync::watch::Sender<bool>,
) -> io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Read into the buffer's spare capacity (`read_buf`), which is never cleared: a buffer
    // zeroed per flow was a 256 KiB `memset` per connection, for flows that mostly carry a
    // few bytes.
    let mut buf = Vec::with_capacity(RELAY_BUFFER);
    let mut other_rx = other.subscribe();
    let result = loop {
        buf.clear();
        let read = if *other_rx.borrow() {
            match tokio::time::timeout(HALF_CLOSE_IDLE, r.read_buf(&mut buf)).await {
                Ok(x) => x,
                Err(_) => break Ok(()),
            }
        } else {
            // Dropping a pending read loses nothing: data is only taken when it is ready.
            tokio::select! {
                x = r.read_buf(&mut buf) => x,
                _ = other_rx.wait_for(|d| *d) => continue,
            }
        };
        match read {
            Ok(0) => break Ok(()),
            Ok(n) => {
                if let Err(e) = w.write_all(&buf[..n]).await {
                    break Err(e);
                }
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) => break Err(e),
        }
    };
    start_shutdown(w).await;
    done.send_replace(true);
    result
}

/// Counts a relay as live while it exists.
struct LiveGuard<'a>(&'a AtomicUsize);

impl<'a> LiveGuard<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::SeqCst);
        Self(n)
    }
}

impl Drop for LiveGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Sends the write side's FIN (polls shutdown once; see [`relay`]).
async fn start_shutdown<W: tokio::io::AsyncWrite + Unpin>(w: &mut W) {
    std::future::poll_fn(|cx| {
        let _ = std::pin::Pin::new(&mut *w).poll_shutdown(cx);
        std::task::Poll::Ready(())
    })
    .await;
}
