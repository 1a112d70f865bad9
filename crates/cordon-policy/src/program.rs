//! Who a rule is for: `programs` and `run_by` on `[[network.allow]]`, `[[http.rule]]` and
//! `[credentials.NAME]`, and the process they are matched against.
//!
//! A [`Process`] is what the host side found out about the process that opened a connection:
//! the executable the kernel says it runs, whether that file is the host's own and beyond the
//! sandbox's reach, and (for an interpreter) the script the host saw it started to run. It is
//! never what the process says of itself: its command line can be rewritten from inside. A
//! process whose executable the sandbox could have written matches no program at all.

use std::path::Path;

/// `programs` and `run_by` of one rule. Both empty: any process.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Programs {
    /// The process itself: an executable by name (`git`) or absolute path
    /// (`/usr/bin/git`), or what an interpreter runs (a script's name or path, an npm
    /// package such as `@anthropic-ai/claude-code`). Empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<String>,
    /// One of the processes that started it (its parent, or theirs…), named the same way.
    /// Empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_by: Vec<String>,
}

impl Programs {
    /// Whether the rule is for any process (no `programs`, no `run_by`).
    pub fn any(&self) -> bool {
        self.programs.is_empty() && self.run_by.is_empty()
    }

    /// Whether `owner` is one of the processes the rule is for.
    pub fn admits(&self, owner: &Owner) -> bool {
        (self.programs.is_empty() || self.programs.iter().any(|p| owner.process.is(p)))
            && (self.run_by.is_empty()
                || self
                    .run_by
                    .iter()
                    .any(|p| owner.run_by.iter().any(|a| a.is(p))))
    }

    /// The rule's processes in words: `git or gh`, `any program run by npm`.
    pub fn describe(&self) -> String {
        let progs = if self.programs.is_empty() {
            "any program".to_string()
        } else {
            self.programs.join(" or ")
        };
        match self.run_by.is_empty() {
            true => progs,
            false => format!("{progs} run by {}", self.run_by.join(" or ")),
        }
    }
}

/// Whether a rule that names processes decides for `owner` (`None`: the process behind the
/// request could not be found). A rule for any process always does. For a process that is
/// unknown, or whose file the sandbox could have made (no program), only a rule that refuses
/// applies: one that may let through (allow, ask, judge) never does — fail closed both ways,
/// so a copy of curl escapes neither a deny for curl nor gets an allow for git.
pub fn applies(programs: &Programs, lets_through: bool, owner: Option<&Owner>) -> bool {
    match owner {
        _ if programs.any() => true,
        Some(o) if o.process.untrusted.is_none() => programs.admits(o),
        _ => !lets_through,
    }
}

/// One process, as the host found it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Process {
    /// Its pid inside the sandbox.
    pub pid: i64,
    /// The file it runs, as the sandbox sees it (the kernel's, not its command line).
    pub exe: String,
    /// Why the executable is not trusted (the sandbox could have written or replaced it):
    /// such a process matches no program. `None`: it is the host's own file, on a mount the
    /// sandbox cannot write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untrusted: Option<String>,
    /// For an interpreter (`node`, `python3`…): the script or module it was started to run,
    /// as the host saw the exec (absolute path, or `-m MODULE`), when that file is as trusted
    /// as the executable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// The npm package the script belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    /// The name it was started by, when every link from it to the file is the host's own
    /// (`claude` for `~/.local/bin/claude` → `…/versions/2.1.3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invoked: Option<String>,
}

impl Process {
    /// Whether this process is `name`: a trusted executable by file name or path, or the
    /// script or package it runs.
    pub fn is(&self, name: &str) -> bool {
        if self.untrusted.is_some() || name.is_empty() {
            return false;
        }
        if name.starts_with('/') {
            let at = |p: &Option<String>| {
                p.as_deref()
                    .is_some_and(|s| Path::new(s) == Path::new(name))
            };
            return Path::new(&self.exe) == Path::new(name)
                || at(&self.script)
                || at(&self.invoked);
        }
        // An executable `claude.exe`, `python3.11` is `claude`, `python3` too; a script only
        // by its whole name (`git.py` is not git).
        let base_exe = base(&self.exe);
        let exe_is = base_exe == name
            || base_exe
                .rsplit_once('.')
                .is_some_and(|(stem, _)| stem == name);
        exe_is
            || self.script.as_deref().is_some_and(|s| base(s) == name)
            || self.package.as_deref() == Some(name)
            || self.invoked.as_deref().is_some_and(|i| base(i) == name)
    }

    /// Its name in words: the name it was started by (`npm`, `claude`), else its
    /// executable's (`node`).
    pub fn name(&self) -> &str {
        self.invoked
            .as_deref()
            .map_or_else(|| base(&self.exe), base)
    }

    /// The process in words: `curl (pid 12)`, `claude running /x/cli.js
    /// (@anthropic-ai/claude-code, pid 40)`, with why it is not trusted.
    pub fn describe(&self) -> String {
        let mut out = self.name().to_string();
        if let Some(s) = &self.script {
            out.push_str(&format!(" running {s}"));
        }
        match &self.package {
            Some(p) => out.push_str(&format!(" ({p}, pid {})", self.pid)),
            None => out.push_str(&format!(" (pid {})", self.pid)),
        }
        if let Some(why) = &self.untrusted {
            out.push_str(&format!(", not trusted as any program: {why}"));
        }
        out
    }
}

/// The process behind a connection, and those that started it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Owner {
    /// The process that opened the socket.
    pub process: Process,
    /// Its parent, the parent's parent… up to (not including) the sandbox's init.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_by: Vec<Process>,
}

/// The event detail that holds an [`Owner`] (network and HTTP events of connections a rule
/// naming programs decided).
pub const EVENT_KEY: &str = "program";

impl Owner {
    /// The owner as an event's detail ([`EVENT_KEY`]).
    pub fn to_detail(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The owner an event's detail holds, as [`Owner::to_detail`] wrote it.
    pub fn from_detail(v: &serde_json::Value) -> Option<Owner> {
        serde_json::from_value(v.clone()).ok()
    }

    /// The owner in words, with the nearest processes that started it.
    pub fn describe(&self) -> String {
        let mut out = self.process.describe();
        let chain: Vec<&str> = self.run_by.iter().take(3).map(Process::name).collect();
        if !chain.is_empty() {
            out.push_str(&format!(", run by {}", chain.join(" ← ")));
        }
        out
    }
}

impl crate::Plan {
    /// Whether any rule or credential names programs: only then does the gateway find the
    /// process behind each connection before deciding it.
    pub fn names_programs(&self) -> bool {
        !self.program_hosts().is_empty()
    }

    /// The hosts of every rule and credential that names programs: a connection to one of
    /// them is looked up before it is decided; any other is not.
    pub fn program_hosts(&self) -> Vec<crate::HostPattern> {
        let net = self.network.allow.iter().filter(|r| !r.programs.any());
        let http = self.http.rules.iter().filter(|r| !r.programs.any());
        let creds = self.credentials.iter().filter(|c| !c.programs.any());
        net.map(|r| r.host.clone())
            .chain(http.map(|r| r.host.clone()))
            .chain(creds.flat_map(|c| c.hosts.iter().cloned()))
            .collect()
    }
}

/// An exec the exec supervisor let through, as it read it from outside the process while
/// the call was held: what a process was started to run, which its command line can no
/// longer change. The gateway reads it to tell which script an interpreter runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSeen {
    /// The process's start time (`/proc/PID/stat` field 22): a pid used again is another
    /// process.
    pub start: u64,
    /// The path the exec named (a symlink, often: `~/.local/bin/claude`).
    pub path: String,
    /// The file executed, symlinks followed, as the sandbox sees it.
    pub file: String,
    /// Its arguments, the program's name first.
    pub argv: Vec<String>,
    /// Its working directory then (a relative script is found from it).
    pub cwd: String,
    /// A variable of its environment that makes a program load code from elsewhere
    /// (`LD_PRELOAD`, `NODE_OPTIONS`, `PYTHONPATH`…): the process is then no program.
    pub tainted: Option<String>,
    /// Which exec this is, counting every exec of the session: what the gateway keeps a
    /// process's identity by, so an exec of the same file again is seen afresh.
    pub serial: u64,
}

/// What the host side reads of a process's `/proc/PID/stat`: the exec supervisor notes the
/// start time with each exec ([`ExecSeen::start`]) and the gateway looks it up by the same
/// pid and start time, so both read it here, one way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The parent's pid (field 4).
    pub ppid: i32,
    /// The start time in clock ticks since boot (field 22), which tells a pid used again
    /// from the process that had it.
    pub start_time: u64,
}

/// Process `pid`'s [`ProcStat`], from one read of its `/proc/PID/stat`; `None` when it is
/// gone.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    use std::io::Read;
    // One read: a stat line is far shorter than the buffer (`read_to_string` would ask for
    // the size, which procfs does not know, and read in growing steps, on every exec and
    // connection).
    let mut buf = [0u8; 1024];
    let n = std::fs::File::open(format!("/proc/{pid}/stat"))
        .ok()?
        .read(&mut buf)
        .ok()?;
    let stat = std::str::from_utf8(&buf[..n]).ok()?;
    // The name (field 2) is in parentheses and may hold anything: count from its end.
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let ppid = rest.nth(1)?.parse().ok()?;
    let start_time = rest.nth(17)?.parse().ok()?;
    Some(ProcStat { ppid, start_time })
}

/// Checks one `programs`/`run_by` entry: a bare name (`git`, `@scope/pkg`) or an absolute
/// path. The error says what is wrong.
pub(crate) fn check_name(name: &str) -> Result<(), &'static str> {
    let n = name.trim();
    if n.is_empty() {
        return Err("an empty program name");
    }
    if n != name || n.chars().any(char::is_whitespace) {
        return Err("a program name has no spaces");
    }
    if n.contains('/') && !n.starts_with('/') && !n.starts_with('@') {
        return Err("a relative path matches nothing; name a program or give its absolute path");
    }
    if n.contains('*') || n.contains('?') {
        return Err("programs are named exactly, not by glob");
    }
    Ok(())
}

fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_reads_this_process_parent_and_start() {
        let me = proc_stat(std::process::id()).unwrap();
        assert_eq!(me.ppid as u32, std::os::unix::process::parent_id());
        assert!(me.start_time > 0);
        assert_eq!(proc_stat(std::process::id()), Some(me));
    }

    fn proc(exe: &str) -> Process {
        Process {
            pid: 7,
            exe: exe.into(),
            ..Process::default()
        }
    }

    fn owner(p: Process, run_by: &[&str]) -> Owner {
        Owner {
            process: p,
            run_by: run_by.iter().map(|e| proc(e)).collect(),
        }
    }

    fn progs(programs: &[&str], run_by: &[&str]) -> Programs {
        Programs {
            programs: programs.iter().map(|s| s.to_string()).collect(),
            run_by: run_by.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_program_is_its_trusted_file_by_name_or_path() {
        let git = owner(proc("/usr/bin/git"), &[]);
        assert!(progs(&["git"], &[]).admits(&git));
        assert!(progs(&["/usr/bin/git"], &[]).admits(&git));
        assert!(progs(&["curl", "git"], &[]).admits(&git));
        assert!(!progs(&["curl"], &[]).admits(&git));
        assert!(!progs(&["/bin/git"], &[]).admits(&git), "another path");
        // The same name, but a file the sandbox could have written: no program at all.
        let fake = owner(
            Process {
                untrusted: Some("on a writable mount".into()),
                ..proc("/home/u/project/git")
            },
            &[],
        );
        assert!(!progs(&["git"], &[]).admits(&fake));
        assert!(progs(&[], &[]).admits(&fake), "a rule for any process");
    }

    #[test]
    fn an_interpreter_is_the_script_or_package_it_runs() {
        let claude = owner(
            Process {
                script: Some("/opt/agents/bin/claude".into()),
                package: Some("@anthropic-ai/claude-code".into()),
                ..proc("/usr/bin/node")
            },
            &["/usr/bin/bash"],
        );
        for name in [
            "claude",
            "@anthropic-ai/claude-code",
            "node",
            "/usr/bin/node",
        ] {
            assert!(progs(&[name], &[]).admits(&claude), "{name}");
        }
        let cli = owner(
            Process {
                script: Some("/x/cli.js".into()),
                ..proc("/usr/bin/node")
            },
            &[],
        );
        assert!(progs(&["cli.js"], &[]).admits(&cli));
        assert!(
            !progs(&["cli"], &[]).admits(&cli),
            "a script by its whole name only"
        );
        // A native binary (Claude Code's `bin/claude.exe`) is its stem too, not its package:
        // a package may ship other binaries (ripgrep) that are not the agent.
        let native = owner(proc("/opt/n/@anthropic-ai/claude-code/bin/claude.exe"), &[]);
        assert!(progs(&["claude"], &[]).admits(&native));
        assert!(!progs(&["@anthropic-ai/claude-code"], &[]).admits(&native));
        assert!(!progs(&["claude.ex"], &[]).admits(&native));
        assert!(!progs(&["claude"], &[]).admits(&cli));
    }

    #[test]
    fn run_by_looks_at_every_ancestor() {
        let post = owner(
            proc("/usr/bin/node"),
            &["/usr/bin/sh", "/usr/bin/npm", "/bin/bash"],
        );
        assert!(progs(&[], &["npm"]).admits(&post));
        assert!(progs(&["node"], &["npm"]).admits(&post));
        assert!(!progs(&["node"], &["cargo"]).admits(&post));
        assert!(!progs(&["curl"], &["npm"]).admits(&post));
        assert_eq!(progs(&["node"], &["npm"]).describe(), "node run by npm");
        assert!(
            post.describe().contains("run by sh ← npm ← bash"),
            "{}",
            post.describe()
        );
    }

    #[test]
    fn an_unknown_owner_meets_only_rules_that_refuse() {
        let keyed = progs(&["git"], &[]);
        assert!(
            !applies(&keyed, true, None),
            "an allow for git is not for an unknown process"
        );
        assert!(applies(&keyed, false, None), "a deny for git holds for it");
        assert!(applies(&Programs::default(), true, None));
        // A copy of curl in /tmp is no program: a deny for curl still holds for it.
        let copy = owner(
            Process {
                untrusted: Some("made inside".into()),
                ..proc("/tmp/curl")
            },
            &[],
        );
        assert!(applies(&progs(&["curl"], &[]), false, Some(&copy)));
        assert!(!applies(&progs(&["curl"], &[]), true, Some(&copy)));
    }

    #[test]
    fn names_are_checked() {
        for ok in [
            "git",
            "/usr/bin/git",
            "@anthropic-ai/claude-code",
            "python3.11",
        ] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", " git", "bin/git", "git*", "my prog"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
