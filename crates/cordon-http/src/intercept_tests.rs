use super::*;
use crate::ca::tests::in_memory as handshake;

fn interceptor(dir: &std::path::Path) -> Interceptor {
    let ca = Arc::new(CertAuthority::load_or_create(dir).unwrap());
    Interceptor::new(Config {
        ca,
        rules: Vec::new(),
        default: HttpAction::Deny,
        upstream_ca_pem: Vec::new(),
        connect: Arc::new(|_, _| Box::pin(async { Err(io::Error::other("no network here")) })),
        emit: Arc::new(|_| {}),
        judge: None,
        asker: None,
        credentials: Vec::new(),
        dlp: None,
    })
    .unwrap()
}

/// A client trusting only `i`'s CA, keeping its sessions for resumption.
fn client(i: &Interceptor) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(i.ca.cert_der().clone()).unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    Arc::new(cfg)
}

#[test]
fn one_tls_config_per_host_resumes_only_that_host_and_checks_every_sni() {
    let dir = tempfile::tempdir().unwrap();
    let i = interceptor(dir.path());
    let both: &[&[u8]] = &[b"h2", b"http/1.1"];
    let a = i.server_config("a.example.test", both).unwrap();
    // Kept per (host, ALPN): the same for a's next connection, another for b or other ALPN.
    assert!(Arc::ptr_eq(
        &a,
        &i.server_config("a.example.test", both).unwrap()
    ));
    let b = i.server_config("b.example.test", both).unwrap();
    assert!(!Arc::ptr_eq(&a, &b));
    let a_h1 = i.server_config("a.example.test", &[b"http/1.1"]).unwrap();
    assert!(!Arc::ptr_eq(&a, &a_h1));
    assert_eq!(a_h1.alpn_protocols, vec![b"http/1.1".to_vec()]);
    let c = client(&i);
    // The first connection is a full handshake; the client's next one resumes it.
    assert!(!handshake(&c, a.clone(), "a.example.test").unwrap());
    assert!(handshake(&c, a.clone(), "a.example.test").unwrap());
    // A connection to a that names b gets no certificate, with a's sessions in the store.
    assert!(handshake(&c, a.clone(), "b.example.test").is_err());
    // b's own connections are full handshakes with b's leaf (the client verifies it).
    assert!(!handshake(&c, b, "b.example.test").unwrap());
    // A client that trusts another CA is still refused on a resumable host.
    let other = tempfile::tempdir().unwrap();
    let stranger = client(&interceptor(other.path()));
    assert!(handshake(&stranger, a, "a.example.test").is_err());
}
