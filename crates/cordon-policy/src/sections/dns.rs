//! `[dns]`: the sandbox's resolver — names it may not resolve, static answers, and where the
//! host side asks (layer 2).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use crate::PolicyError;
use crate::pattern::{Bare, HostPattern};
use crate::schema::{Schema, Shape, toml_string};
use crate::sections::{
    Convert, Loosen, Origin, Render, Scalar, Section, Sections, append_new, set_scalar,
};

/// One name the sandbox may not resolve.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DnsBlock {
    /// A bare name blocks it and every name below ([`HostPattern::AtOrBelow`]); `*.name` only
    /// the names below.
    pub pattern: HostPattern,
    /// `built-in`, or `FILE:LINE`.
    pub origin: cordon_events::Origin,
}

/// The resolver's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DnsPlan {
    /// The blocklist, built-in entries first.
    pub block: Vec<DnsBlock>,
    /// Static host-side answers: name → address.
    pub hosts: BTreeMap<String, IpAddr>,
    /// The resolver the host side asks, if not the system's.
    pub upstream: Option<SocketAddr>,
}

raw_table! {
    /// `[dns]` as written.
    pub(crate) struct Raw example "block = [\"paste.example\"]" {
        /// Names that do not resolve (a bare name blocks it and every name below).
        block: Strings = "block = [\"paste.example\"]",
        /// Fixed answers, name to address.
        hosts: StringTable [loosens] = "hosts = { \"db.internal\" = \"10.0.0.5\" }",
        /// The resolver the host side asks, if not the system's.
        upstream: String [loosens] = "upstream = \"127.0.0.1:53\"",
    }
}

/// `[dns]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Dns {
    pub block: Vec<(HostPattern, Origin)>,
    pub hosts: BTreeMap<String, (IpAddr, Origin)>,
    pub upstream: Scalar<SocketAddr>,
}

impl Section for Dns {
    type Raw = Raw;
    type Plan = DnsPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Dns::default();
        for b in &raw.block {
            let pat = cx.host_name(b, "block", Bare::AtOrBelow)?;
            out.block.push((pat, cx.origin(b.span())));
        }
        for (name, addr) in &raw.hosts {
            let host = match cx.host_name(name, "hosts", Bare::Exact)? {
                HostPattern::Exact(n) => n,
                _ => {
                    return Err(cx.diag(
                        format!(
                            "invalid host {} in `hosts`: names only here, no wildcards",
                            toml_string(name.get_ref())
                        ),
                        name.span(),
                        "e.g. \"api.example.test\"",
                    ));
                }
            };
            let ip: IpAddr = addr.get_ref().trim().parse().map_err(|_| {
                cx.diag(
                    format!(
                        "invalid address {} for {} in [dns] hosts",
                        toml_string(addr.get_ref()),
                        toml_string(name.get_ref())
                    ),
                    addr.span(),
                    "write an IPv4 or IPv6 address, e.g. \"127.0.0.1\"",
                )
            })?;
            if ip.is_unspecified() || ip.is_multicast() {
                return Err(cx.diag(
                    format!(
                        "address {ip} for {} cannot be connected to",
                        toml_string(name.get_ref())
                    ),
                    addr.span(),
                    "use a unicast address, e.g. \"127.0.0.1\"",
                ));
            }
            out.hosts.insert(host, (ip, cx.origin(name.span())));
        }
        if let Some(u) = raw.upstream {
            let text = u.get_ref().trim();
            let addr =
                text.parse::<SocketAddr>()
                    .ok()
                    .or_else(|| {
                        text.parse::<IpAddr>()
                            .ok()
                            .map(|ip| SocketAddr::new(ip, 53))
                    })
                    .ok_or_else(|| {
                        cx.diag(
                        format!("invalid resolver address {} in [dns] upstream", toml_string(text)),
                        u.span(),
                        "write ADDRESS or ADDRESS:PORT, e.g. \"127.0.0.1:53\" or \"[::1]:5353\"",
                    )
                    })?;
            out.upstream = Some((addr, cx.origin(u.span())));
        }
        Ok(out)
    }

    fn merge(&mut self, later: &Self) {
        append_new(&mut self.block, &later.block, |a, b| a == b);
        for (name, v) in &later.hosts {
            self.hosts.insert(name.clone(), v.clone());
        }
        set_scalar(&mut self.upstream, &later.upstream);
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        let (f, b) = (&full.dns, &base.dns);
        for (name, (ip, o)) in &f.hosts {
            if b.hosts.get(name).map(|(x, _)| x) != Some(ip) {
                out.add(
                    o,
                    format!("answers {name} with {ip} (names may point at private addresses)"),
                );
            }
        }
        if let Some((u, o)) = &f.upstream
            && b.upstream.as_ref().map(|x| x.0) != Some(*u)
        {
            out.add(o, format!("resolves names through {u}"));
        }
    }

    fn plan(self) -> DnsPlan {
        DnsPlan {
            block: self
                .block
                .into_iter()
                .map(|(pattern, o)| DnsBlock {
                    pattern,
                    origin: o.label.into(),
                })
                .collect(),
            hosts: self.hosts.into_iter().map(|(k, (ip, _))| (k, ip)).collect(),
            upstream: self.upstream.map(|(a, _)| a),
        }
    }

    fn render(dns: &DnsPlan, out: &mut Render) {
        out.header("dns");
        out.with_origins(
            "block",
            dns.block.iter().map(|b| (b.pattern.to_string(), &b.origin)),
        );
        let hosts: Vec<String> = dns
            .hosts
            .iter()
            .map(|(k, v)| format!("{} = {}", toml_string(k), toml_string(&v.to_string())))
            .collect();
        out.line(format!("hosts = {{ {} }}", hosts.join(", ")));
        match dns.upstream {
            Some(u) => out.string("upstream", &u.to_string()),
            None => out.line("# upstream: the host's own resolver"),
        }
    }
}
