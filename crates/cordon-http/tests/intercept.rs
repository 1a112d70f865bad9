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

// ---- credentials at the wire and secret scanning ------------------------------------------

/// Sample tokens of every shape, built at run time so no real-looking token sits in the
/// source as one string.
fn tokens() -> Vec<(&'static str, String)> {
    let r = |c: &str, n: usize| c.repeat(n);
    vec![
        ("aws-access-key", format!("AKIA{}", r("Q", 16))),
        ("github-token", format!("ghp_{}", r("a1", 18))),
        ("gitlab-token", format!("glpat-{}", r("x", 20))),
        ("slack-token", format!("xoxb-{}", r("1", 24))),
        ("stripe-key", format!("sk_live_{}", r("Z", 24))),
        ("anthropic-key", format!("sk-ant-api03-{}", r("k", 40))),
        ("openai-key", format!("sk-proj-{}", r("p", 48))),
        (
            "private-key",
            format!("-----BEGIN {}PRIVATE KEY-----", "RSA "),
        ),
        (
            "jwt",
            format!("eyJ{}.eyJ{}.{}", r("h", 20), r("p", 20), r("s", 30)),
        ),
    ]
}

fn dlp(
    action: cordon_policy::DlpAction,
    exemptions: Vec<cordon_http::dlp::Exemption>,
) -> cordon_http::intercept::Dlp {
    cordon_http::intercept::Dlp {
        scanner: std::sync::Arc::new(cordon_http::dlp::Scanner::new(
            vec![cordon_http::dlp::Known {
                name: "DB_PASSWORD".into(),
                value: "db-pass-0123456789abcdef".into(),
                hosts: Vec::new(),
            }],
            exemptions,
        )),
        action,
        max_body: 64 << 10,
    }
}

fn post(path: &str, body: impl Into<Bytes>, headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut b = Request::post(path).header("host", "api.example.test");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Full::new(body.into())).unwrap()
}

fn with_header(path: &str, name: &str, value: &str) -> Request<Full<Bytes>> {
    Request::get(path)
        .header("host", "api.example.test")
        .header(name, value)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_caught_in_url_headers_and_body_and_clean_requests_pass() {
    let f = scanning_fixture().await;
    let mut all = tokens();
    all.push(("known:DB_PASSWORD", "db-pass-0123456789abcdef".to_string()));
    for (kind, token) in &all {
        let enc: String = token.replace(' ', "%20");
        let tries = [
            ("URL", get(&format!("/hello?note={enc}"))),
            ("header", with_header("/hello", "x-note", token)),
            (
                "body",
                post(
                    "/echo",
                    format!("{{\"note\": \"{token}\"}}"),
                    &[("content-type", "application/json")],
                ),
            ),
            (
                "gzip body",
                post(
                    "/echo",
                    gzip(format!("note={token}").as_bytes()),
                    &[("content-encoding", "gzip")],
                ),
            ),
        ];
        for (place, req) in tries {
            let (status, body) = h1(&f, req).await;
            assert_eq!(status, 403, "{kind} in the {place} must be refused: {body}");
            assert!(body.contains(kind), "the refusal names the kind: {body}");
            assert!(body.contains("[[dlp.allow]]"), "and the fix: {body}");
            assert!(!body.contains(&token[6..]), "never the secret: {body}");
        }
    }
    let events = f.events.lock().unwrap().clone();
    let refusals: Vec<&NewEvent> = events
        .iter()
        .filter(|e| e.rule.as_deref().is_some_and(|r| r.starts_with("dlp:")))
        .collect();
    assert_eq!(refusals.len(), all.len() * 4, "{events:?}");
    let logged = format!("{events:?}");
    for (_, token) in &all {
        assert!(!logged.contains(&token[6..]), "an event holds a secret");
    }

    // Ordinary traffic: JSON, a base64 image, a lockfile, a long random-looking body.
    let mut png = String::from(
        "{\"image\": \"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    );
    png.push_str(&"QUJD".repeat(4000));
    png.push_str("\"}");
    let lock = r#"{"packages": {"node_modules/left-pad": {"version": "1.3.0", "resolved": "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz", "integrity": "sha512-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQ9Zc+JvMJ7nv7yrYzwk3M5FLAZBd03fV9rH0hwW8rtrG1PQ=="}}}"#;
    let cargo_lock = "[[package]]\nname = \"serde\"\nversion = \"1.0.228\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"9a8e94ea7f378bd32cbbd37198a4a91436180c5bb472411e48b5ec2e2124ae9e\"\n";
    let chat = r#"{"model": "claude-sonnet", "max_tokens": 1024, "messages": [{"role": "user", "content": "Rename the token parser and keep the API key handling as it is; ask-before-delete."}]}"#;
    for body in [png.as_str(), lock, cargo_lock, chat] {
        let (status, echoed) = h1(&f, post("/echo", body.to_string(), &[])).await;
        assert_eq!(status, 200, "false positive on {}", &body[..60]);
        assert_eq!(echoed, body);
    }
    let (status, _) = h1(&f, get("/hello?q=sk-learn+skeleton&page=2")).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_may_go_where_the_policy_says_and_log_lets_them_through() {
    let jwt = tokens().into_iter().find(|(k, _)| *k == "jwt").unwrap().1;
    let exempt = vec![cordon_http::dlp::Exemption {
        kinds: vec!["jwt".into()],
        hosts: vec!["api.example.test".parse().unwrap()],
    }];
    let f = fixture_with(
        true,
        vec![],
        Some(dlp(cordon_policy::DlpAction::Deny, exempt)),
    )
    .await;
    let (status, body) = h1(
        &f,
        with_header("/hello", "authorization", &format!("Bearer {jwt}")),
    )
    .await;
    assert_eq!(status, 200, "an exempted kind goes to its host: {body}");
    let aws = &tokens()[0].1;
    let (status, _) = h1(&f, with_header("/hello", "x-key", aws)).await;
    assert_eq!(status, 403, "other kinds stay refused");

    let f = fixture_with(
        true,
        vec![],
        Some(dlp(cordon_policy::DlpAction::Log, vec![])),
    )
    .await;
    let (status, _) = h1(&f, with_header("/hello", "x-key", aws)).await;
    assert_eq!(status, 200, "log forwards");
    let events = f.events.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| e.action == cordon_events::Action::Log
            && e.rule.as_deref() == Some("dlp:aws-access-key")),
        "{events:?}"
    );

    // `ask` with nobody to ask is a refusal, never a pass.
    let f = fixture_with(
        true,
        vec![],
        Some(dlp(cordon_policy::DlpAction::Ask, vec![])),
    )
    .await;
    let (status, _) = h1(&f, with_header("/hello", "x-key", aws)).await;
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholders_become_real_values_only_where_the_credential_goes() {
    let real_q = "query-real-value-0123456789";
    let ph_q = &format!("cordon-{}", "q".repeat(real_q.len() - 7));
    let real_h = "header-real-value-0123456789";
    let ph_h = &format!("cordon-{}", "h".repeat(real_h.len() - 7));
    assert_eq!((real_q.len(), real_h.len()), (ph_q.len(), ph_h.len()));
    let cred = |name: &str, real: &str, ph: &str, header: &str, query: Option<&str>| {
        cordon_http::WireCredential {
            programs: Default::default(),
            name: name.into(),
            placeholder: ph.into(),
            real: real.into(),
            hosts: vec!["api.example.test".parse().unwrap()],
            slot: match query {
                Some(q) => cordon_policy::CredentialSlot::Query { name: q.into() },
                None => cordon_policy::CredentialSlot::Header {
                    name: header.into(),
                    format: "{}".into(),
                },
            },
            inject: false,
        }
    };
    let f = fixture_with(
        true,
        vec![
            cred("q", real_q, ph_q, "", Some("key")),
            cred("h", real_h, ph_h, "x-api-key", None),
        ],
        Some(dlp(cordon_policy::DlpAction::Deny, vec![])),
    )
    .await;
    let req = Request::get(format!("/headers?key={ph_q}&page=1"))
        .header("host", "api.example.test")
        .header("x-api-key", ph_h)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, body) = h1(&f, req).await;
    assert_eq!(status, 200, "{body}");
    let seen = SEEN.lock().unwrap().clone();
    let got = seen
        .iter()
        .find(|s| s.contains("page=1"))
        .unwrap_or_else(|| panic!("upstream saw {seen:?}"));
    assert!(
        got.contains(&format!("key={real_q}&page=1")),
        "query swapped: {got}"
    );
    assert!(
        got.contains(&format!("x-api-key: {real_h}")),
        "header swapped: {got}"
    );
    assert!(!got.contains("cordon-"), "no placeholder upstream: {got}");
    // The server echoed both real values back, split across 5-byte chunks: the sandbox sees
    // its placeholders, never the values.
    assert!(!body.contains(real_q) && !body.contains(real_h), "{body}");
    assert!(body.contains(ph_q) && body.contains(ph_h), "{body}");

    // Anywhere else, a placeholder is a leak.
    for (req, place) in [
        (
            get(&format!("/headers?other={ph_q}")),
            "query parameter other",
        ),
        (
            with_header("/headers", "x-api-key", ph_q),
            "header x-api-key",
        ),
        (get(&format!("/headers?key={ph_h}")), "URL query"),
        (post("/echo", format!("k={ph_h}"), &[]), "body"),
    ] {
        let (status, body) = h1(&f, req).await;
        assert_eq!(status, 403, "{place}: {body}");
        assert!(body.contains(place), "names where: {body}");
    }
    let events = f.events.lock().unwrap().clone();
    let leaks = events
        .iter()
        .filter(|e| {
            e.rule
                .as_deref()
                .is_some_and(|r| r.starts_with("credential-leak:"))
        })
        .count();
    assert_eq!(leaks, 4, "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_form_a_value_was_sent_in_is_scrubbed_and_cleartext_refused() {
    let real = "basic-real-value-0123456789";
    let ph = &format!("cordon-{}", "b".repeat(real.len() - 7));
    let cred = cordon_http::WireCredential {
        programs: Default::default(),
        name: "b".into(),
        placeholder: ph.clone(),
        real: real.into(),
        hosts: vec!["api.example.test".parse().unwrap()],
        slot: cordon_policy::CredentialSlot::Header {
            name: "authorization".into(),
            format: "Basic x-access-token:{}".into(),
        },
        inject: false,
    };
    let f = fixture_with(true, vec![cred.clone()], None).await;
    let b64 = |s: &str| {
        use std::io::Write;
        let mut out = Vec::new();
        let mut e = base64_encoder(&mut out);
        e.write_all(s.as_bytes()).unwrap();
        drop(e);
        String::from_utf8(out).unwrap()
    };
    // A lowercase scheme is still Basic; the server echoes what it got, base64 and all.
    let (status, body) = h1(
        &f,
        with_header(
            "/headers",
            "authorization",
            &format!("basic {}", b64(&format!("me:{ph}"))),
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let seen = SEEN.lock().unwrap().clone();
    assert!(
        seen.iter().any(|s| s.contains(&format!(
            "authorization: Basic {}",
            b64(&format!("me:{real}"))
        ))),
        "{seen:?}"
    );
    assert!(
        !body.contains(&b64(&format!("me:{real}"))),
        "the echoed base64 form is scrubbed: {body}"
    );
    assert!(body.contains(&b64(&format!("me:{ph}"))), "{body}");
    // `key=PH;q=PH`-style tricks and compressed answers.
    let (status, body) = h1(&f, with_header("/gzip", "authorization", ph)).await;
    assert_eq!(
        status, 502,
        "a compressed answer to a request carrying a credential: {body}"
    );
    let (status, body) = h1(&f, get("/gzip")).await;
    assert_eq!(status, 200, "without a credential it passes: {body}");
    // Over plain HTTP a credential never travels.
    let tcp = TcpStream::connect(f.plain).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let r = send
        .send_request(with_header("/headers", "authorization", ph))
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let body = r.into_body().collect().await.unwrap().to_bytes();
    assert!(
        String::from_utf8_lossy(&body).contains("plain HTTP"),
        "{body:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_credentials_swap_only_a_whole_value() {
    let real = "query-real-value-0123456789";
    let ph = &format!("cordon-{}", "q".repeat(real.len() - 7));
    let cred = cordon_http::WireCredential {
        programs: Default::default(),
        name: "q".into(),
        placeholder: ph.clone(),
        real: real.into(),
        hosts: vec!["api.example.test".parse().unwrap()],
        slot: cordon_policy::CredentialSlot::Query { name: "key".into() },
        inject: false,
    };
    let f = fixture_with(true, vec![cred], None).await;
    let (status, body) = h1(&f, get(&format!("/headers?key={ph};q={ph}"))).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = h1(&f, get(&format!("/headers?key=x{ph}"))).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = h1(&f, get(&format!("/headers?{ph}"))).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        !body.contains(ph.as_str()),
        "a bare item is not echoed in the refusal: {body}"
    );
}

/// A minimal base64 writer for the tests (standard alphabet, padded).
fn base64_encoder(out: &mut Vec<u8>) -> B64<'_> {
    B64 {
        out,
        buf: Vec::new(),
    }
}

struct B64<'a> {
    out: &'a mut Vec<u8>,
    buf: Vec<u8>,
}

impl std::io::Write for B64<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for B64<'_> {
    fn drop(&mut self) {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for c in self.buf.chunks(3) {
            let n = (u32::from(c[0]) << 16)
                | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
                | u32::from(*c.get(2).unwrap_or(&0));
            for i in 0..4 {
                if i <= c.len() {
                    self.out.push(A[((n >> (18 - 6 * i)) & 63) as usize]);
                } else {
                    self.out.push(b'=');
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_is_stopped_before_a_secret_leaves() {
    let f = &scanning_fixture().await;
    let send = |id: &'static str, chunks: Vec<Vec<u8>>| async move {
        let mut s = h1_sender(f).await;
        let stream = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(c)))),
        );
        let req = Request::post("/sink")
            .header("host", "api.example.test")
            .header("x-sink", id)
            .body(StreamBody::new(stream))
            .unwrap();
        let r = s.send_request(req).await.unwrap();
        let status = r.status().as_u16();
        let body = r.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    // The token split across two chunks, after 8 KiB of ordinary text.
    let token = format!("ghp_{}", "k7".repeat(18));
    let mut first = vec![b'x'; 8 << 10];
    first.extend_from_slice(&token.as_bytes()[..20]);
    let mut second = token.as_bytes()[20..].to_vec();
    second.extend(vec![b'y'; 8 << 10]);
    let (status, body) = send("split-token", vec![first, second]).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("github-token"), "{body}");
    let sink = sunk("split-token");
    assert!(
        !String::from_utf8_lossy(&sink).contains("ghp_"),
        "no byte of the token reached the server ({} bytes did)",
        sink.len()
    );
    // A long JWT (its signature far past the scan window) cut where its start is long sent
    // by the window alone: held whole, caught, none of it sent.
    let jwt = format!(
        "eyJ{}.eyJ{}.{}",
        "h".repeat(400),
        "p".repeat(300),
        "s".repeat(60)
    );
    let mut first = b"{\"token\": \"".to_vec();
    first.extend_from_slice(&jwt.as_bytes()[..600]);
    let mut second = jwt.as_bytes()[600..].to_vec();
    second.extend_from_slice(b"\"}");
    let (status, body) = send("long-jwt", vec![first, second]).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("jwt"), "{body}");
    assert!(
        !String::from_utf8_lossy(&sunk("long-jwt")).contains("eyJ"),
        "no byte of the JWT reached the server"
    );
    // A long clean body streams through whole.
    let chunks: Vec<Vec<u8>> = (0..50).map(|i| vec![b'a' + (i % 26) as u8; 4096]).collect();
    let (status, body) = send("clean", chunks).await;
    assert_eq!((status, body.as_str()), (200, "sunk"));
    assert_eq!(sunk("clean").len(), 50 * 4096);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_that_pauses_is_not_held_back() {
    let f = scanning_fixture().await;
    let mut s = h1_sender(&f).await;
    let (tx, rx) =
        futures::channel::mpsc::unbounded::<Result<Frame<Bytes>, std::convert::Infallible>>();
    let req = Request::post("/sink")
        .header("host", "api.example.test")
        .header("x-sink", "paused")
        .body(StreamBody::new(rx))
        .unwrap();
    let pending = tokio::spawn(async move { s.send_request(req).await });
    // One message of unknown length, then the client waits for the server: it arrives
    // (after the short pause that lets a split token show itself), not when the body ends.
    let msg = b"{\"jsonrpc\": \"2.0\", \"id\": 1}\n";
    tx.unbounded_send(Ok(Frame::data(Bytes::from_static(msg))))
        .unwrap();
    let t = Instant::now();
    while sunk("paused").len() < msg.len() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the message was held back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(tx);
    let r = pending.await.unwrap().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(sunk("paused"), msg);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_in_request_trailers_is_stopped() {
    let f = scanning_fixture().await;
    let (tls, _) = connect(&f, "api.example.test", b"h2").await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let token = format!("ghp_{}", "t5".repeat(18));
    let mut trailers = hyper::HeaderMap::new();
    trailers.insert("x-note", token.parse().unwrap());
    let frames = vec![
        Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(b"hello"))),
        Ok(Frame::trailers(trailers)),
    ];
    let req = Request::post("https://api.example.test/sink")
        .header("x-sink", "trailers")
        .body(StreamBody::new(futures::stream::iter(frames)))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 403);
    let events = f.events.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|e| e.rule.as_deref() == Some("dlp:github-token")),
        "{events:?}"
    );
}

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
