//! Stage 4, check: what the rule left open is settled here, in order — secret scanning of the
//! head and the body read so far (`[dlp]`), the judge for a `judge` rule, a person for `ask`
//! (or for a judge that could not decide and says so). Anything but allow ends in a 403
//! that names the rule and why, in words a model can act on; never waved through.

use cordon_events::Action as EvAction;
use cordon_events::{Builtin, RuleId, Step};
use hyper::StatusCode;

use super::body::ReadBody;
use super::{Exchange, Refused, redact_query};
use crate::intercept::Screens;
use crate::rules::Decision;
use cordon_policy::HttpAction;

/// How a request was let through, for its events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cleared {
    /// What decided, in order (`rule → judge → ask`).
    pub decided_by: RuleId,
    /// The judge's or the person's words, if either was asked.
    pub why: Option<String>,
    /// Who approved it, when a person was asked.
    pub approved_by: Option<String>,
    /// The judge's answer and latency, when it was asked: the request's final event says so.
    pub judge_call: Option<cordon_events::JudgeCall>,
    /// A learning run let it through: what the rule said instead.
    pub learned: Option<HttpAction>,
}

impl Cleared {
    /// `e` with the judge's call, when there was one ([`cordon_events::JUDGE_CALL`]).
    pub(crate) fn mark(&self, e: cordon_events::NewEvent) -> cordon_events::NewEvent {
        let e = match &self.learned {
            Some(was) => e.detail(cordon_events::LEARN, format!("would {was}")),
            None => e,
        };
        match &self.judge_call {
            Some(call) => e.judge_call(call),
            None => e,
        }
    }
}

/// Settles `d` for the request (see the module docs).
pub(crate) async fn check(
    screens: &Screens,
    ex: &Exchange<'_>,
    d: Decision,
    body: &ReadBody,
) -> Result<Cleared, Refused> {
    if d.action != HttpAction::Deny {
        scan_secrets(screens, ex, &body.scanned)
            .await
            .map_err(|why| {
                Refused::new(
                    StatusCode::FORBIDDEN,
                    format!("cordon: {} {} was refused: {why}", ex.method, ex.url),
                )
            })?;
    }
    let mut action = d.action;
    let mut verdict = Cleared {
        decided_by: d.rule.clone(),
        why: None,
        approved_by: None,
        judge_call: None,
        learned: None,
    };
    if action == HttpAction::Judge {
        action = judge(screens, ex, body, &d, &mut verdict).await;
    }
    if action == HttpAction::Ask
        && let Some(asker) = &screens.asker
    {
        let what = ex.label();
        let scope = format!(
            "{} {} {}:{}",
            verdict.decided_by,
            ex.method,
            ex.host(),
            ex.conn.port
        );
        let a = asker
            .ask(
                what,
                verdict.decided_by.to_string(),
                scope,
                Some(remembered_subject(screens, ex)),
            )
            .await;
        let who = asked(a.allow, a.timed_out, a.remember);
        action = if a.allow {
            HttpAction::Allow
        } else {
            HttpAction::Deny
        };
        verdict.why = Some(format!(
            "{}{who}",
            verdict.why.map(|j| format!("{j}; ")).unwrap_or_default()
        ));
        verdict.decided_by = verdict.decided_by.clone().then(Step::Ask);
        verdict.approved_by = Some(who);
    }
    if action == HttpAction::Allow {
        return Ok(verdict);
    }
    let why = refusal_reason(action, verdict.why.as_deref(), &d);
    let mut denied = ex.event(EvAction::Deny, 403, &why, &d.rule);
    if let Some(who) = &verdict.approved_by {
        denied = denied.detail("approved", who.clone());
    }
    // A question nobody could answer (no judge, no one to ask): refused as it stands.
    match action {
        HttpAction::Ask => denied = denied.detail("unanswered", "ask"),
        HttpAction::Judge => denied = denied.detail("unanswered", "judge"),
        _ => {}
    }
    if let Some(call) = &verdict.judge_call {
        denied = denied.judge_call(call);
    }
    (screens.emit)(denied);
    let mut text = format!(
        "cordon: {} {} was denied by rule \"{}\": {why}.\nThe same request by any other route (another tool, proxy or address) is denied too.\n",
        ex.method, ex.url, d.rule
    );
    if action == HttpAction::Deny && d.rule.is(Builtin::Default) {
        text.push_str(&format!(
            "To allow it, add to the policy:\n{}\n",
            allow_lines(ex)
        ));
    }
    text.push_str(&format!(
        "To see why: {}\n",
        cordon_policy::explain::hint_for_request(&ex.method, &ex.url)
    ));
    Err(Refused::new(StatusCode::FORBIDDEN, text))
}

/// The `[[http.rule]]` that would let this request (method, host, port, path) through.
fn allow_lines(ex: &Exchange<'_>) -> String {
    let q = cordon_policy::explain::toml_string;
    let host = ex.host();
    format!(
        "[[http.rule]]\nname = {}\nhost = {}\nport = {}\nmethods = [{}]\npath = {}\naction = \"allow\"",
        q(&format!("allow-{host}")),
        q(host),
        ex.conn.port,
        q(&ex.method),
        q(&ex.path)
    )
}

/// The request as an `[[http.rule]]` would match it, for a person who answers "allow
/// always": its method, host, port and path — a path segment that looks like a token (the
/// segments events show redacted) becomes `*`, so no secret goes on into a policy file.
fn remembered_subject(screens: &Screens, ex: &Exchange<'_>) -> cordon_approval::Subject {
    cordon_approval::Subject::Http {
        method: ex.method.clone(),
        host: ex.host().to_string(),
        port: ex.conn.port,
        path: remembered_path(&ex.path, |seg| screens.redact(seg) != seg),
    }
}

/// `path` with each segment `secret` says holds a token replaced by `*`.
fn remembered_path(path: &str, secret: impl Fn(&str) -> bool) -> String {
    path.split('/')
        .map(|seg| if secret(seg) { "*" } else { seg })
        .collect::<Vec<_>>()
        .join("/")
}

/// Asks the judge about the request; returns what its answer makes of it (allow, deny, or
/// `on_error`'s choice) and records its words in `verdict`.
async fn judge(
    screens: &Screens,
    ex: &Exchange<'_>,
    body: &ReadBody,
    d: &Decision,
    verdict: &mut Cleared,
) -> HttpAction {
    let Some(judge) = &screens.judge else {
        verdict.why = Some("no judge is configured ([judge] in the policy)".into());
        return HttpAction::Judge;
    };
    let max = judge.config().max_body_bytes;
    let scanned = &body.scanned;
    let shown = &scanned[..scanned.len().min(max)];
    // The judge reads the query as sent: it decides on what the server would get.
    let full_url = if ex.query.is_empty() {
        ex.url.clone()
    } else {
        format!("{}?{}", ex.url, ex.query)
    };
    let asked_at = std::time::Instant::now();
    let answer = judge
        .judge(&crate::judge::Question {
            method: &ex.method,
            url: &full_url,
            headers: &ex.headers,
            body: shown,
            body_truncated: body.truncated || scanned.len() > max,
            note: body.decode_note.as_deref(),
        })
        .await;
    verdict.decided_by = d.rule.clone().then(Step::Judge);
    verdict.judge_call = Some(cordon_events::JudgeCall {
        verdict: match &answer {
            crate::judge::Verdict::Allow(_) => "allow",
            crate::judge::Verdict::Deny(_) => "deny",
            crate::judge::Verdict::Failed(_) => "failed",
        }
        .to_string(),
        latency_ms: u64::try_from(asked_at.elapsed().as_millis()).unwrap_or(u64::MAX),
    });
    match answer {
        crate::judge::Verdict::Allow(r) => {
            verdict.why = Some(r);
            HttpAction::Allow
        }
        crate::judge::Verdict::Deny(r) => {
            verdict.why = Some(format!("the judge: {r}"));
            HttpAction::Deny
        }
        crate::judge::Verdict::Failed(e) => {
            verdict.why = Some(format!("the judge could not decide ({e})"));
            match judge.config().on_error {
                crate::judge::OnError::Deny => HttpAction::Deny,
                crate::judge::OnError::Ask => HttpAction::Ask,
            }
        }
    }
}

/// A person's answer, in words for the event.
fn asked(allow: bool, timed_out: bool, remember: bool) -> String {
    match (allow, timed_out, remember) {
        (_, true, _) => "nobody answered in time".to_string(),
        (true, _, true) => "a person allowed it for the rest of the session".into(),
        (true, _, false) => "a person allowed it".into(),
        (false, _, true) => "a person denied it for the rest of the session".into(),
        (false, _, false) => "a person denied it".into(),
    }
}

/// Why a request that is not allowed is refused: the judge's or person's words, the rule's
/// reason, or that a decision it needs is not available.
fn refusal_reason(action: HttpAction, why: Option<&str>, d: &Decision) -> String {
    match (action, why) {
        (_, Some(j)) if action != HttpAction::Ask => j.to_string(),
        (HttpAction::Deny, _) => d.reason.clone().unwrap_or_else(|| {
            if d.rule.is(Builtin::Default) {
                "no rule allows it".to_string()
            } else {
                "the rule denies it".to_string()
            }
        }),
        // Not available yet: refused, never waved through.
        _ => "it needs a decision (ask/judge) that is not available; refused".to_string(),
    }
}

/// The secret-scanning verdict for a request: `Err(why)` when it must not leave.
async fn scan_secrets(screens: &Screens, ex: &Exchange<'_>, body: &[u8]) -> Result<(), String> {
    let Some(dlp) = &screens.dlp else {
        return Ok(());
    };
    let host = ex.host();
    let target = &ex.target;
    let findings = dlp.scanner.scan_request(host, target, &ex.headers, body);
    if findings.is_empty() {
        return Ok(());
    }
    let (kinds, what) = describe_findings(&findings);
    let rule = format!("dlp:{}", kinds.join(","));
    let (allowed, outcome) = match dlp.action {
        cordon_policy::DlpAction::Log => (true, "forwarded ([dlp] action = \"log\")".to_string()),
        cordon_policy::DlpAction::Deny | cordon_policy::DlpAction::Off => {
            (false, "refused".to_string())
        }
        cordon_policy::DlpAction::Ask => match &screens.asker {
            Some(asker) => {
                let a = asker
                    .ask(
                        format!(
                            "{} carries a secret: {what}",
                            describe_target(host, &screens.redact(target))
                        ),
                        rule.clone(),
                        format!("{rule} {host}"),
                        // A secret in a request is not a thing a rule allows again.
                        None,
                    )
                    .await;
                let who = match (a.allow, a.timed_out) {
                    (_, true) => "nobody answered in time; refused",
                    (true, _) => "a person allowed it",
                    (false, _) => "a person denied it",
                };
                (a.allow, who.to_string())
            }
            None => (false, "nobody can be asked; refused".to_string()),
        },
    };
    let action = match (allowed, dlp.action) {
        (true, cordon_policy::DlpAction::Log) => EvAction::Log,
        (true, _) => EvAction::Allow,
        (false, _) => EvAction::Deny,
    };
    (screens.emit)(
        ex.credentials_event(
            action,
            &format!("carries a secret ({what}); {outcome}"),
            &rule,
        )
        .detail("kinds", kinds.join(",")),
    );
    if allowed {
        return Ok(());
    }
    Err(secret_refusal(&kinds, &what, host))
}

/// What the sandbox is told when a request carried a secret.
pub(crate) fn secret_refusal(kinds: &[&str], what: &str, host: &str) -> String {
    let quoted: Vec<String> = kinds.iter().map(|k| format!("\"{k}\"")).collect();
    format!(
        "it carries a secret ({what}). A secret may only go to its own service. If this one is meant for {host}, the user can add to the policy:\n[[dlp.allow]]\nkinds = [{}]\nhosts = [\"{host}\"]\n",
        quoted.join(", ")
    )
}

/// Kinds (sorted, once each) and a description of findings, for events and refusals.
pub(crate) fn describe_findings(findings: &[crate::dlp::Finding]) -> (Vec<&str>, String) {
    let mut kinds: Vec<&str> = findings.iter().map(|f| f.kind.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let what = findings
        .iter()
        .map(|f| format!("{} in the {} ({})", f.kind, f.place.name(), f.preview))
        .collect::<Vec<_>>()
        .join(", ");
    (kinds, what)
}
/// `host` and the target with its query values hidden, for a question to a person.
fn describe_target(host: &str, target: &str) -> String {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    format!("a request to {host}{path}{}", redact_query(query))
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
