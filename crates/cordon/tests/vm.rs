//! The microVM backend, black-box: a real QEMU (`microvm`, TCG here: this machine's nested
//! KVM does not boot Linux) boots a Debian kernel with cordon as its init, and the command runs
//! in the guest behind the same walls as with the namespace backend: its own kernel, the
//! secrets masked, the host read-only but the project, the gateway the only way out (a denied
//! host gets cordon's 403, an allowed host's credential is swapped at the wire), what it leaves
//! for the host held for review, its exit code and Ctrl-C passed through. As root and as a
//! user.

mod common;

use std::process::Command;
use std::time::Duration;

use common::net::{UNPROXIED, https_443, policy, spawn_run_full, wait_limited, www};
use common::{Env, SECRETS, show};

/// What every VM test passes to `cordon run`.
const VM: &[&str] = &["--backend", "vm", "--accel", "tcg"];
/// A boot under TCG takes seconds; a loaded CI machine, more.
const LIMIT: Duration = Duration::from_secs(240);

/// QEMU and a guest kernel, or the test says why it cannot run (a failure in strict mode).
fn vm_ready() -> bool {
    if !common::need(&["qemu-system-x86_64"], "the VM backend's VMM") {
        return false;
    }
    if cordon_vm_kernel().is_none() {
        common::skip(
            "a guest kernel",
            "the VM backend needs a distribution kernel with its modules (scripts/setup-test-env.sh installs linux-image-amd64)",
        );
        return false;
    }
    true
}

fn cordon_vm_kernel() -> Option<String> {
    let boot = std::fs::read_dir("/boot").ok()?;
    boot.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let release = name.strip_prefix("vmlinuz-")?.to_string();
            std::path::Path::new("/lib/modules")
                .join(&release)
                .join("modules.dep")
                .exists()
                .then_some(release)
        })
        .next()
}

fn host_release() -> String {
    let o = Command::new("uname").arg("-r").output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A policy file for a VM test: one vCPU and 1 GiB unless the test says otherwise, so that
/// two tests' guests under emulation share this machine's two cores without starving.
fn vm_policy(env: &Env, pol: &str) -> String {
    match pol.contains("[sandbox") {
        true => policy(env, pol),
        false => policy(
            env,
            &format!("[sandbox.vm]\ncpus = 1\nmemory = 1024\n{pol}"),
        ),
    }
}

fn run_vm(env: &Env, pol: &str, script: &str, vars: &[(&str, &str)]) -> std::process::Output {
    run_with_options(env, pol, script, vars, VM)
}

fn run_with_options(
    env: &Env,
    pol: &str,
    script: &str,
    vars: &[(&str, &str)],
    options: &[&str],
) -> std::process::Output {
    common::net::setup(env);
    let p = vm_policy(env, pol);
    wait_limited(spawn_run_full(env, &p, script, vars, options), LIMIT)
}

both!(
    the_command_runs_on_a_kernel_of_its_own_behind_the_same_walls,
    |env: Env| {
        if !vm_ready() {
            return;
        }
        common::git(&env.project, &["init", "-q"]);
        let outside = env.home.join("outside.txt");
        let script = format!(
            "echo KERNEL $(uname -r)\n\
             echo UID $(id -u)\n\
             cat ~/.ssh/id_ed25519 ~/.aws/credentials 2>/dev/null; echo READ-DONE\n\
             echo x > '{out}' 2>/dev/null && echo OUTSIDE-WROTE || echo OUTSIDE-REFUSED\n\
             echo y > /usr/cordon-vm-test 2>/dev/null && echo ROOT-WROTE || echo ROOT-REFUSED\n\
             echo from-the-guest > made-in-vm.txt && echo PROJECT-WROTE\n\
             printf '#!/bin/sh\\necho planted\\n' > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout\n\
             echo to-stderr >&2\n\
             exit 7",
            out = outside.display()
        );
        let o = run_vm(&env, "", &script, &[]);
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(7),
            "the command's own code:\n{}",
            show(&o)
        );
        let kernel = out
            .lines()
            .find_map(|l| l.strip_prefix("KERNEL "))
            .unwrap_or_else(|| panic!("the command did not run:\n{}", show(&o)));
        assert_ne!(kernel, host_release(), "the guest runs the host's kernel");
        assert_eq!(cordon_vm_kernel().as_deref(), Some(kernel), "{}", show(&o));
        assert!(out.contains(&format!("UID {}", env.uid())), "{}", show(&o));
        assert!(out.contains("READ-DONE"), "{}", show(&o));
        for (_, secret) in SECRETS {
            assert!(!out.contains(secret), "{secret} was read:\n{}", show(&o));
        }
        assert!(out.contains("OUTSIDE-REFUSED"), "{}", show(&o));
        assert!(!outside.exists(), "a home file was written from the VM");
        assert!(out.contains("ROOT-REFUSED"), "{}", show(&o));
        assert!(out.contains("PROJECT-WROTE"), "{}", show(&o));
        assert_eq!(
            std::fs::read_to_string(env.project.join("made-in-vm.txt")).unwrap_or_default(),
            "from-the-guest\n",
            "the project is the host's"
        );
        assert!(
            err.contains("to-stderr"),
            "stderr is its own stream:\n{}",
            show(&o)
        );
        assert!(!out.contains("to-stderr"), "{}", show(&o));
        assert!(
            !env.project.join(".git/hooks/post-checkout").exists(),
            "a hook the guest planted reached the host unreviewed:\n{}",
            show(&o)
        );
        // The guest's sandbox reports into the same audit log, marked as the guest's.
        let events = common::events(&env);
        assert!(
            events.iter().any(|e| e["detail"]["vm"] == "guest"),
            "no event from the guest's sandbox"
        );
    }
);

both!(the_gateway_is_the_guests_only_way_out, |env: Env| {
    if !vm_ready() || !common::need(&["curl", "openssl"], "an HTTPS client and server") {
        return;
    }
    let addr = &common::net::variant_addr(&env, 71);
    let root = www(&env, "vmapi", "hello-vm");
    let Some((srv, ca)) = https_443(&env, "api.example.test", addr, &root) else {
        return;
    };
    let real = format!("sk-ant-api03-{}AA", "v".repeat(93));
    let pol = format!(
        "[sandbox]\nbackend = \"vm\"\n[sandbox.vm]\naccel = \"tcg\"\nmemory = 1024\ncpus = 1\n\
         [dns]\nhosts = {{ \"api.example.test\" = \"{addr}\", \"denied.example.test\" = \"{addr}\" }}\n\
             [[network.allow]]\nhost = \"api.example.test\"\nports = [443]\n\
             [tls]\nupstream_ca = \"{}\"\n\
             [credentials.anthropic]\nenv = \"ANTHROPIC_API_KEY\"\nsource = {{ env = \"CORDON_TEST_REAL_KEY\" }}\n\
             hosts = [\"api.example.test\"]\nheaders = [\"x-api-key\"]\n",
        ca.display()
    );
    let script = "echo KEY $ANTHROPIC_API_KEY\n\
             echo PROXIED $(curl -sS --max-time 20 -H \"x-api-key: $ANTHROPIC_API_KEY\" https://api.example.test/hello.txt)\n\
             echo DIRECT $(UNPROXIED curl -sS --max-time 20 -H \"x-api-key: $ANTHROPIC_API_KEY\" https://api.example.test/hello.txt)\n\
             echo DENIED $(UNPROXIED curl -s --max-time 20 -o /dev/null -w '%{http_code}' https://denied.example.test/)\n\
             echo DENIED-BODY $(UNPROXIED curl -s --max-time 20 https://denied.example.test/ | head -c 300)\n\
             echo RAW $(UNPROXIED curl -s --max-time 10 -o /dev/null -w '%{http_code}' http://198.51.100.7/ || true)"
            .replace("UNPROXIED", UNPROXIED);
    // The backend from the policy this time, not the command line.
    let o = run_with_options(&env, &pol, &script, &[("CORDON_TEST_REAL_KEY", &real)], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("PROXIED hello-vm"),
        "through the proxy variables:\n{}",
        show(&o)
    );
    assert!(
        out.contains("DIRECT hello-vm"),
        "through the link's TUN path:\n{}",
        show(&o)
    );
    assert!(out.contains("DENIED 403"), "cordon's 403:\n{}", show(&o));
    let body = out
        .lines()
        .find_map(|l| l.strip_prefix("DENIED-BODY "))
        .unwrap_or_default();
    assert!(
        body.contains("cordon"),
        "the 403 is cordon's, in its words:\n{}",
        show(&o)
    );
    assert!(
        out.contains("RAW 000"),
        "a raw IP goes nowhere:\n{}",
        show(&o)
    );
    assert!(
        !out.contains(&real),
        "the real key reached the guest:\n{}",
        show(&o)
    );
    let log = srv.log();
    assert_eq!(
        log.matches(&format!("HDR x-api-key: {real}")).count(),
        2,
        "the real key, swapped in at the wire, twice:\n{log}\n{}",
        show(&o)
    );
    assert!(
        !log.contains("HDR host: denied.example.test"),
        "the denied host was reached:\n{log}"
    );
});

both!(ctrl_c_reaches_the_command_in_the_guest, |env: Env| {
    if !vm_ready() {
        return;
    }
    common::net::setup(&env);
    let p = vm_policy(&env, "");
    // Without a terminal: cordon's SIGINT goes to the guest, where the command ends of it.
    let script = "trap 'echo GOT-INT; exit 42' INT; echo READY; while :; do sleep 1; done";
    let mut child = spawn_run_full(&env, &p, script, &[], VM);
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    let started = std::time::Instant::now();
    while !String::from_utf8_lossy(&seen).contains("READY") {
        use std::io::Read;
        let n = stdout.read(&mut buf).unwrap_or(0);
        assert!(n > 0 && started.elapsed() < LIMIT, "never ready");
        seen.extend_from_slice(&buf[..n]);
    }
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        rest
    });
    let o = wait_limited(child, Duration::from_secs(60));
    let rest = reader.join().unwrap();
    assert!(rest.contains("GOT-INT"), "{rest}\n{}", show(&o));
    assert_eq!(o.status.code(), Some(42), "{}", show(&o));
    // With a terminal: ^C typed on it is the guest terminal's, and its line discipline
    // interrupts the command (130, the shell's code for SIGINT).
    if !common::need(&["script"], "a terminal") {
        return;
    }
    let line = format!(
        "{} run --policy {p} --backend vm --accel tcg -- sh -c 'echo READY; sleep 100; echo NOT-INTERRUPTED'; echo CODE $?",
        env.cordon_line()
    );
    let shown = common::under_pty_answering_within(&env, &line, ("READY", "\x03"), LIMIT);
    assert!(shown.contains("CODE 130"), "{shown}");
    assert!(!shown.contains("NOT-INTERRUPTED"), "{shown}");
});

both!(
    without_kvm_the_vm_is_refused_unless_tcg_is_asked_for,
    |env: Env| {
        if !vm_ready() {
            return;
        }
        let o = run_with_options(&env, "", "echo RAN", &[], &["--backend", "vm"]);
        let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let hw = cpu.split_whitespace().any(|f| f == "vmx" || f == "svm");
        let kvm = hw
            && env.who == common::Who::Root
            && std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/kvm")
                .is_ok();
        if kvm {
            // Where KVM works, the default accel boots (not on this project's CI machines).
            assert!(
                String::from_utf8_lossy(&o.stdout).contains("RAN"),
                "{}",
                show(&o)
            );
            return;
        }
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(125),
            "cordon's own failure:\n{}",
            show(&o)
        );
        assert!(err.contains("KVM is not usable"), "{}", show(&o));
        assert!(
            err.contains("--accel tcg"),
            "the fix is named:\n{}",
            show(&o)
        );
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("RAN"),
            "{}",
            show(&o)
        );
    }
);

both!(
    stdio_and_events_cross_whole_however_much_there_is,
    |env: Env| {
        if !vm_ready() {
            return;
        }
        common::net::setup(&env);
        let p = vm_policy(&env, "");
        // 4 MiB of input the command leaves unread while it prints, then copies out whole;
        // and a burst of execs, each an event of the guest's sandbox.
        let input: Vec<u8> = (0..4u32 << 20)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let data = env.base.join("input.bin");
        std::fs::write(&data, &input).unwrap();
        let script = "seq 200000 | tail -n 1; i=0; while [ $i -lt 100 ]; do /bin/true; i=$((i+1)); done; cat";
        let _ = std::fs::remove_file(&env.audit);
        let child = env
            .cordon()
            .env("XDG_RUNTIME_DIR", common::runtime_dir(&env))
            .args(["run", "--no-tty", "--audit"])
            .arg(&env.audit)
            .args(["--policy", &p])
            .args(VM)
            .args(["--", "sh", "-c", script])
            .stdin(std::fs::File::open(&data).unwrap())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let o = wait_limited(child, LIMIT);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let (head, rest) = o
            .stdout
            .split_at(o.stdout.iter().position(|&b| b == b'\n').unwrap() + 1);
        assert_eq!(head, b"200000\n", "{}", show(&o));
        assert_eq!(rest.len(), input.len(), "every byte of stdin came back");
        assert!(
            rest == input.as_slice(),
            "the bytes came back as they went in"
        );
        let execs = common::events(&env)
            .iter()
            .filter(|e| e["detail"]["vm"] == "guest" && e["layer"] == "exec")
            .filter(|e| e["detail"]["program"] == "true")
            .count();
        assert!(execs >= 100, "{execs} of the 100 execs were logged");
    }
);

both!(
    a_guest_that_never_reports_its_end_still_ends_in_the_exit_review,
    |env: Env| {
        if !vm_ready() {
            return;
        }
        common::net::setup(&env);
        let p = vm_policy(&env, "");
        // The command ignores the hang-up cordon forwards, so the grace ends with QEMU killed:
        // the guest never says how the command ended. What it wrote is still reviewed, not
        // thrown away.
        let script = "mkdir -p .vscode && echo '{}' > .vscode/tasks.json && trap '' HUP && echo READY && sleep 60";
        let mut child = spawn_run_full(&env, &p, script, &[], VM);
        let mut stdout = child.stdout.take().unwrap();
        let mut seen = String::new();
        while !seen.contains("READY") {
            use std::io::Read;
            let mut buf = [0u8; 64];
            let n = stdout.read(&mut buf).unwrap_or(0);
            assert!(n > 0, "never ready: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        let _ = Command::new("kill")
            .args(["-HUP", &child.id().to_string()])
            .status();
        let o = wait_limited(child, Duration::from_secs(60));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(137), "{}", show(&o));
        assert!(err.contains("before the guest reported"), "{}", show(&o));
        assert!(
            err.contains("moved to review"),
            "the review ran:\n{}",
            show(&o)
        );
        assert!(
            !env.project.join(".vscode/tasks.json").exists(),
            "{}",
            show(&o)
        );
    }
);
