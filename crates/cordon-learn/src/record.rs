//! What a logged event recorded of a decision: the thing decided, what the policy said of
//! it (before a person or the judge answered), the rule that said it, and the answer.

use cordon_events::{Action, Builtin, Event, LEARN, Layer, Learned, Origin, RuleId, Step};
use cordon_net::Route;
use serde::Serialize;

/// What a policy says of something, before anyone is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Said {
    Allow,
    Deny,
    /// A person decides (an `ask` rule).
    Ask,
    /// The LLM judge decides (a `judge` rule).
    Judge,
}

/// What was decided, with the facts a policy decides it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// A TCP connection the gateway decided.
    Flow {
        host: String,
        port: u16,
        route: Route,
        /// The process behind it, when a rule naming programs had it found.
        owner: Option<Box<cordon_policy::Owner>>,
    },
    /// An HTTP request the HTTP layer decided (its path as the layer normalised it).
    Request {
        method: String,
        host: String,
        port: u16,
        path: String,
        body_len: Option<u64>,
        /// The process behind it, when a rule naming programs had it found.
        owner: Option<Box<cordon_policy::Owner>>,
    },
    /// A program the exec supervisor decided.
    Exec {
        program: String,
        resolved: String,
        args: Vec<String>,
        line: String,
        /// The local MCP server this spawn started (`mcp_server`), when it was one.
        mcp_server: Option<String>,
    },
    /// A path the filesystem view masks or hides.
    Path { path: String },
    /// A name the sandbox's resolver answered or refused.
    Lookup { name: String },
}

impl Subject {
    /// One line naming it, for reports (escaped for the terminal: it came from inside).
    pub fn describe(&self) -> String {
        let s = match self {
            Subject::Flow { host, port, .. } => format!("{host}:{port}"),
            Subject::Request {
                method,
                host,
                port,
                path,
                ..
            } => format!("{method} {host}:{port}{path}"),
            Subject::Exec { line, .. } => line.clone(),
            Subject::Path { path } => path.clone(),
            Subject::Lookup { name } => name.clone(),
        };
        cordon_events::terminal::safe(&s)
    }
}

/// One recorded decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub session: String,
    pub seq: u64,
    pub layer: Layer,
    pub subject: Subject,
    /// What the policy said.
    pub said: Said,
    /// The rule that said it, as the log names it (`None`: no rule, e.g. an exec no rule
    /// matches).
    pub rule: Option<String>,
    /// A person's or the judge's answer, when one was given (`true`: allowed).
    pub answer: Option<bool>,
    /// A learning run let it through although the policy said otherwise.
    pub learned: bool,
}

/// How one event counts for replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified {
    /// A decision a policy makes again from what the log holds.
    Decision(Recorded),
    /// A decision no policy changes, or made on what the log does not hold (secret
    /// scanning's findings, an unwritable audit log, the flow cap, a lookup's answer, a
    /// syscall's arguments, UDP that is not DNS): kept as it was.
    Kept(Layer),
    /// Not a decision (setup, a note, an error, an `ask` that a later event settles).
    Other,
}

/// Rules decided on what happened at run time rather than on policy
/// ([`Builtin::is_run_time`]: a count, a body, a lookup's answer, UDP and ICMP).
fn run_time_rule(rule: &RuleId) -> bool {
    rule.as_builtin().is_some_and(Builtin::is_run_time)
}

/// Whether a filesystem event's rule is one the policy holds: `built-in`, a `FILE:LINE`, or
/// the home's view itself (`filesystem.home`).
fn policy_path_rule(rule: &RuleId) -> bool {
    match rule {
        RuleId::Policy(o) => *o == Origin::BuiltIn || o.is_policy_file_line(),
        r => r.is(Builtin::FilesystemHome),
    }
}

/// How `e` counts for replay.
pub fn classify(e: &Event) -> Classified {
    let rule = e.rule_id();
    let decided = matches!(e.action, Action::Allow | Action::Deny)
        || (e.layer == Layer::Http && e.action == Action::Error && e.rule.is_some())
        || (e.layer == Layer::Filesystem && e.detail.contains_key(LEARN))
        || (e.layer == Layer::Filesystem
            && rule.as_ref().is_some_and(|r| r.is(Builtin::FilesystemHome)));
    if !decided {
        return Classified::Other;
    }
    if rule.as_ref().is_some_and(run_time_rule) {
        return Classified::Kept(e.layer);
    }
    if e.layer == Layer::Filesystem && rule.as_ref().is_some_and(|r| !policy_path_rule(r)) {
        // A mask made from the host's state at the start (a file that held a secret, the
        // ssh agent's socket, cordon's own directories): not for a policy to decide again.
        return Classified::Kept(e.layer);
    }
    if e.detail.contains_key("note") && e.layer == Layer::Exec {
        // Arguments rewritten during the check: refused whatever the policy says.
        return Classified::Kept(e.layer);
    }
    let subject = match subject(e) {
        Some(s) => s,
        // A lookup refused for what it was (a zone transfer, another class, a bad name).
        None if matches!(
            e.layer,
            Layer::Syscall | Layer::Credentials | Layer::Limits | Layer::Dns
        ) =>
        {
            return Classified::Kept(e.layer);
        }
        None => return Classified::Other,
    };
    let (said, rule, answer) = said(e);
    Classified::Decision(Recorded {
        session: e.session.clone(),
        seq: e.seq,
        layer: e.layer,
        subject,
        said,
        rule,
        answer,
        learned: e.detail.contains_key(LEARN),
    })
}

fn subject(e: &Event) -> Option<Subject> {
    let s = |k: &str| e.detail_str(k).map(str::to_string);
    let port = || {
        e.detail
            .get("port")
            .and_then(|v| v.as_u64())
            .and_then(|p| u16::try_from(p).ok())
    };
    let owner = || {
        e.detail
            .get(cordon_policy::program::EVENT_KEY)
            .and_then(cordon_policy::Owner::from_detail)
            .map(Box::new)
    };
    match e.layer {
        Layer::Network => Some(Subject::Flow {
            host: s("host")?,
            port: port()?,
            route: Route::from_via(e.detail_str("via")?)?,
            owner: owner(),
        }),
        Layer::Http => Some(Subject::Request {
            method: s("method")?,
            host: s("host")?,
            port: port()?,
            path: s("path")?,
            body_len: e.detail.get("body_len").and_then(|v| v.as_u64()),
            owner: owner(),
        }),
        Layer::Exec => Some(Subject::Exec {
            program: s("program")?,
            resolved: s("resolved")?,
            args: e
                .detail
                .get("args")?
                .as_array()?
                .iter()
                .map(|a| a.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()?,
            line: s("command").unwrap_or_default(),
            mcp_server: s("mcp_server"),
        }),
        Layer::Filesystem => Some(Subject::Path { path: s("path")? }),
        // A lookup is a policy decision only when the blocklist made it (or could have).
        Layer::Dns
            if (e.rule.is_none() && e.action == Action::Allow)
                || e.rule_id().is_some_and(|r| r.is_blocklist()) =>
        {
            Some(Subject::Lookup { name: s("name")? })
        }
        _ => None,
    }
}

/// What the policy said of the event's subject, the rule, and an answer given.
fn said(e: &Event) -> (Said, Option<String>, Option<bool>) {
    let allowed = e.action != Action::Deny;
    let rule = e.rule.clone();
    if let Some(w) = e.learned() {
        let said = match w {
            Learned::WouldAsk => Said::Ask,
            Learned::WouldDeny | Learned::WouldJudge => Said::Deny,
        };
        return (said, rule, None);
    }
    if e.layer == Layer::Filesystem {
        // A mask, or a path the home's view hides: what the view decided.
        let said = if e.action == Action::Allow {
            Said::Allow
        } else {
            Said::Deny
        };
        return (said, rule, None);
    }
    // `RULE → judge → ask`: the base rule said judge or ask, and the rest answered.
    let typed = e.rule_id();
    let base = typed.as_ref().map(|r| r.base().to_string());
    let via_ask = typed
        .as_ref()
        .is_some_and(|r| r.steps().last() == Some(&Step::Ask))
        || e.detail.contains_key("approved")
        || e.detail.contains_key("approval");
    if e.detail.contains_key(cordon_events::JUDGE_CALL) {
        // Asked after the judge could not decide: still the judge's rule.
        return (Said::Judge, base, Some(allowed));
    }
    if via_ask {
        return (Said::Ask, base, Some(allowed));
    }
    match e.detail_str("unanswered") {
        Some("ask") => return (Said::Ask, base, Some(false)),
        Some("judge") => return (Said::Judge, base, Some(false)),
        _ => {}
    }
    let said = if allowed { Said::Allow } else { Said::Deny };
    (said, base, None)
}
