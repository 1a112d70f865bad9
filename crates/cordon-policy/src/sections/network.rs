//! `[network]`: how the sandbox reaches the network, and which TCP flows the gateway lets
//! out by name and port (layer 2).

use crate::PolicyError;
use crate::Programs;
use crate::expiry::{Expiry, outlasts};
use crate::pattern::{Bare, HostPattern};
use crate::schema::{Schema, Shape, toml_string};
use crate::sections::{
    Convert, Loosen, Origin, Render, Scalar, Section, Sections, append_new, comment, set_scalar,
    value,
};

crate::choice! {
    /// How the sandbox reaches the network.
    #[derive(Default)]
    pub enum NetMode {
        /// Through cordon's egress gateway only: every flow is decided by name, host and port.
        #[default]
        Gateway = "gateway",
        /// Loopback only; no way out at all.
        None = "none",
        /// The host's network, unfiltered (no network isolation at all).
        Host = "host",
    }
}

/// One `[[network.allow]]` rule: TCP to `host` on one of `ports`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostRule {
    /// An exact name, or every name below one ([`HostPattern::Below`]).
    pub host: HostPattern,
    /// Ports this rule opens (non-empty).
    pub ports: Vec<u16>,
    /// Where the rule came from (`built-in`, `FILE:LINE`).
    pub origin: cordon_events::Origin,
    /// When it ends (`until`, `for`); `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Expiry>,
    /// The processes it is for (`programs`, `run_by`); empty: any.
    #[serde(default, skip_serializing_if = "Programs::any")]
    pub programs: Programs,
}

impl HostRule {
    /// Whether `name` matches this rule's host.
    pub fn matches_host(&self, name: &str) -> bool {
        self.host.matches(name)
    }

    /// The rule's id in events: `network.allow HOST (ORIGIN)`.
    pub fn label(&self) -> cordon_events::RuleId {
        cordon_events::RuleId::NetworkAllow {
            host: self.host.to_string(),
            origin: self.origin.clone(),
        }
    }
}

/// Network egress policy: the gateway's flow rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NetworkPlan {
    /// Gateway (default), none or host.
    pub mode: NetMode,
    /// Raw-IP destinations (CIDR, validated) the sandbox may connect to without a name.
    pub allow_ips: Vec<String>,
    /// TCP egress by name and port, in merge order.
    pub allow: Vec<HostRule>,
}

impl NetworkPlan {
    /// The first rule allowing TCP to `name:port` for any process, if any.
    pub fn allowing(&self, name: &str, port: u16) -> Option<&HostRule> {
        self.allowing_for(name, port, None)
    }

    /// The first rule allowing TCP to `name:port` for `owner` (`None`: not known, so only
    /// a rule for any process).
    pub fn allowing_for(
        &self,
        name: &str,
        port: u16,
        owner: Option<&crate::Owner>,
    ) -> Option<&HostRule> {
        self.allow.iter().find(|r| {
            r.ports.contains(&port)
                && r.matches_host(name)
                && crate::program::applies(&r.programs, true, owner)
        })
    }

    /// The rules for `name:port` that name processes, when no rule lets any process
    /// through: what a connection's process must be found for.
    pub fn only_for(&self, name: &str, port: u16) -> Vec<&HostRule> {
        if self.allowing(name, port).is_some() {
            return Vec::new();
        }
        self.allow
            .iter()
            .filter(|r| r.ports.contains(&port) && r.matches_host(name))
            .collect()
    }

    /// Whether any rule names processes.
    pub fn keyed(&self) -> bool {
        self.allow.iter().any(|r| !r.programs.any())
    }
}

raw_table! {
    /// One `[[network.allow]]` as written.
    pub(crate) struct RawAllow example "host = \"github.com\" and ports = [22]" {
        /// A host name, or `*.name` for every name below it.
        host: String [required, loosens] = "host = \"github.com\" or host = \"*.example.com\"",
        /// The TCP ports it may be reached on.
        ports: Integers [required] = "ports = [22]",
        /// When the rule ends, in RFC 3339 (`Z` or an offset; seconds optional). A session
        /// that starts after it runs without the rule; one that started before keeps it until
        /// it exits. Not with `for`.
        until: String = "until = \"2026-12-31T18:00Z\"",
        /// How long the rule lasts (`90m`, `2h`, `1d`), counted from this file's modification
        /// time: editing the file (or touching it) starts it again. Instead of `until`, not
        /// with it.
        r#for: String [shorthand] = "for = \"2h\"",
        /// Only for these programs: an executable by name or absolute path, or what an
        /// interpreter runs (a script, an npm package). The connection's process is found on
        /// the host; one that cannot be found, or runs a file the sandbox could have written,
        /// is no program.
        programs: Strings = "programs = [\"git\", \"gh\"]",
        /// Only for processes one of these started (a parent, or theirs), named as in
        /// `programs`.
        run_by: Strings = "run_by = [\"npm\"]",
    }
}

raw_table! {
    /// `[network]` as written.
    pub(crate) struct Raw example "mode = \"gateway\"" {
        /// How the sandbox reaches the network: `gateway`, only through cordon's gateway, which
        /// decides each flow by host and port; `none`, loopback only; `host`, the host's
        /// network unfiltered.
        mode: Choice(NetMode),
        /// Addresses (CIDR) reachable without a name.
        allow_ips: Strings [loosens] = "allow_ips = [\"10.0.0.0/8\"]",
        /// TCP by host name and port.
        allow: Tables(RawAllow),
    }
}

/// `[network]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Network {
    pub mode: Scalar<NetMode>,
    /// Normalised to `ADDR/LEN`.
    pub allow_ips: Vec<(String, Origin)>,
    pub allow: Vec<(Allow, Origin)>,
}

/// One `[[network.allow]]` of a layer: the host, its ports, when it ends, for whom.
pub(crate) type Allow = (HostPattern, Vec<u16>, Option<Expiry>, Programs);

/// `ADDR` or `ADDR/LEN` as a canonical `ADDR/LEN` string.
pub(crate) fn parse_cidr(text: &str) -> Result<String, &'static str> {
    let t = text.trim();
    let (addr, len) = match t.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (t, None),
    };
    let ip: std::net::IpAddr = addr.parse().map_err(|_| "not an IP address")?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l
            .parse::<u8>()
            .map_err(|_| "the prefix length is not a number")?,
        None => max,
    };
    if len > max {
        return Err("the prefix length is too long for the address");
    }
    Ok(format!("{ip}/{len}"))
}

impl Section for Network {
    type Raw = Raw;
    type Plan = NetworkPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Network {
            mode: raw.mode.map(|v| (*v.get_ref(), cx.origin(v.span()))),
            ..Default::default()
        };
        for c in &raw.allow_ips {
            let cidr = parse_cidr(c.get_ref()).map_err(|why| {
                cx.diag(
                    format!(
                        "invalid address range {} in allow_ips: {why}",
                        toml_string(c.get_ref())
                    ),
                    c.span(),
                    "write an address or a CIDR range, e.g. \"10.1.2.0/24\" or \"192.0.2.7\"",
                )
            })?;
            out.allow_ips.push((cidr, cx.origin(c.span())));
        }
        for rule in &raw.allow {
            let r = rule.get_ref();
            let host = cx.host_name(
                cx.required(&r.host, "host", "[[network.allow]]")?,
                "host",
                Bare::Exact,
            )?;
            let ports_v = cx.required(&r.ports, "ports", "[[network.allow]]")?;
            if ports_v.get_ref().is_empty() {
                return Err(cx.diag(
                    "empty `ports` in [[network.allow]]".to_string(),
                    ports_v.span(),
                    "name the ports this host may be reached on, e.g. ports = [443]",
                ));
            }
            let mut ports = Vec::new();
            for p in ports_v.get_ref() {
                ports.push(cx.port(p, "ports")?);
            }
            let ends = cx.ends(&r.until, &r.r#for, "[[network.allow]]")?;
            let who = cx.programs(&r.programs, &r.run_by)?;
            out.allow
                .push(((host, ports, ends, who), cx.origin(rule.span())));
        }
        Ok(out)
    }

    fn merge(&mut self, later: &Self) {
        set_scalar(&mut self.mode, &later.mode);
        append_new(&mut self.allow_ips, &later.allow_ips, |a, b| a == b);
        append_new(&mut self.allow, &later.allow, |a, b| a == b);
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        let (f, b) = (&full.network, &base.network);
        match (&f.mode, value(&b.mode)) {
            (Some((NetMode::Host, _)), NetMode::Host) | (None, _) => {}
            (Some((NetMode::Host, o)), _) => out.add(
                o,
                "turns network isolation off (mode = \"host\")".to_string(),
            ),
            (Some((NetMode::Gateway, o)), NetMode::None) => out.add(
                o,
                "gives the sandbox network access (mode = \"gateway\")".to_string(),
            ),
            _ => {}
        }
        for (cidr, o) in &f.allow_ips {
            if !b.allow_ips.iter().any(|(x, _)| x == cidr) {
                out.add(o, format!("allows connections to raw addresses {cidr}"));
            }
        }
        for ((h, ports, ends, who), o) in &f.allow {
            // A port the trusted layers open only for a while is opened further by a rule
            // that outlasts theirs; one they open for some programs, by a rule for others.
            let known = |p: &u16| {
                b.allow.iter().any(|((x, xp, e, bw), _)| {
                    x == h && xp.contains(p) && outlasts(*ends, *e) && (bw.any() || bw == who)
                })
            };
            if !ports.iter().all(known) {
                let whom = match who.any() {
                    true => String::new(),
                    false => format!(" for {}", who.describe()),
                };
                out.add(
                    o,
                    format!("allows connections to {h} on ports {ports:?}{whom}"),
                );
            }
        }
    }

    fn plan(self) -> NetworkPlan {
        NetworkPlan {
            mode: value(&self.mode),
            allow_ips: self.allow_ips.into_iter().map(|(c, _)| c).collect(),
            allow: self
                .allow
                .into_iter()
                .map(|((host, ports, expires, programs), o)| HostRule {
                    host,
                    ports,
                    origin: o.label.into(),
                    expires,
                    programs,
                })
                .collect(),
        }
    }

    fn render(net: &NetworkPlan, out: &mut Render) {
        out.header("network");
        out.string("mode", &net.mode.to_string());
        out.strings("allow_ips", &net.allow_ips);
        out.line("# TCP by name and port; everything else (raw IPs, UDP but DNS) is refused.");
        for r in &net.allow {
            out.line(format!(
                "\n[[network.allow]] # {}",
                comment(&r.origin.to_string())
            ));
            out.string("host", &r.host.to_string());
            let ports: Vec<String> = r.ports.iter().map(u16::to_string).collect();
            out.line(format!("ports = [{}]", ports.join(", ")));
            out.programs(&r.programs);
            out.until(r.expires);
        }
    }
}
