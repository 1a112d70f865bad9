//! The host side of a VM session: QEMU as the namespace sandbox's command, so that the guest's
//! root is that sandbox's view and a VMM escape lands inside it; the link's frames to the
//! gateway; the control port's frames to this terminal, the audit log and the exit code.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use cordon_events::{Emit, NewEvent};
use cordon_sandbox::{Command, NetAttach, NetHandoff, Outcome, PlacedSocket, Unborn, WaitStatus};

use crate::VmError;
use crate::boot;
use crate::channel::{Frame, GuestSpec, Reader, WireEvent};
use crate::sys;
use crate::vmm::{self, Accel, Machine};

/// Where the VM's files are inside the sandbox QEMU runs in (a masked directory).
const INSIDE: &str = "/run/cordon/vm";

/// How the VM is made (`[sandbox.vm]` and `cordon run --accel`).
#[derive(Debug, Clone)]
pub struct VmOptions {
    pub accel: Accel,
    pub memory_mib: u32,
    pub cpus: u32,
    /// The guest kernel; the newest installed one with its modules when `None`.
    pub kernel: Option<PathBuf>,
    /// Where the initramfs is kept between runs (cordon's cache, which no sandbox sees).
    pub cache_dir: PathBuf,
    /// Copy the guest's console (kernel messages, init's errors) to stderr.
    pub console: bool,
}

/// How the guest ended, as its control port said.
enum GuestEnd {
    Exit(i32),
    /// The guest's init could not start the command (said before it forked it).
    Failed(String),
    /// No word of the command's end; `started` once the spec went out (the command may have
    /// run and written).
    Silent {
        started: bool,
    },
}

/// Runs `cmd` in a VM whose root is the view `unborn` builds from `plan`: QEMU is the
/// sandbox's command, `net` (the gateway) serves the guest's link, and the guest's exit code
/// is the outcome.
pub fn run(
    unborn: Unborn,
    plan: &cordon_policy::Plan,
    cmd: &Command,
    emit: Emit,
    net: Option<&mut dyn NetAttach>,
    opts: &VmOptions,
) -> Result<Outcome, VmError> {
    let qemu = vmm::find_qemu().ok_or(VmError::NoQemu)?;
    if opts.accel == Accel::Kvm {
        vmm::kvm_usable().map_err(VmError::NoKvm)?;
    }
    let kernel = boot::find_kernel(opts.kernel.as_deref())?;
    let exe = std::env::current_exe().map_err(|e| VmError::Host {
        what: "find cordon's own executable".into(),
        source: e,
    })?;
    let initrd = boot::initramfs(&kernel, &exe, &opts.cache_dir)?;
    let dir = tempfile::Builder::new()
        .prefix("cordon-vm-")
        .tempdir_in(runtime_dir())
        .map_err(|e| VmError::Host {
            what: "make the VM's socket directory".into(),
            source: e,
        })?;
    let listen = |name: &str| {
        UnixListener::bind(dir.path().join(name)).map_err(|e| VmError::Host {
            what: format!("listen on {}", dir.path().join(name).display()),
            source: e,
        })
    };
    let (net_listener, control) = (listen("net.sock")?, listen("control.sock")?);
    let inside = Path::new(INSIDE);
    let machine = Machine {
        accel: opts.accel,
        memory_mib: opts.memory_mib,
        cpus: opts.cpus,
        kernel: inside.join("vmlinuz"),
        initrd: inside.join("initrd"),
        net: inside.join("net.sock"),
        control: inside.join("control.sock"),
        console: opts.console.then(|| PathBuf::from("/proc/self/fd/2")),
        append: format!("rdinit=/cordon -- {}", crate::guest::GUEST_ARG),
    };
    // As the namespace backend decides: a pty only when both ends are a terminal.
    let tty = (cmd.tty != cordon_sandbox::TtyMode::Never && sys::isatty(0) && sys::isatty(1))
        .then(|| sys::winsize(0).unwrap_or((24, 80)));
    let spec = guest_spec(
        plan,
        cmd,
        tty,
        net.as_ref().is_some_and(|n| n.ca_bundle().is_some()),
    );
    let spec = serde_json::to_vec(&spec).map_err(|e| VmError::Host {
        what: "write the guest's spec".into(),
        source: e.into(),
    })?;
    let (to_guest, frames) = ToGuest::new();
    let mut qemu_cmd = cmd.clone();
    qemu_cmd.argv = without_terminal(machine.argv(&qemu), opts.console);
    qemu_cmd.tty = cordon_sandbox::TtyMode::Never;
    qemu_cmd.trace_home = None;
    qemu_cmd.execs = None;
    qemu_cmd.bound = vec![
        (machine.kernel.clone(), kernel.image.clone()),
        (machine.initrd.clone(), initrd),
    ];
    for (inside, name) in [
        (&machine.net, "net.sock"),
        (&machine.control, "control.sock"),
    ] {
        qemu_cmd.sockets.push(PlacedSocket {
            path: inside.clone(),
            host: dir.path().join(name),
            env: String::new(),
        });
    }
    qemu_cmd.signals_to = Some(signal_sink(to_guest.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let _raw = match tty {
        Some(_) => sys::RawMode::enter(0).ok(),
        None => None,
    };
    let pump = {
        let (stop, emit) = (stop.clone(), emit.clone());
        let to_guest = to_guest.clone();
        std::thread::spawn(move || control_port(control, spec, (to_guest, frames), &stop, emit))
    };
    let mut vm_net = net.map(|inner| VmNet {
        inner,
        listener: Some(net_listener),
    });
    let attach = vm_net.as_mut().map(|n| n as &mut dyn NetAttach);
    let ran = unborn.run(plan, &qemu_cmd, &|ev| emit(ev), attach);
    stop.store(true, Ordering::Relaxed);
    let end = pump.join().unwrap_or(GuestEnd::Silent { started: true });
    drop(_raw);
    outcome(ran?, end, &emit)
}

/// The session's outcome from QEMU's and the guest's. Once the command may have run, a guest
/// that said nothing of its end (killed at the end of the grace, out of memory, or hostile)
/// still ends in an outcome, so the exit review runs on what the session wrote.
fn outcome(qemu: Outcome, end: GuestEnd, emit: &Emit) -> Result<Outcome, VmError> {
    match end {
        GuestEnd::Exit(code) => Ok(Outcome {
            status: WaitStatus::Exited(code),
        }),
        GuestEnd::Failed(why) => Err(VmError::Guest(cordon_events::terminal::safe(&why))),
        GuestEnd::Silent { started: false } => Err(VmError::GuestSilent(qemu.code())),
        GuestEnd::Silent { started: true } => {
            let why = VmError::GuestSilent(qemu.code()).to_string();
            eprintln!("cordon: {why}");
            emit(NewEvent::new(
                cordon_events::Layer::Process,
                cordon_events::Action::Error,
                why,
            ));
            let status = match qemu.status {
                WaitStatus::Signaled(n) => WaitStatus::Signaled(n),
                WaitStatus::Exited(_) => WaitStatus::Exited(125),
            };
            Ok(Outcome { status })
        }
    }
}

/// QEMU's command line behind a shell that gives it no terminal: it reads nothing and prints
/// nothing of use (its console is a file or nothing), and a descriptor of the user's terminal
/// would be one more thing a VMM escape holds. With the console asked for, its errors and the
/// console go to stderr as asked.
fn without_terminal(argv: Vec<std::ffi::OsString>, console: bool) -> Vec<std::ffi::OsString> {
    let redirect = match console {
        true => "exec \"$0\" \"$@\" </dev/null >/dev/null",
        false => "exec \"$0\" \"$@\" </dev/null >/dev/null 2>&1",
    };
    let mut out: Vec<std::ffi::OsString> = vec!["/bin/sh".into(), "-c".into(), redirect.into()];
    out.extend(argv);
    out
}

/// The directory for the VM's sockets: the user's runtime directory, else the system's
/// temporary one (the directory itself is private, 0700).
fn runtime_dir() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(std::env::temp_dir)
}

fn guest_spec(
    plan: &cordon_policy::Plan,
    cmd: &Command,
    tty: Option<(u16, u16)>,
    trust_bundle: bool,
) -> GuestSpec {
    let (uid, gid) = cordon_sandbox::ids();
    GuestSpec {
        plan: plan.clone(),
        argv: cmd.argv.iter().map(|a| GuestSpec::bytes(a)).collect(),
        cwd: cmd.cwd.clone(),
        env: plan
            .env
            .apply(std::env::vars_os())
            .iter()
            .map(|(k, v)| (GuestSpec::bytes(k), GuestSpec::bytes(v)))
            .collect(),
        tty,
        uid,
        gid,
        session: cmd.session.clone(),
        trust_bundle,
        placed: cmd.placed.clone(),
    }
}

/// Frames for the guest. One thread writes them, so no caller ever blocks on a full port:
/// not the supervisor's relay, which hands over signals, above all.
#[derive(Clone)]
struct ToGuest {
    tx: mpsc::Sender<Frame>,
    /// Stdin's bytes queued and not yet written: the stdin thread waits above [`STDIN_HELD`].
    queued: Arc<AtomicUsize>,
}

/// How much of this process's stdin waits for the guest before the stdin thread stops reading.
const STDIN_HELD: usize = 1 << 20;

impl ToGuest {
    fn new() -> (ToGuest, mpsc::Receiver<Frame>) {
        let (tx, rx) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        (ToGuest { tx, queued }, rx)
    }

    fn send(&self, f: Frame) {
        if let Frame::Stdin(b) = &f {
            self.queued.fetch_add(b.len(), Ordering::Relaxed);
        }
        let _ = self.tx.send(f);
    }
}

/// Signals the supervisor caught, for the guest: a window's resize as its new size. Those
/// caught before the guest is up wait in the queue behind its spec.
fn signal_sink(to_guest: ToGuest) -> cordon_sandbox::SignalSink {
    let to_guest = Mutex::new(to_guest);
    cordon_sandbox::SignalSink(Arc::new(move |sig| {
        let g = to_guest.lock().unwrap_or_else(|p| p.into_inner());
        if sig == libc::SIGWINCH {
            if let Some((r, c)) = sys::winsize(0) {
                g.send(Frame::Winsize(r, c));
            }
        } else {
            g.send(Frame::Signal(sig));
        }
    }))
}

/// Writes the spec, then every queued frame, until the port or the queue closes.
fn write_to_guest(
    mut conn: UnixStream,
    spec: Vec<u8>,
    frames: mpsc::Receiver<Frame>,
    queued: Arc<AtomicUsize>,
) {
    if Frame::Start(spec).write_to(&mut conn).is_err() {
        return;
    }
    for f in frames {
        let n = match &f {
            Frame::Stdin(b) => b.len(),
            _ => 0,
        };
        let sent = f.write_to(&mut conn);
        queued.fetch_sub(n, Ordering::Relaxed);
        if sent.is_err() {
            return;
        }
    }
}

/// Serves the control port until the guest's side closes: the spec out, stdin in, the
/// command's output to this process's, events to the log.
fn control_port(
    listener: UnixListener,
    spec: Vec<u8>,
    (to_guest, frames): (ToGuest, mpsc::Receiver<Frame>),
    stop: &AtomicBool,
    emit: Emit,
) -> GuestEnd {
    let mut frames = Some(frames);
    let Some(mut conn) = accept(&listener, stop) else {
        return GuestEnd::Silent { started: false };
    };
    let mut reader = Reader::default();
    let mut end = GuestEnd::Silent { started: false };
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    let mut stdin = None;
    STDIN_STOP.store(false, Ordering::Relaxed);
    loop {
        let frame = match reader.read_from(&mut conn) {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                emit(NewEvent::new(
                    cordon_events::Layer::Process,
                    cordon_events::Action::Error,
                    format!("the guest's control port: {e}; the VM is stopped"),
                ));
                // Closed: the guest's init kills the command and powers off.
                let _ = conn.shutdown(std::net::Shutdown::Both);
                break;
            }
        };
        match frame {
            Frame::Hello => {
                // Said once; a second hello starts nothing more.
                let (Some(frames), Ok(w)) = (frames.take(), conn.try_clone()) else {
                    continue;
                };
                let (spec, queued) = (spec.clone(), to_guest.queued.clone());
                std::thread::spawn(move || write_to_guest(w, spec, frames, queued));
                let to_guest = to_guest.clone();
                stdin = Some(std::thread::spawn(move || {
                    stdin_to_guest(to_guest, &STDIN_STOP)
                }));
                end = GuestEnd::Silent { started: true };
            }
            Frame::Stdout(b) => {
                let _ = out.write_all(&b).and_then(|()| out.flush());
            }
            Frame::Stderr(b) => {
                let _ = err.write_all(&b);
            }
            Frame::Event(json) => {
                if let Some(ev) = guest_event(&json) {
                    emit(ev);
                }
            }
            Frame::Exit(code) => {
                end = GuestEnd::Exit(code);
                // Said: the guest may power off (it waits for this end to close).
                let _ = conn.shutdown(std::net::Shutdown::Both);
            }
            Frame::Failed(why) => end = GuestEnd::Failed(why),
            // Frames only the host sends: a guest that sends them is not followed.
            Frame::Start(_) | Frame::Stdin(_) | Frame::StdinEnd => {}
            Frame::Signal(_) | Frame::Winsize(..) => {}
        }
    }
    STDIN_STOP.store(true, Ordering::Relaxed);
    if let Some(t) = stdin {
        let _ = t.join();
    }
    end
}

/// One event of the guest's sandbox, as the log takes it: only from the layers that sandbox
/// decides (its processes, view, Landlock, syscalls and execs; the network, HTTP, credentials
/// and state are the host's to report), at most [`MAX_GUEST_EVENT`] long, marked as the
/// guest's. Anything else is dropped: the guest's word is not the host's decision.
fn guest_event(json: &[u8]) -> Option<NewEvent> {
    use cordon_events::Layer::*;
    if json.len() > MAX_GUEST_EVENT {
        return None;
    }
    let ev = NewEvent::from(serde_json::from_slice::<WireEvent>(json).ok()?);
    let guests = matches!(
        ev.layer,
        Filesystem | Process | Landlock | Env | Limits | Terminal | Syscall | Exec | Mcp
    );
    guests.then(|| ev.detail("vm", "guest"))
}

/// The longest event the guest may log.
const MAX_GUEST_EVENT: usize = 16 << 10;

/// QEMU's connection, or `None` once `stop` is set (QEMU never started).
fn accept(listener: &UnixListener, stop: &AtomicBool) -> Option<UnixStream> {
    listener.set_nonblocking(true).ok()?;
    loop {
        match listener.accept() {
            Ok((c, _)) => {
                c.set_nonblocking(false).ok()?;
                return Some(c);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(_) => return None,
        }
    }
}

/// Tells the stdin thread the session is over (one session per process).
static STDIN_STOP: AtomicBool = AtomicBool::new(false);

/// This process's stdin, to the guest's command, until it ends or `stop` is set: it waits in
/// `poll`, never in a read, so after the session the exit review's prompt has the terminal.
fn stdin_to_guest(to_guest: ToGuest, stop: &AtomicBool) {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        while to_guest.queued.load(Ordering::Relaxed) > STDIN_HELD {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match sys::poll(&[(0, libc::POLLIN)], 100) {
            Ok(r) if r[0] == 0 => continue,
            Ok(_) => {}
            Err(_) => return to_guest.send(Frame::StdinEnd),
        }
        match std::io::stdin().read(&mut buf) {
            Ok(0) | Err(_) => return to_guest.send(Frame::StdinEnd),
            Ok(n) => to_guest.send(Frame::Stdin(buf[..n].to_vec())),
        }
    }
}

/// The gateway, as the sandbox QEMU runs in sees it: QEMU's own network namespace gets
/// nothing (its TUN and DNS sockets are dropped), and the gateway serves the guest's link
/// instead, framed as the TUN device it expects.
struct VmNet<'a> {
    inner: &'a mut dyn NetAttach,
    listener: Option<UnixListener>,
}

impl NetAttach for VmNet<'_> {
    fn attach(&mut self, handoff: NetHandoff) -> Result<(), String> {
        let listener = self.listener.take().ok_or("the link is attached once")?;
        let (tun, _link) =
            cordon_net::ether::serve(listener).map_err(|e| format!("the VM's link: {e}"))?;
        self.inner.attach(NetHandoff {
            tun: Ok(tun),
            dns: Vec::new(),
            proxy: handoff.proxy,
            init_pid: handoff.init_pid,
            sockets: None,
        })
    }

    fn ca_bundle(&self) -> Option<cordon_sandbox::TrustBundle> {
        self.inner.ca_bundle()
    }
}
