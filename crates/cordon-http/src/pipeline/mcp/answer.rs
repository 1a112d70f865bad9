//! An MCP server's answer on its way back: `tools/list` results filtered ([`crate::mcp::tools`])
//! whether they come as one JSON body (read whole, bounded) or as `text/event-stream` frames
//! (each frame handed on as soon as it is whole, never the stream buffered). An SSE stream's
//! `endpoint` event is learnt, and cordon's own answers to refused calls posted there are
//! slipped into the stream between two frames.
//!
//! Fail closed: an answer cordon cannot read the way the client will is never passed on raw —
//! a compressed one is refused (cordon asks for none), a JSON body that looks like JSON-RPC
//! but does not parse is replaced by JSON-RPC errors, and such an SSE `message` frame is
//! dropped. Every buffered byte is held of the session's MCP budget.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use cordon_events::{Action as EvAction, Layer, NewEvent};
use http_body_util::BodyExt;
use hyper::Response;
use hyper::body::{Bytes, Frame};
use hyper::header;
use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::super::{Body, BoxError, Exchange};
use super::Spot;
use crate::intercept::Screens;
use crate::mcp::budget::Held;
use crate::mcp::sse::{Frame as SseFrame, Parser};
use crate::mcp::tools::{ListCx, filter as filter_list};

/// A JSON answer is read whole up to this; one SSE frame may be this long.
const MAX_ANSWER: usize = 8 << 20;

/// `resp` with its MCP content filtered (anything but a successful JSON or event-stream
/// answer is left as it is).
pub(crate) fn filter(
    screens: &Screens,
    spot: Spot,
    ex: &Exchange<'_>,
    resp: Response<Body>,
) -> Response<Body> {
    let kind = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let mode = if !resp.status().is_success() || !spot.answer_is_mcp(ex) {
        return resp;
    } else if kind.starts_with("text/event-stream") {
        Mode::Sse(Parser::new(MAX_ANSWER))
    } else if kind.starts_with("application/json") && ex.method == "POST" {
        Mode::Json(Vec::new())
    } else {
        return resp;
    };
    let encoding = encoded(resp.headers());
    if encoding.is_some() && !spot.wants_plain() {
        // Not known to be MCP and not asked plain (a GET with no signal): left as it is.
        return resp;
    }
    if let Some(enc) = encoding {
        let why = format!(
            "the MCP server {}:{} answered with Content-Encoding {enc} though cordon asked for none; cordon filters MCP answers and cannot read this one, so it is refused",
            ex.host(),
            ex.conn.port
        );
        (screens.emit)(
            NewEvent::new(Layer::Mcp, EvAction::Deny, why.clone()).detail("url", ex.shown_url()),
        );
        return super::super::text(hyper::StatusCode::BAD_GATEWAY, format!("cordon: {why}\n"));
    }
    let strict = spot.rpc || spot.strong || spot.known;
    let cx = ListCx {
        host: ex.host().to_string(),
        port: ex.conn.port,
        emit: screens.emit.clone(),
        mcp: spot.mcp,
    };
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let filtered = Filtered::new(body, mode, cx, strict, (spot.ids, spot.batch));
    Response::from_parts(parts, filtered.boxed())
}

/// The answer's content coding, unless it has none.
fn encoded(headers: &hyper::HeaderMap) -> Option<String> {
    let enc = headers.get(header::CONTENT_ENCODING)?;
    let enc = String::from_utf8_lossy(enc.as_bytes()).trim().to_string();
    (!enc.is_empty() && !enc.eq_ignore_ascii_case("identity")).then_some(enc)
}

/// What a message of the answer comes to.
enum Read {
    /// Filtered: goes on rewritten.
    Changed(Value),
    /// Goes on as it came.
    Same,
    /// Looks like JSON-RPC but does not parse as cordon reads it: never goes on raw.
    Unreadable,
}

/// `text` read: its tool lists filtered. Unreadable when it does not parse and `strict` (the
/// exchange is MCP's for sure) or it looks like JSON-RPC anyway.
fn read(cx: &ListCx, text: &[u8], strict: bool) -> Read {
    let Ok(mut v) = serde_json::from_slice::<Value>(text) else {
        let looks = strict
            || memchr::memmem::find(text, b"jsonrpc").is_some()
            || crate::mcp::jsonrpc::classify(text) == crate::mcp::jsonrpc::Kind::Evasive;
        return if looks { Read::Unreadable } else { Read::Same };
    };
    if filter_list(cx, &mut v) {
        Read::Changed(v)
    } else {
        Read::Same
    }
}

enum Mode {
    Json(Vec<u8>),
    Sse(Parser),
}

/// The answer body, filtered (see the module docs).
struct Filtered {
    inner: Body,
    mode: Mode,
    cx: Arc<ListCx>,
    /// The exchange is MCP's for sure: an unreadable message is refused, not only one that
    /// looks like JSON-RPC.
    strict: bool,
    /// The request's ids and whether it was a batch: an unreadable JSON answer is replaced by
    /// errors to these.
    asked: (Vec<Value>, bool),
    /// What this answer holds of the session's MCP budget.
    held: Held,
    /// Ready to hand on.
    out: VecDeque<Bytes>,
    /// cordon's answers to slip into an SSE stream (once its endpoint is known).
    inject: Option<UnboundedReceiver<Vec<u8>>>,
    trailers: Option<Frame<Bytes>>,
    done: bool,
}

impl Filtered {
    fn new(inner: Body, mode: Mode, cx: ListCx, strict: bool, asked: (Vec<Value>, bool)) -> Self {
        Self {
            inner,
            mode,
            held: cx.mcp.budget.claim(),
            cx: Arc::new(cx),
            strict,
            asked,
            out: VecDeque::new(),
            inject: None,
            trailers: None,
            done: false,
        }
    }

    /// Takes a chunk of the server's answer.
    fn take(&mut self, chunk: &[u8]) -> Result<(), BoxError> {
        match &mut self.mode {
            Mode::Json(buf) => {
                let want = buf.len() + chunk.len();
                if want > MAX_ANSWER {
                    return Err(self.too_long());
                }
                if self.held.resize(want).is_err() {
                    return Err(self.spent());
                }
                buf.extend_from_slice(chunk);
            }
            Mode::Sse(p) => {
                let (frames, held) = match p.push(chunk) {
                    Ok(f) => (f, p.held()),
                    Err(_) => return Err(self.too_long()),
                };
                for f in frames {
                    let b = self.frame(f);
                    self.out.push_back(Bytes::from(b));
                }
                if self.held.resize(held).is_err() {
                    return Err(self.spent());
                }
            }
        }
        Ok(())
    }

    /// The end of the server's answer.
    fn end(&mut self) {
        match &mut self.mode {
            Mode::Json(buf) => {
                let buf = std::mem::take(buf);
                let cx = self.cx.clone();
                let out = match read(&cx, &buf, self.strict) {
                    Read::Changed(v) => serde_json::to_vec(&v).unwrap_or(buf),
                    Read::Same => buf,
                    Read::Unreadable => self.unreadable(),
                };
                self.out.push_back(Bytes::from(out));
            }
            Mode::Sse(p) => {
                let rest = p.rest();
                if !rest.is_empty() {
                    self.out.push_back(Bytes::from(rest));
                }
            }
        }
        self.held = self.cx.mcp.budget.claim();
        self.done = true;
    }

    /// One whole SSE frame, as it goes on (nothing: dropped).
    fn frame(&mut self, f: SseFrame) -> Vec<u8> {
        if f.event == "endpoint" {
            self.learn(&f.data);
            return f.raw;
        }
        if f.event != "message" || f.data.is_empty() {
            return f.raw;
        }
        // A stream that named its endpoint is MCP's for sure.
        let strict = self.strict || self.inject.is_some();
        match read(&self.cx, f.data.as_bytes(), strict) {
            Read::Changed(v) => SseFrame::write("message", f.id.as_deref(), &v.to_string()),
            Read::Same => f.raw,
            Read::Unreadable => {
                self.report_unreadable("an event-stream message");
                Vec::new()
            }
        }
    }

    /// cordon's stand-in for a JSON answer it cannot read: an error to each request asked.
    fn unreadable(&self) -> Vec<u8> {
        self.report_unreadable("a JSON answer");
        let why = format!(
            "cordon: the MCP server {}:{} answered with JSON-RPC that cordon cannot read (NaN, a byte-order mark, UTF-16, a lone surrogate, or malformed JSON); cordon checks every answer, so this one was withheld",
            self.cx.host, self.cx.port
        );
        let (ids, batch) = &self.asked;
        let errors: Vec<Value> = if ids.is_empty() {
            vec![crate::mcp::jsonrpc::error(&Value::Null, &why)]
        } else {
            ids.iter()
                .map(|id| crate::mcp::jsonrpc::error(id, &why))
                .collect()
        };
        crate::mcp::jsonrpc::answer(errors, *batch)
    }

    fn report_unreadable(&self, what: &str) {
        (self.cx.emit)(NewEvent::new(
            Layer::Mcp,
            EvAction::Deny,
            format!(
                "{what} from the MCP server {}:{} looks like JSON-RPC but does not parse; withheld",
                self.cx.host, self.cx.port
            ),
        ));
    }

    /// An SSE stream named where its client posts: refused calls posted there are answered
    /// down this stream.
    fn learn(&mut self, uri: &str) {
        let uri = uri.trim();
        // Absolute (`https://host/messages?..`) or relative to the stream's URL.
        let target = match uri.split_once("://") {
            Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
            None => uri,
        };
        if !target.starts_with('/') {
            return;
        }
        let (tx, rx) = unbounded_channel();
        self.cx
            .mcp
            .learn_endpoint(&self.cx.host, self.cx.port, target, tx);
        self.inject = Some(rx);
    }

    fn spent(&self) -> BoxError {
        let why = format!(
            "an MCP answer from {}:{} could not be held: {}; stopped",
            self.cx.host,
            self.cx.port,
            crate::mcp::budget::Spent
        );
        (self.cx.emit)(NewEvent::new(Layer::Mcp, EvAction::Error, why.clone()));
        why.into()
    }

    fn too_long(&self) -> BoxError {
        let why = format!(
            "an MCP answer from {}:{} is longer than cordon reads ({MAX_ANSWER} bytes a message); stopped",
            self.cx.host, self.cx.port
        );
        (self.cx.emit)(NewEvent::new(Layer::Mcp, EvAction::Error, why.clone()));
        why.into()
    }
}

impl hyper::body::Body for Filtered {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            if let Some(b) = self.out.pop_front() {
                if b.is_empty() {
                    continue;
                }
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
            if self.done {
                return Poll::Ready(self.trailers.take().map(Ok));
            }
            if let Some(rx) = self.inject.as_mut()
                && let Poll::Ready(Some(v)) = rx.poll_recv(cx)
            {
                self.out.push_back(Bytes::from(v));
                continue;
            }
            match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => {
                        if let Err(e) = self.take(&d) {
                            self.done = true;
                            return Poll::Ready(Some(Err(e)));
                        }
                    }
                    Err(t) => {
                        self.trailers = Some(t);
                        self.end();
                    }
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => self.end(),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.out.is_empty() && self.trailers.is_none()
    }
}
