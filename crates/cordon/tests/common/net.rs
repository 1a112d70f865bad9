//! What the network tests share: cordon runs with a policy, loopback servers, TLS stand-ins.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use super::{Env, show, skip};

pub const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/net");
pub const NETCLIENT: &str = include_str!("../fixtures/net/netclient.py");
/// Debian's python: the unprivileged user cannot run root's pyenv shims.
pub const PY: &str = "/usr/bin/python3";
pub const PROXY: &str = "http://127.0.0.1:3128";
/// Prefix for a line that must not see any proxy variable.
pub const UNPROXIED: &str =
    "env -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY -u https_proxy -u ALL_PROXY -u all_proxy";

/// Unprivileged users need /dev/net/tun 0666 (as a distro ships it); make it so when root.
pub fn tun_ready() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let p = Path::new("/dev/net/tun");
        let Ok(m) = std::fs::metadata(p) else { return };
        if m.permissions().mode() & 0o777 != 0o666 {
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666));
        }
    });
}

/// Writes the in-sandbox client into the project as `nc.py`.
pub fn setup(env: &Env) {
    tun_ready();
    env.write("nc.py", NETCLIENT);
}

/// Writes a policy file outside the project (so it needs no `cordon trust`); returns its path.
pub fn policy(env: &Env, text: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let p = env
        .base
        .join(format!("net{}.toml", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&p, text).unwrap();
    env.own(&p);
    p.to_str().unwrap().to_string()
}

/// `[dns] hosts` mapping every name to the host's 127.0.0.1, plus one allow rule per
/// (name, ports).
pub fn named(hosts: &[&str], allow: &[(&str, &[u16])], extra: &str) -> String {
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
            .map(|h| format!("\"{h}\" = \"127.0.0.1\""))
            .collect();
        t.push_str(&format!("hosts = {{ {} }}\n", h.join(", ")));
    }
    t.push_str(extra);
    t
}

/// `cordon run --no-tty --audit … --policy FILE -- sh -c SCRIPT`, killed after `limit`.
pub fn spawn_run(env: &Env, policy_file: &str, script: &str) -> Child {
    spawn_run_with(env, policy_file, script, &[])
}

/// [`spawn_run`] with `vars` set in cordon's own (host) environment.
pub fn spawn_run_with(env: &Env, policy_file: &str, script: &str, vars: &[(&str, &str)]) -> Child {
    spawn_run_full(env, policy_file, script, vars, &[])
}

/// [`spawn_run_with`] with more `cordon run` options (`--learn`…).
pub fn spawn_run_full(
    env: &Env,
    policy_file: &str,
    script: &str,
    vars: &[(&str, &str)],
    options: &[&str],
) -> Child {
    let _ = std::fs::remove_file(&env.audit);
    env.cordon()
        .env("XDG_RUNTIME_DIR", super::runtime_dir(env))
        .envs(vars.iter().copied())
        .arg("run")
        .arg("--no-tty")
        .arg("--audit")
        .arg(&env.audit)
        .args(["--policy", policy_file])
        .args(options)
        .arg("--")
        .args(["sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub fn wait_limited(child: Child, limit: Duration) -> Output {
    let (done, deadline) = mpsc::channel::<()>();
    let pid = child.id();
    std::thread::spawn(move || {
        if deadline.recv_timeout(limit).is_err() {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    });
    let o = child.wait_with_output().unwrap();
    let _ = done.send(());
    o
}

pub fn run_limited(env: &Env, policy_text: &str, script: &str, limit: Duration) -> Output {
    let p = policy(env, policy_text);
    let o = wait_limited(spawn_run(env, &p, script), limit);
    super::assert_replay_reproduces(env, &["--policy", &p]);
    o
}

pub fn run(env: &Env, policy_text: &str, script: &str) -> Output {
    run_limited(env, policy_text, script, Duration::from_secs(120))
}

/// [`run`] with `vars` set in cordon's own (host) environment (a credential's source, a
/// host secret): never passed into the sandbox by the policy.
pub fn run_with(env: &Env, policy_text: &str, script: &str, vars: &[(&str, &str)]) -> Output {
    let p = policy(env, policy_text);
    let o = wait_limited(
        spawn_run_with(env, &p, script, vars),
        Duration::from_secs(120),
    );
    super::assert_replay_reproduces(env, &["--policy", &p]);
    o
}

// ---- host-side servers ----

/// A Python fixture on the host (`netfix.py`, `escsink.py`…) that prints `READY …` once it
/// listens, then one line per thing it saw; killed on drop.
pub struct Fixture {
    child: Child,
    /// The READY line's words after `READY`.
    pub ready: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Fixture {
    pub fn start(script: &str, args: &[&str], limit: Duration) -> Fixture {
        let mut child = Command::new(PY)
            .arg("-u")
            .arg(script)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {script}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let seen = lines.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.starts_with("READY ")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(line);
                    continue;
                }
                seen.lock().unwrap().push(line);
            }
        });
        let ready = rx
            .recv_timeout(limit)
            .unwrap_or_else(|_| panic!("{script} {args:?} never became ready"));
        let ready = ready.trim_start_matches("READY ").to_string();
        Fixture {
            child,
            ready,
            lines,
        }
    }

    /// Every line seen so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fixture server (`netfix.py`) on the host's 127.0.0.1; killed on drop.
pub struct Server {
    fixture: Fixture,
    pub port: u16,
    /// What followed the port on the READY line (the stream server's sha256).
    pub extra: String,
}

impl Server {
    pub fn start(args: &[&str]) -> Server {
        let script = format!("{FIXTURES}/netfix.py");
        let fixture = Fixture::start(&script, args, Duration::from_secs(90));
        let mut f = fixture.ready.split_whitespace();
        let port = f.next().unwrap().parse().unwrap();
        let extra = f.collect::<Vec<_>>().join(" ");
        Server {
            fixture,
            port,
            extra,
        }
    }

    pub fn http(dir: &Path) -> Server {
        Server::start(&["http", dir.to_str().unwrap()])
    }

    pub fn echo() -> Server {
        Server::start(&["echo"])
    }

    /// Lines starting with `prefix` seen so far (after a short settle).
    pub fn count(&self, prefix: &str) -> usize {
        std::thread::sleep(Duration::from_millis(300));
        self.fixture
            .lines()
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    }

    pub fn log(&self) -> String {
        self.fixture.lines().join("\n")
    }
}

/// A directory under the test's base holding `hello.txt` = `body`.
pub fn www(env: &Env, name: &str, body: &str) -> std::path::PathBuf {
    let d = env.base.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("hello.txt"), body).unwrap();
    d
}

pub fn sh(dir: &Path, script: &str) -> bool {
    let o = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    if !o.status.success() {
        eprintln!("{script}\n{}", show(&o));
    }
    o.status.success()
}

// ---- HTTPS stand-ins ------------------------------------------------------------------------

/// A CA and a server certificate for `name` under `dir` (ca.pem, srv.pem, srv.key).
pub fn make_tls(dir: &Path, name: &str) -> bool {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("ext.cnf"),
        format!(
            "subjectAltName=DNS:{name}\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        ),
    )
    .unwrap();
    sh(
        dir,
        &format!(
            "set -e; \
             openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
               -keyout ca.key -out ca.pem -days 2 -subj /CN=cordon-test-ca \
               -addext basicConstraints=critical,CA:TRUE \
               -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null; \
             openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
               -keyout srv.key -out srv.csr -subj /CN={cn} 2>/dev/null; \
             openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
               -out srv.pem -days 2 -extfile ext.cnf 2>/dev/null",
            // A CN holds at most 64 characters: the first name only (the SAN has them all).
            cn = name.split(',').next().unwrap_or(name)
        ),
    )
}

/// A bare repository `repo.git` under `dir` with one commit (README = "repo-content"), ready for
/// git's dumb HTTP protocol.
pub fn make_repo(dir: &Path) -> bool {
    sh(
        dir,
        "set -e; git -c init.defaultBranch=main init -q work; cd work; \
         echo repo-content > README; git add README; \
         git -c user.name=t -c user.email=t@example.invalid commit -qm one; cd ..; \
         git clone -q --bare work repo.git; git -C repo.git update-server-info; rm -rf work",
    )
}

/// A loopback address of this variant's own (`127.0.0.BASE` as root, `.BASE+1` as the user), so
/// both variants can listen on port 443 at once.
pub fn variant_addr(env: &Env, base: u8) -> String {
    let last = if env.who == super::Who::Root {
        base
    } else {
        base + 1
    };
    format!("127.0.0.{last}")
}

/// Runs a fixture generator of netfix.py (`wheel`, `npm`, `crates`) and asserts it worked.
pub fn make_fixture(args: &[&str]) {
    let o = Command::new(PY)
        .arg(format!("{FIXTURES}/netfix.py"))
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
}

/// An HTTPS server of the test's own on `addr:443` for `name`, serving `root`; with its CA.
pub fn https_443(
    env: &Env,
    name: &str,
    addr: &str,
    root: &Path,
) -> Option<(Server, std::path::PathBuf)> {
    if !super::need(&["openssl"], "an HTTPS server on port 443") {
        return None;
    }
    if std::net::TcpListener::bind((addr, 443)).is_err() {
        skip(
            "root (port 443)",
            &format!("an HTTPS server on {addr}:443 (the test process is not root)"),
        );
        return None;
    }
    let tls = env.base.join(format!("tls-{addr}"));
    assert!(make_tls(&tls, name), "openssl failed");
    let srv = Server::start(&[
        "http",
        root.to_str().unwrap(),
        "--addr",
        addr,
        "--port",
        "443",
        "--tls",
        tls.join("srv.pem").to_str().unwrap(),
        tls.join("srv.key").to_str().unwrap(),
    ]);
    Some((srv, tls.join("ca.pem")))
}
