//! The BPF programs: F1, F2 and F3 compiled by seccompiler from the rules, then patched (the
//! module documentation says why and how).

use std::collections::BTreeMap;

use cordon_policy::{SyscallsPlan, syscall_table};
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, SeccompRule, TargetArch};

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

/// Builds the three filters for `plan`; `supervise_exec` also sends `execve`/`execveat` to the
/// supervisor; `root` (the command's uid 0 is the host's) the calls that would set a set-id
/// mode ([`super::rules::SET_ID_MODE_SETTERS`]), and with nested sandboxes those that write
/// file capabilities ([`super::rules::FILE_CAPABILITY_WRITERS`]).
pub(crate) fn build(
    plan: &SyscallsPlan,
    supervise_exec: bool,
    root: bool,
) -> Result<Filters, SeccompError> {
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
    let root_enosys = ROOT_ENOSYS.iter().filter(|_| root);
    for nr in ["clone3"]
        .iter()
        .chain(root_enosys)
        .filter_map(|n| syscall_table::nr(n))
    {
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
        notify_rules(plan, supervise_exec, root)?,
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
