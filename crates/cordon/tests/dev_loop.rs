//! Package managers and the dev loop through the gateway, against local stand-in registries.

mod common;

use std::path::Path;
use std::process::Command;

use common::net::{
    FIXTURES, PY, Server, UNPROXIED, https_443, make_fixture, named, run, setup, variant_addr,
};
use common::{Env, have, show, skip};

// ---- local registries over plain HTTP ---------------------------------------------------------

both!(pip_download_from_a_local_index, |env: Env| {
    let pip_ok = Command::new(PY)
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !pip_ok {
        skip("pip", &format!("pip download (no pip for {PY})"));
        return;
    }
    setup(&env);
    let root = env.base.join("pypi");
    let o = Command::new(PY)
        .arg(format!("{FIXTURES}/netfix.py"))
        .args(["wheel", root.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let wheel = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let srv = Server::http(&root);
    let name = "pypi.example.test";
    let pol = named(&[name], &[(name, &[srv.port])], "");
    let pip = format!(
        "timeout 60 {PY} -m pip download --no-deps --no-cache-dir --disable-pip-version-check \
         --no-input --timeout 10 --retries 0 --trusted-host {name} \
         --index-url http://{name}:{}/simple/ cordonprobe",
        srv.port
    );
    let o = run(
        &env,
        &pol,
        &format!("{pip} -d dl1 >&2 && ls dl1 && {UNPROXIED} {pip} -d dl2 >&2 && ls dl2"),
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{wheel}\n{wheel}\n"),
        "{}",
        show(&o)
    );
    for d in ["dl1", "dl2"] {
        assert!(env.project.join(d).join(&wheel).exists(), "{d}/{wheel}");
    }
    assert!(
        srv.count(&format!("REQ GET /files/{wheel}")) >= 2,
        "{}",
        srv.log()
    );
});

both!(npm_install_from_a_local_registry, |env: Env| {
    let npm_ok = Command::new("npm")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !npm_ok {
        skip("npm", "npm install");
        return;
    }
    setup(&env);
    let root = env.base.join("npm");
    std::fs::create_dir_all(&root).unwrap();
    let srv = Server::http(&root);
    let name = "npm.example.test";
    let url = format!("http://{name}:{}", srv.port);
    make_fixture(&["npm", root.to_str().unwrap(), &url]);
    env.own(&root);
    let pol = named(&[name], &[(name, &[srv.port])], "");
    // Two fresh projects: one through the proxy variables, one without them.
    let npm = |dir: &str, prefix: &str| {
        format!(
            "mkdir -p {dir} && cd {dir} && echo '{{}}' > package.json && \
             {prefix} timeout 90 npm install --registry {url}/ --cache ../npmcache-{dir} \
             --no-audit --no-fund --no-update-notifier --fetch-retries 0 cordonprobe >&2 && \
             node -e \"console.log(require('cordonprobe').probe)\" && cd .."
        )
    };
    let o = run(
        &env,
        &pol,
        &format!("{} && {}", npm("n1", ""), npm("n2", UNPROXIED)),
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "cordon-npm-ok\ncordon-npm-ok\n",
        "{}",
        show(&o)
    );
    assert!(
        srv.count("REQ GET /tarballs/cordonprobe-0.1.0.tgz") >= 2,
        "{}",
        srv.log()
    );
});

// ---- registries over inspected HTTPS on 443 -------------------------------------------------

both!(pip_and_npm_install_over_inspected_https, |env: Env| {
    let npm = Command::new("npm")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let pip = Command::new(PY)
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !npm || !pip {
        skip(
            if npm { "pip" } else { "npm" },
            "pip and npm over inspected HTTPS",
        );
        return;
    }
    setup(&env);
    let name = "pkgs.example.test";
    let addr = &variant_addr(&env, 23);
    let root = env.base.join("pkgs443");
    std::fs::create_dir_all(&root).unwrap();
    make_fixture(&["wheel", root.to_str().unwrap()]);
    make_fixture(&["npm", root.to_str().unwrap(), "https://pkgs.example.test"]);
    env.own(&root);
    let Some((srv, ca)) = https_443(&env, name, addr, &root) else {
        return;
    };
    let pol = format!(
        "[dns]\nhosts = {{ \"{name}\" = \"{addr}\" }}\n\
         [[network.allow]]\nhost = \"{name}\"\nports = [443]\n\
         [tls]\nupstream_ca = \"{}\"\n",
        ca.display()
    );
    // No certificate flags: pip (PIP_CERT) and npm (NODE_EXTRA_CA_CERTS) trust the bundle.
    let script = format!(
        "timeout 90 {PY} -m pip download --no-deps --no-cache-dir --disable-pip-version-check \
           --no-input --timeout 20 --retries 0 --index-url https://{name}/simple/ cordonprobe -d dl >&2 \
           && ls dl | sed 's/^/PIP /'\n\
         mkdir n && cd n && echo '{{}}' > package.json && {UNPROXIED} timeout 90 npm install \
           --registry https://{name}/ --cache ../npmcache --no-audit --no-fund --no-update-notifier \
           --fetch-retries 0 cordonprobe >&2 && node -e \"console.log('NPM', require('cordonprobe').probe)\""
    );
    let o = run(&env, &pol, &script);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("PIP cordonprobe-0.1-py3-none-any.whl"),
        "{}",
        show(&o)
    );
    assert!(out.contains("NPM cordon-npm-ok"), "{}", show(&o));
    assert!(
        srv.count("REQ GET /tarballs/cordonprobe-0.1.0.tgz") >= 1,
        "{}",
        srv.log()
    );
    let log = std::fs::read_to_string(&env.audit).unwrap();
    assert!(
        log.contains("\"layer\":\"http\""),
        "requests went through the HTTP layer"
    );
});

both!(
    cargo_fetch_from_a_sparse_registry_over_inspected_https,
    |env: Env| {
        // Sparse registries need cargo 1.68 or newer (the unprivileged variant may only have
        // the distribution's older cargo).
        let cargo_ok = env
            .cordon()
            .args(["run", "--no-tty", "--", "cargo", "--version"])
            .output()
            .ok()
            .and_then(|o| {
                let v = String::from_utf8_lossy(&o.stdout).to_string();
                let minor: u32 = v.split('.').nth(1)?.parse().ok()?;
                Some(minor >= 68)
            })
            .unwrap_or(false);
        if !cargo_ok {
            skip(
                "cargo-1.68",
                "cargo and a sparse registry (no cargo >= 1.68 for this user)",
            );
            return;
        }
        setup(&env);
        let name = "crates.example.test";
        let addr = &variant_addr(&env, 27);
        let root = env.base.join("crates443");
        std::fs::create_dir_all(&root).unwrap();
        make_fixture(&["crates", root.to_str().unwrap(), &format!("https://{name}")]);
        env.own(&root);
        let Some((srv, ca)) = https_443(&env, name, addr, &root) else {
            return;
        };
        env.write(
            "fetchme/Cargo.toml",
            "[package]\nname = \"fetchme\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
         [dependencies]\ncordonprobe = { version = \"0.1\", registry = \"local\" }\n",
        );
        env.write("fetchme/src/lib.rs", "");
        env.write(
            "fetchme/.cargo/config.toml",
            &format!("[registries.local]\nindex = \"sparse+https://{name}/\"\n"),
        );
        let pol = format!(
            "[dns]\nhosts = {{ \"{name}\" = \"{addr}\" }}\n\
         [[network.allow]]\nhost = \"{name}\"\nports = [443]\n\
         [tls]\nupstream_ca = \"{}\"\n",
            ca.display()
        );
        // No certificate flags: cargo trusts the bundle through CARGO_HTTP_CAINFO.
        let script = "cd fetchme && CARGO_HOME=$PWD/../cargo-home timeout 120 cargo fetch >&2 \
                  && find ../cargo-home -name lib.rs -path '*cordonprobe*' -exec cat {} +";
        let o = run(&env, &pol, script);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("cordon-crate-ok"), "{}", show(&o));
        assert!(
            srv.count("REQ GET /dl/cordonprobe/0.1.0/download") >= 1,
            "{}",
            srv.log()
        );
    }
);

// The everyday loop on the built-in policy with a fresh home: `git config --global` and a
// commit, `npm install`, `pip install` into a venv, `cargo build` with a registry dependency,
// then a second session that finds the package caches warm — with the host's home
// byte-identical outside the project and cordon's own directories. The registries are local
// stand-ins on loopback under their real names (`[dns] hosts`, `[tls] upstream_ca`); the
// clients use their default registry URLs and cache locations.
both!(the_dev_loop_works_in_a_fresh_home, |env: Env| {
    let npm = have("npm");
    if !npm || !Path::new(PY).exists() {
        skip(if npm { PY } else { "npm" }, "the dev loop");
        return;
    }
    setup(&env);
    // Debian 12's cargo (the unprivileged variant's, 1.65) predates sparse registries: it reads
    // the crate from a local registry instead, which it extracts into ~/.cargo/registry all
    // the same (the write a read-only home refused).
    // Cargo's default home, not the one rustup hands the test runner.
    let cargo_line = if env.who == common::Who::Root && Path::new("/root/.rustup").is_dir() {
        "env RUSTUP_HOME=/root/.rustup CARGO_HOME=$HOME/.cargo cargo"
    } else {
        "env CARGO_HOME=$HOME/.cargo cargo"
    };
    let minor = env
        .cordon()
        .args(["run", "--no-tty", "--", "sh", "-c"])
        .arg(format!("{cargo_line} --version"))
        .output()
        .ok()
        .and_then(|o| {
            let v = String::from_utf8_lossy(&o.stdout).to_string();
            v.split('.').nth(1)?.parse::<u32>().ok()
        });
    let Some(minor) = minor else {
        skip("cargo", "the dev loop (no cargo for this user)");
        return;
    };
    let sparse_cargo = minor >= 68;
    let mut servers = Vec::new();
    let mut hosts = Vec::new();
    let mut cas = Vec::new();
    for (i, (name, kind)) in [
        ("registry.npmjs.org", "npm"),
        ("pypi.org", "wheel"),
        ("index.crates.io", "crates"),
    ]
    .iter()
    .enumerate()
    {
        let addr = variant_addr(&env, 50 + 2 * i as u8);
        let root = env.base.join(format!("reg-{kind}"));
        std::fs::create_dir_all(&root).unwrap();
        if *kind == "wheel" {
            make_fixture(&["wheel", root.to_str().unwrap()]);
        } else {
            make_fixture(&[kind, root.to_str().unwrap(), &format!("https://{name}")]);
        }
        env.own(&root);
        let Some((srv, ca)) = https_443(&env, name, &addr, &root) else {
            return;
        };
        servers.push(srv);
        hosts.push(format!("\"{name}\" = \"{addr}\""));
        cas.push(format!("\"{}\"", ca.display()));
    }
    let pol = format!(
        "[dns]\nhosts = {{ {} }}\n[tls]\nupstream_ca = [{}]\n",
        hosts.join(", "),
        cas.join(", ")
    );
    env.write(
        "c/Cargo.toml",
        "[package]\nname = \"devloop\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
         [dependencies]\ncordonprobe = \"0.1\"\n",
    );
    env.write(
        "c/src/main.rs",
        "fn main() { println!(\"CARGO {}\", cordonprobe::PROBE); }\n",
    );
    if !sparse_cargo {
        let reg = env.base.join("reg-crates");
        let local = env.base.join("localreg");
        std::fs::create_dir_all(local.join("index/co/rd")).unwrap();
        std::fs::copy(
            reg.join("co/rd/cordonprobe"),
            local.join("index/co/rd/cordonprobe"),
        )
        .unwrap();
        std::fs::copy(
            reg.join("dl/cordonprobe/0.1.0/download"),
            local.join("cordonprobe-0.1.0.crate"),
        )
        .unwrap();
        env.own(&local);
        env.write(
            "c/.cargo/config.toml",
            &format!(
                "[source.crates-io]\nreplace-with = \"local\"\n\
                 [source.local]\nlocal-registry = \"{}\"\n",
                local.display()
            ),
        );
    }
    let skip = [env.project.clone(), env.home.join(".cache/cordon")];
    let before = common::tree(&env.home, &skip);
    let cargo = |args: &str| {
        format!(
            "(cd c && timeout 300 {cargo_line} {args} -q --target-dir ../t >&2 && ../t/debug/devloop)"
        )
    };
    let first = format!(
        "set -e\n\
         git config --global user.email dev@example.test && git config --global user.name Dev\n\
         git init -q repo && cd repo && echo x > f && git add f && git commit -qm first \
           && echo GIT $(git log --format=%ae)\n cd ..\n\
         mkdir n && cd n && echo '{{}}' > package.json && {UNPROXIED} timeout 90 npm install \
           --no-audit --no-fund --no-update-notifier --fetch-retries 0 cordonprobe >&2 \
           && node -e \"console.log('NPM', require('cordonprobe').probe)\"\n cd ..\n\
         {PY} -m venv v && timeout 90 v/bin/pip install -q --disable-pip-version-check --no-input \
           --timeout 20 --retries 0 cordonprobe >&2 \
           && v/bin/python -c \"import cordonprobe; print('PIP', cordonprobe.PROBE)\"\n\
         {}\n",
        cargo("build")
    );
    let o = run(&env, &pol, &first);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    for want in [
        "GIT dev@example.test",
        "NPM cordon-npm-ok",
        "PIP cordon-wheel-ok",
    ] {
        assert!(out.contains(want), "{want}: {}", show(&o));
    }
    assert!(out.contains("CARGO cordon-crate-ok"), "{}", show(&o));
    assert_eq!(
        common::tree(&env.home, &skip),
        before,
        "the host home changed"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("~/.gitconfig"),
        "the git config was scratch: {err}"
    );
    let tarballs = |s: &Server| s.count("REQ GET /tarballs/") + s.count("REQ GET /dl/");
    let fetched: Vec<usize> = servers.iter().map(tarballs).collect();
    // Second session: the caches are warm (npm and cargo offline, pip's cache there).
    let second = format!(
        "set -e\n\
         mkdir n2 && cd n2 && echo '{{}}' > package.json && {UNPROXIED} timeout 90 npm install \
           --offline --no-audit --no-fund --no-update-notifier cordonprobe >&2 \
           && node -e \"console.log('NPM2', require('cordonprobe').probe)\"\n cd ..\n\
         mkdir -p ~/.cache/pip && test -w ~/.cache/pip && echo PIPCACHE\n\
         ls -d ~/.cargo/registry/src/*/cordonprobe-0.1.0 >/dev/null && echo CARGOCACHE\n\
         rm -rf t && {}\n",
        cargo("build --offline")
    );
    let o = run(&env, &pol, &second);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(out.contains("NPM2 cordon-npm-ok"), "{}", show(&o));
    assert!(out.contains("PIPCACHE"), "{}", show(&o));
    assert!(out.contains("CARGOCACHE"), "{}", show(&o));
    assert!(out.contains("CARGO cordon-crate-ok"), "{}", show(&o));
    assert_eq!(
        servers.iter().map(tarballs).collect::<Vec<_>>(),
        fetched,
        "the second session downloaded again"
    );
    assert_eq!(
        common::tree(&env.home, &skip),
        before,
        "the host home changed"
    );
});
