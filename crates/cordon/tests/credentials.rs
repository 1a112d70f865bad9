//! Credentials, black-box: one credential in several headers, and placeholders that stay the
//! same across sessions (keyed by a secret the sandbox never sees).

mod common;

use std::os::unix::fs::PermissionsExt;

use common::net::{UNPROXIED, https_443, run_with, setup, variant_addr, www};
use common::{Env, show};

/// An Anthropic-shaped key: placeholders keep its prefix, length and alphabet.
fn anthropic_key(fill: char) -> String {
    format!("sk-ant-api03-{}AA", fill.to_string().repeat(93))
}

both!(
    a_credential_in_two_headers_is_swapped_in_both,
    |env: Env| {
        if !common::need(&["curl"], "this test's client") {
            return;
        }
        let addr = &variant_addr(&env, 61);
        setup(&env);
        let root = www(&env, "twohdr", "hello-two");
        let Some((srv, ca)) = https_443(&env, "api.example.test", addr, &root) else {
            return;
        };
        let real = anthropic_key('k');
        let pol = format!(
            "[dns]\nhosts = {{ \"api.example.test\" = \"{addr}\" }}\n\
         [[network.allow]]\nhost = \"api.example.test\"\nports = [443]\n\
         [tls]\nupstream_ca = \"{}\"\n\
         [credentials.anthropic]\nenv = \"ANTHROPIC_API_KEY\"\nsource = {{ env = \"CORDON_TEST_REAL_KEY\" }}\n\
         hosts = [\"api.example.test\"]\nheaders = [\"x-api-key\", \"authorization: Bearer {{}}\"]\n",
            ca.display()
        );
        // What Claude Code's apiKeyHelper sends: the key in both headers. Then one header
        // neither names.
        let script = format!(
            "echo OK $({UNPROXIED} curl -sS --max-time 10 -H \"x-api-key: $ANTHROPIC_API_KEY\" \
           -H \"authorization: Bearer $ANTHROPIC_API_KEY\" https://api.example.test/hello.txt)\n\
         echo PROXIED $(curl -sS --max-time 10 -H \"x-api-key: $ANTHROPIC_API_KEY\" \
           -H \"authorization: Bearer $ANTHROPIC_API_KEY\" https://api.example.test/hello.txt)\n\
         echo LEAK $({UNPROXIED} curl -s --max-time 10 -o /dev/null -w '%{{http_code}}' \
           -H \"x-other: $ANTHROPIC_API_KEY\" https://api.example.test/hello.txt)"
        );
        let o = run_with(&env, &pol, &script, &[("CORDON_TEST_REAL_KEY", &real)]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.lines().any(|l| l == "OK hello-two"), "{}", show(&o));
        assert!(
            out.lines().any(|l| l == "PROXIED hello-two"),
            "{}",
            show(&o)
        );
        assert!(out.lines().any(|l| l == "LEAK 403"), "{}", show(&o));
        let log = srv.log();
        assert_eq!(
            log.matches(&format!("HDR x-api-key: {real}")).count(),
            2,
            "{log}"
        );
        assert_eq!(
            log.matches(&format!("HDR authorization: Bearer {real}"))
                .count(),
            2,
            "{log}"
        );
        assert_eq!(log.matches("HDR x-other").count(), 0, "{log}");
        // No placeholder reached the server (they keep the key's prefix: look for its tail).
        assert_eq!(log.matches("sk-ant-api03-").count(), 4, "{log}");
        assert!(!out.contains(&real), "{}", show(&o));
    }
);

both!(
    placeholders_are_stable_across_sessions_and_their_secret_stays_out,
    |env: Env| {
        let pol = "[credentials.anthropic]\nenv = \"ANTHROPIC_API_KEY\"\nsource = { env = \"CORDON_TEST_REAL_KEY\" }\n\
               hosts = [\"api.example.test\"]\nheaders = [\"x-api-key\", \"authorization: Bearer {}\"]\n";
        let key = env.base.join("data/cordon/credentials/placeholder.key");
        let script = format!(
            "echo PH $ANTHROPIC_API_KEY\n\
         cat '{k}' >/dev/null 2>&1 && echo SECRET-READABLE || echo SECRET-HIDDEN\n\
         ls '{d}' >/dev/null 2>&1 && echo DIR-LISTED || echo DIR-HIDDEN",
            k = key.display(),
            d = key.parent().unwrap().display()
        );
        let session = |real: &str| {
            let o = run_with(&env, pol, &script, &[("CORDON_TEST_REAL_KEY", real)]);
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(
                out.contains("SECRET-HIDDEN") && out.contains("DIR-HIDDEN"),
                "{}",
                show(&o)
            );
            let ph = out
                .lines()
                .find_map(|l| l.strip_prefix("PH "))
                .unwrap_or_else(|| panic!("no placeholder: {}", show(&o)))
                .to_string();
            assert!(!out.contains(real), "{}", show(&o));
            ph
        };
        let real = anthropic_key('q');
        let first = session(&real);
        let mode = std::fs::metadata(&key)
            .expect("the secret is made")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{}", key.display());
        assert_eq!(std::fs::read(&key).unwrap().len(), 32);
        let second = session(&real);
        assert_eq!(
            first, second,
            "the same credential and value, the same placeholder"
        );
        assert!(
            first.starts_with("sk-ant-api03-") && first.len() == real.len(),
            "{first}"
        );
        assert!(first != real && !first.contains(&real[13..]), "{first}");
        let other = session(&anthropic_key('r'));
        assert_ne!(other, first, "another value, another placeholder");
    }
);
