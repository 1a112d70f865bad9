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
}
