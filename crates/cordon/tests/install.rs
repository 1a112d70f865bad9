//! What installing cordon sets up beside the binary (README, "Man page and completions"):
//! `cordon man` is a man page `man` renders, `cordon man --dir` one per subcommand, and
//! `cordon completions SHELL` a script the shell loads and completes with.

mod common;

use common::{Env, show};

fn cordon(env: &Env, args: &[&str]) -> std::process::Output {
    let o = env.cordon().args(args).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{args:?}\n{}", show(&o));
    o
}

/// `man -l` on a file, plain text.
fn render(env: &Env, page: &std::path::Path) -> String {
    let o = std::process::Command::new("man")
        .args(["-P", "cat", "-l"])
        .arg(page)
        .env("MANWIDTH", "120")
        .current_dir(&env.base)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "man -l {}\n{}",
        page.display(),
        show(&o)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

both!(the_man_pages_render, |env: Env| {
    let o = cordon(&env, &["man"]);
    let roff = String::from_utf8_lossy(&o.stdout);
    assert!(
        roff.contains("\n.TH cordon 1 "),
        "no man page header\n{roff}"
    );
    if !common::need(&["man"], "rendering the man page with man -l") {
        return;
    }
    let page = env.base.join("cordon.1");
    std::fs::write(&page, roff.as_bytes()).unwrap();
    let text = render(&env, &page);
    assert!(
        text.contains("SUBCOMMANDS") && text.contains("cordon-explain(1)"),
        "{text}"
    );
    // One page per subcommand, as the main page's SUBCOMMANDS section names them.
    let dir = env.base.join("man1");
    std::fs::create_dir_all(&dir).unwrap();
    env.own(&dir);
    cordon(&env, &["man", "--dir", dir.to_str().unwrap()]);
    for sub in ["run", "check", "explain", "init", "state-accept"] {
        let page = dir.join(format!("cordon-{sub}.1"));
        assert!(page.exists(), "no {}", page.display());
    }
    let explain = render(&env, &dir.join("cordon-explain.1"));
    assert!(
        explain.contains("--write") && explain.contains("Exit status"),
        "{explain}"
    );
    // A directory that cannot be written is an error naming it.
    let o = env
        .cordon()
        .args(["man", "--dir", "/proc/cordon-no"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("/proc/cordon-no"),
        "{}",
        show(&o)
    );
});

both!(
    bash_loads_the_completions_and_completes_subcommands,
    |env: Env| {
        let o = cordon(&env, &["completions", "bash"]);
        let script = env.base.join("cordon.bash");
        std::fs::write(&script, &o.stdout).unwrap();
        let o = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "set -e; source {}; complete -p cordon; \
             COMP_WORDS=(cordon ex); COMP_CWORD=1; COMP_LINE='cordon ex'; COMP_POINT=9; \
             _cordon cordon ex cordon; echo \"REPLY ${{COMPREPLY[*]}}\"",
                script.display()
            ))
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success() && o.stderr.is_empty(), "{}", show(&o));
        assert!(out.contains("complete") && out.contains("cordon"), "{out}");
        assert!(out.contains("REPLY explain"), "{out}");
    }
);

both!(
    every_shell_gets_a_script_naming_the_subcommands,
    |env: Env| {
        for (shell, marker) in [("zsh", "#compdef cordon"), ("fish", "complete -c cordon")] {
            let o = cordon(&env, &["completions", shell]);
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(text.contains(marker), "{shell}\n{text}");
            assert!(
                text.contains("explain") && text.contains("init"),
                "{shell}\n{text}"
            );
        }
        let o = env.cordon().args(["completions", "tcsh"]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    }
);
