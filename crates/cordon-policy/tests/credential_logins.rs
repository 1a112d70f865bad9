//! `[credentials.NAME] source = { file, json }`: a token read from a field of a JSON login
//! file; the file is hidden whatever else happens (the HTTP layer shows a masked copy).

mod common;
use common::*;

use cordon_policy::CredentialSource;

#[test]
fn a_json_field_source_loads_hides_its_file_and_prints_back() {
    let env = Env::new();
    env.user(
        "[credentials.tool-login]\n\
         source = { file = \"~/.tool/auth.json\", json = \"tokens.access_token\" }\n\
         hosts = [\"api.tool.example\"]\nheader = \"authorization\"\nformat = \"Bearer {}\"\n",
    );
    let l = env.load();
    let c = l
        .plan
        .credentials
        .iter()
        .find(|c| c.name == "tool-login")
        .unwrap();
    let file = env.home.join(".tool/auth.json");
    assert_eq!(
        c.source,
        CredentialSource::Json {
            file: file.clone(),
            field: "tokens.access_token".into()
        }
    );
    assert!(
        has(&l.plan.filesystem.deny, &file).is_some(),
        "the login file is masked: {:?}",
        l.plan.filesystem.deny
    );
    let text = l.plan.to_toml();
    assert!(
        text.contains(&format!(
            "source = {{ file = \"{}\", json = \"tokens.access_token\" }}",
            file.display()
        )),
        "{text}"
    );
    let again = env.reload(&text);
    assert!(again.plan.credentials.iter().any(|x| x.source == c.source));
}

#[test]
fn the_built_in_profiles_name_their_login_files() {
    for (profile, file, field) in [
        (
            "claude",
            ".claude/.credentials.json",
            "claudeAiOauth.accessToken",
        ),
        (
            "claude",
            ".claude/.credentials.json",
            "claudeAiOauth.refreshToken",
        ),
        ("codex", ".codex/auth.json", "tokens.access_token"),
        ("codex", ".codex/auth.json", "tokens.refresh_token"),
        ("codex", ".codex/auth.json", "tokens.id_token"),
        ("codex", ".codex/auth.json", "OPENAI_API_KEY"),
        ("gemini", ".gemini/oauth_creds.json", "access_token"),
        ("gemini", ".gemini/oauth_creds.json", "refresh_token"),
        ("gemini", ".gemini/oauth_creds.json", "id_token"),
    ] {
        let env = Env::new();
        let mut o = env.opts();
        o.profile = Some(profile.into());
        let l = cordon_policy::load(&o).unwrap();
        let want = CredentialSource::Json {
            file: env.home.join(file),
            field: field.into(),
        };
        assert!(
            l.plan.credentials.iter().any(|c| c.source == want),
            "{profile}: {field}"
        );
        assert!(has(&l.plan.filesystem.deny, &env.home.join(file)).is_some());
    }
}

#[test]
fn bad_json_sources_say_where_and_how() {
    for (source, says) in [
        (
            "{ env = \"X\", json = \"a\" }",
            "`json` names a field of `file`",
        ),
        ("{ json = \"a\" }", "`json` names a field of `file`"),
        (
            "{ file = \"~/a.json\", json = \"a..b\" }",
            "invalid JSON field",
        ),
        (
            "{ file = \"~/a.json\", json = \" \" }",
            "invalid JSON field",
        ),
    ] {
        let env = Env::new();
        env.user(&format!(
            "[credentials.x]\nsource = {source}\nhosts = [\"x.example\"]\n"
        ));
        let e = env.load_err().to_string();
        assert!(e.contains(says), "{source}: {e}");
        assert!(e.contains("json = "), "{source}: the fix is shown: {e}");
    }
}

/// A login renewed at a token endpoint on its own port.
const TOOL_LOGIN: &str = "[credentials.tool-refresh]\n\
     source = { file = \"~/.tool/auth.json\", json = \"tokens.refresh_token\" }\n\
     hosts = [\"auth.tool.example\"]\n\
     refresh = { url = \"https://auth.tool.example:8443/oauth/token\", token = \"refresh_token\", expires_ms = \"tokens.expires_at\", refreshed_at = \"last_refresh\" }\n";

#[test]
fn a_login_names_its_token_endpoint_and_prints_it_back() {
    let env = Env::new();
    env.user(TOOL_LOGIN);
    let l = env.load();
    let r = l.plan.credentials[0].refresh.clone().unwrap();
    assert_eq!(
        (r.host.as_str(), r.port, r.path.as_str(), r.token.as_str()),
        ("auth.tool.example", 8443, "/oauth/token", "refresh_token")
    );
    assert!(r.is_endpoint("Auth.Tool.Example.", 8443, "/oauth/token"));
    assert!(!r.is_endpoint("auth.tool.example", 443, "/oauth/token"));
    assert!(!r.is_endpoint("auth.tool.example", 8443, "/oauth/token/x"));
    let text = l.plan.to_toml();
    assert!(text.contains("refresh = { url = \"https://auth.tool.example:8443/oauth/token\", token = \"refresh_token\", expires_ms = \"tokens.expires_at\", refreshed_at = \"last_refresh\" }"), "{text}");
    assert_eq!(env.reload(&text).plan.credentials[0].refresh, Some(r));
}

#[test]
fn the_built_in_logins_are_renewed_at_their_providers_token_endpoints() {
    for (profile, url, tokens) in [
        (
            "claude",
            "https://platform.claude.com/v1/oauth/token",
            &["access_token", "refresh_token"][..],
        ),
        (
            "codex",
            "https://auth.openai.com/oauth/token",
            &["access_token", "refresh_token", "id_token"][..],
        ),
        (
            "gemini",
            "https://oauth2.googleapis.com/token",
            &["access_token", "refresh_token", "id_token"][..],
        ),
    ] {
        let env = Env::new();
        let mut o = env.opts();
        o.profile = Some(profile.into());
        let l = cordon_policy::load(&o).unwrap();
        let mut got: Vec<&str> = l
            .plan
            .credentials
            .iter()
            .filter_map(|c| c.refresh.as_ref())
            .filter(|r| r.url == url)
            .map(|r| r.token.as_str())
            .collect();
        got.sort_unstable();
        let mut want = tokens.to_vec();
        want.sort_unstable();
        assert_eq!(got, want, "{profile}");
        // The endpoint is reachable: a refresh is brokered, not refused at the network.
        let host = url
            .trim_start_matches("https://")
            .split('/')
            .next()
            .unwrap();
        assert!(
            l.plan.network.allow.iter().any(|a| a.host.matches(host)),
            "{profile}: {host}"
        );
    }
}

#[test]
fn bad_refresh_settings_say_where_and_how() {
    for (cred, says, fix) in [
        (
            "source = { env = \"X\" }\nhosts = [\"a.example\"]\nrefresh = { url = \"https://a.example/t\", token = \"access_token\" }",
            "`refresh` renews a token of a JSON login file",
            "json = ",
        ),
        (
            "source = { file = \"~/a.json\", json = \"r\" }\nhosts = [\"a.example\"]\nrefresh = { url = \"http://a.example/t\", token = \"refresh_token\" }",
            "invalid token endpoint",
            "https URL",
        ),
        (
            "source = { file = \"~/a.json\", json = \"r\" }\nhosts = [\"a.example\"]\nrefresh = { url = \"https://b.example/t\", token = \"refresh_token\" }",
            "would go to b.example, which is not one of its hosts",
            "add \"b.example\" to hosts",
        ),
        (
            "source = { file = \"~/a.json\", json = \"r\" }\nhosts = [\"a.example\"]\nrefresh = { url = \"https://a.example/t\", token = \"a-b\" }",
            "invalid answer key",
            "token = \"access_token\"",
        ),
    ] {
        let env = Env::new();
        env.user(&format!("[credentials.x]\n{cred}\n"));
        let e = env.load_err().to_string();
        assert!(e.contains(says), "{cred}: {e}");
        assert!(e.contains(fix), "{cred}: the fix is shown: {e}");
    }
}

#[test]
fn a_yaml_field_source_loads_hides_its_file_and_prints_back() {
    let env = Env::new();
    env.user(
        "[credentials.gh-login]\n\
         source = { file = \"~/.config/gh/hosts.yml\", yaml = \"github.com.oauth_token\" }\n\
         hosts = [\"api.github.com\"]\n",
    );
    let l = env.load();
    let file = env.home.join(".config/gh/hosts.yml");
    let want = CredentialSource::Yaml {
        file: file.clone(),
        field: "github.com.oauth_token".into(),
    };
    assert_eq!(l.plan.credentials[0].source, want);
    assert!(has(&l.plan.filesystem.deny, &file).is_some());
    let text = l.plan.to_toml();
    assert!(
        text.contains("yaml = \"github.com.oauth_token\" }"),
        "{text}"
    );
    assert_eq!(env.reload(&text).plan.credentials[0].source, want);
    // Not both, not without the file, and no refresh of a YAML login.
    for (source, says) in [
        (
            "{ file = \"~/a.yml\", json = \"a\", yaml = \"a\" }",
            "goes with it alone",
        ),
        ("{ yaml = \"a\" }", "`yaml` names a field of `file`"),
    ] {
        let env = Env::new();
        env.user(&format!(
            "[credentials.x]\nsource = {source}\nhosts = [\"x.example\"]\n"
        ));
        let e = env.load_err().to_string();
        assert!(e.contains(says), "{source}: {e}");
    }
    let env = Env::new();
    env.user(
        "[credentials.x]\nsource = { file = \"~/a.yml\", yaml = \"r\" }\nhosts = [\"x.example\"]\n\
         refresh = { url = \"https://x.example/t\", token = \"refresh_token\" }\n",
    );
    assert!(env.load_err().to_string().contains("JSON login file"));
}
