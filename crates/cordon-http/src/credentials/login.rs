//! Agents' login files (`~/.claude/.credentials.json`, `~/.codex/auth.json`,
//! `~/.gemini/oauth_creds.json`): each token a field of a JSON file. The real value is read
//! here, on the host; the sandbox sees the file with each token's value replaced by its
//! placeholder, every other byte as it was, so the agent parses the same keys and believes it
//! is logged in.

use std::path::Path;

/// The string at dotted path `field` of the JSON file `file`; `None` when the file is
/// unreadable or not JSON, or the field is absent, not a string, or empty (a login without
/// that token: nothing secret to hide).
pub fn json_field(file: &Path, field: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    let doc: serde_json::Value = serde_json::from_str(&text).ok()?;
    lookup(&doc, field)
        .and_then(serde_json::Value::as_str)
        .map(str::to_string)
}

/// Whether `file` is absent or holds JSON: a login file that is there but broken is worth a
/// warning (it stays hidden, and the agent would say it is logged out without saying why).
pub fn absent_or_json(file: &Path) -> bool {
    match std::fs::read_to_string(file) {
        Ok(text) => serde_json::from_str::<serde_json::Value>(&text).is_ok(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

fn lookup<'a>(doc: &'a serde_json::Value, field: &str) -> Option<&'a serde_json::Value> {
    field.split('.').try_fold(doc, |v, k| v.get(k))
}

/// Checks a masked copy of a login file before the sandbox is shown it: it still parses as
/// JSON, and each `(field, placeholder)` holds exactly its placeholder (a replacement that
/// broke the file or missed the field would show the agent a login that is not there, or the
/// real value).
pub fn check_masked(text: &str, fields: &[(&str, &str)]) -> Result<(), String> {
    let doc: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("the masked copy is not JSON ({e})"))?;
    for (field, placeholder) in fields {
        if lookup(&doc, field).and_then(serde_json::Value::as_str) != Some(placeholder) {
            return Err(format!(
                "field {field} does not hold its placeholder in the masked copy"
            ));
        }
    }
    Ok(())
}

/// The scalar at `field` of YAML text made of block mappings (`key: value`, nested by
/// indentation, as gh writes `hosts.yml`): the keys from the top joined with dots, so a key
/// may hold dots itself (`github.com.oauth_token`). Quotes around a value are taken off; a
/// sequence, flow collection or anything else this does not read gives `None` for what is
/// inside it — never a wrong value.
pub fn yaml_value(text: &str, field: &str) -> Option<String> {
    let mut stack: Vec<(usize, String)> = Vec::new();
    for raw in text.lines() {
        let indent = raw.len() - raw.trim_start_matches(' ').len();
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line == "---" {
            continue;
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let Some((key, value)) = line
            .split_once(": ")
            .or_else(|| line.strip_suffix(':').map(|k| (k, "")))
        else {
            continue;
        };
        if key.starts_with(['-', '[', '{']) {
            continue;
        }
        let key = unquote(key.trim());
        let value = match value.find(" #") {
            Some(i) => &value[..i],
            None => value,
        }
        .trim();
        let mut path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
        path.push(&key);
        if value.is_empty() {
            stack.push((indent, key.clone()));
        } else if path.join(".") == field {
            let v = unquote(value);
            return (!v.is_empty() && !v.starts_with(['[', '{', '&', '*', '|', '>'])).then_some(v);
        }
    }
    None
}

fn unquote(v: &str) -> String {
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return v[1..v.len() - 1].to_string();
        }
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yaml_scalar_is_read_by_its_keys_even_when_a_key_holds_dots() {
        let gh = "github.com:\n    users:\n        octo:\n            oauth_token: gho_inner\n    git_protocol: https\n    user: octo\n    oauth_token: 'gho_outer' # the active one\nghe.example.com:\n    oauth_token: \"gho_ghe\"\n";
        assert_eq!(
            yaml_value(gh, "github.com.oauth_token").as_deref(),
            Some("gho_outer")
        );
        assert_eq!(
            yaml_value(gh, "github.com.users.octo.oauth_token").as_deref(),
            Some("gho_inner")
        );
        assert_eq!(
            yaml_value(gh, "ghe.example.com.oauth_token").as_deref(),
            Some("gho_ghe")
        );
        assert_eq!(yaml_value(gh, "github.com.users"), None);
        assert_eq!(yaml_value(gh, "oauth_token"), None);
        assert_eq!(yaml_value("a:\n  - b: x\n", "a.b"), None);
    }

    #[test]
    fn a_field_is_read_by_its_dotted_path_and_only_a_string_counts() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("auth.json");
        std::fs::write(
            &f,
            r#"{"OPENAI_API_KEY":null,"tokens":{"access_token":"at-1","n":3,"e":""}}"#,
        )
        .unwrap();
        assert_eq!(
            json_field(&f, "tokens.access_token").as_deref(),
            Some("at-1")
        );
        assert_eq!(json_field(&f, "OPENAI_API_KEY"), None);
        assert_eq!(json_field(&f, "tokens.n"), None);
        assert_eq!(json_field(&f, "tokens.missing"), None);
        assert_eq!(json_field(&dir.path().join("none.json"), "a"), None);
        assert!(absent_or_json(&f) && absent_or_json(&dir.path().join("none.json")));
        std::fs::write(&f, "not json").unwrap();
        assert_eq!(json_field(&f, "tokens.access_token"), None);
        assert!(!absent_or_json(&f));
    }

    #[test]
    fn a_masked_copy_must_parse_and_hold_each_placeholder() {
        let ok = r#"{"a":{"t":"PH"}}"#;
        assert!(check_masked(ok, &[("a.t", "PH")]).is_ok());
        let e = check_masked(ok, &[("a.t", "OTHER")]).unwrap_err();
        assert!(e.contains("a.t"), "{e}");
        let e = check_masked("{\"a\":", &[]).unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
    }
}
