//! The TUN device's framing: every packet read from it or written to it crosses behind a
//! virtio-net header (`struct virtio_net_hdr`; cordon-sandbox opens the device with
//! `IFF_VNET_HDR` and offers no offloads to the sandbox's kernel).
//!
//! The header is how the gateway leaves its TCP checksums to the receiving kernel: the stack
//! sends segments without one ([`netstack_smoltcp::StackBuilder::tcp_checksum_offload`]) and
//! [`for_stack_segment`] marks them `NEEDS_CSUM`, which the sandbox's kernel takes as verified
//! on local delivery (and completes if it ever forwards one). Without it the gateway sums every
//! byte it sends and the sandbox's kernel sums it again. What the sandbox sends comes with its
//! checksum done, and the stack still verifies it.

use netstack_smoltcp::smoltcp::wire::{IpProtocol, Ipv4Packet, TcpPacket};

/// `sizeof(struct virtio_net_hdr)`, as the device is set up (`TUNSETVNETHDRSZ`).
pub(crate) const HDR_LEN: usize = 10;
/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`.
pub(crate) const NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub(crate) const GSO_NONE: u8 = 0;
/// The most an IPv4 header and a TCP header can take (60 bytes each).
pub(crate) const MAX_HEADERS: usize = 120;

/// The header of a packet whose checksums are all done (the gateway's own DNS, ICMP and RST
/// packets): nothing for the kernel to do.
pub(crate) const COMPLETE: [u8; HDR_LEN] = [0; HDR_LEN];

/// The IP packet in a frame read from the device, or `None` for a frame the gateway drops: one
/// too short for its header, or one that asks the gateway to segment or to finish a checksum,
/// which the kernel does only when offered offloads (it is offered none, so such a frame is not
/// one it sends; checking it here keeps an unfinished checksum from ever reaching the stack).
pub(crate) fn packet_in(frame: &[u8]) -> Option<&[u8]> {
    let (hdr, pkt) = frame.split_at_checked(HDR_LEN)?;
    (hdr[0] & NEEDS_CSUM == 0 && hdr[1] == GSO_NONE).then_some(pkt)
}

/// For a TCP segment the stack built without its checksum: the header asking the kernel to
/// complete it, and in `headers` the segment's IP and TCP headers with the checksum field set
/// to the pseudo-header's sum (as `NEEDS_CSUM` requires). Written as `[header, headers[..n],
/// pkt[n..]]`. `None` for anything that is not a whole IPv4 TCP segment: it goes as it is, with
/// [`COMPLETE`].
pub(crate) fn for_stack_segment(
    pkt: &[u8],
    headers: &mut [u8; MAX_HEADERS],
) -> Option<([u8; HDR_LEN], usize)> {
    // The checked parsers bound both header lengths by the packet; a buffer longer than the
    // IP total length is not what the stack hands over, and is left alone.
    let ip = Ipv4Packet::new_checked(pkt).ok()?;
    let total = usize::from(ip.total_len());
    if ip.version() != 4 || ip.next_header() != IpProtocol::Tcp || total != pkt.len() {
        return None;
    }
    let ihl = usize::from(ip.header_len());
    let n = ihl + usize::from(TcpPacket::new_checked(ip.payload()).ok()?.header_len());
    headers[..n].copy_from_slice(&pkt[..n]);
    let tcp_len = (total - ihl) as u32;
    let mut sum: u32 = u32::from(u8::from(IpProtocol::Tcp)) + tcp_len;
    // The source and destination addresses.
    for w in pkt[12..20].chunks_exact(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    headers[ihl + 16..ihl + 18].copy_from_slice(&(sum as u16).to_be_bytes());
    let mut hdr = [0u8; HDR_LEN];
    hdr[0] = NEEDS_CSUM;
    hdr[1] = GSO_NONE;
    // hdr_len, csum_start, csum_offset; native-endian, as a legacy virtio header is (the
    // device's default, TUNSETVNETLE unset).
    hdr[2..4].copy_from_slice(&(n as u16).to_ne_bytes());
    hdr[6..8].copy_from_slice(&(ihl as u16).to_ne_bytes());
    hdr[8..10].copy_from_slice(&16u16.to_ne_bytes());
    Some((hdr, n))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::gateway::packet;
    use netstack_smoltcp::smoltcp::wire::{IpAddress, TcpControl};
    use std::net::SocketAddrV4;

    /// What the receiving kernel does with a `NEEDS_CSUM` frame (`skb_checksum_help`): the
    /// ones'-complement sum from `csum_start` to the end, folded, complemented, stored at
    /// `csum_start + csum_offset`.
    pub(crate) fn complete_as_the_kernel_does(hdr: &[u8; HDR_LEN], pkt: &mut [u8]) {
        assert_eq!(hdr[0], NEEDS_CSUM);
        let start = usize::from(u16::from_ne_bytes([hdr[6], hdr[7]]));
        let at = start + usize::from(u16::from_ne_bytes([hdr[8], hdr[9]]));
        assert!(usize::from(u16::from_ne_bytes([hdr[2], hdr[3]])) >= at + 2);
        let mut sum: u32 = 0;
        for w in pkt[start..].chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        pkt[at..at + 2].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    }

    pub(crate) fn verifies(pkt: &[u8]) -> bool {
        let ip = Ipv4Packet::new_checked(pkt).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        tcp.verify_checksum(
            &IpAddress::Ipv4(ip.src_addr()),
            &IpAddress::Ipv4(ip.dst_addr()),
        )
    }

    /// A segment sent with its checksum left out comes out of the kernel with the checksum a
    /// full sum gives, for odd and even lengths.
    #[test]
    fn a_segment_left_to_the_kernel_gets_the_right_checksum() {
        let a = |s: &str| s.parse::<SocketAddrV4>().unwrap();
        let (from, to) = (a("198.18.0.5:443"), a("10.0.2.100:40001"));
        for len in [0usize, 1, 2, 1399, 1400, 65_000] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let whole = packet::tcp_segment(from, to, TcpControl::Psh, 77, Some(99), 5000, &data);
            assert!(verifies(&whole), "the test's own segment");
            // As the stack leaves it: checksum zero.
            let mut sent = whole.clone();
            let ihl = usize::from(sent[0] & 0x0f) * 4;
            sent[ihl + 16..ihl + 18].fill(0);
            let mut headers = [0u8; MAX_HEADERS];
            let (hdr, n) = for_stack_segment(&sent, &mut headers).expect("a TCP segment");
            let mut delivered = [&headers[..n], &sent[n..]].concat();
            complete_as_the_kernel_does(&hdr, &mut delivered);
            assert_eq!(delivered, whole, "{len} bytes");
        }
    }

    #[test]
    fn what_is_not_a_whole_tcp_segment_goes_as_it_is() {
        let a = |s: &str| s.parse::<SocketAddrV4>().unwrap();
        let udp = packet::udp(a("10.0.2.1:53"), a("10.0.2.100:5353"), b"answer");
        let mut headers = [0u8; MAX_HEADERS];
        assert!(for_stack_segment(&udp, &mut headers).is_none());
        let tcp = packet::tcp_segment(
            a("198.18.0.5:443"),
            a("10.0.2.100:40001"),
            TcpControl::None,
            1,
            Some(1),
            100,
            b"data",
        );
        assert!(for_stack_segment(&tcp[..tcp.len() - 1], &mut headers).is_none());
        assert!(for_stack_segment(&tcp[..30], &mut headers).is_none());
        assert!(for_stack_segment(&[], &mut headers).is_none());
    }

    #[test]
    fn frames_read_are_stripped_and_unfinished_ones_dropped() {
        let mut frame = vec![0u8; HDR_LEN];
        frame.extend_from_slice(b"packet");
        assert_eq!(packet_in(&frame), Some(&b"packet"[..]));
        assert_eq!(packet_in(&frame[..HDR_LEN]), Some(&b""[..]));
        assert_eq!(packet_in(&frame[..HDR_LEN - 1]), None);
        frame[0] = NEEDS_CSUM;
        assert_eq!(packet_in(&frame), None, "a checksum left to the gateway");
        frame[0] = 2; // DATA_VALID: the kernel vouches for it; the stack verifies anyway.
        assert_eq!(packet_in(&frame), Some(&b"packet"[..]));
        frame[1] = 1; // GSO_TCPV4
        assert_eq!(packet_in(&frame), None, "a segment to be cut up");
    }
}
