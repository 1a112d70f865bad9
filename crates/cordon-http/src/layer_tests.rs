use std::sync::Mutex;

use cordon_policy::{HostRule, JudgePlan};

use super::*;

fn plan() -> Plan {
    serde_json::from_value(serde_json::json!({"project": "/p", "home": "/h"})).unwrap()
}

#[test]
fn network_allows_follow_the_http_rules_one_per_port() {
    let mut p = plan();
    p.http.rules.push(HttpRule::new(
        "no-uploads",
        "api.example.test".parse().unwrap(),
        HttpAction::Deny,
    ));
    p.network.allow.push(HostRule {
        host: "api.example.test".parse().unwrap(),
        ports: vec![443, 8443],
        origin: "user.toml:3".into(),
        expires: None,
        programs: Default::default(),
    });
    let r = rules(&p);
    assert_eq!(r.len(), 3);
    assert_eq!(r[0].name, "no-uploads");
    assert_eq!(
        (r[1].port, r[1].action, r[1].origin.to_string().as_str()),
        (Some(443), HttpAction::Allow, "user.toml:3")
    );
    assert_eq!(r[1].name, "network.allow api.example.test (user.toml:3)");
    assert_eq!(r[2].port, Some(8443));
}

#[test]
fn scanning_knows_credentials_and_host_secrets_unless_off() {
    let mut p = plan();
    let cred = WireCredential {
        programs: Default::default(),
        name: "api".into(),
        placeholder: "cordon-0123456789abcdef".into(),
        real: "real-0123456789abcdefghij".into(),
        hosts: vec!["api.example.test".parse().unwrap()],
        slot: cordon_policy::CredentialSlot::Query { name: "key".into() },
        inject: false,
    };
    p.dlp.action = DlpAction::Deny;
    let d = scanning(&p, std::slice::from_ref(&cred), Vec::new()).unwrap();
    assert_eq!(d.action, DlpAction::Deny);
    assert!(
        !d.scanner
            .scan(cred.real.as_bytes(), dlp::Place::Body)
            .is_empty()
    );
    p.dlp.action = DlpAction::Off;
    assert!(scanning(&p, &[cred], Vec::new()).is_none());
}

#[test]
fn a_judge_without_its_key_is_reported_and_asked_without_one() {
    let events: Arc<Mutex<Vec<NewEvent>>> = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let emit: Emit = Arc::new(move |e| ev.lock().unwrap().push(e));
    let j = JudgePlan {
        policy: "reads only".into(),
        api: JudgeApi::OpenAi,
        url: "http://127.0.0.1:9/v1".into(),
        model: "m".into(),
        credential: Some("CORDON_TEST_SURELY_UNSET_JUDGE_KEY".into()),
        timeout_ms: 1500,
        on_error: JudgeOnError::Ask,
        max_body_bytes: 1 << 40,
        origin: "test".into(),
    };
    let cfg = judge_config(&j, &emit);
    assert_eq!(cfg.api_key, None);
    assert_eq!(cfg.api, judge::Api::OpenAi);
    assert_eq!(cfg.on_error, judge::OnError::Ask);
    assert_eq!(cfg.timeout, Duration::from_millis(1500));
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 1);
    assert!(
        events[0]
            .reason
            .contains("$CORDON_TEST_SURELY_UNSET_JUDGE_KEY")
    );
}

#[test]
fn an_unreadable_upstream_ca_stops_the_layer_before_the_sandbox_starts() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Arc::new(CertAuthority::load_or_create(&dir.path().join("ca")).unwrap());
    let mut p = plan();
    p.tls.upstream_ca.push(dir.path().join("missing.pem"));
    let connect: ConnectFn = Arc::new(|h, port| {
        Box::pin(async move { tokio::net::TcpStream::connect((h, port)).await })
    });
    let err = HttpLayer::from_plan(&p, inputs(ca, Arc::new(|_| {}), connect, None)).unwrap_err();
    assert!(matches!(err, HttpLayerError::UpstreamCa { .. }), "{err}");
    assert!(err.to_string().contains("missing.pem"));
}

#[tokio::test]
async fn while_the_audit_log_cannot_be_written_no_request_is_decided() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let ca = Arc::new(CertAuthority::load_or_create(&dir.path().join("ca")).unwrap());
    let mut p = plan();
    p.network.allow.push(HostRule {
        host: "api.example.test".parse().unwrap(),
        ports: vec![80],
        origin: "user.toml:1".into(),
        expires: None,
        programs: Default::default(),
    });
    let dialed = Arc::new(AtomicBool::new(false));
    let d = dialed.clone();
    let connect: ConnectFn = Arc::new(move |_, _| {
        d.store(true, Ordering::SeqCst);
        Box::pin(async { Err(std::io::Error::other("no upstream in this test")) })
    });
    let events: Arc<Mutex<Vec<NewEvent>>> = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let emit: Emit = Arc::new(move |e| ev.lock().unwrap().push(e));
    let unwritable = Some(cordon_events::AuditHealth::fixed(false));
    let layer = HttpLayer::from_plan(&p, inputs(ca, emit, connect, unwritable)).unwrap();
    let (mut client, server) = tokio::io::duplex(64 << 10);
    tokio::spawn(async move {
        layer
            .serve_plain(server, "api.example.test".into(), 80, None)
            .await
    });
    client
        .write_all(b"GET /x HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("audit log cannot be written"), "{answer}");
    assert!(!dialed.load(Ordering::SeqCst), "nothing may go upstream");
    let events = events.lock().unwrap();
    assert!(
        events.iter().any(|e| e.action == EvAction::Deny
            && e.rule.as_deref() == Some(cordon_events::AUDIT_UNWRITABLE)),
        "{events:?}"
    );
}

/// Found by the soak: an agent killed while its request waited for the upstream's answer left
/// a request the upstream saw and the audit log did not (the event went out with the answer).
#[tokio::test]
async fn a_request_let_out_is_logged_when_the_sandbox_leaves_before_the_answer() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let ca = Arc::new(CertAuthority::load_or_create(&dir.path().join("ca")).unwrap());
    let mut p = plan();
    p.network.allow.push(HostRule {
        host: "api.example.test".parse().unwrap(),
        ports: vec![80],
        origin: "user.toml:1".into(),
        expires: None,
        programs: Default::default(),
    });
    // An upstream that reads the request and never answers.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = upstream.local_addr().unwrap();
    let (seen_tx, seen_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut s, _) = upstream.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0);
            head.extend_from_slice(&buf[..n]);
        }
        let _ = seen_tx.send(());
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(s);
    });
    let connect: ConnectFn =
        Arc::new(move |_, _| Box::pin(async move { tokio::net::TcpStream::connect(at).await }));
    let events: Arc<Mutex<Vec<NewEvent>>> = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let emit: Emit = Arc::new(move |e| ev.lock().unwrap().push(e));
    let layer = HttpLayer::from_plan(&p, inputs(ca, emit, connect, None)).unwrap();
    let (mut client, server) = tokio::io::duplex(64 << 10);
    tokio::spawn(async move {
        layer
            .serve_plain(server, "api.example.test".into(), 80, None)
            .await
    });
    client
        .write_all(b"GET /killed-mid-request HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), seen_rx)
        .await
        .unwrap()
        .unwrap();
    drop(client);
    let logged = async {
        loop {
            let found = events.lock().unwrap().iter().any(|e| {
                e.action == EvAction::Allow
                    && e.detail.get("url").and_then(|v| v.as_str())
                        == Some("http://api.example.test/killed-mid-request")
                    && e.detail.get("incomplete") == Some(&serde_json::Value::Bool(true))
            });
            if found {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(10), logged)
            .await
            .is_ok(),
        "{:?}",
        events.lock().unwrap()
    );
}

/// The layer's inputs with no credentials, secrets or broker.
fn inputs(
    ca: Arc<CertAuthority>,
    emit: Emit,
    connect: ConnectFn,
    audit: Option<cordon_events::AuditHealth>,
) -> Inputs {
    Inputs {
        ca,
        ask: None,
        credentials: Vec::new(),
        host_secrets: Vec::new(),
        emit,
        connect,
        audit,
    }
}
