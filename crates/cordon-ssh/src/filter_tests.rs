use base64::Engine;

use super::*;
use crate::hostkey::tests::ed25519;
use crate::wire::put_string;

struct Allow(Vec<Host>);

impl HostPolicy for Allow {
    fn allows(&self, host: &Host) -> Result<String, String> {
        if self.0.contains(host) {
            Ok(format!("network.allow {}", host.name))
        } else {
            Err("network.default-deny".into())
        }
    }
    fn candidates(&self) -> Vec<Host> {
        self.0.clone()
    }
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn bind_msg(key: &[u8], sid: &[u8], sig: &[u8], forwarding: bool) -> Vec<u8> {
    let mut m = vec![msg::EXTENSION];
    put_string(&mut m, SESSION_BIND);
    put_string(&mut m, key);
    put_string(&mut m, sid);
    put_string(&mut m, sig);
    m.push(forwarding as u8);
    m
}

fn login(sid: &[u8], user_key: &[u8], hostbound: Option<&[u8]>) -> Vec<u8> {
    let mut d = Vec::new();
    put_string(&mut d, sid);
    d.push(msg::USERAUTH_REQUEST);
    put_string(&mut d, b"git");
    put_string(&mut d, b"ssh-connection");
    put_string(
        &mut d,
        if hostbound.is_some() {
            HOSTBOUND
        } else {
            b"publickey"
        },
    );
    d.push(1);
    put_string(&mut d, b"ssh-ed25519");
    put_string(&mut d, user_key);
    if let Some(h) = hostbound {
        put_string(&mut d, h);
    }
    d
}

fn sign_msg(user_key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = vec![msg::SIGN_REQUEST];
    put_string(&mut m, user_key);
    put_string(&mut m, data);
    m.extend_from_slice(&0u32.to_be_bytes());
    m
}

/// known_hosts with `allowed` as git.test:2222 (hashed) and `other` as other.test.
fn trust(allowed: &[u8], other: &[u8]) -> Trust {
    let salt = b"0123456789abcdefghij";
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, salt);
    let tag = ring::hmac::sign(&key, b"[git.test]:2222");
    let text = format!(
        "|1|{}|{} ssh-ed25519 {}\nother.test ssh-ed25519 {}\n",
        b64(salt),
        b64(tag.as_ref()),
        b64(allowed),
        b64(other)
    );
    Trust {
        known_hosts: KnownHosts::parse(&text),
        policy: Box::new(Allow(vec![Host::new("git.test", 2222)])),
    }
}

fn refused(d: Decision) -> Refusal {
    match d {
        Decision::Refuse(r) => r,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn a_login_bound_to_an_allowed_host_is_signed() {
    let (hk, hsign) = ed25519();
    let (other, _) = ed25519();
    let t = trust(&hk, &other);
    let mut s = Session::default();
    assert_eq!(s.decide(&[msg::REQUEST_IDENTITIES], &t), Decision::Forward);
    let sid = b"exchange-hash-1";
    assert_eq!(
        s.decide(&bind_msg(&hk, sid, &hsign(sid), false), &t),
        Decision::Forward
    );
    for data in [
        login(sid, b"user-key", None),
        login(sid, b"user-key", Some(&hk)),
    ] {
        match s.decide(&sign_msg(b"user-key", &data), &t) {
            Decision::Sign { host, rule } => {
                assert_eq!(host, Host::new("git.test", 2222));
                assert!(rule.contains("git.test"));
            }
            d => panic!("{d:?}"),
        }
    }
}

#[test]
fn unbound_and_mismatched_signatures_are_refused() {
    let (hk, hsign) = ed25519();
    let (other, _) = ed25519();
    let t = trust(&hk, &other);
    let mut s = Session::default();
    let sid = b"sid";
    let r = refused(s.decide(&sign_msg(b"k", &login(sid, b"k", None)), &t));
    assert!(r.reason.contains("unbound"), "{r:?}");
    s.decide(&bind_msg(&hk, sid, &hsign(sid), false), &t);
    // Another session's login, another key, arbitrary data, another host key: all refused.
    for (key, data) in [
        (&b"k"[..], login(b"other-sid", b"k", None)),
        (b"k", login(sid, b"other-key", None)),
        (b"k", b"git commit to sign".to_vec()),
        (b"k", login(sid, b"k", Some(&other))),
    ] {
        let r = refused(s.decide(&sign_msg(key, &data), &t));
        assert_eq!(r.host, "git.test:2222");
        assert!(r.reason.contains("not a login"), "{r:?}");
    }
}

#[test]
fn bindings_to_hosts_the_policy_does_not_allow_are_refused_by_name() {
    let (hk, _) = ed25519();
    let (other, osign) = ed25519();
    let (unknown, usign) = ed25519();
    let t = trust(&hk, &other);
    let sid = b"sid";
    let mut s = Session::default();
    let r = refused(s.decide(&bind_msg(&other, sid, &osign(sid), false), &t));
    assert_eq!(r.host, "other.test:22");
    assert!(r.reason.contains("network.default-deny"), "{r:?}");
    let r = refused(s.decide(&sign_msg(b"k", &login(sid, b"k", None)), &t));
    assert_eq!(r.host, "other.test:22", "the sign refusal names the host");
    let mut s = Session::default();
    let r = refused(s.decide(&bind_msg(&unknown, sid, &usign(sid), false), &t));
    assert!(r.host.starts_with("unknown host (key SHA256:"), "{r:?}");
    assert!(
        refused(s.decide(&sign_msg(b"k", &login(sid, b"k", None)), &t))
            .reason
            .contains("not bound")
    );
}

#[test]
fn a_binding_needs_the_host_keys_own_signature() {
    let (hk, _) = ed25519();
    let (_, forger) = ed25519();
    let t = trust(&hk, b"x");
    let mut s = Session::default();
    // The allowed host's public key with someone else's signature over another session.
    let r = refused(s.decide(&bind_msg(&hk, b"evil-sid", &forger(b"evil-sid"), false), &t));
    assert!(r.reason.contains("does not verify"), "{r:?}");
    let r = refused(s.decide(&sign_msg(b"k", &login(b"evil-sid", b"k", None)), &t));
    assert!(r.reason.contains("not bound"), "{r:?}");
}

#[test]
fn forwarded_logins_and_agent_management_are_refused() {
    let (hk, hsign) = ed25519();
    let t = trust(&hk, b"x");
    let mut s = Session::default();
    s.decide(&bind_msg(&hk, b"s", &hsign(b"s"), true), &t);
    let r = refused(s.decide(&sign_msg(b"k", &login(b"s", b"k", None)), &t));
    assert!(r.reason.contains("forwarded"), "{r:?}");
    for (kind, what) in [
        (msg::ADD_IDENTITY, "add identities"),
        (msg::ADD_ID_CONSTRAINED, "add identities"),
        (msg::REMOVE_IDENTITY, "remove identities"),
        (msg::REMOVE_ALL_IDENTITIES, "remove all identities"),
        (msg::LOCK, "lock the agent"),
        (msg::UNLOCK, "unlock the agent"),
    ] {
        assert_eq!(refused(s.decide(&[kind, 0, 0], &t)).request, what);
    }
    let mut ext = vec![msg::EXTENSION];
    put_string(&mut ext, b"query");
    assert!(refused(s.decide(&ext, &t)).request.contains("query"));
    assert!(matches!(s.decide(&[], &t), Decision::Refuse(_)));
    assert!(matches!(
        s.decide(&[msg::SIGN_REQUEST, 0, 0], &t),
        Decision::Refuse(_)
    ));
}
