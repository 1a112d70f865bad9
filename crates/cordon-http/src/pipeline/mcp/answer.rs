//! An MCP server's answer on its way back: `tools/list` results filtered ([`crate::mcp::tools`])
//! whether they come as one JSON body (read whole, bounded) or as `text/event-stream` frames
//! (each frame handed on as soon as it is whole, never the stream buffered). An SSE stream's
//! `endpoint` event is learnt, and cordon's own answers to refused calls posted there are
//! slipped into the stream between two frames.

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
use crate::intercept::Interceptor;
use crate::mcp::sse::{Frame as SseFrame, Parser};
use crate::mcp::tools::{ListCx, filter as filter_list};

/// A JSON answer is read whole up to this; one SSE frame may be this long.
const MAX_ANSWER: usize = 8 << 20;

/// `resp` with its MCP content filtered (anything but a successful JSON or event-stream
/// answer is left as it is).
pub(crate) fn filter(
    i: &Interceptor,
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
    // A POST only the `Accept` made look like MCP, whose body was not JSON-RPC (an LLM API
    // streaming its answer): its answer is not MCP's either.
    let not_mcp = ex.method == "POST" && !spot.rpc && !spot.strong;
    let mode = if !resp.status().is_success() || not_mcp {
        return resp;
    } else if kind.starts_with("text/event-stream") {
        Mode::Sse(Parser::new(MAX_ANSWER))
    } else if kind.starts_with("application/json") && ex.method == "POST" {
        Mode::Json(Vec::new())
    } else {
        return resp;
    };
    let cx = ListCx {
        mcp: spot.mcp,
        host: ex.host().to_string(),
        port: ex.conn.port,
        emit: i.emit.clone(),
    };
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let filtered = Filtered {
        inner: body,
        mode,
        cx: Arc::new(cx),
        out: VecDeque::new(),
        inject: None,
        trailers: None,
        done: false,
    };
    Response::from_parts(parts, filtered.boxed())
}

/// `text` as JSON with its tool lists filtered, when that changed anything.
fn filtered(cx: &ListCx, text: &[u8]) -> Option<Value> {
    let mut v = serde_json::from_slice::<Value>(text).ok()?;
    filter_list(cx, &mut v).then_some(v)
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
    /// Ready to hand on.
    out: VecDeque<Bytes>,
    /// cordon's answers to slip into an SSE stream (once its endpoint is known).
    inject: Option<UnboundedReceiver<Vec<u8>>>,
    trailers: Option<Frame<Bytes>>,
    done: bool,
}

impl Filtered {
    /// Takes a chunk of the server's answer.
    fn take(&mut self, chunk: &[u8]) -> Result<(), BoxError> {
        match &mut self.mode {
            Mode::Json(buf) => {
                if buf.len() + chunk.len() > MAX_ANSWER {
                    return Err(self.too_long());
                }
                buf.extend_from_slice(chunk);
            }
            Mode::Sse(p) => {
                let frames = p.push(chunk).map_err(|_| self.too_long())?;
                for f in frames {
                    let b = self.frame(f);
                    self.out.push_back(Bytes::from(b));
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
                let out = match filtered(&self.cx, &buf) {
                    Some(v) => serde_json::to_vec(&v).unwrap_or(buf),
                    None => buf,
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
        self.done = true;
    }

    /// One whole SSE frame, as it goes on.
    fn frame(&mut self, f: SseFrame) -> Vec<u8> {
        if f.event == "endpoint" {
            self.learn(&f.data);
            return f.raw;
        }
        if f.event != "message" {
            return f.raw;
        }
        match filtered(&self.cx, f.data.as_bytes()) {
            Some(v) => SseFrame::write("message", f.id.as_deref(), &v.to_string()),
            None => f.raw,
        }
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
            .learn_endpoint(&self.cx.host, self.cx.port, target.to_string(), tx);
        self.inject = Some(rx);
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
