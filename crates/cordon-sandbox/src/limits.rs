//! Resource limits as data: which limit, its value, and what enforces it.
//!
//! Both sides use these: the cgroups are made by the supervisor (host side, [`crate::cgroup`]),
//! the rlimits by the command's setup in the sandbox, which reports them to init and init to
//! the supervisor over the control channel (serde). The supervisor turns each into one
//! `limits` event; the words people read come from `Display`.

use std::fmt;

use cordon_events::{Action, Layer, LimitVia, NewEvent};
use serde::{Deserialize, Serialize};

/// One `[limits]` entry with its value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Limit {
    /// Bytes.
    Memory(u64),
    /// Processes (threads included).
    Pids(u64),
    /// CPUs' worth of time (`0.5` is half of one).
    Cpu(f64),
    /// Open descriptors per process.
    Nofile(u64),
}

impl Limit {
    /// The key in `[limits]` and in the event's `detail.limit`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Limit::Memory(_) => "memory",
            Limit::Pids(_) => "pids",
            Limit::Cpu(_) => "cpu",
            Limit::Nofile(_) => "nofile",
        }
    }

    /// The value, for the event's `detail.value`.
    fn value(self) -> serde_json::Value {
        match self {
            Limit::Memory(n) | Limit::Pids(n) | Limit::Nofile(n) => n.into(),
            Limit::Cpu(c) => c.into(),
        }
    }
}

/// `memory=268435456`, `cpu=0.5`.
impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Memory(n) | Limit::Pids(n) | Limit::Nofile(n) => {
                write!(f, "{}={n}", self.name())
            }
            Limit::Cpu(c) => write!(f, "cpu={c}"),
        }
    }
}

/// A limit and what enforces it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct AppliedLimit {
    pub limit: Limit,
    pub via: LimitVia,
}

impl AppliedLimit {
    /// The `limits` event: `apply`, or `degraded` when nothing enforces the limit.
    pub(crate) fn event(&self) -> NewEvent {
        let action = match self.via {
            LimitVia::Unenforced => Action::Degraded,
            _ => Action::Apply,
        };
        NewEvent::new(Layer::Limits, action, self.to_string())
            .detail("limit", self.limit.name())
            .detail("value", self.limit.value())
            .detail("via", self.via)
    }
}

/// The event of a limit nothing enforces, saying what it would need.
pub(crate) fn unenforced(limit: Limit, why: &str) -> NewEvent {
    let mut e = AppliedLimit {
        limit,
        via: LimitVia::Unenforced,
    }
    .event();
    e.reason = format!("{} ({why})", e.reason);
    e
}

/// `memory=268435456 via cgroup v2`, `nofile=1024 via rlimit`, `limit not enforced: cpu`.
impl fmt::Display for AppliedLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.via {
            LimitVia::Unenforced => write!(f, "limit not enforced: {}", self.limit.name()),
            via => write!(f, "{} via {via}", self.limit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_as_before_and_carry_the_types() {
        let m = AppliedLimit {
            limit: Limit::Memory(268_435_456),
            via: LimitVia::Cgroup2,
        };
        let e = m.event();
        assert_eq!(e.action, Action::Apply);
        assert_eq!(e.reason, "memory=268435456 via cgroup v2");
        assert_eq!(e.detail["limit"], "memory");
        assert_eq!(e.detail["value"], 268_435_456);
        assert_eq!(e.detail["via"], "cgroup2");
        let e = unenforced(
            Limit::Cpu(0.5),
            "needs a delegated cgroup; there is no rlimit for it",
        );
        assert_eq!(e.action, Action::Degraded);
        assert_eq!(
            e.reason,
            "limit not enforced: cpu (needs a delegated cgroup; there is no rlimit for it)"
        );
        assert_eq!(e.detail["via"], "unenforced");
        let n = AppliedLimit {
            limit: Limit::Nofile(1024),
            via: LimitVia::Rlimit,
        };
        assert_eq!(n.to_string(), "nofile=1024 via rlimit");
        let back: AppliedLimit = serde_json::from_str(&serde_json::to_string(&n).unwrap()).unwrap();
        assert_eq!(back, n);
    }
}
