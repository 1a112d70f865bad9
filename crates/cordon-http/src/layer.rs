//! The HTTP layer built from the plan, in one place: `[[http.rule]]`s then every
//! `[[network.allow]]` as an allowing rule, `[tls] upstream_ca` read, the judge, secret
//! scanning, the approval broker for `ask` — ready to serve the flows the gateway hands over.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cordon_events::{Action as EvAction, Layer, NewEvent};
use cordon_policy::{DlpAction, HttpAction, HttpRule, JudgeApi, JudgeOnError, Plan};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::intercept::{ConnectFn, Dlp, Emit, InterceptError};
use crate::{CertAuthority, Interceptor, WireCredential, dlp, judge};

/// Where `ask` decisions go: the approval brokers' directory, this session's name there, and
/// how long a question waits before it is denied.
#[derive(Debug, Clone)]
pub struct AskConfig {
    /// The session's approval broker, shared with the exec layer.
    pub approvals: cordon_approval::Approvals,
    /// How long a question waits.
    pub timeout: Duration,
}

/// Why the HTTP layer cannot start.
#[derive(Debug, thiserror::Error)]
pub enum HttpLayerError {
    /// A `[tls] upstream_ca` file cannot be read.
    #[error("cannot read [tls] upstream_ca {path}: {source}")]
    UpstreamCa {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The judge's client cannot be made.
    #[error("the judge: {0}")]
    Judge(String),
    /// The interceptor cannot be made.
    #[error(transparent)]
    Intercept(#[from] InterceptError),
}

/// What the session resolved for the HTTP layer beside its plan.
pub struct Inputs {
    /// Signs the sandbox's leaves.
    pub ca: Arc<CertAuthority>,
    /// Where `ask` decisions go (none, or a broker that cannot start: they are refused, said
    /// in an event).
    pub ask: Option<AskConfig>,
    /// Swapped in at the wire; their real values are what secret scanning knows.
    pub credentials: Vec<WireCredential>,
    /// The host's secret-looking variables, by value: secret scanning knows them too.
    pub host_secrets: Vec<dlp::Known>,
    /// Where events go.
    pub emit: Emit,
    /// The gateway's policy-checked connect, for upstream requests.
    pub connect: ConnectFn,
    /// The session's audit log: while it cannot be written every request is refused (rule
    /// `audit.unwritable`). `None`: nothing to watch.
    pub audit: Option<cordon_events::AuditHealth>,
}

/// Layer 3, ready: the interceptor made from the plan.
pub struct HttpLayer {
    interceptor: Arc<Interceptor>,
}

impl std::fmt::Debug for HttpLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpLayer").finish_non_exhaustive()
    }
}

impl HttpLayer {
    /// Builds the layer from `plan` and what the session resolved beside it (see
    /// [`Inputs`]). Reads `[tls] upstream_ca` now, so a missing file is an error before the
    /// sandbox starts. What runs degraded (no judge key, no broker, scanning off) is reported
    /// through `emit`.
    pub fn from_plan(plan: &Plan, inputs: Inputs) -> Result<Self, HttpLayerError> {
        let Inputs {
            ca,
            ask,
            credentials,
            host_secrets,
            emit,
            connect,
            audit,
        } = inputs;
        let mut upstream_ca_pem = Vec::new();
        for f in &plan.tls.upstream_ca {
            let pem = std::fs::read_to_string(f).map_err(|source| HttpLayerError::UpstreamCa {
                path: f.clone(),
                source,
            })?;
            upstream_ca_pem.push(pem);
        }
        let judge = match &plan.judge {
            Some(j) => Some(Arc::new(
                judge::Judge::new(judge_config(j, &emit), &upstream_ca_pem)
                    .map_err(HttpLayerError::Judge)?,
            )),
            None => None,
        };
        let asker = ask.map(|a| Arc::new(crate::Asker::new(a.approvals, a.timeout)));
        let dlp = scanning(plan, &credentials, host_secrets);
        if dlp.is_none() {
            emit(NewEvent::new(
                Layer::Credentials,
                EvAction::Degraded,
                "outbound secret scanning is off ([dlp] action = \"off\")",
            ));
        }
        let mut interceptor = Interceptor::new(crate::Config {
            ca,
            rules: rules(plan),
            default: plan.http.default,
            upstream_ca_pem,
            connect,
            emit,
            judge,
            asker,
            credentials,
            dlp,
        })?;
        interceptor.learning = plan.learning;
        if let Some(audit) = audit {
            let _ = interceptor.audit.set(audit);
        }
        Ok(Self {
            interceptor: Arc::new(interceptor),
        })
    }

    /// Serves one sandbox connection made to `host:port` that speaks TLS (see
    /// [`Interceptor::serve_tls`]); returns when the connection and its upgrades are done.
    pub async fn serve_tls<S>(&self, stream: S, host: String, port: u16, owner: crate::Owned)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.interceptor
            .clone()
            .serve_tls(stream, host, port, owner)
            .await;
    }

    /// Answers a TLS connection to `host:port` the gateway denied (see [`crate::Denied`]).
    pub async fn refuse_tls<S>(&self, stream: S, host: String, port: u16, denied: crate::Denied)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.interceptor
            .clone()
            .refuse_tls(stream, host, port, denied)
            .await;
    }

    /// Serves one plain-HTTP sandbox connection made to `host:port`.
    pub async fn serve_plain<S>(&self, stream: S, host: String, port: u16, owner: crate::Owned)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.interceptor
            .clone()
            .serve_plain(stream, host, port, owner)
            .await;
    }

    /// Brokers the token exchanges of `logins` (see [`crate::credentials::refresh`]): from
    /// then on a refresh or first login at their endpoints keeps the host's login files
    /// current and the sandbox on placeholders.
    pub fn broker_logins(&self, logins: crate::credentials::refresh::Logins) {
        let _ = self.interceptor.wire.logins.set(logins);
    }

    /// Governs MCP over HTTP by `[mcp]` (see [`crate::mcp`]), tools pinned in `pins` (a
    /// host-side file; `None`: for this session only). Reads the pins file now, so a broken
    /// one is an error before the sandbox starts.
    pub fn govern_mcp(
        &self,
        plan: &cordon_policy::McpPlan,
        pins: Option<std::path::PathBuf>,
    ) -> Result<(), crate::mcp::pins::PinError> {
        let pins = crate::mcp::pins::Pins::open(pins)?;
        let mcp = crate::mcp::Mcp::new(plan, Some(pins));
        let _ = self.interceptor.mcp.set(Arc::new(mcp));
        Ok(())
    }

    /// `text` with every secret the layer knows redacted (see [`Interceptor::redact`]).
    pub fn redact(&self, text: &str) -> String {
        self.interceptor.redact(text).into_owned()
    }
}

/// `[[http.rule]]`s first, in order; then every `[[network.allow]]` host and port allows its
/// requests (a connection-level allowance the HTTP rules can narrow).
pub(crate) fn rules(plan: &Plan) -> Vec<HttpRule> {
    let mut rules = plan.http.rules.clone();
    for r in &plan.network.allow {
        for p in &r.ports {
            rules.push(HttpRule {
                port: Some(*p),
                origin: r.origin.clone(),
                expires: r.expires,
                programs: r.programs.clone(),
                ..HttpRule::new(r.label(), r.host.clone(), HttpAction::Allow)
            });
        }
    }
    rules
}

/// The judge's settings from `[judge]`; its key is read from the host's environment now (a
/// missing one is reported, and the judge is asked without it).
fn judge_config(j: &cordon_policy::JudgePlan, emit: &Emit) -> judge::JudgeConfig {
    let api_key = j
        .credential
        .as_ref()
        .and_then(|var| match std::env::var(var) {
            Ok(v) if !v.is_empty() => Some(v),
            _ => {
                emit(
                    NewEvent::new(
                        Layer::Http,
                        EvAction::Degraded,
                        format!(
                            "the judge's credential ${var} is not set on the host; asking without a key"
                        ),
                    )
                    .shortfall(cordon_events::Shortfall::NoJudgeKey),
                );
                None
            }
        });
    judge::JudgeConfig {
        policy: j.policy.clone(),
        api: match j.api {
            JudgeApi::OpenAi => judge::Api::OpenAi,
            JudgeApi::Anthropic => judge::Api::Anthropic,
        },
        url: j.url.clone(),
        model: j.model.clone(),
        api_key,
        timeout: Duration::from_millis(j.timeout_ms),
        on_error: match j.on_error {
            JudgeOnError::Ask => judge::OnError::Ask,
            JudgeOnError::Deny => judge::OnError::Deny,
        },
        max_body_bytes: usize::try_from(j.max_body_bytes).unwrap_or(16 << 10),
    }
}

/// Secret scanning from `[dlp]` (none when it is off): it looks for every credential's real
/// value (which may go to its own hosts) and the host's secret-looking variables (to their
/// token's issuer, if any).
fn scanning(
    plan: &Plan,
    credentials: &[WireCredential],
    host_secrets: Vec<dlp::Known>,
) -> Option<Dlp> {
    let d = &plan.dlp;
    if d.action == DlpAction::Off {
        return None;
    }
    let mut known: Vec<dlp::Known> = credentials
        .iter()
        .map(|c| dlp::Known {
            name: c.name.clone(),
            value: c.real.clone(),
            hosts: c.hosts.clone(),
        })
        .collect();
    known.extend(host_secrets);
    let exemptions = d.allow.iter().map(dlp::Exemption::from).collect();
    let placeholders: Vec<String> = credentials.iter().map(|c| c.placeholder.clone()).collect();
    Some(Dlp {
        scanner: Arc::new(
            dlp::Scanner::new(known, exemptions).ignoring_placeholders(&placeholders),
        ),
        action: d.action,
        max_body: usize::try_from(d.max_body_bytes).unwrap_or(usize::MAX),
    })
}

#[cfg(test)]
#[path = "layer_tests.rs"]
mod tests;
