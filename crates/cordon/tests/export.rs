//! The audit log exported as it is written (`[audit] export`): to an OTLP/HTTP receiver that
//! decodes with the official OpenTelemetry definitions (PyPI `opentelemetry-proto`, in the
//! venv scripts/setup-test-env.sh makes), to a syslog socket the test binds, and (root) to a
//! real journald of the test's own, read back with `journalctl -o json`. Every line of the
//! local log must arrive, in order, with its chain; a collector that is down changes nothing
//! but the counts.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use common::{Env, Who, show};

const VENV_PYTHON: &str = "/opt/cordon-agents/otlp-venv/bin/python";

/// Decisions to export: a file read, a denied request.
const SCRIPT: &str = "cat ~/notes.txt; curl -s -m 5 https://denied.example/ || true";

/// The receiver fixture, running until dropped.
struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn receiver(dir: &Path) -> Option<Receiver> {
    if !Path::new(VENV_PYTHON).exists() {
        common::skip(
            "opentelemetry-proto",
            "the OTLP receiver decodes with PyPI opentelemetry-proto (scripts/setup-test-env.sh)",
        );
        return None;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp/receiver.py");
    let portfile = dir.join("otlp.port");
    let out = dir.join("otlp.jsonl");
    let child = Command::new(VENV_PYTHON)
        .arg(fixture)
        .arg(&portfile)
        .arg(&out)
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !portfile.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "receiver did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let port = std::fs::read_to_string(&portfile).unwrap().parse().unwrap();
    Some(Receiver { child, port, out })
}

/// A syslog socket of the test's own, writable by the variant's user.
fn syslog_socket(env: &Env) -> (UnixDatagram, PathBuf) {
    let path = env.base.join("syslog.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    sock.set_nonblocking(true).unwrap();
    (sock, path)
}

fn run(env: &Env, policy: &str) -> Output {
    let policy = env.policy_file("export.toml", policy);
    let _ = std::fs::remove_file(&env.audit);
    env.cordon()
        .env("OTEL_EXPORTER_OTLP_LOGS_HEADERS", "x-test=yes")
        .args(["run", "--no-tty", "--policy", &policy, "--audit"])
        .arg(&env.audit)
        .args(["--", "sh", "-c", SCRIPT])
        .output()
        .unwrap()
}

/// The local log's lines, checked: the chain verifies and the log is complete.
fn local_lines(env: &Env) -> Vec<String> {
    let r = cordon_events::verify(&env.audit).unwrap();
    assert!(r.ok() && r.complete, "{:?}", r.problems);
    std::fs::read_to_string(&env.audit)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn otlp_in_order_with_the_chain(who: Who) {
    let Some(env) = Env::new(who) else { return };
    let Some(rx) = receiver(&env.base) else {
        return;
    };
    let (sys, sys_path) = syslog_socket(&env);
    // Read while the session runs, as a syslog daemon does: a datagram socket's queue is short.
    let reading = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let r = reading.clone();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match sys.recv(&mut buf) {
                Ok(len) => got.push(String::from_utf8_lossy(&buf[..len]).into_owned()),
                // Told to stop only once the queue is empty: what is queued is read first.
                Err(_) if !r.load(std::sync::atomic::Ordering::SeqCst) => break,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        got
    });
    let o = run(
        &env,
        &format!(
            "[audit]\nexport = [\"otlp\", \"syslog\"]\notlp_endpoint = \"http://127.0.0.1:{}/v1/logs\"\nsyslog_socket = \"{}\"\n",
            rx.port,
            sys_path.display()
        ),
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("export incomplete"),
        "{}",
        show(&o)
    );
    let local = local_lines(&env);
    let events: Vec<cordon_events::Event> = local
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e.action == cordon_events::Action::Deny),
        "the session made no denial to export"
    );
    let got: Vec<serde_json::Value> = std::fs::read_to_string(&rx.out)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), local.len(), "records received: {got:#?}");
    let copy = env.base.join("exported.jsonl");
    let mut bodies = String::new();
    for ((rec, line), e) in got.iter().zip(&local).zip(&events) {
        assert_eq!(
            rec["body"],
            line.as_str(),
            "body is the line, byte for byte"
        );
        let a = &rec["attributes"];
        assert_eq!(a["cordon.seq"], e.seq, "{rec}");
        assert_eq!(a["cordon.hash"], e.hash.as_str());
        assert_eq!(a["cordon.prev"], e.prev.as_str());
        assert_eq!(a["cordon.layer"], e.layer.as_str());
        assert_eq!(a["cordon.action"], e.action.as_str());
        assert_eq!(rec["resource"]["service.name"], "cordon");
        assert_eq!(rec["resource"]["cordon.session"], e.session.as_str());
        assert_eq!(rec["header"], "yes", "OTEL_EXPORTER_OTLP_LOGS_HEADERS sent");
        let sev = if e.action == cordon_events::Action::Deny {
            "WARN"
        } else if e.action == cordon_events::Action::Error {
            "ERROR"
        } else {
            "INFO"
        };
        assert_eq!(rec["severity_text"], sev);
        bodies.push_str(rec["body"].as_str().unwrap());
        bodies.push('\n');
    }
    // The collector's copy verifies on its own: the chain survived the trip.
    std::fs::write(&copy, bodies).unwrap();
    let r = cordon_events::verify(&copy).unwrap();
    assert!(r.ok() && r.complete, "{:?}", r.problems);
    // Syslog got the same, one RFC 5424 datagram an event, the chain in structured data.
    reading.store(false, std::sync::atomic::Ordering::SeqCst);
    let msgs = reader.join().unwrap();
    assert_eq!(msgs.len(), local.len(), "syslog datagrams");
    for ((m, e), line) in msgs.iter().zip(&events).zip(&local) {
        assert!(m.starts_with('<') && m.contains(">1 "), "{m}");
        let chain = format!("seq=\"{}\" prev=\"{}\" hash=\"{}\"", e.seq, e.prev, e.hash);
        assert!(m.contains(&chain), "{m}");
        assert!(m.ends_with(line.as_str()), "{m}");
    }
}

#[test]
fn otlp_and_syslog_get_every_event_in_order_root() {
    otlp_in_order_with_the_chain(Who::Root);
}

#[test]
fn otlp_and_syslog_get_every_event_in_order_user() {
    otlp_in_order_with_the_chain(Who::User);
}

#[test]
fn a_collector_that_is_down_changes_nothing_but_the_counts() {
    let env = Env::here();
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let start = Instant::now();
    let o = run(
        &env,
        &format!(
            "[audit]\nexport = [\"otlp\"]\notlp_endpoint = \"http://127.0.0.1:{port}/v1/logs\"\n"
        ),
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // The end waits for the queue at most 3 s, twice (the note, then the rest).
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("audit export incomplete") && err.contains("failed"),
        "{err}"
    );
    let local = local_lines(&env);
    let note: serde_json::Value = local
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["rule"] == "audit.export")
        .expect("the export note is in the log");
    assert_eq!(note["detail"]["otlp"]["sent"], 0, "{note}");
}

#[test]
fn a_journald_of_its_own_gets_every_event_in_order() {
    let Some(env) = Env::new(Who::Root) else {
        return;
    };
    if !common::need(&["unshare", "journalctl"], "journald export") {
        return;
    }
    let journald = "/lib/systemd/systemd-journald";
    if !Path::new(journald).exists() {
        common::skip(
            "systemd-journald",
            "journald export (apt-get install systemd)",
        );
        return;
    }
    let policy = env.policy_file("export.toml", "[audit]\nexport = [\"journald\"]\n");
    let out = env.base.join("journal.json");
    // A private mount namespace with a journald of its own at the usual socket: the host's
    // journal (if any) is not touched, and no systemd is needed.
    let script = format!(
        "set -e
mount -t tmpfs tmpfs /run/systemd
mkdir -p /run/systemd/journal /run/log
mount -t tmpfs tmpfs /run/log
{journald} & jd=$!
for i in $(seq 100); do [ -S /run/systemd/journal/socket ] && break; sleep 0.05; done
\"$CORDON\" run --no-tty --policy {policy} --audit {audit} -- sh -c \"$SCRIPT\" || echo \"cordon exit $?\" >&2
journalctl --sync 2>/dev/null || sleep 1
journalctl -o json -D /run/log/journal SYSLOG_IDENTIFIER=cordon > {out}
kill $jd",
        audit = env.audit.display(),
        out = out.display(),
    );
    let o = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .env("CORDON", env.cordon_line())
        .env("SCRIPT", SCRIPT)
        .env("HOME", &env.home)
        .env("XDG_STATE_HOME", env.base.join("state"))
        .env("XDG_CONFIG_HOME", env.home.join(".config"))
        .env("XDG_DATA_HOME", env.base.join("data"))
        .current_dir(&env.project)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("cordon exit"),
        "{}",
        show(&o)
    );
    let local = local_lines(&env);
    let got: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), local.len(), "{}", show(&o));
    for (j, line) in got.iter().zip(&local) {
        let e: cordon_events::Event = serde_json::from_str(line).unwrap();
        assert_eq!(j["CORDON_EVENT"], line.as_str());
        assert_eq!(j["CORDON_SEQ"], e.seq.to_string());
        assert_eq!(j["CORDON_HASH"], e.hash.as_str());
        assert_eq!(j["CORDON_PREV"], e.prev.as_str());
        assert_eq!(j["CORDON_LAYER"], e.layer.as_str());
        let prio = match e.action {
            cordon_events::Action::Error => "3",
            cordon_events::Action::Deny | cordon_events::Action::Degraded => "4",
            _ => "6",
        };
        assert_eq!(j["PRIORITY"], prio);
    }
}

// An untrusted project policy that asks for export is refused before anything is sent: its
// `[audit]` could name any socket or collector (and the user's OTLP headers would go along).
both!(an_untrusted_projects_export_sends_nothing, |env: Env| {
    let (sys, sys_path) = syslog_socket(&env);
    env.own(&sys_path);
    env.write(
        "cordon.toml",
        &format!(
            "[audit]\nexport = [\"syslog\"]\nsyslog_socket = \"{}\"\n",
            sys_path.display()
        ),
    );
    let _ = std::fs::remove_file(&env.audit);
    let o = env
        .cordon()
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not trusted"),
        "{}",
        show(&o)
    );
    let mut buf = [0u8; 65536];
    assert!(
        sys.recv(&mut buf).is_err(),
        "the untrusted project's syslog socket got a datagram"
    );
    // The local log has the refusal.
    let local = std::fs::read_to_string(&env.audit).unwrap();
    assert!(local.contains("untrusted project policy"), "{local}");
});
