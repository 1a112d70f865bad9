//! The agents' own logins under the real CLIs (part of tests/agents.rs: its stand-ins and
//! helpers).

use super::*;

// A subscription login, not a key: Claude Code reads its OAuth login file, which inside holds
// placeholders (same keys, read-only); it answers, every request carried the real access
// token, and nothing the agent could read holds a real token.
both!(claude_p_answers_with_its_login_file, |env: Env| {
    let access = format!("sk-ant-oat01-{}", "RealLoginClaude0123456789_-".repeat(3));
    let refresh = format!("sk-ant-ort01-{}", "RealRefreshClaude0123456789".repeat(3));
    let login = serde_json::json!({
        "claudeAiOauth": {
            "accessToken": access,
            "refreshToken": refresh,
            "expiresAt": 4_102_444_800_000_u64,
            "scopes": ["user:inference", "user:profile"],
            "subscriptionType": "max"
        }
    });
    let file = env.home.join(".claude/.credentials.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, serde_json::to_string(&login).unwrap()).unwrap();
    let before = std::fs::read(&file).unwrap();
    let case = Case {
        agent: "claude",
        host: "api.anthropic.com",
        key_var: "",
        key: "",
        args: &["-p", "Say hello"],
        vars: &[],
        addr: 87,
        state: &[],
        shell: None,
        also: &[],
    };
    let Some(Ready {
        stub,
        policy: pol,
        path,
        answer,
    }) = prepare(&env, &case)
    else {
        return;
    };
    let _ = std::fs::remove_file(&env.audit);
    let child = cordon(&env)
        .env("PATH", &path)
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--profile", "claude", "--policy", &pol, "--", "sh", "-c"])
        .arg(
            "claude -p 'Say hello'; \
             cat ~/.claude/.credentials.json > .seen-login; \
             for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done > .seen-proc 2>/dev/null",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_limited(child, Duration::from_secs(180));
    let log = stub.log();
    let ctx = format!("{}\n--- stand-in:\n{log}", show(&o));
    assert!(
        text(&o).contains(&answer),
        "no answer from the agent\n{ctx}"
    );
    let keys: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("KEY authorization Bearer "))
        .collect();
    assert!(
        !keys.is_empty(),
        "no bearer token reached the stand-in\n{ctx}"
    );
    assert!(
        keys.iter().all(|k| *k == access),
        "a placeholder got through\n{ctx}"
    );
    let seen = std::fs::read_to_string(env.project.join(".seen-login")).unwrap_or_default();
    let doc: Value = serde_json::from_str(&seen).unwrap_or_default();
    let held = doc["claudeAiOauth"]["accessToken"]
        .as_str()
        .unwrap_or_default();
    assert!(
        held.starts_with("sk-ant-oat01-") && held != access,
        "the agent's login file: {seen}"
    );
    let proc = std::fs::read_to_string(env.project.join(".seen-proc")).unwrap_or_default();
    assert!(
        proc.contains("PATH="),
        "the processes were not read: {proc}"
    );
    for real in [&access, &refresh] {
        assert!(!seen.contains(real.as_str()) && !proc.contains(real.as_str()));
        assert!(!text(&o).contains(real.as_str()), "{ctx}");
    }
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the host's login changed"
    );
});

// An expired subscription login: Claude Code renews it at its token endpoint before it asks
// the model. cordon swaps the real refresh token into the request, writes the new real tokens
// to the host's login file, and hands Claude placeholders; the model request that follows
// carries the new real access token; nothing inside holds a real token.
both!(
    claude_p_refreshes_its_expired_login_through_cordon,
    |env: Env| {
        let access = format!("sk-ant-oat01-{}", "RealLoginClaude0123456789_-".repeat(3));
        let refresh = format!("sk-ant-ort01-{}", "RealRefreshClaude0123456789".repeat(3));
        let login = serde_json::json!({
            "claudeAiOauth": {
                "accessToken": access,
                "refreshToken": refresh,
                // Long past: Claude refreshes before its first request.
                "expiresAt": 1_000_000_000_000_u64,
                "scopes": ["user:inference", "user:profile"],
                "subscriptionType": "max"
            }
        });
        let file = env.home.join(".claude/.credentials.json");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, serde_json::to_string(&login).unwrap()).unwrap();
        let case = Case {
            agent: "claude",
            host: "api.anthropic.com",
            key_var: "",
            key: "",
            args: &["-p", "Say hello"],
            vars: &[],
            addr: 95,
            state: &[],
            shell: None,
            also: &["platform.claude.com"],
        };
        let Some(Ready {
            stub,
            policy: pol,
            path,
            answer,
        }) = prepare(&env, &case)
        else {
            return;
        };
        let _ = std::fs::remove_file(&env.audit);
        let child = cordon(&env)
        .env("PATH", &path)
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--profile", "claude", "--policy", &pol, "--", "sh", "-c"])
        .arg(
            "claude -p 'Say hello'; \
             printf '%s\\n' detatoRbutS edualCnigoLlaeR edualChserfeRlaeR | rev > /tmp/pats; \
             echo FILEHITS $(grep -rlF -f /tmp/pats \"$HOME\" \"$PWD\" 2>/dev/null | wc -l); \
             echo PROCHITS $(for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f 2>/dev/null; done | grep -cF -f /tmp/pats)",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let o = wait_limited(child, Duration::from_secs(180));
        let log = stub.log();
        let ctx = format!("{}\n--- stand-in:\n{log}", show(&o));
        assert!(
            text(&o).contains(&answer),
            "no answer from the agent\n{ctx}"
        );
        // The stand-in's token endpoint got the host's real refresh token, and only that.
        let grants: Vec<&str> = log.lines().filter(|l| l.starts_with("OAUTH ")).collect();
        assert!(!grants.is_empty(), "Claude did not refresh\n{ctx}");
        assert_eq!(
            grants[0],
            format!("OAUTH refresh_token {refresh}"),
            "the first refresh did not carry the real token\n{ctx}"
        );
        let rotated = |n: usize| {
            (
                format!("sk-ant-oat01-StubRotated{n}{}", "A".repeat(80)),
                format!("sk-ant-ort01-StubRotated{n}{}", "R".repeat(80)),
            )
        };
        let n = grants.len();
        for (i, g) in grants.iter().enumerate().skip(1) {
            assert_eq!(*g, format!("OAUTH refresh_token {}", rotated(i).1), "{ctx}");
        }
        // The model requests after it carried the newest real access token.
        let keys: Vec<&str> = log
            .lines()
            .filter_map(|l| l.strip_prefix("KEY authorization Bearer "))
            .collect();
        assert!(
            keys.last().is_some_and(|k| *k == rotated(n).0),
            "the model request did not carry the rotated real token\n{ctx}"
        );
        // The host's file holds the newest real tokens, the rest as it was.
        let host: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(
            host["claudeAiOauth"]["accessToken"],
            rotated(n).0.as_str(),
            "{ctx}"
        );
        assert_eq!(host["claudeAiOauth"]["refreshToken"], rotated(n).1.as_str());
        assert_eq!(host["claudeAiOauth"]["subscriptionType"], "max");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("FILEHITS 0"), "{ctx}");
        assert!(out.contains("PROCHITS 0"), "{ctx}");
        for real in [&access, &refresh, &rotated(n).0, &rotated(n).1] {
            assert!(!common::all_output(&o).contains(real.as_str()), "{ctx}");
        }
    }
);

// A Google login, not a key: the real gemini CLI (GOOGLE_GENAI_USE_GCA=true, as `gemini` with
// "Login with Google" chosen) reads ~/.gemini/oauth_creds.json, which inside holds
// placeholders; it checks the cached login at oauth2.googleapis.com/tokeninfo, asks the Code
// Assist API (cloudcode-pa.googleapis.com, which the gemini profile allows by itself) for the
// user's tier and then for the answer. Every bearer token that reached the stand-ins is the
// real access token; nothing the agent could read holds a real token.
both!(gemini_p_answers_with_its_google_login, |env: Env| {
    let access = format!("ya29.{}", "RealLoginGemini0123456789_-".repeat(4));
    let refresh = format!("1//0g{}", "RealRefreshGemini0123456789".repeat(3));
    let login = serde_json::json!({
        "access_token": access,
        "refresh_token": refresh,
        "scope": "https://www.googleapis.com/auth/cloud-platform https://www.googleapis.com/auth/userinfo.email openid",
        "token_type": "Bearer",
        "expiry_date": 4_102_444_800_000_u64
    });
    let file = env.home.join(".gemini/oauth_creds.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, serde_json::to_string(&login).unwrap()).unwrap();
    let before = std::fs::read(&file).unwrap();
    let case = Case {
        agent: "gemini",
        host: "cloudcode-pa.googleapis.com",
        key_var: "",
        key: "",
        args: &[],
        vars: &[],
        addr: 97,
        state: &[],
        shell: None,
        also: &["oauth2.googleapis.com", "www.googleapis.com"],
    };
    let Some(Ready {
        stub,
        policy: pol,
        path,
        answer,
    }) = prepare(&env, &case)
    else {
        return;
    };
    let _ = std::fs::remove_file(&env.audit);
    let child = cordon(&env)
        .env("PATH", &path)
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--profile", "gemini", "--policy", &pol, "--", "sh", "-c"])
        .arg(
            "GOOGLE_GENAI_USE_GCA=true gemini --skip-trust --model gemini-2.5-flash -p 'Say hello'; \
             cat ~/.gemini/oauth_creds.json > .seen-login; \
             for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done > .seen-proc 2>/dev/null",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_limited(child, Duration::from_secs(180));
    let log = stub.log();
    let ctx = format!("{}\n--- stand-in:\n{log}", show(&o));
    assert!(
        text(&o).contains(&answer),
        "no answer from the agent\n{ctx}"
    );
    assert!(
        log.lines()
            .any(|l| l
                .starts_with("REQ POST cloudcode-pa.googleapis.com /v1internal:loadCodeAssist")),
        "it never asked the Code Assist API\n{ctx}"
    );
    // The start-up check of the cached login, with the access token (swapped to the real one
    // there too: without it gemini takes its login for dead and asks for a new one).
    assert!(
        log.lines()
            .any(|l| l.starts_with("REQ POST oauth2.googleapis.com /tokeninfo")),
        "it never checked its login\n{ctx}"
    );
    let keys: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("KEY authorization Bearer "))
        .collect();
    assert!(
        !keys.is_empty(),
        "no bearer token reached the stand-in\n{ctx}"
    );
    assert!(
        keys.iter().all(|k| *k == access),
        "a placeholder got through\n{ctx}"
    );
    let seen = std::fs::read_to_string(env.project.join(".seen-login")).unwrap_or_default();
    let doc: Value = serde_json::from_str(&seen).unwrap_or_default();
    let held = doc["access_token"].as_str().unwrap_or_default();
    assert!(
        held.starts_with("ya29.") && held != access,
        "the agent's login file: {seen}"
    );
    let proc = std::fs::read_to_string(env.project.join(".seen-proc")).unwrap_or_default();
    assert!(
        proc.contains("PATH="),
        "the processes were not read: {proc}"
    );
    for real in [&access, &refresh] {
        assert!(!seen.contains(real.as_str()) && !proc.contains(real.as_str()));
        assert!(!text(&o).contains(real.as_str()), "{ctx}");
    }
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the host's login changed"
    );
});
