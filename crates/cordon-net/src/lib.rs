//! cordon's network layer (layer 2): the egress gateway and its name side. Runs on the **host
//! side**, in the supervisor: the gateway hands the resolver the DNS packets the sandbox sends
//! to its DNS sockets or through the TUN device (two of the boundary's crossings, listed in
//! `cordon_sandbox::Crossing`) and asks it, when the sandbox connects to a fake address, which
//! real addresses to connect to.
//!
//! - [`Resolver::handle_query`]: the sandbox's only resolver. A queries get a synthetic address
//!   from a private range (fake-IP, 198.18.0.0/15 by default), remembered for the session; AAAA
//!   and every other type get an empty NOERROR; blocklisted names get NXDOMAIN. Nothing is ever
//!   asked upstream at query time, so a query for `<secret>.attacker.example` never leaves the
//!   machine. Each packet yields a [`DnsDecision`] for the audit log.
//! - [`Resolver::name_for`]: fake address → name, for the connection path.
//! - [`HostResolver::resolve_for_connect`]: the real lookup, made only once policy allowed a
//!   connection, with the DNS-rebinding/SSRF rule applied; the caller connects to exactly the
//!   addresses returned.
//! - [`blocked`], [`is_host_alias`]: the blocklist and the `host.cordon.internal` alias.
//! - [`Gateway`]: the egress gateway that serves the TUN device, the DNS sockets and the
//!   explicit proxy (see [`gateway`]).
//! - [`ether::link`]: a microVM's QEMU stream netdev (Ethernet frames) as the packet
//!   descriptor the gateway serves in place of a TUN device.
//!
//! Every crossing named: the TUN device is the boundary this crate serves; everything it
//! reads from it is attacker-controlled. TCP flows the plan gives to the HTTP layer leave
//! this crate through [`FlowHandler`], a trait defined here on std and tokio types only (the
//! sandbox's side as a [`FlowIo`] stream, and a [`FlowTarget`]: name, port, TLS or plain);
//! the binary wires cordon's HTTP layer into it, and the layer connects upstream through
//! [`Gateway::connector`], the same policy-checked connect. So this crate needs no HTTP or
//! TLS code and does not depend on `cordon-http`, nor it on this: they meet in the Plan
//! (input) and events (output).
//!
//! Inputs are a [`NetConfig`] (filled from policy by the caller); outputs are plain values the
//! caller turns into events. No `unsafe`, and no input — packets come from the sandbox and are
//! attacker-controlled — can make it panic.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod addr;
mod blocklist;
mod config;
mod connect;
mod dns;
pub mod ether;
mod fakeip;
pub mod gateway;
pub mod name;

use std::net::Ipv4Addr;
use std::sync::Arc;

pub use addr::{AddrClass, classify};
pub use blocklist::blocked;
pub use config::{HOST_ALIAS, NetConfig, NetError, default_fake_range};
pub use connect::{HostResolver, Refusal, is_host_alias};
pub use dns::{DnsAnswer, DnsDecision, FAKE_TTL, Reject};
pub use gateway::{
    ConnectFn, Emit, FLOW_WINDOW_BYTES, FlowDenial, FlowFuture, FlowHandler, FlowIo, FlowKind,
    FlowTarget, Gateway, GatewayError, InwardFn, Redact, SocketLookup, TUN_VNET_HDR_LEN, Wiring,
};
pub use gateway::{ExecsOf, FlowPolicy, FlowVerdict, Route, explain_flow, learnable};
use ipnet::Ipv4Net;

/// The session's DNS state: the validated configuration and the fake-IP table.
///
/// Every A answer comes from the table. When all addresses of the range are in use, the
/// least-recently-queried name gives its address up to the new one (so a flood of unique names
/// cannot stop resolution for the rest of the session); the old name gets a fresh address if it
/// is asked for again. With the default /15 that takes 131,069 distinct names.
#[derive(Debug)]
pub struct Resolver {
    cfg: Arc<config::Checked>,
    table: fakeip::FakeIpTable,
}

impl Resolver {
    /// Validates `cfg` (patterns, names, the fake range) and starts an empty table.
    pub fn new(cfg: NetConfig) -> Result<Self, NetError> {
        let checked = config::check(&cfg)?;
        let table = fakeip::FakeIpTable::new(checked.fake_range).ok_or(NetError::BadFakeRange {
            range: checked.fake_range,
            reason: "it must be a /30 or larger",
        })?;
        Ok(Self {
            cfg: Arc::new(checked),
            table,
        })
    }

    /// Answers one DNS message from the sandbox (the payload of a UDP datagram, or of one TCP
    /// length-prefixed frame; the caller does the framing). Returns the reply to send back —
    /// `None` means send nothing — and the decision for the audit log. Never touches the
    /// network. In order of checks:
    /// - fewer than 12 bytes, or a response (QR set): no reply ([`DnsAnswer::Dropped`]);
    /// - opcode other than QUERY: NOTIMP; not exactly one question, or undecodable: FORMERR;
    ///   class other than IN, a name failing [`name::normalize`] (length, label count,
    ///   characters), or AXFR/IXFR: REFUSED ([`DnsAnswer::Rejected`]);
    /// - a blocklisted name, or one under `cordon.internal` other than [`HOST_ALIAS`]: NXDOMAIN
    ///   whatever the type ([`DnsAnswer::NxDomain`], rule in [`DnsDecision::rule`]);
    /// - A: one fake address, TTL [`FAKE_TTL`] ([`DnsAnswer::Answered`]);
    /// - AAAA and every other type: NOERROR, no records ([`DnsAnswer::Empty`]) — empty rather
    ///   than REFUSED, because REFUSED makes stub resolvers abandon the name or try another
    ///   server, while "no data of this type" makes them use the A answer.
    pub fn handle_query(&mut self, packet: &[u8]) -> (Option<Vec<u8>>, DnsDecision) {
        dns::handle(&self.cfg, &mut self.table, packet)
    }

    /// The name that currently holds fake address `ip`, if any.
    pub fn name_for(&self, ip: Ipv4Addr) -> Option<&str> {
        self.table.name_for(ip)
    }

    /// True when `ip` is in the fake range (whether or not it is assigned).
    pub fn is_fake(&self, ip: Ipv4Addr) -> bool {
        self.cfg.fake_range.contains(&ip)
    }

    /// The fake range in use.
    pub fn fake_range(&self) -> Ipv4Net {
        self.cfg.fake_range
    }

    /// The gateway's own address in the fake range (see [`NetConfig::gateway_ip`]).
    pub fn gateway_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.cfg.fake_range.network()).wrapping_add(1))
    }

    /// Number of names currently holding an address.
    pub fn mapped_names(&self) -> usize {
        self.table.len()
    }

    /// A detached handle for host-side lookups, to use off the DNS path (it blocks).
    pub fn host_resolver(&self) -> HostResolver {
        HostResolver::new(self.cfg.clone())
    }

    /// Shorthand for [`HostResolver::resolve_for_connect`].
    pub fn resolve_for_connect(&self, name: &str) -> Result<Vec<std::net::IpAddr>, Refusal> {
        self.host_resolver().resolve_for_connect(name)
    }
}

#[cfg(test)]
mod tests;
