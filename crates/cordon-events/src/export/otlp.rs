//! OTLP/HTTP: batches of log records, protobuf-encoded (`application/x-protobuf`, what
//! collectors take by default), POSTed to a logs endpoint over plain http.
//!
//! One record per event: the body is the event's line exactly as the file has it (so a
//! collector can recompute the chain from it), the attributes carry the chain (`cordon.seq`,
//! `cordon.prev`, `cordon.hash`) and what a pipeline filters on (`cordon.layer`,
//! `cordon.action`, `cordon.rule`); the record's time is the event's, its severity by action
//! (`deny` WARN, `error` ERROR). The resource says `service.name = cordon` and the session.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use prost::Message;

use super::proto::{
    AnyValue, ExportLogsServiceRequest, InstrumentationScope, KeyValue, LogRecord, Resource,
    ResourceLogs, ScopeLogs, Value,
};
use super::{ExportError, Failure, Target};

/// Connecting, and one request, may take this long.
const TIMEOUT: Duration = Duration::from_secs(5);
/// A collector's answer is read up to this (an OTLP answer is a few bytes of partial-success
/// counts).
const MAX_ANSWER: usize = 64 << 10;

/// Where and how to send.
#[derive(Clone, Debug)]
pub struct OtlpConfig {
    /// `http://HOST[:PORT]/PATH`.
    pub endpoint: String,
    /// Extra request headers (`OTEL_EXPORTER_OTLP_LOGS_HEADERS`), e.g. an API key.
    pub headers: Vec<(String, String)>,
}

pub(crate) struct Otlp {
    rt: tokio::runtime::Runtime,
    client: Client,
}

/// The connection and what each request carries.
struct Client {
    authority: String,
    host: String,
    port: u16,
    path: String,
    headers: hyper::HeaderMap,
    resource: Resource,
    conn: Option<SendRequest<Full<Bytes>>>,
}

impl Otlp {
    pub(crate) fn new(c: &OtlpConfig, session: &str) -> Result<Self, ExportError> {
        let bad = |why: &str| ExportError::Endpoint {
            url: c.endpoint.clone(),
            why: why.to_owned(),
        };
        let uri: hyper::Uri = c.endpoint.parse().map_err(|_| bad("not a URL"))?;
        if uri.scheme_str() != Some("http") {
            return Err(bad(
                "only http:// (send to a local OpenTelemetry Collector for TLS)",
            ));
        }
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        let mut headers = hyper::HeaderMap::new();
        for (k, v) in &c.headers {
            let name = hyper::header::HeaderName::from_bytes(k.as_bytes());
            let value = hyper::header::HeaderValue::from_str(v);
            match (name, value) {
                (Ok(n), Ok(v)) => {
                    headers.append(n, v);
                }
                _ => return Err(ExportError::Header(k.clone())),
            }
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|source| ExportError::Start {
                target: "otlp",
                source,
            })?;
        let host = authority.host().trim_matches(['[', ']']).to_owned();
        let client = Client {
            authority: authority.to_string(),
            port: authority.port_u16().unwrap_or(80),
            host,
            path: uri
                .path_and_query()
                .map_or("/".to_owned(), ToString::to_string),
            headers,
            resource: Resource {
                attributes: vec![
                    KeyValue::string("service.name", "cordon"),
                    KeyValue::string("service.version", env!("CARGO_PKG_VERSION")),
                    KeyValue::string("cordon.session", session),
                ],
            },
            conn: None,
        };
        Ok(Self { rt, client })
    }
}

impl Client {
    /// The request for `lines`, encoded.
    fn encode(&self, lines: &[Arc<str>]) -> Vec<u8> {
        let observed = nanos(SystemTime::now());
        let req = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(self.resource.clone()),
                scope_logs: vec![ScopeLogs {
                    scope: Some(InstrumentationScope {
                        name: "cordon".to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                    }),
                    log_records: lines.iter().map(|l| record(l, observed)).collect(),
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        req.encode_to_vec()
    }

    async fn post(&mut self, body: Vec<u8>) -> Result<(), Failure> {
        let retry = |error: String| Failure { retry: true, error };
        if self.conn.as_ref().is_none_or(|c| !c.is_ready()) {
            self.conn = None;
            let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
                .await
                .map_err(|e| retry(format!("connect {}: {e}", self.authority)))?;
            let _ = tcp.set_nodelay(true);
            let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                .await
                .map_err(|e| retry(format!("{}: {e}", self.authority)))?;
            // Driven whenever the runtime runs (during the next requests): keep-alive.
            tokio::spawn(conn);
            self.conn = Some(send);
        }
        let mut req = hyper::Request::post(self.path.as_str())
            .header(hyper::header::HOST, self.authority.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/x-protobuf")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| retry(e.to_string()))?;
        req.headers_mut().extend(self.headers.clone());
        let Some(conn) = self.conn.as_mut() else {
            return Err(retry("no connection".to_owned()));
        };
        let resp = match conn.send_request(req).await {
            Ok(r) => r,
            Err(e) => {
                self.conn = None;
                return Err(retry(format!("{}: {e}", self.authority)));
            }
        };
        let status = resp.status();
        // Read whole, so the connection can carry the next request; bounded, so a collector
        // that answers without end cannot fill memory (the connection is then dropped).
        let body = http_body_util::Limited::new(resp.into_body(), MAX_ANSWER);
        if body.collect().await.is_err() {
            self.conn = None;
        }
        if status.is_success() {
            return Ok(());
        }
        // OTLP/HTTP: 429, 502, 503 and 504 may be retried; any other answer is final.
        let again = matches!(status.as_u16(), 429 | 502 | 503 | 504);
        Err(Failure {
            retry: again,
            error: format!("{} answered {status}", self.authority),
        })
    }
}

impl Target for Otlp {
    const NAME: &'static str = "otlp";
    const BATCH: usize = 512;
    const LINGER: Duration = Duration::from_millis(200);

    fn send(
        &mut self,
        lines: &[Arc<str>],
        until: &dyn Fn() -> Option<Instant>,
    ) -> Result<(), Failure> {
        let c = &mut self.client;
        let body = c.encode(lines);
        let started = Instant::now();
        // Given up at TIMEOUT, or as soon as the session's end sets a deadline that passes: a
        // collector that hangs must not hold the exit longer than the end's grace.
        let r = self.rt.block_on(async {
            let mut post = std::pin::pin!(c.post(body));
            loop {
                match tokio::time::timeout(Duration::from_millis(50), post.as_mut()).await {
                    Ok(r) => return Some(r),
                    Err(_) => {
                        let now = Instant::now();
                        if now - started >= TIMEOUT || until().is_some_and(|d| now >= d) {
                            return None;
                        }
                    }
                }
            }
        });
        r.unwrap_or_else(|| {
            c.conn = None;
            Err(Failure {
                retry: true,
                error: format!(
                    "{}: no answer in {} ms",
                    c.authority,
                    started.elapsed().as_millis()
                ),
            })
        })
    }
}

/// One event's record.
fn record(line: &str, observed: u64) -> LogRecord {
    let body = Some(AnyValue {
        value: Some(Value::StringValue(line.to_owned())),
    });
    let Some(e) = super::parse(line) else {
        return LogRecord {
            observed_time_unix_nano: observed,
            body,
            ..LogRecord::default()
        };
    };
    let (number, text) = match super::severity(e.action) {
        3 => (17, "ERROR"),
        4 => (13, "WARN"),
        _ => (9, "INFO"),
    };
    let mut attributes = vec![
        KeyValue::string("cordon.session", e.session.as_str()),
        KeyValue::int("cordon.seq", i64::try_from(e.seq).unwrap_or(i64::MAX)),
        KeyValue::string("cordon.prev", e.prev.as_str()),
        KeyValue::string("cordon.hash", e.hash.as_str()),
        KeyValue::string("cordon.layer", e.layer.as_str()),
        KeyValue::string("cordon.action", e.action.as_str()),
    ];
    if let Some(rule) = &e.rule {
        attributes.push(KeyValue::string("cordon.rule", rule.as_str()));
    }
    LogRecord {
        time_unix_nano: humantime::parse_rfc3339(&e.time).map_or(0, nanos),
        observed_time_unix_nano: observed,
        severity_number: number,
        severity_text: text.to_owned(),
        body,
        attributes,
        event_name: format!("cordon.{}.{}", e.layer, e.action),
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
