//! The interceptor: terminates the sandbox's TLS with a leaf from cordon's CA, reads each
//! request (HTTP/1.1 or HTTP/2, as ALPN says), decides it with the rules, and forwards what
//! is allowed to the real server over TLS verified against the host's roots — streaming both
//! bodies, never buffering a response (LLM APIs stream). A denial is a 403 whose body says
//! which rule and why, in words a model can act on.
//!
//! The host a request is decided and forwarded by is the *connection's* (the name the sandbox
//! connected to, or the SNI it sent for it): a `Host` header naming anything else is refused
//! (421), so one allowed connection cannot carry requests for another host.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use cordon_events::{Action as EvAction, Layer, NewEvent};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::CertAuthority;
use crate::rules::{self, Action, Rule};

/// Where events go.
pub type Emit = Arc<dyn Fn(NewEvent) + Send + Sync>;
/// Opens the TCP connection to the real `host:port` for an allowed request (the gateway's
/// policy-checked, rebinding-safe connect).
pub type ConnectFn = Arc<
    dyn Fn(String, u16) -> Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>>
        + Send
        + Sync,
>;

/// (form a real value was sent in, form the sandbox knows it by).
type SentForms = Vec<(String, String)>;
/// Body errors: hyper's own, or cordon stopping a request body that carries a secret.
type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;
/// The upgraded connections of one sandbox connection.
type Tunnels = Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>;

/// Concurrent HTTP/2 streams one sandbox connection may have (each may hold an upstream
/// request): bounds what one flow can make the supervisor open.
const MAX_STREAMS: u32 = 32;
/// Upstream requests in flight at once, all flows together (each holds a socket).
const MAX_UPSTREAM: usize = 1024;
/// Largest request head (HTTP/1 buffer, HTTP/2 header list).
const MAX_HEADERS: u32 = 64 << 10;
/// How long a request body's first bytes may take to arrive (they are read before anything
/// leaves: secret scanning, placeholder checks and the judge need them).
const BODY_PREFIX_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// A body of unknown length (chunked, HTTP/2 streaming) that pauses this long is decided on
/// what arrived so far: a client that streams and waits for the server must not stall.
const BODY_PREFIX_IDLE: std::time::Duration = std::time::Duration::from_secs(2);
/// How much of a body is searched for placeholders when no `[dlp]` scan reads more.
const PLACEHOLDER_BODY_BYTES: usize = 64 << 10;
/// How long an answer that came before its request's streamed body was through waits for the
/// body's check to finish (past it, the answer goes, and stops if the body trips later).
const EARLY_ANSWER_GRACE: std::time::Duration = std::time::Duration::from_millis(500);
/// A streamed body that pauses this long with bytes held back releases what cannot begin a
/// secret; after twice as long, all of it (see [`ScannedBody`]).
const BODY_HOLD_IDLE: std::time::Duration = std::time::Duration::from_millis(250);

/// Hop-by-hop headers (RFC 9110 §7.6.1): never forwarded.
const HOP_BY_HOP: &[&str] = &[
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

/// What the interceptor needs.
pub struct Config {
    /// cordon's CA.
    pub ca: Arc<CertAuthority>,
    /// Ordered rules.
    pub rules: Vec<Rule>,
    /// What an unmatched request gets.
    pub default: Action,
    /// Extra CA certificates (PEM) trusted for upstream servers, beyond the host's roots.
    pub upstream_ca_pem: Vec<String>,
    /// The policy-checked connect.
    pub connect: ConnectFn,
    /// Events.
    pub emit: Emit,
    /// The LLM judge, for `judge` decisions (none: they are refused).
    pub judge: Option<Arc<crate::judge::Judge>>,
    /// A person, for `ask` decisions (none: they are refused).
    pub asker: Option<Arc<crate::ask::Asker>>,
    /// Credentials swapped in at the wire.
    pub credentials: Vec<WireCredential>,
    /// Outbound secret scanning (none: off).
    pub dlp: Option<Dlp>,
}

/// Outbound secret scanning as the interceptor applies it to every request it forwards.
#[derive(Debug)]
pub struct Dlp {
    /// What to look for, and where each kind may go.
    pub scanner: Arc<crate::dlp::Scanner>,
    /// What a finding does.
    pub action: cordon_policy::DlpAction,
    /// How much of each body is scanned.
    pub max_body: usize,
}

/// A credential as the interceptor holds it: the sandbox's placeholder and the real value.
#[derive(Clone)]
pub struct WireCredential {
    /// Name, for events.
    pub name: String,
    /// What the sandbox holds.
    pub placeholder: String,
    /// The real value (never logged, never sent anywhere but `hosts`).
    pub real: String,
    /// The hosts it may go to.
    pub hosts: Vec<cordon_policy::HostPattern>,
    /// The header it travels in (lower-case); empty when it travels in `query`.
    pub header: String,
    /// The query parameter it travels in instead of a header.
    pub query: Option<String>,
    /// `{}`-format of the header value when injected (`Basic …` is base64-encoded).
    pub format: String,
    /// Set the header on every request to `hosts`.
    pub inject: bool,
}

impl std::fmt::Debug for WireCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireCredential")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

impl WireCredential {
    /// The header value to inject, holding `value` (the real one, or the placeholder to say
    /// what the sandbox would have sent).
    fn formatted(&self, value: &str) -> String {
        let v = self.format.replace("{}", value);
        match v.strip_prefix("Basic ") {
            Some(userpass) => format!("Basic {}", crate::b64::encode(userpass.as_bytes(), true)),
            None => v,
        }
    }
}

/// Decides and forwards the sandbox's HTTP(S) requests (see the module docs).
pub struct Interceptor {
    ca: Arc<CertAuthority>,
    rules: Vec<Rule>,
    default: Action,
    server_alpn: Vec<Vec<u8>>,
    client: Client<Upstream, Body>,
    /// For upgrades (WebSocket): HTTP/1.1 only.
    client_h1: Client<Upstream, Body>,
    /// One permit per upstream request in flight (held until its response has been relayed).
    upstream: Arc<tokio::sync::Semaphore>,
    emit: Emit,
    judge: Option<Arc<crate::judge::Judge>>,
    asker: Option<Arc<crate::ask::Asker>>,
    credentials: Vec<WireCredential>,
    dlp: Option<Dlp>,
    /// Real values back to placeholders in responses (none without credentials).
    scrub: Option<crate::dlp::Scrubber>,
    /// Scrubbers for the encoded forms requests sent (Basic values), by those forms.
    scrubbers: std::sync::Mutex<Vec<(SentForms, crate::dlp::Scrubber)>>,
    /// (credential, placeholder), for bodies checked as they stream.
    placeholders: Arc<Vec<(String, String)>>,
    /// How far back a streamed body's scan must look: the longest secret or placeholder.
    scan_window: usize,
}

/// Why the interceptor could not be built.
#[derive(Debug, thiserror::Error)]
pub enum InterceptError {
    /// An upstream CA could not be read.
    #[error("upstream CA: {0}")]
    UpstreamCa(String),
    /// The TLS configuration could not be made.
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
}

impl Interceptor {
    /// Builds the upstream TLS client (the host's roots plus `upstream_ca_pem`, ALPN h2 and
    /// http/1.1) and the connection pool.
    pub fn new(cfg: Config) -> Result<Self, InterceptError> {
        let placeholders: Vec<(String, String)> = cfg
            .credentials
            .iter()
            .map(|c| (c.name.clone(), c.placeholder.clone()))
            .collect();
        let scan_window = placeholders
            .iter()
            .map(|(_, p)| p.len())
            .chain(cfg.dlp.as_ref().map(|d| d.scanner.window()))
            .max()
            .unwrap_or(0);
        let roots = upstream_roots(&cfg.upstream_ca_pem)?;
        let upstream =
            Upstream::with_roots(cfg.connect.clone(), roots.clone(), &[b"h2", b"http/1.1"])?;
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(32)
            .build(upstream);
        let h1 = Upstream::with_roots(cfg.connect, roots, &[b"http/1.1"])?;
        let client_h1 = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(8)
            .build(h1);
        Ok(Self {
            ca: cfg.ca,
            rules: cfg.rules,
            default: cfg.default,
            server_alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            client,
            client_h1,
            upstream: Arc::new(tokio::sync::Semaphore::new(MAX_UPSTREAM)),
            emit: cfg.emit,
            judge: cfg.judge,
            asker: cfg.asker,
            scrub: crate::dlp::Scrubber::new(
                &cfg.credentials
                    .iter()
                    .map(|c| (c.real.clone(), c.placeholder.clone()))
                    .collect::<Vec<_>>(),
            ),
            credentials: cfg.credentials,
            dlp: cfg.dlp,
            scrubbers: std::sync::Mutex::new(Vec::new()),
            placeholders: Arc::new(placeholders),
            scan_window,
        })
    }

    /// Serves one sandbox connection that was made to `host:port` and will speak TLS: the
    /// sandbox gets a certificate for the name it sent (SNI) — which must be `host`.
    pub async fn serve_tls<S>(self: Arc<Self>, stream: S, host: String, port: u16)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let resolver = Arc::new(LeafResolver {
            ca: self.ca.clone(),
            host: host.clone(),
        });
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = match rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
        {
            Ok(b) => b,
            Err(_) => return,
        };
        let mut cfg = cfg.with_no_client_auth().with_cert_resolver(resolver);
        cfg.alpn_protocols = self.server_alpn.clone();
        let tls = match tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
            .accept(stream)
            .await
        {
            Ok(t) => t,
            Err(e) => {
                (self.emit)(
                    NewEvent::new(
                        Layer::Http,
                        EvAction::Error,
                        format!("TLS with the sandbox failed for {host}:{port}: {e}"),
                    )
                    .detail("host", host)
                    .detail("port", port),
                );
                return;
            }
        };
        self.serve(TokioIo::new(tls), host, port, "https").await;
    }

    /// Serves one plain-HTTP sandbox connection made to `host:port`.
    pub async fn serve_plain<S>(self: Arc<Self>, stream: S, host: String, port: u16)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.serve(TokioIo::new(stream), host, port, "http").await;
    }

    async fn serve<I>(self: Arc<Self>, io: I, host: String, port: u16, scheme: &'static str)
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let me = self.clone();
        // Upgraded connections (WebSocket) outlive the HTTP exchange; the caller's hold on the
        // flow lasts until they end too.
        let tunnels: Tunnels = Arc::new(std::sync::Mutex::new(Vec::new()));
        let t = tunnels.clone();
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let me = me.clone();
            let host = host.clone();
            let t = t.clone();
            async move { Ok::<_, hyper::Error>(me.handle(req, &host, port, scheme, &t).await) }
        });
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder
            .http2()
            .max_concurrent_streams(MAX_STREAMS)
            .max_header_list_size(MAX_HEADERS);
        builder.http1().max_buf_size(MAX_HEADERS as usize);
        let _ = builder.serve_connection_with_upgrades(io, svc).await;
        let pending: Vec<_> =
            std::mem::take(&mut *tunnels.lock().unwrap_or_else(|p| p.into_inner()));
        for t in pending {
            let _ = t.await;
        }
    }

    /// Swaps placeholders for real values where allowed (the credential's header — also inside
    /// a Basic value — or query parameter, to its hosts, over TLS), injects where configured,
    /// and reports a placeholder anywhere else (another host, header or parameter, the path,
    /// the body, plain HTTP) as `(credential, where)`. Returns, for scrubbing the response,
    /// each form a real value was sent in with the form the sandbox knows it by.
    fn swap_credentials(
        &self,
        parts: &mut hyper::http::request::Parts,
        host: &str,
        body: &[u8],
    ) -> Result<Vec<(String, String)>, (String, String)> {
        let mut sent = Vec::new();
        let cleartext = parts.uri.scheme_str() != Some("https");
        for c in &self.credentials {
            let ours = c.hosts.iter().any(|h| h.matches(host));
            let leak = |place: String| (c.name.clone(), place);
            let elsewhere = || format!("to {host}, which is not one of its hosts");
            let before = sent.len();
            let pq = parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string();
            let (path, query) = pq.split_once('?').unwrap_or((&pq, ""));
            if path.contains(&c.placeholder) {
                return Err(leak("in the URL path".into()));
            }
            let mut new_query = None;
            if query.contains(&c.placeholder) || (ours && c.inject && c.query.is_some()) {
                let Some(param) = c.query.as_deref().filter(|_| ours) else {
                    return Err(leak(if ours {
                        "in the URL query (only its header may carry it)".into()
                    } else {
                        elsewhere()
                    }));
                };
                let real = percent_encode(&c.real);
                let mut pairs = Vec::new();
                for kv in query.split('&').filter(|kv| !kv.is_empty()) {
                    let (name, value) = kv.split_once('=').unwrap_or((kv, ""));
                    if !kv.contains(&c.placeholder) {
                        if !(c.inject && name == param) {
                            pairs.push(kv.to_string());
                        }
                    } else if name == param && value == c.placeholder && !c.inject {
                        // Only the parameter's whole value: `key=PH;q=PH` would copy it.
                        pairs.push(format!("{param}={real}"));
                    } else if name == param && c.inject {
                        // Overwritten below.
                    } else {
                        let place = if kv.contains('=') && name != param {
                            format!("in query parameter {name} (only {param} may carry it)")
                        } else {
                            format!("in the URL query, not as the whole value of {param}")
                        };
                        return Err(leak(place));
                    }
                }
                if c.inject {
                    pairs.push(format!("{param}={real}"));
                }
                sent.push((real, c.placeholder.clone()));
                new_query = Some(format!("{path}?{}", pairs.join("&")));
            }
            if !c.placeholder.is_empty()
                && memchr::memmem::find(body, c.placeholder.as_bytes()).is_some()
            {
                return Err(leak("in the body".into()));
            }
            // Most requests carry no placeholder in any header: nothing to rewrite.
            let touched = parts.headers.values().any(|v| {
                let b = v.as_bytes();
                memchr::memmem::find(b, c.placeholder.as_bytes()).is_some()
                    || String::from_utf8_lossy(b)
                        .trim()
                        .get(..6)
                        .is_some_and(|s| s.eq_ignore_ascii_case("basic "))
            });
            if touched {
                rewrite_headers(&mut parts.headers, |name, v| {
                    let text = String::from_utf8_lossy(v.as_bytes());
                    let trimmed = text.trim();
                    // The scheme is case-insensitive (RFC 9110 11.1).
                    let basic = trimmed
                        .get(..6)
                        .filter(|s| s.eq_ignore_ascii_case("basic "))
                        .and_then(|_| crate::b64::decode(trimmed[6..].trim()))
                        .map(|d| String::from_utf8_lossy(&d).into_owned());
                    let plain_hit = text.contains(&c.placeholder);
                    let basic_hit = basic.as_ref().is_some_and(|b| b.contains(&c.placeholder));
                    if !plain_hit && !basic_hit {
                        return Ok(None);
                    }
                    if !ours {
                        return Err(leak(elsewhere()));
                    }
                    if c.header.is_empty() || name.as_str() != c.header {
                        let only = c
                            .query
                            .as_ref()
                            .map_or_else(|| c.header.clone(), |q| format!("query parameter {q}"));
                        return Err(leak(format!(
                            "in header {} (only {only} may carry it)",
                            name.as_str()
                        )));
                    }
                    let swapped = if plain_hit {
                        text.replace(&c.placeholder, &c.real)
                    } else {
                        let inner = basic.unwrap_or_default();
                        let real = crate::b64::encode(
                            inner.replace(&c.placeholder, &c.real).as_bytes(),
                            true,
                        );
                        sent.push((real.clone(), crate::b64::encode(inner.as_bytes(), true)));
                        format!("Basic {real}")
                    };
                    match HeaderValue::from_str(&swapped) {
                        Ok(mut hv) => {
                            hv.set_sensitive(true);
                            sent.push((c.real.clone(), c.placeholder.clone()));
                            Ok(Some(hv))
                        }
                        Err(_) => Err(leak("in a header it cannot be written to".into())),
                    }
                })?;
            }
            if let Some(pq) = new_query {
                let mut up = parts.uri.clone().into_parts();
                up.path_and_query = pq.parse().ok();
                match Uri::from_parts(up) {
                    Ok(u) => parts.uri = u,
                    Err(_) => return Err(leak("in a URL it cannot be written to".into())),
                }
            }
            if ours
                && c.inject
                && c.query.is_none()
                && let Ok(name) = hyper::header::HeaderName::from_bytes(c.header.as_bytes())
                && let Ok(mut hv) = HeaderValue::from_str(&c.formatted(&c.real))
            {
                hv.set_sensitive(true);
                parts.headers.insert(name, hv);
                sent.push((c.formatted(&c.real), c.formatted(&c.placeholder)));
                sent.push((c.real.clone(), c.placeholder.clone()));
            }
            if cleartext && sent.len() > before {
                return Err(leak(
                    "over plain HTTP (a credential only travels over TLS)".into(),
                ));
            }
        }
        Ok(sent)
    }

    /// The scrubber for a response to a request that sent these (real form, sandbox form)
    /// pairs: the session's own when they are plain values, else one made for them (kept: a
    /// client sends the same Basic value request after request).
    fn scrubber_for(&self, sent: &[(String, String)]) -> Option<crate::dlp::Scrubber> {
        let extra: Vec<(String, String)> = sent
            .iter()
            .filter(|p| {
                !self
                    .credentials
                    .iter()
                    .any(|c| c.real == p.0 && c.placeholder == p.1)
            })
            .cloned()
            .collect();
        if extra.is_empty() {
            return self.scrub.clone();
        }
        let mut cache = self.scrubbers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, s)) = cache.iter().find(|(k, _)| *k == extra) {
            return Some(s.clone());
        }
        let mut pairs: Vec<(String, String)> = self
            .credentials
            .iter()
            .map(|c| (c.real.clone(), c.placeholder.clone()))
            .collect();
        pairs.extend(extra.iter().cloned());
        let s = crate::dlp::Scrubber::new(&pairs)?;
        if cache.len() >= 16 {
            cache.remove(0);
        }
        cache.push((extra, s.clone()));
        Some(s)
    }

    /// `text` with every secret the scanner knows (token shapes, known values) redacted, for
    /// events.
    pub fn redact<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        match &self.dlp {
            Some(d) => d.scanner.redact(text),
            None => crate::dlp::redact(text),
        }
    }

    /// The secret-scanning verdict for a request: `Err(response)` when it must not leave.
    async fn scan_secrets(
        &self,
        host: &str,
        target: &str,
        headers: &[(String, String)],
        body: &[u8],
        describe: &(dyn Fn(EvAction, String, &str) -> NewEvent + Sync),
    ) -> Result<(), String> {
        let Some(dlp) = &self.dlp else {
            return Ok(());
        };
        let findings = dlp.scanner.scan_request(host, target, headers, body);
        if findings.is_empty() {
            return Ok(());
        }
        let (kinds, what) = describe_findings(&findings);
        let rule = format!("dlp:{}", kinds.join(","));
        let (allowed, outcome) = match dlp.action {
            cordon_policy::DlpAction::Log => {
                (true, "forwarded ([dlp] action = \"log\")".to_string())
            }
            cordon_policy::DlpAction::Deny | cordon_policy::DlpAction::Off => {
                (false, "refused".to_string())
            }
            cordon_policy::DlpAction::Ask => match &self.asker {
                Some(asker) => {
                    let a = asker
                        .ask(
                            format!(
                                "{} carries a secret: {what}",
                                describe_target(host, &self.redact(target))
                            ),
                            rule.clone(),
                            format!("{rule} {host}"),
                        )
                        .await;
                    let who = match (a.allow, a.timed_out) {
                        (_, true) => "nobody answered in time; refused",
                        (true, _) => "a person allowed it",
                        (false, _) => "a person denied it",
                    };
                    (a.allow, who.to_string())
                }
                None => (false, "nobody can be asked; refused".to_string()),
            },
        };
        let action = match (allowed, dlp.action) {
            (true, cordon_policy::DlpAction::Log) => EvAction::Log,
            (true, _) => EvAction::Allow,
            (false, _) => EvAction::Deny,
        };
        (self.emit)(
            describe(
                action,
                format!("carries a secret ({what}); {outcome}"),
                &rule,
            )
            .detail("kinds", kinds.join(",")),
        );
        if allowed {
            return Ok(());
        }
        Err(secret_refusal(&kinds, &what, host))
    }

    async fn handle(
        &self,
        mut req: Request<Incoming>,
        host: &str,
        port: u16,
        scheme: &'static str,
        tunnels: &Tunnels,
    ) -> Response<Body> {
        let started = Instant::now();
        let method = req.method().as_str().to_string();
        let raw_path = req.uri().path().to_string();
        // Rules match the path as the server will read it, so an encoding cannot slip past.
        let path = match normalize_path(&raw_path) {
            Ok(p) => p,
            Err(why) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!("cordon: refused an ambiguous path ({why})\n"),
                );
            }
        };
        let query = req.uri().query().unwrap_or("").to_string();
        // Events and refusals name the URL with any token in its path redacted.
        let url = format!(
            "{scheme}://{host}{}{}",
            port_suffix(scheme, port),
            self.redact(&path)
        );
        let ev = |action: EvAction, status: u16, reason: &str, rule: &str| {
            NewEvent::new(
                Layer::Http,
                action,
                format!(
                    "{method} {url}{} → {status}: {reason}",
                    redact_query(&query)
                ),
            )
            .rule(rule.to_string())
            .detail("method", method.clone())
            .detail("url", format!("{url}{}", redact_query(&query)))
            .detail("status", status)
            .detail(
                "latency_ms",
                u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            )
        };
        // The connection's host decides; an authority or any Host header naming another (or
        // two Host headers) is refused, and what goes upstream carries the connection's host.
        let claims = request_hosts(&req);
        if let Some(claimed) = claims
            .iter()
            .find(|c| !same_host(c, host, port, scheme))
            .cloned()
            .or_else(|| {
                (req.headers().get_all(header::HOST).iter().count() > 1)
                    .then(|| "two Host headers".to_string())
            })
        {
            (self.emit)(ev(
                EvAction::Deny,
                421,
                &format!("Host {claimed:?} on a connection to {host}"),
                "http.host-mismatch",
            ));
            return text(
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "cordon: this connection goes to {host}; a request for {claimed} must use its own connection\n"
                ),
            );
        }
        let headers: Vec<(String, String)> = req
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let header_refs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let body_len = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .or_else(|| {
                (req.method() == hyper::Method::GET || req.method() == hyper::Method::HEAD)
                    .then_some(0)
            });
        let d = rules::decide(
            &self.rules,
            self.default,
            &rules::Request {
                method: &method,
                host,
                port,
                path: &path,
                query: &query,
                headers: &header_refs,
                body_len,
            },
        );
        let mut decided_by = d.rule.clone();
        let mut action = d.action;
        let mut why_judge = None;
        // The body's first bytes are read before anything leaves — secret scanning, placeholder
        // checks and the judge read them — and forwarded afterwards, then the rest.
        let judge_max = match (&self.judge, action) {
            (Some(j), Action::Judge) => j.config().max_body_bytes,
            _ => 0,
        };
        // A body is checked as it streams — no waiting for it — unless a decision needs it
        // first (the judge reads it; a person is asked about a secret in it) or it is
        // compressed (decompressing is done on the prefix).
        let compressed = req
            .headers()
            .get(header::CONTENT_ENCODING)
            .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
        let dlp_asks = self
            .dlp
            .as_ref()
            .is_some_and(|d| d.action == cordon_policy::DlpAction::Ask);
        let streamed = action != Action::Deny
            && action != Action::Judge
            && !compressed
            && !dlp_asks
            && (self.dlp.is_some() || !self.credentials.is_empty())
            && !hyper::body::Body::is_end_stream(req.body());
        let trip: Arc<std::sync::Mutex<Option<Trip>>> = Arc::new(std::sync::Mutex::new(None));
        let (body_done, mut body_done_rx) = tokio::sync::watch::channel(false);
        let want = if action == Action::Deny || streamed {
            0
        } else {
            let placeholders = if self.credentials.is_empty() {
                0
            } else {
                PLACEHOLDER_BODY_BYTES
            };
            judge_max
                .max(self.dlp.as_ref().map_or(0, |d| d.max_body))
                .max(placeholders)
        };
        let mut prefix: Option<VecDeque<Bytes>> = None;
        let mut scanned: Vec<u8> = Vec::new();
        let mut body_truncated = false;
        let mut decode_note = None;
        if want > 0 && !hyper::body::Body::is_end_stream(req.body()) {
            let idle = body_len.is_none().then_some(BODY_PREFIX_IDLE);
            let prefix_read =
                tokio::time::timeout(BODY_PREFIX_TIMEOUT, read_prefix(req.body_mut(), want, idle))
                    .await
                    .unwrap_or_else(|_| Err(None));
            let (buffered, truncated) = match prefix_read {
                Ok(x) => x,
                Err(e) => {
                    let e = e.map_or("timed out".to_string(), |e| e.to_string());
                    return text(
                        StatusCode::BAD_REQUEST,
                        format!("cordon: reading the request body: {e}\n"),
                    );
                }
            };
            let flat: Vec<u8> = buffered.iter().flat_map(|b| b.iter().copied()).collect();
            // What the server would read: a compressed body is scanned (and shown to the
            // judge) decompressed, bounded so a small bomb cannot grow past `want`.
            let encoding = req
                .headers()
                .get(header::CONTENT_ENCODING)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            let flat = match decompress_prefix(&encoding, &flat, want + 1) {
                Some(Ok(d)) => d,
                // Claimed compressed but is not: the raw bytes, and the judge is told why.
                Some(Err(e)) => {
                    decode_note = Some(format!(
                        "Content-Encoding {encoding} but the body does not decode ({e})"
                    ));
                    flat
                }
                None => flat,
            };
            body_truncated = truncated || flat.len() > want;
            scanned = flat;
            prefix = Some(buffered);
        }
        if action != Action::Deny {
            let target = req
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string();
            let describe = |a: EvAction, what: String, rule: &str| {
                NewEvent::new(
                    Layer::Credentials,
                    a,
                    format!("{method} {url}{}: {what}", redact_query(&query)),
                )
                .rule(rule.to_string())
                .detail("method", method.clone())
                .detail("url", format!("{url}{}", redact_query(&query)))
            };
            if let Err(why) = self
                .scan_secrets(host, &target, &headers, &scanned, &describe)
                .await
            {
                return text(
                    StatusCode::FORBIDDEN,
                    format!("cordon: {method} {url} was refused: {why}"),
                );
            }
        }
        if action == Action::Judge {
            match &self.judge {
                Some(judge) => {
                    let shown = &scanned[..scanned.len().min(judge_max)];
                    let full_url = format!(
                        "{url}{}",
                        if query.is_empty() {
                            String::new()
                        } else {
                            format!("?{query}")
                        }
                    );
                    let verdict = judge
                        .judge(&crate::judge::Question {
                            method: &method,
                            url: &full_url,
                            headers: &headers,
                            body: shown,
                            body_truncated: body_truncated || scanned.len() > judge_max,
                            note: decode_note.as_deref(),
                        })
                        .await;
                    decided_by = format!("{} → judge", d.rule);
                    match verdict {
                        crate::judge::Verdict::Allow(r) => {
                            action = Action::Allow;
                            why_judge = Some(r);
                        }
                        crate::judge::Verdict::Deny(r) => {
                            action = Action::Deny;
                            why_judge = Some(format!("the judge: {r}"));
                        }
                        crate::judge::Verdict::Failed(e) => {
                            action = match judge.config().on_error {
                                crate::judge::OnError::Deny => Action::Deny,
                                crate::judge::OnError::Ask => Action::Ask,
                            };
                            why_judge = Some(format!("the judge could not decide ({e})"));
                        }
                    }
                }
                None => why_judge = Some("no judge is configured ([judge] in the policy)".into()),
            }
        }
        let mut approved_by = None;
        if action == Action::Ask
            && let Some(asker) = &self.asker
        {
            let what = format!("{method} {url}{}", redact_query(&query));
            let scope = format!("{decided_by} {method} {host}:{port}");
            let a = asker.ask(what, decided_by.clone(), scope).await;
            let who = match (a.allow, a.timed_out, a.remember) {
                (_, true, _) => "nobody answered in time".to_string(),
                (true, _, true) => "a person allowed it for the rest of the session".into(),
                (true, _, false) => "a person allowed it".into(),
                (false, _, true) => "a person denied it for the rest of the session".into(),
                (false, _, false) => "a person denied it".into(),
            };
            action = if a.allow { Action::Allow } else { Action::Deny };
            why_judge = Some(format!(
                "{}{who}",
                why_judge.map(|j| format!("{j}; ")).unwrap_or_default()
            ));
            decided_by = format!("{decided_by} → ask");
            approved_by = Some(who);
        }
        match action {
            Action::Allow => {}
            other => {
                let why = match (other, &why_judge) {
                    (_, Some(j)) if other != Action::Ask => j.clone(),
                    (Action::Deny, _) => d.reason.clone().unwrap_or_else(|| {
                        if d.rule == "default" {
                            "no rule allows it".to_string()
                        } else {
                            "the rule denies it".to_string()
                        }
                    }),
                    // Not available yet: refused, never waved through.
                    _ => {
                        "it needs a decision (ask/judge) that is not available; refused".to_string()
                    }
                };
                (self.emit)(ev(EvAction::Deny, 403, &why, &d.rule));
                return text(
                    StatusCode::FORBIDDEN,
                    format!(
                        "cordon: {method} {url} was denied by rule \"{}\": {why}.\nThe same request by any other route (another tool, proxy or address) is denied too.\n",
                        d.rule
                    ),
                );
            }
        }
        // Forward: absolute URI to the real server, hop-by-hop headers dropped.
        // Only WebSocket may take the connection over: any other upgrade (h2c above all)
        // would tunnel requests past the rules.
        let upgrade = req
            .headers()
            .get(header::UPGRADE)
            .filter(|v| {
                v.to_str()
                    .is_ok_and(|u| u.trim().eq_ignore_ascii_case("websocket"))
            })
            .cloned();
        let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        let pq = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let uri: Uri = match format!("https://{}{pq}", authority(host, port, 443)).parse() {
            Ok(u) => u,
            Err(_) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    "cordon: bad request target\n".into(),
                );
            }
        };
        // Plain HTTP from the sandbox leaves as plain HTTP (and so never carries a credential).
        let uri = if scheme == "http" {
            match format!("http://{}{pq}", authority(host, port, 80)).parse() {
                Ok(u) => u,
                Err(_) => uri,
            }
        } else {
            uri
        };
        parts.uri = uri;
        for h in HOP_BY_HOP {
            parts.headers.remove(*h);
        }
        if let Some(u) = &upgrade {
            parts
                .headers
                .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            parts.headers.insert(header::UPGRADE, u.clone());
        }
        // The sandbox's Host never goes upstream: the client sets the connection's own (from
        // the URI) for HTTP/1.1 and sends it as :authority for HTTP/2 (a Host beside it makes
        // servers refuse the request).
        parts.headers.remove(header::HOST);
        // Credentials at the wire: placeholders become real values only in the named header (or
        // query parameter) of requests to the credential's hosts; anywhere else one is a leak.
        let sent = match self.swap_credentials(&mut parts, host, &scanned) {
            Ok(sent) => sent,
            Err(leak) => {
                (self.emit)(
                    leak_event(&format!("{method} {url}"), &leak.0, &leak.1)
                        .detail("method", method.clone())
                        .detail("url", format!("{url}{}", redact_query(&query))),
                );
                return text(StatusCode::FORBIDDEN, leak_refusal(&leak.0, &leak.1));
            }
        };
        // A response to a request that carried a real value is scrubbed of every form it was
        // sent in — which needs it uncompressed.
        let scrub = if sent.is_empty() {
            self.scrub.clone()
        } else {
            parts.headers.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
            self.scrubber_for(&sent)
        };
        parts.version = hyper::Version::HTTP_11;
        let body = match prefix {
            Some(p) => PrefixedBody {
                prefix: p,
                rest: body,
            }
            .map_err(BoxError::from)
            .boxed(),
            None if streamed => ScannedBody {
                inner: body,
                scanner: self.dlp.as_ref().map(|d| d.scanner.clone()),
                log_only: self
                    .dlp
                    .as_ref()
                    .is_some_and(|d| d.action == cordon_policy::DlpAction::Log),
                placeholders: self.placeholders.clone(),
                host: host.to_string(),
                pending: Vec::new(),
                window: self.scan_window,
                // Placeholders are looked for at least as far as PLACEHOLDER_BODY_BYTES,
                // whatever [dlp] max_body_bytes says.
                left: self.dlp.as_ref().map_or(0, |d| d.max_body).max(
                    if self.credentials.is_empty() {
                        0
                    } else {
                        PLACEHOLDER_BODY_BYTES
                    },
                ),
                trip: trip.clone(),
                trailers: None,
                fresh: 0,
                tail_scan: false,
                idle: None,
                idle_stage: 0,
                emit: self.emit.clone(),
                label: format!("{method} {url}{}", redact_query(&query)),
                done: body_done.clone(),
            }
            .boxed(),
            None => body.map_err(BoxError::from).boxed(),
        };
        let out = Request::from_parts(parts, body);
        let client = if upgrade.is_some() {
            &self.client_h1
        } else {
            &self.client
        };
        let permit =
            match tokio::time::timeout(BODY_PREFIX_TIMEOUT, self.upstream.clone().acquire_owned())
                .await
            {
                Ok(Ok(p)) => p,
                _ => {
                    (self.emit)(ev(
                        EvAction::Error,
                        503,
                        "too many requests in flight",
                        &decided_by,
                    ));
                    return text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "cordon: too many requests are in flight; retry shortly\n".into(),
                    );
                }
            };
        let mut permit = Some(permit);
        let result = client.request(out).await;
        if streamed && result.is_ok() {
            // The server answered before the body was through (it need not read it): a moment
            // for the rest of the body to be checked, so a secret in it still gets the 403.
            // Not longer: a client streaming both ways waits for this answer.
            let _ = tokio::time::timeout(EARLY_ANSWER_GRACE, body_done_rx.wait_for(|d| *d)).await;
        }
        // A streamed body that carried a secret or a placeholder was stopped before it left:
        // whatever the server made of the rest, the sandbox gets the refusal.
        // A streamed body that carried a secret or a placeholder was stopped before it left
        // (and reported): whatever the server made of the rest, the sandbox gets the refusal.
        // Should the server have answered before the body tripped, the answer was relayed,
        // but the secret still never left.
        let log = self
            .dlp
            .as_ref()
            .is_some_and(|d| d.action == cordon_policy::DlpAction::Log);
        let tripped = trip.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match tripped {
            Some(Trip::Placeholder(name)) => {
                return text(StatusCode::FORBIDDEN, leak_refusal(&name, "in the body"));
            }
            Some(Trip::Secret(found)) if !log => {
                let (kinds, what) = describe_findings(&found);
                return text(
                    StatusCode::FORBIDDEN,
                    format!(
                        "cordon: {method} {url} was refused: {}",
                        secret_refusal(&kinds, &what, host)
                    ),
                );
            }
            _ => {}
        }
        match result {
            Ok(mut resp) => {
                let status = resp.status().as_u16();
                let mut e = ev(EvAction::Allow, status, "forwarded", &decided_by);
                if let Some(j) = &why_judge {
                    e = e.detail("judge", j.clone());
                }
                if let Some(who) = &approved_by {
                    e = e.detail("approved", who.clone());
                }
                if let Some(n) = body_len {
                    e = e.detail("bytes_up", n);
                }
                if status == 101
                    && let Some(client_up) = client_upgrade
                {
                    let server_up = hyper::upgrade::on(&mut resp);
                    let held = permit.take();
                    let task = tokio::spawn(async move {
                        let _permit = held;
                        if let (Ok(c), Ok(s)) = (client_up.await, server_up.await) {
                            let (mut c, mut s) = (TokioIo::new(c), TokioIo::new(s));
                            let _ = tokio::io::copy_bidirectional(&mut c, &mut s).await;
                        }
                    });
                    tunnels.lock().unwrap_or_else(|p| p.into_inner()).push(task);
                }
                let (mut parts, body) = resp.into_parts();
                if status != 101 {
                    for h in HOP_BY_HOP {
                        parts.headers.remove(*h);
                    }
                }
                // A server echoing a real value back never shows it to the sandbox: headers
                // here, the body as it streams (CountingBody), trailers at its end.
                if let Some(scrub) = &scrub {
                    scrub_headers(scrub, &mut parts.headers);
                    let encoded = parts
                        .headers
                        .get(header::CONTENT_ENCODING)
                        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
                    if encoded && !sent.is_empty() {
                        (self.emit)(ev(
                            EvAction::Deny,
                            502,
                            "the response is compressed although asked not to be; it cannot be scrubbed of the credential",
                            &decided_by,
                        ));
                        return text(
                            StatusCode::BAD_GATEWAY,
                            format!(
                                "cordon: {url} answered a request carrying a credential with a compressed body, which cordon cannot check for the credential's value; refused\n"
                            ),
                        );
                    }
                    if scrub.changes_length() {
                        parts.headers.remove(header::CONTENT_LENGTH);
                    }
                }
                if status == 101 {
                    // The connection now belongs to the upgrade: no body of its own.
                    (self.emit)(e);
                    return Response::from_parts(
                        parts,
                        Full::new(Bytes::new()).map_err(|n| match n {}).boxed(),
                    );
                }
                // The event goes out when the response has been relayed (or abandoned), with
                // its size and the time to its last byte: a stream is logged when it ends.
                let counted = CountingBody {
                    _permit: permit,
                    inner: body,
                    scrub,
                    pending: None,
                    bytes: 0,
                    started,
                    event: Some(e),
                    emit: self.emit.clone(),
                    // The server may answer before a streamed body trips: the answer then
                    // stops too.
                    stopped: (streamed && !log).then(|| trip.clone()),
                };
                Response::from_parts(parts, counted.boxed())
            }
            Err(e) => {
                let why = upstream_error(&e);
                (self.emit)(ev(EvAction::Error, 502, &why, &decided_by));
                text(StatusCode::BAD_GATEWAY, format!("cordon: {url}: {why}\n"))
            }
        }
    }
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
async fn read_prefix(
    body: &mut Incoming,
    max: usize,
    idle: Option<std::time::Duration>,
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

/// The response body on its way to the sandbox, counted and scrubbed of real credential
/// values; emits the request's event when it ends or is dropped.
struct CountingBody {
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    inner: Incoming,
    scrub: Option<crate::dlp::Scrubber>,
    /// A trailers frame held while the scrubber's last bytes go first.
    pending: Option<hyper::body::Frame<Bytes>>,
    /// Set when the request's streamed body was stopped (a secret): the answer stops too.
    stopped: Option<Arc<std::sync::Mutex<Option<Trip>>>>,
    bytes: u64,
    started: Instant,
    event: Option<NewEvent>,
    emit: Emit,
}

impl CountingBody {
    fn finish(&mut self, complete: bool) {
        if let Some(e) = self.event.take() {
            let mut e = e.detail("bytes_down", self.bytes).detail(
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

impl hyper::body::Body for CountingBody {
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

impl Drop for CountingBody {
    fn drop(&mut self) {
        let done = hyper::body::Body::is_end_stream(&self.inner);
        self.finish(done);
    }
}

/// A body whose first chunks were read already (for the judge): those, then the rest.
struct PrefixedBody {
    prefix: VecDeque<Bytes>,
    rest: Incoming,
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

/// The path as a server reads it, for rule matching: percent-escapes decoded once, empty and
/// `.` segments dropped, `..` resolved. Encoded `/`, `\\` or NUL, a raw `\\`, a `..` above
/// the root, or invalid escapes are refused: no rule can be written for what they mean.
fn normalize_path(raw: &str) -> Result<String, &'static str> {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            let (Some(h), Some(l)) = (
                b.get(i + 1).and_then(|c| hex(*c)),
                b.get(i + 2).and_then(|c| hex(*c)),
            ) else {
                return Err("an invalid percent-escape");
            };
            let v = (h * 16 + l) as u8;
            if matches!(v, b'/' | b'\\' | 0) {
                return Err("an encoded '/', '\\' or NUL");
            }
            out.push(v);
            i += 3;
        } else {
            if b[i] == b'\\' {
                return Err("a backslash");
            }
            out.push(b[i]);
            i += 1;
        }
    }
    let decoded = String::from_utf8(out).map_err(|_| "bytes that are not UTF-8")?;
    let mut segs: Vec<&str> = Vec::new();
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if segs.pop().is_none() {
                    return Err("'..' above the root");
                }
            }
            s => segs.push(s),
        }
    }
    let mut p = format!("/{}", segs.join("/"));
    if decoded.ends_with('/') && !segs.is_empty() {
        p.push('/');
    }
    Ok(p)
}

fn port_suffix(scheme: &str, port: u16) -> String {
    match (scheme, port) {
        ("https", 443) | ("http", 80) => String::new(),
        _ => format!(":{port}"),
    }
}

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

/// Every host a request names: its authority (HTTP/2, absolute-form) and each Host header.
/// A Host header that is not text counts as a name no connection has.
fn request_hosts<B>(req: &Request<B>) -> Vec<String> {
    let mut out: Vec<String> = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .into_iter()
        .collect();
    for v in req.headers().get_all(header::HOST) {
        out.push(
            v.to_str()
                .map_or_else(|_| "\u{fffd}".to_string(), str::to_string),
        );
    }
    out
}

/// Whether `claimed` (`host[:port]`) names the connection's host and port.
fn same_host(claimed: &str, host: &str, port: u16, scheme: &str) -> bool {
    let default = if scheme == "http" { 80 } else { 443 };
    let claimed = claimed.trim().to_ascii_lowercase();
    let (h, p) = match claimed.rsplit_once(':') {
        // A bare IPv6 address: its colons are not a port separator.
        Some((h, _)) if !h.ends_with(']') && h.contains(':') => (claimed.as_str(), default),
        Some((h, p)) => match p.parse::<u16>() {
            Ok(p) => (h, p),
            Err(_) => return false,
        },
        None => (claimed.as_str(), default),
    };
    let h = h
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.');
    h == host.trim_end_matches('.').to_ascii_lowercase() && p == port
}

/// A body's size hint with the `held` bytes a wrapper still owes added.
fn plus_held(mut h: hyper::body::SizeHint, held: usize) -> hyper::body::SizeHint {
    let held = held as u64;
    h.set_lower(h.lower() + held);
    if let Some(u) = h.upper() {
        h.set_upper(u + held);
    }
    h
}

/// The event for a credential's placeholder sent where it may not go.
fn leak_event(label: &str, name: &str, place: &str) -> NewEvent {
    NewEvent::new(
        Layer::Credentials,
        EvAction::Deny,
        format!("{label}: the placeholder of credential `{name}` was sent {place}"),
    )
    .rule(format!("credential-leak:{name}"))
}

/// What the sandbox is told when a credential's placeholder went where it may not.
fn leak_refusal(name: &str, place: &str) -> String {
    format!(
        "cordon: credential `{name}` may only go to its own hosts, in its own header; this request sent it {place}. Refused.\n"
    )
}

/// What the sandbox is told when a request carried a secret.
fn secret_refusal(kinds: &[&str], what: &str, host: &str) -> String {
    let quoted: Vec<String> = kinds.iter().map(|k| format!("\"{k}\"")).collect();
    format!(
        "it carries a secret ({what}). A secret may only go to its own service. If this one is meant for {host}, the user can add to the policy:\n[[dlp.allow]]\nkinds = [{}]\nhosts = [\"{host}\"]\n",
        quoted.join(", ")
    )
}

/// Kinds (sorted, once each) and a description of findings, for events and refusals.
fn describe_findings(findings: &[crate::dlp::Finding]) -> (Vec<&str>, String) {
    let mut kinds: Vec<&str> = findings.iter().map(|f| f.kind.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let what = findings
        .iter()
        .map(|f| format!("{} in the {} ({})", f.kind, f.place.name(), f.preview))
        .collect::<Vec<_>>()
        .join(", ");
    (kinds, what)
}

/// The event for a streamed body that tripped (`goes_on`: `[dlp] action = "log"`).
fn trip_event(t: &Trip, goes_on: bool, label: &str) -> NewEvent {
    match t {
        Trip::Placeholder(name) => leak_event(label, name, "in the body"),
        Trip::Secret(found) => {
            let (kinds, what) = describe_findings(found);
            let (a, outcome) = if goes_on {
                (EvAction::Log, "forwarded ([dlp] action = \"log\")")
            } else {
                (
                    EvAction::Deny,
                    "refused; the body was stopped before it left",
                )
            };
            NewEvent::new(
                Layer::Credentials,
                a,
                format!("{label}: carries a secret ({what}); {outcome}"),
            )
            .rule(format!("dlp:{}", kinds.join(",")))
            .detail("kinds", kinds.join(","))
        }
    }
}

/// Why a streamed request body was stopped.
#[derive(Debug, Clone)]
enum Trip {
    /// Secrets the policy does not let go to this host.
    Secret(Vec<crate::dlp::Finding>),
    /// A credential's placeholder (its name).
    Placeholder(String),
}

/// A request body on its way upstream, checked as it passes (no waiting for the whole body):
/// each chunk is scanned together with the bytes held back from the one before, and only
/// what lies more than `window` bytes before the end leaves — so a secret or placeholder
/// split across chunks is seen whole before any of it is sent. On a finding the body fails:
/// the upstream request is aborted, and the handler answers 403 from `trip`.
struct ScannedBody {
    inner: Incoming,
    scanner: Option<Arc<crate::dlp::Scanner>>,
    /// `[dlp] action = "log"`: findings are reported (once), the body goes on.
    log_only: bool,
    placeholders: Arc<Vec<(String, String)>>,
    host: String,
    pending: Vec<u8>,
    window: usize,
    /// Bytes still to scan (`[dlp] max_body_bytes`); after that the body passes as it is.
    left: usize,
    trip: Arc<std::sync::Mutex<Option<Trip>>>,
    /// A trailers frame that waits for the held bytes to go first.
    trailers: Option<hyper::body::Frame<Bytes>>,
    /// Bytes in `pending` not scanned yet.
    fresh: usize,
    /// The budget ran out in the last scan: one more scan covers what straddles its end.
    tail_scan: bool,
    /// A body that pauses with bytes held: after a short wait, what cannot begin a secret
    /// goes; after a second, everything (a client waiting for the server must not hang).
    idle: Option<Pin<Box<tokio::time::Sleep>>>,
    idle_stage: u8,
    /// Events, reported the moment the body trips: the server may have answered already.
    emit: Emit,
    /// `METHOD URL` (query values hidden), for the event.
    label: String,
    /// Set once the body has ended, failed or was dropped: an early answer waits for it.
    done: tokio::sync::watch::Sender<bool>,
}

impl Drop for ScannedBody {
    fn drop(&mut self) {
        self.done.send_replace(true);
    }
}

impl ScannedBody {
    fn check(&mut self, buf: &[u8]) -> Option<Trip> {
        for (name, ph) in self.placeholders.iter() {
            if !ph.is_empty() && memchr::memmem::find(buf, ph.as_bytes()).is_some() {
                return Some(Trip::Placeholder(name.clone()));
            }
        }
        let scanner = self.scanner.as_ref()?;
        let found: Vec<crate::dlp::Finding> = scanner
            .scan(buf, crate::dlp::Place::Body)
            .into_iter()
            .filter(|f| !scanner.exempt(&f.kind, &self.host))
            .collect();
        (!found.is_empty()).then_some(Trip::Secret(found))
    }
}

/// How much of a held tail a release keeps.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Nothing: the body ended (or is past its budget).
    Nothing,
    /// The trailing run of token characters (a pause: what cannot begin a secret goes).
    Token,
    /// The scan window, or more where a JWT has begun (a chunk boundary).
    Window,
}

/// Bytes tokens are made of: a secret never spans anything else (PEM headers aside, which
/// fit the window).
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_.+/=-".contains(&b)
}

/// Where the trailing run of token bytes begins.
fn token_run_start(buf: &[u8]) -> usize {
    buf.iter()
        .rposition(|b| !token_byte(*b))
        .map_or(0, |i| i + 1)
}

/// The most a held tail grows to keep a long token whole (a JWT in a chunked upload).
const MAX_TOKEN_HOLD: usize = 16 << 10;

impl ScannedBody {
    /// Scans what is new, then takes out what may leave now.
    fn release(&mut self, keep: Keep) -> Result<Vec<u8>, BoxError> {
        let under_budget = self.left > 0;
        if (under_budget || self.tail_scan) && self.fresh > 0 {
            let buf = std::mem::take(&mut self.pending);
            let tripped = self.check(&buf);
            self.pending = buf;
            if let Some(t) = tripped {
                self.tripped(t)?;
            }
        }
        if !under_budget {
            self.tail_scan = false;
        }
        self.left = self.left.saturating_sub(self.fresh);
        if under_budget && self.left == 0 {
            self.tail_scan = true;
        }
        self.fresh = 0;
        let len = self.pending.len();
        let run = len - token_run_start(&self.pending);
        let hold = match keep {
            _ if !under_budget => 0,
            Keep::Nothing => 0,
            Keep::Token => run.min(MAX_TOKEN_HOLD),
            Keep::Window => {
                let tail = &self.pending[len - run..];
                let jwt = memchr::memmem::find(tail, b"eyJ").map_or(0, |i| run - i);
                let w = self.window.saturating_sub(1);
                if jwt > w && jwt <= MAX_TOKEN_HOLD {
                    jwt
                } else {
                    w
                }
            }
        };
        let rest = self.pending.split_off(len - hold.min(len));
        Ok(std::mem::replace(&mut self.pending, rest))
    }
}

impl ScannedBody {
    /// Trailers are headers too: checked whole, like the body (within its budget).
    fn check_trailers(&mut self, f: &hyper::body::Frame<Bytes>) -> Result<(), BoxError> {
        let Some(t) = f.trailers_ref().filter(|_| self.left > 0 || self.tail_scan) else {
            return Ok(());
        };
        let mut text = Vec::new();
        for (k, v) in t {
            text.extend_from_slice(k.as_str().as_bytes());
            text.extend_from_slice(b": ");
            text.extend_from_slice(v.as_bytes());
            text.push(b'\n');
        }
        match self.check(&text) {
            Some(t) => self.tripped(t),
            None => Ok(()),
        }
    }

    /// Reports a finding the moment it is made (the server may have answered already) and
    /// records it for the handler; stops the body unless `[dlp] action = "log"` lets a secret
    /// go on — reported once: the rest is not scanned for secrets again.
    fn tripped(&mut self, t: Trip) -> Result<(), BoxError> {
        let goes_on = self.log_only && matches!(t, Trip::Secret(_));
        (self.emit)(trip_event(&t, goes_on, &self.label));
        *self.trip.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
        if !goes_on {
            return Err("cordon stopped a request body".into());
        }
        self.scanner = None;
        Ok(())
    }
}

impl hyper::body::Body for ScannedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        use hyper::body::Frame;
        let data = |v: Vec<u8>| Poll::Ready(Some(Ok(Frame::data(Bytes::from(v)))));
        if let Some(t) = self.trailers.take() {
            return Poll::Ready(Some(Ok(t)));
        }
        loop {
            let next = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(n) => {
                    self.idle = None;
                    self.idle_stage = 0;
                    n
                }
                Poll::Pending => {
                    if self.pending.is_empty() {
                        return Poll::Pending;
                    }
                    let sleep = self
                        .idle
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(BODY_HOLD_IDLE)));
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.idle = None;
                    let keep = if self.idle_stage == 0 {
                        Keep::Token
                    } else {
                        Keep::Nothing
                    };
                    self.idle_stage = self.idle_stage.saturating_add(1);
                    match self.release(keep) {
                        Err(e) => return Poll::Ready(Some(Err(e))),
                        Ok(out) if !out.is_empty() => return data(out),
                        // Nothing could go yet: wait again (the timer re-arms).
                        Ok(_) => continue,
                    }
                }
            };
            match next {
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => {
                        if self.left == 0 && !self.tail_scan && self.pending.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(d))));
                        }
                        self.pending.extend_from_slice(&d);
                        self.fresh += d.len();
                        let keep = if self.inner.is_end_stream() {
                            Keep::Nothing
                        } else if self.fresh < self.window && self.pending.len() < MAX_TOKEN_HOLD {
                            // Small pieces are gathered before a scan (each byte is scanned
                            // about twice, however the body is cut).
                            continue;
                        } else {
                            Keep::Window
                        };
                        match self.release(keep) {
                            Err(e) => return Poll::Ready(Some(Err(e))),
                            Ok(out) if !out.is_empty() => return data(out),
                            // All held back: an empty chunk would end an HTTP/1 body.
                            Ok(_) => continue,
                        }
                    }
                    Err(trailers) => match self
                        .check_trailers(&trailers)
                        .and_then(|()| self.release(Keep::Nothing))
                    {
                        Err(e) => return Poll::Ready(Some(Err(e))),
                        Ok(out) if !out.is_empty() => {
                            // The bytes first (checked), the trailers on the next poll.
                            self.trailers = Some(trailers);
                            return data(out);
                        }
                        Ok(_) => return Poll::Ready(Some(Ok(trailers))),
                    },
                },
                Some(Err(e)) => {
                    self.done.send_replace(true);
                    return Poll::Ready(Some(Err(e.into())));
                }
                None => {
                    let r = self.release(Keep::Nothing);
                    self.done.send_replace(true);
                    return match r {
                        Err(e) => Poll::Ready(Some(Err(e))),
                        Ok(out) if !out.is_empty() => data(out),
                        Ok(_) => Poll::Ready(None),
                    };
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.trailers.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        plus_held(self.inner.size_hint(), self.pending.len())
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

/// Rewrites every header value `f` replaces (`Ok(Some(new))`), keeping the order of a name's
/// values and every other header as it was.
fn rewrite_headers<E>(
    headers: &mut hyper::HeaderMap,
    mut f: impl FnMut(&hyper::header::HeaderName, &HeaderValue) -> Result<Option<HeaderValue>, E>,
) -> Result<(), E> {
    let names: Vec<hyper::header::HeaderName> = headers.keys().cloned().collect();
    for name in names {
        let mut changed = false;
        let mut out = Vec::new();
        for v in headers.get_all(&name) {
            match f(&name, v)? {
                Some(new) => {
                    out.push(new);
                    changed = true;
                }
                None => out.push(v.clone()),
            }
        }
        if changed {
            headers.remove(&name);
            for v in out {
                headers.append(name.clone(), v);
            }
        }
    }
    Ok(())
}

/// A query value, percent-encoded (RFC 3986 unreserved characters kept).
fn percent_encode(v: &str) -> String {
    let mut out = String::new();
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `host` and the target with its query values hidden, for a question to a person.
fn describe_target(host: &str, target: &str) -> String {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    format!("a request to {host}{path}{}", redact_query(query))
}

/// `?a=…&b=…`: names kept, values hidden (tokens travel in query strings).
fn redact_query(q: &str) -> String {
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

fn text(status: StatusCode, body: String) -> Response<Body> {
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

/// Serves the leaf for the connection's host; a different SNI gets nothing (handshake fails).
#[derive(Debug)]
struct LeafResolver {
    ca: Arc<CertAuthority>,
    host: String,
}

impl rustls::server::ResolvesServerCert for LeafResolver {
    fn resolve(
        &self,
        hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        match hello.server_name() {
            Some(sni) if !sni.trim_end_matches('.').eq_ignore_ascii_case(&self.host) => None,
            _ => self.ca.leaf(&self.host).ok(),
        }
    }
}

/// The upstream connector: the gateway's checked connect, then TLS (for https URIs).
#[derive(Clone)]
pub(crate) struct Upstream {
    tls: tokio_rustls::TlsConnector,
    connect: ConnectFn,
}

impl Upstream {
    /// TLS verified against the host's roots plus `extra_ca_pem`; ALPN h2 and http/1.1.
    pub(crate) fn new(connect: ConnectFn, extra_ca_pem: &[String]) -> Result<Self, InterceptError> {
        Self::with_roots(
            connect,
            upstream_roots(extra_ca_pem)?,
            &[b"h2", b"http/1.1"],
        )
    }

    /// An upstream connector trusting `roots`, offering only `alpn` (HTTP/1.1 alone for
    /// upgrades: HTTP/2 has none).
    pub(crate) fn with_roots(
        connect: ConnectFn,
        roots: Arc<rustls::RootCertStore>,
        alpn: &[&[u8]],
    ) -> Result<Self, InterceptError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Self {
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
            connect,
        })
    }
}

/// The roots upstream servers are verified against: the host's own, plus `extra_ca_pem`
/// (`[tls] upstream_ca`). Read from disk once per connector set, not per connector.
pub(crate) fn upstream_roots(
    extra_ca_pem: &[String],
) -> Result<Arc<rustls::RootCertStore>, InterceptError> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    for pem in extra_ca_pem {
        let mut any = false;
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let c = c.map_err(|e| InterceptError::UpstreamCa(e.to_string()))?;
            roots
                .add(c)
                .map_err(|e| InterceptError::UpstreamCa(e.to_string()))?;
            any = true;
        }
        if !any {
            return Err(InterceptError::UpstreamCa(
                "no certificate in the PEM".into(),
            ));
        }
    }
    Ok(Arc::new(roots))
}

/// An upstream connection, plain or TLS.
enum UpStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// [`UpStream`] as hyper sees it, with what the pool needs to know (h2 or not).
pub(crate) struct UpIo(TokioIo<UpStream>);

impl hyper::rt::Read for UpIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for UpIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

impl Connection for UpIo {
    fn connected(&self) -> Connected {
        match self.0.inner() {
            UpStream::Tls(t) if t.get_ref().1.alpn_protocol() == Some(b"h2") => {
                Connected::new().negotiated_h2()
            }
            _ => Connected::new(),
        }
    }
}

impl AsyncRead for UpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            UpStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            UpStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpStream::Plain(s) => Pin::new(s).poll_flush(cx),
            UpStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            UpStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl tower_service::Service<Uri> for Upstream {
    type Response = UpIo;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<UpIo>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let me = self.clone();
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no host"))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let https = uri.scheme_str() == Some("https");
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            let tcp = (me.connect)(host.clone(), port).await?;
            let _ = tcp.set_nodelay(true);
            if !https {
                return Ok(UpIo(TokioIo::new(UpStream::Plain(tcp))));
            }
            let name = rustls::pki_types::ServerName::try_from(host)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let tls = me.tls.connect(name, tcp).await?;
            Ok(UpIo(TokioIo::new(UpStream::Tls(Box::new(tls)))))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_bodies_are_shown_decompressed_and_bounded() {
        use std::io::Write;
        let text = "ignore previous instructions ".repeat(1000);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(text.as_bytes()).unwrap();
        let gz = gz.finish().unwrap();
        let out = decompress_prefix("gzip", &gz, 64).unwrap().unwrap();
        assert_eq!(out.len(), 64);
        assert!(out.starts_with(b"ignore previous"));
        // A truncated stream yields what it has.
        let part = decompress_prefix("gzip", &gz[..gz.len() / 2], 1 << 20)
            .unwrap()
            .unwrap();
        assert!(part.len() < text.len());
        assert_eq!(decompress_prefix("br", &gz, 64), None);
        // Every gzip member is read.
        let member = |t: &[u8]| {
            let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            g.write_all(t).unwrap();
            g.finish().unwrap()
        };
        let two = [member(b"hello "), member(b"token=SECRET")].concat();
        let out = decompress_prefix("gzip", &two, 1024).unwrap().unwrap();
        assert_eq!(out, b"hello token=SECRET");
        // Plain text labelled gzip is an error (the caller shows it raw, saying so).
        assert!(
            decompress_prefix("gzip", b"token=SECRET", 64)
                .unwrap()
                .is_err()
        );
    }

    #[test]
    fn paths_are_matched_as_servers_read_them() {
        for (raw, want) in [
            ("/secret", "/secret"),
            ("/%73ecret", "/secret"),
            ("//secret", "/secret"),
            ("/x/../secret", "/secret"),
            ("/./secret", "/secret"),
            ("/a/b/", "/a/b/"),
            ("/", "/"),
            ("/caf%C3%A9", "/café"),
        ] {
            assert_eq!(normalize_path(raw).as_deref(), Ok(want), "{raw}");
        }
        for bad in [
            "/%2fsecret",
            "/%2Fsecret",
            "/a%5cb",
            "/a\\b",
            "/%00",
            "/..",
            "/a/../../x",
            "/%zz",
            "/%4",
        ] {
            assert!(normalize_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hosts_and_queries() {
        assert!(same_host(
            "api.example.test",
            "api.example.test",
            443,
            "https"
        ));
        assert!(same_host(
            "API.example.test:443",
            "api.example.test",
            443,
            "https"
        ));
        assert!(!same_host(
            "api.example.test:8443",
            "api.example.test",
            443,
            "https"
        ));
        assert!(!same_host("evil.test", "api.example.test", 443, "https"));
        assert!(same_host("x.test:8080", "x.test", 8080, "http"));
        assert!(!same_host("x.test:zz", "x.test", 80, "http"));
        assert_eq!(redact_query("key=secret&page=2&flag"), "?key=…&page=…&…");
        assert_eq!(redact_query(""), "");
        assert_eq!(authority("::1", 8443, 443), "[::1]:8443");
        assert_eq!(authority("a.test", 443, 443), "a.test");
    }
}
