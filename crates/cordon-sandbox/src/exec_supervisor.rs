//! The exec supervisor (host side): answers the sandbox's seccomp user notifications.
//!
//! The crossing is the notification descriptor the command's filter created; init passes it
//! out once. Two kinds of notification arrive: a denied syscall (answered EPERM and logged
//! with its rule) and `execve`/`execveat` (the program and argv are read from the process's
//! memory, matched against `[exec]` rules, and allowed, denied, or held for a person through
//! the approval broker).
//!
//! TOCTOU, honestly: argv lives in the sandboxed process's memory, which another of its
//! threads may change between our read and the kernel's. We re-read after deciding and deny
//! on any difference, and we check the notification is still valid before answering; a
//! determined racer can still win the window between our last read and the kernel's copy.
//! Exec rules therefore steer a confused or prompt-injected agent; they are not a wall against
//! code that races on purpose — the network and credential layers are that wall.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use cordon_approval::{Answer, Approvals, Mailbox};
use cordon_events::{Action, Layer, NewEvent, terminal};
use cordon_policy::{ExecAction, ExecPlan, SyscallsPlan};

use crate::seccomp::{self, Listener, Notification};
use crate::sys;

/// Denials logged per syscall before further ones are only counted (a loop must not flood).
const LOG_CAP: u32 = 50;
/// Most argv entries and bytes we read; beyond either the exec is denied (fail closed). The
/// kernel's own limit is similar (ARG_MAX); the cap keeps one exec from costing the host
/// supervisor gigabytes and seconds.
const MAX_ARGS: usize = 1 << 16;
const MAX_TOTAL: usize = 2 << 20;

struct Held {
    notif: u64,
    /// What the person was shown; re-read and compared before the exec is let go.
    call: ExecCall,
    pid: u32,
    args: [u64; 6],
    nr: i64,
    line: String,
    remember_key: String,
    /// The rule that asked, as events name it.
    rule: String,
}

pub(crate) struct ExecSupervisor<'a> {
    listener: Listener,
    exec: &'a ExecPlan,
    syscalls: &'a SyscallsPlan,
    /// The command runs as uid 0, the host's root: the filter denies it set-id modes (and
    /// xattr writes, with nested sandboxes).
    root: bool,
    /// The session's broker, and where its answers to this layer land.
    approvals: Option<(Approvals, Mailbox)>,
    held: HashMap<u64, Held>,
    remembered: HashMap<String, bool>,
    /// The last question refused: a shell that was refused tries the next `PATH` entry at
    /// once, the same command, which is not asked again.
    last_answer: Option<LastAnswer>,
    /// The last command line a denial was said of, and when (see `tell_denied`).
    last_told: Option<(String, std::time::Instant)>,
    denials: HashMap<i64, u32>,
    emit: &'a dyn Fn(NewEvent),
    /// Events kept back by [`ExecSupervisor::answer_waiting_exec`] until the start's own
    /// events are out ([`ExecSupervisor::release_events`]).
    kept: Option<Vec<NewEvent>>,
    /// `--trace-home`: where the home paths the view hides that the command looked for go.
    trace: Option<crate::supervisor::HomeTrace>,
    /// A learning run: a deny or ask of a rule the user wrote is let through and logged as
    /// what it would have been (built-in rules still decide).
    learning: bool,
    /// Where execs let through are noted, when rules name programs.
    execs: Option<crate::ExecsSeen>,
    /// Local MCP servers the agent's configs name: their spawns are tagged (`mcp_stdio`).
    mcp_servers: &'a [cordon_policy::McpStdio],
}

/// A refusal, and exactly what it refused: the process, the rule, the file the command
/// really is and its arguments. Reused for two seconds for that and nothing else.
struct LastAnswer {
    pid: u32,
    remember_key: String,
    resolved: String,
    argv: Vec<String>,
    /// How it was refused, as the denial line says it.
    by: &'static str,
    at: std::time::Instant,
}

/// Most hidden home paths one session's trace keeps (a loop must not grow it without end).
const TRACE_CAP: usize = 256;

/// What an exec looked like from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ExecCall {
    /// The environment's address in the process (what the exec passes on).
    envp: u64,
    path: String,
    /// `path` with symlinks followed inside the sandbox's view (a link named `ls` to `git`
    /// is `git`).
    resolved: String,
    argv: Vec<String>,
}

impl ExecCall {
    fn program(&self) -> &str {
        Path::new(&self.path)
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or(&self.path)
    }

    fn resolved_program(&self) -> &str {
        Path::new(&self.resolved)
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or(&self.resolved)
    }

    /// The `cordon explain` line for this command (the program by the name it was called).
    fn explain_hint(&self) -> String {
        let mut argv = vec![terminal::safe(self.program())];
        argv.extend(self.argv.iter().skip(1).map(|a| terminal::safe(a)));
        cordon_policy::explain::hint_for_command(&argv)
    }

    /// For people: control characters escaped, arguments quoted where needed.
    /// `ev` with what `cordon replay` decides an exec by again: the program by the name it
    /// was called, the file it really is, and the arguments.
    fn describe(&self, ev: NewEvent) -> NewEvent {
        ev.detail("program", terminal::safe(self.program()))
            .detail("resolved", terminal::safe(self.resolved_program()))
            .detail(
                "args",
                self.argv.iter().skip(1).cloned().collect::<Vec<_>>(),
            )
    }

    fn shown(&self) -> String {
        let mut l = terminal::safe(self.program());
        for a in self.argv.iter().skip(1) {
            l.push(' ');
            l.push_str(&shell_quote(a));
        }
        l
    }
}

/// The first variable of the environment at `envp` (in process `pid`) that makes a program
/// load code from elsewhere (see `execs_seen::taints`); one that cannot be read counts as
/// such (the exec then fails in the kernel too, or hides something). Read while the exec is
/// held, with the same caveat as its arguments (see the module's note on TOCTOU).
fn tainting_variable(pid: u32, envp: u64) -> Option<String> {
    if envp == 0 {
        return None;
    }
    let mem = sys::RemoteMemory::new(pid);
    let unreadable = || Some("(an environment that cannot be read)".to_string());
    // Every exec pays for this: the pointers are read 64 at a time, and the names from one
    // window of memory while they lie in it (an environment's strings sit side by side).
    let mut window = Window::default();
    let mut ptrs = [0u8; 512];
    for block in 0..(MAX_ARGS / 64) as u64 {
        let n = match mem.read_at(&mut ptrs, envp + block * 512) {
            Ok(n) if n >= 8 => n - n % 8,
            _ => return unreadable(),
        };
        for word in ptrs[..n].chunks_exact(8) {
            let mut b = [0u8; 8];
            b.copy_from_slice(word);
            let p = u64::from_ne_bytes(b);
            if p == 0 {
                return None;
            }
            let Some(name) = window.name_at(&mem, p) else {
                return unreadable();
            };
            if crate::execs_seen::taints(&name) {
                return Some(name);
            }
        }
    }
    Some("(an environment too large to read)".into())
}

/// A stretch of another process's memory read once, for names of variables found in it.
#[derive(Default)]
struct Window {
    at: u64,
    bytes: Vec<u8>,
}

impl Window {
    /// The name of the variable at `addr` (up to its `=` or end); read afresh when it does
    /// not end within what was read. A name longer than a page is no name a rule knows.
    fn name_at(&mut self, mem: &sys::RemoteMemory, addr: u64) -> Option<String> {
        let ends = |w: &Window| {
            let off = addr.checked_sub(w.at)? as usize;
            let rest = w.bytes.get(off..)?;
            let end = rest.iter().position(|&c| c == b'=' || c == 0)?;
            Some(String::from_utf8_lossy(&rest[..end]).into_owned())
        };
        if let Some(name) = ends(self) {
            return Some(name);
        }
        let mut page = vec![0u8; 4096];
        let n = mem.read_at(&mut page, addr).ok().filter(|&n| n > 0)?;
        page.truncate(n);
        *self = Window {
            at: addr,
            bytes: page,
        };
        Some(ends(self).unwrap_or_default())
    }
}

fn read_u64(mem: &sys::RemoteMemory, addr: u64) -> io::Result<u64> {
    let mut b = [0u8; 8];
    mem.read_exact_at(&mut b, addr)?;
    Ok(u64::from_ne_bytes(b))
}

fn read_cstr(mem: &sys::RemoteMemory, addr: u64, budget: &mut usize) -> io::Result<String> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut at = addr;
    loop {
        // Reads may stop at an unmapped page; take what came.
        let n = mem.read_at(&mut chunk, at)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "unterminated string",
            ));
        }
        let take = chunk[..n].iter().position(|&c| c == 0);
        let len = take.unwrap_or(n);
        if len + 1 > *budget {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "arguments too large to inspect",
            ));
        }
        *budget -= len + 1;
        out.extend_from_slice(&chunk[..len]);
        if take.is_some() {
            return Ok(String::from_utf8_lossy(&out).into_owned());
        }
        at += n as u64;
    }
}

/// Read the program path and argv of a trapped execve/execveat from the process's memory.
fn read_exec(n: &Notification) -> io::Result<ExecCall> {
    let mem = sys::RemoteMemory::new(n.pid);
    let execveat = seccomp_name(n.nr) == Some("execveat");
    let (path_ptr, argv_ptr, envp) = if execveat {
        (n.args[1], n.args[2], n.args[3])
    } else {
        (n.args[0], n.args[1], n.args[2])
    };
    let mut budget = MAX_TOTAL;
    let mut path = read_cstr(&mem, path_ptr, &mut budget)?;
    let dirfd = n.args[0] as i32;
    if execveat && path.is_empty() {
        // fexecve: the program is the descriptor itself.
        path = std::fs::read_link(format!("/proc/{}/fd/{dirfd}", n.pid))
            .map(|p| p.display().to_string())
            .unwrap_or_default();
    } else if execveat && !path.starts_with('/') && dirfd != libc::AT_FDCWD {
        // Relative to the directory descriptor, not the working directory.
        if let Ok(d) = std::fs::read_link(format!("/proc/{}/fd/{dirfd}", n.pid)) {
            path = d.join(&path).display().to_string();
        }
    }
    let mut argv = Vec::new();
    if argv_ptr != 0 {
        let mut i = 0u64;
        loop {
            if i as usize >= MAX_ARGS {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "too many arguments to inspect",
                ));
            }
            let p = read_u64(&mem, argv_ptr + i * 8)?;
            if p == 0 {
                break;
            }
            argv.push(read_cstr(&mem, p, &mut budget)?);
            i += 1;
        }
    }
    let resolved = resolve_program(n.pid, &path);
    Ok(ExecCall {
        envp,
        path,
        resolved,
        argv,
    })
}

/// Follow symlinks of `path` as the sandboxed process sees them, through /proc/PID/root, up
/// to 40 hops (as the kernel would). Relative paths start at the process's cwd.
fn resolve_program(pid: u32, path: &str) -> String {
    let root = format!("/proc/{pid}/root");
    let mut p = if path.starts_with('/') {
        std::path::PathBuf::from(path)
    } else {
        match std::fs::read_link(format!("/proc/{pid}/cwd")) {
            Ok(cwd) => cwd.join(path),
            Err(_) => return path.to_string(),
        }
    };
    for _ in 0..40 {
        let inside = format!("{root}{}", p.display());
        match std::fs::read_link(&inside) {
            Ok(target) if target.is_absolute() => p = target,
            Ok(target) => p = p.parent().map(|d| d.join(&target)).unwrap_or(target),
            Err(_) => break,
        }
    }
    p.display().to_string()
}

/// Quote an argument for display when it holds anything but plain characters.
fn shell_quote(a: &str) -> String {
    let plain = !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", terminal::safe(&a.replace('\'', "'\\''")))
    }
}

/// The path a traced lookup names when it lies in the home, is not in the sandbox's view
/// (looked up through the process's own root, which must be there) and is in the host's home.
fn hidden_lookup(
    trace: &crate::supervisor::HomeTrace,
    n: &Notification,
    arg: usize,
) -> Option<std::path::PathBuf> {
    let path = lookup_path(n, arg)?;
    if !path.starts_with(&trace.home) || path == trace.home {
        return None;
    }
    let root = std::path::PathBuf::from(format!("/proc/{}/root", n.pid));
    std::fs::symlink_metadata(root.join(".")).ok()?;
    let inside = root.join(path.strip_prefix("/").unwrap_or(&path));
    let gone =
        std::fs::symlink_metadata(&inside).is_err_and(|e| e.kind() == io::ErrorKind::NotFound);
    (gone && std::fs::symlink_metadata(&path).is_ok()).then_some(path)
}

/// The absolute path a traced lookup names: its argument `arg`, against its `dirfd` (the
/// argument before it) or the working directory when relative, `.` and `..` folded. `None`
/// when it cannot be read (the process is gone, or made itself undumpable).
fn lookup_path(n: &Notification, arg: usize) -> Option<std::path::PathBuf> {
    let mem = sys::RemoteMemory::new(n.pid);
    let mut budget = 4096;
    let raw = read_cstr(&mem, n.args[arg], &mut budget).ok()?;
    let p = Path::new(&raw);
    let full = if p.is_absolute() {
        p.to_path_buf()
    } else {
        let dirfd = (arg == 1).then(|| n.args[0] as i32);
        let base = match dirfd {
            Some(fd) if fd != libc::AT_FDCWD => format!("/proc/{}/fd/{fd}", n.pid),
            _ => format!("/proc/{}/cwd", n.pid),
        };
        std::fs::read_link(base).ok()?.join(p)
    };
    Some(crate::layout::normalize(&full))
}

fn seccomp_name(nr: i64) -> Option<&'static str> {
    cordon_policy::syscall_table::name(nr)
}

/// The process's name: set by the process itself (`PR_SET_NAME`), so escaped as the program is.
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| terminal::safe(s.trim()))
        .unwrap_or_default()
}

/// One line on the user's terminal (raw mode needs the carriage return).
fn tell_terminal(msg: &str) {
    let _ = write!(io::stderr(), "\r\ncordon: {msg}\r\n");
}

impl<'a> ExecSupervisor<'a> {
    pub(crate) fn new(
        listener: Listener,
        exec: &'a ExecPlan,
        syscalls: &'a SyscallsPlan,
        approvals: Option<(Approvals, Mailbox)>,
        emit: &'a dyn Fn(NewEvent),
    ) -> Self {
        ExecSupervisor {
            listener,
            exec,
            syscalls,
            // The sandbox runs as the supervisor's own uid (see `InitSpec::uid`).
            root: sys::getuid() == 0,
            approvals,
            held: HashMap::new(),
            remembered: HashMap::new(),
            last_answer: None,
            last_told: None,
            denials: HashMap::new(),
            emit,
            kept: None,
            trace: None,
            learning: false,
            execs: None,
            mcp_servers: &[],
        }
    }

    /// Note every exec let through in `execs` (see [`crate::ExecsSeen`]).
    pub(crate) fn noting(mut self, execs: Option<crate::ExecsSeen>) -> Self {
        self.execs = execs;
        self
    }

    /// Lets an exec run, noting it (see [`Self::noting`]).
    fn allow_exec(&self, id: u64, pid: u32, call: &ExecCall) {
        if let Some(execs) = &self.execs {
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
                .map(|c| c.display().to_string())
                .unwrap_or_default();
            let noted = crate::execs_seen::Noted {
                path: &call.path,
                file: &call.resolved,
                argv: &call.argv,
                cwd,
                tainted: tainting_variable(pid, call.envp),
            };
            execs.note(pid, noted);
        }
        let _ = self.listener.allow(id);
    }

    /// Tag the spawns of these local MCP servers (see `mcp_stdio`).
    pub(crate) fn mcp_servers(mut self, servers: &'a [cordon_policy::McpStdio]) -> Self {
        self.mcp_servers = servers;
        self
    }

    /// A learning run (see the field).
    pub(crate) fn learning(mut self, on: bool) -> Self {
        self.learning = on;
        self
    }

    /// Watch the home's lookups (`--trace-home`), when `trace` is given.
    pub(crate) fn tracing_home(mut self, trace: Option<crate::supervisor::HomeTrace>) -> Self {
        self.trace = trace;
        self
    }

    /// A traced lookup: let it run whatever it names, and note the path when it lies in the
    /// home, is not in the sandbox's view (looked up through the process's own root) and is in
    /// the host's home. Never decides anything: the view already did.
    fn on_probe(&mut self, n: Notification, arg: usize) {
        // Looked at while the call waits, so the process (and its root) is still there.
        let hidden = self.trace.as_ref().and_then(|t| hidden_lookup(t, &n, arg));
        let program = hidden.as_ref().map(|_| comm(n.pid));
        let _ = self.listener.allow(n.id);
        let (Some(trace), Some(path), Some(program)) = (&self.trace, hidden, program) else {
            return;
        };
        let mut found = trace.found.lock().unwrap_or_else(|p| p.into_inner());
        if found.len() >= TRACE_CAP || found.contains_key(&path) {
            return;
        }
        found.insert(path.clone(), program.clone());
        drop(found);
        let mut ev = NewEvent::new(
            Layer::Filesystem,
            Action::Log,
            "looked for a home path the home's view hides",
        )
        .rule("filesystem.home")
        .detail("path", terminal::safe(&path.to_string_lossy()))
        .detail("program", program);
        if self.learning {
            // Recorded for `cordon policy suggest`; the view was built before the command
            // started, so the path stays hidden in this run.
            ev = ev.detail(cordon_events::LEARN, "would deny");
        }
        self.log(ev);
    }

    /// Answer the command's first exec if it is already waiting, keeping its events back.
    ///
    /// The command's process traps at its exec as soon as it has passed its listener on, while
    /// the supervisor still writes the start's events (Landlock, limits, `command started`),
    /// each a hashed line of the audit log. Answering first takes those writes off the
    /// command's way; the decision is the same one the relay loop would make, and its events
    /// follow the start's in the log as before, once [`Self::release_events`] is called. Does
    /// nothing (and waits for nothing) when no notification is pending.
    pub(crate) fn answer_waiting_exec(&mut self) {
        let mut fds = [libc::pollfd {
            fd: self.notify_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if matches!(sys::poll(&mut fds, 0), Ok(1)) && fds[0].revents & libc::POLLIN != 0 {
            self.kept = Some(Vec::new());
            self.on_notification();
        }
    }

    /// Emit what [`Self::answer_waiting_exec`] kept back; from now on events go out at once.
    pub(crate) fn release_events(&mut self) {
        for ev in self.kept.take().unwrap_or_default() {
            (self.emit)(ev);
        }
    }

    fn log(&mut self, ev: NewEvent) {
        let ev = crate::mcp_stdio::tag(self.mcp_servers, ev);
        match &mut self.kept {
            Some(kept) => kept.push(ev),
            None => (self.emit)(ev),
        }
    }

    pub(crate) fn notify_fd(&self) -> std::os::fd::RawFd {
        self.listener.as_raw_fd()
    }

    /// Readable when an answer (a person's, or a timeout's) has arrived.
    pub(crate) fn answers_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.approvals.as_ref().map(|(_, m)| m.as_raw_fd())
    }

    /// Handle one pending notification.
    pub(crate) fn on_notification(&mut self) {
        let Ok(n) = self.listener.recv() else { return };
        if seccomp::is_exec(n.nr) {
            self.on_exec(n);
        } else if let Some(arg) = seccomp::path_probe(n.nr).filter(|_| self.trace.is_some()) {
            self.on_probe(n, arg);
        } else {
            self.on_denied_syscall(n);
        }
    }

    fn on_denied_syscall(&mut self, n: Notification) {
        let _ = self.listener.deny(n.id, libc::EPERM);
        let count = self.denials.entry(n.nr).or_insert(0);
        *count += 1;
        if *count > LOG_CAP {
            return;
        }
        let name = seccomp_name(n.nr)
            .map(str::to_string)
            .unwrap_or_else(|| format!("#{}", n.nr));
        let mut ev = NewEvent::new(
            Layer::Syscall,
            Action::Deny,
            format!("{name} denied with EPERM"),
        )
        .rule(seccomp::denial_rule(
            self.syscalls,
            self.root,
            n.nr,
            &n.args,
        ))
        .detail("syscall", name)
        .detail("pid", n.pid)
        .detail("program", comm(n.pid));
        if *count == LOG_CAP {
            ev = ev.detail("note", "further denials of this syscall are not logged");
        }
        self.log(ev);
    }

    fn on_exec(&mut self, n: Notification) {
        let call = match read_exec(&n) {
            Ok(c) => c,
            Err(e) => {
                // Unreadable exec arguments: fail closed only if a rule could have cared.
                if self.exec.rules.is_empty() {
                    let _ = self.listener.allow(n.id);
                } else {
                    let _ = self.listener.deny(n.id, libc::EPERM);
                    self.log(
                        NewEvent::new(
                            Layer::Exec,
                            Action::Deny,
                            format!("exec arguments unreadable: {e}"),
                        )
                        .rule("built-in: fail closed")
                        .detail("pid", n.pid),
                    );
                }
                return;
            }
        };
        let args: Vec<String> = call.argv.iter().skip(1).cloned().collect();
        // The name it was called by and the file it really is (through symlinks): the first
        // rule matching either decides.
        let rule =
            crate::explain::decide_exec(self.exec, call.program(), call.resolved_program(), &args);
        let Some(rule) = rule else {
            if self.still_same(&n, &call) {
                self.allow_exec(n.id, n.pid, &call);
                // Logged too, so that `cordon replay` can say what a new rule would refuse.
                let ev = NewEvent::new(
                    Layer::Exec,
                    Action::Allow,
                    "exec allowed: no [exec] rule matches",
                )
                .detail("command", call.shown())
                .detail("pid", n.pid);
                self.log(call.describe(ev));
            } else {
                self.deny_changed(&n, &call, &call.shown(), "no rule");
            }
            return;
        };
        let line = call.shown();
        let rule_text = rule.label();
        let remember_key = format!("{}\u{0}{}", rule.origin, rule.pattern);
        let just = self.last_answer.as_ref().filter(|l| {
            l.pid == n.pid
                && l.remember_key == remember_key
                && l.resolved == call.resolved
                && l.argv == call.argv
                && l.at.elapsed() < Duration::from_secs(2)
        });
        let remembered = self.remembered.get(&remember_key).copied();
        let action = match (rule.action, remembered.or(just.map(|_| false))) {
            (ExecAction::Ask, Some(true)) => ExecAction::Allow,
            (ExecAction::Ask, Some(false)) => ExecAction::Deny,
            (a, _) => a,
        };
        // A learning run lets through what a rule of the user's refuses or asks about.
        let learned = self.learning && action != ExecAction::Allow && !rule.origin.is_built_in();
        let action = if learned { ExecAction::Allow } else { action };
        match action {
            ExecAction::Allow => {
                if self.still_same(&n, &call) {
                    self.allow_exec(n.id, n.pid, &call);
                    let mut ev = self.exec_event(Action::Allow, &line, &rule_text, &n, &call);
                    if learned {
                        ev = ev.detail(cordon_events::LEARN, format!("would {}", rule.action));
                    } else if rule.action == ExecAction::Ask {
                        ev = ev.detail("approval", "person, for the rest of the session");
                    }
                    self.log(ev);
                } else {
                    self.deny_changed(&n, &call, &line, &rule_text);
                }
            }
            ExecAction::Deny => {
                let _ = self.listener.deny(n.id, libc::EPERM);
                let by = match (rule.action, remembered, just) {
                    (ExecAction::Ask, Some(_), _) => {
                        format!("by a person's answer for this session to rule {rule_text}")
                    }
                    (ExecAction::Ask, None, Some(l)) => l.by.to_string(),
                    _ => format!("by rule {rule_text}"),
                };
                self.tell_denied(&line, &by, &call);
                let mut ev = self.exec_event(Action::Deny, &line, &rule_text, &n, &call);
                if rule.action == ExecAction::Ask {
                    ev = ev.detail("approval", "person: answered before");
                }
                self.log(ev);
            }
            ExecAction::Ask => {
                // The words rules match, for a person who answers "allow always".
                let subject = cordon_approval::Subject::Exec {
                    program: call.program().to_string(),
                    args,
                    pattern: rule.pattern.clone(),
                };
                let held = Held {
                    notif: n.id,
                    call,
                    pid: n.pid,
                    args: n.args,
                    nr: n.nr,
                    line,
                    remember_key,
                    rule: rule_text.clone(),
                };
                self.ask_person(held, &n, &rule_text, subject);
            }
        }
    }

    /// Holds an exec an `ask` rule matched until a person answers (or refuses it at once when
    /// nobody can be asked).
    fn ask_person(
        &mut self,
        held: Held,
        n: &Notification,
        rule_text: &str,
        subject: cordon_approval::Subject,
    ) {
        let line = held.line.clone();
        let timeout = Duration::from_secs(self.exec.ask_timeout_secs);
        let Some((approvals, mailbox)) = self.approvals.as_ref() else {
            let _ = self.listener.deny(n.id, libc::EPERM);
            self.tell_denied(
                &line,
                &format!("by rule {rule_text}, with no one to ask (no approval broker)"),
                &held.call,
            );
            self.log(
                self.exec_event(Action::Deny, &line, rule_text, n, &held.call)
                    .detail("approval", "no broker: denied"),
            );
            return;
        };
        let qid = approvals.ask(
            "exec",
            &line,
            rule_text,
            Some(subject),
            timeout,
            mailbox.sender(),
        );
        // Said at once: otherwise the agent's terminal is silent until the timeout.
        tell_terminal(&format!(
            "waiting for approval: cordon approve {}#{qid} --allow (or --deny) for `{line}` by rule {rule_text}; denied in {} s",
            approvals.session(),
            timeout.as_secs()
        ));
        cordon_approval::desktop_notification(&line);
        self.log(
            self.exec_event(Action::Ask, &line, rule_text, n, &held.call)
                .detail("question", qid)
                .detail("timeout_secs", timeout.as_secs()),
        );
        self.held.insert(qid, held);
    }

    /// A refused command, in cordon's words on the terminal the agent shares: the program
    /// itself only ever sees `EPERM` from `execve`. A shell tries each `PATH` entry in turn
    /// (`/usr/bin/git`, then `/bin/git`, the same file on a merged /usr): one command refused
    /// twice in a row is said once.
    fn tell_denied(&mut self, line: &str, by: &str, call: &ExecCall) {
        if let Some((l, at)) = &self.last_told
            && l == line
            && at.elapsed() < Duration::from_secs(1)
        {
            return;
        }
        self.last_told = Some((line.to_string(), std::time::Instant::now()));
        tell_terminal(&format!(
            "denied `{line}` {by}; retrying another way will not help (why: `{}`)",
            call.explain_hint()
        ));
    }

    fn exec_event(
        &self,
        action: Action,
        line: &str,
        rule: &str,
        n: &Notification,
        call: &ExecCall,
    ) -> NewEvent {
        let verb = match action {
            Action::Allow => "allowed",
            Action::Deny => "denied",
            _ => "held for approval",
        };
        let ev = NewEvent::new(Layer::Exec, action, format!("exec {verb}"))
            .rule(rule.to_string())
            .detail("command", line.to_string())
            .detail("pid", n.pid);
        call.describe(ev)
    }

    /// Re-read argv and compare: a change means another thread rewrote it after our check.
    fn still_same(&self, n: &Notification, call: &ExecCall) -> bool {
        match read_exec(n) {
            Ok(again) => again == *call && self.listener.id_valid(n.id),
            Err(_) => false,
        }
    }

    fn deny_changed(&mut self, n: &Notification, call: &ExecCall, line: &str, rule: &str) {
        let _ = self.listener.deny(n.id, libc::EPERM);
        self.log(
            self.exec_event(Action::Deny, line, rule, n, call)
                .detail("note", "arguments changed during the check (TOCTOU)"),
        );
    }

    /// Answers from `cordon approve`, and the timeout's denials.
    pub(crate) fn on_answers(&mut self) {
        let answers = match self.approvals.as_ref() {
            Some((_, m)) => m.take(),
            None => return,
        };
        for (qid, a) in answers {
            self.answer(qid, a);
        }
    }

    fn answer(&mut self, qid: u64, a: Answer) {
        let Some(h) = self.held.remove(&qid) else {
            return;
        };
        if a.remember {
            self.remembered.insert(h.remember_key.clone(), a.allow);
        }
        // What runs must be what the person saw: another thread may have rewritten argv
        // while the question waited.
        let again = Notification {
            id: h.notif,
            pid: h.pid,
            nr: h.nr,
            args: h.args,
            arch: 0,
        };
        let unchanged = read_exec(&again).map(|c| c == h.call).unwrap_or(false);
        let valid = self.listener.id_valid(h.notif) && unchanged;
        // Only a refusal is reused (for the shell's retry of the next PATH entry): an allow
        // is for the one exec the person saw.
        let by = if a.timed_out {
            "because no one approved it in time ([exec] ask_timeout)"
        } else if !unchanged {
            "because its arguments changed while it waited for approval"
        } else if a.remember {
            "by a person (cordon approve or the dashboard), for the rest of this session"
        } else {
            "by a person (cordon approve or the dashboard)"
        };
        let took = a.allow && valid;
        self.last_answer = (!took).then(|| LastAnswer {
            pid: h.pid,
            remember_key: h.remember_key.clone(),
            resolved: h.call.resolved.clone(),
            argv: h.call.argv.clone(),
            by,
            at: std::time::Instant::now(),
        });
        let how = if !unchanged {
            "arguments changed while waiting: denied"
        } else if a.timed_out {
            "timeout"
        } else if a.remember {
            "person, for the rest of the session"
        } else {
            "person, once"
        };
        if took {
            self.allow_exec(h.notif, h.pid, &h.call);
        } else {
            let _ = self.listener.deny(h.notif, libc::EPERM);
        }
        if !took {
            self.tell_denied(&h.line, by, &h.call);
        }
        self.log(
            NewEvent::new(
                Layer::Exec,
                if a.allow && valid {
                    Action::Allow
                } else {
                    Action::Deny
                },
                format!(
                    "exec {} after approval request",
                    if a.allow && valid {
                        "allowed"
                    } else {
                        "denied"
                    }
                ),
            )
            .rule(h.rule)
            .detail("command", h.line)
            .detail("question", qid)
            .detail("approval", how)
            .detail("program", terminal::safe(h.call.program()))
            .detail("resolved", terminal::safe(h.call.resolved_program()))
            .detail(
                "args",
                h.call.argv.iter().skip(1).cloned().collect::<Vec<_>>(),
            ),
        );
    }
}
