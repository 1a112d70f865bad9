//! The sandbox's init: PID 1 of the new PID namespace (sandbox side).
//!
//! Started by the supervisor inside fresh user, mount, PID, IPC, UTS, network and cgroup
//! namespaces, as root of that user namespace: forked from `cordon run` while that has one
//! thread (no exec: `sys::fork_init`), or exec'd as `cordon __cordon_init` by a caller with
//! threads. Either way it is named `cordon-init`. It builds the view,
//! starts the command in a further, nested user and mount namespace (so every mount made here
//! is locked and cannot be undone from inside), forwards signals to it, reaps orphans, and
//! exits with the command's status. It keeps its own capabilities in the outer namespace for
//! later layers and is made non-dumpable, so the command cannot ptrace or read it.

use std::ffi::{CString, OsStr};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

use cordon_events::{Enforcement, LimitVia};
use cordon_policy::{LandlockMode, LimitsPlan};

use crate::fence::FenceStatus;
use crate::limits::{AppliedLimit, Limit};
use crate::protocol::{self, FromInit, InitSpec, InwardReply, InwardRequest, NetSetup, Prepare};
use crate::{fence, mounts, seccomp, sys};

/// The descriptor number the control channel arrives on.
pub(crate) const CONTROL_FD: RawFd = 3;

/// Signals init passes on to the command.
pub(crate) const FORWARDED: [libc::c_int; 8] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
    libc::SIGCONT,
];

static COMMAND_PID: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = COMMAND_PID.load(Ordering::Relaxed);
    if pid > 0 {
        let _ = sys::kill(pid, sig);
    }
}

fn fail(stage: &str, message: String) -> ! {
    let sent = protocol::send(
        CONTROL_FD,
        &FromInit::Failed {
            stage: stage.into(),
            message: message.clone(),
        },
        None,
    );
    // The supervisor says it once, as its own error; here only when it cannot hear.
    if sent.is_err() {
        let _ = writeln!(
            io::stderr(),
            "cordon: sandbox setup failed at {stage}: {message}"
        );
    }
    sys::exit_now(125)
}

/// Entry point of init. Never returns.
pub fn main() -> ! {
    let _ = sys::set_dumpable(false);
    let net = network_first();
    let (spec, mut ahead) = receive_spec(net);
    build_view(&spec, &mut ahead);
    let slave = open_terminal(&spec);
    for sig in FORWARDED {
        let _ = sys::install_handler(sig, forward);
    }
    let (pid, report_r) = fork_command(&spec, slave);
    let (landlock, limits) = read_start_report(pid, &report_r);
    // The command's end goes to the supervisor over this pipe once every process of the
    // sandbox is gone: it need not wait for the kernel to tear the namespaces down after init
    // (each overlay costs a grace period there). Made after the command's fork, so only init
    // holds the write end.
    let exit_pipe = sys::pipe().ok();
    let _ = protocol::hand_over(
        CONTROL_FD,
        &FromInit::Started {
            pid,
            landlock: landlock.unwrap_or_else(|| FenceStatus::failed("not applied")),
            limits,
            overlays_ahead: ahead.used(),
        },
        exit_pipe.as_ref().map(|(r, _)| r.as_raw_fd()),
    );
    let exit_w = exit_pipe.map(|(_, w)| w);
    if let NetSetup::Gateway { inward: true, .. } = spec.net {
        match sys::fork() {
            Ok(0) => inward_helper(),
            Ok(_) => {}
            Err(e) => {
                let _ = writeln!(
                    io::stderr(),
                    "cordon: published ports unavailable: fork: {e}"
                );
            }
        }
    }
    // The channel's work is done; nothing else of init's may stay open while it waits.
    let keep: Vec<RawFd> = exit_w.iter().map(|w| w.as_raw_fd()).collect();
    sys::close_fds_from(CONTROL_FD, &keep);
    wait_and_exit(pid, exit_w)
}

/// The network setup comes first, alone: the network namespace's side is built while the
/// supervisor still works out the view, and the gateway gets it as soon as it reads.
fn network_first() -> NetSetup {
    let net: NetSetup = match protocol::recv(CONTROL_FD) {
        Ok(Some((net, _))) => net,
        Ok(None) => sys::exit_now(125),
        Err(e) => fail("control channel", e.to_string()),
    };
    // The supervisor raises its own soft descriptor limit for the gateway's flows. Init was
    // cloned before it knew there would be a gateway (`EarlyInit`), so it raises its own here:
    // the command's limits stay what they were when init inherited the raised one.
    if matches!(net, NetSetup::Gateway { .. }) {
        sys::raise_nofile_limit();
    }
    if net != NetSetup::Host
        && let Err(e) = sys::loopback_up()
    {
        fail("network", format!("bring up loopback: {e}"));
    }
    // Before the view is built: /dev/net/tun is the host's device node.
    if let NetSetup::Gateway {
        addr,
        mtu,
        proxy_port,
        ..
    } = net
    {
        gateway_handoff(addr, mtu, proxy_port);
    }
    net
}

/// The view's start that needs no spec, the session's overlays as soon as they come, then the
/// spec itself, which must carry the network setup `net` that came first.
fn receive_spec(net: NetSetup) -> (InitSpec, mounts::Ahead) {
    // The layout-independent start of the view, also before the spec arrives.
    if let Err(e) = mounts::stage() {
        fail("filesystem", e.to_string());
    }
    // The session's overlays, mounted aside while the host still makes the view.
    let prepare: Prepare = match protocol::recv(CONTROL_FD) {
        Ok(Some((prepare, _))) => prepare,
        Ok(None) => sys::exit_now(125),
        Err(e) => fail("control channel", e.to_string()),
    };
    let ahead = mounts::prepare(&prepare.overlays);
    let spec: InitSpec = match protocol::recv_spec(CONTROL_FD) {
        Ok(Some(spec)) => spec,
        Ok(None) => sys::exit_now(125),
        Err(e) => fail("control channel", e.to_string()),
    };
    if spec.net != net {
        fail(
            "control channel",
            "the spec's network setup is not the one sent first".into(),
        );
    }
    (spec, ahead)
}

fn build_view(spec: &InitSpec, ahead: &mut mounts::Ahead) {
    // A nested sandbox needs a /proc it may mount again; never root's (see `ProcView`).
    let proc = if spec.syscalls.nested_userns && spec.uid != 0 {
        mounts::ProcView::Plain
    } else {
        mounts::ProcView::Sealed
    };
    if let Err(e) = mounts::build(&spec.layout, spec.tmpfs_size, proc, ahead) {
        fail("filesystem", e.to_string());
    }
    if let Err(e) = sys::sethostname(&spec.hostname) {
        fail("hostname", e.to_string());
    }
}

/// The command's terminal is a pty of the sandbox's own devpts, so `tty` and ttyname work
/// inside; the master goes to the supervisor, which relays it to the user's terminal. Returns
/// the slave, for the command.
fn open_terminal(spec: &InitSpec) -> Option<OwnedFd> {
    match spec.tty {
        Some(ws) => match sys::open_pty() {
            Ok((master, slave)) => {
                let _ = sys::set_winsize(slave.as_raw_fd(), ws);
                if let Err(e) =
                    protocol::hand_over(CONTROL_FD, &FromInit::Pty, Some(master.as_raw_fd()))
                {
                    fail("terminal", e.to_string());
                }
                Some(slave)
            }
            Err(e) => fail("terminal", format!("open pty: {e}")),
        },
        None => None,
    }
}

/// Fork the command's process; returns its pid and the socket it reports its setup over:
/// text lines, and its seccomp listener.
fn fork_command(spec: &InitSpec, slave: Option<OwnedFd>) -> (libc::pid_t, OwnedFd) {
    let (report_r, report_w) = match sys::socketpair() {
        Ok(p) => p,
        Err(e) => fail("start", e.to_string()),
    };
    let pid = match sys::fork() {
        Ok(0) => {
            drop(report_r);
            command_child(spec, slave, report_w)
        }
        Ok(pid) => pid,
        Err(e) => fail("start", format!("fork: {e}")),
    };
    COMMAND_PID.store(pid, Ordering::Relaxed);
    drop(report_w);
    drop(slave);
    (pid, report_r)
}

/// Read the command's setup report until its seccomp listener, which is handed on at once;
/// returns how Landlock is enforced and the rlimits set.
fn read_start_report(
    pid: libc::pid_t,
    report_r: &OwnedFd,
) -> (Option<FenceStatus>, Vec<AppliedLimit>) {
    let mut text = Vec::new();
    let mut fds = Vec::new();
    let mut landlock = None;
    let mut limits = Vec::new();
    let mut buf = [0u8; 4096];
    'report: loop {
        let (n, mut got) = match sys::recv_with_fds(report_r.as_raw_fd(), &mut buf) {
            Ok(r) => r,
            Err(e) => fail("start", format!("command report: {e}")),
        };
        fds.append(&mut got);
        if n == 0 {
            let _ = sys::waitpid(pid, false);
            fail("start", "the command's setup ended without a report".into());
        }
        text.extend_from_slice(&buf[..n]);
        while let Some(end) = text.iter().position(|&c| c == b'\n') {
            let line: Vec<u8> = text.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]).into_owned();
            if let Some(v) = line.strip_prefix("landlock ") {
                match serde_json::from_str(v) {
                    Ok(status) => landlock = Some(status),
                    Err(e) => fail("start", format!("command report {line:?}: {e}")),
                }
            } else if let Some(v) = line.strip_prefix("limit ") {
                match serde_json::from_str(v) {
                    Ok(limit) => limits.push(limit),
                    Err(e) => fail("start", format!("command report {line:?}: {e}")),
                }
            } else if line == "listener" {
                // The report's end. Forward the notification descriptor now: the command's
                // exec is about to trap, and only the supervisor can answer it.
                let Some(fd) = fds.pop() else {
                    fail("syscalls", "listener descriptor missing".into())
                };
                if let Err(e) =
                    protocol::hand_over(CONTROL_FD, &FromInit::Listener, Some(fd.as_raw_fd()))
                {
                    fail("syscalls", e.to_string());
                }
                break 'report;
            } else if let Some(v) = line.strip_prefix("fail ") {
                let (stage, msg) = v.split_once(' ').unwrap_or((v, ""));
                let _ = sys::waitpid(pid, false);
                fail(stage, msg.to_string());
            }
        }
    }
    drop(fds);
    (landlock, limits)
}

/// Wait for the command, then end every process left and tell the supervisor on `exit_w`;
/// exits with the command's status.
fn wait_and_exit(pid: libc::pid_t, exit_w: Option<OwnedFd>) -> ! {
    let status = loop {
        match sys::wait_any_interruptible() {
            Ok(Some((p, st))) if p == pid => break st,
            Ok(_) => continue,
            Err(e) => {
                let _ = writeln!(io::stderr(), "cordon: init wait failed: {e}");
                sys::exit_now(125);
            }
        }
    };
    // Leaving PID 1 would kill every process still in the namespace; do it first and reap them
    // all, so that when the supervisor hears the status nothing inside can write any more.
    let _ = sys::kill(-1, libc::SIGKILL);
    while sys::wait_any_interruptible().is_ok() {}
    if let Some(w) = &exit_w {
        sys::write_all_raw(w.as_raw_fd(), &[status.code() as u8]);
    }
    sys::exit_now(status.code())
}

/// Make what the egress gateway needs inside this network namespace and send it to the
/// supervisor: the TUN device (the default route), UDP sockets on the loopback's port 53 (where
/// `resolv.conf` points, and where glibc looks when it has no `resolv.conf`), and the explicit
/// proxy's listener. Nothing here stays open in init: the command never inherits them.
fn gateway_handoff(addr: std::net::Ipv4Addr, mtu: u32, proxy_port: u16) {
    let send = |msg: &FromInit, fd: Option<RawFd>| {
        if let Err(e) = protocol::hand_over(CONTROL_FD, msg, fd) {
            fail("network", format!("hand over to the gateway: {e}"));
        }
    };
    match sys::open_tun().and_then(|tun| {
        sys::tun_configure(sys::TUN_NAME, addr, mtu)?;
        Ok(tun)
    }) {
        Ok(tun) => send(&FromInit::NetTun, Some(tun.as_raw_fd())),
        Err(e) => send(
            &FromInit::NetTunFailed {
                reason: format!("cannot create a TUN device in the sandbox: {e}"),
            },
            None,
        ),
    }
    for dns in ["127.0.0.1:53", "127.0.0.53:53"] {
        match std::net::UdpSocket::bind(dns) {
            Ok(s) => send(&FromInit::NetDns, Some(s.as_raw_fd())),
            Err(e) => fail("network", format!("bind the DNS socket {dns}: {e}")),
        }
    }
    match std::net::TcpListener::bind(("127.0.0.1", proxy_port)) {
        Ok(l) => send(&FromInit::NetProxy, Some(l.as_raw_fd())),
        Err(e) => fail(
            "network",
            format!("listen for the proxy on 127.0.0.1:{proxy_port}: {e}"),
        ),
    }
    // Optional: without it, flows' events just name no process.
    if let Ok(diag) = sys::sock_diag_socket() {
        send(&FromInit::NetDiag, Some(diag.as_raw_fd()));
    }
    send(&FromInit::NetReady, None);
}

/// The `[[publish]]` helper: a child of init outside the command's namespaces that turns
/// "connect to your loopback's port N" into a connected socket for the supervisor. Leaves when
/// the supervisor closes the channel; dies with the namespace otherwise.
fn inward_helper() -> ! {
    sys::close_fds_from(CONTROL_FD + 1, &[]);
    loop {
        let req = match protocol::recv::<InwardRequest>(CONTROL_FD) {
            Ok(Some((r, _))) => r,
            _ => sys::exit_now(0),
        };
        let sent = match connect_loopback(req.port) {
            Ok(conn) => protocol::hand_over(
                CONTROL_FD,
                &InwardReply { error: None },
                Some(conn.as_raw_fd()),
            ),
            Err(e) => protocol::send(
                CONTROL_FD,
                &InwardReply {
                    error: Some(e.to_string()),
                },
                None,
            ),
        };
        if sent.is_err() {
            sys::exit_now(0);
        }
    }
}

/// A connection to `port` on the sandbox's loopback: 127.0.0.1, else ::1, where dev servers
/// that resolve `localhost` to IPv6 first (Vite, Node 17+) listen.
fn connect_loopback(port: u16) -> std::io::Result<std::net::TcpStream> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
    let timeout = std::time::Duration::from_secs(3);
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    match TcpStream::connect_timeout(&v4, timeout) {
        Ok(c) => Ok(c),
        Err(e4) => {
            let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
            TcpStream::connect_timeout(&v6, timeout)
                .map_err(|e6| std::io::Error::new(e4.kind(), format!("{v4}: {e4}; {v6}: {e6}")))
        }
    }
}

/// Report a failure to init through the pipe and leave; nothing of the command has run.
fn child_fail(report: RawFd, stage: &str, e: impl std::fmt::Display) -> ! {
    sys::write_all_raw(report, format!("fail {stage} {e}\n").as_bytes());
    sys::exit_now(125)
}

/// In the forked child: enter the locked namespace, drop privilege, fence, exec.
fn command_child(spec: &InitSpec, slave: Option<OwnedFd>, report: OwnedFd) -> ! {
    let r = report.as_raw_fd();
    for sig in FORWARDED {
        sys::default_handler(sig);
    }
    // Rust's runtime ignores SIGPIPE, and an ignored signal stays ignored across execve:
    // without this, `yes | head` inside would see EPIPE instead of dying quietly.
    sys::default_handler(libc::SIGPIPE);
    sys::unblock_all_signals();
    // A new session: the command can never reach the user's terminal with TIOCSTI.
    if let Err(e) = sys::setsid() {
        child_fail(r, "terminal", e);
    }
    if let Some(slave) = &slave {
        let fd = slave.as_raw_fd();
        if let Err(e) = sys::set_controlling_tty(fd) {
            child_fail(r, "terminal", format!("TIOCSCTTY: {e}"));
        }
        for target in 0..3 {
            if let Err(e) = sys::dup2(fd, target) {
                child_fail(r, "terminal", e);
            }
        }
    }
    drop(slave);
    // Init is not dumpable, and a process forked from it starts the same. A forked init's
    // memory belongs to the host's user namespace, not the sandbox's (no exec made it anew),
    // and a non-dumpable process's /proc files to that namespace's root, so this process
    // could not write its own id maps below. It becomes dumpable, as its exec would make it
    // anyway: nothing else runs in the sandbox yet.
    if let Err(e) = sys::set_dumpable(true) {
        child_fail(r, "lock-mounts", e);
    }
    if let Err(e) = enter_locked_namespace(spec.uid, spec.gid) {
        child_fail(r, "lock-mounts", e);
    }
    for applied in apply_rlimits(&spec.limits) {
        match applied {
            Ok(l) => send_report(r, "limit", &l),
            Err(e) => child_fail(r, "limits", e),
        }
    }
    // The directory cordon was started from may not be in the view; the project always is.
    if std::env::set_current_dir(&spec.cwd).is_err()
        && let Err(e) = std::env::set_current_dir(&spec.project)
    {
        child_fail(r, "cwd", format!("{}: {e}", spec.project.display()));
    }
    if let Err(e) = sys::set_no_new_privs() {
        child_fail(r, "no_new_privs", e);
    }
    // Nested sandboxes are built of mounts, which the kernel refuses under a Landlock
    // filesystem ruleset: `nested_userns` trades those rules for the nested sandbox's own.
    let nested = spec.syscalls.nested_userns;
    let fenced = if nested {
        fence::apply_scopes_only()
    } else {
        fence::apply(&spec.layout.landlock)
    };
    let landlock = match fenced {
        Ok(status) => status,
        Err(e) if spec.landlock == LandlockMode::Required && !nested => {
            child_fail(r, "landlock", e)
        }
        Err(e) => FenceStatus {
            nested,
            ..FenceStatus::failed(e)
        },
    };
    if landlock.enforcement == Enforcement::None
        && spec.landlock == LandlockMode::Required
        && !nested
    {
        child_fail(
            r,
            "landlock",
            format!(
                "{landlock}; policy requires it (set [filesystem] landlock = \"best-effort\" to run without)"
            ),
        );
    }
    send_report(r, "landlock", &landlock);
    // Root may map uid 0 into a user namespace it makes only while it holds CAP_SETFCAP
    // (Linux 5.12: else a file capability written inside would be honoured outside), so a
    // nested sandbox of root's keeps that one; no_new_privs and the empty rest of the bounding
    // set keep it from ever becoming more at exec. Nothing else is kept, and never for a user.
    // What CAP_SETFCAP is for, writing security.capability, the filter below takes away: root
    // here is root of the host, and the host would honour what it wrote.
    let root = spec.uid == 0;
    let keep = sys::keeps_setfcap(nested, root).then_some(sys::CAP_SETFCAP);
    if let Err(e) = sys::drop_capabilities_but(keep) {
        child_fail(r, "capabilities", e);
    }
    // What exec needs is made while failing is still reported (see below).
    let exec = ExecArgs::new(spec, r);
    // The syscall filter goes on last, just before exec: nothing of setup needs what it denies.
    // As root it also keeps set-id bits off files (and file capabilities, with CAP_SETFCAP).
    let filters = match seccomp::build(&spec.syscalls, spec.supervise_exec, spec.trace_paths, root)
    {
        Ok(f) => f,
        Err(e) => child_fail(r, "syscalls", e),
    };
    let listener = match seccomp::install(&filters) {
        Ok(listener) => listener,
        Err(e) => child_fail(r, "syscalls", format!("install the seccomp filter: {e}")),
    };
    sys::close_fds_from(3, &[r, listener.as_raw_fd()]);
    // The report's last line: init tells the supervisor the command has started as soon as it
    // reads it, so the supervisor is already answering notifications when the exec below
    // traps, instead of first hearing of the start through init while the exec waits (issue
    // #18). Nothing after it can fail but the exec itself, whose failure is the command's exit
    // status (126, 127), as in a shell.
    if let Err(e) = sys::send_with_fd(r, b"listener\n", listener.as_raw_fd()) {
        child_fail(r, "syscalls", e);
    }
    drop(listener);
    exec.exec()
}

/// Enter a nested user + mount namespace: the mounts made by init are copied into a namespace
/// owned by a less privileged user namespace, which makes the kernel lock them (no umount, no
/// clearing read-only) — the same device bubblewrap uses. The command gets its real uid/gid.
fn enter_locked_namespace(uid: u32, gid: u32) -> io::Result<()> {
    sys::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS)?;
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} 0 1\n"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} 0 1\n"))?;
    Ok(())
}

/// One line of the command's setup report to init: `KIND <json>`, so what it reports stays
/// typed across the pipe (a JSON string holds no newline).
fn send_report(r: RawFd, kind: &str, value: &impl serde::Serialize) {
    match serde_json::to_string(value) {
        Ok(json) => sys::write_all_raw(r, format!("{kind} {json}\n").as_bytes()),
        Err(e) => child_fail(r, "start", format!("report {kind}: {e}")),
    }
}

/// rlimits are per process and inherited, so they bound every process the command starts.
fn apply_rlimits(l: &LimitsPlan) -> Vec<Result<AppliedLimit, String>> {
    let rlimits = [
        (libc::RLIMIT_AS, l.memory, Limit::Memory as fn(u64) -> Limit),
        (libc::RLIMIT_NPROC, l.pids, Limit::Pids),
        (libc::RLIMIT_NOFILE, l.nofile, Limit::Nofile),
    ];
    let mut out = Vec::new();
    for (resource, value, limit) in rlimits {
        let Some(v) = value else { continue };
        let limit = limit(v);
        out.push(
            sys::setrlimit(resource, v)
                .map(|_| AppliedLimit {
                    limit,
                    via: LimitVia::Rlimit,
                })
                .map_err(|e| format!("setrlimit {limit}: {e}")),
        );
    }
    out
}

/// The command's exec, its arguments checked while the command's setup can still report.
struct ExecArgs {
    argv: Vec<CString>,
    envp: Vec<CString>,
    name: std::ffi::OsString,
    path_var: std::ffi::OsString,
}

impl ExecArgs {
    fn new(spec: &InitSpec, report: RawFd) -> ExecArgs {
        let to_c = |v: &Vec<u8>| CString::new(v.clone()).ok();
        let argv: Option<Vec<CString>> = spec.argv.iter().map(to_c).collect();
        let envp: Option<Vec<CString>> = spec.env.iter().map(to_c).collect();
        let (Some(argv), Some(envp)) = (argv, envp) else {
            child_fail(
                report,
                "exec",
                "argument or environment contains a NUL byte",
            )
        };
        let Some(first) = spec.argv.first() else {
            child_fail(report, "exec", "empty command")
        };
        let path_var = spec
            .env
            .iter()
            .find_map(|kv| kv.strip_prefix(b"PATH="))
            .map(|p| OsStr::from_bytes(p).to_owned())
            .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        ExecArgs {
            argv,
            envp,
            name: OsStr::from_bytes(first).to_owned(),
            path_var,
        }
    }

    fn exec(self) -> ! {
        exec_command(&self.argv, &self.envp, &self.name, &self.path_var)
    }
}

fn exec_command(argv: &[CString], envp: &[CString], name: &OsStr, path_var: &OsStr) -> ! {
    let first = name.as_bytes();
    // As a shell does, the name is looked up first and only what exists is exec'd: with exec
    // supervision every execve is a round trip to the supervisor, and one per PATH directory
    // without the name (`/usr/local/sbin/true`, …) bought nothing but an ENOENT. What is
    // exec'd is still decided by the supervisor; an entry that cannot be looked at (EACCES,
    // ELOOP) is still tried, so its error is the one reported.
    let candidates: Vec<PathBuf> = if first.contains(&b'/') {
        vec![PathBuf::from(name)]
    } else {
        std::env::split_paths(&path_var)
            .filter(|d| !d.as_os_str().is_empty())
            .map(|d| d.join(name))
            .filter(|c| match std::fs::metadata(c) {
                Ok(_) => true,
                Err(e) => !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)),
            })
            .collect()
    };
    let mut last = io::Error::from_raw_os_error(libc::ENOENT);
    let mut denied = false;
    for c in candidates {
        let Ok(cpath) = sys::cstr(&c) else { continue };
        let e = sys::execve(&cpath, argv, envp);
        match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => {}
            Some(libc::EACCES) => {
                denied = true;
                last = e;
            }
            _ => {
                last = e;
                denied = true;
                break;
            }
        }
    }
    let shown = name.to_string_lossy();
    let (code, msg) = if denied {
        (126, format!("cordon: {shown}: {last}\n"))
    } else {
        (127, format!("cordon: {shown}: command not found\n"))
    };
    sys::write_all_raw(2, msg.as_bytes());
    sys::exit_now(code)
}
