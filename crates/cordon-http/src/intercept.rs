//! The interceptor: terminates the sandbox's TLS with a leaf from cordon's CA, reads each
//! request (HTTP/1.1 or HTTP/2, as ALPN says), decides it with the rules, and forwards what
//! is allowed to the real server over TLS verified against the host's roots — streaming both
//! bodies, never buffering a response (LLM APIs stream). A denial is a 403 whose body says
//! which rule and why, in words a model can act on.
//!
//! The host a request is decided and forwarded by is the *connection's* (the name the sandbox
//! connected to, or the SNI it sent for it): a `Host` header naming anything else is refused
//! (421), so one allowed connection cannot carry requests for another host.
//!
//! This module holds the interceptor's state and its connections; each request runs through
//! the pipeline's stages (admit, decide, read body, check, forward, relay).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use cordon_events::{Action as EvAction, Layer, NewEvent};
use hyper::Request;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::CertAuthority;
pub use crate::credentials::WireCredential;
use crate::pipeline::{Body, Conn, SentForms, Tunnels};
use crate::upstream::{Upstream, upstream_roots};
use cordon_policy::{HttpAction, HttpRule};

/// The process behind a connection, as the gateway found it: `None` when it could not be
/// found, or was not looked for (no rule or credential names programs).
pub type Owned = Option<Arc<cordon_policy::Owner>>;

/// Where events go.
pub use cordon_events::Emit;
/// Opens the TCP connection to the real `host:port` for an allowed request (the gateway's
/// policy-checked, rebinding-safe connect).
pub type ConnectFn = Arc<
    dyn Fn(String, u16) -> Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>>
        + Send
        + Sync,
>;

/// Concurrent HTTP/2 streams one sandbox connection may have (each may hold an upstream
/// request): bounds what one flow can make the supervisor open.
const MAX_STREAMS: u32 = 32;
/// Upstream requests in flight at once, all flows together (each holds a socket).
const MAX_UPSTREAM: usize = 1024;
/// Idle upstream connections kept per host: as many as the sandbox can have connections open
/// at once (the gateway's flow cap), so each of a busy client's keep-alive connections finds
/// its upstream one again. Kept to 32, a client with 500 connections made the host open a new
/// connection, and a TLS handshake with it, for almost every request (issue #18). Idle ones
/// close after hyper-util's 90 s idle timeout (kept by the pool's timer), or when the server
/// closes them.
const MAX_IDLE_PER_HOST: usize = 512;
/// Largest request head (HTTP/1 buffer, HTTP/2 header list).
const MAX_HEADERS: u32 = 64 << 10;
/// TLS server configs kept, one per (host, ALPN); past this the cache starts over.
const MAX_SERVER_CONFIGS: usize = 4096;
/// Sandbox TLS sessions kept for resumption, all hosts together.
const MAX_SESSIONS: usize = 1024;

/// What the interceptor needs.
pub struct Config {
    /// cordon's CA.
    pub ca: Arc<CertAuthority>,
    /// Ordered rules.
    pub rules: Vec<HttpRule>,
    /// What an unmatched request gets.
    pub default: HttpAction,
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

/// Decides and forwards the sandbox's HTTP(S) requests (see the module docs). The pipeline's
/// stages take the part they use ([`Screens`], [`Wire`], [`Upstreams`]), not the whole.
pub struct Interceptor {
    pub(crate) ca: Arc<CertAuthority>,
    pub(crate) rules: Vec<HttpRule>,
    pub(crate) default: HttpAction,
    pub(crate) server_alpn: Vec<Vec<u8>>,
    pub(crate) screens: Screens,
    pub(crate) wire: Wire,
    pub(crate) upstreams: Upstreams,
    /// The session's audit log: while it cannot be written no request is decided.
    pub(crate) audit: std::sync::OnceLock<cordon_events::AuditHealth>,
    /// A learning run: a request a rule denies or asks about is let through and logged as
    /// what it would have been; the judge and secret scanning still refuse.
    pub(crate) learning: bool,
    /// MCP governance (`[mcp]`), once the session sets it up (see [`crate::mcp`]).
    pub(crate) mcp: std::sync::OnceLock<Arc<crate::mcp::Mcp>>,
    /// The sandbox side's TLS configs, by (host, ALPN) (see [`Interceptor::server_config`]).
    server_configs: std::sync::Mutex<ServerConfigs>,
    /// Sessions the sandbox may resume, shared by every host's config (a session resumes
    /// only under the SNI it was made for).
    sessions: Arc<dyn rustls::server::StoresServerSessions>,
}

/// What a request passes once a rule let it: secret scanning, the judge, a person asked; and
/// where every stage's events go. The admission, check, relay and MCP stages take this.
pub(crate) struct Screens {
    pub(crate) emit: Emit,
    pub(crate) judge: Option<Arc<crate::judge::Judge>>,
    pub(crate) asker: Option<Arc<crate::ask::Asker>>,
    pub(crate) dlp: Option<Dlp>,
}

impl Screens {
    /// `text` with every secret scanning knows redacted (token shapes when scanning is off).
    pub(crate) fn redact<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        match &self.dlp {
            Some(d) => d.scanner.redact(text),
            None => crate::dlp::redact(text),
        }
    }
}

/// The credentials at the wire: placeholders swapped for real values on the way out, real
/// values scrubbed back on the way in, and the logins whose token exchanges are brokered.
/// The forwarding, body and token stages take this.
pub(crate) struct Wire {
    pub(crate) credentials: Vec<WireCredential>,
    /// Real values back to placeholders in responses (none without credentials).
    pub(crate) scrub: Option<crate::dlp::Scrubber>,
    /// Scrubbers for the encoded forms requests sent (Basic values), by those forms.
    pub(crate) scrubbers: std::sync::Mutex<Vec<(SentForms, crate::dlp::Scrubber)>>,
    /// (credential, placeholder), for bodies checked as they stream.
    pub(crate) placeholders: Arc<Vec<(String, String)>>,
    /// How far back a streamed body's scan must look: the longest secret or placeholder.
    pub(crate) scan_window: usize,
    /// The logins whose token exchanges are brokered (and the credentials since they rotated).
    pub(crate) logins: std::sync::OnceLock<crate::credentials::refresh::Logins>,
}

impl Wire {
    /// The credentials at the wire since a login's tokens rotated (`None`: the session's
    /// starting ones, [`Interceptor::credentials`]).
    pub(crate) fn live(&self) -> Option<Arc<crate::credentials::refresh::Live>> {
        self.logins.get().and_then(|l| l.live())
    }

    /// The scrubber for a response to a request that sent these (real form, sandbox form)
    /// pairs: the session's own when they are plain values, else one made for them (kept: a
    /// client sends the same Basic value request after request).
    pub(crate) fn scrubber_for(&self, sent: &[(String, String)]) -> Option<crate::dlp::Scrubber> {
        let live = self.live();
        let credentials = live
            .as_ref()
            .map_or(&self.credentials[..], |l| &l.credentials[..]);
        let extra: Vec<(String, String)> = sent
            .iter()
            .filter(|p| {
                !credentials
                    .iter()
                    .any(|c| c.real == p.0 && c.placeholder == p.1)
            })
            .cloned()
            .collect();
        if extra.is_empty() {
            return live.map_or_else(|| self.scrub.clone(), |l| l.scrub.clone());
        }
        let mut cache = self.scrubbers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, s)) = cache.iter().find(|(k, _)| *k == extra) {
            return Some(s.clone());
        }
        let mut pairs: Vec<(String, String)> = credentials
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
}

/// What forwarding a request upstream takes of the interceptor (the forwarding and token
/// stages): the screens, the credentials at the wire and the way upstream, nothing else.
#[derive(Clone, Copy)]
pub(crate) struct Forwarding<'a> {
    pub(crate) screens: &'a Screens,
    pub(crate) wire: &'a Wire,
    pub(crate) upstreams: &'a Upstreams,
}

/// The way upstream: the connection pools and how many requests may be in flight.
pub(crate) struct Upstreams {
    pub(crate) client: Client<Upstream, Body>,
    /// For upgrades (WebSocket): HTTP/1.1 only.
    pub(crate) client_h1: Client<Upstream, Body>,
    /// One permit per upstream request in flight (held until its response has been relayed).
    pub(crate) permits: Arc<tokio::sync::Semaphore>,
    /// The upstream roots, loaded while the first flow's client handshake runs.
    pub(crate) roots: Arc<crate::upstream::Roots>,
}

/// TLS server configs by (host, ALPN protocols).
type ServerConfigs = std::collections::HashMap<(String, Vec<Vec<u8>>), Arc<rustls::ServerConfig>>;

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
    /// Sets up the upstream TLS client (the host's roots plus `upstream_ca_pem`, ALPN h2 and
    /// http/1.1; built on the first HTTPS request upstream) and the connection pool.
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
            Upstream::with_roots(cfg.connect.clone(), roots.clone(), &[b"h2", b"http/1.1"]);
        let h1 = Upstream::with_roots(cfg.connect, roots.clone(), &[b"http/1.1"]);
        // Without a timer the pool applies its idle timeout only when a connection is checked
        // out again: an idle connection to a host not asked again, on a server that never
        // closes it, would be held for the session.
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .build(upstream);
        let client_h1 = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(8)
            .build(h1);
        Ok(Self {
            ca: cfg.ca,
            rules: cfg.rules,
            default: cfg.default,
            server_alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            screens: Screens {
                emit: cfg.emit,
                judge: cfg.judge,
                asker: cfg.asker,
                dlp: cfg.dlp,
            },
            wire: Wire {
                scrub: crate::dlp::Scrubber::new(
                    &cfg.credentials
                        .iter()
                        .map(|c| (c.real.clone(), c.placeholder.clone()))
                        .collect::<Vec<_>>(),
                ),
                credentials: cfg.credentials,
                scrubbers: std::sync::Mutex::new(Vec::new()),
                placeholders: Arc::new(placeholders),
                scan_window,
                logins: std::sync::OnceLock::new(),
            },
            upstreams: Upstreams {
                client,
                client_h1,
                permits: Arc::new(tokio::sync::Semaphore::new(MAX_UPSTREAM)),
                roots,
            },
            audit: std::sync::OnceLock::new(),
            mcp: std::sync::OnceLock::new(),
            learning: false,
            server_configs: std::sync::Mutex::new(ServerConfigs::new()),
            sessions: rustls::server::ServerSessionMemoryCache::new(MAX_SESSIONS),
        })
    }

    /// Serves one sandbox connection that was made to `host:port` and will speak TLS: the
    /// sandbox gets a certificate for the name it sent (SNI) — which must be `host`.
    /// `owner`: the process that opened it, when the gateway looked (see [`crate::Owner`]).
    pub async fn serve_tls<S>(self: Arc<Self>, stream: S, host: String, port: u16, owner: Owned)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.upstreams.roots.warm();
        let alpn: Vec<&[u8]> = self.server_alpn.iter().map(Vec::as_slice).collect();
        let Some(tls) = self.accept_tls(stream, &host, port, &alpn).await else {
            return;
        };
        self.serve(TokioIo::new(tls), host, port, "https", owner)
            .await;
    }

    /// The sandbox's side of TLS for a connection to `host:port`, with a leaf for `host`
    /// offering `alpn`; a failed handshake is reported and gives `None`.
    pub(crate) async fn accept_tls<S>(
        &self,
        stream: S,
        host: &str,
        port: u16,
        alpn: &[&[u8]],
    ) -> Option<tokio_rustls::server::TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let cfg = self.server_config(host, alpn)?;
        match tokio_rustls::TlsAcceptor::from(cfg).accept(stream).await {
            Ok(t) => Some(t),
            Err(e) => {
                (self.screens.emit)(
                    NewEvent::new(
                        Layer::Http,
                        EvAction::Error,
                        format!("TLS with the sandbox failed for {host}:{port}: {e}"),
                    )
                    .detail("host", host)
                    .detail("port", port),
                );
                None
            }
        }
    }

    /// The TLS server config for connections to `host` offering `alpn`: made once per
    /// (host, ALPN) and kept, so a client that resumes its session with the host skips the
    /// full handshake. Its resolver still checks every ClientHello's SNI against `host`
    /// before anything else (rustls resolves the certificate before it looks at resumption),
    /// and rustls resumes a session only for the SNI it was made for.
    fn server_config(&self, host: &str, alpn: &[&[u8]]) -> Option<Arc<rustls::ServerConfig>> {
        let key = (host.to_string(), alpn.iter().map(|p| p.to_vec()).collect());
        let mut configs = self
            .server_configs
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(c) = configs.get(&key) {
            return Some(c.clone());
        }
        let resolver = Arc::new(LeafResolver {
            ca: self.ca.clone(),
            host: host.to_string(),
        });
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?;
        let mut cfg = cfg.with_no_client_auth().with_cert_resolver(resolver);
        cfg.alpn_protocols.clone_from(&key.1);
        cfg.session_storage = self.sessions.clone();
        let cfg = Arc::new(cfg);
        if configs.len() >= MAX_SERVER_CONFIGS {
            configs.clear();
        }
        configs.insert(key, cfg.clone());
        Some(cfg)
    }

    /// Serves one plain-HTTP sandbox connection made to `host:port`.
    pub async fn serve_plain<S>(self: Arc<Self>, stream: S, host: String, port: u16, owner: Owned)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.serve(TokioIo::new(stream), host, port, "http", owner)
            .await;
    }

    async fn serve<I>(
        self: Arc<Self>,
        io: I,
        host: String,
        port: u16,
        scheme: &'static str,
        owner: Owned,
    ) where
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
            let owner = owner.clone();
            async move {
                let conn = Conn {
                    host: &host,
                    port,
                    scheme,
                    owner: owner.as_deref(),
                };
                Ok::<_, hyper::Error>(crate::pipeline::handle(&me, req, &conn, &t).await)
            }
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

    /// `text` with every secret the scanner knows (token shapes, known values) redacted, for
    /// events.
    pub fn redact<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        self.screens.redact(text)
    }

    /// The part the forwarding and token stages take.
    pub(crate) fn forwarding(&self) -> Forwarding<'_> {
        Forwarding {
            screens: &self.screens,
            wire: &self.wire,
            upstreams: &self.upstreams,
        }
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

#[cfg(test)]
#[path = "intercept_tests.rs"]
mod tests;
