//! The upstream connector both the interceptor and the judge use: the caller's connect (for
//! the interceptor, the gateway's policy-checked one), then TLS verified against the host's
//! roots plus `[tls] upstream_ca` — never skipped.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::intercept::{ConnectFn, InterceptError};
use crate::tls_io::{BufTcp, poll_read_gathered};

/// The upstream connector: the gateway's checked connect, then TLS (for https URIs).
#[derive(Clone)]
pub(crate) struct Upstream {
    tls: Arc<LazyTls>,
    connect: ConnectFn,
}

/// The upstream TLS client, made when the first HTTPS request goes upstream: its roots are
/// the costliest thing a session would otherwise build at start, and a session that never
/// speaks HTTPS upstream needs none of it. Never skipped: no TLS connection is made without it.
struct LazyTls {
    roots: Arc<Roots>,
    alpn: Vec<Vec<u8>>,
    made: OnceLock<Result<tokio_rustls::TlsConnector, String>>,
}

impl LazyTls {
    fn get(&self) -> io::Result<&tokio_rustls::TlsConnector> {
        self.made
            .get_or_init(|| {
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let mut tls = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())?
                    .with_root_certificates(self.roots.get())
                    .with_no_client_auth();
                tls.alpn_protocols.clone_from(&self.alpn);
                Ok(tokio_rustls::TlsConnector::from(Arc::new(tls)))
            })
            .as_ref()
            .map_err(|e| io::Error::other(format!("upstream TLS client: {e}")))
    }
}

/// The roots upstream servers are verified against: the host's own store (read on first use:
/// it is every certificate under /etc/ssl, read and parsed), plus `[tls] upstream_ca`, which is
/// checked when the session starts so a bad file is an error then.
pub(crate) struct Roots {
    extra: Vec<rustls::pki_types::CertificateDer<'static>>,
    store: OnceLock<Arc<rustls::RootCertStore>>,
}

impl Roots {
    /// Starts loading the host's roots off the async workers, if nobody has yet: the first
    /// upstream connect then finds them ready (or waits for this load, never starts another).
    pub(crate) fn warm(self: &Arc<Self>) {
        if self.store.get().is_none() {
            let me = self.clone();
            tokio::task::spawn_blocking(move || {
                me.get();
            });
        }
    }

    fn get(&self) -> Arc<rustls::RootCertStore> {
        self.store
            .get_or_init(|| {
                let mut roots = rustls::RootCertStore::empty();
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
                // Each was added to a store once already, when checked.
                roots.add_parsable_certificates(self.extra.iter().cloned());
                Arc::new(roots)
            })
            .clone()
    }
}

impl Upstream {
    /// TLS verified against the host's roots plus `extra_ca_pem`; ALPN h2 and http/1.1.
    pub(crate) fn new(connect: ConnectFn, extra_ca_pem: &[String]) -> Result<Self, InterceptError> {
        Ok(Self::with_roots(
            connect,
            upstream_roots(extra_ca_pem)?,
            &[b"h2", b"http/1.1"],
        ))
    }

    /// An upstream connector trusting `roots`, offering only `alpn` (HTTP/1.1 alone for
    /// upgrades: HTTP/2 has none).
    pub(crate) fn with_roots(connect: ConnectFn, roots: Arc<Roots>, alpn: &[&[u8]]) -> Self {
        Self {
            tls: Arc::new(LazyTls {
                roots,
                alpn: alpn.iter().map(|p| p.to_vec()).collect(),
                made: OnceLock::new(),
            }),
            connect,
        }
    }
}

/// The roots upstream servers are verified against: the host's own (loaded on first use),
/// plus `extra_ca_pem` (`[tls] upstream_ca`), checked now. Shared by a connector set.
pub(crate) fn upstream_roots(extra_ca_pem: &[String]) -> Result<Arc<Roots>, InterceptError> {
    use rustls::pki_types::pem::PemObject;
    let mut extra = Vec::new();
    for pem in extra_ca_pem {
        let mut any = false;
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let c = c.map_err(|e| InterceptError::UpstreamCa(e.to_string()))?;
            // What the store would refuse later is refused now, naming the file's problem.
            rustls::RootCertStore::empty()
                .add(c.clone())
                .map_err(|e| InterceptError::UpstreamCa(e.to_string()))?;
            extra.push(c);
            any = true;
        }
        if !any {
            return Err(InterceptError::UpstreamCa(
                "no certificate in the PEM".into(),
            ));
        }
    }
    Ok(Arc::new(Roots {
        extra,
        store: OnceLock::new(),
    }))
}

/// An upstream connection, plain or TLS (its socket read in large pieces, its reads taking
/// every record at hand: see [`crate::tls_io`]).
enum UpStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<BufTcp>>, Option<io::Error>),
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
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        hyper::rt::Write::is_write_vectored(&self.0)
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
            UpStream::Tls(t, _) if t.get_ref().1.alpn_protocol() == Some(b"h2") => {
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
            UpStream::Tls(s, err) => poll_read_gathered(s.as_mut(), err, cx, buf),
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
            UpStream::Tls(s, _) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            UpStream::Tls(s, _) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            UpStream::Plain(s) => s.is_write_vectored(),
            UpStream::Tls(s, _) => s.is_write_vectored(),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpStream::Plain(s) => Pin::new(s).poll_flush(cx),
            UpStream::Tls(s, _) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            UpStream::Tls(s, _) => Pin::new(s.as_mut()).poll_shutdown(cx),
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
            let tls = me.tls.get()?.connect(name, BufTcp::new(tcp)).await?;
            Ok(UpIo(TokioIo::new(UpStream::Tls(Box::new(tls), None))))
        })
    }
}
