//! Ordered request rules — the policy's `[[http.rule]]`s, as the plan holds them: the first
//! rule that matches a request decides it; none matching leaves it to the default. Every
//! decision carries the name of what decided.

use cordon_policy::glob_match as matches;

use cordon_events::{Builtin, RuleId};
use cordon_policy::{HttpAction, HttpRule};

/// The parts of a request rules look at.
#[derive(Debug, Clone, Copy, Default)]
pub struct Request<'a> {
    /// Method as sent.
    pub method: &'a str,
    /// Host (from SNI, the request target or `Host`, as the caller established it).
    pub host: &'a str,
    /// Destination port.
    pub port: u16,
    /// Path, without the query.
    pub path: &'a str,
    /// Query string, without the `?` (empty if none).
    pub query: &'a str,
    /// Headers as (name, value); names compared case-insensitively.
    pub headers: &'a [(&'a str, &'a str)],
    /// The body's length, when declared.
    pub body_len: Option<u64>,
    /// The process that sent it (`None`: not found, or not looked for).
    pub owner: Option<&'a cordon_policy::Owner>,
}

/// A decision and what made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What to do.
    pub action: HttpAction,
    /// The deciding rule's name, or `default`.
    pub rule: RuleId,
    /// The rule's reason, if it has one.
    pub reason: Option<String>,
}

/// Whether `rule` matches `req`. A body of unknown length does not match a rule with a
/// `max_body`.
pub fn rule_matches(rule: &HttpRule, req: &Request<'_>) -> bool {
    rule.host.matches(req.host)
        && rule.port.is_none_or(|p| p == req.port)
        && (rule.methods.is_empty()
            || rule
                .methods
                .iter()
                .any(|m| m.eq_ignore_ascii_case(req.method)))
        && rule.path.as_deref().is_none_or(|p| matches(p, req.path))
        && rule.query.as_deref().is_none_or(|q| matches(q, req.query))
        && rule.headers.iter().all(|(name, glob)| {
            req.headers
                .iter()
                .any(|(n, v)| n.eq_ignore_ascii_case(name) && matches(glob, v))
        })
        && rule
            .max_body
            .is_none_or(|max| req.body_len.is_some_and(|len| len <= max))
        && cordon_policy::program::applies(
            &rule.programs,
            // ask and judge may let it through too: for an unknown process, only deny.
            rule.action != HttpAction::Deny,
            req.owner,
        )
}

/// The first matching rule's decision, else `default` (rule name `default`).
pub fn decide(rules: &[HttpRule], default: HttpAction, req: &Request<'_>) -> Decision {
    match rules.iter().find(|r| rule_matches(r, req)) {
        Some(r) => Decision {
            action: r.action,
            rule: RuleId::parse(&r.name),
            reason: r.reason.clone(),
        },
        None => Decision {
            action: default,
            rule: Builtin::Default.into(),
            reason: only_for_others(rules, req),
        },
    }
}

/// Why a request no rule matched was not let through by a rule for other programs, when
/// one would have matched it but for `programs`/`run_by`.
fn only_for_others(rules: &[HttpRule], req: &Request<'_>) -> Option<String> {
    let r = rules.iter().find(|r| {
        r.action == HttpAction::Allow
            && !r.programs.any()
            && rule_matches(
                &HttpRule {
                    programs: Default::default(),
                    ..(*r).clone()
                },
                req,
            )
    })?;
    let from = match req.owner {
        Some(o) => format!("this request came from {}", o.describe()),
        None => "the process that sent this request could not be found".to_string(),
    };
    Some(format!(
        "{} lets {} through only for {}; {from}",
        r.name,
        req.host,
        r.programs.describe()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, host: &str, action: HttpAction) -> HttpRule {
        HttpRule::new(name, host.parse().unwrap(), action)
    }

    fn req<'a>(method: &'a str, host: &'a str, path: &'a str) -> Request<'a> {
        Request {
            method,
            host,
            port: 443,
            path,
            ..Request::default()
        }
    }

    #[test]
    fn first_match_wins_and_default_applies() {
        let rules = vec![
            HttpRule {
                methods: vec!["POST".into()],
                path: Some("/v1/messages*".into()),
                ..rule("anthropic", "api.anthropic.com", HttpAction::Allow)
            },
            rule("no-anthropic", "api.anthropic.com", HttpAction::Deny),
            HttpRule {
                methods: vec!["GET".into(), "HEAD".into()],
                ..rule("npm", "*.npmjs.org", HttpAction::Allow)
            },
        ];
        let d = decide(
            &rules,
            HttpAction::Judge,
            &req("post", "api.anthropic.com", "/v1/messages"),
        );
        assert_eq!(
            (d.action, d.rule.to_string().as_str()),
            (HttpAction::Allow, "anthropic")
        );
        let d = decide(
            &rules,
            HttpAction::Judge,
            &req("GET", "api.anthropic.com", "/v1/messages"),
        );
        assert_eq!(
            (d.action, d.rule.to_string().as_str()),
            (HttpAction::Deny, "no-anthropic")
        );
        let d = decide(
            &rules,
            HttpAction::Judge,
            &req("GET", "registry.npmjs.org", "/left-pad"),
        );
        assert_eq!(d.action, HttpAction::Allow);
        let d = decide(
            &rules,
            HttpAction::Judge,
            &req("PUT", "registry.npmjs.org", "/left-pad"),
        );
        assert_eq!(
            (d.action, d.rule.to_string().as_str()),
            (HttpAction::Judge, "default")
        );
    }

    #[test]
    fn port_query_headers_and_body() {
        let r = HttpRule {
            port: Some(8443),
            query: Some("*token=*".into()),
            headers: vec![("content-type".into(), "application/json*".into())],
            max_body: Some(1024),
            ..rule("r", "*", HttpAction::Deny)
        };
        let headers = [("Content-Type", "application/json; charset=utf-8")];
        let mut q = Request {
            port: 8443,
            query: "a=1&token=x",
            headers: &headers,
            body_len: Some(10),
            ..req("POST", "x.test", "/")
        };
        assert!(rule_matches(&r, &q));
        q.body_len = None;
        assert!(!rule_matches(&r, &q), "unknown length does not fit a limit");
        q.body_len = Some(2048);
        assert!(!rule_matches(&r, &q));
        q.body_len = Some(10);
        q.port = 443;
        assert!(!rule_matches(&r, &q));
        q.port = 8443;
        q.headers = &[];
        assert!(!rule_matches(&r, &q));
    }
}
