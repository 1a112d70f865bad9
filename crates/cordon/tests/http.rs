//! The HTTP layer, black-box: rules, judge, ask, TLS interception, credentials, secret scanning.

mod common;

use std::process::Command;
use std::time::Duration;

use common::net::{
    PROXY, Server, UNPROXIED, https_443, make_repo, make_tls, policy, run, run_with, setup,
    spawn_run, variant_addr, wait_limited, www,
};
use common::{Env, approve, show, skip, wait_for_question};
use serde_json::Value;

// ---- HTTPS on 443: inspected by the HTTP layer ------------------------------------------------

both!(
    https_on_443_is_inspected_with_rules_and_cordons_ca,
    |env: Env| {
        if !common::need(&["openssl", "git", "curl"], "HTTPS on 443, inspected") {
            return;
        }
        // Port 443 needs root on the host side; each variant gets a loopback address of its own.
        let addr = &variant_addr(&env, 21);
        setup(&env);
        let name = "secure.example.test";
        let root = www(&env, "www443", "hello-inspected");
        assert!(make_repo(&root), "git repo setup failed");
        std::fs::create_dir_all(root.join("secret")).unwrap();
        std::fs::write(root.join("secret/token.txt"), "SHOULD-NOT-LEAVE").unwrap();
        env.own(&root);
        let Some((srv, ca)) = https_443(&env, name, addr, &root) else {
            return;
        };
        let pol = format!(
            "[dns]\nhosts = {{ \"{name}\" = \"{addr}\" }}\n\
         [[network.allow]]\nhost = \"{name}\"\nports = [443]\n\
         [[http.rule]]\nname = \"no-secrets\"\nhost = \"{name}\"\npath = \"/secret/*\"\n\
         action = \"deny\"\nreason = \"secrets stay on this side\"\n\
         [tls]\nupstream_ca = \"{}\"\n",
            ca.display()
        );
        let base = format!("https://{name}");
        // No --cacert anywhere: the sandbox trusts cordon's CA through its bundle.
        let script = [
        "echo VAR $SSL_CERT_FILE".to_string(),
        format!("echo CURL $(curl -sS --max-time 10 {base}/hello.txt)"),
        format!("echo CURL $({UNPROXIED} curl -sS --max-time 10 {base}/hello.txt)"),
        format!("echo H2 $({UNPROXIED} curl -sS --http2 --max-time 10 -o /dev/null -w '%{{http_version}}' {base}/hello.txt)"),
        format!("echo DENY $({UNPROXIED} curl -s --max-time 10 -o /dev/null -w '%{{http_code}}' {base}/secret/token.txt)"),
        format!("{UNPROXIED} curl -s --max-time 10 {base}/secret/token.txt | head -c 400; echo"),
        "export GIT_TERMINAL_PROMPT=0".to_string(),
        format!("timeout 30 git clone -q {base}/repo.git c1 && echo GIT $(cat c1/README)"),
        format!("{UNPROXIED} timeout 30 git clone -q {base}/repo.git c2 && echo GIT $(cat c2/README)"),
        "cat ~/.local/share/cordon/ca/ca-key.pem >/dev/null 2>&1 && echo KEY-READABLE || echo KEY-HIDDEN".to_string(),
        format!("echo ISSUER $(echo | {UNPROXIED} timeout 10 openssl s_client -connect {name}:443 -servername {name} 2>/dev/null | openssl x509 -noout -issuer)"),
    ]
    .join("\n");
        let o = run(&env, &pol, &script);
        let out = String::from_utf8_lossy(&o.stdout);
        let n = |l: &str| out.lines().filter(|x| *x == l).count();
        assert!(
            out.contains("VAR /etc/ssl/certs/ca-certificates.crt"),
            "{}",
            show(&o)
        );
        assert_eq!(n("CURL hello-inspected"), 2, "{}", show(&o));
        // The sandbox's client speaks HTTP/2 to cordon (the server behind speaks HTTP/1.1).
        assert_eq!(n("H2 2"), 1, "{}", show(&o));
        assert_eq!(n("DENY 403"), 1, "{}", show(&o));
        assert!(
            out.contains("no-secrets") && out.contains("secrets stay on this side"),
            "{}",
            show(&o)
        );
        assert!(!out.contains("SHOULD-NOT-LEAVE"), "{}", show(&o));
        assert_eq!(n("GIT repo-content"), 2, "{}", show(&o));
        assert_eq!(n("KEY-HIDDEN"), 1, "{}", show(&o));
        assert!(
            out.contains("cordon local interception CA"),
            "the sandbox saw another issuer: {}",
            show(&o)
        );
        // The secret never reached the server; the rest did, through cordon.
        assert_eq!(srv.count("REQ GET /secret"), 0, "{}", srv.log());
        assert!(srv.count("REQ GET /hello.txt") >= 2, "{}", srv.log());
        let log = std::fs::read_to_string(&env.audit).unwrap();
        let http: Vec<Value> = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["layer"] == "http")
            .collect();
        assert!(
            http.iter()
                .any(|e| e["action"] == "deny" && e["rule"] == "no-secrets"),
            "{http:?}"
        );
        assert!(
            http.iter()
                .any(|e| e["action"] == "allow" && e["detail"]["status"] == 200),
            "{http:?}"
        );
    }
);

both!(
    a_connect_tunnel_to_port_80_is_inspected_like_the_rest,
    |env: Env| {
        if !common::need(&["curl"], "this test's client") {
            return;
        }
        let addr = &variant_addr(&env, 29);
        if std::net::TcpListener::bind((addr.as_str(), 80)).is_err() {
            skip(
                "root (port 80)",
                &format!("a server on {addr}:80 (the test process is not root)"),
            );
            return;
        }
        setup(&env);
        let name = "plain.example.test";
        let root = www(&env, "plain80", "hello-80");
        std::fs::create_dir_all(root.join("secret")).unwrap();
        std::fs::write(root.join("secret/x.txt"), "SHOULD-NOT-LEAVE").unwrap();
        env.own(&root);
        let srv = Server::start(&[
            "http",
            root.to_str().unwrap(),
            "--addr",
            addr,
            "--port",
            "80",
        ]);
        let pol = format!(
            "[dns]\nhosts = {{ \"{name}\" = \"{addr}\" }}\n\
         [[network.allow]]\nhost = \"{name}\"\nports = [80]\n\
         [[http.rule]]\nname = \"no-secrets\"\nhost = \"{name}\"\npath = \"/secret*\"\naction = \"deny\"\n"
        );
        let tunnel =
            format!("curl -s -p -x {PROXY} --max-time 10 -o /dev/null -w '%{{http_code}}'");
        let script = [
            format!("echo OK $({tunnel} http://{name}/hello.txt)"),
            format!("echo SECRET $({tunnel} http://{name}/secret/x.txt)"),
            format!("echo ENCODED $({tunnel} http://{name}/%73ecret/x.txt)"),
            format!(
                "echo FRONTED $({tunnel} -H 'Host: evil.example.test' http://{name}/hello.txt)"
            ),
        ]
        .join("\n");
        let o = run(&env, &pol, &script);
        let out = String::from_utf8_lossy(&o.stdout);
        for want in ["OK 200", "SECRET 403", "ENCODED 403", "FRONTED 421"] {
            assert!(out.lines().any(|l| l == want), "{want}: {}", show(&o));
        }
        assert_eq!(srv.count("REQ GET /secret"), 0, "{}", srv.log());
    }
);

both!(
    credentials_are_swapped_in_at_the_wire_and_never_held_inside,
    |env: Env| {
        if !common::need(&["curl"], "this test's client") {
            return;
        }
        let addr = &variant_addr(&env, 31);
        setup(&env);
        let root = www(&env, "creds", "hello-creds");
        let Some((srv, ca)) = https_443(&env, "api.example.test", addr, &root) else {
            return;
        };
        // The server's certificate names api.example.test only; "other" is the same server by
        // another allowed name, reached over plain HTTP through the proxy.
        let plain = Server::http(&root);
        let real = "REAL-SECRET-VALUE-0123456789abcdef";
        let gh = "ghs-real-token-0123456789";
        let filed = "FILED-SECRET-0123456789";
        // A tool's token file in a masked directory (shown as a masked copy), a sibling that
        // stays hidden, and a key file used as a source (hidden).
        let gh_dir = env.home.join(".config/gh");
        std::fs::create_dir_all(&gh_dir).unwrap();
        std::fs::write(
            gh_dir.join("hosts.yml"),
            format!("github.com:\n    oauth_token: {gh}\n    user: me\n"),
        )
        .unwrap();
        std::fs::write(gh_dir.join("config.yml"), "editor: vi\n").unwrap();
        std::fs::create_dir_all(env.home.join("keys")).unwrap();
        std::fs::write(env.home.join("keys/filed"), format!("{filed}\n")).unwrap();
        // A file holding a credential's value and another secret no credential covers: it
        // is never shown, masked or not.
        let other_token = format!("ghp_{}", "z9".repeat(18));
        std::fs::write(
            env.home.join(".netrc"),
            format!(
                "machine a login x password {real}\nmachine b login y password {other_token}\n"
            ),
        )
        .unwrap();
        env.own(&env.home);
        let pol = format!(
            "[dns]\nhosts = {{ \"api.example.test\" = \"{addr}\", \"other.example.test\" = \"127.0.0.1\" }}\n\
         [[network.allow]]\nhost = \"api.example.test\"\nports = [443]\n\
         [[network.allow]]\nhost = \"other.example.test\"\nports = [{}]\n\
         [tls]\nupstream_ca = \"{}\"\n\
         [credentials.demo]\nenv = \"DEMO_KEY\"\nsource = {{ env = \"CORDON_TEST_REAL_KEY\" }}\n\
         hosts = [\"api.example.test\"]\nheader = \"x-api-key\"\n\
         [credentials.gh]\nenv = \"GH_TOKEN\"\nsource = {{ command = [\"printf\", \"{gh}\"] }}\n\
         hosts = [\"api.example.test\"]\nheader = \"authorization\"\n\
         format = \"Basic x-access-token:{{}}\"\ninject = true\nfiles = [\"~/.config/gh/hosts.yml\"]\n\
         [credentials.filed]\nenv = \"FILED_KEY\"\nsource = {{ file = \"~/keys/filed\" }}\n\
         hosts = [\"api.example.test\"]\nheader = \"x-filed\"\n\
         [credentials.netrc]\nsource = {{ env = \"CORDON_TEST_REAL_KEY\" }}\nhosts = [\"api.example.test\"]\n\
         header = \"x-netrc\"\nfiles = [\"~/.netrc\"]\n",
            plain.port,
            ca.display()
        );
        // The secrets themselves never appear in the script (it is logged): their hashes do.
        let sha = |v: &str| {
            let o = Command::new("sh")
                .args(["-c", &format!("printf '%s' '{v}' | sha256sum | cut -c1-64")])
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        };
        let (h1, h2, h3) = (sha(real), sha(gh), sha(filed));
        // Reversed, so the script names no value; decoded only after the /proc check, and
        // only to search every readable file of the home, project, /tmp and /etc for them.
        let rev = |v: &str| v.chars().rev().collect::<String>();
        let script = format!(
            "echo KEY ${{DEMO_KEY%%-*}} ${{#DEMO_KEY}}\n\
         echo ENVHITS $(for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f 2>/dev/null; done \
           | while IFS= read -r l; do printf '%s' \"${{l#*=}}\" | sha256sum; printf '%s' \"$l\" | sha256sum; done \
           | grep -c -e {h1} -e {h2} -e {h3})\n\
         echo GHFILE $(grep -c \"oauth_token: $GH_TOKEN\" ~/.config/gh/hosts.yml) $(ls -A ~/.config/gh | tr '\\n' ' ')\n\
         echo KEYFILE $(cat ~/keys/filed >/dev/null 2>&1 && echo readable || echo hidden)\n\
         echo NETRC $(grep -c machine ~/.netrc 2>/dev/null || echo hidden)\n\
         echo CONTROL $(printf '%s\\n' \"$GH_TOKEN\" | grep -rlF -f - \"$HOME\" 2>/dev/null | wc -l)\n\
         echo FILEHITS $(printf '%s\\n' {r1} {r2} {r3} | rev | grep -rlF -f - \"$HOME\" \"$PWD\" /tmp /etc 2>/dev/null | wc -l)\n\
         echo OK $({UNPROXIED} curl -sS --max-time 10 -H \"x-api-key: $DEMO_KEY\" https://api.example.test/hello.txt)\n\
         echo LEAK-HOST $(curl -s --max-time 10 -o /dev/null -w '%{{http_code}}' -H \"x-api-key: $DEMO_KEY\" http://other.example.test:{}/hello.txt)\n\
         echo LEAK-HEADER $({UNPROXIED} curl -s --max-time 10 -o /dev/null -w '%{{http_code}}' -H \"x-other: $DEMO_KEY\" https://api.example.test/hello.txt)\n\
         echo LEAK-URL $({UNPROXIED} curl -s --max-time 10 -o /dev/null -w '%{{http_code}}' \"https://api.example.test/hello.txt?k=$DEMO_KEY\")",
            plain.port,
            r1 = rev(real),
            r2 = rev(gh),
            r3 = rev(filed),
        );
        let o = run_with(&env, &pol, &script, &[("CORDON_TEST_REAL_KEY", real)]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&format!("KEY cordon {}", real.len())),
            "{}",
            show(&o)
        );
        assert!(out.lines().any(|l| l == "ENVHITS 0"), "{}", show(&o));
        assert!(
            out.lines().any(|l| l == "GHFILE 1 hosts.yml"),
            "the token file is a masked copy, alone in its directory: {}",
            show(&o)
        );
        assert!(out.lines().any(|l| l == "KEYFILE hidden"), "{}", show(&o));
        assert!(
            out.lines().any(|l| l == "NETRC hidden" || l == "NETRC 0"),
            "a file with a secret no credential covers stays masked: {}",
            show(&o)
        );
        assert!(
            out.lines().any(|l| l == "CONTROL 1"),
            "the search finds the placeholder's copy: {}",
            show(&o)
        );
        assert!(out.lines().any(|l| l == "FILEHITS 0"), "{}", show(&o));
        assert!(out.lines().any(|l| l == "OK hello-creds"), "{}", show(&o));
        for want in ["LEAK-HOST 403", "LEAK-HEADER 403", "LEAK-URL 403"] {
            assert!(out.lines().any(|l| l == want), "{want}: {}", show(&o));
        }
        assert!(
            !out.contains(real) && !out.contains(gh) && !out.contains(filed),
            "{}",
            show(&o)
        );
        // The server got the real values — the swapped one and the injected one — and never a
        // placeholder; the other host got nothing.
        let log = srv.log();
        assert!(log.contains(&format!("HDR x-api-key: {real}")), "{log}");
        let basic = {
            let o = Command::new("sh")
                .args(["-c", &format!("printf 'x-access-token:{gh}' | base64")])
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        };
        assert!(
            log.contains(&format!("HDR authorization: Basic {basic}")),
            "{log}"
        );
        assert!(!log.contains("cordon-"), "{log}");
        assert_eq!(plain.count("REQ"), 0, "{}", plain.log());
        let audit = std::fs::read_to_string(&env.audit).unwrap();
        assert!(audit.contains("credential-leak:demo"), "{audit}");
        assert!(
            !audit.contains(real) && !audit.contains(gh),
            "the audit log holds a secret"
        );
    }
);

both!(
    secret_scanning_stops_tokens_and_host_secrets_leaving,
    |env: Env| {
        if !common::need(&["curl"], "this test's client") {
            return;
        }
        let addr = &variant_addr(&env, 33);
        setup(&env);
        let root = www(&env, "dlp", "hello-dlp");
        let Some((srv, ca)) = https_443(&env, "api.example.test", addr, &root) else {
            return;
        };
        // A host variable that holds a secret (never passed in), and a project file that
        // happens to hold the same value: the agent found it and tries to send it.
        let db = "db-Pass-0123456789abcdef";
        env.write(".env", &format!("DB_PASSWORD={db}\n"));
        env.write(
            "package-lock.json",
            r#"{"packages": {"node_modules/left-pad": {"version": "1.3.0", "integrity": "sha512-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQ9Zc+JvMJ7nv7yrYzwk3M5FLAZBd03fV9rH0hwW8rtrG1PQ=="}}}"#,
        );
        let ghp = format!("ghp_{}", "a1".repeat(18));
        let aws = format!("AKIA{}", "Q".repeat(16));
        let pol = format!(
            "[dns]\nhosts = {{ \"api.example.test\" = \"{addr}\" }}\n\
             [[network.allow]]\nhost = \"api.example.test\"\nports = [443]\n\
             [tls]\nupstream_ca = \"{}\"\n",
            ca.display()
        );
        let code = |args: &str| {
            format!(
                "$(curl -s --max-time 10 -o /dev/null -w '%{{http_code}}' {args} https://api.example.test/hello.txt)"
            )
        };
        let script = [
            format!("echo GH-HEADER {}", code(&format!("-H 'x-note: {ghp}'"))),
            format!(
                "echo AWS-URL $(curl -s --max-time 10 -o /dev/null -w '%{{http_code}}' 'https://api.example.test/hello.txt?k={aws}')"
            ),
            format!("echo DOTENV-BODY {}", code("--data-binary @.env")),
            format!(
                "echo DIRECT {}",
                code("--noproxy '*' --data-binary @.env").replace("$(curl", &format!("$({UNPROXIED} curl"))
            ),
            // A token in the path, straight through the TUN: refused, and neither the URL nor
            // curl's command line reaches the audit log unredacted.
            format!(
                "echo PATH-TOKEN $({UNPROXIED} curl -s --max-time 10 -o /dev/null -w '%{{http_code}}' https://api.example.test/{ghp}/x)"
            ),
            // Clean traffic passes, whole.
            format!("echo CLEAN-POST {}", code("-H 'content-type: application/json' --data-binary @package-lock.json")),
            "echo CLEAN-GET $(curl -sS --max-time 10 https://api.example.test/hello.txt)".to_string(),
        ]
        .join("\n");
        // From a file: the command line cordon logs holds no secret of the test's own.
        env.write("leak.sh", &script);
        let o = run_with(&env, &pol, "sh leak.sh", &[("CORDON_TEST_DB_PASSWORD", db)]);
        let out = String::from_utf8_lossy(&o.stdout);
        for want in [
            "GH-HEADER 403",
            "AWS-URL 403",
            "DOTENV-BODY 403",
            "DIRECT 403",
            "PATH-TOKEN 403",
            "CLEAN-POST 200",
            "CLEAN-GET hello-dlp",
        ] {
            assert!(out.lines().any(|l| l == want), "{want}: {}", show(&o));
        }
        // Only the clean requests reached the server, the clean body whole; of a refused
        // body the server may have seen the request line, never a byte of the body.
        assert_eq!(srv.count("REQ GET /hello.txt"), 1, "{}", srv.log());
        let lock_len = std::fs::metadata(env.project.join("package-lock.json"))
            .unwrap()
            .len()
            .to_string();
        let posted: Vec<String> = srv
            .log()
            .lines()
            .filter_map(|l| l.strip_prefix("POST /hello.txt ").map(str::to_string))
            .collect();
        assert_eq!(
            posted.iter().filter(|n| **n == lock_len).count(),
            1,
            "{}",
            srv.log()
        );
        assert!(
            posted.iter().all(|n| *n == lock_len || n == "0"),
            "a refused body reached the server: {}",
            srv.log()
        );
        let audit = std::fs::read_to_string(&env.audit).unwrap();
        for rule in [
            "dlp:github-token",
            "dlp:aws-access-key",
            "dlp:known:CORDON_TEST_DB_PASSWORD",
        ] {
            assert!(audit.contains(rule), "{rule}: {audit}");
        }
        let holding: Vec<&str> = audit
            .lines()
            .filter(|l| l.contains(&ghp[4..]) || l.contains(&aws[4..]) || l.contains(db))
            .collect();
        assert!(
            holding.is_empty(),
            "the audit log holds a secret: {holding:#?}"
        );
    }
);

both!(
    git_push_over_https_carries_a_token_the_sandbox_never_held,
    |env: Env| {
        if !common::need(&["git", "openssl"], "git push over HTTPS") {
            return;
        }
        let addr = &variant_addr(&env, 35);
        setup(&env);
        if std::net::TcpListener::bind((addr.as_str(), 443)).is_err() {
            skip(
                "root (port 443)",
                &format!("an HTTPS server on {addr}:443 (the test process is not root)"),
            );
            return;
        }
        let name = "git.example.test";
        let tls = env.base.join(format!("tls-git-{addr}"));
        assert!(make_tls(&tls, name), "openssl failed");
        let repos = env.base.join("repos");
        std::fs::create_dir_all(&repos).unwrap();
        let bare = repos.join("repo.git");
        let o = Command::new("git")
            .args(["init", "-q", "--bare", "-b", "main"])
            .arg(&bare)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", show(&o));
        let token = "ghs_gitTokenForTheTest0123456789abcdef";
        let auth = format!("x-access-token:{token}");
        let srv = Server::start(&[
            "git",
            repos.to_str().unwrap(),
            "--auth",
            &auth,
            "--addr",
            addr,
            "--port",
            "443",
            "--tls",
            tls.join("srv.pem").to_str().unwrap(),
            tls.join("srv.key").to_str().unwrap(),
        ]);
        let pol = format!(
            "[dns]\nhosts = {{ \"{name}\" = \"{addr}\" }}\n\
             [[network.allow]]\nhost = \"{name}\"\nports = [443]\n\
             [tls]\nupstream_ca = \"{}\"\n\
             [credentials.github]\nenv = \"GH_TOKEN\"\nsource = {{ env = \"CORDON_TEST_GH_TOKEN\" }}\n\
             hosts = [\"{name}\"]\nheader = \"authorization\"\n\
             format = \"Basic x-access-token:{{}}\"\ninject = true\n",
            tls.join("ca.pem").display()
        );
        let script = format!(
            "echo HOLDS ${{GH_TOKEN%%_*}} ${{#GH_TOKEN}}\n\
             git init -q -b main work && cd work && echo hi > f && git add f && \
             git -c user.name=t -c user.email=t@example.test commit -q -m from-the-sandbox && \
             git push https://{name}/repo.git HEAD:main 2>&1; echo PUSH $?\n\
             git ls-remote https://{name}/repo.git 2>&1 | grep -c refs/heads/main | sed 's/^/REMOTE /'"
        );
        let o = run_with(&env, &pol, &script, &[("CORDON_TEST_GH_TOKEN", token)]);
        let out = String::from_utf8_lossy(&o.stdout);
        // A placeholder in the token's own shape (prefix and length), never the token.
        let holds = format!("HOLDS ghs {}", token.len());
        for want in [holds.as_str(), "PUSH 0", "REMOTE 1"] {
            assert!(out.lines().any(|l| l == want), "{want}: {}", show(&o));
        }
        assert!(!out.contains(token), "{}", show(&o));
        let log = Command::new("git")
            .arg("--git-dir")
            .arg(&bare)
            .args(["log", "--format=%s", "main"])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&log.stdout).trim(),
            "from-the-sandbox"
        );
        // Every request carried the real token (the server refuses anything else), including
        // the push itself.
        assert!(
            srv.count("AUTH ok POST /repo.git/git-receive-pack") >= 1,
            "{}",
            srv.log()
        );
        assert_eq!(srv.count("AUTH bad"), 0, "{}", srv.log());
        let audit = std::fs::read_to_string(&env.audit).unwrap();
        assert!(!audit.contains(token), "the audit log holds the token");
    }
);

both!(
    credential_files_stay_hidden_without_the_http_layer,
    |env: Env| {
        // No gateway, no HTTP layer: no placeholder either, and the source and listed files
        // are still hidden (they would otherwise be plain readable files of the home).
        std::fs::write(env.home.join("src.key"), "source-secret-0123456789\n").unwrap();
        std::fs::write(
            env.home.join("tool.json"),
            "{\"token\": \"source-secret-0123456789\"}\n",
        )
        .unwrap();
        env.own(&env.home);
        let pol = "[network]\nmode = \"none\"\n\
             [credentials.tool]\nenv = \"TOOL_KEY\"\nsource = { file = \"~/src.key\" }\n\
             hosts = [\"api.example.test\"]\nfiles = [\"~/tool.json\"]\n";
        let o = run(
            &env,
            pol,
            "for f in ~/src.key ~/tool.json; do cat $f >/dev/null 2>&1 && echo SEEN $f || echo HIDDEN; done; echo KEY=${TOOL_KEY:-unset}",
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(out.matches("HIDDEN").count(), 2, "{}", show(&o));
        assert!(out.contains("KEY=unset"), "{}", show(&o));
        assert!(!out.contains("source-secret"), "{}", show(&o));
    }
);

both!(passthrough_hosts_are_never_intercepted, |env: Env| {
    if !common::need(&["curl"], "this test's client") {
        return;
    }
    setup(&env);
    let name = "pinned.example.test";
    let addr = &variant_addr(&env, 25);
    let root = www(&env, "pinned", "hello-pinned");
    let Some((srv, ca)) = https_443(&env, name, addr, &root) else {
        return;
    };
    env.write("pinned-ca.pem", &std::fs::read_to_string(&ca).unwrap());
    let pol = format!(
        "[dns]\nhosts = {{ \"{name}\" = \"{addr}\" }}\n\
         [[network.allow]]\nhost = \"{name}\"\nports = [443]\n\
         [tls]\npassthrough = [\"*.example.test\"]\n"
    );
    // The client pins the server's own CA: that only works if cordon stays out of the way.
    let script = [
        format!("echo A $({UNPROXIED} curl -sS --max-time 10 --cacert pinned-ca.pem https://{name}/hello.txt)"),
        format!("echo B $(curl -sS --max-time 10 --cacert pinned-ca.pem https://{name}/hello.txt)"),
    ]
    .join("\n");
    let o = run(&env, &pol, &script);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.lines().any(|l| l == "A hello-pinned"), "{}", show(&o));
    assert!(out.lines().any(|l| l == "B hello-pinned"), "{}", show(&o));
    assert!(srv.count("REQ GET /hello.txt") >= 2, "{}", srv.log());
});

both!(the_judge_decides_what_a_rule_sends_it, |env: Env| {
    if !common::need(&["curl"], "this test's client") {
        return;
    }
    setup(&env);
    let root = www(&env, "judged", "unused");
    std::fs::create_dir_all(root.join("judged")).unwrap();
    std::fs::write(root.join("judged/ok.txt"), "judged-ok").unwrap();
    std::fs::write(root.join("judged/no.txt"), "judged-no").unwrap();
    env.own(&root);
    let srv = Server::http(&root);
    let judge = Server::start(&["judge"]);
    let name = "api.example.test";
    let p = srv.port;
    let pol = format!(
        "[dns]\nhosts = {{ \"{name}\" = \"127.0.0.1\" }}\n\
         [[network.allow]]\nhost = \"{name}\"\nports = [{p}]\n\
         [[http.rule]]\nname = \"ask-the-judge\"\nhost = \"{name}\"\npath = \"/judged/*\"\naction = \"judge\"\n\
         [judge]\napi = \"openai\"\nurl = \"http://127.0.0.1:{}\"\nmodel = \"fake\"\n\
         policy = \"Reading public files is fine.\"\n",
        judge.port
    );
    // Plain requests through the explicit proxy are decided request by request.
    let script = [
        format!("echo OK $(curl -sS --max-time 10 http://{name}:{p}/judged/ok.txt)"),
        format!("echo NO $(curl -s --max-time 10 -o /dev/null -w '%{{http_code}}' http://{name}:{p}/judged/no.txt)"),
        format!("curl -s --max-time 10 http://{name}:{p}/judged/no.txt; echo"),
    ]
    .join("\n");
    let o = run(&env, &pol, &script);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.lines().any(|l| l == "OK judged-ok"), "{}", show(&o));
    assert!(out.lines().any(|l| l == "NO 403"), "{}", show(&o));
    assert!(
        out.contains("not something this project needs"),
        "{}",
        show(&o)
    );
    assert!(
        judge.count("JUDGE http://api.example.test") >= 2,
        "{}",
        judge.log()
    );
    assert_eq!(srv.count("REQ GET /judged/no.txt"), 0, "{}", srv.log());
});

both!(ask_holds_a_request_for_cordon_approve, |env: Env| {
    if !common::need(&["curl"], "this test's client") {
        return;
    }
    setup(&env);
    let root = www(&env, "asked", "unused");
    std::fs::create_dir_all(root.join("ask")).unwrap();
    for f in ["a", "b", "c"] {
        std::fs::write(root.join(format!("ask/{f}.txt")), format!("asked-{f}")).unwrap();
    }
    env.own(&root);
    let srv = Server::http(&root);
    let name = "api.example.test";
    let p = srv.port;
    let pol = policy(
        &env,
        &format!(
            "[dns]\nhosts = {{ \"{name}\" = \"127.0.0.1\" }}\n\
             [[network.allow]]\nhost = \"{name}\"\nports = [{p}]\n\
             [[http.rule]]\nname = \"a-person-decides\"\nhost = \"{name}\"\npath = \"/ask/*\"\naction = \"ask\"\n\
             [exec]\nask_timeout = 3\nask = [\"touch asked-exec\"]\n"
        ),
    );
    let get = |f: &str| {
        format!(
            "echo {f} $(curl -s --max-time 30 -w ' %{{http_code}}' http://{name}:{p}/ask/{f}.txt | tail -c 60)"
        )
    };
    let exec = "touch asked-exec && echo exec ran".to_string();
    let child = spawn_run(
        &env,
        &pol,
        &[exec, get("a"), get("b"), get("c"), get("a"), get("a")].join("\n"),
    );
    // Both layers ask through the session's one broker: one session in the list.
    let session_of = |listing: &str, needle: &str| {
        let line = listing
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_default();
        line.split('#')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let (id, listing) = wait_for_question(&env, "touch asked-exec");
    let exec_session = session_of(&listing, "touch asked-exec");
    let o = approve(&env, &[&id, "--allow"]);
    assert!(o.status.success(), "{}", show(&o));
    let (id, listing) = wait_for_question(&env, "/ask/a.txt");
    assert!(listing.contains("a-person-decides"), "{listing}");
    // The question names method, host and path.
    assert!(
        listing
            .lines()
            .any(|l| l.contains(&format!("GET http://{name}:{p}/ask/a.txt"))),
        "{listing}"
    );
    assert_eq!(
        session_of(&listing, "/ask/a.txt"),
        exec_session,
        "{listing}"
    );
    assert_eq!(
        srv.count("REQ GET /ask/a.txt"),
        0,
        "held, not forwarded yet"
    );
    let o = approve(&env, &[&id, "--allow"]);
    assert!(o.status.success(), "{}", show(&o));
    let (id, _) = wait_for_question(&env, "/ask/b.txt");
    let o = approve(&env, &[&id, "--deny"]);
    assert!(o.status.success(), "{}", show(&o));
    // c: nobody answers; the 3 s timeout denies. Then a again: allowed for the rest of the
    // session, so the last one is not asked at all.
    let (id, _) = wait_for_question(&env, "/ask/a.txt");
    let o = approve(&env, &[&id, "--allow", "--remember"]);
    assert!(o.status.success(), "{}", show(&o));
    let o = wait_limited(child, Duration::from_secs(60));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.lines().any(|l| l == "exec ran"), "{}", show(&o));
    assert_eq!(
        out.lines().filter(|l| *l == "a asked-a 200").count(),
        3,
        "{}",
        show(&o)
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("b ") && l.ends_with(" 403")),
        "{}",
        show(&o)
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("c ") && l.ends_with(" 403")),
        "{}",
        show(&o)
    );
    assert_eq!(srv.count("REQ GET /ask/a.txt"), 3, "{}", srv.log());
    assert_eq!(srv.count("REQ GET /ask/b.txt"), 0, "{}", srv.log());
    assert_eq!(srv.count("REQ GET /ask/c.txt"), 0, "{}", srv.log());
    let log = std::fs::read_to_string(&env.audit).unwrap();
    assert!(log.contains("a person allowed it"), "{log}");
    assert!(log.contains("nobody answered in time"), "{log}");
    assert!(
        log.contains("allowed it for the rest of the session"),
        "{log}"
    );
});
