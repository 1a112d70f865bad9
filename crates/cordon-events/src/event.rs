//! Event types and the crate's error.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Which layer produced an event. See the crate docs for what each layer emits.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    Session,
    Filesystem,
    Process,
    Landlock,
    Env,
    Limits,
    Terminal,
    Network,
    Dns,
    Http,
    Syscall,
    Exec,
    Credentials,
    State,
    /// MCP tool calls and tool lists (HTTP servers read as JSON-RPC; stdio servers spawned).
    Mcp,
}

impl Layer {
    /// Every layer, in documentation order.
    pub const ALL: [Layer; 15] = [
        Layer::Session,
        Layer::Filesystem,
        Layer::Process,
        Layer::Landlock,
        Layer::Env,
        Layer::Limits,
        Layer::Terminal,
        Layer::Network,
        Layer::Dns,
        Layer::Http,
        Layer::Syscall,
        Layer::Exec,
        Layer::Credentials,
        Layer::State,
        Layer::Mcp,
    ];

    /// The name used in the log (`"filesystem"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Session => "session",
            Layer::Filesystem => "filesystem",
            Layer::Process => "process",
            Layer::Landlock => "landlock",
            Layer::Env => "env",
            Layer::Limits => "limits",
            Layer::Terminal => "terminal",
            Layer::Network => "network",
            Layer::Dns => "dns",
            Layer::Http => "http",
            Layer::Syscall => "syscall",
            Layer::Exec => "exec",
            Layer::Credentials => "credentials",
            Layer::State => "state",
            Layer::Mcp => "mcp",
        }
    }

    /// The layer with this log name, if any (for CLI filters).
    pub fn from_name(name: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.as_str() == name)
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Outcome class of an event. See the crate docs for what each means per layer.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Start,
    Stop,
    Apply,
    Degraded,
    Allow,
    Deny,
    Ask,
    Log,
    Exit,
    Error,
}

impl Action {
    /// Every action, in documentation order.
    pub const ALL: [Action; 10] = [
        Action::Start,
        Action::Stop,
        Action::Apply,
        Action::Degraded,
        Action::Allow,
        Action::Deny,
        Action::Ask,
        Action::Log,
        Action::Exit,
        Action::Error,
    ];

    /// The name used in the log (`"deny"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Start => "start",
            Action::Stop => "stop",
            Action::Apply => "apply",
            Action::Degraded => "degraded",
            Action::Allow => "allow",
            Action::Deny => "deny",
            Action::Ask => "ask",
            Action::Log => "log",
            Action::Exit => "exit",
            Action::Error => "error",
        }
    }

    /// The action with this log name, if any (for CLI filters).
    pub fn from_name(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// What a layer hands to the sink: the event before it gets its time, session, seq and hash.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    pub layer: Layer,
    pub action: Action,
    pub reason: String,
    pub rule: Option<String>,
    pub detail: Map<String, Value>,
}

impl NewEvent {
    pub fn new(layer: Layer, action: Action, reason: impl Into<String>) -> Self {
        Self {
            layer,
            action,
            reason: reason.into(),
            rule: None,
            detail: Map::new(),
        }
    }

    /// The policy rule that decided (`built-in`, or `FILE:LINE`).
    pub fn rule(mut self, rule: impl Into<String>) -> Self {
        self.rule = Some(rule.into());
        self
    }

    /// Adds (or replaces) one `detail` entry.
    pub fn detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.detail.insert(key.to_owned(), value.into());
        self
    }
}

/// One line of the log. See the crate docs for each field.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// RFC 3339, UTC, milliseconds: `2026-11-29T08:30:12.345Z`.
    pub time: String,
    pub session: String,
    pub seq: u64,
    pub layer: Layer,
    pub action: Action,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rule: Option<String>,
    #[serde(skip_serializing_if = "Map::is_empty", default)]
    pub detail: Map<String, Value>,
    /// The previous line's `hash`; [`crate::GENESIS_PREV`] on the first line.
    pub prev: String,
    /// See the crate docs, "The hash chain".
    pub hash: String,
}

/// The `detail` key that marks what a learning run (`cordon run --learn`) let through: its
/// value says what the policy would have done (`would deny`, `would ask`), and the event's
/// `rule` is the rule that would have. The action is what happened (`allow`; `log` for a path
/// the home's view hid, which a learning run records but cannot show).
pub const LEARN: &str = "learn";

/// The `detail` key that marks an HTTP event whose request the LLM judge was asked about
/// (one per judged request, on its final event). Counted by this key, never by wording.
pub const JUDGE_CALL: &str = "judge_call";

/// One question put to the LLM judge, as [`JUDGE_CALL`] records it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct JudgeCall {
    /// What the judge answered: `allow`, `deny`, or `failed` (no usable answer).
    pub verdict: String,
    /// How long the question took, in milliseconds.
    pub latency_ms: u64,
}

impl NewEvent {
    /// Marks the event as the final one of a request the judge was asked about.
    pub fn judge_call(self, call: &JudgeCall) -> Self {
        let v = serde_json::to_value(call).unwrap_or(Value::Null);
        self.detail(JUDGE_CALL, v)
    }
}

impl Event {
    /// The judge question this event records, if it is the final event of a judged request.
    pub fn judge_call(&self) -> Option<JudgeCall> {
        serde_json::from_value(self.detail.get(JUDGE_CALL)?.clone()).ok()
    }

    /// Whether this is the `session`/`stop` event that ends a complete log.
    pub fn is_session_stop(&self) -> bool {
        self.layer == Layer::Session && self.action == Action::Stop
    }

    /// A `detail` entry as a string, if present and a string.
    pub fn detail_str(&self, key: &str) -> Option<&str> {
        self.detail.get(key).and_then(Value::as_str)
    }
}

/// Everything that can go wrong writing or reading logs. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A line that is not a valid event; `line` counts from 1.
    #[error("{}:{line}: malformed event: {source}", path.display())]
    Parse {
        path: PathBuf,
        line: u64,
        #[source]
        source: serde_json::Error,
    },
    /// A line longer than the reader accepts (binary garbage, or not a log at all).
    #[error("{}:{line}: line longer than {max} bytes: not an event log?", path.display())]
    LineTooLong {
        path: PathBuf,
        line: u64,
        max: usize,
    },
    /// The file got shorter while being followed: truncated or replaced.
    #[error("{}: file shrank from {was} to {now} bytes while being followed", path.display())]
    Truncated { path: PathBuf, was: u64, now: u64 },
    #[error(
        "invalid session id {0:?}: use letters, digits, '.', '_' and '-', not starting with '.'"
    )]
    InvalidSession(String),
    /// The log cannot be written now; this event waits in memory with `held - 1` before it
    /// (see [`AuditLog::emit`](crate::AuditLog::emit)).
    #[error("{}: not written yet, {held} events wait in memory: {error}", path.display())]
    Held {
        path: PathBuf,
        held: usize,
        error: String,
    },
    #[error("{}: could not encode event: {source}", path.display())]
    Encode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl EventError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        EventError::Io {
            path: path.to_owned(),
            source,
        }
    }
}
