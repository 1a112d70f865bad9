//! Resource limits through cgroups (host side), where this user may create them.
//!
//! cgroup v2: a child of the supervisor's own cgroup, used only when the memory/pids/cpu
//! controllers are already enabled for its children (a delegated subtree, or root).
//! cgroup v1 (hybrid hosts): one directory per controller, which in practice only root can
//! create. rlimits cover the rest (see `init`), except cpu, which has no rlimit equivalent,
//! and pids for host root, whom the kernel exempts from RLIMIT_NPROC.

use std::path::{Path, PathBuf};

use cordon_events::LimitVia;
use cordon_policy::LimitsPlan;

use crate::limits::{AppliedLimit, Limit};

const ROOT: &str = "/sys/fs/cgroup";
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
const CPU_PERIOD_US: u64 = 100_000;

/// The cgroup directories made for one sandbox, and which limits they carry.
#[derive(Debug, Default)]
pub(crate) struct Cgroup {
    dirs: Vec<PathBuf>,
    /// What the directories enforce.
    pub applied: Vec<AppliedLimit>,
    pub memory: bool,
    pub pids: bool,
    pub cpu: bool,
}

fn own_path(controller: Option<&str>) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = match controller {
            None => ctrls.is_empty(),
            Some(c) => ctrls.split(',').any(|x| x == c),
        };
        hit.then(|| path.trim_start_matches('/').to_string())
    })
}

fn write(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(file), value)
}

impl Cgroup {
    /// Create cgroups named `name` carrying `limits`, as far as this user may.
    pub(crate) fn create(name: &str, limits: &LimitsPlan) -> Cgroup {
        let mut cg = Cgroup::default();
        if limits.memory.is_none() && limits.pids.is_none() && limits.cpu.is_none() {
            return cg;
        }
        let v2 = crate::sys::fs_magic(Path::new(ROOT))
            .map(|m| m == CGROUP2_SUPER_MAGIC)
            .unwrap_or(false);
        if v2 {
            cg.create_v2(name, limits);
        } else {
            cg.create_v1(name, limits);
        }
        cg
    }

    fn create_v2(&mut self, name: &str, limits: &LimitsPlan) {
        let Some(own) = own_path(None) else { return };
        let parent = Path::new(ROOT).join(own);
        let enabled =
            std::fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
        let on = |c: &str| enabled.split_whitespace().any(|x| x == c);
        let dir = parent.join(name);
        if std::fs::create_dir(&dir).is_err() {
            return;
        }
        let mut used = false;
        if let Some(m) = limits.memory
            && on("memory")
            && write(&dir, "memory.max", &m.to_string()).is_ok()
        {
            let _ = write(&dir, "memory.swap.max", "0");
            self.memory = true;
            used = true;
            self.applied_v2(Limit::Memory(m));
        }
        if let Some(p) = limits.pids
            && on("pids")
            && write(&dir, "pids.max", &p.to_string()).is_ok()
        {
            self.pids = true;
            used = true;
            self.applied_v2(Limit::Pids(p));
        }
        if let Some(c) = limits.cpu
            && on("cpu")
            && write(
                &dir,
                "cpu.max",
                &format!("{} {CPU_PERIOD_US}", (c * CPU_PERIOD_US as f64) as u64),
            )
            .is_ok()
        {
            self.cpu = true;
            used = true;
            self.applied_v2(Limit::Cpu(c));
        }
        if used {
            self.dirs.push(dir);
        } else {
            let _ = std::fs::remove_dir(&dir);
        }
    }

    fn applied_v2(&mut self, limit: Limit) {
        self.applied.push(AppliedLimit {
            limit,
            via: LimitVia::Cgroup2,
        });
    }

    fn create_v1(&mut self, name: &str, limits: &LimitsPlan) {
        let mut one = |controller: &str, files: &[(&str, String)], limit: Limit| -> bool {
            let Some(own) = own_path(Some(controller)) else {
                return false;
            };
            let dir = Path::new(ROOT).join(controller).join(own).join(name);
            if std::fs::create_dir(&dir).is_err() {
                return false;
            }
            if files.iter().all(|(f, v)| write(&dir, f, v).is_ok()) {
                self.dirs.push(dir);
                self.applied.push(AppliedLimit {
                    limit,
                    via: LimitVia::Cgroup1,
                });
                true
            } else {
                let _ = std::fs::remove_dir(&dir);
                false
            }
        };
        if let Some(m) = limits.memory {
            self.memory = one(
                "memory",
                &[("memory.limit_in_bytes", m.to_string())],
                Limit::Memory(m),
            );
        }
        if let Some(p) = limits.pids {
            self.pids = one("pids", &[("pids.max", p.to_string())], Limit::Pids(p));
        }
        if let Some(c) = limits.cpu {
            let quota = ((c * CPU_PERIOD_US as f64) as u64).max(1000);
            self.cpu = one(
                "cpu",
                &[
                    ("cpu.cfs_period_us", CPU_PERIOD_US.to_string()),
                    ("cpu.cfs_quota_us", quota.to_string()),
                ],
                Limit::Cpu(c),
            );
        }
    }

    /// Move `pid` (the sandbox's init, before it starts anything) into every cgroup made.
    pub(crate) fn add(&mut self, pid: libc::pid_t) -> std::io::Result<()> {
        for d in &self.dirs {
            write(d, "cgroup.procs", &pid.to_string())?;
        }
        Ok(())
    }

    /// Whether any directory was made (so the sandbox must be gone before [`Cgroup::remove`]).
    pub(crate) fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    /// Remove the directories once the sandbox is gone (they must be empty by then).
    pub(crate) fn remove(&self) {
        for d in &self.dirs {
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}
