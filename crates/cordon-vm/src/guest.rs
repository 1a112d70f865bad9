//! The guest side: cordon as PID 1 of the guest kernel, started from the initramfs
//! ([`crate::boot`]). It loads the modules, makes the host's view (shared over 9p) its root,
//! and runs the command in the namespace sandbox as the host would, as the user, with the
//! guest's link to the gateway as that sandbox's network ([`GuestNet`]). PID 1 itself only
//! pumps the control port and reaps; it powers the guest off when the command has ended.
//!
//! Nothing here is trusted by the host: what the guest says (events, the exit code) crosses
//! the control port and is read as hostile input there.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cordon_events::{Action, Layer, NewEvent};

use crate::channel::{Frame, GuestSpec, PORT_NAME, Reader, WireEvent};
use crate::sys;
use cordon_net::ether::{GATEWAY_MAC, LINK_GATEWAY};

/// The first argument that makes the cordon executable the guest's init (the kernel passes
/// the words after `--` on its command line).
pub const GUEST_ARG: &str = "__cordon_guest";
/// Where the 9p root is mounted before it becomes `/`.
const NEWROOT: &str = "/newroot";
/// How long the guest waits for a virtio device to show up (TCG is slow).
const DEVICE_WAIT: Duration = Duration::from_secs(30);

/// The guest's PID 1. Never returns: the guest powers off. Anywhere but as PID 1 of the
/// initramfs cordon built (a user typing the argument, a container's init) it refuses and
/// exits 125 before touching anything.
pub fn main() -> ! {
    let initramfs = std::env::args_os().next().is_some_and(|a| a == "/cordon")
        && Path::new("/modules").is_file();
    if std::process::id() != 1 || !initramfs {
        eprintln!("cordon: {GUEST_ARG} is the VM guest's init, started by the guest kernel only");
        std::process::exit(125);
    }
    let port = match boot() {
        Ok(p) => p,
        Err(e) => {
            console(&format!("cordon guest: {e}"));
            sys::power_off();
        }
    };
    if let Err(e) = serve(port) {
        console(&format!("cordon guest: {e}"));
    }
    sys::power_off();
}

fn console(line: &str) {
    if let Ok(mut c) = std::fs::OpenOptions::new().write(true).open("/dev/console") {
        let _ = writeln!(c, "{line}");
    }
}

fn ctx<T>(what: &str, r: io::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// From the initramfs to the host's view as root: returns the control port.
fn boot() -> Result<File, String> {
    let none = None;
    ctx(
        "mount /dev",
        sys::mount("devtmpfs", Path::new("/dev"), Some("devtmpfs"), 0, none),
    )?;
    ctx(
        "mount /proc",
        sys::mount("proc", Path::new("/proc"), Some("proc"), 0, none),
    )?;
    ctx(
        "mount /sys",
        sys::mount("sysfs", Path::new("/sys"), Some("sysfs"), 0, none),
    )?;
    load_modules()?;
    let deadline = Instant::now() + DEVICE_WAIT;
    // The 9p device is probed in the background once its module is in: retried until then.
    // `loose`: the guest keeps its dentries and inodes. Without it each lookup makes a new
    // inode, and the guest sandbox's Landlock rules (kept on inodes) would match nothing.
    let opts = "trans=virtio,version=9p2000.L,msize=512000,cache=loose";
    let root = Path::new(NEWROOT);
    loop {
        match sys::mount("cordonroot", root, Some("9p"), 0, Some(opts)) {
            Ok(()) => break,
            Err(e) if Instant::now() > deadline => return Err(format!("mount the view (9p): {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    mount_guest_filesystems(root)?;
    ctx("switch to the view", sys::switch_root(root))?;
    let port = find_port(deadline)?;
    ctx(
        "open the control port",
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&port),
    )
}

fn load_modules() -> Result<(), String> {
    let list = ctx("read /modules", std::fs::read_to_string("/modules"))?;
    for m in list.lines().filter(|l| !l.is_empty()) {
        let f = ctx(&format!("open {m}"), File::open(m))?;
        ctx(&format!("load {m}"), sys::load_module(&f))?;
    }
    Ok(())
}

/// The guest kernel's own /proc, /sys, /dev (with ptys) over the view's.
fn mount_guest_filesystems(root: &Path) -> Result<(), String> {
    let at = |p: &str| root.join(p);
    let none = None;
    ctx(
        "mount /proc",
        sys::mount("proc", &at("proc"), Some("proc"), 0, none),
    )?;
    ctx(
        "mount /sys",
        sys::mount("sysfs", &at("sys"), Some("sysfs"), 0, none),
    )?;
    ctx(
        "mount /dev",
        sys::mount("devtmpfs", &at("dev"), Some("devtmpfs"), 0, none),
    )?;
    // As distributions ship it (udev's rule): the sandbox, run as the user, makes its TUN.
    let _ = std::fs::set_permissions(
        at("dev/net/tun"),
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    );
    let _ = std::fs::create_dir_all(at("dev/pts"));
    ctx(
        "mount /dev/pts",
        sys::mount(
            "devpts",
            &at("dev/pts"),
            Some("devpts"),
            0,
            Some("mode=620,ptmxmode=666"),
        ),
    )?;
    let _ = std::fs::create_dir_all(at("dev/shm"));
    let _ = sys::mount("tmpfs", &at("dev/shm"), Some("tmpfs"), 0, none);
    // cgroup v2 for the sandbox's limits; without it they degrade as on a host without one.
    let _ = sys::mount("cgroup2", &at("sys/fs/cgroup"), Some("cgroup2"), 0, none);
    // The IPv6 the link does not carry: no autoconfiguration chatter on it.
    let _ = std::fs::write(at("proc/sys/net/ipv6/conf/all/disable_ipv6"), "1");
    let _ = std::fs::write(at("proc/sys/net/ipv6/conf/default/disable_ipv6"), "1");
    Ok(())
}

/// The control port's device, by the name QEMU gave it.
fn find_port(deadline: Instant) -> Result<PathBuf, String> {
    loop {
        if let Ok(dir) = std::fs::read_dir("/sys/class/virtio-ports") {
            for e in dir.flatten() {
                let name = std::fs::read_to_string(e.path().join("name")).unwrap_or_default();
                if name.trim() == PORT_NAME {
                    let dev = Path::new("/dev").join(e.file_name());
                    if dev.exists() {
                        return Ok(dev);
                    }
                }
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no virtio port named {PORT_NAME} appeared"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The command's stdio as PID 1 holds it: the pty's master, or the three pipes' ends.
struct Stdio {
    /// Where [`Frame::Stdin`] goes (the master, or stdin's pipe), until the host's ends.
    input: Option<File>,
    /// The output (the master, or stdout's pipe).
    out: Option<File>,
    err: Option<File>,
    /// The child's ends.
    child: [OwnedFd; 3],
    tty: bool,
}

fn stdio(spec: &GuestSpec) -> io::Result<Stdio> {
    if let Some((rows, cols)) = spec.tty {
        let (master, slave) = sys::openpty(rows, cols)?;
        let input = File::from(master.try_clone()?);
        return Ok(Stdio {
            input: Some(input),
            out: Some(File::from(master)),
            err: None,
            child: [slave.try_clone()?, slave.try_clone()?, slave],
            tty: true,
        });
    }
    let (in_r, in_w) = sys::pipe()?;
    let (out_r, out_w) = sys::pipe()?;
    let (err_r, err_w) = sys::pipe()?;
    Ok(Stdio {
        input: Some(File::from(in_w)),
        out: Some(File::from(out_r)),
        err: Some(File::from(err_r)),
        child: [in_r, out_w, err_w],
        tty: false,
    })
}

/// Reads the spec, starts the command's supervisor, and pumps until it has ended.
fn serve(mut port: File) -> Result<(), String> {
    ctx("say hello", Frame::Hello.write_to(&mut port))?;
    let mut reader = Reader::default();
    let spec = match ctx("read the spec", reader.read_from(&mut port))? {
        Some(Frame::Start(json)) => serde_json::from_slice::<GuestSpec>(&json)
            .map_err(|e| format!("the spec does not parse: {e}"))?,
        other => return Err(format!("expected the spec, got {other:?}")),
    };
    let fail = |port: &mut File, why: String| {
        let _ = Frame::Failed(why.clone()).write_to(port);
        why
    };
    let net = match network(&spec) {
        Ok(n) => n,
        Err(e) => return Err(fail(&mut port, e)),
    };
    let io = stdio(&spec).map_err(|e| fail(&mut port, format!("stdio: {e}")))?;
    // The command's supervisor runs with the host's environment as its policy let it through
    // (the forked child inherits it), so it finds its directories where the host has them.
    sys::set_environment(spec.env_pairs());
    approval_dir(&spec).map_err(|e| fail(&mut port, e))?;
    let (events_r, events_w) = sys::pipe().map_err(|e| fail(&mut port, format!("pipe: {e}")))?;
    let child = match sys::fork() {
        Ok(Some(pid)) => pid,
        Ok(None) => {
            // PID 1's ends stay PID 1's: a copy held here would keep the command's stdin
            // from ever ending, and the port is not the command's.
            drop((events_r, port));
            let Stdio {
                input,
                out,
                err,
                child,
                tty,
            } = io;
            drop((input, out, err));
            let code = supervise(&spec, child, tty, net, File::from(events_w));
            std::process::exit(code);
        }
        Err(e) => return Err(fail(&mut port, format!("fork: {e}"))),
    };
    drop(events_w);
    drop(net);
    let Stdio {
        input,
        out,
        err,
        child: ends,
        tty,
    } = io;
    drop(ends);
    let streams = Streams {
        input,
        out,
        err,
        tty,
    };
    let code = pump(&mut port, reader, child, streams, File::from(events_r))?;
    ctx("report the exit", Frame::Exit(code).write_to(&mut port))?;
    // Power off only once the host has the exit (it closes its end), or after a while: what
    // is still in the port's queues would be lost with the guest.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        match sys::poll(&[(port.as_raw_fd(), libc::POLLIN)], 100) {
            Ok(r) if r[0] & (libc::POLLHUP | libc::POLLERR) != 0 => break,
            Ok(r) if r[0] != 0 => {
                if matches!(port.read(&mut [0u8; 4096]), Ok(0) | Err(_)) {
                    break;
                }
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(())
}

/// The guest's end of the link: `eth0` up without an address (the guest kernel keeps out of
/// it), and a packet socket on it for the relay.
fn network(spec: &GuestSpec) -> Result<Option<(OwnedFd, i32)>, String> {
    let _ = sys::link_up("lo");
    if spec.plan.network.mode != cordon_policy::NetMode::Gateway {
        return Ok(None);
    }
    let index = ctx("bring up eth0", sys::link_up("eth0"))?;
    let sock = ctx("open a packet socket on eth0", sys::packet_socket(index))?;
    Ok(Some((sock, index)))
}

/// The forked child: the user's ids, the host's environment as its policy let it through,
/// and the namespace sandbox around the command (never returns to PID 1's loop).
fn supervise(
    spec: &GuestSpec,
    stdio: [OwnedFd; 3],
    tty: bool,
    net: Option<(OwnedFd, i32)>,
    events: File,
) -> i32 {
    let raw = [
        stdio[0].as_raw_fd(),
        stdio[1].as_raw_fd(),
        stdio[2].as_raw_fd(),
    ];
    if let Err(e) = sys::become_command(raw, tty, spec.uid, spec.gid) {
        eprintln!("cordon guest: cannot become the command's session: {e}");
        return 125;
    }
    drop(stdio);
    let events = std::sync::Mutex::new(events);
    let emit = move |ev: NewEvent| {
        let Ok(mut line) = serde_json::to_vec(&WireEvent::from(ev)) else {
            return;
        };
        line.push(b'\n');
        let mut f = events.lock().unwrap_or_else(|p| p.into_inner());
        let _ = f.write_all(&line);
    };
    let cmd = cordon_sandbox::Command {
        argv: spec.argv(),
        cwd: spec.cwd.clone(),
        tty: if tty {
            cordon_sandbox::TtyMode::Auto
        } else {
            cordon_sandbox::TtyMode::Never
        },
        session: spec.session.clone(),
        approvals: None,
        staged: Vec::new(),
        shown: Vec::new(),
        placed: spec.placed.clone(),
        sockets: Vec::new(),
        bound: Vec::new(),
        signals_to: None,
        trace_home: None,
        execs: None,
    };
    let mut guest_net = net.map(|(packet, ifindex)| GuestNet {
        packet,
        ifindex,
        trust_bundle: spec.trust_bundle,
    });
    let attach = guest_net
        .as_mut()
        .map(|n| n as &mut dyn cordon_sandbox::NetAttach);
    match cordon_sandbox::run_with_network(&spec.plan, &cmd, &emit, attach) {
        Ok(outcome) => outcome.code(),
        Err(e) => {
            eprintln!("cordon: {e}");
            emit(NewEvent::new(Layer::Process, Action::Error, e.to_string()));
            125
        }
    }
}

/// The approval directory the supervisor will use is the host's path, which the view masks
/// (read-only, empty): a fresh tmpfs of the user's goes over the mask that covers it, so the
/// supervisor can make it there. Its sandbox masks the same path again, as on the host.
fn approval_dir(spec: &GuestSpec) -> Result<(), String> {
    let Some(dir) = cordon_approval::default_dir() else {
        return Ok(());
    };
    let mask = spec
        .plan
        .filesystem
        .deny
        .iter()
        .map(|d| d.path.as_path())
        .filter(|p| dir.starts_with(p) && p.is_dir())
        .max_by_key(|p| p.components().count());
    let Some(mask) = mask else {
        return Ok(());
    };
    let opts = format!("mode=0700,uid={},gid={}", spec.uid, spec.gid);
    ctx(
        &format!("mount the approval directory's tmpfs at {}", mask.display()),
        sys::mount("tmpfs", mask, Some("tmpfs"), 0, Some(&opts)),
    )
}

/// The command's stdio as PID 1 pumps it, once the child has its ends.
struct Streams {
    input: Option<File>,
    out: Option<File>,
    err: Option<File>,
    tty: bool,
}

/// PID 1's loop: the control port's frames to the command, the command's output and events
/// to the port, until the supervisor has ended and its output is drained. Returns its code.
fn pump(
    port: &mut File,
    mut reader: Reader,
    child: libc::pid_t,
    streams: Streams,
    events: File,
) -> Result<i32, String> {
    let Streams {
        input,
        mut out,
        mut err,
        tty,
    } = streams;
    let mut input = Input::new(input);
    let mut events = Some(events);
    let mut partial_event = Vec::new();
    let mut code = None;
    let mut drain_until: Option<Instant> = None;
    let mut buf = vec![0u8; 64 << 10];
    let mut port_open = true;
    // Only a pty's master takes window sizes, and keeps the input open past the host's end.
    let tty_master = out.as_ref().filter(|_| tty).map(|o| o.as_raw_fd());
    loop {
        while let Some((pid, c)) = sys::reap_any() {
            if pid == child {
                code = Some(c);
                drain_until = Some(Instant::now() + DRAIN);
            }
        }
        let outputs_done = out.is_none() && err.is_none() && events.is_none();
        if let Some(c) = code
            && (outputs_done || drain_until.is_some_and(|d| Instant::now() > d))
        {
            return Ok(c);
        }
        let fd = |f: &Option<File>| f.as_ref().map_or(-1, |f| f.as_raw_fd());
        // Input the command has not taken holds the port back (the host's writes then wait),
        // so a command that does not read its stdin never stops its output being pumped.
        let port_fd = match port_open && input.pending.len() < INPUT_HELD {
            true => port.as_raw_fd(),
            false => -1,
        };
        let watched = [
            (port_fd, libc::POLLIN),
            (fd(&out), libc::POLLIN),
            (fd(&err), libc::POLLIN),
            (fd(&events), libc::POLLIN),
            (input.waiting(), libc::POLLOUT),
        ];
        let rev = ctx("poll", sys::poll(&watched, 100))?;
        if rev[0] != 0 {
            match port.read(&mut buf) {
                Ok(0) | Err(_) => {
                    // The host is gone: so is the session.
                    port_open = false;
                    sys::kill(child, libc::SIGKILL);
                }
                Ok(n) => reader.push(&buf[..n]),
            }
        }
        // Frames read with the spec, before this loop, are in the reader already.
        while let Some(f) = ctx("control port", reader.next_frame())? {
            take(f, child, &mut input, tty_master);
        }
        input.write_some();
        let mut moved = forward(&mut out, rev[1], &mut buf, port, Frame::Stdout)?;
        moved |= forward(&mut err, rev[2], &mut buf, port, Frame::Stderr)?;
        moved |= forward_lines(&mut events, rev[3], &mut buf, port, &mut partial_event)?;
        // The drain after the command's end lasts while output still flows.
        if moved && let Some(d) = &mut drain_until {
            *d = Instant::now() + DRAIN;
        }
    }
}

/// How long output left behind by the command's processes is still pumped once it has ended,
/// counted from the last that came.
const DRAIN: Duration = Duration::from_secs(2);

/// How much of the host's input PID 1 holds for a command that is not reading it.
const INPUT_HELD: usize = 1 << 20;

/// The command's input side: what the host sent that the command has not taken yet, written
/// without blocking as the command reads.
struct Input {
    to: Option<File>,
    pending: Vec<u8>,
    /// The host's input ended: closed once `pending` is written.
    ended: bool,
}

impl Input {
    fn new(to: Option<File>) -> Input {
        if let Some(f) = &to {
            let _ = sys::set_blocking(f.as_raw_fd(), false);
        }
        Input {
            to,
            pending: Vec::new(),
            ended: false,
        }
    }

    /// The descriptor to wait on for room, while there is something to write.
    fn waiting(&self) -> RawFd {
        match (&self.to, self.pending.is_empty()) {
            (Some(f), false) => f.as_raw_fd(),
            _ => -1,
        }
    }

    fn write_some(&mut self) {
        let Some(f) = &mut self.to else {
            self.pending.clear();
            return;
        };
        while !self.pending.is_empty() {
            match f.write(&self.pending) {
                Ok(0) => break,
                Ok(n) => drop(self.pending.drain(..n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The command closed its stdin: what is left has nowhere to go.
                Err(_) => {
                    self.to = None;
                    self.pending.clear();
                    return;
                }
            }
        }
        if self.ended && self.pending.is_empty() {
            self.to = None;
        }
    }
}

/// One frame from the host, carried out.
fn take(f: Frame, child: libc::pid_t, input: &mut Input, master: Option<RawFd>) {
    match f {
        Frame::Stdin(bytes) if input.to.is_some() => input.pending.extend_from_slice(&bytes),
        // A terminal's end of input is the user's ^D, which comes as a byte: the pty stays.
        Frame::StdinEnd if master.is_none() => input.ended = true,
        Frame::Signal(n) if (1..65).contains(&n) => sys::kill(child, n),
        Frame::Winsize(rows, cols) => {
            if let Some(m) = master {
                let _ = sys::set_winsize(m, rows, cols);
            }
        }
        _ => {}
    }
}

/// Reads what is ready on `from` into `buf`: the count, or `None` for nothing (the end of it
/// closes `from`).
fn read_ready(from: &mut Option<File>, revents: i16, buf: &mut [u8]) -> Option<usize> {
    let f = from.as_mut()?;
    if revents == 0 {
        return None;
    }
    match f.read(buf) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        // EIO: a pty whose last slave closed.
        Ok(0) | Err(_) => {
            *from = None;
            None
        }
        Ok(n) => Some(n),
    }
}

/// Output that is ready, onto the port as one `wrap` frame. Returns whether anything moved.
fn forward(
    from: &mut Option<File>,
    revents: i16,
    buf: &mut [u8],
    port: &mut File,
    wrap: fn(Vec<u8>) -> Frame,
) -> Result<bool, String> {
    let Some(n) = read_ready(from, revents, buf) else {
        return Ok(false);
    };
    ctx(
        "write to the control port",
        wrap(buf[..n].to_vec()).write_to(port),
    )?;
    Ok(true)
}

/// The supervisor's events that are ready, one [`Frame::Event`] per whole line (one JSON
/// object each; a line longer than [`MAX_EVENT_LINE`] is dropped), the rest kept in
/// `partial`. Returns whether anything moved.
fn forward_lines(
    from: &mut Option<File>,
    revents: i16,
    buf: &mut [u8],
    port: &mut File,
    partial: &mut Vec<u8>,
) -> Result<bool, String> {
    let Some(n) = read_ready(from, revents, buf) else {
        return Ok(false);
    };
    partial.extend_from_slice(&buf[..n]);
    while let Some(end) = partial.iter().position(|&b| b == b'\n') {
        let line: Vec<u8> = partial.drain(..=end).take(end).collect();
        if line.len() <= MAX_EVENT_LINE {
            ctx(
                "write to the control port",
                Frame::Event(line).write_to(port),
            )?;
        }
    }
    if partial.len() > MAX_EVENT_LINE {
        partial.clear();
    }
    Ok(true)
}

/// The longest event line the guest's supervisor writes that is passed on.
const MAX_EVENT_LINE: usize = 16 << 10;

/// The guest sandbox's network: its TUN device relayed to the link as IP packets, the
/// gateway reached at [`LINK_GATEWAY`] for DNS and the explicit proxy.
struct GuestNet {
    packet: OwnedFd,
    ifindex: i32,
    trust_bundle: bool,
}

/// `sizeof(struct virtio_net_hdr)` on the TUN device.
const VNET_HDR: usize = cordon_sandbox::TUN_VNET_HDR_LEN;

impl cordon_sandbox::NetAttach for GuestNet {
    fn attach(&mut self, handoff: cordon_sandbox::NetHandoff) -> Result<(), String> {
        let tun = handoff
            .tun
            .map_err(|e| format!("the guest's sandbox has no TUN device: {e}"))?;
        sys::set_blocking(tun.as_raw_fd(), true).map_err(|e| e.to_string())?;
        let out_tun = File::from(tun);
        let in_tun = out_tun.try_clone().map_err(|e| e.to_string())?;
        let (packet, ifindex) = (self.packet.as_raw_fd(), self.ifindex);
        let pkt_in = self.packet.try_clone().map_err(|e| e.to_string())?;
        std::thread::spawn(move || to_link(out_tun, packet, ifindex));
        std::thread::spawn(move || from_link(pkt_in, in_tun));
        // DNS and the proxy are reached at the link's gateway address, through the TUN.
        drop(handoff.dns);
        drop(handoff.proxy);
        Ok(())
    }

    fn ca_bundle(&self) -> Option<cordon_sandbox::TrustBundle> {
        // The host's view already holds the bundle in place of the system's: the guest's
        // sandbox binds it again where it is and names it in the usual variables.
        self.trust_bundle.then(|| {
            cordon_sandbox::TrustBundle::File(PathBuf::from(cordon_sandbox::net::BUNDLE_PATHS[0]))
        })
    }

    fn link_gateway(&self) -> Option<std::net::Ipv4Addr> {
        Some(LINK_GATEWAY)
    }
}

/// The sandbox's packets onto the link, to the gateway's address.
fn to_link(mut tun: File, packet: RawFd, ifindex: i32) {
    let mut buf = vec![0u8; 70 << 10];
    loop {
        let n = match tun.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let Some(pkt) = buf[..n].get(VNET_HDR..) else {
            continue;
        };
        // The device offers no offloads: a header asking for one is not the kernel's.
        if buf[0] != 0 || buf[1] != 0 {
            continue;
        }
        let ethertype = match pkt.first().map(|b| b >> 4) {
            Some(4) => 0x0800,
            Some(6) => 0x86DD,
            _ => continue,
        };
        if sys::packet_send(packet, ifindex, GATEWAY_MAC, ethertype, pkt).is_err() {
            // A full queue drops a packet, as a wire would; TCP resends.
            continue;
        }
    }
}

/// What the gateway sends, into the sandbox's TUN device.
fn from_link(packet: OwnedFd, mut tun: File) {
    let mut buf = vec![0u8; VNET_HDR + (70 << 10)];
    loop {
        let (n, ethertype) = match sys::packet_recv(packet.as_raw_fd(), &mut buf[VNET_HDR..]) {
            Ok(r) => r,
            Err(_) => return,
        };
        if ethertype != 0x0800 && ethertype != 0x86DD {
            continue;
        }
        buf[..VNET_HDR].fill(0);
        if tun.write(&buf[..VNET_HDR + n]).is_err() {
            continue;
        }
    }
}
