//! `[credentials.NAME] headers`: one credential in several headers, each with its format.

mod common;
use common::*;

use cordon_policy::{CredentialSlot, HeaderSlot};

fn slot(name: &str, format: &str) -> HeaderSlot {
    HeaderSlot {
        name: name.into(),
        format: format.into(),
    }
}

#[test]
fn headers_name_several_each_with_its_format_and_print_back() {
    let env = Env::new();
    env.user(
        "[credentials.anthropic]\nsource = { env = \"ANTHROPIC_API_KEY\" }\nhosts = [\"api.anthropic.com\"]\n\
         headers = [\"X-Api-Key\", \"authorization: Bearer {}\"]\n\
         [credentials.old]\nsource = { env = \"OLD\" }\nhosts = [\"old.example\"]\nheader = \"x-token\"\n",
    );
    let l = env.load();
    let by = |n: &str| l.plan.credentials.iter().find(|c| c.name == n).unwrap();
    assert_eq!(
        by("anthropic").slot,
        CredentialSlot::Headers(vec![
            slot("x-api-key", "{}"),
            slot("authorization", "Bearer {}")
        ])
    );
    // The single form is unchanged.
    assert_eq!(
        by("old").slot,
        CredentialSlot::Header {
            name: "x-token".into(),
            format: "{}".into()
        }
    );
    let text = l.plan.to_toml();
    assert!(
        text.contains("headers = [\"x-api-key\", \"authorization: Bearer {}\"]"),
        "{text}"
    );
    let again = env.reload(&text);
    assert_eq!(
        again
            .plan
            .credentials
            .iter()
            .find(|c| c.name == "anthropic")
            .unwrap()
            .slot,
        by("anthropic").slot
    );
}

#[test]
fn bad_headers_say_where_and_how() {
    for (body, says) in [
        (
            "headers = [\"x-api-key\"]\nheader = \"authorization\"",
            "both `header` and `headers`",
        ),
        (
            "headers = [\"x-api-key\"]\nformat = \"Bearer {}\"",
            "`format` goes with `header`",
        ),
        ("headers = [\"x api key\"]", "invalid header name"),
        ("headers = [\"authorization: Bearer\"]", "needs `{}`"),
        ("headers = [\"a\", \"A\"]", "named twice"),
        (
            "headers = [\"a\"]\nquery = \"key\"",
            "both `header` and `query`",
        ),
    ] {
        let env = Env::new();
        env.user(&format!(
            "[credentials.x]\nsource = {{ env = \"X\" }}\nhosts = [\"x.example\"]\n{body}\n"
        ));
        let e = env.load_err().to_string();
        assert!(e.contains(says), "{body}: {e}");
        assert!(
            e.contains("headers") || e.contains("query"),
            "{body}: the fix is named: {e}"
        );
    }
}
