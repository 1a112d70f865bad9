//! The decision for each message a sandboxed client sends the agent: pure, per connection,
//! with no socket. Only three things pass: listing identities (public keys), a
//! `session-bind@openssh.com` whose host key signed the session and belongs to a host the
//! policy allows, and a signature for a login to exactly that bound session.

use crate::hostkey;
use crate::known_hosts::{Host, KnownHosts, Lookup};
use crate::wire::{Reader, WireError};

/// Agent protocol message numbers (draft-miller-ssh-agent §5.1).
pub(crate) mod msg {
    pub const FAILURE: u8 = 5;
    pub const REQUEST_IDENTITIES: u8 = 11;
    pub const SIGN_REQUEST: u8 = 13;
    pub const ADD_IDENTITY: u8 = 17;
    pub const REMOVE_IDENTITY: u8 = 18;
    pub const REMOVE_ALL_IDENTITIES: u8 = 19;
    pub const ADD_SMARTCARD_KEY: u8 = 20;
    pub const REMOVE_SMARTCARD_KEY: u8 = 21;
    pub const LOCK: u8 = 22;
    pub const UNLOCK: u8 = 23;
    pub const ADD_ID_CONSTRAINED: u8 = 25;
    pub const ADD_SMARTCARD_KEY_CONSTRAINED: u8 = 26;
    pub const EXTENSION: u8 = 27;
    /// `SSH_MSG_USERAUTH_REQUEST` (RFC 4252), what a login signature covers.
    pub const USERAUTH_REQUEST: u8 = 50;
}

const SESSION_BIND: &[u8] = b"session-bind@openssh.com";
const HOSTBOUND: &[u8] = b"publickey-hostbound-v00@openssh.com";

/// Which hosts the sandbox may reach: the network plan's answer, given by the caller.
pub trait HostPolicy: Send + Sync {
    /// `Ok(rule)` when the sandbox may connect to `host` (the rule that allows it), else
    /// `Err(why)`.
    fn allows(&self, host: &Host) -> Result<String, String>;
    /// Hosts to try against `known_hosts` names that cannot be read (hashed, wildcards):
    /// the names the policy allows, with their ports.
    fn candidates(&self) -> Vec<Host>;
}

/// What the proxy trusts: the user's `known_hosts` and the policy.
pub struct Trust {
    pub known_hosts: KnownHosts,
    pub policy: Box<dyn HostPolicy>,
}

/// A request the proxy answers with failure, never passing it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What was asked (`sign`, `session-bind`, `add identity`, …).
    pub request: String,
    /// The host it was for, as known (`git.example.com:22`, or the key's fingerprint when
    /// `known_hosts` does not know it); empty when no host is involved.
    pub host: String,
    /// Why, in words.
    pub reason: String,
}

/// What to do with one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Pass it to the user's agent and relay the answer (identities; an accepted binding).
    Forward,
    /// A login signature for the bound session with `host`, allowed by `rule`: pass it on.
    Sign { host: Host, rule: String },
    /// Answer failure and report.
    Refuse(Refusal),
}

#[derive(Debug, Clone)]
struct Bind {
    key: Vec<u8>,
    session_id: Vec<u8>,
    forwarding: bool,
    verdict: Result<(Host, String), Refusal>,
}

/// One client connection's state: the bindings it made, in order.
#[derive(Debug, Default)]
pub struct Session {
    binds: Vec<Bind>,
}

fn refuse(request: &str, host: impl Into<String>, reason: impl Into<String>) -> Decision {
    Decision::Refuse(Refusal {
        request: request.into(),
        host: host.into(),
        reason: reason.into(),
    })
}

impl Session {
    /// Decides one message (`type || body`, without the length).
    pub fn decide(&mut self, message: &[u8], trust: &Trust) -> Decision {
        let Some((&kind, body)) = message.split_first() else {
            return refuse("empty message", "", "a message needs a type");
        };
        let named = |what: &str| {
            refuse(
                what,
                "",
                format!(
                    "the sandbox may not {what}: only listing keys and signing logins to allowed hosts pass"
                ),
            )
        };
        match kind {
            msg::REQUEST_IDENTITIES => Decision::Forward,
            msg::SIGN_REQUEST => self
                .sign(body)
                .unwrap_or_else(|e| refuse("sign", "", format!("{e}"))),
            msg::EXTENSION => self
                .extension(body, trust)
                .unwrap_or_else(|e| refuse("extension", "", format!("{e}"))),
            msg::ADD_IDENTITY | msg::ADD_ID_CONSTRAINED => named("add identities"),
            msg::REMOVE_IDENTITY => named("remove identities"),
            msg::REMOVE_ALL_IDENTITIES => named("remove all identities"),
            msg::ADD_SMARTCARD_KEY | msg::ADD_SMARTCARD_KEY_CONSTRAINED => {
                named("add smartcard keys")
            }
            msg::REMOVE_SMARTCARD_KEY => named("remove smartcard keys"),
            msg::LOCK => named("lock the agent"),
            msg::UNLOCK => named("unlock the agent"),
            other => refuse(
                &format!("message {other}"),
                "",
                "not a request this proxy passes",
            ),
        }
    }

    fn extension(&mut self, body: &[u8], trust: &Trust) -> Result<Decision, WireError> {
        let mut r = Reader::new(body);
        let name = r.string()?;
        if name != SESSION_BIND {
            let name = String::from_utf8_lossy(name);
            return Ok(refuse(
                &format!("extension {name}"),
                "",
                "only session-bind@openssh.com passes",
            ));
        }
        let key = r.string()?.to_vec();
        let session_id = r.string()?.to_vec();
        let sig = r.string()?;
        let forwarding = r.bool()?;
        r.end()?;
        let verdict = bind_verdict(&key, &session_id, sig, trust);
        let decision = match &verdict {
            Ok(_) => Decision::Forward,
            Err(refusal) => Decision::Refuse(refusal.clone()),
        };
        self.binds.push(Bind {
            key,
            session_id,
            forwarding,
            verdict,
        });
        Ok(decision)
    }

    fn sign(&self, body: &[u8]) -> Result<Decision, WireError> {
        let mut r = Reader::new(body);
        let key = r.string()?;
        let data = r.string()?;
        let _flags = r.u32()?;
        r.end()?;
        let Some(last) = self.binds.last() else {
            return Ok(refuse(
                "sign",
                "",
                "unbound signature request: only logins from an ssh that bound its session \
                 to the host's key (OpenSSH 8.9 or later) are signed",
            ));
        };
        // Every hop must have been allowed: a refused binding taints the connection.
        let tainted = |r: &Refusal| {
            refuse(
                "sign",
                r.host.clone(),
                format!("its session was not bound to an allowed host: {}", r.reason),
            )
        };
        if let Some(Err(r)) = self.binds.iter().map(|b| &b.verdict).find(|v| v.is_err()) {
            return Ok(tainted(r));
        }
        let (host, rule) = match &last.verdict {
            Ok(v) => v,
            Err(r) => return Ok(tainted(r)),
        };
        if last.forwarding {
            return Ok(refuse(
                "sign",
                host.to_string(),
                "a login through a forwarded agent (beyond the host the sandbox reached) is \
                 not signed",
            ));
        }
        match login_of(data, key, last) {
            Ok(()) => Ok(Decision::Sign {
                host: host.clone(),
                rule: rule.clone(),
            }),
            Err(why) => Ok(refuse("sign", host.to_string(), why)),
        }
    }
}

/// Whether a binding is to an allowed host: the key signed the session, `known_hosts` lists
/// it, the policy allows one of its hosts.
fn bind_verdict(
    key: &[u8],
    session_id: &[u8],
    sig: &[u8],
    trust: &Trust,
) -> Result<(Host, String), Refusal> {
    let fp = hostkey::fingerprint(key);
    let refusal = |host: String, reason: String| Refusal {
        request: "session-bind".into(),
        host,
        reason,
    };
    if let Err(e) = hostkey::verify(key, session_id, sig) {
        return Err(refusal(format!("host key {fp}"), e.to_string()));
    }
    let hosts = match trust.known_hosts.hosts_for(key, &trust.policy.candidates()) {
        Lookup::Revoked => {
            return Err(refusal(
                format!("host key {fp}"),
                "known_hosts marks this host key @revoked".into(),
            ));
        }
        Lookup::Hosts(h) => h,
    };
    if hosts.is_empty() {
        return Err(refusal(
            format!("unknown host (key {fp})"),
            "the host key is not in your known_hosts under a name the sandbox may reach".into(),
        ));
    }
    let mut why = Vec::new();
    for h in &hosts {
        match trust.policy.allows(h) {
            Ok(rule) => return Ok((h.clone(), rule)),
            Err(e) => why.push(format!("{h}: {e}")),
        }
    }
    let names: Vec<String> = hosts.iter().map(ToString::to_string).collect();
    Err(refusal(
        names.join(", "),
        format!(
            "the policy does not allow the sandbox to reach it ({})",
            why.join("; ")
        ),
    ))
}

/// Checks that `data` is a public-key login request for `bind`'s session with `key`.
fn login_of(data: &[u8], key: &[u8], bind: &Bind) -> Result<(), String> {
    let not = |what: &str| format!("the data to sign is not a login to the bound session: {what}");
    let mut r = Reader::new(data);
    let parse = |r: &mut Reader<'_>| -> Result<Option<String>, WireError> {
        if r.string()? != bind.session_id.as_slice() {
            return Ok(Some(not("another session identifier")));
        }
        if r.u8()? != msg::USERAUTH_REQUEST {
            return Ok(Some(not("not a user authentication request")));
        }
        let _user = r.string()?;
        let _service = r.string()?;
        let method = r.string()?;
        if method != b"publickey" && method != HOSTBOUND {
            return Ok(Some(not("not a public-key method")));
        }
        if !r.bool()? {
            return Ok(Some(not("no signature expected")));
        }
        let _alg = r.string()?;
        if r.string()? != key {
            return Ok(Some(not("it names another key than the one asked to sign")));
        }
        if method == HOSTBOUND && r.string()? != bind.key.as_slice() {
            return Ok(Some(not("it is bound to another host key")));
        }
        r.end()?;
        Ok(None)
    };
    match parse(&mut r) {
        Ok(None) => Ok(()),
        Ok(Some(why)) => Err(why),
        Err(e) => Err(not(&e.to_string())),
    }
}

#[cfg(test)]
#[path = "filter_tests.rs"]
mod tests;
