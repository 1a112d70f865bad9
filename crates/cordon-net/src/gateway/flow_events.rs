//! One flow's facts and the events they make: the decision, where it went, the process
//! behind it, and what a learning run let through.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_events::{Action, Layer, NewEvent};

use super::owner;
use super::policy::{self, Dest, FlowDecision};
use crate::HOST_ALIAS;

/// One flow's facts, for its events.
pub(crate) struct Flow {
    pub dest: Dest,
    pub port: u16,
    pub via: &'static str,
    pub verdict: FlowDecision,
    pub addr: Option<SocketAddr>,
    /// The sandbox side's socket (its local and remote address), to find the process.
    pub client: Option<(std::net::SocketAddrV4, std::net::SocketAddrV4)>,
    pub owner: Arc<owner::OwnerSlot>,
    pub started: Instant,
    /// Let out only because this is a learning run: `verdict` is the refusal it escaped.
    pub learned: bool,
    /// Who the process is, when a rule naming programs had it found.
    pub who: Option<Arc<cordon_policy::Owner>>,
}

impl Flow {
    pub(crate) fn new(
        dest: &Dest,
        port: u16,
        via: &'static str,
        verdict: FlowDecision,
        client: Option<(std::net::SocketAddrV4, std::net::SocketAddrV4)>,
    ) -> Self {
        Flow {
            dest: dest.clone(),
            port,
            via,
            verdict,
            addr: None,
            client,
            owner: Arc::new(owner::OwnerSlot::new()),
            started: Instant::now(),
            learned: false,
            who: None,
        }
    }

    /// Waits (at most 200 ms) for the background owner lookup, so the event can name the
    /// process.
    pub(crate) async fn owner_settled(&self) {
        self.owner.settled(Duration::from_millis(200)).await;
    }

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
        if let Some(o) = self.owner.get() {
            ev = ev.detail("pid", o.pid).detail("cmdline", o.cmdline.clone());
        }
        if let Some(who) = &self.who {
            ev = ev.detail(cordon_policy::program::EVENT_KEY, who.to_detail());
        }
        if self.dest == Dest::Name(HOST_ALIAS.into()) {
            ev = ev.detail("host_loopback", true);
        }
        if self.learned {
            ev = ev.detail(cordon_events::LEARN, "would deny");
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
