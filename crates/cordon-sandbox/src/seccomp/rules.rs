//! What F2 sends to the supervisor, as data: the built-in and policy denials and the
//! argument-dependent ones, and, for a denial the supervisor logs, the rule that made it.

use std::collections::BTreeMap;

use cordon_policy::{SyscallsPlan, syscall_table};
use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};

use super::SeccompError;
use crate::sys;

/// Syscall numbers shared by every architecture since Linux 5.1 start at 424; numbers from
/// here up that the table lacks are newer syscalls, answered ENOSYS by F1. The end is kept
/// a little past today's kernels (about 470); numbers past it get EPERM from F1.
pub(crate) const NEWER_SYSCALLS: std::ops::Range<i64> = 424..481;
pub(super) const NETLINK_ROUTE: u64 = 0;
/// Address families `socket` may create.
const ALLOWED_FAMILIES: [i32; 4] = [
    libc::AF_UNIX,
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
];

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    Ok(SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        op,
        value,
    )?)
}

/// The syscalls that write extended attributes, `security.capability` among them, denied to
/// a command that holds `CAP_SETFCAP` (root with nested sandboxes, see
/// [`crate::sys::keeps_setfcap`]). Root of the sandbox is root of the host: a file capability
/// it wrote (or a nested namespace's root, which maps to it, wrote) would be honoured on the
/// host for whoever runs the file later. seccomp cannot read the attribute's name, so every
/// name is refused; `setxattrat` (Linux 6.13) is newer than the syscall table and F1 answers
/// it ENOSYS. Not liftable: `[syscalls] allow` names the built-in list only.
pub const FILE_CAPABILITY_WRITERS: [&str; 3] = ["setxattr", "lsetxattr", "fsetxattr"];

/// The syscalls that give a file its mode: (name, index of the mode argument, index of the
/// flags that make the kernel use it, for the `open` family: `O_CREAT` or `O_TMPFILE`). As
/// root, F2 denies them a mode with `S_ISUID` or `S_ISGID`: uid 0 of a root-run sandbox is the
/// host's, and a set-id file it made in the project (or any writable path) would be a set-id
/// root program on the host for any user who runs it (`chmod u+s`, `install -m 4755`,
/// `tar -xp` and `cp -p` of one, `open(O_CREAT, 04755)`, `mknod`). Directories too: seccomp
/// cannot tell a directory from a file, and a setgid-root directory would give root's group
/// to what host users create in it; so GNU `chmod 755` of a directory that is already setgid
/// (it keeps the bit, so asks for 02755) fails as root. `mkdir` needs no rule: the kernel
/// drops set-id bits from its mode (a new directory is setgid only below one that is). Names
/// the architecture lacks (`chmod`, `open`, `creat`, `mknod` on aarch64) are skipped;
/// `fchmodat2`, where newer than the table, is ENOSYS from F1 and glibc falls back to
/// `fchmodat`. `openat2` passes its mode in memory, out of BPF's reach: as root F1 answers it
/// ENOSYS ([`ROOT_ENOSYS`]). io_uring's open is out of any filter's reach: it stays denied
/// unless `[syscalls] allow` lifts it. Not liftable: `[syscalls] allow` names the built-in
/// list only. A user's sandbox is unchanged: its set-id files are the user's own.
pub const SET_ID_MODE_SETTERS: [(&str, u8, Option<u8>); 9] = [
    ("chmod", 1, None),
    ("fchmod", 1, None),
    ("fchmodat", 2, None),
    ("fchmodat2", 2, None),
    ("creat", 1, None),
    ("open", 2, Some(1)),
    ("openat", 3, Some(2)),
    ("mknod", 1, None),
    ("mknodat", 2, None),
];

/// Syscalls F1 answers ENOSYS as root: `openat2`, whose mode seccomp cannot read (see
/// [`SET_ID_MODE_SETTERS`]); systemd's `RestrictSUIDSGID=` does the same. Callers fall back to
/// `openat`, as on kernels before 5.6 (gnulib, cap-std, containers/storage do on ENOSYS, not on
/// EPERM); glibc's `open`, Rust's std, Python, Node, git and cargo never call it. One that
/// needs it with no fallback (GNU tar since its CVE-2025-45582 fix, built on a glibc with an
/// `openat2` wrapper; Debian 12's tar 1.34 is older) fails as root either way. Allowing it
/// after reading `open_how` from the caller's memory would race: another thread could change
/// the mode between the supervisor's read and the kernel's.
pub(super) const ROOT_ENOSYS: [&str; 1] = ["openat2"];

const SET_ID_BITS: [u64; 2] = [libc::S_ISUID as u64, libc::S_ISGID as u64];

/// The `open` flags with which the kernel uses the mode: `O_CREAT`, and `O_TMPFILE` less the
/// `O_DIRECTORY` it includes (a tmpfile linked in later keeps its mode).
fn creating_flags() -> [u64; 2] {
    [
        libc::O_CREAT as u64,
        (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64,
    ]
}

/// F2's conditions for a set-id bit in argument `mode`, with a creating flag in `flags`.
fn set_id_rules(mode: u8, flags: Option<u8>) -> Result<Vec<SeccompRule>, SeccompError> {
    let mut out = Vec::new();
    for bit in SET_ID_BITS {
        let has_bit = cond(mode, SeccompCmpOp::MaskedEq(bit), bit)?;
        match flags {
            None => out.push(SeccompRule::new(vec![has_bit])?),
            Some(f) => {
                for c in creating_flags() {
                    let creating = cond(f, SeccompCmpOp::MaskedEq(c), c)?;
                    out.push(SeccompRule::new(vec![creating, has_bit.clone()])?);
                }
            }
        }
    }
    Ok(out)
}

/// Whether the call `name(args)` is one [`set_id_rules`] match, comparing as the filter does
/// (the low 32 bits).
fn sets_id_bits(name: &str, args: &[u64; 6]) -> bool {
    let Some((_, mode, flags)) = SET_ID_MODE_SETTERS.iter().find(|(n, ..)| *n == name) else {
        return false;
    };
    let a = |i: u8| u64::from(args[usize::from(i)] as u32);
    let creating = flags.is_none_or(|f| creating_flags().iter().any(|c| a(f) & c == *c));
    creating && SET_ID_BITS.iter().any(|b| a(*mode) & b != 0)
}

/// F2's rules: syscall number → conditions (an empty list matches every call).
/// `root`: the command runs as uid 0, the host's (see [`SET_ID_MODE_SETTERS`]); with
/// `nested_userns` it keeps `CAP_SETFCAP` too (see [`FILE_CAPABILITY_WRITERS`]).
pub(super) fn notify_rules(
    plan: &SyscallsPlan,
    supervise_exec: bool,
    trace_paths: bool,
    root: bool,
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
    if trace_paths {
        PATH_PROBES.iter().for_each(|(n, _)| always(n));
    }
    for r in plan.denied() {
        always(&r.name);
    }
    if sys::keeps_setfcap(plan.nested_userns, root) {
        FILE_CAPABILITY_WRITERS.iter().for_each(|n| always(n));
    }

    let mut conditional: Vec<(&str, Vec<SeccompRule>)> = Vec::new();
    if root {
        for (name, mode, flags) in SET_ID_MODE_SETTERS {
            conditional.push((name, set_id_rules(mode, flags)?));
        }
    }
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

/// The calls that look a path up, each with the argument that holds the path (a `dirfd`
/// before it when it is 1): what `--trace-home` watches. Those the arch lacks are skipped.
pub const PATH_PROBES: &[(&str, usize)] = &[
    ("open", 0),
    ("stat", 0),
    ("lstat", 0),
    ("access", 0),
    ("readlink", 0),
    ("openat", 1),
    ("openat2", 1),
    ("newfstatat", 1),
    ("statx", 1),
    ("faccessat", 1),
    ("faccessat2", 1),
    ("readlinkat", 1),
];

/// The path argument's index when `nr` is one of [`PATH_PROBES`].
pub fn path_probe(nr: i64) -> Option<usize> {
    let name = syscall_table::name(nr)?;
    PATH_PROBES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, i)| *i)
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
/// (which F2 does not send) gives `no rule: NAME`. `root` as for [`notify_rules`].
pub fn denial_rule(plan: &SyscallsPlan, root: bool, nr: i64, args: &[u64; 6]) -> String {
    let Some(name) = syscall_table::name(nr) else {
        return format!("built-in: unknown syscall {nr}");
    };
    // A policy's own denial of the name is the more specific rule.
    let own = plan.deny.iter().find(|r| r.name == name);
    if sys::keeps_setfcap(plan.nested_userns, root)
        && own.is_none()
        && FILE_CAPABILITY_WRITERS.contains(&name)
    {
        return format!(
            "built-in: {name} as root with nested sandboxes (file capabilities would reach the host)"
        );
    }
    if root && own.is_none() && sets_id_bits(name, args) {
        return format!(
            "built-in: {name} with set-id bits as root (a set-id file would reach the host)"
        );
    }
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
#[path = "rules_tests.rs"]
mod tests;
