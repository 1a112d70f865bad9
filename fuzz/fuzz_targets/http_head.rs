//! The HTTP layer's request path on arbitrary bytes from the sandbox: one plain connection
//! served by the real `Interceptor` (hyper reads the head, HTTP/1.1 or an HTTP/2 preface; then
//! admit — path normalisation, the Host check — decide with a fixed, realistic rule set,
//! the body read, secret scanning and credential swapping, forward). The connect always
//! fails, so nothing leaves. The first byte picks the connection's host and port.
//! Never a panic, every connection ends, and the real credential value appears in neither
//! the response nor an event unless the input itself held it.
#![no_main]

use std::io;
use std::sync::{Arc, Mutex, OnceLock};

use cordon_http::dlp::{Exemption, Scanner};
use cordon_http::intercept::Dlp;
use cordon_http::{CertAuthority, Config, ConnectFn, Interceptor, WireCredential};
use cordon_policy::{CredentialSlot, DlpAction, HostPattern, HttpAction, HttpRule};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const REAL: &str = "sk-real-4f9a0c6b1e2d7f3a8b5c";
const PLACEHOLDER: &str = "cordon-ph-0123456789abcdef";
const HOSTS: [(&str, u16); 5] = [
    ("api.anthropic.com", 443),
    ("registry.npmjs.org", 443),
    ("api.example.test", 443),
    ("evil.test", 80),
    ("upload.example.test", 8080),
];

fn host(s: &str) -> HostPattern {
    s.parse().expect("a valid host pattern")
}

/// The kind of rule set a policy file has: first match wins, default deny.
fn rules() -> Vec<HttpRule> {
    vec![
        HttpRule {
            methods: vec!["POST".into()],
            path: Some("/v1/messages*".into()),
            headers: vec![("anthropic-version".into(), "2023-*".into())],
            ..HttpRule::new("anthropic", host("api.anthropic.com"), HttpAction::Allow)
        },
        HttpRule {
            path: Some("/-/npm/v1/security/*".into()),
            reason: Some("audits go nowhere".into()),
            ..HttpRule::new("no-audit", host("*.npmjs.org"), HttpAction::Deny)
        },
        HttpRule {
            methods: vec!["GET".into(), "HEAD".into()],
            ..HttpRule::new("npm-read", host("*.npmjs.org"), HttpAction::Allow)
        },
        HttpRule {
            query: Some("*token=*".into()),
            ..HttpRule::new("no-token-query", host("*"), HttpAction::Deny)
        },
        HttpRule {
            port: Some(443),
            path: Some("/v?/items/*".into()),
            max_body: Some(4096),
            ..HttpRule::new("items", host("api.example.test"), HttpAction::Allow)
        },
        HttpRule {
            methods: vec!["PUT".into(), "POST".into()],
            ..HttpRule::new("uploads", host("upload-*.example.test"), HttpAction::Judge)
        },
        HttpRule::new("uploads-ask", host("upload.example.test"), HttpAction::Ask),
    ]
}

struct Env {
    rt: tokio::runtime::Runtime,
    interceptor: Arc<Interceptor>,
    events: Arc<Mutex<Vec<String>>>,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("cordon-fuzz-http-{}", std::process::id()));
        let ca = CertAuthority::load_or_create(&dir).expect("the CA");
        let connect: ConnectFn = Arc::new(|_host, _port| {
            Box::pin(async { Err(io::Error::new(io::ErrorKind::ConnectionRefused, "fuzzing")) })
        });
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let credential = WireCredential {
            programs: Default::default(),
            name: "api".into(),
            placeholder: PLACEHOLDER.into(),
            real: REAL.into(),
            hosts: vec![host("api.example.test")],
            slot: CredentialSlot::Header {
                name: "authorization".into(),
                format: "Bearer {}".into(),
            },
            inject: false,
        };
        let exemptions: Vec<Exemption> = cordon_policy::built_in_dlp_allow()
            .iter()
            .map(Exemption::from)
            .collect();
        let cfg = Config {
            ca: Arc::new(ca),
            rules: rules(),
            default: HttpAction::Deny,
            upstream_ca_pem: Vec::new(),
            connect,
            emit: Arc::new(move |e| sink.lock().unwrap().push(format!("{e:?}"))),
            judge: None,
            asker: None,
            credentials: vec![credential],
            dlp: Some(Dlp {
                scanner: Arc::new(Scanner::new(Vec::new(), exemptions)),
                action: DlpAction::Deny,
                max_body: 1 << 16,
            }),
        };
        Env {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime"),
            interceptor: Arc::new(Interceptor::new(cfg).expect("the interceptor")),
            events,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, request)) = data.split_first() else {
        return;
    };
    let e = env();
    let (name, port) = HOSTS[usize::from(pick) % HOSTS.len()];
    e.events.lock().unwrap().clear();
    let response = e.rt.block_on(async {
        let (mut sandbox, ours) = tokio::io::duplex(1 << 16);
        let served = tokio::spawn(
            e.interceptor
                .clone()
                .serve_plain(ours, name.into(), port, None),
        );
        // A server that answers before reading everything may close first: not a failure.
        let _ = sandbox.write_all(request).await;
        let _ = sandbox.shutdown().await;
        let mut response = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            sandbox.read_to_end(&mut response),
        );
        assert!(read.await.is_ok(), "the connection did not end");
        served
            .await
            .expect("the connection's task ended without a panic");
        response
    });
    let held = |hay: &[u8]| hay.windows(REAL.len()).any(|w| w == REAL.as_bytes());
    if !held(request) {
        assert!(!held(&response), "the real value reached the sandbox");
        for ev in e.events.lock().unwrap().iter() {
            assert!(!ev.contains(REAL), "the real value is in an event: {ev}");
        }
    }
});
