//! A brokered token exchange (`[credentials.X] refresh`): a request to a login's token
//! endpoint takes this way instead of stages 3, 5 and 6, since both its body and its answer
//! carry secrets. The body is read whole (it is small) and checked like any other; the
//! refresh token's placeholder in it becomes the real one; the answer is read whole too, its
//! new tokens written to the host's login file before the agent sees it with placeholders
//! ([`crate::credentials::refresh`]). An answer that cannot be read is never passed on: it
//! may hold real tokens.

use std::io::Write;

use cordon_events::{Action as EvAction, Layer, NewEvent};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};

use super::body::{BODY_PREFIX_TIMEOUT, ReadBody};
use super::check::Cleared;
use super::{Body, Exchange, HOP_BY_HOP, Refused};
use crate::credentials::refresh::replace_all;
use crate::credentials::swap::{leak_event, leak_refusal, swap};
use crate::intercept::Forwarding;

/// A token request's body, at most this long.
const MAX_REQUEST: usize = 64 << 10;
/// A token endpoint's answer, at most this long.
const MAX_ANSWER: usize = 1 << 20;

/// Whether `ex` is a token exchange this session brokers (POST over TLS to an endpoint a
/// login names).
pub(crate) fn brokered(i: Forwarding<'_>, ex: &Exchange<'_>) -> bool {
    ex.method == "POST"
        && ex.conn.scheme == "https"
        && i.wire
            .logins
            .get()
            .is_some_and(|l| l.is_endpoint(ex.host(), ex.conn.port, &ex.path))
}

/// Reads the whole body, for the checks and the exchange.
pub(crate) async fn read(
    req: Request<Incoming>,
) -> Result<(hyper::http::request::Parts, ReadBody), Refused> {
    let encoded = req
        .headers()
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    if encoded {
        return Err(Refused::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "cordon: a login's token request must not be compressed (cordon reads it to put the real refresh token in)\n",
        ));
    }
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(
        BODY_PREFIX_TIMEOUT,
        Limited::new(body, MAX_REQUEST).collect(),
    )
    .await;
    let bytes = match read {
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(e)) => {
            return Err(Refused::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("cordon: reading a login's token request: {e}\n"),
            ));
        }
        Err(_) => {
            return Err(Refused::new(
                StatusCode::REQUEST_TIMEOUT,
                "cordon: a login's token request took too long to arrive\n",
            ));
        }
    };
    Ok((
        parts,
        ReadBody {
            scanned: bytes.to_vec(),
            ..ReadBody::default()
        },
    ))
}

/// Sends the exchange upstream and hands the agent its answer (see the module docs).
pub(crate) async fn exchange(
    i: Forwarding<'_>,
    mut parts: hyper::http::request::Parts,
    ex: &Exchange<'_>,
    verdict: &Cleared,
    body: ReadBody,
) -> Result<Response<Body>, Refused> {
    let Some(logins) = i.wire.logins.get() else {
        return Err(Refused::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "cordon: no logins\n",
        ));
    };
    let _one = logins.one_at_a_time().await;
    let live = logins.live();
    let creds = live
        .as_ref()
        .map_or(&i.wire.credentials[..], |l| &l.credentials[..]);
    let to = (ex.host(), ex.conn.port, ex.path.as_str());
    let json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
    // Only a credential kept for this request's process is swapped into the body; another's
    // placeholder stays, and the wire's check below refuses it as a leak.
    let mine: Vec<_> = creds
        .iter()
        .filter(|c| cordon_policy::program::applies(&c.programs, true, ex.conn.owner))
        .cloned()
        .collect();
    // Read from the agent's request, before its placeholder becomes the real token.
    let hold = logins.hold_reason(&mine, to, json, &body.scanned);
    let (sent, grant) = logins.request_body(&mine, to, json, &body.scanned);
    upstream_head(i, ex, &mut parts, creds, &sent)?;
    let bytes_up = ex.head_len() + sent.len() as u64;
    let out = Request::from_parts(
        parts,
        Full::new(Bytes::from(sent))
            .map_err(|never| match never {})
            .boxed(),
    );
    let (mut head, answer) = send(i, ex, verdict, out).await?;
    let status = head.status;
    let answered = status
        .is_success()
        .then(|| logins.answer(creds, to, &answer, hold))
        .flatten();
    let body = match &answered {
        Some(a) => a.body.clone(),
        // Scrubbed of every real value the session knows, as any answer.
        None => {
            let mut b = answer.to_vec();
            for c in creds {
                b = replace_all(&b, c.real.as_bytes(), c.placeholder.as_bytes());
            }
            b
        }
    };
    if let Some(a) = &answered {
        took_new_tokens(i, ex, logins, &grant, a);
    }
    for h in HOP_BY_HOP {
        head.headers.remove(*h);
    }
    head.headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    let what = match (&answered, grant.as_str()) {
        (Some(a), _) if a.held_why.is_some() => {
            "token exchange brokered: new tokens held, not written to the host's login file"
        }
        (Some(_), "authorization_code") => "login brokered: new tokens to the host's login file",
        (Some(_), _) => "token refresh brokered: new tokens to the host's login file",
        (None, _) => "token exchange forwarded (no new token in the answer)",
    };
    let e = verdict.mark(ex.event(EvAction::Allow, status.as_u16(), what, &verdict.decided_by));
    let bytes_down = super::count::response_head_len(status, &head.headers) + answer.len() as u64;
    (i.screens.emit)(
        e.detail("grant_type", grant)
            .detail("bytes_up", bytes_up)
            .detail("bytes_down", bytes_down),
    );
    Ok(Response::from_parts(
        head,
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    ))
}

/// The request as it goes upstream: to the endpoint by its full URI, without hop-by-hop
/// headers, asking for an uncompressed answer, its other placeholders swapped as any
/// request's (one left is a leak, refused).
fn upstream_head(
    i: Forwarding<'_>,
    ex: &Exchange<'_>,
    parts: &mut hyper::http::request::Parts,
    creds: &[crate::credentials::WireCredential],
    sent: &[u8],
) -> Result<(), Refused> {
    let pq = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let authority = if ex.conn.port == 443 {
        ex.host().to_string()
    } else {
        format!("{}:{}", ex.host(), ex.conn.port)
    };
    parts.uri = format!("https://{authority}{pq}")
        .parse()
        .map_err(|_| Refused::new(StatusCode::BAD_REQUEST, "cordon: bad request target\n"))?;
    for h in HOP_BY_HOP {
        parts.headers.remove(*h);
    }
    parts.headers.remove(header::HOST);
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(sent.len()));
    // The answer is read for its tokens: it must come uncompressed.
    parts.headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    parts.version = hyper::Version::HTTP_11;
    // The rest of the request as any other: a placeholder anywhere else is a leak.
    swap(creds, parts, ex.host(), ex.conn.owner, sent).map_err(|(name, place)| {
        (i.screens.emit)(
            leak_event(&format!("{} {}", ex.method, ex.url), &name, &place)
                .detail("method", ex.method.clone())
                .detail("url", ex.shown_url()),
        );
        Refused::new(StatusCode::FORBIDDEN, leak_refusal(&name, &place))
    })?;
    Ok(())
}

/// Sends `out` to the token endpoint and reads its whole answer, uncompressed; a failure is
/// an error event and the refusal the agent gets.
async fn send(
    i: Forwarding<'_>,
    ex: &Exchange<'_>,
    verdict: &Cleared,
    out: Request<Body>,
) -> Result<(hyper::http::response::Parts, Bytes), Refused> {
    let refuse = |status: StatusCode, why: String| {
        (i.screens.emit)(verdict.mark(ex.event(
            EvAction::Error,
            status.as_u16(),
            &why,
            &verdict.decided_by,
        )));
        Refused::new(status, format!("cordon: {}: {why}\n", ex.url))
    };
    let _permit = i.upstreams.permits.clone().acquire_owned().await.ok();
    let resp = i
        .upstreams
        .client
        .request(out)
        .await
        .map_err(|e| refuse(StatusCode::BAD_GATEWAY, format!("the token endpoint: {e}")))?;
    let (head, incoming) = resp.into_parts();
    let answer = tokio::time::timeout(
        BODY_PREFIX_TIMEOUT,
        Limited::new(incoming, MAX_ANSWER).collect(),
    )
    .await
    .map_err(|_| {
        refuse(
            StatusCode::GATEWAY_TIMEOUT,
            "the token endpoint's answer took too long".into(),
        )
    })?
    .map_err(|e| {
        refuse(
            StatusCode::BAD_GATEWAY,
            format!("reading the token endpoint's answer: {e}"),
        )
    })?
    .to_bytes();
    let encoded = head
        .headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    if encoded {
        return Err(refuse(
            StatusCode::BAD_GATEWAY,
            "the token endpoint answered compressed although asked not to; cordon cannot take the new tokens out of it, so it does not pass it on (log in again if the login stops working)".into(),
        ));
    }
    Ok((head, answer))
}

/// An answer with new tokens: its placeholders are let past secret scanning, its events
/// written, and a finished login said on the terminal.
fn took_new_tokens(
    i: Forwarding<'_>,
    ex: &Exchange<'_>,
    logins: &crate::credentials::refresh::Logins,
    grant: &str,
    a: &crate::credentials::refresh::Answered,
) {
    // The new placeholders keep their token's shape: secret scanning lets them pass as
    // it does the session's first ones.
    if let (Some(d), Some(live)) = (&i.screens.dlp, logins.live()) {
        for c in &live.credentials {
            d.scanner.ignore_placeholder(&c.placeholder);
        }
    }
    report(i, ex, grant, a);
    if grant == "authorization_code" && a.failed.is_empty() && a.held_why.is_none() {
        let files: Vec<String> = a.written.iter().map(|f| f.display().to_string()).collect();
        let _ = write!(
            std::io::stderr(),
            "\r\ncordon: logged in: the real tokens are in {} on the host; the agent holds placeholders, and its own copy of the login file lasts this session only\r\n",
            files.join(", ")
        );
    }
}

/// The credentials layer's events for an exchange that renewed tokens, and a line on the
/// terminal when the host's file could not take them.
fn report(
    i: Forwarding<'_>,
    ex: &Exchange<'_>,
    grant: &str,
    a: &crate::credentials::refresh::Answered,
) {
    for f in &a.written {
        (i.screens.emit)(
            ex.credentials_event(
                EvAction::Apply,
                &format!(
                    "login {} renewed ({grant}): the real tokens went to {}, the sandbox got placeholders",
                    a.renewed.join(", "),
                    f.display()
                ),
                &format!("credentials.{}", a.renewed.join(",")),
            )
            .detail("file", f.display().to_string()),
        );
    }
    if let Some(why) = &a.held_why {
        for (f, copy) in &a.held {
            let line = match copy {
                Ok(c) => format!(
                    "cordon: the login's new tokens were not written to {} ({why}): they work \
                     for this session and are held in {}; to use that login on the host, review \
                     it and copy it over",
                    f.display(),
                    c.display()
                ),
                Err(e) => format!(
                    "cordon: the login's new tokens were not written to {} ({why}), nor held \
                     ({e}): they work for this session only",
                    f.display()
                ),
            };
            let _ = write!(std::io::stderr(), "\r\n{line}\r\n");
            let mut e = ex
                .credentials_event(
                    EvAction::Deny,
                    &format!(
                        "login {} not written to the host's login file: {why}",
                        a.renewed.join(", ")
                    ),
                    &format!("credentials.{}", a.renewed.join(",")),
                )
                .detail("file", f.display().to_string());
            if let Ok(c) = copy {
                e = e.detail("held", c.display().to_string());
            }
            (i.screens.emit)(e);
        }
    }
    for (f, why) in &a.failed {
        let line = format!(
            "cordon: the login's new tokens could not be written to {} ({why}); they work until this session ends, then log in again",
            f.display()
        );
        // A pty in raw mode needs the carriage returns.
        let _ = write!(std::io::stderr(), "\r\n{line}\r\n");
        (i.screens.emit)(
            NewEvent::new(Layer::Credentials, EvAction::Error, line)
                .rule(format!("credentials.{}", a.renewed.join(","))),
        );
    }
}
