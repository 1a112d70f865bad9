//! [`NetConfig`]: what the name side needs from policy, and its validation.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use ipnet::Ipv4Net;
use thiserror::Error;

use crate::blocklist::Blocklist;
use crate::fakeip;
use crate::name::{self, NameError};

/// The one name that maps to the host's loopback (see [`crate::is_host_alias`]).
pub const HOST_ALIAS: &str = "host.cordon.internal";

/// The default fake-IP range: 198.18.0.0/15, reserved for benchmarking (RFC 2544), so it never
/// collides with a real destination.
pub fn default_fake_range() -> Ipv4Net {
    Ipv4Net::new(Ipv4Addr::new(198, 18, 0, 0), 15).unwrap_or_default()
}

/// The name side's configuration, filled by the caller from the policy's `[dns]` section and
/// network rules. Names are compared case-insensitively and without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetConfig {
    /// The blocklist (`[dns] block`, built-in entries first): a bare name blocks it and
    /// everything below it, `*.example.com` only what is below it.
    pub block: Vec<cordon_policy::DnsBlock>,
    /// Static answers for host-side connects (`[dns] hosts`): bypass lookup entirely and may be
    /// private or loopback, since the user named them.
    pub hosts: BTreeMap<String, IpAddr>,
    /// Resolver the host side asks (`[dns] upstream`); `None` uses the system resolver.
    /// Never contacted while answering the sandbox's queries.
    pub upstream: Option<SocketAddr>,
    /// Exact host names that policy allows explicitly; only these (and `hosts`) may resolve to
    /// non-public addresses. Wildcard patterns are rejected: a wildcard never vouches for a
    /// private answer. Put [`HOST_ALIAS`] here to let the sandbox reach the host's loopback.
    pub allow_hosts: Vec<String>,
    /// Range the synthetic addresses come from; default [`default_fake_range`]. Must be a /30 or
    /// larger and must not touch 0/8, loopback, multicast or 240/4.
    pub fake_range: Ipv4Net,
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            block: cordon_policy::built_in_dns_block(),
            hosts: BTreeMap::new(),
            upstream: None,
            allow_hosts: Vec::new(),
            fake_range: default_fake_range(),
        }
    }
}

impl NetConfig {
    /// The address left for the gateway itself in the fake range (its first host address, e.g.
    /// 198.18.0.1): a good resolver address for the sandbox's `resolv.conf`. Never handed out
    /// as a fake answer.
    pub fn gateway_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.fake_range.network()).wrapping_add(1))
    }
}

/// A configuration the name side cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NetError {
    /// A `hosts` key or `allow_hosts` entry is not a valid host name.
    #[error("invalid host name {name:?}: {reason}")]
    BadHostName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: NameError,
    },
    /// An `allow_hosts` entry is a wildcard pattern.
    #[error(
        "allow_hosts entry {0:?} is a pattern; only exact host names may vouch for private addresses"
    )]
    WildcardAllowHost(String),
    /// A `hosts` address cannot be connected to (unspecified or multicast).
    #[error("static address {addr} for {name:?} cannot be connected to")]
    BadHostAddr {
        /// The name.
        name: String,
        /// The address.
        addr: IpAddr,
    },
    /// The same name appears twice in `hosts` once normalised.
    #[error("host name {0:?} appears more than once in hosts")]
    DuplicateHost(String),
    /// The fake range is smaller than a /30 or overlaps addresses it must not.
    #[error("fake-IP range {range} is unusable: {reason}")]
    BadFakeRange {
        /// The range.
        range: Ipv4Net,
        /// Why.
        reason: &'static str,
    },
}

/// A validated configuration, normalised once.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    pub(crate) blocklist: Blocklist,
    pub(crate) hosts: BTreeMap<String, IpAddr>,
    pub(crate) allow_hosts: BTreeSet<String>,
    pub(crate) upstream: Option<SocketAddr>,
    pub(crate) fake_range: Ipv4Net,
}

fn overlaps(a: Ipv4Net, b: Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

pub(crate) fn check(cfg: &NetConfig) -> Result<Checked, NetError> {
    let blocklist = Blocklist::new(&cfg.block);

    let mut hosts = BTreeMap::new();
    for (raw, addr) in &cfg.hosts {
        let name = name::normalize(raw).map_err(|reason| NetError::BadHostName {
            name: raw.clone(),
            reason,
        })?;
        if addr.is_unspecified() || addr.is_multicast() {
            return Err(NetError::BadHostAddr {
                name: raw.clone(),
                addr: *addr,
            });
        }
        if hosts.insert(name, *addr).is_some() {
            return Err(NetError::DuplicateHost(raw.clone()));
        }
    }

    let mut allow_hosts = BTreeSet::new();
    for raw in &cfg.allow_hosts {
        if raw.contains('*') {
            return Err(NetError::WildcardAllowHost(raw.clone()));
        }
        let name = name::normalize(raw).map_err(|reason| NetError::BadHostName {
            name: raw.clone(),
            reason,
        })?;
        allow_hosts.insert(name);
    }

    let range = cfg.fake_range.trunc();
    let bad = |reason| NetError::BadFakeRange { range, reason };
    if fakeip::usable(range).is_none() {
        return Err(bad("it must be a /30 or larger"));
    }
    let forbidden = [
        ([0, 0, 0, 0], 8),
        ([127, 0, 0, 0], 8),
        ([224, 0, 0, 0], 4),
        ([240, 0, 0, 0], 4),
    ];
    for (net, prefix) in forbidden {
        let touches = Ipv4Net::new(Ipv4Addr::from(net), prefix).is_ok_and(|n| overlaps(range, n));
        if touches {
            return Err(bad("it overlaps 0/8, loopback, multicast or 240/4"));
        }
    }

    Ok(Checked {
        blocklist,
        hosts,
        allow_hosts,
        upstream: cfg.upstream,
        fake_range: range,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        let cfg = NetConfig::default();
        assert_eq!(cfg.fake_range.to_string(), "198.18.0.0/15");
        assert_eq!(cfg.gateway_ip(), Ipv4Addr::new(198, 18, 0, 1));
        check(&cfg).unwrap();
    }

    #[test]
    fn rejects_bad_configs() {
        let with = |f: &dyn Fn(&mut NetConfig)| {
            let mut c = NetConfig::default();
            f(&mut c);
            check(&c).unwrap_err()
        };
        assert!(matches!(
            with(&|c| c.allow_hosts.push("*.github.com".into())),
            NetError::WildcardAllowHost(_)
        ));
        assert!(matches!(
            with(&|c| c.allow_hosts.push("bad name".into())),
            NetError::BadHostName { .. }
        ));
        assert!(matches!(
            with(&|c| {
                c.hosts.insert("a.test".into(), "0.0.0.0".parse().unwrap());
            }),
            NetError::BadHostAddr { .. }
        ));
        assert!(matches!(
            with(&|c| {
                c.hosts.insert("A.test".into(), "10.0.0.1".parse().unwrap());
                c.hosts
                    .insert("a.test.".into(), "10.0.0.2".parse().unwrap());
            }),
            NetError::DuplicateHost(_)
        ));
        for range in ["10.0.0.0/31", "127.0.0.0/16", "0.0.0.0/0", "240.0.0.0/8"] {
            assert!(
                matches!(
                    with(&|c| c.fake_range = range.parse().unwrap()),
                    NetError::BadFakeRange { .. }
                ),
                "{range}"
            );
        }
    }

    #[test]
    fn normalises() {
        let mut c = NetConfig::default();
        c.hosts
            .insert("API.Example.Test.".into(), "127.0.0.1".parse().unwrap());
        c.allow_hosts.push("Internal.Test".into());
        let k = check(&c).unwrap();
        assert!(k.hosts.contains_key("api.example.test"));
        assert!(k.allow_hosts.contains("internal.test"));
    }
}
