//! The gateway's seam to the HTTP layer. The gateway decides which TCP flows are HTTP (by
//! name, port and the plan's `[http]`/`[tls]` parts; see [`super::HttpFlow`]), then hands the
//! sandbox's side of each such flow to a [`FlowHandler`] and holds the flow's slot until the
//! handler returns. The handler is whatever the caller wires in (the binary adapts cordon's
//! HTTP layer to it): this crate knows nothing of TLS or HTTP, and its types here are std and
//! tokio only, so neither layer crate depends on the other.
//!
//! Two ways a flow leaves the gateway, both through [`FlowHandler`]: `serve` for a flow the
//! HTTP layer decides request by request, and `refuse` for a flow the gateway already denied
//! but that speaks TLS (its first bytes were a ClientHello): the handler finishes the
//! handshake with cordon's CA and answers every request with a 403 naming the [`FlowDenial`],
//! so the client shows cordon's words instead of "connection refused" or "CONNECT tunnel
//! failed".

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// The sandbox's side of a flow: a byte stream (the userspace stack's TCP stream, or the
/// explicit proxy's connection after its request head).
pub trait FlowIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> FlowIo for T {}

/// What a flow will speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowKind {
    /// TLS: port 443, transparent or `CONNECT host:443`.
    Tls,
    /// Plain HTTP: port 80, `CONNECT host:80`, or a plain request through the proxy.
    Plain,
}

/// Where a flow handed to the handler was made to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowTarget {
    /// The name the sandbox connected to (what its fake address stands for, or the proxy's
    /// target): the only host requests on this flow may be for.
    pub name: String,
    /// The destination port.
    pub port: u16,
    /// What it speaks.
    pub kind: FlowKind,
    /// The process that made it, when a rule or credential names programs and it was found.
    pub owner: Owned,
}

/// The process behind a flow, as the gateway found it (see [`cordon_policy::Owner`]):
/// `None` when it could not be found or was not looked for.
pub type Owned = Option<std::sync::Arc<cordon_policy::Owner>>;

/// Why the gateway denied a flow it hands to [`FlowHandler::refuse`]: the rule
/// (`network.default-deny`, `http.default-deny`, a blocklist entry…) as the flow's event
/// names it, the reason, and the policy lines that would allow the flow.
pub type FlowDenial = cordon_events::Denial;

/// A handler's future: runs until the flow (and anything it was upgraded to) is done.
pub type FlowFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Serves the flows the gateway decided are HTTP.
pub trait FlowHandler: Send + Sync {
    /// Takes one flow; the returned future ends when the flow is done.
    fn serve(&self, stream: Box<dyn FlowIo>, to: FlowTarget) -> FlowFuture;

    /// `text` with every secret the handler knows redacted (for the command lines events
    /// name).
    fn redact(&self, text: &str) -> String;

    /// Answers a flow the gateway denied that speaks TLS (`stream` replays its ClientHello):
    /// TLS with cordon's CA, then a 403 naming `denial` for each request. The gateway has
    /// already reported the denial; nothing goes upstream. A handler that cannot speak TLS
    /// drops the stream, which the client sees as the connection closing.
    fn refuse(&self, stream: Box<dyn FlowIo>, to: FlowTarget, denial: FlowDenial) -> FlowFuture {
        let _ = (to, denial);
        drop(stream);
        Box::pin(async {})
    }
}

/// Redacts a text for events (see [`super::Gateway::new`]).
pub type Redact = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// The gateway's policy-checked connect, for the handler's upstream requests (see
/// [`super::Gateway::connector`]).
pub type ConnectFn = Arc<
    dyn Fn(String, u16) -> Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>>
        + Send
        + Sync,
>;

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;

    impl FlowHandler for Echo {
        fn serve(&self, mut stream: Box<dyn FlowIo>, to: FlowTarget) -> FlowFuture {
            Box::pin(async move {
                use tokio::io::AsyncWriteExt;
                let _ = stream
                    .write_all(format!("{}:{}", to.name, to.port).as_bytes())
                    .await;
            })
        }
        fn redact(&self, text: &str) -> String {
            text.replace("secret", "…")
        }
    }

    #[tokio::test]
    async fn a_handler_gets_the_stream_and_where_it_was_made_to() {
        let (a, mut b) = tokio::io::duplex(64);
        let h: Arc<dyn FlowHandler> = Arc::new(Echo);
        let to = FlowTarget {
            name: "api.example.test".into(),
            port: 443,
            kind: FlowKind::Tls,
            owner: None,
        };
        h.serve(Box::new(a), to).await;
        let mut got = String::new();
        use tokio::io::AsyncReadExt;
        b.read_to_string(&mut got).await.unwrap();
        assert_eq!(got, "api.example.test:443");
        assert_eq!(h.redact("a secret"), "a …");
    }
}
