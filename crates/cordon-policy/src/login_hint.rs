//! Logins that cannot be brokered: which command lines start one, and what to say instead.
//!
//! cordon brokers a first login at the provider's token endpoint (the code exchange), but a
//! login whose browser redirects to `http://localhost:PORT` cannot finish inside: the browser
//! runs on the host, and the sandbox's loopback is not the host's, so the redirect never
//! reaches the agent. [`login_hint`] is pure: it reads the command line (through the same
//! runners [`crate::detect`] sees through) and the few facts of the host that decide whether
//! such a flow is about to start, and names the flow; [`LoginHint::line`] holds the wording,
//! in this one place.

use crate::detect::agent_args;

/// A login flow that cannot finish inside, about to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginHint {
    /// `codex login` without `--device-auth` or `--with-api-key`: ChatGPT's browser login,
    /// redirected to `localhost:1455`.
    CodexBrowserLogin,
    /// A first `gemini` run with no login and no API key: it offers the Google browser login,
    /// redirected to a `localhost` port.
    GeminiBrowserLogin,
}

impl LoginHint {
    /// The one line cordon prints at start (without its `cordon: ` prefix).
    pub fn line(self) -> &'static str {
        match self {
            Self::CodexBrowserLogin => {
                "login: `codex login` signs in through a browser that redirects to localhost:1455, which inside the sandbox is not the host's, so it cannot finish here; run `codex login --device-auth` instead (cordon brokers it), or log in on the host first: cordon then shows the login inside with placeholders"
            }
            Self::GeminiBrowserLogin => {
                "login: gemini has no login here (no ~/.gemini/oauth_creds.json, no GEMINI_API_KEY or GOOGLE_API_KEY), and its Google browser login redirects to a localhost port, which inside the sandbox is not the host's, so it cannot finish here; run `NO_BROWSER=true gemini` instead (you paste the code; cordon brokers it), or log in on the host first: cordon then shows the login inside with placeholders"
            }
        }
    }
}

/// What of the host decides whether a first run of an agent starts a browser login.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostLogins {
    /// `~/.gemini/oauth_creds.json` exists on the host.
    pub gemini_oauth_creds: bool,
    /// Another way in is set up: `GEMINI_API_KEY` or `GOOGLE_API_KEY` (in the environment or
    /// in `~/.gemini/.env`, which gemini loads), or Vertex AI (`GOOGLE_GENAI_USE_VERTEXAI`).
    pub gemini_api_key: bool,
    /// `NO_BROWSER` is set to `true` (gemini then uses the code-pasting flow).
    pub no_browser: bool,
}

impl HostLogins {
    /// Read from the host: `home` is the user's home, `env` looks a variable up.
    pub fn read(home: &std::path::Path, env: &dyn Fn(&str) -> Option<String>) -> Self {
        let set = |n: &str| env(n).is_some_and(|v| !v.is_empty());
        let dot_env = std::fs::read_to_string(home.join(".gemini/.env")).unwrap_or_default();
        let in_dot_env = |n: &str| {
            dot_env.lines().any(|l| {
                let l = l.trim_start().trim_start_matches("export ").trim_start();
                l.strip_prefix(n)
                    .and_then(|r| r.strip_prefix('='))
                    .is_some_and(|v| !v.trim().is_empty())
            })
        };
        Self {
            gemini_oauth_creds: home.join(".gemini/oauth_creds.json").exists(),
            gemini_api_key: ["GEMINI_API_KEY", "GOOGLE_API_KEY"]
                .iter()
                .any(|n| set(n) || in_dot_env(n))
                || env("GOOGLE_GENAI_USE_VERTEXAI").is_some_and(|v| v == "true"),
            no_browser: env("NO_BROWSER").is_some_and(|v| v == "true"),
        }
    }
}

/// The login that cannot be brokered which `argv` starts under `profile` (the active
/// profile's name), if any. `package_of` is as for [`crate::detect::detect`].
pub fn login_hint(
    argv: &[String],
    profile: &str,
    host: &HostLogins,
    package_of: &dyn Fn(&str) -> Option<String>,
) -> Option<LoginHint> {
    match profile {
        "codex" => {
            let args = agent_args(argv, &["codex"], &["@openai/codex"], package_of)?;
            // Global options before the subcommand take a value: `-c k=v`, `-m MODEL`, ….
            let with_value = [
                "-c",
                "--config",
                "-m",
                "--model",
                "-p",
                "--profile",
                "-C",
                "--cd",
                "-s",
                "--sandbox",
                "-a",
                "--ask-for-approval",
                "-i",
                "--image",
                "--enable",
                "--disable",
            ];
            let mut i = 0;
            while i < args.len() && args[i].starts_with('-') {
                i += if with_value.contains(&args[i].as_str()) {
                    2
                } else {
                    1
                };
            }
            if args.get(i).map(String::as_str) != Some("login") {
                return None;
            }
            let rest = &args[i + 1..];
            let other_way = rest.iter().any(|a| {
                matches!(
                    a.split('=').next().unwrap_or_default(),
                    "--device-auth" | "--with-api-key" | "--api-key" | "-h" | "--help"
                ) || a == "status"
            });
            (!other_way).then_some(LoginHint::CodexBrowserLogin)
        }
        "gemini" => {
            // Only a run of gemini itself (a first run offers the login); not `gemini mcp`, …
            let args = agent_args(argv, &["gemini"], &["@google/gemini-cli"], package_of)?;
            let informational = args.iter().any(|a| {
                matches!(
                    a.as_str(),
                    "-h" | "--help" | "-v" | "--version" | "mcp" | "extensions"
                )
            });
            let logged_in = host.gemini_oauth_creds || host.gemini_api_key || host.no_browser;
            (!logged_in && !informational).then_some(LoginHint::GeminiBrowserLogin)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn codex_browser_login_only() {
        let h = HostLogins::default();
        let hint = |s: &str| login_hint(&v(s), "codex", &h, &none);
        for s in [
            "codex login",
            "npx @openai/codex login",
            "npx -y @openai/codex@latest login",
            "env FOO=1 codex -c model=o3 login",
            "/usr/local/bin/codex login",
        ] {
            assert_eq!(hint(s), Some(LoginHint::CodexBrowserLogin), "{s}");
        }
        for s in [
            "codex login --device-auth",
            "codex login --with-api-key",
            "codex login status",
            "codex exec login",
            "codex exec hello",
            "codex",
            "sh -c codex",
            "codex logout",
        ] {
            assert_eq!(hint(s), None, "{s}");
        }
        // Another profile's session never gets codex's line.
        assert_eq!(login_hint(&v("codex login"), "claude", &h, &none), None);
    }

    #[test]
    fn gemini_first_run_without_a_login() {
        let h = HostLogins::default();
        for s in ["gemini", "npx @google/gemini-cli", "gemini -p hi"] {
            assert_eq!(
                login_hint(&v(s), "gemini", &h, &none),
                Some(LoginHint::GeminiBrowserLogin),
                "{s}"
            );
        }
        assert_eq!(
            login_hint(&v("gemini --version"), "gemini", &h, &none),
            None
        );
        assert_eq!(login_hint(&v("sh"), "gemini", &h, &none), None);
        for h in [
            HostLogins {
                gemini_oauth_creds: true,
                ..Default::default()
            },
            HostLogins {
                gemini_api_key: true,
                ..Default::default()
            },
            HostLogins {
                no_browser: true,
                ..Default::default()
            },
        ] {
            assert_eq!(login_hint(&v("gemini"), "gemini", &h, &none), None, "{h:?}");
        }
    }

    #[test]
    fn host_facts_are_read() {
        let d = std::env::temp_dir().join(format!("cordon-login-hint-{}", std::process::id()));
        std::fs::create_dir_all(d.join(".gemini")).unwrap();
        let env = |n: &str| (n == "GOOGLE_API_KEY").then(|| "k".to_string());
        let h = HostLogins::read(&d, &env);
        assert!(h.gemini_api_key && !h.gemini_oauth_creds && !h.no_browser);
        std::fs::write(d.join(".gemini/oauth_creds.json"), "{}").unwrap();
        assert!(HostLogins::read(&d, &none).gemini_oauth_creds);
        std::fs::remove_file(d.join(".gemini/oauth_creds.json")).unwrap();
        std::fs::write(d.join(".gemini/.env"), "# keys\nGEMINI_API_KEY=\n").unwrap();
        assert!(!HostLogins::read(&d, &none).gemini_api_key);
        std::fs::write(d.join(".gemini/.env"), "export GEMINI_API_KEY=AIzaX\n").unwrap();
        assert!(HostLogins::read(&d, &none).gemini_api_key);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
