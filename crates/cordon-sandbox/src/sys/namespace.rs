//! Namespaces: the clone that makes the sandbox, the nested `unshare` that locks its mounts,
//! and the hostname of its UTS namespace.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{cvt, cvt_long};

/// Namespaces a sandbox gets. Network is empty (loopback only) until the gateway gives it a way out.
pub(crate) const SANDBOX_NAMESPACES: u64 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u64;

#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// The result of [`clone_into_namespaces`] in the parent.
#[derive(Debug)]
pub(crate) struct Child {
    pub pid: libc::pid_t,
    pub pidfd: OwnedFd,
}

/// Fork into fresh namespaces. Returns `Ok(None)` in the child, `Ok(Some(child))` in the parent.
///
/// # Safety
/// Like `fork`: in the child, only async-signal-safe operations may run until `execve`
/// (the caller must not allocate, lock or touch other threads' state).
pub(crate) unsafe fn clone_into_namespaces(flags: u64) -> io::Result<Option<Child>> {
    let mut pidfd: RawFd = -1;
    let args = CloneArgs {
        flags: flags | libc::CLONE_PIDFD as u64,
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    // SAFETY: the pidfd slot lives across the call; the caller upholds the post-fork
    // restrictions.
    let pid = unsafe { fork3(&args) }?;
    if pid == 0 {
        return Ok(None);
    }
    // SAFETY: the kernel wrote a fresh pidfd that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok(Some(Child { pid, pidfd }))
}

pub(crate) fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes no pointers; the callers are single-threaded processes.
    cvt(unsafe { libc::unshare(flags) }).map(drop)
}

pub(crate) fn sethostname(name: &str) -> io::Result<()> {
    // SAFETY: the pointer and length describe `name`'s bytes.
    cvt(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) }).map(drop)
}

/// What the child of [`spawn_in_namespaces`] does before its exec, all of it prepared by the
/// parent: the child shares the parent's memory and may not allocate.
pub(crate) struct SpawnInit<'a> {
    /// The program to become.
    pub exe: &'a super::PreparedExec,
    /// The child's end of the control channel, given to the program as `control_at`.
    pub control: RawFd,
    pub control_at: RawFd,
    /// The parent's end, closed in the child.
    pub parent_end: RawFd,
    /// The caller's uid and gid, mapped to 0 in the new user namespace.
    pub uid: u32,
    pub gid: u32,
}

/// Why [`spawn_in_namespaces`] failed.
#[derive(Debug)]
pub(crate) enum SpawnError {
    /// The clone itself (namespaces refused, no memory).
    Clone(io::Error),
    /// The child could not write its uid/gid maps.
    IdMaps(io::Error),
    /// The child could not take its control channel or exec.
    Exec(io::Error),
}

/// A failed step in the child, reported to the parent over the status pipe.
#[repr(u8)]
#[derive(Clone, Copy)]
enum Step {
    IdMaps = 1,
    Exec = 2,
    /// [`fork_init`]'s helper: a namespace refused, or init's fork.
    Namespaces = 3,
}

impl Step {
    /// The error a 5-byte report (`[step, errno…]`) stands for.
    fn error(report: &[u8; 5]) -> SpawnError {
        let errno = i32::from_ne_bytes([report[1], report[2], report[3], report[4]]);
        let e = io::Error::from_raw_os_error(errno);
        match report[0] {
            x if x == Step::IdMaps as u8 => SpawnError::IdMaps(e),
            x if x == Step::Namespaces as u8 => SpawnError::Clone(e),
            _ => SpawnError::Exec(e),
        }
    }

    /// Report this step's failure on `status` and leave.
    fn fail(self, status: RawFd, e: io::Error) -> ! {
        let errno = e.raw_os_error().unwrap_or(libc::EIO).to_ne_bytes();
        super::write_all_raw(
            status,
            &[self as u8, errno[0], errno[1], errno[2], errno[3]],
        );
        super::exit_now(125)
    }
}

/// The child's arguments: what it runs, and where it reports a failed step.
struct ChildArgs<'a> {
    init: &'a SpawnInit<'a>,
    maps: [(&'a std::ffi::CStr, &'a [u8]); 3],
    status: RawFd,
    mask: libc::sigset_t,
}

/// Clone a child into fresh namespaces (`flags`, a user namespace among them) and exec
/// `init.exe` there, the way `posix_spawn` does: the child shares this process's memory
/// (`CLONE_VM`) and this thread waits until it has exec'd or failed (`CLONE_VFORK`). Nothing
/// of this process's memory is copied, so neither this process's writes after the clone
/// (copy-on-write faults, each with a TLB flush on every CPU running one of its threads) nor
/// the copy's teardown at the child's exec are paid. The child maps its own uid and gid to 0
/// (one line each, as `unshare --map-root-user` does), so its exec keeps its capabilities in
/// the namespace. It dies with the calling thread (`PR_SET_PDEATHSIG`).
pub(crate) fn spawn_in_namespaces(flags: u64, init: &SpawnInit<'_>) -> Result<Child, SpawnError> {
    let uid_map = format!("0 {} 1\n", init.uid);
    let gid_map = format!("0 {} 1\n", init.gid);
    let (status_r, low) = super::pipe().map_err(SpawnError::Clone)?;
    // Above the descriptor the child gives its program, which its dup2 would otherwise close;
    // the first write end closed at once, or the read below would wait on it.
    let status_w = dup_above(&low, init.control_at).map_err(SpawnError::Clone)?;
    drop(low);
    let stack = ChildStack::new().map_err(SpawnError::Clone)?;
    // No handler of this process may run in the child, which shares its memory: every
    // signal waits until the child has reset the handlers.
    let mut args = ChildArgs {
        init,
        maps: [
            (c"/proc/self/setgroups", b"deny".as_slice()),
            (c"/proc/self/uid_map", uid_map.as_bytes()),
            (c"/proc/self/gid_map", gid_map.as_bytes()),
        ],
        status: status_w.as_raw_fd(),
        mask: super::block_all_signals(),
    };
    let mut pidfd: RawFd = -1;
    let clone_flags = (flags as libc::c_int)
        | libc::CLONE_VM
        | libc::CLONE_VFORK
        | libc::CLONE_PIDFD
        | libc::SIGCHLD;
    // SAFETY: the stack is a fresh mapping of `ChildStack::SIZE` bytes and `top` its 16-byte
    // aligned end; `spawned_child` runs only async-signal-safe calls on it, on memory (`args`,
    // `init`, the maps) that outlives the call because this thread is suspended until the
    // child has exec'd or exited (CLONE_VFORK). The pidfd slot lives across the call.
    let pid = unsafe {
        libc::clone(
            spawned_child,
            stack.top(),
            clone_flags,
            (&mut args as *mut ChildArgs<'_>).cast(),
            &mut pidfd as *mut RawFd,
        )
    };
    let clone_err = io::Error::last_os_error();
    super::set_signal_mask(&args.mask);
    drop(stack);
    drop(status_w);
    if pid < 0 {
        return Err(SpawnError::Clone(clone_err));
    }
    // SAFETY: the kernel wrote a fresh pidfd that nothing else owns.
    let child = Child {
        pid,
        pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) },
    };
    // The child has exec'd (the pipe closed on exec: nothing to read) or written the step
    // that failed and its errno.
    let mut report = [0u8; 5];
    let n = super::read_raw(status_r.as_raw_fd(), &mut report);
    if n == 5 {
        let _ = super::waitpid(child.pid, false);
        return Err(Step::error(&report));
    }
    Ok(child)
}

/// The child of [`spawn_in_namespaces`]. Async-signal-safe calls only, and no write to memory
/// but its own stack: it runs in the parent's address space until its exec.
extern "C" fn spawned_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive while the parent is suspended.
    let a = unsafe { &*(arg as *const ChildArgs<'_>) };
    let fail = |step: Step, e: io::Error| -> ! { step.fail(a.status, e) };
    let _ = super::set_pdeathsig(libc::SIGKILL);
    super::close_raw(a.init.parent_end);
    for (path, data) in a.maps {
        if let Err(e) = write_proc_file(path, data) {
            fail(Step::IdMaps, e);
        }
    }
    let control = a.init.control;
    let at = a.init.control_at;
    let taken = if control != at {
        super::dup2(control, at)
    } else {
        super::clear_cloexec(control)
    };
    if let Err(e) = taken {
        fail(Step::Exec, e);
    }
    // The handlers are this process's: default actions until the exec, then the mask it had.
    super::reset_caught_signals();
    super::set_signal_mask(&a.mask);
    let e = a.init.exe.exec();
    fail(Step::Exec, e)
}

/// What the sandbox's init takes before its code runs, for [`fork_init`].
pub(crate) struct ForkInit {
    /// Init's end of the control channel, moved to `control_at` in init.
    pub control: RawFd,
    pub control_at: RawFd,
    /// The caller's uid and gid, mapped to 0 in the new user namespace.
    pub uid: u32,
    pub gid: u32,
    /// Init's code.
    pub entry: fn() -> !,
}

/// Start the sandbox's init in fresh namespaces (`flags`, a user namespace among them)
/// without an exec, so init pays neither the exec nor glibc's start again (its CPUID probes
/// alone are ~0.7 ms on a VM that traps them, issue #18).
///
/// Sound only while this process has one thread ([`single_threaded`]), and only before it has
/// read anything secret: init and a helper run ordinary Rust in copies of this memory.
///
/// This thread only forks a helper, a small process's plain fork: the namespaces are made by
/// the helper while this thread goes on. The helper makes the user namespace and maps the
/// caller's uid and gid to 0 in it (one line each, as `unshare --map-root-user` does),
/// unshares the other namespaces, and forks init with `CLONE_PARENT`, so init is this
/// process's child and pid 1 of the new pid namespace. The helper then reports init's pid
/// and exits; [`ForkedInit::confirm`] reaps it and takes init.
///
/// Before its code runs, init dies with the thread that forked the helper
/// (`PR_SET_PDEATHSIG`), takes its control channel at `control_at`, closes every other
/// descriptor above stderr (an exec would have closed the close-on-exec ones; init needs none
/// of the others), names itself `cordon-init` (`/proc/1/comm` and `cmdline`, as the exec'd
/// init was named), and overwrites the environment it inherited: the host's environment holds
/// the user's real keys, and init's memory is a copy of the host's.
pub(crate) fn fork_init(flags: u64, init: &ForkInit) -> Result<ForkedInit, SpawnError> {
    let uid_map = format!("0 {} 1\n", init.uid);
    let gid_map = format!("0 {} 1\n", init.gid);
    let (status_r, low) = super::pipe().map_err(SpawnError::Clone)?;
    // Above init's control descriptor, which init's dup2 would otherwise close.
    let status_w = dup_above(&low, init.control_at).map_err(SpawnError::Clone)?;
    drop(low);
    // SAFETY: with no namespace flags this is fork(); the caller guarantees one thread, so
    // the helper may run any code in its copy of this memory (no lock is held by a thread
    // that is not there).
    let helper = match unsafe { clone_into_namespaces(0) } {
        Ok(Some(helper)) => helper,
        Ok(None) => {
            let status = status_w.as_raw_fd();
            helper_main(flags, status, [uid_map.as_bytes(), gid_map.as_bytes()]);
            // Should the host go before this, init is not killed, but finds its control
            // channel closed at its first read and leaves (it closes its copy of the host's
            // end below, the helper's goes with the helper).
            let _ = super::set_pdeathsig(libc::SIGKILL);
            let taken = if init.control != init.control_at {
                super::dup2(init.control, init.control_at)
            } else {
                super::clear_cloexec(init.control)
            };
            if taken.is_err() {
                super::exit_now(125);
            }
            super::close_fds_from(3, &[init.control_at]);
            super::scrub_environment();
            super::name_init();
            (init.entry)()
        }
        Err(e) => return Err(SpawnError::Clone(e)),
    };
    Ok(ForkedInit {
        helper,
        status: status_r,
    })
}

/// [`fork_init`]'s helper: the namespaces, the id maps, init's fork. Returns in init only;
/// the helper itself reports (init's pid, or the step that failed) on `status` and exits.
fn helper_main(flags: u64, status: RawFd, [uid_map, gid_map]: [&[u8]; 2]) {
    if let Err(e) = unshare(libc::CLONE_NEWUSER) {
        Step::Namespaces.fail(status, e);
    }
    let maps = [
        (c"/proc/self/setgroups", b"deny".as_slice()),
        (c"/proc/self/uid_map", uid_map),
        (c"/proc/self/gid_map", gid_map),
    ];
    for (path, data) in maps {
        if let Err(e) = write_proc_file(path, data) {
            Step::IdMaps.fail(status, e);
        }
    }
    // Made by a process inside the new user namespace, these belong to it, as a clone with
    // every flag at once would make them. The pid namespace is init's, not the helper's.
    if let Err(e) = unshare((flags & !(libc::CLONE_NEWUSER as u64)) as libc::c_int) {
        Step::Namespaces.fail(status, e);
    }
    let args = CloneArgs {
        flags: libc::CLONE_PARENT as u64,
        ..Default::default()
    };
    // SAFETY: no pointer in `args`; the helper has one thread, so init may run any code. With
    // CLONE_PARENT the child is the host's, with the host's exit signal (SIGCHLD).
    match unsafe { fork3(&args) } {
        Ok(0) => {}
        Ok(pid) => {
            let p = pid.to_ne_bytes();
            super::write_all_raw(status, &[0, p[0], p[1], p[2], p[3]]);
            super::exit_now(0)
        }
        Err(e) => Step::Namespaces.fail(status, e),
    }
}

/// `clone3` without `CLONE_VM` or a stack: a fork, as `args` says. 0 in the child.
///
/// # Safety
/// Every pointer in `args` must be valid for the call, and the child may only run what is
/// sound after a fork of this process (async-signal-safe calls, unless it has one thread).
unsafe fn fork3(args: &CloneArgs) -> io::Result<libc::pid_t> {
    // SAFETY: `args` is a live, fully initialised `clone_args` of the size passed; the
    // caller vouches for its pointers and for the child.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    cvt_long(ret).map(|pid| pid as libc::pid_t)
}

/// An init started by [`fork_init`] whose helper may still be at work.
#[derive(Debug)]
pub(crate) struct ForkedInit {
    helper: Child,
    /// The helper's report: `[0, pid…]`, or `[step, errno…]`.
    status: OwnedFd,
}

impl ForkedInit {
    /// Wait for the helper's report and reap it: init, or why there is none.
    pub(crate) fn confirm(self) -> Result<Child, SpawnError> {
        let mut report = [0u8; 5];
        let n = super::read_raw(self.status.as_raw_fd(), &mut report);
        let _ = super::waitpid(self.helper.pid, false);
        if n != 5 {
            return Err(SpawnError::Clone(io::Error::other(
                "the namespaces' helper ended without a report",
            )));
        }
        if report[0] != 0 {
            return Err(Step::error(&report));
        }
        let pid = libc::pid_t::from_ne_bytes([report[1], report[2], report[3], report[4]]);
        // SAFETY: pidfd_open takes a pid and flags; init is this process's child and not yet
        // reaped, so its pid cannot have been reused.
        let fd = cvt_long(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })
            .map_err(SpawnError::Clone)?;
        // SAFETY: the kernel just made this descriptor; nothing else owns it.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        Ok(Child { pid, pidfd })
    }
}

/// Whether this process has one thread (`Threads:` in /proc/self/status).
pub(crate) fn single_threaded() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .is_some_and(|n| n.trim() == "1")
    })
}

/// A close-on-exec copy of `fd` numbered above `floor`.
fn dup_above(fd: &OwnedFd, floor: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own; the kernel returns a fresh one.
    let n = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, floor + 1) })?;
    // SAFETY: `n` is the fresh descriptor fcntl just made, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// One write of `data` to a /proc file, as the id maps need (a map is taken whole or not).
fn write_proc_file(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated; open/write/close are async-signal-safe.
    let fd = cvt(unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) })?;
    // SAFETY: `data` is a valid slice.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    let e = io::Error::last_os_error();
    super::close_raw(fd);
    match n {
        n if n == data.len() as isize => Ok(()),
        n if n < 0 => Err(e),
        _ => Err(io::Error::from_raw_os_error(libc::EIO)),
    }
}

/// The stack the child of [`spawn_in_namespaces`] runs on until its exec.
struct ChildStack {
    base: *mut libc::c_void,
}

impl ChildStack {
    /// Enough for the child's few frames and libc's calls; the parent's own stack is in use.
    const SIZE: usize = 256 * 1024;

    fn new() -> io::Result<ChildStack> {
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(ChildStack { base })
    }

    /// The stack's top (it grows down), 16-byte aligned as the ABI wants.
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which `SIZE` (a multiple of 16) keeps aligned.
        unsafe { self.base.cast::<u8>().add(Self::SIZE).cast() }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used: the child has exec'd or exited.
        unsafe { libc::munmap(self.base, Self::SIZE) };
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;
    use std::io::Read;
    use std::os::fd::AsRawFd;

    use super::{SpawnError, SpawnInit, spawn_in_namespaces};
    use crate::sys::{PreparedExec, getgid, getuid, socketpair, waitpid};

    const FLAGS: u64 = (libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS) as u64;

    fn exe(path: &str, args: &[&str]) -> PreparedExec {
        let c = |s: &str| CString::new(s).unwrap();
        PreparedExec::new(c(path), args.iter().map(|a| c(a)).collect(), Vec::new())
    }

    #[test]
    fn the_child_maps_the_caller_to_root_and_execs_with_the_callers_mask() {
        // A signal this thread blocks stays blocked in the child, and only that one: the
        // spawn blocks every signal while the child shares this memory, then gives it back.
        // SAFETY: sigset_t is plain old data; this thread's mask is restored below.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe {
            let mut usr2: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut usr2);
            libc::sigaddset(&mut usr2, libc::SIGUSR2);
            libc::pthread_sigmask(libc::SIG_BLOCK, &usr2, &mut old);
        }
        let (mine, theirs) = socketpair().unwrap();
        // Its control channel is its stdout: `cat` itself is the program exec'd (a shell
        // would set its own mask).
        let exe = exe(
            "/bin/cat",
            &[
                "cat",
                "/proc/self/uid_map",
                "/proc/self/gid_map",
                "/proc/self/setgroups",
                "/proc/self/status",
            ],
        );
        let spawned = spawn_in_namespaces(
            FLAGS,
            &SpawnInit {
                exe: &exe,
                control: theirs.as_raw_fd(),
                control_at: 1,
                parent_end: mine.as_raw_fd(),
                uid: getuid(),
                gid: getgid(),
            },
        );
        // SAFETY: restores the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        let child = spawned.unwrap_or_else(|e| panic!("spawn: {e:?}"));
        drop(theirs);
        let mut out = String::new();
        std::fs::File::from(mine).read_to_string(&mut out).unwrap();
        waitpid(child.pid, false).unwrap();
        let fields: Vec<Vec<&str>> = out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        let (uid, gid) = (getuid().to_string(), getgid().to_string());
        assert_eq!(fields[0], ["0", uid.as_str(), "1"], "uid_map: {out}");
        assert_eq!(fields[1], ["0", gid.as_str(), "1"], "gid_map: {out}");
        assert_eq!(fields[2], ["deny"], "{out}");
        let status = |key: &str| fields.iter().find(|f| f.first() == Some(&key)).cloned();
        // SIGUSR2 is 12: bit 11.
        assert_eq!(status("SigBlk:").unwrap()[1], "0000000000000800", "{out}");
        // Its own pid namespace: pid 1 there.
        assert_eq!(status("NSpid:").unwrap().last(), Some(&"1"), "{out}");
    }

    #[test]
    fn a_child_that_cannot_exec_is_reported_and_reaped() {
        let (mine, theirs) = socketpair().unwrap();
        let exe = exe("/nonexistent/cordon", &["cordon"]);
        let spawned = spawn_in_namespaces(
            FLAGS,
            &SpawnInit {
                exe: &exe,
                control: theirs.as_raw_fd(),
                control_at: 7,
                parent_end: mine.as_raw_fd(),
                uid: getuid(),
                gid: getgid(),
            },
        );
        match spawned {
            Err(SpawnError::Exec(e)) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}"),
            other => panic!("expected an exec error, got {other:?}"),
        }
        // Reaped already: the parent's end sees the child's end closed, nothing else.
        drop(theirs);
        let mut rest = Vec::new();
        std::fs::File::from(mine).read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
    }
}
