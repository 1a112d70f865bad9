//! A request body checked as it streams (part of stage 3/5: the body is not waited for, but
//! nothing leaves unchecked): each chunk is scanned with the bytes held back from the one
//! before, so a secret or a placeholder split across chunks is seen whole before any of it
//! is sent; on a finding the upstream request is aborted and the handler answers 403.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use cordon_events::{Action as EvAction, Layer, NewEvent};
use hyper::body::{Bytes, Incoming};

use super::check::describe_findings;
use super::{BoxError, plus_held};
use crate::credentials::swap::leak_event;
use crate::intercept::Emit;

/// A streamed body that pauses this long with bytes held back releases what cannot begin a
/// secret; after twice as long, all of it (see [`ScannedBody`]).
const BODY_HOLD_IDLE: Duration = Duration::from_millis(250);

/// Where a streamed body's trip is recorded, for the handler and the answer.
pub(crate) type TripCell = Arc<std::sync::Mutex<Option<Trip>>>;

/// Why a streamed request body was stopped.
#[derive(Debug, Clone)]
pub(crate) enum Trip {
    /// Secrets the policy does not let go to this host.
    Secret(Vec<crate::dlp::Finding>),
    /// A credential's placeholder (its name).
    Placeholder(String),
}

/// The event for a streamed body that tripped (`goes_on`: `[dlp] action = "log"`).
pub(crate) fn trip_event(t: &Trip, goes_on: bool, label: &str) -> NewEvent {
    match t {
        Trip::Placeholder(name) => leak_event(label, name, "in the body"),
        Trip::Secret(found) => {
            let (kinds, what) = describe_findings(found);
            let (a, outcome) = if goes_on {
                (EvAction::Log, "forwarded ([dlp] action = \"log\")")
            } else {
                (
                    EvAction::Deny,
                    "refused; the body was stopped before it left",
                )
            };
            NewEvent::new(
                Layer::Credentials,
                a,
                format!("{label}: carries a secret ({what}); {outcome}"),
            )
            .rule(format!("dlp:{}", kinds.join(",")))
            .detail("kinds", kinds.join(","))
        }
    }
}
/// A request body on its way upstream, checked as it passes (no waiting for the whole body):
/// each chunk is scanned together with the bytes held back from the one before, and only
/// what lies more than `window` bytes before the end leaves — so a secret or placeholder
/// split across chunks is seen whole before any of it is sent. On a finding the body fails:
/// the upstream request is aborted, and the handler answers 403 from `trip`.
pub(crate) struct ScannedBody<B: hyper::body::Body = Incoming> {
    inner: B,
    scanner: Option<Arc<crate::dlp::Scanner>>,
    /// `[dlp] action = "log"`: findings are reported (once), the body goes on.
    log_only: bool,
    placeholders: Arc<Vec<(String, String)>>,
    host: String,
    pending: Vec<u8>,
    window: usize,
    /// Bytes still to scan (`[dlp] max_body_bytes`); after that the body passes as it is.
    left: usize,
    trip: TripCell,
    /// A trailers frame that waits for the held bytes to go first.
    trailers: Option<hyper::body::Frame<Bytes>>,
    /// Bytes in `pending` not scanned yet.
    fresh: usize,
    /// The budget ran out in the last scan: one more scan covers what straddles its end.
    tail_scan: bool,
    /// A body that pauses with bytes held: after a short wait, what cannot begin a secret
    /// goes; after a second, everything (a client waiting for the server must not hang).
    idle: Option<Pin<Box<tokio::time::Sleep>>>,
    idle_stage: u8,
    /// Events, reported the moment the body trips: the server may have answered already.
    emit: Emit,
    /// `METHOD URL` (query values hidden), for the event.
    label: String,
    /// Set once the body has ended, failed or was dropped: an early answer waits for it.
    done: tokio::sync::watch::Sender<bool>,
}

/// What a streamed body is checked for, and where a finding goes.
pub(crate) struct Watch {
    /// `[dlp]`'s scanner, if on.
    pub scanner: Option<Arc<crate::dlp::Scanner>>,
    /// `[dlp] action = "log"`.
    pub log_only: bool,
    /// (credential, placeholder).
    pub placeholders: Arc<Vec<(String, String)>>,
    /// The connection's host (each secret kind's issuers are exempt).
    pub host: String,
    /// The longest secret or placeholder.
    pub window: usize,
    /// Bytes scanned at most.
    pub budget: usize,
    pub trip: TripCell,
    pub emit: Emit,
    /// `METHOD URL` (query values hidden), for the event.
    pub label: String,
    /// Set once the body has ended, failed or was dropped.
    pub done: tokio::sync::watch::Sender<bool>,
}

impl<B: hyper::body::Body> ScannedBody<B> {
    pub(crate) fn new(inner: B, w: Watch) -> Self {
        Self {
            inner,
            scanner: w.scanner,
            log_only: w.log_only,
            placeholders: w.placeholders,
            host: w.host,
            pending: Vec::new(),
            window: w.window,
            left: w.budget,
            trip: w.trip,
            trailers: None,
            fresh: 0,
            tail_scan: false,
            idle: None,
            idle_stage: 0,
            emit: w.emit,
            label: w.label,
            done: w.done,
        }
    }
}

impl<B: hyper::body::Body> Drop for ScannedBody<B> {
    fn drop(&mut self) {
        self.done.send_replace(true);
    }
}

impl<B: hyper::body::Body> ScannedBody<B> {
    fn check(&mut self, buf: &[u8]) -> Option<Trip> {
        for (name, ph) in self.placeholders.iter() {
            if !ph.is_empty() && memchr::memmem::find(buf, ph.as_bytes()).is_some() {
                return Some(Trip::Placeholder(name.clone()));
            }
        }
        let scanner = self.scanner.as_ref()?;
        let found: Vec<crate::dlp::Finding> = scanner
            .scan(buf, crate::dlp::Place::Body)
            .into_iter()
            .filter(|f| !scanner.exempt(&f.kind, &self.host))
            .collect();
        (!found.is_empty()).then_some(Trip::Secret(found))
    }
}

/// How much of a held tail a release keeps.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Nothing: the body ended (or is past its budget).
    Nothing,
    /// The trailing run of token characters (a pause: what cannot begin a secret goes).
    Token,
    /// The scan window, or more where a JWT has begun (a chunk boundary).
    Window,
}

/// Bytes tokens are made of: a secret never spans anything else (PEM headers aside, which
/// fit the window).
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_.+/=-".contains(&b)
}

/// Where the trailing run of token bytes begins.
fn token_run_start(buf: &[u8]) -> usize {
    buf.iter()
        .rposition(|b| !token_byte(*b))
        .map_or(0, |i| i + 1)
}

/// The most a held tail grows to keep a long token whole (a JWT in a chunked upload).
const MAX_TOKEN_HOLD: usize = 16 << 10;

impl<B: hyper::body::Body> ScannedBody<B> {
    /// Scans what is new, then takes out what may leave now.
    fn release(&mut self, keep: Keep) -> Result<Vec<u8>, BoxError> {
        let under_budget = self.left > 0;
        if (under_budget || self.tail_scan) && self.fresh > 0 {
            let buf = std::mem::take(&mut self.pending);
            let tripped = self.check(&buf);
            self.pending = buf;
            if let Some(t) = tripped {
                self.tripped(t)?;
            }
        }
        if !under_budget {
            self.tail_scan = false;
        }
        self.left = self.left.saturating_sub(self.fresh);
        if under_budget && self.left == 0 {
            self.tail_scan = true;
        }
        self.fresh = 0;
        let len = self.pending.len();
        let run = len - token_run_start(&self.pending);
        let hold = match keep {
            _ if !under_budget => 0,
            Keep::Nothing => 0,
            Keep::Token => run.min(MAX_TOKEN_HOLD),
            Keep::Window => {
                let tail = &self.pending[len - run..];
                let jwt = memchr::memmem::find(tail, b"eyJ").map_or(0, |i| run - i);
                let w = self.window.saturating_sub(1);
                if jwt > w && jwt <= MAX_TOKEN_HOLD {
                    jwt
                } else {
                    w
                }
            }
        };
        let rest = self.pending.split_off(len - hold.min(len));
        Ok(std::mem::replace(&mut self.pending, rest))
    }
}

impl<B: hyper::body::Body> ScannedBody<B> {
    /// Trailers are headers too: checked whole, like the body (within its budget).
    fn check_trailers(&mut self, f: &hyper::body::Frame<Bytes>) -> Result<(), BoxError> {
        let Some(t) = f.trailers_ref().filter(|_| self.left > 0 || self.tail_scan) else {
            return Ok(());
        };
        let mut text = Vec::new();
        for (k, v) in t {
            text.extend_from_slice(k.as_str().as_bytes());
            text.extend_from_slice(b": ");
            text.extend_from_slice(v.as_bytes());
            text.push(b'\n');
        }
        match self.check(&text) {
            Some(t) => self.tripped(t),
            None => Ok(()),
        }
    }

    /// Reports a finding the moment it is made (the server may have answered already) and
    /// records it for the handler; stops the body unless `[dlp] action = "log"` lets a secret
    /// go on — reported once: the rest is not scanned for secrets again.
    fn tripped(&mut self, t: Trip) -> Result<(), BoxError> {
        let goes_on = self.log_only && matches!(t, Trip::Secret(_));
        (self.emit)(trip_event(&t, goes_on, &self.label));
        *self.trip.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
        if !goes_on {
            return Err("cordon stopped a request body".into());
        }
        self.scanner = None;
        Ok(())
    }
}

impl<B> hyper::body::Body for ScannedBody<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        use hyper::body::Frame;
        let data = |v: Vec<u8>| Poll::Ready(Some(Ok(Frame::data(Bytes::from(v)))));
        if let Some(t) = self.trailers.take() {
            return Poll::Ready(Some(Ok(t)));
        }
        loop {
            let next = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(n) => {
                    self.idle = None;
                    self.idle_stage = 0;
                    n
                }
                Poll::Pending => {
                    if self.pending.is_empty() {
                        return Poll::Pending;
                    }
                    let sleep = self
                        .idle
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(BODY_HOLD_IDLE)));
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.idle = None;
                    let keep = if self.idle_stage == 0 {
                        Keep::Token
                    } else {
                        Keep::Nothing
                    };
                    self.idle_stage = self.idle_stage.saturating_add(1);
                    match self.release(keep) {
                        Err(e) => return Poll::Ready(Some(Err(e))),
                        Ok(out) if !out.is_empty() => return data(out),
                        // Nothing could go yet: wait again (the timer re-arms).
                        Ok(_) => continue,
                    }
                }
            };
            match next {
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => {
                        if self.left == 0 && !self.tail_scan && self.pending.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(d))));
                        }
                        self.pending.extend_from_slice(&d);
                        self.fresh += d.len();
                        let keep = if self.inner.is_end_stream() {
                            Keep::Nothing
                        } else if self.fresh < self.window && self.pending.len() < MAX_TOKEN_HOLD {
                            // Small pieces are gathered before a scan (each byte is scanned
                            // about twice, however the body is cut).
                            continue;
                        } else {
                            Keep::Window
                        };
                        match self.release(keep) {
                            Err(e) => return Poll::Ready(Some(Err(e))),
                            Ok(out) if !out.is_empty() => return data(out),
                            // All held back: an empty chunk would end an HTTP/1 body.
                            Ok(_) => continue,
                        }
                    }
                    Err(trailers) => match self
                        .check_trailers(&trailers)
                        .and_then(|()| self.release(Keep::Nothing))
                    {
                        Err(e) => return Poll::Ready(Some(Err(e))),
                        Ok(out) if !out.is_empty() => {
                            // The bytes first (checked), the trailers on the next poll.
                            self.trailers = Some(trailers);
                            return data(out);
                        }
                        Ok(_) => return Poll::Ready(Some(Ok(trailers))),
                    },
                },
                Some(Err(e)) => {
                    self.done.send_replace(true);
                    return Poll::Ready(Some(Err(e.into())));
                }
                None => {
                    let r = self.release(Keep::Nothing);
                    self.done.send_replace(true);
                    return match r {
                        Err(e) => Poll::Ready(Some(Err(e))),
                        Ok(out) if !out.is_empty() => data(out),
                        Ok(_) => Poll::Ready(None),
                    };
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.trailers.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        plus_held(self.inner.size_hint(), self.pending.len())
    }
}

#[cfg(test)]
#[path = "streamed_tests.rs"]
mod tests;
