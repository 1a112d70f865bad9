use super::*;
use crate::pipeline::tests::exchange;

fn rule(name: &str, path: &str, action: Action) -> Rule {
    Rule {
        path: Some(path.into()),
        ..Rule::new(name, "api.example.test".parse().unwrap(), action)
    }
}

#[test]
fn the_first_matching_rule_decides_on_the_normalized_path() {
    let rules = vec![
        rule("no-secrets", "/secret*", Action::Deny),
        rule("reads", "*", Action::Allow),
    ];
    // admit normalized `/x/../secret` to this.
    let d = decide(
        &rules,
        Action::Deny,
        &exchange("api.example.test", "GET", "/secret", ""),
    );
    assert_eq!((d.action, d.rule.as_str()), (Action::Deny, "no-secrets"));
    let d = decide(
        &rules,
        Action::Deny,
        &exchange("api.example.test", "GET", "/ok", ""),
    );
    assert_eq!((d.action, d.rule.as_str()), (Action::Allow, "reads"));
}

#[test]
fn an_unmatched_request_gets_the_default() {
    let d = decide(&[], Action::Ask, &exchange("other.test", "POST", "/", ""));
    assert_eq!((d.action, d.rule.as_str()), (Action::Ask, "default"));
}

#[test]
fn headers_and_length_reach_the_rules() {
    let r = Rule {
        max_body: Some(10),
        ..rule("small", "*", Action::Allow)
    };
    let mut ex = exchange("api.example.test", "POST", "/", "");
    ex.body_len = Some(100);
    assert_eq!(
        decide(std::slice::from_ref(&r), Action::Deny, &ex).rule,
        "default"
    );
    ex.body_len = Some(5);
    assert_eq!(decide(&[r], Action::Deny, &ex).rule, "small");
}
