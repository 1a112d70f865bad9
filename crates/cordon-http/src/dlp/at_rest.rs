//! Secrets in a file at rest (the home's shown configuration), for the home's view: the
//! outbound shapes and a few more, whoever issued them, and secret-named lines.

use regex::bytes::{Regex, RegexSet};

use super::SHAPES;

/// Shapes only a file at rest is checked for (the home's shown configuration): a token kept
/// in a file is hidden whoever issued it, where outbound scanning needs an issuer's hosts for
/// each kind it knows.
const FILE_SHAPES: &[(&str, &str)] = &[
    ("huggingface-token", r"(?-u)\bhf_[A-Za-z0-9]{30,}"),
    ("npm-token", r"(?-u)\bnpm_[A-Za-z0-9]{36,}"),
    ("pypi-token", r"(?-u)\bpypi-AgE[A-Za-z0-9_\-]{40,}"),
    ("digitalocean-token", r"(?-u)\bdo[por]_v1_[a-f0-9]{64}"),
    ("google-api-key", r"(?-u)\bAIza[0-9A-Za-z_\-]{35}"),
    ("google-oauth-token", r"(?-u)\bya29\.[0-9A-Za-z_\-]{20,}"),
    // A secret-named key with a value: `password = …`, `_authToken=…`, `"token": "…"`,
    // `api_key: …`. Values that name where the secret is (`$VAR`, `${VAR}`, a call) are not
    // secrets; six characters at least, so `true`, `none` and `store` pass.
    (
        "password-line",
        r#"(?i-u)(?:password|passwd|secret|token|api[_-]?key|_auth|access[_-]?key|private[_-]?key|credentials?)[A-Za-z0-9_.\-]*["']?[ \t]*[:=][ \t]*["']?[^\s"'$(),;<>{}\[\]]{6,}(?:["',;]|[ \t]*(?:\r?\n|$))"#,
    ),
    (
        "password-line",
        r"(?i-u)<(?:password|passphrase|privateKey|token)>[^<$\s]{4,}</",
    ),
    (
        "password-line",
        r"(?i-u)authorization:[ \t]*(?:basic|bearer|token)[ \t]+[A-Za-z0-9+/=._\-]{8,}",
    ),
    // A URL carrying a password: `https://user:secret@host`.
    (
        "url-password",
        r"(?i-u)\b[a-z][a-z0-9+.\-]{1,15}://[^\s/:@]+:[^\s/@$]{3,}@[A-Za-z0-9]",
    ),
];

/// The shapes a file at rest is checked for, compiled when first needed.
static FILE_COMPILED: std::sync::LazyLock<RegexSet> = std::sync::LazyLock::new(|| {
    RegexSet::new(SHAPES.iter().chain(FILE_SHAPES).map(|(_, p)| *p))
        .unwrap_or_else(|_| RegexSet::empty())
});

/// What kind of secret a file's `content` holds, if any: a token shape outbound scanning
/// knows, one more only a file is checked for, a secret-named key with a value, a URL with a
/// password. For configuration at rest (the home's shown files), where a false positive
/// hides a file and a miss shows a credential, so it errs towards hiding.
///
/// ```
/// use cordon_http::dlp::secret_in_file;
/// assert_eq!(secret_in_file(b"//registry.npmjs.org/:_authToken=abcdef123456").as_deref(), Some("password-line"));
/// assert!(secret_in_file(b"[user]\n\tname = A\n\temail = a@example.com\n").is_none());
/// assert!(secret_in_file(b"export GITHUB_TOKEN=$(pass show gh)\n").is_none());
/// // A command that prints a key is not one (Claude Code's `apiKeyHelper`).
/// assert!(secret_in_file(br#"{"apiKeyHelper": "printenv ANTHROPIC_API_KEY"}"#).is_none());
/// assert!(secret_in_file(b"[client]\npassword=hunter2hunter2\n").is_some());
/// ```
pub fn secret_in_file(content: &[u8]) -> Option<String> {
    let set = &*FILE_COMPILED;
    let m = set.matches(content);
    let i = m.iter().next()?;
    let all = SHAPES.iter().chain(FILE_SHAPES);
    let (kind, pattern) = all.clone().nth(i)?;
    // AWS's documentation key opens nothing (as in outbound scanning).
    if *kind == "aws-access-key"
        && Regex::new(pattern)
            .ok()?
            .find_iter(content)
            .all(|x| x.as_bytes().ends_with(b"EXAMPLE"))
        && m.iter().nth(1).is_none()
    {
        return None;
    }
    Some((*kind).to_string())
}
