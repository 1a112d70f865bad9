//! The flow decision: may the sandbox open TCP to this destination and port?

use std::net::IpAddr;

use cordon_events::{Builtin, RuleId, Verdict};
use cordon_policy::NetworkPlan;
use ipnet::IpNet;

use crate::{AddrClass, HOST_ALIAS};

/// Where a flow is going, as the sandbox named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Dest {
    /// A name: from a fake address the resolver handed out, or from a proxy request.
    Name(String),
    /// A raw address that did not come from the resolver.
    Ip(IpAddr),
}

impl Dest {
    pub(crate) fn host(&self) -> String {
        match self {
            Dest::Name(n) => n.clone(),
            Dest::Ip(ip) => ip.to_string(),
        }
    }
}

/// The decision, with the rule that made it (every event names one).
pub(crate) type FlowDecision = Verdict;

/// Ports refused unless a rule names them, with what usually runs there, for a denial that
/// says why rather than only "no rule".
const RISKY_PORTS: &[(u16, &str)] = &[
    (20, "FTP data"),
    (21, "FTP"),
    (23, "Telnet"),
    (25, "SMTP"),
    (465, "SMTP"),
    (587, "SMTP"),
    (2525, "SMTP"),
    (194, "IRC"),
    (6660, "IRC"),
    (6665, "IRC"),
    (6666, "IRC"),
    (6667, "IRC"),
    (6668, "IRC"),
    (6669, "IRC"),
    (6697, "IRC"),
    (139, "SMB"),
    (445, "SMB"),
    (3389, "RDP"),
    (5900, "VNC"),
    (5901, "VNC"),
    (9001, "Tor"),
    (9030, "Tor"),
    (9050, "Tor"),
    (9150, "Tor"),
    (1080, "SOCKS"),
    (1194, "OpenVPN"),
    (1723, "PPTP VPN"),
    (500, "IPsec VPN"),
    (4500, "IPsec VPN"),
    (51820, "WireGuard VPN"),
];

/// The protocol a port usually carries, for events (a guess, never a decision).
pub(crate) fn proto_guess(port: u16) -> &'static str {
    match port {
        80 | 8080 | 8000 => "http",
        443 | 8443 => "tls",
        22 => "ssh",
        53 => "dns",
        _ => RISKY_PORTS
            .iter()
            .find(|(p, _)| *p == port)
            .map_or("tcp", |(_, name)| name),
    }
}

/// Whether a flow to `port` may be TLS, so that a denial is worth accepting to see: the
/// ports [`proto_guess`] calls TLS. The first bytes decide ([`is_client_hello`]); every other
/// port is refused at its SYN.
pub(crate) fn maybe_tls(port: u16) -> bool {
    proto_guess(port) == "tls"
}

/// Whether `first` (a flow's first bytes) opens a TLS ClientHello: a handshake record
/// (0x16), a TLS 1.x record version, a handshake of type 1.
pub(crate) fn is_client_hello(first: &[u8]) -> bool {
    matches!(first, [0x16, 0x03, 0x00..=0x04, _, _, 0x01, ..])
}

/// How many bytes [`is_client_hello`] needs.
pub(crate) const HELLO_PEEK: usize = 6;

/// The policy lines that would allow a flow `decision` denied to `host:port`: a
/// `[[network.allow]]` for a name, an `allow_ips` entry for a raw address. `None` where no
/// line re-opens it (the blocklist, the rebinding rule, an unknown cordon address).
pub(crate) fn allow_with(decision: &FlowDecision, dest: &Dest, port: u16) -> Option<String> {
    match (decision.rule.as_builtin(), dest) {
        (Some(b), Dest::Name(name)) if b.is_no_rule() => Some(format!(
            "[[network.allow]]\nhost = {}\nports = [{port}]",
            cordon_policy::explain::toml_string(name)
        )),
        (Some(Builtin::NetworkRawIp), Dest::Ip(ip))
            if crate::classify(*ip, crate::default_fake_range()).is_none() =>
        {
            let net = match ip {
                IpAddr::V4(_) => format!("{ip}/32"),
                IpAddr::V6(_) => format!("{ip}/128"),
            };
            Some(format!(
                "[network]\nallow_ips = [{}]",
                cordon_policy::explain::toml_string(&net)
            ))
        }
        _ => None,
    }
}

/// Whether a refusal by `rule` is one a learning run lets through: only the lack of a rule
/// (a name and port no rule names). The blocklist, raw addresses, the rebinding rule and an
/// unwritable audit log still refuse.
pub fn learnable(rule: &RuleId) -> bool {
    rule.is_no_rule()
}

/// The rule of a flow refused because the rules for its name and port name programs and
/// its process could not be found: the gateway looks it up and decides again.
pub(crate) const OWNER_UNKNOWN: Builtin = Builtin::NetworkOwnerUnknown;

/// Decides one TCP flow. Names: blocklist first, then the first `[[network.allow]]` rule that
/// matches name and port (and `owner`, when it names programs). Raw addresses: `allow_ips`
/// only. `owner`: the process behind the flow, `None` when not known (only rules for any
/// process then let it through; see [`OWNER_UNKNOWN`]).
pub(crate) fn decide(
    plan: &NetworkPlan,
    allow_ips: &[IpNet],
    blocked: &dyn Fn(&str) -> Option<RuleId>,
    dest: &Dest,
    port: u16,
    owner: Option<&cordon_policy::Owner>,
) -> FlowDecision {
    let deny = |rule: RuleId, reason: String| Verdict::deny(rule, reason);
    match dest {
        Dest::Name(name) => {
            if let Some(rule) = blocked(name) {
                let reason = format!("{name} is on the blocklist ({rule})");
                return deny(rule, reason);
            }
            if let Some(r) = plan.allowing_for(name, port, owner) {
                let reason = match (&r.programs.any(), owner) {
                    (false, Some(o)) => format!("{name}:{port} allowed for {}", o.describe()),
                    _ => format!("{name}:{port} allowed"),
                };
                return FlowDecision {
                    allow: true,
                    rule: r.label(),
                    reason,
                };
            }
            let keyed = plan.only_for(name, port);
            if !keyed.is_empty() {
                let whom: Vec<String> = keyed.iter().map(|r| r.programs.describe()).collect();
                let whom = whom.join("; ");
                return match owner {
                    Some(o) => deny(
                        Builtin::NetworkProgram.into(),
                        format!(
                            "{name}:{port} is allowed only for {whom}; this connection came from {}",
                            o.describe()
                        ),
                    ),
                    None => deny(
                        OWNER_UNKNOWN.into(),
                        format!(
                            "{name}:{port} is allowed only for {whom}, and the process that opened this connection could not be found (it exited, or the socket was handed on): refused"
                        ),
                    ),
                };
            }
            let why = match RISKY_PORTS.iter().find(|(p, _)| *p == port) {
                Some((_, what)) => format!(
                    "{what} (port {port}) is blocked by default; no [[network.allow]] rule names {name} with port {port}"
                ),
                None if name == HOST_ALIAS => format!(
                    "the host's loopback is reachable only on ports a [[network.allow]] rule with host = \"{HOST_ALIAS}\" names; none names {port}"
                ),
                None => format!("no [[network.allow]] rule names {name} with port {port}"),
            };
            deny(Builtin::NetworkDefaultDeny.into(), why)
        }
        Dest::Ip(ip) => {
            // ::ffff:a.b.c.d is a.b.c.d.
            let ip = match ip {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(*ip, IpAddr::V4),
                v4 => *v4,
            };
            let fake = crate::default_fake_range();
            let class = crate::classify(ip, fake);
            if let Some(c @ (AddrClass::Loopback | AddrClass::Unspecified | AddrClass::Multicast)) =
                class
            {
                return deny(
                    Builtin::NetworkRawIp.into(),
                    format!(
                        "{ip} is {c}: the host's own services are reachable only as {HOST_ALIAS}, on ports a rule names"
                    ),
                );
            }
            // A private or link-local address only through a range that is itself wholly
            // non-public: `0.0.0.0/0` opens the internet, not the LAN or cloud metadata.
            let opens = |n: &IpNet| {
                n.contains(&ip)
                    && match class {
                        None => true,
                        Some(c) => {
                            crate::classify(n.network(), fake) == Some(c)
                                && crate::classify(n.broadcast(), fake) == Some(c)
                        }
                    }
            };
            match allow_ips.iter().find(|n| opens(n)) {
                Some(net) => FlowDecision {
                    allow: true,
                    rule: RuleId::AllowIps(net.to_string()),
                    reason: format!("{ip}:{port} is in allow_ips"),
                },
                None if class.is_some() && allow_ips.iter().any(|n| n.contains(&ip)) => deny(
                    Builtin::NetworkRawIp.into(),
                    format!(
                        "{ip} is a non-public address; only an allow_ips range that is itself non-public (e.g. \"10.1.2.0/24\") opens it"
                    ),
                ),
                None => deny(
                    Builtin::NetworkRawIp.into(),
                    format!(
                        "{ip} did not come from cordon's DNS; connections to raw addresses are refused unless [network] allow_ips names them"
                    ),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_policy::{Bare, DnsBlock, HostPattern, HostRule};

    fn host(h: &str) -> HostPattern {
        HostPattern::name(h, Bare::Exact).unwrap()
    }

    fn plan() -> NetworkPlan {
        NetworkPlan {
            allow: vec![
                HostRule {
                    host: host("github.com"),
                    ports: vec![22, 443],
                    origin: "test".into(),
                    expires: None,
                    programs: Default::default(),
                },
                HostRule {
                    host: host("*.npmjs.org"),
                    ports: vec![443],
                    origin: "test".into(),
                    expires: None,
                    programs: Default::default(),
                },
                HostRule {
                    host: host(HOST_ALIAS),
                    ports: vec![11434],
                    origin: "test".into(),
                    expires: None,
                    programs: Default::default(),
                },
            ],
            ..NetworkPlan::default()
        }
    }

    /// The built-in blocklist only.
    fn builtin(n: &str) -> Option<RuleId> {
        crate::blocked(n, &cordon_policy::built_in_dns_block())
    }

    fn name(n: &str) -> Dest {
        Dest::Name(n.into())
    }

    #[test]
    fn names_need_a_rule_naming_host_and_port() {
        let (p, ips) = (plan(), Vec::new());
        assert!(decide(&p, &ips, &builtin, &name("github.com"), 22, None).allow);
        assert!(decide(&p, &ips, &builtin, &name("registry.npmjs.org"), 443, None).allow);
        assert!(!decide(&p, &ips, &builtin, &name("npmjs.org"), 443, None).allow);
        assert!(!decide(&p, &ips, &builtin, &name("github.com"), 80, None).allow);
        let v = decide(&p, &ips, &builtin, &name("evil.example"), 443, None);
        assert!(!v.allow);
        assert_eq!(v.rule, "network.default-deny");
        let v = decide(&p, &ips, &builtin, &name("github.com"), 25, None);
        assert!(v.reason.contains("SMTP"), "{v:?}");
        let v = decide(&p, &ips, &builtin, &name(HOST_ALIAS), 5432, None);
        assert!(v.reason.contains("host's loopback"), "{v:?}");
        assert!(decide(&p, &ips, &builtin, &name(HOST_ALIAS), 11434, None).allow);
    }

    #[test]
    fn blocklist_beats_rules() {
        let mut p = plan();
        p.allow.push(HostRule {
            host: host("webhook.site"),
            ports: vec![443],
            origin: "test".into(),
            expires: None,
            programs: Default::default(),
        });
        let v = decide(&p, &[], &builtin, &name("webhook.site"), 443, None);
        assert!(!v.allow && v.reason.contains("blocklist"), "{v:?}");
        let v = decide(
            &p,
            &[],
            &|n: &str| {
                let block = [DnsBlock {
                    pattern: HostPattern::name("github.com", Bare::AtOrBelow).unwrap(),
                    origin: "test".into(),
                }];
                crate::blocked(n, &block)
            },
            &name("github.com"),
            443,
            None,
        );
        assert!(!v.allow, "{v:?}");
    }

    #[test]
    fn raw_addresses_only_through_allow_ips() {
        let ips: Vec<IpNet> = vec!["10.1.2.0/24".parse().unwrap()];
        let p = plan();
        assert!(
            decide(
                &p,
                &ips,
                &builtin,
                &Dest::Ip("10.1.2.7".parse().unwrap()),
                5432,
                None
            )
            .allow
        );
        let v = decide(
            &p,
            &ips,
            &builtin,
            &Dest::Ip("10.1.3.7".parse().unwrap()),
            5432,
            None,
        );
        assert_eq!(
            (v.allow, v.rule.to_string().as_str()),
            (false, "network.raw-ip")
        );
        assert!(
            !decide(
                &p,
                &[],
                &builtin,
                &Dest::Ip("140.82.112.3".parse().unwrap()),
                443,
                None
            )
            .allow
        );
    }

    #[test]
    fn a_wide_range_never_opens_loopback_private_or_metadata() {
        let p = plan();
        let all: Vec<IpNet> = vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
        for ip in [
            "127.0.0.1",
            "0.0.0.0",
            "::ffff:127.0.0.1",
            "::1",
            "169.254.169.254",
            "10.0.0.5",
            "192.168.1.1",
            "100.64.0.1",
            "fd00::1",
        ] {
            let v = decide(&p, &all, &builtin, &Dest::Ip(ip.parse().unwrap()), 80, None);
            assert!(!v.allow, "{ip}: {v:?}");
        }
        assert!(
            decide(
                &p,
                &all,
                &builtin,
                &Dest::Ip("140.82.112.3".parse().unwrap()),
                443,
                None
            )
            .allow
        );
        // Loopback is never a raw-address destination, whatever the range.
        let lo: Vec<IpNet> = vec!["127.0.0.0/8".parse().unwrap()];
        assert!(
            !decide(
                &p,
                &lo,
                &builtin,
                &Dest::Ip("127.0.0.1".parse().unwrap()),
                80,
                None
            )
            .allow
        );
        // A private range named as such opens it.
        let lan: Vec<IpNet> = vec!["192.168.1.0/24".parse().unwrap()];
        assert!(
            decide(
                &p,
                &lan,
                &builtin,
                &Dest::Ip("192.168.1.1".parse().unwrap()),
                80,
                None
            )
            .allow
        );
    }

    #[test]
    fn a_client_hello_is_told_from_other_first_bytes() {
        assert!(is_client_hello(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00]));
        assert!(!is_client_hello(b"GET / HTTP/1.1\r\n"));
        assert!(!is_client_hello(b"SSH-2.0-OpenSSH"));
        assert!(!is_client_hello(&[0x16, 0x03, 0x01]));
        assert!(maybe_tls(443) && maybe_tls(8443) && !maybe_tls(80) && !maybe_tls(22));
    }

    #[test]
    fn a_denial_says_which_lines_would_allow_it() {
        let d = |rule: &str| FlowDecision {
            allow: false,
            rule: rule.into(),
            reason: String::new(),
        };
        assert_eq!(
            allow_with(&d("network.default-deny"), &name("x.example"), 8443).as_deref(),
            Some("[[network.allow]]\nhost = \"x.example\"\nports = [8443]")
        );
        assert_eq!(
            allow_with(
                &d("network.raw-ip"),
                &Dest::Ip("140.82.112.3".parse().unwrap()),
                443
            )
            .as_deref(),
            Some("[network]\nallow_ips = [\"140.82.112.3/32\"]")
        );
        // Loopback and the blocklist are not re-opened by a line.
        assert!(
            allow_with(
                &d("network.raw-ip"),
                &Dest::Ip("127.0.0.1".parse().unwrap()),
                443
            )
            .is_none()
        );
        assert!(allow_with(&d("webhook.site"), &name("webhook.site"), 443).is_none());
    }

    #[test]
    fn protocol_guesses() {
        assert_eq!(proto_guess(443), "tls");
        assert_eq!(proto_guess(6667), "IRC");
        assert_eq!(proto_guess(12345), "tcp");
    }
}
