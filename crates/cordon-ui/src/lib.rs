//! cordon-ui: the live dashboard (`cordon ui`, `cordon run --ui`). Serves one page on
//! `127.0.0.1` at a random port: every running session's events as they happen (DNS, flows,
//! HTTP decisions, exec rules, state changes) with filters; the questions sessions hold, with
//! allow once / always / deny, or a rule added to the user's policy (`policy`: written by the
//! binary's [`PolicyWriter`], after the page showed its diff); per session, requests by host and decision, bytes on every path
//! (total and per host), judge calls and latency and a timeline; a session's state review,
//! with accept / discard once the session has ended. Live updates are server-sent events; the
//! page, script and style are compiled in (no CDN, no build step).
//!
//! Trust boundary: host side only, and it never talks to a sandbox. It reads sessions through
//! their audit logs (`cordon-events`), answers questions through the same broker client as
//! `cordon approve` (`cordon-approval`), and reviews state through `cordon-state`'s store.
//! Everything it shows was written by, or about, an untrusted sandbox: the page sets it as
//! text only (never markup) under a strict Content-Security-Policy. Who may ask:
//! - a request must carry the URL's token (64 random hex digits) and a `Host` of
//!   `127.0.0.1:PORT` or `localhost:PORT` (no DNS rebinding); a state-changing `POST` also
//!   needs this server's own `Origin` and a JSON body (no cross-site request forgery);
//! - a connection held by a cordon process at the other end (a session's gateway, the only way
//!   a sandbox reaches the host's loopback, for `host.cordon.internal` or a `[dns] hosts`
//!   entry) is refused, so no policy rule naming the port opens the dashboard to a sandbox;
//!   so is one from another user's socket (the dashboard is one user's), and one that
//!   `/proc/net/tcp` does not show (nobody to tell apart).

#![forbid(unsafe_code)]

mod gate;
mod hub;
mod peer;
mod policy;
mod routes;
mod server;
mod sse;
mod stats;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use gate::Token;
pub use hub::Sources;
pub use policy::{PolicyWriter, Preview};

/// Why the dashboard could not start.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error("cannot read random bytes for the dashboard's token from /dev/urandom: {0}")]
    Token(std::io::Error),
    #[error("cannot listen on 127.0.0.1 for the dashboard: {0}")]
    Bind(std::io::Error),
    #[error("cannot start the dashboard's threads: {0}")]
    Runtime(std::io::Error),
}

/// A running dashboard. Dropping it stops following the logs; the server stops with the
/// process.
pub struct Ui {
    addr: SocketAddr,
    token: Token,
    stop: Arc<AtomicBool>,
}

impl Ui {
    /// Listens on `127.0.0.1:0` and starts serving `sources` on threads of its own.
    /// `cordon_exe` is the running cordon binary, whose connections are refused even when it
    /// is not named `cordon`.
    pub fn start(sources: Sources, cordon_exe: Option<&Path>) -> Result<Ui, UiError> {
        let token = Token::random().map_err(UiError::Token)?;
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(UiError::Bind)?;
        listener.set_nonblocking(true).map_err(UiError::Bind)?;
        let addr = listener.local_addr().map_err(UiError::Bind)?;
        let hub = hub::Hub::new(sources);
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (hub, stop) = (hub.clone(), stop.clone());
            std::thread::Builder::new()
                .name("cordon-ui-watch".into())
                .spawn(move || hub::watch(hub, stop))
                .map_err(UiError::Runtime)?;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cordon-ui")
            .enable_all()
            .build()
            .map_err(UiError::Runtime)?;
        let ctx = Arc::new(server::Ctx {
            hub,
            token: token.clone(),
            addr,
            cordon_exe: cordon_exe.and_then(peer::exe_id),
        });
        let listener = {
            let _guard = rt.enter();
            tokio::net::TcpListener::from_std(listener).map_err(UiError::Bind)?
        };
        std::thread::Builder::new()
            .name("cordon-ui-serve".into())
            .spawn(move || rt.block_on(server::serve(ctx, listener)))
            .map_err(UiError::Runtime)?;
        Ok(Ui { addr, token, stop })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The page's URL, token included: what `cordon ui` prints.
    pub fn url(&self) -> String {
        format!("http://{}/?token={}", self.addr, self.token.as_str())
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    fn get(addr: SocketAddr, req: &str) -> String {
        get_on(std::net::TcpStream::connect(addr).unwrap(), req)
    }

    /// `req` on the connected `s`, and what comes back until the server closes.
    fn get_on(mut s: std::net::TcpStream, req: &str) -> String {
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 65536];
        // Read until the server closes or the head and some body arrived (SSE never ends).
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.push_str(&String::from_utf8_lossy(&buf[..n]));
            if out
                .split_once("event: snapshot")
                .is_some_and(|(_, rest)| rest.contains("\n\n"))
            {
                break;
            }
        }
        out
    }

    #[test]
    fn serves_the_page_with_the_token_and_refuses_without() {
        let dir = tempfile::tempdir().unwrap();
        let ui = Ui::start(
            Sources {
                log_dirs: vec![dir.path().to_path_buf()],
                ..Sources::default()
            },
            None,
        )
        .unwrap();
        let addr = ui.addr();
        assert!(addr.ip().is_loopback());
        let url = ui.url();
        let token = url.split("token=").nth(1).unwrap().to_string();
        let host = format!("Host: 127.0.0.1:{}\r\n", addr.port());

        let ok = get(
            addr,
            &format!("GET /?token={token} HTTP/1.1\r\n{host}Connection: close\r\n\r\n"),
        );
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(
            ok.to_lowercase()
                .contains("content-security-policy: default-src 'none'"),
            "{ok}"
        );
        assert!(ok.contains(&format!("/app.js?token={token}")), "{ok}");

        let no = get(
            addr,
            &format!("GET / HTTP/1.1\r\n{host}Connection: close\r\n\r\n"),
        );
        assert!(no.starts_with("HTTP/1.1 403"), "{no}");
        assert!(!no.contains(&token), "{no}");
        let js = get(
            addr,
            &format!("GET /app.js HTTP/1.1\r\n{host}Connection: close\r\n\r\n"),
        );
        assert!(js.starts_with("HTTP/1.1 403"), "{js}");

        let rebind = get(
            addr,
            &format!(
                "GET /?token={token} HTTP/1.1\r\nHost: evil.test:{}\r\nConnection: close\r\n\r\n",
                addr.port()
            ),
        );
        assert!(rebind.starts_with("HTTP/1.1 403"), "{rebind}");

        let csrf = get(
            addr,
            &format!(
                "POST /api/answer?token={token} HTTP/1.1\r\n{host}Origin: http://evil.test\r\n\
                 Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            ),
        );
        assert!(csrf.starts_with("HTTP/1.1 403"), "{csrf}");

        let sse = get(
            addr,
            &format!("GET /events?token={token} HTTP/1.1\r\n{host}\r\n"),
        );
        assert!(sse.starts_with("HTTP/1.1 200"), "{sse}");
        assert!(sse.contains("text/event-stream"), "{sse}");
        assert!(sse.contains("event: snapshot\ndata: {"), "{sse}");
    }

    // A refused connection is answered once its request has come, as any HTTP exchange: a
    // refusal sent before the client had written anything reached clients that keep their
    // connections (the gateway's) as a broken exchange instead of the reason.
    #[test]
    fn a_refusal_answers_the_request_not_the_connect() {
        let dir = tempfile::tempdir().unwrap();
        // Named as the running cordon binary, this test process is refused.
        let me = std::env::current_exe().unwrap();
        let ui = Ui::start(
            Sources {
                log_dirs: vec![dir.path().to_path_buf()],
                ..Sources::default()
            },
            Some(&me),
        )
        .unwrap();
        let addr = ui.addr();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            other => panic!("an answer before the request: {other:?}"),
        }
        let got = get_on(
            s,
            &format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", addr.port()),
        );
        assert!(got.starts_with("HTTP/1.1 403"), "{got}");
        assert!(
            got.contains("connections from a cordon sandbox are refused"),
            "{got}"
        );
    }
}
