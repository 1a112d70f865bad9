use std::os::unix::fs::{MetadataExt, PermissionsExt};

use serde_json::json;

use super::*;

fn up(pairs: &[(&str, serde_json::Value)]) -> Vec<(String, serde_json::Value)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

const CLAUDE: &str = r#"{
  "claudeAiOauth": {
    "accessToken": "sk-ant-oat01-old",
    "refreshToken": "sk-ant-ort01-old",
    "expiresAt": 1700000000000,
    "scopes": ["user:inference", "user:profile"],
    "subscriptionType": "max"
  },
  "mcpOAuth": {"srv": {"accessToken": "keep-me \" }"}}
}
"#;

#[test]
fn only_the_named_values_change_every_other_byte_stays() {
    let out = set_field(
        CLAUDE,
        "claudeAiOauth.refreshToken",
        &json!("sk-ant-ort01-new"),
    )
    .unwrap();
    assert_eq!(out, CLAUDE.replace("sk-ant-ort01-old", "sk-ant-ort01-new"));
    let out = set_field(&out, "claudeAiOauth.expiresAt", &json!(1800000000000u64)).unwrap();
    assert_eq!(
        out,
        CLAUDE
            .replace("sk-ant-ort01-old", "sk-ant-ort01-new")
            .replace("1700000000000", "1800000000000")
    );
    // A key of the same name elsewhere (inside a string, or deeper) is not the one.
    let out = set_field(CLAUDE, "mcpOAuth.srv.accessToken", &json!("x")).unwrap();
    assert!(
        out.contains(r#""accessToken": "sk-ant-oat01-old""#),
        "{out}"
    );
    assert!(out.contains(r#"{"srv": {"accessToken": "x"}}"#), "{out}");
}

#[test]
fn a_missing_field_is_added_to_its_object_and_a_file_made_from_nothing() {
    let out = set_field(r#"{"tokens": {}, "a": 1}"#, "tokens.id_token", &json!("i")).unwrap();
    assert_eq!(out, r#"{"tokens": {"id_token":"i"}, "a": 1}"#);
    let out = set_field(r#"{"a": 1}"#, "tokens.access_token", &json!("t")).unwrap();
    assert_eq!(out, r#"{"a": 1,"tokens":{"access_token":"t"}}"#);
    let e = set_field(r#"{"tokens": "x"}"#, "tokens.access_token", &json!("t")).unwrap_err();
    assert!(e.contains("not an object"), "{e}");
    assert!(set_field("[1]", "a", &json!(1)).is_err());
    assert!(set_field(r#"{"a": "#, "a", &json!(1)).is_err());

    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("oauth_creds.json");
    write_json_fields(
        &f,
        &up(&[("access_token", json!("ya29.a")), ("expiry_date", json!(5))]),
    )
    .unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    assert_eq!(doc, json!({"access_token": "ya29.a", "expiry_date": 5}));
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
}

#[test]
fn the_file_is_replaced_whole_keeping_its_mode_and_its_link() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.json");
    std::fs::write(&real, CLAUDE).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
    let link = dir.path().join(".credentials.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let before = std::fs::metadata(&real).unwrap().ino();
    write_json_fields(
        &link,
        &up(&[
            ("claudeAiOauth.accessToken", json!("sk-ant-oat01-new")),
            ("claudeAiOauth.refreshToken", json!("sk-ant-ort01-new")),
        ]),
    )
    .unwrap();
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let meta = std::fs::metadata(&real).unwrap();
    // A new inode renamed into place: a reader sees the old file or the new, never a part.
    assert_ne!(meta.ino(), before);
    assert_eq!(meta.mode() & 0o777, 0o640);
    let text = std::fs::read_to_string(&real).unwrap();
    assert_eq!(
        text,
        CLAUDE
            .replace("sk-ant-oat01-old", "sk-ant-oat01-new")
            .replace("sk-ant-ort01-old", "sk-ant-ort01-new")
    );
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn a_file_that_cannot_take_the_values_is_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("auth.json");
    std::fs::write(&f, "not json").unwrap();
    let e = write_json_fields(&f, &up(&[("tokens.access_token", json!("t"))])).unwrap_err();
    assert!(matches!(e, LoginFileError::Shape { .. }), "{e}");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "not json");
    std::fs::write(&f, r#"{"tokens": 3}"#).unwrap();
    let e = write_json_fields(&f, &up(&[("tokens.access_token", json!("t"))])).unwrap_err();
    assert!(e.to_string().contains("tokens is not an object"), "{e}");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), r#"{"tokens": 3}"#);
    // A directory that cannot be written: the error names the file; nothing changes.
    if running_as_root() {
        return;
    }
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let g = ro.join("auth.json");
    std::fs::write(&g, r#"{"a": "b"}"#).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
    let e = write_json_fields(&g, &up(&[("a", json!("c"))])).unwrap_err();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(e.to_string().contains("auth.json"), "{e}");
    assert_eq!(std::fs::read_to_string(&g).unwrap(), r#"{"a": "b"}"#);
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}
