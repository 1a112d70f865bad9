//! Host-side resolution for a connection the sandbox opened to a fake IP.
//!
//! This is the only place a real lookup happens, and only after policy allowed the connection.
//! The answer is checked against the rebinding/SSRF rule and returned, so the caller connects to
//! exactly the checked addresses (no second lookup).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_events::{Builtin, RuleId};
use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};
use thiserror::Error;

use crate::addr::{AddrClass, classify};
use crate::config::{Checked, HOST_ALIAS};
use crate::name::{self, NameError};

/// How long one UDP query to the upstream waits for its answer.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// How many times one query is sent before giving up.
const UPSTREAM_ATTEMPTS: u32 = 2;
/// Longest CNAME chain followed inside one answer.
const MAX_CNAME_HOPS: usize = 8;
/// Most addresses returned for one name.
const MAX_ADDRS: usize = 32;

/// Why a host-side lookup for a connection was refused. Every variant is a denial the caller
/// reports as an event; [`Refusal::rule`] names the rule.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refusal {
    /// Not a valid host name (or one whose last label is numeric, which system resolvers would
    /// read as an IP address).
    #[error("invalid host name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: NameError,
    },
    /// The name is on the blocklist.
    #[error("{name} is blocked by {rule}")]
    Blocked {
        /// The normalised name.
        name: String,
        /// The matching rule (`builtin:…` or `block:…`).
        rule: RuleId,
    },
    /// `host.cordon.internal` was asked for but policy does not name it in `allow_hosts`.
    #[error("{HOST_ALIAS} is not allowed by policy")]
    HostAliasNotAllowed,
    /// The name does not exist or has no addresses.
    #[error("{0} has no addresses")]
    NotFound(String),
    /// The name resolved to a non-public address and policy does not name the host explicitly
    /// (DNS rebinding / SSRF rule). The whole answer is refused, not just that address.
    #[error("{name} resolved to {addr} ({class}), which only an explicitly allowed host may use")]
    NonPublic {
        /// The normalised name.
        name: String,
        /// The first offending address.
        addr: IpAddr,
        /// Its class.
        class: AddrClass,
    },
    /// The lookup itself failed (timeout, SERVFAIL, I/O error).
    #[error("looking up {name} failed: {reason}")]
    Lookup {
        /// The normalised name.
        name: String,
        /// What went wrong.
        reason: String,
    },
}

impl Refusal {
    /// The rule behind the refusal, for the audit event: the blocklist rule for
    /// [`Refusal::Blocked`], `dns.rebinding:<class>` for [`Refusal::NonPublic`],
    /// `dns.host-alias` for [`Refusal::HostAliasNotAllowed`], `None` for failures that are not
    /// policy decisions.
    pub fn rule(&self) -> Option<RuleId> {
        match self {
            Refusal::Blocked { rule, .. } => Some(rule.clone()),
            Refusal::NonPublic { class, .. } => {
                Some(RuleId::qualified(Builtin::DnsRebinding, class.to_string()))
            }
            Refusal::HostAliasNotAllowed => Some(Builtin::DnsHostAlias.into()),
            _ => None,
        }
    }
}

/// True when `name` is `host.cordon.internal` (any case, optional trailing dot): the one name
/// that stands for the host's loopback. The caller must only let it through on ports a rule
/// allows; [`HostResolver::resolve_for_connect`] additionally requires it in `allow_hosts`.
pub fn is_host_alias(name: &str) -> bool {
    name::normalize(name).is_ok_and(|n| n == HOST_ALIAS)
}

/// The host-side lookup, detached from the fake-IP table: cheap to clone and `Send + Sync`, so
/// the gateway can run [`HostResolver::resolve_for_connect`] (which blocks for up to a few
/// seconds) on a worker thread without holding the DNS table.
#[derive(Debug, Clone)]
pub struct HostResolver {
    cfg: Arc<Checked>,
}

impl HostResolver {
    pub(crate) fn new(cfg: Arc<Checked>) -> Self {
        Self { cfg }
    }

    /// The blocklist rule that blocks `name` (built-in or `[dns] block`): [`crate::blocked`]
    /// against the session's list.
    pub fn blocked(&self, name: &str) -> Option<RuleId> {
        let norm = name::normalize(name).ok()?;
        self.cfg.blocklist.check(&norm)
    }

    /// [`resolve_for_connect`](Self::resolve_for_connect)'s answer when it needs no lookup
    /// (an invalid or blocked name, a `hosts` entry, the host alias); `None` when it must ask a
    /// resolver — then call `resolve_for_connect` where blocking is fine.
    pub fn answer_locally(
        &self,
        name: &str,
        vouched: bool,
    ) -> Option<Result<Vec<IpAddr>, Refusal>> {
        let Ok(norm) = name::normalize(name) else {
            return Some(self.resolve_checked(name, vouched));
        };
        let local = self.cfg.blocklist.check(&norm).is_some()
            || self.cfg.hosts.contains_key(&norm)
            || norm == HOST_ALIAS;
        local.then(|| self.resolve_checked(&norm, vouched))
    }

    /// Resolves `name` on the host for a connection policy has already allowed, and applies the
    /// rebinding/SSRF rule. In order:
    /// 1. the name is normalised and checked against the blocklist (blocked wins over `hosts`);
    /// 2. a `hosts` entry answers at once, whatever the address;
    /// 3. [`HOST_ALIAS`] answers `127.0.0.1, ::1` if it is in `allow_hosts`, else is refused;
    /// 4. otherwise the upstream (if configured: A and AAAA over UDP) or the system resolver is
    ///    asked; if any address is non-public (see [`AddrClass`]) and the name is not in
    ///    `allow_hosts`, the whole answer is refused.
    ///
    /// Returns the checked addresses, de-duplicated, IPv4 first; connect to these and only these.
    /// Blocks the calling thread for the lookup (at most about 8 s with an upstream).
    pub fn resolve_for_connect(&self, name: &str) -> Result<Vec<IpAddr>, Refusal> {
        self.resolve_checked(name, true)
    }

    /// [`resolve_for_connect`](Self::resolve_for_connect) for a connection no rule allows (a
    /// learning run lets it through): `allow_hosts` vouches for nothing, so the host alias is
    /// refused and so is a name that resolves to a private address. `hosts` entries still
    /// answer as written.
    pub fn resolve_unvouched(&self, name: &str) -> Result<Vec<IpAddr>, Refusal> {
        self.resolve_checked(name, false)
    }

    fn resolve_checked(&self, name: &str, vouched: bool) -> Result<Vec<IpAddr>, Refusal> {
        let norm = name::normalize(name).map_err(|reason| Refusal::InvalidName {
            name: name.to_string(),
            reason,
        })?;
        if let Some(rule) = self.cfg.blocklist.check(&norm) {
            return Err(Refusal::Blocked { name: norm, rule });
        }
        if let Some(addr) = self.cfg.hosts.get(&norm) {
            return Ok(vec![*addr]);
        }
        let explicit = vouched && self.cfg.allow_hosts.contains(&norm);
        if norm == HOST_ALIAS {
            return if explicit {
                Ok(vec![
                    IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V6(Ipv6Addr::LOCALHOST),
                ])
            } else {
                Err(Refusal::HostAliasNotAllowed)
            };
        }
        // A numeric last label would be read as an IP address by getaddrinfo ("2130706433",
        // "0x7f.1"); no real top-level domain starts with a digit.
        let last = norm.rsplit('.').next().unwrap_or_default();
        if !last.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Err(Refusal::InvalidName {
                name: norm,
                reason: NameError::BadCharacter,
            });
        }

        let addrs = match self.cfg.upstream {
            Some(upstream) => lookup_upstream(upstream, &norm)?,
            None => lookup_system(&norm)?,
        };
        if addrs.is_empty() {
            return Err(Refusal::NotFound(norm));
        }
        if !explicit {
            for addr in &addrs {
                if let Some(class) = classify(*addr, self.cfg.fake_range) {
                    return Err(Refusal::NonPublic {
                        name: norm,
                        addr: *addr,
                        class,
                    });
                }
            }
        }
        Ok(addrs)
    }
}

/// Orders and de-duplicates: IPv4 first, then IPv6, each in the order received; at most
/// [`MAX_ADDRS`].
fn tidy(addrs: impl IntoIterator<Item = IpAddr>) -> Vec<IpAddr> {
    let mut seen = BTreeSet::new();
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for a in addrs {
        if seen.insert(a) {
            if a.is_ipv4() { &mut v4 } else { &mut v6 }.push(a);
        }
    }
    v4.extend(v6);
    v4.truncate(MAX_ADDRS);
    v4
}

fn lookup_system(name: &str) -> Result<Vec<IpAddr>, Refusal> {
    match (name, 0u16).to_socket_addrs() {
        Ok(iter) => Ok(tidy(iter.map(|sa| sa.ip()))),
        Err(e) => Err(Refusal::Lookup {
            name: name.to_string(),
            reason: e.to_string(),
        }),
    }
}

fn lookup_upstream(upstream: SocketAddr, name: &str) -> Result<Vec<IpAddr>, Refusal> {
    let fail = |reason: String| Refusal::Lookup {
        name: name.to_string(),
        reason,
    };
    let qname = Name::from_ascii(format!("{name}.")).map_err(|e| fail(e.to_string()))?;
    let v4 = match query_upstream(upstream, &qname, RecordType::A).map_err(&fail)? {
        Some(addrs) => addrs,
        None => return Err(Refusal::NotFound(name.to_string())),
    };
    let v6 = query_upstream(upstream, &qname, RecordType::AAAA)
        .map_err(&fail)?
        .unwrap_or_default();
    Ok(tidy(v4.into_iter().chain(v6)))
}

/// One question to the upstream over UDP. `Ok(None)` is NXDOMAIN.
fn query_upstream(
    upstream: SocketAddr,
    qname: &Name,
    rtype: RecordType,
) -> Result<Option<Vec<IpAddr>>, String> {
    let mut msg = Message::query();
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(qname.clone(), rtype));
    let id = msg.metadata.id;
    let bytes = msg.to_vec().map_err(|e| e.to_string())?;

    let bind: SocketAddr = if upstream.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
    // connect() makes the kernel drop datagrams from anyone but the upstream.
    sock.connect(upstream).map_err(|e| e.to_string())?;

    let mut buf = vec![0u8; 4096];
    for _ in 0..UPSTREAM_ATTEMPTS {
        sock.send(&bytes).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + UPSTREAM_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            sock.set_read_timeout(Some(left))
                .map_err(|e| e.to_string())?;
            let n = match sock.recv(&mut buf) {
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break;
                }
                // ICMP port unreachable and the like: the upstream is not there.
                Err(e) => return Err(e.to_string()),
            };
            let Some(reply) = buf.get(..n).and_then(|b| Message::from_vec(b).ok()) else {
                continue;
            };
            if reply.metadata.id != id
                || reply.metadata.message_type != MessageType::Response
                || reply.queries.len() != 1
                || reply.queries[0].query_type() != rtype
                || !same_name(reply.queries[0].name(), qname)
            {
                continue; // not the answer to our question
            }
            return match reply.metadata.response_code {
                ResponseCode::NoError => Ok(Some(extract(&reply, qname, rtype))),
                ResponseCode::NXDomain => Ok(None),
                rc => Err(format!("upstream answered {rc}")),
            };
        }
    }
    Err(format!("no answer from {upstream}"))
}

fn norm_wire(name: &Name) -> Option<String> {
    name::from_labels(name.iter()).ok()
}

fn same_name(a: &Name, b: &Name) -> bool {
    matches!((norm_wire(a), norm_wire(b)), (Some(x), Some(y)) if x == y)
}

/// The addresses of type `rtype` for `qname` in the answer section, following CNAMEs.
fn extract(reply: &Message, qname: &Name, rtype: RecordType) -> Vec<IpAddr> {
    let Some(start) = norm_wire(qname) else {
        return Vec::new();
    };
    let mut names = BTreeSet::from([start]);
    for _ in 0..MAX_CNAME_HOPS {
        let mut grew = false;
        for rec in &reply.answers {
            if rec.dns_class != DNSClass::IN {
                continue;
            }
            if let RData::CNAME(target) = &rec.data {
                let owner = norm_wire(&rec.name);
                if owner.is_some_and(|o| names.contains(&o))
                    && let Some(t) = norm_wire(&target.0)
                {
                    grew |= names.insert(t);
                }
            }
        }
        if !grew {
            break;
        }
    }
    reply
        .answers
        .iter()
        .filter(|r| r.dns_class == DNSClass::IN)
        .filter(|r| norm_wire(&r.name).is_some_and(|n| names.contains(&n)))
        .filter_map(|r| match (&r.data, rtype) {
            (RData::A(a), RecordType::A) => Some(IpAddr::V4(a.0)),
            (RData::AAAA(a), RecordType::AAAA) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .take(MAX_ADDRS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::OpCode;
    use hickory_proto::rr::Record;
    use hickory_proto::rr::rdata::{A, CNAME};

    #[test]
    fn host_alias_recognised() {
        assert!(is_host_alias("host.cordon.internal"));
        assert!(is_host_alias("HOST.Cordon.Internal."));
        assert!(!is_host_alias("x.host.cordon.internal"));
        assert!(!is_host_alias("host.cordon.internal.evil.test"));
        assert!(!is_host_alias(""));
    }

    #[test]
    fn tidy_orders_and_dedups() {
        let v: Vec<IpAddr> = ["::1", "1.2.3.4", "1.2.3.4", "5.6.7.8", "::1"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let t = tidy(v);
        assert_eq!(t.len(), 3);
        assert!(t[0].is_ipv4() && t[1].is_ipv4() && t[2].is_ipv6());
    }

    #[test]
    fn cname_chain_followed() {
        let n = |s: &str| Name::from_ascii(s).unwrap();
        let mut m = Message::response(1, OpCode::Query);
        m.add_answer(Record::from_rdata(
            n("WWW.a.test."),
            60,
            RData::CNAME(CNAME(n("b.test."))),
        ));
        m.add_answer(Record::from_rdata(
            n("b.test."),
            60,
            RData::A(A::new(198, 51, 100, 1)),
        ));
        // Unrelated owner: ignored.
        m.add_answer(Record::from_rdata(
            n("other.test."),
            60,
            RData::A(A::new(10, 0, 0, 1)),
        ));
        let got = extract(&m, &n("www.a.test."), RecordType::A);
        assert_eq!(got, vec![IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1))]);
        // A CNAME loop terminates.
        let mut m = Message::response(1, OpCode::Query);
        m.add_answer(Record::from_rdata(
            n("x.test."),
            60,
            RData::CNAME(CNAME(n("y.test."))),
        ));
        m.add_answer(Record::from_rdata(
            n("y.test."),
            60,
            RData::CNAME(CNAME(n("x.test."))),
        ));
        assert!(extract(&m, &n("x.test."), RecordType::A).is_empty());
    }
}
