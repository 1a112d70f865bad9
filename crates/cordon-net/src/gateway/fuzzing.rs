//! Entry points for the fuzz targets under `fuzz/` (the `fuzzing` feature): not API, and
//! absent from every normal build. They run the TUN loop's per-packet path without a device,
//! so arbitrary packets reach the same parsing, the resolver and the packet builders.

use super::packet::{self, Parsed};
use crate::Resolver;

/// What the TUN loop does with one packet from the sandbox (see `tun::run`).
#[derive(Debug)]
pub enum TunStep {
    /// A TCP SYN: held while policy decides, then fed to the stack or answered with `rst`.
    Syn {
        /// The RST a refused SYN gets.
        rst: Vec<u8>,
    },
    /// Any other TCP segment: fed to the userspace stack.
    ToStack,
    /// Answered by the gateway itself (a DNS reply, ICMP unreachable), or not at all.
    Reply(Option<Vec<u8>>),
    /// Dropped (not IPv4, fragments, other protocols, garbage).
    Dropped,
}

/// One packet through the TUN loop's dispatch, with `resolver` answering port 53.
pub fn tun_packet(resolver: &mut Resolver, pkt: &[u8]) -> TunStep {
    match packet::parse(pkt) {
        Parsed::Tcp {
            src,
            dst,
            syn_only: true,
            seq,
        } => TunStep::Syn {
            rst: packet::tcp_rst(src, dst, seq),
        },
        Parsed::Tcp { .. } => TunStep::ToStack,
        Parsed::Udp { src, dst, payload } if dst.port() == 53 => {
            let (reply, _decision) = resolver.handle_query(payload);
            TunStep::Reply(reply.map(|r| packet::udp(dst, src, &r)))
        }
        Parsed::Udp { .. } => TunStep::Reply(packet::icmp_unreachable(pkt, true)),
        Parsed::Ping { .. } => TunStep::Reply(packet::icmp_unreachable(pkt, false)),
        Parsed::Other => TunStep::Dropped,
    }
}

/// Whether `pkt` parses as the gateway reads packets (to check what it writes back).
pub fn parses(pkt: &[u8]) -> bool {
    packet::parse(pkt) != Parsed::Other
}

/// The userspace stack's builder, configured as the gateway runs it. Built without the
/// gateway's packet writer, its segments still carry their checksums (the checksum offload
/// applies only with a writer, which the TUN framing in `vnet` completes).
pub fn stack_builder() -> netstack_smoltcp::StackBuilder {
    super::tun::stack_builder()
}
