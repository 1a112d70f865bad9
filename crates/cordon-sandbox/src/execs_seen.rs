//! What each sandbox process was started to run, as the exec supervisor read it while the
//! call was held (host side): the gateway asks it which script an interpreter runs, since
//! the process's own command line can be rewritten from inside.
//!
//! An exec let through may still fail in the kernel (a bad environment pointer, too little
//! stack), leaving the process running what it ran before: an exec is noted as *pending*, with
//! the process's auxiliary vector of the time (`/proc/PID/auxv`, written by the kernel at every
//! successful exec and not by the process), and counts only once that vector has changed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cordon_policy::ExecSeen;

/// Processes remembered at most; past it, those that have exited are forgotten.
const KEPT: usize = 4096;

/// One process's execs: the last one known to have happened, and one let through since.
#[derive(Debug, Default)]
struct Entry {
    done: Option<ExecSeen>,
    pending: Option<(ExecSeen, Vec<u8>)>,
}

impl Entry {
    /// The pending exec counts once the process's auxiliary vector is no longer the one it
    /// had when the exec was let through.
    fn settle(&mut self, pid: u32) {
        let happened = self
            .pending
            .as_ref()
            .is_some_and(|(_, before)| auxv(pid).is_some_and(|now| now != *before));
        if happened {
            self.done = self.pending.take().map(|(s, _)| s);
        }
    }
}

/// Every exec the supervisor let through, by process (host pid; shared with the gateway).
#[derive(Debug, Clone, Default)]
pub struct ExecsSeen {
    map: Arc<Mutex<HashMap<u32, Entry>>>,
    serial: Arc<AtomicU64>,
}

impl ExecsSeen {
    /// A new, empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// The last exec process `pid` (host pid, started at `start`) is known to have made.
    pub fn get(&self, pid: u32, start: u64) -> Option<ExecSeen> {
        let mut map = self.lock();
        let e = map.get_mut(&pid)?;
        e.settle(pid);
        e.done.clone().filter(|s| s.start == start)
    }

    /// Notes an exec by thread `tid` (host id) let through: the process (its thread group)
    /// and its start time are read now, while it is held in the call. `tainted`: a variable
    /// of its environment that makes a program load code from elsewhere.
    pub(crate) fn note(&self, tid: u32, call: Noted<'_>) {
        let Some(pid) = tgid(tid) else {
            return;
        };
        let (Some(start), Some(before)) = (start_time(pid), auxv(pid)) else {
            return;
        };
        let mut map = self.lock();
        if map.len() >= KEPT {
            map.retain(|p, _| start_time(*p).is_some());
        }
        let e = map.entry(pid).or_default();
        // An earlier exec that has happened since is kept before this one is noted.
        e.settle(pid);
        let seen = ExecSeen {
            start,
            path: match call.path.starts_with('/') {
                true => call.path.to_string(),
                false => format!("{}/{}", call.cwd, call.path),
            },
            file: call.file.to_string(),
            argv: call.argv.to_vec(),
            cwd: call.cwd,
            tainted: call.tainted,
            serial: self.serial.fetch_add(1, Ordering::Relaxed) + 1,
        };
        e.pending = Some((seen, before));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Entry>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An exec as the supervisor let it through (see [`ExecsSeen::note`]).
pub(crate) struct Noted<'a> {
    pub path: &'a str,
    pub file: &'a str,
    pub argv: &'a [String],
    pub cwd: String,
    pub tainted: Option<String>,
}

/// Variables that make a program load code from elsewhere than its own files: a process
/// started with one set is no program a rule names.
pub(crate) fn taints(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "NODE_OPTIONS",
        "NODE_PATH",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PYTHONEXECUTABLE",
        "BASH_ENV",
        "ENV",
        "PERL5LIB",
        "PERL5OPT",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "GCONV_PATH",
    ];
    name.starts_with("LD_") || EXACT.contains(&name)
}

/// The head of a `/proc` file in one read (every exec reads three: `read_to_string` would
/// ask procfs for a size it does not know and read in growing steps).
fn read_proc(path: &str, max: usize) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut buf = vec![0u8; max];
    let n = std::fs::File::open(path).ok()?.read(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// A thread's process (its thread group leader's id).
fn tgid(tid: u32) -> Option<u32> {
    let status = read_proc(&format!("/proc/{tid}/status"), 1024)?;
    String::from_utf8_lossy(&status)
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()
}

fn auxv(pid: u32) -> Option<Vec<u8>> {
    read_proc(&format!("/proc/{pid}/auxv"), 4096)
}

/// A process's start time in clock ticks since boot (`/proc/PID/stat` field 22), which
/// tells a pid used again from the process that had it.
pub fn start_time(pid: u32) -> Option<u64> {
    cordon_policy::program::proc_stat(pid).map(|s| s.start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noted<'a>(argv: &'a [String]) -> Noted<'a> {
        Noted {
            path: "node",
            file: "/usr/bin/node",
            argv,
            cwd: "/w".into(),
            tainted: None,
        }
    }

    #[test]
    fn an_exec_counts_only_once_it_happened() {
        let seen = ExecsSeen::new();
        let argv = ["sleep".to_string(), "30".to_string()];
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "read _; exec sleep 30"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // Let through, not yet happened (the shell still runs): not counted.
        seen.note(pid, noted(&argv));
        let start = start_time(pid).unwrap();
        assert_eq!(seen.get(pid, start), None, "pending until the exec happens");
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let got = loop {
            if let Some(s) = seen.get(pid, start) {
                break s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the exec never counted"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(got.argv, argv);
        assert_eq!(
            got.path, "/w/node",
            "a relative path, from the working directory"
        );
        assert!(got.serial > 0);
        // Another process with the pid (stands in: another start time) gets nothing.
        assert_eq!(seen.get(pid, start + 1), None);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(seen.get(u32::MAX, 0), None);
    }

    #[test]
    fn loader_and_interpreter_variables_taint() {
        for t in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "NODE_OPTIONS",
            "PYTHONPATH",
            "BASH_ENV",
        ] {
            assert!(taints(t), "{t}");
        }
        for ok in [
            "PATH",
            "HOME",
            "PYTHONUNBUFFERED",
            "NODE_EXTRA_CA_CERTS",
            "LANG",
        ] {
            assert!(!taints(ok), "{ok}");
        }
    }
}
