//! Stage 3, read body: the body's first bytes, read before anything leaves when a check needs
//! them first — secret scanning that may ask a person, the judge, placeholders in a body
//! that is compressed (decompressing is done on the prefix) — and forwarded afterwards, then
//! the rest. Otherwise the body is checked as it streams ([`super::streamed`]) and nothing
//! waits for it.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::header;
use hyper::{Request, StatusCode};

use super::{Exchange, Refused};
use crate::intercept::{Screens, Wire};
use cordon_policy::HttpAction;

/// How long a request body's first bytes may take to arrive (they are read before anything
/// leaves: secret scanning, placeholder checks and the judge need them).
pub(crate) const BODY_PREFIX_TIMEOUT: Duration = Duration::from_secs(30);
/// A body of unknown length (chunked, HTTP/2 streaming) that pauses this long is decided on
/// what arrived so far: a client that streams and waits for the server must not stall.
pub(crate) const BODY_PREFIX_IDLE: Duration = Duration::from_secs(2);
/// How much of a body is searched for placeholders when no `[dlp]` scan reads more.
pub(crate) const PLACEHOLDER_BODY_BYTES: usize = 64 << 10;

/// What was read of a body before the checks.
#[derive(Debug, Default)]
pub(crate) struct ReadBody {
    /// The chunks read, to forward first (`None`: nothing was read).
    pub prefix: Option<VecDeque<Bytes>>,
    /// What the checks look at: the prefix as the server would read it (decompressed).
    pub scanned: Vec<u8>,
    /// More followed what was read.
    pub truncated: bool,
    /// Why what the checks see is not what the server would (a body that does not decode).
    pub decode_note: Option<String>,
    /// The body is checked as it streams instead.
    pub streamed: bool,
}

/// What the checks of this interceptor need of a body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Needs {
    /// The judge's prefix, when the rule asks the judge.
    pub judge: usize,
    /// `[dlp]`: its action and how much it scans.
    pub dlp: Option<(cordon_policy::DlpAction, usize)>,
    /// Placeholders are looked for.
    pub credentials: bool,
}

/// Whether the body is checked as it streams, and else how much of it is read first (0:
/// none). A denied request reads nothing.
pub(crate) fn plan(
    action: HttpAction,
    needs: Needs,
    compressed: bool,
    empty: bool,
) -> (bool, usize) {
    let dlp_asks = needs
        .dlp
        .is_some_and(|(a, _)| a == cordon_policy::DlpAction::Ask);
    let streamed = action != HttpAction::Deny
        && action != HttpAction::Judge
        && !compressed
        && !dlp_asks
        && (needs.dlp.is_some() || needs.credentials)
        && !empty;
    if action == HttpAction::Deny || streamed {
        return (streamed, 0);
    }
    let placeholders = if needs.credentials {
        PLACEHOLDER_BODY_BYTES
    } else {
        0
    };
    let want = needs
        .judge
        .max(needs.dlp.map_or(0, |(_, max)| max))
        .max(placeholders);
    (false, want)
}

/// Reads what the checks need of `req`'s body (see the module docs); `head`: its first
/// chunks, taken already (by the MCP hook, looking whether it could be JSON-RPC), which go
/// first and are checked as the rest is.
pub(crate) async fn read(
    screens: &Screens,
    wire: &Wire,
    req: &mut Request<Incoming>,
    ex: &Exchange<'_>,
    action: HttpAction,
    head: VecDeque<Bytes>,
) -> Result<ReadBody, Refused> {
    let needs = Needs {
        judge: match (&screens.judge, action) {
            (Some(j), HttpAction::Judge) => j.config().max_body_bytes,
            _ => 0,
        },
        dlp: screens.dlp.as_ref().map(|d| (d.action, d.max_body)),
        credentials: !wire.credentials.is_empty() || wire.logins.get().is_some(),
    };
    let encoding = req
        .headers()
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let compressed = req
        .headers()
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    let head_len: usize = head.iter().map(Bytes::len).sum();
    let empty = head_len == 0 && hyper::body::Body::is_end_stream(req.body());
    let (streamed, want) = plan(action, needs, compressed, empty);
    let mut out = ReadBody {
        streamed,
        ..ReadBody::default()
    };
    if want == 0 || empty {
        out.prefix = (!head.is_empty()).then_some(head);
        return Ok(out);
    }
    let idle = ex.body_len.is_none().then_some(BODY_PREFIX_IDLE);
    let rest = want.saturating_sub(head_len);
    let (buffered, truncated) =
        tokio::time::timeout(BODY_PREFIX_TIMEOUT, read_prefix(req.body_mut(), rest, idle))
            .await
            .map(|r| {
                r.map(|(more, t)| {
                    let mut all = head;
                    all.extend(more);
                    (all, t)
                })
            })
            .unwrap_or_else(|_| Err(None))
            .map_err(|e| {
                let e = e.map_or("timed out".to_string(), |e| e.to_string());
                Refused::new(
                    StatusCode::BAD_REQUEST,
                    format!("cordon: reading the request body: {e}\n"),
                )
            })?;
    let flat: Vec<u8> = buffered.iter().flat_map(|b| b.iter().copied()).collect();
    // What the server would read: a compressed body is scanned (and shown to the judge)
    // decompressed, bounded so a small bomb cannot grow past `want`.
    let flat = match decompress_prefix(&encoding, &flat, want + 1) {
        Some(Ok(d)) => d,
        // Claimed compressed but is not: the raw bytes, and the judge is told why.
        Some(Err(e)) => {
            out.decode_note = Some(format!(
                "Content-Encoding {encoding} but the body does not decode ({e})"
            ));
            flat
        }
        None => flat,
    };
    out.truncated = truncated || flat.len() > want;
    out.scanned = flat;
    out.prefix = Some(buffered);
    Ok(out)
}

/// The first `max` bytes of a gzip (every member) or deflate body's content, from what was
/// read of it: a stream cut short gives what it has; one that does not decode at all is an
/// error. `None` for other encodings (shown as they are).
fn decompress_prefix(encoding: &str, data: &[u8], max: usize) -> Option<Result<Vec<u8>, String>> {
    use std::io::Read;
    let mut out = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX);
    let r = match encoding {
        "gzip" | "x-gzip" => flate2::read::MultiGzDecoder::new(data)
            .take(limit)
            .read_to_end(&mut out),
        "deflate" => flate2::read::ZlibDecoder::new(data)
            .take(limit)
            .read_to_end(&mut out),
        _ => return None,
    };
    Some(match r {
        Ok(_) => Ok(out),
        // Cut short after some content: the prefix is all there is.
        Err(_) if !out.is_empty() => Ok(out),
        Err(e) => Err(e.to_string()),
    })
}

/// Reads the body's first `max` bytes (or all of it, if shorter; or what came before a pause
/// of `idle`); the flag says more follows.
pub(crate) async fn read_prefix(
    body: &mut Incoming,
    max: usize,
    idle: Option<Duration>,
) -> Result<(VecDeque<Bytes>, bool), Option<hyper::Error>> {
    let mut out = VecDeque::new();
    let mut got = 0;
    while got < max {
        let next = match idle {
            Some(idle) => match tokio::time::timeout(idle, body.frame()).await {
                Ok(f) => f,
                Err(_) => return Ok((out, true)),
            },
            None => body.frame().await,
        };
        match next {
            Some(Ok(f)) => {
                if let Ok(d) = f.into_data() {
                    got += d.len();
                    out.push_back(d);
                }
                // A body of known length is complete once it has all arrived: no round trip
                // to the connection task for the end.
                if hyper::body::Body::is_end_stream(body) {
                    return Ok((out, false));
                }
            }
            Some(Err(e)) => return Err(Some(e)),
            None => return Ok((out, false)),
        }
    }
    Ok((out, !hyper::body::Body::is_end_stream(body)))
}
/// A body whose first chunks were read already (for the checks): those, then the rest.
pub(crate) struct PrefixedBody {
    pub prefix: VecDeque<Bytes>,
    pub rest: Incoming,
}

impl hyper::body::Body for PrefixedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>> {
        if let Some(b) = self.prefix.pop_front() {
            return Poll::Ready(Some(Ok(hyper::body::Frame::data(b))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_empty() && self.rest.is_end_stream()
    }
}

#[cfg(test)]
#[path = "body_tests.rs"]
mod tests;
