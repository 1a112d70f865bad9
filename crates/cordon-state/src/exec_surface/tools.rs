//! Files other host tools run because a project file names them: the same class as a git
//! config's `core.hooksPath` (issue #44). A `.yarnrc.yml` `yarnPath` (yarn runs that script
//! for every `yarn`), `.cargo/config.toml` runners and wrappers (cargo runs them for every
//! build or `cargo run`), a `.pre-commit-config.yaml` local hook's `entry` (pre-commit runs
//! it at every commit), files an `.envrc` sources (direnv runs them on `cd`). Their targets
//! inside the writable roots are staged like the naming files themselves, and a change to one
//! is flagged with what names it.
//!
//! Cargo config is read as TOML by a TOML parser; the YAML files and `.envrc` by their lines,
//! which finds the block-style keys these tools document (`yarnPath: x`, `entry: x`) and the
//! direnv commands at a line's start. What such reading misses (YAML flow style, a `source`
//! built from variables) is still inside a file that is itself staged and flagged as a whole.

use std::path::{Path, PathBuf};

use super::normalize;

/// Each file a tool config at the top of `dir` names, with what names it.
pub(crate) fn named_in(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let read = |rel: &str| super::read_regular(&dir.join(rel));
    // A program word that names a file: relative ones against `base`.
    let program = |word: &str, base: &Path| -> Option<PathBuf> {
        let w = word.trim_matches(|c| c == '"' || c == '\'');
        (w.contains('/')).then(|| normalize(&base.join(w)))
    };
    if let Some(t) = read(".yarnrc.yml") {
        for v in yaml_values(&t, "yarnPath") {
            if let Some(p) = program(&v, dir).or_else(|| Some(normalize(&dir.join(&v)))) {
                out.push((p, ".yarnrc.yml `yarnPath`".into()));
            }
        }
    }
    if let Some(t) = read(".pre-commit-config.yaml") {
        for v in yaml_values(&t, "entry") {
            for w in v.split_whitespace() {
                if let Some(p) = program(w, dir) {
                    out.push((p, ".pre-commit-config.yaml hook `entry`".into()));
                }
            }
        }
    }
    for cfg in [".cargo/config.toml", ".cargo/config"] {
        let Some(table) = read(cfg).and_then(|t| toml::from_str::<toml::Table>(&t).ok()) else {
            continue;
        };
        // Cargo resolves a program path with a slash against the directory holding `.cargo`.
        let mut words: Vec<(String, String)> = Vec::new();
        let mut push = |v: &toml::Value, what: String| match v {
            toml::Value::String(s) => {
                words.extend(s.split_whitespace().map(|w| (w.to_owned(), what.clone())))
            }
            toml::Value::Array(a) => words.extend(
                a.iter()
                    .filter_map(|x| x.as_str())
                    .map(|w| (w.to_owned(), what.clone())),
            ),
            _ => {}
        };
        if let Some(build) = table.get("build").and_then(|b| b.as_table()) {
            for k in [
                "rustc",
                "rustc-wrapper",
                "rustc-workspace-wrapper",
                "rustdoc",
            ] {
                if let Some(v) = build.get(k) {
                    push(v, format!("{cfg} `build.{k}`"));
                }
            }
        }
        if let Some(targets) = table.get("target").and_then(|t| t.as_table()) {
            for (name, t) in targets {
                for k in ["runner", "linker"] {
                    if let Some(v) = t.get(k) {
                        push(v, format!("{cfg} `target.{name}.{k}`"));
                    }
                }
            }
        }
        if let Some(aliases) = table.get("alias").and_then(|a| a.as_table()) {
            for (name, v) in aliases {
                push(v, format!("{cfg} `alias.{name}`"));
            }
        }
        for (w, what) in words {
            if let Some(p) = program(&w, dir) {
                out.push((p, what));
            }
        }
    }
    if let Some(t) = read(".envrc") {
        for line in t.lines() {
            let mut words = line.split_whitespace();
            let (Some(cmd), rest) = (words.next(), words.collect::<Vec<_>>()) else {
                continue;
            };
            let named: Vec<&str> = match cmd {
                "source_env"
                | "source_env_if_exists"
                | "source"
                | "."
                | "dotenv"
                | "dotenv_if_exists"
                | "PATH_add"
                | "path_add" => rest
                    .iter()
                    .copied()
                    .take_while(|w| !w.starts_with('#'))
                    .collect(),
                _ => continue,
            };
            let named = if named.is_empty() && cmd.starts_with("dotenv") {
                vec![".env"]
            } else {
                named
            };
            for w in named {
                let w = w.trim_matches(|c| c == '"' || c == '\'');
                if w.contains("://") || w.starts_with('$') {
                    continue;
                }
                let mut p = normalize(&dir.join(w));
                // `source_env dir` reads dir/.envrc.
                if cmd.starts_with("source_env") && p.is_dir() {
                    p = p.join(".envrc");
                }
                out.push((p, format!(".envrc `{cmd}`")));
            }
        }
    }
    out
}

/// The values of `key` wherever it starts a line's content (`key: value`, `- key: value`) in
/// YAML text, unquoted.
fn yaml_values(text: &str, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let l = line.trim_start().trim_start_matches("- ").trim_start();
        let Some(rest) = l.strip_prefix(key) else {
            continue;
        };
        let Some(v) = rest.trim_start().strip_prefix(':') else {
            continue;
        };
        let v = v.split(" #").next().unwrap_or("").trim();
        let v = v.trim_matches(|c| c == '"' || c == '\'');
        if !v.is_empty() {
            out.push(v.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_tool_configs_name_is_found() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(d.join(".cargo")).unwrap();
        std::fs::write(
            d.join(".yarnrc.yml"),
            "yarnPath: .yarn/releases/yarn-4.js\n",
        )
        .unwrap();
        std::fs::write(
            d.join(".pre-commit-config.yaml"),
            "repos:\n  - repo: local\n    hooks:\n      - id: x\n        entry: python3 tools/check.py\n",
        )
        .unwrap();
        std::fs::write(
            d.join(".cargo/config.toml"),
            "[build]\nrustc-wrapper = \"./bin/wrap\"\n[target.x86_64-unknown-linux-gnu]\nrunner = [\"scripts/run.sh\", \"-v\"]\n[alias]\nxtask = \"run --manifest-path ./xtask/Cargo.toml --\"\n",
        )
        .unwrap();
        std::fs::write(
            d.join(".envrc"),
            "source_env ../shared\ndotenv\nsource ./env.sh\n",
        )
        .unwrap();
        let named = named_in(&d);
        let has = |rel: &str| named.iter().any(|(p, _)| *p == normalize(&d.join(rel)));
        for rel in [
            ".yarn/releases/yarn-4.js",
            "tools/check.py",
            "bin/wrap",
            "scripts/run.sh",
            "xtask/Cargo.toml",
            ".env",
            "env.sh",
            "../shared",
        ] {
            assert!(has(rel), "{rel}: {named:?}");
        }
    }
}
