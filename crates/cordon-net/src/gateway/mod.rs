//! The egress gateway: the sandbox's only way out (host side).
//!
//! It serves what init made inside the sandbox's network namespace: the TUN device that holds
//! its default route (a userspace TCP/IP stack, smoltcp via `netstack-smoltcp`, terminates
//! every TCP flow here), UDP sockets on the sandbox's loopback port 53 (the resolver), and the
//! explicit-proxy listener. Every TCP flow is decided by name (the `policy` module) before a
//! byte leaves: the SYN is held until policy allowed it and the host-side connect succeeded,
//! so a denied or unreachable destination gets a RST at once and never a half-open socket.
//! One exception, for readable denials: a denied flow to a port that may carry TLS (443,
//! 8443) to a name completes its handshake when the HTTP layer is on, and if its first bytes
//! are a ClientHello the HTTP layer answers it with cordon's 403 (see
//! [`FlowHandler::refuse`]); nothing goes upstream. Every other denied port is refused at
//! its SYN.
//! Published ports come the other way, through init's helper.
//!
//! Runs on its own tokio runtime (two worker threads), so the supervisor's own loop is
//! untouched. Dropping the [`Gateway`] stops it.

mod flow;
mod flow_events;
pub(crate) use flow_events::Flow;
pub(crate) use relay::relay;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod handler;
mod identity;
mod owner;
pub(crate) mod packet;
mod policy;
mod proxy;
mod publish;
mod relay;
mod tun;
pub(crate) mod vnet;
mod who;

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::{Duration, Instant};

use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::{HostPattern, HttpPlan, NetworkPlan};
use ipnet::IpNet;
use thiserror::Error;
use tokio::net::TcpStream;

use crate::{DnsAnswer, DnsDecision, HostResolver, NetError, Resolver};
pub use flow::{FlowPolicy, FlowVerdict, Route, explain_flow};
pub use handler::{
    ConnectFn, FlowDenial, FlowFuture, FlowHandler, FlowIo, FlowKind, FlowTarget, Redact,
};
pub use identity::ExecsOf;
pub use policy::learnable;
use policy::{Dest, FlowDecision};

/// Where events go (the session's audit log); called from the gateway's threads.
pub use cordon_events::Emit;
/// The virtio-net header the gateway expects in front of every packet on the TUN descriptor
/// it is given (`IFF_VNET_HDR`, `TUNSETVNETHDRSZ`, no offloads offered).
pub const TUN_VNET_HDR_LEN: usize = vnet::HDR_LEN;
/// Opens a connection to the sandbox's loopback port (for `[[publish]]`); blocking.
pub type InwardFn = Arc<dyn Fn(u16) -> io::Result<std::net::TcpStream> + Send + Sync>;
/// The inode of the sandbox's TCP socket from a local to a remote address, if any (blocking,
/// cheap: an exact sock_diag lookup in the sandbox's network namespace).
pub type SocketLookup =
    Arc<dyn Fn(std::net::SocketAddrV4, std::net::SocketAddrV4) -> Option<u64> + Send + Sync>;

/// The size of each of a transparent flow's four buffers in the userspace stack (its two TCP
/// windows and two rings; the receive window is the first 256 KiB of its buffer, see
/// `tun::TCP_RECV_WINDOW`). The supervisor has the allocator serve this size and larger from
/// fresh pages, and nothing smaller (`cordon_sandbox::prefer_fresh_pages_for_large_allocations`).
pub const FLOW_WINDOW_BYTES: usize = 1 << 20;

/// How long the host-side connect may take before the sandbox's SYN is answered with a RST.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Flows (held, live, or in the HTTP layer) one sandbox may have at once. Each may hold about
/// 3.5 MiB of buffered data in the supervisor (the stack's 256 KiB receive window and three
/// 1 MiB buffers, see [`FLOW_WINDOW_BYTES`], and the relay's two 128 KiB buffers), which no
/// sandbox limit covers: this bounds it (about 1.75 GiB in the worst case, a flow moving bulk
/// data both ways) and the descriptors with it.
pub(crate) const MAX_FLOWS: usize = 512;
/// A new flow at [`MAX_FLOWS`] waits this long for one to close, its SYN held as a kernel's
/// listen backlog holds one: past the client's own patience for a connect, so it is the client
/// that gives up, never a refusal while it still waits; past the wait the SYN is dropped (on
/// the TUN path; the explicit proxy answers 503), as a full backlog drops it, and the client's
/// next retransmission waits again. A client that opens many connections at
/// once goes past the cap for seconds: Go's transport dials anew for each request that finds no
/// idle connection, and when another connection frees first the request takes that one and
/// the dial is dropped (a 500-connection `hey` had 804 sockets, 292 of them in SYN-SENT, with
/// 512 flows open). A refusal at 2 s failed such requests by the thousand; a dial the client
/// dropped costs nothing while it waits, and if it gets a slot, its client's RST ends the flow
/// at once.
const SLOT_WAIT: Duration = Duration::from_secs(30);
/// At most this many new flows wait for a slot; past it they are turned away at once (on the
/// TUN path the SYN is dropped, as past a full listen backlog, and the client retransmits), so
/// a SYN flood from the sandbox cannot make the supervisor hold one task per SYN. A waiting flow
/// holds no buffers (its task, its held SYN: about a KiB), so the bound is well above the cap
/// of flows: with 512 flows open, `hey -c 500` kept 300–470 dials waiting for seconds, and
/// each refused at once past a bound of 512 was a failed request when no other connection
/// freed for it first (2,393 in one run).
const SLOT_WAITERS: usize = 4096;
/// After one direction of a flow has ended, how long the other may sit idle before the flow is
/// closed: a peer that never answers a half-close must not hold the supervisor's descriptors.
const HALF_CLOSE_IDLE: Duration = Duration::from_secs(30);
/// Per-second budget of DNS and refusal events; beyond it they are counted and summarised, so a
/// flood from inside cannot fill the disk with the audit log.
const EVENTS_PER_SECOND: u32 = 200;
/// How long an allowed flow's SYN may wait, after its host-side connect, for the lookup of the
/// process behind it (see [`Shared::open`]).
const OWNER_HOLD: Duration = Duration::from_millis(5);
/// How long a denied flow that may be TLS has to send its first bytes.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// The sandbox's init (host pid) and its socket table, to name the process behind a flow.
    pub sandbox: OnceLock<(i32, SocketLookup)>,
    /// Set when the session ends: relays stop and report.
    pub stop: tokio::sync::watch::Sender<bool>,
    /// Relays running now.
    pub live: AtomicUsize,
    /// The HTTP layer, when interception is on.
    pub http: OnceLock<HttpSide>,
    /// Redacts command lines for events when no HTTP layer does.
    pub redact: Redact,
    /// One permit per flow (see [`MAX_FLOWS`]).
    pub slots: Arc<tokio::sync::Semaphore>,
    /// New flows waiting for a slot (see [`SLOT_WAITERS`]).
    pub slot_waiters: AtomicUsize,
    /// Rate limit of the noisy events: (window start, emitted, suppressed).
    pub noisy: Mutex<(Instant, u32, u64)>,
    /// Flows turned away at the cap: when the last event said so, and how many since.
    pub at_cap: Mutex<(Option<Instant>, u64)>,
    /// The thread that names the process behind each flow, once the sandbox is known (`None`:
    /// it could not start; events then name no process).
    pub owners: OnceLock<Option<owner::Lookups>>,
    /// The session's audit log: while it cannot be written no new flow is let out.
    pub audit: Option<cordon_events::AuditHealth>,
    /// A learning run: a flow only the lack of a rule refuses is let out, and logged as
    /// what it would have been ([`policy::learnable`]).
    pub learning: bool,
    /// The hosts of the rules and credentials that name programs: the process behind a
    /// connection to one of them is found before it is decided ([`who`]).
    pub program_hosts: Vec<HostPattern>,
    /// What the exec supervisor saw each process started to run.
    pub execs: Option<identity::ExecsOf>,
    /// Serving a VM's link: the explicit proxy answers on it too (see [`Wiring::link`]).
    pub link: bool,
    /// Who the sandbox's processes are, once the sandbox is known.
    pub identify: OnceLock<Option<identity::Identify>>,
}

/// Layer 3 as the gateway uses it: which flows it takes, and the handler that serves them.
pub(crate) struct HttpSide {
    pub plan: HttpPlan,
    /// `[tls] passthrough`: decided by name only, never intercepted.
    pub passthrough: Vec<HostPattern>,
    pub handler: Arc<dyn FlowHandler>,
}

/// What the gateway does with a TCP flow to a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HttpFlow {
    /// Not for the HTTP layer (no interception, another port, a passthrough host): the
    /// connection-level policy decides and bytes are spliced.
    NotHttp,
    /// The HTTP layer decides each request.
    Intercept,
    /// Nothing could let a request through: refuse the connection.
    Deny(FlowDecision),
}

/// What a gateway reports to and reads from the rest of the session, given when it is made.
/// The other things it learns later are set once each, when they come to be: the HTTP layer
/// ([`Gateway::with_http`]: it needs this gateway's [`Gateway::connector`] first), the
/// sandbox's init and its way in ([`Gateway::set_sandbox`], [`Gateway::set_inward`]: they
/// exist only once the sandbox does).
pub struct Wiring {
    /// Where its events go.
    pub emit: Emit,
    /// Hides secrets in the command lines events name, until an HTTP layer (which knows more
    /// of them) takes over.
    pub redact: Redact,
    /// The session's audit log: while it cannot be written no new flow is let out (rule
    /// `audit.unwritable`). `None`: nothing to watch.
    pub audit: Option<cordon_events::AuditHealth>,
    /// What the exec supervisor saw each sandbox process started to run: rules keyed on
    /// programs then know which script an interpreter runs. `None`: execs are not seen.
    pub execs: Option<ExecsOf>,
    /// The packet descriptor is a VM's link ([`crate::ether::link`]), not a TUN device: the
    /// guest has no loopback listener of ours, so the explicit proxy is served on the link at
    /// [`crate::ether::LINK_GATEWAY`] port 3128 too.
    pub link: bool,
}

/// The egress gateway of one session.
pub struct Gateway {
    shared: Arc<Shared>,
    /// The plan's `[http]` and `[tls] passthrough`, for [`Gateway::with_http`].
    http_plan: (HttpPlan, Vec<HostPattern>),
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
    /// `redact` hides secrets in the command lines events name, until an HTTP layer (which
    /// knows more of them) takes over.
    pub fn new(whole: &cordon_policy::Plan, wiring: Wiring) -> Result<Self, GatewayError> {
        let Wiring {
            emit,
            redact,
            audit,
            execs,
            link,
        } = wiring;
        let plan = &whole.network;
        let allow_ips = plan
            .allow_ips
            .iter()
            .map(|c| {
                c.parse::<IpNet>()
                    .map_err(|_| GatewayError::BadCidr(c.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cfg = flow::net_config(whole);
        let resolver = Resolver::new(cfg)?;
        let host = resolver.host_resolver();
        let mut publish = Vec::new();
        for p in &whole.publish {
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
                sandbox: OnceLock::new(),
                stop: tokio::sync::watch::Sender::new(false),
                live: AtomicUsize::new(0),
                http: OnceLock::new(),
                redact,
                slots: Arc::new(tokio::sync::Semaphore::new(MAX_FLOWS)),
                slot_waiters: AtomicUsize::new(0),
                noisy: Mutex::new((Instant::now(), 0, 0)),
                at_cap: Mutex::new((None, 0)),
                owners: OnceLock::new(),
                audit,
                learning: whole.learning,
                program_hosts: whole.program_hosts(),
                execs,
                link,
                identify: OnceLock::new(),
            }),
            http_plan: (whole.http.clone(), whole.tls.passthrough.clone()),
            publish,
            runtime: None,
        })
    }

    /// Turns the HTTP layer on: TLS to port 443 and plain HTTP to port 80 (and every request
    /// through the explicit proxy) go to `handler` when the plan's rules could let a request
    /// to the host through; the rest is decided by connection as without it.
    pub fn with_http(self, handler: Arc<dyn FlowHandler>) -> Self {
        let (plan, passthrough) = self.http_plan.clone();
        let _ = self.shared.http.set(HttpSide {
            plan,
            passthrough,
            handler,
        });
        self
    }

    /// The policy-checked connect (the host-side lookup with the rebinding/SSRF rule, then
    /// the checked addresses only), for the HTTP layer's upstream requests.
    pub fn connector(&self) -> ConnectFn {
        let shared = self.shared.clone();
        Arc::new(move |host, port| {
            let shared = shared.clone();
            Box::pin(async move { shared.connect_checked(&host, port).await })
        })
    }

    /// Whether `[[publish]]` entries need a way into the sandbox.
    pub fn wants_inward(&self) -> bool {
        !self.publish.is_empty()
    }

    /// Serve the sandbox: the TUN device (if init could make one; its packets framed behind a
    /// virtio-net header of [`TUN_VNET_HDR_LEN`] bytes), the DNS sockets and the proxy
    /// listener, all from inside the sandbox's network namespace.
    pub fn start(
        &mut self,
        tun: Option<OwnedFd>,
        dns: Vec<OwnedFd>,
        proxy: OwnedFd,
    ) -> Result<(), GatewayError> {
        // One worker, as pasta, slirp4netns and mitmproxy each serve their side on one thread.
        // A flow is a chain of dependent hops (TUN read, the stack, TLS, HTTP, the upstream
        // socket and back), so a second worker mostly woke up to take one hop and parked
        // again; with two, 1 KiB HTTPS requests at 32 connections cost 0.095 ms of the
        // machine's CPU each against 0.067 with one (issue #18). Work that blocks (host
        // lookups, loading the host's roots, published ports' way in) runs on the runtime's
        // blocking threads, never on this one.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
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
            // The packet path (TUN reads, the userspace stack, its TUN writes) shares the
            // worker with the relays it feeds. A thread of its own (beside two workers) was
            // measured A/B in three loaded runs: 1 KiB c=32 +0-15%, but spliced 10 MiB 20-30%
            // slower every time: on two cores a third busy thread competes with the relay it
            // feeds (issue #18).
            let t = tun::Tun::new(fd).map_err(io_err("TUN device"))?;
            rt.spawn(tun::run(self.shared.clone(), t, rt.handle().clone()));
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

    /// The sandbox's init (host pid) and a way to find its sockets: flows' events then name
    /// the process that opened them.
    pub fn set_sandbox(&self, init_pid: i32, sockets: SocketLookup) {
        let _ = self.shared.sandbox.set((init_pid, sockets));
    }

    /// The way into the sandbox, for published ports.
    pub fn set_inward(&self, f: InwardFn) {
        let _ = self.shared.inward.set(f);
    }
}

impl Drop for Gateway {
    /// Flows still open when the session ends are stopped and reported (up to a second),
    /// then the runtime goes.
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            self.shared.stop.send_replace(true);
            let shared = self.shared.clone();
            rt.block_on(async move {
                let deadline = Instant::now() + Duration::from_secs(1);
                while shared.live.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                // Let the flows' owners emit their closing events: each holds its slot until
                // it has, so all slots back means every event is out. Waiting on that rather
                // than a fixed pause costs nothing when the session had no flows open.
                let grace = Instant::now() + Duration::from_millis(20);
                while shared.slots.available_permits() < MAX_FLOWS && Instant::now() < grace {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            });
            rt.shutdown_background();
        }
        self.shared.report_turned_away();
    }
}

impl Shared {
    fn emit(&self, ev: NewEvent) {
        (self.emit)(ev);
    }

    /// Emits a DNS or refusal event within the per-second budget; past it, counts it and
    /// reports the count when the next second starts.
    pub(crate) fn emit_noisy(&self, ev: NewEvent) {
        let summary = {
            let mut n = self.noisy.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let mut summary = None;
            if now.duration_since(n.0) >= Duration::from_secs(1) {
                if n.2 > 0 {
                    summary = Some(n.2);
                }
                *n = (now, 0, 0);
            }
            if n.1 >= EVENTS_PER_SECOND {
                n.2 += 1;
                return;
            }
            n.1 += 1;
            summary
        };
        if let Some(count) = summary {
            self.emit(
                NewEvent::new(
                    Layer::Network,
                    Action::Log,
                    format!(
                        "{count} DNS or refusal events in one second went over the budget of {EVENTS_PER_SECOND}/s and were not logged one by one (a flood from inside the sandbox?)"
                    ),
                )
                .rule("network.event-budget")
                .detail("suppressed", count),
            );
        }
        self.emit(ev);
    }

    /// A slot for a new flow, or `None` when the sandbox still has [`MAX_FLOWS`] after
    /// [`SLOT_WAIT`] (at once when [`SLOT_WAITERS`] flows are waiting already).
    pub(crate) async fn slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let mut permit = self.slots.clone().try_acquire_owned().ok();
        if permit.is_none() {
            if self.slot_waiters.fetch_add(1, Ordering::Relaxed) < SLOT_WAITERS {
                let wait = self.slots.clone().acquire_owned();
                permit = tokio::time::timeout(SLOT_WAIT, wait)
                    .await
                    .ok()
                    .and_then(Result::ok);
            }
            self.slot_waiters.fetch_sub(1, Ordering::Relaxed);
        }
        if permit.is_none() {
            self.turned_away_at_cap();
        }
        permit
    }

    /// Reports a flow turned away at the cap: at most one event a second, which counts the
    /// ones since the last. A client that dials past the cap for seconds (Go's transport
    /// races a dial against every request that finds no idle connection) retransmits each
    /// dropped SYN, and one event per SYN was ~200 a second, crowding out the rest of the log.
    fn turned_away_at_cap(&self) {
        let since = {
            let mut c = self.at_cap.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            if c.0
                .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
            {
                c.1 += 1;
                return;
            }
            std::mem::replace(&mut *c, (Some(now), 0)).1
        };
        let more = match since {
            0 => String::new(),
            n => format!(" ({n} more turned away in the second before, not logged one by one)"),
        };
        self.emit(
            NewEvent::new(
                Layer::Network,
                Action::Deny,
                format!("{MAX_FLOWS} connections are open already; a new one waits (its SYN dropped, as by a full listen backlog) or is refused (explicit proxy) until some close{more}"),
            )
            .rule("network.max-flows")
            .detail("turned_away", since + 1),
        );
    }

    /// At the session's end: the flows turned away at the cap that no event counted yet.
    fn report_turned_away(&self) {
        let n = std::mem::take(&mut self.at_cap.lock().unwrap_or_else(|p| p.into_inner()).1);
        if n > 0 {
            self.emit(
                NewEvent::new(
                    Layer::Network,
                    Action::Deny,
                    format!("{n} more connections were turned away at the cap of {MAX_FLOWS} open ones before the session ended"),
                )
                .rule("network.max-flows")
                .detail("turned_away", n),
            );
        }
    }

    /// Decides a flow to `dest:port` and, when allowed, connects on the host: the name is
    /// resolved with the rebinding/SSRF rule and the connect goes to the checked address.
    /// A denial or failure is reported here; the caller only refuses the flow, and learns from
    /// the returned verdict whether policy refused it (`allow` false) or it was allowed but
    /// could not be reached (`allow` true).
    pub(crate) async fn open(
        &self,
        dest: &Dest,
        port: u16,
        via: &'static str,
        client: Option<(std::net::SocketAddrV4, std::net::SocketAddrV4)>,
    ) -> Result<(TcpStream, Flow), FlowDecision> {
        let blocked = |n: &str| self.host.blocked(n);
        let first = policy::decide(&self.plan, &self.allow_ips, &blocked, dest, port, None);
        let mut flow = Flow::new(dest, port, via, first.clone(), client);
        // Only rules that name programs could let it out: its process decides, found while
        // the connect is under way (as for every flow's event) and before any byte moves.
        let keyed = first.rule.is(policy::OWNER_UNKNOWN).then_some(first);
        let mut verdict = match &keyed {
            Some(v) => FlowDecision {
                allow: true,
                ..v.clone()
            },
            None => flow.verdict.clone(),
        };
        let learned = self.learning && !verdict.allow && policy::learnable(&verdict.rule);
        verdict.allow |= learned;
        if verdict.allow && self.audit.as_ref().is_some_and(|a| !a.writable()) {
            verdict = FlowDecision {
                allow: false,
                rule: cordon_events::AUDIT_UNWRITABLE.into(),
                reason: "the audit log cannot be written (its disk full?): no new connection goes out until it can".into(),
            };
        }
        flow.verdict = verdict;
        flow.learned = learned && flow.verdict.allow;
        if !flow.verdict.allow {
            let (verdict, reason) = (flow.verdict.clone(), flow.verdict.reason.clone());
            self.emit_later(flow, Action::Deny, reason).await;
            return Err(verdict);
        }
        let addrs = match dest {
            Dest::Ip(ip) => vec![*ip],
            Dest::Name(name) => match self.lookup(name, !learned).await {
                Ok(a) => a,
                Err(Some(refusal)) => {
                    let (action, reason) = match refusal.rule() {
                        // A policy refusal (blocklist, rebinding, host alias).
                        Some(rule) => {
                            flow.verdict.rule = rule;
                            flow.verdict.allow = false;
                            flow.verdict.reason = refusal.to_string();
                            // Refused after all: not something a learning run let through.
                            flow.learned = false;
                            (Action::Deny, refusal.to_string())
                        }
                        None => (Action::Error, refusal.to_string()),
                    };
                    let verdict = flow.verdict.clone();
                    self.emit_later(flow, action, reason).await;
                    return Err(verdict);
                }
                Err(None) => {
                    let verdict = flow.verdict.clone();
                    self.emit_later(flow, Action::Error, "lookup task failed".into())
                        .await;
                    return Err(verdict);
                }
            },
        };
        // The connect is sent first and the process looked up while the host's network
        // answers it.
        let connecting = connect_any(&addrs, port);
        tokio::pin!(connecting);
        let early = std::future::poll_fn(|cx| Poll::Ready(connecting.as_mut().poll(cx))).await;
        if let Some(first) = keyed {
            flow.verdict = self.decide_for_owner(&mut flow, dest, port, first).await;
            if !flow.verdict.allow {
                let (verdict, reason) = (flow.verdict.clone(), flow.verdict.reason.clone());
                self.emit_later(flow, Action::Deny, reason).await;
                return Err(verdict);
            }
        }
        self.find_owner(&flow);
        let connected = match early {
            Poll::Ready(r) => r,
            Poll::Pending => connecting.await,
        };
        match connected {
            Ok((s, sa)) => {
                let _ = s.set_nodelay(true);
                flow.addr = Some(sa);
                // The client's SYN is still held, so its socket is still open: a connection
                // shorter than the lookup (connect, read a byte, close) would otherwise leave
                // its event without a process. The lookup ran beside the connect, so this
                // costs only what it takes longer, and never more than OWNER_HOLD.
                flow.owner.settled(OWNER_HOLD).await;
                Ok((s, flow))
            }
            Err(last) => {
                let verdict = flow.verdict.clone();
                self.emit_later(
                    flow,
                    Action::Error,
                    format!("allowed, but the connect failed: {last}"),
                )
                .await;
                Err(verdict)
            }
        }
    }

    /// What to hand the HTTP layer for a flow to `dest:port` that `v` denied, when the flow
    /// may be TLS (see [`policy::maybe_tls`]) to a name and a handler can answer it: the
    /// name, and the denial. `None`: the flow is refused at its SYN, as every other denial.
    pub(crate) fn tls_denial(
        &self,
        dest: &Dest,
        port: u16,
        v: &FlowDecision,
    ) -> Option<(String, FlowDenial)> {
        let Dest::Name(name) = dest else {
            return None;
        };
        (self.http.get().is_some() && !v.allow && policy::maybe_tls(port)).then(|| {
            let denial = FlowDenial {
                rule: v.rule.clone(),
                reason: v.reason.clone(),
                allow_with: policy::allow_with(v, dest, port),
            };
            (name.clone(), denial)
        })
    }

    /// Answers a denied flow that was accepted to be seen: when its first bytes are a TLS
    /// ClientHello the handler's `refuse` gets it (those bytes replayed), otherwise it is
    /// closed unread. Nothing goes upstream either way.
    pub(crate) async fn answer_denied<S: FlowIo>(
        &self,
        mut stream: S,
        name: String,
        port: u16,
        denial: FlowDenial,
    ) {
        use tokio::io::AsyncReadExt;
        let Some(layer) = self.http.get() else {
            return;
        };
        let mut head = Vec::with_capacity(policy::HELLO_PEEK);
        let peek = async {
            let mut chunk = [0u8; policy::HELLO_PEEK];
            while head.len() < policy::HELLO_PEEK {
                match stream
                    .read(&mut chunk[..policy::HELLO_PEEK - head.len()])
                    .await
                {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => head.extend_from_slice(&chunk[..n]),
                }
            }
            true
        };
        if !matches!(tokio::time::timeout(HELLO_TIMEOUT, peek).await, Ok(true))
            || !policy::is_client_hello(&head)
        {
            return;
        }
        let to = FlowTarget {
            name,
            port,
            kind: FlowKind::Tls,
            owner: None,
        };
        let stream = proxy::prefixed(head, stream);
        layer.handler.refuse(stream, to, denial).await;
    }

    /// The host-side lookup of `name` with the rebinding/SSRF rule: static answers at once, a
    /// real lookup on the blocking pool. `Err(None)` when that task itself failed.
    /// `vouched`: a rule allows this connection, so a name it names exactly may resolve to a
    /// private address; a connection only a learning run lets through has no such rule.
    async fn lookup(
        &self,
        name: &str,
        vouched: bool,
    ) -> Result<Vec<IpAddr>, Option<crate::Refusal>> {
        let looked_up = match self.host.answer_locally(name, vouched) {
            Some(r) => r,
            None => {
                let (host, n) = (self.host.clone(), name.to_string());
                tokio::task::spawn_blocking(move || match vouched {
                    true => host.resolve_for_connect(&n),
                    false => host.resolve_unvouched(&n),
                })
                .await
                .map_err(|_| None)?
            }
        };
        looked_up.map_err(Some)
    }

    /// Reports a flow refused before any connect (see [`HttpFlow::Deny`]).
    pub(crate) async fn refuse(
        &self,
        dest: &Dest,
        port: u16,
        via: &'static str,
        client: Option<(std::net::SocketAddrV4, std::net::SocketAddrV4)>,
        verdict: FlowDecision,
    ) {
        let reason = verdict.reason.clone();
        let flow = Flow::new(dest, port, via, verdict, client);
        self.emit_later(flow, Action::Deny, reason).await;
    }

    /// Emits a refused flow's event, naming the process behind it: the lookup runs while the
    /// socket still exists, before the caller refuses the flow (a fraction of a millisecond).
    async fn emit_later(&self, flow: Flow, action: Action, reason: String) {
        self.find_owner(&flow);
        flow.owner_settled().await;
        self.emit_noisy(flow.event(action, &reason));
    }

    /// What happens to a TCP flow to `dest:port` (see [`HttpFlow`]): the HTTP layer takes
    /// ports 443 and 80.
    pub(crate) fn http_flow(&self, dest: &Dest, port: u16) -> HttpFlow {
        self.http_flow_for(dest, port, false)
    }

    /// [`http_flow`](Self::http_flow), for any port when `any_port` (a plain request through
    /// the explicit proxy is HTTP whatever its port).
    pub(crate) fn http_flow_for(&self, dest: &Dest, port: u16, any_port: bool) -> HttpFlow {
        let Some(layer) = self.http.get() else {
            return HttpFlow::NotHttp;
        };
        let blocked = |n: &str| self.host.blocked(n);
        let flow = flow::http_flow(
            &layer.plan,
            &layer.passthrough,
            &self.plan,
            &blocked,
            dest,
            port,
            any_port,
        );
        match flow {
            // Learning: the HTTP layer sees each request, and records what its rules say.
            HttpFlow::Deny(d) if self.learning && policy::learnable(&d.rule) => HttpFlow::Intercept,
            f => f,
        }
    }

    /// The connect an allowed HTTP request makes: the host-side lookup with the
    /// rebinding/SSRF rule, then the checked addresses only.
    pub(crate) async fn connect_checked(&self, name: &str, port: u16) -> io::Result<TcpStream> {
        // A request the HTTP layer sees only because a learning run let its connection in.
        let vouched = !self.learning || self.plan.allowing(name, port).is_some();
        let addrs = self.lookup(name, vouched).await.map_err(|r| match r {
            Some(r) => io::Error::new(io::ErrorKind::PermissionDenied, r.to_string()),
            None => io::Error::other("lookup task failed"),
        })?;
        connect_any(&addrs, port)
            .await
            .map(|(s, _)| s)
            .map_err(io::Error::other)
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
        self.emit_noisy(ev);
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

/// Connects to the first of `addrs` that answers within [`CONNECT_TIMEOUT`]; the error says
/// what the last attempt met.
async fn connect_any(addrs: &[IpAddr], port: u16) -> Result<(TcpStream, SocketAddr), String> {
    let mut last = String::from("no address");
    for ip in addrs {
        let sa = SocketAddr::new(*ip, port);
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(sa)).await {
            Ok(Ok(s)) => return Ok((s, sa)),
            Ok(Err(e)) => last = format!("{sa}: {e}"),
            Err(_) => last = format!("{sa}: timed out"),
        }
    }
    Err(last)
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
