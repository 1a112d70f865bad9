//! MCP over HTTP, understood: the JSON-RPC that MCP clients and servers exchange over
//! streamable HTTP and the older SSE transport, read by the HTTP layer so that `[[mcp.rule]]`
//! decides each tool call, `tools/list` answers show only the tools a call could be allowed
//! for, and each tool's description and input schema are pinned ([`pins`]) so a changed one is
//! held. The pipeline's hook is `pipeline::mcp`; this module holds what it decides with.
//!
//! Trust boundary: requests come from the sandbox and answers from servers the agent chose;
//! both are hostile input. Pins live on the host, in a file the sandbox cannot write.

pub mod budget;
pub mod jsonrpc;
pub mod pins;
pub mod sse;
pub(crate) mod tools;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use cordon_policy::{McpAction, McpPlan, McpRule};
use tokio::sync::mpsc::UnboundedSender;

/// What a tool call gets, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallDecision {
    pub action: McpAction,
    /// The deciding rule's name (`default`, or `mcp.pin` for a held tool).
    pub rule: String,
    pub reason: Option<String>,
}

/// An SSE stream's endpoint (old transport): where its client posts, by (host, port, path,
/// session). By path and the session parameter, not the whole target: a client may add query
/// parameters or reorder them, and a POST there is still MCP (and its refusals still belong
/// on that session's stream).
type Endpoints = HashMap<(String, u16, String, Option<String>), UnboundedSender<Vec<u8>>>;

/// How many servers are remembered as speaking MCP (a bound on what the sandbox can grow).
const KNOWN_MAX: usize = 4096;

/// The session's MCP governance (see the module docs).
#[derive(Debug)]
pub(crate) struct Mcp {
    pub rules: Vec<McpRule>,
    pub default: McpAction,
    /// `None`: `[mcp] pin = false`.
    pub pins: Option<pins::Pins>,
    /// Endpoints the SSE streams named, each with the way into its stream: a refused call
    /// posted there is answered on the stream, as the server would.
    endpoints: Mutex<Endpoints>,
    /// Servers (`host`, port) seen speaking MCP: a POST to one is MCP whatever its headers.
    known: Mutex<HashSet<(String, u16)>>,
    /// What MCP buffering may hold at once, across the session (see [`budget`]).
    pub budget: budget::Budget,
}

/// `target` (`/path?query`) as the endpoint key's path and session: the value of the first
/// query parameter whose name has `session` in it (`session_id`, `sessionId`).
fn path_and_session(target: &str) -> (String, Option<String>) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let session = query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        k.to_ascii_lowercase()
            .contains("session")
            .then(|| v.to_string())
    });
    (path.to_string(), session)
}

/// The server key pins and events use: `host:port`.
pub(crate) fn server_key(host: &str, port: u16) -> String {
    format!("{host}:{port}")
}

impl Mcp {
    pub(crate) fn new(plan: &McpPlan, pins: Option<pins::Pins>) -> Self {
        Self {
            rules: plan.rules.clone(),
            default: plan.default,
            pins: if plan.pin { pins } else { None },
            endpoints: Mutex::new(HashMap::new()),
            known: Mutex::new(HashSet::new()),
            budget: budget::Budget::new(budget::TOTAL),
        }
    }

    /// Whether a rule names the server at `host` and `path`.
    pub(crate) fn named(&self, host: &str, path: &str) -> bool {
        self.rules.iter().any(|r| r.is_for_http(host, path))
    }

    /// Decides a call of `tool` with `args` on the server at `host:port`, endpoint `path`: a
    /// held tool is refused whatever the rules say; else the first matching rule, else the
    /// default.
    pub(crate) fn decide(
        &self,
        host: &str,
        port: u16,
        path: &str,
        tool: &str,
        args: &serde_json::Value,
    ) -> CallDecision {
        let server = server_key(host, port);
        if self.pins.as_ref().is_some_and(|p| p.held(&server, tool)) {
            return CallDecision {
                action: McpAction::Deny,
                rule: "mcp.pin".into(),
                reason: Some(format!(
                    "the tool's description or input schema changed since it was first seen on {server} (a possible rug pull); it is held until the user reviews it with `cordon mcp pins` and accepts it with `cordon mcp accept {server} {tool}`"
                )),
            };
        }
        for r in &self.rules {
            if r.is_for_http(host, path) && r.matches_call(tool, args) {
                return CallDecision {
                    action: r.action,
                    rule: r.name.clone(),
                    reason: r.reason.clone(),
                };
            }
        }
        CallDecision {
            action: self.default,
            rule: "default".into(),
            reason: None,
        }
    }

    /// Whether some call of `tool` on the server at `host` could be allowed (it stays in
    /// `tools/list`): the first rule for it that has no conditions (arguments, path) decides;
    /// a conditional rule that does not deny shows it; a conditional deny lets later rules
    /// speak.
    pub(crate) fn visible(&self, host: &str, tool: &str) -> bool {
        for r in &self.rules {
            let for_host =
                matches!(&r.server, cordon_policy::McpServer::Http(h) if h.matches(host));
            if !for_host
                || r.tool
                    .as_deref()
                    .is_some_and(|g| !cordon_policy::glob_match(g, tool))
            {
                continue;
            }
            let conditional = !r.arguments.is_empty() || r.path.is_some();
            match (conditional, r.action) {
                (false, a) => return a != McpAction::Deny,
                (true, McpAction::Deny) => continue,
                (true, _) => return true,
            }
        }
        self.default != McpAction::Deny
    }

    /// Records the endpoint an SSE stream named, and the way into that stream.
    pub(crate) fn learn_endpoint(
        &self,
        host: &str,
        port: u16,
        target: &str,
        into: UnboundedSender<Vec<u8>>,
    ) {
        self.learn_server(host, port);
        let (path, session) = path_and_session(target);
        let mut m = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, tx| !tx.is_closed());
        m.insert((host.to_string(), port, path, session), into);
    }

    /// The stream whose endpoint `target` is, while it is open: by path and session (an
    /// endpoint named without a session matches any).
    pub(crate) fn endpoint(
        &self,
        host: &str,
        port: u16,
        target: &str,
    ) -> Option<UnboundedSender<Vec<u8>>> {
        let (path, session) = path_and_session(target);
        let m = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        let mut key = (host.to_string(), port, path, session);
        let found = m.get(&key).filter(|tx| !tx.is_closed()).cloned();
        found.or_else(|| {
            key.3 = None;
            m.get(&key).filter(|tx| !tx.is_closed()).cloned()
        })
    }

    /// Whether an open SSE stream named `target`'s path on `host:port` as its endpoint
    /// (whatever the query says).
    pub(crate) fn endpoint_known(&self, host: &str, port: u16, target: &str) -> bool {
        let (path, _) = path_and_session(target);
        let m = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        m.iter()
            .any(|((h, p, e, _), tx)| h == host && *p == port && *e == path && !tx.is_closed())
    }

    /// Remembers that the server at `host:port` speaks MCP.
    pub(crate) fn learn_server(&self, host: &str, port: u16) {
        let mut k = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if k.len() < KNOWN_MAX {
            k.insert((host.to_string(), port));
        }
    }

    /// Whether the server at `host:port` was seen speaking MCP.
    pub(crate) fn knows(&self, host: &str, port: u16) -> bool {
        let k = self.known.lock().unwrap_or_else(|p| p.into_inner());
        k.contains(&(host.to_string(), port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_policy::McpServer;
    use serde_json::json;

    fn mcp(rules: Vec<McpRule>, default: McpAction) -> Mcp {
        Mcp::new(
            &McpPlan {
                rules,
                default,
                pin: true,
                stdio: Vec::new(),
            },
            Some(pins::Pins::open(None).unwrap()),
        )
    }

    fn on(host: &str, tool: &str, action: McpAction) -> McpRule {
        McpRule {
            tool: Some(tool.into()),
            ..McpRule::new(tool, McpServer::Http(host.parse().unwrap()), action)
        }
    }

    #[test]
    fn first_match_wins_then_the_default() {
        let m = mcp(
            vec![
                on("mcp.test", "delete_*", McpAction::Deny),
                on("mcp.test", "*", McpAction::Allow),
            ],
            McpAction::Deny,
        );
        let d = m.decide("mcp.test", 443, "/mcp", "delete_all", &json!({}));
        assert_eq!((d.action, d.rule.as_str()), (McpAction::Deny, "delete_*"));
        let d = m.decide("mcp.test", 443, "/mcp", "echo", &json!({}));
        assert_eq!(d.action, McpAction::Allow);
        let d = m.decide("other.test", 443, "/mcp", "echo", &json!({}));
        assert_eq!((d.action, d.rule.as_str()), (McpAction::Deny, "default"));
    }

    #[test]
    fn visibility_follows_what_a_call_could_get() {
        let mut cond = on("mcp.test", "read_file", McpAction::Allow);
        cond.arguments = vec![("path".into(), "src/*".into())];
        let mut cond_deny = on("mcp.test", "write_file", McpAction::Deny);
        cond_deny.arguments = vec![("path".into(), "/etc/*".into())];
        let m = mcp(
            vec![
                on("mcp.test", "delete_*", McpAction::Deny),
                cond,
                cond_deny,
                on("mcp.test", "read_file", McpAction::Deny),
            ],
            McpAction::Allow,
        );
        assert!(!m.visible("mcp.test", "delete_all"));
        assert!(m.visible("mcp.test", "read_file"));
        assert!(m.visible("mcp.test", "write_file"));
        assert!(m.visible("other.test", "delete_all"));
    }

    #[test]
    fn a_held_tool_is_refused_whatever_the_rules_say() {
        let m = mcp(
            vec![on("mcp.test", "*", McpAction::Allow)],
            McpAction::Allow,
        );
        let p = m.pins.as_ref().unwrap();
        p.see("mcp.test:443", "echo", &json!({"description": "a"}));
        p.see("mcp.test:443", "echo", &json!({"description": "b"}));
        let d = m.decide("mcp.test", 443, "/", "echo", &json!({}));
        assert_eq!((d.action, d.rule.as_str()), (McpAction::Deny, "mcp.pin"));
        assert!(
            d.reason
                .unwrap()
                .contains("cordon mcp accept mcp.test:443 echo")
        );
    }

    #[test]
    fn learnt_endpoints_match_by_path_and_session_not_the_whole_target() {
        let m = mcp(Vec::new(), McpAction::Allow);
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        m.learn_endpoint("mcp.test", 443, "/messages/?session_id=abc", tx);
        assert!(m.knows("mcp.test", 443));
        for t in [
            "/messages/?session_id=abc",
            "/messages/?x=1&session_id=abc",
            "/messages/?session_id=abc&x=1",
        ] {
            assert!(m.endpoint("mcp.test", 443, t).is_some(), "{t}");
        }
        assert!(
            m.endpoint("mcp.test", 443, "/messages/?session_id=other")
                .is_none()
        );
        assert!(m.endpoint_known("mcp.test", 443, "/messages/?session_id=other&x"));
        assert!(!m.endpoint_known("mcp.test", 443, "/other"));
        assert!(
            m.endpoint("mcp.test", 443, "/other?session_id=abc")
                .is_none()
        );
        assert!(
            m.endpoint("mcp.test", 8443, "/messages/?session_id=abc")
                .is_none()
        );
        let (tx, _rx2) = tokio::sync::mpsc::unbounded_channel();
        m.learn_endpoint("mcp.test", 443, "/rpc", tx);
        assert!(
            m.endpoint("mcp.test", 443, "/rpc?sessionId=zz&pad=1")
                .is_some()
        );
    }
}
