//! The flow decision: may the sandbox open TCP to this destination and port?

use std::net::IpAddr;

use cordon_policy::NetworkPlan;
use ipnet::IpNet;

use crate::{HOST_ALIAS, blocked};

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub allow: bool,
    pub rule: String,
    pub reason: String,
}

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

/// Decides one TCP flow. Names: blocklist first, then the first `[[network.allow]]` rule that
/// matches name and port. Raw addresses: `allow_ips` only.
pub(crate) fn decide(
    plan: &NetworkPlan,
    allow_ips: &[IpNet],
    block: &[String],
    dest: &Dest,
    port: u16,
) -> Verdict {
    let deny = |rule: String, reason: String| Verdict {
        allow: false,
        rule,
        reason,
    };
    match dest {
        Dest::Name(name) => {
            if let Some(rule) = blocked(name, block) {
                return deny(rule.clone(), format!("{name} is on the blocklist ({rule})"));
            }
            if let Some(r) = plan.allowing(name, port) {
                return Verdict {
                    allow: true,
                    rule: r.label(),
                    reason: format!("{name}:{port} allowed"),
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
            deny("network.default-deny".into(), why)
        }
        Dest::Ip(ip) => match allow_ips.iter().find(|n| n.contains(ip)) {
            Some(net) => Verdict {
                allow: true,
                rule: format!("network.allow_ips {net}"),
                reason: format!("{ip}:{port} is in allow_ips"),
            },
            None => deny(
                "network.raw-ip".into(),
                format!(
                    "{ip} did not come from cordon's DNS; connections to raw addresses are refused unless [network] allow_ips names them"
                ),
            ),
        },
    }
}
