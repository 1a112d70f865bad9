//! What escape_net.rs's attacks share: host-side sinks that log every byte they get, a TLS
//! certificate for several names, the audit log's events, and the in-sandbox attack client.

use std::path::PathBuf;
use std::process::Output;

use std::time::Duration;

use serde_json::Value;

use crate::common::net::{Fixture, sh};
use crate::common::{Env, show, skip};

pub const ESCSINK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/net/escsink.py");
pub const ESCCLIENT: &str = include_str!("../fixtures/net/escclient.py");

/// A unique marker for one attack: if the sink's log ever holds it, the attack got through.
pub fn canary(tag: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    format!("CANARY{tag}{:016x}", h.finish())
}

/// `escsink.py` (or `netfix.py`) on the host's loopback, killed on drop.
pub struct Sink {
    fixture: Fixture,
    pub ports: Vec<u16>,
}

impl Sink {
    pub fn start(script: &str, args: &[&str]) -> Sink {
        let fixture = Fixture::start(script, args, Duration::from_secs(60));
        let ports = fixture
            .ready
            .split_whitespace()
            .next()
            .unwrap()
            .split(',')
            .map(|p| p.parse().unwrap())
            .collect();
        Sink { fixture, ports }
    }

    /// A byte-logging sink on `addr`, one listener per port (0: any free one).
    pub fn tcp(addr: &str, ports: &[u16], tls: Option<&Tls>) -> Sink {
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        let ports = ports.join(",");
        let mut args = vec!["tcp", "--addr", addr, "--ports", &ports];
        let (cert, key);
        if let Some(t) = tls {
            cert = t.cert.to_str().unwrap().to_string();
            key = t.key.to_str().unwrap().to_string();
            args.extend(["--tls", &cert, &key]);
        }
        Sink::start(ESCSINK, &args)
    }

    pub fn port(&self) -> u16 {
        self.ports[0]
    }

    /// Everything logged so far, after a short settle (the sink logs a connection's bytes
    /// when it ends).
    pub fn log(&self) -> String {
        std::thread::sleep(Duration::from_millis(400));
        self.fixture.lines().join("\n")
    }

    /// Whether `needle` reached the sink in any form it logs.
    pub fn saw(&self, needle: &str) -> bool {
        self.log().contains(needle)
    }

    pub fn count(&self, prefix: &str) -> usize {
        let _ = self.log();
        self.fixture
            .lines()
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    }
}

/// A netfix.py server (`dns`, `udp`) as a [`Sink`].
pub fn netfix(args: &[&str]) -> Sink {
    Sink::start(&format!("{}/netfix.py", crate::common::net::FIXTURES), args)
}

/// One CA, one server certificate naming every one of `names`.
pub struct Tls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub fn tls_for(env: &Env, tag: &str, names: &[&str]) -> Tls {
    let dir = env.base.join(format!("tls-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let sans: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
    std::fs::write(
        dir.join("ext.cnf"),
        format!(
            "subjectAltName={}\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
            sans.join(",")
        ),
    )
    .unwrap();
    assert!(
        sh(
            &dir,
            &format!(
                "set -e; \
                 openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
                   -keyout ca.key -out ca.pem -days 2 -subj /CN=cordon-escape-ca \
                   -addext basicConstraints=critical,CA:TRUE \
                   -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null; \
                 openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
                   -keyout srv.key -out srv.csr -subj /CN={} 2>/dev/null; \
                 openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
                   -out srv.pem -days 2 -extfile ext.cnf 2>/dev/null",
                names[0]
            )
        ),
        "openssl failed"
    );
    Tls {
        ca: dir.join("ca.pem"),
        cert: dir.join("srv.pem"),
        key: dir.join("srv.key"),
    }
}

/// Whether this process may listen on `addr:port` (port 443 and friends need root); skips
/// (a failure in strict mode) when it may not.
pub fn can_bind(addr: &str, port: u16) -> bool {
    if std::net::TcpListener::bind((addr, port)).is_ok() {
        return true;
    }
    skip(
        &format!("root (port {port})"),
        &format!("a sink on {addr}:{port} (the test process is not root)"),
    );
    false
}

/// Writes the attack client into the project as `ec.py`; returns the line that runs it.
pub fn client(env: &Env) -> &'static str {
    crate::common::net::setup(env);
    env.write("ec.py", ESCCLIENT);
    "timeout 30 /usr/bin/python3 ec.py"
}

// ---- what the script printed ------------------------------------------------------------------

/// The value after `TAG ` on the first stdout line starting with it.
pub fn tagged(o: &Output, tag: &str) -> String {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{tag} ")))
        .unwrap_or_else(|| panic!("no {tag} line\n{}", show(o)))
        .to_string()
}

/// The JSON object printed after `TAG `.
pub fn tagged_json(o: &Output, tag: &str) -> Value {
    let t = tagged(o, tag);
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("{tag}: bad JSON {t:?}: {e}\n{}", show(o)))
}

// ---- the audit log ----------------------------------------------------------------------------

pub fn events(env: &Env) -> Vec<Value> {
    std::fs::read_to_string(&env.audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn summary(evs: &[Value]) -> String {
    evs.iter()
        .filter(|e| !matches!(e["action"].as_str(), Some("apply")))
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The events of `layer` with `action` whose text (rule, message, details) holds every one of
/// `needles`; panics when there is none.
#[track_caller]
pub fn logged<'a>(evs: &'a [Value], layer: &str, action: &str, needles: &[&str]) -> Vec<&'a Value> {
    let found: Vec<&Value> = evs
        .iter()
        .filter(|e| e["layer"] == layer && e["action"] == action)
        .filter(|e| {
            let s = e.to_string();
            needles.iter().all(|n| s.contains(n))
        })
        .collect();
    assert!(
        !found.is_empty(),
        "no {layer} {action} event holding {needles:?}; events:\n{}",
        summary(evs)
    );
    assert!(
        action != "deny"
            || found
                .iter()
                .all(|e| e["rule"].as_str().is_some_and(|r| !r.is_empty())),
        "a denial without its rule: {found:?}"
    );
    found
}
