//! The explicit proxy on the sandbox's `127.0.0.1:3128` (`HTTP_PROXY` and friends point here),
//! for tools that prefer a proxy (a VM's guest reaches it at `ether::LINK_GATEWAY:3128`, as a flow
//! through the userspace stack). With the HTTP layer on, `CONNECT host:443` (and `:80`) and
//! every plain `http://` request go to it (decided request by request, like the transparent
//! path's 443 and 80). Otherwise `CONNECT host:port` is spliced once policy allows it, and a plain request
//! is forwarded with `Connection: close` and the `Host` of its target (one request per upstream
//! connection, so a keep-alive client cannot slip a second host past the decision).

use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpListener;

use super::policy::Dest;
use super::{FlowIo, FlowKind, FlowTarget, HttpFlow, Shared};

/// A proxy connection's (client, proxy) addresses, when known.
type Client = Option<(std::net::SocketAddrV4, std::net::SocketAddrV4)>;

/// Largest request head read from the sandbox.
const MAX_HEAD: usize = 64 << 10;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        let conn = match listener.accept().await {
            Ok((c, _)) => c,
            Err(_) => {
                // Out of descriptors or memory: back off rather than spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = conn.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut conn = conn;
            let Some(_slot) = shared.slot().await else {
                reply(
                    &mut conn,
                    "503 Service Unavailable",
                    "cordon: too many connections are open; close some and retry\n",
                )
                .await;
                return;
            };
            // The client's socket runs from its address to ours.
            let client = match (conn.peer_addr(), conn.local_addr()) {
                (Ok(std::net::SocketAddr::V4(p)), Ok(std::net::SocketAddr::V4(l))) => Some((p, l)),
                _ => None,
            };
            handle(shared, conn, client).await;
        });
    }
}

/// A stream whose first bytes were already read (the request head): they are read again first.
struct Prefixed<S> {
    head: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.at < me.head.len() {
            let n = (me.head.len() - me.at).min(buf.remaining());
            buf.put_slice(&me.head[me.at..me.at + n]);
            me.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

async fn reply<S: AsyncWrite + Unpin>(conn: &mut S, status: &str, body: &str) {
    let msg = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(msg.as_bytes()).await;
    let _ = conn.shutdown().await;
}

/// `host:port` or `[v6]:port`, with a default port.
fn split_authority(auth: &str, default_port: u16) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = auth.strip_prefix('[') {
        let (h, tail) = rest.split_once(']')?;
        let port = match tail.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if tail.is_empty() => default_port,
            None => return None,
        };
        (h.to_string(), port)
    } else {
        match auth.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().ok()?),
            None => (auth.to_string(), default_port),
        }
    };
    (!host.is_empty() && port != 0).then_some((host.to_ascii_lowercase(), port))
}

/// A request head read from the client: the bytes read (the head and whatever followed it)
/// and where the head ends.
struct Head {
    buf: Vec<u8>,
    len: usize,
}

/// Reads the request head; a client that is too slow, sends too much or something that is
/// not HTTP is answered here (`None`).
async fn read_head<S: AsyncRead + AsyncWrite + Unpin>(conn: &mut S) -> Option<Head> {
    let mut buf = Vec::with_capacity(4096);
    loop {
        let mut chunk = [0u8; 4096];
        let n = match tokio::time::timeout(HEAD_TIMEOUT, conn.read(&mut chunk)).await {
            Ok(Ok(0) | Err(_)) => return None,
            Ok(Ok(n)) => n,
            Err(_) => {
                reply(
                    conn,
                    "408 Request Timeout",
                    "cordon proxy: no complete request head within 30 s\n",
                )
                .await;
                return None;
            }
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        let (status, why) = match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => return Some(Head { buf, len }),
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => continue,
            Ok(httparse::Status::Partial) => (
                "431 Request Header Fields Too Large",
                "cordon proxy: request head over 64 KiB\n".to_string(),
            ),
            Err(e) => (
                "400 Bad Request",
                format!("cordon proxy: malformed request ({e})\n"),
            ),
        };
        reply(conn, status, &why).await;
        return None;
    }
}

/// What a proxy request asks for.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    method: String,
    /// `CONNECT host:port` (else a plain `http://` request).
    connect: bool,
    /// `host[:port]` as the client wrote it.
    authority: String,
    /// The origin-form path of a plain request.
    path: String,
    host: String,
    port: u16,
}

/// The request's target, or why it cannot be served (the 400's words).
fn target(method: &str, target: &str) -> Result<Target, String> {
    let connect = method.eq_ignore_ascii_case("CONNECT");
    let (authority, path, default_port) = if connect {
        (target.to_string(), String::new(), 443)
    } else if let Some(rest) = target.strip_prefix("http://") {
        match rest.find('/') {
            Some(i) => (rest[..i].to_string(), rest[i..].to_string(), 80),
            None => (rest.to_string(), "/".to_string(), 80),
        }
    } else {
        let why = if target.starts_with("https://") {
            "send https:// URLs with CONNECT (set HTTPS_PROXY, not a plain request)"
        } else {
            "this is a proxy: the request target must be an absolute http:// URL or CONNECT host:port"
        };
        return Err(format!("cordon proxy: {why}\n"));
    };
    // Userinfo in the authority would make "host" ambiguous.
    let Some((host, port)) = (!authority.contains('@'))
        .then(|| split_authority(&authority, default_port))
        .flatten()
    else {
        return Err(format!("cordon proxy: bad target {authority:?}\n"));
    };
    Ok(Target {
        method: method.to_string(),
        connect,
        authority,
        path,
        host,
        port,
    })
}

/// Serves one connection to the explicit proxy: the listener's, or a flow to the proxy's
/// address on a VM's link. `client`: the connection's (client, proxy) addresses, for events
/// and for finding the process behind it.
pub(crate) async fn handle<S: FlowIo>(shared: Arc<Shared>, mut conn: S, client: Client) {
    let Some(head) = read_head(&mut conn).await else {
        return;
    };
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    if req.parse(&head.buf).is_err() {
        return;
    }
    let t = match target(req.method.unwrap_or(""), req.path.unwrap_or("")) {
        Ok(t) => t,
        Err(why) => return reply(&mut conn, "400 Bad Request", &why).await,
    };
    let dest = match t.host.parse::<IpAddr>() {
        Ok(ip) => match shared.dest_for(ip) {
            Ok(d) => d,
            Err(why) => {
                return reply(&mut conn, "403 Forbidden", &format!("cordon: {why}\n")).await;
            }
        },
        Err(_) => match crate::name::normalize(&t.host) {
            Ok(n) => Dest::Name(n),
            Err(e) => {
                return reply(
                    &mut conn,
                    "400 Bad Request",
                    &format!("cordon proxy: invalid host name ({e})\n"),
                )
                .await;
            }
        },
    };
    // The HTTP layer takes CONNECT to 443 (TLS) and to 80 (plain HTTP inside the tunnel), and
    // every plain request (HTTP on any port): the same ports the transparent path gives it.
    let flow = match (&dest, shared.http.get()) {
        (Dest::Name(_), Some(_)) if !t.connect || matches!(t.port, 80 | 443) => {
            shared.http_flow_for(&dest, t.port, !t.connect)
        }
        _ => HttpFlow::NotHttp,
    };
    match flow {
        HttpFlow::Intercept => {
            let slot = Arc::new(super::owner::OwnerSlot::new());
            let owner = shared.owner_for(&slot, client, &dest.host()).await;
            to_http(&shared, conn, head, &t, dest.host(), owner).await
        }
        HttpFlow::Deny(v) => {
            let why = refusal_text(&t, &dest, &v);
            let tls = t
                .connect
                .then(|| shared.tls_denial(&dest, t.port, &v))
                .flatten();
            // A plain request is the HTTP layer's on any port: the log says which, so that
            // `cordon replay` decides it the same way.
            let via = if t.connect { "proxy" } else { "proxy-http" };
            shared.refuse(&dest, t.port, via, client, v).await;
            match tls {
                Some((name, denial)) => refuse_tls(&shared, conn, head, t.port, name, denial).await,
                None => reply(&mut conn, "403 Forbidden", &why).await,
            }
        }
        HttpFlow::NotHttp => {
            let sent = origin_head(&t, req.headers);
            splice(&shared, conn, &head, &t, &dest, client, sent).await;
        }
    }
}

/// Hands the connection to the HTTP layer: after `200 Connection Established` for CONNECT
/// (what followed the head is read again first), or with the head itself for a plain request.
async fn to_http<S: FlowIo>(
    shared: &Shared,
    mut conn: S,
    head: Head,
    t: &Target,
    name: String,
    owner: super::handler::Owned,
) {
    let Some(layer) = shared.http.get() else {
        return;
    };
    let (stream, kind) = if t.connect {
        if conn
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        let kind = if t.port == 443 {
            FlowKind::Tls
        } else {
            FlowKind::Plain
        };
        let rest = head.buf[head.len..].to_vec();
        (prefixed(rest, conn), kind)
    } else {
        (prefixed(head.buf, conn), FlowKind::Plain)
    };
    let to = FlowTarget {
        name,
        port: t.port,
        kind,
        owner,
    };
    layer.handler.serve(stream, to).await;
}

/// A denied `CONNECT` to a port that may carry TLS: `200`, then what the client sends goes to
/// [`Shared::answer_denied`] — so a TLS client reads cordon's 403 instead of "CONNECT tunnel
/// failed, response 403", which most print without its body.
async fn refuse_tls<S: FlowIo>(
    shared: &Shared,
    mut conn: S,
    head: Head,
    port: u16,
    name: String,
    denial: super::FlowDenial,
) {
    if conn
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let rest = head.buf[head.len..].to_vec();
    let stream = Prefixed {
        head: rest,
        at: 0,
        inner: conn,
    };
    shared.answer_denied(stream, name, port, denial).await;
}

/// The body of the proxy's own 403: what was refused, by which rule and why, the policy lines
/// that would allow it, and the `cordon explain` line that shows the decision.
fn refusal_text(t: &Target, dest: &Dest, v: &super::FlowDecision) -> String {
    let (what, explain) = if t.connect {
        (
            format!("the connection to {}:{}", t.host, t.port),
            cordon_policy::explain::hint_for_host(&t.host, t.port),
        )
    } else {
        let url = format!("http://{}{}", t.authority, t.path);
        (
            format!("{} {url}", t.method),
            cordon_policy::explain::hint_for_request(&t.method, &url),
        )
    };
    let mut out = format!(
        "cordon: {what} was denied by rule {}: {}.\nThe same request by any other route is refused too.\n",
        v.rule, v.reason
    );
    if let Some(lines) = super::policy::allow_with(v, dest, t.port) {
        out.push_str(&format!("To allow it, add to the policy:\n{lines}\n"));
    }
    out.push_str(&format!("To see why: {explain}\n"));
    out
}

/// `inner` with `head` (bytes already read from it) read again first.
pub(crate) fn prefixed<S: FlowIo>(head: Vec<u8>, inner: S) -> Box<dyn FlowIo> {
    Box::new(Prefixed { head, at: 0, inner })
}

/// The head a plain request goes upstream with: origin-form request line; the Host of the
/// target (not the client's, which could name another site behind the same front end);
/// hop-by-hop, proxy and Connection-listed headers dropped; one request only. `None` for
/// CONNECT.
fn origin_head(t: &Target, headers: &[httparse::Header<'_>]) -> Option<String> {
    if t.connect {
        return None;
    }
    let listed: Vec<String> = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .flat_map(|h| {
            String::from_utf8_lossy(h.value)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\n",
        t.method, t.path, t.authority
    );
    for h in headers {
        let n = h.name.to_ascii_lowercase();
        if matches!(
            n.as_str(),
            "host" | "connection" | "proxy-connection" | "proxy-authorization" | "keep-alive"
        ) || listed.contains(&n)
        {
            continue;
        }
        head.push_str(h.name);
        head.push_str(": ");
        head.push_str(&String::from_utf8_lossy(h.value));
        head.push_str("\r\n");
    }
    head.push_str("Connection: close\r\n\r\n");
    Some(head)
}

/// Decides the flow by connection and, when allowed, splices it: CONNECT after its `200`,
/// a plain request with `origin` (its rewritten head) first.
async fn splice<S: FlowIo>(
    shared: &Shared,
    mut conn: S,
    head: &Head,
    t: &Target,
    dest: &Dest,
    client: Client,
    origin: Option<String>,
) {
    let (mut up, flow) = match shared.open(dest, t.port, "proxy", client).await {
        Ok(x) => x,
        Err(verdict) => {
            let (status, why) = if verdict.allow {
                (
                    "502 Bad Gateway",
                    format!(
                        "cordon: {}:{} is allowed, but cordon could not connect to it (see `cordon log`)\n",
                        t.host, t.port
                    ),
                )
            } else {
                if let Some((name, denial)) = t
                    .connect
                    .then(|| shared.tls_denial(dest, t.port, &verdict))
                    .flatten()
                {
                    let head = Head {
                        buf: head.buf.clone(),
                        len: head.len,
                    };
                    return refuse_tls(shared, conn, head, t.port, name, denial).await;
                }
                ("403 Forbidden", refusal_text(t, dest, &verdict))
            };
            return reply(&mut conn, status, &why).await;
        }
    };
    shared.find_owner(&flow);
    let rest = &head.buf[head.len..];
    let mut sent_head = 0u64;
    match origin {
        None => {
            if conn
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
        }
        Some(h) => {
            if up.write_all(h.as_bytes()).await.is_err() {
                return;
            }
            sent_head = h.len() as u64;
        }
    }
    if !rest.is_empty() && up.write_all(rest).await.is_err() {
        return;
    }
    let (u, d, e) = super::relay(shared, conn, up).await;
    flow.owner_settled().await;
    shared.emit(flow.finished(u + rest.len() as u64 + sent_head, d, e.as_ref()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = target("CONNECT", "API.example.test:443").unwrap();
        assert!(t.connect);
        assert_eq!((t.host.as_str(), t.port), ("api.example.test", 443));
        let t = target("GET", "http://x.test:8080/a?b").unwrap();
        assert_eq!(
            (t.authority.as_str(), t.path.as_str(), t.port),
            ("x.test:8080", "/a?b", 8080)
        );
        assert_eq!(target("GET", "http://x.test").unwrap().path, "/");
        assert!(
            target("GET", "https://x.test/")
                .unwrap_err()
                .contains("CONNECT")
        );
        assert!(target("GET", "/relative").unwrap_err().contains("absolute"));
        assert!(
            target("GET", "http://u@x.test/")
                .unwrap_err()
                .contains("bad target")
        );
    }

    #[test]
    fn a_plain_request_goes_with_its_targets_host_and_no_hop_by_hop_headers() {
        let t = target("GET", "http://x.test/p").unwrap();
        let h = [
            httparse::Header {
                name: "Host",
                value: b"other.test",
            },
            httparse::Header {
                name: "Connection",
                value: b"keep-alive, X-Drop",
            },
            httparse::Header {
                name: "X-Drop",
                value: b"1",
            },
            httparse::Header {
                name: "Proxy-Authorization",
                value: b"Basic x",
            },
            httparse::Header {
                name: "Accept",
                value: b"*/*",
            },
        ];
        assert_eq!(
            origin_head(&t, &h).unwrap(),
            "GET /p HTTP/1.1\r\nHost: x.test\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(
            origin_head(&target("CONNECT", "x.test:443").unwrap(), &h),
            None
        );
    }

    #[test]
    fn authorities() {
        assert_eq!(
            split_authority("Example.com:8443", 443),
            Some(("example.com".into(), 8443))
        );
        assert_eq!(
            split_authority("example.com", 80),
            Some(("example.com".into(), 80))
        );
        assert_eq!(split_authority("[::1]:22", 443), Some(("::1".into(), 22)));
        assert_eq!(split_authority("[::1]", 443), Some(("::1".into(), 443)));
        assert_eq!(split_authority(":80", 443), None);
        assert_eq!(split_authority("x:0", 443), None);
        assert_eq!(split_authority("x:99999", 443), None);
        assert_eq!(split_authority("[::1]x", 443), None);
    }
}
