//! Credentials: the sandbox holds a placeholder, the real value lives here and goes out only
//! at the wire, in its slot, to its hosts.
//!
//! - [`resolve`]: a plan's `[credentials.NAME]` made into a [`WireCredential`] — the real
//!   value read on the host (an environment variable, a file, a command's output) and an
//!   unguessable placeholder for the sandbox to hold instead, the same in every session
//!   ([`placeholder`]: keyed by a secret of the user's that no sandbox sees).
//! - `swap` (crate-internal): at the wire, placeholders become real values only where the
//!   credential may go; a placeholder anywhere else is a leak and refuses the request.
//!
//! Trust boundary: real values never go back into the sandbox; the caller puts only the
//! placeholder in the sandbox's environment and files.

pub mod login;
pub mod login_file;
pub mod npmrc;
mod placeholder;
pub mod refresh;
pub(crate) mod swap;

pub use placeholder::{KeyError, PlaceholderKey, placeholder};

use cordon_policy::{CredentialPlan, CredentialSlot, CredentialSource, HeaderSlot, HostPattern};

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
    /// The processes it may go from; empty: any.
    pub programs: cordon_policy::Programs,
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
    /// The headers it travels in (lower-case), each with its format; none for a query
    /// parameter.
    pub fn headers(&self) -> Vec<HeaderSlot> {
        match &self.slot {
            CredentialSlot::Header { name, format } => vec![HeaderSlot {
                name: name.clone(),
                format: format.clone(),
            }],
            CredentialSlot::Headers(list) => list.clone(),
            CredentialSlot::Query { .. } => Vec::new(),
        }
    }

    /// Whether header `name` (lower-case) may carry it.
    pub fn carries(&self, name: &str) -> bool {
        match &self.slot {
            CredentialSlot::Header { name: n, .. } => n == name,
            CredentialSlot::Headers(list) => list.iter().any(|h| h.name == name),
            CredentialSlot::Query { .. } => false,
        }
    }

    /// The query parameter it travels in, when it travels in one.
    pub fn query(&self) -> Option<&str> {
        match &self.slot {
            CredentialSlot::Query { name } => Some(name),
            _ => None,
        }
    }

    /// Where it travels, in words (`authorization`, `x-api-key or authorization`, `query
    /// parameter key`).
    pub fn place(&self) -> String {
        match &self.slot {
            CredentialSlot::Query { name } => format!("query parameter {name}"),
            _ => {
                let names: Vec<String> = self.headers().into_iter().map(|h| h.name).collect();
                names.join(" or ")
            }
        }
    }

    /// A header value in `format` holding `value` (the real one, or the placeholder to say
    /// what the sandbox would have sent); `Basic …` is base64-encoded after the scheme.
    pub(crate) fn formatted(format: &str, value: &str) -> String {
        let v = format.replace("{}", value);
        match v.strip_prefix("Basic ") {
            Some(userpass) => format!(
                "Basic {}",
                crate::encoding::b64_encode(userpass.as_bytes(), true)
            ),
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

/// Reads `c`'s real value on the host and makes its placeholder under `key` (the same one
/// every session, for the same name and value).
pub fn resolve(
    c: &CredentialPlan,
    key: &PlaceholderKey,
) -> Result<WireCredential, CredentialError> {
    let real = read(&c.source).ok_or_else(|| CredentialError::Unresolved {
        name: c.name.clone(),
        from: c.source.clone(),
    })?;
    Ok(WireCredential {
        name: c.name.clone(),
        placeholder: placeholder(key, &c.name, &real),
        real,
        hosts: c.hosts.clone(),
        programs: c.programs.clone(),
        slot: c.slot.clone(),
        inject: c.inject,
    })
}

/// Whether `c`'s source gives a value on the host (for `cordon check`; the value is dropped).
pub fn resolves(c: &CredentialPlan) -> bool {
    read(&c.source).is_some()
}

/// A credential's real value, read on the host (trimmed); `None` when it does not resolve.
fn read(source: &CredentialSource) -> Option<String> {
    match source {
        CredentialSource::Env(v) => std::env::var(v).ok(),
        CredentialSource::File(p) => std::fs::read_to_string(p).ok(),
        CredentialSource::Json { file, field } => login::json_field(file, field),
        CredentialSource::Yaml { file, field } => std::fs::read_to_string(file)
            .ok()
            .and_then(|t| login::yaml_value(&t, field)),
        CredentialSource::Npmrc { file, registry } => std::fs::read_to_string(file)
            .ok()
            .and_then(|t| {
                npmrc::tokens(&t)
                    .into_iter()
                    .find(|x| x.registry == *registry)
            })
            .map(|x| x.token),
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

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
