//! The sandbox's resolver: answers every query locally with fake IPs, never asking upstream.
//!
//! The answer for each case is documented on [`crate::Resolver::handle_query`]. Opcode and
//! question count are checked on the raw header before hickory decodes anything; error replies
//! before the question is read are a bare 12-byte header (ID, opcode and RD echoed).

use std::net::Ipv4Addr;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use thiserror::Error;

use crate::config::{Checked, HOST_ALIAS};
use crate::fakeip::FakeIpTable;
use crate::name::{self, NameError};

/// `cordon.internal` and every name below it.
static RESERVED: std::sync::LazyLock<cordon_policy::HostPattern> =
    std::sync::LazyLock::new(|| cordon_policy::HostPattern::AtOrBelow(RESERVED_DOMAIN.into()));

/// TTL of fake answers, in seconds. Short so that a recycled address (see
/// [`crate::Resolver`]) is not cached by clients for long.
pub const FAKE_TTL: u32 = 1;
/// EDNS payload size advertised in replies to EDNS queries.
const EDNS_PAYLOAD: u16 = 1232;
/// Names under this domain other than [`HOST_ALIAS`] do not exist.
const RESERVED_DOMAIN: &str = "cordon.internal";

/// The rule [`DnsDecision::rule`] names for a single-label name's NXDOMAIN.
pub const SINGLE_LABEL_RULE: &str = "single-label";

/// A single-label name (`cordon`, `db`, `localhost`) that policy does not name: no public
/// name has one label, so a synthetic answer would only send the sandbox's own hostname or a
/// LAN short name out to be looked up on the host. NXDOMAIN, as a resolver with no search
/// domain gives. One the user put in `[dns] hosts` or an exact allow rule still resolves.
fn single_label(cfg: &Checked, n: &str) -> bool {
    !n.contains('.') && !cfg.hosts.contains_key(n) && !cfg.allow_hosts.contains(n)
}

/// What the resolver did with one packet: the caller turns this into an audit event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsDecision {
    /// The question's name, normalised (lower case, no trailing dot); `None` when the packet
    /// had no readable question or the name was invalid (then see the [`Reject`]).
    pub name: Option<String>,
    /// The question's type (`A`, `AAAA`, `HTTPS`, … or `TYPE<n>` per RFC 3597); `None` when
    /// the packet had no readable question.
    pub qtype: Option<String>,
    /// The answer given.
    pub answer: DnsAnswer,
    /// The rule that decided: the blocklist rule (`builtin:<domain>`, `block:<pattern>`),
    /// `reserved:cordon.internal` or `single-label` for [`DnsAnswer::NxDomain`];
    /// `None` otherwise.
    pub rule: Option<String>,
}

/// The answer given to one query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnsAnswer {
    /// NOERROR with one A record: this synthetic address.
    Answered(Ipv4Addr),
    /// NOERROR with no records (AAAA and all types other than A).
    Empty,
    /// NXDOMAIN: the name is blocked (see [`DnsDecision::rule`]).
    NxDomain,
    /// An error reply (FORMERR, NOTIMP or REFUSED: see [`Reject::rcode`]).
    Rejected(Reject),
    /// No reply at all.
    Dropped(Reject),
}

/// Why a packet got an error reply or none.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Reject {
    /// Shorter than a DNS header: dropped.
    #[error("packet shorter than a DNS header")]
    TooShort,
    /// A response, not a query: dropped (never answer answers).
    #[error("packet is a response")]
    IsResponse,
    /// Could not be decoded: FORMERR.
    #[error("malformed packet: {0}")]
    Malformed(String),
    /// Opcode other than QUERY: NOTIMP.
    #[error("opcode {0} not supported")]
    Opcode(u8),
    /// Not exactly one question: FORMERR.
    #[error("{0} questions; exactly one is supported")]
    QuestionCount(usize),
    /// Class other than IN: REFUSED.
    #[error("class {0} not supported")]
    Class(u16),
    /// The name is not acceptable: REFUSED.
    #[error("bad name: {0}")]
    BadName(NameError),
    /// AXFR/IXFR: REFUSED.
    #[error("zone transfer refused")]
    ZoneTransfer,
}

impl Reject {
    /// The response code sent for this rejection (`None` when the packet is dropped).
    pub fn rcode(&self) -> Option<&'static str> {
        self.response_code().map(|rc| match rc {
            ResponseCode::FormErr => "FORMERR",
            ResponseCode::NotImp => "NOTIMP",
            _ => "REFUSED",
        })
    }

    fn response_code(&self) -> Option<ResponseCode> {
        match self {
            Reject::TooShort | Reject::IsResponse => None,
            Reject::Malformed(_) | Reject::QuestionCount(_) => Some(ResponseCode::FormErr),
            Reject::Opcode(_) => Some(ResponseCode::NotImp),
            Reject::Class(_) | Reject::BadName(_) | Reject::ZoneTransfer => {
                Some(ResponseCode::Refused)
            }
        }
    }
}

fn qtype_name(rt: RecordType) -> String {
    match rt {
        RecordType::Unknown(n) => format!("TYPE{n}"),
        other => {
            let s: &'static str = other.into();
            if s == "Unknown" {
                format!("TYPE{}", u16::from(other))
            } else {
                s.to_string()
            }
        }
    }
}

/// A 12-byte error reply built from the raw header: ID, opcode and RD copied, no sections.
fn header_only(packet: &[u8], rcode: u8) -> Vec<u8> {
    let id = [
        packet.first().copied().unwrap_or(0),
        packet.get(1).copied().unwrap_or(0),
    ];
    let flags = packet.get(2).copied().unwrap_or(0);
    // QR=1, opcode copied, RD copied; AA and TC clear. RA=1, Z/AD/CD clear, rcode.
    let b2 = 0x80 | (flags & 0x78) | (flags & 0x01);
    let b3 = 0x80 | (rcode & 0x0f);
    vec![id[0], id[1], b2, b3, 0, 0, 0, 0, 0, 0, 0, 0]
}

/// The reply (a bare header) and decision for a packet rejected before its question was read.
fn refuse(packet: &[u8], reject: Reject) -> (Option<Vec<u8>>, DnsDecision) {
    let (reply, answer) = match reject.response_code() {
        Some(rc) => (
            Some(header_only(packet, u16::from(rc) as u8)),
            DnsAnswer::Rejected(reject),
        ),
        None => (None, DnsAnswer::Dropped(reject)),
    };
    let d = DnsDecision {
        name: None,
        qtype: None,
        answer,
        rule: None,
    };
    (reply, d)
}

/// Answers one query packet. Pure with respect to the network: nothing here opens a socket.
pub(crate) fn handle(
    cfg: &Checked,
    table: &mut FakeIpTable,
    packet: &[u8],
) -> (Option<Vec<u8>>, DnsDecision) {
    if packet.len() < 12 {
        return refuse(packet, Reject::TooShort);
    }
    if packet[2] & 0x80 != 0 {
        return refuse(packet, Reject::IsResponse);
    }
    // Opcode and question count come from the raw header, before any decoding: hickory
    // reserves room for QDCOUNT questions up front, so a header claiming 65535 of them would
    // cost megabytes per packet.
    let opcode = (packet[2] >> 3) & 0x0f;
    if opcode != 0 {
        return refuse(packet, Reject::Opcode(opcode));
    }
    let qdcount = usize::from(u16::from_be_bytes([packet[4], packet[5]]));
    if qdcount != 1 {
        return refuse(packet, Reject::QuestionCount(qdcount));
    }
    let req = match Message::from_vec(packet) {
        Ok(m) => m,
        Err(e) => return refuse(packet, Reject::Malformed(e.to_string())),
    };
    let query = match req.queries.as_slice() {
        [q] if req.metadata.op_code == OpCode::Query => q,
        // Unreachable after the raw checks above; a decoder disagreement is FORMERR.
        _ => {
            let why = "header and decoded message disagree";
            return refuse(packet, Reject::Malformed(why.into()));
        }
    };
    let qtype = Some(qtype_name(query.query_type()));
    let name = name::from_labels(query.name().iter());

    let (answer, rule) = if query.query_class() != DNSClass::IN {
        let class = u16::from(query.query_class());
        (DnsAnswer::Rejected(Reject::Class(class)), None)
    } else {
        match &name {
            Err(e) => (DnsAnswer::Rejected(Reject::BadName(e.clone())), None),
            Ok(n) => {
                if let Some(rule) = cfg.blocklist.check(n) {
                    (DnsAnswer::NxDomain, Some(rule.to_string()))
                } else if n != HOST_ALIAS && RESERVED.matches(n) {
                    (
                        DnsAnswer::NxDomain,
                        Some(format!("reserved:{RESERVED_DOMAIN}")),
                    )
                } else if single_label(cfg, n) {
                    (DnsAnswer::NxDomain, Some(SINGLE_LABEL_RULE.to_string()))
                } else {
                    match query.query_type() {
                        RecordType::A => (DnsAnswer::Answered(table.assign(n)), None),
                        RecordType::AXFR | RecordType::IXFR => {
                            (DnsAnswer::Rejected(Reject::ZoneTransfer), None)
                        }
                        _ => (DnsAnswer::Empty, None),
                    }
                }
            }
        }
    };

    let mut resp = Message::new(req.metadata.id, MessageType::Response, OpCode::Query);
    resp.metadata.recursion_desired = req.metadata.recursion_desired;
    resp.metadata.recursion_available = true;
    resp.metadata.checking_disabled = req.metadata.checking_disabled;
    resp.add_query(query.clone());
    resp.metadata.response_code = match &answer {
        DnsAnswer::Answered(ip) => {
            resp.add_answer(Record::from_rdata(
                query.name().clone(),
                FAKE_TTL,
                RData::A(A(*ip)),
            ));
            ResponseCode::NoError
        }
        DnsAnswer::Empty => ResponseCode::NoError,
        DnsAnswer::NxDomain => ResponseCode::NXDomain,
        DnsAnswer::Rejected(r) | DnsAnswer::Dropped(r) => {
            r.response_code().unwrap_or(ResponseCode::Refused)
        }
    };
    if req.edns.is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(EDNS_PAYLOAD);
        resp.set_edns(edns);
    }
    let reply = match resp.to_vec() {
        Ok(bytes) => bytes,
        // Cannot happen for a reply this small; if it does, say SERVFAIL rather than panic.
        Err(_) => header_only(packet, u16::from(ResponseCode::ServFail) as u8),
    };
    let d = DnsDecision {
        name: name.ok(),
        qtype,
        answer,
        rule,
    };
    (Some(reply), d)
}
