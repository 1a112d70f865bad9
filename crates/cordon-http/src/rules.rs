//! Ordered request rules: the first rule that matches a request decides it; none matching
//! leaves it to the default. Every decision carries the name of what decided.

use crate::glob::{host_matches, matches};

/// What a rule does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Action {
    /// Forward it.
    Allow,
    /// Answer 403 with the reason.
    #[default]
    Deny,
    /// Hold it and ask a person.
    Ask,
    /// Ask the LLM judge.
    Judge,
}

/// One rule. Empty lists and `None` match anything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rule {
    /// Shown in events and 403 bodies.
    pub name: String,
    /// Host glob (`*.x` = any name below x).
    pub host: String,
    /// Port, if the rule is for one.
    pub port: Option<u16>,
    /// Methods, upper-case (`GET`, `POST`); empty = any.
    pub methods: Vec<String>,
    /// Path glob (without the query).
    pub path: Option<String>,
    /// Query-string glob (without the `?`).
    pub query: Option<String>,
    /// Header globs: (lower-case name, value glob); all must match.
    pub headers: Vec<(String, String)>,
    /// Largest request body this rule matches (by `Content-Length`; a body of unknown length
    /// does not match a rule with a limit).
    pub max_body: Option<u64>,
    /// What to do.
    pub action: Action,
    /// Told to the client when the rule denies (shown to the model).
    pub reason: Option<String>,
}

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
}

/// A decision and what made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What to do.
    pub action: Action,
    /// The deciding rule's name, or `default`.
    pub rule: String,
    /// The rule's reason, if it has one.
    pub reason: Option<String>,
}

impl Rule {
    /// Whether this rule matches `req`.
    pub fn matches(&self, req: &Request<'_>) -> bool {
        host_matches(&self.host, req.host)
            && self.port.is_none_or(|p| p == req.port)
            && (self.methods.is_empty()
                || self
                    .methods
                    .iter()
                    .any(|m| m.eq_ignore_ascii_case(req.method)))
            && self.path.as_deref().is_none_or(|p| matches(p, req.path))
            && self.query.as_deref().is_none_or(|q| matches(q, req.query))
            && self.headers.iter().all(|(name, glob)| {
                req.headers
                    .iter()
                    .any(|(n, v)| n.eq_ignore_ascii_case(name) && matches(glob, v))
            })
            && self
                .max_body
                .is_none_or(|max| req.body_len.is_some_and(|len| len <= max))
    }
}

/// The first matching rule's decision, else `default` (rule name `default`).
pub fn decide(rules: &[Rule], default: Action, req: &Request<'_>) -> Decision {
    match rules.iter().find(|r| r.matches(req)) {
        Some(r) => Decision {
            action: r.action,
            rule: r.name.clone(),
            reason: r.reason.clone(),
        },
        None => Decision {
            action: default,
            rule: "default".into(),
            reason: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, host: &str, action: Action) -> Rule {
        Rule {
            name: name.into(),
            host: host.into(),
            action,
            ..Rule::default()
        }
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
            Rule {
                methods: vec!["POST".into()],
                path: Some("/v1/messages*".into()),
                ..rule("anthropic", "api.anthropic.com", Action::Allow)
            },
            rule("no-anthropic", "api.anthropic.com", Action::Deny),
            Rule {
                methods: vec!["GET".into(), "HEAD".into()],
                ..rule("npm", "*.npmjs.org", Action::Allow)
            },
        ];
        let d = decide(
            &rules,
            Action::Judge,
            &req("post", "api.anthropic.com", "/v1/messages"),
        );
        assert_eq!((d.action, d.rule.as_str()), (Action::Allow, "anthropic"));
        let d = decide(
            &rules,
            Action::Judge,
            &req("GET", "api.anthropic.com", "/v1/messages"),
        );
        assert_eq!((d.action, d.rule.as_str()), (Action::Deny, "no-anthropic"));
        let d = decide(
            &rules,
            Action::Judge,
            &req("GET", "registry.npmjs.org", "/left-pad"),
        );
        assert_eq!(d.action, Action::Allow);
        let d = decide(
            &rules,
            Action::Judge,
            &req("PUT", "registry.npmjs.org", "/left-pad"),
        );
        assert_eq!((d.action, d.rule.as_str()), (Action::Judge, "default"));
    }

    #[test]
    fn port_query_headers_and_body() {
        let r = Rule {
            port: Some(8443),
            query: Some("*token=*".into()),
            headers: vec![("content-type".into(), "application/json*".into())],
            max_body: Some(1024),
            ..rule("r", "*", Action::Deny)
        };
        let headers = [("Content-Type", "application/json; charset=utf-8")];
        let mut q = Request {
            port: 8443,
            query: "a=1&token=x",
            headers: &headers,
            body_len: Some(10),
            ..req("POST", "x.test", "/")
        };
        assert!(r.matches(&q));
        q.body_len = None;
        assert!(!r.matches(&q), "unknown length does not fit a limit");
        q.body_len = Some(2048);
        assert!(!r.matches(&q));
        q.body_len = Some(10);
        q.port = 443;
        assert!(!r.matches(&q));
        q.port = 8443;
        q.headers = &[];
        assert!(!r.matches(&q));
    }
}
