use super::*;

fn profiles() -> Vec<(String, AgentPlan)> {
    let p = |name: &str, commands: &[&str], packages: &[&str]| {
        (
            name.to_string(),
            AgentPlan {
                commands: commands.iter().map(|s| s.to_string()).collect(),
                packages: packages.iter().map(|s| s.to_string()).collect(),
                quiet: Vec::new(),
            },
        )
    };
    vec![
        p("aider", &["aider"], &["aider-chat"]),
        p("claude", &["claude"], &["@anthropic-ai/claude-code"]),
        p("codex", &["codex"], &["@openai/codex"]),
        p("opencode", &["opencode"], &["opencode-ai"]),
    ]
}

/// Scripts under /opt/pkgs/NAME/… belong to package NAME; nothing else belongs anywhere.
fn fake_package_of(p: &str) -> Option<String> {
    let rest = p.strip_prefix("/opt/pkgs/")?;
    let mut parts = rest.split('/');
    let first = parts.next()?;
    Some(if first.starts_with('@') {
        format!("{first}/{}", parts.next()?)
    } else {
        first.to_string()
    })
}

fn detected(cmd: &str) -> Option<(String, String)> {
    let argv: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
    detect(&argv, &profiles(), &fake_package_of).map(|d| (d.profile, d.by))
}

fn profile(cmd: &str) -> Option<String> {
    detected(cmd).map(|(p, _)| p)
}

#[test]
fn a_command_by_name_or_path() {
    assert_eq!(
        detected("claude -p hi"),
        Some(("claude".into(), "claude".into()))
    );
    assert_eq!(profile("/usr/local/bin/codex exec x"), Some("codex".into()));
    assert_eq!(
        profile("env FOO=1 -u BAR aider --message x"),
        Some("aider".into())
    );
    assert_eq!(profile("sh -c claude"), None);
    assert_eq!(profile("claudes"), None);
    assert_eq!(profile(""), None);
}

#[test]
fn package_runners() {
    assert_eq!(
        detected("npx -y @anthropic-ai/claude-code@2.1.0 -p hi"),
        Some(("claude".into(), "npx @anthropic-ai/claude-code".into()))
    );
    assert_eq!(profile("bunx @openai/codex exec"), Some("codex".into()));
    assert_eq!(
        profile("npx --yes opencode-ai@latest run x"),
        Some("opencode".into())
    );
    assert_eq!(
        profile("npx --package=@openai/codex codex exec"),
        Some("codex".into())
    );
    assert_eq!(profile("npx -p @openai/codex codex"), Some("codex".into()));
    assert_eq!(profile("npm exec @openai/codex"), Some("codex".into()));
    assert_eq!(profile("pnpm dlx opencode-ai"), Some("opencode".into()));
    assert_eq!(profile("npx cowsay"), None);
    assert_eq!(
        detected("pipx run aider-chat --message x"),
        Some(("aider".into(), "pipx run aider-chat".into()))
    );
    assert_eq!(
        profile("pipx run --spec aider-chat==0.86 aider"),
        Some("aider".into())
    );
    assert_eq!(
        profile("uvx --python 3.11 Aider_Chat[browser]"),
        Some("aider".into())
    );
    assert_eq!(profile("uvx --from aider-chat aider"), Some("aider".into()));
    assert_eq!(profile("uv tool run aider"), Some("aider".into()));
    assert_eq!(profile("uvx ruff"), None);
}

#[test]
fn interpreters_running_a_known_packages_script() {
    assert_eq!(
        detected("node /opt/pkgs/@anthropic-ai/claude-code/cli.js -p hi"),
        Some(("claude".into(), "node (@anthropic-ai/claude-code)".into()))
    );
    assert_eq!(
        profile("node --require ./x.js /opt/pkgs/opencode-ai/bin/run.js"),
        Some("opencode".into())
    );
    // A script that belongs to no known package is known by its file name, if at all.
    assert_eq!(profile("node /home/u/claude.js"), Some("claude".into()));
    assert_eq!(profile("node /home/u/server.js"), None);
    assert_eq!(profile("node"), None);
    assert_eq!(
        profile("python3 -m aider --message x"),
        Some("aider".into())
    );
    assert_eq!(profile("python3 script.py"), None);
}

#[test]
fn a_program_is_also_known_by_its_package() {
    // `cc` is on no profile's list, but the file it resolves to is Claude Code's.
    assert_eq!(
        detected("/opt/pkgs/@anthropic-ai/claude-code/bin/cc"),
        Some(("claude".into(), "cc (@anthropic-ai/claude-code)".into()))
    );
}

#[test]
fn package_names() {
    assert_eq!(npm_name("@a/b@1.2"), "@a/b");
    assert_eq!(npm_name("@a/b"), "@a/b");
    assert_eq!(npm_name("b@^1"), "b");
    assert_eq!(npm_name("npm:b@1"), "b");
    assert_eq!(pypi_name("Aider_Chat[x]>=1"), "aider-chat");
}

#[test]
fn package_of_reads_the_nearest_named_package_json() {
    let d = tempfile::tempdir().unwrap();
    let pkg = d.path().join("node_modules/@s/tool");
    std::fs::create_dir_all(pkg.join("dist")).unwrap();
    std::fs::write(pkg.join("package.json"), r#"{"name":"@s/tool"}"#).unwrap();
    // A nested package.json without a name is not the package.
    std::fs::write(pkg.join("dist/package.json"), r#"{"type":"module"}"#).unwrap();
    std::fs::write(pkg.join("dist/cli.js"), "").unwrap();
    std::os::unix::fs::symlink(pkg.join("dist/cli.js"), d.path().join("tool")).unwrap();
    let link = d.path().join("tool");
    assert_eq!(package_of(link.to_str().unwrap()), Some("@s/tool".into()));
    std::fs::write(d.path().join("lone.js"), "").unwrap();
    assert_eq!(package_of(d.path().join("lone.js").to_str().unwrap()), None);
    assert_eq!(package_of("/nonexistent/x.js"), None);
}
