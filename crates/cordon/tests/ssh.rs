//! SSH through cordon's filtering agent, black-box: a real sshd (OpenSSH, on loopback, its own
//! host keys and config) with a git repository behind it, a real `ssh-agent` holding the
//! user's key, and `git`/`ssh` inside `cordon run`. A push to the host the policy allows works;
//! a second sshd, reached through that host (so the network never sees it), gets no
//! signature and the refusal names it; the private key stays unreadable inside while
//! `known_hosts` and `config` are readable.

mod common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Env, need, net, show};

const SSHD: &str = "/usr/sbin/sshd";

fn is_root() -> bool {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0
}

/// The account the test's sshd runs as and logs in: an unprivileged sshd can only log in as
/// itself, so when root it is the test user for both variants.
fn server_user() -> String {
    if is_root() {
        common::TEST_USER.to_string()
    } else {
        std::env::var("USER").unwrap_or_else(|_| "root".into())
    }
}

/// `cmd` as the server's account (via setpriv when root).
fn as_server(program: &str) -> Command {
    if is_root() {
        let u = common::TEST_USER;
        let mut c = Command::new("setpriv");
        c.args([
            &format!("--reuid={u}"),
            &format!("--regid={u}"),
            "--clear-groups",
            "--",
            program,
        ]);
        c
    } else {
        Command::new(program)
    }
}

/// `cmd` as the variant's user: the agent's owner, since ssh-agent answers only its own uid.
fn as_variant(env: &Env, program: &str) -> Command {
    if env.who == common::Who::User && is_root() {
        as_server(program)
    } else {
        Command::new(program)
    }
}

fn chown_server(p: &Path) {
    if is_root() {
        let st = Command::new("chown")
            .args(["-R", common::TEST_USER])
            .arg(p)
            .status()
            .unwrap();
        assert!(st.success());
    }
}

#[track_caller]
fn run_ok(c: &mut Command) -> String {
    let o = c.output().unwrap();
    assert!(o.status.success(), "{c:?}\n{}", show(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Killed on drop.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An sshd of the test's own on 127.0.0.1 with host key `dir/NAME_host`, letting in the
/// keys of `authorized`; returns it with its port.
fn sshd(dir: &Path, name: &str, authorized: &Path) -> (Daemon, u16) {
    let key = dir.join(format!("{name}_host"));
    run_ok(
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key),
    );
    let port = free_port();
    let config = dir.join(format!("{name}_sshd_config"));
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {key}\nPidFile {pid}\n\
             AuthorizedKeysFile {auth}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             AllowTcpForwarding yes\nLogLevel VERBOSE\n",
            key = key.display(),
            pid = dir.join(format!("{name}.pid")).display(),
            auth = authorized.display(),
        ),
    )
    .unwrap();
    chown_server(dir);
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = as_server(SSHD)
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let d = Daemon(child);
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "sshd {name} never listened: {}",
            std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (d, port)
}

/// The public half of a key file, as `type base64`.
fn public(key: &Path) -> String {
    let text = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    text.split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

struct Setup {
    _servers: Vec<Daemon>,
    _agent: Daemon,
    agent_sock: PathBuf,
    srv: PathBuf,
    repo: PathBuf,
    allowed_port: u16,
    other_port: u16,
}

/// Two sshds (git.test's, the allowed one, and other.test's), a bare repository, the user's
/// key in a test-started ssh-agent, and `known_hosts` (git.test's entry hashed) and `config`
/// in the test home.
fn setup(env: &Env) -> Setup {
    let srv = env.base.join("srv");
    std::fs::create_dir_all(&srv).unwrap();
    // The user's key: in ~/.ssh, where nothing inside may read it, and in the agent.
    let ssh_dir = env.home.join(".ssh");
    let key = ssh_dir.join("id_git");
    run_ok(
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "git-key", "-f"])
            .arg(&key),
    );
    let authorized = srv.join("authorized_keys");
    std::fs::write(&authorized, format!("{}\n", public(&key))).unwrap();
    let repo = srv.join("repo.git");
    run_ok(
        Command::new("git")
            .args(["init", "-q", "--bare", "-b", "main"])
            .arg(&repo),
    );
    let (allowed, allowed_port) = sshd(&srv, "git", &authorized);
    let (other, other_port) = sshd(&srv, "other", &authorized);
    let kh = ssh_dir.join("known_hosts");
    std::fs::write(
        &kh,
        format!(
            "[git.test]:{allowed_port} {}\n",
            public(&srv.join("git_host"))
        ),
    )
    .unwrap();
    run_ok(Command::new("ssh-keygen").arg("-H").arg("-f").arg(&kh));
    let _ = std::fs::remove_file(ssh_dir.join("known_hosts.old"));
    let hashed = std::fs::read_to_string(&kh).unwrap();
    assert!(hashed.starts_with("|1|"), "{hashed}");
    std::fs::write(
        &kh,
        format!("{hashed}other.test {}\n", public(&srv.join("other_host"))),
    )
    .unwrap();
    let user = server_user();
    std::fs::write(
        ssh_dir.join("config"),
        format!(
            "Host git.test\n  Port {allowed_port}\n  User {user}\n\
             Host other.test\n  HostName 127.0.0.1\n  Port {other_port}\n  User {user}\n  \
             HostKeyAlias other.test\n  ProxyJump git.test\n\
             Host *\n  UserKnownHostsFile {kh}\n  StrictHostKeyChecking yes\n  BatchMode yes\n  \
             IdentityFile /nonexistent\n",
            kh = kh.display(),
        ),
    )
    .unwrap();
    let agent_dir = env.base.join("agent");
    std::fs::create_dir_all(&agent_dir).unwrap();
    env.own(&env.base);
    std::fs::set_permissions(
        &agent_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let agent_sock = agent_dir.join("agent.sock");
    let agent = Daemon(
        as_variant(env, "ssh-agent")
            .args(["-D", "-a"])
            .arg(&agent_sock)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while !agent_sock.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "ssh-agent never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    run_ok(
        as_variant(env, "ssh-add")
            .env("SSH_AUTH_SOCK", &agent_sock)
            .arg(&key),
    );
    Setup {
        _servers: vec![allowed, other],
        _agent: agent,
        agent_sock,
        srv,
        repo,
        allowed_port,
        other_port,
    }
}

fn audit(env: &Env) -> String {
    std::fs::read_to_string(&env.audit).unwrap_or_default()
}

both!(
    git_push_over_ssh_signs_only_for_allowed_hosts,
    |env: Env| {
        if !need(
            &[
                "ssh",
                "ssh-agent",
                "ssh-add",
                "ssh-keygen",
                SSHD,
                "git",
                "setpriv",
            ],
            "SSH through the filtering agent",
        ) {
            return;
        }
        net::tun_ready();
        let s = setup(&env);
        let policy = net::named(&["git.test"], &[("git.test", &[s.allowed_port])], "");
        let ssh = format!("ssh -F {}", env.home.join(".ssh/config").display());
        let script = format!(
            "set -e\n\
         echo \"agent at $SSH_AUTH_SOCK\"\n\
         ssh-add -l\n\
         git init -q -b main work && cd work\n\
         echo pushed > f && git add f\n\
         git -c user.name=t -c user.email=t@example.invalid commit -qm pushed-from-sandbox\n\
         GIT_SSH_COMMAND='{ssh}' git push -q ssh://git.test{repo} main 2>&1\n\
         echo PUSHED\n",
            repo = s.repo.display(),
        );
        let vars = [("SSH_AUTH_SOCK", s.agent_sock.to_str().unwrap())];
        let o = net::run_with(&env, &policy, &common::marked(&script), &vars);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            out.contains("PUSHED") && out.contains("agent at /run/cordon/ssh-agent.sock"),
            "{}\n--- sshd\n{}",
            show(&o),
            std::fs::read_to_string(s.srv.join("git.log")).unwrap_or_default()
        );
        assert!(
            out.contains("git-key"),
            "the agent lists the user's key: {out}"
        );
        let log = run_ok(
            Command::new("git")
                .args(["-c", "safe.directory=*", "--git-dir"])
                .arg(&s.repo)
                .args(["log", "--format=%s", "main"]),
        );
        assert_eq!(
            log.trim(),
            "pushed-from-sandbox",
            "the host's repository has the commit"
        );
        assert!(
            audit(&env).contains("signed a login to git.test:"),
            "the signature is logged: {}",
            audit(&env)
        );

        // other.test, reached through git.test (the network sees only git.test): the agent
        // refuses its binding and its signature, naming it.
        let o = net::run_with(
            &env,
            &policy,
            &common::marked(&format!("{ssh} other.test true")),
            &vars,
        );
        common::assert_denied(&o, "ssh to other.test");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("Permission denied (publickey)"),
            "{}",
            show(&o)
        );
        assert!(
            err.contains("cordon: ssh agent: refused session-bind for other.test:22"),
            "the terminal is told which host got no signature: {}",
            show(&o)
        );
        let a = audit(&env);
        assert!(
            a.lines()
                .any(|l| l.contains("ssh agent: refused session-bind for other.test")),
            "the refusal names the host: {a}"
        );
        assert!(
            a.lines()
                .any(|l| l.contains("ssh agent: refused sign for other.test")),
            "{a}"
        );
        assert!(
            !std::fs::read_to_string(s.srv.join("other.log"))
                .unwrap_or_default()
                .contains("Accepted publickey"),
            "other.test let the sandbox in"
        );
        let _ = s.other_port;
    }
);

both!(
    keys_stay_masked_while_known_hosts_and_config_are_readable,
    |env: Env| {
        if !need(
            &[
                "ssh",
                "ssh-agent",
                "ssh-add",
                "ssh-keygen",
                SSHD,
                "git",
                "setpriv",
            ],
            "SSH through the filtering agent",
        ) {
            return;
        }
        net::tun_ready();
        let s = setup(&env);
        let policy = net::named(&["git.test"], &[("git.test", &[s.allowed_port])], "");
        let vars = [("SSH_AUTH_SOCK", s.agent_sock.to_str().unwrap())];
        let o = net::run_with(
            &env,
            &policy,
            &common::marked(&format!(
                "cat ~/.ssh/known_hosts ~/.ssh/config && echo READABLE; \
                 cat ~/.ssh/id_git ~/.ssh/id_ed25519 && echo KEY-READ; \
                 ls ~/.ssh; ssh-add -D && echo REMOVED; ssh-add -l; \
                 SSH_AUTH_SOCK={real} ssh-add -D && echo REAL-REACHED",
                real = s.agent_sock.display()
            )),
            &vars,
        );
        common::assert_ran(&o);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("READABLE") && out.contains("other.test") && out.contains("ProxyJump"),
            "{}",
            show(&o)
        );
        assert!(
            !out.contains("KEY-READ")
                && !out.contains("PRIVATE KEY")
                && !out.contains("SECRET-ssh-key"),
            "{}",
            show(&o)
        );
        assert!(
            !out.contains("REAL-REACHED"),
            "the host's own agent socket was reachable past the filter: {}",
            show(&o)
        );
        assert!(
            !out.contains("REMOVED"),
            "the sandbox removed the user's keys: {}",
            show(&o)
        );
        assert!(
            out.contains("git-key"),
            "the keys are still there: {}",
            show(&o)
        );
        assert!(
            audit(&env).contains("refused remove all identities"),
            "{}",
            audit(&env)
        );
        // And on the host, the agent still holds the key.
        let listed = run_ok(
            as_variant(&env, "ssh-add")
                .env("SSH_AUTH_SOCK", &s.agent_sock)
                .arg("-l"),
        );
        assert!(listed.contains("git-key"));
    }
);

/// An agent of the host's own, killed on drop by the pid it printed (`ssh-agent -s` forks).
struct ForkedAgent(String);

impl Drop for ForkedAgent {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(&self.0).status();
    }
}

// `ssh-agent` started the way `eval $(ssh-agent)` starts it: its socket in a fresh
// `/tmp/ssh-XXXX/` (where sshd puts a forwarded agent too), which the sandbox's private
// `/tmp` does not have, and with `XDG_RUNTIME_DIR` under `/tmp` as containers and minimal
// systems set it. The session starts, lists the keys through the filter, and a signature
// bound to no host (`ssh-keygen -Y sign`) is refused.
both!(
    an_agent_under_tmp_started_the_default_way_works,
    |env: Env| {
        if !need(
            &["ssh-agent", "ssh-add", "ssh-keygen", "setpriv"],
            "an ssh-agent under /tmp",
        ) {
            return;
        }
        let key = env.home.join(".ssh/id_tmp");
        std::fs::create_dir_all(key.parent().unwrap()).unwrap();
        run_ok(
            Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "tmp-agent-key", "-f"])
                .arg(&key),
        );
        std::fs::copy(key.with_extension("pub"), env.project.join("k.pub")).unwrap();
        env.own(&env.home);
        let out = run_ok(as_variant(&env, "ssh-agent").arg("-s").env_remove("TMPDIR"));
        let var = |name: &str| {
            let at = out.find(&format!("{name}=")).expect(&out) + name.len() + 1;
            out[at..].split(';').next().unwrap().to_string()
        };
        let (sock, _agent) = (var("SSH_AUTH_SOCK"), ForkedAgent(var("SSH_AGENT_PID")));
        assert!(sock.starts_with("/tmp/ssh-"), "{out}");
        run_ok(
            as_variant(&env, "ssh-add")
                .env("SSH_AUTH_SOCK", &sock)
                .arg(&key),
        );
        let runtime = Path::new("/tmp").join(env.base.file_name().unwrap());
        let _ = std::fs::remove_dir_all(&runtime);
        std::fs::create_dir(&runtime).unwrap();
        std::fs::set_permissions(
            &runtime,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        env.own(&runtime);
        std::fs::write(env.project.join("msg"), "sign me").unwrap();
        env.own(&env.project);
        for runtime_under_tmp in [false, true] {
            let _ = std::fs::remove_file(&env.audit);
            let mut c = env.cordon();
            c.env("SSH_AUTH_SOCK", &sock);
            if runtime_under_tmp {
                c.env("XDG_RUNTIME_DIR", &runtime);
            }
            let o = c
                .args(["run", "--no-tty", "--audit"])
                .arg(&env.audit)
                .args(["--", "sh", "-c"])
                .arg(common::marked(
                    "ssh-add -l; ssh-keygen -Y sign -f k.pub -n file msg && echo SIGNED",
                ))
                .output()
                .unwrap();
            common::assert_ran(&o);
            let stdout = String::from_utf8_lossy(&o.stdout);
            assert!(
                stdout.contains("tmp-agent-key"),
                "runtime under /tmp: {runtime_under_tmp}: the keys are listed\n{}",
                show(&o)
            );
            assert!(
                !stdout.contains("SIGNED") && !env.project.join("msg.sig").exists(),
                "an unbound signature was made\n{}",
                show(&o)
            );
            assert!(
                audit(&env).contains("unbound signature request"),
                "the refusal is logged: {}",
                audit(&env)
            );
        }
        let _ = std::fs::remove_dir_all(&runtime);
    }
);
