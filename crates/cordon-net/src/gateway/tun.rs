//! The transparent path: every packet the sandbox routes out arrives on the TUN device.
//!
//! Each packet is looked at before the userspace stack sees it: UDP to port 53 (any address)
//! is answered by the resolver; other UDP gets "port unreachable", ICMP echo "prohibited".
//! A TCP SYN is held while policy decides and the host-side connect runs; then it is fed to
//! the stack (which completes the handshake and hands us the stream) or answered with a RST.

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
use super::{Flow, Shared};

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
    /// Relaying.
    Live,
}

type Flows = Arc<Mutex<HashMap<Key, FlowState>>>;

pub(crate) async fn run(shared: Arc<Shared>, tun: Tun) {
    let built = StackBuilder::default()
        .enable_tcp(true)
        .enable_udp(false)
        .enable_icmp(false)
        .mtu(MTU)
        .tcp_recv_buffer_size(TCP_BUFFER)
        .tcp_send_buffer_size(TCP_BUFFER)
        .build();
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
    let (Some(runner), Some(mut listener)) = (runner, listener) else {
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
    {
        let (flows, shared) = (flows.clone(), shared.clone());
        tokio::spawn(async move {
            while let Some((stream, local, remote)) = listener.next().await {
                let (SocketAddr::V4(src), SocketAddr::V4(dst)) = (local, remote) else {
                    continue;
                };
                let ready = {
                    let mut f = flows.lock().unwrap_or_else(|p| p.into_inner());
                    match f.insert((src, dst), FlowState::Live) {
                        Some(FlowState::Ready(ready)) => Some(Ok(*ready)),
                        Some(FlowState::Intercept(name, port, slot)) => {
                            Some(Err((name, port, slot)))
                        }
                        _ => {
                            f.remove(&(src, dst));
                            None
                        }
                    }
                };
                let (up, flow, slot) = match ready {
                    Some(Ok(r)) => r,
                    Some(Err((name, port, slot))) => {
                        let (flows, shared) = (flows.clone(), shared.clone());
                        tokio::spawn(async move {
                            let _slot = slot;
                            if let Some(layer) = shared.http.get() {
                                let i = layer.interceptor.clone();
                                if port == 443 {
                                    i.serve_tls(stream, name, port).await;
                                } else {
                                    i.serve_plain(stream, name, port).await;
                                }
                            }
                            flows
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .remove(&(src, dst));
                        });
                        continue;
                    }
                    None => continue,
                };
                let (flows, shared) = (flows.clone(), shared.clone());
                tokio::spawn(async move {
                    let _slot = slot;
                    let (u, d, e) = super::relay(&shared, stream, up).await;
                    flow.owner_settled().await;
                    shared.emit(flow.finished(u, d, e.as_ref()));
                    flows
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&(src, dst));
                });
            }
        });
    }
    // SYNs whose connect succeeded come back here to be fed to the stack.
    let (inject_tx, mut inject_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let mut udp_reported: HashSet<SocketAddrV4> = HashSet::new();
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
                            let key = (src, dst);
                            // A retransmitted SYN: still deciding (dropped), or the stack has it.
                            // A SYN for a flow being decided, or one the stack already has
                            // (which would make it a second socket), is dropped.
                            let known = {
                                let mut f = flows.lock().unwrap_or_else(|p| p.into_inner());
                                let known = f.contains_key(&key);
                                if !known {
                                    f.insert(key, FlowState::Pending);
                                }
                                known
                            };
                            if known {
                                continue;
                            }
                            let Some(slot) = shared.slot() else {
                                flows.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                                tun.write(&packet::tcp_rst(src, dst, seq)).await;
                                continue;
                            };
                            let (shared, flows, tun, inject) =
                                (shared.clone(), flows.clone(), tun.clone(), inject_tx.clone());
                            let syn = pkt.to_vec();
                            tokio::spawn(async move {
                                let opened = match shared.dest_for((*dst.ip()).into()) {
                                    Ok(dest) => match shared.http_flow(&dest, dst.port()) {
                                        super::HttpFlow::NotHttp => {
                                            // Refused or unreachable alike: the event is out, a RST follows.
                                            shared.open(&dest, dst.port(), "tun", Some((src, dst))).await.map_err(drop)
                                        }
                                        super::HttpFlow::Intercept => {
                                            flows
                                                .lock()
                                                .unwrap_or_else(|p| p.into_inner())
                                                .insert(key, FlowState::Intercept(dest.host(), dst.port(), slot));
                                            let _ = inject.send(syn);
                                            return;
                                        }
                                        super::HttpFlow::Deny(v) => {
                                            shared.refuse(&dest, dst.port(), "tun", Some((src, dst)), v).await;
                                            Err(())
                                        }
                                    },
                                    Err(why) => {
                                        shared.emit(
                                            NewEvent::new(Layer::Network, Action::Deny, format!("{dst} — {why}"))
                                                .rule("network.unknown-address")
                                                .detail("host", dst.ip().to_string())
                                                .detail("port", dst.port())
                                                .detail("via", "tun"),
                                        );
                                        Err(())
                                    }
                                };
                                match opened {
                                    Ok((up, flow)) => {
                                        shared.find_owner(&flow);
                                        flows
                                            .lock()
                                            .unwrap_or_else(|p| p.into_inner())
                                            .insert(key, FlowState::Ready(Box::new((up, flow, slot))));
                                        let _ = inject.send(syn);
                                    }
                                    Err(()) => {
                                        flows.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                                        tun.write(&packet::tcp_rst(src, dst, seq)).await;
                                    }
                                }
                            });
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
                            if udp_reported.len() < 4096 && udp_reported.insert(dst) {
                                shared.emit(
                                    NewEvent::new(
                                        Layer::Network,
                                        Action::Deny,
                                        format!("UDP to {dst} — only DNS may use UDP"),
                                    )
                                    .rule("network.udp")
                                    .detail("host", dst.ip().to_string())
                                    .detail("port", dst.port())
                                    .detail("proto", "udp")
                                    .detail("via", "tun"),
                                );
                            }
                            if let Some(icmp) = packet::icmp_unreachable(pkt, true) {
                                tun.write(&icmp).await;
                            }
                        }
                        Parsed::Ping { dst, .. } => {
                            if udp_reported.len() < 4096 && udp_reported.insert(SocketAddrV4::new(dst, 0)) {
                                shared.emit(
                                    NewEvent::new(
                                        Layer::Network,
                                        Action::Deny,
                                        format!("ICMP echo to {dst} — ping leaves no sandbox"),
                                    )
                                    .rule("network.icmp")
                                    .detail("host", dst.to_string())
                                    .detail("proto", "icmp")
                                    .detail("via", "tun"),
                                );
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
