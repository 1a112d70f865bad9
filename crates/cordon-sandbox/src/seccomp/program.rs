//! The BPF programs: F1 written here (a walk over runs of allowed numbers and of numbers
//! answered ENOSYS), F2 compiled by seccompiler from the rules, then patched (the module
//! documentation says why and how).

use cordon_policy::{SyscallsPlan, syscall_table};
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch, sock_filter};

use super::SeccompError;
use super::rules::{NEWER_SYSCALLS, ROOT_ENOSYS, notify_rules};

/// `BPF_RET | BPF_K`.
const BPF_RET_K: u16 = 0x06;
/// The data of the marker action that stands for "notify the supervisor" until [`patch`].
const NOTIFY_MARKER: u32 = 0x0CD0;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_TRACE: u32 = 0x7ff0_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
/// `BPF_LD | BPF_W | BPF_ABS`, `BPF_JMP | BPF_JEQ | BPF_K` and the other opcodes F1 uses.
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGT_K: u16 = 0x25;
const BPF_JGE_K: u16 = 0x35;
/// Offsets of `nr` and `arch` in `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

/// The compiled programs, in install order.
#[derive(Debug, Clone)]
pub(crate) struct Filters {
    pub(super) programs: Vec<BpfProgram>,
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

/// Builds the two filters for `plan`; `supervise_exec` also sends `execve`/`execveat` to the
/// supervisor; `root` (the command's uid 0 is the host's) the calls that would set a set-id
/// mode ([`super::rules::SET_ID_MODE_SETTERS`]), and with nested sandboxes those that write
/// file capabilities ([`super::rules::FILE_CAPABILITY_WRITERS`]).
pub(crate) fn build(
    plan: &SyscallsPlan,
    supervise_exec: bool,
    trace_paths: bool,
    root: bool,
) -> Result<Filters, SeccompError> {
    let arch = target_arch()?;
    let table = syscall_table::native();

    // F1: ENOSYS for clone3, for syscalls newer than the table and, as root, for openat2;
    // the rest of the table allowed; anything else EPERM.
    let root_enosys = ROOT_ENOSYS.iter().filter(|_| root);
    let mut enosys: Vec<i64> = ["clone3"]
        .iter()
        .chain(root_enosys)
        .filter_map(|n| syscall_table::nr(n))
        .collect();
    enosys.extend(NEWER_SYSCALLS.filter(|nr| syscall_table::name(*nr).is_none()));
    let allowed: Vec<i64> = table
        .iter()
        .map(|(_, nr)| *nr)
        .filter(|nr| !enosys.contains(nr))
        .collect();
    let f1 = allowlist(audit_arch(arch), &allowed, &enosys)?;

    // F2: to the supervisor.
    let f2 = SeccompFilter::new(
        notify_rules(plan, supervise_exec, trace_paths, root)?,
        SeccompAction::Allow,
        SeccompAction::Trace(NOTIFY_MARKER),
        arch,
    )?;
    let mut f2: BpfProgram = f2.try_into()?;
    patch(&mut f2, true)?;
    Ok(Filters {
        programs: vec![f1, f2],
    })
}

fn audit_arch(arch: TargetArch) -> u32 {
    match arch {
        TargetArch::aarch64 => 183 | 0x8000_0000 | 0x4000_0000,
        // x86_64, the only other arch `target_arch` returns.
        _ => 62 | 0x8000_0000 | 0x4000_0000,
    }
}

/// F1, written directly rather than by seccompiler: another architecture fails with EPERM;
/// of the native numbers, those in `enosys` fail with ENOSYS, those in `allowed` are allowed,
/// and any other fails with EPERM. The program is a walk over the runs of consecutive numbers
/// with the same answer instead of one comparison per syscall: seccompiler's program for the
/// ~360 allowed calls was ~1,800 instructions, and installing it cost ~1 ms of kernel time at
/// every start (the cBPF-to-eBPF conversion, the JIT, and the action cache emulating the
/// program for every syscall number); this one is a few dozen. The ENOSYS answers were a
/// filter of their own, compiled by seccompiler (~150 instructions, ~0.09 ms to install at
/// every start: issue #18). Numbers compare unsigned, so x32 numbers (`nr | 0x40000000`) and
/// negative ones are above every run: EPERM.
fn allowlist(arch: u32, allowed: &[i64], enosys: &[i64]) -> Result<BpfProgram, SeccompError> {
    let number =
        |&n: &i64| u32::try_from(n).map_err(|_| SeccompError::Allowlist("a negative number"));
    let mut nrs: Vec<(u32, bool)> = allowed
        .iter()
        .map(|n| number(n).map(|n| (n, true)))
        .chain(enosys.iter().map(|n| number(n).map(|n| (n, false))))
        .collect::<Result<_, _>>()?;
    nrs.sort_unstable();
    nrs.dedup();
    if nrs.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(SeccompError::Allowlist("a number both allowed and ENOSYS"));
    }
    // (first, last, allowed): runs of consecutive numbers with the same answer.
    let mut runs: Vec<(u32, u32, bool)> = Vec::new();
    for (n, allow) in nrs {
        match runs.last_mut() {
            Some((_, hi, a)) if *hi + 1 == n && *a == allow => *hi = n,
            _ => runs.push((n, n, allow)),
        }
    }
    let stmt = |code, k| sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |code, k, jt, jf| sock_filter { code, jt, jf, k };
    let eperm = SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let mut p = vec![
        stmt(BPF_LD_W_ABS, DATA_ARCH),
        jump(BPF_JEQ_K, arch, 1, 0),
        stmt(BPF_RET_K, eperm),
        stmt(BPF_LD_W_ABS, DATA_NR),
    ];
    // Run i: above it, on to run i+1; else at or above its start its answer, below it (a gap
    // after the run before) denied. After the last run: denied. The three answers follow.
    let deny_at = p.len() + 2 * runs.len();
    for (lo, hi, allow) in &runs {
        p.push(jump(BPF_JGT_K, *hi, 1, 0));
        let here = p.len() + 1;
        let to = |target: usize| {
            u8::try_from(target - here).map_err(|_| SeccompError::Allowlist("too many runs"))
        };
        let answer = if *allow { deny_at + 1 } else { deny_at + 2 };
        p.push(jump(BPF_JGE_K, *lo, to(answer)?, to(deny_at)?));
    }
    p.push(stmt(BPF_RET_K, eperm));
    p.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    p.push(stmt(BPF_RET_K, SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
    Ok(p)
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

#[cfg(test)]
#[path = "program_tests.rs"]
mod tests;
