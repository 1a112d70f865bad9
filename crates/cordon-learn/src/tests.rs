//! Unit tests: events built by hand, plans from the built-in policy plus a few rules.

use std::path::Path;

use cordon_events::{Action, Event, Layer};
use cordon_policy::{Bare, ExecAction, ExecRule, HostPattern, HostRule, Plan};
use serde_json::{Map, Value, json};

use crate::{Classified, Outcome, Replayer, Said, Subject, classify, suggest};

/// How events name the plan's two rules.
const KEPT: &str = "network.allow kept.test (p.toml:1)";
const TOUCH: &str = "p.toml:4 (deny \"touch *\")";

fn plan() -> Plan {
    let opts = cordon_policy::LoadOptions::new("/nonexistent", "/nonexistent", "/nonexistent");
    let mut p = cordon_policy::load(&opts).unwrap().plan;
    p.network.allow.push(HostRule {
        host: HostPattern::name("kept.test", Bare::Exact).unwrap(),
        ports: vec![8080],
        origin: "p.toml:1".into(),
        expires: None,
        programs: Default::default(),
    });
    p.exec.rules.push(ExecRule {
        pattern: "touch *".into(),
        action: ExecAction::Deny,
        origin: "p.toml:4".into(),
        expires: None,
    });
    p
}

fn ev(seq: u64, layer: Layer, action: Action, rule: Option<&str>, detail: Value) -> Event {
    let detail: Map<String, Value> = match detail {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    Event {
        time: "2026-12-06T12:00:00.000Z".into(),
        session: "S".into(),
        seq,
        layer,
        action,
        reason: String::new(),
        rule: rule.map(str::to_string),
        detail,
        prev: String::new(),
        hash: String::new(),
    }
}

fn flow(seq: u64, action: Action, host: &str, port: u16, rule: &str) -> Event {
    let d = json!({"host": host, "port": port, "via": "tun", "proto": "tcp"});
    ev(seq, Layer::Network, action, Some(rule), d)
}

fn exec(seq: u64, action: Action, program: &str, args: &[&str], rule: Option<&str>) -> Event {
    let line = std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let d = json!({"program": program, "resolved": program, "args": args, "command": line});
    ev(seq, Layer::Exec, action, rule, d)
}

fn replay(plan: &Plan, events: &[Event]) -> crate::Report {
    let paths = |_: &str| Some((false, "built-in".to_string()));
    let mut r = Replayer::new(plan, &paths).unwrap();
    for e in events {
        r.event(e);
    }
    r.finish()
}

#[test]
fn a_session_replayed_under_its_own_policy_is_unchanged() {
    let p = plan();
    let events = [
        flow(1, Action::Allow, "kept.test", 8080, KEPT),
        flow(2, Action::Deny, "other.test", 8080, "network.default-deny"),
        exec(3, Action::Deny, "touch", &["x"], Some(TOUCH)),
        exec(4, Action::Allow, "ls", &[], None),
        ev(
            5,
            Layer::Dns,
            Action::Allow,
            None,
            json!({"name": "kept.test"}),
        ),
    ];
    let r = replay(&p, &events);
    assert_eq!(
        (r.decisions, r.unchanged, r.rule_changed),
        (5, 5, 0),
        "{r:#?}"
    );
    assert!(r.changes.is_empty() && !r.newly_denied());
}

#[test]
fn removing_a_host_and_changing_an_exec_rule_flips_exactly_those() {
    let before = plan();
    let events = [
        flow(1, Action::Allow, "kept.test", 8080, KEPT),
        exec(2, Action::Deny, "touch", &["x"], Some(TOUCH)),
        exec(3, Action::Allow, "cat", &["f"], None),
    ];
    let mut after = before.clone();
    after
        .network
        .allow
        .retain(|r| r.origin.to_string() != "p.toml:1");
    after
        .exec
        .rules
        .retain(|r| r.origin.to_string() != "p.toml:4");
    after.exec.rules.push(ExecRule {
        pattern: "cat *".into(),
        action: ExecAction::Ask,
        origin: "q.toml:1".into(),
        expires: None,
    });
    let r = replay(&after, &events);
    let got: Vec<(u64, Outcome, Outcome)> =
        r.changes.iter().map(|c| (c.seq, c.was, c.now)).collect();
    assert_eq!(
        got,
        [
            (1, Outcome::Allowed, Outcome::Denied),
            (2, Outcome::Denied, Outcome::Allowed),
            (3, Outcome::Allowed, Outcome::Ask),
        ]
    );
    assert!(r.newly_denied());
    assert_eq!(r.by_layer["exec"].now_ask, 1);
}

#[test]
fn a_persons_answer_stands_when_the_same_question_is_asked_again() {
    let mut p = plan();
    p.exec.rules.insert(
        0,
        ExecRule {
            pattern: "git push *".into(),
            action: ExecAction::Ask,
            origin: "p.toml:9".into(),
            expires: None,
        },
    );
    let mut answered = exec(
        1,
        Action::Allow,
        "git",
        &["push"],
        Some("p.toml:9 (ask \"git push *\")"),
    );
    answered
        .detail
        .insert("approval".into(), "person, once".into());
    let r = replay(&p, &[answered.clone()]);
    assert!(r.changes.is_empty(), "{r:#?}");
    // Under a policy that denies it outright, the answer no longer counts.
    p.exec.rules[0].action = ExecAction::Deny;
    p.exec.rules[0].pattern = "git push*".into();
    let r = replay(&p, &[answered]);
    assert_eq!(r.changes.len(), 1);
    assert_eq!(
        (r.changes[0].was, r.changes[0].now),
        (Outcome::Allowed, Outcome::Denied)
    );
}

#[test]
fn what_a_learning_run_let_through_is_what_the_policy_would_have_done() {
    let mut e = flow(1, Action::Allow, "new.test", 443, "network.default-deny");
    e.detail
        .insert(cordon_events::LEARN.into(), "would deny".into());
    match classify(&e) {
        Classified::Decision(r) => {
            assert_eq!(r.said, Said::Deny);
            assert!(r.learned);
            assert!(matches!(r.subject, Subject::Flow { port: 443, .. }));
        }
        other => panic!("{other:?}"),
    }
    assert!(replay(&plan(), &[e]).changes.is_empty());
}

#[test]
fn run_time_refusals_are_kept_not_re_decided() {
    let e = flow(
        1,
        Action::Deny,
        "kept.test",
        8080,
        cordon_events::AUDIT_UNWRITABLE,
    );
    assert_eq!(classify(&e), Classified::Kept(Layer::Network));
    let dlp = ev(
        2,
        Layer::Credentials,
        Action::Deny,
        Some("dlp:aws"),
        json!({}),
    );
    assert_eq!(classify(&dlp), Classified::Kept(Layer::Credentials));
    let mcp = ev(
        3,
        Layer::Http,
        Action::Deny,
        Some("mcp.unreadable"),
        json!({"method": "POST", "host": "kept.test", "port": 443, "path": "/mcp"}),
    );
    assert_eq!(classify(&mcp), Classified::Kept(Layer::Http));
    let r = replay(&plan(), &[e, dlp, mcp]);
    assert_eq!((r.decisions, r.kept, r.changes.len()), (3, 3, 0));
}

#[test]
fn suggestions_are_exact_with_wildcards_only_for_siblings_and_rules_for_forges() {
    let mut events = vec![ev(
        0,
        Layer::Session,
        Action::Start,
        None,
        json!({"learn": true}),
    )];
    let mut learned = |seq: u64, host: &str, port: u16| {
        let mut e = flow(seq, Action::Allow, host, port, "network.default-deny");
        e.detail
            .insert(cordon_events::LEARN.into(), "would deny".into());
        events.push(e);
    };
    learned(1, "registry.example.org", 8443);
    learned(2, "registry.example.org", 8443);
    for (i, h) in [
        "a.cdn.example.net",
        "b.cdn.example.net",
        "c.cdn.example.net",
    ]
    .iter()
    .enumerate()
    {
        learned(3 + i as u64, h, 443);
    }
    learned(7, "one.pages.dev", 443);
    learned(8, "two.pages.dev", 443);
    learned(9, "three.pages.dev", 443);
    let mut forge = ev(
        10,
        Layer::Http,
        Action::Allow,
        Some("default"),
        json!({"host": "github.com", "port": 443, "method": "GET", "path": "/org/repo.git/info/refs"}),
    );
    forge
        .detail
        .insert(cordon_events::LEARN.into(), "would deny".into());
    events.push(forge);
    // Denied in an ordinary run by the blocklist: not something to allow.
    events.push(flow(
        11,
        Action::Deny,
        "webhook.site",
        443,
        "builtin:webhook.site",
    ));
    let s = suggest(events.iter(), Path::new("/home/u"));
    let t = &s.text;
    assert!(
        t.contains("host = \"registry.example.org\"\nports = [8443]"),
        "{t}"
    );
    assert!(
        t.contains("# 2 connection or requests") || t.contains("# 2 connection or request"),
        "{t}"
    );
    assert!(t.contains("host = \"*.cdn.example.net\""), "{t}");
    assert!(
        !t.contains("*.pages.dev") && t.contains("host = \"one.pages.dev\""),
        "{t}"
    );
    assert!(
        t.contains("path = \"/org/repo.git/*\"") && !t.contains("host = \"github.com\"\nports"),
        "{t}"
    );
    assert!(!t.contains("webhook.site"), "{t}");
    let parsed: toml::Value = toml::from_str(t).expect("the suggestion is TOML");
    assert!(parsed.get("network").is_some() && parsed.get("http").is_some());
}

#[test]
fn hostile_names_are_escaped() {
    let mut e = flow(1, Action::Allow, "x\"\n[evil]", 443, "network.default-deny");
    e.detail
        .insert(cordon_events::LEARN.into(), "would deny".into());
    let s = suggest([&e], Path::new("/home/u"));
    let parsed: toml::Value = toml::from_str(&s.text).expect("still TOML");
    assert!(parsed.get("evil").is_none(), "{}", s.text);
}

fn learned(mut e: Event, what: &str) -> Event {
    e.detail.insert(cordon_events::LEARN.into(), what.into());
    e
}

#[test]
fn only_what_was_let_through_is_suggested() {
    let mut events = vec![
        // Refused after all (its name resolved to a private address).
        learned(
            flow(
                1,
                Action::Deny,
                "meta.attacker.example",
                80,
                "dns.rebinding:link-local",
            ),
            "would deny",
        ),
        learned(
            flow(
                2,
                Action::Allow,
                "host.cordon.internal",
                6379,
                "network.default-deny",
            ),
            "would deny",
        ),
        // A user's rule denied it: an allowance would come after that rule.
        learned(
            ev(
                3,
                Layer::Http,
                Action::Allow,
                Some("no-posts"),
                json!({"host": "api.example.org", "port": 443, "method": "POST", "path": "/v1/x/y"}),
            ),
            "would deny",
        ),
        learned(
            exec(
                4,
                Action::Allow,
                "gh",
                &["auth", "ghp_… (40 chars)"],
                Some(TOUCH),
            ),
            "would deny",
        ),
        learned(
            exec(5, Action::Allow, "rm", &["*.tmp"], Some(TOUCH)),
            "would deny",
        ),
    ];
    // Three upload hosts seen as connections: never one wildcard.
    for (i, h) in ["api.github.com", "uploads.github.com", "gist.github.com"]
        .iter()
        .enumerate()
    {
        events.push(learned(
            flow(6 + i as u64, Action::Allow, h, 22, "network.default-deny"),
            "would deny",
        ));
    }
    let t = suggest(events.iter(), Path::new("/home/u")).text;
    assert!(!t.contains("meta.attacker.example"), "{t}");
    assert!(
        t.contains("FLAGGED: this is your host's own loopback"),
        "{t}"
    );
    assert!(
        t.contains("[[http.rule]]")
            && t.contains("this must come before it")
            && t.contains("path = \"/v1/x/*\""),
        "{t}"
    );
    assert!(
        t.contains("pattern = \"gh auth *\"") && t.contains("held a secret"),
        "{t}"
    );
    assert!(!t.contains("ghp_"), "{t}");
    assert!(
        t.contains("pattern = \"rm *.tmp\"") && t.contains("reads as a wildcard"),
        "{t}"
    );
    assert!(!t.contains("*.github.com"), "{t}");
    let parsed: toml::Value = toml::from_str(&t).expect("TOML");
    assert!(parsed.get("exec").is_some());
}

#[test]
fn questions_nobody_could_answer_and_rules_that_now_ask() {
    let mut p = plan();
    p.http.rules.insert(
        0,
        cordon_policy::HttpRule::new(
            "uploads",
            "up.test".parse().unwrap(),
            cordon_policy::HttpAction::Deny,
        ),
    );
    let req = |seq, action, extra: Option<(&str, &str)>| {
        let mut e = ev(
            seq,
            Layer::Http,
            action,
            Some("uploads"),
            json!({"host": "up.test", "port": 443, "method": "POST", "path": "/f"}),
        );
        if let Some((k, v)) = extra {
            e.detail.insert(k.into(), v.into());
        }
        e
    };
    let denied = req(1, Action::Deny, None);
    assert!(replay(&p, std::slice::from_ref(&denied)).changes.is_empty());
    // The rule now asks: a question the log holds no answer for.
    p.http.rules[0].action = cordon_policy::HttpAction::Ask;
    let r = replay(&p, &[denied]);
    assert_eq!(
        (r.changes.len(), r.by_layer["http"].now_ask),
        (1, 1),
        "{r:#?}"
    );
    // Refused because nobody could be asked: the same refusal under the same rule.
    let unanswered = req(2, Action::Deny, Some(("unanswered", "ask")));
    assert!(replay(&p, &[unanswered]).changes.is_empty());
    // A DNS refusal of what a query was (a zone transfer): kept, not re-decided.
    let axfr = ev(
        3,
        Layer::Dns,
        Action::Deny,
        None,
        json!({"name": "example.org"}),
    );
    assert_eq!(classify(&axfr), Classified::Kept(Layer::Dns));
}

#[test]
fn masks_made_from_the_hosts_state_are_kept() {
    let mask = |rule: &str| {
        ev(
            1,
            Layer::Filesystem,
            Action::Deny,
            Some(rule),
            json!({"path": "/h/.x"}),
        )
    };
    for rule in [
        "the host's ssh agent (SSH_AUTH_SOCK)",
        "built-in: cordon's own state",
    ] {
        assert_eq!(
            classify(&mask(rule)),
            Classified::Kept(Layer::Filesystem),
            "{rule}"
        );
    }
    for rule in [
        "built-in",
        "/home/u/.config/cordon/cordon.toml:12",
        "filesystem.home",
    ] {
        assert!(
            matches!(classify(&mask(rule)), Classified::Decision(_)),
            "{rule}"
        );
    }
}
