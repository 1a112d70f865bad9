//! The gateway's packet path: what the TUN loop does with each packet the sandbox sends
//! (`gateway::fuzzing::tun_packet`: parse, DNS on port 53, ICMP unreachable, RST for a
//! refused SYN) and the userspace TCP/IP stack (netstack-smoltcp, built as the gateway builds
//! it) fed every TCP segment the loop hands it. The input is a run of packets, each after a
//! 3-byte frame header (big-endian u16 length, flags: bit 0 recomputes the IPv4 and TCP/UDP
//! checksums so the fuzzer gets past them, bit 1 refuses the SYN instead of passing it).
//! Never a panic; every packet the gateway writes back is well-formed IPv4 with a valid
//! header checksum; the stack is bounded as the gateway bounds it (a few flows per input).
#![no_main]

use std::sync::OnceLock;

use cordon_net::gateway::fuzzing::{TunStep, stack_builder, tun_packet};
use cordon_net::{NetConfig, Resolver};
use futures::{FutureExt, SinkExt, StreamExt};
use libfuzzer_sys::fuzz_target;
use netstack_smoltcp::smoltcp::wire::{IpAddress, IpProtocol, Ipv4Packet, TcpPacket, UdpPacket};

/// SYNs passed to the stack per input (the gateway bounds flows per sandbox the same way).
const MAX_SYNS: usize = 8;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

fn frames(data: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.len() < 3 {
            return None;
        }
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 3);
        let flags = rest[2];
        let (p, r) = rest[3..].split_at(len);
        rest = r;
        Some((flags, p))
    })
}

/// Recomputes the checksums a sender would have computed, where the packet parses that far.
fn fix_checksums(pkt: &mut [u8]) {
    let Ok(mut ip) = Ipv4Packet::new_checked(&mut *pkt) else {
        return;
    };
    ip.fill_checksum();
    let (src, dst) = (
        IpAddress::Ipv4(ip.src_addr()),
        IpAddress::Ipv4(ip.dst_addr()),
    );
    let proto = ip.next_header();
    let payload = ip.payload_mut();
    match proto {
        IpProtocol::Tcp => {
            if let Ok(mut t) = TcpPacket::new_checked(payload) {
                t.fill_checksum(&src, &dst);
            }
        }
        IpProtocol::Udp => {
            if let Ok(mut u) = UdpPacket::new_checked(payload) {
                u.fill_checksum(&src, &dst);
            }
        }
        _ => {}
    }
}

/// What the gateway writes to the TUN device must be IPv4 the kernel takes.
fn well_formed(pkt: &[u8], what: &str) {
    let ip = Ipv4Packet::new_checked(pkt).unwrap_or_else(|e| panic!("{what}: not IPv4: {e}"));
    assert!(ip.verify_checksum(), "{what}: bad IPv4 header checksum");
}

fuzz_target!(|data: &[u8]| {
    static CFG: OnceLock<NetConfig> = OnceLock::new();
    let cfg = CFG.get_or_init(NetConfig::default).clone();
    let mut resolver = Resolver::new(cfg).expect("the default configuration");
    runtime().block_on(async {
        let (stack, runner, _, listener) = stack_builder().build().expect("the stack builds");
        let (Some(runner), Some(mut listener)) = (runner, listener) else {
            panic!("the stack has TCP");
        };
        let runner = tokio::spawn(runner);
        let (mut to_stack, mut from_stack) = stack.split();
        let mut streams = Vec::new();
        let mut syns = 0;
        for (flags, pkt) in frames(data).take(64) {
            let mut pkt = pkt.to_vec();
            if flags & 1 != 0 {
                fix_checksums(&mut pkt);
            }
            match tun_packet(&mut resolver, &pkt) {
                TunStep::Syn { rst } => {
                    well_formed(&rst, "RST");
                    if flags & 2 == 0 && syns < MAX_SYNS {
                        syns += 1;
                        to_stack.send(pkt).await.expect("the stack takes a SYN");
                    }
                }
                TunStep::ToStack => to_stack.send(pkt).await.expect("the stack takes a segment"),
                TunStep::Reply(Some(reply)) => well_formed(&reply, "reply"),
                TunStep::Reply(None) | TunStep::Dropped => {}
            }
            // Let the stack's runner take the packet, then collect what it sent and accepted.
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            while let Some(Some(out)) = from_stack.next().now_or_never() {
                well_formed(&out.expect("a packet from the stack"), "stack output");
            }
            while let Some(Some(s)) = listener.next().now_or_never() {
                streams.push(s);
            }
        }
        assert!(streams.len() <= MAX_SYNS, "more flows than SYNs passed");
        runner.abort();
    });
});
