use cordon_policy::{CredentialSlot, CredentialSource};

use super::*;
use crate::credentials::resolve;

const URL: (&str, u16, &str) = ("auth.example.test", 443, "/oauth/token");

fn login(dir: &std::path::Path, name: &str, field: &str, token: &str) -> CredentialPlan {
    CredentialPlan {
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
    let a = f.logins.answer(&f.start, URL, answer).unwrap();
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
        )
        .unwrap();
    assert_eq!(a.renewed, vec!["access".to_string()]);
    let host: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&f.file).unwrap()).unwrap();
    assert_eq!(host["tokens"]["access_token"], "AT-3");
    assert_eq!(host["tokens"]["refresh_token"], "RT-2");
}

#[test]
fn a_first_login_makes_the_file_and_answers_without_tokens_pass() {
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
    let logins = Logins::new(key, &plans).unwrap();
    assert!(
        logins
            .answer(&[], URL, br#"{"error":"invalid_grant"}"#)
            .is_none()
    );
    assert!(logins.answer(&[], URL, b"not json").is_none());
    let a = logins
        .answer(
            &[],
            URL,
            br#"{"access_token":"AT-9","refresh_token":"RT-9","expires_in":10}"#,
        )
        .unwrap();
    let file = dir.path().join("auth.json");
    assert_eq!(a.written, vec![file.clone()]);
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    let host: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(host["tokens"]["access_token"], "AT-9");
    let live = logins.live().unwrap();
    assert_eq!(live.credentials.len(), 2);
    assert!(!String::from_utf8_lossy(&a.body).contains("T-9"));
}

#[test]
fn form_values_decode_and_encode() {
    assert_eq!(form_decode("a%2Fb+c%zz%4"), "a/b c%zz%4");
    assert_eq!(form_encode("a/b c"), "a%2Fb%20c");
    assert_eq!(replace_all(b"xAAyAA", b"AA", b"B"), b"xByB");
}
