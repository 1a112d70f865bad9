//! Layer 1b's added latency per request, in-process: a keep-alive HTTP/1.1 client POSTs
//! bodies through the interceptor (over TLS with cordon's CA, as the sandbox's clients do) to a
//! local HTTPS server that reads the whole body and answers — the
//! plain path, and with a credential swapped in and secret scanning on — interleaved in the
//! same run. `cargo bench -p cordon-http --bench forward` prints a table.

#[path = "../tests/support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use cordon_http::dlp::{Known, Scanner};
use cordon_http::intercept::Dlp;
use cordon_http::{CertAuthority, Config, Interceptor, WireCredential};
use cordon_policy::{HttpAction, HttpRule};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

const REAL: &str = "real-bench-key-0123456789abcdef";
const PH: &str = "cordon-0123456789abcdef01234567";

/// A local HTTPS server with a CA of its own; returns its address and the CA (PEM).
async fn upstream() -> (SocketAddr, String) {
    let (ca_pem, cfg) = support::upstream_tls(&["bench.test"], &[b"http/1.1"]);
    let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(s) = acceptor.accept(s).await else {
                    return;
                };
                let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let n = req.into_body().collect().await?.to_bytes().len();
                    Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(format!("{n}\n")))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    (a, ca_pem)
}

async fn front(up: SocketAddr, up_ca: String, secure: bool, ca: Arc<CertAuthority>) -> SocketAddr {
    let (credentials, dlp) = if secure {
        (
            vec![WireCredential {
                programs: Default::default(),
                name: "bench".into(),
                placeholder: PH.into(),
                real: REAL.into(),
                hosts: vec!["bench.test".parse().unwrap()],
                slot: cordon_policy::CredentialSlot::Header {
                    name: "x-api-key".into(),
                    format: "{}".into(),
                },
                inject: false,
            }],
            Some(Dlp {
                scanner: Arc::new(Scanner::new(
                    vec![
                        Known {
                            name: "bench".into(),
                            value: REAL.into(),
                            hosts: vec!["bench.test".parse().unwrap()],
                        },
                        Known {
                            name: "DB_PASSWORD".into(),
                            value: "db-bench-Pass-0123456789".into(),
                            hosts: Vec::new(),
                        },
                    ],
                    Vec::new(),
                )),
                action: cordon_policy::DlpAction::Deny,
                max_body: 64 << 10,
            }),
        )
    } else {
        (Vec::new(), None)
    };
    let i = Arc::new(
        Interceptor::new(Config {
            ca,
            rules: vec![HttpRule::new(
                "bench",
                "bench.test".parse().unwrap(),
                HttpAction::Allow,
            )],
            default: HttpAction::Deny,
            upstream_ca_pem: vec![up_ca],
            connect: Arc::new(move |_, _| Box::pin(TcpStream::connect(up))),
            emit: Arc::new(|_| {}),
            judge: None,
            asker: None,
            credentials,
            dlp,
        })
        .unwrap(),
    );
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            tokio::spawn(i.clone().serve_tls(s, "bench.test".into(), 443, None));
        }
    });
    a
}

fn body(size: usize) -> Bytes {
    let words = [
        "the",
        "quick",
        "fox",
        "refactors",
        "a",
        "parser",
        "keeps",
        "tests",
        "green",
    ];
    let mut s = String::from("{\"content\": \"");
    let mut i = 7usize;
    while s.len() < size - 2 {
        i = i.wrapping_mul(2_654_435_761).wrapping_add(1);
        s.push_str(words[i % words.len()]);
        s.push(' ');
    }
    s.truncate(size - 2);
    s.push_str("\"}");
    Bytes::from(s)
}

async fn client(
    front: SocketAddr,
    ca: &CertAuthority,
) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert_der().clone()).unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let s = TcpStream::connect(front).await.unwrap();
    s.set_nodelay(true).unwrap();
    let name = rustls::pki_types::ServerName::try_from("bench.test").unwrap();
    let s = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, s)
        .await
        .unwrap();
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

async fn one(send: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>, b: &Bytes) -> f64 {
    let req = Request::post("/v1/messages")
        .header("host", "bench.test")
        .header("content-type", "application/json")
        .header("x-api-key", PH)
        .body(Full::new(b.clone()))
        .unwrap();
    let t = Instant::now();
    send.ready().await.unwrap();
    let r = send.send_request(req).await.unwrap();
    let status = r.status();
    let body = r.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(status, 200, "{body:?}");
    t.elapsed().as_secs_f64() * 1e6
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p) as usize]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = std::env::temp_dir().join(format!("cordon-bench-{}", std::process::id()));
        let ca = Arc::new(CertAuthority::load_or_create(&dir.join("ca")).unwrap());
        let (up, up_ca) = upstream().await;
        let plain = front(up, up_ca.clone(), false, ca.clone()).await;
        let secure = front(up, up_ca, true, ca.clone()).await;
        println!("| body | plain p50 µs | + credentials & scanning p50 µs | ratio p50 | plain p99 | secured p99 | ratio p99 |");
        println!("|---|---|---|---|---|---|---|");
        for size in [1 << 10, 16 << 10, 64 << 10] {
            let b = body(size);
            let (mut p, mut s) = (client(plain, &ca).await, client(secure, &ca).await);
            let (mut tp, mut ts) = (Vec::new(), Vec::new());
            for i in 0..4200 {
                // Interleaved, so drift and noise hit both paths alike.
                let a = one(&mut p, &b).await;
                let c = one(&mut s, &b).await;
                if i >= 200 {
                    tp.push(a);
                    ts.push(c);
                }
            }
            let (p50, s50) = (pct(&mut tp, 0.5), pct(&mut ts, 0.5));
            let (p99, s99) = (pct(&mut tp, 0.99), pct(&mut ts, 0.99));
            println!(
                "| {} KiB | {p50:.1} | {s50:.1} | {:.3}x | {p99:.1} | {s99:.1} | {:.3}x |",
                size >> 10,
                s50 / p50,
                s99 / p99
            );
        }
        let _ = std::fs::remove_dir_all(dir);
    });
}
