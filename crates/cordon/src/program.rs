//! `cordon explain --program NAME`: the process a question is asked for, as the gateway
//! would find it if NAME made the connection (its file on this PATH, or the interpreter a
//! script's `#!` line names, with the script and its npm package); and what explain says of
//! the credentials that are for some programs only.

use std::path::{Path, PathBuf};

use cordon_policy::{Owner, Process};

/// `name` (a program on `PATH`, a path, or an npm package) as the process that asks.
pub(crate) fn asking(name: &str) -> Owner {
    let process = match which(name).filter(|p| p.is_file()) {
        Some(file) => running(&file),
        // Not a file: an npm package or a script's name, which no executable here is.
        None => Process {
            exe: "?".into(),
            script: Some(name.to_string()),
            package: name.contains('@').then(|| name.to_string()),
            ..Process::default()
        },
    };
    Owner {
        process,
        run_by: Vec::new(),
    }
}

/// The process that runs `file`: itself, or the interpreter its `#!` line names.
fn running(file: &Path) -> Process {
    let real = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let interp = std::fs::read(&real).ok().and_then(|b| {
        let head = String::from_utf8_lossy(&b[..b.len().min(256)]).into_owned();
        let line = head.strip_prefix("#!")?.lines().next()?.trim().to_string();
        let mut words = line.split_whitespace();
        let first = words.next()?.to_string();
        // `#!/usr/bin/env node`: env runs the next word from PATH.
        match Path::new(&first).file_name().is_some_and(|n| n == "env") {
            true => which(words.find(|w| !w.starts_with('-'))?),
            false => Some(PathBuf::from(first)),
        }
    });
    match interp {
        Some(i) => Process {
            exe: display(&std::fs::canonicalize(&i).unwrap_or(i)),
            script: Some(display(file)),
            package: cordon_policy::detect::package_of(&display(&real)),
            ..Process::default()
        },
        None => Process {
            exe: display(&real),
            ..Process::default()
        },
    }
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

/// What `cordon explain` notes of the credentials whose real value goes to `host`.
pub(crate) fn credential_notes(plan: &cordon_policy::Plan, host: &str) -> Vec<String> {
    let to_host = |c: &&cordon_policy::CredentialPlan| c.hosts.iter().any(|h| h.matches(host));
    let note = |c: &cordon_policy::CredentialPlan| {
        let only = match c.programs.any() {
            true => String::new(),
            false => format!(", from {} only", c.programs.describe()),
        };
        format!(
            "credential `{}`'s real value goes to this host in place of its placeholder{only}",
            c.name
        )
    };
    plan.credentials.iter().filter(to_host).map(note).collect()
}

/// Where `program` is on `PATH` (or itself, when it names a path).
pub(crate) fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_its_file_and_a_script_its_interpreter() {
        let sh = asking("sh");
        assert!(
            sh.process.exe.ends_with("sh") || sh.process.exe.ends_with("dash"),
            "{sh:?}"
        );
        assert!(sh.process.script.is_none());
        let dir = std::env::temp_dir().join(format!("cordon-prog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tool = dir.join("tool");
        std::fs::write(&tool, "#!/bin/sh\necho hi\n").unwrap();
        let t = asking(&tool.display().to_string());
        assert_eq!(t.process.script.as_deref(), Some(tool.to_str().unwrap()));
        assert!(t.process.is("tool"), "{t:?}");
        let pkg = asking("@anthropic-ai/claude-code");
        assert!(pkg.process.is("@anthropic-ai/claude-code"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
