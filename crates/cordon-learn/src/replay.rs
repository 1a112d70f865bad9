//! Re-deciding recorded decisions under a policy, with the same functions the layers run.

use std::collections::BTreeMap;

use cordon_events::{Action, Event, Layer};
use cordon_http::explain::RequestPolicy;
use cordon_net::{FlowPolicy, Route};
use cordon_policy::{ExecAction, HttpAction, Plan};
use serde::Serialize;

use crate::record::{Classified, Recorded, Said, Subject, classify};

/// How the filesystem view of the replayed policy treats a path: `Some((allowed, rule))`,
/// or `None` when it cannot say. The view is the sandbox's (built from the host's files), so
/// the caller supplies it.
pub type PathDecider<'a> = dyn Fn(&str) -> Option<(bool, String)> + 'a;

/// A decision's outcome once asked questions are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Allowed,
    Denied,
    /// A person would be asked, and no recorded answer stands for theirs.
    Ask,
    /// The judge would be asked, and no recorded verdict stands for its.
    Judge,
}

/// One decision whose outcome the replayed policy changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub session: String,
    pub seq: u64,
    pub layer: String,
    pub subject: String,
    pub was: Outcome,
    pub was_rule: Option<String>,
    pub now: Outcome,
    pub now_rule: Option<String>,
    /// Recorded in a learning run (what `was` says is what the policy would have done).
    pub learned: bool,
}

/// Counts for one layer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LayerCounts {
    pub decisions: u64,
    pub unchanged: u64,
    pub allowed_to_denied: u64,
    pub denied_to_allowed: u64,
    pub now_ask: u64,
    pub now_judge: u64,
    /// Any other change of outcome (an ask now decided by rule, a judge now a person).
    pub other: u64,
    /// The same outcome, decided by another rule (a rule moved to another line or file).
    pub rule_changed: u64,
    /// Decisions made on what the log does not hold, kept as they were.
    pub kept: u64,
}

/// What a replay found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// `cordon-replay/1`: a field is added, never renamed or removed, within one schema.
    pub schema: &'static str,
    pub sessions: Vec<String>,
    pub events: u64,
    pub decisions: u64,
    pub unchanged: u64,
    /// The same outcome, decided by another rule.
    pub rule_changed: u64,
    pub kept: u64,
    pub by_layer: BTreeMap<String, LayerCounts>,
    /// Every decision whose outcome changes, in log order.
    pub changes: Vec<Change>,
}

/// The schema name [`Report::schema`] carries.
pub const SCHEMA: &str = "cordon-replay/1";

impl Report {
    /// Adds another log's report to this one.
    pub fn merge(&mut self, other: Report) {
        self.schema = SCHEMA;
        self.sessions.extend(other.sessions);
        self.events += other.events;
        self.decisions += other.decisions;
        self.unchanged += other.unchanged;
        self.rule_changed += other.rule_changed;
        self.kept += other.kept;
        for (layer, c) in other.by_layer {
            let mine = self.by_layer.entry(layer).or_default();
            mine.decisions += c.decisions;
            mine.unchanged += c.unchanged;
            mine.allowed_to_denied += c.allowed_to_denied;
            mine.denied_to_allowed += c.denied_to_allowed;
            mine.now_ask += c.now_ask;
            mine.now_judge += c.now_judge;
            mine.other += c.other;
            mine.rule_changed += c.rule_changed;
            mine.kept += c.kept;
        }
        self.changes.extend(other.changes);
    }

    /// Whether something the log shows allowed would now be denied (`cordon replay`'s exit 1).
    pub fn newly_denied(&self) -> bool {
        self.changes
            .iter()
            .any(|c| c.was == Outcome::Allowed && c.now == Outcome::Denied)
    }
}

/// The layers' policy of one plan, made once.
pub struct Replayer<'a> {
    plan: &'a Plan,
    flows: FlowPolicy<'a>,
    requests: RequestPolicy,
    paths: &'a PathDecider<'a>,
    report: Report,
    /// The session being read had the HTTP layer on (its `http`/`apply` event).
    http_layer: bool,
}

impl<'a> Replayer<'a> {
    /// A replay under `plan`; `paths` decides filesystem events.
    pub fn new(plan: &'a Plan, paths: &'a PathDecider<'a>) -> Result<Self, cordon_net::NetError> {
        Ok(Replayer {
            plan,
            flows: FlowPolicy::new(plan)?,
            requests: RequestPolicy::new(plan),
            paths,
            report: Report {
                schema: SCHEMA,
                ..Report::default()
            },
            http_layer: false,
        })
    }

    /// Takes the next event of a log, in order.
    pub fn event(&mut self, e: &Event) {
        self.report.events += 1;
        match (e.layer, e.action) {
            (Layer::Session, Action::Start) => {
                self.report.sessions.push(e.session.clone());
                self.http_layer = false;
            }
            (Layer::Http, Action::Apply) => self.http_layer = true,
            _ => {}
        }
        match classify(e) {
            Classified::Decision(r) => self.decision(r),
            Classified::Kept(layer) => self.kept(layer),
            Classified::Other => {}
        }
    }

    /// The report, once every event is in.
    pub fn finish(self) -> Report {
        self.report
    }

    fn counts(&mut self, layer: Layer) -> &mut LayerCounts {
        self.report
            .by_layer
            .entry(layer.as_str().to_string())
            .or_default()
    }

    fn kept(&mut self, layer: Layer) {
        self.report.decisions += 1;
        self.report.kept += 1;
        let c = self.counts(layer);
        c.decisions += 1;
        c.kept += 1;
    }

    fn decision(&mut self, r: Recorded) {
        let Some((said, rule)) = self.decide(&r) else {
            self.kept(r.layer);
            return;
        };
        self.report.decisions += 1;
        let was = resolve(r.said, r.answer);
        // The recorded answer stands for the same question asked again (nobody could answer
        // it: refused again).
        let answer = match (said, r.said) {
            (Said::Ask, Said::Ask) | (Said::Judge, Said::Judge) => r.answer,
            _ => None,
        };
        let now = resolve(said, answer);
        let same_rule = rule == r.rule || r.layer == Layer::Filesystem;
        let c = self.counts(r.layer);
        c.decisions += 1;
        match (was, now) {
            _ if was == now && same_rule => {
                c.unchanged += 1;
                self.report.unchanged += 1;
                return;
            }
            _ if was == now => {
                c.rule_changed += 1;
                self.report.rule_changed += 1;
                return;
            }
            (Outcome::Allowed, Outcome::Denied) => c.allowed_to_denied += 1,
            (Outcome::Denied, Outcome::Allowed) => c.denied_to_allowed += 1,
            (_, Outcome::Ask) if was != Outcome::Ask => c.now_ask += 1,
            (_, Outcome::Judge) if was != Outcome::Judge => c.now_judge += 1,
            _ => c.other += 1,
        }
        self.report.changes.push(Change {
            session: r.session,
            seq: r.seq,
            layer: r.layer.as_str().to_string(),
            subject: r.subject.describe(),
            was,
            was_rule: r.rule,
            now,
            now_rule: rule,
            learned: r.learned,
        });
    }

    /// What the plan says of `subject`, and the rule; `None` when it cannot be said from
    /// the log (a rule that needs headers or the query, a path the view cannot place).
    fn decide(&self, r: &Recorded) -> Option<(Said, Option<String>)> {
        let (subject, learned) = (&r.subject, r.learned);
        let yes_no = |allow: bool| if allow { Said::Allow } else { Said::Deny };
        match subject {
            Subject::Flow {
                host,
                port,
                route,
                owner,
            } => {
                let v = self
                    .flows
                    .decide(host, *port, *route, self.http_layer, owner.as_deref());
                Some((yes_no(v.allow), Some(v.rule.to_string())))
            }
            Subject::Request {
                method,
                host,
                port,
                path,
                body_len,
                owner,
            } => {
                // The connection first: a request only exists on one the gateway lets in.
                let route = if matches!(port, 80 | 443) {
                    Route::Tun
                } else {
                    Route::ProxyRequest
                };
                let v = self
                    .flows
                    .decide(host, *port, route, true, owner.as_deref());
                // A learning run hands the HTTP layer what only the lack of a rule refused.
                let learning_let_in = learned && !v.allow && cordon_net::learnable(&v.rule);
                if !v.http && !learning_let_in {
                    return Some((yes_no(v.allow), Some(v.rule.to_string())));
                }
                if r.rule
                    .as_deref()
                    .is_some_and(|x| self.requests.needs_more(x))
                {
                    return None;
                }
                let d =
                    self.requests
                        .decide(method, host, *port, path, *body_len, owner.as_deref())?;
                let said = match d.action {
                    HttpAction::Allow => Said::Allow,
                    HttpAction::Deny => Said::Deny,
                    HttpAction::Ask => Said::Ask,
                    HttpAction::Judge => Said::Judge,
                };
                Some((said, Some(d.rule.to_string())))
            }
            Subject::Exec {
                program,
                resolved,
                args,
                mcp_server,
                ..
            } => {
                // A local MCP server's spawn: a `stdio:` [[mcp.rule]] decides it first, as
                // it did in the session (see `McpPlan::stdio_exec_rules`).
                let stdio = mcp_server.as_ref().and_then(|name| {
                    self.plan.mcp.stdio_exec_rule(&cordon_policy::McpStdio {
                        name: name.clone(),
                        source: String::new(),
                        program: program.clone(),
                        args: args.clone(),
                    })
                });
                let decided = match &stdio {
                    Some(r) => Some(r),
                    None => self.plan.exec.decide_exec(program, resolved, args),
                };
                Some(match decided {
                    None => (Said::Allow, None),
                    Some(r) => {
                        let said = match r.action {
                            ExecAction::Allow => Said::Allow,
                            ExecAction::Deny => Said::Deny,
                            ExecAction::Ask => Said::Ask,
                        };
                        (said, Some(r.label()))
                    }
                })
            }
            Subject::Path { path } => {
                let (allow, rule) = (self.paths)(path)?;
                Some((yes_no(allow), Some(rule)))
            }
            Subject::Lookup { name } => Some(match self.flows.blocked(name) {
                Some(rule) => (Said::Deny, Some(rule.to_string())),
                None => (Said::Allow, None),
            }),
        }
    }
}

/// The outcome of what a policy said, given the answer that settles an ask or a judge.
fn resolve(said: Said, answer: Option<bool>) -> Outcome {
    match (said, answer) {
        (Said::Allow, _) | (Said::Ask | Said::Judge, Some(true)) => Outcome::Allowed,
        (Said::Deny, _) | (Said::Ask | Said::Judge, Some(false)) => Outcome::Denied,
        (Said::Ask, None) => Outcome::Ask,
        (Said::Judge, None) => Outcome::Judge,
    }
}
