use super::*;
use crate::pipeline::tests::exchange;

fn rule(name: &str, path: &str, action: HttpAction) -> HttpRule {
    HttpRule {
        path: Some(path.into()),
        ..HttpRule::new(name, "api.example.test".parse().unwrap(), action)
    }
}

#[test]
fn the_first_matching_rule_decides_on_the_normalized_path() {
    let rules = vec![
        rule("no-secrets", "/secret*", HttpAction::Deny),
        rule("reads", "*", HttpAction::Allow),
    ];
    // admit normalized `/x/../secret` to this.
    let d = decide(
        &rules,
        HttpAction::Deny,
        &exchange("api.example.test", "GET", "/secret", ""),
    );
    assert_eq!(
        (d.action, d.rule.to_string().as_str()),
        (HttpAction::Deny, "no-secrets")
    );
    let d = decide(
        &rules,
        HttpAction::Deny,
        &exchange("api.example.test", "GET", "/ok", ""),
    );
    assert_eq!(
        (d.action, d.rule.to_string().as_str()),
        (HttpAction::Allow, "reads")
    );
}

#[test]
fn an_unmatched_request_gets_the_default() {
    let d = decide(
        &[],
        HttpAction::Ask,
        &exchange("other.test", "POST", "/", ""),
    );
    assert_eq!(
        (d.action, d.rule.to_string().as_str()),
        (HttpAction::Ask, "default")
    );
}

#[test]
fn headers_and_length_reach_the_rules() {
    let r = HttpRule {
        max_body: Some(10),
        ..rule("small", "*", HttpAction::Allow)
    };
    let mut ex = exchange("api.example.test", "POST", "/", "");
    ex.body_len = Some(100);
    assert_eq!(
        decide(std::slice::from_ref(&r), HttpAction::Deny, &ex).rule,
        "default"
    );
    ex.body_len = Some(5);
    assert_eq!(decide(&[r], HttpAction::Deny, &ex).rule, "small");
}
