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
