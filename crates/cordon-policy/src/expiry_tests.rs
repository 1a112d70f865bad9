use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;
use crate::file::parse_file_written;
use crate::plan::{HostPattern, HttpAction, HttpRule};
use crate::sections::{Context, Sections};

/// 2026-12-06T15:04:05Z, the clock of these tests.
const NOW: i64 = 1_796_569_445;

fn at(secs: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs.try_into().unwrap())
}

fn now() -> SystemTime {
    at(NOW)
}

#[test]
fn rfc3339_with_z_or_an_offset_with_or_without_seconds() {
    let t = |s: &str| Expiry::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    // As `cordon approve` writes it.
    assert_eq!(t("2026-12-06T15:04:05Z").unix(), NOW);
    assert_eq!(
        t("2026-12-06T15:04:05Z").to_string(),
        "2026-12-06T15:04:05Z"
    );
    assert_eq!(t("2026-12-06T15:04Z"), Expiry::from_unix(NOW - 5));
    assert_eq!(t("2026-12-06T16:04:05+01:00").unix(), NOW);
    assert_eq!(t("2026-12-06T09:34:05-05:30").unix(), NOW);
    assert_eq!(t("2026-12-06t15:04:05.999z").unix(), NOW);
    assert_eq!(t(" 2026-12-06 15:04:05Z ").unix(), NOW);
    assert_eq!(t("1970-01-01T00:00Z").unix(), 0);
    assert_eq!(t("1969-12-31T23:59:59Z").unix(), -1);
    assert_eq!(t("2028-02-29T00:00Z").to_string(), "2028-02-29T00:00:00Z");
    assert_eq!(t("0000-01-01T00:00Z").to_string(), "0000-01-01T00:00:00Z");
    assert_eq!(
        t("9999-12-31T23:59:59Z").to_string(),
        "9999-12-31T23:59:59Z"
    );
    // Every day of a few centuries writes back as it was read.
    for day in (-200_000..200_000).step_by(997) {
        let e = Expiry::from_unix(day * 86_400 + 3_723);
        assert_eq!(Expiry::parse(&e.to_string()), Ok(e), "{e}");
    }
    // In the plan's JSON: the same string.
    let json = serde_json::to_string(&t("2026-12-31T19:00+01:00")).unwrap();
    assert_eq!(json, "\"2026-12-31T18:00:00Z\"");
    assert_eq!(
        serde_json::from_str::<Expiry>(&json).unwrap(),
        t("2026-12-31T18:00Z")
    );
    assert!(serde_json::from_str::<Expiry>("\"tomorrow\"").is_err());
}

#[test]
fn bad_dates_say_what_is_wrong() {
    let e = |s: &str| Expiry::parse(s).unwrap_err();
    assert_eq!(e("2026-12-31T18:00"), TimeError::NoZone);
    assert_eq!(e("2026-12-31"), TimeError::Form);
    assert_eq!(e("tomorrow"), TimeError::Form);
    assert_eq!(e(""), TimeError::Form);
    assert_eq!(e("2026-12-31T18:00:00.Z"), TimeError::Form);
    assert_eq!(e("2026-12-31T18:00+0100"), TimeError::Form);
    assert_eq!(e("2026-12-31T18:00Zjunk"), TimeError::Form);
    assert_eq!(e("2026-1-31T18:00Z"), TimeError::Form);
    assert_eq!(e("２026-12-31T18:00Z"), TimeError::Form);
    assert_eq!(e("2026-13-01T00:00Z"), TimeError::Range("month"));
    assert_eq!(e("2026-00-01T00:00Z"), TimeError::Range("month"));
    assert_eq!(e("2027-02-29T00:00Z"), TimeError::Range("day"));
    assert_eq!(e("2026-04-31T00:00Z"), TimeError::Range("day"));
    assert_eq!(e("2026-12-31T24:00Z"), TimeError::Range("hour"));
    assert_eq!(e("2026-12-31T23:60Z"), TimeError::Range("minute"));
    assert_eq!(e("2026-12-31T23:59:61Z"), TimeError::Range("second"));
    assert_eq!(e("2026-12-31T18:00+24:00"), TimeError::Range("offset"));
    assert_eq!(e("0000-01-01T00:00+00:01"), TimeError::Years);
    assert_eq!(e("9999-12-31T23:59:59-00:01"), TimeError::Years);
}

#[test]
fn durations_count_from_the_start() {
    let two_hours = Expiry::after_text(now(), "2h").unwrap();
    assert_eq!(two_hours.unix(), NOW + 7200);
    assert_eq!(Expiry::after_text(now(), "90m").unwrap().unix(), NOW + 5400);
    assert_eq!(
        Expiry::after_text(now(), "1d").unwrap().unix(),
        NOW + 86_400
    );
    assert_eq!(
        Expiry::after_text(now(), " 1h 30m ").unwrap().unix(),
        NOW + 5400
    );
    // A part of a second of the duration counts as a whole one; of the start, not.
    let start = now() + Duration::from_millis(900);
    assert_eq!(Expiry::after_text(start, "1500ms").unwrap().unix(), NOW + 2);
    assert_eq!(Expiry::after_text(now(), "0s"), Err(TimeError::Zero));
    assert!(matches!(
        Expiry::after_text(now(), "2 fortnights"),
        Err(TimeError::Duration(_))
    ));
    assert!(matches!(
        Expiry::after_text(now(), ""),
        Err(TimeError::Duration(_))
    ));
    assert_eq!(Expiry::after_text(now(), "10000y"), Err(TimeError::Years));
    assert_eq!(Expiry::after(now(), Duration::MAX), Err(TimeError::Years));
}

#[test]
fn time_left_in_words() {
    let e = Expiry::from_unix(NOW);
    let left = |secs: i64| e.left(at(NOW - secs));
    assert_eq!(left(1), "1 s left");
    assert_eq!(left(59), "59 s left");
    assert_eq!(left(60), "1 min left");
    assert_eq!(left(3599), "59 min left");
    assert_eq!(left(3600), "1 h left");
    assert_eq!(left(3600 + 12 * 60 + 30), "1 h 12 min left");
    assert_eq!(left(86_400), "1 d left");
    assert_eq!(left(2 * 86_400 + 3 * 3600 + 59), "2 d 3 h left");
    assert_eq!(left(0), "expired just now");
    assert_eq!(left(-180), "expired 3 min ago");
    assert_eq!(left(-7200 - 60), "expired 2 h 1 min ago");
    // A part of a second of the clock does not count: the end is that second.
    assert_eq!(e.left(at(NOW - 1) + Duration::from_millis(999)), "1 s left");
    assert!(!e.has_passed(at(NOW - 1) + Duration::from_millis(999)));
    assert!(e.has_passed(now()));
    assert_eq!(e.ago(at(NOW + 180)), "3 min ago");
    assert_eq!(e.ago(now()), "just now");
    assert_eq!(e.ago(at(NOW - 60)), "1 min left");
    // Any moment in words, never a panic.
    for far in [Expiry::from_unix(i64::MIN), Expiry::from_unix(i64::MAX)] {
        assert!(!far.left(now()).is_empty() && !far.to_string().is_empty());
    }
}

fn ctx() -> Context<'static> {
    Context {
        home: Path::new("/home/u"),
        passwd_home: None,
        project: Path::new("/work/p"),
    }
}

/// `src` as `/f.toml`, last written at `written`.
fn load(src: &str, written: Option<SystemTime>) -> Result<Plan, String> {
    let c = ctx();
    let layer = parse_file_written(src, Some(Path::new("/f.toml")), 1, &c, written)
        .map_err(|e| e.to_string())?;
    let mut merged = Sections::default();
    merged.merge(&layer.base);
    Ok(merged.into_plan("/work/p".into(), "/home/u".into()))
}

const RULES: &str = r#"[[network.allow]]
host = "until.test"
ports = [443]
until = "2026-12-06T15:04:05Z"

[[network.allow]]
host = "for.test"
ports = [443, 8443]
for = "2h"

[[network.allow]]
host = "always.test"
ports = [443]

[[http.rule]]
name = "upload"
host = "api.test"
methods = ["POST"]
path = "/upload/*"
action = "allow"
for = "90m"

[[http.rule]]
host = "api.test"
action = "deny"
until = "2026-12-06T16:00+01:00"

[[exec.rule]]
pattern = "git push *"
action = "allow"
until = "2026-12-07T00:00Z"

[[exec.rule]]
pattern = "git push *"
action = "allow"

[[exec.rule]]
pattern = "sudo *"
action = "deny"
for = "1m"
"#;

#[test]
fn until_and_for_in_each_table_are_the_plans_ends() {
    let written = at(NOW - 3600);
    let plan = load(RULES, Some(written)).unwrap();
    let net: Vec<Option<i64>> = plan
        .network
        .allow
        .iter()
        .map(|r| r.expires.map(Expiry::unix))
        .collect();
    assert_eq!(net, [Some(NOW), Some(NOW - 3600 + 7200), None]);
    let http: Vec<Option<i64>> = plan
        .http
        .rules
        .iter()
        .map(|r| r.expires.map(Expiry::unix))
        .collect();
    assert_eq!(http, [Some(NOW - 3600 + 5400), Some(NOW - 4 * 60 - 5)]);
    let exec: Vec<Option<i64>> = plan
        .exec
        .rules
        .iter()
        .map(|r| r.expires.map(Expiry::unix))
        .collect();
    // The same pattern and action twice: the one that never ends is kept beside the other.
    assert_eq!(
        exec,
        [Some(NOW + 8 * 3600 + 55 * 60 + 55), None, Some(NOW - 3540)]
    );
    // `cordon check` writes the end, never the duration, with the time left at its clock.
    let text = plan.to_toml_at(now());
    assert!(
        text.contains("until = \"2026-12-06T15:04:05Z\" # expired just now"),
        "{text}"
    );
    assert!(
        text.contains("until = \"2026-12-06T16:04:05Z\" # 1 h left"),
        "{text}"
    );
    assert!(
        text.contains("until = \"2026-12-07T00:00:00Z\" # 8 h 55 min left"),
        "{text}"
    );
    assert!(!text.contains("for ="), "{text}");
    assert!(!plan.to_toml().contains(" left"));
    // And what it writes reads back as the same plan.
    let back = load(&plan.to_toml(), None).unwrap();
    assert_eq!(back.network.allow[1].expires, plan.network.allow[1].expires);
    assert_eq!(back.http.rules[0].expires, plan.http.rules[0].expires);
    assert_eq!(back.exec.rules[2].expires, plan.exec.rules[2].expires);
}

#[test]
fn expire_takes_out_exactly_what_has_ended() {
    let mut plan = load(RULES, Some(at(NOW - 3600))).unwrap();
    let before = plan.clone();
    // Nothing has ended a minute before the first end.
    assert_eq!(plan.clone().expire(at(NOW - 3541)), []);
    let gone = plan.expire(now());
    let origins: Vec<String> = gone.iter().map(|g| g.origin.to_string()).collect();
    let said: Vec<(GrantKind, bool, &str, &str)> = gone
        .iter()
        .zip(&origins)
        .map(|(g, o)| (g.kind, g.allowed, g.what.as_str(), o.as_str()))
        .collect();
    assert_eq!(
        said,
        [
            (
                GrantKind::NetworkAllow,
                true,
                "connections to until.test on port 443",
                "/f.toml:1"
            ),
            (
                GrantKind::HttpRule,
                false,
                "refusing requests to api.test",
                "/f.toml:23"
            ),
            (
                GrantKind::ExecRule,
                false,
                "refusing `sudo *`",
                "/f.toml:38"
            ),
        ]
    );
    assert_eq!(gone[0].ended, Expiry::from_unix(NOW));
    assert_eq!(
        gone[0].line(at(NOW + 180)),
        "expired grant ignored: connections to until.test on port 443 (network.allow, /f.toml:1, ended 2026-12-06T15:04:05Z, 3 min ago)"
    );
    assert_eq!(gone[2].noun(), "rule");
    let hosts: Vec<String> = plan
        .network
        .allow
        .iter()
        .map(|r| r.host.to_string())
        .collect();
    assert_eq!(hosts, ["for.test", "always.test"]);
    assert_eq!(plan.http.rules.len(), 1);
    assert_eq!(plan.exec.rules.len(), 2);
    // Nothing else changes; a second pass at the same time finds nothing.
    assert_eq!(plan.filesystem, before.filesystem);
    assert_eq!(plan.expire(now()), []);
    // A day later only the rules that never end are left.
    let gone = plan.expire(at(NOW + 86_400));
    let kinds: Vec<GrantKind> = gone.iter().map(|g| g.kind).collect();
    assert_eq!(
        kinds,
        [
            GrantKind::NetworkAllow,
            GrantKind::HttpRule,
            GrantKind::ExecRule
        ]
    );
    assert_eq!(gone[0].what, "connections to for.test on ports 443, 8443");
    assert_eq!(gone[1].what, "`upload`: POST requests to api.test/upload/*");
    assert_eq!(gone[2].what, "running `git push *`");
    assert!(plan.network.allow.iter().all(|r| r.expires.is_none()));
    assert!(plan.exec.rules.iter().all(|r| r.expires.is_none()));
    assert!(plan.http.rules.is_empty());
}

#[test]
fn http_rules_in_words() {
    let e = Expiry::from_unix(NOW);
    let host: HostPattern = "*.api.test".parse().unwrap();
    let r = HttpRule {
        port: Some(8443),
        methods: vec!["GET".into(), "HEAD".into()],
        path: Some("/v1/*".into()),
        origin: "/f.toml:3".into(),
        ..HttpRule::new(HttpRule::unnamed("/f.toml:3"), host, HttpAction::Ask)
    };
    let g = ExpiredGrant::http(&r, e);
    assert_eq!(
        g.what,
        "asking before GET, HEAD requests to *.api.test:8443/v1/*"
    );
    assert!(!g.allowed);
}

#[test]
fn both_ends_on_one_rule_is_an_error_naming_the_place_and_the_fix() {
    for table in [
        "[[network.allow]]\nhost = \"a.test\"\nports = [443]\n",
        "[[http.rule]]\nhost = \"a.test\"\naction = \"allow\"\n",
        "[[exec.rule]]\npattern = \"make *\"\naction = \"allow\"\n",
    ] {
        let src = format!("{table}until = \"2026-12-31T18:00Z\"\nfor = \"2h\"\n");
        let e = load(&src, Some(now())).unwrap_err();
        assert!(e.contains("has both `until` and `for`"), "{e}");
        assert!(e.contains("/f.toml:5:7"), "{e}");
        assert!(e.contains("keep `until`"), "{e}");
    }
}

#[test]
fn bad_ends_are_located_errors_with_the_fix() {
    let rule = "[[network.allow]]\nhost = \"a.test\"\nports = [443]\n";
    let err = |line: &str| load(&format!("{rule}{line}\n"), Some(now())).unwrap_err();
    let e = err("until = \"2026-12-31T18:00\"");
    assert!(
        e.contains(
            "invalid `until` \"2026-12-31T18:00\" in [[network.allow]]: it has no time zone"
        ),
        "{e}"
    );
    assert!(e.contains("/f.toml:4:9"), "{e}");
    assert!(e.contains("add `Z` for UTC"), "{e}");
    let e = err("until = \"2026-02-30T18:00Z\"");
    assert!(e.contains("the day is out of range"), "{e}");
    assert!(e.contains("until = \"2026-12-31T18:00Z\""), "{e}");
    let e = err("until = \"next friday\"");
    assert!(e.contains("not a date and time"), "{e}");
    let e = err("for = \"2 fortnights\"");
    assert!(
        e.contains("invalid `for` \"2 fortnights\" in [[network.allow]]"),
        "{e}"
    );
    assert!(e.contains("/f.toml:4:7"), "{e}");
    assert!(e.contains("for = \"90m\""), "{e}");
    let e = err("for = \"0m\"");
    assert!(e.contains("lasts no time"), "{e}");
    // A TOML date-time, unquoted: the checker says to quote it.
    let e = err("until = 2026-12-31T18:00:00Z");
    assert!(e.contains("must be a string, found a date-time"), "{e}");
    assert!(
        e.contains("quote it: until = \"2026-12-31T18:00:00Z\""),
        "{e}"
    );
    let e = err("for = 2");
    assert!(e.contains("for = \"2h\""), "{e}");
    // Without the file's time (no file), `for` cannot count from it.
    let e = load(&format!("{rule}for = \"2h\"\n"), None).unwrap_err();
    assert!(e.contains("not known here"), "{e}");
    assert!(e.contains("until = \"2026-12-31T18:00Z\""), "{e}");
}
