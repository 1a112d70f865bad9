//! JSON-RPC 2.0 as MCP carries it: a request body read as one message or a batch, the
//! `tools/call`s in it, and the error answers cordon sends in a server's place. Every input
//! comes from the sandbox (requests) or a server (answers): nothing here panics on it.

use serde_json::{Value, json};

/// The JSON-RPC error code cordon answers a refused call with (in the range JSON-RPC leaves
/// to implementations; MCP defines none there).
pub const REFUSED: i64 = -32001;

/// One message of a request body.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Its `id` (`None`: a notification, which gets no answer).
    pub id: Option<Value>,
    /// Its `method`.
    pub method: String,
    /// Its `params` (`Null` when absent).
    pub params: Value,
}

impl Message {
    /// `(tool name, arguments)` of a `tools/call`; arguments `{}` when absent.
    pub fn tool_call(&self) -> Option<(&str, Value)> {
        if self.method != "tools/call" {
            return None;
        }
        let name = self.params.get("name")?.as_str()?;
        let args = self
            .params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        Some((name, args))
    }
}

/// A request body read as JSON-RPC: its messages, and whether it was a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Body {
    /// The requests and notifications (answers the client sends back, e.g. to a sampling
    /// request, are left out: they call no tool).
    pub messages: Vec<Message>,
    /// Sent as an array.
    pub batch: bool,
}

/// `body` as JSON-RPC 2.0, or `None` when it is not (not JSON, no `"jsonrpc": "2.0"`).
pub fn parse(body: &[u8]) -> Option<Body> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let (items, batch) = match v {
        Value::Array(a) => (a, true),
        one @ Value::Object(_) => (vec![one], false),
        _ => return None,
    };
    let mut messages = Vec::new();
    for item in items {
        if item.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return None;
        }
        let Some(method) = item.get("method").and_then(Value::as_str) else {
            continue;
        };
        messages.push(Message {
            id: item.get("id").cloned(),
            method: method.to_string(),
            params: item.get("params").cloned().unwrap_or(Value::Null),
        });
    }
    Some(Body { messages, batch })
}

/// Whether `method` is one of MCP's (`initialize`, `ping`, or namespaced `tools/call`,
/// `notifications/initialized`…): a JSON-RPC body with one is MCP, whatever its headers say.
pub fn is_mcp_method(method: &str) -> bool {
    method == "initialize" || method == "ping" || method.contains('/')
}

/// What a request or answer body is, read as MCP's peers would read it.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// JSON-RPC 2.0, as cordon reads it.
    Rpc(Body),
    /// JSON that is not JSON-RPC.
    Json,
    /// cordon's strict reader rejects it, but a lenient peer (the Python SDK) reads it as
    /// JSON-RPC: `NaN`, a byte-order mark, UTF-16, a lone surrogate. cordon cannot decide on
    /// what it cannot read the way the peer will, so this is refused, never passed on.
    Evasive,
    /// Not JSON, even read leniently.
    NotJson,
}

/// `body` classified (see [`Kind`]).
pub fn classify(body: &[u8]) -> Kind {
    if let Some(b) = parse(body) {
        return Kind::Rpc(b);
    }
    // JSON that names `jsonrpc` but is not what cordon reads as JSON-RPC 2.0 (a batch with
    // one odd item, another version): a peer may still run part of it.
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return if rpc_shaped(&v) {
            Kind::Evasive
        } else {
            Kind::Json
        };
    }
    match serde_json::from_slice::<Value>(&lenient(body)) {
        Ok(v) if rpc_shaped(&v) => Kind::Evasive,
        Ok(_) => Kind::Json,
        Err(_) => Kind::NotJson,
    }
}

/// Whether `v` is a JSON-RPC message or a batch holding one.
fn rpc_shaped(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.iter().any(rpc_shaped),
        Value::Object(o) => o.contains_key("jsonrpc"),
        _ => false,
    }
}

/// `body` as a lenient JSON reader (Python's, pydantic's) sees it, in strict JSON: decoded
/// from UTF-16/32 or a byte-order mark to UTF-8, `NaN`/`Infinity` outside strings made
/// `null`, lone surrogate escapes made U+FFFD. Only for classifying: never forwarded.
pub fn lenient(body: &[u8]) -> Vec<u8> {
    let text = decode(body);
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let (mut i, mut in_str) = (0, false);
    while i < b.len() {
        let c = b[i];
        if in_str {
            match c {
                b'"' => in_str = false,
                b'\\' if b.get(i + 1) == Some(&b'u') => {
                    let unit = |at: usize| {
                        b.get(at..at + 4)
                            .and_then(|h| std::str::from_utf8(h).ok())
                            .and_then(|h| u16::from_str_radix(h, 16).ok())
                    };
                    let hi = unit(i + 2);
                    let lo = (b.get(i + 6..i + 8) == Some(b"\\u"))
                        .then(|| unit(i + 8))
                        .flatten();
                    match (hi, lo) {
                        (Some(0xD800..=0xDBFF), Some(0xDC00..=0xDFFF)) => {
                            out.extend_from_slice(&b[i..i + 12]);
                            i += 12;
                        }
                        (Some(0xD800..=0xDFFF), _) => {
                            out.extend_from_slice(b"\\uFFFD");
                            i += 6;
                        }
                        _ => {
                            out.extend_from_slice(&b[i..(i + 6).min(b.len())]);
                            i += 6;
                        }
                    }
                    continue;
                }
                b'\\' => {
                    out.extend_from_slice(&b[i..(i + 2).min(b.len())]);
                    i += 2;
                    continue;
                }
                _ => {}
            }
        } else if c == b'"' {
            in_str = true;
        } else if let Some(n) = [&b"-Infinity"[..], b"Infinity", b"NaN"]
            .iter()
            .find(|t| b[i..].starts_with(t))
        {
            out.extend_from_slice(b"null");
            i += n.len();
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// `body`'s text, its encoding found as JSON readers find it (RFC 4627's NUL pattern, or a
/// byte-order mark); bytes that do not decode become U+FFFD.
fn decode(body: &[u8]) -> String {
    let utf16 = |b: &[u8], le: bool| {
        let units = b.chunks_exact(2).map(|c| {
            if le {
                u16::from_le_bytes([c[0], c[1]])
            } else {
                u16::from_be_bytes([c[0], c[1]])
            }
        });
        char::decode_utf16(units)
            .map(|c| c.unwrap_or('\u{fffd}'))
            .collect::<String>()
    };
    let utf32 = |b: &[u8], le: bool| {
        b.chunks_exact(4)
            .map(|c| {
                let c = [c[0], c[1], c[2], c[3]];
                let n = if le {
                    u32::from_le_bytes(c)
                } else {
                    u32::from_be_bytes(c)
                };
                char::from_u32(n).unwrap_or('\u{fffd}')
            })
            .collect::<String>()
    };
    match body {
        [0xEF, 0xBB, 0xBF, rest @ ..] => String::from_utf8_lossy(rest).into_owned(),
        [0xFF, 0xFE, 0, 0, rest @ ..] => utf32(rest, true),
        [0, 0, 0xFE, 0xFF, rest @ ..] => utf32(rest, false),
        [0xFF, 0xFE, rest @ ..] => utf16(rest, true),
        [0xFE, 0xFF, rest @ ..] => utf16(rest, false),
        [0, 0, 0, _, ..] => utf32(body, false),
        [_, 0, 0, 0, ..] => utf32(body, true),
        [0, _, ..] => utf16(body, false),
        [_, 0, ..] => utf16(body, true),
        _ => String::from_utf8_lossy(body).into_owned(),
    }
}

/// Whether a body starting with `head` could be JSON: its first byte past whitespace,
/// byte-order marks and the NULs of UTF-16/32 is `{` or `[`. `None`: `head` does not tell
/// yet (all of it was such filler).
pub fn could_be_json(head: &[u8]) -> Option<bool> {
    head.iter()
        .find(|b| {
            !matches!(
                b,
                b' ' | b'\t' | b'\r' | b'\n' | 0 | 0xEF | 0xBB | 0xBF | 0xFE | 0xFF
            )
        })
        .map(|b| matches!(b, b'{' | b'['))
}

/// A JSON-RPC error answer to the request `id`, in cordon's words.
pub fn error(id: &Value, message: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": REFUSED, "message": message },
    })
}

/// The answer body for refused requests: one error, or an array of them for a batch.
pub fn answer(errors: Vec<Value>, batch: bool) -> Vec<u8> {
    let v = match (batch, errors.len()) {
        (false, 1) => errors.into_iter().next().unwrap_or(Value::Null),
        _ => Value::Array(errors),
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_call_and_its_tool() {
        let b = parse(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#).unwrap();
        assert!(!b.batch);
        let (tool, args) = b.messages[0].tool_call().unwrap();
        assert_eq!(tool, "echo");
        assert_eq!(args["text"], "hi");
        assert_eq!(b.messages[0].id, Some(json!(7)));
    }

    #[test]
    fn a_batch_keeps_requests_and_notifications_and_drops_answers() {
        let b = parse(
            br#"[{"jsonrpc":"2.0","id":"a","method":"tools/list"},
            {"jsonrpc":"2.0","method":"notifications/initialized"},
            {"jsonrpc":"2.0","id":3,"result":{}}]"#,
        )
        .unwrap();
        assert!(b.batch);
        let methods: Vec<&str> = b.messages.iter().map(|m| m.method.as_str()).collect();
        assert_eq!(methods, ["tools/list", "notifications/initialized"]);
        assert_eq!(b.messages[1].id, None);
        assert!(b.messages[0].tool_call().is_none());
    }

    #[test]
    fn not_json_rpc_is_none() {
        assert!(parse(b"{\"model\":\"x\"}").is_none());
        assert!(parse(b"not json").is_none());
        assert!(parse(b"42").is_none());
        assert!(parse(br#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"id":2}]"#).is_none());
    }

    #[test]
    fn errors_answer_with_the_same_id_one_or_an_array() {
        let one = answer(vec![error(&json!(5), "cordon: no")], false);
        let v: Value = serde_json::from_slice(&one).unwrap();
        assert_eq!(v["id"], 5);
        assert_eq!(v["error"]["code"], REFUSED);
        assert_eq!(v["error"]["message"], "cordon: no");
        let many = answer(vec![error(&json!("x"), "a")], true);
        let v: Value = serde_json::from_slice(&many).unwrap();
        assert_eq!(v[0]["id"], "x");
    }

    #[test]
    fn what_lenient_peers_read_as_a_call_is_evasive() {
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_all","arguments":{"x":1}}}"#;
        assert!(matches!(classify(call.as_bytes()), Kind::Rpc(_)));
        let nan = call.replace("\"x\":1", "\"x\":NaN");
        let inf = call.replace("\"x\":1", "\"x\":-Infinity");
        let surrogate = call.replace("\"x\":1", "\"x\":\"\\ud800\"");
        let escaped = nan.replace("jsonrpc", "json\\u0072pc");
        let mut bom = vec![0xEF, 0xBB, 0xBF];
        bom.extend_from_slice(call.as_bytes());
        let le: Vec<u8> = call.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let be: Vec<u8> = call.encode_utf16().flat_map(u16::to_be_bytes).collect();
        let mut le_bom = vec![0xFF, 0xFE];
        le_bom.extend_from_slice(&le);
        let batch = format!("[{nan}]");
        for b in [
            nan.as_bytes(),
            inf.as_bytes(),
            surrogate.as_bytes(),
            escaped.as_bytes(),
            &bom,
            &le,
            &be,
            &le_bom,
            batch.as_bytes(),
        ] {
            assert_eq!(classify(b), Kind::Evasive, "{}", String::from_utf8_lossy(b));
        }
        // NaN inside a string is text, and a paired surrogate is a character: both strict.
        let fine = call.replace("\"x\":1", "\"x\":\"NaN \\ud83d\\ude00\"");
        assert!(matches!(classify(fine.as_bytes()), Kind::Rpc(_)));
        assert_eq!(classify(br#"{"model":NaN}"#), Kind::Json);
        assert_eq!(classify(b"model=x"), Kind::NotJson);
        let odd = format!("[{call},{{\"id\":2}}]");
        assert_eq!(classify(odd.as_bytes()), Kind::Evasive);
    }

    #[test]
    fn only_a_json_start_could_be_json() {
        assert_eq!(could_be_json(b"  \n{"), Some(true));
        assert_eq!(could_be_json(b"\xEF\xBB\xBF["), Some(true));
        assert_eq!(could_be_json(b"\0{"), Some(true));
        assert_eq!(could_be_json(b"  "), None);
        assert_eq!(could_be_json(b"--boundary"), Some(false));
        assert_eq!(could_be_json(b"\x1f\x8b"), Some(false));
        assert!(is_mcp_method("tools/call") && is_mcp_method("initialize"));
        assert!(!is_mcp_method("eth_call"));
    }
}
