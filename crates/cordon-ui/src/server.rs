//! The HTTP/1.1 server: accept on 127.0.0.1, refuse sandboxes, gate every request, route it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::BoxBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::gate::{self, Head, Token};
use crate::hub::Hub;
use crate::routes::{self, Reply, Route};
use crate::sse;

type Body = BoxBody<Bytes, Infallible>;

/// Largest request body read (answers are a few dozen bytes).
const MAX_BODY: usize = 64 * 1024;
/// A comment on an idle event stream this often.
const KEEPALIVE_EVERY: Duration = Duration::from_secs(15);

/// Sent with every answer: only our own files, no framing, no referrer (the token is in URLs).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub(crate) struct Ctx {
    pub hub: Arc<Hub>,
    pub token: Token,
    pub addr: SocketAddr,
    pub cordon_exe: Option<(u64, u64)>,
}

fn harden(h: &mut HeaderMap) {
    let set = |h: &mut HeaderMap, k: &'static str, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    set(h, "content-security-policy", CSP);
    set(h, "x-content-type-options", "nosniff");
    set(h, "referrer-policy", "no-referrer");
    set(h, "x-frame-options", "DENY");
    set(h, "cache-control", "no-store");
    set(h, "cross-origin-resource-policy", "same-origin");
    set(h, "cross-origin-opener-policy", "same-origin");
}

fn full(status: u16, content_type: &'static str, body: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).boxed());
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static(content_type));
    harden(r.headers_mut());
    r
}

fn reply(r: Reply) -> Response<Body> {
    full(r.status, r.content_type, r.body)
}

fn text(status: u16, body: &str) -> Response<Body> {
    full(status, "text/plain; charset=utf-8", body.to_string())
}

/// The event stream: the snapshot first, then every frame the hub sends, with keep-alives.
fn events(hub: &Arc<Hub>) -> Response<Body> {
    let rx = hub.subscribe();
    let first = sse::frame("snapshot", &hub.snapshot().to_string());
    let hub = hub.clone();
    let stream =
        futures::stream::unfold((Some(first), rx, hub), |(first, mut rx, hub)| async move {
            if let Some(f) = first {
                return Some((Ok(Frame::data(Bytes::from(f))), (None, rx, hub)));
            }
            let data: String = match tokio::time::timeout(KEEPALIVE_EVERY, rx.recv()).await {
                Ok(Ok(f)) => f.to_string(),
                // Too slow a reader missed frames: start it over from a fresh snapshot.
                Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {
                    sse::frame("snapshot", &hub.snapshot().to_string())
                }
                Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => return None,
                Err(_) => sse::KEEPALIVE.to_string(),
            };
            Some((Ok(Frame::data(Bytes::from(data))), (None, rx, hub)))
        });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    let h = r.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    harden(h);
    r
}

async fn body_bytes(req: Request<Incoming>) -> Result<Bytes, Response<Body>> {
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(_) => Err(text(413, "cordon ui: request body too large or cut off\n")),
    }
}

async fn blocking(f: impl FnOnce() -> Reply + Send + 'static) -> Response<Body> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => reply(r),
        Err(_) => text(500, "cordon ui: the handler failed\n"),
    }
}

pub(crate) async fn handle(ctx: Arc<Ctx>, req: Request<Incoming>) -> Response<Body> {
    let hdr = |k: &str| req.headers().get(k).and_then(|v| v.to_str().ok());
    let head = Head {
        method: req.method().as_str(),
        query: req.uri().query(),
        host: hdr("host"),
        origin: hdr("origin"),
        content_type: hdr("content-type"),
        sec_fetch_site: hdr("sec-fetch-site"),
    };
    if let Err(why) = gate::check(&head, &ctx.token, ctx.addr.port()) {
        let (status, msg) = why.answer();
        return text(status, msg);
    }
    let query = req.uri().query().map(str::to_string);
    match routes::route(req.method().as_str(), req.uri().path()) {
        Route::Index => reply(routes::index(ctx.token.as_str())),
        Route::Script => full(200, "text/javascript; charset=utf-8", routes::APP_JS.into()),
        Route::Style => full(200, "text/css; charset=utf-8", routes::APP_CSS.into()),
        Route::Events => events(&ctx.hub),
        Route::Snapshot => reply(routes::snapshot(&ctx.hub)),
        Route::StateDiff => {
            let session = gate::query_param(query.as_deref(), "session")
                .unwrap_or_default()
                .to_string();
            let hub = ctx.hub.clone();
            blocking(move || routes::state_diff(&hub, &session)).await
        }
        Route::Answer | Route::Remember | Route::StateAccept | Route::StateDiscard => {
            let r = routes::route(req.method().as_str(), req.uri().path());
            let body = match body_bytes(req).await {
                Ok(b) => b,
                Err(resp) => return resp,
            };
            let hub = ctx.hub.clone();
            blocking(move || {
                let (writer, dir) = (hub.sources.writer(), hub.sources.approvals.as_deref());
                match r {
                    Route::Answer => routes::answer(writer, dir, &body),
                    Route::Remember => crate::policy::preview(writer, dir, &body),
                    _ => routes::state_change(&hub, &body, r == Route::StateAccept),
                }
            })
            .await
        }
        Route::NotFound => text(404, "cordon ui: no such page\n"),
        Route::WrongMethod => text(405, "cordon ui: method not allowed here\n"),
    }
}

/// Serves connections on `listener` until the runtime is dropped.
pub(crate) async fn serve(ctx: Arc<Ctx>, listener: tokio::net::TcpListener) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let ours = ctx.addr;
            let exe = ctx.cordon_exe;
            // A sandbox reaches the host's loopback only through its gateway, a cordon
            // process: whatever rule opened the port, it gets a refusal and nothing else.
            let peer_is = tokio::task::spawn_blocking(move || crate::peer::who(peer, ours, exe))
                .await
                .unwrap_or(crate::peer::Peer::Unknown);
            let refusal = match peer_is {
                crate::peer::Peer::Welcome => None,
                crate::peer::Peer::Cordon => {
                    Some("cordon ui: connections from a cordon sandbox are refused\n".to_string())
                }
                crate::peer::Peer::OtherUser(uid) => Some(format!(
                    "cordon ui: this dashboard is another user's; connections from uid {uid} are refused\n"
                )),
                // Refused rather than guessed: the connection must be in /proc/net/tcp.
                crate::peer::Peer::Unknown => Some(
                    "cordon ui: cannot tell who is connecting (not in /proc/net/tcp)\n".to_string(),
                ),
            };
            if let Some(msg) = refusal {
                // The refusal answers the request, once it has come: a response the client
                // reads before it has sent anything is a broken exchange to most clients
                // (hyper's says "unexpected message"), not the reason it was refused.
                let svc = hyper::service::service_fn(move |_req| {
                    let refused = text(403, &msg);
                    async move { Ok::<_, Infallible>(refused) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(false)
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
                return;
            }
            let svc = hyper::service::service_fn(move |req| {
                let ctx = ctx.clone();
                async move { Ok::<_, Infallible>(handle(ctx, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
