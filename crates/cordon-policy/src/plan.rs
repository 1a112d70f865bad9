//! The resolved plan: what every enforcement layer receives.
//!
//! A [`Plan`] holds no `~`, no variables and no relative paths; it is the policy after
//! merging and expansion, ready to apply. Tests build Plans directly.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Everything one `cordon run` enforces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The project directory, absolute and canonical; writable inside the sandbox.
    pub project: PathBuf,
    /// The invoking user's home directory (`$HOME`, else the passwd entry).
    pub home: PathBuf,
    /// The filesystem view.
    pub filesystem: FilesystemPlan,
    /// The environment.
    pub env: EnvPlan,
    /// Resource limits.
    pub limits: LimitsPlan,
}

/// How Landlock is treated when the kernel lacks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum LandlockMode {
    /// Refuse to start (exit 125) when Landlock cannot be applied at all.
    #[default]
    Required,
    /// Warn loudly and continue with the mount fence alone.
    BestEffort,
}

/// Where a filesystem rule came from, so denials can name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathRule {
    /// Absolute, lexically normalised path.
    pub path: PathBuf,
    /// Human-readable origin: `built-in`, or `FILE:LINE`.
    pub origin: String,
}

impl PathRule {
    /// A rule for `path` from `origin`.
    pub fn new(path: impl Into<PathBuf>, origin: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            origin: origin.into(),
        }
    }
}

/// The filesystem view (layer 1). All paths are absolute and lexically normalised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FilesystemPlan {
    /// Bound read-only at the same path (default: `/`).
    pub readable: Vec<PathRule>,
    /// Bound read-write at the same path (the project is always among them).
    pub writable: Vec<PathRule>,
    /// Masked: reads fail and no content is visible. Deny wins over readable and writable.
    pub deny: Vec<PathRule>,
    /// Bound read-only even inside a writable directory (host-executed files such as `.git/hooks`).
    pub read_only: Vec<PathRule>,
    /// What to do when Landlock is unavailable.
    pub landlock: LandlockMode,
}

/// The environment the sandboxed command sees (layer 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvPlan {
    /// Variable names passed through from the host when set: an exact name passes even if it
    /// looks like a secret; a glob (`*` matches any run of characters) never passes a name that
    /// [looks like a secret](crate::looks_secret). `LD_*`, `BASH_ENV`, `ENV` and `GCONV_PATH`
    /// never pass. See [`EnvPlan::apply`].
    pub pass: Vec<String>,
    /// Variables set to fixed values (after `pass`, so `set` wins).
    pub set: BTreeMap<String, String>,
}

/// Resource limits (layer 1). `None` means no limit from cordon.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitsPlan {
    /// Memory in bytes (cgroup `memory.max`, else `RLIMIT_AS`).
    pub memory: Option<u64>,
    /// Number of processes/threads (cgroup `pids.max`, else `RLIMIT_NPROC`).
    pub pids: Option<u64>,
    /// CPU bandwidth in cores, e.g. 1.5 (cgroup `cpu.max` only; no rlimit equivalent).
    pub cpu: Option<f64>,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub nofile: Option<u64>,
}
