//! Agents' login files, black-box: with a built-in profile, the agent's own login file (Claude's
//! `~/.claude/.credentials.json`, codex's `~/.codex/auth.json`, Gemini's
//! `~/.gemini/oauth_creds.json`) is readable inside at its usual path with each token replaced
//! by a placeholder, the same JSON keys; nothing inside holds a real token; a request with the
//! placeholder reaches a local TLS stand-in of the provider carrying the real token; writing
//! the file inside never reaches the host's, through `cordon state accept` either.

mod common;

use std::path::Path;

use common::net::{https_443, policy, setup, variant_addr, wait_limited, www};
use common::{Env, show};
use serde_json::Value;

/// One agent's login: its profile, its file under the home, the file's host content, the
/// tokens in it (the JSON field and its canary value), and the field and host a request
/// carries the access token to.
struct Login {
    profile: &'static str,
    file: &'static str,
    json: String,
    tokens: Vec<(&'static str, String)>,
    access: &'static str,
    host: &'static str,
    addr: u8,
    /// The profile itself allows `host` (the test adds no `[[network.allow]]` for it).
    profile_allows: bool,
}

/// A JWT whose signature is the canary (claims are not the secret; the signature is).
fn jwt(canary: &str) -> String {
    format!("eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJlbWFpbCI6InRAZXhhbXBsZS5pbnZhbGlkIn0.{canary}")
}

fn claude() -> Login {
    let access = format!(
        "sk-ant-oat01-{}",
        "CanaryAccessClaude0123456789_-".repeat(3)
    );
    let refresh = format!("sk-ant-ort01-{}", "CanaryRefreshClaude0123456789".repeat(3));
    let json = serde_json::json!({
        "claudeAiOauth": {
            "accessToken": access,
            "refreshToken": refresh,
            "expiresAt": 4_102_444_800_000_u64,
            "scopes": ["user:inference", "user:profile"],
            "subscriptionType": "max"
        }
    });
    Login {
        profile: "claude",
        file: ".claude/.credentials.json",
        json: serde_json::to_string(&json).unwrap(),
        tokens: vec![
            ("claudeAiOauth.accessToken", access),
            ("claudeAiOauth.refreshToken", refresh),
        ],
        access: "claudeAiOauth.accessToken",
        host: "api.anthropic.com",
        addr: 81,
        profile_allows: false,
    }
}

fn codex() -> Login {
    let id = jwt("CanaryIdTokenCodexSignature0123456789abcdefABCDEF");
    let access = jwt("CanaryAccessCodexSignature0123456789abcdefABCDEF");
    let refresh = "rt_CanaryRefreshCodex0123456789abcdefghijABCDEFGHIJ".to_string();
    let json = serde_json::json!({
        "OPENAI_API_KEY": null,
        "tokens": {
            "id_token": id,
            "access_token": access,
            "refresh_token": refresh,
            "account_id": "acct-0000"
        },
        "last_refresh": "2026-11-30T12:00:00Z"
    });
    Login {
        profile: "codex",
        file: ".codex/auth.json",
        // Pretty-printed, as codex writes it: the copy keeps every byte but the tokens.
        json: serde_json::to_string_pretty(&json).unwrap(),
        tokens: vec![
            ("tokens.id_token", id),
            ("tokens.access_token", access),
            ("tokens.refresh_token", refresh),
        ],
        access: "tokens.access_token",
        host: "chatgpt.com",
        addr: 83,
        profile_allows: false,
    }
}

fn gemini() -> Login {
    let access = "ya29.CanaryAccessGemini0123456789abcdefghijklmnopqrstuvwxyz".to_string();
    let refresh = "1//0gCanaryRefreshGemini0123456789abcdefghijklmnop".to_string();
    let id = jwt("CanaryIdTokenGeminiSignature0123456789abcdefABCDEF");
    let json = serde_json::json!({
        "access_token": access,
        "refresh_token": refresh,
        "scope": "https://www.googleapis.com/auth/cloud-platform openid",
        "token_type": "Bearer",
        "id_token": id,
        "expiry_date": 4_102_444_800_000_u64
    });
    Login {
        profile: "gemini",
        file: ".gemini/oauth_creds.json",
        json: serde_json::to_string_pretty(&json).unwrap(),
        tokens: vec![
            ("access_token", access),
            ("refresh_token", refresh),
            ("id_token", id),
        ],
        access: "access_token",
        // The Code Assist API, where a Google-login gemini sends every model call: the
        // profile must allow it by itself.
        host: "cloudcode-pa.googleapis.com",
        addr: 85,
        profile_allows: true,
    }
}

/// Every key path of a JSON document, sorted (`a`, `a.b`, …).
fn key_paths(v: &Value, at: &str, out: &mut Vec<String>) {
    if let Value::Object(m) = v {
        for (k, x) in m {
            let p = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            out.push(p.clone());
            key_paths(x, &p, out);
        }
    }
    out.sort();
}

/// The script the agent runs: it looks for the real tokens everywhere it can read, uses the
/// login's placeholder, and tries to change the login file every way it can.
fn login_script(l: &Login, dir: &str) -> String {
    // The script never names a real token (it is logged): reversed, it is turned back only
    // into a pattern file for the searches.
    let rev = |v: &str| v.chars().rev().collect::<String>();
    let revs: Vec<String> = l.tokens.iter().map(|(_, v)| rev(v)).collect();
    let py = common::net::PY;
    format!(
        "F=~/{file}\n\
         printf '%s\\n' {revs} | rev > /tmp/pats\n\
         echo FILEHITS $(grep -rlF -f /tmp/pats ~/{dir} \"$HOME\" \"$PWD\" 2>/dev/null | wc -l)\n\
         echo PROCHITS $(for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f 2>/dev/null; done | grep -cF -f /tmp/pats)\n\
         rm /tmp/pats\n\
         echo KEYS $({py} -c 'import json,sys; k=lambda v,a: [x for n,c in (v.items() if isinstance(v,dict) else []) for x in [a+n]+k(c,a+n+\".\")]; print(\",\".join(sorted(k(json.load(open(sys.argv[1])),\"\"))))' \"$F\")\n\
         TOK=$({py} -c 'import json,sys,functools; print(functools.reduce(lambda v,p: v[p], sys.argv[2].split(\".\"), json.load(open(sys.argv[1]))))' \"$F\" {access})\n\
         echo TOKLEN ${{#TOK}}\n\
         echo REPLY $(curl -sS --max-time 10 -H \"authorization: Bearer $TOK\" https://{host}/hello.txt)\n\
         RT=$({py} -c 'import json,sys,functools; print(functools.reduce(lambda v,p: v[p], sys.argv[2].split(\".\"), json.load(open(sys.argv[1]))))' \"$F\" {refresh})\n\
         echo REFRESH $(curl -s --max-time 10 -o /dev/null -w '%{{http_code}}' -H 'content-type: application/json' -d \"{{\\\"grant_type\\\":\\\"refresh_token\\\",\\\"refresh_token\\\":\\\"$RT\\\"}}\" https://{host}/token)\n\
         echo '{{}}' > \"$F\" 2>/dev/null && echo WRITE-IN-PLACE ok || echo WRITE-IN-PLACE refused\n\
         echo '{{}}' > ~/{dir}/new.json && mv -f ~/{dir}/new.json \"$F\" 2>/dev/null && echo RENAME-OVER ok || echo RENAME-OVER refused\n\
         rm -f \"$F\" 2>/dev/null && echo REMOVE ok || echo REMOVE refused\n\
         echo kept > ~/{dir}/notes.md\n\
         mv ~/{dir} ~/{dir}-moved 2>/dev/null && echo MOVE-DIR ok || echo MOVE-DIR refused\n\
         mkdir -p ~/{dir} && cp ~/{dir}-moved/* ~/{dir}/ 2>/dev/null; cat \"$F\" > ~/{dir}/x && mv -f ~/{dir}/x \"$F\" 2>/dev/null && echo REPLACED ok || echo REPLACED refused\n",
        file = l.file,
        revs = revs.join(" "),
        access = l.access,
        refresh = l
            .tokens
            .iter()
            .find(|(f, _)| f.contains("refresh"))
            .unwrap()
            .0,
        host = l.host,
    )
}

/// Accepting the session brings home what was written beside the login file, and leaves the
/// host's file as it was.
fn accepting_keeps_the_login_file(env: &Env, dir: &str, file: &Path, host_before: &[u8]) {
    let list = env.cordon().args(["state", "list"]).output().unwrap();
    let id = String::from_utf8_lossy(&list.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let a = env
        .cordon()
        .args(["state", "accept", &id])
        .output()
        .unwrap();
    assert_eq!(a.status.code(), Some(0), "{}", show(&a));
    let dir_host = env.home.join(dir);
    assert_eq!(
        std::fs::read_to_string(dir_host.join("notes.md")).unwrap_or_default(),
        "kept\n",
        "the session was accepted: {}",
        show(&a)
    );
    assert_eq!(
        std::fs::read(file).unwrap(),
        host_before,
        "the host's login file changed"
    );
}

fn check_login(env: Env, l: Login) {
    if !common::need(&["curl", "openssl"], "a TLS stand-in of the provider") {
        return;
    }
    let addr = &variant_addr(&env, l.addr);
    setup(&env);
    let root = www(&env, &format!("www-{}", l.profile), "hello-login");
    let Some((srv, ca)) = https_443(&env, l.host, addr, &root) else {
        return;
    };
    let file = env.home.join(l.file);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, &l.json).unwrap();
    env.own(&env.home);
    let host_before = std::fs::read(&file).unwrap();
    let allow = if l.profile_allows {
        String::new()
    } else {
        format!("[[network.allow]]\nhost = \"{}\"\nports = [443]\n", l.host)
    };
    let pol = policy(
        &env,
        &format!(
            "[dns]\nhosts = {{ \"{h}\" = \"{addr}\" }}\n{allow}\
             [tls]\nupstream_ca = \"{}\"\n",
            ca.display(),
            h = l.host
        ),
    );
    let dir = l.file.rsplit_once('/').unwrap().0;
    let script = login_script(&l, dir);
    let _ = std::fs::remove_file(&env.audit);
    let child = env
        .cordon()
        .env("XDG_RUNTIME_DIR", common::runtime_dir(&env))
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--profile", l.profile, "--policy", &pol, "--"])
        .args([
            "sh",
            "-c",
            &format!("{}{script}", common::as_agent(&env, l.profile)),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_limited(child, std::time::Duration::from_secs(120));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = |p: &str| {
        out.lines()
            .find_map(|x| x.strip_prefix(p))
            .unwrap_or("<missing>")
            .trim()
            .to_string()
    };
    // Nothing inside holds a real token: not the visible file, not the home or project, not
    // any process's environment or command line.
    assert_eq!(line("FILEHITS "), "0", "{}", show(&o));
    assert_eq!(line("PROCHITS "), "0", "{}", show(&o));
    // The file parses, with the same keys as the host's.
    let host_doc: Value = serde_json::from_slice(&host_before).unwrap();
    let mut keys = Vec::new();
    key_paths(&host_doc, "", &mut keys);
    assert_eq!(line("KEYS "), keys.join(","), "{}", show(&o));
    let real_access = &l.tokens.iter().find(|(f, _)| *f == l.access).unwrap().1;
    assert_eq!(
        line("TOKLEN "),
        real_access.len().to_string(),
        "the placeholder keeps the token's length: {}",
        show(&o)
    );
    // The placeholder reached the stand-in as the real token.
    assert_eq!(line("REPLY "), "hello-login", "{}", show(&o));
    assert!(
        srv.log()
            .lines()
            .any(|x| x == format!("HDR authorization: Bearer {real_access}")),
        "the stand-in never saw the real token: {}",
        srv.log()
    );
    // The refresh token's placeholder in a body anywhere but its token endpoint (where
    // logins_refresh.rs has it swapped) is refused before anything leaves, and the real one
    // never goes.
    assert_eq!(line("REFRESH "), "403", "{}", show(&o));
    // (The head may go ahead while the body is inspected; the body never arrives.)
    let bodies = srv
        .log()
        .lines()
        .filter(|x| x.starts_with("POST ") && !x.ends_with(" 0"))
        .count();
    assert_eq!(bodies, 0, "{}", srv.log());
    // The login file cannot be changed inside; what is written beside it is reviewed.
    assert_eq!(line("WRITE-IN-PLACE "), "refused", "{}", show(&o));
    assert_eq!(line("RENAME-OVER "), "refused", "{}", show(&o));
    assert_eq!(line("REMOVE "), "refused", "{}", show(&o));
    // Not by moving its directory away and putting a file in its place either.
    assert_eq!(line("REPLACED "), "refused", "{}", show(&o));
    let audit = std::fs::read_to_string(&env.audit).unwrap_or_default();
    for (_, v) in &l.tokens {
        assert!(!audit.contains(v.as_str()), "the audit log holds a token");
        assert!(!String::from_utf8_lossy(&o.stderr).contains(v.as_str()));
    }
    accepting_keeps_the_login_file(&env, dir, &file, &host_before);
}

both!(claude_login_is_shown_with_placeholders, |env: Env| {
    check_login(env, claude())
});

both!(codex_login_is_shown_with_placeholders, |env: Env| {
    check_login(env, codex())
});

both!(gemini_login_is_shown_with_placeholders, |env: Env| {
    check_login(env, gemini())
});

both!(
    check_names_the_logins_and_where_they_go_never_the_values,
    |env: Env| {
        let l = claude();
        let file = env.home.join(l.file);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, &l.json).unwrap();
        env.own(&env.home);
        let o = env
            .cordon()
            .args(["check", "--profile", "claude"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
        err.contains(&format!(
            "login `claude-oauth-access` found in {} (claudeAiOauth.accessToken): the sandbox sees a placeholder; the real token goes only to api.anthropic.com",
            file.display()
        )),
        "{}",
        show(&o)
    );
        assert!(
            err.contains("login `claude-oauth-refresh` found in"),
            "{}",
            show(&o)
        );
        // Where each is renewed, and that it is brokered.
        assert!(
            err.contains("(claudeAiOauth.refreshToken): the sandbox sees a placeholder; the real token goes only to platform.claude.com, console.anthropic.com; renewed at https://platform.claude.com/v1/oauth/token (brokered: new tokens to this file)"),
            "{}",
            show(&o)
        );
        for (_, v) in &l.tokens {
            assert!(!all(&o).contains(v.as_str()), "check printed a token");
        }
        // Without the file: said plainly, no warning.
        std::fs::remove_file(&file).unwrap();
        let o = env
            .cordon()
            .args(["check", "--profile", "claude"])
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("login `claude-oauth-access`: none in"),
            "{}",
            show(&o)
        );
    }
);

fn all(o: &std::process::Output) -> String {
    common::all_output(o)
}

/// `cordon run --profile PROFILE` with `policy_text`, as the variant's user.
fn run_profile(env: &Env, profile: &str, policy_text: &str, script: &str) -> std::process::Output {
    let pol = policy(env, policy_text);
    let child = env
        .cordon()
        .env("XDG_RUNTIME_DIR", common::runtime_dir(env))
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--profile", profile, "--policy", &pol, "--"])
        .args(["sh", "-c", script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_limited(child, std::time::Duration::from_secs(120))
}

both!(
    login_files_stay_hidden_without_the_http_layer,
    |env: Env| {
        // No gateway, no HTTP layer to swap placeholders: the login file is not shown at all
        // (without the profile's credentials it would be a plain readable file of the home).
        let l = claude();
        let file = env.home.join(l.file);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, &l.json).unwrap();
        env.own(&env.home);
        let o = run_profile(
            &env,
            "claude",
            "[network]\nmode = \"none\"\n",
            "cat ~/.claude/.credentials.json >/dev/null 2>&1 && echo SEEN || echo HIDDEN; ls ~/.claude",
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.lines().any(|x| x == "HIDDEN"), "{}", show(&o));
        for (_, v) in &l.tokens {
            assert!(!all(&o).contains(v.as_str()), "{}", show(&o));
        }
    }
);

both!(
    a_login_file_holding_another_secret_stays_hidden,
    |env: Env| {
        // A token no credential covers (here a GitHub token beside Gemini's): no masked copy can
        // be shown without it, so the file stays masked, with a warning naming it.
        let l = gemini();
        let mut doc: Value = serde_json::from_str(&l.json).unwrap();
        doc["other"] = Value::String(format!("ghp_{}", "Zq9".repeat(12)));
        let file = env.home.join(l.file);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, serde_json::to_string(&doc).unwrap()).unwrap();
        env.own(&env.home);
        let o = run_profile(
            &env,
            "gemini",
            "",
            "cat ~/.gemini/oauth_creds.json >/dev/null 2>&1 && echo SEEN || echo HIDDEN",
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.lines().any(|x| x == "HIDDEN"), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("oauth_creds.json stays hidden: it holds another secret"),
            "{}",
            show(&o)
        );
        assert!(!all(&o).contains("Zq9Zq9Zq9"), "{}", show(&o));
    }
);

both!(a_broken_login_file_is_hidden_with_a_warning, |env: Env| {
    // Not JSON (cut short): no token can be read, so none can be replaced: hidden, and said.
    let l = claude();
    let file = env.home.join(l.file);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, &l.json[..l.json.len() / 2]).unwrap();
    env.own(&env.home);
    let o = run_profile(
        &env,
        "claude",
        "",
        "cat ~/.claude/.credentials.json >/dev/null 2>&1 && echo SEEN || echo HIDDEN",
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.lines().any(|x| x == "HIDDEN"), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("credential `claude-oauth-access` did not resolve"),
        "{}",
        show(&o)
    );
    assert!(!all(&o).contains("CanaryAccessClaude"), "{}", show(&o));
});

both!(a_yaml_login_is_shown_with_its_placeholder, |env: Env| {
    // gh's hosts.yml: the token under a key that holds dots, twice (gh writes it per user
    // too); `source = { file, yaml }` reads one, the copy inside has the placeholder in both.
    if !common::need(&["curl", "openssl"], "a TLS stand-in of the provider") {
        return;
    }
    let addr = &variant_addr(&env, 97);
    setup(&env);
    let root = www(&env, "www-gh", "hello-gh");
    let Some((srv, ca)) = https_443(&env, "api.github.com", addr, &root) else {
        return;
    };
    let token = format!("gho_{}", "CanaryGhYaml0123456789ab".repeat(2));
    let yml = format!(
        "github.com:\n    users:\n        octo:\n            oauth_token: {token}\n    git_protocol: https\n    oauth_token: {token}\n    user: octo\n"
    );
    let file = env.home.join(".config/gh/hosts.yml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, &yml).unwrap();
    env.own(&env.home);
    let o = run_profile(
        &env,
        "none",
        &format!(
            "[credentials.gh-login]\n\
             source = {{ file = \"~/.config/gh/hosts.yml\", yaml = \"github.com.oauth_token\" }}\n\
             hosts = [\"api.github.com\"]\nheader = \"authorization\"\nformat = \"Bearer {{}}\"\n\
             [dns]\nhosts = {{ \"api.github.com\" = \"{addr}\" }}\n\
             [tls]\nupstream_ca = \"{}\"\n",
            ca.display()
        ),
        "T=$(sed -n 's/^    oauth_token: //p' ~/.config/gh/hosts.yml)\n\
         echo TOKLEN ${#T}\n\
         echo SAME $(grep -c \"oauth_token: $T\" ~/.config/gh/hosts.yml)\n\
         echo USER $(grep -c '^    user: octo$' ~/.config/gh/hosts.yml)\n\
         echo REPLY $(curl -sS --max-time 10 -H \"authorization: Bearer $T\" https://api.github.com/hello.txt)\n\
         echo HITS $(grep -rlF 'CanaryGhYaml' \"$HOME\" 2>/dev/null | wc -l)\n",
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let line = |p: &str| {
        out.lines()
            .find_map(|x| x.strip_prefix(p))
            .unwrap_or("<missing>")
            .trim()
            .to_string()
    };
    assert_eq!(line("TOKLEN "), token.len().to_string(), "{}", show(&o));
    assert_eq!(
        line("SAME "),
        "2",
        "both places hold the placeholder: {}",
        show(&o)
    );
    assert_eq!(line("USER "), "1", "{}", show(&o));
    assert_eq!(line("REPLY "), "hello-gh", "{}", show(&o));
    assert_eq!(line("HITS "), "0", "{}", show(&o));
    assert!(
        srv.log()
            .lines()
            .any(|x| x == format!("HDR authorization: Bearer {token}")),
        "{}",
        srv.log()
    );
    assert!(!all(&o).contains(&token), "{}", show(&o));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), yml);
});
