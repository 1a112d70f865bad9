//! `[mcp]`: rules for the tools an agent calls on MCP servers — servers reached over HTTP
//! (streamable HTTP and the older SSE transport), which the HTTP layer reads as JSON-RPC, and
//! local (stdio) servers the agent starts, which the exec layer sees spawned.

use crate::PolicyError;
use crate::expiry::Expiry;
use crate::pattern::{HostPattern, glob_match};
use crate::schema::{Schema, Shape, toml_string};
use crate::sections::{
    Convert, Loosen, Origin, Render, Scalar, Section, Sections, set_scalar, value,
};

crate::choice! {
    /// What an MCP rule (or the default) does with a tool call.
    #[derive(Default)]
    pub enum McpAction {
        /// Let it through.
        #[default]
        Allow = "allow",
        /// Answer it with a JSON-RPC error in cordon's words; the server never sees it.
        Deny = "deny",
        /// Hold it and ask a person.
        Ask = "ask",
        /// Ask the LLM judge.
        Judge = "judge",
    }
}

/// Which MCP servers a rule is for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpServer {
    /// Servers reached over HTTP(S), by host.
    Http(HostPattern),
    /// Local servers the agent starts, by their name in the agent's MCP config (a glob).
    Stdio(String),
}

impl std::fmt::Display for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpServer::Http(h) => write!(f, "{h}"),
            McpServer::Stdio(n) => write!(f, "stdio:{n}"),
        }
    }
}

/// One `[[mcp.rule]]`. `None` and empty lists match anything.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct McpRule {
    /// Its name in events and refusals (`mcp.rule FILE:LINE` when unnamed).
    pub name: String,
    /// The servers it is for.
    pub server: McpServer,
    /// A glob over the endpoint's path (HTTP servers only).
    pub path: Option<String>,
    /// A glob over the tool's name.
    pub tool: Option<String>,
    /// Conditions on the call's arguments, all of which must hold: (argument, glob). The
    /// argument is a top-level name, or a JSON pointer (`/a/b`) into the arguments.
    pub arguments: Vec<(String, String)>,
    /// What it does.
    pub action: McpAction,
    /// Shown to the agent when it refuses.
    pub reason: Option<String>,
    /// Where it came from.
    pub origin: cordon_events::Origin,
    /// When it ends (`until`, `for`); `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Expiry>,
}

impl McpRule {
    /// A rule doing `action` with every tool of `server`; narrow it with struct update syntax.
    pub fn new(name: impl Into<String>, server: McpServer, action: McpAction) -> Self {
        McpRule {
            name: name.into(),
            server,
            path: None,
            tool: None,
            arguments: Vec::new(),
            action,
            reason: None,
            origin: cordon_events::Origin::Derived(String::new()),
            expires: None,
        }
    }

    /// Whether the rule is for the HTTP server at `host` and `path`.
    pub fn is_for_http(&self, host: &str, path: &str) -> bool {
        match &self.server {
            McpServer::Http(h) => {
                h.matches(host) && self.path.as_deref().is_none_or(|p| glob_match(p, path))
            }
            McpServer::Stdio(_) => false,
        }
    }

    /// Whether the rule is for the local server named `name` in the agent's MCP config.
    pub fn is_for_stdio(&self, name: &str) -> bool {
        matches!(&self.server, McpServer::Stdio(g) if glob_match(g, name))
    }

    /// Whether the rule matches a call of `tool` with `arguments` (the JSON object sent).
    /// A condition on an argument that is absent fails; an `allow` rule's condition never
    /// holds for a string with a `..` path segment, so `src/*` cannot be walked out of.
    pub fn matches_call(&self, tool: &str, arguments: &serde_json::Value) -> bool {
        if self.tool.as_deref().is_some_and(|g| !glob_match(g, tool)) {
            return false;
        }
        self.arguments.iter().all(|(key, glob)| {
            let found = if key.starts_with('/') {
                arguments.pointer(key)
            } else {
                arguments.get(key)
            };
            let Some(v) = found else { return false };
            let text = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if self.action == McpAction::Allow && text.split(['/', '\\']).any(|s| s == "..") {
                return false;
            }
            glob_match(glob, &text)
        })
    }
}

/// A local (stdio) MCP server an agent's MCP config names: what the agent runs to start it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct McpStdio {
    /// Its name in the config (`github`).
    pub name: String,
    /// The config file that names it.
    pub source: String,
    /// The program, by its file name (`npx`).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
}

impl McpStdio {
    /// Whether an exec of `program` (called by that name, or really that file: `resolved`)
    /// with `args` starts this server.
    pub fn matches(&self, program: &str, resolved: &str, args: &[String]) -> bool {
        (program == self.program || resolved == self.program) && args == self.args
    }

    /// The `[[exec.rule]]` pattern of its command line (`npx -y @scope/server`).
    pub fn exec_pattern(&self) -> String {
        let mut line = self.program.clone();
        for a in &self.args {
            line.push(' ');
            line.push_str(a);
        }
        line
    }
}

impl McpPlan {
    /// Exec rules that hold (`ask`; `judge` asks too: the exec layer has no judge) or deny
    /// the spawn of each of `servers` a `stdio:` rule names — first match wins, as in
    /// `[[mcp.rule]]`; a server whose first matching rule allows gets no exec rule.
    pub fn stdio_exec_rules(&self) -> Vec<crate::sections::exec::ExecRule> {
        self.stdio
            .iter()
            .filter_map(|s| self.stdio_exec_rule(s))
            .collect()
    }

    /// The exec rule for `server`'s spawn, if a `stdio:` rule denies or asks (see
    /// [`McpPlan::stdio_exec_rules`]); what `cordon replay` decides a tagged spawn by again.
    pub fn stdio_exec_rule(&self, server: &McpStdio) -> Option<crate::sections::exec::ExecRule> {
        use crate::sections::exec::{ExecAction, ExecRule};
        let r = self.rules.iter().find(|r| r.is_for_stdio(&server.name))?;
        let action = match r.action {
            McpAction::Allow => return None,
            McpAction::Deny => ExecAction::Deny,
            McpAction::Ask | McpAction::Judge => ExecAction::Ask,
        };
        Some(ExecRule {
            pattern: server.exec_pattern(),
            action,
            origin: format!(
                "{} (mcp.rule `{}`, stdio:{})",
                r.origin, r.name, server.name
            )
            .into(),
            expires: r.expires,
        })
    }
}

/// MCP tool-call policy: ordered rules and the default.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct McpPlan {
    /// Rules in merge order; the first match decides.
    pub rules: Vec<McpRule>,
    /// What a tool call no rule matches gets.
    pub default: McpAction,
    /// Whether tools are pinned on first sight and a changed one held (default: true).
    #[serde(default = "yes")]
    pub pin: bool,
    /// The local servers the agent's MCP configs name: filled when a session starts (from
    /// the host's files), never written in a policy file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stdio: Vec<McpStdio>,
}

fn yes() -> bool {
    true
}

raw_table! {
    /// One `[[mcp.rule]]` as written.
    pub(crate) struct RawRule example "server = \"mcp.example.com\", tool = \"delete_*\" and action = \"deny\"" {
        /// Its name in events and refusals.
        name: String = "name = \"no-deletes\"",
        /// The servers it is for: a host or glob for servers reached over HTTP, or
        /// `stdio:NAME` (NAME a glob) for a local server by its name in the agent's MCP config,
        /// which `deny` or `ask` govern when it is started (its exec held or refused). A
        /// `stdio:` rule steers, like an `[[exec.rule]]`: it matches the exact command line the
        /// config names, so another spelling of a flag, or a server renamed in the
        /// sandbox-writable `.mcp.json`, is not refused by it; the wall is the network and
        /// filesystem policy.
        server: String [required] = "server = \"mcp.example.com\"",
        /// A glob over the endpoint's path, for HTTP servers (default: any).
        path: String = "path = \"/mcp*\"",
        /// A glob over the tool's name (default: any tool).
        tool: String = "tool = \"delete_*\"",
        /// Conditions on the call's arguments, all of which must hold: a top-level argument by
        /// name, or a JSON pointer into them (`"/options/mode"`), each with a glob over its
        /// value (a string as sent; anything else as its JSON text). An absent argument fails
        /// the condition; for `allow`, so does a value with a `..` path segment.
        arguments: StringTable = "arguments = { path = \"src/*\" }",
        /// What a matching call gets: `allow`, `deny` (a JSON-RPC error in cordon's words),
        /// `ask` a person, or `judge`, the LLM judge; the first matching rule decides.
        action: Choice(McpAction) [required] = "action = \"deny\"",
        /// Why, shown to the agent when it refuses.
        reason: String = "reason = \"deletes go through review\"",
        /// When the rule ends, in RFC 3339 (`Z` or an offset; seconds optional). Not with
        /// `for`.
        until: String = "until = \"2026-12-31T18:00Z\"",
        /// How long the rule lasts (`90m`, `2h`, `1d`), counted from this file's modification
        /// time. Instead of `until`, not with it.
        r#for: String [shorthand] = "for = \"2h\"",
    }
}

raw_table! {
    /// `[mcp]` as written.
    pub(crate) struct Raw example "default = \"allow\"" {
        /// What a tool call no rule matches gets: `allow` (the default: the server is one the
        /// network policy already lets the agent reach), `deny`, `ask` or `judge`.
        default: Choice(McpAction) = "default = \"ask\"",
        /// Whether each tool's description and input schema are pinned on first sight per
        /// server, and a tool that changes is held until `cordon mcp accept` (default: true).
        pin: Boolean = "pin = true",
        /// Tool-call rules, in order.
        rule: Tables(RawRule),
    }
}

/// `[mcp]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mcp {
    pub default: Scalar<McpAction>,
    pub pin: Scalar<bool>,
    /// In file order, then merge order.
    pub rules: Vec<(McpRule, Origin)>,
}

fn server(cx: &Convert<'_>, v: &serde_spanned::Spanned<String>) -> Result<McpServer, PolicyError> {
    match v.get_ref().strip_prefix("stdio:") {
        Some(name) if !name.trim().is_empty() => Ok(McpServer::Stdio(name.trim().to_string())),
        Some(_) => Err(cx.diag(
            "`stdio:` with no server name in [[mcp.rule]]".to_string(),
            v.span(),
            "name the server as the agent's MCP config does, e.g. server = \"stdio:github\" (a glob: \"stdio:*\")",
        )),
        None => cx.host_glob(v).map(McpServer::Http),
    }
}

fn rule(cx: &Convert<'_>, entry: &serde_spanned::Spanned<RawRule>) -> Result<McpRule, PolicyError> {
    let r = entry.get_ref();
    let origin = cx.origin(entry.span());
    let server = server(cx, cx.required(&r.server, "server", "[[mcp.rule]]")?)?;
    if let (McpServer::Stdio(_), Some(p)) = (&server, &r.path) {
        return Err(cx.diag(
            "`path` in a [[mcp.rule]] for a stdio server".to_string(),
            p.span(),
            "a local server has no endpoint path: drop `path`, or name an HTTP server's host",
        ));
    }
    if let McpServer::Stdio(_) = &server
        && (r.tool.is_some() || !r.arguments.is_empty())
    {
        return Err(cx.diag(
            "`tool` or `arguments` in a [[mcp.rule]] for a stdio server".to_string(),
            entry.span(),
            "a local server is governed when it is started (deny or ask before it runs), not call by call: drop `tool` and `arguments`, or govern the server's tools over HTTP",
        ));
    }
    let mut arguments = Vec::new();
    for (k, v) in &r.arguments {
        let key = k.get_ref().trim();
        if key.is_empty() || key == "/" {
            return Err(cx.diag(
                format!("empty argument name {} in [[mcp.rule]]", toml_string(k.get_ref())),
                k.span(),
                "name a top-level argument or a JSON pointer into them, e.g. arguments = { path = \"src/*\", \"/options/mode\" = \"read*\" }",
            ));
        }
        arguments.push((key.to_string(), v.get_ref().clone()));
    }
    let name = match &r.name {
        Some(n) if !n.get_ref().trim().is_empty() => n.get_ref().trim().to_string(),
        _ => format!("mcp.rule {}", origin.label),
    };
    Ok(McpRule {
        name,
        server,
        path: r.path.as_ref().map(|p| p.get_ref().clone()),
        tool: r.tool.as_ref().map(|t| t.get_ref().clone()),
        arguments,
        action: *cx.required(&r.action, "action", "[[mcp.rule]]")?.get_ref(),
        reason: r.reason.as_ref().map(|x| x.get_ref().clone()),
        expires: cx.ends(&r.until, &r.r#for, "[[mcp.rule]]")?,
        origin: origin.label.into(),
    })
}

impl Section for Mcp {
    type Raw = Raw;
    type Plan = McpPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Mcp {
            default: raw.default.map(|d| (*d.get_ref(), cx.origin(d.span()))),
            pin: raw.pin.map(|p| (*p.get_ref(), cx.origin(p.span()))),
            rules: Vec::new(),
        };
        for entry in &raw.rule {
            out.rules.push((rule(cx, entry)?, cx.origin(entry.span())));
        }
        Ok(out)
    }

    fn merge(&mut self, later: &Self) {
        set_scalar(&mut self.default, &later.default);
        set_scalar(&mut self.pin, &later.pin);
        self.rules.extend(later.rules.iter().cloned());
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        let (f, b) = (&full.mcp, &base.mcp);
        for (r, o) in &f.rules {
            if r.action != McpAction::Deny && !b.rules.iter().any(|(x, _)| x == r) {
                let tool = r.tool.as_deref().unwrap_or("*");
                out.add(
                    o,
                    format!(
                        "adds MCP rule `{}` ({:?} tool {tool} on {})",
                        r.name, r.action, r.server
                    ),
                );
            }
        }
        // Looser than the trusted layers' default: deny, then ask or judge, then allow.
        let rank = |a: McpAction| match a {
            McpAction::Deny => 0,
            McpAction::Ask | McpAction::Judge => 1,
            McpAction::Allow => 2,
        };
        if let Some((d, o)) = &f.default
            && rank(*d) > rank(value(&b.default))
        {
            out.add(o, format!("lets unmatched MCP tool calls through {d:?}"));
        }
        if let Some((false, o)) = &f.pin
            && b.pin.as_ref().is_none_or(|(p, _)| *p)
        {
            out.add(
                o,
                "turns off MCP tool pinning (rug-pull checks)".to_string(),
            );
        }
    }

    fn plan(self) -> McpPlan {
        McpPlan {
            rules: self.rules.into_iter().map(|(r, _)| r).collect(),
            default: value(&self.default),
            pin: self.pin.is_none_or(|(p, _)| p),
            stdio: Vec::new(),
        }
    }

    fn render(mcp: &McpPlan, out: &mut Render) {
        out.header("mcp");
        out.line("# MCP tool calls: rules in order, then this.");
        out.string("default", &mcp.default.to_string());
        out.line(format!("pin = {}", mcp.pin));
        for r in &mcp.rules {
            out.entry("mcp.rule", &r.origin);
            out.string("name", &r.name);
            out.string("server", &r.server.to_string());
            if let Some(p) = &r.path {
                out.string("path", p);
            }
            if let Some(t) = &r.tool {
                out.string("tool", t);
            }
            if !r.arguments.is_empty() {
                let a: Vec<String> = r
                    .arguments
                    .iter()
                    .map(|(k, v)| format!("{} = {}", toml_string(k), toml_string(v)))
                    .collect();
                out.line(format!("arguments = {{ {} }}", a.join(", ")));
            }
            out.string("action", &r.action.to_string());
            if let Some(reason) = &r.reason {
                out.string("reason", reason);
            }
            out.until(r.expires);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(args: &[(&str, &str)], action: McpAction) -> McpRule {
        McpRule {
            tool: Some("read_*".into()),
            arguments: args
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..McpRule::new(
                "r",
                McpServer::Http("mcp.example.com".parse().unwrap()),
                action,
            )
        }
    }

    #[test]
    fn tool_glob_and_argument_conditions_all_must_hold() {
        let r = rule(&[("path", "src/*"), ("/opts/mode", "r*")], McpAction::Allow);
        let ok = json!({"path": "src/a.rs", "opts": {"mode": "read"}});
        assert!(r.matches_call("read_file", &ok));
        assert!(!r.matches_call("write_file", &ok));
        assert!(!r.matches_call("read_file", &json!({"path": "src/a.rs"})));
        assert!(!r.matches_call(
            "read_file",
            &json!({"path": "etc/x", "opts": {"mode": "read"}})
        ));
    }

    #[test]
    fn an_allow_condition_is_not_walked_out_of_with_dotdot() {
        let allow = rule(&[("path", "src/*")], McpAction::Allow);
        let deny = rule(&[("path", "src/*")], McpAction::Deny);
        let v = json!({"path": "src/../../etc/passwd"});
        assert!(!allow.matches_call("read_file", &v));
        assert!(deny.matches_call("read_file", &v));
    }

    #[test]
    fn non_string_arguments_match_by_their_json_text() {
        let r = rule(&[("n", "4?")], McpAction::Deny);
        assert!(r.matches_call("read_x", &json!({"n": 42})));
        assert!(!r.matches_call("read_x", &json!({"n": 5})));
    }

    #[test]
    fn stdio_rules_become_exec_rules_for_the_servers_they_name() {
        let server = |name: &str| McpStdio {
            name: name.into(),
            source: "~/.claude.json".into(),
            program: "npx".into(),
            args: vec!["-y".into(), format!("@x/{name}")],
        };
        let plan = McpPlan {
            rules: vec![
                McpRule::new("gh", McpServer::Stdio("github".into()), McpAction::Ask),
                McpRule::new("fs", McpServer::Stdio("files".into()), McpAction::Allow),
                McpRule::new("no", McpServer::Stdio("*".into()), McpAction::Deny),
            ],
            default: McpAction::Allow,
            pin: true,
            stdio: vec![server("github"), server("files"), server("shell")],
        };
        let rules = plan.stdio_exec_rules();
        let got: Vec<(&str, crate::sections::exec::ExecAction)> = rules
            .iter()
            .map(|r| (r.pattern.as_str(), r.action))
            .collect();
        use crate::sections::exec::ExecAction;
        assert_eq!(
            got,
            [
                ("npx -y @x/github", ExecAction::Ask),
                ("npx -y @x/shell", ExecAction::Deny)
            ]
        );
        assert!(server("github").matches("npx", "npx-cli.js", &["-y".into(), "@x/github".into()]));
        assert!(!server("github").matches("npx", "npx", &["-y".into(), "@x/other".into()]));
    }

    #[test]
    fn servers_by_host_and_path_or_stdio_name() {
        let mut r = rule(&[], McpAction::Deny);
        r.path = Some("/mcp*".into());
        assert!(r.is_for_http("mcp.example.com", "/mcp/"));
        assert!(!r.is_for_http("mcp.example.com", "/other"));
        assert!(!r.is_for_stdio("mcp.example.com"));
        let s = McpRule::new("s", McpServer::Stdio("git*".into()), McpAction::Deny);
        assert!(s.is_for_stdio("github"));
        assert!(!s.is_for_http("github", "/"));
    }
}
