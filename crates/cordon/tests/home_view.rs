//! The home's view, black-box: a home laid out as real tools leave it, with credentials from
//! many tools (most of which cordon has no name for); none may be readable inside, under every
//! profile, nor any the host creates while the session runs. What the sandbox could read is
//! copied into the project and checked on the host side.

mod common;

use std::path::Path;

use common::{Env, all_output, show};

/// Every secret value holds this, so one search over what the sandbox could read finds any.
const MARK: &str = "ZZLEAK";

/// A secret value shaped by its prefix `p`, holding [`MARK`].
fn tok(p: &str) -> String {
    let m = MARK;
    format!("{p}{m}{}", "a1B2c3D4e5F6g7H8i9J0".repeat(2))
}

/// `(path under the home, content)`: at least 50 files from at least 30 tools. Values are
/// shaped as the tools write them (a file the view shows is checked by content).
fn credentials() -> Vec<(&'static str, String)> {
    [
        agent_logins(),
        registry_and_forge_tokens(),
        cloud_database_and_hub_credentials(),
        app_history_and_key_files(),
    ]
    .concat()
}

/// Agent CLIs' logins and keys: each hidden under every other profile.
fn agent_logins() -> Vec<(&'static str, String)> {
    vec![
        // Agent CLIs' logins and keys: each hidden under every other profile.
        (
            ".claude/.credentials.json",
            format!(
                r#"{{"claudeAiOauth":{{"accessToken":"{}","refreshToken":"{}","expiresAt":4102444800000,"scopes":["user:inference"]}}}}"#,
                tok("sk-ant-oat01-"),
                tok("sk-ant-ort01-")
            ),
        ),
        (
            ".codex/auth.json",
            format!(
                r#"{{"OPENAI_API_KEY":"{}","tokens":{{"id_token":"{}","access_token":"{}","refresh_token":"{}","account_id":"acc"}},"last_refresh":"2026-01-01T00:00:00Z"}}"#,
                tok("sk-proj-"),
                tok("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0."),
                tok("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ5In0."),
                tok("rt_")
            ),
        ),
        (
            ".gemini/oauth_creds.json",
            format!(
                r#"{{"access_token":"{}","refresh_token":"{}","token_type":"Bearer","expiry_date":4102444800000}}"#,
                tok("ya29."),
                tok("1//0g")
            ),
        ),
        (".gemini/.env", format!("GEMINI_API_KEY={}\n", tok("AIza"))),
        (
            ".local/share/opencode/auth.json",
            format!(
                r#"{{"anthropic":{{"type":"api","key":"{}"}}}}"#,
                tok("sk-ant-api03-")
            ),
        ),
        (
            ".config/github-copilot/hosts.json",
            format!(
                r#"{{"github.com":{{"user":"u","oauth_token":"{}"}}}}"#,
                tok("ghu_")
            ),
        ),
        (
            ".copilot/config.json",
            format!(r#"{{"github_token":"{}"}}"#, tok("gho_")),
        ),
        (
            ".qwen/oauth_creds.json",
            format!(
                r#"{{"access_token":"{}","refresh_token":"{}"}}"#,
                tok("q"),
                tok("r")
            ),
        ),
        (
            ".local/share/crush/crush.json",
            format!(
                r#"{{"providers":{{"anthropic":{{"api_key":"{}"}}}}}}"#,
                tok("sk-ant-api03-")
            ),
        ),
        (
            ".config/goose/secrets.yaml",
            format!("OPENAI_API_KEY: {}\n", tok("sk-proj-")),
        ),
        (
            ".aider.conf.yml",
            format!("anthropic-api-key: {}\n", tok("sk-ant-api03-")),
        ),
    ]
}

/// Package registries, git credential stores and forges' CLIs.
fn registry_and_forge_tokens() -> Vec<(&'static str, String)> {
    vec![
        // Package registries.
        (
            ".npmrc",
            format!("//registry.npmjs.org/:_authToken={}\n", tok("npm_")),
        ),
        (".yarnrc.yml", format!("npmAuthToken: {}\n", tok("npm_"))),
        (
            ".config/pnpm/rc",
            format!("//npm.pkg.github.com/:_authToken={}\n", tok("ghp_")),
        ),
        (
            ".pypirc",
            format!(
                "[pypi]\nusername = __token__\npassword = {}\n",
                tok("pypi-AgE")
            ),
        ),
        (
            ".config/pip/pip.conf",
            format!(
                "[global]\nindex-url = https://u:{}@pypi.corp.example/simple\n",
                tok("p")
            ),
        ),
        (
            ".cargo/credentials.toml",
            format!("[registry]\ntoken = \"{}\"\n", tok("cio")),
        ),
        (
            ".m2/settings.xml",
            format!(
                "<settings><servers><server><id>corp</id><username>u</username>\
                 <password>{}</password></server></servers></settings>\n",
                tok("p")
            ),
        ),
        (
            ".gradle/gradle.properties",
            format!("ossrhUsername=u\nossrhPassword={}\n", tok("p")),
        ),
        (
            ".nuget/NuGet/NuGet.Config",
            format!("<add key=\"ClearTextPassword\" value=\"{}\" />\n", tok("p")),
        ),
        (
            ".config/composer/auth.json",
            format!(r#"{{"github-oauth":{{"github.com":"{}"}}}}"#, tok("ghp_")),
        ),
        (
            ".gem/credentials",
            format!(":rubygems_api_key: {}\n", tok("rubygems_")),
        ),
        // Git credential stores and forges' CLIs.
        (
            ".git-credentials",
            format!("https://u:{}@github.com\n", tok("ghp_")),
        ),
        (
            ".config/git/credentials",
            format!("https://u:{}@gitlab.com\n", tok("glpat-")),
        ),
        (
            ".config/gh/hosts.yml",
            format!("github.com:\n    oauth_token: {}\n", tok("gho_")),
        ),
        (
            ".config/glab-cli/config.yml",
            format!("token: {}\n", tok("glpat-")),
        ),
        (
            ".config/hub",
            format!("github.com:\n- oauth_token: {}\n", tok("ghp_")),
        ),
    ]
}

/// Cloud and PaaS CLIs, databases, ML hubs.
fn cloud_database_and_hub_credentials() -> Vec<(&'static str, String)> {
    vec![
        // Cloud and PaaS CLIs.
        (
            ".aws/credentials",
            format!("[default]\naws_secret_access_key = {}\n", tok("k")),
        ),
        (
            ".azure/msal_token_cache.json",
            format!(r#"{{"AccessToken":"{}"}}"#, tok("eyJ")),
        ),
        (
            ".config/gcloud/application_default_credentials.json",
            format!(
                r#"{{"refresh_token":"{}","type":"authorized_user"}}"#,
                tok("1//")
            ),
        ),
        (
            ".kube/config",
            format!("users:\n- user:\n    token: {}\n", tok("k8s")),
        ),
        (
            ".docker/config.json",
            format!(r#"{{"auths":{{"ghcr.io":{{"auth":"{}"}}}}}}"#, tok("dTpw")),
        ),
        (
            ".config/doctl/config.yaml",
            format!("access-token: {}\n", tok("dop_v1_")),
        ),
        (
            ".fly/config.yml",
            format!("access_token: {}\n", tok("fo1_")),
        ),
        (
            ".local/share/com.vercel.cli/auth.json",
            format!(r#"{{"token":"{}"}}"#, tok("v")),
        ),
        (
            ".config/netlify/config.json",
            format!(
                r#"{{"users":{{"x":{{"auth":{{"token":"{}"}}}}}}}}"#,
                tok("nfp_")
            ),
        ),
        (
            ".netrc",
            format!(
                "machine api.heroku.com\n  login u\n  password {}\n",
                tok("h")
            ),
        ),
        (
            ".terraform.d/credentials.tfrc.json",
            format!(
                r#"{{"credentials":{{"app.terraform.io":{{"token":"{}"}}}}}}"#,
                tok("t")
            ),
        ),
        (
            ".config/rclone/rclone.conf",
            format!("[s3]\ntype = s3\nsecret_access_key = {}\n", tok("r")),
        ),
        (".s3cfg", format!("[default]\nsecret_key = {}\n", tok("s"))),
        (
            ".boto",
            format!("[Credentials]\naws_secret_access_key = {}\n", tok("b")),
        ),
        (".vault-token", tok("hvs.")),
        // Databases.
        (".pgpass", format!("db.example:5432:app:u:{}\n", tok("p"))),
        (".my.cnf", format!("[client]\npassword={}\n", tok("p"))),
        // ML hubs.
        (".cache/huggingface/token", tok("hf_")),
        (
            ".kaggle/kaggle.json",
            format!(r#"{{"username":"u","key":"{}"}}"#, tok("k")),
        ),
    ]
}

/// Chat and mail apps, browsers, password managers, histories, `.env` files, keys.
fn app_history_and_key_files() -> Vec<(&'static str, String)> {
    vec![
        // Chat and mail apps, browsers and password managers.
        (".config/Slack/Cookies", format!("d={}", tok("xoxd-"))),
        (
            ".config/discord/Local Storage/leveldb/000003.log",
            tok("mfa."),
        ),
        (
            ".thunderbird/x.default/logins.json",
            format!(r#"{{"encryptedPassword":"{}"}}"#, tok("M")),
        ),
        (
            ".mozilla/firefox/x.default/logins.json",
            format!(r#"{{"encryptedPassword":"{}"}}"#, tok("M")),
        ),
        (".config/google-chrome/Default/Login Data", tok("v10")),
        (
            ".config/BraveSoftware/Brave-Browser/Default/Cookies",
            tok("v10"),
        ),
        (".password-store/bank.gpg", tok("pgp")),
        (".local/share/keyrings/login.keyring", tok("GnomeKeyring")),
        (
            ".config/Bitwarden CLI/data.json",
            format!(r#"{{"accessToken":"{}"}}"#, tok("eyJ")),
        ),
        // Shell and REPL histories.
        (
            ".bash_history",
            format!("export GITHUB_TOKEN={}\n", tok("ghp_")),
        ),
        (
            ".zsh_history",
            format!(": 1:0;curl -H 'Authorization: Bearer {}'\n", tok("t")),
        ),
        (
            ".python_history",
            format!("openai.api_key = '{}'\n", tok("sk-proj-")),
        ),
        (
            ".local/share/fish/fish_history",
            format!("- cmd: export KEY={}\n", tok("k")),
        ),
        // .env files, a shell rc with a key, and tools cordon has no name for.
        (".env", format!("STRIPE_SECRET_KEY={}\n", tok("sk_live_"))),
        (
            ".zshrc",
            format!("export OPENAI_API_KEY={}\n", tok("sk-proj-")),
        ),
        (
            ".config/someapp/token.json",
            format!(r#"{{"t":"{}"}}"#, tok("ghp_")),
        ),
        (".someapp/creds", tok("ghp_")),
        // Keys.
        (
            ".ssh/id_ed25519",
            format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{}\n", tok("b3Bl")),
        ),
        (".gnupg/private-keys-v1.d/AB.key", tok("Key")),
    ]
}

/// Lays the home: the credentials, an ordinary git identity, and a toolchain under the home.
fn lay_home(env: &Env, files: &[(&str, String)]) {
    for (rel, content) in files {
        env.write_home(rel, content);
    }
    env.write_home(
        ".gitconfig",
        "[user]\n\tname = Dev\n\temail = dev@example.com\n",
    );
    env.write_home(
        ".local/bin/hello-tool",
        "#!/bin/sh\necho \"hello from the home's toolchain\"\n",
    );
    let tool = env.home.join(".local/bin/hello-tool");
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// What the sandbox could read of the home, gathered into the project: every file it can list
/// and every path of the battery opened by name (a hidden name must not open either).
fn loot_script(files: &[(&str, String)]) -> String {
    let mut s = String::from(
        "find \"$HOME\" -path \"$HOME/proj\" -prune -o -type f -print 2>/dev/null | \
         while IFS= read -r f; do cat \"$f\"; done > loot-listed 2>/dev/null; : > loot-named; ",
    );
    for (rel, _) in files {
        s.push_str(&format!("cat \"$HOME/{rel}\" >> loot-named 2>/dev/null; "));
    }
    s.push_str("hello-tool > tool-ran 2>&1 || ~/.local/bin/hello-tool > tool-ran 2>&1; true");
    s
}

fn assert_nothing_leaked(env: &Env, what: &str, o: &std::process::Output) {
    for f in ["loot-listed", "loot-named"] {
        let got = std::fs::read_to_string(env.project.join(f))
            .unwrap_or_else(|e| panic!("{what}: the sandbox left no {f} ({e})\n{}", show(o)));
        if let Some(at) = got.find(MARK) {
            let line = got[..at].rfind('\n').map_or(0, |n| n + 1);
            panic!(
                "{what}: a credential was readable inside ({f}): {:?}\n{}",
                &got[line..(at + 40).min(got.len())],
                show(o)
            );
        }
        let _ = std::fs::remove_file(env.project.join(f));
    }
}

fn battery(env: &Env, args: &[&str], what: &str) {
    let files = credentials();
    lay_home(env, &files);
    let o = env.attempt_with(args, &loot_script(&files));
    assert_eq!(o.status.code(), Some(0), "{what}\n{}", show(&o));
    assert_nothing_leaked(env, what, &o);
    // The check can fail: the listed loot did reach the project, and the home's toolchain ran.
    let ran = std::fs::read_to_string(env.project.join("tool-ran")).unwrap_or_default();
    assert!(
        ran.contains("hello from the home's toolchain"),
        "{what}: {ran}\n{}",
        show(&o)
    );
}

both!(
    no_credential_in_the_home_is_readable_without_a_profile,
    |env: Env| {
        let files = credentials();
        assert!(files.len() >= 50, "{} files", files.len());
        battery(&env, &["--profile", "none"], "--profile none");
    }
);

both!(the_battery_finds_what_a_whole_home_shows, |env: Env| {
    // The control: with the whole home shown, the same battery reads credentials.
    let files = credentials();
    lay_home(&env, &files);
    let p = env.policy_file("whole.toml", "[filesystem]\nhome = \"whole\"\n");
    let o = env.attempt_with(&["--profile", "none", "--policy", &p], &loot_script(&files));
    let listed = std::fs::read_to_string(env.project.join("loot-listed")).unwrap();
    let leaked = listed.matches(MARK).count();
    assert!(
        leaked >= 20,
        "only {leaked} readable with the whole home\n{}",
        show(&o)
    );
});

both!(
    no_credential_is_readable_under_the_claude_profile,
    |env: Env| {
        battery(&env, &["--profile", "claude"], "--profile claude");
    }
);

both!(
    no_credential_is_readable_under_the_codex_profile,
    |env: Env| {
        battery(&env, &["--profile", "codex"], "--profile codex");
    }
);

both!(
    no_credential_is_readable_under_the_other_agents_profiles,
    |env: Env| {
        for p in [
            "gemini", "opencode", "aider", "copilot", "qwen", "crush", "goose",
        ] {
            battery(&env, &["--profile", p], &format!("--profile {p}"));
        }
    }
);

both!(
    no_credential_is_readable_under_the_auto_detected_profile,
    |env: Env| {
        // `cordon run -- claude` picks the claude profile by the command's name.
        let files = credentials();
        lay_home(&env, &files);
        let bin = env.base.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let claude = bin.join("claude");
        std::fs::write(&claude, format!("#!/bin/sh\n{}\n", loot_script(&files))).unwrap();
        std::fs::set_permissions(&claude, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        env.own(&bin);
        let o = env
            .cordon()
            .args(["run", "--no-tty", "--audit"])
            .arg(&env.audit)
            .arg("--")
            .arg(&claude)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let log = std::fs::read_to_string(&env.audit).unwrap();
        assert!(log.contains(r#""profile_detected":"claude""#), "{log}");
        assert_nothing_leaked(&env, "auto-detected (claude)", &o);
    }
);

both!(
    credentials_the_host_writes_during_the_session_stay_out,
    |env: Env| {
        // The sandbox waits for the host's files, then reads what it can by name and by listing.
        let later: &[(&str, &str)] = &[
            (
                ".aws/credentials",
                "[default]\naws_secret_access_key = ZZLEAKaws\n",
            ),
            (
                ".config/gh/hosts.yml",
                "github.com:\n  oauth_token: ZZLEAKgh\n",
            ),
            (
                ".ssh/id_rsa",
                "-----BEGIN OPENSSH PRIVATE KEY-----\nZZLEAKssh\n",
            ),
            (
                ".docker/config.json",
                "{\"auths\":{\"x\":{\"auth\":\"ZZLEAKdocker\"}}}",
            ),
            (".npmrc", "//r.example/:_authToken=ZZLEAKnpm123\n"),
            (
                ".config/git/credentials",
                "https://u:ZZLEAKgit@github.com\n",
            ),
            (".newtool/token", "ZZLEAKnew"),
        ];
        let mut script = String::from(
            ": > ready; i=0; while [ ! -e go ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
         : > loot-named; ",
        );
        for (rel, _) in later {
            script.push_str(&format!("cat \"$HOME/{rel}\" >> loot-named 2>/dev/null; "));
        }
        script.push_str(
            "find \"$HOME\" -path \"$HOME/proj\" -prune -o -type f -print 2>/dev/null | \
         while IFS= read -r f; do cat \"$f\"; done > loot-listed 2>/dev/null; \
         [ -e go ] && echo waited > waited; true",
        );
        let child = env
            .cordon()
            .args(["run", "--no-tty", "--profile", "none", "--audit"])
            .arg(&env.audit)
            .args(["--", "sh", "-c", &script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let ready = env.project.join("ready");
        for _ in 0..300 {
            if ready.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert!(ready.exists(), "the sandbox never started");
        for (rel, content) in later {
            env.write_home(rel, content);
            // The control: the host itself can read what it wrote.
            assert!(
                std::fs::read_to_string(env.home.join(rel))
                    .unwrap()
                    .contains(MARK)
            );
        }
        std::fs::write(env.project.join("go"), "").unwrap();
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(env.project.join("waited").exists(), "{}", show(&o));
        assert_nothing_leaked(&env, "written during the session", &o);
    }
);

both!(
    what_is_shown_works_and_what_holds_a_secret_is_hidden,
    |env: Env| {
        env.write_home(
            ".gitconfig",
            "[user]\n\tname = Shown Dev\n\temail = dev@example.com\n",
        );
        env.write_home(".config/git/ignore", "*.shown-ignore\n");
        env.write_home(
            ".config/git/credentials",
            "https://u:ZZLEAKx1234@github.com\n",
        );
        env.write_home("Documents/private.txt", "not for the agent");
        let o = env.attempt(
            "git config user.name; cat ~/.config/git/ignore; ls -a ~; \
         ls ~/.config/git; cat ~/Documents/private.txt; true",
        );
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(out.contains("Shown Dev"), "{}", show(&o));
        assert!(out.contains("*.shown-ignore"), "{}", show(&o));
        assert!(!out.contains("Documents"), "{}", show(&o));
        assert!(!out.contains("credentials"), "{}", show(&o));
        assert!(
            !all_output(&o).contains("not for the agent"),
            "{}",
            show(&o)
        );
        // The log says what was hidden, and why.
        let log = std::fs::read_to_string(&env.audit).unwrap();
        assert!(log.contains("holds a secret (url-password)"), "{log}");
    }
);

both!(
    the_whole_home_is_shown_only_when_the_policy_says_so,
    |env: Env| {
        env.write_home("Documents/private.txt", "whole-home-doc");
        let p = env.policy_file("whole.toml", "[filesystem]\nhome = \"whole\"\n");
        let o = env.attempt_with(&["--policy", &p], "cat ~/Documents/private.txt");
        assert!(all_output(&o).contains("whole-home-doc"), "{}", show(&o));
        // Loudly: at the start, and in `cordon check`.
        let warned = "warning: the whole home is shown (home = \"whole\"";
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(warned),
            "{}",
            show(&o)
        );
        let c = env.cordon().args(["check", &p]).output().unwrap();
        assert!(
            String::from_utf8_lossy(&c.stderr).contains(warned),
            "{}",
            show(&c)
        );
        // The default hides it: the same command fails.
        let o = env.attempt("cat ~/Documents/private.txt");
        assert!(!all_output(&o).contains("whole-home-doc"), "{}", show(&o));
    }
);

/// Puts the test project's tiny crate in place and runs it with the toolchains of the home:
/// `cargo` found under ~/.cargo/bin, node under ~/.nvm.
fn build_with_home_toolchains(env: &Env, extra: &str) -> std::process::Output {
    env.write_tiny_crate();
    env.run(&format!(
        "unset CARGO_HOME RUSTUP_HOME; {extra} \
         export PATH=$HOME/.cargo/bin:$HOME/.nvm/versions/node/v20.0.0/bin:/usr/bin:/bin; \
         command -v cargo; command -v node; \
         cargo build --offline -q && ./target/debug/tiny && \
         node -e 'console.log(\"node says\", 6 * 7)'"
    ))
}

fn copy_into_home(env: &Env, from: &str, rel: &str) {
    let to = env.home.join(rel);
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(from, &to).unwrap();
}

fn assert_built(env: &Env, o: &std::process::Output) {
    assert_eq!(o.status.code(), Some(0), "{}", show(o));
    let out = String::from_utf8_lossy(&o.stdout);
    let home = env.home.display().to_string();
    assert!(out.contains(&format!("{home}/.cargo/bin/cargo")), "{out}");
    assert!(
        out.contains(&format!("{home}/.nvm/versions/node/v20.0.0/bin/node")),
        "{out}"
    );
    assert!(
        out.contains("tiny says 42") && out.contains("node says 42"),
        "{out}"
    );
}

both!(toolchains_that_live_in_the_home_work, |env: Env| {
    // A cargo binary under ~/.cargo/bin and node under ~/.nvm (as nvm lays it out), found
    // through PATH; cargo keeps its lock and registry under ~/.cargo.
    if !common::need(&["node"], "node") || !Path::new("/usr/bin/cargo").exists() {
        common::skip("debian-cargo", "Debian's cargo (/usr/bin/cargo) and node");
        return;
    }
    copy_into_home(&env, "/usr/bin/cargo", ".cargo/bin/cargo");
    copy_into_home(&env, "/usr/bin/node", ".nvm/versions/node/v20.0.0/bin/node");
    env.write_home(".nvm/alias/default", "v20.0.0\n");
    let o = build_with_home_toolchains(&env, "");
    assert_built(&env, &o);
});

#[test]
fn rustups_cargo_in_the_home_works() {
    // rustup's own layout: its proxy as ~/.cargo/bin/cargo and ~/.rustup with a default
    // toolchain (linked to the machine's, which only root can read here).
    let Some(env) = Env::new(common::Who::Root) else {
        return;
    };
    let real = Path::new("/root/.rustup/toolchains/stable-x86_64-unknown-linux-gnu");
    let proxy = Path::new("/root/.cargo/bin/rustup");
    if !real.is_dir() || !proxy.exists() || !Path::new("/usr/bin/node").exists() {
        common::skip("rustup", "rustup's stable toolchain under /root and node");
        return;
    }
    copy_into_home(&env, "/root/.cargo/bin/rustup", ".cargo/bin/cargo");
    copy_into_home(&env, "/root/.cargo/bin/rustup", ".cargo/bin/rustc");
    copy_into_home(&env, "/usr/bin/node", ".nvm/versions/node/v20.0.0/bin/node");
    env.write_home(
        ".rustup/settings.toml",
        "version = \"12\"\ndefault_toolchain = \"stable-x86_64-unknown-linux-gnu\"\nprofile = \"default\"\n",
    );
    std::os::unix::fs::symlink(
        real,
        env.home
            .join(".rustup/toolchains/stable-x86_64-unknown-linux-gnu"),
    )
    .or_else(|_| {
        std::fs::create_dir_all(env.home.join(".rustup/toolchains"))?;
        std::os::unix::fs::symlink(
            real,
            env.home
                .join(".rustup/toolchains/stable-x86_64-unknown-linux-gnu"),
        )
    })
    .unwrap();
    let o = build_with_home_toolchains(&env, "");
    assert_built(&env, &o);
}

both!(
    a_repository_of_a_group_the_sandbox_cannot_map_is_named_at_start,
    |env: Env| {
        // A shared repository: the user's files, another group's (here `daemon`'s). The sandbox maps
        // the user's own group alone, so git cannot write its metadata inside: the start says why
        // and how to mend it; after the mend, a commit works.
        if !common::need(&["git", "chgrp"], "git and chgrp") {
            return;
        }
        let global = env.base.join("host-gitconfig");
        std::fs::write(&global, "[safe]\n\tdirectory = *\n").unwrap();
        let git = |args: &str| {
            let o = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("cd {} && {args}", env.project.display()))
                // The host's git, as root, in the user's repository.
                .env("GIT_CONFIG_GLOBAL", &global)
                .output()
                .unwrap();
            assert!(o.status.success(), "{args}: {}", show(&o));
        };
        git(
            "git init -q . && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m first",
        );
        env.own(&env.base);
        git("chgrp -R daemon .git");
        let commit = "git -c user.name=a -c user.email=a@b commit -q --allow-empty -m second && echo COMMITTED";
        let o = env.attempt(commit);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("belongs to group `daemon`") && err.contains("chgrp -R"),
            "{}",
            show(&o)
        );
        // The mend it names: the user's own group.
        let own = if env.uid() == 0 {
            "root".to_string()
        } else {
            common::TEST_USER.to_string()
        };
        git(&format!("chgrp -R {own} .git"));
        let o = env.attempt(commit);
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("COMMITTED"),
            "{}",
            show(&o)
        );
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains("cannot map"),
            "{}",
            show(&o)
        );
    }
);

/// A private npm registry stand-in on this variant's `127.0.0.BASE:443` that takes the token
/// `require` alone, `~/.npmrc` as `npmrc` (`{name}` for the registry's name), and the policy
/// that lets the sandbox reach it. `None` when this machine cannot serve HTTPS.
fn private_registry(
    env: &Env,
    base: u8,
    require: &str,
    npmrc: &str,
) -> Option<(common::net::Server, String)> {
    use common::net::{https_443, make_fixture, setup, variant_addr};
    setup(env);
    let name = REGISTRY;
    let addr = &variant_addr(env, base);
    let root = env.base.join("registry");
    std::fs::create_dir_all(&root).unwrap();
    make_fixture(&["npm", root.to_str().unwrap(), &format!("https://{name}")]);
    std::fs::write(root.join(".require-bearer"), require).unwrap();
    env.own(&root);
    env.write_home(".npmrc", &npmrc.replace("{name}", name));
    let (srv, ca) = https_443(env, name, addr, &root)?;
    let pol = format!(
        "[dns]\nhosts = {{ \"{name}\" = \"{addr}\" }}\n\
         [[network.allow]]\nhost = \"{name}\"\nports = [443]\n\
         [tls]\nupstream_ca = \"{}\"\n",
        ca.display()
    );
    Some((srv, pol))
}

const REGISTRY: &str = "npm.corp.example.test";

/// `npm install cordonprobe` in the project's `n/`, after `prefix`; `RC=N` on stdout, then
/// what the package says when it loads.
fn npm_install(prefix: &str) -> String {
    format!(
        "{prefix}mkdir n && cd n && echo '{{}}' > package.json && {} timeout 90 npm install \
           --cache ../npmcache --no-audit --no-fund --no-update-notifier --fetch-retries 0 \
           cordonprobe >&2; echo RC=$?; node -e \"console.log('NPM', require('cordonprobe').probe)\"",
        common::net::UNPROXIED
    )
}

both!(
    npm_installs_with_the_npmrc_token_injected_at_the_wire,
    |env: Env| {
        // A private registry that takes one token; ~/.npmrc holds it, as `npm login` leaves it.
        // Inside, the file holds a placeholder; npm sends it, and the registry gets the real one.
        if !common::need(&["npm", "node"], "npm") {
            return;
        }
        let token = format!("npm_{MARK}{}", "Qx7".repeat(12));
        let npmrc = format!("registry=https://{{name}}/\n//{{name}}/:_authToken={token}\n");
        let Some((srv, pol)) = private_registry(&env, 77, &token, &npmrc) else {
            return;
        };
        let script = npm_install(&format!(
            "cat ~/.npmrc > npmrc-inside; grep -r {MARK} ~ /proc/self/environ 2>/dev/null > found; "
        ));
        let o = common::net::run(&env, &pol, &script);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("NPM cordon-npm-ok"),
            "{}\n{}",
            show(&o),
            srv.log()
        );
        // The registry saw the real token, and refused nothing.
        let log = srv.log();
        assert!(
            log.contains(&format!("HDR authorization: Bearer {token}")),
            "{log}"
        );
        assert!(!log.contains("UNAUTHORIZED"), "{log}");
        // Inside, the file held a placeholder, and the token was nowhere.
        let inside = std::fs::read_to_string(env.project.join("npmrc-inside")).unwrap();
        assert!(
            inside.contains(&format!("//{REGISTRY}/:_authToken=")),
            "{inside}"
        );
        assert!(!inside.contains(MARK), "{inside}");
        let found = std::fs::read_to_string(env.project.join("found")).unwrap_or_default();
        assert!(found.is_empty(), "the token was readable inside: {found}");
    }
);

both!(a_registry_refuses_npm_without_the_token, |env: Env| {
    // The control: the same registry and install with no token in ~/.npmrc is refused, so the
    // test above shows the token arrived.
    if !common::need(&["npm", "node"], "npm") {
        return;
    }
    let npmrc = "registry=https://{name}/\n";
    let Some((srv, pol)) = private_registry(&env, 79, "npm_the_right_one", npmrc) else {
        return;
    };
    let o = common::net::run(&env, &pol, &npm_install(""));
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("RC=0"),
        "{}",
        show(&o)
    );
    assert!(srv.log().contains("UNAUTHORIZED"), "{}", srv.log());
});

both!(
    explain_says_a_home_path_is_hidden_and_how_to_show_it,
    |env: Env| {
        env.write_home(".config/someapp/settings.toml", "x = 1\n");
        let path = env.home.join(".config/someapp/settings.toml");
        let o = env
            .cordon()
            .args(["explain", path.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", show(&o));
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(out.contains("rule: filesystem.home"), "{out}");
        assert!(out.contains("not in the home's view"), "{out}");
        assert!(
            out.contains("home_show = [\"~/.config/someapp/settings.toml\"]"),
            "{out}"
        );
        // Shown by the line it suggests: the same question is then answered by the view's mounts.
        let p = env.policy_file(
            "show.toml",
            "[filesystem]\nhome_show = [\"~/.config/someapp\"]\n",
        );
        let o = env.attempt_with(&["--policy", &p], "cat ~/.config/someapp/settings.toml");
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("x = 1"),
            "{}",
            show(&o)
        );
        // Inside, the agent gets the same answer.
        let o = env.attempt(&format!("cordon explain {} || true", path.display()));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("not in the home's view"),
            "{}",
            show(&o)
        );
    }
);

both!(
    no_credential_is_readable_with_a_read_only_home,
    |env: Env| {
        // `[state] home = "readonly"`: no copy-on-write layer, the same view, read-only.
        let files = credentials();
        lay_home(&env, &files);
        let p = env.policy_file("ro.toml", "[state]\nhome = \"readonly\"\n");
        let o = env.attempt_with(
        &["--profile", "none", "--policy", &p],
        &format!(
            "{}; git config --global user.name > shown-config; echo x > ~/new 2>/dev/null || echo RO > refused",
            loot_script(&files)
        ),
    );
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert_nothing_leaked(&env, "home = \"readonly\"", &o);
        let ran = std::fs::read_to_string(env.project.join("tool-ran")).unwrap_or_default();
        assert!(
            ran.contains("hello from the home's toolchain"),
            "{ran}\n{}",
            show(&o)
        );
        let name = std::fs::read_to_string(env.project.join("shown-config")).unwrap_or_default();
        assert_eq!(name.trim(), "Dev", "{}", show(&o));
        assert!(env.project.join("refused").exists(), "{}", show(&o));
        assert!(!env.home.join("new").exists());
    }
);

both!(
    trace_home_lists_what_a_tool_looked_for_that_the_view_hides,
    |env: Env| {
        env.write_home(".aws/config", "[default]\nregion = x\n");
        env.write_home(".config/tool/settings.json", "{}\n");
        env.write_home(".gitconfig", "[user]\n\tname = Dev\n");
        let script = "cat ~/.aws/config; cd ~/.config && cat tool/settings.json; \
                  cat ~/.gitconfig > /dev/null; test -e ~/never-there; true";
        let o = env.attempt_with(&["--trace-home"], script);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(err.contains("~/.aws/config (cat)"), "{}", show(&o));
        // A relative lookup, against the working directory.
        assert!(
            err.contains("~/.config/tool/settings.json (cat)"),
            "{}",
            show(&o)
        );
        // Shown paths, and paths the host does not have either, are not listed.
        assert!(!err.contains("~/.gitconfig"), "{}", show(&o));
        assert!(!err.contains("never-there"), "{}", show(&o));
        let log = std::fs::read_to_string(&env.audit).unwrap();
        assert!(
            log.contains("looked for a home path the home's view hides"),
            "{log}"
        );
        // Without the flag nothing is traced (the control).
        let o = env.attempt(script);
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains("--trace-home"),
            "{}",
            show(&o)
        );
    }
);
