//! The whole connection-level decision as pure functions of the plan: which flows the HTTP
//! layer takes, and what the flow policy says of the rest. The gateway calls these for every
//! flow; [`explain_flow`] calls the same ones for `cordon explain`, with no session running.

use std::net::IpAddr;

use cordon_events::{Builtin, RuleId};
use cordon_policy::{HostPattern, HttpAction, HttpPlan, NetMode, NetworkPlan, Plan};
use ipnet::IpNet;

use super::HttpFlow;
use super::policy::{self, Dest, FlowDecision};
use crate::{NetConfig, NetError, Resolver};

/// The resolver's configuration for a session's plan (blocklist, `hosts`, upstream, the
/// names whose private addresses a rule allows).
pub(crate) fn net_config(whole: &Plan) -> NetConfig {
    NetConfig {
        block: whole.dns.block.clone(),
        hosts: whole.dns.hosts.clone(),
        upstream: whole.dns.upstream,
        // Exact names a rule allows may resolve to private addresses: the user named them.
        allow_hosts: whole
            .network
            .allow
            .iter()
            .filter_map(|r| match &r.host {
                HostPattern::Exact(n) => Some(n.clone()),
                _ => None,
            })
            .collect(),
        // Not `..NetConfig::default()`: that would parse the built-in policy again for a
        // blocklist the plan already holds.
        fake_range: crate::config::default_fake_range(),
    }
}

/// What the gateway does with a TCP flow to `dest:port` when the HTTP layer is on (see
/// [`HttpFlow`]): it takes ports 443 and 80 (any port when `any_port`: a plain request
/// through the explicit proxy) to names, except `[tls] passthrough` hosts.
pub(crate) fn http_flow(
    http: &HttpPlan,
    passthrough: &[HostPattern],
    net: &NetworkPlan,
    blocked: &dyn Fn(&str) -> Option<RuleId>,
    dest: &Dest,
    port: u16,
    any_port: bool,
) -> HttpFlow {
    let Dest::Name(name) = dest else {
        return HttpFlow::NotHttp;
    };
    if !(any_port || matches!(port, 80 | 443)) || passthrough.iter().any(|p| p.matches(name)) {
        return HttpFlow::NotHttp;
    }
    if let Some(rule) = blocked(name) {
        return HttpFlow::Deny(FlowDecision {
            allow: false,
            reason: format!("{name} is on the blocklist ({rule})"),
            rule,
        });
    }
    if http_reachable(http, net, name, port) {
        HttpFlow::Intercept
    } else {
        HttpFlow::Deny(FlowDecision {
            allow: false,
            rule: Builtin::HttpDefaultDeny.into(),
            reason: format!(
                "no [[http.rule]] or [[network.allow]] lets requests to {name}:{port} through"
            ),
        })
    }
}

/// Whether any request to `name:port` could be let through (so the connection is worth
/// accepting): an allowing rule for the host, a `[[network.allow]]`, or a default that is
/// not `deny`.
fn http_reachable(http: &HttpPlan, net: &NetworkPlan, name: &str, port: u16) -> bool {
    http.default != HttpAction::Deny
        || net
            .allow
            .iter()
            .any(|r| r.ports.contains(&port) && r.matches_host(name))
        || http.rules.iter().any(|r| {
            r.action != HttpAction::Deny && r.port.is_none_or(|p| p == port) && r.host.matches(name)
        })
}

/// What the gateway would do with a TCP connection from the sandbox to `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowVerdict {
    /// Whether the connection is let out.
    pub allow: bool,
    /// The rule that decided (`network.allow HOST (ORIGIN)`, `network.default-deny`, …).
    pub rule: RuleId,
    /// Why, in words.
    pub reason: String,
    /// The HTTP layer takes the connection: each request on it is decided by the HTTP
    /// rules (`allow` is then only "worth accepting").
    pub http: bool,
}

/// The gateway's decision for a connection to `host:port` (a name, or a raw address) under
/// `plan`, with `http_layer` saying whether the HTTP layer intercepts (it does whenever
/// cordon's CA can be had). The same functions as the running gateway, without one: no
/// lookup, no socket. A name the sandbox's DNS refuses (blocklist) is refused here too.
pub fn explain_flow(
    plan: &Plan,
    host: &str,
    port: u16,
    http_layer: bool,
    owner: Option<&cordon_policy::Owner>,
) -> Result<FlowVerdict, NetError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if plan.network.mode == NetMode::Gateway && bare.parse::<IpAddr>().is_err() {
        crate::name::normalize(host).map_err(|reason| NetError::BadHostName {
            name: host.to_string(),
            reason,
        })?;
    }
    Ok(FlowPolicy::new(plan)?.decide(host, port, Route::Tun, http_layer, owner))
}

/// How a connection reached the gateway: it decides each route a little differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The transparent path (the TUN): the HTTP layer takes ports 80 and 443.
    Tun,
    /// The explicit proxy's `CONNECT`: the same ports as the TUN.
    ProxyConnect,
    /// A plain request through the explicit proxy: the HTTP layer's on any port.
    ProxyRequest,
}

impl Route {
    /// The route a logged network event names in `detail.via` (`tun`, `proxy`,
    /// `proxy-http`); `None` for one no flow decision made (`publish`).
    pub fn from_via(via: &str) -> Option<Route> {
        match via {
            "tun" => Some(Route::Tun),
            "proxy" => Some(Route::ProxyConnect),
            "proxy-http" => Some(Route::ProxyRequest),
            _ => None,
        }
    }
}

/// The connection-level policy of one plan, made once and asked many times: what the running
/// gateway decides for a flow before any lookup or connect (the blocklist, the HTTP layer's
/// ports, `[[network.allow]]`, `allow_ips`). `cordon replay` re-decides logged flows with it.
pub struct FlowPolicy<'a> {
    plan: &'a Plan,
    allow_ips: Vec<IpNet>,
    names: crate::HostResolver,
}

impl<'a> FlowPolicy<'a> {
    /// The policy of `plan`; an `Err` where the plan's `[dns]` or `allow_ips` do not build.
    pub fn new(plan: &'a Plan) -> Result<Self, NetError> {
        let resolver = Resolver::new(net_config(plan))?;
        let allow_ips = plan
            .network
            .allow_ips
            .iter()
            .filter_map(|c| c.parse::<IpNet>().ok())
            .collect();
        Ok(FlowPolicy {
            plan,
            allow_ips,
            names: resolver.host_resolver(),
        })
    }

    /// The name's blocklist rule, if the sandbox's resolver refuses it.
    pub fn blocked(&self, name: &str) -> Option<RuleId> {
        self.names.blocked(name)
    }

    /// The decision for a connection to `host:port` arriving by `route`, with `http_layer`
    /// saying whether the HTTP layer intercepts. `host` is a name as the sandbox gave it, or a
    /// raw address. `owner`: the process behind it, as the gateway found it (`None`: not
    /// known, which only rules for any process let through).
    pub fn decide(
        &self,
        host: &str,
        port: u16,
        route: Route,
        http_layer: bool,
        owner: Option<&cordon_policy::Owner>,
    ) -> FlowVerdict {
        let plan = self.plan;
        match plan.network.mode {
            NetMode::Host => {
                return FlowVerdict {
                    allow: true,
                    rule: Builtin::NetworkMode.into(),
                    reason: "[network] mode = \"host\": the host's network, unfiltered".into(),
                    http: false,
                };
            }
            NetMode::None => {
                return FlowVerdict {
                    allow: false,
                    rule: Builtin::NetworkMode.into(),
                    reason: "[network] mode = \"none\": loopback only, no way out".into(),
                    http: false,
                };
            }
            NetMode::Gateway => {}
        }
        let blocked = |n: &str| self.names.blocked(n);
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let dest = match bare.parse::<IpAddr>() {
            Ok(ip) => Dest::Ip(ip),
            Err(_) => Dest::Name(crate::name::normalize(host).unwrap_or_else(|_| host.into())),
        };
        let verdict = |d: FlowDecision, http: bool| FlowVerdict {
            allow: d.allow,
            rule: d.rule,
            reason: d.reason,
            http,
        };
        let to_http = http_layer && (route == Route::ProxyRequest || matches!(port, 80 | 443));
        if to_http {
            let any_port = route == Route::ProxyRequest;
            let (http, pass) = (&plan.http, &plan.tls.passthrough);
            match http_flow(http, pass, &plan.network, &blocked, &dest, port, any_port) {
                HttpFlow::Intercept => {
                    return FlowVerdict {
                        allow: true,
                        rule: "http".into(),
                        reason: format!(
                            "the HTTP layer takes connections to {}:{port}: each request is decided by rule",
                            dest.host()
                        ),
                        http: true,
                    };
                }
                HttpFlow::Deny(d) => return verdict(d, false),
                HttpFlow::NotHttp => {}
            }
        }
        let d = policy::decide(&plan.network, &self.allow_ips, &blocked, &dest, port, owner);
        verdict(d, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_policy::{Bare, HostRule, HttpRule};

    fn plan() -> Plan {
        // The built-in policy (with its blocklist), nothing else.
        let opts = cordon_policy::LoadOptions::new("/nonexistent", "/nonexistent", "/nonexistent");
        let mut p = cordon_policy::load(&opts).unwrap().plan;
        p.network.allow.push(HostRule {
            host: HostPattern::name("github.com", Bare::Exact).unwrap(),
            ports: vec![22, 443],
            origin: "t.toml:3".into(),
            expires: None,
            programs: Default::default(),
        });
        p.http.default = HttpAction::Deny;
        p.http.rules.push(HttpRule::new(
            "files",
            "files.example.org".parse().unwrap(),
            HttpAction::Allow,
        ));
        p
    }

    #[test]
    fn names_follow_rules_and_the_http_layer_takes_its_ports() {
        let p = plan();
        let v = explain_flow(&p, "github.com", 22, true, None).unwrap();
        assert!(
            v.allow && !v.http && v.rule.to_string().contains("t.toml:3"),
            "{v:?}"
        );
        let v = explain_flow(&p, "files.example.org", 443, true, None).unwrap();
        assert!(v.allow && v.http, "{v:?}");
        let v = explain_flow(&p, "files.example.org", 443, false, None).unwrap();
        assert!(!v.allow && v.rule == "network.default-deny", "{v:?}");
        let v = explain_flow(&p, "evil.example", 443, true, None).unwrap();
        assert!(!v.allow && v.rule == "http.default-deny", "{v:?}");
        let v = explain_flow(&p, "10.0.0.1", 443, true, None).unwrap();
        assert!(!v.allow && v.rule == "network.raw-ip", "{v:?}");
        let v = explain_flow(&p, "webhook.site", 443, true, None).unwrap();
        assert!(!v.allow && v.reason.contains("blocklist"), "{v:?}");
    }

    #[test]
    fn modes_decide_before_rules() {
        let mut p = plan();
        p.network.mode = NetMode::None;
        let v = explain_flow(&p, "github.com", 22, true, None).unwrap();
        assert!(!v.allow && v.rule == "network.mode");
    }

    #[test]
    fn flow_policy_decides_each_route_as_the_gateway_does() {
        let mut p = plan();
        p.network.allow.push(HostRule {
            host: HostPattern::name("files.example.org", Bare::Exact).unwrap(),
            ports: vec![8080],
            origin: "t.toml:9".into(),
            expires: None,
            programs: Default::default(),
        });
        let f = FlowPolicy::new(&p).unwrap();
        // A plain request through the proxy is the HTTP layer's on any port.
        let v = f.decide("files.example.org", 8080, Route::ProxyRequest, true, None);
        assert!(v.allow && v.http, "{v:?}");
        // The same port through the TUN or a CONNECT is decided by connection.
        for route in [Route::Tun, Route::ProxyConnect] {
            let v = f.decide("files.example.org", 8080, route, true, None);
            assert!(
                v.allow && !v.http && v.rule.to_string().contains("t.toml:9"),
                "{v:?}"
            );
        }
        let v = f.decide("evil.example", 8080, Route::ProxyRequest, true, None);
        assert_eq!(
            (v.allow, v.rule.to_string().as_str()),
            (false, "http.default-deny")
        );
        let v = f.decide("evil.example", 8080, Route::Tun, true, None);
        assert_eq!(
            (v.allow, v.rule.to_string().as_str()),
            (false, "network.default-deny")
        );
        assert_eq!(Route::from_via("proxy-http"), Some(Route::ProxyRequest));
        assert_eq!(Route::from_via("publish"), None);
    }
}
