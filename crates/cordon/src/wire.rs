//! The session's network side, wired: the gateway, cordon's CA and trust bundle, the HTTP
//! layer as the gateway's flow handler, and the credentials resolved for the wire (their
//! placeholders, the host secrets secret scanning looks for, the logins brokered).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use cordon_events::{Action, Layer, NewEvent};

/// At exit, the login files the session's token exchanges were held in instead of the host's
/// (see `cordon_http::credentials::refresh`), so the user hears of them once more.
pub(crate) fn held_logins_line(session: &str) {
    let Some(dir) = cordon_events::state_dir().map(|d| d.join("held-logins").join(session)) else {
        return;
    };
    let held: Vec<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().display().to_string())
        .collect();
    if !held.is_empty() {
        eprintln!(
            "cordon: a login made or renewed in the session was not written to your login \
             files (it may be another account's); held in {}: review it and copy it over the \
             login file to use it on the host",
            held.join(", ")
        );
    }
}

/// The host's variables that look like secrets, by value (for secret scanning); those that
/// are a credential's value are known through the credential already.
fn host_secrets(credentials: &[cordon_http::WireCredential]) -> Vec<cordon_http::dlp::Known> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .map(|(k, v)| (k, v.trim().to_string()))
        .filter(|(k, v)| {
            cordon_http::dlp::secret_variable(k, v) && !credentials.iter().any(|c| &c.real == v)
        })
        .map(|(name, value)| cordon_http::dlp::Known {
            name,
            value,
            hosts: Vec::new(),
        })
        .collect()
}

/// A built-in profile's key variable the user has not set: that agent is used another way (a
/// login, another provider), so its credential is simply absent, without a warning.
fn unset_built_in(c: &cordon_policy::CredentialPlan) -> bool {
    let unset = |v: &str| std::env::var_os(v).is_none();
    // A login file without this token (no file, an API-key login): nothing to hide.
    c.origin.is_built_in()
        && match &c.source {
            cordon_policy::CredentialSource::Env(v) => unset(v),
            cordon_policy::CredentialSource::Json { file, .. } => {
                cordon_http::credentials::login::absent_or_json(file)
            }
            _ => false,
        }
}

/// What [`resolve_credentials`] gives.
struct Resolved {
    /// The credentials at the wire: each one's real value and placeholder.
    wire: Vec<cordon_http::WireCredential>,
    /// The variables set inside to a placeholder.
    env: Vec<(String, String)>,
    /// The masked copies of the credentials' files (path, content).
    shown: Vec<(PathBuf, String)>,
    /// The host's secret-looking variables, for secret scanning.
    host: Vec<cordon_http::dlp::Known>,
    /// The logins whose token exchanges are brokered.
    logins: Option<cordon_http::credentials::refresh::Logins>,
}

/// Reads each `[credentials.NAME]` source on the host, makes the session's placeholder for it,
/// and gives the placeholder (never the value) for the sandbox's environment and masked
/// copies of the files credentials list (path, content). A source that does not
/// resolve is a warning: that credential is simply absent inside. A file is shown only when
/// every credential listing it had its value replaced there and nothing secret is left in it
/// (no token shape, no other known value); otherwise it stays hidden, with a warning. Also
/// returns the host's secret-looking variables (read once, for secret scanning too).
fn resolve_credentials(
    plan: &cordon_policy::Plan,
    sink: &cordon_net::Emit,
    session: &str,
) -> Resolved {
    let mut out: Vec<cordon_http::WireCredential> = Vec::new();
    let mut env = Vec::new();
    let key = match plan.credentials.is_empty() {
        true => None,
        false => placeholder_key(sink),
    };
    // Logins renewed (or first made) inside: brokered whether or not their file exists yet.
    // An exchange that is not a refresh of the host's own login is held in cordon's state
    // (never visible inside), not written to the host's login file.
    let held = cordon_events::state_dir().map(|d| d.join("held-logins").join(session));
    let logins = key
        .clone()
        .and_then(|k| cordon_http::credentials::refresh::Logins::new(k, &plan.credentials))
        .map(|l| match held {
            Some(d) => l.with_held_dir(d),
            None => l,
        });
    for c in plan.credentials.clone() {
        let Some(key) = &key else { break };
        let wire = match cordon_http::credentials::resolve(&c, key) {
            Ok(w) => w,
            Err(_) if unset_built_in(&c) => continue,
            Err(e) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "cordon: warning: {e}; it is absent in the sandbox"
                );
                sink(
                    NewEvent::new(
                        Layer::Credentials,
                        Action::Degraded,
                        format!("credential `{}` did not resolve", c.name),
                    )
                    .rule(format!("credentials.{}", c.name)),
                );
                continue;
            }
        };
        if let Some(var) = &c.env {
            env.push((var.clone(), wire.placeholder.clone()));
        }
        let hosts: Vec<String> = c.hosts.iter().map(ToString::to_string).collect();
        sink(
            NewEvent::new(
                Layer::Credentials,
                Action::Apply,
                format!(
                    "credential `{}`: the sandbox holds a placeholder; the real value goes only to {} in {}",
                    c.name,
                    hosts.join(", "),
                    wire.place()
                ),
            )
            .rule(format!("credentials.{}", c.name)),
        );
        out.push(wire);
    }
    let host = host_secrets(&out);
    let shown = masked_copies(plan, &out, &host, sink);
    Resolved {
        wire: out,
        env,
        shown,
        host,
        logins,
    }
}

/// Masked copies of the files credentials list: one per file, every credential's value
/// replaced by its placeholder; a file that would still hold a secret is left out (hidden),
/// said in a warning and an event.
fn masked_copies(
    plan: &cordon_policy::Plan,
    out: &[cordon_http::WireCredential],
    host: &[cordon_http::dlp::Known],
    sink: &cordon_net::Emit,
) -> Vec<(PathBuf, String)> {
    let mut files: Vec<(PathBuf, Vec<String>)> = Vec::new();
    for c in &plan.credentials {
        // A login file is shown when a token of it resolved (otherwise it holds none).
        let login = c
            .source
            .login_file()
            .filter(|_| out.iter().any(|w| w.name == c.name));
        for f in c.files.iter().map(PathBuf::as_path).chain(login) {
            match files.iter_mut().find(|(p, _)| p == f) {
                Some((_, names)) => names.push(c.name.clone()),
                None => files.push((f.to_path_buf(), vec![c.name.clone()])),
            }
        }
    }
    let mut shown = Vec::new();
    if files.is_empty() {
        return shown;
    }
    let mut known: Vec<cordon_http::dlp::Known> = out
        .iter()
        .map(|c| cordon_http::dlp::Known {
            name: c.name.clone(),
            value: c.real.clone(),
            hosts: Vec::new(),
        })
        .collect();
    known.extend(host.iter().cloned());
    let placeholders: Vec<String> = out.iter().map(|c| c.placeholder.clone()).collect();
    let leftover =
        cordon_http::dlp::Scanner::new(known, Vec::new()).ignoring_placeholders(&placeholders);
    for (path, names) in files {
        let masked = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|text| mask_file(plan, out, &leftover, &path, &names, text));
        match masked {
            Ok(content) => shown.push((path, content)),
            Err(why) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "cordon: warning: {} stays hidden: {why}",
                    path.display()
                );
                sink(
                    NewEvent::new(
                        Layer::Credentials,
                        Action::Degraded,
                        format!(
                            "no masked copy of {} ({why}); it stays hidden",
                            path.display()
                        ),
                    )
                    .rule(format!("credentials.{}", names.join(","))),
                );
            }
        }
    }
    shown
}

/// `text` (the file at `path`) with the values of the credentials `names` replaced by their
/// placeholders, or why it stays hidden: a value not there as written, a login field not
/// holding its placeholder after, or any other secret left.
fn mask_file(
    plan: &cordon_policy::Plan,
    out: &[cordon_http::WireCredential],
    leftover: &cordon_http::dlp::Scanner,
    path: &Path,
    names: &[String],
    mut text: String,
) -> Result<String, String> {
    for name in names {
        let c = out
            .iter()
            .find(|c| &c.name == name)
            .ok_or_else(|| format!("credential `{name}` did not resolve"))?;
        if !text.contains(&c.real) {
            return Err(format!(
                "it does not hold credential `{name}`'s value as written"
            ));
        }
        text = text.replace(&c.real, &c.placeholder);
    }
    let fields: Vec<(&str, &str)> = plan
        .credentials
        .iter()
        .filter(|c| names.contains(&c.name))
        .filter_map(|c| match &c.source {
            cordon_policy::CredentialSource::Json { file, field } if *file == path => {
                let w = out.iter().find(|w| w.name == c.name)?;
                Some((field.as_str(), w.placeholder.as_str()))
            }
            _ => None,
        })
        .collect();
    if !fields.is_empty() {
        cordon_http::credentials::login::check_masked(&text, &fields)?;
    }
    // A YAML login's field holds exactly its placeholder once replaced.
    for c in plan.credentials.iter().filter(|c| names.contains(&c.name)) {
        if let cordon_policy::CredentialSource::Yaml { file, field } = &c.source
            && *file == path
            && let Some(w) = out.iter().find(|w| w.name == c.name)
            && cordon_http::credentials::login::yaml_value(&text, field).as_deref()
                != Some(w.placeholder.as_str())
        {
            return Err(format!(
                "field {field} does not hold its placeholder in the masked copy"
            ));
        }
    }
    let left = leftover.scan(text.as_bytes(), cordon_http::dlp::Place::Body);
    if let Some(f) = left.first() {
        return Err(format!(
            "it holds another secret ({}), which no credential covers",
            f.kind
        ));
    }
    Ok(text)
}

/// Where the user's placeholder secret lives: beside the CA, in the data directory that every
/// sandbox has masked.
fn placeholder_key_path() -> Option<PathBuf> {
    cordon_events::data_dir().map(|d| d.join("credentials").join("placeholder.key"))
}

/// The user's placeholder secret (made on first use), so a credential keeps its placeholder
/// from one session to the next. Without it, one for this session only, said in a warning
/// and an event; `None` only when not even that can be had (credentials are then absent).
fn placeholder_key(sink: &cordon_net::Emit) -> Option<cordon_http::credentials::PlaceholderKey> {
    use cordon_http::credentials::PlaceholderKey;
    let why = match placeholder_key_path().map(|p| PlaceholderKey::load_or_create(&p)) {
        Some(Ok(k)) => return Some(k),
        Some(Err(e)) => e.to_string(),
        None => "no data directory (set HOME or XDG_DATA_HOME)".to_string(),
    };
    let _ = writeln!(
        std::io::stderr(),
        "cordon: warning: {why}; credential placeholders are new this session"
    );
    sink(NewEvent::new(
        Layer::Credentials,
        Action::Degraded,
        format!("placeholders last this session only: {why}"),
    ));
    match PlaceholderKey::ephemeral() {
        Ok(k) => Some(k),
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "cordon: warning: no random source for placeholders ({e}); credentials are absent in the sandbox"
            );
            None
        }
    }
}

/// The HTTP layer as the gateway's flow handler: the one place layer 2 hands flows to layer
/// 3 (neither crate knows the other; they meet here).
struct HttpFlows(std::sync::Arc<cordon_http::HttpLayer>);

impl cordon_net::FlowHandler for HttpFlows {
    fn serve(
        &self,
        stream: Box<dyn cordon_net::FlowIo>,
        to: cordon_net::FlowTarget,
    ) -> cordon_net::FlowFuture {
        let layer = self.0.clone();
        Box::pin(async move {
            let (name, port, owner) = (to.name, to.port, to.owner);
            match to.kind {
                cordon_net::FlowKind::Tls => layer.serve_tls(stream, name, port, owner).await,
                cordon_net::FlowKind::Plain => layer.serve_plain(stream, name, port, owner).await,
            }
        })
    }

    fn redact(&self, text: &str) -> String {
        self.0.redact(text)
    }

    fn refuse(
        &self,
        stream: Box<dyn cordon_net::FlowIo>,
        to: cordon_net::FlowTarget,
        denial: cordon_net::FlowDenial,
    ) -> cordon_net::FlowFuture {
        let layer = self.0.clone();
        let denied = cordon_http::Denied(denial);
        Box::pin(async move { layer.refuse_tls(stream, to.name, to.port, denied).await })
    }
}

/// The sandbox's trust bundle: a file beside the CA (masked in every sandbox), made again only
/// when the host's roots or the CA change, so a start neither reads nor sends ~220 KB of
/// roots. When that file cannot be made the bundle is built in memory, as before.
fn trust_bundle(
    dir: &Path,
    ca: &cordon_http::CertAuthority,
    sink: &cordon_net::Emit,
) -> cordon_sandbox::TrustBundle {
    match cordon_sandbox::bundle_file(dir, ca.cert_pem()) {
        Ok(file) => cordon_sandbox::TrustBundle::File(file),
        Err(e) => {
            sink(NewEvent::new(
                Layer::Http,
                Action::Log,
                format!(
                    "the sandbox's trust bundle is built at each start: cannot keep it in {}: {e}",
                    dir.display()
                ),
            ));
            cordon_sandbox::TrustBundle::Inline(cordon_sandbox::bundle_pem(ca.cert_pem()))
        }
    }
}

/// The egress gateway as the sandbox crate sees it.
pub(crate) struct GatewayAttach {
    pub gateway: cordon_net::Gateway,
    emit: cordon_net::Emit,
    /// The sandbox's trust bundle when the HTTP layer intercepts.
    pub bundle: Option<cordon_sandbox::TrustBundle>,
    /// Masked copies of credential files.
    pub shown: Vec<(PathBuf, String)>,
    /// Variables set inside to a credential's placeholder.
    pub env: Vec<(String, String)>,
}

/// The gateway, with the HTTP layer when cordon's CA can be had (made on first use under the
/// data directory, which no sandbox sees). Without it, HTTPS is decided per connection only,
/// said loudly.
pub(crate) fn start_gateway(
    plan: &cordon_policy::Plan,
    sink: &cordon_net::Emit,
    audit: &cordon_events::AuditHealth,
    approvals: Option<&cordon_approval::Approvals>,
    execs: Option<cordon_net::ExecsOf>,
    session: &str,
    link: bool,
) -> Result<GatewayAttach> {
    // Command lines in events are redacted by token shape until the HTTP layer, which knows
    // the credentials' values too, takes over.
    let redact: cordon_net::Redact =
        std::sync::Arc::new(|s: &str| cordon_http::dlp::redact(s).into_owned());
    // A decision nobody could audit is not made: new flows and requests are refused while
    // the log cannot be written.
    let wiring = cordon_net::Wiring {
        emit: sink.clone(),
        redact,
        audit: Some(audit.clone()),
        execs,
        // A namespace sandbox: the proxy is its loopback listener.
        link,
    };
    let gateway = cordon_net::Gateway::new(plan, wiring)?;
    // The data directory is masked in every sandbox (the plan says so): the CA key is safe there.
    let ca = cordon_events::data_dir()
        .ok_or_else(|| anyhow!("no data directory (set HOME or XDG_DATA_HOME)"))
        .and_then(|d| {
            let dir = d.join("ca");
            let ca = cordon_http::CertAuthority::load_or_create(&dir)?;
            Ok((ca, dir))
        });
    match ca {
        Ok((ca, ca_dir)) => {
            let ca = std::sync::Arc::new(ca);
            let bundle = trust_bundle(&ca_dir, &ca, sink);
            // `ask` decisions go to the session's one broker, the exec layer's too.
            let ask = approvals.map(|a| cordon_http::AskConfig {
                approvals: a.clone(),
                timeout: Duration::from_secs(plan.exec.ask_timeout_secs),
            });
            let resolved = resolve_credentials(plan, sink, session);
            // Secret scanning also looks for the host's secret-looking variables by value.
            let inputs = cordon_http::Inputs {
                ca,
                ask,
                credentials: resolved.wire,
                host_secrets: resolved.host,
                emit: sink.clone(),
                connect: gateway.connector(),
                audit: Some(audit.clone()),
            };
            let layer =
                cordon_http::HttpLayer::from_plan(plan, inputs).context("start the HTTP layer")?;
            crate::mcp::govern(&layer, plan)?;
            if let Some(l) = resolved.logins {
                layer.broker_logins(l);
            }
            let layer = std::sync::Arc::new(layer);
            crate::redact::know(layer.clone());
            let gateway = gateway.with_http(std::sync::Arc::new(HttpFlows(layer)));
            sink(NewEvent::new(
                Layer::Http,
                Action::Apply,
                "HTTP layer: each request decided by rule; HTTPS intercepted with cordon's CA",
            ));
            Ok(GatewayAttach {
                gateway,
                emit: sink.clone(),
                bundle: Some(bundle),
                shown: resolved.shown,
                env: resolved.env,
            })
        }
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "cordon: warning: no HTTPS inspection ({}); HTTP(S) is decided by host and port only",
                crate::output::chain(&e)
            );
            sink(
                NewEvent::new(
                    Layer::Http,
                    Action::Degraded,
                    format!("no HTTPS inspection: {}", crate::output::chain(&e)),
                )
                .shortfall(cordon_events::Shortfall::NoInspection),
            );
            Ok(GatewayAttach {
                gateway,
                emit: sink.clone(),
                bundle: None,
                shown: Vec::new(),
                env: Vec::new(),
            })
        }
    }
}

impl cordon_sandbox::NetAttach for GatewayAttach {
    fn attach(&mut self, h: cordon_sandbox::NetHandoff) -> Result<(), String> {
        let tun = match h.tun {
            Ok(fd) => {
                (self.emit)(NewEvent::new(
                    Layer::Network,
                    Action::Apply,
                    "egress gateway: every TCP flow and DNS query goes through cordon",
                ));
                Some(fd)
            }
            Err(reason) => {
                // Still fenced: without the TUN there is no route out at all, only the proxy.
                let _ = writeln!(
                    std::io::stderr(),
                    "cordon: warning: {reason}; explicit-proxy mode only: programs that ignore \
                     HTTP_PROXY have no network (see `cordon doctor`)"
                );
                (self.emit)(
                    NewEvent::new(
                        Layer::Network,
                        Action::Degraded,
                        "explicit-proxy mode only: no TUN device",
                    )
                    .detail("reason", reason)
                    .shortfall(cordon_events::Shortfall::ProxyOnly),
                );
                None
            }
        };
        if let Some(table) = h.sockets {
            let table = std::sync::Arc::new(table);
            self.gateway.set_sandbox(
                h.init_pid,
                std::sync::Arc::new(move |local, remote| {
                    table.tcp_inode(local, remote).ok().flatten()
                }),
            );
        }
        // The sandbox opens the TUN, the gateway reads it: one framing for both.
        const _: () = assert!(cordon_sandbox::TUN_VNET_HDR_LEN == cordon_net::TUN_VNET_HDR_LEN);
        self.gateway
            .start(tun, h.dns, h.proxy)
            .map_err(|e| e.to_string())
    }

    fn wants_inward(&self) -> bool {
        self.gateway.wants_inward()
    }

    fn ca_bundle(&self) -> Option<cordon_sandbox::TrustBundle> {
        self.bundle.clone()
    }

    fn inward(&mut self, inward: cordon_sandbox::Inward) {
        let inward = std::sync::Arc::new(inward);
        self.gateway
            .set_inward(std::sync::Arc::new(move |port| inward.connect(port)));
    }
}
