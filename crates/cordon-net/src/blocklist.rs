//! The DNS blocklist: names the sandbox may not even resolve.
//!
//! Matching rule (the same for built-in entries and user `block` patterns), after both sides are
//! normalised (lower case, no trailing dot):
//! - a bare pattern `example.com` matches `example.com` itself and every name below it
//!   (`a.example.com`, `a.b.example.com`), but not `badexample.com`;
//! - a wildcard pattern `*.example.com` matches only names strictly below `example.com`, not
//!   `example.com` itself;
//! - `*` may only appear as the whole first label; anything else is an invalid pattern.
//!
//! The rule reported for a match is `builtin:<domain>` for the built-in list and
//! `block:<pattern as normalised>` for user patterns.

use crate::name::{self, NameError, is_at_or_below, is_strictly_below};

/// Built-in blocklist: services whose main use from an agent's sandbox is getting data out or a
/// tunnel in. Each entry matches itself and its subdomains.
pub const BUILTIN_BLOCKLIST: &[&str] = &[
    // Tunnels: expose a local port to the internet, or carry traffic out.
    "ngrok.io",
    "ngrok-free.app",
    "ngrok-free.dev",
    "ngrok.app",
    "ngrok.dev",
    "ngrok-agent.com",
    "trycloudflare.com",
    "serveo.net",
    "serveousercontent.com",
    "localtunnel.me",
    "loca.lt",
    "zrok.io",
    "devtunnels.ms",
    "bore.pub",
    "localhost.run",
    "lhr.life",
    "lhr.rocks",
    "pinggy.io",
    "pinggy.link",
    "pinggy.online",
    "tunnelmole.net",
    "tunnelmole.com",
    "localxpose.io",
    "loclx.io",
    "telebit.cloud",
    "pagekite.me",
    "sharedwithexpose.com",
    "playit.gg",
    "packetriot.com",
    "portmap.io",
    "localto.net",
    // Paste sites.
    "pastebin.com",
    "paste.ee",
    "hastebin.com",
    "ghostbin.com",
    "ghostbin.co",
    "dpaste.org",
    "dpaste.com",
    "termbin.com",
    "ix.io",
    "sprunge.us",
    "paste.rs",
    "rentry.co",
    "rentry.org",
    "controlc.com",
    "privatebin.net",
    "justpaste.it",
    "pastes.dev",
    "bpa.st",
    // File drops.
    "transfer.sh",
    "file.io",
    "gofile.io",
    "catbox.moe",
    "litterbox.catbox.moe",
    "filebin.net",
    "0x0.st",
    "temp.sh",
    "wetransfer.com",
    "we.tl",
    "bashupload.com",
    "oshi.at",
    "tmpfiles.org",
    "uguu.se",
    "pixeldrain.com",
    "sendspace.com",
    "keep.sh",
    "x0.at",
    "ufile.io",
    "filetransfer.io",
    // Request catchers and out-of-band interaction services.
    "webhook.site",
    "requestbin.com",
    "requestbin.net",
    "pipedream.net",
    "m.pipedream.net",
    "hookbin.com",
    "beeceptor.com",
    "requestcatcher.com",
    "postb.in",
    "ptsv2.com",
    "ptsv3.com",
    "mockbin.org",
    "smee.io",
    "interact.sh",
    "interactsh.com",
    "oast.pro",
    "oast.live",
    "oast.site",
    "oast.online",
    "oast.fun",
    "oast.me",
    "oastify.com",
    "burpcollaborator.net",
    "canarytokens.com",
    "canarytokens.org",
    "dnslog.cn",
    "dnslog.link",
    "ceye.io",
    "eyes.sh",
];

/// A validated, normalised blocklist pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    /// The domain the pattern is anchored at.
    base: String,
    /// `*.base`: strict subdomains only.
    wildcard: bool,
}

impl Pattern {
    /// Parses a user pattern (`example.com` or `*.example.com`, any case, optional trailing dot).
    pub(crate) fn parse(pattern: &str) -> Result<Self, NameError> {
        let (wildcard, rest) = match pattern.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, pattern),
        };
        let base = name::normalize(rest)?;
        Ok(Self { base, wildcard })
    }

    /// True when the normalised `name` matches.
    pub(crate) fn matches(&self, name: &str) -> bool {
        if self.wildcard {
            is_strictly_below(name, &self.base)
        } else {
            is_at_or_below(name, &self.base)
        }
    }

    /// The pattern as it is reported in rules.
    pub(crate) fn display(&self) -> String {
        if self.wildcard {
            format!("*.{}", self.base)
        } else {
            self.base.clone()
        }
    }
}

/// A compiled blocklist: the built-in entries plus validated user patterns.
#[derive(Debug, Clone)]
pub(crate) struct Blocklist {
    user: Vec<Pattern>,
}

impl Blocklist {
    /// Validates the user patterns; the built-in list is always included.
    pub(crate) fn new(user: &[String]) -> Result<Self, (String, NameError)> {
        let user = user
            .iter()
            .map(|p| Pattern::parse(p).map_err(|e| (p.clone(), e)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { user })
    }

    /// The rule blocking the normalised `name`, if any (built-in entries first).
    pub(crate) fn check(&self, name: &str) -> Option<String> {
        if let Some(b) = BUILTIN_BLOCKLIST
            .iter()
            .find(|base| is_at_or_below(name, base))
        {
            return Some(format!("builtin:{b}"));
        }
        self.user
            .iter()
            .find(|p| p.matches(name))
            .map(|p| format!("block:{}", p.display()))
    }
}

/// Checks `name` against the built-in blocklist and the extra `patterns` (see the module docs
/// for the matching rule). Returns the matching rule (`builtin:<domain>` or `block:<pattern>`).
///
/// Invalid patterns never match here ([`crate::Resolver::new`] rejects them up front), and a name
/// that is not a valid domain name matches nothing.
pub fn blocked(name: &str, patterns: &[String]) -> Option<String> {
    let name = name::normalize(name).ok()?;
    let user = patterns
        .iter()
        .filter_map(|p| Pattern::parse(p).ok())
        .collect();
    Blocklist { user }.check(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_entries_are_valid_and_normalised() {
        for entry in BUILTIN_BLOCKLIST {
            assert_eq!(name::normalize(entry).as_deref(), Ok(*entry), "{entry}");
        }
    }

    #[test]
    fn builtin_matches_self_and_subdomains() {
        assert_eq!(
            blocked("ngrok.io", &[]).as_deref(),
            Some("builtin:ngrok.io")
        );
        assert_eq!(
            blocked("abc.NGROK-free.app.", &[]).as_deref(),
            Some("builtin:ngrok-free.app")
        );
        assert_eq!(
            blocked("litterbox.catbox.moe", &[]).as_deref(),
            Some("builtin:catbox.moe")
        );
        assert_eq!(
            blocked("x.y.oast.fun", &[]).as_deref(),
            Some("builtin:oast.fun")
        );
        assert_eq!(blocked("notngrok.io", &[]), None);
        assert_eq!(blocked("github.com", &[]), None);
    }

    #[test]
    fn user_patterns() {
        let pats = vec!["*.Evil.example".to_string(), "bad.test.".to_string()];
        assert_eq!(blocked("evil.example", &pats), None);
        assert_eq!(
            blocked("a.evil.example", &pats).as_deref(),
            Some("block:*.evil.example")
        );
        assert_eq!(
            blocked("bad.test", &pats).as_deref(),
            Some("block:bad.test")
        );
        assert_eq!(
            blocked("deep.sub.BAD.test", &pats).as_deref(),
            Some("block:bad.test")
        );
        assert_eq!(blocked("notbad.test", &pats), None);
    }

    #[test]
    fn invalid_patterns_rejected() {
        for bad in [
            "*",
            "*.",
            "a.*.b",
            "**.x",
            "",
            "x..y",
            "exa mple.com",
            "*x.com",
        ] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Blocklist::new(&["ok.test".into(), "a.*.b".into()]).is_err());
    }

    #[test]
    fn garbage_names_never_match_or_panic() {
        assert_eq!(blocked("", &[]), None);
        assert_eq!(blocked("..", &[]), None);
        assert_eq!(blocked("ngrok.io\0", &[]), None);
    }
}
