use std::{
    collections::HashMap,
    net::SocketAddr,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    task::{Context, Poll, Waker},
};

use futures::Stream;
use smoltcp::{
    iface::{Config as InterfaceConfig, Interface, SocketHandle, SocketSet},
    phy::Device,
    socket::tcp::{Socket as TcpSocket, SocketBuffer as TcpSocketBuffer, State as TcpState},
    storage::RingBuffer,
    time::{Duration, Instant},
    wire::{HardwareAddress, IpAddress, IpCidr, IpProtocol, Ipv4Address, Ipv6Address, TcpPacket},
};
/// cordon: a blocking mutex in place of `spin::Mutex`. The stack's task holds a socket's
/// control block while it copies up to a buffer's worth of data; a relay on the other worker
/// thread spinning for it burns the core the holder needs (two cores shared with the
/// sandbox's client and server: it showed as self time in `poll_write` under perf).
struct SpinMutex<T>(std::sync::Mutex<T>);

impl<T> SpinMutex<T> {
    fn new(v: T) -> Self {
        Self(std::sync::Mutex::new(v))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, T> {
        // Nothing panics while holding it; were one to, the buffers are still consistent.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    sync::{
        mpsc::{unbounded_channel, Receiver, Sender, UnboundedReceiver, UnboundedSender},
        Notify,
    },
};
use tracing::{error, trace};

use crate::{
    device::VirtualDevice,
    packet::{AnyIpPktFrame, IpPacket},
    Runner,
};

#[derive(Debug, Clone, Copy, Eq, PartialEq)]
enum TcpSocketState {
    Normal,
    Close,
    Closing,
    Closed,
}

/// cordon: how many closed flows' buffers are kept for the next flows. Each flow has four
/// buffers of the configured size (1 MiB in cordon): the smoltcp socket's two windows and the
/// control block's two rings. Allocated fresh, each costs an `mmap`, page faults as it fills
/// and, when freed, a `munmap` whose TLB shootdown interrupts the other core: 8–11 % of all
/// CPU time in a run of short connections (perf, issue #18). Recycled, only the ring's
/// indices are reset; the bytes left in it are never read, since a ring hands out only what
/// was written to it after `clear`. Four flows' worth bounds what an idle supervisor keeps
/// (16 MiB at most, only as much as those flows touched).
const SPARE_FLOWS: usize = 4;

/// cordon: the buffers of closed flows, kept for the next ones (see [`SPARE_FLOWS`]).
#[derive(Default)]
struct Spare {
    /// smoltcp sockets removed from the set, aborted (CLOSED): `listen` resets all of a
    /// connection's state (sequence numbers, windows, timers, the assembler, both buffers);
    /// the options cordon sets are set again on each. What `reset` leaves is harmless here:
    /// the last ACK seen (a duplicate-ACK count needs a 2^-32 match and three in a row), the
    /// SACK flag (set from each SYN), the peer's last timestamp (timestamps are off) and the
    /// congestion controller, which is stateless without the `socket-tcp-cubic` or `-reno`
    /// features; enabling one would carry a window over to the next flow.
    sockets: Vec<TcpSocket<'static>>,
    /// Control-block rings, cleared.
    rings: Vec<RingBuffer<'static, u8>>,
    /// Sockets handed out again so far (see [`TcpListener::reused`]).
    reused: u64,
}

type SharedSpare = Arc<std::sync::Mutex<Spare>>;

impl Spare {
    fn lock(spare: &SharedSpare) -> std::sync::MutexGuard<'_, Spare> {
        // Nothing panics while holding it; were one to, the lists are still consistent.
        spare.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A socket with windows of these sizes (the receive window cut from a buffer of
    /// `recv_alloc` bytes, see `StackBuilder::tcp_recv_window`): a spare one or a new one.
    fn socket(
        spare: &SharedSpare,
        recv: usize,
        recv_alloc: usize,
        send: usize,
    ) -> TcpSocket<'static> {
        let mut s = Self::lock(spare);
        let i = s
            .sockets
            .iter()
            .position(|k| k.recv_capacity() == recv && k.send_capacity() == send);
        match i {
            Some(i) => {
                s.reused += 1;
                s.sockets.swap_remove(i)
            }
            None => {
                drop(s);
                // cordon: the window cut from a buffer of the ring's size, so the allocator
                // serves it as it does the rings (see `StackBuilder::tcp_recv_window`).
                let mut window = vec![0u8; recv.max(recv_alloc)];
                window.truncate(recv);
                TcpSocket::new(
                    TcpSocketBuffer::new(window),
                    TcpSocketBuffer::new(vec![0u8; send]),
                )
            }
        }
    }

    /// A ring of `size` bytes, empty: a spare one or a new one.
    fn ring(spare: &SharedSpare, size: usize) -> RingBuffer<'static, u8> {
        let mut s = Self::lock(spare);
        match s.rings.iter().position(|r| r.capacity() == size) {
            Some(i) => s.rings.swap_remove(i),
            None => {
                drop(s);
                RingBuffer::new(vec![0u8; size])
            }
        }
    }

    /// Keeps a socket taken out of the set, unless enough are kept.
    fn keep_socket(spare: &SharedSpare, mut socket: TcpSocket<'static>) {
        let mut s = Self::lock(spare);
        if s.sockets.len() < SPARE_FLOWS {
            // Out of the set, so nothing is sent: this only makes it CLOSED. `listen` refuses
            // a socket still in LISTEN (one reset in its handshake) another address.
            socket.abort();
            s.sockets.push(socket);
        }
    }

    /// Keeps a control block's ring, unless enough are kept.
    fn keep_ring(spare: &SharedSpare, mut ring: RingBuffer<'static, u8>) {
        if ring.capacity() == 0 {
            return;
        }
        let mut s = Self::lock(spare);
        if s.rings.len() < 2 * SPARE_FLOWS {
            ring.clear();
            s.rings.push(ring);
        }
    }
}

struct TcpSocketControl {
    send_buffer: RingBuffer<'static, u8>,
    send_waker: Option<Waker>,
    recv_buffer: RingBuffer<'static, u8>,
    recv_waker: Option<Waker>,
    recv_state: TcpSocketState,
    send_state: TcpSocketState,
    /// cordon: the socket has left LISTEN (its client's SYN was taken), see `handle_socket`.
    opened: bool,
    /// cordon: the handshake is over (the socket left LISTEN and SYN-RECEIVED), see
    /// `handle_packet`.
    established: bool,
    /// cordon: where the rings go when the flow is over.
    spare: SharedSpare,
}

impl Drop for TcpSocketControl {
    fn drop(&mut self) {
        let (send, recv) = (
            std::mem::replace(&mut self.send_buffer, RingBuffer::new(Vec::new())),
            std::mem::replace(&mut self.recv_buffer, RingBuffer::new(Vec::new())),
        );
        Spare::keep_ring(&self.spare, send);
        Spare::keep_ring(&self.spare, recv);
    }
}

struct TcpSocketCreation {
    control: SharedControl,
    socket: TcpSocket<'static>,
}

/// cordon: a RST without ACK (what a kernel sends for a segment that reached a socket it no
/// longer has: the client closed while our bytes or FIN were on the way) gets the ACK flag, its
/// checksum made again. smoltcp hands a segment to the first socket that `accepts` it, and a
/// socket in LISTEN accepts every segment without ACK to its local endpoint: with one listening
/// socket per client SYN (all on the same server address), a bare RST could land on a socket
/// still waiting for its own SYN, which ignores it, and never reach its connection. That
/// connection then stayed in CLOSING for good, its flow and the client's address with it (a
/// later connection from the same port got no SYN-ACK). With ACK set, LISTEN sockets turn it
/// down and only its connection's socket takes it; smoltcp checks a RST by its sequence number
/// alone in every synchronised state, so the flag changes nothing else.
fn address_bare_reset(frame: &mut [u8]) {
    let (src, dst, segment) = {
        let Ok(ip) = IpPacket::new_checked(&*frame) else {
            return;
        };
        if ip.protocol() != IpProtocol::Tcp {
            return;
        }
        let payload = ip.payload();
        match TcpPacket::new_checked(payload) {
            Ok(t) if t.rst() && !t.ack() => {}
            _ => return,
        }
        // The segment's place in the frame: it starts after the IP header.
        let start = payload.as_ptr() as usize - frame.as_ptr() as usize;
        (ip.src_addr(), ip.dst_addr(), start..start + payload.len())
    };
    let mut tcp = TcpPacket::new_unchecked(&mut frame[segment]);
    tcp.set_ack(true);
    tcp.fill_checksum(&IpAddress::from(src), &IpAddress::from(dst));
}

type SharedNotify = Arc<Notify>;
type SharedControl = Arc<SpinMutex<TcpSocketControl>>;

struct TcpListenerRunner;

impl TcpListenerRunner {
    #[allow(clippy::too_many_arguments)]
    fn create(
        device: VirtualDevice,
        iface: Interface,
        iface_ingress_tx: UnboundedSender<Vec<u8>>,
        iface_ingress_tx_avail: Arc<AtomicBool>,
        tcp_rx: Receiver<AnyIpPktFrame>,
        stream_tx: UnboundedSender<TcpStream>,
        sockets: HashMap<SocketHandle, SharedControl>,
        tcp_recv_buffer_size: u32,
        tcp_send_buffer_size: u32,
        tcp_recv_window: Option<u32>,
        spare: SharedSpare,
    ) -> Runner {
        Runner::new(async move {
            let notify = Arc::new(Notify::new());
            let (socket_tx, socket_rx) = unbounded_channel::<TcpSocketCreation>();
            let res = tokio::select! {
                v = Self::handle_packet(notify.clone(), iface_ingress_tx, iface_ingress_tx_avail.clone(), tcp_rx, stream_tx, socket_tx, tcp_recv_buffer_size, tcp_send_buffer_size, tcp_recv_window, spare.clone()) => v,
                v = Self::handle_socket(notify, device, iface, iface_ingress_tx_avail, sockets, socket_rx, spare) => v,
            };
            res?;
            trace!("VirtDevice::poll thread exited");
            Ok(())
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn handle_packet(
        notify: SharedNotify,
        iface_ingress_tx: UnboundedSender<Vec<u8>>,
        iface_ingress_tx_avail: Arc<AtomicBool>,
        mut tcp_rx: Receiver<AnyIpPktFrame>,
        stream_tx: UnboundedSender<TcpStream>,
        socket_tx: UnboundedSender<TcpSocketCreation>,
        tcp_recv_buffer_size: u32,
        tcp_send_buffer_size: u32,
        tcp_recv_window: Option<u32>,
        spare: SharedSpare,
    ) -> std::io::Result<()> {
        // cordon: the sockets made for each client's SYN, by address pair, while their
        // handshake runs. A client that retransmits its SYN (its SYN-ACK late or lost) must not
        // get a second socket: both would listen on the same address, the second could take the
        // SYN or the client's ACK meant for the first (answering it with a RST), and the
        // listener would hand out two streams for one connection. The socket already there
        // ignores the repeated SYN and sends its SYN-ACK again on its own timer.
        let mut handshaking: HashMap<
            (SocketAddr, SocketAddr),
            std::sync::Weak<SpinMutex<TcpSocketControl>>,
        > = HashMap::new();
        while let Some(mut frame) = tcp_rx.recv().await {
            address_bare_reset(&mut frame);
            let packet = match IpPacket::new_checked(frame.as_slice()) {
                Ok(p) => p,
                Err(err) => {
                    error!("invalid TCP IP packet: {:?}", err,);
                    continue;
                }
            };

            // Specially handle icmp packet by TCP interface.
            if matches!(packet.protocol(), IpProtocol::Icmp | IpProtocol::Icmpv6) {
                iface_ingress_tx
                    .send(frame)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::BrokenPipe, e))?;
                iface_ingress_tx_avail.store(true, Ordering::Release);
                notify.notify_one();
                continue;
            }

            let src_ip = packet.src_addr();
            let dst_ip = packet.dst_addr();
            let payload = packet.payload();

            let packet = match TcpPacket::new_checked(payload) {
                Ok(p) => p,
                Err(err) => {
                    error!("invalid TCP err: {err}, src_ip: {src_ip}, dst_ip: {dst_ip}, payload: {payload:?}");
                    continue;
                }
            };
            let src_port = packet.src_port();
            let dst_port = packet.dst_port();

            let src_addr = SocketAddr::new(src_ip, src_port);
            let dst_addr = SocketAddr::new(dst_ip, dst_port);

            // TCP first handshake packet, create a new Connection
            let first = packet.syn() && !packet.ack();
            let repeated = first
                && handshaking
                    .get(&(src_addr, dst_addr))
                    .and_then(std::sync::Weak::upgrade)
                    .is_some_and(|c| {
                        let c = c.lock();
                        !c.established && c.recv_state != TcpSocketState::Closed
                    });
            if first && !repeated {
                // cordon: a closed flow's socket and rings when there are some (see `Spare`).
                let mut socket = Spare::socket(
                    &spare,
                    tcp_recv_window.unwrap_or(tcp_recv_buffer_size) as usize,
                    tcp_recv_buffer_size as usize,
                    tcp_send_buffer_size as usize,
                );
                socket.set_keep_alive(Some(Duration::from_secs(28)));
                // FIXME: It should follow system's setting. 7200 is Linux's default.
                socket.set_timeout(Some(Duration::from_secs(7200)));
                // NO ACK delay
                // socket.set_ack_delay(None);
                // cordon: no Nagle. With the TUN's 64 KiB MTU, Nagle holds back every
                // segment shorter than a full MSS (65480 B) while anything is in flight, and
                // `can_send_full` also counts the peer's window: a receiver whose window is
                // below 64 KiB (any client reading in small pieces) gets nothing until all
                // in-flight data is acknowledged, and each response's tail waits for the
                // receiver's delayed ACK. The writers above (the relay, the TLS layer) hand
                // over whole chunks, so small segments do not arise from them.
                socket.set_nagle_enabled(false);

                if let Err(err) = socket.listen(dst_addr) {
                    error!("listen error: {:?}", err);
                    continue;
                }

                trace!("created TCP connection for {} <-> {}", src_addr, dst_addr);

                let control = Arc::new(SpinMutex::new(TcpSocketControl {
                    send_buffer: Spare::ring(&spare, tcp_send_buffer_size as usize),
                    send_waker: None,
                    recv_buffer: Spare::ring(&spare, tcp_recv_buffer_size as usize),
                    recv_waker: None,
                    recv_state: TcpSocketState::Normal,
                    send_state: TcpSocketState::Normal,
                    opened: false,
                    established: false,
                    spare: spare.clone(),
                }));
                // Entries of sockets long gone are dropped as the map grows, so it stays
                // about as large as the number of sockets at once.
                if handshaking.len() >= 1024 && handshaking.len().is_power_of_two() {
                    handshaking.retain(|_, c| c.strong_count() > 0);
                }
                handshaking.insert((src_addr, dst_addr), Arc::downgrade(&control));

                stream_tx
                    .send(TcpStream {
                        src_addr,
                        dst_addr,
                        notify: notify.clone(),
                        control: control.clone(),
                    })
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::BrokenPipe, e))?;
                socket_tx
                    .send(TcpSocketCreation { control, socket })
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::BrokenPipe, e))?;
            }

            // Pipeline tcp stream packet
            iface_ingress_tx
                .send(frame)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::BrokenPipe, e))?;
            iface_ingress_tx_avail.store(true, Ordering::Release);
            notify.notify_one();
        }
        Ok(())
    }

    async fn handle_socket(
        notify: SharedNotify,
        mut device: VirtualDevice,
        mut iface: Interface,
        iface_ingress_tx_avail: Arc<AtomicBool>,
        mut sockets: HashMap<SocketHandle, SharedControl>,
        mut socket_rx: UnboundedReceiver<TcpSocketCreation>,
        spare: SharedSpare,
    ) -> std::io::Result<()> {
        let mut socket_set = SocketSet::new(vec![]);
        loop {
            while let Ok(TcpSocketCreation { control, socket }) = socket_rx.try_recv() {
                let handle = socket_set.add(socket);
                sockets.insert(handle, control);
            }

            let before_poll = Instant::now();
            let updated_sockets = iface.poll(before_poll, &mut device, &mut socket_set);
            if matches!(
                updated_sockets,
                smoltcp::iface::PollResult::SocketStateChanged
            ) {
                trace!("VirtDevice::poll costed {}", Instant::now() - before_poll);
            }

            // Check all the sockets' status
            let mut sockets_to_remove = Vec::new();

            for (socket_handle, control) in sockets.iter() {
                let socket_handle = *socket_handle;
                let socket = socket_set.get_mut::<TcpSocket>(socket_handle);
                let mut control = control.lock();

                // cordon: each socket here serves one client's flow, so two states end it
                // that would not end a general-purpose socket:
                // - back in LISTEN after its handshake began: the client's RST in
                //   SYN-RECEIVED (a connect the client gave up, its socket gone) returns a
                //   passive socket to LISTEN (RFC 793). It would never end (its stream never
                //   sees EOF, so the flow holds its slot for the session) and would take the
                //   next SYN to the same address from any client.
                // - TIME-WAIT, once the bytes it took are moved to the stream's buffer (the
                //   stream reads them before its EOF): both ways are acknowledged. Kept for
                //   smoltcp's 10 s it holds both windows' buffers and is walked on every poll
                //   (a connection a millisecond adds 10,000 sockets to each walk); a SYN that
                //   reuses its addresses gets a socket of its own anyway.
                // Both are removed silently, as a closed socket is: no RST.
                let ended = match socket.state() {
                    TcpState::Listen => control.opened,
                    TcpState::TimeWait => !socket.can_recv(),
                    TcpState::Closed => true,
                    TcpState::SynReceived => {
                        control.opened = true;
                        false
                    }
                    _ => {
                        control.opened = true;
                        control.established = true;
                        false
                    }
                };
                // Remove the socket only when it is in the closed state.
                if ended {
                    sockets_to_remove.push(socket_handle);

                    control.send_state = TcpSocketState::Closed;
                    control.recv_state = TcpSocketState::Closed;

                    if let Some(waker) = control.send_waker.take() {
                        waker.wake();
                    }
                    if let Some(waker) = control.recv_waker.take() {
                        waker.wake();
                    }

                    trace!("closed TCP connection");
                    continue;
                }

                // SHUT_WR — only close once the send_buffer has been fully
                // drained into the smoltcp socket.  Closing earlier transitions
                // the socket to FIN_WAIT_1, making can_send() return false, so
                // the send loop below never runs and the remaining data is lost.
                if matches!(control.send_state, TcpSocketState::Close)
                    && control.send_buffer.is_empty()
                {
                    trace!("closing TCP Write Half, {:?}", socket.state());

                    socket.close();
                    control.send_state = TcpSocketState::Closing;
                }

                // Check if readable
                let mut wake_receiver = false;
                while socket.can_recv() && !control.recv_buffer.is_full() {
                    let result = socket.recv(|buffer| {
                        let n = control.recv_buffer.enqueue_slice(buffer);
                        (n, ())
                    });

                    match result {
                        Ok(..) => wake_receiver = true,
                        Err(err) => {
                            error!("socket recv error: {:?}, {:?}", err, socket.state());

                            // Don't know why. Abort the connection.
                            socket.abort();

                            if matches!(control.recv_state, TcpSocketState::Normal) {
                                control.recv_state = TcpSocketState::Closed;
                            }
                            wake_receiver = true;

                            // The socket will be recycled in the next poll.
                            break;
                        }
                    }
                }

                // If socket is not in ESTABLISH, FIN-WAIT-1, FIN-WAIT-2,
                // the local client have closed our receiver.
                let states = [
                    TcpState::Listen,
                    TcpState::SynReceived,
                    TcpState::Established,
                    TcpState::FinWait1,
                    TcpState::FinWait2,
                ];
                if matches!(control.recv_state, TcpSocketState::Normal)
                    && !socket.may_recv()
                    && !states.contains(&socket.state())
                {
                    trace!("closed TCP Read Half, {:?}", socket.state());

                    // Let TcpStream::poll_read returns EOF.
                    control.recv_state = TcpSocketState::Closed;
                    wake_receiver = true;
                }

                if wake_receiver && control.recv_waker.is_some() {
                    if let Some(waker) = control.recv_waker.take() {
                        waker.wake();
                    }
                }

                // Check if writable
                let mut wake_sender = false;
                while socket.can_send() && !control.send_buffer.is_empty() {
                    let result = socket.send(|buffer| {
                        let n = control.send_buffer.dequeue_slice(buffer);
                        (n, ())
                    });

                    match result {
                        Ok(..) => wake_sender = true,
                        Err(err) => {
                            error!("socket send error: {:?}, {:?}", err, socket.state());

                            // Don't know why. Abort the connection.
                            socket.abort();

                            if matches!(control.send_state, TcpSocketState::Normal) {
                                control.send_state = TcpSocketState::Closed;
                            }
                            wake_sender = true;

                            // The socket will be recycled in the next poll.
                            break;
                        }
                    }
                }

                if wake_sender && control.send_waker.is_some() {
                    if let Some(waker) = control.send_waker.take() {
                        waker.wake();
                    }
                }
            }

            for socket_handle in sockets_to_remove {
                sockets.remove(&socket_handle);
                if let smoltcp::socket::Socket::Tcp(s) = socket_set.remove(socket_handle) {
                    Spare::keep_socket(&spare, s);
                }
            }

            // Ensure every loop iteration yields to the runtime. When egress
            // capacity is available OR when `poll_delay` returns ZERO ("re-poll
            // now"), this loop otherwise takes no `.await`, so under an active
            // flow it busy-spins. Because `handle_socket` and `handle_packet`
            // are arms of one `tokio::select!` future, a never-yielding
            // `handle_socket` never returns control to the sibling SYN-accept
            // arm: one core pins flat at 100% and new inbound connections are
            // starved (observed as connect timeouts with no SYN-ACK). A
            // cooperative `yield_now()` keeps the re-poll just as prompt while
            // letting `handle_packet` make progress. The timed-park path and the
            // 5 ms idle fallback are unchanged, so there is no missed-wake risk.
            if iface_ingress_tx_avail.load(Ordering::Acquire) {
                tokio::task::yield_now().await;
            } else {
                let next_duration = iface
                    .poll_delay(before_poll, &socket_set)
                    .unwrap_or(Duration::from_millis(5));
                if next_duration != Duration::ZERO {
                    let _ = tokio::time::timeout(
                        tokio::time::Duration::from(next_duration),
                        notify.notified(),
                    )
                    .await;
                } else {
                    tokio::task::yield_now().await;
                }
            }
        }
    }
}

pub struct TcpListener {
    stream_rx: UnboundedReceiver<TcpStream>,
    /// cordon: the stack's closed flows' buffers (see `Spare`).
    spare: SharedSpare,
}

impl TcpListener {
    /// cordon: how many new flows were given a closed flow's socket and buffers so far.
    pub fn reused(&self) -> u64 {
        Spare::lock(&self.spare).reused
    }

    /// cordon: the sockets and the rings kept now for the next flows.
    pub fn spare(&self) -> (usize, usize) {
        let s = Spare::lock(&self.spare);
        (s.sockets.len(), s.rings.len())
    }

    pub(super) fn new(
        tcp_rx: Receiver<AnyIpPktFrame>,
        stack_tx: Sender<AnyIpPktFrame>,
        mtu: usize,
        tcp_recv_buffer_size: u32,
        tcp_send_buffer_size: u32,
        tcp_recv_window: Option<u32>,
        writer: Option<crate::device::PacketWriter>,
        tcp_checksum_offload: bool,
    ) -> std::io::Result<(Runner, Self)> {
        let (mut device, iface_ingress_tx, iface_ingress_tx_avail) =
            VirtualDevice::new(stack_tx, mtu);
        // cordon: see `StackBuilder::packet_writer` and `tcp_checksum_offload`.
        if let Some(w) = writer {
            device.set_writer(w, tcp_checksum_offload);
        }
        let iface = Self::create_interface(&mut device)?;

        let (stream_tx, stream_rx) = unbounded_channel();

        let spare = SharedSpare::default();
        let runner = TcpListenerRunner::create(
            device,
            iface,
            iface_ingress_tx,
            iface_ingress_tx_avail,
            tcp_rx,
            stream_tx,
            HashMap::new(),
            tcp_recv_buffer_size,
            tcp_send_buffer_size,
            tcp_recv_window,
            spare.clone(),
        );

        Ok((runner, Self { stream_rx, spare }))
    }

    fn create_interface<D>(device: &mut D) -> std::io::Result<Interface>
    where
        D: Device + ?Sized,
    {
        let mut iface_config = InterfaceConfig::new(HardwareAddress::Ip);
        // cordon: from the OS's generator, not `rand::random()`: its thread-local ChaCha
        // probes the CPU's features at first use (a dozen CPUID instructions, each trapped by
        // a hypervisor), ~0.07 ms of every sandbox's start for one seed (issue #18).
        iface_config.random_seed = rand::RngCore::next_u64(&mut rand::rngs::OsRng);
        let mut iface = Interface::new(iface_config, device, Instant::now());
        iface.update_ip_addrs(|ip_addrs| {
            ip_addrs
                .push(IpCidr::new(IpAddress::v4(0, 0, 0, 1), 0))
                .expect("iface IPv4");
            ip_addrs
                .push(IpCidr::new(IpAddress::v6(0, 0, 0, 0, 0, 0, 0, 1), 0))
                .expect("iface IPv6");
        });
        iface
            .routes_mut()
            .add_default_ipv4_route(Ipv4Address::new(0, 0, 0, 1))
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, e))?;
        iface
            .routes_mut()
            .add_default_ipv6_route(Ipv6Address::new(0, 0, 0, 0, 0, 0, 0, 1))
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, e))?;
        iface.set_any_ip(true);
        Ok(iface)
    }
}

impl Stream for TcpListener {
    type Item = (TcpStream, SocketAddr, SocketAddr);

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.stream_rx.poll_recv(cx).map(|stream| {
            stream.map(|stream| {
                let local_addr = *stream.local_addr();
                let remote_addr: SocketAddr = *stream.remote_addr();
                (stream, local_addr, remote_addr)
            })
        })
    }
}

pub struct TcpStream {
    src_addr: SocketAddr,
    dst_addr: SocketAddr,
    notify: SharedNotify,
    control: SharedControl,
}

impl Drop for TcpStream {
    fn drop(&mut self) {
        let mut control = self.control.lock();

        if matches!(control.recv_state, TcpSocketState::Normal) {
            control.recv_state = TcpSocketState::Close;
        }

        if matches!(control.send_state, TcpSocketState::Normal) {
            control.send_state = TcpSocketState::Close;
        }

        self.notify.notify_one();
    }
}

impl TcpStream {
    pub fn local_addr(&self) -> &SocketAddr {
        &self.src_addr
    }

    pub fn remote_addr(&self) -> &SocketAddr {
        &self.dst_addr
    }
}

impl AsyncRead for TcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let mut control = self.control.lock();

        // Read from buffer
        if control.recv_buffer.is_empty() {
            // If socket is already closed / half closed, just return EOF directly.
            if matches!(control.recv_state, TcpSocketState::Closed) {
                return Ok(()).into();
            }

            // Nothing could be read. Wait for notify.
            if let Some(old_waker) = control.recv_waker.replace(cx.waker().clone()) {
                if !old_waker.will_wake(cx.waker()) {
                    old_waker.wake();
                }
            }

            return Poll::Pending;
        }

        // cordon: copied into the unfilled part as is. `initialize_unfilled` zeroed all of a
        // reader's buffer left unfilled at every read, whatever the bytes available: 128 KiB
        // per read for a relay reading into uninitialised capacity (`read_buf`).
        let mut n = 0;
        while buf.remaining() > 0 && !control.recv_buffer.is_empty() {
            let chunk = control.recv_buffer.dequeue_many(buf.remaining());
            buf.put_slice(chunk);
            n += chunk.len();
        }

        if n > 0 {
            self.notify.notify_one();
        }

        Ok(()).into()
    }
}

impl AsyncWrite for TcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut control = self.control.lock();

        // If state == Close | Closing | Closed, the TCP stream WR half is closed.
        if !matches!(control.send_state, TcpSocketState::Normal) {
            return Err(std::io::ErrorKind::BrokenPipe.into()).into();
        }

        // Write to buffer

        if control.send_buffer.is_full() {
            if let Some(old_waker) = control.send_waker.replace(cx.waker().clone()) {
                if !old_waker.will_wake(cx.waker()) {
                    old_waker.wake();
                }
            }

            return Poll::Pending;
        }

        let n = control.send_buffer.enqueue_slice(buf);

        if n > 0 {
            self.notify.notify_one();
        }

        Ok(n).into()
    }

    /// cordon: every slice under one lock and one wake-up of the stack (TLS writes a
    /// flight of records as one vectored write).
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let mut control = self.control.lock();
        if !matches!(control.send_state, TcpSocketState::Normal) {
            return Err(std::io::ErrorKind::BrokenPipe.into()).into();
        }
        if control.send_buffer.is_full() {
            if let Some(old_waker) = control.send_waker.replace(cx.waker().clone()) {
                if !old_waker.will_wake(cx.waker()) {
                    old_waker.wake();
                }
            }
            return Poll::Pending;
        }
        let mut n = 0;
        for b in bufs {
            let m = control.send_buffer.enqueue_slice(b);
            n += m;
            if m < b.len() {
                break;
            }
        }
        if n > 0 {
            self.notify.notify_one();
        }
        Ok(n).into()
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Ok(()).into()
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let mut control = self.control.lock();

        if matches!(control.send_state, TcpSocketState::Closed) {
            return Ok(()).into();
        }

        // SHUT_WR
        if matches!(control.send_state, TcpSocketState::Normal) {
            control.send_state = TcpSocketState::Close;
        }

        if let Some(old_waker) = control.send_waker.replace(cx.waker().clone()) {
            if !old_waker.will_wake(cx.waker()) {
                old_waker.wake();
            }
        }

        self.notify.notify_one();

        Poll::Pending
    }
}
