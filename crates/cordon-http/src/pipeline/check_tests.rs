use super::*;

fn decision(action: HttpAction, rule: &str, reason: Option<&str>) -> Decision {
    Decision {
        action,
        rule: rule.into(),
        reason: reason.map(str::to_string),
    }
}

#[test]
fn a_refusal_says_why_in_the_words_of_whoever_decided() {
    let d = decision(HttpAction::Deny, "default", None);
    assert_eq!(
        refusal_reason(HttpAction::Deny, None, &d),
        "no rule allows it"
    );
    let d = decision(HttpAction::Deny, "no-uploads", None);
    assert_eq!(
        refusal_reason(HttpAction::Deny, None, &d),
        "the rule denies it"
    );
    let d = decision(HttpAction::Deny, "no-secrets", Some("secrets stay home"));
    assert_eq!(
        refusal_reason(HttpAction::Deny, None, &d),
        "secrets stay home"
    );
    // The judge's words win over the rule's.
    let d = decision(HttpAction::Judge, "uploads", None);
    assert_eq!(
        refusal_reason(HttpAction::Deny, Some("the judge: not an upload"), &d),
        "the judge: not an upload"
    );
}

#[test]
fn a_decision_nobody_can_make_is_a_refusal() {
    let d = decision(HttpAction::Ask, "needs-a-person", None);
    assert_eq!(
        refusal_reason(HttpAction::Ask, None, &d),
        "it needs a decision (ask/judge) that is not available; refused"
    );
    // A judge that failed and sends it to a person nobody can be: refused, not its words.
    let d = decision(HttpAction::Judge, "uploads", None);
    assert_eq!(
        refusal_reason(
            HttpAction::Ask,
            Some("the judge could not decide (timeout)"),
            &d
        ),
        "it needs a decision (ask/judge) that is not available; refused"
    );
    assert_eq!(
        refusal_reason(
            HttpAction::Judge,
            Some("no judge is configured ([judge] in the policy)"),
            &d
        ),
        "no judge is configured ([judge] in the policy)"
    );
}

#[test]
fn answers_and_findings_in_words() {
    assert_eq!(
        asked(true, false, true),
        "a person allowed it for the rest of the session"
    );
    assert_eq!(asked(false, true, false), "nobody answered in time");
    assert_eq!(
        describe_target("h.test", "/p?key=sk-1&x"),
        "a request to h.test/p?key=…&…"
    );
    let r = secret_refusal(
        &["github-token"],
        "github-token in the body (ghp_…)",
        "h.test",
    );
    assert!(
        r.contains("[[dlp.allow]]\nkinds = [\"github-token\"]\nhosts = [\"h.test\"]"),
        "{r}"
    );
}

#[test]
fn a_remembered_path_keeps_no_token() {
    let secret = |seg: &str| crate::dlp::redact(seg) != seg;
    let token = format!("ghp_{}", "a1B2c3D4e5".repeat(4));
    assert_eq!(
        remembered_path(&format!("/bot/{token}/sendMessage"), secret),
        "/bot/*/sendMessage"
    );
    assert_eq!(remembered_path("/v1/items/42", secret), "/v1/items/42");
    assert_eq!(remembered_path("/", secret), "/");
}
