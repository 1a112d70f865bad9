//! The MCP hook of the pipeline (see [`crate::mcp`]): between decide and check, a request to
//! an MCP server has its JSON-RPC body read whole and each `tools/call` in it decided by
//! `[[mcp.rule]]`; a refused call is answered by cordon as a JSON-RPC error and nothing is
//! forwarded. After relay, the server's answer is filtered ([`answer`]).
//!
//! A request is MCP when the session governs MCP and one of these holds: a rule names its
//! host and path; it carries an MCP header (`Mcp-Session-Id`, `Mcp-Protocol-Version`); it
//! accepts `text/event-stream` (streamable HTTP's POSTs and every SSE stream); it is posted
//! to the path of an endpoint an SSE stream named; or — whatever its headers — it is a POST
//! whose body is JSON-RPC 2.0 with an MCP method. For that last, every POST is looked at: its
//! first bytes (past whitespace and byte-order marks) decide whether it could be JSON; one
//! that could not (a form, a file, a compressed body) goes on as any other, unbuffered, and
//! one that could is read whole up to [`MAX_BODY`] first (an LLM API's request body, small,
//! is delayed by no more than its own upload). A GET with no signal is looked at only if its
//! answer is an event stream (an SSE transport's stream names the endpoint refusals go to).
//!
//! Fail closed: a body spotted as MCP (by the signals above, by `jsonrpc` in its bytes, or by
//! a lenient read of it, see [`jsonrpc::Kind::Evasive`]) that cordon cannot read as JSON-RPC
//! is refused, never forwarded unchecked; so is one too long to read whole (else a tool call
//! could be padded past the check), also when it could be JSON and goes to a server seen
//! speaking MCP. Limits: a body that pauses for [`BODY_PREFIX_IDLE`] before its first byte,
//! with no length given and no signal, is not waited for.

mod answer;

use std::collections::VecDeque;
use std::sync::Arc;

use cordon_events::{Action as EvAction, Layer, NewEvent};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::Value;

use super::body::{BODY_PREFIX_IDLE, BODY_PREFIX_TIMEOUT, ReadBody, read_prefix};
use super::{Body, Exchange, Refused};
use crate::intercept::Interceptor;
use crate::mcp::{CallDecision, Mcp, jsonrpc};
use cordon_policy::{HttpAction, McpAction};

pub(crate) use answer::filter;

/// An MCP request body is read whole up to this (or `[dlp] max_body_bytes`, if more).
const MAX_BODY: usize = 1 << 20;

/// A request spotted as MCP, or a POST whose body may say it is.
pub(crate) struct Spot {
    pub mcp: Arc<Mcp>,
    /// A rule, a header or a learnt endpoint says so (not only its `Accept`).
    strong: bool,
    /// The server was seen speaking MCP.
    known: bool,
    /// No signal but the body's: it is MCP only if it is JSON-RPC.
    maybe: bool,
    /// Its body was JSON-RPC: the answer is MCP's too.
    pub rpc: bool,
    /// The ids of the requests in it, and whether it was a batch (an answer cordon cannot
    /// read is replaced by errors to these).
    ids: Vec<Value>,
    batch: bool,
}

impl Spot {
    /// Whether the answer is MCP's (a POST only its `Accept` made look like MCP, whose body
    /// was not JSON-RPC — an LLM API streaming its answer — is not).
    pub(crate) fn answer_is_mcp(&self, ex: &Exchange<'_>) -> bool {
        ex.method != "POST" || self.rpc || self.strong
    }

    /// Whether its answer must come uncompressed: it is MCP's for sure (a GET only its body
    /// could show to be MCP keeps its encoding: every download would lose it otherwise).
    pub(crate) fn wants_plain(&self) -> bool {
        !self.maybe || self.rpc
    }
}

/// Whether `req` is an MCP request, or a POST that may be (see the module docs).
pub(crate) fn spot(i: &Interceptor, ex: &Exchange<'_>) -> Option<Spot> {
    let mcp = i.mcp.get()?.clone();
    let has = |name: &str| ex.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let strong = mcp.named(ex.host(), &ex.path)
        || has("mcp-session-id")
        || has("mcp-protocol-version")
        || mcp.endpoint_known(ex.host(), ex.conn.port, &ex.target);
    let known = strong || mcp.knows(ex.host(), ex.conn.port);
    let streams = ex.headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("accept") && v.to_ascii_lowercase().contains("text/event-stream")
    });
    let maybe = !(known || streams);
    // A GET with no signal may still open an SSE transport's stream (its `endpoint` event is
    // how refusals find their way back): its answer is looked at if it is an event stream.
    (!maybe || ex.method == "POST" || ex.method == "GET").then_some(Spot {
        mcp,
        strong,
        known,
        maybe,
        rpc: false,
        ids: Vec::new(),
        batch: false,
    })
}

/// Asks the server for an answer cordon can read: an MCP answer is filtered and pinned, and
/// a compressed one could not be (one that comes compressed anyway is refused, see
/// [`answer`]).
pub(crate) fn plain_answers(headers: &mut HeaderMap) {
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
}

/// What reading an MCP request came to.
pub(crate) enum Screened {
    /// Forward it: the body as read.
    Forward(ReadBody),
    /// cordon answers it (a refused call).
    Answer(Response<Body>),
}

/// What a body read whole (or cut at the limit) comes to, before any rule is asked.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Not MCP: forward it.
    Pass,
    /// MCP: decide its calls.
    Rpc(jsonrpc::Body),
    /// Refused, with why (in cordon's words, after "this MCP request's body").
    Refuse(StatusCode, &'static str),
}

/// The verdict on a body (see the module docs): `flat` as read, `truncated` if more followed,
/// `compressed` if it is encoded; `strong`/`known`/`maybe` as in [`Spot`].
fn verdict(flat: &[u8], truncated: bool, compressed: bool, strong: bool, known: bool) -> Verdict {
    let looks = memchr::memmem::find(flat, b"jsonrpc").is_some();
    let json_start = jsonrpc::could_be_json(flat) == Some(true);
    let suspect = strong || looks || (known && json_start);
    if compressed && suspect {
        return Verdict::Refuse(StatusCode::PAYLOAD_TOO_LARGE, "is compressed");
    }
    if truncated && suspect {
        return Verdict::Refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "is longer than cordon reads whole",
        );
    }
    if truncated || compressed {
        return Verdict::Pass;
    }
    match jsonrpc::classify(flat) {
        jsonrpc::Kind::Rpc(b)
            if known || b.messages.iter().any(|m| jsonrpc::is_mcp_method(&m.method)) =>
        {
            Verdict::Rpc(b)
        }
        jsonrpc::Kind::Rpc(_) | jsonrpc::Kind::Json => Verdict::Pass,
        jsonrpc::Kind::Evasive => Verdict::Refuse(StatusCode::BAD_REQUEST, UNREADABLE),
        // A `\u` escape may spell `jsonrpc` where the bytes do not.
        jsonrpc::Kind::NotJson
            if suspect || (json_start && memchr::memmem::find(flat, b"\\u").is_some()) =>
        {
            Verdict::Refuse(StatusCode::BAD_REQUEST, UNREADABLE)
        }
        jsonrpc::Kind::NotJson => Verdict::Pass,
    }
}

/// The rule of cordon's refusals of MCP requests it cannot check: decided on the body and
/// on what was buffered at the time, not on the policy (replay keeps them as they were).
pub(crate) const UNREADABLE_RULE: &str = "mcp.unreadable";

const UNREADABLE: &str = "looks like JSON-RPC but is not JSON-RPC 2.0 as cordon reads it (NaN or Infinity, a byte-order mark, UTF-16 or UTF-32, a lone surrogate escape, or malformed JSON); send plain UTF-8 JSON";

/// The first chunks of a body, until its first meaningful byte says whether it could be
/// JSON: `Some(could)`, or `None` when it ended, paused or grew past `max` first.
async fn peek(
    req: &mut Request<Incoming>,
    ex: &Exchange<'_>,
    max: usize,
) -> Result<(VecDeque<Bytes>, Option<bool>), Refused> {
    let idle = if ex.body_len.is_none() {
        BODY_PREFIX_IDLE
    } else {
        BODY_PREFIX_TIMEOUT
    };
    let mut head = VecDeque::new();
    let mut flat = Vec::new();
    while flat.len() < max && !hyper::body::Body::is_end_stream(req.body()) {
        let next = match tokio::time::timeout(idle, req.body_mut().frame()).await {
            Ok(Some(Ok(f))) => f,
            Ok(None) | Err(_) => break,
            Ok(Some(Err(e))) => return Err(unreadable_body(&e.to_string())),
        };
        if let Ok(d) = next.into_data() {
            flat.extend_from_slice(&d);
            head.push_back(d);
            if let Some(could) = jsonrpc::could_be_json(&flat) {
                return Ok((head, Some(could)));
            }
        }
    }
    Ok((head, None))
}

fn unreadable_body(e: &str) -> Refused {
    Refused::new(
        StatusCode::BAD_REQUEST,
        format!("cordon: reading the request body: {e}\n"),
    )
}

/// Reads the body and decides its tool calls (see the module docs).
pub(crate) async fn screen(
    i: &Interceptor,
    spot: &mut Spot,
    req: &mut Request<Incoming>,
    ex: &Exchange<'_>,
    action: HttpAction,
) -> Result<Screened, Refused> {
    if hyper::body::Body::is_end_stream(req.body()) {
        return Ok(Screened::Forward(ReadBody::default()));
    }
    let compressed = req
        .headers()
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    let max = i
        .screens
        .dlp
        .as_ref()
        .map_or(0, |d| d.max_body)
        .max(MAX_BODY);
    let mut head = VecDeque::new();
    if spot.maybe {
        // Only the body can say: unless it could be JSON, it goes on as any other.
        let could;
        (head, could) = if compressed {
            (VecDeque::new(), None)
        } else {
            peek(req, ex, max).await?
        };
        if could != Some(true) {
            let body = super::body::read(&i.screens, &i.wire, req, ex, action, head).await?;
            return Ok(Screened::Forward(body));
        }
    }
    // Held of the session's budget while read: the length said, or the most read.
    let mut held = spot.mcp.budget.claim();
    let want = ex
        .body_len
        .map_or(max, |n| usize::try_from(n).unwrap_or(max).min(max));
    if held.resize(want).is_err() {
        let why = "cannot be held now: cordon's buffer for MCP messages is full; retry shortly";
        return Err(refuse(i, ex, StatusCode::SERVICE_UNAVAILABLE, why, max));
    }
    let got: usize = head.iter().map(Bytes::len).sum();
    let rest = max.saturating_sub(got);
    let read = tokio::time::timeout(BODY_PREFIX_TIMEOUT, read_prefix(req.body_mut(), rest, None))
        .await
        .unwrap_or(Err(None));
    let (more, truncated) =
        read.map_err(|e| unreadable_body(&e.map_or("timed out".to_string(), |e| e.to_string())))?;
    let mut chunks = head;
    chunks.extend(more);
    let flat: Vec<u8> = chunks.iter().flat_map(|b| b.iter().copied()).collect();
    let v = verdict(&flat, truncated, compressed, spot.strong, spot.known);
    let body = ReadBody {
        prefix: Some(chunks),
        scanned: flat,
        truncated,
        ..ReadBody::default()
    };
    let rpc = match v {
        Verdict::Pass => return Ok(Screened::Forward(body)),
        Verdict::Refuse(status, why) => return Err(refuse(i, ex, status, why, max)),
        Verdict::Rpc(rpc) => rpc,
    };
    spot.mcp.learn_server(ex.host(), ex.conn.port);
    spot.rpc = true;
    spot.ids = rpc.messages.iter().filter_map(|m| m.id.clone()).collect();
    spot.batch = rpc.batch;
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

/// cordon's refusal of an MCP request it cannot check, logged.
fn refuse(
    i: &Interceptor,
    ex: &Exchange<'_>,
    status: StatusCode,
    why: &str,
    max: usize,
) -> Refused {
    (i.screens.emit)(ex.event(
        EvAction::Deny,
        status.as_u16(),
        &format!("an MCP request body that {why} cannot be checked"),
        UNREADABLE_RULE,
    ));
    Refused::new(
        status,
        format!(
            "cordon: {}: this MCP request's body {why} (cordon reads {max} bytes at most, uncompressed); cordon reads each tool call before it goes, so it is refused\n",
            ex.url
        ),
    )
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
    (i.screens.emit)(e);
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
    let Some(judge) = &i.screens.judge else {
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
    let Some(asker) = &i.screens.asker else {
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

#[cfg(test)]
mod tests;
