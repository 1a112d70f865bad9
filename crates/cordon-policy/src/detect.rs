//! Auto-detection: which profile a command selects when `--profile` is not given.
//!
//! [`detect`] is the one matcher, pure: it reads the command line as a shell would run it —
//! through `env`, the package runners (`npx`, `bunx`, `pnpm dlx`, `npm exec`, `pipx run`,
//! `uvx`, `uv tool run`) and interpreters (`node …/cli.js`, `python -m …`) — and matches what
//! runs against each profile's `[agent] commands` and `packages`. What a script or program on
//! disk belongs to is asked of the caller's `package_of` ([`package_of`] is the real one), so
//! the matching itself touches nothing.

use std::path::{Path, PathBuf};

use crate::sections::agent::AgentPlan;

/// A profile chosen from the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    /// The profile's name.
    pub profile: String,
    /// What matched, for the start line: `claude`, `npx @openai/codex`, `node (opencode-ai)`.
    pub by: String,
}

/// What a command line runs: a program by name, or a package (npm or PyPI).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Runs {
    Command(String),
    Package(String),
}

/// The file name of a path (`/usr/bin/claude` → `claude`).
fn base(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// `@scope/name@1.2.3` → `@scope/name`, `name@latest` → `name`, `npm:name@1` → `name`.
fn npm_name(spec: &str) -> String {
    let spec = spec.strip_prefix("npm:").unwrap_or(spec);
    let cut = match spec.strip_prefix('@') {
        Some(rest) => rest.find('@').map(|i| i + 1),
        None => spec.find('@'),
    };
    spec[..cut.unwrap_or(spec.len())].to_string()
}

/// `aider-chat[browser]==0.86` → `aider-chat`; PyPI names compare case- and `_`/`.`-blind.
fn pypi_name(spec: &str) -> String {
    let end = spec
        .find(|c: char| "[=<>!~@; ".contains(c))
        .unwrap_or(spec.len());
    spec[..end].to_ascii_lowercase().replace(['_', '.'], "-")
}

/// The first positional argument of `args`, skipping options; `with_value` options take the
/// next argument (or `=value`). Returns it and the values of the options named in `grab`.
fn positional<'a>(
    args: &'a [String],
    with_value: &[&str],
    grab: &[&str],
) -> (Option<&'a str>, Vec<&'a str>) {
    let mut grabbed = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--" {
            return (args.get(i + 1).map(String::as_str), grabbed);
        }
        if !a.starts_with('-') || a == "-" {
            return (Some(a), grabbed);
        }
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f, Some(v)),
            None => (a, None),
        };
        let value = if with_value.contains(&flag) || grab.contains(&flag) {
            match inline {
                Some(v) => Some(v),
                None => {
                    i += 1;
                    args.get(i).map(String::as_str)
                }
            }
        } else {
            None
        };
        if grab.contains(&flag)
            && let Some(v) = value
        {
            grabbed.push(v);
        }
        i += 1;
    }
    (None, grabbed)
}

/// What `argv` runs, most specific first, with how it was reached (for [`Detected::by`]).
fn what_runs(argv: &[String], package_of: &dyn Fn(&str) -> Option<String>) -> Vec<(Runs, String)> {
    let mut argv = argv;
    // `env [-i] [-u NAME] [NAME=VALUE]… COMMAND`
    while argv.first().is_some_and(|a| base(a) == "env") {
        let mut i = 1;
        while let Some(a) = argv.get(i) {
            if a == "-u" || a == "--unset" || a == "-C" || a == "--chdir" {
                i += 2;
            } else if a.starts_with('-') || a.contains('=') {
                i += 1;
            } else {
                break;
            }
        }
        argv = argv.get(i..).unwrap_or_default();
    }
    let Some(first) = argv.first() else {
        return Vec::new();
    };
    let prog = base(first);
    let rest = &argv[1..];
    let sub = rest.first().map(String::as_str);
    let npm_runner = match (prog, sub) {
        ("npx" | "bunx" | "pnpx", _) => Some((prog.to_string(), rest)),
        ("npm", Some("exec" | "x")) | ("pnpm" | "yarn", Some("dlx")) | ("bun", Some("x")) => {
            Some((format!("{prog} {}", sub.unwrap_or_default()), &rest[1..]))
        }
        _ => None,
    };
    if let Some((via, args)) = npm_runner {
        let (first, packages) = positional(
            args,
            &["--node-options", "--call", "-c"],
            &["-p", "--package"],
        );
        let mut out: Vec<(Runs, String)> = packages
            .iter()
            .map(|p| (Runs::Package(npm_name(p)), format!("{via} {}", npm_name(p))))
            .collect();
        if let Some(f) = first {
            let runs = if packages.is_empty() {
                Runs::Package(npm_name(f))
            } else {
                Runs::Command(base(f).to_string())
            };
            out.push((runs, format!("{via} {}", npm_name(f))));
        }
        return out;
    }
    let py_runner = match (prog, sub, rest.get(1).map(String::as_str)) {
        ("uvx", _, _) => Some(("uvx".to_string(), rest)),
        ("pipx", Some("run"), _) => Some(("pipx run".to_string(), &rest[1..])),
        ("uv", Some("tool"), Some("run")) => Some(("uv tool run".to_string(), &rest[2..])),
        _ => None,
    };
    if let Some((via, args)) = py_runner {
        let (first, from) = positional(
            args,
            &[
                "--with",
                "-w",
                "--python",
                "-p",
                "--index-url",
                "-i",
                "--pip-args",
            ],
            &["--from", "--spec"],
        );
        let mut out: Vec<(Runs, String)> = from
            .iter()
            .map(|p| {
                (
                    Runs::Package(pypi_name(p)),
                    format!("{via} {}", pypi_name(p)),
                )
            })
            .collect();
        if let Some(f) = first {
            out.push((Runs::Package(pypi_name(f)), format!("{via} {f}")));
            out.push((Runs::Command(pypi_name(f)), format!("{via} {f}")));
        }
        return out;
    }
    if matches!(prog, "node" | "nodejs" | "bun" | "deno") {
        let args = match (prog, sub) {
            ("bun" | "deno", Some("run")) => &rest[1..],
            _ => rest,
        };
        let (script, _) = positional(args, &["-r", "--require", "--import", "--loader"], &[]);
        let Some(script) = script else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(p) = package_of(script) {
            out.push((Runs::Package(p.clone()), format!("{prog} ({p})")));
        }
        let stem = base(script).split('.').next().unwrap_or_default();
        out.push((
            Runs::Command(stem.to_string()),
            format!("{prog} {}", base(script)),
        ));
        return out;
    }
    if prog.starts_with("python") {
        let (_, module) = positional(rest, &["-W", "-X", "-c"], &["-m"]);
        return module
            .first()
            .map(|m| vec![(Runs::Command((*m).to_string()), format!("{prog} -m {m}"))])
            .unwrap_or_default();
    }
    let mut out = vec![(Runs::Command(prog.to_string()), prog.to_string())];
    if let Some(p) = package_of(first) {
        out.push((Runs::Package(p.clone()), format!("{prog} ({p})")));
    }
    out
}

/// The profile `argv` selects, if any: the first of `profiles` (in their order) whose agent
/// names what the command runs. `package_of` says which package a program or script belongs
/// to.
pub fn detect(
    argv: &[String],
    profiles: &[(String, AgentPlan)],
    package_of: &dyn Fn(&str) -> Option<String>,
) -> Option<Detected> {
    for (runs, by) in what_runs(argv, package_of) {
        let hit = profiles.iter().find(|(_, a)| match &runs {
            Runs::Command(c) => a.commands.iter().any(|x| x == c),
            Runs::Package(p) => a
                .packages
                .iter()
                .any(|x| x == p || (!x.starts_with('@') && pypi_name(x) == pypi_name(p))),
        });
        if let Some((name, _)) = hit {
            return Some(Detected {
                profile: name.clone(),
                by,
            });
        }
    }
    None
}

/// The package a program (by name, searched on `$PATH`) or a script path belongs to: the
/// `name` of the nearest `package.json` above the file it resolves to, symlinks followed (an
/// npm bin link points into its package). `None` when there is none.
pub fn package_of(program: &str) -> Option<String> {
    let path = if program.contains('/') {
        PathBuf::from(program)
    } else {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join(program))
            .find(|p| p.is_file())?
    };
    let real = std::fs::canonicalize(path).ok()?;
    for dir in real.ancestors().skip(1) {
        if let Some(name) = package_json_name(&dir.join("package.json")) {
            return Some(name);
        }
        // A package never spans node_modules: above it is someone else's.
        if dir.file_name().is_some_and(|n| n == "node_modules") || dir == Path::new("/") {
            break;
        }
    }
    None
}

/// The `name` of a package.json (a nested one without a name, such as `{"type":"module"}`,
/// names nothing).
fn package_json_name(p: &Path) -> Option<String> {
    let text = std::fs::read_to_string(p).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("name")?.as_str().map(str::to_string)
}

#[cfg(test)]
#[path = "detect_tests.rs"]
mod tests;

/// The arguments `argv` gives the agent itself (what follows its program, script or package),
/// when what runs is one of `commands` or `packages`: `npx -y @openai/codex@1 login` →
/// `["login"]`. Sees through `env` and the npm runners and `node SCRIPT` as [`detect`] does.
pub fn agent_args<'a>(
    argv: &'a [String],
    commands: &[&str],
    packages: &[&str],
    package_of: &dyn Fn(&str) -> Option<String>,
) -> Option<&'a [String]> {
    let mut argv = argv;
    while argv.first().is_some_and(|a| base(a) == "env") {
        let i = (1..argv.len())
            .find(|&i| !argv[i].starts_with('-') && !argv[i].contains('='))
            .unwrap_or(argv.len());
        argv = &argv[i..];
    }
    let first = argv.first()?;
    let prog = base(first);
    let is_agent = |a: &str| {
        commands.contains(&base(a))
            || packages.contains(&npm_name(a).as_str())
            || package_of(a).is_some_and(|p| packages.contains(&p.as_str()))
    };
    let skip = match (prog, argv.get(1).map(String::as_str)) {
        ("npx" | "bunx" | "pnpx", _) => 1,
        ("npm", Some("exec" | "x")) | ("pnpm" | "yarn", Some("dlx")) | ("bun", Some("x")) => 2,
        ("node" | "nodejs" | "bun" | "deno", _) => 1,
        _ => 0,
    };
    if skip == 0 {
        return is_agent(first).then(|| &argv[1..]);
    }
    // The first non-option argument after the runner is what it runs.
    let i = (skip..argv.len()).find(|&i| !argv[i].starts_with('-'))?;
    is_agent(&argv[i]).then(|| &argv[i + 1..])
}
