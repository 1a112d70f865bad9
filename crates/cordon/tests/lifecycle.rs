//! Exit codes, signals, orphans, the pty: `cordon run` behaves like the command it runs.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Env, show};

both!(exit_codes_follow_the_command, |env: Env| {
    assert_eq!(env.run("exit 0").status.code(), Some(0));
    assert_eq!(env.run("exit 3").status.code(), Some(3));
    assert_eq!(env.run("kill -9 $$").status.code(), Some(137));
    assert_eq!(env.run("kill -TERM $$").status.code(), Some(143));
});

both!(exit_codes_for_missing_and_unexecutable, |env: Env| {
    let mut c = env.cordon();
    let o = c
        .args(["run", "--no-tty", "--", "no-such-command-xyz"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("command not found"),
        "{}",
        show(&o)
    );
    let f = env.write("script.sh", "#!/bin/sh\necho hi\n");
    let mut c = env.cordon();
    let o = c.args(["run", "--no-tty", "--"]).arg(&f).output().unwrap();
    assert_eq!(o.status.code(), Some(126), "{}", show(&o));
});

both!(exit_125_when_cordon_fails, |env: Env| {
    let bad = env.write("cordon.toml", "[filesystem]\nwriteable = [\"/x\"]\n");
    let mut c = env.cordon();
    let o = c.args(["run", "--no-tty", "--", "true"]).output().unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("{}:2:1", bad.display())),
        "{}",
        show(&o)
    );
    let mut c = env.cordon();
    let o = c
        .args([
            "run",
            "--no-tty",
            "--project",
            "/nonexistent/dir",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    let mut c = env.cordon();
    let o = c
        .args(["run", "--bogus-flag", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
});

fn pgrep(marker: &str) -> usize {
    let out = std::process::Command::new("pgrep")
        .arg("-f")
        .arg(marker)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

fn wait_gone(marker: &str) -> bool {
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if pgrep(marker) == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn no_orphans_after(env: &Env, signal: &str) {
    // A unique sleep length marks our processes; one ignores TERM, so only the kill path ends it.
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let marker = format!("{}.{n}{:09}", 900 + std::process::id() % 90, nanos);
    let script =
        format!("trap '' TERM; sleep {marker} & (trap '' TERM; sleep {marker}) & sleep {marker}");
    let mut child = env
        .cordon()
        .args(["run", "--no-tty", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    while pgrep(&format!("sleep {marker}")) < 3 {
        assert!(Instant::now() < end, "sandboxed sleepers never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(st.success());
    let code = child.wait().unwrap();
    assert!(
        wait_gone(&format!("sleep {marker}")),
        "orphans survived {signal}: {}",
        pgrep(&format!("sleep {marker}"))
    );
    if signal == "TERM" {
        // TERM is forwarded; the command ignores it, so the grace period ends in SIGKILL.
        assert_eq!(code.code(), Some(137), "{code:?}");
    }
}

both!(no_orphans_after_term, |env: Env| no_orphans_after(
    &env, "TERM"
));
both!(no_orphans_after_kill, |env: Env| no_orphans_after(
    &env, "KILL"
));

both!(signals_are_forwarded, |env: Env| {
    let mut child = env
        .cordon()
        .args([
            "run",
            "--no-tty",
            "--",
            "sh",
            "-c",
            "trap 'echo got-usr1; exit 7' USR1; echo ready; while :; do sleep 0.1; done",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut buf = [0u8; 6];
    std::io::Read::read_exact(&mut out, &mut buf).unwrap();
    assert_eq!(&buf, b"ready\n");
    std::process::Command::new("kill")
        .arg("-USR1")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let st = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(st.code(), Some(7), "{rest}");
    assert!(rest.contains("got-usr1"));
});

fn interactive(env: &Env, input: &str) -> String {
    common::under_pty(
        env,
        &format!("{} run -- bash --norc --noprofile -i", env.cordon_line()),
        input,
    )
}

both!(interactive_shell_under_a_pty, |env: Env| {
    let out = interactive(&env, "tty; echo answer=$((6*7)); stty size; exit 5\n");
    assert!(
        out.contains("/dev/pts/0"),
        "the command should own a pty of the sandbox's devpts:\n{out}"
    );
    assert!(out.contains("answer=42"), "{out}");
});

both!(ctrl_c_reaches_the_foreground_job, |env: Env| {
    let out = interactive(&env, "sleep 30\n\x03echo after=$?\nexit\n");
    assert!(
        out.contains("after=130"),
        "Ctrl-C should interrupt sleep with SIGINT:\n{out}"
    );
});

both!(window_resizes_reach_the_sandbox, |env: Env| {
    // The outer terminal is resized while the command runs; the tty driver signals cordon
    // (the foreground job), which passes the new size to the sandbox's pty.
    let script = env.write(
        "resize.sh",
        &format!(
            "stty rows 30 cols 90\n(sleep 1; stty rows 50 cols 120 </dev/tty) &\n\
             {} run -- sh -c 'stty size; sleep 2; stty size'\n",
            env.cordon_line()
        ),
    );
    let out = common::under_pty(&env, &format!("sh {}", script.display()), "");
    let sizes: Vec<&str> = out
        .lines()
        .map(|l| l.trim_matches(|c: char| c == '\r' || c == '\0'))
        .filter(|l| l.ends_with(" 90") || l.ends_with(" 120"))
        .collect();
    assert_eq!(sizes, ["30 90", "50 120"], "{out:?}");
});

both!(
    a_command_not_reading_its_terminal_does_not_freeze_cordon,
    |env: Env| {
        // 200 KB of pasted input that the command never reads: the pty fills up, yet cordon must
        // keep answering the sandbox (every exec waits on it).
        let line = format!(
            "{} run -- sh -c 'stty raw -echo; sleep 2; /bin/true && echo still-alive; stty sane'",
            env.cordon_line()
        );
        let input = format!("{}\n", "x".repeat(200_000));
        let start = Instant::now();
        let out = common::under_pty(&env, &line, &input);
        assert!(
            out.contains("still-alive"),
            "{:?}",
            &out[out.len().saturating_sub(300)..]
        );
        assert!(start.elapsed() < Duration::from_secs(30));
    }
);
