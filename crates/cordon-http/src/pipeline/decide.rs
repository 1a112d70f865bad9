//! Stage 2, decide: the ordered rules, first match wins, on the normalized path. The verdict
//! may still need the body (`judge`) or a person (`ask`): [`super::check`] settles those.

use super::Exchange;
use crate::rules::{self, Decision};
use cordon_policy::{HttpAction, HttpRule};

/// The first rule matching the request, or `default` (rule `default`).
pub(crate) fn decide(rules: &[HttpRule], default: HttpAction, ex: &Exchange<'_>) -> Decision {
    let headers: Vec<(&str, &str)> = ex
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    rules::decide(
        rules,
        default,
        &rules::Request {
            method: &ex.method,
            host: ex.host(),
            port: ex.conn.port,
            path: &ex.path,
            query: &ex.query,
            headers: &headers,
            body_len: ex.body_len,
            owner: ex.conn.owner,
        },
    )
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
