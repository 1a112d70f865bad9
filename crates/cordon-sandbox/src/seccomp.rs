//! Layer 4's syscall filter: three seccomp-BPF programs, and the supervisor's side of the
//! user-notification listener.
//!
//! The programs are compiled with seccompiler, then post-processed (see [`patch`]):
//! - seccompiler answers a foreign architecture (e.g. i386 syscalls through `int 0x80` on
//!   x86_64) with `SECCOMP_RET_KILL_PROCESS`; that instruction becomes `ERRNO(EPERM)`, so the
//!   filter never kills silently;
//! - seccompiler has no user-notification action, so F3 is compiled with a marker action,
//!   `SECCOMP_RET_TRACE | 0x0CD0`, and every `ret` of exactly that value becomes
//!   `SECCOMP_RET_USER_NOTIF`.
//!
//! Filters, in install order (the kernel runs all of them and takes the most restrictive
//! action; of equally restrictive ones, the most recently installed filter's value wins):
//! - **F1, allowlist**: every syscall of the native table except `clone3` is allowed
//!   unconditionally (so the kernel's per-syscall action cache makes them nearly free); any
//!   other number, x32 numbers (`nr | 0x40000000`) included, fails with EPERM.
//! - **F2, ENOSYS**: `clone3` fails with ENOSYS, so glibc falls back to `clone`, whose flags F3
//!   can inspect (clone3 passes them in memory, out of BPF's reach). So does every number in
//!   [`NEWER_SYSCALLS`] missing from the table: syscalls added to Linux after the table was
//!   generated. Programs probe new syscalls and fall back on ENOSYS, not on EPERM.
//! - **F3, notify**: the built-in denials and `[syscalls] deny`, `execve`/`execveat` when
//!   exec is supervised, and the argument-dependent denials (`unshare`/`clone` with
//!   `CLONE_NEWUSER` unless `nested_userns`, `ioctl` `TIOCSTI`/`TIOCLINUX`, `socket` outside
//!   AF_UNIX/AF_INET/AF_INET6/AF_NETLINK(route)) go to the supervisor, which logs each denial
//!   (see [`denial_rule`]) and answers EPERM, or decides an exec. If the listener is gone,
//!   the kernel fails them with ENOSYS: closed, not open.
//!
//! Kernel-facing `unsafe` (the `seccomp` syscall and the listener's ioctls) lives here.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use cordon_policy::{SyscallsPlan, syscall_table};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// `BPF_RET | BPF_K`.
const BPF_RET_K: u16 = 0x06;
/// The data of the marker action that stands for "notify the supervisor" until [`patch`].
const NOTIFY_MARKER: u32 = 0x0CD0;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_TRACE: u32 = 0x7ff0_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;
/// Syscall numbers shared by every architecture since Linux 5.1 start at 424; numbers from
/// here up that the table lacks are newer syscalls, answered ENOSYS by F2. The end is kept
/// a little past today's kernels (about 470): every number is one more rule the kernel walks
/// when it installs the filter, and numbers past the end still get EPERM from F1.
pub(crate) const NEWER_SYSCALLS: std::ops::Range<i64> = 424..481;
/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6).
const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: libc::c_ulong = 1;
const NETLINK_ROUTE: u64 = 0;
/// Address families `socket` may create.
const ALLOWED_FAMILIES: [i32; 4] = [
    libc::AF_UNIX,
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
];

/// Why the filter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// No syscall table for this architecture.
    #[error("the syscall filter supports x86_64 and aarch64 only, not {0}")]
    UnsupportedArch(&'static str),
    /// seccompiler refused the rules (e.g. the program is too long).
    #[error("cannot compile the syscall filter: {0}")]
    Compile(#[from] seccompiler::BackendError),
    /// The compiled program does not have the shape the post-processing expects.
    #[error("cannot post-process the syscall filter: {0}")]
    Patch(&'static str),
}

/// The compiled programs, in install order.
#[derive(Debug, Clone)]
pub(crate) struct Filters {
    programs: Vec<BpfProgram>,
}

fn target_arch() -> Result<TargetArch, SeccompError> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else {
        Err(SeccompError::UnsupportedArch(std::env::consts::ARCH))
    }
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    Ok(SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        op,
        value,
    )?)
}

/// Builds the three filters for `plan`; `supervise_exec` also sends `execve`/`execveat` to the
/// supervisor.
pub(crate) fn build(plan: &SyscallsPlan, supervise_exec: bool) -> Result<Filters, SeccompError> {
    let arch = target_arch()?;
    let table = syscall_table::native();
    let eperm = SeccompAction::Errno(libc::EPERM as u32);

    // F1: the allowlist.
    let allow: BTreeMap<i64, Vec<SeccompRule>> = table
        .iter()
        .filter(|(name, _)| *name != "clone3")
        .map(|(_, nr)| (*nr, Vec::new()))
        .collect();
    let f1 = SeccompFilter::new(allow, eperm.clone(), SeccompAction::Allow, arch)?;

    // F2: ENOSYS for clone3 and for syscalls newer than the table.
    let mut enosys: BTreeMap<i64, Vec<SeccompRule>> = NEWER_SYSCALLS
        .filter(|nr| syscall_table::name(*nr).is_none())
        .map(|nr| (nr, Vec::new()))
        .collect();
    if let Some(nr) = syscall_table::nr("clone3") {
        enosys.insert(nr, Vec::new());
    }
    let f2 = SeccompFilter::new(
        enosys,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )?;

    // F3: to the supervisor.
    let f3 = SeccompFilter::new(
        notify_rules(plan, supervise_exec)?,
        SeccompAction::Allow,
        SeccompAction::Trace(NOTIFY_MARKER),
        arch,
    )?;

    let mut programs = Vec::new();
    for (i, f) in [f1, f2, f3].into_iter().enumerate() {
        let mut p: BpfProgram = f.try_into()?;
        patch(&mut p, i == 2)?;
        programs.push(p);
    }
    Ok(Filters { programs })
}

/// F3's rules: syscall number → conditions (an empty list matches every call).
fn notify_rules(
    plan: &SyscallsPlan,
    supervise_exec: bool,
) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let mut always = |name: &str| {
        if let Some(nr) = syscall_table::nr(name) {
            rules.insert(nr, Vec::new());
        }
    };
    if supervise_exec {
        always("execve");
        always("execveat");
    }
    for r in plan.denied() {
        always(&r.name);
    }

    let mut conditional: Vec<(&str, Vec<SeccompRule>)> = Vec::new();
    if !plan.nested_userns {
        let newuser = libc::CLONE_NEWUSER as u64;
        // `unshare(flags)` and `clone(flags, ...)`: the flags are the first argument on both
        // x86_64 and aarch64.
        for name in ["unshare", "clone"] {
            let r = SeccompRule::new(vec![cond(0, SeccompCmpOp::MaskedEq(newuser), newuser)?])?;
            conditional.push((name, vec![r]));
        }
    }
    let ioctl = [libc::TIOCSTI, libc::TIOCLINUX]
        .into_iter()
        .map(|cmd| {
            Ok(SeccompRule::new(vec![cond(
                1,
                SeccompCmpOp::Eq,
                u64::from(cmd as u32),
            )?])?)
        })
        .collect::<Result<Vec<_>, SeccompError>>()?;
    conditional.push(("ioctl", ioctl));
    let other_family = ALLOWED_FAMILIES
        .iter()
        .map(|f| cond(0, SeccompCmpOp::Ne, *f as u64))
        .collect::<Result<Vec<_>, _>>()?;
    let netlink_not_route = vec![
        cond(0, SeccompCmpOp::Eq, libc::AF_NETLINK as u64)?,
        cond(2, SeccompCmpOp::Ne, NETLINK_ROUTE)?,
    ];
    conditional.push((
        "socket",
        vec![
            SeccompRule::new(other_family)?,
            SeccompRule::new(netlink_not_route)?,
        ],
    ));
    for (name, conds) in conditional {
        if let Some(nr) = syscall_table::nr(name) {
            // Denied whatever the arguments already (`[syscalls] deny`): keep that.
            rules.entry(nr).or_insert(conds);
        }
    }
    Ok(rules)
}

/// The post-processing described in the module documentation. `notify`: this program uses
/// the marker, which must be found.
fn patch(p: &mut BpfProgram, notify: bool) -> Result<(), SeccompError> {
    let marker = SECCOMP_RET_TRACE | NOTIFY_MARKER;
    let (mut kills, mut markers) = (0, 0);
    for ins in p.iter_mut().filter(|i| i.code == BPF_RET_K) {
        if ins.k == SECCOMP_RET_KILL_PROCESS {
            ins.k = SECCOMP_RET_ERRNO | libc::EPERM as u32;
            kills += 1;
        } else if ins.k == marker {
            ins.k = SECCOMP_RET_USER_NOTIF;
            markers += 1;
        } else if ins.k & 0xffff_0000 == SECCOMP_RET_TRACE {
            return Err(SeccompError::Patch("a trace action other than the marker"));
        }
    }
    if kills == 0 {
        return Err(SeccompError::Patch("no architecture check found"));
    }
    if notify && markers == 0 {
        return Err(SeccompError::Patch("no notify action found"));
    }
    Ok(())
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, prog)`; returns the syscall's result.
fn set_filter(p: &BpfProgram, flags: libc::c_ulong) -> io::Result<libc::c_long> {
    let len = u16::try_from(p.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    let prog = libc::sock_fprog {
        len,
        // seccompiler's sock_filter is #[repr(C)] with the kernel's layout (u16, u8, u8, u32),
        // the same as libc's; the kernel only reads through the pointer.
        filter: p.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prog points to `len` valid instructions that outlive the call; the kernel copies
    // the program and does not keep the pointer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Install every filter on the calling thread (requires no_new_privs); the last gets
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER` (and `WAIT_KILLABLE_RECV` where the kernel has it, 5.19+:
/// once the supervisor has received a notification, only a fatal signal interrupts the wait,
/// so an exec held for `ask` is not restarted by every signal a runtime sends itself); returns
/// its listener fd (close-on-exec). Fails with EBUSY inside another sandbox that already has a
/// listener in its filter chain.
pub(crate) fn install(f: &Filters) -> io::Result<OwnedFd> {
    let Some((last, first)) = f.programs.split_last() else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    for p in first {
        set_filter(p, 0)?;
    }
    let listener = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER;
    let fd = match set_filter(
        last,
        listener | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
    ) {
        // An older kernel: the flag is unknown and nothing was installed.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => set_filter(last, listener)?,
        r => r?,
    };
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: with NEW_LISTENER the kernel returns a new descriptor (O_CLOEXEC) that nothing
    // else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The supervisor's side of the listener.
#[derive(Debug)]
pub(crate) struct Listener {
    fd: OwnedFd,
}

/// One held syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Notification {
    /// The notification's id, for the answer.
    pub id: u64,
    /// The calling thread, in the supervisor's PID namespace (0 if not visible there).
    pub pid: u32,
    /// The syscall number.
    pub nr: i64,
    /// The raw arguments.
    pub args: [u64; 6],
    /// The caller's `AUDIT_ARCH_*`.
    pub arch: u32,
}

impl Listener {
    pub(crate) fn new(fd: OwnedFd) -> Self {
        Listener { fd }
    }

    /// Wake the notifying thread on the supervisor's CPU when answering
    /// (`SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`, Linux 6.6): faster supervised execs. Err if the
    /// kernel lacks it; nothing else changes then.
    pub(crate) fn set_sync_wakeup(&self) -> io::Result<()> {
        // SAFETY: SET_FLAGS takes its flags by value; no memory is passed.
        let r = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
            )
        };
        cvt(r)
    }

    /// Wait for the next notification. EINTR, and ENOENT (the caller died or was interrupted
    /// before it was received), are returned as errors for the caller to retry.
    pub(crate) fn recv(&self) -> io::Result<Notification> {
        // SAFETY: seccomp_notif is plain integers; all-zero is valid, and the kernel requires
        // the buffer to be zeroed.
        let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl's size matches seccomp_notif, which is live and writable.
        let r = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut n as *mut libc::seccomp_notif,
            )
        };
        cvt(r)?;
        Ok(Notification {
            id: n.id,
            pid: n.pid,
            nr: i64::from(n.data.nr),
            args: n.data.args,
            arch: n.data.arch,
        })
    }

    /// Whether notification `id` is still pending (its caller alive and waiting): check it
    /// after reading the caller's memory, before acting on what was read.
    pub(crate) fn id_valid(&self, id: u64) -> bool {
        // SAFETY: the kernel reads one u64 through the pointer, which is live.
        let r = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &id as *const u64,
            )
        };
        r == 0
    }

    fn send(&self, resp: libc::seccomp_notif_resp) -> io::Result<()> {
        let mut resp = resp;
        // SAFETY: the ioctl's size matches seccomp_notif_resp, which is live.
        let r = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &mut resp as *mut libc::seccomp_notif_resp,
            )
        };
        cvt(r)
    }

    /// Let the syscall run (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`).
    pub(crate) fn allow(&self, id: u64) -> io::Result<()> {
        self.send(libc::seccomp_notif_resp {
            id,
            val: 0,
            error: 0,
            flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        })
    }

    /// Fail the syscall with `errno`.
    pub(crate) fn deny(&self, id: u64, errno: i32) -> io::Result<()> {
        self.send(libc::seccomp_notif_resp {
            id,
            val: 0,
            error: -errno,
            flags: 0,
        })
    }

    /// The descriptor, to poll (readable: a notification is waiting; hang-up: no process is
    /// left under the filter).
    pub(crate) fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn cvt(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Whether `nr` is `execve` or `execveat` (the supervised execs, as opposed to denials).
pub fn is_exec(nr: i64) -> bool {
    matches!(syscall_table::name(nr), Some("execve" | "execveat"))
}

/// Names of address families, for denial messages.
const FAMILIES: &[(i32, &str)] = &[
    (libc::AF_AX25, "AF_AX25"),
    (libc::AF_IPX, "AF_IPX"),
    (libc::AF_APPLETALK, "AF_APPLETALK"),
    (libc::AF_NETROM, "AF_NETROM"),
    (libc::AF_BRIDGE, "AF_BRIDGE"),
    (libc::AF_ATMPVC, "AF_ATMPVC"),
    (libc::AF_X25, "AF_X25"),
    (libc::AF_ROSE, "AF_ROSE"),
    (libc::AF_DECnet, "AF_DECnet"),
    (libc::AF_NETBEUI, "AF_NETBEUI"),
    (libc::AF_SECURITY, "AF_SECURITY"),
    (libc::AF_KEY, "AF_KEY"),
    (libc::AF_PACKET, "AF_PACKET"),
    (libc::AF_ASH, "AF_ASH"),
    (libc::AF_ECONET, "AF_ECONET"),
    (libc::AF_ATMSVC, "AF_ATMSVC"),
    (libc::AF_RDS, "AF_RDS"),
    (libc::AF_SNA, "AF_SNA"),
    (libc::AF_IRDA, "AF_IRDA"),
    (libc::AF_PPPOX, "AF_PPPOX"),
    (libc::AF_WANPIPE, "AF_WANPIPE"),
    (libc::AF_LLC, "AF_LLC"),
    (libc::AF_IB, "AF_IB"),
    (libc::AF_MPLS, "AF_MPLS"),
    (libc::AF_CAN, "AF_CAN"),
    (libc::AF_TIPC, "AF_TIPC"),
    (libc::AF_BLUETOOTH, "AF_BLUETOOTH"),
    (libc::AF_IUCV, "AF_IUCV"),
    (libc::AF_RXRPC, "AF_RXRPC"),
    (libc::AF_ISDN, "AF_ISDN"),
    (libc::AF_PHONET, "AF_PHONET"),
    (libc::AF_IEEE802154, "AF_IEEE802154"),
    (libc::AF_CAIF, "AF_CAIF"),
    (libc::AF_ALG, "AF_ALG"),
    (libc::AF_NFC, "AF_NFC"),
    (libc::AF_VSOCK, "AF_VSOCK"),
    (libc::AF_XDP, "AF_XDP"),
];

/// The rule that denied syscall `nr` with `args`, for the audit log and the terminal, e.g.
/// `built-in: mount`, `/home/u/.config/cordon/cordon.toml:3: chroot`,
/// `built-in: socket family 17 (AF_PACKET)`, `built-in: ioctl TIOCSTI`. A call no rule denies
/// (which F3 does not send) gives `no rule: NAME`.
pub fn denial_rule(plan: &SyscallsPlan, nr: i64, args: &[u64; 6]) -> String {
    let Some(name) = syscall_table::name(nr) else {
        return format!("built-in: unknown syscall {nr}");
    };
    // Arguments compared as the filter does: the low 32 bits.
    let a = |i: usize| args[i] as u32;
    match name {
        "unshare" | "clone" if !plan.nested_userns && a(0) & libc::CLONE_NEWUSER as u32 != 0 => {
            return format!("built-in: {name} CLONE_NEWUSER");
        }
        "ioctl" if a(1) == libc::TIOCSTI as u32 => return "built-in: ioctl TIOCSTI".into(),
        "ioctl" if a(1) == libc::TIOCLINUX as u32 => return "built-in: ioctl TIOCLINUX".into(),
        "socket" => {
            let family = a(0) as i32;
            if family == libc::AF_NETLINK && u64::from(a(2)) != NETLINK_ROUTE {
                return format!("built-in: socket AF_NETLINK protocol {}", a(2));
            }
            if !ALLOWED_FAMILIES.contains(&family) {
                return match FAMILIES.iter().find(|(f, _)| *f == family) {
                    Some((_, n)) => format!("built-in: socket family {family} ({n})"),
                    None => format!("built-in: socket family {family}"),
                };
            }
        }
        _ => {}
    }
    match plan.denied().into_iter().find(|r| r.name == name) {
        Some(r) => format!("{}: {name}", r.origin),
        None => format!("no rule: {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;
    use cordon_policy::NamedRule;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn rule(name: &str, origin: &str) -> NamedRule {
        NamedRule {
            name: name.into(),
            origin: origin.into(),
        }
    }

    fn nr(name: &str) -> i64 {
        syscall_table::nr(name).unwrap()
    }

    #[test]
    fn programs_are_patched_and_fit() {
        let plan = SyscallsPlan {
            deny: vec![rule("chroot", "f:1")],
            ..Default::default()
        };
        let f = build(&plan, true).unwrap();
        assert_eq!(f.programs.len(), 3);
        for (i, p) in f.programs.iter().enumerate() {
            assert!(p.len() < 4096, "filter {i}: {} instructions", p.len());
            // The architecture check answers EPERM.
            assert_eq!(p[2].code, BPF_RET_K);
            assert_eq!(p[2].k, SECCOMP_RET_ERRNO | libc::EPERM as u32);
            for ins in p.iter().filter(|i| i.code == BPF_RET_K) {
                assert_ne!(ins.k, SECCOMP_RET_KILL_PROCESS, "filter {i}");
                assert_ne!(ins.k & 0xffff_0000, SECCOMP_RET_TRACE, "filter {i}");
            }
        }
        let notifies = |p: &BpfProgram| {
            p.iter()
                .filter(|i| i.code == BPF_RET_K && i.k == SECCOMP_RET_USER_NOTIF)
                .count()
        };
        assert_eq!(notifies(&f.programs[0]), 0);
        assert_eq!(notifies(&f.programs[1]), 0);
        assert!(notifies(&f.programs[2]) > 40);
        // Without exec supervision and with everything liftable lifted, F3 is smaller.
        let lifted = SyscallsPlan {
            allow: vec![rule("ptrace", "f:2")],
            nested_userns: true,
            ..Default::default()
        };
        let g = build(&lifted, false).unwrap();
        assert!(notifies(&g.programs[2]) < notifies(&f.programs[2]) - 4);
    }

    #[test]
    fn patch_refuses_unexpected_shapes() {
        let mut p: BpfProgram = vec![];
        assert!(patch(&mut p, false).is_err());
        let mut p: BpfProgram = SeccompFilter::new(
            BTreeMap::new(),
            SeccompAction::Allow,
            SeccompAction::Trace(1),
            TargetArch::x86_64,
        )
        .unwrap()
        .try_into()
        .unwrap();
        assert!(patch(&mut p, true).is_err(), "no marker");
    }

    #[test]
    fn the_f3_rules() {
        let plan = SyscallsPlan {
            allow: vec![rule("ptrace", "u:1")],
            deny: vec![rule("chroot", "u:2"), rule("socket", "u:3")],
            nested_userns: false,
        };
        let r = notify_rules(&plan, false).unwrap();
        assert!(r[&nr("mount")].is_empty());
        assert!(r[&nr("chroot")].is_empty());
        assert!(!r.contains_key(&nr("ptrace")));
        assert!(!r.contains_key(&nr("process_vm_readv")));
        assert!(!r.contains_key(&nr("execve")));
        assert_eq!(r[&nr("ioctl")].len(), 2);
        assert_eq!(r[&nr("unshare")].len(), 1);
        // Denied as a whole by the policy: the conditional rule does not narrow it.
        assert!(r[&nr("socket")].is_empty());
        let nested = SyscallsPlan {
            nested_userns: true,
            ..Default::default()
        };
        let r = notify_rules(&nested, true).unwrap();
        assert!(!r.contains_key(&nr("unshare")));
        assert!(!r.contains_key(&nr("clone")));
        assert!(r[&nr("execve")].is_empty());
        assert!(r[&nr("execveat")].is_empty());
        assert!(r.contains_key(&nr("ptrace")));
    }

    #[test]
    fn denial_rules_name_the_rule() {
        let plan = SyscallsPlan {
            allow: vec![],
            deny: vec![rule("chroot", "/u/cordon.toml:3")],
            nested_userns: false,
        };
        let none = [0u64; 6];
        assert_eq!(denial_rule(&plan, nr("mount"), &none), "built-in: mount");
        assert_eq!(
            denial_rule(&plan, nr("chroot"), &none),
            "/u/cordon.toml:3: chroot"
        );
        let sock = |f: i32, proto: u64| [f as u64, libc::SOCK_RAW as u64, proto, 0, 0, 0];
        assert_eq!(
            denial_rule(&plan, nr("socket"), &sock(libc::AF_PACKET, 0)),
            "built-in: socket family 17 (AF_PACKET)"
        );
        assert_eq!(
            denial_rule(&plan, nr("socket"), &sock(libc::AF_NETLINK, 15)),
            "built-in: socket AF_NETLINK protocol 15"
        );
        assert_eq!(
            denial_rule(&plan, nr("socket"), &sock(1000, 0)),
            "built-in: socket family 1000"
        );
        let ioctl = |cmd: u64| [0, cmd, 0, 0, 0, 0];
        assert_eq!(
            denial_rule(&plan, nr("ioctl"), &ioctl(u64::from(libc::TIOCSTI as u32))),
            "built-in: ioctl TIOCSTI"
        );
        // Upper bits are ignored, as in the filter.
        assert_eq!(
            denial_rule(
                &plan,
                nr("ioctl"),
                &ioctl(u64::from(libc::TIOCLINUX as u32) | 1 << 40)
            ),
            "built-in: ioctl TIOCLINUX"
        );
        let newuser = [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0];
        assert_eq!(
            denial_rule(&plan, nr("unshare"), &newuser),
            "built-in: unshare CLONE_NEWUSER"
        );
        assert_eq!(denial_rule(&plan, nr("getpid"), &none), "no rule: getpid");
        assert_eq!(
            denial_rule(&plan, 99_999, &none),
            "built-in: unknown syscall 99999"
        );
        // A lifted denial that the policy denies again names the policy's rule.
        let both = SyscallsPlan {
            allow: vec![rule("ptrace", "a:1")],
            deny: vec![rule("ptrace", "b:2")],
            nested_userns: false,
        };
        assert_eq!(denial_rule(&both, nr("ptrace"), &none), "b:2: ptrace");
        assert_eq!(
            denial_rule(&both, nr("process_vm_readv"), &none),
            "no rule: process_vm_readv"
        );
        assert!(is_exec(nr("execve")) && is_exec(nr("execveat")));
        assert!(!is_exec(nr("getpid")) && !is_exec(-1));
    }

    /// What the child's notification thread saw.
    #[derive(Default)]
    struct Seen {
        denials: AtomicUsize,
        execs: AtomicUsize,
    }

    /// Forks; the child sets no_new_privs, installs `build(plan, supervise_exec)`, starts a
    /// thread that answers EPERM to denials and CONTINUE to execs, and runs `checks`. Returns
    /// the child's exit code: 0 when every check passed, else the failed check's code.
    fn in_filtered_child(
        plan: &SyscallsPlan,
        supervise_exec: bool,
        checks: fn(&Seen) -> Result<(), i32>,
    ) -> sys::WaitStatus {
        let filters = build(plan, supervise_exec).unwrap();
        let pid = sys::fork().unwrap();
        if pid == 0 {
            let code = std::panic::catch_unwind(|| {
                // SAFETY: alarm takes an integer; SIGALRM's default action ends a child that
                // hangs on an unanswered notification.
                unsafe { libc::alarm(30) };
                sys::set_no_new_privs().map_err(|_| 2)?;
                let fd = install(&filters).map_err(|_| 3)?;
                let listener = Listener::new(fd);
                let seen = Arc::new(Seen::default());
                let s = seen.clone();
                // pthread_create: clone3 gets ENOSYS, glibc falls back to clone.
                std::thread::Builder::new()
                    .spawn(move || {
                        loop {
                            let n = match listener.recv() {
                                Ok(n) => n,
                                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                                Err(_) => return,
                            };
                            if is_exec(n.nr) {
                                s.execs.fetch_add(1, Ordering::SeqCst);
                                let _ = listener.allow(n.id);
                            } else {
                                s.denials.fetch_add(1, Ordering::SeqCst);
                                let _ = listener.deny(n.id, libc::EPERM);
                            }
                        }
                    })
                    .map_err(|_| 4)?;
                checks(&seen)
            });
            sys::exit_now(match code {
                Ok(Ok(())) => 0,
                Ok(Err(c)) => c,
                Err(_) => 99,
            });
        }
        sys::waitpid(pid, false).unwrap().unwrap().1
    }

    fn errno() -> i32 {
        io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    /// `r` must be -1 with `want`, and the notification thread must have seen `denials`
    /// denials in all (so the EPERM came from the supervisor, not from missing privileges).
    fn expect_denied(r: libc::c_long, seen: &Seen, denials: usize, code: i32) -> Result<(), i32> {
        let e = errno();
        if r != -1 || e != libc::EPERM || seen.denials.load(Ordering::SeqCst) != denials {
            return Err(code);
        }
        Ok(())
    }

    #[test]
    fn the_filter_on_the_real_kernel() {
        let plan = SyscallsPlan {
            deny: vec![rule("chroot", "test:1")],
            ..Default::default()
        };
        let status = in_filtered_child(&plan, false, |seen| {
            // SAFETY (whole closure): raw syscalls with integer arguments, null pointers the
            // kernel checks, or pointers to live locals.
            unsafe {
                if libc::getpid() <= 0 {
                    return Err(10);
                }
                match std::thread::spawn(|| 7).join() {
                    Ok(7) => {}
                    _ => return Err(11),
                }
                let null = std::ptr::null::<libc::c_char>();
                let r = libc::syscall(libc::SYS_mount, null, null, null, 0, null);
                expect_denied(r, seen, 1, 12)?;
                let r = libc::unshare(libc::CLONE_NEWUSER) as libc::c_long;
                expect_denied(r, seen, 2, 13)?;
                let r = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) as libc::c_long;
                expect_denied(r, seen, 3, 14)?;
                let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
                if s < 0 {
                    return Err(15);
                }
                libc::close(s);
                let s = libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, NETLINK_ROUTE as i32);
                if s < 0 {
                    return Err(16);
                }
                libc::close(s);
                let r = libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, 15) as libc::c_long;
                expect_denied(r, seen, 4, 17)?;
                // A closed descriptor: without the filter, EBADF (and never a real TIOCSTI).
                let c: libc::c_char = b'x' as libc::c_char;
                let r = libc::ioctl(-1, libc::TIOCSTI, &c as *const libc::c_char) as libc::c_long;
                expect_denied(r, seen, 5, 18)?;
                let mut n: libc::c_int = 0;
                if libc::ioctl(-1, libc::FIONREAD, &mut n as *mut libc::c_int) != -1
                    || errno() != libc::EBADF
                {
                    return Err(19);
                }
                #[cfg(target_arch = "x86_64")]
                {
                    let r = libc::syscall(0x4000_0000 | libc::SYS_getpid);
                    if r != -1 || errno() != libc::EPERM {
                        return Err(20);
                    }
                }
                if libc::syscall(999) != -1 || errno() != libc::EPERM {
                    return Err(21);
                }
                let r = libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0);
                if r != -1 || errno() != libc::ENOSYS {
                    return Err(22);
                }
                let newer = NEWER_SYSCALLS
                    .clone()
                    .find(|n| syscall_table::name(*n).is_none());
                if let Some(newer) = newer
                    && (libc::syscall(newer as libc::c_long) != -1 || errno() != libc::ENOSYS)
                {
                    return Err(23);
                }
                let root = c"/nonexistent-cordon-test";
                let r = libc::chroot(root.as_ptr()) as libc::c_long;
                expect_denied(r, seen, 6, 24)?;
                let r = libc::ptrace(libc::PTRACE_CONT, libc::getppid(), 0, 0);
                expect_denied(r, seen, 7, 25)?;
                // Execs are not supervised here: no notification.
                let argv = [null];
                let r = libc::execve(root.as_ptr(), argv.as_ptr(), argv.as_ptr());
                if r != -1 || errno() != libc::ENOENT || seen.execs.load(Ordering::SeqCst) != 0 {
                    return Err(26);
                }
            }
            Ok(())
        });
        assert_eq!(
            status,
            sys::WaitStatus::Exited(0),
            "the exit code names the failed check"
        );
    }

    #[test]
    fn lifted_denials_and_supervised_exec_on_the_real_kernel() {
        let plan = SyscallsPlan {
            allow: vec![rule("ptrace", "test:1")],
            nested_userns: true,
            ..Default::default()
        };
        let status = in_filtered_child(&plan, true, |seen| {
            // SAFETY (whole closure): raw syscalls with integer arguments, null pointers the
            // kernel checks, or pointers to live locals.
            unsafe {
                // Not a tracer of the parent: ESRCH, from the kernel rather than the filter.
                let r = libc::ptrace(libc::PTRACE_CONT, libc::getppid(), 0, 0);
                if r != -1 || errno() != libc::ESRCH {
                    return Err(30);
                }
                let r = libc::process_vm_readv(
                    libc::getpid(),
                    std::ptr::null(),
                    0,
                    std::ptr::null(),
                    0,
                    0,
                );
                if r != 0 {
                    return Err(31);
                }
                // CLONE_NEWUSER is not sent to the supervisor (the kernel may still refuse).
                let _ = libc::unshare(libc::CLONE_NEWUSER);
                if seen.denials.load(Ordering::SeqCst) != 0 {
                    return Err(32);
                }
                // A supervised exec: the supervisor lets it continue; the kernel says ENOENT.
                let path = c"/nonexistent-cordon-test";
                let argv = [std::ptr::null::<libc::c_char>()];
                let r = libc::execve(path.as_ptr(), argv.as_ptr(), argv.as_ptr());
                if r != -1 || errno() != libc::ENOENT || seen.execs.load(Ordering::SeqCst) != 1 {
                    return Err(33);
                }
                // Still denied: mount.
                let null = std::ptr::null::<libc::c_char>();
                let r = libc::syscall(libc::SYS_mount, null, null, null, 0, null);
                expect_denied(r, seen, 1, 34)?;
            }
            Ok(())
        });
        assert_eq!(
            status,
            sys::WaitStatus::Exited(0),
            "the exit code names the failed check"
        );
    }
}
