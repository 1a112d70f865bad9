//! Stage 1, admit: what the request is, read the way the server will read it. A path whose
//! meaning is ambiguous (encoded `/`, `..` above the root…) gets a 400; an authority or a
//! `Host` naming anything but the connection's host (or two `Host` headers) gets a 421 — one
//! allowed connection never carries requests for another host.

use std::time::Instant;

use cordon_events::Action as EvAction;
use hyper::header;
use hyper::{Request, StatusCode};

use super::{Conn, Exchange, Refused};
use crate::intercept::Screens;

/// The request's facts, or its refusal.
pub(crate) fn admit<'a, B>(
    screens: &Screens,
    req: &Request<B>,
    conn: Conn<'a>,
) -> Result<Exchange<'a>, Refused> {
    let started = Instant::now();
    let Conn {
        host, port, scheme, ..
    } = conn;
    let raw_path = req.uri().path();
    // Rules match the path as the server will read it, so an encoding cannot slip past.
    let path = normalize_url_path(raw_path).map_err(|why| {
        Refused::new(
            StatusCode::BAD_REQUEST,
            format!(
                "cordon: refused an ambiguous path ({why})
"
            ),
        )
    })?;
    // Events and refusals name the URL with any token in its path redacted.
    let url = format!(
        "{scheme}://{host}{}{}",
        port_suffix(scheme, port),
        screens.redact(&path)
    );
    let ex = Exchange {
        conn,
        started,
        method: req.method().as_str().to_string(),
        path,
        query: req.uri().query().unwrap_or("").to_string(),
        target: req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string(),
        url,
        headers: req
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body_len: req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .or_else(|| {
                (req.method() == hyper::Method::GET || req.method() == hyper::Method::HEAD)
                    .then_some(0)
            }),
    };
    // The connection's host decides; what goes upstream carries the connection's host.
    if let Some(claimed) = misdirected(req, conn) {
        (screens.emit)(ex.event(
            EvAction::Deny,
            421,
            &format!("Host {claimed:?} on a connection to {host}"),
            "http.host-mismatch",
        ));
        return Err(Refused::new(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "cordon: this connection goes to {host}; a request for {claimed} must use its own connection
"
            ),
        ));
    }
    Ok(ex)
}

/// The host a request claims besides the connection's (its authority or a `Host` header), or
/// "two Host headers"; `None` when it names the connection's host only.
fn misdirected<B>(req: &Request<B>, conn: Conn<'_>) -> Option<String> {
    request_hosts(req)
        .into_iter()
        .find(|c| !same_host(c, conn.host, conn.port, conn.scheme))
        .or_else(|| {
            (req.headers().get_all(header::HOST).iter().count() > 1)
                .then(|| "two Host headers".to_string())
        })
}

/// The port as a URL shows it: nothing for the scheme's own.
fn port_suffix(scheme: &str, port: u16) -> String {
    match (scheme, port) {
        ("https", 443) | ("http", 80) => String::new(),
        _ => format!(":{port}"),
    }
}

/// A URL path as a server reads it, for rule matching: percent-escapes decoded once, empty and
/// `.` segments dropped, `..` resolved. (Not a file path: those are normalised by
/// `cordon_events::lexical`, which decodes nothing and refuses nothing.) Encoded `/`, `\\` or NUL, a raw `\\`, a `..` above
/// the root, or invalid escapes are refused: no rule can be written for what they mean.
pub(crate) fn normalize_url_path(raw: &str) -> Result<String, &'static str> {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            let (Some(h), Some(l)) = (
                b.get(i + 1).and_then(|c| hex(*c)),
                b.get(i + 2).and_then(|c| hex(*c)),
            ) else {
                return Err("an invalid percent-escape");
            };
            let v = (h * 16 + l) as u8;
            if matches!(v, b'/' | b'\\' | 0) {
                return Err("an encoded '/', '\\' or NUL");
            }
            out.push(v);
            i += 3;
        } else {
            if b[i] == b'\\' {
                return Err("a backslash");
            }
            out.push(b[i]);
            i += 1;
        }
    }
    let decoded = String::from_utf8(out).map_err(|_| "bytes that are not UTF-8")?;
    let mut segs: Vec<&str> = Vec::new();
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if segs.pop().is_none() {
                    return Err("'..' above the root");
                }
            }
            s => segs.push(s),
        }
    }
    let mut p = format!("/{}", segs.join("/"));
    if decoded.ends_with('/') && !segs.is_empty() {
        p.push('/');
    }
    Ok(p)
}

/// Every host a request names: its authority (HTTP/2, absolute-form) and each Host header.
/// A Host header that is not text counts as a name no connection has.
fn request_hosts<B>(req: &Request<B>) -> Vec<String> {
    let mut out: Vec<String> = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .into_iter()
        .collect();
    for v in req.headers().get_all(header::HOST) {
        out.push(
            v.to_str()
                .map_or_else(|_| "\u{fffd}".to_string(), str::to_string),
        );
    }
    out
}

/// Whether `claimed` (`host[:port]`) names the connection's host and port.
fn same_host(claimed: &str, host: &str, port: u16, scheme: &str) -> bool {
    let default = if scheme == "http" { 80 } else { 443 };
    let claimed = claimed.trim().to_ascii_lowercase();
    let (h, p) = match claimed.rsplit_once(':') {
        // A bare IPv6 address: its colons are not a port separator.
        Some((h, _)) if !h.ends_with(']') && h.contains(':') => (claimed.as_str(), default),
        Some((h, p)) => match p.parse::<u16>() {
            Ok(p) => (h, p),
            Err(_) => return false,
        },
        None => (claimed.as_str(), default),
    };
    let h = h
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.');
    h == host.trim_end_matches('.').to_ascii_lowercase() && p == port
}

#[cfg(test)]
#[path = "admit_tests.rs"]
mod tests;
