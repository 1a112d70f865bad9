//! Stage 6, relay: the server's answer back to the sandbox. A server echoing a real
//! credential value never shows it to the sandbox — headers scrubbed here, the body as it
//! streams, trailers at its end; a compressed answer to a request that carried a credential
//! cannot be checked and is refused. The request's event goes out when the answer has been
//! relayed (or abandoned), with its size and time. A WebSocket upgrade is spliced, the
//! sandbox's frames checked for secrets on their way ([`ws_guard`]).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use cordon_events::{Action as EvAction, NewEvent};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;

use super::check::Cleared;
use super::count::response_head_len;
use super::forward::Forwarded;
use super::streamed::TripCell;
use super::{Body, BoxError, Exchange, HOP_BY_HOP, Refused, Tunnels, plus_held};
use crate::credentials::swap::rewrite_headers;
use crate::intercept::{Emit, Screens};

mod ws_guard;

/// The answer the sandbox gets (see the module docs).
pub(crate) fn relay(
    screens: &Screens,
    ex: &Exchange<'_>,
    verdict: &Cleared,
    f: Forwarded,
    tunnels: &Tunnels,
) -> Result<Response<Body>, Refused> {
    let Forwarded {
        result,
        mut permit,
        client_upgrade,
        scrub,
        sent,
        stopped,
        body_up,
    } = f;
    let mut resp = result.map_err(|e| {
        let why = upstream_error(&e);
        (screens.emit)(verdict.mark(ex.event(EvAction::Error, 502, &why, &verdict.decided_by)));
        Refused::new(
            StatusCode::BAD_GATEWAY,
            format!("cordon: {}: {why}\n", ex.url),
        )
    })?;
    let status = resp.status().as_u16();
    let mut e = verdict.mark(ex.event(EvAction::Allow, status, "forwarded", &verdict.decided_by));
    if let Some(j) = &verdict.why {
        e = e.detail("judge", j.clone());
    }
    if let Some(who) = &verdict.approved_by {
        e = e.detail("approved", who.clone());
    }
    if status == 101
        && let Some(client_up) = client_upgrade
    {
        let task = splice_upgrade(screens, ex, &mut resp, client_up, permit.take());
        tunnels.lock().unwrap_or_else(|p| p.into_inner()).push(task);
    }
    let (mut parts, body) = resp.into_parts();
    if status != 101 {
        for h in HOP_BY_HOP {
            parts.headers.remove(*h);
        }
    }
    if let Some(scrub) = &scrub {
        scrub_headers(scrub, &mut parts.headers);
        let encoded = parts
            .headers
            .get(header::CONTENT_ENCODING)
            .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
        if encoded && !sent.is_empty() {
            (screens.emit)(verdict.mark(ex.event(
                EvAction::Deny,
                502,
                "the response is compressed although asked not to be; it cannot be scrubbed of the credential",
                // Refused for what the answer held, not by policy: `cordon replay` keeps it.
                "http.compressed-credential",
            )));
            return Err(Refused::new(
                StatusCode::BAD_GATEWAY,
                format!(
                    "cordon: {} answered a request carrying a credential with a compressed body, which cordon cannot check for the credential's value; refused\n",
                    ex.url
                ),
            ));
        }
        if scrub.changes_length() {
            parts.headers.remove(header::CONTENT_LENGTH);
        }
    }
    let heads = (
        ex.head_len(),
        response_head_len(parts.status, &parts.headers),
    );
    if status == 101 {
        // The connection now belongs to the upgrade: no body of its own. Its frames are not
        // counted: the event goes out now, while the splice may last the session.
        (screens.emit)(e.detail("bytes_up", heads.0).detail("bytes_down", heads.1));
        return Ok(Response::from_parts(
            parts,
            Full::new(Bytes::new()).map_err(|n| match n {}).boxed(),
        ));
    }
    let counted = CountingBody {
        _permit: permit,
        inner: body,
        scrub,
        pending: None,
        bytes: 0,
        heads,
        body_up,
        started: ex.started,
        event: Some(e),
        emit: screens.emit.clone(),
        stopped,
    };
    Ok(Response::from_parts(parts, counted.boxed()))
}

/// The spliced WebSocket once the server said `101`: the sandbox's side to the server's, the
/// upstream permit held for as long.
fn splice_upgrade(
    screens: &Screens,
    ex: &Exchange<'_>,
    resp: &mut Response<Incoming>,
    client_up: hyper::upgrade::OnUpgrade,
    held: Option<tokio::sync::OwnedSemaphorePermit>,
) -> tokio::task::JoinHandle<()> {
    // The sandbox's frames are secret-scanned like a body (see ws_guard).
    let guard = screens.dlp.as_ref().map(|d| ws_guard::Guard {
        scanner: d.scanner.clone(),
        host: ex.host().to_string(),
        deflate: resp
            .headers()
            .get_all(header::SEC_WEBSOCKET_EXTENSIONS)
            .iter()
            .any(|v| {
                v.to_str()
                    .is_ok_and(|s| s.to_ascii_lowercase().contains("permessage-deflate"))
            }),
        log_only: d.action == cordon_policy::DlpAction::Log,
        label: screens.redact(&ex.label()).into_owned(),
        emit: screens.emit.clone(),
    });
    let server_up = hyper::upgrade::on(resp);
    tokio::spawn(async move {
        let _permit = held;
        if let (Ok(c), Ok(s)) = (client_up.await, server_up.await) {
            let (mut c, mut s) = (TokioIo::new(c), TokioIo::new(s));
            match guard {
                Some(g) => ws_guard::splice(c, s, g).await,
                None => {
                    let _ = tokio::io::copy_bidirectional(&mut c, &mut s).await;
                }
            }
        }
    })
}

/// The response body on its way to the sandbox, counted and scrubbed of real credential
/// values; emits the request's event when it ends or is dropped.
struct CountingBody<B: hyper::body::Body = Incoming> {
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    inner: B,
    scrub: Option<crate::dlp::Scrubber>,
    /// A trailers frame held while the scrubber's last bytes go first.
    pending: Option<hyper::body::Frame<Bytes>>,
    /// Set when the request's streamed body was stopped (a secret): the answer stops too.
    stopped: Option<TripCell>,
    /// The answer's body bytes read from the server.
    bytes: u64,
    /// The request's head and the answer's (see `count`).
    heads: (u64, u64),
    /// The request body's bytes sent upstream (counted as they went).
    body_up: Arc<AtomicU64>,
    started: Instant,
    event: Option<NewEvent>,
    emit: Emit,
}

impl<B: hyper::body::Body> CountingBody<B> {
    fn finish(&mut self, complete: bool) {
        if let Some(e) = self.event.take() {
            let up = self.heads.0 + self.body_up.load(Ordering::Relaxed);
            let mut e = e
                .detail("bytes_up", up)
                .detail("bytes_down", self.heads.1 + self.bytes)
                .detail(
                    "latency_ms",
                    u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
                );
            if !complete {
                e = e.detail("incomplete", true);
            }
            (self.emit)(e);
        }
    }
}

impl<B> hyper::body::Body for CountingBody<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        use hyper::body::Frame;
        if self
            .stopped
            .as_ref()
            .is_some_and(|t| t.lock().unwrap_or_else(|p| p.into_inner()).is_some())
        {
            self.finish(false);
            return Poll::Ready(Some(Err(
                "cordon stopped the request: its body carried a secret".into(),
            )));
        }
        if let Some(f) = self.pending.take() {
            return Poll::Ready(Some(Ok(f)));
        }
        loop {
            let r = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
            let held = |me: &mut Self| me.scrub.as_mut().map(|s| s.finish()).unwrap_or_default();
            return Poll::Ready(match r {
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => {
                        self.bytes += d.len() as u64;
                        let Some(s) = self.scrub.as_mut() else {
                            return Poll::Ready(Some(Ok(Frame::data(d))));
                        };
                        let mut out = s.push(&d);
                        if self.inner.is_end_stream() {
                            out.extend(held(&mut self));
                        }
                        if out.is_empty() {
                            // All held back: an empty chunk would end an HTTP/1 body.
                            continue;
                        }
                        Some(Ok(Frame::data(Bytes::from(out))))
                    }
                    Err(mut trailers) => {
                        if let (Some(s), Some(t)) = (&self.scrub, trailers.trailers_mut()) {
                            scrub_headers(s, t);
                        }
                        let rest = held(&mut self);
                        if rest.is_empty() {
                            Some(Ok(trailers))
                        } else {
                            self.pending = Some(trailers);
                            Some(Ok(Frame::data(Bytes::from(rest))))
                        }
                    }
                },
                None => {
                    let rest = held(&mut self);
                    if rest.is_empty() {
                        self.finish(true);
                        None
                    } else {
                        Some(Ok(Frame::data(Bytes::from(rest))))
                    }
                }
                Some(Err(e)) => {
                    self.finish(false);
                    Some(Err(e.into()))
                }
            });
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_none()
            && self.scrub.as_ref().is_none_or(|s| s.holding() == 0)
            && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match &self.scrub {
            Some(s) if s.changes_length() => hyper::body::SizeHint::default(),
            Some(s) => plus_held(self.inner.size_hint(), s.holding()),
            None => self.inner.size_hint(),
        }
    }
}

impl<B: hyper::body::Body> Drop for CountingBody<B> {
    fn drop(&mut self) {
        let done = hyper::body::Body::is_end_stream(&self.inner);
        self.finish(done);
    }
}
/// Replaces real values with placeholders in every header value.
fn scrub_headers(scrub: &crate::dlp::Scrubber, headers: &mut hyper::HeaderMap) {
    if !headers.values().any(|v| scrub.finds(v.as_bytes())) {
        return;
    }
    let _ = rewrite_headers::<()>(headers, |_, v| {
        let out = scrub.scrub_all(v.as_bytes());
        Ok((out != v.as_bytes())
            .then(|| HeaderValue::from_bytes(&out).ok())
            .flatten())
    });
}
/// Why the server could not be had, in words that say what to do about it.
fn upstream_error(e: &hyper_util::client::legacy::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    if s.contains("certificate") || s.contains("UnknownIssuer") {
        format!(
            "the server's TLS certificate did not verify ({s}); cordon never skips verification — add its CA with [tls] upstream_ca if it is a private one"
        )
    } else {
        format!("cannot reach the server ({s})")
    }
}

#[cfg(test)]
#[path = "relay_tests.rs"]
mod tests;
