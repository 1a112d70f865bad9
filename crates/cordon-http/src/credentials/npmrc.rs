//! The registry tokens an npm config file keeps: `//HOST[:PORT]/PATH/:_authToken=VALUE`, the
//! form `npm login` and `npm config set` write. The registry is clear from the line, so a
//! shown `~/.npmrc` can hold a placeholder that the HTTP layer swaps back for that host alone.

/// One registry's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpmToken {
    /// The registry's host, with its port when the line names one (`npm.pkg.github.com`,
    /// `localhost:4873`).
    pub registry: String,
    /// The token, as written (quotes taken off).
    pub token: String,
}

impl NpmToken {
    /// The host part of [`NpmToken::registry`] (without a port), for host rules.
    pub fn host(&self) -> &str {
        self.registry
            .rsplit_once(':')
            .filter(|(_, p)| p.chars().all(|c| c.is_ascii_digit()))
            .map_or(self.registry.as_str(), |(h, _)| h)
    }
}

/// Every `_authToken` line with a registry and a literal value, in file order. Values that
/// name a variable (`${NPM_TOKEN}`) are npm's to expand: not a secret here.
///
/// ```
/// use cordon_http::credentials::npmrc::tokens;
/// let t = tokens("registry=https://r.example/\n//r.example/:_authToken=\"npm_abc\"\n//x/:_authToken=${T}\n");
/// assert_eq!(t.len(), 1);
/// assert_eq!((t[0].registry.as_str(), t[0].token.as_str()), ("r.example", "npm_abc"));
/// ```
pub fn tokens(text: &str) -> Vec<NpmToken> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l.strip_prefix("//")?;
            let (target, value) = rest.split_once(":_authToken")?;
            let value = value.trim_start().strip_prefix('=')?.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            let registry = target.split('/').next()?.to_ascii_lowercase();
            let ok = !registry.is_empty()
                && registry
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c));
            (ok && !value.is_empty() && !value.contains("${")).then(|| NpmToken {
                registry,
                token: value.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_every_form_npm_writes() {
        let t = tokens(
            "; comment\n//registry.npmjs.org/:_authToken=npm_A\n\
             //npm.pkg.github.com/owner/:_authToken = ghp_B\n\
             //localhost:4873/:_authToken=\"C\"\n//bad host/:_authToken=D\n_auth=xyz\n",
        );
        let got: Vec<(&str, &str, &str)> = t
            .iter()
            .map(|x| (x.registry.as_str(), x.host(), x.token.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("registry.npmjs.org", "registry.npmjs.org", "npm_A"),
                ("npm.pkg.github.com", "npm.pkg.github.com", "ghp_B"),
                ("localhost:4873", "localhost", "C"),
            ]
        );
    }
}
