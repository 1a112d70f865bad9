use super::*;

/// Every form events have carried, as written: each parses to its typed form and prints
/// back byte for byte.
#[test]
fn todays_rule_texts_parse_typed_and_print_back() {
    let cases: Vec<(&str, RuleId)> = vec![
        (
            "network.default-deny",
            RuleId::builtin(Builtin::NetworkDefaultDeny),
        ),
        (
            "audit.unwritable",
            RuleId::builtin(Builtin::AuditUnwritable),
        ),
        (
            "built-in: fail closed",
            RuleId::builtin(Builtin::FailClosed),
        ),
        ("mcp", RuleId::builtin(Builtin::McpLegacy)),
        (
            "dns.rebinding:link-local",
            RuleId::qualified(Builtin::DnsRebinding, "link-local"),
        ),
        (
            "dlp:aws,github",
            RuleId::qualified(Builtin::Dlp, "aws,github"),
        ),
        (
            "network.allow github.com (built-in)",
            RuleId::NetworkAllow {
                host: "github.com".into(),
                origin: Origin::BuiltIn,
            },
        ),
        (
            "network.allow *.npmjs.org (/home/u/.config/cordon/policy.toml:12)",
            RuleId::NetworkAllow {
                host: "*.npmjs.org".into(),
                origin: Origin::Line {
                    file: "/home/u/.config/cordon/policy.toml".into(),
                    line: 12,
                },
            },
        ),
        (
            "network.allow_ips 10.1.2.0/24",
            RuleId::AllowIps("10.1.2.0/24".into()),
        ),
        (
            "builtin:ngrok.io",
            RuleId::Blocklist {
                entry: "ngrok.io".into(),
                built_in: true,
            },
        ),
        (
            "block:evil.test",
            RuleId::Blocklist {
                entry: "evil.test".into(),
                built_in: false,
            },
        ),
        (
            "r → judge → ask",
            RuleId::Http {
                name: "r".into(),
                then: vec![Step::Judge, Step::Ask],
            },
        ),
        ("built-in", RuleId::Policy(Origin::BuiltIn)),
        (
            "/p/cordon.toml:3",
            RuleId::Policy(Origin::Line {
                file: "/p/cordon.toml".into(),
                line: 3,
            }),
        ),
        (
            "built-in (deny \"sudo *\")",
            RuleId::Other("built-in (deny \"sudo *\")".into()),
        ),
        ("default", RuleId::builtin(Builtin::Default)),
        ("credentials.gh", RuleId::Other("credentials.gh".into())),
    ];
    for (text, typed) in cases {
        assert_eq!(RuleId::parse(text), typed, "{text}");
        assert_eq!(typed.to_string(), text);
    }
}

#[test]
fn texts_that_would_not_print_back_stay_whole() {
    for text in [
        "x.toml:007",
        "network.allow a (b) (c",
        "r → nobody",
        "dns.host-alias:x",
        "",
    ] {
        assert_eq!(RuleId::parse(text).to_string(), text);
    }
    assert_eq!(
        Origin::parse("f:01"),
        Origin::Derived("f:01".into()),
        "a line number Display would not write"
    );
}

#[test]
fn origins_round_trip_as_json_strings() {
    for (text, o) in [
        ("built-in", Origin::BuiltIn),
        ("project", Origin::Project),
        (
            "/a/b.toml:9",
            Origin::Line {
                file: "/a/b.toml".into(),
                line: 9,
            },
        ),
        (
            "credentials.gh: source",
            Origin::Derived("credentials.gh: source".into()),
        ),
    ] {
        let json = serde_json::to_string(&o).unwrap();
        assert_eq!(json, serde_json::to_string(text).unwrap());
        assert_eq!(serde_json::from_str::<Origin>(&json).unwrap(), o);
    }
    assert!(Origin::parse("/a/b.toml:9").is_policy_file_line());
    assert!(!Origin::parse("b.toml:9").is_policy_file_line());
}

#[test]
fn steps_are_added_and_taken_off() {
    let r = RuleId::from("allow-api").then(Step::Judge).then(Step::Ask);
    assert_eq!(r.to_string(), "allow-api → judge → ask");
    assert_eq!(r.steps(), [Step::Judge, Step::Ask]);
    assert_eq!(r.base(), RuleId::Other("allow-api".into()));
    let d = RuleId::builtin(Builtin::Default).then(Step::Ask);
    assert_eq!(d.to_string(), "default → ask");
    assert_eq!(
        RuleId::parse("default → ask").base(),
        RuleId::builtin(Builtin::Default)
    );
}

#[test]
fn explain_splits_the_origin_off_typed() {
    let r = RuleId::parse("network.allow github.com (built-in)");
    assert_eq!(
        r.split_origin(),
        ("network.allow github.com".into(), Some(&Origin::BuiltIn))
    );
    let d = RuleId::builtin(Builtin::NetworkDefaultDeny);
    assert_eq!(d.split_origin(), ("network.default-deny".into(), None));
}

/// A line written before the typed vocabulary reads, and its typed accessors answer.
#[test]
fn an_old_log_line_reads_typed() {
    let line = r#"{"time":"2026-11-30T08:30:12.345Z","session":"s","seq":4,"layer":"http","action":"deny","reason":"GET https://x.test/ → 403: the judge: no","rule":"r → judge","detail":{"learn":"would ask","host":"x.test"},"prev":"0","hash":"0"}"#;
    let e: crate::Event = serde_json::from_str(line).unwrap();
    let rule = e.rule_id().unwrap();
    assert_eq!(rule.steps(), [Step::Judge]);
    assert!(e.judged());
    assert_eq!(e.learned(), Some(crate::Learned::WouldAsk));
    assert_eq!(serde_json::to_value(&e).unwrap()["rule"], "r → judge");
    let odd = r#"{"time":"t","session":"s","seq":0,"layer":"exec","action":"allow","reason":"","detail":{"learn":"would frobnicate"},"prev":"0","hash":"0"}"#;
    let e: crate::Event = serde_json::from_str(odd).unwrap();
    assert_eq!(e.rule_id(), None);
    assert_eq!(e.learned(), Some(crate::Learned::WouldDeny));
}

#[test]
fn shortfall_and_learned_are_written_under_their_keys() {
    use crate::{Action, Layer, NewEvent};
    let e = NewEvent::new(Layer::Network, Action::Degraded, "x")
        .shortfall(crate::Shortfall::HostNetwork)
        .learned(crate::Learned::WouldDeny);
    assert_eq!(e.detail["shortfall"], "host_network");
    assert_eq!(e.detail["learn"], "would deny");
}

#[test]
fn builtin_names_are_unique() {
    for b in Builtin::ALL {
        assert_eq!(Builtin::from_name(b.as_str()), Some(b));
    }
}

#[test]
fn a_rule_with_steps_is_that_rule_whatever_its_name() {
    let r = RuleId::parse("dlp:uploads → judge");
    assert_eq!(r.steps(), [Step::Judge]);
    assert_eq!(r.to_string(), "dlp:uploads → judge");
    assert!(matches!(r, RuleId::Http { ref name, .. } if name == "dlp:uploads"));
    let r = RuleId::parse("block:x → ask");
    assert_eq!(r.steps(), [Step::Ask]);
}
