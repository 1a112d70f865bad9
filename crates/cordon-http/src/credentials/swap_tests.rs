use cordon_policy::CredentialSlot;

use super::*;

const REAL: &str = "real-value-0123456789";
const PH: &str = "cordon-0123456789abcd";

fn cred(slot: CredentialSlot, inject: bool) -> WireCredential {
    WireCredential {
        programs: Default::default(),
        name: "api".into(),
        placeholder: PH.into(),
        real: REAL.into(),
        hosts: vec!["api.example.test".parse().unwrap()],
        slot,
        inject,
    }
}

fn header() -> CredentialSlot {
    CredentialSlot::Header {
        name: "x-api-key".into(),
        format: "{}".into(),
    }
}

fn parts(uri: &str, headers: &[(&str, &str)]) -> hyper::http::request::Parts {
    let mut b = hyper::Request::builder().uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}

#[test]
fn the_placeholder_becomes_the_value_in_its_header_to_its_hosts() {
    let mut p = parts("https://api.example.test/x", &[("x-api-key", PH)]);
    let sent = swap(
        &[cred(header(), false)],
        &mut p,
        "api.example.test",
        None,
        b"",
    )
    .unwrap();
    assert_eq!(p.headers["x-api-key"], REAL);
    assert_eq!(sent, vec![(REAL.to_string(), PH.to_string())]);
}

#[test]
fn a_placeholder_anywhere_else_is_a_leak() {
    let c = [cred(header(), false)];
    let leak = |uri: &str, h: &[(&str, &str)], host: &str, body: &[u8]| {
        swap(&c, &mut parts(uri, h), host, None, body)
            .unwrap_err()
            .1
    };
    assert_eq!(
        leak("https://evil.test/", &[("x-api-key", PH)], "evil.test", b""),
        "to evil.test, which is not one of its hosts"
    );
    assert_eq!(
        leak(
            "https://api.example.test/",
            &[("authorization", PH)],
            "api.example.test",
            b""
        ),
        "in header authorization (only x-api-key may carry it)"
    );
    assert_eq!(
        leak(
            &format!("https://api.example.test/{PH}"),
            &[],
            "api.example.test",
            b""
        ),
        "in the URL path"
    );
    assert_eq!(
        leak(
            "https://api.example.test/",
            &[],
            "api.example.test",
            PH.as_bytes()
        ),
        "in the body"
    );
    assert_eq!(
        leak(
            "http://api.example.test/",
            &[("x-api-key", PH)],
            "api.example.test",
            b""
        ),
        "over plain HTTP (a credential only travels over TLS)"
    );
}

#[test]
fn a_query_credential_swaps_only_the_whole_value_of_its_parameter() {
    let c = [cred(CredentialSlot::Query { name: "key".into() }, false)];
    let mut p = parts(&format!("https://api.example.test/x?key={PH}&page=1"), &[]);
    swap(&c, &mut p, "api.example.test", None, b"").unwrap();
    assert_eq!(p.uri.query(), Some(&*format!("key={REAL}&page=1")));
    let mut p = parts(&format!("https://api.example.test/x?other={PH}"), &[]);
    assert_eq!(
        swap(&c, &mut p, "api.example.test", None, b"")
            .unwrap_err()
            .1,
        "in query parameter other (only key may carry it)"
    );
    let mut p = parts("https://api.example.test/x", &[("x-api-key", PH)]);
    assert_eq!(
        swap(&c, &mut p, "api.example.test", None, b"")
            .unwrap_err()
            .1,
        "in header x-api-key (only query parameter key may carry it)"
    );
}

#[test]
fn an_injected_credential_is_set_on_every_request_to_its_hosts() {
    let c = [cred(header(), true)];
    let mut p = parts("https://api.example.test/x", &[]);
    swap(&c, &mut p, "api.example.test", None, b"").unwrap();
    assert_eq!(p.headers["x-api-key"], REAL);
    let mut p = parts("https://other.test/x", &[]);
    swap(&c, &mut p, "other.test", None, b"").unwrap();
    assert!(p.headers.get("x-api-key").is_none());
}

#[test]
fn query_values_are_percent_encoded() {
    assert_eq!(crate::encoding::percent_encode(b"a b/c~d"), "a%20b%2Fc~d");
}

fn two_headers() -> CredentialSlot {
    CredentialSlot::Headers(vec![
        cordon_policy::HeaderSlot {
            name: "x-api-key".into(),
            format: "{}".into(),
        },
        cordon_policy::HeaderSlot {
            name: "authorization".into(),
            format: "Bearer {}".into(),
        },
    ])
}

#[test]
fn a_credential_in_two_headers_is_swapped_in_both_and_nowhere_else() {
    let c = [cred(two_headers(), false)];
    let mut p = parts(
        "https://api.example.test/x",
        &[
            ("x-api-key", PH),
            ("authorization", &format!("Bearer {PH}")),
        ],
    );
    swap(&c, &mut p, "api.example.test", None, b"").unwrap();
    assert_eq!(p.headers["x-api-key"], REAL);
    assert_eq!(p.headers["authorization"], format!("Bearer {REAL}"));
    let err = swap(
        &c,
        &mut parts("https://api.example.test/", &[("cookie", PH)]),
        "api.example.test",
        None,
        b"",
    )
    .unwrap_err();
    assert_eq!(
        err.1,
        "in header cookie (only x-api-key or authorization may carry it)"
    );
    // Injected: each header in its own format.
    let c = [cred(two_headers(), true)];
    let mut p = parts("https://api.example.test/x", &[]);
    swap(&c, &mut p, "api.example.test", None, b"").unwrap();
    assert_eq!(p.headers["x-api-key"], REAL);
    assert_eq!(p.headers["authorization"], format!("Bearer {REAL}"));
}
