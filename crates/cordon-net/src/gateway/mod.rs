//! The egress gateway: the sandbox's only way out (host side).
//!
//! It serves what init made inside the sandbox's network namespace: the TUN device that holds
//! its default route (a userspace TCP/IP stack, smoltcp via `netstack-smoltcp`, terminates
//! every TCP flow here), UDP sockets on the sandbox's loopback port 53 (the resolver), and the
//! explicit-proxy listener. Every TCP flow is decided by name ([`policy::decide`]) before a
//! byte leaves: the SYN is held until policy allowed it and the host-side connect succeeded,
//! so a denied or unreachable destination gets a RST at once and never a half-open socket.
//! Published ports come the other way, through init's helper.
//!
//! Runs on its own tokio runtime (two worker threads), so the supervisor's own loop is
//! untouched. Dropping the [`Gateway`] stops it.

mod owner;
mod packet;
mod policy;
mod proxy;
mod publish;
mod tun;

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::NetworkPlan;
use ipnet::IpNet;
use thiserror::Error;
use tokio::net::TcpStream;

use crate::{DnsAnswer, DnsDecision, HOST_ALIAS, HostResolver, NetConfig, NetError, Resolver};
use policy::{Dest, Verdict};

/// Where events go (the session's audit log); called from the gateway's threads.
pub type Emit = Arc<dyn Fn(NewEvent) + Send + Sync>;
/// Opens a connection to the sandbox's loopback port (for `[[publish]]`); blocking.
pub type InwardFn = Arc<dyn Fn(u16) -> io::Result<std::net::TcpStream> + Send + Sync>;

/// How long the host-side connect may take before the sandbox's SYN is answered with a RST.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A gateway that cannot start.
#[derive(Debug, Error)]
pub enum GatewayError {
    /// The `[dns]`/`[network]` configuration is not usable.
    #[error(transparent)]
    Config(#[from] NetError),
    /// An `allow_ips` entry is not a CIDR range.
    #[error("invalid allow_ips entry {0:?}")]
    BadCidr(String),
    /// A published port cannot be bound on the host.
    #[error(
        "cannot publish on 127.0.0.1:{port}: {source} (is something else listening there? pick another host_port)"
    )]
    Publish {
        /// The host port.
        port: u16,
        /// Why.
        source: io::Error,
    },
    /// The runtime or a socket could not be set up.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: io::Error,
    },
}

/// State shared by every task of one gateway.
pub(crate) struct Shared {
    pub plan: NetworkPlan,
    pub allow_ips: Vec<IpNet>,
    pub resolver: Mutex<Resolver>,
    pub host: HostResolver,
    pub emit: Emit,
    pub inward: OnceLock<InwardFn>,
    /// Host pid of the sandbox's init, to name the process behind a flow.
    pub sandbox_pid: OnceLock<i32>,
}

/// The egress gateway of one session.
pub struct Gateway {
    shared: Arc<Shared>,
    publish: Vec<(cordon_policy::Publish, std::net::TcpListener)>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("plan", &self.shared.plan)
            .field("running", &self.runtime.is_some())
            .finish()
    }
}

impl Gateway {
    /// Validates the plan and binds the published ports on the host's loopback (so a port in
    /// use is an error before the sandbox starts). Nothing runs until [`Gateway::start`].
    pub fn new(plan: &NetworkPlan, emit: Emit) -> Result<Self, GatewayError> {
        let allow_ips = plan
            .allow_ips
            .iter()
            .map(|c| {
                c.parse::<IpNet>()
                    .map_err(|_| GatewayError::BadCidr(c.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cfg = NetConfig {
            block: plan.dns_block.clone(),
            hosts: plan.dns_hosts.clone(),
            upstream: plan.dns_upstream,
            // Exact names a rule allows may resolve to private addresses: the user named them.
            allow_hosts: plan
                .allow
                .iter()
                .filter(|r| !r.host.starts_with("*."))
                .map(|r| r.host.clone())
                .collect(),
            ..NetConfig::default()
        };
        let resolver = Resolver::new(cfg)?;
        let host = resolver.host_resolver();
        let mut publish = Vec::new();
        for p in &plan.publish {
            let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, p.host_port)).map_err(
                |source| GatewayError::Publish {
                    port: p.host_port,
                    source,
                },
            )?;
            publish.push((p.clone(), l));
        }
        Ok(Self {
            shared: Arc::new(Shared {
                plan: plan.clone(),
                allow_ips,
                resolver: Mutex::new(resolver),
                host,
                emit,
                inward: OnceLock::new(),
                sandbox_pid: OnceLock::new(),
            }),
            publish,
            runtime: None,
        })
    }

    /// Whether `[[publish]]` entries need a way into the sandbox.
    pub fn wants_inward(&self) -> bool {
        !self.publish.is_empty()
    }

    /// Serve the sandbox: the TUN device (if init could make one), the DNS sockets and the
    /// proxy listener, all from inside the sandbox's network namespace.
    pub fn start(
        &mut self,
        tun: Option<OwnedFd>,
        dns: Vec<OwnedFd>,
        proxy: OwnedFd,
    ) -> Result<(), GatewayError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cordon-gateway")
            .enable_io()
            .enable_time()
            .build()
            .map_err(|source| GatewayError::Io {
                what: "start the gateway's runtime",
                source,
            })?;
        let io_err = |what| move |source| GatewayError::Io { what, source };
        let _guard = rt.enter();
        for fd in dns {
            let sock = std::net::UdpSocket::from(fd);
            sock.set_nonblocking(true).map_err(io_err("DNS socket"))?;
            let sock = tokio::net::UdpSocket::from_std(sock).map_err(io_err("DNS socket"))?;
            rt.spawn(serve_dns(self.shared.clone(), sock));
        }
        let proxy = std::net::TcpListener::from(proxy);
        proxy
            .set_nonblocking(true)
            .map_err(io_err("proxy listener"))?;
        let proxy = tokio::net::TcpListener::from_std(proxy).map_err(io_err("proxy listener"))?;
        rt.spawn(proxy::serve(self.shared.clone(), proxy));
        if let Some(fd) = tun {
            let t = tun::Tun::new(fd).map_err(io_err("TUN device"))?;
            rt.spawn(tun::run(self.shared.clone(), t));
        }
        for (p, l) in self.publish.drain(..) {
            l.set_nonblocking(true).map_err(io_err("published port"))?;
            let l = tokio::net::TcpListener::from_std(l).map_err(io_err("published port"))?;
            rt.spawn(publish::serve(self.shared.clone(), p, l));
        }
        drop(_guard);
        self.runtime = Some(rt);
        Ok(())
    }

    /// The sandbox's init (host pid): flows' events then name the process that opened them.
    pub fn set_sandbox_pid(&self, pid: i32) {
        let _ = self.shared.sandbox_pid.set(pid);
    }

    /// The way into the sandbox, for published ports.
    pub fn set_inward(&self, f: InwardFn) {
        let _ = self.shared.inward.set(f);
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Shared {
    fn emit(&self, ev: NewEvent) {
        (self.emit)(ev);
    }

    /// Decides a flow to `dest:port` and, when allowed, connects on the host: the name is
    /// resolved with the rebinding/SSRF rule and the connect goes to the checked address.
    /// A denial or failure is reported here; the caller only refuses the flow.
    pub(crate) async fn open(
        &self,
        dest: &Dest,
        port: u16,
        via: &'static str,
        client: Option<std::net::SocketAddrV4>,
    ) -> Result<(TcpStream, Flow), ()> {
        let block = &self.plan.dns_block;
        let verdict = policy::decide(&self.plan, &self.allow_ips, block, dest, port);
        let owner = match (client, self.sandbox_pid.get().copied()) {
            (Some(c), Some(init)) => tokio::task::spawn_blocking(move || owner::find(init, c))
                .await
                .ok()
                .flatten(),
            _ => None,
        };
        let mut flow = Flow {
            dest: dest.clone(),
            port,
            via,
            verdict,
            addr: None,
            owner,
            started: Instant::now(),
        };
        if !flow.verdict.allow {
            self.emit(flow.event(Action::Deny, &flow.verdict.reason.clone()));
            return Err(());
        }
        let addrs = match dest {
            Dest::Ip(ip) => vec![*ip],
            Dest::Name(name) => {
                let host = self.host.clone();
                let name = name.clone();
                match tokio::task::spawn_blocking(move || host.resolve_for_connect(&name)).await {
                    Ok(Ok(a)) => a,
                    Ok(Err(refusal)) => {
                        if let Some(rule) = refusal.rule() {
                            flow.verdict.rule = rule;
                        }
                        self.emit(flow.event(Action::Deny, &refusal.to_string()));
                        return Err(());
                    }
                    Err(e) => {
                        self.emit(flow.event(Action::Error, &format!("lookup task failed: {e}")));
                        return Err(());
                    }
                }
            }
        };
        let mut last = String::from("no address");
        for ip in addrs {
            let sa = SocketAddr::new(ip, port);
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(sa)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    flow.addr = Some(sa);
                    return Ok((s, flow));
                }
                Ok(Err(e)) => last = format!("{sa}: {e}"),
                Err(_) => last = format!("{sa}: timed out"),
            }
        }
        self.emit(flow.event(
            Action::Error,
            &format!("allowed, but the connect failed: {last}"),
        ));
        Err(())
    }

    /// The destination a sandbox address stands for: a name when it is a fake address the
    /// resolver handed out, else the raw address.
    pub(crate) fn dest_for(&self, ip: IpAddr) -> Result<Dest, String> {
        let IpAddr::V4(v4) = ip else {
            return Ok(Dest::Ip(ip));
        };
        let r = self.resolver.lock().unwrap_or_else(|p| p.into_inner());
        if r.is_fake(v4) {
            return match r.name_for(v4) {
                Some(n) => Ok(Dest::Name(n.to_string())),
                None => Err(format!(
                    "{v4} is a cordon DNS address that no name holds (stale or guessed)"
                )),
            };
        }
        Ok(Dest::Ip(ip))
    }

    pub(crate) fn dns_event(&self, d: &DnsDecision, via: &str) {
        let (action, answer) = match &d.answer {
            DnsAnswer::Answered(ip) => (Action::Allow, ip.to_string()),
            DnsAnswer::Empty => (Action::Allow, "no records".to_string()),
            DnsAnswer::NxDomain => (Action::Deny, "NXDOMAIN".to_string()),
            DnsAnswer::Rejected(r) => (Action::Deny, format!("{} ({r})", r.rcode().unwrap_or("-"))),
            DnsAnswer::Dropped(r) => (Action::Deny, format!("dropped ({r})")),
        };
        let name = d.name.clone().unwrap_or_default();
        let qtype = d.qtype.clone().unwrap_or_default();
        let mut ev = NewEvent::new(Layer::Dns, action, format!("{qtype} {name} → {answer}"))
            .detail("name", name)
            .detail("qtype", qtype)
            .detail("answer", answer)
            .detail("via", via);
        if let Some(r) = &d.rule {
            ev = ev.rule(r.clone());
        }
        self.emit(ev);
    }
}

/// One flow's facts, for its events.
pub(crate) struct Flow {
    pub dest: Dest,
    pub port: u16,
    pub via: &'static str,
    pub verdict: Verdict,
    pub addr: Option<SocketAddr>,
    pub owner: Option<owner::Owner>,
    pub started: Instant,
}

impl Flow {
    pub(crate) fn event(&self, action: Action, reason: &str) -> NewEvent {
        let host = self.dest.host();
        let mut ev = NewEvent::new(
            Layer::Network,
            action,
            format!("{host}:{} — {reason}", self.port),
        )
        .rule(self.verdict.rule.clone())
        .detail("host", host)
        .detail("port", self.port)
        .detail("proto", policy::proto_guess(self.port))
        .detail("via", self.via);
        if let Some(a) = self.addr {
            ev = ev.detail("addr", a.to_string());
        }
        if let Some(o) = &self.owner {
            ev = ev.detail("pid", o.pid).detail("cmdline", o.cmdline.clone());
        }
        if self.dest == Dest::Name(HOST_ALIAS.into()) {
            ev = ev.detail("host_loopback", true);
        }
        ev
    }

    /// The closing event of an allowed flow.
    pub(crate) fn finished(&self, up: u64, down: u64, error: Option<&io::Error>) -> NewEvent {
        let reason = match error {
            None => format!("closed after {up} B up, {down} B down"),
            Some(e) => format!("ended ({e}) after {up} B up, {down} B down"),
        };
        self.event(Action::Allow, &reason)
            .detail("bytes_up", up)
            .detail("bytes_down", down)
            .detail(
                "duration_ms",
                u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            )
    }
}

/// Answers DNS queries arriving on one of the sandbox's loopback port-53 sockets.
async fn serve_dns(shared: Arc<Shared>, sock: tokio::net::UdpSocket) {
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut buf).await else {
            continue;
        };
        let (reply, decision) = {
            let mut r = shared.resolver.lock().unwrap_or_else(|p| p.into_inner());
            r.handle_query(&buf[..n])
        };
        shared.dns_event(&decision, "loopback");
        if let Some(reply) = reply {
            let _ = sock.send_to(&reply, from).await;
        }
    }
}

/// Copy buffer per direction: large, so a bulk transfer moves in few big writes.
const RELAY_BUFFER: usize = 256 << 10;

/// Relays both directions until both have ended; returns bytes a→b, b→a and the first error.
///
/// Unlike `tokio::io::copy_bidirectional`, the end of one direction *starts* the other side's
/// shutdown without waiting for it to finish: the userspace stack reports a shutdown done only
/// when the socket is fully closed (after TIME-WAIT), which would hold every flow open — and
/// its closing event back — for seconds after the last byte.
pub(crate) async fn relay<A, B>(a: A, b: B) -> (u64, u64, Option<io::Error>)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (ar, mut aw) = tokio::io::split(a);
    let (br, mut bw) = tokio::io::split(b);
    let mut ar = tokio::io::BufReader::with_capacity(RELAY_BUFFER, ar);
    let mut br = tokio::io::BufReader::with_capacity(RELAY_BUFFER, br);
    let up = async {
        let r = tokio::io::copy_buf(&mut ar, &mut bw).await;
        start_shutdown(&mut bw).await;
        r
    };
    let down = async {
        let r = tokio::io::copy_buf(&mut br, &mut aw).await;
        start_shutdown(&mut aw).await;
        r
    };
    let (u, d) = tokio::join!(up, down);
    let err = u
        .as_ref()
        .err()
        .or(d.as_ref().err())
        .map(|e| io::Error::new(e.kind(), e.to_string()));
    (u.unwrap_or(0), d.unwrap_or(0), err)
}

/// Sends the write side's FIN (polls shutdown once; see [`relay`]).
async fn start_shutdown<W: tokio::io::AsyncWrite + Unpin>(w: &mut W) {
    std::future::poll_fn(|cx| {
        let _ = std::pin::Pin::new(&mut *w).poll_shutdown(cx);
        std::task::Poll::Ready(())
    })
    .await;
}
