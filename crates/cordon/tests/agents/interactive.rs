// The agents in a terminal of their own, driven through tmux (part of tests/agents.rs: its
// stand-ins and helpers).

use super::*;

/// `sh -c` quoting.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A tmux session of the test's own running `c` (its program, arguments and environment);
/// killed on drop.
struct Tmux(String);

impl Tmux {
    fn start(name: &str, c: &Command, cwd: &Path) -> Tmux {
        let mut line = format!("cd {} && exec env -i", quote(&cwd.display().to_string()));
        for (k, v) in c.get_envs() {
            if let Some(v) = v {
                line.push_str(&format!(
                    " {}={}",
                    k.to_string_lossy(),
                    quote(&v.to_string_lossy())
                ));
            }
        }
        line.push_str(" TERM=xterm-256color ");
        line.push_str(&quote(&c.get_program().to_string_lossy()));
        for a in c.get_args() {
            line.push(' ');
            line.push_str(&quote(&a.to_string_lossy()));
        }
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", name])
            .status();
        let ok = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                name,
                "-x",
                "160",
                "-y",
                "50",
                &line,
            ])
            .status()
            .unwrap();
        assert!(ok.success(), "tmux new-session failed");
        Tmux(name.to_string())
    }

    fn screen(&self) -> String {
        let o = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.0])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Waits until the screen shows `text`; the screen so far on a timeout.
    fn wait(&self, text: &str, secs: u64) -> Result<String, String> {
        let end = std::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.screen();
            if s.contains(text) {
                return Ok(s);
            }
            if std::time::Instant::now() > end {
                return Err(s);
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            let _ = Command::new("tmux")
                .args(["send-keys", "-t", &self.0, k])
                .status();
            std::thread::sleep(Duration::from_millis(400));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

both!(claude_interactive_with_an_api_key_answers, |env: Env| {
    if !common::need(&["tmux"], "Claude Code on a terminal") {
        return;
    }
    let case = Case {
        agent: "claude",
        host: "api.anthropic.com",
        key_var: "ANTHROPIC_API_KEY",
        key: CLAUDE_KEY,
        args: &[],
        vars: &[],
        addr: 55,
        state: &[".claude.json"],
        shell: None,
        // The interactive start checks it can reach both.
        also: &["platform.claude.com"],
    };
    let Some(ready) = prepare(&env, &case) else {
        return;
    };
    let _ = std::fs::remove_file(&env.audit);
    let mut c = cordon(&env);
    c.env("PATH", &ready.path)
        .env(case.key_var, case.key)
        .args(["run", "--audit"])
        .arg(&env.audit)
        .args(["--policy", &ready.policy, "--", "claude"]);
    let name = format!(
        "cordon-agents-{}",
        std::process::id() as u64 * 2 + env.uid() as u64
    );
    let t = Tmux::start(&name, &c, &env.project);
    let step = |text: &str, keys: &[&str]| {
        let s = t.wait(text, 60).unwrap_or_else(|s| {
            panic!(
                "never showed {text:?}:\n{s}\n--- stand-in:\n{}",
                ready.stub.log()
            )
        });
        t.keys(keys);
        s
    };
    // First run: theme, the key (shown by its placeholder), the notes, trusting the folder.
    step("Choose the text style", &["Enter"]);
    let s = step("Do you want to use this API key?", &["Up", "Enter"]);
    assert!(
        !s.contains(&case.key[case.key.len() - 20..]),
        "the real key on screen:\n{s}"
    );
    step("Press Enter to continue", &["Enter"]);
    step("Yes, I trust this folder", &["Down", "Enter"]);
    step("auto mode", &["Say hello"]);
    t.keys(&["Enter"]);
    let s = t.wait(&ready.answer, 60).unwrap_or_else(|s| {
        panic!(
            "no answer on screen:\n{s}\n--- stand-in:\n{}",
            ready.stub.log()
        )
    });
    assert!(!s.contains("Not logged in"), "{s}");
    // What it phones besides its API is quiet: no denial announced on its screen.
    assert!(!s.contains("cordon: denied"), "{s}");
    assert!(
        s.lines()
            .next()
            .is_some_and(|l| l.contains("profile claude (detected: claude)")),
        "{s}"
    );
    // The real key went to the stand-in only.
    assert!(
        ready
            .stub
            .log()
            .lines()
            .any(|l| l.starts_with("KEY x-api-key ") && l.ends_with(case.key)),
        "{}",
        ready.stub.log()
    );
    t.keys(&["/exit", "Enter"]);
    // Leave the changes pending (Enter takes the default) and review them.
    step("apply these changes to your files?", &["Enter"]);
    let _ = t.wait("\u{0}never", 3);
    let session = session_start(&env.audit)["session"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    review_is_quiet(&env, &session, case.state, &s);
    // Kept, the first run's answers hold in the next session, the approval of the key too
    // (Claude keeps it by the key's tail): the placeholder is the same, session after session.
    let o = cordon(&env)
        .args(["state", "accept", &session])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let _ = std::fs::remove_file(&env.audit);
    let t2 = Tmux::start(&format!("{name}-2"), &c, &env.project);
    let s = t2
        .wait("shift+tab to cycle", 60)
        .unwrap_or_else(|s| panic!("the second session did not reach the prompt:\n{s}"));
    assert!(
        !s.contains("Do you want to use this API key") && !s.contains("Choose the text style"),
        "the second session asked again:\n{s}"
    );
    t2.keys(&["Say hello again", "Enter"]);
    let s = t2
        .wait(&ready.answer, 60)
        .unwrap_or_else(|s| panic!("no answer in the second session:\n{s}"));
    assert!(!s.contains("Not logged in"), "{s}");
});
