use std::collections::BTreeMap;

use seccompiler::SeccompRule;

use super::*;
use crate::seccomp::testing::rule;

#[test]
fn programs_are_patched_and_fit() {
    let plan = SyscallsPlan {
        deny: vec![rule("chroot", "f:1")],
        ..Default::default()
    };
    let f = build(&plan, true, false, false).unwrap();
    assert_eq!(f.programs.len(), 2);
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
    assert!(notifies(&f.programs[1]) > 40);
    // Without exec supervision and with everything liftable lifted, F2 is smaller.
    let lifted = SyscallsPlan {
        allow: vec![rule("ptrace", "f:2")],
        nested_userns: true,
        ..Default::default()
    };
    let g = build(&lifted, false, false, false).unwrap();
    assert!(notifies(&g.programs[1]) < notifies(&f.programs[1]) - 4);
    // As root: the set-id mode rules in F2 (two or four per call) and openat2 ENOSYS in F1;
    // each program still within the kernel's limit.
    let r = build(&plan, true, false, true).unwrap();
    for (i, p) in r.programs.iter().enumerate() {
        assert!(p.len() < 4096, "filter {i}: {} instructions", p.len());
    }
    assert!(notifies(&r.programs[1]) >= notifies(&f.programs[1]) + 20);
    if let Some(openat2) = syscall_table::nr("openat2") {
        let native = audit_arch(target_arch().unwrap());
        let enosys = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        assert_eq!(run(&r.programs[0], native, openat2 as u32), enosys);
        assert_eq!(
            run(&f.programs[0], native, openat2 as u32),
            SECCOMP_RET_ALLOW
        );
    }
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

/// A cBPF interpreter for the instructions seccompiler and [`allowlist`] emit: the decision
/// of program `p` for syscall `nr` on `arch` (no arguments read).
fn run(p: &BpfProgram, arch: u32, nr: u32) -> u32 {
    let (mut pc, mut a) = (0usize, 0u32);
    loop {
        let i = &p[pc];
        pc += 1;
        match i.code {
            0x20 => {
                a = match i.k {
                    0 => nr,
                    4 => arch,
                    k => panic!("load of seccomp_data offset {k}"),
                }
            }
            0x05 => pc += i.k as usize,
            0x15 | 0x25 | 0x35 | 0x45 => {
                let taken = match i.code {
                    0x15 => a == i.k,
                    0x25 => a > i.k,
                    0x35 => a >= i.k,
                    _ => a & i.k != 0,
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            0x54 => a &= i.k,
            BPF_RET_K => return i.k,
            c => panic!("opcode {c:#x} at {}", pc - 1),
        }
    }
}

/// What the kernel decides when every program in `programs` (install order) has answered:
/// the most restrictive action, and of equally restrictive ones the latest installed's value.
fn decide(programs: &[&BpfProgram], arch: u32, nr: u32) -> u32 {
    let mut out = SECCOMP_RET_ALLOW;
    for p in programs.iter().rev() {
        let d = run(p, arch, nr);
        if (d & 0xffff_0000) < (out & 0xffff_0000) {
            out = d;
        }
    }
    out
}

#[test]
fn the_allowlist_decides_as_seccompilers_two_programs_did_in_a_fraction_of_their_size() {
    let table = syscall_table::native();
    let arch = target_arch().unwrap();
    let native = audit_arch(arch);
    // i386, the other of x86_64 and aarch64, none.
    let foreign = 0xC000_00B7 ^ 0xC000_003E ^ native;
    for root in [false, true] {
        // What F1 and F2 were before they were one program: seccompiler's allowlist of every
        // call but clone3 (EPERM otherwise), then its ENOSYS filter.
        let allow: BTreeMap<i64, Vec<SeccompRule>> = table
            .iter()
            .filter(|(name, _)| *name != "clone3")
            .map(|(_, nr)| (*nr, Vec::new()))
            .collect();
        let eperm = SeccompAction::Errno(libc::EPERM as u32);
        let mut old_allow: BpfProgram =
            SeccompFilter::new(allow, eperm, SeccompAction::Allow, arch)
                .unwrap()
                .try_into()
                .unwrap();
        patch(&mut old_allow, false).unwrap();
        let mut enosys: BTreeMap<i64, Vec<SeccompRule>> = NEWER_SYSCALLS
            .filter(|nr| syscall_table::name(*nr).is_none())
            .map(|nr| (nr, Vec::new()))
            .collect();
        for n in ["clone3"].iter().chain(ROOT_ENOSYS.iter().filter(|_| root)) {
            enosys.insert(syscall_table::nr(n).unwrap(), Vec::new());
        }
        let mut old_enosys: BpfProgram = SeccompFilter::new(
            enosys,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch,
        )
        .unwrap()
        .try_into()
        .unwrap();
        patch(&mut old_enosys, false).unwrap();
        let new = build(&SyscallsPlan::default(), true, false, root)
            .unwrap()
            .programs
            .remove(0);
        assert!(
            new.len() * 10 < old_allow.len() + old_enosys.len(),
            "{} vs {} + {}",
            new.len(),
            old_allow.len(),
            old_enosys.len()
        );
        let mut answers = BTreeMap::new();
        for a in [native, 0x4000_0003, foreign, 0] {
            let nrs = (0..2048u32)
                .chain((0..1024).map(|n| n | 0x4000_0000))
                .chain([u32::MAX, u32::MAX - 1, 0x7fff_ffff, 0x8000_0000]);
            for nr in nrs {
                let d = run(&new, a, nr);
                assert_eq!(
                    d,
                    decide(&[&old_allow, &old_enosys], a, nr),
                    "root {root} arch {a:#x} nr {nr:#x}"
                );
                *answers.entry(d).or_insert(0usize) += 1;
            }
        }
        let enosys_answer = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        let newer = NEWER_SYSCALLS
            .filter(|nr| syscall_table::name(*nr).is_none())
            .count();
        assert_eq!(
            answers[&SECCOMP_RET_ALLOW],
            table.len() - 1 - usize::from(root),
            "every call but clone3 (and openat2 as root), natively"
        );
        assert_eq!(answers[&enosys_answer], newer + 1 + usize::from(root));
        let clone3 = syscall_table::nr("clone3").unwrap() as u32;
        assert_eq!(run(&new, native, clone3), enosys_answer);
        let read = syscall_table::nr("read").unwrap() as u32;
        assert_eq!(run(&new, native, read), SECCOMP_RET_ALLOW);
    }
}
