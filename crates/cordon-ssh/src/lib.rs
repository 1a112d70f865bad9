//! cordon's filtering ssh-agent proxy. Runs on the host side, in the supervisor: the sandbox
//! sees its socket (and `SSH_AUTH_SOCK` pointing at it), never the user's agent. It is one
//! of the things crossing the boundary (`cordon_sandbox::Crossing::HostSocket`), and what
//! crosses is only the agent protocol: the sandboxed side is untrusted, the user's agent
//! (host `SSH_AUTH_SOCK`), `known_hosts` and the policy's answer are trusted.
//!
//! What passes to the user's agent: listing identities (public keys), OpenSSH's
//! `session-bind@openssh.com` when the host key's signature over the session verifies and
//! `known_hosts` lists that key for a host the policy lets the sandbox reach, and a signature
//! only for a public-key login to exactly that bound session. Everything else (adding,
//! removing or locking keys, unbound signatures such as `ssh-keygen -Y`, signatures after a
//! binding to an unknown or disallowed host, logins through a forwarded agent) is answered
//! with failure and reported. The agent protocol is parsed here (draft-miller-ssh-agent and
//! OpenSSH's PROTOCOL.agent): three messages are read, and their signature checks use `ring`.

#![forbid(unsafe_code)]

mod filter;
mod hostkey;
mod known_hosts;
mod proxy;
mod wire;

pub use filter::{Decision, HostPolicy, Refusal, Session, Trust};
pub use hostkey::{VerifyError, fingerprint};
pub use known_hosts::{Host, KnownHosts, Lookup};
pub use proxy::{AgentProxy, Emit, ProxyError};
pub use wire::WireError;
