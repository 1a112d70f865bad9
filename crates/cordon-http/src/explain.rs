//! The HTTP layer's decision for one request, with no session: the rules the layer builds
//! from the plan, the path normalised as the layer normalises it, the same first-match
//! [`rules::decide`]. For `cordon explain METHOD URL`.

use cordon_policy::Plan;

use crate::rules::{self, Decision};

/// How the layer decides `method scheme://host:port path?query` under `plan`: the deciding
/// rule (`[[http.rule]]`s first, then the `[[network.allow]]` allowances, else `default`).
/// Headers are not known here, so a rule that needs one does not match; a `GET` or `HEAD`
/// has no body, anything else a body of unknown length. An `Err` is the layer's own 400 for
/// a path whose meaning is ambiguous (encoded `/`, `..` above the root).
pub fn explain_request(
    plan: &Plan,
    method: &str,
    host: &str,
    port: u16,
    path: &str,
    query: &str,
) -> Result<Decision, &'static str> {
    let path = crate::pipeline::normalize_path(path)?;
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
        },
    ))
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
        let d = explain_request(&plan, "post", "pypi.org", 443, "/x/../upload/a", "").unwrap();
        assert_eq!(
            (d.action, d.rule.as_str()),
            (HttpAction::Deny, "no-uploads")
        );
        // The built-in [[network.allow]] for pypi.org allows the rest.
        let d = explain_request(&plan, "GET", "pypi.org", 443, "/simple/", "").unwrap();
        assert_eq!(d.action, HttpAction::Allow);
        assert!(d.rule.contains("pypi.org"), "{d:?}");
        let d = explain_request(&plan, "GET", "evil.example", 443, "/", "").unwrap();
        assert_eq!((d.action, d.rule.as_str()), (plan.http.default, "default"));
        assert!(explain_request(&plan, "GET", "pypi.org", 443, "/a%2fb", "").is_err());
    }
}
