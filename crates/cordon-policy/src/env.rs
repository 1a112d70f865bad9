//! Environment filtering: which host variables the sandboxed command sees.
//!
//! A host variable passes when its name equals a `pass` entry exactly, or matches a `pass` glob
//! and does not [look like a secret](looks_secret). Names that change how programs start
//! (`LD_*`, `BASH_ENV`, `ENV`, `GCONV_PATH`) are always dropped, whatever the policy says.
//! `set` entries are applied last and win.

use std::collections::BTreeMap;
use std::ffi::OsString;

use crate::pattern::glob_match;
use crate::plan::EnvPlan;

/// Substrings that make a name look like a secret (compared upper-case).
const SECRET_PARTS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "API_KEY",
    "APIKEY",
    "PRIVATE_KEY",
    "ACCESS_KEY",
    "SESSION_KEY",
    "AUTH",
    "COOKIE",
];

/// Suffixes that make a name look like a secret.
const SECRET_SUFFIXES: &[&str] = &["_KEY", "_PAT"];

/// Prefixes that make a name look like a secret.
const SECRET_PREFIXES: &[&str] = &[
    "AWS_",
    "GITHUB_",
    "GH_",
    "GITLAB_",
    "AZURE_",
    "GOOGLE_",
    "GCP_",
    "OPENAI_",
    "ANTHROPIC_",
    "HF_",
    "NPM_TOKEN",
    "DOCKER_",
    "VAULT_",
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
];

/// Names that are never passed or set, whatever the policy says.
const NEVER_PASSABLE: &[&str] = &["BASH_ENV", "ENV", "GCONV_PATH"];

/// Whether `name` looks like it holds a secret (case-insensitive). Such a variable only passes
/// when a `pass` entry names it exactly; a glob never lets it through.
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    names_secret(name) || SECRET_PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// Whether `name` itself says it holds a secret (`*TOKEN*`, `*_KEY`, …), not merely a vendor
/// prefix (`AWS_REGION`, `GITHUB_WORKSPACE`): what secret scanning looks for by value.
pub fn names_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_PARTS.iter().any(|p| upper.contains(p))
        || SECRET_SUFFIXES.iter().any(|s| upper.ends_with(s))
}

/// Whether `name` is always dropped from the sandbox environment: `LD_*`, `BASH_ENV`, `ENV`,
/// `GCONV_PATH`, and names that cannot be variable names (empty, or containing `=` or NUL).
pub fn never_passable(name: &str) -> bool {
    name.is_empty()
        || name.contains(['=', '\0'])
        || name.starts_with("LD_")
        || NEVER_PASSABLE.contains(&name)
}

/// Why a `pass` entry is not a valid name or glob, if it is not.
pub(crate) fn glob_error(pattern: &str) -> Option<&'static str> {
    if pattern.is_empty() {
        Some("is empty")
    } else if pattern.contains("**") {
        Some("contains `**`; a single `*` already matches any run of characters")
    } else if !pattern
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'*')
    {
        Some("may only contain letters, digits, `_` and `*`")
    } else if pattern.as_bytes()[0].is_ascii_digit() {
        Some("starts with a digit")
    } else {
        None
    }
}

/// Why `name` is not a valid variable name for `env.set`, if it is not.
pub(crate) fn name_error(name: &str) -> Option<&'static str> {
    if name.contains('*') {
        Some("is a glob; `set` needs an exact name")
    } else {
        glob_error(name)
    }
}

/// Whether every name the `pass` entry can match is always dropped (`LD_PRELOAD`, `LD_*`, ...).
pub(crate) fn only_never_passable(pattern: &str) -> bool {
    let literal_prefix = pattern.split('*').next().unwrap_or("");
    if pattern.contains('*') {
        literal_prefix.starts_with("LD_")
    } else {
        never_passable(pattern)
    }
}

impl EnvPlan {
    /// Whether a host variable called `name` is passed through (before `set` is applied).
    pub fn passes(&self, name: &str) -> bool {
        if never_passable(name) {
            return false;
        }
        self.pass.iter().any(|p| p == name)
            || (!looks_secret(name)
                && self
                    .pass
                    .iter()
                    .any(|p| p.contains('*') && glob_match(p, name)))
    }

    /// The sandbox environment built from the host's: the variables that [pass](Self::passes),
    /// then the `set` entries (which win). Non-UTF-8 names never pass; values containing NUL
    /// are dropped. The result is sorted by name, one entry per name.
    pub fn apply<I: IntoIterator<Item = (OsString, OsString)>>(
        &self,
        host: I,
    ) -> Vec<(OsString, OsString)> {
        let mut out: BTreeMap<String, OsString> = BTreeMap::new();
        for (name, value) in host {
            let Ok(name) = name.into_string() else {
                continue;
            };
            if value.as_encoded_bytes().contains(&0) || !self.passes(&name) {
                continue;
            }
            // The first occurrence wins, as with getenv(3).
            out.entry(name).or_insert(value);
        }
        for (name, value) in &self.set {
            if never_passable(name) || value.contains('\0') {
                continue;
            }
            out.insert(name.clone(), OsString::from(value));
        }
        out.into_iter()
            .map(|(k, v)| (OsString::from(k), v))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    fn plan(pass: &[&str], set: &[(&str, &str)]) -> EnvPlan {
        EnvPlan {
            pass: pass.iter().map(|s| s.to_string()).collect(),
            set: set
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn host(vars: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        vars.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<String> {
        env.iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn secrets() {
        for s in [
            "GITHUB_TOKEN",
            "github_token",
            "MY_SECRET",
            "DB_PASSWORD",
            "PGPASSWD",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "STRIPE_API_KEY",
            "SENDGRID_APIKEY",
            "MY_PRIVATE_KEY",
            "AWS_ACCESS_KEY_ID",
            "AWS_REGION",
            "S3_ACCESS_KEY",
            "FOO_SESSION_KEY",
            "BASIC_AUTH",
            "OAUTH_CLIENT",
            "SESSION_COOKIE",
            "SIGNING_KEY",
            "GITLAB_PAT",
            "MY_PAT",
            "GH_HOST",
            "AZURE_TENANT",
            "GCP_PROJECT",
            "OPENAI_BASE_URL",
            "ANTHROPIC_MODEL",
            "HF_HOME",
            "NPM_TOKEN",
            "NPM_TOKEN_2",
            "DOCKER_HOST",
            "VAULT_ADDR",
            "SSH_AUTH_SOCK",
            "ssh_auth_sock",
            "GPG_AGENT_INFO",
        ] {
            assert!(looks_secret(s), "{s} should look secret");
        }
        for s in [
            "LC_ALL",
            "LANG",
            "PATH",
            "TERM",
            "HOME",
            "KEYBOARD",
            "PATH_X",
            "NPM_CONFIG_PREFIX",
            "SSH_CONNECTION",
            "CARGO_HOME",
            "MY_KEYS",
            "PATTERN",
        ] {
            assert!(!looks_secret(s), "{s} should not look secret");
        }
    }

    #[test]
    fn never_passable_names() {
        for s in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "LD_AUDIT",
            "BASH_ENV",
            "ENV",
            "GCONV_PATH",
        ] {
            assert!(never_passable(s), "{s}");
        }
        assert!(never_passable(""));
        assert!(never_passable("A=B"));
        assert!(never_passable("A\0B"));
        for s in ["ENVIRONMENT", "LDFLAGS", "MY_ENV", "PATH"] {
            assert!(!never_passable(s), "{s}");
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("LC_*", "LC_ALL"));
        assert!(glob_match("LC_*", "LC_"));
        assert!(!glob_match("LC_*", "LANG"));
        assert!(!glob_match("LC_*", "XLC_ALL"));
        assert!(glob_match("*_HOME", "CARGO_HOME"));
        assert!(!glob_match("*_HOME", "CARGO_HOMES"));
        assert!(glob_match("A*B*C", "AxxBxxC"));
        assert!(glob_match("A*B*C", "ABC"));
        assert!(glob_match("A*B*C", "ABBBC"));
        assert!(!glob_match("A*B*C", "ACB"));
        assert!(glob_match("*", "ANYTHING"));
        assert!(glob_match("*", ""));
        assert!(glob_match("PATH", "PATH"));
        assert!(!glob_match("PATH", "PATHS"));
        assert!(!glob_match("lc_*", "LC_ALL"), "case-sensitive");
    }

    #[test]
    fn glob_validation() {
        assert_eq!(glob_error("LC_*"), None);
        assert_eq!(glob_error("*"), None);
        assert_eq!(glob_error("_X1"), None);
        assert!(glob_error("").unwrap().contains("empty"));
        assert!(glob_error("LC_**").unwrap().contains("**"));
        assert!(glob_error("LC-ALL").unwrap().contains("letters"));
        assert!(glob_error("LC?").unwrap().contains("letters"));
        assert!(glob_error("É").unwrap().contains("letters"));
        assert!(glob_error("1X").unwrap().contains("digit"));
        assert!(name_error("A*").unwrap().contains("exact"));
        assert_eq!(name_error("FOO"), None);
    }

    #[test]
    fn only_never_passable_patterns() {
        assert!(only_never_passable("LD_PRELOAD"));
        assert!(only_never_passable("LD_*"));
        assert!(only_never_passable("LD_LIB*"));
        assert!(only_never_passable("BASH_ENV"));
        assert!(!only_never_passable("*"));
        assert!(!only_never_passable("L*"));
        assert!(!only_never_passable("ENV_*"));
    }

    #[test]
    fn exact_pass_allows_a_secret_but_a_glob_does_not() {
        let p = plan(&["GITHUB_TOKEN", "GH_*", "LC_*"], &[]);
        let env = p.apply(host(&[
            ("GITHUB_TOKEN", "t"),
            ("GH_HOST", "h"),
            ("LC_ALL", "C"),
            ("LC_API_KEY", "k"),
            ("OTHER", "o"),
        ]));
        assert_eq!(names(&env), ["GITHUB_TOKEN", "LC_ALL"]);
        assert_eq!(env[0].1, OsString::from("t"));
    }

    #[test]
    fn never_passable_even_when_named() {
        let p = plan(
            &["LD_PRELOAD", "BASH_ENV", "ENV", "GCONV_PATH", "*"],
            &[("LD_AUDIT", "x")],
        );
        let env = p.apply(host(&[
            ("LD_PRELOAD", "/evil.so"),
            ("LD_LIBRARY_PATH", "/x"),
            ("BASH_ENV", "/x"),
            ("ENV", "/x"),
            ("GCONV_PATH", "/x"),
            ("", "empty"),
            ("A=B", "c"),
            ("FINE", "1"),
        ]));
        assert_eq!(names(&env), ["FINE"]);
    }

    #[test]
    fn set_wins_and_adds() {
        let p = plan(
            &["TERM", "LANG"],
            &[("TERM", "dumb"), ("CORDON_SANDBOX", "1")],
        );
        let env = p.apply(host(&[("TERM", "xterm"), ("LANG", "C.UTF-8"), ("X", "y")]));
        assert_eq!(
            env,
            vec![
                ("CORDON_SANDBOX".into(), "1".into()),
                ("LANG".into(), "C.UTF-8".into()),
                ("TERM".into(), "dumb".into()),
            ]
        );
    }

    #[test]
    fn non_utf8_names_never_pass_but_values_may_be_anything() {
        let p = plan(&["*", "PATH"], &[]);
        let bad_name = OsString::from_vec(vec![b'P', 0xff]);
        let odd_value = OsString::from_vec(vec![b'/', 0xfe]);
        let env = p.apply(vec![
            (bad_name, OsString::from("x")),
            (OsString::from("PATH"), odd_value.clone()),
            (
                OsString::from("NUL"),
                OsString::from_vec(vec![b'a', 0, b'b']),
            ),
        ]);
        assert_eq!(env, vec![(OsString::from("PATH"), odd_value)]);
    }

    #[test]
    fn duplicate_host_names_keep_the_first() {
        let p = plan(&["A"], &[]);
        let env = p.apply(host(&[("A", "1"), ("A", "2")]));
        assert_eq!(env, vec![("A".into(), "1".into())]);
    }

    #[test]
    fn empty_plan_passes_nothing() {
        let p = plan(&[], &[]);
        assert!(p.apply(host(&[("PATH", "/bin")])).is_empty());
    }
}
