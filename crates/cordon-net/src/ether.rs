//! A microVM's link to the gateway: QEMU's `-netdev stream` (a unix stream socket carrying
//! Ethernet frames, each behind a 4-byte big-endian length, both ways, no virtio-net header)
//! turned into what the gateway reads from a TUN device (one IP packet per read, behind a
//! virtio-net header), so [`crate::Gateway::start`] serves a VM as it serves a namespace.
//!
//! Everything read from QEMU was written by the guest, which is hostile: a length out of range
//! ends the link, and only IP frames addressed to the gateway get through. The link is point to
//! point with fixed MACs and no ARP: the guest sends to [`GATEWAY_MAC`], the gateway to
//! [`GUEST_MAC`].

use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

use rustix::net::{AddressFamily, Shutdown, SocketFlags, SocketType};

use crate::gateway::vnet;

/// The gateway's address on a VM's link: the explicit proxy listens on its port 3128 (when the
/// gateway was wired with `link`), DNS on port 53 is answered as for any address.
pub const LINK_GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The explicit proxy's port at [`LINK_GATEWAY`].
pub(crate) const LINK_PROXY_PORT: u16 = 3128;
/// The gateway's MAC on the link (locally administered).
pub const GATEWAY_MAC: [u8; 6] = [0x02, 0x63, 0x6f, 0x72, 0x64, 0x01];
/// The guest's MAC on the link.
pub const GUEST_MAC: [u8; 6] = [0x02, 0x63, 0x6f, 0x72, 0x64, 0x02];

const ETH_HDR: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
/// The largest IP packet either side may carry (an IPv4 total length's limit).
const MAX_IP: usize = 65535;
/// Socket buffers of the pair: the gateway's writes never wait (a full buffer drops the
/// packet), so the default ~208 KiB, three of the stack's 64 KiB segments, would drop bursts a
/// TUN queue takes. The kernel caps it at `net.core.wmem_max`/`rmem_max`.
const PAIR_BUFFER: usize = 1 << 20;

/// Connects the gateway to QEMU's stream netdev on `stream`: returns the descriptor to give
/// [`crate::Gateway::start`] in place of the TUN device, and the thread that carries frames
/// both ways; it ends when either side closes (or the guest sends a bad length), closing the
/// other.
pub fn link(stream: UnixStream) -> io::Result<(OwnedFd, JoinHandle<()>)> {
    link_when(move || Some(stream))
}

/// [`link`], for a QEMU that is not started yet: the gateway's descriptor now, and the link's
/// thread accepts one connection on `listener` (the socket QEMU is told of) and serves it.
/// No connection ever (QEMU never started) leaves the gateway's descriptor silent.
pub fn serve(listener: std::os::unix::net::UnixListener) -> io::Result<(OwnedFd, JoinHandle<()>)> {
    link_when(move || listener.accept().ok().map(|(s, _)| s))
}

fn link_when(
    stream: impl FnOnce() -> Option<UnixStream> + Send + 'static,
) -> io::Result<(OwnedFd, JoinHandle<()>)> {
    // SEQPACKET keeps packet boundaries (one read, one packet, as on a TUN device) and, unlike
    // a datagram pair, tells each end when the other has gone.
    let (gateway, ours) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    for fd in [&gateway, &ours] {
        // Best effort: a smaller buffer costs throughput, not correctness.
        let _ = rustix::net::sockopt::set_socket_send_buffer_size(fd, PAIR_BUFFER);
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size(fd, PAIR_BUFFER);
    }
    // The gateway reads until it would block, as from the TUN device; our end blocks, so a
    // slow side holds the other back instead of frames piling up here.
    rustix::io::ioctl_fionbio(&gateway, true)?;
    let ours = std::fs::File::from(ours);
    let ours_in = ours.try_clone()?;
    let handle = std::thread::Builder::new()
        .name("cordon-link".into())
        .spawn(move || {
            let Some(stream) = stream() else { return };
            let Ok(stream_out) = stream.try_clone() else {
                return;
            };
            let out = std::thread::Builder::new()
                .name("cordon-link-out".into())
                .spawn(move || to_qemu(ours, stream_out));
            if out.is_ok() {
                from_qemu(stream, ours_in);
            }
            if let Ok(out) = out {
                let _ = out.join();
            }
        })?;
    Ok((gateway, handle))
}

/// Ends both directions: each thread's blocked read returns, and the gateway and QEMU see the
/// link close.
fn close(stream: &UnixStream, ours: &std::fs::File) {
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = rustix::net::shutdown(ours, Shutdown::Both);
}

/// QEMU → gateway.
fn from_qemu(mut stream: UnixStream, mut ours: std::fs::File) {
    let mut frame = vec![0u8; ETH_HDR + MAX_IP];
    // The packet goes to the gateway behind an all-zero header: checksums done, no GSO.
    let mut out = vec![0u8; vnet::HDR_LEN + MAX_IP];
    loop {
        let mut len = [0u8; 4];
        if stream.read_exact(&mut len).is_err() {
            break;
        }
        let len = u32::from_be_bytes(len) as usize;
        if !(ETH_HDR..=ETH_HDR + MAX_IP).contains(&len) {
            break;
        }
        if stream.read_exact(&mut frame[..len]).is_err() {
            break;
        }
        let Some(pkt) = packet_from_guest(&frame[..len]) else {
            continue;
        };
        out[vnet::HDR_LEN..vnet::HDR_LEN + pkt.len()].copy_from_slice(pkt);
        if write_packet(&mut ours, &out[..vnet::HDR_LEN + pkt.len()]).is_err() {
            break;
        }
    }
    close(&stream, &ours);
}

fn write_packet(ours: &mut std::fs::File, pkt: &[u8]) -> io::Result<()> {
    loop {
        match ours.write(pkt) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r.map(|_| ()),
        }
    }
}

/// The IP packet in a frame from the guest, or `None` for one the gateway does not take: not
/// addressed to it, or not IP (ARP, VLAN tags: the link has neither).
fn packet_from_guest(frame: &[u8]) -> Option<&[u8]> {
    let (eth, pkt) = frame.split_at_checked(ETH_HDR)?;
    let to_us = eth[..6] == GATEWAY_MAC || eth[..6] == [0xff; 6];
    let ip = matches!(
        u16::from_be_bytes([eth[12], eth[13]]),
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6
    );
    (to_us && ip).then_some(pkt)
}

/// Gateway → QEMU.
fn to_qemu(mut ours: std::fs::File, mut stream: UnixStream) {
    // One byte over the largest packet, so a packet that does not fit cannot pass truncated.
    let mut buf = vec![0u8; vnet::HDR_LEN + MAX_IP + 1];
    let mut out = Vec::with_capacity(4 + ETH_HDR + MAX_IP);
    loop {
        let n = match ours.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        out.clear();
        if !frame_for_guest(&mut buf[..n], &mut out) {
            continue;
        }
        // One write per frame, from this thread only: frames cannot interleave or reorder.
        if stream.write_all(&out).is_err() {
            break;
        }
    }
    close(&stream, &ours);
}

/// Builds in `out` the length-prefixed Ethernet frame for one packet from the gateway (its
/// virtio-net header first), finishing a checksum left to the receiver; `false` for one that
/// cannot go (GSO, a malformed header, not IP, too long).
fn frame_for_guest(dgram: &mut [u8], out: &mut Vec<u8>) -> bool {
    let Some((hdr, pkt)) = dgram.split_at_mut_checked(vnet::HDR_LEN) else {
        return false;
    };
    // The gateway is offered no segmentation offload, so a GSO packet is not one it sends.
    if hdr[1] != vnet::GSO_NONE || pkt.len() > MAX_IP {
        return false;
    }
    // QEMU's stream netdev carries no virtio-net header: the guest's NIC would take the
    // checksum as sent, so it is finished here, as the TUN device's receiving kernel would.
    if hdr[0] & vnet::NEEDS_CSUM != 0 {
        let start = usize::from(u16::from_ne_bytes([hdr[6], hdr[7]]));
        let at = start + usize::from(u16::from_ne_bytes([hdr[8], hdr[9]]));
        if at + 2 > pkt.len() {
            return false;
        }
        let sum = !fold(&pkt[start..]);
        pkt[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    }
    let ethertype = match pkt.first().map(|b| b >> 4) {
        Some(4) => ETHERTYPE_IPV4,
        Some(6) => ETHERTYPE_IPV6,
        _ => return false,
    };
    let len = (ETH_HDR + pkt.len()) as u32;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&GUEST_MAC);
    out.extend_from_slice(&GATEWAY_MAC);
    out.extend_from_slice(&ethertype.to_be_bytes());
    out.extend_from_slice(pkt);
    true
}

/// The 16-bit ones'-complement sum of `data` (an odd last byte padded with zero), folded.
fn fold(data: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u64::from(u16::from_be_bytes([*last, 0]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::packet;
    use netstack_smoltcp::smoltcp::wire::{IpAddress, Ipv4Packet, TcpControl, TcpPacket};
    use std::net::SocketAddrV4;
    use std::time::Duration;

    fn a(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    /// A link with QEMU's side as a stream and the gateway's end as a blocking file.
    fn linked() -> (UnixStream, std::fs::File, JoinHandle<()>) {
        let (qemu, ours) = UnixStream::pair().unwrap();
        let (gw, handle) = link(ours).unwrap();
        rustix::io::ioctl_fionbio(&gw, false).unwrap();
        let gw = std::fs::File::from(gw);
        qemu.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        (qemu, gw, handle)
    }

    fn framed(dst: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = ((ETH_HDR + payload.len()) as u32).to_be_bytes().to_vec();
        f.extend_from_slice(&dst);
        f.extend_from_slice(&GUEST_MAC);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// The gateway's next datagram; a second read thread keeps a missing one from hanging.
    fn next_dgram(gw: &std::fs::File) -> Vec<u8> {
        let mut gw = gw.try_clone().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 70_000];
            let n = gw.read(&mut buf).unwrap();
            let _ = tx.send(buf[..n].to_vec());
        });
        rx.recv_timeout(Duration::from_secs(5)).expect("a datagram")
    }

    #[test]
    fn an_ip_frame_to_the_gateway_reaches_it_behind_a_complete_header() {
        let (mut qemu, gw, _h) = linked();
        let udp = packet::udp(a("10.0.2.15:5353"), a("10.0.2.2:53"), b"query");
        // Dropped: another MAC, ARP, a VLAN tag. Then one to the gateway, and one broadcast.
        qemu.write_all(&framed([2, 0, 0, 0, 0, 9], ETHERTYPE_IPV4, &udp))
            .unwrap();
        qemu.write_all(&framed([0xff; 6], 0x0806, &[0u8; 28]))
            .unwrap();
        qemu.write_all(&framed(GATEWAY_MAC, 0x8100, &udp)).unwrap();
        qemu.write_all(&framed(GATEWAY_MAC, ETHERTYPE_IPV4, &udp))
            .unwrap();
        qemu.write_all(&framed([0xff; 6], ETHERTYPE_IPV4, b"second"))
            .unwrap();
        let mut want = vec![0u8; vnet::HDR_LEN];
        want.extend_from_slice(&udp);
        assert_eq!(next_dgram(&gw), want, "the first frame to the gateway");
        assert_eq!(&next_dgram(&gw)[vnet::HDR_LEN..], b"second", "in order");
    }

    #[test]
    fn a_segment_left_to_the_receiver_reaches_the_guest_with_its_checksum() {
        let (mut qemu, mut gw, _h) = linked();
        let (from, to) = (a("198.18.0.5:443"), a("10.0.2.15:40001"));
        for len in [0usize, 1, 1399, 65_000] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let whole = packet::tcp_segment(from, to, TcpControl::Psh, 77, Some(99), 5000, &data);
            let mut sent = whole.clone();
            let ihl = usize::from(sent[0] & 0x0f) * 4;
            sent[ihl + 16..ihl + 18].fill(0);
            let mut headers = [0u8; vnet::MAX_HEADERS];
            let (hdr, n) = vnet::for_stack_segment(&sent, &mut headers).unwrap();
            gw.write_all(&[&hdr[..], &headers[..n], &sent[n..]].concat())
                .unwrap();
            let mut lenb = [0u8; 4];
            qemu.read_exact(&mut lenb).unwrap();
            let mut frame = vec![0u8; u32::from_be_bytes(lenb) as usize];
            qemu.read_exact(&mut frame).unwrap();
            assert_eq!(&frame[..6], &GUEST_MAC);
            assert_eq!(&frame[6..12], &GATEWAY_MAC);
            assert_eq!(&frame[12..14], &[0x08, 0x00]);
            let ip = Ipv4Packet::new_checked(&frame[ETH_HDR..]).unwrap();
            let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
            assert!(
                tcp.verify_checksum(
                    &IpAddress::Ipv4(ip.src_addr()),
                    &IpAddress::Ipv4(ip.dst_addr())
                ),
                "{len} bytes"
            );
            assert_eq!(&frame[ETH_HDR..], &whole[..]);
        }
        // A GSO packet is dropped; a complete one after it goes as it is.
        let udp = packet::udp(a("10.0.2.2:53"), to, b"answer");
        let mut gso = vec![0u8; vnet::HDR_LEN];
        gso[1] = 1;
        gso.extend_from_slice(&udp);
        gw.write_all(&gso).unwrap();
        gw.write_all(&[&vnet::COMPLETE[..], &udp].concat()).unwrap();
        let mut lenb = [0u8; 4];
        qemu.read_exact(&mut lenb).unwrap();
        let mut frame = vec![0u8; u32::from_be_bytes(lenb) as usize];
        qemu.read_exact(&mut frame).unwrap();
        assert_eq!(&frame[ETH_HDR..], &udp[..]);
    }

    #[test]
    fn a_length_out_of_range_closes_the_link() {
        for bad in [70_000u32, 13] {
            let (mut qemu, mut gw, h) = linked();
            qemu.write_all(&bad.to_be_bytes()).unwrap();
            qemu.write_all(&[0u8; 64]).unwrap();
            // Closed with the guest's bytes unread: a reset, or the end of the stream.
            let mut rest = Vec::new();
            match qemu.read_to_end(&mut rest) {
                Ok(_) => {}
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "closed: {e}"),
            }
            assert_eq!(gw.read(&mut [0u8; 64]).unwrap(), 0, "the gateway's too");
            h.join().unwrap();
        }
    }

    #[test]
    fn the_gateway_going_closes_qemus_side() {
        let (mut qemu, gw, h) = linked();
        drop(gw);
        let mut rest = Vec::new();
        qemu.read_to_end(&mut rest).expect("closed");
        h.join().unwrap();
    }

    /// The next frame QEMU reads: the TCP segment in it, from the gateway's address, as
    /// (flags SYN, ACK, FIN; sequence number; payload), or `None` for anything else.
    fn next_segment(qemu: &mut UnixStream) -> Option<(bool, bool, bool, u32, Vec<u8>)> {
        let mut lenb = [0u8; 4];
        qemu.read_exact(&mut lenb)
            .expect("a frame from the gateway");
        let mut frame = vec![0u8; u32::from_be_bytes(lenb) as usize];
        qemu.read_exact(&mut frame).unwrap();
        let ip = Ipv4Packet::new_checked(&frame[ETH_HDR..]).ok()?;
        let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
        let ok = tcp.verify_checksum(
            &IpAddress::Ipv4(ip.src_addr()),
            &IpAddress::Ipv4(ip.dst_addr()),
        );
        assert!(ok, "every segment reaches the guest with its checksum");
        let seg = (tcp.syn(), tcp.ack(), tcp.fin(), tcp.seq_number().0 as u32);
        Some((seg.0, seg.1, seg.2, seg.3, tcp.payload().to_vec()))
    }

    /// A guest's request to the proxy at the link's gateway address, end to end through a
    /// running gateway: handshake, request, and the proxy's refusal (no rule allows the host).
    #[test]
    fn the_guests_proxy_answers_on_the_link() {
        let opts = cordon_policy::LoadOptions::new("/nonexistent", "/nonexistent", "/nonexistent");
        let plan = cordon_policy::load(&opts).unwrap().plan;
        let wiring = crate::Wiring {
            emit: std::sync::Arc::new(|_| {}),
            redact: std::sync::Arc::new(|t: &str| t.to_string()),
            audit: None,
            execs: None,
            link: true,
        };
        let mut gw = crate::Gateway::new(&plan, wiring).unwrap();
        let (mut qemu, ours) = UnixStream::pair().unwrap();
        qemu.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let (fd, _h) = link(ours).unwrap();
        let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        gw.start(Some(fd), Vec::new(), proxy.into()).unwrap();
        let (guest, server) = (a("10.0.2.15:40000"), SocketAddrV4::new(LINK_GATEWAY, 3128));
        let send = |qemu: &mut UnixStream, seg: Vec<u8>| {
            qemu.write_all(&framed(GATEWAY_MAC, ETHERTYPE_IPV4, &seg))
                .unwrap();
        };
        send(
            &mut qemu,
            packet::tcp_segment(guest, server, TcpControl::Syn, 1000, None, 65535, &[]),
        );
        let isn = loop {
            if let Some((true, true, _, seq, _)) = next_segment(&mut qemu) {
                break seq;
            }
        };
        let request = b"GET http://example.test/ HTTP/1.1\r\nHost: example.test\r\n\r\n";
        let ack = Some(isn.wrapping_add(1));
        let seg = packet::tcp_segment(guest, server, TcpControl::Psh, 1001, ack, 65535, request);
        send(&mut qemu, seg);
        let mut reply = Vec::new();
        let mut next = isn.wrapping_add(1);
        loop {
            let Some((_, _, fin, seq, data)) = next_segment(&mut qemu) else {
                continue;
            };
            if seq == next && !data.is_empty() {
                reply.extend_from_slice(&data);
                next = next.wrapping_add(data.len() as u32);
                let ack = Some(next);
                let seg = packet::tcp_segment(
                    guest,
                    server,
                    TcpControl::None,
                    1001 + request.len() as u32,
                    ack,
                    65535,
                    &[],
                );
                send(&mut qemu, seg);
            }
            if fin {
                break;
            }
        }
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("HTTP/1.1 403 Forbidden"), "{reply}");
        assert!(reply.contains("example.test"), "{reply}");
    }
}
