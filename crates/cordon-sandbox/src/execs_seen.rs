//! What each sandbox process was started to run, as the exec supervisor read it while the
//! call was held (host side): the gateway asks it which script an interpreter runs, since
//! the process's own command line can be rewritten from inside.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cordon_policy::ExecSeen;

/// Processes remembered at most; past it, those that have exited are forgotten.
const KEPT: usize = 4096;

/// Every exec the supervisor let through, by host pid (shared with the gateway).
#[derive(Debug, Clone, Default)]
pub struct ExecsSeen(Arc<Mutex<HashMap<u32, ExecSeen>>>);

impl ExecsSeen {
    /// A new, empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// The last exec host pid `pid` was let through, if that is still the same process.
    pub fn get(&self, pid: u32) -> Option<ExecSeen> {
        let seen = self.lock().get(&pid).cloned()?;
        (start_time(pid) == Some(seen.start)).then_some(seen)
    }

    /// Notes an exec of host pid `pid` let through (its start time is read now, while the
    /// process is held in the call).
    pub(crate) fn note(&self, pid: u32, path: &str, file: &str, argv: &[String], cwd: String) {
        let Some(start) = start_time(pid) else {
            return;
        };
        let mut map = self.lock();
        if map.len() >= KEPT {
            map.retain(|p, s| start_time(*p) == Some(s.start));
        }
        map.insert(
            pid,
            ExecSeen {
                start,
                path: match path.starts_with('/') {
                    true => path.to_string(),
                    false => format!("{cwd}/{path}"),
                },
                file: file.to_string(),
                argv: argv.to_vec(),
                cwd,
            },
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, ExecSeen>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A process's start time in clock ticks since boot (`/proc/PID/stat` field 22), which
/// tells a pid used again from the process that had it.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) is in parentheses and may hold anything: count from its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exec_is_kept_for_its_process_only() {
        let seen = ExecsSeen::new();
        let me = std::process::id();
        assert!(start_time(me).is_some());
        seen.note(
            me,
            "node",
            "/usr/bin/node",
            &["node".into(), "/x.js".into()],
            "/w".into(),
        );
        let got = seen.get(me).expect("kept");
        assert_eq!(got.argv, ["node", "/x.js"]);
        assert_eq!(
            got.path, "/w/node",
            "a relative path, from the working directory"
        );
        // Another process that has the pid now (stands in: a start time that differs).
        seen.lock().get_mut(&me).unwrap().start += 1;
        assert_eq!(seen.get(me), None);
        assert_eq!(seen.get(u32::MAX), None);
    }
}
