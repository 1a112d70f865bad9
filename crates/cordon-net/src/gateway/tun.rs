//! The transparent path: every packet the sandbox routes out arrives on the TUN device.
//!
//! Each packet is looked at before the userspace stack sees it: UDP to port 53 (any address)
//! is answered by the resolver; other UDP gets "port unreachable", ICMP echo "prohibited".
//! A TCP SYN is held while policy decides and the host-side connect runs; then it is fed to
//! the stack (which completes the handshake and hands us the stream) or answered with a RST
//! (a denied flow that may be TLS is completed instead, for the HTTP layer's readable 403).

use std::collections::HashMap;
use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use cordon_events::{Action, Layer, NewEvent};
use futures::{SinkExt, StreamExt};
use netstack_smoltcp::StackBuilder;
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::packet::{self, Parsed};
use super::{Flow, FlowDenial, FlowKind, FlowTarget, Shared};

/// Per-flow socket buffers in the stack (the TCP window): 1 MiB each way keeps a loopback-speed
/// stream busy; allocated from fresh pages (see `prefer_fresh_pages_for_large_allocations`).
const TCP_BUFFER: u32 = 1 << 20;
const MTU: usize = 65520;

/// The TUN device, non-blocking, for the runtime's reactor.
pub(crate) struct Tun(AsyncFd<std::fs::File>);

impl Tun {
    pub(crate) fn new(fd: OwnedFd) -> io::Result<Self> {
        // `new` is deprecated because a registered descriptor could be closed behind the
        // reactor's back; here the File owns it and lives exactly as long as the AsyncFd.
        // (`register`, the replacement, is `unsafe`, which this crate forbids.)
        #[allow(deprecated)]
        Ok(Self(AsyncFd::new(std::fs::File::from(fd))?))
    }

    async fn write(&self, pkt: &[u8]) {
        loop {
            let Ok(mut guard) = self.0.writable().await else {
                return;
            };
            match guard.try_io(|f| f.get_ref().write(pkt)) {
                Ok(Ok(_)) => return,
                // A packet the kernel refuses (or a full queue it drops) is a lost packet;
                // TCP retransmits.
                Ok(Err(_)) => return,
                Err(_would_block) => continue,
            }
        }
    }
}

type Key = (SocketAddrV4, SocketAddrV4);
/// A flow's place among the sandbox's [`super::MAX_FLOWS`]; freed when the flow ends.
type Slot = tokio::sync::OwnedSemaphorePermit;

enum FlowState {
    /// Deciding and connecting; the client's SYN is held.
    Pending,
    /// Connected on the host; waiting for the stack to hand over the sandbox side.
    Ready(Box<(TcpStream, Flow, Slot)>),
    /// For the HTTP layer (name, port); waiting for the stack to hand over the sandbox side.
    Intercept(String, u16, Slot),
    /// Denied, but it may be TLS: accepted so a ClientHello gets cordon's 403 (name, port).
    Refuse(Box<(String, u16, FlowDenial)>, Slot),
    /// Relaying.
    Live,
}

type Flows = Arc<Mutex<HashMap<Key, FlowState>>>;

/// The userspace stack as the gateway runs it: TCP only (UDP and ICMP are answered here).
pub(super) fn stack_builder() -> StackBuilder {
    StackBuilder::default()
        .enable_tcp(true)
        .enable_udp(false)
        .enable_icmp(false)
        .mtu(MTU)
        .tcp_recv_buffer_size(TCP_BUFFER)
        .tcp_send_buffer_size(TCP_BUFFER)
}

pub(crate) async fn run(shared: Arc<Shared>, tun: Tun) {
    let built = stack_builder().build();
    let (stack, runner, _, listener) = match built {
        Ok(parts) => parts,
        Err(e) => {
            shared.emit(NewEvent::new(
                Layer::Network,
                Action::Error,
                format!("the userspace TCP/IP stack failed to start: {e}; the sandbox has no transparent network"),
            ));
            return;
        }
    };
    let (Some(runner), Some(listener)) = (runner, listener) else {
        return;
    };
    tokio::spawn(runner);
    let tun = Arc::new(tun);
    let (mut to_stack, mut from_stack) = stack.split();
    let out = tun.clone();
    tokio::spawn(async move {
        while let Some(Ok(pkt)) = from_stack.next().await {
            out.write(&pkt).await;
        }
    });
    let flows: Flows = Arc::new(Mutex::new(HashMap::new()));
    tokio::spawn(accept(shared.clone(), flows.clone(), listener));
    // SYNs whose connect succeeded come back here to be fed to the stack.
    let (inject_tx, mut inject_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let mut reported: HashSet<SocketAddrV4> = HashSet::new();
    let mut buf = vec![0u8; MTU + 64];
    loop {
        tokio::select! {
            Some(syn) = inject_rx.recv() => {
                if to_stack.send(syn).await.is_err() {
                    return;
                }
            }
            ready = tun.0.readable() => {
                let Ok(mut guard) = ready else { return };
                loop {
                    let n = match guard.try_io(|f| f.get_ref().read(&mut buf)) {
                        Ok(Ok(0)) => return,
                        Ok(Ok(n)) => n,
                        Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                        // The sandbox is gone (EBADFD/EIO once the namespace dies).
                        Ok(Err(_)) => return,
                        Err(_would_block) => break,
                    };
                    let pkt = &buf[..n];
                    match packet::parse(pkt) {
                        Parsed::Tcp { src, dst, syn_only: true, seq } => {
                            let syn = Syn { src, dst, seq, packet: pkt.to_vec() };
                            hold_syn(&shared, &flows, &tun, &inject_tx, syn).await;
                        }
                        Parsed::Tcp { .. } => {
                            if to_stack.send(pkt.to_vec()).await.is_err() {
                                return;
                            }
                        }
                        Parsed::Udp { src, dst, payload } if dst.port() == 53 => {
                            let (reply, decision) = {
                                let mut r = shared.resolver.lock().unwrap_or_else(|p| p.into_inner());
                                r.handle_query(payload)
                            };
                            shared.dns_event(&decision, "tun");
                            if let Some(reply) = reply {
                                tun.write(&packet::udp(dst, src, &reply)).await;
                            }
                        }
                        Parsed::Udp { dst, .. } => {
                            if reported.len() < 4096 && reported.insert(dst) {
                                shared.emit(refused_datagram(format!("UDP to {dst} — only DNS may use UDP"), "network.udp", dst.ip(), Some(dst.port()), "udp"));
                            }
                            if let Some(icmp) = packet::icmp_unreachable(pkt, true) {
                                tun.write(&icmp).await;
                            }
                        }
                        Parsed::Ping { dst, .. } => {
                            if reported.len() < 4096 && reported.insert(SocketAddrV4::new(dst, 0)) {
                                shared.emit(refused_datagram(format!("ICMP echo to {dst} — ping leaves no sandbox"), "network.icmp", &dst, None, "icmp"));
                            }
                            if let Some(icmp) = packet::icmp_unreachable(pkt, false) {
                                tun.write(&icmp).await;
                            }
                        }
                        Parsed::Other => {}
                    }
                }
            }
        }
    }
}

/// The event for a UDP datagram or ping refused (once per destination).
fn refused_datagram(
    reason: String,
    rule: &str,
    host: &std::net::Ipv4Addr,
    port: Option<u16>,
    proto: &str,
) -> NewEvent {
    let mut ev = NewEvent::new(Layer::Network, Action::Deny, reason)
        .rule(rule)
        .detail("host", host.to_string());
    if let Some(p) = port {
        ev = ev.detail("port", p);
    }
    ev.detail("proto", proto).detail("via", "tun")
}

/// Takes each TCP stream the stack completed and serves it as its flow's state says: relayed
/// to the host-side connection made for it, or handed to the HTTP layer.
async fn accept(shared: Arc<Shared>, flows: Flows, mut listener: netstack_smoltcp::TcpListener) {
    while let Some((stream, local, remote)) = listener.next().await {
        let (SocketAddr::V4(src), SocketAddr::V4(dst)) = (local, remote) else {
            continue;
        };
        let state = {
            let mut f = flows.lock().unwrap_or_else(|p| p.into_inner());
            match f.insert((src, dst), FlowState::Live) {
                Some(
                    s @ (FlowState::Ready(_) | FlowState::Intercept(..) | FlowState::Refuse(..)),
                ) => s,
                _ => {
                    f.remove(&(src, dst));
                    continue;
                }
            }
        };
        let (flows, shared) = (flows.clone(), shared.clone());
        tokio::spawn(async move {
            match state {
                FlowState::Ready(ready) => {
                    let (up, flow, _slot) = *ready;
                    let (u, d, e) = super::relay(&shared, stream, up).await;
                    flow.owner_settled().await;
                    shared.emit(flow.finished(u, d, e.as_ref()));
                }
                FlowState::Intercept(name, port, _slot) => {
                    if let Some(layer) = shared.http.get() {
                        let kind = if port == 443 {
                            FlowKind::Tls
                        } else {
                            FlowKind::Plain
                        };
                        let to = FlowTarget { name, port, kind };
                        layer.handler.serve(Box::new(stream), to).await;
                    }
                }
                FlowState::Refuse(denied, _slot) => {
                    let (name, port, denial) = *denied;
                    shared.answer_denied(stream, name, port, denial).await;
                }
                FlowState::Pending | FlowState::Live => {}
            }
            flows
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&(src, dst));
        });
    }
}

/// A client's SYN, held while its flow is decided.
struct Syn {
    src: SocketAddrV4,
    dst: SocketAddrV4,
    seq: u32,
    packet: Vec<u8>,
}

/// Holds a new flow's SYN while policy decides and the host-side connect runs (in a task of
/// its own); then the SYN goes to the stack (`inject`) or a RST back to the client. A SYN for
/// a flow being decided, or one the stack already has (which would make it a second socket),
/// is dropped.
async fn hold_syn(
    shared: &Arc<Shared>,
    flows: &Flows,
    tun: &Arc<Tun>,
    inject: &mpsc::UnboundedSender<Vec<u8>>,
    syn: Syn,
) {
    let key = (syn.src, syn.dst);
    let known = {
        let mut f = flows.lock().unwrap_or_else(|p| p.into_inner());
        let known = f.contains_key(&key);
        if !known {
            f.insert(key, FlowState::Pending);
        }
        known
    };
    if known {
        return;
    }
    let Some(slot) = shared.slot() else {
        flows.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
        tun.write(&packet::tcp_rst(syn.src, syn.dst, syn.seq)).await;
        return;
    };
    let (shared, flows, tun, inject) = (shared.clone(), flows.clone(), tun.clone(), inject.clone());
    tokio::spawn(async move {
        let Syn {
            src,
            dst,
            seq,
            packet,
        } = syn;
        let next = match decide(&shared, src, dst).await {
            Decided::Intercept(name) => Some(FlowState::Intercept(name, dst.port(), slot)),
            Decided::Refuse(name, denial) => Some(FlowState::Refuse(
                Box::new((name, dst.port(), denial)),
                slot,
            )),
            Decided::Open(up, flow) => {
                shared.find_owner(&flow);
                Some(FlowState::Ready(Box::new((up, flow, slot))))
            }
            Decided::Refused => None,
        };
        match next {
            Some(state) => {
                flows
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, state);
                let _ = inject.send(packet);
            }
            None => {
                flows.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                tun.write(&packet::tcp_rst(src, dst, seq)).await;
            }
        }
    });
}

/// What becomes of a new flow.
enum Decided {
    /// For the HTTP layer (the name).
    Intercept(String),
    /// Allowed and connected on the host.
    Open(TcpStream, Flow),
    /// Refused, but it may be TLS (the name, why): the handshake completes so a ClientHello
    /// gets cordon's 403 (the event is out already).
    Refuse(String, FlowDenial),
    /// Refused or unreachable alike: the event is out, a RST follows.
    Refused,
}

async fn decide(shared: &Shared, src: SocketAddrV4, dst: SocketAddrV4) -> Decided {
    let dest = match shared.dest_for((*dst.ip()).into()) {
        Ok(dest) => dest,
        Err(why) => {
            shared.emit(
                NewEvent::new(Layer::Network, Action::Deny, format!("{dst} — {why}"))
                    .rule("network.unknown-address")
                    .detail("host", dst.ip().to_string())
                    .detail("port", dst.port())
                    .detail("via", "tun"),
            );
            return Decided::Refused;
        }
    };
    match shared.http_flow(&dest, dst.port()) {
        super::HttpFlow::NotHttp => match shared
            .open(&dest, dst.port(), "tun", Some((src, dst)))
            .await
        {
            Ok((up, flow)) => Decided::Open(up, flow),
            Err(v) => match shared.tls_denial(&dest, dst.port(), &v) {
                Some((name, denial)) => Decided::Refuse(name, denial),
                None => Decided::Refused,
            },
        },
        super::HttpFlow::Intercept => Decided::Intercept(dest.host()),
        super::HttpFlow::Deny(v) => {
            let tls = shared.tls_denial(&dest, dst.port(), &v);
            shared
                .refuse(&dest, dst.port(), "tun", Some((src, dst)), v)
                .await;
            match tls {
                Some((name, denial)) => Decided::Refuse(name, denial),
                None => Decided::Refused,
            }
        }
    }
}
