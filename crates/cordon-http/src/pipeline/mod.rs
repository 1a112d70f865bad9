//! The request path as a pipeline: every request the interceptor reads runs these stages in
//! order, each in its own module with its tests next to it.
//!
//! 1. [`admit`] — the path as the server will read it, and the connection's host: a request
//!    naming another host (or an ambiguous path) goes no further.
//! 2. [`decide`] — the ordered `[[http.rule]]`s, first match wins.
//! 3. [`body`] — the body's first bytes, when a check needs them before anything leaves
//!    (decompressed, bounded); otherwise the body is checked as it streams ([`streamed`]).
//! 4. [`check`] — secret scanning, then the judge and a person where the rule says so: the
//!    final verdict, or the refusal the sandbox is told.
//! 5. [`forward`] — the upstream request: the connection's own URI and host, hop-by-hop
//!    headers dropped, credentials swapped in at the wire, one upstream permit.
//! 6. [`relay`] — the answer back: scrubbed of real credential values, counted (bytes each
//!    way, [`count`]), logged when it ends; a WebSocket upgrade spliced.
//!
//! A stage that refuses returns [`Refused`]: the status and words the sandbox gets (its
//! event, if any, is out already). Nothing here trusts the request: it comes from the sandbox.

mod admit;
pub(crate) use admit::normalize_url_path;
mod body;
mod check;
mod count;
mod decide;
mod forward;
mod mcp;
mod relay;
mod streamed;
mod token;

use std::sync::Arc;
use std::time::Instant;

use cordon_events::{Action as EvAction, Layer, NewEvent};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};

use crate::intercept::Interceptor;
use crate::rules::Decision;

/// (form a real value was sent in, form the sandbox knows it by).
pub(crate) type SentForms = Vec<(String, String)>;
/// Body errors: hyper's own, or cordon stopping a request body that carries a secret.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// A body as the pipeline hands it on (either way).
pub(crate) type Body = BoxBody<Bytes, BoxError>;
/// The upgraded connections of one sandbox connection.
pub(crate) type Tunnels = Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>;

/// Hop-by-hop headers (RFC 9110 §7.6.1): never forwarded.
pub(crate) const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The sandbox connection a request arrived on: the name it was made to (or its SNI), the
/// port, and `http` or `https`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Conn<'a> {
    pub host: &'a str,
    pub port: u16,
    pub scheme: &'static str,
    /// The process that opened the connection, when the gateway found it (it looks only
    /// when a rule or credential names programs).
    pub owner: Option<&'a cordon_policy::Owner>,
}

/// A refusal: what the sandbox is told.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    pub status: StatusCode,
    pub body: String,
}

impl Refused {
    pub(crate) fn new(status: StatusCode, body: impl Into<String>) -> Self {
        Self {
            status,
            body: body.into(),
        }
    }
}

/// What [`admit`] learnt of a request, for every later stage and its events.
#[derive(Debug)]
pub(crate) struct Exchange<'a> {
    pub conn: Conn<'a>,
    pub started: Instant,
    pub method: String,
    /// The path as the server reads it (see [`admit::normalize_url_path`]).
    pub path: String,
    pub query: String,
    /// The request target as sent (path and query): what secret scanning reads.
    pub target: String,
    /// `scheme://host[:port]/path`, any token in the path redacted: what events and
    /// refusals name.
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// The declared length (`GET` and `HEAD` without one: 0).
    pub body_len: Option<u64>,
}

impl Exchange<'_> {
    pub(crate) fn host(&self) -> &str {
        self.conn.host
    }

    /// The path as [`url`](Self::url) shows it (tokens redacted): what `cordon replay`
    /// decides a logged request by.
    pub(crate) fn shown_path(&self) -> &str {
        let rest = self
            .url
            .split_once("://")
            .map_or(self.url.as_str(), |(_, r)| r);
        rest.find('/').map_or("/", |i| &rest[i..])
    }

    /// [`url`](Self::url) with the query's values hidden.
    pub(crate) fn shown_url(&self) -> String {
        format!("{}{}", self.url, redact_query(&self.query))
    }

    /// The request's head in its HTTP/1.1 form, bytes (see [`count`]).
    pub(crate) fn head_len(&self) -> u64 {
        count::head_len(
            self.method.len() + 1 + self.target.len() + " HTTP/1.1".len(),
            self.headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())),
        )
    }

    /// `METHOD URL?name=…`, for events.
    pub(crate) fn label(&self) -> String {
        format!("{} {}", self.method, self.shown_url())
    }

    /// The request's event in the HTTP layer.
    pub(crate) fn event(
        &self,
        action: EvAction,
        status: u16,
        reason: &str,
        rule: impl std::fmt::Display,
    ) -> NewEvent {
        let ev = NewEvent::new(
            Layer::Http,
            action,
            format!("{} → {status}: {reason}", self.label()),
        );
        let ev = match self.conn.owner {
            Some(o) => ev.detail(cordon_policy::program::EVENT_KEY, o.to_detail()),
            None => ev,
        };
        ev.rule(rule.to_string())
            .detail("method", self.method.clone())
            .detail("url", self.shown_url())
            .detail("host", self.host().to_string())
            .detail("port", self.conn.port)
            .detail("path", self.shown_path().to_string())
            .detail("body_len", self.body_len)
            .detail("status", status)
            .detail(
                "latency_ms",
                u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            )
    }

    /// An event of the credentials layer about this request (secrets in it).
    pub(crate) fn credentials_event(&self, action: EvAction, what: &str, rule: &str) -> NewEvent {
        NewEvent::new(
            Layer::Credentials,
            action,
            format!("{}: {what}", self.label()),
        )
        .rule(rule.to_string())
        .detail("method", self.method.clone())
        .detail("url", self.shown_url())
    }
}

/// Runs one request through the stages; every refusal becomes its plain-text answer.
pub(crate) async fn handle(
    i: &Interceptor,
    req: Request<Incoming>,
    conn: &Conn<'_>,
    tunnels: &Tunnels,
) -> Response<Body> {
    match run(i, req, *conn, tunnels).await {
        Ok(r) => r,
        Err(r) => text(r.status, r.body),
    }
}

async fn run(
    i: &Interceptor,
    mut req: Request<Incoming>,
    conn: Conn<'_>,
    tunnels: &Tunnels,
) -> Result<Response<Body>, Refused> {
    let ex = admit::admit(&i.screens, &req, conn)?;
    audit_writable(i, &ex)?;
    let (decision, learned) = learn(i, decide::decide(&i.rules, i.default, &ex));
    // A login's token exchange: its body and its answer carry the tokens (see `token`).
    if decision.action != cordon_policy::HttpAction::Deny && token::brokered(i.forwarding(), &ex) {
        let (parts, body) = token::read(req).await?;
        let mut verdict = check::check(&i.screens, &ex, decision, &body).await?;
        verdict.learned = learned;
        return token::exchange(i.forwarding(), parts, &ex, &verdict, body).await;
    }
    // MCP: the tool calls in the body decided, the answer's tool lists filtered (see `mcp`).
    let mut spot = (decision.action != cordon_policy::HttpAction::Deny)
        .then(|| mcp::spot(i, &ex))
        .flatten();
    let body = match &mut spot {
        Some(s) if ex.method == "POST" => {
            match mcp::screen(i, s, &mut req, &ex, decision.action).await? {
                mcp::Screened::Forward(b) => b,
                mcp::Screened::Answer(r) => return Ok(r),
            }
        }
        _ => {
            body::read(
                &i.screens,
                &i.wire,
                &mut req,
                &ex,
                decision.action,
                Default::default(),
            )
            .await?
        }
    };
    if spot
        .as_ref()
        .is_some_and(|s| s.answer_is_mcp(&ex) && s.wants_plain())
    {
        mcp::plain_answers(req.headers_mut());
    }
    let mut verdict = check::check(&i.screens, &ex, decision, &body).await?;
    verdict.learned = learned;
    let sent = forward::forward(i.forwarding(), req, &ex, &verdict, body).await?;
    let answer = relay::relay(&i.screens, &ex, &verdict, sent, tunnels)?;
    Ok(match spot {
        Some(s) => mcp::filter(&i.screens, s, &ex, answer),
        None => answer,
    })
}

/// In a learning run, a rule's `deny` or `ask` becomes an allow that remembers what it would
/// have been (the judge still decides what a rule sends it, and secret scanning still runs).
fn learn(i: &Interceptor, d: Decision) -> (Decision, Option<cordon_policy::HttpAction>) {
    use cordon_policy::HttpAction;
    match d.action {
        HttpAction::Deny | HttpAction::Ask if i.learning => {
            let was = d.action;
            let d = Decision {
                action: HttpAction::Allow,
                ..d
            };
            (d, Some(was))
        }
        _ => (d, None),
    }
}

/// While the session's audit log cannot be written (the disk full) no request is decided:
/// each is refused, its event held with the rest until the log can be written.
fn audit_writable(i: &Interceptor, ex: &Exchange<'_>) -> Result<(), Refused> {
    if i.audit.get().is_none_or(|a| a.writable()) {
        return Ok(());
    }
    let why = "the audit log cannot be written (its disk full?); no request goes out until it can";
    (i.screens.emit)(ex.event(EvAction::Deny, 503, why, cordon_events::AUDIT_UNWRITABLE));
    Err(Refused::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("cordon: {}: {why}\n", ex.url),
    ))
}

/// A body's size hint with the `held` bytes a wrapper still owes added.
pub(crate) fn plus_held(mut h: hyper::body::SizeHint, held: usize) -> hyper::body::SizeHint {
    let held = held as u64;
    // Upper first: `set_lower` past the current upper panics (an exact hint).
    if let Some(u) = h.upper() {
        h.set_upper(u + held);
    }
    h.set_lower(h.lower() + held);
    h
}

/// `?a=…&b=…`: names kept, values hidden (tokens travel in query strings).
pub(crate) fn redact_query(q: &str) -> String {
    if q.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = q
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) => format!("{k}=…"),
            // A bare item may be the secret itself (`?sk-live-…`).
            None => "…".to_string(),
        })
        .collect();
    format!("?{}", parts.join("&"))
}

/// A plain-text answer from cordon itself.
pub(crate) fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
