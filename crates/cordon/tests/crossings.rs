//! The boundary's crossings, black-box. `cordon_sandbox::Crossing` is the inventory of every
//! way between the host side and the sandbox; here a real session is held open and the
//! descriptors each process holds are read from the host's `/proc` (the tests run as root,
//! which may read a non-dumpable init's): the sandbox's processes hold exactly what the
//! inventory says they hold, and what init made for the host side is held by cordon alone.
//! The other properties of each crossing are shown by the tests its `shown_by` names.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{Env, children, need, show};
use cordon_sandbox::{Crossing, Holder};

/// A session whose command waits until the test lets it go.
struct Held {
    child: Child,
    ready: PathBuf,
    stderr: PathBuf,
    cordon: u32,
    init: u32,
}

impl Held {
    /// `cordon run --no-tty [ARGS] -- sh -c 'FIRST WAIT'` with stdin and stdout on /dev/null and
    /// stderr in a file of the host's, held until the command has started.
    fn start(env: &Env, args: &[&str], first: &str) -> Held {
        let ready = env.project.join("crossings-ready");
        let stderr = env.base.join("crossings-stderr");
        let err = std::fs::File::create(&stderr).unwrap();
        let child = env
            .cordon()
            .env("XDG_RUNTIME_DIR", common::runtime_dir(env))
            .args(["run", "--no-tty"])
            .args(args)
            .args(["--", "sh", "-c"])
            .arg(format!(
                "{first}touch {r} && while [ -e {r} ]; do sleep 0.05; done",
                r = ready.display()
            ))
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap();
        let end = Instant::now() + Duration::from_secs(30);
        while !ready.exists() {
            if Instant::now() > end {
                panic!(
                    "the command never started: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let cordon = child.id();
        let init = children(cordon, "cordon-init")
            .pop()
            .expect("cordon has a child named cordon-init");
        Held {
            child,
            ready,
            stderr,
            cordon,
            init,
        }
    }

    /// The command: init's child running `sh`.
    fn command(&self) -> u32 {
        let mut found = children(self.init, "sh");
        assert_eq!(found.len(), 1, "init's children named sh: {found:?}");
        found.pop().unwrap()
    }

    /// Let the command end; it must end well.
    fn finish(mut self) {
        std::fs::remove_file(&self.ready).unwrap();
        let st = self.child.wait().unwrap();
        let err = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        assert!(st.success(), "{st:?}\n{err}");
    }
}

/// The descriptors `pid` holds: number → what it is (`readlink /proc/PID/fd/N`).
fn fds(pid: u32) -> BTreeMap<i32, String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .map(|e| {
            let n = e.file_name().to_string_lossy().parse().unwrap();
            let target = std::fs::read_link(e.path()).unwrap();
            (n, target.display().to_string())
        })
        .collect()
}

/// Which crossing a descriptor of a process inside the sandbox is, if any: 0–2 are its
/// stdio, a pipe of init's is the exit pipe, the publish helper's descriptor 3 is the control
/// channel. Anything else is a leak.
fn crossing_of(holder: Holder, fd: i32, target: &str) -> Option<Crossing> {
    match (holder, fd) {
        (_, 0..=2) => Some(Crossing::Stdio),
        (Holder::Init, _) if target.starts_with("pipe:") => Some(Crossing::ExitPipe),
        (Holder::PublishHelper, 3) if target.starts_with("socket:") => {
            Some(Crossing::ControlChannel)
        }
        _ => None,
    }
}

/// `pid`'s descriptors are exactly the inventory's for `holder`: stdio as cordon was given
/// it, one descriptor of each other crossing it lists, nothing else.
fn assert_holds_its_crossings(pid: u32, holder: Holder, stderr: &Path) {
    let held = fds(pid);
    let mut found: BTreeMap<Crossing, usize> = BTreeMap::new();
    for (fd, target) in &held {
        let Some(c) = crossing_of(holder, *fd, target) else {
            panic!("{holder:?} holds descriptor {fd} ({target}), no crossing: {held:?}");
        };
        *found.entry(c).or_default() += 1;
    }
    let want: BTreeSet<Crossing> = Crossing::ALL
        .into_iter()
        .filter(|c| c.held_inside().contains(&holder))
        .collect();
    assert_eq!(
        found.keys().copied().collect::<BTreeSet<_>>(),
        want,
        "{holder:?}: {held:?}"
    );
    for (c, n) in &found {
        let each = if *c == Crossing::Stdio { 3 } else { 1 };
        assert_eq!(*n, each, "{holder:?} holds {n} of {c:?}: {held:?}");
    }
    // The stdio is what cordon itself was given: nothing of the host's beyond it.
    let stdio: Vec<&str> = (0..3).map(|fd| held[&fd].as_str()).collect();
    assert_eq!(
        stdio,
        ["/dev/null", "/dev/null", &stderr.display().to_string()],
        "{holder:?}"
    );
}

// With the default policy (the gateway), init holds its stdio and the exit pipe's write end;
// the command its stdio alone; there is no publish helper. The control channel, the TUN, the
// DNS and proxy sockets, the sock_diag socket and the seccomp descriptor are all gone from
// inside once the command runs.
both!(
    each_side_holds_exactly_the_listed_descriptors,
    |env: Env| {
        common::net::tun_ready();
        let held = Held::start(&env, &[], "");
        assert_holds_its_crossings(held.init, Holder::Init, &held.stderr);
        assert_holds_its_crossings(held.command(), Holder::Command, &held.stderr);
        assert_eq!(
            children(held.init, "cordon-init"),
            Vec::<u32>::new(),
            "a publish helper without [[publish]]"
        );
        held.finish();
    }
);

// With a terminal, the command's stdio is the slave of a pty of the sandbox's own devpts,
// and it holds nothing else; the master is the supervisor's (the pty crossing).
both!(
    the_command_under_a_pty_holds_only_its_terminal,
    |env: Env| {
        // The shell's own descriptors, listed by `ls` (whose own are its, not the shell's).
        let line = format!("{} run -- sh -c 'ls -l /proc/$$/fd/'", env.cordon_line());
        let out = common::under_pty(&env, &line, "");
        let fds: Vec<String> = out
            .lines()
            .filter(|l| l.contains(" -> "))
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                format!("fd {} {}", f[f.len() - 3], f[f.len() - 1])
            })
            .collect();
        assert_eq!(
            fds,
            ["fd 0 /dev/pts/0", "fd 1 /dev/pts/0", "fd 2 /dev/pts/0"],
            "{out:?}"
        );
    }
);

// With `[[publish]]`, init's helper keeps the control channel and its stdio, nothing else;
// init and the command hold what they hold without it.
both!(
    the_publish_helper_holds_only_the_control_channel,
    |env: Env| {
        common::net::tun_ready();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pol = common::net::policy(
            &env,
            &format!("[[publish]]\nport = 18081\nhost_port = {port}\n"),
        );
        let held = Held::start(&env, &["--policy", &pol], "");
        let helpers = children(held.init, "cordon-init");
        assert_eq!(helpers.len(), 1, "publish helpers: {helpers:?}");
        assert_holds_its_crossings(helpers[0], Holder::PublishHelper, &held.stderr);
        assert_holds_its_crossings(held.init, Holder::Init, &held.stderr);
        assert_holds_its_crossings(held.command(), Holder::Command, &held.stderr);
        held.finish();
    }
);

/// Socket inodes in `/proc/PID/net/FILE` (the sandbox's namespace when PID is init) whose
/// line passes `keep` (the line split on whitespace).
fn sockets_in(pid: u32, file: &str, inode_at: usize, keep: impl Fn(&[&str]) -> bool) -> Vec<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/{file}")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() > inode_at && keep(f))
        .map(|f| f[inode_at].parse().unwrap())
        .collect()
}

/// The socket inodes `pid` holds.
fn socket_inodes(pid: u32) -> BTreeSet<u64> {
    fds(pid)
        .values()
        .filter_map(|t| t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok())
        .collect()
}

// What init made for the host side is the host side's alone: cordon holds the seccomp
// descriptor and the TUN once each, and every socket of the sandbox's network namespace that
// the gateway serves (the two DNS sockets on port 53, the proxy listener on 3128, the
// sock_diag socket), while no process inside holds any of them.
both!(
    the_gateways_descriptors_are_held_by_the_host_side_only,
    |env: Env| {
        common::net::tun_ready();
        // One flow first: the gateway asks sock_diag which socket it is, and only a netlink
        // socket that has sent is in the namespace's table.
        let flow = "python3 -c \"import socket; s = socket.socket(); s.settimeout(3); \
                    s.connect_ex(('192.0.2.1', 80))\"; ";
        let held = Held::start(&env, &[], flow);
        let host = fds(held.cordon);
        let count = |what: &str| host.values().filter(|t| t.as_str() == what).count();
        assert_eq!(count("anon_inode:seccomp notify"), 1, "{host:?}");
        // Opened inside the sandbox's own /dev, it reads as that mount's path from here.
        let tun = host.values().filter(|t| t.ends_with("/net/tun")).count();
        assert_eq!(tun, 1, "{host:?}");
        let mine = socket_inodes(held.cordon);
        let inside: BTreeSet<u64> = socket_inodes(held.init)
            .into_iter()
            .chain(socket_inodes(held.command()))
            .collect();
        // /proc/net/{udp,tcp}: local address (1), state (3), inode (9); netlink: protocol (1),
        // inode (9). The namespace's own sock_diag socket is the kernel's, held by nobody.
        let dns = sockets_in(held.init, "udp", 9, |f| f[1].ends_with(":0035"));
        let proxy = sockets_in(held.init, "tcp", 9, |f| {
            f[1] == "0100007F:0C38" && f[3] == "0A"
        });
        let diag: Vec<u64> = sockets_in(held.init, "netlink", 9, |f| f[1] == "4")
            .into_iter()
            .filter(|i| mine.contains(i) || inside.contains(i))
            .collect();
        assert_eq!(
            (dns.len(), proxy.len(), diag.len()),
            (2, 1, 1),
            "udp 53: {dns:?}, tcp 3128: {proxy:?}, sock_diag: {diag:?}, cordon's: {mine:?}"
        );
        for (c, inodes) in [
            (Crossing::DnsSockets, &dns),
            (Crossing::ProxyListener, &proxy),
            (Crossing::SockDiag, &diag),
        ] {
            for i in inodes {
                assert!(mine.contains(i), "{c:?}: socket {i} is not cordon's");
                assert!(!inside.contains(i), "{c:?}: socket {i} is held inside");
            }
        }
        held.finish();
    }
);

/// Run inside: connect to every unix socket `find` sees in the view, and to
/// `$SSH_AUTH_SOCK` (placed in a sealed directory, which `find` cannot list); one line each.
/// `find` goes by the directory entry's type, so a socket under a mask still shows as one:
/// the connect is what says whether it is reachable.
const CONNECT_ALL: &str = r#"
import os, socket, subprocess
found = subprocess.run(
    ["find", "/", "(", "-path", "/proc", "-o", "-path", "/sys", ")", "-prune",
     "-o", "-type", "s", "-print"],
    capture_output=True, text=True).stdout.split()
for p in sorted(set(found + [os.environ.get("SSH_AUTH_SOCK", "/none")])):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p)
        print("reached", p)
    except OSError as e:
        print("refused", p, e.strerror)
"#;

// The only unix sockets a sandboxed program can connect to by path are the ones cordon
// placed: with an ssh agent on the host, the filtering agent's at /run/cordon/ssh-agent.sock,
// and not the host agent's own socket (masked wherever it is), nor any other of the host's it
// may see. A host socket this user may connect to outside the masked paths would fail it: the
// known limit docs/guide/filesystem.md names, which this makes visible rather than hides.
both!(
    the_only_sockets_in_the_view_are_the_placed_ones,
    |env: Env| {
        if !need(
            &["ssh-agent", "setpriv", "python3"],
            "a host ssh-agent to place",
        ) {
            return;
        }
        env.write("connect_all.py", CONNECT_ALL);
        let sock = env.base.join("agent.sock");
        let mut agent = if env.who == common::Who::User {
            let u = common::TEST_USER;
            let mut c = std::process::Command::new("setpriv");
            c.args([
                &format!("--reuid={u}"),
                &format!("--regid={u}"),
                "--clear-groups",
                "--",
                "ssh-agent",
            ]);
            c
        } else {
            std::process::Command::new("ssh-agent")
        };
        let mut agent = agent.arg("-D").arg("-a").arg(&sock).spawn().unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        while !sock.exists() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        let o = env
            .cordon()
            .env("SSH_AUTH_SOCK", &sock)
            .args(["run", "--no-tty", "--", "sh", "-c"])
            .arg(common::marked("python3 connect_all.py"))
            .output()
            .unwrap();
        let _ = agent.kill();
        let _ = agent.wait();
        common::assert_ran(&o);
        let out = String::from_utf8_lossy(&o.stdout);
        let reached: Vec<&str> = out.lines().filter(|l| l.starts_with("reached ")).collect();
        assert_eq!(
            reached,
            ["reached /run/cordon/ssh-agent.sock"],
            "{}",
            show(&o)
        );
    }
);
