use super::*;

fn plan(source: CredentialSource, slot: CredentialSlot) -> CredentialPlan {
    CredentialPlan {
        name: "api".into(),
        env: Some("API_KEY".into()),
        source,
        hosts: vec!["api.example.test".parse().unwrap()],
        slot,
        files: Vec::new(),
        inject: false,
        origin: "test".into(),
    }
}

fn header(name: &str, format: &str) -> CredentialSlot {
    CredentialSlot::Header {
        name: name.into(),
        format: format.into(),
    }
}

#[test]
fn a_source_resolves_to_its_trimmed_value_and_a_fresh_placeholder() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("token");
    std::fs::write(&f, "  tok-1234567890abcdef\n").unwrap();
    let c = resolve(&plan(
        CredentialSource::File(f),
        header("authorization", "Bearer {}"),
    ))
    .unwrap();
    assert_eq!(c.real, "tok-1234567890abcdef");
    assert!(c.placeholder.starts_with("cordon-"));
    assert_eq!(c.placeholder.len(), c.real.len());
    assert_ne!(c.placeholder, c.real);
    let cmd = CredentialSource::Command(vec!["echo".into(), "from-a-command".into()]);
    let c2 = resolve(&plan(cmd, header("authorization", "{}"))).unwrap();
    assert_eq!(c2.real, "from-a-command");
    // Short values get a placeholder of at least 12.
    assert_eq!(placeholder_for("abc").len(), 12);
    assert_ne!(placeholder_for("abc"), placeholder_for("abc"));
}

#[test]
fn a_source_that_gives_nothing_does_not_resolve() {
    for source in [
        CredentialSource::Env("CORDON_TEST_SURELY_UNSET_VARIABLE".into()),
        CredentialSource::File("/nonexistent/cordon/token".into()),
        CredentialSource::Command(vec!["false".into()]),
        CredentialSource::Command(Vec::new()),
    ] {
        let e = resolve(&plan(source, header("authorization", "{}"))).unwrap_err();
        assert!(
            e.to_string().contains("credential `api` did not resolve"),
            "{e}"
        );
    }
}

#[test]
fn the_slot_says_where_it_travels_and_how() {
    let mut c = WireCredential {
        name: "api".into(),
        placeholder: "cordon-ph".into(),
        real: "user:pass".into(),
        hosts: Vec::new(),
        slot: header("authorization", "Basic {}"),
        inject: true,
    };
    assert_eq!(c.header(), Some("authorization"));
    assert_eq!(c.query(), None);
    assert_eq!(c.formatted("user:pass"), "Basic dXNlcjpwYXNz");
    c.slot = CredentialSlot::Query { name: "key".into() };
    assert_eq!((c.header(), c.query()), (None, Some("key")));
    assert_eq!(c.place(), "query parameter key");
}
