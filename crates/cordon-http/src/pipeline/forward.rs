//! Stage 5, forward: the request as it goes upstream — to the connection's own host (never
//! the sandbox's `Host`), hop-by-hop headers dropped, only a WebSocket upgrade kept,
//! credentials swapped in at the wire, the body as read or checked as it streams — once an
//! upstream permit is free. A streamed body that tripped wins over whatever the server said.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use cordon_events::Action as EvAction;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{HeaderMap, Request, Response, StatusCode, Uri};

use super::body::{BODY_PREFIX_TIMEOUT, PLACEHOLDER_BODY_BYTES, PrefixedBody, ReadBody};
use super::check::{Cleared, describe_findings, secret_refusal};
use super::count::Counted;
use super::streamed::{ScannedBody, Trip, TripCell, Watch};
use super::{Body, BoxError, Exchange, HOP_BY_HOP, Refused, SentForms};
use crate::credentials::swap::{leak_event, leak_refusal, swap};
use crate::intercept::Forwarding;

/// How long an answer that came before its request's streamed body was through waits for the
/// body's check to finish (past it, the answer goes, and stops if the body trips later).
const EARLY_ANSWER_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// What the server said, and what relaying its answer needs.
pub(crate) struct Forwarded {
    pub result: Result<Response<Incoming>, hyper_util::client::legacy::Error>,
    /// The upstream permit, held until the answer has been relayed.
    pub permit: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The sandbox side of a WebSocket upgrade.
    pub client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    /// Real values back to placeholders in the answer.
    pub scrub: Option<crate::dlp::Scrubber>,
    /// The forms real values were sent in.
    pub sent: SentForms,
    /// Set when the answer must stop should the streamed body trip later.
    pub stopped: Option<TripCell>,
    /// The request body's bytes sent upstream so far.
    pub body_up: Arc<AtomicU64>,
}

/// Sends the request upstream (see the module docs).
pub(crate) async fn forward(
    i: Forwarding<'_>,
    mut req: Request<Incoming>,
    ex: &Exchange<'_>,
    verdict: &Cleared,
    body: ReadBody,
) -> Result<Forwarded, Refused> {
    let upgrade = websocket_upgrade(req.headers());
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
    let (mut parts, incoming) = req.into_parts();
    let sent = upstream_head(i, &mut parts, ex, upgrade.as_ref(), &body.scanned)?;
    // A response to a request that carried a real value is scrubbed of every form it was
    // sent in — which needs it uncompressed.
    let scrub = if sent.is_empty() {
        i.wire
            .live()
            .map_or_else(|| i.wire.scrub.clone(), |l| l.scrub.clone())
    } else {
        parts.headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        i.wire.scrubber_for(&sent)
    };
    parts.version = hyper::Version::HTTP_11;
    let streamed = body.streamed;
    let trip: TripCell = Arc::new(std::sync::Mutex::new(None));
    let (body_done, mut body_done_rx) = tokio::sync::watch::channel(false);
    let body_up = Arc::new(AtomicU64::new(0));
    let out = Request::from_parts(
        parts,
        Counted::new(
            upstream_body(i, ex, body, incoming, &trip, body_done.clone()),
            body_up.clone(),
        )
        .boxed(),
    );
    let client = if upgrade.is_some() {
        &i.upstreams.client_h1
    } else {
        &i.upstreams.client
    };
    let permit = in_flight_permit(i, ex, verdict).await?;
    // From here the request is on its way upstream: should the sandbox go away before the
    // answer is relayed (the future dropped), the request is still logged as let out.
    let mut pending = Unanswered {
        i,
        ex,
        verdict,
        armed: true,
    };
    let result = client.request(out).await;
    if streamed && result.is_ok() {
        // The server answered before the body was through (it need not read it): a moment
        // for the rest of the body to be checked, so a secret in it still gets the 403.
        // Not longer: a client streaming both ways waits for this answer.
        let _ = tokio::time::timeout(EARLY_ANSWER_GRACE, body_done_rx.wait_for(|d| *d)).await;
    }
    drop(body_done);
    // A streamed body that carried a secret or a placeholder was stopped before it left
    // (and reported): whatever the server made of the rest, the sandbox gets the refusal.
    // Should the server have answered before the body tripped, the answer was relayed,
    // but the secret still never left.
    let log = i
        .screens
        .dlp
        .as_ref()
        .is_some_and(|d| d.action == cordon_policy::DlpAction::Log);
    let tripped = trip.lock().unwrap_or_else(|p| p.into_inner()).clone();
    // Each way on reports itself (the relay, or the trip's own events).
    pending.armed = false;
    match tripped {
        Some(Trip::Placeholder(name)) => {
            return Err(Refused::new(
                StatusCode::FORBIDDEN,
                leak_refusal(&name, "in the body"),
            ));
        }
        Some(Trip::Secret(found)) if !log => {
            let (kinds, what) = describe_findings(&found);
            return Err(Refused::new(
                StatusCode::FORBIDDEN,
                format!(
                    "cordon: {} {} was refused: {}",
                    ex.method,
                    ex.url,
                    secret_refusal(&kinds, &what, ex.host())
                ),
            ));
        }
        _ => {}
    }
    Ok(Forwarded {
        result,
        permit: Some(permit),
        client_upgrade,
        scrub,
        sent,
        // The server may answer before a streamed body trips: the answer then stops too.
        stopped: (streamed && !log).then_some(trip),
        body_up,
    })
}

/// A permit for one more request in flight: a free one at once, else a wait bounded by
/// [`BODY_PREFIX_TIMEOUT`], after which the request is refused with 503 (and logged).
async fn in_flight_permit(
    i: Forwarding<'_>,
    ex: &Exchange<'_>,
    verdict: &Cleared,
) -> Result<tokio::sync::OwnedSemaphorePermit, Refused> {
    let permit = match i.upstreams.permits.clone().try_acquire_owned() {
        Ok(p) => Ok(Ok(p)),
        Err(_) => {
            tokio::time::timeout(
                BODY_PREFIX_TIMEOUT,
                i.upstreams.permits.clone().acquire_owned(),
            )
            .await
        }
    };
    let Ok(Ok(permit)) = permit else {
        (i.screens.emit)(verdict.mark(ex.event(
            EvAction::Error,
            503,
            "too many requests in flight",
            &verdict.decided_by,
        )));
        return Err(Refused::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "cordon: too many requests are in flight; retry shortly\n",
        ));
    };
    Ok(permit)
}

/// A request sent upstream whose answer has not reached the relay: dropped armed (the sandbox
/// closed the connection meanwhile), it emits the request's event, which would otherwise go
/// out only with the answer. Found by the soak (scripts/soak.py): an agent killed mid-request
/// left a request the upstream saw and the audit log did not.
struct Unanswered<'a, 'b> {
    i: Forwarding<'a>,
    ex: &'a Exchange<'b>,
    verdict: &'a Cleared,
    armed: bool,
}

impl Drop for Unanswered<'_, '_> {
    fn drop(&mut self) {
        if self.armed {
            let e = self.ex.event(
                EvAction::Allow,
                0,
                "forwarded; the sandbox closed the connection before the answer came",
                &self.verdict.decided_by,
            );
            (self.i.screens.emit)(self.verdict.mark(e).detail("incomplete", true));
        }
    }
}

/// The upstream request's URI and headers; the credentials swapped in. A placeholder where
/// it may not go is reported and refused.
fn upstream_head(
    i: Forwarding<'_>,
    parts: &mut hyper::http::request::Parts,
    ex: &Exchange<'_>,
    upgrade: Option<&HeaderValue>,
    scanned: &[u8],
) -> Result<SentForms, Refused> {
    let c = ex.conn;
    let pq = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    parts.uri = upstream_uri(c.scheme, c.host, c.port, &pq)
        .ok_or_else(|| Refused::new(StatusCode::BAD_REQUEST, "cordon: bad request target\n"))?;
    clean_headers(&mut parts.headers, upgrade);
    // Credentials at the wire: placeholders become real values only in the named header (or
    // query parameter) of requests to the credential's hosts; anywhere else one is a leak.
    let live = i.wire.live();
    let credentials = live
        .as_ref()
        .map_or(&i.wire.credentials[..], |l| &l.credentials[..]);
    swap(credentials, parts, c.host, c.owner, scanned).map_err(|(name, place)| {
        (i.screens.emit)(
            leak_event(&format!("{} {}", ex.method, ex.url), &name, &place)
                .detail("method", ex.method.clone())
                .detail("url", ex.shown_url()),
        );
        Refused::new(StatusCode::FORBIDDEN, leak_refusal(&name, &place))
    })
}

/// The request's body upstream: the prefix read for the checks then the rest, or the body
/// checked as it streams, or the body as it is when nothing looks at it.
fn upstream_body(
    i: Forwarding<'_>,
    ex: &Exchange<'_>,
    body: ReadBody,
    incoming: Incoming,
    trip: &TripCell,
    done: tokio::sync::watch::Sender<bool>,
) -> Body {
    match body.prefix {
        Some(prefix) if !body.streamed => PrefixedBody {
            prefix,
            rest: incoming,
        }
        .map_err(BoxError::from)
        .boxed(),
        // Streamed after its first chunks were taken (to see whether it could be MCP):
        // those are scanned with the rest.
        prefix if body.streamed => {
            ScannedBody::new(
                PrefixedBody {
                    prefix: prefix.unwrap_or_default(),
                    rest: incoming,
                },
                Watch {
                    scanner: i.screens.dlp.as_ref().map(|d| d.scanner.clone()),
                    log_only: i
                        .screens
                        .dlp
                        .as_ref()
                        .is_some_and(|d| d.action == cordon_policy::DlpAction::Log),
                    placeholders: i
                        .wire
                        .live()
                        .map_or_else(|| i.wire.placeholders.clone(), |l| l.placeholders.clone()),
                    host: ex.host().to_string(),
                    window: i.wire.scan_window,
                    // Placeholders are looked for at least as far as PLACEHOLDER_BODY_BYTES,
                    // whatever [dlp] max_body_bytes says.
                    budget: i.screens.dlp.as_ref().map_or(0, |d| d.max_body).max(
                        if i.wire.credentials.is_empty() && i.wire.logins.get().is_none() {
                            0
                        } else {
                            PLACEHOLDER_BODY_BYTES
                        },
                    ),
                    trip: trip.clone(),
                    emit: i.screens.emit.clone(),
                    label: ex.label(),
                    done,
                },
            )
            .boxed()
        }
        _ => incoming.map_err(BoxError::from).boxed(),
    }
}

/// The `Upgrade` to keep: only WebSocket may take the connection over — any other upgrade
/// (h2c above all) would tunnel requests past the rules.
fn websocket_upgrade(headers: &HeaderMap) -> Option<HeaderValue> {
    headers
        .get(header::UPGRADE)
        .filter(|v| {
            v.to_str()
                .is_ok_and(|u| u.trim().eq_ignore_ascii_case("websocket"))
        })
        .cloned()
}

/// Drops hop-by-hop headers and the sandbox's `Host`; puts back a WebSocket upgrade.
fn clean_headers(headers: &mut HeaderMap, upgrade: Option<&HeaderValue>) {
    for h in HOP_BY_HOP {
        headers.remove(*h);
    }
    if let Some(u) = upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, u.clone());
    }
    // The sandbox's Host never goes upstream: the client sets the connection's own (from
    // the URI) for HTTP/1.1 and sends it as :authority for HTTP/2 (a Host beside it makes
    // servers refuse the request).
    headers.remove(header::HOST);
}

/// The absolute URI upstream: the connection's host and port, the request's path and query.
/// Plain HTTP from the sandbox leaves as plain HTTP (and so never carries a credential).
fn upstream_uri(scheme: &str, host: &str, port: u16, pq: &str) -> Option<Uri> {
    let https: Uri = format!("https://{}{pq}", authority(host, port, 443))
        .parse()
        .ok()?;
    if scheme != "http" {
        return Some(https);
    }
    Some(
        format!("http://{}{pq}", authority(host, port, 80))
            .parse()
            .unwrap_or(https),
    )
}

/// `host[:port]`, the port left out when it is `default`; an IPv6 address in brackets.
fn authority(host: &str, port: u16, default: u16) -> String {
    let h = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    if port == default {
        h
    } else {
        format!("{h}:{port}")
    }
}

#[cfg(test)]
#[path = "forward_tests.rs"]
mod tests;
