//! `cordon doctor`: what this machine supports, layer by layer in the order they stack up, each
//! with what cordon does about it and, where something blocks a layer, the fix.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};
use cordon_policy::LoadOptions;
use cordon_sandbox::probe::{Check, Host, Layer, Support};

/// Tests point the host probes at a directory of fake `/proc/sys` knobs and device nodes; the
/// kernel features themselves are always tried for real.
const FAKE_HOST_ROOT: &str = "CORDON_DOCTOR_HOST_ROOT";

fn check(layer: Layer, feature: &'static str, support: Support, detail: String) -> Check {
    Check {
        layer,
        feature,
        support,
        detail,
        cordon: String::new(),
        required: false,
        fix: None,
    }
}

pub fn doctor() -> i32 {
    let host = std::env::var_os(FAKE_HOST_ROOT)
        .map(Host::at)
        .unwrap_or_else(Host::real);
    // The probes fork: they run before anything starts a thread.
    let (mut checks, advice) = cordon_sandbox::probe::probe_with_advice(&host);
    checks.push(home());
    let ca = ca();
    checks.push(credentials(ca.support == Support::Ok));
    checks.push(ca);
    checks.push(bundle());
    checks.push(audit_log());
    checks.push(end_to_end());
    checks.push(crate::vm::doctor_check());
    checks.sort_by_key(|c| c.layer);
    let mut out = std::io::stdout().lock();
    let mut failed = false;
    let mut section = None;
    for c in &checks {
        if section != Some(c.layer) {
            section = Some(c.layer);
            let _ = writeln!(out, "{}", c.layer.title());
        }
        let mark = match c.support {
            Support::Ok => "ok     ",
            Support::Partial => "partial",
            Support::Missing => "MISSING",
        };
        failed |= c.required && c.support == Support::Missing;
        let _ = writeln!(
            out,
            "   {mark}  {}: {}\n            cordon: {}",
            c.feature, c.detail, c.cordon
        );
        if let Some(fix) = &c.fix {
            let _ = writeln!(
                out,
                "            fix: {}",
                fix.replace('\n', "\n                 ")
            );
        }
    }
    let _ = writeln!(
        out,
        "\nThe built-in default policy {} be enforced on this machine.",
        if failed { "cannot" } else { "can" }
    );
    // In a container: the runtime's options, exactly those `cordon run` needs here.
    if let Some(line) = advice.line() {
        let _ = writeln!(out, "{line}");
    }
    i32::from(failed)
}

/// The copy-on-write home, tried for real on this home and the filesystem of cordon's state.
fn home() -> Check {
    let tried = (|| -> Result<PathBuf, String> {
        let home = crate::home::home_dir().ok_or("$HOME is not set to an existing directory")?;
        let state =
            cordon_events::state_dir().ok_or("no state directory (XDG_STATE_HOME or HOME)")?;
        std::fs::create_dir_all(&state).map_err(|e| format!("{}: {e}", state.display()))?;
        cordon_sandbox::probe::home_overlay(&home, &state)?;
        Ok(home)
    })();
    let mut c = check(
        Layer::State,
        "copy-on-write home",
        if tried.is_ok() {
            Support::Ok
        } else {
            Support::Partial
        },
        match &tried {
            Ok(home) => format!(
                "an overlay of {} mounts in a user namespace",
                home.display()
            ),
            Err(e) => e.clone(),
        },
    );
    c.cordon = if tried.is_ok() {
        "writes in the home land in the session's layer; caches persist in cordon's own".into()
    } else {
        "the home is read-only in the sandbox (a warning at every start); set `[state] home = \"readonly\"` to say so".into()
    };
    c
}

/// Layer 1b needs no kernel feature, only the HTTP layer that swaps placeholders at the wire.
fn credentials(http: bool) -> Check {
    let mut c = check(
        Layer::Credentials,
        "credentials at the wire",
        if http { Support::Ok } else { Support::Partial },
        "needs no kernel feature: real values are read on the host at start and stay in cordon's memory".into(),
    );
    c.cordon = if http {
        "the sandbox holds `cordon-…` placeholders; the HTTP layer swaps in the real value for the credential's hosts only (`cordon check` says which of yours resolve)".into()
    } else {
        "without the HTTP layer (see 3) placeholders stay placeholders: tools in the sandbox cannot authenticate".into()
    };
    c
}

/// cordon's CA, looked at without making it (the first `cordon run` does).
fn ca() -> Check {
    let Some(dir) = cordon_events::data_dir().map(|d| d.join("ca")) else {
        let mut c = check(
            Layer::Http,
            "cordon's CA",
            Support::Missing,
            "no data directory (XDG_DATA_HOME or HOME)".into(),
        );
        c.cordon = "HTTPS is decided per connection only: no request rules, credentials or secret scanning".into();
        c.fix = Some("set HOME or XDG_DATA_HOME".into());
        return c;
    };
    let mut c = if !dir.join("ca-key.pem").exists() {
        check(
            Layer::Http,
            "cordon's CA",
            Support::Ok,
            format!(
                "not made yet: the first `cordon run` makes it in {} (ECDSA P-256, key 0600)",
                dir.display()
            ),
        )
    } else {
        match cordon_http::CertAuthority::load_or_create(&dir).and_then(|ca| ca.check_key()) {
            Ok(()) => check(
                Layer::Http,
                "cordon's CA",
                Support::Ok,
                format!("{} (ECDSA P-256, key 0600)", dir.display()),
            ),
            Err(e) => {
                let mut c = check(Layer::Http, "cordon's CA", Support::Missing, e.to_string());
                c.fix = Some(format!(
                    "remove {} and run cordon again to make a new CA",
                    dir.display()
                ));
                c
            }
        }
    };
    c.cordon = if c.support == Support::Ok {
        "HTTPS to 443, HTTP to 80 and the explicit proxy are decided request by request; the key never enters a sandbox".into()
    } else {
        "HTTPS is decided per connection only: no request rules, credentials or secret scanning"
            .into()
    };
    c
}

/// The host's roots: what upstream servers are verified against, and half the sandbox's bundle.
fn bundle() -> Check {
    let found = cordon_sandbox::net::BUNDLE_PATHS
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok().map(|t| (*p, t)));
    let bound: Vec<&str> = cordon_sandbox::net::BUNDLE_PATHS
        .iter()
        .copied()
        .filter(|p| std::path::Path::new(p).exists())
        .collect();
    let mut c = match &found {
        Some((path, text)) => check(
            Layer::Http,
            "trust bundle for the sandbox",
            Support::Ok,
            format!(
                "the host's roots: {} certificates in {path}",
                text.matches("-----BEGIN CERTIFICATE-----").count()
            ),
        ),
        None => {
            let mut c = check(
                Layer::Http,
                "trust bundle for the sandbox",
                Support::Partial,
                format!(
                    "no system trust bundle ({})",
                    cordon_sandbox::net::BUNDLE_PATHS.join(", ")
                ),
            );
            c.fix = Some("install the distribution's CA certificates (Debian: `sudo apt-get install ca-certificates`)".into());
            c
        }
    };
    c.cordon = format!(
        "the sandbox trusts the host's roots plus cordon's CA: one bundle bound over {} and named by {}",
        if bound.is_empty() {
            "none of the distribution's files".into()
        } else {
            bound.join(", ")
        },
        cordon_sandbox::net::BUNDLE_VARS.join(", ")
    );
    c
}

/// Where session logs go by default: `cordon run` refuses to start if it cannot write there.
fn audit_log() -> Check {
    let tried = (|| -> Result<PathBuf, String> {
        let dir = cordon_events::default_log_dir()
            .ok_or("no state directory (XDG_STATE_HOME or HOME)")?;
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let probe = dir.join(format!(".doctor-{}", std::process::id()));
        std::fs::write(&probe, b"").map_err(|e| format!("{}: {e}", dir.display()))?;
        let _ = std::fs::remove_file(&probe);
        Ok(dir)
    })();
    let mut c = check(
        Layer::Audit,
        "session logs",
        if tried.is_ok() {
            Support::Ok
        } else {
            Support::Missing
        },
        match &tried {
            Ok(dir) => format!("{} is writable", dir.display()),
            Err(e) => e.clone(),
        },
    );
    c.cordon = if tried.is_ok() {
        "every session writes a hash-chained JSON-lines log there (`cordon log`, `cordon log --verify`)".into()
    } else {
        c.fix = Some("make the directory writable, or pass --audit FILE to cordon run".into());
        "cordon run refuses to start without --audit FILE".into()
    };
    c
}

fn end_to_end() -> Check {
    let e2e = run_true();
    let mut c = check(
        Layer::EndToEnd,
        "default policy, end to end",
        if e2e.is_ok() {
            Support::Ok
        } else {
            Support::Missing
        },
        match &e2e {
            Ok(()) => "`true` ran in a sandbox built from the built-in default policy".into(),
            Err(e) => format!("{e:#}"),
        },
    );
    c.required = true;
    c.cordon = if e2e.is_ok() {
        "ready".into()
    } else {
        "cordon run will refuse to start (exit 125)".into()
    };
    c
}

fn run_true() -> Result<()> {
    let dir = tempfile_dir()?;
    let opts = LoadOptions {
        project_dir: dir.clone(),
        no_project: false,
        home: crate::commands::home(),
        passwd_home: None,
        policy_file: None,
        user_config: None,
        profile: None,
        command: Vec::new(),
        trust_store: dir.join("trust.json"),
        own_dirs: crate::commands::own_dirs(),
    };
    let result = (|| {
        let loaded = cordon_policy::load(&opts).map_err(|e| anyhow!("{e}"))?;
        let cmd = cordon_sandbox::Command {
            argv: vec!["true".into()],
            cwd: dir.clone(),
            tty: cordon_sandbox::TtyMode::Never,
            session: format!("doctor-{}", std::process::id()),
            approvals: None,
            staged: Vec::new(),
            shown: Vec::new(),
            placed: Vec::new(),
            sockets: Vec::new(),
            bound: Vec::new(),
            signals_to: None,
            trace_home: None,
            execs: None,
        };
        let outcome = cordon_sandbox::run(&loaded.plan, &cmd, &|_| {})?;
        if outcome.code() != 0 {
            return Err(anyhow!("`true` exited with {}", outcome.code()));
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn tempfile_dir() -> Result<PathBuf> {
    let base = std::env::temp_dir()
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from("/tmp"));
    let dir = base.join(format!(
        "cordon-doctor-{}-{}",
        std::process::id(),
        cordon_events::new_session_id()
    ));
    std::fs::create_dir(&dir).with_context(|| format!("create {}", dir.display()))?;
    Ok(dir)
}
