use super::*;

fn plan(source: CredentialSource, slot: CredentialSlot) -> CredentialPlan {
    CredentialPlan {
        programs: Default::default(),
        name: "api".into(),
        env: Some("API_KEY".into()),
        source,
        hosts: vec!["api.example.test".parse().unwrap()],
        slot,
        files: Vec::new(),
        inject: false,
        refresh: None,
        origin: "test".into(),
    }
}

fn header(name: &str, format: &str) -> CredentialSlot {
    CredentialSlot::Header {
        name: name.into(),
        format: format.into(),
    }
}

fn key() -> PlaceholderKey {
    PlaceholderKey::from_bytes([9; 32])
}

#[test]
fn a_source_resolves_to_its_trimmed_value_and_its_placeholder() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("token");
    std::fs::write(&f, "  tok-1234567890abcdef\n").unwrap();
    let c = resolve(
        &plan(
            CredentialSource::File(f),
            header("authorization", "Bearer {}"),
        ),
        &key(),
    )
    .unwrap();
    assert_eq!(c.real, "tok-1234567890abcdef");
    assert!(c.placeholder.starts_with("cordon-"));
    assert_eq!(c.placeholder.len(), c.real.len());
    assert_ne!(c.placeholder, c.real);
    let cmd = CredentialSource::Command(vec!["echo".into(), "from-a-command".into()]);
    let c2 = resolve(&plan(cmd, header("authorization", "{}")), &key()).unwrap();
    assert_eq!(c2.real, "from-a-command");
    assert_eq!(c2.placeholder, placeholder(&key(), "api", "from-a-command"));
}

#[test]
fn a_source_that_gives_nothing_does_not_resolve() {
    for source in [
        CredentialSource::Env("CORDON_TEST_SURELY_UNSET_VARIABLE".into()),
        CredentialSource::File("/nonexistent/cordon/token".into()),
        CredentialSource::Command(vec!["false".into()]),
        CredentialSource::Command(Vec::new()),
    ] {
        let e = resolve(&plan(source, header("authorization", "{}")), &key()).unwrap_err();
        assert!(
            e.to_string().contains("credential `api` did not resolve"),
            "{e}"
        );
    }
}

#[test]
fn the_slot_says_where_it_travels_and_how() {
    let mut c = WireCredential {
        programs: Default::default(),
        name: "api".into(),
        placeholder: "cordon-ph".into(),
        real: "user:pass".into(),
        hosts: Vec::new(),
        slot: header("authorization", "Basic {}"),
        inject: true,
    };
    assert!(c.carries("authorization") && !c.carries("x-api-key"));
    assert_eq!(c.query(), None);
    assert_eq!(
        WireCredential::formatted("Basic {}", "user:pass"),
        "Basic dXNlcjpwYXNz"
    );
    c.slot = CredentialSlot::Headers(vec![
        cordon_policy::HeaderSlot {
            name: "x-api-key".into(),
            format: "{}".into(),
        },
        cordon_policy::HeaderSlot {
            name: "authorization".into(),
            format: "Bearer {}".into(),
        },
    ]);
    assert!(c.carries("authorization") && c.carries("x-api-key") && !c.carries("cookie"));
    assert_eq!(c.place(), "x-api-key or authorization");
    assert_eq!(c.headers().len(), 2);
    c.slot = CredentialSlot::Query { name: "key".into() };
    assert!(c.headers().is_empty() && !c.carries("authorization"));
    assert_eq!(c.query(), Some("key"));
    assert_eq!(c.place(), "query parameter key");
}
