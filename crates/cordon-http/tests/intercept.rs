//! The interceptor against real TLS servers and clients on loopback: an upstream HTTPS server
//! with its own CA (h1 and h2), the interceptor in front with cordon's CA, and hyper clients
//! that trust only cordon's CA — as the sandbox will.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_events::NewEvent;
use cordon_http::{CertAuthority, Config, Interceptor};
use cordon_policy::{HttpAction, HttpRule};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};

mod support;

type Events = Arc<Mutex<Vec<NewEvent>>>;

/// What the upstream server received (`/headers` requests): target and headers, one string
/// per request.
static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// What the upstream server received of `/sink` bodies, frame by frame (also of one cut short),
/// by the request's `x-sink` header. Each request names its own: the server may still be taking
/// in the frames of a request whose client has its answer (a refusal mid-body), and those must
/// not count for the next request (tests also run in parallel).
static SINK: Mutex<std::collections::BTreeMap<String, Vec<u8>>> =
    Mutex::new(std::collections::BTreeMap::new());

/// What the upstream server has received so far of the `/sink` request named `id`.
fn sunk(id: &str) -> Vec<u8> {
    SINK.lock().unwrap().get(id).cloned().unwrap_or_default()
}

/// A CA of the test's own and a server certificate for `names`, as (CA PEM, server config).
fn upstream_tls(names: &[&str]) -> (String, Arc<rustls::ServerConfig>) {
    support::upstream_tls(names, &[b"h2", b"http/1.1"])
}

async fn upstream_service(
    mut req: Request<Incoming>,
) -> Result<Response<http_body_util::combinators::BoxBody<Bytes, hyper::Error>>, hyper::Error> {
    // An upgrade to a byte-echo protocol, as a WebSocket server would upgrade.
    if req.uri().path() == "/ws" && req.headers().contains_key("upgrade") {
        let up = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            if let Ok(io) = up.await {
                let mut io = TokioIo::new(io);
                let mut buf = [0u8; 64];
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                loop {
                    match io.read(&mut buf).await {
                        Ok(n) if n > 0 => {
                            if io.write_all(&buf[..n]).await.is_err() || io.flush().await.is_err() {
                                break;
                            }
                        }
                        _ => break,
                    }
                }
            }
        });
        let mut r = Response::new(Full::new(Bytes::new()).map_err(|n| match n {}).boxed());
        *r.status_mut() = hyper::StatusCode::SWITCHING_PROTOCOLS;
        r.headers_mut()
            .insert("upgrade", "websocket".parse().unwrap());
        r.headers_mut()
            .insert("connection", "upgrade".parse().unwrap());
        return Ok(r);
    }
    let version = format!("{:?}", req.version());
    let path = req.uri().path().to_string();
    let host = req
        .headers()
        .get("host")
        .map(|h| h.to_str().unwrap_or("").to_string())
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let body = match path.as_str() {
        "/sse" => {
            let stream = futures::stream::unfold(0u32, |n| async move {
                if n == 3 {
                    return None;
                }
                if n > 0 {
                    tokio::time::sleep(Duration::from_millis(700)).await;
                }
                Some((
                    Ok::<_, hyper::Error>(Frame::data(Bytes::from(format!("data: {n}\n\n")))),
                    n + 1,
                ))
            });
            StreamBody::new(stream).boxed()
        }
        "/echo" => {
            let b = req.into_body().collect().await?.to_bytes();
            Full::new(b).map_err(|n| match n {}).boxed()
        }
        "/sink" => {
            let id = req
                .headers()
                .get("x-sink")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let mut body = req.into_body();
            while let Some(Ok(f)) = body.frame().await {
                if let Some(d) = f.data_ref() {
                    SINK.lock()
                        .unwrap()
                        .entry(id.clone())
                        .or_default()
                        .extend_from_slice(d);
                }
            }
            Full::new(Bytes::from_static(b"sunk"))
                .map_err(|n| match n {})
                .boxed()
        }
        // A compressed answer, whatever was asked.
        "/gzip" => {
            let mut r = Response::new(
                Full::new(Bytes::from_static(b"\x1f\x8b"))
                    .map_err(|n| match n {})
                    .boxed(),
            );
            r.headers_mut()
                .insert("content-encoding", "gzip".parse().unwrap());
            return Ok(r);
        }
        // What arrived, echoed back in 5-byte chunks (a value split across chunks).
        "/headers" => {
            let mut seen = format!("{}\n", req.uri());
            for (k, v) in req.headers() {
                seen.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
            }
            SEEN.lock().unwrap().push(seen.clone());
            let chunks: Vec<Result<Frame<Bytes>, hyper::Error>> = seen
                .into_bytes()
                .chunks(5)
                .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                .collect();
            StreamBody::new(futures::stream::iter(chunks)).boxed()
        }
        _ => Full::new(Bytes::from(format!(
            "upstream {path} {version} host={host}"
        )))
        .map_err(|n| match n {})
        .boxed(),
    };
    Ok(Response::new(body))
}

async fn start_upstream(cfg: Arc<rustls::ServerConfig>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let acc = tokio_rustls::TlsAcceptor::from(cfg.clone());
            tokio::spawn(async move {
                let Ok(tls) = acc.accept(s).await else { return };
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(
                        TokioIo::new(tls),
                        hyper::service::service_fn(upstream_service),
                    )
                    .await;
            });
        }
    });
    addr
}

/// The "sandbox side": every connection to `front` was made to api.example.test:443.
fn serve_front(front: TcpListener, interceptor: Arc<Interceptor>) {
    tokio::spawn(async move {
        loop {
            let (s, _) = front.accept().await.unwrap();
            tokio::spawn(
                interceptor
                    .clone()
                    .serve_tls(s, "api.example.test".into(), 443, None),
            );
        }
    });
}

struct Fixture {
    _dir: tempfile::TempDir,
    ca: Arc<CertAuthority>,
    front: SocketAddr,
    /// Plain HTTP made to api.example.test:80.
    plain: SocketAddr,
    events: Events,
}

async fn fixture(trust_upstream: bool) -> Fixture {
    fixture_with(trust_upstream, vec![], None).await
}

async fn fixture_with(
    trust_upstream: bool,
    credentials: Vec<cordon_http::WireCredential>,
    dlp: Option<cordon_http::intercept::Dlp>,
) -> Fixture {
    let (up_ca, up_cfg) = upstream_tls(&["api.example.test"]);
    let up = start_upstream(up_cfg).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = Arc::new(CertAuthority::load_or_create(&dir.path().join("ca")).unwrap());
    let events: Events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let rule =
        |name: &str, methods: &[&str], path: &str, action: HttpAction, reason: Option<&str>| {
            HttpRule {
                methods: methods.iter().map(|m| m.to_string()).collect(),
                path: Some(path.into()),
                reason: reason.map(str::to_string),
                ..HttpRule::new(name, "api.example.test".parse().unwrap(), action)
            }
        };
    let interceptor = Arc::new(
        Interceptor::new(Config {
            ca: ca.clone(),
            rules: vec![
                rule(
                    "no-secrets",
                    &[],
                    "/secret*",
                    HttpAction::Deny,
                    Some("secrets stay home"),
                ),
                rule("reads", &["GET"], "*", HttpAction::Allow, None),
                rule("echo", &["POST"], "/echo", HttpAction::Allow, None),
                rule("sink", &["POST"], "/sink", HttpAction::Allow, None),
                rule("needs-a-person", &["DELETE"], "*", HttpAction::Ask, None),
            ],
            default: HttpAction::Deny,
            upstream_ca_pem: if trust_upstream { vec![up_ca] } else { vec![] },
            connect: Arc::new(move |_host, _port| Box::pin(TcpStream::connect(up))),
            emit: Arc::new(move |e| ev.lock().unwrap().push(e)),
            judge: None,
            asker: None,
            credentials,
            dlp,
        })
        .unwrap(),
    );
    let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front_addr = front.local_addr().unwrap();
    let plain = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let plain_addr = plain.local_addr().unwrap();
    let i = interceptor.clone();
    tokio::spawn(async move {
        loop {
            let (s, _) = plain.accept().await.unwrap();
            tokio::spawn(
                i.clone()
                    .serve_plain(s, "api.example.test".into(), 80, None),
            );
        }
    });
    serve_front(front, interceptor);
    Fixture {
        _dir: dir,
        ca,
        front: front_addr,
        plain: plain_addr,
        events,
    }
}

/// A TLS connection to the front trusting only cordon's CA; returns it and the ALPN chosen.
async fn connect(
    f: &Fixture,
    sni: &str,
    alpn: &[u8],
) -> std::io::Result<(tokio_rustls::client::TlsStream<TcpStream>, Vec<u8>)> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(f.ca.cert_der().clone()).unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![alpn.to_vec()];
    let tcp = TcpStream::connect(f.front).await?;
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await?;
    let alpn = tls.get_ref().1.alpn_protocol().unwrap_or_default().to_vec();
    Ok((tls, alpn))
}

/// An HTTP/1.1 client on a new TLS connection to the front (driven in the background).
async fn h1_sender<B>(f: &Fixture) -> hyper::client::conn::http1::SendRequest<B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (tls, alpn) = connect(f, "api.example.test", b"http/1.1").await.unwrap();
    assert_eq!(alpn, b"http/1.1");
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

/// The fixture with secret scanning on (`deny`) and no credentials.
async fn scanning_fixture() -> Fixture {
    fixture_with(
        true,
        vec![],
        Some(dlp(cordon_policy::DlpAction::Deny, vec![])),
    )
    .await
}

async fn h1(f: &Fixture, req: Request<Full<Bytes>>) -> (u16, String) {
    let mut send = h1_sender(f).await;
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(path)
        .header("host", "api.example.test")
        .body(Full::new(Bytes::new()))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_requests_reach_the_server_over_verified_tls() {
    let f = fixture(true).await;
    let (status, body) = h1(&f, get("/hello?token=abc")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("upstream /hello"), "{body}");
    assert!(body.contains("host=api.example.test"), "{body}");
    let post = Request::post("/echo")
        .header("host", "api.example.test")
        .body(Full::new(Bytes::from_static(b"payload-123")))
        .unwrap();
    assert_eq!(h1(&f, post).await, (200, "payload-123".to_string()));
    let ev = f.events.lock().unwrap();
    let allowed: Vec<&NewEvent> = ev
        .iter()
        .filter(|e| e.action == cordon_events::Action::Allow)
        .collect();
    assert_eq!(allowed.len(), 2, "{ev:?}");
    assert_eq!(allowed[0].rule.as_deref(), Some("reads"));
    // Query values never reach the log.
    let url = allowed[0].detail["url"].as_str().unwrap();
    assert!(
        url.ends_with("/hello?token=…") && !url.contains("abc"),
        "{url}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_from_the_client_works() {
    let f = fixture(true).await;
    let (tls, alpn) = connect(&f, "api.example.test", b"h2").await.unwrap();
    assert_eq!(alpn, b"h2");
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = Request::get("https://api.example.test/hello")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8_lossy(&body);
    assert!(body.starts_with("upstream /hello"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_are_403_naming_the_rule() {
    let f = fixture(true).await;
    let (status, body) = h1(&f, get("/secret/keys")).await;
    assert_eq!(status, 403);
    assert!(
        body.contains("\"no-secrets\"") && body.contains("secrets stay home"),
        "{body}"
    );
    assert!(body.contains("any other route"), "{body}");
    let put = Request::put("/x")
        .header("host", "api.example.test")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, body) = h1(&f, put).await;
    assert_eq!(status, 403);
    assert!(body.contains("\"default\""), "{body}");
    // `ask` is not available yet: refused, not waved through.
    let del = Request::delete("/x")
        .header("host", "api.example.test")
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(h1(&f, del).await.0, 403);
    let ev = f.events.lock().unwrap();
    assert_eq!(
        ev.iter()
            .filter(|e| e.action == cordon_events::Action::Deny)
            .count(),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_host_on_the_connection_is_refused() {
    let f = fixture(true).await;
    let req = Request::get("/hello")
        .header("host", "evil.example")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, body) = h1(&f, req).await;
    assert_eq!(status, 421, "{body}");
    // A TLS name other than the connection's gets no certificate at all.
    assert!(connect(&f, "evil.example", b"http/1.1").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_stream_without_buffering() {
    let f = fixture(true).await;
    let mut send = h1_sender(&f).await;
    let start = Instant::now();
    let resp = send.send_request(get("/sse")).await.unwrap();
    let mut body = resp.into_body();
    let first = loop {
        match body.frame().await {
            Some(Ok(fr)) => {
                if let Ok(d) = fr.into_data() {
                    break d;
                }
            }
            other => panic!("stream ended early: {other:?}"),
        }
    };
    let first_at = start.elapsed();
    assert_eq!(&first[..], b"data: 0\n\n");
    // The whole stream takes 1.4 s; the first event must arrive long before that.
    assert!(
        first_at < Duration::from_millis(600),
        "first event after {first_at:?}"
    );
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(&rest[..], b"data: 1\n\ndata: 2\n\n");
    assert!(start.elapsed() >= Duration::from_millis(1300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unverifiable_server_is_a_502_never_a_pass() {
    let f = fixture(false).await;
    let (status, body) = h1(&f, get("/hello")).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("did not verify"), "{body}");
    assert!(body.contains("upstream_ca"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_are_spliced_after_the_101() {
    let f = fixture(true).await;
    let (tls, _) = connect(&f, "api.example.test", b"http/1.1").await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn.with_upgrades());
    let req = Request::get("/ws")
        .header("host", "api.example.test")
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 101);
    let io = hyper::upgrade::on(resp).await.unwrap();
    let mut io = TokioIo::new(io);
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for msg in [&b"ping"[..], b"second message"] {
        io.write_all(msg).await.unwrap();
        let mut buf = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(5), io.read_exact(&mut buf))
            .await
            .expect("echo in time")
            .unwrap();
        assert_eq!(&buf[..], msg);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_carry_bytes_and_time_to_the_last_byte() {
    let f = fixture(true).await;
    let (status, body) = h1(&f, get("/hello")).await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ev = f.events.lock().unwrap();
    let e = ev
        .iter()
        .find(|e| e.action == cordon_events::Action::Allow)
        .expect("an allow event");
    // The answer's body and its head (at least a status line and the blank line); a GET's head
    // went up, though it has no body.
    let down = e.detail["bytes_down"].as_u64().unwrap_or(0);
    assert!(
        down >= (body.len() + "HTTP/1.1 200 OK\r\n\r\n".len()) as u64,
        "{e:?}"
    );
    assert!(
        e.detail["bytes_up"]
            .as_u64()
            .is_some_and(|n| n >= "GET /hello HTTP/1.1\r\n\r\n".len() as u64),
        "{e:?}"
    );
    assert!(e.detail.get("latency_ms").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_second_host_rides_an_allowed_connection() {
    let f = fixture(true).await;
    // Absolute-form naming the right host, with a Host header naming another.
    let req = Request::get("https://api.example.test/hello")
        .header("host", "evil.example")
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(h1(&f, req).await.0, 421);
    // Two Host headers.
    let req = Request::get("/hello")
        .header("host", "api.example.test")
        .header("host", "evil.example")
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(h1(&f, req).await.0, 421);
    // HTTP/2: :authority right, a host header wrong.
    let (tls, _) = connect(&f, "api.example.test", b"h2").await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = Request::get("https://api.example.test/hello")
        .header("host", "evil.example")
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(send.send_request(req).await.unwrap().status(), 421);
    // What goes upstream carries the connection's host, never the client's own header.
    let req = Request::get("https://api.example.test/hello")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("host=api.example.test"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_paths_meet_the_rules_as_the_server_reads_them() {
    let f = fixture(true).await;
    for path in ["/%73ecret", "//secret", "/x/../secret", "/./secret"] {
        let (status, body) = h1(&f, get(path)).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(body.contains("no-secrets"), "{path}: {body}");
    }
    for path in ["/%2fsecret", "/a%5csecret", "/%00"] {
        assert_eq!(h1(&f, get(path)).await.0, 400, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_websocket_may_take_a_connection_over() {
    let f = fixture(true).await;
    let req = Request::get("/ws")
        .header("host", "api.example.test")
        .header("connection", "upgrade")
        .header("upgrade", "h2c")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, body) = h1(&f, req).await;
    assert_ne!(status, 101, "{body}");
}

// Credentials at the wire and secret scanning.
#[path = "intercept/credentials.rs"]
mod credentials;
use credentials::dlp;

/// A client's keep-alive connections keep their upstream ones, as many as it has: 64
/// connections send a request each, then, with all 64 upstream connections idle at once, a
/// second each. The upstream sees 64 connections, not one more for each the pool let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_clients_keep_their_upstream_connections() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const CLIENTS: usize = 64;
    // An HTTP/1.1-only server (an h2 one would carry every request on one connection) that
    // answers once all CLIENTS requests are in: each round holds CLIENTS connections at once.
    let (up_ca, up_cfg) = support::upstream_tls(&["api.example.test"], &[b"http/1.1"]);
    let gate = Arc::new(tokio::sync::Barrier::new(CLIENTS));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let (acc, gate) = (
                tokio_rustls::TlsAcceptor::from(up_cfg.clone()),
                gate.clone(),
            );
            tokio::spawn(async move {
                let Ok(tls) = acc.accept(s).await else { return };
                let svc = hyper::service::service_fn(move |_req| {
                    let gate = gate.clone();
                    async move {
                        gate.wait().await;
                        Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    let connects = Arc::new(AtomicUsize::new(0));
    let counted = connects.clone();
    let dir = tempfile::tempdir().unwrap();
    let ca = Arc::new(CertAuthority::load_or_create(&dir.path().join("ca")).unwrap());
    let interceptor = Arc::new(
        Interceptor::new(Config {
            ca: ca.clone(),
            rules: vec![HttpRule::new(
                "reads",
                "api.example.test".parse().unwrap(),
                HttpAction::Allow,
            )],
            default: HttpAction::Deny,
            upstream_ca_pem: vec![up_ca],
            connect: Arc::new(move |_host, _port| {
                counted.fetch_add(1, Ordering::SeqCst);
                Box::pin(TcpStream::connect(up))
            }),
            emit: Arc::new(|_| {}),
            judge: None,
            asker: None,
            credentials: vec![],
            dlp: None,
        })
        .unwrap(),
    );
    let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let f = Fixture {
        _dir: dir,
        ca,
        front: front.local_addr().unwrap(),
        plain: front.local_addr().unwrap(),
        events: Arc::new(Mutex::new(Vec::new())),
    };
    serve_front(front, interceptor);
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(h1_sender::<Full<Bytes>>(&f).await);
    }
    for round in 1..=2 {
        let answers = futures::future::join_all(clients.iter_mut().map(|c| async move {
            let resp = c.send_request(get("/")).await.unwrap();
            let status = resp.status().as_u16();
            resp.into_body().collect().await.unwrap();
            status
        }));
        let answers = tokio::time::timeout(Duration::from_secs(60), answers)
            .await
            .expect("every request of the round answered");
        assert!(
            answers.iter().all(|s| *s == 200),
            "round {round}: {answers:?}"
        );
        // Each upstream connection goes back to the pool from a task of its own.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        connects.load(Ordering::SeqCst),
        CLIENTS,
        "one upstream connection per client connection"
    );
}
