//! The real agent CLIs (installed pinned by scripts/setup-agents.sh under /opt/cordon-agents),
//! each run non-interactively inside `cordon run -- AGENT …` with no `--profile` and no policy
//! but the stand-in's address and CA (`[dns] hosts`, `[tls] upstream_ca`), on a home where the
//! agent never ran. A local stand-in (fixtures/agents/llmstub.py) answers for the paid API over
//! real TLS on loopback. Each test asserts: the profile was detected from the command; the
//! agent printed the stand-in's answer; the stand-in received the real key while the agent's
//! own environment held only the placeholder; the state review lists the agent's first-run
//! files as added, with nothing FLAGGED.
//!
//! Run alone with scripts/test-agents.sh (not part of `cargo test --workspace`: see
//! Cargo.toml's `[[test]] name = "agents"`).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use common::net::{PY, make_tls, policy, tun_ready, variant_addr, wait_limited};
use common::{Env, show, skip};
use serde_json::Value;

/// Where scripts/setup-agents.sh installs the agents.
const AGENTS: &str = "/opt/cordon-agents/bin";
const STUB: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/agents/llmstub.py"
);

/// Hosts the built-in policy allows that the agents phone besides their API.
const OUTSIDE: &[&str] = &[
    "github.com",
    "api.github.com",
    "codeload.github.com",
    "objects.githubusercontent.com",
    "registry.npmjs.org",
    "pypi.org",
    "files.pythonhosted.org",
];

/// The stand-in API on `addr:443` (TLS for `name`); killed on drop.
struct Stub {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Stub {
    fn start(tls: &Path, addr: &str, answer: &str, shell: Option<&str>) -> Stub {
        let mut c = Command::new(PY);
        c.arg("-u")
            .arg(STUB)
            .args(["--addr", addr, "--port", "443", "--answer", answer, "--tls"])
            .arg(tls.join("srv.pem"))
            .arg(tls.join("srv.key"));
        if let Some(s) = shell {
            c.args(["--shell", s]);
        }
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start llmstub.py");
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let seen = lines.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line.starts_with("READY ")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(());
                    continue;
                }
                seen.lock().unwrap().push(line);
            }
        });
        rx.recv_timeout(Duration::from_secs(30))
            .expect("llmstub.py never became ready");
        Stub { child, lines }
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One agent's run.
struct Case {
    /// The command (and the profile it must select).
    agent: &'static str,
    /// Its provider's API host, pointed at the stand-in.
    host: &'static str,
    /// The key variable and its real value (set in cordon's own environment).
    key_var: &'static str,
    key: &'static str,
    /// Arguments after the command; `{answer}`-free, the stand-in's answer is fixed.
    args: &'static [&'static str],
    /// More variables for the agent (model choice and the like: what a user would set).
    vars: &'static [(&'static str, &'static str)],
    /// The loopback address's last byte (per variant: +1 for the user).
    addr: u8,
    /// Files of its own state the first run must show as added (relative to the home).
    state: &'static [&'static str],
    /// A command the stand-in asks the agent to run through its shell tool (OpenAI only).
    shell: Option<&'static str>,
    /// More of the provider's names the agent needs, served by the same stand-in.
    also: &'static [&'static str],
}

/// A shim named like the agent, first on PATH: records the environment the agent gets (its
/// own /proc/self/environ, so exactly what the agent process holds) in the project, then
/// execs the real one. Named like the agent, it selects the same profile.
fn shim(env: &Env, agent: &str) -> PathBuf {
    let dir = env.base.join("shim");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(agent);
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\ntr '\\0' '\\n' < /proc/self/environ > \"$PWD/.agent-env\"\n\
             exec {AGENTS}/{agent} \"$@\"\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `cordon …` as the variant's user, with the XDG directories at their defaults under the
/// home, as a user has them: the harness's own (outside the home) would be the agents'
/// too, and the profiles protect the agents' state under the home.
fn cordon(env: &Env) -> Command {
    let mut c = env.cordon();
    c.env_remove("XDG_STATE_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CONFIG_HOME");
    c
}

fn session_start(audit: &Path) -> Value {
    let log = std::fs::read_to_string(audit).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["layer"] == "session" && e["action"] == "start")
        .unwrap_or(Value::Null)
}

/// Every network and HTTP denial in the audit log: `host (rule)`.
fn denials(audit: &Path) -> Vec<String> {
    let log = std::fs::read_to_string(audit).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            (e["action"] == "deny" || std::env::var_os("AGENTS_SHOW_ALLOWED").is_some())
                && (e["layer"] == "network" || e["layer"] == "http")
        })
        .map(|e| {
            let d = &e["detail"];
            let host = d["host"].as_str().or(d["url"].as_str()).unwrap_or("?");
            format!(
                "{host} ({} {})",
                e["action"].as_str().unwrap_or("?"),
                e["rule"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A case made ready to run: its stand-in up, the policy file, the PATH with the shim first.
struct Ready {
    stub: Stub,
    policy: String,
    path: String,
    answer: String,
}

/// Starts `case`'s stand-in and writes its policy; `None` (after a [`skip`]) when it cannot run.
fn prepare(env: &Env, case: &Case) -> Option<Ready> {
    if !Path::new(AGENTS).join(case.agent).exists() {
        skip(
            &format!("agent {}", case.agent),
            &format!(
                "the real {} CLI (run scripts/setup-agents.sh as root)",
                case.agent
            ),
        );
        return None;
    }
    if !common::need(&["openssl"], "the stand-in's TLS certificate") {
        return None;
    }
    tun_ready();
    let addr = variant_addr(env, case.addr);
    if std::net::TcpListener::bind((addr.as_str(), 443)).is_err() {
        skip("root (port 443)", "the stand-in API on port 443");
        return None;
    }
    let tls = env.base.join("tls");
    let names: Vec<&str> = std::iter::once(case.host)
        .chain(case.also.iter().copied())
        .collect();
    assert!(make_tls(&tls, &names.join(",DNS:")), "openssl failed");
    let answer = format!("CORDON-STUB-ANSWER-{}", case.agent.to_uppercase());
    let stub = Stub::start(&tls, &addr, &answer, case.shell);
    // The built-in policy allows the registries and GitHub, which agents also phone (plugin
    // syncs, update checks): those names lead to a closed loopback port, so no test traffic
    // leaves the machine. Nothing else is configured.
    let elsewhere: String = OUTSIDE
        .iter()
        .filter(|h| !case.also.contains(h) && **h != case.host)
        .map(|h| format!(", \"{h}\" = \"127.0.0.1\""))
        .chain(case.also.iter().map(|h| format!(", \"{h}\" = \"{addr}\"")))
        .collect();
    let pol = policy(
        env,
        &format!(
            "[dns]\nhosts = {{ \"{}\" = \"{addr}\"{elsewhere} }}\n[tls]\nupstream_ca = \"{}\"\n",
            case.host,
            tls.join("ca.pem").display()
        ),
    );
    let shims = shim(env, case.agent);
    env.own(&env.base);
    let path = format!("{}:{AGENTS}:/usr/local/bin:/usr/bin:/bin", shims.display());
    Some(Ready {
        stub,
        policy: pol,
        path,
        answer,
    })
}

/// The state review of `session`: it succeeds, flags nothing, and lists `files` (relative to
/// the home) as changed there while the host's home has none of them.
fn review_is_quiet(env: &Env, session: &str, files: &[&str], ctx: &str) {
    let diff = cordon(env)
        .args(["state", "diff", session])
        .output()
        .unwrap();
    let d = String::from_utf8_lossy(&diff.stdout).to_string();
    assert!(diff.status.success(), "{}", show(&diff));
    assert!(!d.contains("FLAGGED"), "a first run was flagged\n{d}");
    if std::env::var_os("AGENTS_SHOW_DIFF").is_some() {
        eprintln!("{d}");
    }
    for f in files {
        assert!(
            d.contains(&format!("~/{f}")) && !env.home.join(f).exists(),
            "{f} is not in the review (or reached the host)\n{d}\n{ctx}"
        );
    }
}

/// Runs `case` and checks everything the module doc says; returns the run's output and the
/// stand-in's log for the caller's own checks.
fn run_agent(env: &Env, case: &Case) -> Option<(Output, String)> {
    let Ready {
        stub,
        policy: pol,
        path,
        answer,
    } = prepare(env, case)?;
    let _ = std::fs::remove_file(&env.audit);
    let child = cordon(env)
        .env("PATH", &path)
        .env(case.key_var, case.key)
        .envs(case.vars.iter().copied())
        .args(["run", "--no-tty", "--audit"])
        .arg(&env.audit)
        .args(["--policy", &pol, "--", case.agent])
        .args(case.args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_limited(child, Duration::from_secs(180));
    let log = stub.log();
    let all = text(&o);
    let denied = denials(&env.audit);
    eprintln!("{}: denied {denied:?}", case.agent);
    let ctx = format!(
        "{}\n--- stand-in:\n{log}\n--- denied:\n{}",
        show(&o),
        denied.join("\n")
    );
    // A normal session is quiet on the terminal: what the agent phones besides its API is the
    // profile's `quiet` list, logged but not announced.
    let announced: Vec<String> = String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.trim_start().starts_with("cordon: denied"))
        .map(str::to_string)
        .collect();
    assert!(
        announced.is_empty(),
        "denials announced: {announced:?}\n{ctx}"
    );
    // Detected from the command alone.
    let start = session_start(&env.audit);
    assert_eq!(start["detail"]["profile"], case.agent, "{ctx}");
    assert_eq!(start["detail"]["profile_detected"], case.agent, "{ctx}");
    assert!(all.contains(&answer), "no answer from the agent\n{ctx}");
    // The real key reached the stand-in; the agent held only the placeholder.
    assert!(
        log.lines()
            .any(|l| l.starts_with("KEY ") && l.contains(case.key)),
        "the stand-in never saw the real key\n{ctx}"
    );
    let seen = std::fs::read_to_string(env.project.join(".agent-env")).unwrap_or_default();
    let held = seen
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{}=", case.key_var)))
        .unwrap_or_else(|| panic!("{} absent in the agent's environment\n{seen}", case.key_var));
    assert!(
        held.starts_with("cordon-") || !held.contains(case.key),
        "{held}"
    );
    assert!(
        !seen.contains(case.key),
        "the real key is in the sandbox\n{seen}"
    );
    // First-run state: added, reviewed, nothing flagged.
    let session = start["session"].as_str().unwrap_or_default().to_string();
    review_is_quiet(env, &session, case.state, &ctx);
    Some((o, log))
}

const CLAUDE_KEY: &str = "sk-ant-api03-REALTEST-claude-0123456789abcdefghij";
const OPENAI_KEY: &str = "sk-proj-REALTEST-openai-0123456789abcdefghijkl";
const GEMINI_KEY: &str = "AIzaREALTEST-gemini-0123456789abcdefghijk";

both!(claude_p_answers_with_the_detected_profile, |env: Env| {
    run_agent(
        &env,
        &Case {
            agent: "claude",
            host: "api.anthropic.com",
            key_var: "ANTHROPIC_API_KEY",
            key: CLAUDE_KEY,
            args: &["-p", "Say hello"],
            vars: &[],
            addr: 41,
            state: &[".claude.json"],
            shell: None,
            also: &[],
        },
    );
});

// A package's install script, run by a real `npm install` in the agent's session, holds the
// same placeholder as the agent; the profile's key goes only in requests Claude Code itself
// sends (`programs`), so the script's request to the API is refused with cordon's words and
// never reaches it, while the agent's own is answered.
both!(
    claude_gets_its_key_and_a_postinstall_script_does_not,
    |env: Env| {
        let case = Case {
            agent: "claude",
            host: "api.anthropic.com",
            key_var: "ANTHROPIC_API_KEY",
            key: CLAUDE_KEY,
            args: &[],
            vars: &[],
            addr: 47,
            state: &[],
            shell: None,
            also: &[],
        };
        if !common::need(&["npm", "node"], "the package's install") {
            return;
        }
        let Some(ready) = prepare(&env, &case) else {
            return;
        };
        // In the project: `npm pack` writes beside the package, and only the project is writable.
        let pkg = env.project.join("post");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(
            pkg.join("package.json"),
            r#"{"name":"cordon-post","version":"1.0.0","scripts":{"postinstall":"node post.js"}}"#,
        )
        .unwrap();
        std::fs::write(
            pkg.join("post.js"),
            r#"const fs = require("fs"), out = process.env.INIT_CWD + "/post.out";
fetch("https://api.anthropic.com/v1/cordon-postinstall-probe", {
  method: "POST",
  headers: { "x-api-key": process.env.ANTHROPIC_API_KEY, "content-type": "application/json" },
  body: "{}",
}).then(async (r) => fs.writeFileSync(out, r.status + " " + (await r.text())),
        (e) => fs.writeFileSync(out, "ERR " + e));
"#,
        )
        .unwrap();
        env.own(&pkg);
        let script = format!(
            "set -e; cd {pkg} && npm pack --silent >/dev/null; cd \"$OLDPWD\"; mkdir -p app; cd app; \
         echo '{{}}' > package.json; \
         npm install --offline --no-audit --no-fund {pkg}/cordon-post-1.0.0.tgz >&2; \
         echo POST $(cat post.out | tr '\\n' ' '); cd ..; claude -p 'Say hello'",
            pkg = pkg.display()
        );
        let _ = std::fs::remove_file(&env.audit);
        let child = cordon(&env)
            .env("PATH", &ready.path)
            .env(case.key_var, case.key)
            .args(["run", "--no-tty", "--profile", "claude", "--audit"])
            .arg(&env.audit)
            .args(["--policy", &ready.policy, "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = wait_limited(child, Duration::from_secs(240));
        let log = ready.stub.log();
        let ctx = format!("{}\n--- stand-in:\n{log}", show(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        let post = out
            .lines()
            .find(|l| l.starts_with("POST "))
            .unwrap_or_default();
        assert!(
            post.starts_with("POST 403")
                && post.contains("anthropic-api-key")
                && post.contains("which is not claude"),
            "the install script's request: {post}\n{ctx}"
        );
        assert!(
            !log.contains("cordon-postinstall-probe"),
            "the script's request reached the API\n{ctx}"
        );
        assert!(
            out.contains(&ready.answer),
            "no answer from the agent\n{ctx}"
        );
        assert!(
            log.lines()
                .any(|l| l.starts_with("KEY ") && l.contains(CLAUDE_KEY)),
            "the agent's request carried the real key\n{ctx}"
        );
        // The refusal names the process, found from outside: node, run by npm.
        let audit = std::fs::read_to_string(&env.audit).unwrap_or_default();
        let leak = audit
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["layer"] == "credentials" && e["action"] == "deny")
            .unwrap_or_else(|| panic!("no refusal logged\n{ctx}"));
        let reason = leak["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("node") && reason.contains("npm"), "{leak}");
    }
);

// Claude Code runs its apiKeyHelper inside the sandbox with its own environment, so a helper
// printing the key prints the placeholder; Claude then sends the helper's output as a bearer
// token beside x-api-key. The profile's credential names both headers: both are swapped.
both!(claude_api_key_helper_answers_in_both_headers, |env: Env| {
    let settings = env.home.join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(
        &settings,
        r#"{"apiKeyHelper": "printenv ANTHROPIC_API_KEY"}"#,
    )
    .unwrap();
    let Some((_, log)) = run_agent(
        &env,
        &Case {
            agent: "claude",
            host: "api.anthropic.com",
            key_var: "ANTHROPIC_API_KEY",
            key: CLAUDE_KEY,
            args: &["-p", "Say hello"],
            vars: &[],
            addr: 71,
            state: &[".claude.json"],
            shell: None,
            also: &[],
        },
    ) else {
        return;
    };
    let keys: Vec<&str> = log.lines().filter(|l| l.starts_with("KEY ")).collect();
    for want in [
        format!("KEY x-api-key {CLAUDE_KEY}"),
        format!("KEY authorization Bearer {CLAUDE_KEY}"),
    ] {
        assert!(keys.contains(&want.as_str()), "{want} not seen\n{log}");
    }
    // Every header the stand-in saw held the real key: no placeholder got through unswapped.
    assert!(keys.iter().all(|l| l.ends_with(CLAUDE_KEY)), "{keys:#?}");
});

// GitHub Copilot CLI: a fine-grained token (it refuses classic ghp_ ones) looks up the
// account's Copilot entitlement on api.github.com, takes its API endpoint from it, lists the
// models there and asks one; every call carries the token.
const COPILOT_KEY: &str =
    "github_pat_11REALTEST0copilot0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV";

both!(copilot_p_answers_with_the_detected_profile, |env: Env| {
    let Some((_, log)) = run_agent(
        &env,
        &Case {
            agent: "copilot",
            host: "api.githubcopilot.com",
            key_var: "COPILOT_GITHUB_TOKEN",
            key: COPILOT_KEY,
            args: &["-p", "Say hello"],
            vars: &[],
            addr: 73,
            state: &[".copilot"],
            shell: None,
            also: &["api.github.com"],
        },
    ) else {
        return;
    };
    for want in [
        "REQ GET api.github.com /copilot_internal/user",
        "REQ GET api.githubcopilot.com /models",
    ] {
        assert!(log.contains(want), "{want} not seen\n{log}");
    }
});

both!(codex_exec_answers_with_the_detected_profile, |env: Env| {
    run_agent(
        &env,
        &Case {
            agent: "codex",
            host: "api.openai.com",
            key_var: "CODEX_API_KEY",
            key: OPENAI_KEY,
            args: &["exec", "--skip-git-repo-check", "Say hello"],
            vars: &[],
            addr: 43,
            state: &[".codex"],
            shell: None,
            also: &[],
        },
    );
});

both!(
    codex_runs_a_shell_tool_call_in_its_own_sandbox,
    |env: Env| {
        let Some((o, log)) = run_agent(
            &env,
            &Case {
                agent: "codex",
                host: "api.openai.com",
                key_var: "CODEX_API_KEY",
                key: OPENAI_KEY,
                args: &[
                    "exec",
                    "--skip-git-repo-check",
                    "-m",
                    "gpt-5-codex",
                    "Run the check",
                ],
                vars: &[],
                addr: 51,
                state: &[".codex"],
                shell: Some(
                    "echo nested-$((6*7)); touch ~/codex-escape 2>/dev/null && echo WROTE-HOME \
                 || echo HOME-READ-ONLY; cat ~/.ssh/id_ed25519 2>/dev/null || echo SSH-HIDDEN",
                ),
                also: &[],
            },
        ) else {
            return;
        };
        let ctx = format!("{}\n--- stand-in:\n{log}", show(&o));
        let out: Vec<&str> = log.lines().filter(|l| l.starts_with("TOOLOUT ")).collect();
        assert_eq!(out.len(), 1, "the shell tool call did not come back\n{ctx}");
        // It ran, under Codex's read-only sandbox (inside cordon's), and cordon's masks held.
        assert!(out[0].contains("nested-42"), "{ctx}");
        assert!(out[0].contains("HOME-READ-ONLY"), "{ctx}");
        assert!(
            out[0].contains("SSH-HIDDEN") && !out[0].contains("SECRET-ssh"),
            "{ctx}"
        );
        assert!(!env.home.join("codex-escape").exists());
    }
);

both!(qwen_answers_with_the_detected_profile, |env: Env| {
    run_agent(
        &env,
        &Case {
            agent: "qwen",
            host: "dashscope.aliyuncs.com",
            key_var: "OPENAI_API_KEY",
            key: OPENAI_KEY,
            args: &["--auth-type", "openai", "--model", "gpt-4o", "Say hello"],
            vars: &[],
            addr: 53,
            state: &[".qwen"],
            shell: None,
            also: &[],
        },
    );
});

both!(gemini_p_answers_with_the_detected_profile, |env: Env| {
    run_agent(
        &env,
        &Case {
            agent: "gemini",
            host: "generativelanguage.googleapis.com",
            key_var: "GEMINI_API_KEY",
            key: GEMINI_KEY,
            args: &[
                "--skip-trust",
                "--model",
                "gemini-2.5-flash",
                "-p",
                "Say hello",
            ],
            vars: &[],
            addr: 45,
            state: &[".gemini"],
            shell: None,
            also: &[],
        },
    );
});

both!(
    aider_message_answers_with_the_detected_profile,
    |env: Env| {
        run_agent(
            &env,
            &Case {
                agent: "aider",
                host: "api.openai.com",
                key_var: "OPENAI_API_KEY",
                key: OPENAI_KEY,
                args: &[
                    "--model",
                    "gpt-4o",
                    "--no-git",
                    "--yes-always",
                    "--no-check-update",
                    "--no-show-model-warnings",
                    "--analytics-disable",
                    "--message",
                    "Say hello",
                ],
                vars: &[],
                addr: 47,
                state: &[".aider"],
                shell: None,
                also: &[],
            },
        );
    }
);

both!(
    opencode_run_answers_with_the_detected_profile,
    |env: Env| {
        run_agent(
            &env,
            &Case {
                agent: "opencode",
                host: "api.anthropic.com",
                key_var: "ANTHROPIC_API_KEY",
                key: CLAUDE_KEY,
                args: &["run", "--model", "anthropic/claude-sonnet-4-5", "Say hello"],
                vars: &[],
                addr: 49,
                state: &[
                    ".config/opencode",
                    ".local/share/opencode",
                    ".local/state/opencode",
                ],
                shell: None,
                also: &[],
            },
        );
    }
);

/// opencode with `XDG_CONFIG_HOME` at `cfg` (a path under the home or outside it): the
/// profile names `$XDG_CONFIG_HOME/opencode`, so its config is protected where it really is.
fn opencode_with_xdg_config(env: &Env, cfg: &Path, addr: u8, state: &'static [&'static str]) {
    std::fs::create_dir_all(cfg).unwrap();
    let cfg: &'static str = Box::leak(cfg.display().to_string().into_boxed_str());
    let vars: &'static [(&str, &str)] = Box::leak(Box::new([("XDG_CONFIG_HOME", cfg)]));
    run_agent(
        env,
        &Case {
            agent: "opencode",
            host: "api.anthropic.com",
            key_var: "ANTHROPIC_API_KEY",
            key: CLAUDE_KEY,
            args: &["run", "--model", "anthropic/claude-sonnet-4-5", "Say hello"],
            vars,
            addr,
            state,
            shell: None,
            also: &[],
        },
    );
}

both!(
    opencode_follows_xdg_config_home_inside_the_home,
    |env: Env| {
        let cfg = env.home.join(".xdg-cfg");
        opencode_with_xdg_config(
            &env,
            &cfg,
            75,
            &[".xdg-cfg/opencode", ".local/share/opencode"],
        );
        assert!(
            !env.home.join(".config/opencode").exists(),
            "opencode's config went to ~/.config on the host"
        );
    }
);

both!(
    opencode_follows_xdg_config_home_outside_the_home,
    |env: Env| {
        // Protected where it is, through the same copy-on-write protection as any path: it
        // must exist on the host (a protected path outside the home that does not is skipped,
        // and the agent's mkdir there fails read-only).
        let cfg = env.base.join("xdg-cfg");
        // Missing there, it cannot be protected: cordon says so before the agent starts.
        std::fs::create_dir_all(&cfg).unwrap();
        env.own(&env.base);
        let o = cordon(&env)
            .env("XDG_CONFIG_HOME", &cfg)
            .args(["run", "--no-tty", "--profile", "opencode", "--", "true"])
            .output()
            .unwrap();
        let at = cfg.join("opencode").display().to_string();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!(
                "{at} (protected state under $XDG_CONFIG_HOME) does not exist"
            )) && err.contains(&format!("`mkdir -p {at}`")),
            "{}",
            show(&o)
        );
        std::fs::create_dir_all(cfg.join("opencode")).unwrap();
        opencode_with_xdg_config(&env, &cfg, 77, &[".local/share/opencode"]);
        let session = session_start(&env.audit)["session"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let diff = cordon(&env)
            .args(["state", "diff", &session])
            .output()
            .unwrap();
        let d = String::from_utf8_lossy(&diff.stdout);
        assert!(d.contains(&at), "{at} is not in the review\n{d}");
        assert_eq!(
            std::fs::read_dir(cfg.join("opencode")).unwrap().count(),
            0,
            "opencode's config reached the host before review"
        );
    }
);

// Interactive sessions in tmux.
#[path = "agents/interactive.rs"]
mod interactive;

// Profile detection from the command.
#[path = "agents/detection.rs"]
mod detection;

// The agents' own logins (OAuth files with placeholders, refreshed through cordon).
#[path = "agents/logins.rs"]
mod logins;
