//! The DNS blocklist: names the sandbox may not even resolve.
//!
//! The list is the plan's (`[dns] block`): the built-in entries first (tunnels, paste sites,
//! file drops, request catchers — they live in cordon's built-in policy, so `cordon check`
//! prints them), then the user's. Matching is [`HostPattern`]'s, after the name is
//! normalised (lower case, no trailing dot): a bare entry `example.com` matches the name and
//! everything below it (`a.b.example.com`, not `badexample.com`); `*.example.com` only what
//! is strictly below.
//!
//! The rule reported for a match is `builtin:<entry>` for a built-in entry and
//! `block:<entry>` for the user's.

use cordon_events::RuleId;
use cordon_policy::DnsBlock;

use crate::name;

/// The compiled blocklist.
#[derive(Debug, Clone, Default)]
pub(crate) struct Blocklist {
    entries: Vec<DnsBlock>,
}

impl Blocklist {
    /// The plan's entries, in order.
    pub(crate) fn new(entries: &[DnsBlock]) -> Self {
        Self {
            entries: entries.to_vec(),
        }
    }

    /// The rule blocking the normalised `name`, if any (in the plan's order: built-in first).
    pub(crate) fn check(&self, name: &str) -> Option<RuleId> {
        rule_for(&self.entries, name)
    }
}

/// The rule of the first entry matching the normalised `name`.
fn rule_for(entries: &[DnsBlock], name: &str) -> Option<RuleId> {
    entries
        .iter()
        .find(|b| b.pattern.matches(name))
        .map(|b| RuleId::Blocklist {
            entry: b.pattern.to_string(),
            built_in: b.origin.is_built_in(),
        })
}

/// Checks `name` against `block` (see the module docs for the matching rule). Returns the
/// matching rule (`builtin:<entry>` or `block:<entry>`). A name that is not a valid domain
/// name matches nothing.
pub fn blocked(name: &str, block: &[DnsBlock]) -> Option<RuleId> {
    rule_for(block, &name::normalize(name).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_policy::{Bare, HostPattern};

    fn with_user(user: &[&str]) -> Vec<DnsBlock> {
        let mut v = cordon_policy::built_in_dns_block();
        v.extend(user.iter().map(|p| DnsBlock {
            pattern: HostPattern::name(p, Bare::AtOrBelow).unwrap(),
            origin: "/p/cordon.toml:1".into(),
        }));
        v
    }

    #[test]
    fn builtin_entries_are_valid_and_normalised() {
        let builtin = cordon_policy::built_in_dns_block();
        assert!(builtin.len() > 50, "{}", builtin.len());
        for entry in &builtin {
            let text = entry.pattern.to_string();
            assert_eq!(name::normalize(&text).as_deref(), Ok(text.as_str()));
            assert!(matches!(entry.pattern, HostPattern::AtOrBelow(_)), "{text}");
        }
    }

    #[test]
    fn builtin_matches_self_and_subdomains() {
        let b = with_user(&[]);
        assert_eq!(
            blocked("ngrok.io", &b).map(String::from).as_deref(),
            Some("builtin:ngrok.io")
        );
        assert_eq!(
            blocked("abc.NGROK-free.app.", &b)
                .map(String::from)
                .as_deref(),
            Some("builtin:ngrok-free.app")
        );
        assert_eq!(
            blocked("litterbox.catbox.moe", &b)
                .map(String::from)
                .as_deref(),
            Some("builtin:catbox.moe")
        );
        assert_eq!(
            blocked("x.y.oast.fun", &b).map(String::from).as_deref(),
            Some("builtin:oast.fun")
        );
        assert_eq!(blocked("notngrok.io", &b), None);
        assert_eq!(blocked("github.com", &b), None);
    }

    #[test]
    fn user_patterns() {
        let b = with_user(&["*.Evil.example", "bad.test."]);
        assert_eq!(blocked("evil.example", &b), None);
        assert_eq!(
            blocked("a.evil.example", &b).map(String::from).as_deref(),
            Some("block:*.evil.example")
        );
        assert_eq!(
            blocked("bad.test", &b).map(String::from).as_deref(),
            Some("block:bad.test")
        );
        assert_eq!(
            blocked("deep.sub.BAD.test", &b)
                .map(String::from)
                .as_deref(),
            Some("block:bad.test")
        );
        assert_eq!(blocked("notbad.test", &b), None);
    }

    #[test]
    fn garbage_names_never_match_or_panic() {
        let b = with_user(&[]);
        assert_eq!(blocked("", &b), None);
        assert_eq!(blocked("..", &b), None);
        assert_eq!(blocked("ngrok.io\0", &b), None);
    }
}
