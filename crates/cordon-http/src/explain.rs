//! The HTTP layer's decision for one request, with no session: the rules the layer builds
//! from the plan, the path normalised as the layer normalises it, the same first-match
//! [`rules::decide`]. For `cordon explain METHOD URL`.

use cordon_policy::Plan;

use crate::rules::{self, Decision};

/// How the layer decides `method scheme://host:port path?query` under `plan`: the deciding
/// rule (`[[http.rule]]`s first, then the `[[network.allow]]` allowances, else `default`).
/// Headers are not known here, so a rule that needs one does not match; a `GET` or `HEAD`
/// has no body, anything else a body of unknown length. An `Err` is the layer's own 400 for
/// a path whose meaning is ambiguous (encoded `/`, `..` above the root). `owner`: the
/// process asking (`cordon explain --program`); `None`, one not known, which only rules for
/// any process let through.
pub fn explain_request(
    plan: &Plan,
    method: &str,
    host: &str,
    port: u16,
    path: &str,
    query: &str,
    owner: Option<&cordon_policy::Owner>,
) -> Result<Decision, &'static str> {
    let path = crate::pipeline::normalize_url_path(path)?;
    let body_len =
        (method.eq_ignore_ascii_case("GET") || method.eq_ignore_ascii_case("HEAD")).then_some(0);
    Ok(rules::decide(
        &crate::layer::rules(plan),
        plan.http.default,
        &rules::Request {
            method,
            host,
            port,
            path: &path,
            query,
            headers: &[],
            body_len,
            owner,
        },
    ))
}

/// The HTTP layer's rules of one plan, made once and asked many times: `cordon replay`
/// re-decides logged requests with it. A log holds no headers and hides query values, so a
/// rule that needs either is reported by [`RequestPolicy::needs_more`].
pub struct RequestPolicy {
    rules: Vec<cordon_policy::HttpRule>,
    default: cordon_policy::HttpAction,
}

impl RequestPolicy {
    /// The rules the layer builds from `plan` (`[[http.rule]]`s, then the
    /// `[[network.allow]]` allowances), and its default.
    pub fn new(plan: &Plan) -> Self {
        RequestPolicy {
            rules: crate::layer::rules(plan),
            default: plan.http.default,
        }
    }

    /// The first rule matching a request whose path is already normalised (as the layer
    /// logs it), with no headers and no query; `None` when a rule that would match but for
    /// its headers or query comes first (the log cannot say). `owner`: the process the log
    /// names, as the gateway found it.
    pub fn decide(
        &self,
        method: &str,
        host: &str,
        port: u16,
        path: &str,
        body_len: Option<u64>,
        owner: Option<&cordon_policy::Owner>,
    ) -> Option<Decision> {
        let req = rules::Request {
            method,
            host,
            port,
            path,
            query: "",
            headers: &[],
            body_len,
            owner,
        };
        for r in &self.rules {
            if rules::rule_matches(r, &req) {
                return Some(Decision {
                    action: r.action,
                    rule: cordon_events::RuleId::parse(&r.name),
                    reason: r.reason.clone(),
                });
            }
            if !r.headers.is_empty() || r.query.is_some() {
                let bare = cordon_policy::HttpRule {
                    headers: Vec::new(),
                    query: None,
                    ..r.clone()
                };
                if rules::rule_matches(&bare, &req) {
                    return None;
                }
            }
        }
        Some(Decision {
            action: self.default,
            rule: cordon_events::Builtin::Default.into(),
            reason: None,
        })
    }

    /// Whether the rule named `rule` looks at what a log does not hold (headers, the query).
    pub fn needs_more(&self, rule: &str) -> bool {
        self.rules
            .iter()
            .any(|r| r.name == rule && (!r.headers.is_empty() || r.query.is_some()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_policy::{HttpAction, HttpRule};

    #[test]
    fn rules_then_network_allowances_then_the_default_on_the_normalised_path() {
        let opts = cordon_policy::LoadOptions::new("/nonexistent", "/nonexistent", "/nonexistent");
        let mut plan = cordon_policy::load(&opts).unwrap().plan;
        plan.http.rules.insert(
            0,
            HttpRule {
                methods: vec!["POST".into()],
                path: Some("/upload*".into()),
                ..HttpRule::new("no-uploads", "pypi.org".parse().unwrap(), HttpAction::Deny)
            },
        );
        let d =
            explain_request(&plan, "post", "pypi.org", 443, "/x/../upload/a", "", None).unwrap();
        assert_eq!(
            (d.action, d.rule.to_string().as_str()),
            (HttpAction::Deny, "no-uploads")
        );
        // The built-in [[network.allow]] for pypi.org allows the rest.
        let d = explain_request(&plan, "GET", "pypi.org", 443, "/simple/", "", None).unwrap();
        assert_eq!(d.action, HttpAction::Allow);
        assert!(d.rule.to_string().contains("pypi.org"), "{d:?}");
        let d = explain_request(&plan, "GET", "evil.example", 443, "/", "", None).unwrap();
        assert_eq!(
            (d.action, d.rule.to_string().as_str()),
            (plan.http.default, "default")
        );
        assert!(explain_request(&plan, "GET", "pypi.org", 443, "/a%2fb", "", None).is_err());
    }
}
