//! Wiring of `[ssh]`: the filtering agent the sandbox sees as `SSH_AUTH_SOCK`, asked about
//! hosts through the network layer's own flow decision, and the files of `~/.ssh` shown.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::{HostPattern, Plan};
use cordon_ssh::{AgentProxy, Host, HostPolicy, KnownHosts, Trust};

/// Where the sandbox sees the agent: cordon's own place inside the masked `/run`.
pub(crate) const AGENT_SOCKET: &str = "/run/cordon/ssh-agent.sock";

/// "The policy allows the host on its port" is what the gateway would do with a TCP
/// connection there: the same pure function `cordon explain` uses.
struct NetworkHosts(Plan);

impl HostPolicy for NetworkHosts {
    fn allows(&self, host: &Host) -> Result<String, String> {
        match cordon_net::explain_flow(&self.0, &host.name, host.port, false, None) {
            Ok(v) if v.allow => Ok(v.rule.to_string()),
            Ok(v) => Err(format!("{} ({})", v.reason, v.rule)),
            Err(e) => Err(e.to_string()),
        }
    }

    fn candidates(&self) -> Vec<Host> {
        let mut out = Vec::new();
        for r in &self.0.network.allow {
            if let HostPattern::Exact(name) = &r.host {
                out.extend(r.ports.iter().map(|p| Host::new(name, *p)));
            }
        }
        out
    }
}

/// The proxy's events go to the session's sink; the first refusal for each host also gets a
/// line on the user's terminal (unless `quiet`), since inside, ssh only says "Permission
/// denied (publickey)".
fn with_terminal_lines(sink: &cordon_net::Emit, quiet: bool) -> cordon_ssh::Emit {
    let sink = sink.clone();
    let told = Mutex::new(HashSet::<String>::new());
    Arc::new(move |ev: NewEvent| {
        if !quiet && ev.action == Action::Deny {
            let host = ev
                .detail
                .get("host")
                .and_then(|h| h.as_str())
                .unwrap_or_default()
                .to_string();
            let first = told.lock().unwrap_or_else(|p| p.into_inner()).insert(host);
            if first {
                let line = cordon_events::terminal::safe(&ev.reason);
                // A pty in raw mode needs the carriage returns; a broken stderr is not fatal.
                let _ = write!(std::io::stderr(), "\r\ncordon: {line}\r\n");
            }
        }
        sink(ev)
    })
}

/// The host's ssh agent socket (`SSH_AUTH_SOCK`), when set: the session plan denies it
/// wherever it lives (`crate::session_plan::resolve`), and the filtering agent talks to it.
pub(crate) fn host_agent() -> Option<PathBuf> {
    std::env::var_os("SSH_AUTH_SOCK")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// What `[ssh]` adds to the sandbox's view: the files of `[ssh] show` and the filtering
/// agent's socket.
#[derive(Default)]
pub(crate) struct SshView {
    pub shown: Vec<(PathBuf, String)>,
    pub sockets: Vec<cordon_sandbox::PlacedSocket>,
}

/// Reads `[ssh] show`'s files for the sandbox's view, and, with `[ssh] agent` and an agent on
/// the host, starts the filtering agent and places its socket. The proxy returned serves
/// until it is dropped, after the sandbox is gone.
pub(crate) fn setup(
    plan: &Plan,
    sink: &cordon_net::Emit,
    quiet: bool,
) -> (Option<AgentProxy>, SshView) {
    let mut view = SshView::default();
    let proxy = start(plan, sink, quiet, &mut view);
    (proxy, view)
}

fn start(
    plan: &Plan,
    sink: &cordon_net::Emit,
    quiet: bool,
    view: &mut SshView,
) -> Option<AgentProxy> {
    let degraded = |what: String| sink(NewEvent::new(Layer::Credentials, Action::Degraded, what));
    for r in &plan.ssh.show {
        match std::fs::read_to_string(&r.path) {
            Ok(text) => view.shown.push((r.path.clone(), text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => degraded(format!("{} is not shown: {e}", r.path.display())),
        }
    }
    if !plan.ssh.agent {
        return None;
    }
    let upstream = host_agent()?;
    let mut known_hosts = KnownHosts::default();
    for f in ["known_hosts", "known_hosts2"] {
        let path = plan.home.join(".ssh").join(f);
        match KnownHosts::load(&path) {
            Ok(k) => known_hosts.extend(k),
            Err(e) => degraded(format!(
                "{}: {e}; its hosts get no signature",
                path.display()
            )),
        }
    }
    let trust = Trust {
        known_hosts,
        policy: Box::new(NetworkHosts(plan.clone())),
    };
    let emit = with_terminal_lines(sink, quiet);
    match AgentProxy::start(&std::env::temp_dir(), &upstream, trust, emit) {
        Ok(proxy) => {
            view.sockets.push(cordon_sandbox::PlacedSocket {
                path: AGENT_SOCKET.into(),
                host: proxy.socket().to_path_buf(),
                env: "SSH_AUTH_SOCK".into(),
            });
            sink(
                NewEvent::new(
                    Layer::Credentials,
                    Action::Apply,
                    format!(
                        "ssh agent: {AGENT_SOCKET} signs only logins to allowed hosts in known_hosts"
                    ),
                )
                .rule("ssh.agent"),
            );
            Some(proxy)
        }
        Err(e) => {
            degraded(format!(
                "ssh agent: not started ({e}); SSH_AUTH_SOCK is not set"
            ));
            None
        }
    }
}
