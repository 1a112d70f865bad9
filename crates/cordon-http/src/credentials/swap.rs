//! At the wire: placeholders become real values only in the credential's own slot (its
//! header — also inside a Basic value — or its query parameter), in requests to its hosts,
//! over TLS; injected where configured. A placeholder anywhere else — another host, header
//! or parameter, the path, the body, plain HTTP — is a leak: the request is refused.

use cordon_events::{Action as EvAction, Layer, NewEvent};
use hyper::Uri;
use hyper::header::HeaderValue;

use super::WireCredential;
use crate::pipeline::SentForms;

/// A placeholder where it may not go: (credential, where).
pub(crate) type Leak = (String, String);

/// Swaps placeholders for real values where allowed, injects where configured, and reports a
/// placeholder anywhere else as a [`Leak`]. Returns, for scrubbing the response, each form a
/// real value was sent in with the form the sandbox knows it by.
/// `owner`: the process that sent the request (`None`: not found); a credential kept for some
/// programs is another process's leak.
pub(crate) fn swap(
    credentials: &[WireCredential],
    parts: &mut hyper::http::request::Parts,
    host: &str,
    owner: Option<&cordon_policy::Owner>,
    body: &[u8],
) -> Result<SentForms, Leak> {
    let mut sent = Vec::new();
    let cleartext = parts.uri.scheme_str() != Some("https");
    for c in credentials {
        let to_host = c.hosts.iter().any(|h| h.matches(host));
        let from_program = cordon_policy::program::applies(&c.programs, true, owner);
        let ours = to_host && from_program;
        let leak = |place: String| (c.name.clone(), place);
        let elsewhere = || elsewhere(c, host, to_host, owner);
        let before = sent.len();
        let pq = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let (path, query) = pq.split_once('?').unwrap_or((&pq, ""));
        if path.contains(&c.placeholder) {
            return Err(leak("in the URL path".into()));
        }
        let new_query = swap_query(c, ours, path, query, &mut sent, &leak, &elsewhere)?;
        if !c.placeholder.is_empty()
            && memchr::memmem::find(body, c.placeholder.as_bytes()).is_some()
        {
            // From another program to its host: say whose it is not.
            let place = match to_host && !from_program {
                true => elsewhere(),
                false => "in the body".into(),
            };
            return Err(leak(place));
        }
        swap_headers(c, ours, &mut parts.headers, &mut sent, &leak, &elsewhere)?;
        if let Some(pq) = new_query {
            let mut up = parts.uri.clone().into_parts();
            up.path_and_query = pq.parse().ok();
            match Uri::from_parts(up) {
                Ok(u) => parts.uri = u,
                Err(_) => return Err(leak("in a URL it cannot be written to".into())),
            }
        }
        if ours && c.inject {
            inject_headers(c, &mut parts.headers, &mut sent);
        }
        if cleartext && sent.len() > before {
            return Err(leak(
                "over plain HTTP (a credential only travels over TLS)".into(),
            ));
        }
    }
    Ok(sent)
}

/// The query with the credential's own parameter swapped (or injected); `None` when the
/// query carries no placeholder and nothing is injected there. A placeholder in any other
/// parameter, or not the whole value, or another program's, is a leak.
fn swap_query(
    c: &WireCredential,
    ours: bool,
    path: &str,
    query: &str,
    sent: &mut SentForms,
    leak: &dyn Fn(String) -> Leak,
    elsewhere: &dyn Fn() -> String,
) -> Result<Option<String>, Leak> {
    if !(query.contains(&c.placeholder) || (ours && c.inject && c.query().is_some())) {
        return Ok(None);
    }
    let Some(param) = c.query().filter(|_| ours) else {
        return Err(leak(if ours {
            "in the URL query (only its header may carry it)".into()
        } else {
            elsewhere()
        }));
    };
    let real = crate::encoding::percent_encode(c.real.as_bytes());
    let mut pairs = Vec::new();
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (name, value) = kv.split_once('=').unwrap_or((kv, ""));
        if !kv.contains(&c.placeholder) {
            if !(c.inject && name == param) {
                pairs.push(kv.to_string());
            }
        } else if name == param && value == c.placeholder && !c.inject {
            // Only the parameter's whole value: `key=PH;q=PH` would copy it.
            pairs.push(format!("{param}={real}"));
        } else if name == param && c.inject {
            // Overwritten below.
        } else {
            let place = if kv.contains('=') && name != param {
                format!("in query parameter {name} (only {param} may carry it)")
            } else {
                format!("in the URL query, not as the whole value of {param}")
            };
            return Err(leak(place));
        }
    }
    if c.inject {
        pairs.push(format!("{param}={real}"));
    }
    sent.push((real, c.placeholder.clone()));
    Ok(Some(format!("{path}?{}", pairs.join("&"))))
}

/// Swaps the placeholder in the credential's own header (also inside a Basic value); in
/// any other header, or another program's, it is a leak.
fn swap_headers(
    c: &WireCredential,
    ours: bool,
    headers: &mut hyper::HeaderMap,
    sent: &mut SentForms,
    leak: &dyn Fn(String) -> Leak,
    elsewhere: &dyn Fn() -> String,
) -> Result<(), Leak> {
    // Most requests carry no placeholder in any header: nothing to rewrite.
    let touched = headers.values().any(|v| {
        let b = v.as_bytes();
        memchr::memmem::find(b, c.placeholder.as_bytes()).is_some()
            || String::from_utf8_lossy(b)
                .trim()
                .get(..6)
                .is_some_and(|s| s.eq_ignore_ascii_case("basic "))
    });
    if !touched {
        return Ok(());
    }
    rewrite_headers(headers, |name, v| {
        let text = String::from_utf8_lossy(v.as_bytes());
        let trimmed = text.trim();
        // The scheme is case-insensitive (RFC 9110 11.1).
        let basic = trimmed
            .get(..6)
            .filter(|s| s.eq_ignore_ascii_case("basic "))
            .and_then(|_| crate::encoding::b64_decode(trimmed[6..].trim()))
            .map(|d| String::from_utf8_lossy(&d).into_owned());
        let plain_hit = text.contains(&c.placeholder);
        let basic_hit = basic.as_ref().is_some_and(|b| b.contains(&c.placeholder));
        if !plain_hit && !basic_hit {
            return Ok(None);
        }
        if !ours {
            return Err(leak(elsewhere()));
        }
        if !c.carries(name.as_str()) {
            return Err(leak(format!(
                "in header {} (only {} may carry it)",
                name.as_str(),
                c.place()
            )));
        }
        let swapped = if plain_hit {
            text.replace(&c.placeholder, &c.real)
        } else {
            let inner = basic.unwrap_or_default();
            let real = crate::encoding::b64_encode(
                inner.replace(&c.placeholder, &c.real).as_bytes(),
                true,
            );
            sent.push((
                real.clone(),
                crate::encoding::b64_encode(inner.as_bytes(), true),
            ));
            format!("Basic {real}")
        };
        match HeaderValue::from_str(&swapped) {
            Ok(mut hv) => {
                hv.set_sensitive(true);
                sent.push((c.real.clone(), c.placeholder.clone()));
                Ok(Some(hv))
            }
            Err(_) => Err(leak("in a header it cannot be written to".into())),
        }
    })
}

/// Sets every header the credential names to its real value.
fn inject_headers(c: &WireCredential, headers: &mut hyper::HeaderMap, sent: &mut SentForms) {
    // Every header it names: a client may read either.
    for h in c.headers() {
        let real = WireCredential::formatted(&h.format, &c.real);
        if let Ok(name) = hyper::header::HeaderName::from_bytes(h.name.as_bytes())
            && let Ok(mut hv) = HeaderValue::from_str(&real)
        {
            hv.set_sensitive(true);
            headers.insert(name, hv);
            sent.push((real, WireCredential::formatted(&h.format, &c.placeholder)));
            sent.push((c.real.clone(), c.placeholder.clone()));
        }
    }
}

/// Rewrites every header value `f` replaces (`Ok(Some(new))`), keeping the order of a name's
/// values and every other header as it was.
pub(crate) fn rewrite_headers<E>(
    headers: &mut hyper::HeaderMap,
    mut f: impl FnMut(&hyper::header::HeaderName, &HeaderValue) -> Result<Option<HeaderValue>, E>,
) -> Result<(), E> {
    let names: Vec<hyper::header::HeaderName> = headers.keys().cloned().collect();
    for name in names {
        let mut changed = false;
        let mut out = Vec::new();
        for v in headers.get_all(&name) {
            match f(&name, v)? {
                Some(new) => {
                    out.push(new);
                    changed = true;
                }
                None => out.push(v.clone()),
            }
        }
        if changed {
            headers.remove(&name);
            for v in out {
                headers.append(name.clone(), v);
            }
        }
    }
    Ok(())
}

/// The event for a credential's placeholder sent where it may not go.
pub(crate) fn leak_event(label: &str, name: &str, place: &str) -> NewEvent {
    NewEvent::new(
        Layer::Credentials,
        EvAction::Deny,
        format!("{label}: the placeholder of credential `{name}` was sent {place}"),
    )
    .rule(format!("credential-leak:{name}"))
}

/// Where a placeholder of `c` went that is not its own: another host, or (`to_host`) another
/// program's request.
fn elsewhere(
    c: &WireCredential,
    host: &str,
    to_host: bool,
    owner: Option<&cordon_policy::Owner>,
) -> String {
    let only = c.programs.describe();
    match (to_host, owner) {
        (false, _) => format!("to {host}, which is not one of its hosts"),
        (true, Some(o)) => format!(
            "from {}, which is not {only} (only they get it)",
            o.describe()
        ),
        (true, None) => {
            format!("from a process that could not be found, and it is only for {only}")
        }
    }
}

/// What the sandbox is told when a credential's placeholder went where it may not.
pub(crate) fn leak_refusal(name: &str, place: &str) -> String {
    format!(
        "cordon: credential `{name}` may only go to its own hosts, in its own header, from its own programs; this request sent it {place}. Refused.\n"
    )
}

#[cfg(test)]
#[path = "swap_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "swap_proptests.rs"]
mod proptests;
