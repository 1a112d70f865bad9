//! The resolver the gateway answers the sandbox's DNS with (`Resolver::handle_query`, called
//! on every UDP payload to port 53 and every TCP frame), on arbitrary messages: the input is
//! one or more messages in DNS-over-TCP framing (a big-endian u16 length before each), sent
//! to one resolver in turn, so the fake-IP table fills and evicts (its range is small here).
//! Never a panic; every reply decodes as a response to the query's id; every fake answer is
//! in the range and maps back to the name asked.
#![no_main]

use cordon_net::{DnsAnswer, NetConfig, Resolver};
use hickory_proto::op::{Message, MessageType};
use libfuzzer_sys::fuzz_target;

fn messages(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.len() < 2 {
            return None;
        }
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let (m, r) = rest[2..].split_at(len);
        rest = r;
        Some(m)
    })
}

/// The configuration, made once (the built-in blocklist comes from parsing the default
/// policy).
fn config() -> &'static NetConfig {
    static CFG: std::sync::OnceLock<NetConfig> = std::sync::OnceLock::new();
    CFG.get_or_init(|| NetConfig {
        fake_range: "198.18.0.0/29".parse().unwrap(),
        ..NetConfig::default()
    })
}

fuzz_target!(|data: &[u8]| {
    let range = config().fake_range;
    let mut r = Resolver::new(config().clone()).expect("the test configuration is valid");
    for query in messages(data).take(64) {
        let (reply, decision) = r.handle_query(query);
        if let Some(reply) = &reply {
            let m = Message::from_vec(reply).expect("a reply that decodes");
            assert_eq!(m.metadata.message_type, MessageType::Response);
            assert_eq!(&reply[..2], &query[..2], "the reply carries the query's id");
        }
        match &decision.answer {
            DnsAnswer::Answered(ip) => {
                assert!(range.contains(ip), "{ip} outside the fake range");
                assert_eq!(r.name_for(*ip), decision.name.as_deref());
                assert!(reply.is_some());
            }
            DnsAnswer::NxDomain => assert!(decision.rule.is_some(), "NXDOMAIN names its rule"),
            DnsAnswer::Dropped(_) => assert!(reply.is_none()),
            DnsAnswer::Empty | DnsAnswer::Rejected(_) => assert!(reply.is_some()),
        }
    }
});
