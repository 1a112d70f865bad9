//! Bytes each way, for a request's event (`bytes_up`, `bytes_down`): what the dashboard adds
//! up for traffic the gateway hands to this layer, whose connection is never counted there.
//! A head counts in its HTTP/1.1 form (request or status line, `name: value` lines, the blank
//! line): an HTTP/1.1 client sends and reads exactly that, an HTTP/2 client's compressed
//! headers are smaller. A body counts as it passes, not as declared: a chunked upload has no
//! length to declare, and a declared one may be a lie.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use hyper::HeaderMap;
use hyper::body::{Body, Bytes, Frame, SizeHint};

/// Bytes of a head whose first line is `first_line` bytes long, without its CRLF.
pub(crate) fn head_len<'a>(
    first_line: usize,
    fields: impl Iterator<Item = (&'a str, &'a [u8])>,
) -> u64 {
    let fields: usize = fields.map(|(n, v)| n.len() + 2 + v.len() + 2).sum();
    (first_line + 2 + fields + 2) as u64
}

/// Bytes of a response's head as relayed: `HTTP/1.1 200 OK` and its headers.
pub(crate) fn response_head_len(status: hyper::StatusCode, headers: &HeaderMap) -> u64 {
    let reason = status.canonical_reason().unwrap_or("");
    head_len(
        "HTTP/1.1 200 ".len() + reason.len(),
        headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())),
    )
}

/// A body whose data bytes are added to `count` as they pass. The count is shared because it
/// is read elsewhere: the request's event is written when the answer ends, by then the
/// upstream client has sent the request's body (or given up on it).
pub(crate) struct Counted<B> {
    inner: B,
    count: Arc<AtomicU64>,
}

impl<B> Counted<B> {
    pub(crate) fn new(inner: B, count: Arc<AtomicU64>) -> Self {
        Self { inner, count }
    }
}

impl<B> Body for Counted<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let r = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(f)) = &r
            && let Some(d) = f.data_ref()
        {
            self.count.fetch_add(d.len() as u64, Ordering::Relaxed);
        }
        Poll::Ready(r)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    #[test]
    fn heads_count_in_their_http1_form() {
        let mut h = HeaderMap::new();
        h.insert("content-length", "5".parse().unwrap());
        let head = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n";
        assert_eq!(
            response_head_len(hyper::StatusCode::OK, &h),
            head.len() as u64
        );
        let req = "GET / HTTP/1.1\r\n\r\n";
        assert_eq!(head_len("GET / HTTP/1.1".len(), std::iter::empty()), 18);
        assert_eq!(req.len(), 18);
    }

    #[tokio::test]
    async fn a_body_is_counted_as_it_passes() {
        let n = Arc::new(AtomicU64::new(0));
        let body = Counted::new(Full::new(Bytes::from_static(b"twelve bytes")), n.clone());
        assert_eq!(n.load(Ordering::Relaxed), 0);
        let out = body.collect().await.unwrap().to_bytes();
        assert_eq!((out.len(), n.load(Ordering::Relaxed)), (12, 12));
    }
}
