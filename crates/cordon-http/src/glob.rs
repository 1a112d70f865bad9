//! The globs rules are written in: `*` matches any run of characters (including none, and
//! including `/`), `?` exactly one; everything else is literal. Host globs add one rule:
//! `*.example.com` matches any name *below* example.com, at any depth, but not example.com.

/// Whether `text` matches `pattern` (see the module docs). Linear in practice: the classic
/// backtrack-to-last-star algorithm, no recursion, so a hostile path cannot blow the stack.
pub fn matches(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// Host matching: case-insensitive, trailing dots ignored; `*.suffix` is any name strictly
/// below `suffix`; `*` is any host; anything else is [`matches`] on the lower-cased names.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    let pattern = pattern.trim_end_matches('.').to_ascii_lowercase();
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if pattern == "*" {
        return true;
    }
    match pattern.strip_prefix("*.") {
        Some(suffix) if !suffix.contains(['*', '?']) => {
            host.len() > suffix.len() + 1
                && host.ends_with(suffix)
                && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
        }
        _ => matches(&pattern, &host),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(matches("/v1/messages*", "/v1/messages"));
        assert!(matches("/v1/messages*", "/v1/messages/batches/x"));
        assert!(!matches("/v1/messages*", "/v2/messages"));
        assert!(matches("*", ""));
        assert!(matches("a?c", "abc"));
        assert!(!matches("a?c", "ac"));
        assert!(matches("*.tar.gz", "x/y.tar.gz"));
        assert!(matches("a*b*c", "a__b__b__c"));
        assert!(!matches("a*b*c", "a__b__b__"));
        // Pathological input stays fast.
        let text = "a".repeat(10_000);
        assert!(!matches("*a*a*a*a*a*a*a*b", &text));
    }

    #[test]
    fn hosts() {
        assert!(host_matches("*.npmjs.org", "registry.npmjs.org"));
        assert!(host_matches("*.npmjs.org", "a.b.npmjs.org."));
        assert!(!host_matches("*.npmjs.org", "npmjs.org"));
        assert!(!host_matches("*.npmjs.org", "evilnpmjs.org"));
        assert!(host_matches("API.Anthropic.com", "api.anthropic.com"));
        assert!(host_matches("*", "anything"));
        assert!(host_matches("api-*.example.com", "api-eu.example.com"));
    }
}
