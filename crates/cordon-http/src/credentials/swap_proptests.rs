//! Properties of the swap at the wire, over generated requests (proptest; `PROPTEST_CASES`
//! sets how many cases each property runs, 256 by default): whatever the host, the headers,
//! the URL and the body, a request that may go out holds a credential's real value only for
//! its own hosts, in its own slot, over TLS (a refused one is dropped by both callers); for its hosts the placeholder becomes the value and a response echoing the
//! value is scrubbed back to exactly what the sandbox sent.

use cordon_policy::{CredentialSlot, HeaderSlot};
use proptest::prelude::*;

use super::*;
use crate::dlp::Scrubber;

/// Only unreserved characters, so its percent-encoded form is itself.
const REAL: &str = "sk-REAL-9f8e7d6c5b4a3210";
const PH: &str = "cordon-ph-0123456789abcdef";

fn slot() -> impl Strategy<Value = CredentialSlot> {
    let header = |name: &str, format: &str| CredentialSlot::Header {
        name: name.into(),
        format: format.into(),
    };
    prop_oneof![
        Just(header("x-api-key", "{}")),
        Just(header("authorization", "Bearer {}")),
        Just(header("authorization", "Basic user:{}")),
        Just(CredentialSlot::Headers(vec![
            HeaderSlot {
                name: "x-api-key".into(),
                format: "{}".into()
            },
            HeaderSlot {
                name: "authorization".into(),
                format: "Bearer {}".into()
            },
        ])),
        Just(CredentialSlot::Query { name: "key".into() }),
    ]
}

fn credential(slot: CredentialSlot, inject: bool) -> WireCredential {
    WireCredential {
        programs: Default::default(),
        name: "api".into(),
        placeholder: PH.into(),
        real: REAL.into(),
        hosts: vec![
            "api.example.test".parse().unwrap(),
            "*.svc.example.test".parse().unwrap(),
        ],
        slot,
        inject,
    }
}

/// Hosts the credential may go to (in any case, with a trailing dot) and near misses.
fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("api.example.test".to_string()),
        Just("API.Example.TEST.".to_string()),
        Just("a.svc.example.test".to_string()),
        Just("svc.example.test".to_string()),
        Just("evil-api.example.test".to_string()),
        Just("api.example.test.evil.test".to_string()),
        Just("example.test".to_string()),
        "[a-z]{1,8}\\.(test|example\\.test|svc\\.example\\.test)",
    ]
}

/// Text that may hold the placeholder, whole or inside other text.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(PH.to_string()),
        "[a-zA-Z0-9 ._-]{0,12}",
        ("[a-z0-9]{0,6}", "[a-z0-9]{0,6}").prop_map(|(a, b)| format!("{a}{PH}{b}")),
    ]
}

fn header_value() -> impl Strategy<Value = String> {
    prop_oneof![
        text(),
        text().prop_map(|t| format!("Bearer {t}")),
        text().prop_map(|t| format!(
            "Basic {}",
            crate::encoding::b64_encode(format!("user:{t}").as_bytes(), true)
        )),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let name = prop::sample::select(&["x-api-key", "authorization", "cookie", "x-other"][..]);
    prop::collection::vec((name.prop_map(str::to_string), header_value()), 0..4)
}

fn query() -> impl Strategy<Value = String> {
    let name = prop::sample::select(&["key", "page", "q"][..]);
    prop::collection::vec((name, text()), 0..3).prop_map(|pairs| {
        let kv: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        kv.join("&").replace(' ', "+")
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..32),
        ("[a-z{}\":]{0,10}", "[a-z{}\":]{0,10}").prop_map(|(a, b)| format!("{a}{PH}{b}").into()),
    ]
}

/// A request as hyper hands it over, or `None` when the generated parts make no request.
fn request(
    scheme: &str,
    host: &str,
    path: &str,
    query: &str,
    headers: &[(String, String)],
) -> Option<hyper::http::request::Parts> {
    let q = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    let mut b = hyper::Request::builder().uri(format!("{scheme}://{host}{path}{q}"));
    for (k, v) in headers {
        b = b.header(k.as_str(), v.as_str());
    }
    b.body(()).ok().map(|r| r.into_parts().0)
}

/// Whether the real value is anywhere in the request: URL, header values, or inside a
/// Basic header's decoded text.
fn exposes(parts: &hyper::http::request::Parts) -> bool {
    parts.uri.to_string().contains(REAL)
        || parts.headers.values().any(|v| {
            let text = String::from_utf8_lossy(v.as_bytes()).into_owned();
            let basic = text
                .strip_prefix("Basic ")
                .and_then(|b| crate::encoding::b64_decode(b.trim()))
                .is_some_and(|d| String::from_utf8_lossy(&d).contains(REAL));
            text.contains(REAL) || basic
        })
}

fn holds_placeholder(path: &str, query: &str, headers: &[(String, String)], body: &[u8]) -> bool {
    let basic_ph = |v: &str| {
        v.strip_prefix("Basic ")
            .and_then(crate::encoding::b64_decode)
            .is_some_and(|d| String::from_utf8_lossy(&d).contains(PH))
    };
    path.contains(PH)
        || query.contains(PH)
        || headers.iter().any(|(_, v)| v.contains(PH) || basic_ph(v))
        || body.windows(PH.len()).any(|w| w == PH.as_bytes())
}

proptest! {
    #[test]
    fn the_real_value_never_goes_to_another_host_or_anywhere_in_clear(
        slot in slot(),
        inject in any::<bool>(),
        host in host(),
        https in prop::bool::weighted(0.8),
        path_ph in any::<bool>(),
        query in query(),
        headers in headers(),
        body in body(),
    ) {
        let c = credential(slot, inject);
        let ours = c.hosts.iter().any(|h| h.matches(&host));
        let path = if path_ph { format!("/v1/{PH}/x") } else { "/v1/x".to_string() };
        let scheme = if https { "https" } else { "http" };
        let Some(mut parts) = request(scheme, &host, &path, &query, &headers) else {
            return Ok(());
        };
        let had_ph = holds_placeholder(&path, &query, &headers, &body);
        let out = swap(std::slice::from_ref(&c), &mut parts, &host, None, &body);
        if !ours || !https {
            // What goes out holds no real value (a refused request goes nowhere: its callers
            // drop it, so an injected value there is not sent).
            if out.is_ok() {
                prop_assert!(!exposes(&parts), "the real value in {:?} to {}", parts, host);
            }
            if had_ph {
                prop_assert!(out.is_err(), "a placeholder to {} over {} passed", host, scheme);
            }
        }
        if path_ph {
            prop_assert!(out.is_err(), "a placeholder in the path passed");
        }
        if let Ok(sent) = &out {
            prop_assert!(!parts.uri.path().contains(REAL));
            for (name, v) in &parts.headers {
                let v = String::from_utf8_lossy(v.as_bytes());
                if !c.carries(name.as_str()) {
                    prop_assert!(!v.contains(REAL), "the real value in header {}", name);
                }
            }
            if c.query().is_none() {
                prop_assert!(!parts.uri.query().unwrap_or("").contains(REAL));
            }
            if exposes(&parts) {
                prop_assert!(!sent.is_empty(), "a real value sent with nothing to scrub");
            }
        }
    }

    #[test]
    fn the_placeholder_round_trips_for_its_hosts(
        slot in slot(),
        host in prop::sample::select(&["api.example.test", "API.example.test.", "x.svc.example.test"][..]),
        other in "[a-zA-Z0-9 ._-]{0,12}",
        split in any::<prop::sample::Index>(),
    ) {
        let c = credential(slot, false);
        // What the sandbox sends: the placeholder in its slot, in the slot's format.
        let (query, headers) = match c.query() {
            Some(param) => (format!("{param}={PH}&page=2"), vec![("x-other".to_string(), other)]),
            None => {
                let h = &c.headers()[0];
                let v = WireCredential::formatted(&h.format, PH);
                (String::new(), vec![(h.name.clone(), v), ("x-other".to_string(), other)])
            }
        };
        let mut parts = request("https", host, "/v1/x", &query, &headers).unwrap();
        let sent = swap(std::slice::from_ref(&c), &mut parts, host, None, b"{}").unwrap();
        match c.query() {
            Some(param) => {
                let q = parts.uri.query().unwrap().to_string();
                prop_assert_eq!(q, format!("{param}={REAL}&page=2"));
            }
            None => {
                let h = &c.headers()[0];
                prop_assert_eq!(
                    parts.headers[h.name.as_str()].to_str().unwrap(),
                    WireCredential::formatted(&h.format, REAL)
                );
            }
        }
        // A server echoing what it got, in two chunks split anywhere: the sandbox reads
        // back exactly what it sent.
        let mut scrub = Scrubber::new(&sent).expect("something to scrub");
        let echoed = format!("{}|{}", parts.uri, parts.headers.values()
            .map(|v| v.to_str().unwrap().to_string()).collect::<Vec<_>>().join("|"));
        let at = split.index(echoed.len() + 1);
        let mut back = scrub.push(&echoed.as_bytes()[..at]);
        back.extend(scrub.push(&echoed.as_bytes()[at..]));
        back.extend(scrub.finish());
        let back = String::from_utf8(back).unwrap();
        prop_assert!(!back.contains(REAL), "the value came back: {}", back);
        if !query.is_empty() {
            prop_assert!(back.contains(&query));
        }
        for (_, v) in &headers {
            prop_assert!(back.contains(v.as_str()), "{} not in {}", v, back);
        }
    }
}
