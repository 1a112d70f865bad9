use super::*;

pub(super) fn exchange<'a>(host: &'a str, method: &str, path: &str, query: &str) -> Exchange<'a> {
    Exchange {
        conn: Conn {
            host,
            port: 443,
            scheme: "https",
            owner: None,
        },
        started: Instant::now(),
        method: method.into(),
        path: path.into(),
        query: query.into(),
        target: if query.is_empty() {
            path.into()
        } else {
            format!("{path}?{query}")
        },
        url: format!("https://{host}{path}"),
        headers: Vec::new(),
        body_len: None,
    }
}

#[test]
fn queries_are_shown_without_values() {
    assert_eq!(redact_query("key=secret&page=2&flag"), "?key=…&page=…&…");
    assert_eq!(redact_query(""), "");
}

#[test]
fn events_name_the_request_without_query_values() {
    let ex = exchange("api.example.test", "GET", "/v1/x", "key=sk-live-1&page=2");
    assert_eq!(ex.label(), "GET https://api.example.test/v1/x?key=…&page=…");
    let e = ex.event(EvAction::Deny, 403, "no rule allows it", "default");
    assert_eq!(
        e.reason,
        "GET https://api.example.test/v1/x?key=…&page=… → 403: no rule allows it"
    );
    let c = ex.credentials_event(EvAction::Deny, "carries a secret", "dlp:x");
    assert_eq!(c.layer, Layer::Credentials);
    assert!(!c.reason.contains("sk-live-1"));
}

#[test]
fn size_hints_count_held_bytes() {
    let h = plus_held(hyper::body::SizeHint::with_exact(10), 5);
    assert_eq!((h.lower(), h.upper()), (15, Some(15)));
}
