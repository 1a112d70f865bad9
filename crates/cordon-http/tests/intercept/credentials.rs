// Credentials at the wire and secret scanning, through the interceptor (part of
// tests/intercept.rs: its fixtures and helpers).

use super::*;

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

pub(super) fn dlp(
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
