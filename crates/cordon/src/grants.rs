//! Rules that end (`until`, `for`), as `run`, `check` and `explain` show them. The plan is
//! judged once, when a session starts: a rule that ends while it runs holds until it exits.

use std::io::Write;
use std::time::SystemTime;

use cordon_events::{Action, Layer, NewEvent, RuleId};
use cordon_policy::{ExpiredGrant, Expiry, Plan};

/// Says on stderr each rule that had ended by `now` (taken out of the session's plan by
/// `session_plan::resolve`).
pub(crate) fn say(gone: &[ExpiredGrant], now: SystemTime) {
    for g in gone {
        // A closed stderr must not stop the run (eprintln! would panic).
        let _ = writeln!(std::io::stderr(), "cordon: {}", g.line(now));
    }
}

/// One audit event per rule [`expire`] took out, with its origin as the rule.
pub(crate) fn log(gone: &[ExpiredGrant], emit: &dyn Fn(NewEvent)) {
    for g in gone {
        emit(
            NewEvent::new(
                Layer::Session,
                Action::Log,
                format!("expired {} ignored: {}", g.noun(), g.what),
            )
            .rule(g.origin.to_string())
            .detail("kind", g.kind.to_string())
            .detail("what", g.what.clone())
            .detail("ended", g.ended.to_string()),
        );
    }
}

/// When the rule a layer names by `label` ends: a `[[network.allow]]` by its label (the
/// gateway's and the HTTP layer's), an `[[http.rule]]` by its name.
pub(crate) fn of_label(plan: &Plan, label: &RuleId) -> Option<Expiry> {
    let net = plan.network.allow.iter().find(|r| r.label() == *label);
    match net {
        Some(r) => r.expires,
        None => {
            let mut http = plan.http.rules.iter();
            http.find(|r| RuleId::parse(&r.name) == *label)?.expires
        }
    }
}

/// `explain`'s note on a deciding rule that ends at `end`. `inside`: the plan is a running
/// session's, judged when it started, so an end since then has not taken effect.
pub(crate) fn note(end: Expiry, allows: bool, now: SystemTime, inside: bool) -> String {
    let what = if allows { "grant" } else { "rule" };
    match (end.has_passed(now), inside) {
        (false, false) => format!(
            "this {what} ends {end} ({}); a session started before then keeps it until it exits",
            end.left(now)
        ),
        (false, true) => format!(
            "this {what} ends {end} ({}); this session keeps it until it exits",
            end.left(now)
        ),
        (true, _) => format!(
            "this {what} ended {end} ({}), after this session started: it holds until the session exits, and a new session starts without it",
            end.ago(now)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn notes_say_the_time_left_and_what_a_session_keeps() {
        let end = Expiry::from_unix(1_800_000_000);
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        let n = note(end, true, at(1_800_000_000 - 4320), false);
        assert_eq!(
            n,
            "this grant ends 2027-01-15T08:00:00Z (1 h 12 min left); a session started before then keeps it until it exits"
        );
        let n = note(end, false, at(1_800_000_000 - 30), true);
        assert!(
            n.starts_with("this rule ends") && n.contains("30 s left"),
            "{n}"
        );
        let n = note(end, true, at(1_800_000_180), true);
        assert!(n.contains("ended 2027-01-15T08:00:00Z (3 min ago)"), "{n}");
    }
}
