use super::*;

#[test]
fn paths_are_matched_as_servers_read_them() {
    for (raw, want) in [
        ("/secret", "/secret"),
        ("/%73ecret", "/secret"),
        ("//secret", "/secret"),
        ("/x/../secret", "/secret"),
        ("/./secret", "/secret"),
        ("/a/b/", "/a/b/"),
        ("/", "/"),
        ("/caf%C3%A9", "/café"),
    ] {
        assert_eq!(normalize_url_path(raw).as_deref(), Ok(want), "{raw}");
    }
    for bad in [
        "/%2fsecret",
        "/%2Fsecret",
        "/a%5cb",
        "/a\\b",
        "/%00",
        "/..",
        "/a/../../x",
        "/%zz",
        "/%4",
    ] {
        assert!(normalize_url_path(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_request_names_the_connections_host() {
    assert!(same_host(
        "api.example.test",
        "api.example.test",
        443,
        "https"
    ));
    assert!(same_host(
        "API.example.test:443",
        "api.example.test",
        443,
        "https"
    ));
    assert!(!same_host(
        "api.example.test:8443",
        "api.example.test",
        443,
        "https"
    ));
    assert!(!same_host("evil.test", "api.example.test", 443, "https"));
    assert!(same_host("x.test:8080", "x.test", 8080, "http"));
    assert!(!same_host("x.test:zz", "x.test", 80, "http"));
}

#[test]
fn another_host_or_two_hosts_are_misdirected() {
    let conn = Conn {
        host: "api.example.test",
        port: 443,
        scheme: "https",
        owner: None,
    };
    let req = |hosts: &[&str]| {
        let mut b = Request::builder().uri("/x");
        for h in hosts {
            b = b.header("host", *h);
        }
        b.body(()).unwrap()
    };
    assert_eq!(misdirected(&req(&["api.example.test"]), conn), None);
    assert_eq!(misdirected(&req(&[]), conn), None);
    assert_eq!(
        misdirected(&req(&["evil.test"]), conn).as_deref(),
        Some("evil.test")
    );
    assert_eq!(
        misdirected(&req(&["api.example.test", "api.example.test"]), conn).as_deref(),
        Some("two Host headers")
    );
    let absolute = Request::builder()
        .uri("https://evil.test/x")
        .body(())
        .unwrap();
    assert_eq!(misdirected(&absolute, conn).as_deref(), Some("evil.test"));
    assert_eq!(port_suffix("https", 443), "");
    assert_eq!(port_suffix("http", 8080), ":8080");
}
