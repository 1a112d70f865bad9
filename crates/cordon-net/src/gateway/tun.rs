//! The transparent path: every packet the sandbox routes out arrives on the TUN device.
//!
//! Each packet is looked at before the userspace stack sees it: UDP to port 53 (any address)
//! is answered by the resolver; other UDP gets "port unreachable", ICMP echo "prohibited".
//! A TCP SYN is held while policy decides and the host-side connect runs; then it is fed to
//! the stack (which completes the handshake and hands us the stream) or answered with a RST
//! (a denied flow that may be TLS is completed instead, for the HTTP layer's readable 403).

use std::collections::HashMap;
use std::collections::HashSet;
use std::io::{self, IoSlice, Read, Write};
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
use super::vnet;
use super::{Flow, FlowDenial, FlowKind, FlowTarget, Shared};

/// Per-flow socket buffers in the stack (the TCP window): 1 MiB each way keeps a loopback-speed
/// stream busy; allocated from fresh pages (see [`super::FLOW_WINDOW_BYTES`]).
const TCP_BUFFER: u32 = super::FLOW_WINDOW_BYTES as u32;
/// What the sandbox may send a flow ahead of the stack's reads (smoltcp's receive ring). Smaller
/// than [`TCP_BUFFER`] because smoltcp writes that ring from start to end over a flow's life
/// (it rewinds only when it wraps), so a long flow keeps all of it resident: at 1 MiB, 500
/// keep-alive connections of small requests grew the supervisor by ~100 bytes per request
/// toward 1 MiB per flow. The stack moves what the socket takes into the stream's 1 MiB ring
/// (which rewinds whenever it is empty) at every poll. iperf3 from the sandbox: one stream 19 %
/// faster at 256 KiB than at 1 MiB, eight streams level; 64 KiB was 28 % slower, one full
/// segment in flight at a time (issue #18).
const TCP_RECV_WINDOW: u32 = 256 << 10;
const MTU: usize = 65520;

/// Hands one packet to the userspace stack: `false` once the stack is gone. A packet the
/// stack refuses as malformed is dropped (TCP retransmits what was real), so one bad packet
/// from the sandbox never ends its network for the session; `packet::parse` already drops
/// what the stack would refuse, this keeps it so if the two ever disagree.
async fn feed<S>(to_stack: &mut S, pkt: Vec<u8>) -> bool
where
    S: futures::Sink<Vec<u8>, Error = io::Error> + Unpin,
{
    match to_stack.send(pkt).await {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::InvalidInput,
    }
}

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

    /// One packet the gateway built whole (checksums done).
    async fn write(&self, pkt: &[u8]) {
        let frame = [IoSlice::new(&vnet::COMPLETE), IoSlice::new(pkt)];
        loop {
            let Ok(mut guard) = self.0.writable().await else {
                return;
            };
            match guard.try_io(|f| f.get_ref().write_vectored(&frame)) {
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
    Intercept(String, u16, Slot, crate::gateway::handler::Owned),
    /// Denied, but it may be TLS: accepted so a ClientHello gets cordon's 403 (name, port).
    Refuse(Box<(String, u16, FlowDenial)>, Slot),
    /// For the explicit proxy (a VM's link); waiting for the stack to hand over the sandbox side.
    Proxy(Slot),
    /// Relaying.
    Live,
}

impl FlowState {
    /// Decided and handed to the stack, waiting for it to hand over the sandbox side.
    fn decided(&self) -> bool {
        matches!(
            self,
            Self::Ready(_) | Self::Intercept(..) | Self::Refuse(..) | Self::Proxy(_)
        )
    }
}

/// How long a decided flow may wait for the stack to complete the client's handshake: well past
/// the client's SYN retransmissions (1, 3, 7 s…) and a loaded machine's delays.
const UNACCEPTED: std::time::Duration = std::time::Duration::from_secs(30);

type Flows = Arc<Mutex<HashMap<Key, FlowState>>>;

/// The userspace stack as the gateway runs it: TCP only (UDP and ICMP are answered here).
pub(super) fn stack_builder() -> StackBuilder {
    StackBuilder::default()
        .enable_tcp(true)
        .enable_udp(false)
        .enable_icmp(false)
        .mtu(MTU)
        .tcp_checksum_offload(true)
        .tcp_recv_buffer_size(TCP_BUFFER)
        .tcp_recv_window(TCP_RECV_WINDOW)
        .tcp_send_buffer_size(TCP_BUFFER)
}

/// The packet path: the TUN reader and the stack on the runtime this runs on; everything that
/// decides, connects or relays a flow is spawned on `main`, the gateway's runtime (the same one
/// today, see `Gateway::start`; kept apart so the packet path can move to a thread of its own).
pub(crate) async fn run(shared: Arc<Shared>, tun: Tun, main: tokio::runtime::Handle) {
    let tun = Arc::new(tun);
    let out = tun.clone();
    // The stack writes each packet to the TUN as it builds it, on its own task. A TUN write
    // only queues the packet to the sandbox's kernel and does not wait; a refused one is a lost
    // packet, which TCP sends again (as `Tun::write` does). The stack leaves TCP checksums to
    // the sandbox's kernel (see `vnet`): the segment's headers go out of a copy that carries
    // the pseudo-header's sum, its payload straight from the stack's buffer.
    let mut headers = [0u8; vnet::MAX_HEADERS];
    let writer = move |pkt: &[u8]| {
        let (hdr, n) = vnet::for_stack_segment(pkt, &mut headers).unwrap_or((vnet::COMPLETE, 0));
        let frame = [
            IoSlice::new(&hdr),
            IoSlice::new(&headers[..n]),
            IoSlice::new(&pkt[n..]),
        ];
        loop {
            match out.0.get_ref().write_vectored(&frame) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                _ => break,
            }
        }
    };
    let built = stack_builder().packet_writer(Box::new(writer)).build();
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
    // The stack's stream carries only UDP, which is off: every TCP packet goes to `writer`.
    let (mut to_stack, _from_stack) = stack.split();
    let flows: Flows = Arc::new(Mutex::new(HashMap::new()));
    main.spawn(accept(shared.clone(), flows.clone(), listener));
    // SYNs whose connect succeeded come back here to be fed to the stack.
    let (inject_tx, mut inject_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let mut reported: HashSet<SocketAddrV4> = HashSet::new();
    let mut buf = vec![0u8; MTU + 64];
    loop {
        tokio::select! {
            Some(syn) = inject_rx.recv() => {
                if !feed(&mut to_stack, syn).await {
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
                    let Some(pkt) = vnet::packet_in(&buf[..n]) else {
                        continue;
                    };
                    match packet::parse(pkt) {
                        Parsed::Tcp { src, dst, syn_only: true, seq } => {
                            let syn = Syn { src, dst, seq, packet: pkt.to_vec() };
                            hold_syn(&main, &shared, &flows, &tun, &inject_tx, syn).await;
                        }
                        Parsed::Tcp { .. } => {
                            if !feed(&mut to_stack, pkt.to_vec()).await {
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
                    s @ (FlowState::Ready(_)
                    | FlowState::Intercept(..)
                    | FlowState::Refuse(..)
                    | FlowState::Proxy(_)),
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
                FlowState::Intercept(name, port, _slot, owner) => {
                    if let Some(layer) = shared.http.get() {
                        let kind = if port == 443 {
                            FlowKind::Tls
                        } else {
                            FlowKind::Plain
                        };
                        let to = FlowTarget {
                            name,
                            port,
                            kind,
                            owner,
                        };
                        layer.handler.serve(Box::new(stream), to).await;
                    }
                }
                FlowState::Refuse(denied, _slot) => {
                    let (name, port, denial) = *denied;
                    shared.answer_denied(stream, name, port, denial).await;
                }
                FlowState::Proxy(_slot) => {
                    super::proxy::handle(shared.clone(), stream, Some((src, dst))).await;
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
    main: &tokio::runtime::Handle,
    shared: &Arc<Shared>,
    flows: &Flows,
    tun: &Arc<Tun>,
    inject: &mpsc::UnboundedSender<Vec<u8>>,
    syn: Syn,
) {
    let key = (syn.src, syn.dst);
    let known = {
        let mut f = flows.lock().unwrap_or_else(|p| p.into_inner());
        let known = f.get(&key).map(FlowState::decided);
        if known.is_none() {
            f.insert(key, FlowState::Pending);
        }
        known
    };
    match known {
        // The client's retransmitted SYN of a flow decided and handed to the stack but not yet
        // accepted goes to the stack too, as any retransmission would: a socket mid-handshake
        // ignores it (the stack makes no second socket for it, see vendor/netstack-smoltcp),
        // and a stack without one takes it as the first.
        Some(true) => {
            let _ = inject.send(syn.packet);
            return;
        }
        Some(false) => return,
        None => {}
    }
    let (shared, flows, tun, inject) = (shared.clone(), flows.clone(), tun.clone(), inject.clone());
    main.spawn(async move {
        let Syn {
            src,
            dst,
            seq,
            packet,
        } = syn;
        // While this waits for a slot the entry is Pending, so the client's retransmitted SYNs
        // are dropped as for any flow being decided.
        // At the cap the SYN is dropped, not answered with a RST: as a full listen backlog
        // does (the kernel's default, tcp_abort_on_overflow = 0), so a client still dialling
        // retransmits and gets in once flows close, and a refusal is never what a burst of
        // connects past the cap sees. A client that gave up sends nothing more: nothing is
        // kept for it. The cap itself holds either way; the event says so.
        let Some(slot) = shared.slot().await else {
            flows.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            return;
        };
        let next = match decide(&shared, src, dst).await {
            Decided::Intercept(name, owner) => {
                Some(FlowState::Intercept(name, dst.port(), slot, owner))
            }
            Decided::Refuse(name, denial) => Some(FlowState::Refuse(
                Box::new((name, dst.port(), denial)),
                slot,
            )),
            Decided::Open(up, flow) => {
                shared.find_owner(&flow);
                Some(FlowState::Ready(Box::new((up, flow, slot))))
            }
            Decided::Proxy => Some(FlowState::Proxy(slot)),
            Decided::Refused => None,
        };
        match next {
            Some(state) => {
                flows
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, state);
                let _ = inject.send(packet);
                // A flow the stack never hands over (the client gave up, its SYNs lost) would
                // hold its slot, and any host-side connection, for the session: in time every
                // new connection would be refused. It is let go once it has waited this long.
                tokio::time::sleep(UNACCEPTED).await;
                let mut f = flows.lock().unwrap_or_else(|p| p.into_inner());
                if f.get(&key).is_some_and(FlowState::decided) {
                    f.remove(&key);
                }
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
    /// For the HTTP layer (the name, and the process behind it when a rule names programs).
    Intercept(String, crate::gateway::handler::Owned),
    /// Allowed and connected on the host.
    Open(TcpStream, Flow),
    /// Refused, but it may be TLS (the name, why): the handshake completes so a ClientHello
    /// gets cordon's 403 (the event is out already).
    Refuse(String, FlowDenial),
    /// To the explicit proxy on a VM's link: each request through it is decided there.
    Proxy,
    /// Refused or unreachable alike: the event is out, a RST follows.
    Refused,
}

async fn decide(shared: &Shared, src: SocketAddrV4, dst: SocketAddrV4) -> Decided {
    // A VM has no loopback listener of ours: its proxy is the gateway's address on the link.
    // Only there, so a namespace sandbox reaching 10.0.2.2 gets no proxy it was not given.
    if shared.link
        && dst == SocketAddrV4::new(crate::ether::LINK_GATEWAY, crate::ether::LINK_PROXY_PORT)
    {
        return Decided::Proxy;
    }
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
        super::HttpFlow::Intercept => {
            // Found while the SYN is held: the socket surely exists.
            let slot = Arc::new(super::owner::OwnerSlot::new());
            let owner = shared
                .owner_for(&slot, Some((src, dst)), &dest.host())
                .await;
            Decided::Intercept(dest.host(), owner)
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use netstack_smoltcp::smoltcp::wire::{Ipv4Packet, TcpControl, TcpPacket};
    use tokio::io::AsyncReadExt;

    type StackIn = futures::stream::SplitSink<netstack_smoltcp::Stack, Vec<u8>>;
    type StackOut = futures::stream::SplitStream<netstack_smoltcp::Stack>;
    type Sent = mpsc::UnboundedReceiver<Vec<u8>>;

    /// A running stack whose packets out are captured: its input, its listener, the packets
    /// it sent, and its output half (kept, so the stack stays whole).
    fn captured_stack() -> (StackIn, netstack_smoltcp::TcpListener, Sent, StackOut) {
        let (out_tx, out) = mpsc::unbounded_channel::<Vec<u8>>();
        let writer = move |p: &[u8]| {
            let _ = out_tx.send(p.to_vec());
        };
        let built = stack_builder().packet_writer(Box::new(writer)).build();
        let (stack, runner, _, listener) = built.expect("the stack builds");
        tokio::spawn(runner.expect("a TCP runner"));
        let (to_stack, from_stack) = stack.split();
        (to_stack, listener.expect("a TCP listener"), out, from_stack)
    }

    /// The stack's next packet out, within 5 s.
    async fn next_packet(out: &mut Sent) -> Vec<u8> {
        tokio::time::timeout(std::time::Duration::from_secs(5), out.recv())
            .await
            .expect("the stack answers")
            .expect("the stack is running")
    }

    /// The stack's next TCP segment out: (SYN set, ACK set, its sequence number).
    async fn next_out(out: &mut Sent) -> (bool, bool, u32) {
        let p = next_packet(out).await;
        let ip = Ipv4Packet::new_checked(&p[..]).expect("IPv4 out");
        let t = TcpPacket::new_checked(ip.payload()).expect("TCP out");
        (t.syn(), t.ack(), t.seq_number().0 as u32)
    }

    /// The stack leaves its TCP checksums out, and what the writer makes of its segments (a
    /// SYN-ACK with options, then data) is what the sandbox's kernel completes into segments
    /// that verify. With the stack still summing, or the header pointing at the wrong field,
    /// the checksums would not come out right.
    #[tokio::test]
    async fn the_stacks_segments_are_completed_by_the_receiving_kernel() {
        use tokio::io::AsyncWriteExt;
        use vnet::tests::{complete_as_the_kernel_does, verifies};
        let (mut to_stack, mut listener, mut out, _from_stack) = captured_stack();
        let a = |s: &str| s.parse::<SocketAddrV4>().unwrap();
        let (client, server) = (a("10.0.2.100:40002"), a("198.18.0.5:443"));
        let syn = packet::tcp_segment(client, server, TcpControl::Syn, 1000, None, 65535, &[]);
        assert!(feed(&mut to_stack, syn).await);
        let wait = std::time::Duration::from_secs(5);
        let syn_ack = next_packet(&mut out).await;
        let isn = {
            let ip = Ipv4Packet::new_checked(&syn_ack[..]).unwrap();
            TcpPacket::new_checked(ip.payload()).unwrap().seq_number().0 as u32
        };
        let ack = Some(isn.wrapping_add(1));
        let seg = packet::tcp_segment(client, server, TcpControl::None, 1001, ack, 65535, &[]);
        assert!(feed(&mut to_stack, seg).await);
        let (mut stream, ..) = tokio::time::timeout(wait, listener.next())
            .await
            .expect("the connection is handed over")
            .expect("the listener is open");
        stream.write_all(b"a reply of odd length").await.unwrap();
        stream.flush().await.unwrap();
        let data = loop {
            let p = next_packet(&mut out).await;
            let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
            if !TcpPacket::new_checked(ip.payload())
                .unwrap()
                .payload()
                .is_empty()
            {
                break p;
            }
        };
        for (what, sent) in [("SYN-ACK", syn_ack), ("data", data)] {
            let ip = Ipv4Packet::new_checked(&sent[..]).unwrap();
            let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
            assert_eq!(tcp.checksum(), 0, "{what}: the stack summed it");
            let mut headers = [0u8; vnet::MAX_HEADERS];
            let (hdr, n) = vnet::for_stack_segment(&sent, &mut headers).expect(what);
            let mut delivered = [&headers[..n], &sent[n..]].concat();
            complete_as_the_kernel_does(&hdr, &mut delivered);
            assert!(verifies(&delivered), "{what}: a wrong checksum");
        }
    }

    /// What the sandbox may send ahead is [`TCP_RECV_WINDOW`], not the 1 MiB of the stream's
    /// ring: the window bounds what smoltcp's receive ring, written end to end over a flow's
    /// life, keeps resident. An upload many windows long, sent as a kernel sends it (as much as
    /// the window allows, then wait for an ACK), arrives whole and in order through it.
    #[tokio::test]
    async fn the_sandbox_is_offered_the_receive_window_and_a_long_upload_arrives_whole() {
        use netstack_smoltcp::smoltcp::phy::ChecksumCapabilities;
        use netstack_smoltcp::smoltcp::wire::TcpRepr;
        let (mut to_stack, mut listener, mut out, _from_stack) = captured_stack();
        let a = |s: &str| s.parse::<SocketAddrV4>().unwrap();
        let (client, server) = (a("10.0.2.100:40004"), a("198.18.0.5:443"));
        let wait = std::time::Duration::from_secs(5);
        // The stack's next segment: (SYN, seq, ack, window field, window scale).
        let next = async |out: &mut Sent| {
            let p = next_packet(out).await;
            let ip = Ipv4Packet::new_checked(&p[..]).expect("IPv4 out");
            let tcp = TcpPacket::new_checked(ip.payload()).expect("TCP out");
            let (src, dst) = (ip.src_addr().into(), ip.dst_addr().into());
            // The checksum is left to the sandbox's kernel (see the test above).
            let r = TcpRepr::parse(&tcp, &src, &dst, &ChecksumCapabilities::ignored())
                .expect("a TCP segment");
            assert!(r.control != TcpControl::Rst, "the stack reset the upload");
            let ack = r.ack_number.map(|n| n.0 as u32);
            let syn = r.control == TcpControl::Syn;
            (
                syn,
                r.seq_number.0 as u32,
                ack,
                r.window_len,
                r.window_scale,
            )
        };

        assert!(
            feed(
                &mut to_stack,
                packet::tcp_syn_scaled(client, server, 1000, 7)
            )
            .await
        );
        let (syn, isn, ack, syn_window, scale) = next(&mut out).await;
        assert!(syn && ack == Some(1001), "a SYN-ACK");
        let shift = scale.expect("the stack scales its window when the client does");
        let their = Some(isn.wrapping_add(1));
        let seg = |seq, data: &[u8]| {
            packet::tcp_segment(client, server, TcpControl::None, seq, their, 65535, data)
        };
        assert!(feed(&mut to_stack, seg(1001, &[])).await);
        let (mut stream, ..) = tokio::time::timeout(wait, listener.next())
            .await
            .expect("the connection is handed over")
            .expect("the listener is open");

        const TOTAL: usize = 4 << 20;
        let data: Vec<u8> = (0..TOTAL).map(|i| (i * 7 % 251) as u8).collect();
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; TOTAL];
            tokio::time::timeout(
                std::time::Duration::from_secs(30),
                stream.read_exact(&mut got),
            )
            .await
            .expect("the upload arrives in time")
            .expect("the stream reads");
            got
        });

        // A SYN-ACK's window is never scaled; every later one is.
        let mut window = u32::from(syn_window);
        let (mut sent, mut acked) = (0usize, 0usize);
        let mut offered_most = 0u32;
        while acked < TOTAL {
            let room = (acked + window as usize).saturating_sub(sent);
            if sent < TOTAL && room > 0 {
                let n = room.min(60_000).min(TOTAL - sent);
                let seq = 1001u32.wrapping_add(sent as u32);
                assert!(feed(&mut to_stack, seg(seq, &data[sent..sent + n])).await);
                sent += n;
                continue;
            }
            let (_, _, ack, field, _) = next(&mut out).await;
            let Some(ack) = ack else { continue };
            window = u32::from(field) << shift;
            assert!(
                window <= TCP_RECV_WINDOW,
                "the stack offered {window} bytes, past its {TCP_RECV_WINDOW}-byte window"
            );
            offered_most = offered_most.max(window);
            acked = acked.max(ack.wrapping_sub(1001) as usize);
        }
        assert_eq!(
            offered_most, TCP_RECV_WINDOW,
            "the whole window, when the ring is empty"
        );
        let got = reader.await.expect("the reader ran");
        assert!(got == data, "the upload arrived changed");
    }

    /// A client whose SYN comes twice before its handshake ends (its SYN-ACK late or lost,
    /// or the gateway handing on a retransmitted SYN) makes one connection: one stream, no
    /// RST, its bytes arrive. With a second socket for the repeated SYN, the listener handed
    /// out two streams for the one connection and either socket could take its ACK.
    #[tokio::test]
    async fn a_repeated_syn_makes_no_second_socket() {
        let (mut to_stack, mut listener, mut out, _from_stack) = captured_stack();
        let a = |s: &str| s.parse::<SocketAddrV4>().unwrap();
        let (client, server) = (a("10.0.2.100:40001"), a("198.18.0.5:443"));
        let seg = |control, seq, ack, data: &[u8]| {
            packet::tcp_segment(client, server, control, seq, ack, 65535, data)
        };

        let syn = seg(TcpControl::Syn, 1000, None, &[]);
        assert!(feed(&mut to_stack, syn.clone()).await);
        let (is_syn, is_ack, isn) = next_out(&mut out).await;
        assert!(is_syn && is_ack, "a SYN-ACK first");
        assert!(feed(&mut to_stack, syn).await);
        let ack = Some(isn.wrapping_add(1));
        assert!(feed(&mut to_stack, seg(TcpControl::None, 1001, ack, b"hello")).await);

        let wait = std::time::Duration::from_secs(5);
        let (mut stream, ..) = tokio::time::timeout(wait, listener.next())
            .await
            .expect("the connection is handed over")
            .expect("the listener is open");
        let mut got = [0u8; 5];
        tokio::time::timeout(wait, stream.read_exact(&mut got))
            .await
            .expect("the client's bytes arrive")
            .expect("read");
        assert_eq!(&got, b"hello");
        let second = tokio::time::timeout(std::time::Duration::from_millis(300), listener.next());
        assert!(
            second.await.is_err(),
            "a second stream for the same connection"
        );
        while let Ok(p) = out.try_recv() {
            let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
            let t = TcpPacket::new_checked(ip.payload()).unwrap();
            assert!(!t.rst(), "the stack reset the client's connection");
        }
    }

    /// A client whose socket is gone answers our next segment with a RST without ACK. It must
    /// end that connection even while another client's socket waits in LISTEN ahead of it in
    /// the stack's set (a SYN being let in at the same moment): smoltcp gives a segment without
    /// ACK to a listening socket on the same address, which ignores it, and the connection
    /// stayed open for good. Here the listening socket takes the slot of a connection reset
    /// before it, so it comes first, and the RST arrives with that SYN.
    #[tokio::test]
    async fn a_bare_reset_reaches_its_connection_past_a_listening_socket() {
        let (mut to_stack, mut listener, mut out, _from_stack) = captured_stack();
        let wait = std::time::Duration::from_secs(5);
        let server: SocketAddrV4 = "198.18.0.5:443".parse().unwrap();
        let client = |port| SocketAddrV4::new([10, 0, 2, 100].into(), port);
        // Two connections, handshakes done and handed over: (stream, the stack's next seq).
        let mut open = Vec::new();
        for port in [42001, 42002] {
            let syn = packet::tcp_segment(
                client(port),
                server,
                TcpControl::Syn,
                7000,
                None,
                65535,
                &[],
            );
            assert!(feed(&mut to_stack, syn).await);
            let (is_syn, is_ack, isn) = next_out(&mut out).await;
            assert!(is_syn && is_ack, "a SYN-ACK for {port}");
            let ack = packet::tcp_segment(
                client(port),
                server,
                TcpControl::None,
                7001,
                Some(isn.wrapping_add(1)),
                65535,
                &[],
            );
            assert!(feed(&mut to_stack, ack).await);
            let (stream, ..) = tokio::time::timeout(wait, listener.next())
                .await
                .expect("the connection is handed over")
                .expect("the listener is open");
            open.push((stream, isn.wrapping_add(1)));
        }
        let (mut second, _) = open.pop().unwrap();
        let (mut first, first_next) = open.pop().unwrap();
        // The first ends with a RST the stack accepts (it carries ACK); its socket's slot in
        // the set is free again once its stream sees the end.
        let rst = packet::tcp_segment(
            client(42001),
            server,
            TcpControl::Rst,
            7001,
            Some(first_next),
            0,
            &[],
        );
        assert!(feed(&mut to_stack, rst).await);
        let mut buf = [0u8; 16];
        let end = tokio::time::timeout(wait, first.read(&mut buf)).await;
        assert!(
            matches!(end, Ok(Ok(0)) | Ok(Err(_))),
            "the first connection ends: {end:?}"
        );
        // Then, with nothing between them, the second client's bare RST and a third client's
        // SYN: the third's socket is made in the free slot, before the second's, and listens
        // when the RST is looked at.
        let bare = packet::tcp_segment(client(42002), server, TcpControl::Rst, 7001, None, 0, &[]);
        let syn = packet::tcp_segment(
            client(42003),
            server,
            TcpControl::Syn,
            9000,
            None,
            65535,
            &[],
        );
        assert!(feed(&mut to_stack, bare).await);
        assert!(feed(&mut to_stack, syn).await);
        let end = tokio::time::timeout(wait, second.read(&mut buf)).await;
        assert!(
            matches!(end, Ok(Ok(0)) | Ok(Err(_))),
            "the second connection ends on its client's RST: {end:?}"
        );
        // The third client is answered all the same.
        loop {
            let (is_syn, is_ack, _) = next_out(&mut out).await;
            if is_syn {
                assert!(is_ack, "a SYN-ACK for the third client");
                break;
            }
        }
    }

    /// The stack's next segment that carries data or a FIN: (seq, payload, FIN set).
    async fn next_data(out: &mut Sent) -> (u32, Vec<u8>, bool) {
        loop {
            let p = next_packet(out).await;
            let ip = Ipv4Packet::new_checked(&p[..]).expect("IPv4 out");
            let t = TcpPacket::new_checked(ip.payload()).expect("TCP out");
            assert!(!t.rst(), "the stack reset a connection");
            if !t.payload().is_empty() || t.fin() {
                break (t.seq_number().0 as u32, t.payload().to_vec(), t.fin());
            }
        }
    }

    /// Until the listener keeps one socket and two rings spare, the ones flow `i` left.
    async fn wait_kept(listener: &netstack_smoltcp::TcpListener, i: usize) {
        let kept = async {
            while listener.spare() != (1, 2) {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), kept)
            .await
            .unwrap_or_else(|_| panic!("flow {i}: kept {:?}", listener.spare()));
    }

    /// Flows one after another, each over before the next: the stack hands a closed flow's
    /// socket and rings to the next one (vendor/netstack-smoltcp's `Spare`), and each flow
    /// still sees only its own bytes, both ways, from a fresh handshake. Every other flow is
    /// abandoned with bytes in both rings (the stream reads none of the client's, the client
    /// acknowledges none of the reply, then resets): a ring handed on without being emptied
    /// would show them to the next flow. The first is reset in its handshake, which puts its
    /// socket back in LISTEN.
    #[tokio::test]
    async fn a_closed_flows_buffers_serve_the_next_flow_cleanly() {
        use tokio::io::AsyncWriteExt;
        let (mut to_stack, mut listener, mut out, _from_stack) = captured_stack();
        let wait = std::time::Duration::from_secs(5);
        let sizes = [0, 200_000usize, 60_000, 7, 70_000, 3];
        for (i, &size) in sizes.iter().enumerate() {
            let abandoned = i % 2 == 0;
            let client = SocketAddrV4::new([10, 0, 2, 100].into(), 41000 + i as u16);
            // A server of its own: a socket reused from LISTEN must be closed first, or it
            // refuses to listen on another address.
            let server = SocketAddrV4::new([198, 18, 0, 5].into(), 8080 + i as u16);
            let seg = |control, seq, ack, data: &[u8]| {
                packet::tcp_segment(client, server, control, seq, Some(ack), 65535, data)
            };
            let c = 5000 + 1_000_000 * i as u32;
            let syn = packet::tcp_segment(client, server, TcpControl::Syn, c, None, 65535, &[]);
            assert!(feed(&mut to_stack, syn).await);
            let (is_syn, is_ack, isn) = next_out(&mut out).await;
            assert!(is_syn && is_ack, "flow {i}: a SYN-ACK");
            let s = isn.wrapping_add(1);
            if i == 0 {
                assert!(feed(&mut to_stack, seg(TcpControl::Rst, c + 1, s, &[])).await);
            }
            // The client's bytes, in segments the window takes (65535, no scaling).
            let sent: Vec<u8> = (0..size).map(|k| (k * 7 + i) as u8).collect();
            let mut seq = c + 1;
            for chunk in sent.chunks(16_000) {
                assert!(feed(&mut to_stack, seg(TcpControl::None, seq, s, chunk)).await);
                seq += chunk.len() as u32;
            }
            let (mut stream, ..) = tokio::time::timeout(wait, listener.next())
                .await
                .expect("the connection is handed over")
                .expect("the listener is open");
            let reply = format!("reply {i}").repeat(1 + i * 1000);
            if i == 0 {
                drop(stream);
            } else if abandoned {
                stream.write_all(reply.as_bytes()).await.expect("write");
                let (at, _, _) = next_data(&mut out).await;
                assert_eq!(at, s, "flow {i}: its reply starts after the handshake");
                assert!(feed(&mut to_stack, seg(TcpControl::Rst, seq, s, &[])).await);
                // The stack closes the stream's write side as it takes the socket out of its
                // set (and keeps it); then the stream goes too, and its rings with it.
                let closed = async {
                    while stream.write(b"more").await.is_ok() {
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    }
                };
                tokio::time::timeout(wait, closed)
                    .await
                    .expect("the reset ends the stream");
                drop(stream);
            } else {
                let mut got = vec![0u8; size];
                tokio::time::timeout(wait, stream.read_exact(&mut got))
                    .await
                    .expect("the flow's bytes arrive")
                    .expect("read");
                assert!(got == sent, "flow {i} read bytes it was not sent");
                stream.write_all(reply.as_bytes()).await.expect("write");
                let mut reply_out = Vec::new();
                while reply_out.len() < reply.len() {
                    let (at, data, _) = next_data(&mut out).await;
                    assert_eq!(at, s + reply_out.len() as u32, "flow {i}: reply in order");
                    reply_out.extend_from_slice(&data);
                }
                assert!(
                    reply_out == reply.as_bytes(),
                    "flow {i} sent bytes it was not given"
                );
                // The client closes; then the stream, and the client takes the stack's FIN.
                let acked = s + reply.len() as u32;
                assert!(feed(&mut to_stack, seg(TcpControl::Fin, seq, acked, &[])).await);
                let mut rest = Vec::new();
                tokio::time::timeout(wait, stream.read_to_end(&mut rest))
                    .await
                    .expect("the client's FIN arrives")
                    .expect("read to the end");
                assert!(rest.is_empty(), "flow {i}: bytes after its own: {rest:?}");
                drop(stream);
                let (fin_at, data, fin) = next_data(&mut out).await;
                assert!(
                    fin && data.is_empty() && fin_at == acked,
                    "flow {i}: the stack's FIN"
                );
                assert!(
                    feed(
                        &mut to_stack,
                        seg(TcpControl::None, seq + 1, fin_at + 1, &[])
                    )
                    .await
                );
            }
            // The next flow starts once this one's socket and rings are kept.
            wait_kept(&listener, i).await;
            // What the stack sent of the abandoned reply before the reset took effect.
            while out.try_recv().is_ok() {}
        }
        assert_eq!(
            listener.reused(),
            sizes.len() as u64 - 1,
            "each flow after the first"
        );
    }

    /// A packet the stack cannot parse is dropped, and the stack takes the next one: the
    /// fuzzer found the TUN loop ending (the sandbox's network gone) on the first such packet.
    #[tokio::test]
    async fn a_malformed_packet_is_dropped_and_the_stack_goes_on() {
        let (stack, runner, _, _listener) = stack_builder().build().expect("the stack builds");
        if let Some(runner) = runner {
            tokio::spawn(runner);
        }
        let (mut to_stack, _from_stack) = stack.split();
        // Version 4, a header length of 15 words, in a 3-byte packet: refused as invalid.
        assert!(feed(&mut to_stack, vec![0x4f, 0, 0]).await);
        let a = |s: &str| s.parse::<SocketAddrV4>().unwrap();
        let good = packet::tcp_rst(a("10.0.2.100:40000"), a("198.18.0.5:443"), 1000);
        assert!(matches!(packet::parse(&good), Parsed::Tcp { .. }));
        assert!(
            feed(&mut to_stack, good).await,
            "a well-formed packet after it is taken"
        );
    }

    /// A gateway over the default policy (no rule allows anything), serving a VM's link or not.
    fn gateway(link: bool) -> super::super::Gateway {
        let opts = cordon_policy::LoadOptions::new("/nonexistent", "/nonexistent", "/nonexistent");
        let plan = cordon_policy::load(&opts).unwrap().plan;
        let wiring = super::super::Wiring {
            emit: Arc::new(|_| {}),
            redact: Arc::new(|t: &str| t.to_string()),
            audit: None,
            execs: None,
            link,
        };
        super::super::Gateway::new(&plan, wiring).unwrap()
    }

    /// The explicit proxy answers at the link's gateway address only on a link: a namespace
    /// sandbox connecting there is decided as any other address (refused by this policy).
    #[tokio::test]
    async fn the_links_proxy_address_is_the_proxy_only_on_a_link() {
        let guest = "10.0.2.15:40000".parse::<SocketAddrV4>().unwrap();
        let proxy = SocketAddrV4::new(crate::ether::LINK_GATEWAY, 3128);
        let other = SocketAddrV4::new(crate::ether::LINK_GATEWAY, 3129);
        let (on, off) = (gateway(true), gateway(false));
        assert!(matches!(
            decide(&on.shared, guest, proxy).await,
            Decided::Proxy
        ));
        assert!(matches!(
            decide(&off.shared, guest, proxy).await,
            Decided::Refused
        ));
        assert!(matches!(
            decide(&on.shared, guest, other).await,
            Decided::Refused
        ));
    }
}
