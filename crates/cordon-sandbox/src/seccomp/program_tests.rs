use super::*;
use crate::seccomp::testing::rule;

#[test]
fn programs_are_patched_and_fit() {
    let plan = SyscallsPlan {
        deny: vec![rule("chroot", "f:1")],
        ..Default::default()
    };
    let f = build(&plan, true, false).unwrap();
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
    let g = build(&lifted, false, false).unwrap();
    assert!(notifies(&g.programs[2]) < notifies(&f.programs[2]) - 4);
    // As root: the set-id mode rules in F3 (two or four per call) and openat2 in F2; each
    // program still within the kernel's limit.
    let r = build(&plan, true, true).unwrap();
    for (i, p) in r.programs.iter().enumerate() {
        assert!(p.len() < 4096, "filter {i}: {} instructions", p.len());
    }
    assert!(notifies(&r.programs[2]) >= notifies(&f.programs[2]) + 20);
    let enosys = |p: &BpfProgram| {
        p.iter()
            .filter(|i| i.code == BPF_RET_K && i.k == SECCOMP_RET_ERRNO | libc::ENOSYS as u32)
            .count()
    };
    assert!(enosys(&r.programs[1]) > enosys(&f.programs[1]));
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

#[test]
fn the_allowlist_decides_as_seccompilers_program_did_in_a_fraction_of_its_size() {
    let table = syscall_table::native();
    let allow: BTreeMap<i64, Vec<SeccompRule>> = table
        .iter()
        .filter(|(name, _)| *name != "clone3")
        .map(|(_, nr)| (*nr, Vec::new()))
        .collect();
    let arch = target_arch().unwrap();
    let eperm = SeccompAction::Errno(libc::EPERM as u32);
    let mut old: BpfProgram = SeccompFilter::new(allow, eperm, SeccompAction::Allow, arch)
        .unwrap()
        .try_into()
        .unwrap();
    patch(&mut old, false).unwrap();
    let new = build(&SyscallsPlan::default(), true, false)
        .unwrap()
        .programs
        .remove(0);
    assert!(new.len() * 10 < old.len(), "{} vs {}", new.len(), old.len());
    let native = audit_arch(arch);
    let clone3 = syscall_table::nr("clone3").unwrap() as u32;
    let mut allowed = 0;
    // i386, the other of x86_64 and aarch64, none.
    let foreign = 0xC000_00B7 ^ 0xC000_003E ^ native;
    for a in [native, 0x4000_0003, foreign, 0] {
        let nrs = (0..2048u32)
            .chain((0..1024).map(|n| n | 0x4000_0000))
            .chain([u32::MAX, u32::MAX - 1, 0x7fff_ffff, 0x8000_0000]);
        for nr in nrs {
            let d = run(&new, a, nr);
            assert_eq!(d, run(&old, a, nr), "arch {a:#x} nr {nr:#x}");
            allowed += usize::from(d == 0x7fff_0000);
        }
    }
    assert_eq!(allowed, table.len() - 1, "every call but clone3, natively");
    assert_eq!(
        run(&new, native, clone3),
        SECCOMP_RET_ERRNO | libc::EPERM as u32
    );
    let read = syscall_table::nr("read").unwrap() as u32;
    assert_eq!(run(&new, native, read), 0x7fff_0000);
}
