//! One typed vocabulary for decisions: where a rule came from ([`Origin`]), which rule
//! decided ([`RuleId`]) and the decision itself ([`Verdict`], [`Denial`]). Every layer
//! decides with these and every reader (the exit summary, the dashboard, `explain`,
//! `replay`, `policy suggest`) matches on them, so no reader takes a rule's words apart.
//!
//! On disk nothing changes: an event's `rule` is still the text [`RuleId`]'s `Display`
//! writes (`network.allow github.com (built-in)`, `builtin:ngrok.io`, `r → judge`), and
//! [`RuleId::parse`] reads any such text, old logs' included, back into the typed form. The
//! parse is exact: a text that does not come back out of `Display` byte for byte is kept
//! whole as [`RuleId::Other`], so a log's hash chain never sees a difference.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Where a policy rule came from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// cordon's built-in policy: `built-in`.
    BuiltIn,
    /// The project directory's own rule (it is writable): `project`.
    Project,
    /// A line of a policy file: `FILE:LINE`.
    Line {
        /// The file as the policy named it (absolute for real policy files).
        file: String,
        /// 1-based.
        line: u32,
    },
    /// A rule cordon derived from something else, as it describes it (`built-in: cordon's
    /// CA`, `credentials.NAME: source`): shown, never taken apart.
    Derived(String),
}

impl Origin {
    /// The origin written as `text` (any text: what is neither `built-in`, `project` nor
    /// `FILE:LINE` is [`Origin::Derived`]).
    pub fn parse(text: &str) -> Origin {
        match text {
            "built-in" => return Origin::BuiltIn,
            "project" => return Origin::Project,
            _ => {}
        }
        let line = text
            .rsplit_once(':')
            .filter(|(file, _)| !file.is_empty())
            .and_then(|(file, line)| Some((file, line.parse::<u32>().ok()?)));
        let parsed = match line {
            Some((file, line)) => Origin::Line {
                file: file.to_string(),
                line,
            },
            None => Origin::Derived(text.to_string()),
        };
        // `x:007` is not what `Display` writes for line 7: kept whole.
        match parsed.to_string() == text {
            true => parsed,
            false => Origin::Derived(text.to_string()),
        }
    }

    /// Whether this is cordon's built-in policy.
    pub fn is_built_in(&self) -> bool {
        matches!(self, Origin::BuiltIn)
    }

    /// Whether this is a line of a policy file at an absolute path (what a user wrote, as
    /// opposed to a test's or a relative name).
    pub fn is_policy_file_line(&self) -> bool {
        matches!(self, Origin::Line { file, .. } if Path::new(file).is_absolute())
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::BuiltIn => f.write_str("built-in"),
            Origin::Project => f.write_str("project"),
            Origin::Line { file, line } => write!(f, "{file}:{line}"),
            Origin::Derived(text) => f.write_str(text),
        }
    }
}

impl From<&str> for Origin {
    fn from(text: &str) -> Self {
        Origin::parse(text)
    }
}

impl From<String> for Origin {
    fn from(text: String) -> Self {
        Origin::parse(&text)
    }
}

impl Serialize for Origin {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Origin {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Origin::parse(&String::deserialize(d)?))
    }
}

/// cordon's own rules: fixed names no policy line has, each deciding one kind of thing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// No `[[network.allow]]` names the host and port.
    NetworkDefaultDeny,
    /// A connection to an address that did not come from cordon's DNS.
    NetworkRawIp,
    /// The host and port are allowed, but not for the program that connected.
    NetworkProgram,
    /// The rules for the host name programs and the connecting one could not be found.
    NetworkOwnerUnknown,
    /// Too many connections at once.
    NetworkMaxFlows,
    /// A packet to a cordon address the resolver never handed out.
    NetworkUnknownAddress,
    /// Too many events for one flow: the rest are counted, not logged.
    NetworkEventBudget,
    /// UDP other than DNS.
    NetworkUdp,
    /// ICMP.
    NetworkIcmp,
    /// What the network mode (`none`, `host`) decides.
    NetworkMode,
    /// The HTTP layer has no rule for the host and its default denies.
    HttpDefaultDeny,
    /// A request for a host other than the one its connection was made to.
    HttpHostMismatch,
    /// A compressed body that holds a credential placeholder.
    HttpCompressedCredential,
    /// A name that resolves to a non-public address (DNS rebinding); qualified by the
    /// address class: `dns.rebinding:link-local`.
    DnsRebinding,
    /// `host.cordon.internal` without a rule that opens it.
    DnsHostAlias,
    /// An MCP tool held: changed since it was pinned.
    McpPin,
    /// An MCP body cordon could not read as JSON-RPC.
    McpUnreadable,
    /// What older logs named [`Builtin::McpUnreadable`].
    McpLegacy,
    /// The filtering ssh agent.
    SshAgent,
    /// The audit log cannot be written.
    AuditUnwritable,
    /// The home directory's view.
    FilesystemHome,
    /// What cordon could not check, refused (unreadable exec arguments).
    FailClosed,
    /// Secret scanning found a secret; qualified by the kinds found: `dlp:aws,github`.
    Dlp,
    /// A layer's default (`[http] default`, `[mcp] default`): no rule of the layer matched.
    Default,
}

impl Builtin {
    /// Every built-in rule.
    pub const ALL: [Builtin; 24] = [
        Builtin::NetworkDefaultDeny,
        Builtin::NetworkRawIp,
        Builtin::NetworkProgram,
        Builtin::NetworkOwnerUnknown,
        Builtin::NetworkMaxFlows,
        Builtin::NetworkUnknownAddress,
        Builtin::NetworkEventBudget,
        Builtin::NetworkUdp,
        Builtin::NetworkIcmp,
        Builtin::NetworkMode,
        Builtin::HttpDefaultDeny,
        Builtin::HttpHostMismatch,
        Builtin::HttpCompressedCredential,
        Builtin::DnsRebinding,
        Builtin::DnsHostAlias,
        Builtin::McpPin,
        Builtin::McpUnreadable,
        Builtin::McpLegacy,
        Builtin::SshAgent,
        Builtin::AuditUnwritable,
        Builtin::FilesystemHome,
        Builtin::FailClosed,
        Builtin::Dlp,
        Builtin::Default,
    ];

    /// The rule's name in events (`network.default-deny`).
    pub fn as_str(self) -> &'static str {
        match self {
            Builtin::NetworkDefaultDeny => "network.default-deny",
            Builtin::NetworkRawIp => "network.raw-ip",
            Builtin::NetworkProgram => "network.program",
            Builtin::NetworkOwnerUnknown => "network.owner-unknown",
            Builtin::NetworkMaxFlows => "network.max-flows",
            Builtin::NetworkUnknownAddress => "network.unknown-address",
            Builtin::NetworkEventBudget => "network.event-budget",
            Builtin::NetworkUdp => "network.udp",
            Builtin::NetworkIcmp => "network.icmp",
            Builtin::NetworkMode => "network.mode",
            Builtin::HttpDefaultDeny => "http.default-deny",
            Builtin::HttpHostMismatch => "http.host-mismatch",
            Builtin::HttpCompressedCredential => "http.compressed-credential",
            Builtin::DnsRebinding => "dns.rebinding",
            Builtin::DnsHostAlias => "dns.host-alias",
            Builtin::McpPin => "mcp.pin",
            Builtin::McpUnreadable => "mcp.unreadable",
            Builtin::McpLegacy => "mcp",
            Builtin::SshAgent => "ssh.agent",
            Builtin::AuditUnwritable => crate::AUDIT_UNWRITABLE,
            Builtin::FilesystemHome => "filesystem.home",
            Builtin::FailClosed => "built-in: fail closed",
            Builtin::Dlp => "dlp",
            Builtin::Default => "default",
        }
    }

    /// The built-in rule named `name`, if any.
    pub fn from_name(name: &str) -> Option<Builtin> {
        Builtin::ALL.into_iter().find(|b| b.as_str() == name)
    }

    /// Whether this rule refuses for lack of a rule (no policy line names the destination):
    /// what a learning run lets through, and a line added to the policy opens.
    pub fn is_no_rule(self) -> bool {
        matches!(self, Builtin::NetworkDefaultDeny | Builtin::HttpDefaultDeny)
    }

    /// Whether this rule decides on what happened at run time (a count, a body, a lookup's
    /// answer, a packet), not on anything a policy holds: `replay` keeps its decisions.
    pub fn is_run_time(self) -> bool {
        matches!(
            self,
            Builtin::AuditUnwritable
                | Builtin::NetworkMaxFlows
                | Builtin::NetworkUnknownAddress
                | Builtin::NetworkEventBudget
                | Builtin::DnsRebinding
                | Builtin::DnsHostAlias
                | Builtin::HttpHostMismatch
                | Builtin::FailClosed
                | Builtin::Dlp
                | Builtin::HttpCompressedCredential
                | Builtin::McpUnreadable
                | Builtin::McpLegacy
                | Builtin::NetworkUdp
                | Builtin::NetworkIcmp
        )
    }
}

impl fmt::Display for Builtin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an HTTP rule's `judge` or `ask` went on to: the steps after the rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// The LLM judge was asked: `→ judge`.
    Judge,
    /// A person was asked: `→ ask`.
    Ask,
}

impl Step {
    /// The step's word in a rule (`judge`).
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Judge => "judge",
            Step::Ask => "ask",
        }
    }
}

/// The separator between an HTTP rule and the steps after it.
const THEN: &str = " → ";

/// The rule that decided, typed. `Display` writes the form events have always carried.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RuleId {
    /// One of cordon's own rules, with a qualifier when one is part of its name
    /// (`dns.rebinding:link-local`, `dlp:aws`).
    Builtin {
        /// Which.
        rule: Builtin,
        /// After the `:`.
        qualifier: Option<String>,
    },
    /// A policy rule named by where it is: a filesystem path rule (`built-in`, `FILE:LINE`).
    Policy(Origin),
    /// A `[[network.allow]]`: `network.allow HOST (ORIGIN)`.
    NetworkAllow {
        /// The rule's host pattern, as written.
        host: String,
        /// Where the rule is.
        origin: Origin,
    },
    /// A `[network] allow_ips` range: `network.allow_ips NET`.
    AllowIps(String),
    /// A DNS blocklist entry: `builtin:ENTRY` (the built-in list), `block:ENTRY` (the user's).
    Blocklist {
        /// The entry as written.
        entry: String,
        /// Whether it is on cordon's built-in list.
        built_in: bool,
    },
    /// An HTTP rule's name (`default` when none matched) and what its `judge`/`ask` went on
    /// to: `NAME → judge → ask`.
    Http {
        /// The `[[http.rule]]`'s name, or `default`.
        name: String,
        /// The steps after it, in order.
        then: Vec<Step>,
    },
    /// Any other rule, as its text: exec rules' `ORIGIN (ACTION "PATTERN")`, `[[mcp.rule]]`
    /// names, and what a future layer names before this type knows it.
    Other(String),
}

impl RuleId {
    /// One of cordon's own rules, unqualified.
    pub fn builtin(rule: Builtin) -> RuleId {
        RuleId::Builtin {
            rule,
            qualifier: None,
        }
    }

    /// One of cordon's own rules with its qualifier (`dlp:aws`).
    pub fn qualified(rule: Builtin, qualifier: impl Into<String>) -> RuleId {
        RuleId::Builtin {
            rule,
            qualifier: Some(qualifier.into()),
        }
    }

    /// The rule written as `text` in an event. Any text parses; what is not one of the
    /// typed forms, exactly as `Display` writes it, is [`RuleId::Other`].
    pub fn parse(text: &str) -> RuleId {
        let parsed = Self::typed(text).unwrap_or_else(|| RuleId::Other(text.to_string()));
        match parsed.prints_as(text) {
            true => parsed,
            false => RuleId::Other(text.to_string()),
        }
    }

    /// Whether `Display` writes exactly `text`.
    fn prints_as(&self, text: &str) -> bool {
        let printed = self.to_string();
        printed == text
    }

    fn typed(text: &str) -> Option<RuleId> {
        // A rule's steps first: a rule named like a built-in one (`dlp:uploads → judge`) is
        // still that rule, judged.
        let mut parts = text.split(THEN);
        let name = parts.next().unwrap_or(text);
        let then: Option<Vec<Step>> = parts
            .map(|s| match s {
                "judge" => Some(Step::Judge),
                "ask" => Some(Step::Ask),
                _ => None,
            })
            .collect();
        if let Some(then) = then.filter(|t| !t.is_empty()) {
            return Some(RuleId::Http {
                name: name.to_string(),
                then,
            });
        }
        if let Some(rule) = Builtin::from_name(text) {
            return Some(RuleId::builtin(rule));
        }
        if let Some((name, qualifier)) = text.split_once(':')
            && let Some(rule @ (Builtin::DnsRebinding | Builtin::Dlp)) = Builtin::from_name(name)
        {
            return Some(RuleId::qualified(rule, qualifier));
        }
        if let Some(rest) = text.strip_prefix("network.allow ")
            && let Some((host, origin)) = rest.strip_suffix(')').and_then(|r| r.split_once(" ("))
        {
            return Some(RuleId::NetworkAllow {
                host: host.to_string(),
                origin: Origin::parse(origin),
            });
        }
        if let Some(net) = text.strip_prefix("network.allow_ips ") {
            return Some(RuleId::AllowIps(net.to_string()));
        }
        for (prefix, built_in) in [("builtin:", true), ("block:", false)] {
            if let Some(entry) = text.strip_prefix(prefix) {
                return Some(RuleId::Blocklist {
                    entry: entry.to_string(),
                    built_in,
                });
            }
        }
        match Origin::parse(text) {
            Origin::Derived(_) => None,
            origin => Some(RuleId::Policy(origin)),
        }
    }

    /// The built-in rule this is, if it is one.
    pub fn as_builtin(&self) -> Option<Builtin> {
        match self {
            RuleId::Builtin { rule, .. } => Some(*rule),
            _ => None,
        }
    }

    /// Whether this is the built-in rule `rule` (any qualifier).
    pub fn is(&self, rule: Builtin) -> bool {
        self.as_builtin() == Some(rule)
    }

    /// Whether this refuses for lack of a rule ([`Builtin::is_no_rule`]).
    pub fn is_no_rule(&self) -> bool {
        self.as_builtin().is_some_and(Builtin::is_no_rule)
    }

    /// Whether this is a DNS blocklist entry.
    pub fn is_blocklist(&self) -> bool {
        matches!(self, RuleId::Blocklist { .. })
    }

    /// This HTTP rule with one more step after it (`r` → `r → judge`); any other rule is
    /// taken as an HTTP rule of that name.
    pub fn then(self, step: Step) -> RuleId {
        match self {
            RuleId::Http { name, mut then } => {
                then.push(step);
                RuleId::Http { name, then }
            }
            other => RuleId::Http {
                name: other.to_string(),
                then: vec![step],
            },
        }
    }

    /// The steps after the rule (empty for all but a judged or asked HTTP rule).
    pub fn steps(&self) -> &[Step] {
        match self {
            RuleId::Http { then, .. } => then,
            _ => &[],
        }
    }

    /// The rule itself, without the steps after it: what a policy holds.
    pub fn base(&self) -> RuleId {
        match self {
            RuleId::Http { name, .. } => RuleId::parse(name),
            other => other.clone(),
        }
    }

    /// The rule without its origin and the origin apart, for `explain`'s two lines
    /// (`network.allow github.com` and `built-in`).
    pub fn split_origin(&self) -> (String, Option<&Origin>) {
        match self {
            RuleId::NetworkAllow { host, origin } => {
                (format!("network.allow {host}"), Some(origin))
            }
            other => (other.to_string(), None),
        }
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleId::Builtin {
                rule,
                qualifier: None,
            } => f.write_str(rule.as_str()),
            RuleId::Builtin {
                rule,
                qualifier: Some(q),
            } => write!(f, "{}:{q}", rule.as_str()),
            RuleId::Policy(origin) => write!(f, "{origin}"),
            RuleId::NetworkAllow { host, origin } => write!(f, "network.allow {host} ({origin})"),
            RuleId::AllowIps(net) => write!(f, "network.allow_ips {net}"),
            RuleId::Blocklist {
                entry,
                built_in: true,
            } => write!(f, "builtin:{entry}"),
            RuleId::Blocklist {
                entry,
                built_in: false,
            } => write!(f, "block:{entry}"),
            RuleId::Http { name, then } => {
                f.write_str(name)?;
                then.iter()
                    .try_for_each(|s| write!(f, "{THEN}{}", s.as_str()))
            }
            RuleId::Other(text) => f.write_str(text),
        }
    }
}

impl From<&str> for RuleId {
    fn from(text: &str) -> Self {
        RuleId::parse(text)
    }
}

impl From<String> for RuleId {
    fn from(text: String) -> Self {
        RuleId::parse(&text)
    }
}

impl From<Builtin> for RuleId {
    fn from(rule: Builtin) -> Self {
        RuleId::builtin(rule)
    }
}

impl From<&RuleId> for String {
    fn from(rule: &RuleId) -> Self {
        rule.to_string()
    }
}

impl From<RuleId> for String {
    fn from(rule: RuleId) -> Self {
        rule.to_string()
    }
}

impl PartialEq<str> for RuleId {
    fn eq(&self, text: &str) -> bool {
        self.prints_as(text)
    }
}

impl PartialEq<&str> for RuleId {
    fn eq(&self, text: &&str) -> bool {
        self.prints_as(text)
    }
}

impl Serialize for RuleId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RuleId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(RuleId::parse(&String::deserialize(d)?))
    }
}

/// A layer's allow-or-deny decision and what made it: the gateway's flows, the HTTP layer's
/// refusals and `explain` all carry this one shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether it is let through.
    pub allow: bool,
    /// The rule that decided (every event names one).
    pub rule: RuleId,
    /// Why, in words for people.
    pub reason: String,
}

impl Verdict {
    /// Let through by `rule`.
    pub fn allow(rule: impl Into<RuleId>, reason: impl Into<String>) -> Self {
        Verdict {
            allow: true,
            rule: rule.into(),
            reason: reason.into(),
        }
    }

    /// Refused by `rule`.
    pub fn deny(rule: impl Into<RuleId>, reason: impl Into<String>) -> Self {
        Verdict {
            allow: false,
            rule: rule.into(),
            reason: reason.into(),
        }
    }
}

/// A refusal the client is told about: the verdict's rule and reason, and the policy lines
/// that would allow it. The gateway makes it; the HTTP layer answers with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// The rule that decided.
    pub rule: RuleId,
    /// Why, in words.
    pub reason: String,
    /// Policy lines (TOML) that would allow it, when a line can.
    pub allow_with: Option<String>,
}

#[cfg(test)]
#[path = "verdict_tests.rs"]
mod tests;
