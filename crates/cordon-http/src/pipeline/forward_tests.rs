use super::*;

#[test]
fn the_upstream_uri_is_the_connections_host_and_port() {
    let u = upstream_uri("https", "api.example.test", 443, "/v1/x?a=1").unwrap();
    assert_eq!(u.to_string(), "https://api.example.test/v1/x?a=1");
    let u = upstream_uri("https", "api.example.test", 8443, "/").unwrap();
    assert_eq!(u.to_string(), "https://api.example.test:8443/");
    let u = upstream_uri("http", "api.example.test", 80, "/p").unwrap();
    assert_eq!(u.to_string(), "http://api.example.test/p");
    let u = upstream_uri("http", "::1", 8080, "/").unwrap();
    assert_eq!(u.to_string(), "http://[::1]:8080/");
    assert!(upstream_uri("https", "bad host", 443, "/").is_none());
    assert_eq!(authority("::1", 8443, 443), "[::1]:8443");
    assert_eq!(authority("a.test", 443, 443), "a.test");
}

#[test]
fn only_a_websocket_upgrade_goes_on_and_the_sandboxs_host_never() {
    let mut h = HeaderMap::new();
    h.insert("host", "evil.test".parse().unwrap());
    h.insert("upgrade", "h2c".parse().unwrap());
    h.insert("connection", "upgrade, keep-alive".parse().unwrap());
    h.insert("te", "trailers".parse().unwrap());
    h.insert("accept", "*/*".parse().unwrap());
    assert_eq!(websocket_upgrade(&h), None);
    clean_headers(&mut h, None);
    let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["accept"]);

    let mut h = HeaderMap::new();
    h.insert("upgrade", " WebSocket ".parse().unwrap());
    let ws = websocket_upgrade(&h);
    assert!(ws.is_some());
    clean_headers(&mut h, ws.as_ref());
    assert_eq!(h["connection"], "upgrade");
    assert_eq!(h["upgrade"], " WebSocket ");
}
