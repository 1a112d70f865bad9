//! Readable denials: a flow the gateway already refused, answered so the client shows why.
//!
//! A denied HTTPS flow used to end at the TCP level (a RST, or `CONNECT tunnel failed,
//! response 403` through the proxy), and curl, pip and requests printed that and nothing of
//! cordon's reason. Here the sandbox's TLS is finished with a leaf from cordon's CA (which the
//! sandbox trusts) and every request on it gets a 403 that names the rule, the reason, the
//! policy lines that would allow it and the `cordon explain` line — in the body and, shortly,
//! in the HTTP/1.1 reason phrase (what `requests` and pip put in their exceptions). Nothing
//! is forwarded: this never connects anywhere.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::intercept::Interceptor;
use crate::pipeline::{Body, text};

/// Why the gateway refused a flow: the gateway's `FlowDenial`, the one
/// [`cordon_events::Denial`] both layers take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied(pub cordon_events::Denial);

impl std::ops::Deref for Denied {
    type Target = cordon_events::Denial;

    fn deref(&self) -> &cordon_events::Denial {
        &self.0
    }
}

/// How long a denied connection may stay open for its request and the answer.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Longest reason phrase sent: enough for the rule and the start of the reason.
const MAX_PHRASE: usize = 160;

impl Denied {
    /// What the client is told for `method url` refused by this denial.
    pub fn body(&self, method: &str, url: &str, host: &str) -> String {
        let mut out = format!(
            "cordon: {method} {url} was denied by rule {}: {}.\nNothing was sent to {host}; the same request by any other route is refused too.\n",
            self.rule, self.reason
        );
        if let Some(lines) = &self.allow_with {
            out.push_str(&format!("To allow it, add to the policy:\n{lines}\n"));
        }
        out.push_str(&format!(
            "To see why: {}\n",
            cordon_policy::explain::hint_for_request(method, url)
        ));
        out
    }

    /// The HTTP/1.1 reason phrase: visible ASCII only (a name or reason could hold anything),
    /// bounded.
    pub fn phrase(&self) -> String {
        let full = format!("Forbidden by cordon rule {}: {}", self.rule, self.reason);
        let mut out: String = full
            .chars()
            .map(|c| {
                if c == ' ' || c.is_ascii_graphic() {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        if out.len() > MAX_PHRASE {
            out.truncate(MAX_PHRASE - 3);
            out.push_str("...");
        }
        out
    }

    fn response(&self, req: &Request<Incoming>, host: &str, port: u16) -> Response<Body> {
        let authority = if port == 443 {
            host.to_string()
        } else {
            format!("{host}:{port}")
        };
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        // The query may hold a secret: the URL shown stops at the path.
        let path = path.split('?').next().unwrap_or("/");
        let url = format!("https://{authority}{path}");
        let mut r = text(
            StatusCode::FORBIDDEN,
            self.body(req.method().as_str(), &url, host),
        );
        if let Ok(p) = hyper::ext::ReasonPhrase::try_from(self.phrase().into_bytes()) {
            r.extensions_mut().insert(p);
        }
        r.headers_mut().insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
        r
    }
}

impl Interceptor {
    /// Answers a flow to `host:port` that the gateway denied and that speaks TLS: the
    /// handshake with a leaf for `host` (HTTP/1.1 only, so the reason phrase reaches the
    /// client), then a 403 naming `denied` for its request, and the connection closes.
    pub async fn refuse_tls<S>(self: Arc<Self>, stream: S, host: String, port: u16, denied: Denied)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        // The flow holds one of the sandbox's slots: a client that stalls lets it go.
        let answer = async move {
            let Some(tls) = self.accept_tls(stream, &host, port, &[b"http/1.1"]).await else {
                return;
            };
            let denied = Arc::new(denied);
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let r = denied.response(&req, &host, port);
                async move { Ok::<_, hyper::Error>(r) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .serve_connection(TokioIo::new(tls), svc)
                .await;
        };
        let _ = tokio::time::timeout(ANSWER_WITHIN, answer).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_names_rule_reason_lines_and_explain() {
        let d = Denied(cordon_events::Denial {
            rule: "network.default-deny".into(),
            reason: "no [[network.allow]] rule names x.example with port 443".into(),
            allow_with: Some("[[network.allow]]\nhost = \"x.example\"\nports = [443]".into()),
        });
        let b = d.body("GET", "https://x.example/simple/", "x.example");
        assert!(
            b.contains("denied by rule network.default-deny: no [[network.allow]]"),
            "{b}"
        );
        assert!(
            b.contains("[[network.allow]]\nhost = \"x.example\"\nports = [443]\n"),
            "{b}"
        );
        assert!(
            b.contains("To see why: cordon explain GET https://x.example/simple/"),
            "{b}"
        );
        let p = d.phrase();
        assert!(
            p.starts_with("Forbidden by cordon rule network.default-deny: no"),
            "{p}"
        );
        assert!(hyper::ext::ReasonPhrase::try_from(p.into_bytes()).is_ok());
        let odd = Denied(cordon_events::Denial {
            rule: "r".into(),
            reason: format!("é\r\n{}", "x".repeat(500)),
            allow_with: None,
        });
        let p = odd.phrase();
        assert!(p.len() <= MAX_PHRASE && p.ends_with("..."), "{p}");
        assert!(hyper::ext::ReasonPhrase::try_from(p.into_bytes()).is_ok());
        assert!(!odd.body("GET", "https://r/", "r").contains("To allow it"));
    }
}
