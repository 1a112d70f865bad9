//! Which directory is the project: `cordon run` refuses to take the home (or a directory
//! above it) from the current directory, since the project is writable as a whole; reading a
//! policy (`check`, `explain`) makes nothing writable and takes any directory.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};

use crate::commands::home;

/// The project `cordon run` (and `init`) works in: `--project DIR`, else the current
/// directory unless that is or contains the home.
pub(crate) fn resolve_project(dir: Option<&Path>) -> Result<PathBuf> {
    let canon = project_dir(dir)?;
    // The project is writable as a whole: taken from the current directory, `/` or the home
    // would hand the sandbox the user's rc files and every project at once by accident.
    match home_within(&canon) {
        Some(how) if dir.is_none() => Err(anyhow!(
            "the project would be {}, which {how} your home directory: everything in it would be \
             writable. Run cordon from the project's directory, or pass --project {} if you mean \
             it (your shell rc files and agents' settings then stay under review)",
            canon.display(),
            canon.display()
        )),
        _ => Ok(canon),
    }
}

/// The directory whose policy `check` and `explain` read, and whether it is a project.
pub(crate) struct PolicyProject {
    pub dir: PathBuf,
    /// Taken from the current directory, it is (or contains) the home, which `cordon run`
    /// refuses as a project: the policy is read without one.
    pub none: bool,
}

/// As [`resolve_project`], but the home taken from the current directory is not an error:
/// reading a policy makes nothing writable, and the home is where a user checks their own
/// `~/.config/cordon/cordon.toml`. There is then no project (a note says so), rather than
/// the home as one — which would make the user's own files an untrusted project's.
pub(crate) fn resolve_policy_project(dir: Option<&Path>) -> Result<PolicyProject> {
    let canon = project_dir(dir)?;
    let none = match (dir, home_within(&canon)) {
        (None, Some(how)) => {
            eprintln!(
                "cordon: note: {} {how} your home directory, which is not a project: the policy \
                 is read without one (no project cordon.toml, no project directory writable); \
                 pass --project DIR for a project's",
                canon.display()
            );
            true
        }
        _ => false,
    };
    Ok(PolicyProject { dir: canon, none })
}

/// `cordon check`'s output read without a project: its `# project:` line says there is
/// none, rather than naming the directory `${PROJECT}` merely expands to.
pub(crate) fn without_project(text: &str) -> String {
    text.lines()
        .map(|l| match l.starts_with("# project: ") {
            true => "# project: none (read from the home; --project DIR for a project's)",
            false => l,
        })
        .fold(String::new(), |mut out, l| {
            out.push_str(l);
            out.push('\n');
            out
        })
}

/// `dir` (else the current directory), canonical, which must be a directory.
fn project_dir(dir: Option<&Path>) -> Result<PathBuf> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let canon = dir.canonicalize().with_context(|| {
        format!(
            "project directory {}: cannot resolve it (does it exist?)",
            dir.display()
        )
    })?;
    if !canon.is_dir() {
        return Err(anyhow!(
            "project {} is not a directory; pass --project DIR",
            canon.display()
        ));
    }
    Ok(canon)
}

/// `"is"` or `"contains"` when `dir` is or contains the home directory.
fn home_within(dir: &Path) -> Option<&'static str> {
    let home = home().canonicalize().unwrap_or_else(|_| home());
    if home == dir {
        Some("is")
    } else if home.starts_with(dir) {
        Some("contains")
    } else {
        None
    }
}
