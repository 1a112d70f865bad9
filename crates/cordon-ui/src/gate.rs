//! Who may talk to the dashboard: the token, the Host header (DNS rebinding) and, for anything
//! that changes something, the Origin (cross-site requests). Pure functions of the request's
//! head, so each refusal is tested alone.

use std::io::Read;

/// The secret in the dashboard's URL: 32 random bytes as 64 hex digits.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never printed by accident (logs, panics): only the URL line shows it.
        f.write_str("Token(…)")
    }
}

impl Token {
    /// A fresh token from `/dev/urandom`.
    pub fn random() -> std::io::Result<Token> {
        let mut buf = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
        Ok(Token(buf.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// A token with a known value, for tests.
    pub fn from_hex(hex: &str) -> Option<Token> {
        (hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Token(hex.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `given` is the token, in time independent of where they differ.
    pub fn matches(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// Why a request is refused before it reaches a handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No `token` in the query, or the wrong one.
    Token,
    /// The Host header is not this server's loopback address: a page on another name that
    /// resolves to 127.0.0.1 (DNS rebinding).
    Host,
    /// A state-changing request without this server's own Origin (cross-site request forgery).
    Origin,
    /// A state-changing request whose body is not declared JSON: a plain HTML form could send it
    /// without a CORS preflight.
    ContentType,
}

impl Refused {
    /// The status and one-line body of the refusal.
    pub fn answer(self) -> (u16, &'static str) {
        match self {
            Refused::Token => (
                403,
                "cordon ui: missing or wrong token: open the URL `cordon ui` printed\n",
            ),
            Refused::Host => (
                403,
                "cordon ui: wrong Host header: open the page as http://127.0.0.1:PORT/\n",
            ),
            Refused::Origin => (403, "cordon ui: cross-origin request refused\n"),
            Refused::ContentType => (415, "cordon ui: send application/json\n"),
        }
    }
}

/// The head of a request, as far as the gate reads it.
pub struct Head<'a> {
    pub method: &'a str,
    /// The query string without `?`.
    pub query: Option<&'a str>,
    pub host: Option<&'a str>,
    pub origin: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub sec_fetch_site: Option<&'a str>,
}

/// The value of `key` in a query string (no percent-decoding: the values read here are hex
/// or plain ids).
pub fn query_param<'a>(query: Option<&'a str>, key: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

fn is_own_host(host: &str, port: u16) -> bool {
    let want = port.to_string();
    match host.rsplit_once(':') {
        Some((name, p)) => p == want && (name == "127.0.0.1" || name == "localhost"),
        None => false,
    }
}

/// Whether a request may go on to its handler.
pub fn check(head: &Head<'_>, token: &Token, port: u16) -> Result<(), Refused> {
    if !head.host.is_some_and(|h| is_own_host(h, port)) {
        return Err(Refused::Host);
    }
    if !query_param(head.query, "token").is_some_and(|t| token.matches(t)) {
        return Err(Refused::Token);
    }
    let safe = matches!(head.method, "GET" | "HEAD");
    if safe {
        return Ok(());
    }
    // Browsers send Origin on every non-GET fetch; a request without one is not from our page.
    let origin_ok = head.origin.is_some_and(|o| {
        o.strip_prefix("http://")
            .is_some_and(|h| is_own_host(h, port))
    });
    if !origin_ok {
        return Err(Refused::Origin);
    }
    if head
        .sec_fetch_site
        .is_some_and(|s| s != "same-origin" && s != "none")
    {
        return Err(Refused::Origin);
    }
    let json = head.content_type.is_some_and(|c| {
        c.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
    });
    if !json {
        return Err(Refused::ContentType);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    fn head<'a>(method: &'a str, query: Option<&'a str>) -> Head<'a> {
        Head {
            method,
            query,
            host: Some("127.0.0.1:4000"),
            origin: None,
            content_type: None,
            sec_fetch_site: None,
        }
    }

    fn tok() -> Token {
        Token::from_hex(T).unwrap()
    }

    #[test]
    fn random_tokens_are_long_hex_and_differ() {
        let a = Token::random().unwrap();
        let b = Token::random().unwrap();
        assert_eq!(a.as_str().len(), 64);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.as_str(), b.as_str());
        assert!(!format!("{a:?}").contains(a.as_str()));
    }

    #[test]
    fn token_must_match_exactly() {
        let t = tok();
        assert!(t.matches(T));
        assert!(!t.matches(&T[..63]));
        assert!(!t.matches(&format!("{T}0")));
        assert!(!t.matches(&T.replace('0', "1")));
        assert!(!t.matches(""));
    }

    #[test]
    fn get_needs_the_token() {
        let t = tok();
        let q = format!("token={T}");
        assert_eq!(check(&head("GET", Some(&q)), &t, 4000), Ok(()));
        let q2 = format!("a=1&token={T}&b=2");
        assert_eq!(check(&head("GET", Some(&q2)), &t, 4000), Ok(()));
        assert_eq!(check(&head("GET", None), &t, 4000), Err(Refused::Token));
        assert_eq!(
            check(&head("GET", Some("token=abc")), &t, 4000),
            Err(Refused::Token)
        );
        assert_eq!(
            check(&head("GET", Some("tokenx=1")), &t, 4000),
            Err(Refused::Token)
        );
    }

    #[test]
    fn host_must_be_our_loopback_address() {
        let t = tok();
        let q = format!("token={T}");
        for bad in [
            None,
            Some("evil.test:4000"),
            Some("127.0.0.1:4001"),
            Some("127.0.0.1"),
            Some("127.0.0.1.evil.test:4000"),
        ] {
            let mut h = head("GET", Some(&q));
            h.host = bad;
            assert_eq!(check(&h, &t, 4000), Err(Refused::Host), "{bad:?}");
        }
        let mut h = head("GET", Some(&q));
        h.host = Some("localhost:4000");
        assert_eq!(check(&h, &t, 4000), Ok(()));
    }

    #[test]
    fn posts_need_our_origin_and_json() {
        let t = tok();
        let q = format!("token={T}");
        let post = |origin, ctype, site| Head {
            origin,
            content_type: ctype,
            sec_fetch_site: site,
            ..head("POST", Some(&q))
        };
        let json = Some("application/json");
        let own = Some("http://127.0.0.1:4000");
        assert_eq!(
            check(&post(own, json, Some("same-origin")), &t, 4000),
            Ok(())
        );
        assert_eq!(
            check(&post(None, json, None), &t, 4000),
            Err(Refused::Origin)
        );
        assert_eq!(
            check(&post(Some("http://evil.test"), json, None), &t, 4000),
            Err(Refused::Origin)
        );
        assert_eq!(
            check(&post(Some("null"), json, None), &t, 4000),
            Err(Refused::Origin)
        );
        assert_eq!(
            check(&post(own, json, Some("cross-site")), &t, 4000),
            Err(Refused::Origin)
        );
        assert_eq!(
            check(&post(own, Some("text/plain"), None), &t, 4000),
            Err(Refused::ContentType)
        );
        assert_eq!(
            check(
                &post(own, Some("application/json; charset=utf-8"), None),
                &t,
                4000
            ),
            Ok(())
        );
        // The token is checked before the origin: no token, no hint about the rest.
        let mut h = post(own, json, None);
        h.query = None;
        assert_eq!(check(&h, &t, 4000), Err(Refused::Token));
    }
}
