//! The MCP hook of the pipeline (see [`crate::mcp`]): between decide and check, a request to
//! an MCP server has its JSON-RPC body read whole and each `tools/call` in it decided by
//! `[[mcp.rule]]`; a refused call is answered by cordon as a JSON-RPC error and nothing is
//! forwarded. After relay, the server's answer is filtered ([`answer`]).
//!
//! A request is MCP when the session governs MCP and one of these holds: a rule names its
//! host and path; it carries an MCP header (`Mcp-Session-Id`, `Mcp-Protocol-Version`); it
//! accepts `text/event-stream` (streamable HTTP's POSTs and every SSE stream); or it is
//! posted to an endpoint an SSE stream named. A body that is not JSON-RPC goes on as any
//! other; one too long to read whole is refused when it could be MCP (else a tool call could
//! be padded past the check).

mod answer;

use std::sync::Arc;

use cordon_events::{Action as EvAction, Layer, NewEvent};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::Value;

use super::body::{BODY_PREFIX_TIMEOUT, ReadBody, read_prefix};
use super::{Body, Exchange, Refused};
use crate::intercept::Interceptor;
use crate::mcp::{CallDecision, Mcp, jsonrpc};
use cordon_policy::McpAction;

pub(crate) use answer::filter;

/// An MCP request body is read whole up to this (or `[dlp] max_body_bytes`, if more).
const MAX_BODY: usize = 1 << 20;

/// A request spotted as MCP.
pub(crate) struct Spot {
    pub mcp: Arc<Mcp>,
    /// A rule, a header or a learnt endpoint says so (not only its `Accept`).
    strong: bool,
    /// Its body was JSON-RPC: the answer is MCP's too.
    pub rpc: bool,
}

/// Whether `req` is an MCP request (see the module docs).
pub(crate) fn spot(i: &Interceptor, ex: &Exchange<'_>) -> Option<Spot> {
    let mcp = i.mcp.get()?.clone();
    let has = |name: &str| ex.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let strong = mcp.named(ex.host(), &ex.path)
        || has("mcp-session-id")
        || has("mcp-protocol-version")
        || mcp.endpoint(ex.host(), ex.conn.port, &ex.target).is_some();
    let streams = ex.headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("accept") && v.to_ascii_lowercase().contains("text/event-stream")
    });
    (strong || streams).then_some(Spot {
        mcp,
        strong,
        rpc: false,
    })
}

/// What reading an MCP request came to.
pub(crate) enum Screened {
    /// Forward it: the body as read.
    Forward(ReadBody),
    /// cordon answers it (a refused call).
    Answer(Response<Body>),
}

/// Reads the body and decides its tool calls (see the module docs).
pub(crate) async fn screen(
    i: &Interceptor,
    spot: &mut Spot,
    req: &mut Request<Incoming>,
    ex: &Exchange<'_>,
) -> Result<Screened, Refused> {
    if hyper::body::Body::is_end_stream(req.body()) {
        return Ok(Screened::Forward(ReadBody::default()));
    }
    let compressed = req
        .headers()
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    let max = i.dlp.as_ref().map_or(0, |d| d.max_body).max(MAX_BODY);
    let read = tokio::time::timeout(BODY_PREFIX_TIMEOUT, read_prefix(req.body_mut(), max, None))
        .await
        .unwrap_or(Err(None));
    let (chunks, truncated) = read.map_err(|e| {
        let e = e.map_or("timed out".to_string(), |e| e.to_string());
        Refused::new(
            StatusCode::BAD_REQUEST,
            format!("cordon: reading the request body: {e}\n"),
        )
    })?;
    let flat: Vec<u8> = chunks.iter().flat_map(|b| b.iter().copied()).collect();
    let looks = memchr::memmem::find(&flat, b"\"jsonrpc\"").is_some();
    if (truncated || compressed) && (spot.strong || looks) {
        let why = if compressed {
            "is compressed"
        } else {
            "is longer than cordon reads whole"
        };
        (i.emit)(ex.event(
            EvAction::Deny,
            413,
            &format!("an MCP request body that {why} cannot be checked"),
            "mcp",
        ));
        return Err(Refused::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "cordon: {}: this MCP request's body {why} ({max} bytes at most, uncompressed); cordon reads each tool call before it goes, so it is refused\n",
                ex.url
            ),
        ));
    }
    let body = ReadBody {
        prefix: Some(chunks),
        scanned: flat,
        truncated,
        ..ReadBody::default()
    };
    let Some(rpc) = (!truncated)
        .then(|| jsonrpc::parse(&body.scanned))
        .flatten()
    else {
        return Ok(Screened::Forward(body));
    };
    spot.rpc = true;
    let spot = &*spot;
    let mut refused = Vec::new();
    for m in &rpc.messages {
        if let Some((tool, args)) = m.tool_call()
            && let Some(why) = call(i, spot, ex, m, tool, &args).await
        {
            refused.push((m, why));
        }
    }
    if refused.is_empty() {
        return Ok(Screened::Forward(body));
    }
    Ok(Screened::Answer(refusal(spot, ex, &rpc, &refused)))
}

/// Decides one `tools/call`, settling `ask` and `judge`, and logs it; `Some(why)` refuses it.
async fn call(
    i: &Interceptor,
    spot: &Spot,
    ex: &Exchange<'_>,
    m: &jsonrpc::Message,
    tool: &str,
    args: &Value,
) -> Option<String> {
    let d = spot
        .mcp
        .decide(ex.host(), ex.conn.port, &ex.path, tool, args);
    let server = crate::mcp::server_key(ex.host(), ex.conn.port);
    let (mut action, mut settled) = (d.action, None);
    if action == McpAction::Judge {
        (action, settled) = judge(i, ex, &d, tool, args).await;
    }
    if action == McpAction::Ask {
        (action, settled) = ask(i, &d, &server, tool, args).await;
    }
    let learned = i.learning && d.rule != "mcp.pin" && action != McpAction::Allow;
    let (ev, word) = match action {
        McpAction::Allow => (EvAction::Allow, "allowed"),
        _ if learned => (EvAction::Allow, "allowed (learning run)"),
        _ => (EvAction::Deny, "refused"),
    };
    let why = settled
        .clone()
        .or_else(|| d.reason.clone())
        .unwrap_or_else(|| match (action, d.rule.as_str()) {
            (McpAction::Allow, _) => "allowed".into(),
            (McpAction::Deny, "default") => "no [[mcp.rule]] allows it ([mcp] default)".into(),
            (McpAction::Deny, _) => "the rule denies it".into(),
            _ => "it needs a decision (ask/judge) that is not available; refused".into(),
        });
    let shown = i
        .redact(&args.to_string())
        .chars()
        .take(1000)
        .collect::<String>();
    let mut e = NewEvent::new(
        Layer::Mcp,
        ev,
        format!("tools/call {tool} on {server}: {word} — {why}"),
    )
    .rule(d.rule.clone())
    .detail("server", server.clone())
    .detail("tool", tool.to_string())
    .detail("method", "tools/call")
    .detail("id", m.id.clone().unwrap_or(Value::Null))
    .detail("arguments", shown)
    .detail("decision", action.to_string())
    .detail("url", ex.shown_url());
    if learned {
        e = e.detail(cordon_events::LEARN, format!("would {}", d.action));
    }
    (i.emit)(e);
    if action == McpAction::Allow || learned {
        return None;
    }
    Some(format!(
        "cordon refused the MCP tool call {tool} on {server} (rule \"{}\"): {why}. Do not retry it by another route; if it is needed, ask the user (cordon check shows the rules)",
        d.rule
    ))
}

/// Asks the judge about a call: its answer, and its words.
async fn judge(
    i: &Interceptor,
    ex: &Exchange<'_>,
    d: &CallDecision,
    tool: &str,
    args: &Value,
) -> (McpAction, Option<String>) {
    let Some(judge) = &i.judge else {
        return (
            McpAction::Judge,
            Some("no judge is configured ([judge] in the policy)".into()),
        );
    };
    let body = serde_json::json!({"tool": tool, "arguments": args}).to_string();
    let answer = judge
        .judge(&crate::judge::Question {
            method: "MCP tools/call",
            url: &ex.url,
            headers: &[],
            body: body.as_bytes(),
            body_truncated: false,
            note: Some(&format!("an MCP tool call decided by rule {}", d.rule)),
        })
        .await;
    match answer {
        crate::judge::Verdict::Allow(r) => (McpAction::Allow, Some(r)),
        crate::judge::Verdict::Deny(r) => (McpAction::Deny, Some(format!("the judge: {r}"))),
        crate::judge::Verdict::Failed(e) => {
            let why = Some(format!("the judge could not decide ({e})"));
            match judge.config().on_error {
                crate::judge::OnError::Deny => (McpAction::Deny, why),
                crate::judge::OnError::Ask => (McpAction::Ask, why),
            }
        }
    }
}

/// Asks a person about a call.
async fn ask(
    i: &Interceptor,
    d: &CallDecision,
    server: &str,
    tool: &str,
    args: &Value,
) -> (McpAction, Option<String>) {
    let Some(asker) = &i.asker else {
        return (McpAction::Ask, Some("nobody can be asked; refused".into()));
    };
    let shown = i
        .redact(&args.to_string())
        .chars()
        .take(300)
        .collect::<String>();
    let a = asker
        .ask(
            format!("MCP tool call {tool} on {server} with {shown}"),
            d.rule.clone(),
            format!("mcp {} {server} {tool}", d.rule),
            None,
        )
        .await;
    let who = match (a.allow, a.timed_out) {
        (_, true) => "nobody answered in time",
        (true, _) => "a person allowed it",
        (false, _) => "a person denied it",
    };
    let action = if a.allow {
        McpAction::Allow
    } else {
        McpAction::Deny
    };
    (action, Some(who.to_string()))
}

/// cordon's answer to a request with a refused call: a JSON-RPC error for each request in it
/// (a batch is refused whole: the rest were not sent either). On the SSE transport the
/// answers go down the stream, as the server's would, and the POST gets its 202.
fn refusal(
    spot: &Spot,
    ex: &Exchange<'_>,
    rpc: &jsonrpc::Body,
    refused: &[(&jsonrpc::Message, String)],
) -> Response<Body> {
    let errors: Vec<Value> = rpc
        .messages
        .iter()
        .filter_map(|m| {
            let id = m.id.as_ref()?;
            let why = refused.iter().find(|(r, _)| std::ptr::eq(*r, m)).map_or(
                "cordon: not sent: another call in the same batch was refused",
                |(_, w)| w.as_str(),
            );
            Some(jsonrpc::error(id, why))
        })
        .collect();
    if let Some(stream) = spot.mcp.endpoint(ex.host(), ex.conn.port, &ex.target) {
        let frames: Vec<u8> = errors
            .iter()
            .flat_map(|e| crate::mcp::sse::Frame::write("message", None, &e.to_string()))
            .collect();
        if stream.send(frames).is_ok() {
            return reply(StatusCode::ACCEPTED, None, Vec::new());
        }
    }
    if errors.is_empty() {
        return reply(StatusCode::ACCEPTED, None, Vec::new());
    }
    let body = jsonrpc::answer(errors, rpc.batch);
    reply(StatusCode::OK, Some("application/json"), body)
}

fn reply(status: StatusCode, kind: Option<&'static str>, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).map_err(|n| match n {}).boxed());
    *r.status_mut() = status;
    if let Some(k) = kind {
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(k));
    }
    r
}
