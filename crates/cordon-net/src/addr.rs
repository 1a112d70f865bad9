//! Address classes for the rebinding/SSRF rule: which answers a public name may not have.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::Ipv4Net;

/// Why an address is not a public internet address. A name that resolves to any of these is
/// refused for connecting unless policy names the host explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddrClass {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// RFC 1918: 10/8, 172.16/12, 192.168/16.
    Private,
    /// 169.254/16 (incl. cloud metadata 169.254.169.254), fe80::/10.
    LinkLocal,
    /// Carrier-grade NAT shared space, 100.64/10 (RFC 6598).
    SharedCgnat,
    /// IPv6 unique local, fc00::/7; deprecated site-local fec0::/10.
    UniqueLocal,
    /// 0.0.0.0/8 ("this network", which Linux routes to the local host), ::.
    Unspecified,
    /// 224/4, ff00::/8.
    Multicast,
    /// 240/4 and 255.255.255.255; 192.0.0/24 (IETF protocol assignments); 100::/64
    /// (discard-only); 64:ff9b:1::/48 (local-use NAT64).
    Reserved,
    /// 198.18.0.0/15 (benchmarking, the default fake range) or the configured fake range.
    FakeRange,
}

impl AddrClass {
    /// Short stable name for events (`loopback`, `private`, `link-local`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            AddrClass::Loopback => "loopback",
            AddrClass::Private => "private",
            AddrClass::LinkLocal => "link-local",
            AddrClass::SharedCgnat => "shared-cgnat",
            AddrClass::UniqueLocal => "unique-local",
            AddrClass::Unspecified => "unspecified",
            AddrClass::Multicast => "multicast",
            AddrClass::Reserved => "reserved",
            AddrClass::FakeRange => "fake-range",
        }
    }
}

impl fmt::Display for AddrClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u8) -> bool {
    Ipv4Net::new(Ipv4Addr::from(net), prefix).is_ok_and(|n| n.contains(&ip))
}

/// Classifies `ip`; `None` for an ordinary public address. IPv4 embedded in IPv6
/// (`::ffff:a.b.c.d`, `::a.b.c.d`, `64:ff9b::a.b.c.d`) is classified as the IPv4 address.
/// Documentation ranges (192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32) count as public:
/// they are not routed anywhere, so they reach nothing local.
pub fn classify(ip: IpAddr, fake_range: Ipv4Net) -> Option<AddrClass> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4, fake_range),
        IpAddr::V6(v6) => classify_v6(v6, fake_range),
    }
}

fn classify_v4(ip: Ipv4Addr, fake_range: Ipv4Net) -> Option<AddrClass> {
    let class = if in_v4(ip, [0, 0, 0, 0], 8) {
        AddrClass::Unspecified
    } else if ip.is_loopback() {
        AddrClass::Loopback
    } else if ip.is_private() {
        AddrClass::Private
    } else if ip.is_link_local() {
        AddrClass::LinkLocal
    } else if in_v4(ip, [100, 64, 0, 0], 10) {
        AddrClass::SharedCgnat
    } else if ip.is_multicast() {
        AddrClass::Multicast
    } else if fake_range.contains(&ip) || in_v4(ip, [198, 18, 0, 0], 15) {
        AddrClass::FakeRange
    } else if in_v4(ip, [240, 0, 0, 0], 4) || in_v4(ip, [192, 0, 0, 0], 24) {
        // 240/4 includes 255.255.255.255.
        AddrClass::Reserved
    } else {
        return None;
    };
    Some(class)
}

fn classify_v6(ip: Ipv6Addr, fake_range: Ipv4Net) -> Option<AddrClass> {
    let seg = ip.segments();
    // IPv4-mapped ::ffff:0:0/96 and deprecated IPv4-compatible ::/96 (but not :: and ::1).
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4, fake_range);
    }
    if ip.is_unspecified() {
        return Some(AddrClass::Unspecified);
    }
    if ip.is_loopback() {
        return Some(AddrClass::Loopback);
    }
    if seg[..6] == [0; 6] {
        let o = ip.octets();
        return classify_v4(Ipv4Addr::new(o[12], o[13], o[14], o[15]), fake_range)
            .or(Some(AddrClass::Reserved));
    }
    // NAT64 well-known prefix 64:ff9b::/96 carries an IPv4 address.
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let o = ip.octets();
        return classify_v4(Ipv4Addr::new(o[12], o[13], o[14], o[15]), fake_range);
    }
    let class = if seg[0] & 0xfe00 == 0xfc00 || seg[0] & 0xffc0 == 0xfec0 {
        AddrClass::UniqueLocal
    } else if seg[0] & 0xffc0 == 0xfe80 {
        AddrClass::LinkLocal
    } else if seg[0] & 0xff00 == 0xff00 {
        AddrClass::Multicast
    } else if seg[..4] == [0x100, 0, 0, 0] || seg[..3] == [0x64, 0xff9b, 1] {
        AddrClass::Reserved
    } else {
        return None;
    };
    Some(class)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Option<AddrClass> {
        classify(s.parse().unwrap(), "198.18.0.0/15".parse().unwrap())
    }

    #[test]
    fn v4_classes() {
        assert_eq!(c("127.0.0.1"), Some(AddrClass::Loopback));
        assert_eq!(c("127.8.9.10"), Some(AddrClass::Loopback));
        assert_eq!(c("10.0.0.5"), Some(AddrClass::Private));
        assert_eq!(c("172.16.0.1"), Some(AddrClass::Private));
        assert_eq!(c("172.31.255.255"), Some(AddrClass::Private));
        assert_eq!(c("192.168.1.1"), Some(AddrClass::Private));
        assert_eq!(c("169.254.169.254"), Some(AddrClass::LinkLocal));
        assert_eq!(c("100.64.0.1"), Some(AddrClass::SharedCgnat));
        assert_eq!(c("100.127.255.255"), Some(AddrClass::SharedCgnat));
        assert_eq!(c("0.0.0.0"), Some(AddrClass::Unspecified));
        assert_eq!(c("0.1.2.3"), Some(AddrClass::Unspecified));
        assert_eq!(c("224.0.0.1"), Some(AddrClass::Multicast));
        assert_eq!(c("255.255.255.255"), Some(AddrClass::Reserved));
        assert_eq!(c("198.19.1.1"), Some(AddrClass::FakeRange));
        assert_eq!(c("192.0.0.170"), Some(AddrClass::Reserved));
        // Public and documentation addresses pass.
        assert_eq!(c("198.51.100.7"), None);
        assert_eq!(c("93.184.216.34"), None);
        assert_eq!(c("172.32.0.1"), None);
        assert_eq!(c("100.128.0.1"), None);
        assert_eq!(c("1.1.1.1"), None);
    }

    #[test]
    fn configured_fake_range() {
        let range = "10.200.0.0/16".parse().unwrap();
        assert_eq!(
            classify("198.18.0.9".parse().unwrap(), range),
            Some(AddrClass::FakeRange)
        );
        assert_eq!(
            classify("10.200.0.9".parse().unwrap(), range),
            Some(AddrClass::Private)
        );
        let range = "203.0.113.0/24".parse().unwrap();
        assert_eq!(
            classify("203.0.113.9".parse().unwrap(), range),
            Some(AddrClass::FakeRange)
        );
    }

    #[test]
    fn v6_classes() {
        assert_eq!(c("::1"), Some(AddrClass::Loopback));
        assert_eq!(c("::"), Some(AddrClass::Unspecified));
        assert_eq!(c("fd00::1"), Some(AddrClass::UniqueLocal));
        assert_eq!(c("fc12::1"), Some(AddrClass::UniqueLocal));
        assert_eq!(c("fec0::1"), Some(AddrClass::UniqueLocal));
        assert_eq!(c("fe80::1"), Some(AddrClass::LinkLocal));
        assert_eq!(c("febf::1"), Some(AddrClass::LinkLocal));
        assert_eq!(c("ff02::1"), Some(AddrClass::Multicast));
        assert_eq!(c("::ffff:127.0.0.1"), Some(AddrClass::Loopback));
        assert_eq!(c("::ffff:169.254.169.254"), Some(AddrClass::LinkLocal));
        assert_eq!(c("::10.0.0.5"), Some(AddrClass::Private));
        assert_eq!(c("::8.8.8.8"), Some(AddrClass::Reserved));
        assert_eq!(c("64:ff9b::10.0.0.5"), Some(AddrClass::Private));
        assert_eq!(c("64:ff9b:1::1"), Some(AddrClass::Reserved));
        assert_eq!(c("100::1"), Some(AddrClass::Reserved));
        assert_eq!(c("::ffff:8.8.8.8"), None);
        assert_eq!(c("64:ff9b::8.8.8.8"), None);
        assert_eq!(c("2001:db8::1"), None);
        assert_eq!(c("2606:4700::1111"), None);
    }
}
