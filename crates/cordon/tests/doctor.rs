//! `cordon doctor`: what is built, in layer order, with the host restrictions it knows and
//! the fix for each — as root and as an unprivileged user, whose probes (namespaces, cgroup
//! delegation, the end-to-end sandbox) take other paths.

mod common;

use common::{Env, show};

fn doctor(env: &Env, fake_root: Option<&std::path::Path>) -> std::process::Output {
    let mut c = env.cordon();
    c.arg("doctor");
    if let Some(r) = fake_root {
        c.env("CORDON_DOCTOR_HOST_ROOT", r);
    }
    c.output().unwrap()
}

both!(doctor_lists_what_is_built_in_layer_order, |env: Env| {
    let o = doctor(&env, None);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(!out.contains("not built"), "{out}");
    let headings = [
        "1  filesystem and process isolation",
        "1b credentials",
        "2  network egress",
        "3  HTTP interception",
        "4  syscalls",
        "agent-state protection",
        "audit log",
        "end to end",
    ];
    let at: Vec<usize> = headings
        .iter()
        .map(|h| {
            out.lines()
                .position(|l| l.starts_with(h))
                .unwrap_or_else(|| panic!("no section {h:?}:\n{out}"))
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "out of order:\n{out}");
    for needle in [
        "cordon's CA",
        "trust bundle for the sandbox",
        "SSL_CERT_FILE",
        "copy-on-write home",
        "seccomp user notification",
        "Landlock",
    ] {
        assert!(out.contains(needle), "no {needle:?}:\n{out}");
    }
    assert!(out.contains("can be enforced"), "{out}");
});

both!(
    doctor_names_host_restrictions_and_their_fixes,
    |env: Env| {
        let root = env.base.join("fake-host");
        for (knob, value) in [
            (
                "proc/sys/kernel/apparmor_restrict_unprivileged_userns",
                "1\n",
            ),
            ("proc/sys/user/max_user_namespaces", "0\n"),
        ] {
            let p = root.join(knob);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, value).unwrap();
        }
        // Readable by the variant's user; no dev/net/tun under it.
        env.own(&root);
        let o = doctor(&env, Some(&root));
        let out = String::from_utf8_lossy(&o.stdout);
        for needle in [
            "AppArmor user-namespace restriction",
            "kernel.apparmor_restrict_unprivileged_userns = 1",
            "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
            "apparmor_parser",
            "user.max_user_namespaces = 0",
            "sudo sysctl -w user.max_user_namespaces=",
            "no /dev/net/tun: `sudo modprobe tun`",
        ] {
            assert!(out.contains(needle), "no {needle:?}:\n{out}");
        }
        // The real namespaces still work here, so the restrictions are reported, not held
        // against the machine: the default policy can still be enforced.
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    }
);
