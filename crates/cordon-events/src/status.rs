//! How completely a layer is enforced: typed values that travel from the kernel call to the
//! event's `detail`, so that a reader (or the supervisor deciding `degraded`) compares enums,
//! never human text. The words people read come from `Display`, at display time only.
//!
//! Modelled on rust-landlock's `RulesetStatus` (fully / partially / not enforced).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How much of what was asked the kernel enforces. In `detail` as `"full"`, `"partial"` or
/// `"none"`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    /// Everything asked for is enforced.
    Full,
    /// Some of it (an older kernel lacks part of the feature).
    Partial,
    /// Nothing of it.
    None,
}

impl Enforcement {
    /// The name used in the log (`"partial"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Full => "full",
            Enforcement::Partial => "partial",
            Enforcement::None => "none",
        }
    }

    /// Whether this is less than was asked for (the layer's event is then `degraded`).
    pub fn is_degraded(self) -> bool {
        self != Enforcement::Full
    }
}

/// `fully enforced`, `partially enforced`, `not enforced`.
impl fmt::Display for Enforcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Enforcement::Full => "fully enforced",
            Enforcement::Partial => "partially enforced",
            Enforcement::None => "not enforced",
        })
    }
}

impl From<Enforcement> for Value {
    fn from(e: Enforcement) -> Value {
        Value::String(e.as_str().to_owned())
    }
}

/// What enforces a resource limit. In `detail` as `"cgroup2"`, `"cgroup1"`, `"rlimit"` or
/// `"unenforced"`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum LimitVia {
    /// A cgroup v2 controller (a delegated subtree, or root).
    Cgroup2,
    /// A cgroup v1 controller (hybrid hosts; in practice root only).
    Cgroup1,
    /// A per-process rlimit, inherited by everything the command starts.
    Rlimit,
    /// Nothing: the limit is asked for but not in force.
    Unenforced,
}

impl LimitVia {
    /// The name used in the log (`"cgroup2"`).
    pub fn as_str(self) -> &'static str {
        match self {
            LimitVia::Cgroup2 => "cgroup2",
            LimitVia::Cgroup1 => "cgroup1",
            LimitVia::Rlimit => "rlimit",
            LimitVia::Unenforced => "unenforced",
        }
    }
}

/// `cgroup v2`, `cgroup v1`, `rlimit`, `nothing`.
impl fmt::Display for LimitVia {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LimitVia::Cgroup2 => "cgroup v2",
            LimitVia::Cgroup1 => "cgroup v1",
            LimitVia::Rlimit => "rlimit",
            LimitVia::Unenforced => "nothing",
        })
    }
}

impl From<LimitVia> for Value {
    fn from(v: LimitVia) -> Value {
        Value::String(v.as_str().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_names_are_serdes_names() {
        for e in [Enforcement::Full, Enforcement::Partial, Enforcement::None] {
            assert_eq!(serde_json::to_value(e).unwrap(), Value::from(e));
            let back: Enforcement = serde_json::from_value(Value::from(e)).unwrap();
            assert_eq!(back, e);
        }
        for v in [
            LimitVia::Cgroup2,
            LimitVia::Cgroup1,
            LimitVia::Rlimit,
            LimitVia::Unenforced,
        ] {
            assert_eq!(serde_json::to_value(v).unwrap(), Value::from(v));
            let back: LimitVia = serde_json::from_value(Value::from(v)).unwrap();
            assert_eq!(back, v);
        }
    }

    #[test]
    fn people_read_the_old_words() {
        assert_eq!(Enforcement::Full.to_string(), "fully enforced");
        assert_eq!(Enforcement::Partial.to_string(), "partially enforced");
        assert_eq!(Enforcement::None.to_string(), "not enforced");
        assert!(!Enforcement::Full.is_degraded());
        assert!(Enforcement::Partial.is_degraded() && Enforcement::None.is_degraded());
        assert_eq!(LimitVia::Cgroup2.to_string(), "cgroup v2");
        assert_eq!(LimitVia::Rlimit.to_string(), "rlimit");
    }
}
