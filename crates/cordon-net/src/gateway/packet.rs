//! Reading the sandbox's IP packets and writing the few the gateway answers itself (TCP RST,
//! ICMP unreachable, DNS replies). Every input byte comes from the sandbox: parsing is checked
//! (`new_checked`) and anything that does not parse is dropped.

use std::net::{Ipv4Addr, SocketAddrV4};

use netstack_smoltcp::smoltcp::phy::ChecksumCapabilities;
use netstack_smoltcp::smoltcp::wire::{
    Icmpv4DstUnreachable, Icmpv4Message, Icmpv4Packet, Icmpv4Repr, IpAddress, IpProtocol,
    Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, UdpPacket, UdpRepr,
};

/// What one packet from the sandbox is, as far as the gateway cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Parsed<'a> {
    /// A TCP segment; `syn_only` for the first packet of a handshake.
    Tcp {
        src: SocketAddrV4,
        dst: SocketAddrV4,
        syn_only: bool,
        seq: u32,
    },
    /// A UDP datagram.
    Udp {
        src: SocketAddrV4,
        dst: SocketAddrV4,
        payload: &'a [u8],
    },
    /// ICMP echo request.
    Ping { src: Ipv4Addr, dst: Ipv4Addr },
    /// Anything else (IPv6, other protocols, other ICMP, garbage): dropped.
    Other,
}

pub(crate) fn parse(pkt: &[u8]) -> Parsed<'_> {
    let Ok(ip) = Ipv4Packet::new_checked(pkt) else {
        return Parsed::Other;
    };
    // `new_checked` checks lengths only. The stack reads the version nibble: a packet it
    // refuses must never reach it, since a refused send ends the TUN loop.
    if ip.version() != 4 {
        return Parsed::Other;
    }
    // Fragments are not reassembled: nothing the sandbox sends needs them (MTU 65520).
    if ip.more_frags() || ip.frag_offset() != 0 {
        return Parsed::Other;
    }
    let (src_ip, dst_ip) = (ip.src_addr(), ip.dst_addr());
    let payload = &pkt[ip.header_len() as usize..ip.total_len() as usize];
    match ip.next_header() {
        IpProtocol::Tcp => match TcpPacket::new_checked(payload) {
            Ok(t) => Parsed::Tcp {
                src: SocketAddrV4::new(src_ip, t.src_port()),
                dst: SocketAddrV4::new(dst_ip, t.dst_port()),
                syn_only: t.syn() && !t.ack() && !t.rst() && !t.fin(),
                seq: t.seq_number().0 as u32,
            },
            Err(_) => Parsed::Other,
        },
        IpProtocol::Udp => match UdpPacket::new_checked(payload) {
            Ok(u) => Parsed::Udp {
                src: SocketAddrV4::new(src_ip, u.src_port()),
                dst: SocketAddrV4::new(dst_ip, u.dst_port()),
                payload: &payload[8..usize::from(u.len()).max(8)],
            },
            Err(_) => Parsed::Other,
        },
        IpProtocol::Icmp => match Icmpv4Packet::new_checked(payload) {
            Ok(i) if i.msg_type() == Icmpv4Message::EchoRequest => Parsed::Ping {
                src: src_ip,
                dst: dst_ip,
            },
            _ => Parsed::Other,
        },
        _ => Parsed::Other,
    }
}

fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: IpProtocol, payload_len: usize) -> (Vec<u8>, usize) {
    let repr = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: proto,
        payload_len,
        hop_limit: 64,
    };
    let mut buf = vec![0u8; repr.buffer_len() + payload_len];
    repr.emit(
        &mut Ipv4Packet::new_unchecked(&mut buf[..]),
        &ChecksumCapabilities::default(),
    );
    (buf, repr.buffer_len())
}

/// A client's SYN offering a window scale and an MSS, as a kernel's does (tests: without
/// the scale option a stack's windows stop at 64 KiB).
#[cfg(test)]
pub(crate) fn tcp_syn_scaled(from: SocketAddrV4, to: SocketAddrV4, seq: u32, shift: u8) -> Vec<u8> {
    let mut tcp = tcp_repr(from, to, TcpControl::Syn, seq, None, u16::MAX, &[]);
    tcp.window_scale = Some(shift);
    tcp.max_seg_size = Some(65480);
    tcp_packet(from, to, &tcp)
}

/// The RST answering a SYN from `src` to `dst`: the client sees "connection refused" at once.
pub(crate) fn tcp_rst(src: SocketAddrV4, dst: SocketAddrV4, syn_seq: u32) -> Vec<u8> {
    let ack = Some(syn_seq.wrapping_add(1));
    tcp_segment(dst, src, TcpControl::Rst, 0, ack, 0, &[])
}

/// One TCP segment from `from` to `to`, without options.
pub(crate) fn tcp_segment(
    from: SocketAddrV4,
    to: SocketAddrV4,
    control: TcpControl,
    seq: u32,
    ack: Option<u32>,
    window_len: u16,
    payload: &[u8],
) -> Vec<u8> {
    let tcp = tcp_repr(from, to, control, seq, ack, window_len, payload);
    tcp_packet(from, to, &tcp)
}

fn tcp_repr<'a>(
    from: SocketAddrV4,
    to: SocketAddrV4,
    control: TcpControl,
    seq: u32,
    ack: Option<u32>,
    window_len: u16,
    payload: &'a [u8],
) -> TcpRepr<'a> {
    TcpRepr {
        src_port: from.port(),
        dst_port: to.port(),
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
        window_len,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    }
}

fn tcp_packet(from: SocketAddrV4, to: SocketAddrV4, tcp: &TcpRepr) -> Vec<u8> {
    let (mut buf, off) = ipv4(*from.ip(), *to.ip(), IpProtocol::Tcp, tcp.buffer_len());
    tcp.emit(
        &mut TcpPacket::new_unchecked(&mut buf[off..]),
        &IpAddress::Ipv4(*from.ip()),
        &IpAddress::Ipv4(*to.ip()),
        &ChecksumCapabilities::default(),
    );
    buf
}

/// A UDP datagram from `from` back to `to` (the DNS reply).
pub(crate) fn udp(from: SocketAddrV4, to: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let repr = UdpRepr {
        src_port: from.port(),
        dst_port: to.port(),
    };
    let len = repr.header_len() + payload.len();
    let (mut buf, off) = ipv4(*from.ip(), *to.ip(), IpProtocol::Udp, len);
    repr.emit(
        &mut UdpPacket::new_unchecked(&mut buf[off..]),
        &IpAddress::Ipv4(*from.ip()),
        &IpAddress::Ipv4(*to.ip()),
        payload.len(),
        |p| p.copy_from_slice(payload),
        &ChecksumCapabilities::default(),
    );
    buf
}

/// ICMP "destination unreachable" for `original` (a packet the sandbox sent), from its
/// destination: `port` for UDP (the socket sees ECONNREFUSED), "administratively prohibited"
/// otherwise (ping prints it).
pub(crate) fn icmp_unreachable(original: &[u8], port: bool) -> Option<Vec<u8>> {
    let ip = Ipv4Packet::new_checked(original).ok()?;
    let header = Ipv4Repr::parse(&ip, &ChecksumCapabilities::ignored()).ok()?;
    let body = &original[ip.header_len() as usize..ip.total_len() as usize];
    let data = &body[..body.len().min(8)];
    let icmp = Icmpv4Repr::DstUnreachable {
        reason: if port {
            Icmpv4DstUnreachable::PortUnreachable
        } else {
            Icmpv4DstUnreachable::CommProhibited
        },
        header,
        data,
    };
    let (mut buf, off) = ipv4(
        header.dst_addr,
        header.src_addr,
        IpProtocol::Icmp,
        icmp.buffer_len(),
    );
    icmp.emit(
        &mut Icmpv4Packet::new_unchecked(&mut buf[off..]),
        &ChecksumCapabilities::default(),
    );
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    #[test]
    fn rst_answers_the_syn() {
        let pkt = tcp_rst(a("10.0.2.100:40000"), a("198.18.0.5:25"), 1000);
        match parse(&pkt) {
            Parsed::Tcp {
                src, dst, syn_only, ..
            } => {
                assert_eq!(src, a("198.18.0.5:25"));
                assert_eq!(dst, a("10.0.2.100:40000"));
                assert!(!syn_only);
            }
            other => panic!("{other:?}"),
        }
        let ip = Ipv4Packet::new_checked(&pkt[..]).unwrap();
        let t = TcpPacket::new_checked(ip.payload()).unwrap();
        assert!(t.rst() && t.ack());
        assert_eq!(t.ack_number().0, 1001);
        assert!(t.verify_checksum(
            &IpAddress::Ipv4(ip.src_addr()),
            &IpAddress::Ipv4(ip.dst_addr())
        ));
    }

    #[test]
    fn udp_round_trip_and_unreachable() {
        let pkt = udp(a("10.0.2.100:5000"), a("198.18.0.1:53"), b"hello");
        match parse(&pkt) {
            Parsed::Udp { src, dst, payload } => {
                assert_eq!(
                    (src, dst, payload),
                    (a("10.0.2.100:5000"), a("198.18.0.1:53"), &b"hello"[..])
                );
            }
            other => panic!("{other:?}"),
        }
        let icmp = icmp_unreachable(&pkt, true).unwrap();
        let ip = Ipv4Packet::new_checked(&icmp[..]).unwrap();
        assert_eq!(ip.dst_addr(), Ipv4Addr::new(10, 0, 2, 100));
        let i = Icmpv4Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(i.msg_type(), Icmpv4Message::DstUnreachable);
        assert_eq!(i.msg_code(), 3);
    }

    /// Found by the `packet` fuzz target: an ACK whose version nibble is 12 (and one that
    /// claims 6) parsed as IPv4 TCP, went to the stack, which refused it, and that refusal
    /// ended the TUN loop: the sandbox's whole transparent network.
    #[test]
    fn only_version_4_is_ipv4() {
        let hex =
            "c500002804d24000400663830a000264c61200059c4001bb000003e900000001508c0a000264c612";
        let pkt: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(parse(&pkt), Parsed::Other);
        let mut syn = tcp_rst(a("10.0.2.100:40000"), a("198.18.0.5:25"), 1000);
        assert!(matches!(parse(&syn), Parsed::Tcp { .. }));
        syn[0] = 0x65;
        assert_eq!(parse(&syn), Parsed::Other);
    }

    #[test]
    fn garbage_is_other() {
        for junk in [&b""[..], b"\x45", &[0x45; 40], &[0x60; 60], &[0xff; 20]] {
            assert_eq!(parse(junk), Parsed::Other);
        }
    }
}
