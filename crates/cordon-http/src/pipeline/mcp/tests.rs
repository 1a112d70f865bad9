//! The MCP hook through the whole pipeline, in process: a plain-HTTP client talks to the
//! interceptor, which forwards to a loopback server recording what reached it — so each test
//! shows what a hostile request or answer did (and did not) get past.

use std::sync::{Arc, Mutex};

use cordon_events::NewEvent;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use super::*;
use crate::intercept::{Config, Interceptor};
use crate::mcp::budget::Budget;
use crate::mcp::pins::Pins;
use cordon_policy::McpPlan;

/// What the upstream server received: (target, accept-encoding, body).
type Seen = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

/// An event stream whose first message holds a `NaN` (its events end in `\r\n` and `\n`).
const SSE_NAN: &[u8] =
    b"event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"x\":NaN}}\n\r\n\
              event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n\n";

/// The server's answer to a request at `path`.
fn upstream_answer(path: &str) -> Response<Full<Bytes>> {
    let (kind, enc, body): (&str, Option<&str>, Vec<u8>) = match path {
        "/nan" => (
            "application/json",
            None,
            br#"{"jsonrpc":"2.0","id":1,"result":{"x":NaN}}"#.to_vec(),
        ),
        "/gz" => ("application/json", Some("gzip"), b"\x1f\x8b...".to_vec()),
        "/sse-nan" => ("text/event-stream", None, SSE_NAN.to_vec()),
        "/big" => ("application/json", None, vec![b' '; 4096]),
        _ => (
            "application/json",
            None,
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_vec(),
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    if let Some(e) = enc {
        r.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_str(e).unwrap());
    }
    r
}

struct Rig {
    i: Arc<Interceptor>,
    seen: Seen,
    events: Arc<Mutex<Vec<NewEvent>>>,
}

/// The interceptor (everything allowed at the HTTP layer; `[mcp] default = "deny"`, no
/// rules), its MCP buffering limited to `budget` bytes.
async fn rig(budget: usize) -> (Rig, tempfile::TempDir) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((c, _)) = l.accept().await {
            let s = s.clone();
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let s = s.clone();
                async move {
                    let target = req.uri().to_string();
                    let enc = req
                        .headers()
                        .get(header::ACCEPT_ENCODING)
                        .map(|v| v.to_str().unwrap_or("").to_string())
                        .unwrap_or_default();
                    let body = req.into_body().collect().await?.to_bytes().to_vec();
                    s.lock().unwrap().push((target.clone(), enc, body));
                    let path = target.split('?').next().unwrap_or("").to_string();
                    Ok::<_, hyper::Error>(upstream_answer(&path))
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(c), svc),
            );
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let events: Arc<Mutex<Vec<NewEvent>>> = Arc::default();
    let ev = events.clone();
    let i = Interceptor::new(Config {
        ca: Arc::new(crate::CertAuthority::load_or_create(dir.path()).unwrap()),
        rules: Vec::new(),
        default: HttpAction::Allow,
        upstream_ca_pem: Vec::new(),
        connect: Arc::new(move |_, _| Box::pin(tokio::net::TcpStream::connect(up))),
        emit: Arc::new(move |e| ev.lock().unwrap().push(e)),
        judge: None,
        asker: None,
        credentials: Vec::new(),
        dlp: None,
    })
    .unwrap();
    let plan = McpPlan {
        rules: Vec::new(),
        default: McpAction::Deny,
        pin: true,
        stdio: Vec::new(),
    };
    let mut m = Mcp::new(&plan, Some(Pins::open(None).unwrap()));
    m.budget = Budget::new(budget);
    let _ = i.mcp.set(Arc::new(m));
    (
        Rig {
            i: Arc::new(i),
            seen,
            events,
        },
        dir,
    )
}

impl Rig {
    /// Sends `req` to `host` (plain HTTP); the answer's status, headers and body (or the
    /// body's error).
    async fn send(
        &self,
        host: &str,
        req: Request<Full<Bytes>>,
    ) -> (u16, hyper::HeaderMap, Result<Vec<u8>, String>) {
        let (a, b) = tokio::io::duplex(1 << 16);
        tokio::spawn(self.i.clone().serve_plain(b, host.to_string(), 80, None));
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(a))
            .await
            .unwrap();
        tokio::spawn(conn);
        // An answer that fails before its first byte is no answer at all: status 0.
        let resp = match send.send_request(req).await {
            Ok(r) => r,
            Err(e) => return (0, hyper::HeaderMap::new(), Err(e.to_string())),
        };
        let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
        let body = resp.into_body().collect().await;
        let body = body
            .map(|b| b.to_bytes().to_vec())
            .map_err(|e| e.to_string());
        (status, headers, body)
    }

    fn upstream_saw(&self, needle: &str) -> bool {
        let s = self.seen.lock().unwrap();
        s.iter()
            .any(|(t, _, b)| t.contains(needle) || String::from_utf8_lossy(b).contains(needle))
    }
}

/// A POST of `body` to `path` on `host`, with only `accept` for a signal.
fn post(host: &str, path: &str, accept: &str, body: impl Into<Bytes>) -> Request<Full<Bytes>> {
    Request::post(path)
        .header("host", host)
        .header("accept", accept)
        .header("accept-encoding", "gzip, br")
        .body(Full::new(body.into()))
        .unwrap()
}

const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_all","arguments":{"x":1}}}"#;

#[tokio::test]
async fn a_call_only_a_lenient_reader_reads_is_refused_not_forwarded() {
    let (r, _d) = rig(crate::mcp::budget::TOTAL).await;
    let nan = CALL.replace("\"x\":1", "\"x\":NaN");
    let surrogate = CALL.replace("\"x\":1", "\"x\":\"\\ud800\"");
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend_from_slice(CALL.as_bytes());
    let utf16: Vec<u8> = CALL.encode_utf16().flat_map(u16::to_le_bytes).collect();
    for (n, body) in [nan.into_bytes(), surrogate.into_bytes(), bom, utf16]
        .into_iter()
        .enumerate()
    {
        // With a strong signal (streamable HTTP's Accept) and with none at all.
        for accept in ["application/json, text/event-stream", "application/json"] {
            let (status, _, text) = r
                .send("mcp.test", post("mcp.test", "/mcp", accept, body.clone()))
                .await;
            let text = String::from_utf8_lossy(&text.unwrap()).to_string();
            assert_eq!(status, 400, "body {n}, {accept}: {text}");
            assert!(
                text.contains("cordon") && text.contains("JSON-RPC"),
                "{text}"
            );
        }
    }
    assert!(
        r.seen.lock().unwrap().is_empty(),
        "{:?}",
        r.seen.lock().unwrap()
    );
}

#[tokio::test]
async fn a_json_rpc_post_is_mcp_whatever_its_headers() {
    let (r, _d) = rig(crate::mcp::budget::TOTAL).await;
    // No MCP header, no event-stream Accept, a host no rule names: the body says MCP.
    for accept in ["application/json", "*/*"] {
        let (status, _, body) = r
            .send(
                "mcp.test",
                post("mcp.test", "/messages/?session_id=1", accept, CALL),
            )
            .await;
        let v: Value = serde_json::from_slice(&body.unwrap()).unwrap();
        assert_eq!(status, 200);
        assert_eq!(v["error"]["code"], jsonrpc::REFUSED, "{v}");
    }
    assert!(!r.upstream_saw("delete_all"));
    // What is not JSON-RPC goes on: a form, and JSON that is not JSON-RPC (an LLM API's).
    let (s, _, _) = r
        .send(
            "api.test",
            post("api.test", "/form", "*/*", "a=1&jsonrpc=no"),
        )
        .await;
    assert_eq!(s, 200);
    let (s, _, _) = r
        .send(
            "api.test",
            post("api.test", "/v1/chat", "*/*", r#"{"model":"m"}"#),
        )
        .await;
    assert_eq!(s, 200);
    assert!(r.upstream_saw("/form") && r.upstream_saw("/v1/chat"));
    // The host spoke MCP: a body padded past what cordon reads, its `jsonrpc` escaped, is
    // refused there; elsewhere such a body (no sign of JSON-RPC) goes on.
    let padded = format!(
        "{{\"json\\u0072pc\":\"2.0\",\"pad\":\"{}\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"delete_all\"}}}}",
        "x".repeat(2 * MAX_BODY)
    );
    let (s, _, _) = r
        .send(
            "mcp.test",
            post("mcp.test", "/other", "*/*", padded.clone()),
        )
        .await;
    assert_eq!(s, 413);
    assert!(!r.upstream_saw("/other"));
    let (s, _, _) = r
        .send("api.test", post("api.test", "/upload", "*/*", padded))
        .await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn mcp_answers_are_asked_plain_and_unreadable_ones_never_pass_raw() {
    let (r, _d) = rig(crate::mcp::budget::TOTAL).await;
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    // Asked for no compression; one that comes compressed anyway is refused.
    let (s, _, body) = r
        .send(
            "mcp.test",
            post("mcp.test", "/gz", "application/json", list),
        )
        .await;
    assert_eq!(s, 502, "{:?}", body);
    assert!(
        r.seen
            .lock()
            .unwrap()
            .iter()
            .all(|(_, enc, _)| enc == "identity")
    );
    // A JSON answer the client would read (NaN) but cordon cannot: an error in its place.
    let (s, _, body) = r
        .send(
            "mcp.test",
            post("mcp.test", "/nan", "application/json", list),
        )
        .await;
    let v: Value = serde_json::from_slice(&body.unwrap()).unwrap();
    assert_eq!((s, &v["id"]), (200, &json!(1)), "{v}");
    assert_eq!(v["error"]["code"], jsonrpc::REFUSED);
    // In an event stream, that frame is dropped; the next (after a `\n\r\n` end) goes on.
    let (s, _, body) = r
        .send(
            "mcp.test",
            post("mcp.test", "/sse-nan", "text/event-stream", list),
        )
        .await;
    let text = String::from_utf8(body.unwrap()).unwrap();
    assert_eq!(s, 200);
    assert!(!text.contains("NaN") && text.contains("\"id\":2"), "{text}");
    assert!(
        r.events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.reason.contains("does not parse"))
    );
}

#[tokio::test]
async fn mcp_buffering_past_the_budget_is_refused() {
    let (r, _d) = rig(1000).await;
    // The request fits; the 4 KiB answer does not: it stops, it is not held.
    let (s, _, body) = r
        .send(
            "mcp.test",
            post(
                "mcp.test",
                "/big",
                "application/json",
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            ),
        )
        .await;
    assert!(body.is_err() && s != 413, "{s} {body:?}");
    // A request longer than the budget is refused before it is read.
    let long = CALL.replace("\"x\":1", &format!("\"x\":\"{}\"", "y".repeat(2000)));
    let (s, _, _) = r
        .send(
            "mcp.test",
            post("mcp.test", "/mcp", "application/json", long),
        )
        .await;
    assert_eq!(s, 503);
    assert_eq!(r.i.mcp.get().unwrap().budget.left(), 1000);
}

#[test]
fn verdicts_fail_closed_only_where_mcp_is_possible() {
    let v = |b: &[u8], t, c, s, k| verdict(b, t, c, s, k);
    assert!(matches!(
        v(CALL.as_bytes(), false, false, false, false),
        Verdict::Rpc(_)
    ));
    let eth = br#"{"jsonrpc":"2.0","id":1,"method":"eth_call"}"#;
    assert_eq!(v(eth, false, false, false, false), Verdict::Pass);
    assert!(matches!(v(eth, false, false, false, true), Verdict::Rpc(_)));
    // Spotted as MCP but not JSON: refused; with no signal, passed.
    let refused = Verdict::Refuse(StatusCode::BAD_REQUEST, UNREADABLE);
    assert_eq!(v(b"a=1", false, false, true, true), refused);
    assert_eq!(v(b"a=1", false, false, false, false), Verdict::Pass);
    assert_eq!(
        v(b"{\"json\\u0072pc\" 1", false, false, false, false),
        refused
    );
    // Cut at the limit or compressed: refused where MCP is possible.
    let big = Verdict::Refuse(
        StatusCode::PAYLOAD_TOO_LARGE,
        "is longer than cordon reads whole",
    );
    assert_eq!(v(b"{\"a\":", true, false, false, true), big);
    assert_eq!(v(b"--form", true, false, false, true), Verdict::Pass);
    assert_eq!(v(b"{\"jsonrpc\"", true, false, false, false), big);
    assert_eq!(v(b"{\"a\":", true, false, false, false), Verdict::Pass);
}
