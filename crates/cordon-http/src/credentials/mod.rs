//! Credentials: the sandbox holds a placeholder, the real value lives here and goes out only
//! at the wire, in its slot, to its hosts.
//!
//! - [`resolve`]: a plan's `[credentials.NAME]` made into a [`WireCredential`] — the real
//!   value read on the host (an environment variable, a file, a command's output) and an
//!   unguessable placeholder for the sandbox to hold instead.
//! - `swap` (crate-internal): at the wire, placeholders become real values only where the
//!   credential may go; a placeholder anywhere else is a leak and refuses the request.
//!
//! Trust boundary: real values never go back into the sandbox; the caller puts only the
//! placeholder in the sandbox's environment and files.

pub(crate) mod swap;

use cordon_policy::{CredentialPlan, CredentialSlot, CredentialSource, HostPattern};

/// A credential as the interceptor holds it: the sandbox's placeholder and the real value.
#[derive(Clone)]
pub struct WireCredential {
    /// Name, for events.
    pub name: String,
    /// What the sandbox holds.
    pub placeholder: String,
    /// The real value (never logged, never sent anywhere but `hosts`).
    pub real: String,
    /// The hosts it may go to.
    pub hosts: Vec<HostPattern>,
    /// Where in a request it travels: a header (with its format) or a query parameter.
    pub slot: CredentialSlot,
    /// Put it in every request to `hosts`, whatever the client sent.
    pub inject: bool,
}

impl std::fmt::Debug for WireCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireCredential")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl WireCredential {
    /// The header it travels in (lower-case), when it travels in one.
    pub fn header(&self) -> Option<&str> {
        match &self.slot {
            CredentialSlot::Header { name, .. } => Some(name),
            CredentialSlot::Query { .. } => None,
        }
    }

    /// The query parameter it travels in, when it travels in one.
    pub fn query(&self) -> Option<&str> {
        match &self.slot {
            CredentialSlot::Query { name } => Some(name),
            CredentialSlot::Header { .. } => None,
        }
    }

    /// Where it travels, in words (`authorization`, `query parameter key`).
    pub fn place(&self) -> String {
        match &self.slot {
            CredentialSlot::Header { name, .. } => name.clone(),
            CredentialSlot::Query { name } => format!("query parameter {name}"),
        }
    }

    /// The header value to inject, holding `value` (the real one, or the placeholder to say
    /// what the sandbox would have sent); `Basic …` is base64-encoded after the scheme.
    pub(crate) fn formatted(&self, value: &str) -> String {
        let v = match &self.slot {
            CredentialSlot::Header { format, .. } => format.replace("{}", value),
            CredentialSlot::Query { .. } => value.to_string(),
        };
        match v.strip_prefix("Basic ") {
            Some(userpass) => format!("Basic {}", crate::b64::encode(userpass.as_bytes(), true)),
            None => v,
        }
    }
}

/// Why a credential is not there.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Its source gave nothing: the variable is unset or empty, the file unreadable or
    /// empty, the command failed or printed nothing.
    #[error("credential `{name}` did not resolve ({from:?})")]
    Unresolved {
        /// The credential.
        name: String,
        /// Where its value was looked for.
        from: CredentialSource,
    },
}

/// Reads `c`'s real value on the host and makes the session's placeholder for it.
pub fn resolve(c: &CredentialPlan) -> Result<WireCredential, CredentialError> {
    let real = read(&c.source).ok_or_else(|| CredentialError::Unresolved {
        name: c.name.clone(),
        from: c.source.clone(),
    })?;
    Ok(WireCredential {
        name: c.name.clone(),
        placeholder: placeholder_for(&real),
        real,
        hosts: c.hosts.clone(),
        slot: c.slot.clone(),
        inject: c.inject,
    })
}

/// A credential's real value, read on the host (trimmed); `None` when it does not resolve.
fn read(source: &CredentialSource) -> Option<String> {
    match source {
        CredentialSource::Env(v) => std::env::var(v).ok(),
        CredentialSource::File(p) => std::fs::read_to_string(p).ok(),
        CredentialSource::Command(argv) => {
            let (program, args) = argv.split_first()?;
            std::process::Command::new(program)
                .args(args)
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        }
    }
    .map(|v| v.trim().to_string())
    .filter(|v| !v.is_empty())
}

/// An unguessable `cordon-` placeholder, as long as the real value where that is long enough
/// for clients that check lengths.
fn placeholder_for(real: &str) -> String {
    // As long as the value (so scrubbing a response keeps its length), at least 12.
    let len = real.len().max(12);
    let mut bytes = vec![0u8; len.div_ceil(2)];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut bytes)
    });
    if read.is_err() {
        // No /dev/urandom: std's per-process random hash keys, never a constant.
        use std::hash::{BuildHasher, Hasher};
        for (i, chunk) in bytes.chunks_mut(8).enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(i);
            chunk.copy_from_slice(&h.finish().to_le_bytes()[..chunk.len()]);
        }
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("cordon-{}", &hex[..len - 7])
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
