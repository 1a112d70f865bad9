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
