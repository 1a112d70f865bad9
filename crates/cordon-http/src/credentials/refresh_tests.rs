use cordon_policy::{CredentialSlot, CredentialSource};

use super::*;
use crate::credentials::resolve;

const URL: (&str, u16, &str) = ("auth.example.test", 443, "/oauth/token");

fn login(dir: &std::path::Path, name: &str, field: &str, token: &str) -> CredentialPlan {
    CredentialPlan {
        programs: Default::default(),
        name: name.into(),
        env: None,
        source: CredentialSource::Json {
            file: dir.join("auth.json"),
            field: field.into(),
        },
        hosts: vec![if token == "refresh_token" {
            "auth.example.test".parse().unwrap()
        } else {
            "api.example.test".parse().unwrap()
        }],
        slot: CredentialSlot::Header {
            name: "authorization".into(),
            format: "Bearer {}".into(),
        },
        files: Vec::new(),
        inject: false,
        refresh: Some(RefreshPlan {
            url: "https://auth.example.test/oauth/token".into(),
            host: URL.0.into(),
            port: URL.1,
            path: URL.2.into(),
            token: token.into(),
            expires_ms: (token == "access_token").then(|| "tokens.expires_at".into()),
            refreshed_at: (token == "access_token").then(|| "last_refresh".into()),
        }),
        origin: "test".into(),
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    file: PathBuf,
    logins: Logins,
    start: Vec<WireCredential>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("auth.json");
    std::fs::write(
        &file,
        "{\n  \"tokens\": {\"access_token\": \"AT-1\", \"refresh_token\": \"RT-1\", \"account_id\": \"acct\"},\n  \"last_refresh\": \"2020-01-01T00:00:00Z\"\n}\n",
    )
    .unwrap();
    let key = PlaceholderKey::from_bytes([7; 32]);
    let plans = vec![
        login(dir.path(), "access", "tokens.access_token", "access_token"),
        login(
            dir.path(),
            "refresh",
            "tokens.refresh_token",
            "refresh_token",
        ),
    ];
    let start = plans.iter().map(|p| resolve(p, &key).unwrap()).collect();
    Fixture {
        _dir: dir,
        file,
        logins: Logins::new(key, &plans).unwrap(),
        start,
    }
}

fn ph<'a>(list: &'a [WireCredential], name: &str) -> &'a str {
    &list.iter().find(|c| c.name == name).unwrap().placeholder
}

#[test]
fn the_refresh_placeholder_becomes_the_real_token_for_its_endpoint_only() {
    let f = fixture();
    let rt = ph(&f.start, "refresh").to_string();
    assert!(
        f.logins
            .is_endpoint("auth.example.test", 443, "/oauth/token")
    );
    assert!(!f.logins.is_endpoint("auth.example.test", 443, "/other"));
    let json =
        format!(r#"{{"grant_type":"refresh_token","refresh_token":"{rt}","client_id":"c"}}"#);
    let (body, grant) = f.logins.request_body(&f.start, URL, true, json.as_bytes());
    assert_eq!(grant, "refresh_token");
    assert_eq!(
        String::from_utf8(body).unwrap(),
        r#"{"grant_type":"refresh_token","refresh_token":"RT-1","client_id":"c"}"#
    );
    let form = format!("grant_type=refresh_token&refresh_token={rt}&client_id=c");
    let (body, _) = f.logins.request_body(&f.start, URL, false, form.as_bytes());
    assert_eq!(
        body,
        b"grant_type=refresh_token&refresh_token=RT-1&client_id=c"
    );
    // Another field, another endpoint, the access token's placeholder: left as sent (the
    // wire's check refuses a placeholder there).
    let at = ph(&f.start, "access").to_string();
    for (to, sent) in [
        (URL, format!("refresh_token={at}")),
        (URL, format!("note={rt}")),
        (
            ("other.test", 443, "/oauth/token"),
            format!("refresh_token={rt}"),
        ),
    ] {
        let (body, _) = f.logins.request_body(&f.start, to, false, sent.as_bytes());
        assert_eq!(body, sent.as_bytes());
    }
}

#[test]
fn an_answer_rotates_the_host_file_and_the_wire_and_the_agent_gets_placeholders() {
    let f = fixture();
    let answer = br#"{"access_token":"AT-2","refresh_token":"RT-2","expires_in":3600,"token_type":"Bearer"}"#;
    let a = f.logins.answer(&f.start, URL, answer, None).unwrap();
    assert_eq!(a.written, vec![f.file.clone()]);
    assert!(a.failed.is_empty());
    let host: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&f.file).unwrap()).unwrap();
    assert_eq!(host["tokens"]["access_token"], "AT-2");
    assert_eq!(host["tokens"]["refresh_token"], "RT-2");
    assert_eq!(host["tokens"]["account_id"], "acct");
    assert!(host["tokens"]["expires_at"].as_u64().unwrap() > 1_700_000_000_000);
    assert!(host["last_refresh"].as_str().unwrap().starts_with("20"));
    assert_ne!(host["last_refresh"], "2020-01-01T00:00:00Z");

    let live = f.logins.live().unwrap();
    let seen: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    let new_at = ph(&live.credentials, "access").to_string();
    let new_rt = ph(&live.credentials, "refresh").to_string();
    assert_eq!(seen["access_token"], new_at.as_str());
    assert_eq!(seen["refresh_token"], new_rt.as_str());
    assert_eq!(seen["expires_in"], 3600);
    assert_ne!(new_rt, ph(&f.start, "refresh"));
    let text = String::from_utf8_lossy(&a.body);
    assert!(!text.contains("AT-2") && !text.contains("RT-2"), "{text}");

    // The next refresh sends the rotated real token, whichever placeholder the agent holds.
    for held in [new_rt.as_str(), ph(&f.start, "refresh")] {
        let (body, _) = f.logins.request_body(
            &live.credentials,
            URL,
            false,
            format!("grant_type=refresh_token&refresh_token={held}").as_bytes(),
        );
        assert_eq!(body, b"grant_type=refresh_token&refresh_token=RT-2");
    }
    for c in live.credentials.iter().filter(|c| c.name == "access") {
        assert_eq!(c.real, "AT-2");
    }
    // An answer without a new refresh token keeps the rotated one.
    let a = f
        .logins
        .answer(
            &live.credentials,
            URL,
            br#"{"access_token":"AT-3","expires_in":60}"#,
            None,
        )
        .unwrap();
    assert_eq!(a.renewed, vec!["access".to_string()]);
    let host: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&f.file).unwrap()).unwrap();
    assert_eq!(host["tokens"]["access_token"], "AT-3");
    assert_eq!(host["tokens"]["refresh_token"], "RT-2");
}

#[test]
fn a_first_login_is_held_and_answers_without_tokens_pass() {
    let dir = tempfile::tempdir().unwrap();
    let key = PlaceholderKey::from_bytes([9; 32]);
    let plans = vec![
        login(dir.path(), "access", "tokens.access_token", "access_token"),
        login(
            dir.path(),
            "refresh",
            "tokens.refresh_token",
            "refresh_token",
        ),
    ];
    let held = dir.path().join("held");
    let logins = Logins::new(key, &plans)
        .unwrap()
        .with_held_dir(held.clone());
    let code = br#"{"grant_type":"authorization_code","code":"c"}"#;
    let why = logins.hold_reason(&[], URL, true, code);
    assert!(
        why.as_deref().unwrap().contains("authorization_code"),
        "{why:?}"
    );
    assert!(
        logins
            .answer(&[], URL, br#"{"error":"invalid_grant"}"#, why.clone())
            .is_none()
    );
    assert!(logins.answer(&[], URL, b"not json", why.clone()).is_none());
    let a = logins
        .answer(
            &[],
            URL,
            br#"{"access_token":"AT-9","refresh_token":"RT-9","expires_in":10}"#,
            why,
        )
        .unwrap();
    let file = dir.path().join("auth.json");
    assert!(
        a.written.is_empty() && !file.exists(),
        "written to the host"
    );
    let copy = a.held[0].1.clone().unwrap();
    assert_eq!(a.held[0].0, file);
    assert!(copy.starts_with(&held));
    let meta = std::fs::metadata(&copy).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&copy).unwrap()).unwrap();
    assert_eq!(kept["tokens"]["access_token"], "AT-9");
    assert_eq!(kept["tokens"]["refresh_token"], "RT-9");
    // The tokens work for the session, by placeholders.
    let live = logins.live().unwrap();
    assert_eq!(live.credentials.len(), 2);
    assert!(!String::from_utf8_lossy(&a.body).contains("T-9"));
}

// Only a refresh carrying the host login's own refresh token (by its placeholder) may write
// the host's file; any other exchange is held, and once one was, the session's later ones
// are too, its own refreshes included.
#[test]
fn only_a_refresh_of_the_host_login_reaches_the_host_file() {
    let f = fixture();
    let rt = ph(&f.start, "refresh").to_string();
    let ours = format!("grant_type=refresh_token&refresh_token={rt}");
    assert_eq!(
        f.logins.hold_reason(&f.start, URL, false, ours.as_bytes()),
        None
    );
    let json = format!(r#"{{"grant_type":"refresh_token","refresh_token":"{rt}"}}"#);
    assert_eq!(
        f.logins.hold_reason(&f.start, URL, true, json.as_bytes()),
        None
    );
    for (json, body) in [
        (false, "grant_type=authorization_code&code=x".to_string()),
        (
            false,
            "grant_type=refresh_token&refresh_token=RT-of-another-account".into(),
        ),
        (false, format!("grant_type=password&refresh_token={rt}")),
        (true, r#"{"grant_type":"refresh_token"}"#.into()),
        (true, "not json".into()),
    ] {
        assert!(
            f.logins
                .hold_reason(&f.start, URL, json, body.as_bytes())
                .is_some(),
            "{body}"
        );
    }
    let before = std::fs::read_to_string(&f.file).unwrap();
    let why = f.logins.hold_reason(
        &f.start,
        URL,
        false,
        b"grant_type=authorization_code&code=x",
    );
    let a = f
        .logins
        .answer(
            &f.start,
            URL,
            br#"{"access_token":"AT-X","refresh_token":"RT-X"}"#,
            why,
        )
        .unwrap();
    assert!(a.written.is_empty());
    assert_eq!(a.held.len(), 1);
    // No held directory here: the tokens last the session only.
    assert!(a.held[0].1.is_err());
    assert_eq!(std::fs::read_to_string(&f.file).unwrap(), before);
    // The session's own refresh now (its placeholder stands for RT-X): held as well.
    let live = f.logins.live().unwrap();
    let rt = ph(&live.credentials, "refresh").to_string();
    let next = format!("grant_type=refresh_token&refresh_token={rt}");
    assert!(
        f.logins
            .hold_reason(&live.credentials, URL, false, next.as_bytes())
            .is_some()
    );
    let a = f
        .logins
        .answer(
            &live.credentials,
            URL,
            br#"{"access_token":"AT-Y","refresh_token":"RT-Y"}"#,
            None,
        )
        .unwrap();
    assert!(a.written.is_empty() && a.held_why.is_some());
    assert_eq!(std::fs::read_to_string(&f.file).unwrap(), before);
}

#[test]
fn form_values_decode_and_encode() {
    assert_eq!(form_decode("a%2Fb+c%zz%4"), "a/b c%zz%4");
    assert_eq!(crate::encoding::percent_encode(b"a/b c"), "a%2Fb%20c");
    assert_eq!(replace_all(b"xAAyAA", b"AA", b"B"), b"xByB");
}
