//! Landlock: the second, independent filesystem fence (sandbox side, applied to the command).
//!
//! The mount view already hides and write-protects paths; Landlock restricts the same process
//! again with the kernel's path-based access control, so a mistake or escape in one layer is
//! caught by the other. It also scopes abstract unix sockets and signals to the sandbox (ABI 6).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetStatus,
    Scope,
};

use cordon_events::{Action, Enforcement, Layer, NewEvent};
use serde::{Deserialize, Serialize};

use crate::layout::LandlockRules;
use crate::sys;

/// The ABI whose rights we request. Newer kernels are asked for no more than this, so a right
/// added later cannot silently deny something the rules never granted.
const TARGET: ABI = ABI::V6;

/// What nested sandboxes cost the fence, for `cordon check` and `cordon doctor`: said each
/// time, since a profile may turn them on without the user asking.
pub const NESTED_COST: &str = "with [syscalls] nested_userns (the claude and codex profiles \
     set it) Landlock's filesystem rules are OFF for the command: the kernel refuses mounts \
     under them, and nested sandboxes are built of mounts. Files are then fenced by the mount \
     view alone; Landlock only scopes abstract unix sockets and signals. A root-run sandbox is \
     also denied every xattr write (a file capability it set would be honoured on the host)";

/// What Landlock did, for the log and `doctor`; crosses from the command's setup to the
/// supervisor (serde) without becoming text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceStatus {
    /// How much of the ruleset the kernel enforces (rust-landlock's `RulesetStatus`).
    pub enforcement: Enforcement,
    /// The kernel's ABI version, if Landlock exists.
    pub kernel_abi: Option<i32>,
    /// Why no ruleset could be applied at all, when `[filesystem] landlock = "best-effort"`
    /// let the command start without one. Text: it comes from the other side of the boundary.
    pub error: Option<String>,
    /// The filesystem rules were left out for nested sandboxes (`[syscalls] nested_userns`):
    /// the kernel refuses mount(2), pivot_root(2) and umount(2) to any process under a Landlock
    /// filesystem ruleset, and a nested sandbox is built of mounts. Only the scoping applies.
    #[serde(default)]
    pub nested: bool,
}

impl FenceStatus {
    /// The ABI whose rights are requested (see `TARGET`).
    pub const REQUESTED_ABI: i32 = TARGET as i32;

    /// No ruleset: applying it failed with `e`.
    pub(crate) fn failed(e: impl std::fmt::Display) -> FenceStatus {
        FenceStatus {
            enforcement: Enforcement::None,
            kernel_abi: crate::sys::landlock_abi().ok(),
            error: Some(e.to_string()),
            nested: false,
        }
    }

    /// Less was enforced than the policy asked for. With nested sandboxes the policy asked
    /// for the scoping only, which is all a scopes-only ruleset can be (partial); on a kernel
    /// without it, that is less.
    pub fn is_degraded(&self) -> bool {
        if self.nested {
            self.enforcement != Enforcement::Partial
        } else {
            self.enforcement.is_degraded()
        }
    }

    /// The `landlock` event: `apply` when enforced as asked, else `degraded`.
    pub(crate) fn event(&self) -> NewEvent {
        let action = if self.is_degraded() {
            Action::Degraded
        } else {
            Action::Apply
        };
        let mut e = NewEvent::new(Layer::Landlock, action, format!("Landlock {self}"))
            .detail("enforcement", self.enforcement)
            .detail("requested_abi", Self::REQUESTED_ABI);
        if let Some(abi) = self.kernel_abi {
            e = e.detail("kernel_abi", abi);
        }
        if let Some(err) = &self.error {
            e = e.detail("error", err.clone());
        }
        if self.nested {
            e = e.detail("filesystem_rules", "off for nested sandboxes");
        }
        e
    }
}

/// `fully enforced (kernel ABI 7, requested ABI 6)`, `not enforced: <why>`.
impl std::fmt::Display for FenceStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.nested {
            // What is left is the scoping; say what is off first, and why.
            write!(
                f,
                "{}: filesystem rules off for nested sandboxes ([syscalls] nested_userns; the \
                 kernel refuses mounts under them), the mount view still fences files; ",
                self.enforcement
            )?;
            return match (&self.error, self.kernel_abi) {
                (Some(e), _) => write!(f, "no scoping: {e}"),
                (None, Some(abi)) if abi >= 6 => write!(
                    f,
                    "abstract unix sockets and signals scoped (kernel ABI {abi})"
                ),
                (None, Some(abi)) => write!(f, "no scoping before ABI 6 (kernel ABI {abi})"),
                (None, None) => write!(f, "Landlock unavailable on this kernel"),
            };
        }
        match (&self.error, self.kernel_abi) {
            (Some(e), _) => write!(f, "{}: {e}", self.enforcement),
            (None, Some(abi)) => write!(
                f,
                "{} (kernel ABI {abi}, requested ABI {})",
                self.enforcement,
                Self::REQUESTED_ABI
            ),
            (None, None) => write!(
                f,
                "{} (Landlock unavailable on this kernel)",
                self.enforcement
            ),
        }
    }
}

/// Only Landlock's scoping (abstract unix sockets, signals), no filesystem rules: what a
/// command may have that builds nested sandboxes (see [`FenceStatus::nested`]). Never "fully
/// enforced": the filesystem part of the fence is off.
pub(crate) fn apply_scopes_only() -> Result<FenceStatus, FenceError> {
    let kernel_abi = crate::sys::landlock_abi().ok();
    let enforcement = if kernel_abi.is_some_and(|abi| abi >= 6) {
        let status = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .scope(Scope::from_all(TARGET))?
            .create()?
            .restrict_self()?;
        match status.ruleset {
            RulesetStatus::NotEnforced => Enforcement::None,
            _ => Enforcement::Partial,
        }
    } else {
        Enforcement::None
    };
    Ok(FenceStatus {
        enforcement,
        kernel_abi,
        error: None,
        nested: true,
    })
}

/// Restrict the calling thread (and its future children) to `rules`.
///
/// Each rule is an `O_PATH` open, a `landlock_add_rule` and a close, in the command's process on
/// the way to its exec. Only directories take the directory rights, so each rule is added with
/// its full rights and, when the kernel refuses them because the path is no directory, again
/// with the file rights: the kernel's own check of the descriptor decides, and no stat is made
/// (a file rule therefore costs one call more than a directory's). rust-landlock makes the
/// ruleset (its rights taken down to the kernel's ABI) and restricts; its `add_rule` is not
/// used because it stats every descriptor, on top of the stat the kind check here made before:
/// two calls more per rule, ~220 rules from a home with caches (issue #18: the fence's step
/// 0.89 -> 0.72 ms). Whatever the path is when its rule is added, it gets no more than its
/// kind's share of `access`.
pub(crate) fn apply(rules: &LandlockRules) -> Result<FenceStatus, FenceError> {
    let kernel_abi = sys::landlock_abi().ok();
    // What the ruleset handles (rust-landlock's best effort): the rights of the older of the
    // kernel's ABI and ours. A rule may hold no other.
    let handled = AccessFs::from_all(ABI::from(kernel_abi.unwrap_or(0).min(TARGET as i32)));
    let read = AccessFs::from_read(TARGET) & handled;
    let list = BitFlags::from(AccessFs::ReadDir) & handled;
    let all = AccessFs::from_all(TARGET) & handled;
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET))?
        .scope(Scope::from_all(TARGET))?
        .create()?;
    // A second handle on the same ruleset for the rules' own calls. None: the kernel has no
    // Landlock, and `restrict_self` says it is not enforced.
    let handle: Option<OwnedFd> = ruleset.try_clone().map_err(FenceError::Handle)?.into();
    if let Some(handle) = &handle {
        let rules_in = Rules {
            ruleset: handle.as_fd(),
            file: AccessFs::from_file(TARGET) & handled,
        };
        // /proc: read everything visible, write only files (e.g. /proc/self/oom_score_adj);
        // kernel knobs are read-only mounts anyway.
        let proc = [PathBuf::from("/proc")];
        let write_files = BitFlags::from(AccessFs::WriteFile) & handled;
        let sets: [(&[PathBuf], BitFlags<AccessFs>); 5] = [
            (&rules.read, read),
            (&rules.read_files, read & rules_in.file),
            (&rules.list_only, list),
            (&rules.write, all),
            (&proc, read | write_files),
        ];
        for (paths, access) in sets {
            for p in paths {
                // A path that vanished since the layout was made simply gets no rule (fail
                // closed). O_PATH: nothing is read through it, and its kind is not needed.
                let Ok(target) = open_path(p) else {
                    continue;
                };
                rules_in
                    .add(&target, access)
                    .map_err(|source| FenceError::Rule {
                        path: p.clone(),
                        source,
                    })?;
            }
        }
    }
    let status = ruleset.restrict_self()?;
    let enforcement = match status.ruleset {
        RulesetStatus::FullyEnforced => Enforcement::Full,
        RulesetStatus::PartiallyEnforced => Enforcement::Partial,
        RulesetStatus::NotEnforced => Enforcement::None,
    };
    Ok(FenceStatus {
        enforcement,
        kernel_abi,
        error: None,
        nested: false,
    })
}

/// `p` opened `O_PATH`, as rust-landlock's `PathFd` opens it.
fn open_path(p: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(p)
}

/// Why [`apply`] or [`apply_scopes_only`] put no ruleset in place.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FenceError {
    #[error(transparent)]
    Ruleset(#[from] landlock::RulesetError),
    #[error("a second handle on the Landlock ruleset: {0}")]
    Handle(std::io::Error),
    #[error("the Landlock rule for {}: {source}", path.display())]
    Rule {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where [`apply`]'s rules go, and the rights a non-directory may hold.
struct Rules<'a> {
    ruleset: BorrowedFd<'a>,
    file: BitFlags<AccessFs>,
}

impl Rules<'_> {
    /// `access` beneath `target`, or only its file rights when `target` is no directory.
    fn add(&self, target: &std::fs::File, access: BitFlags<AccessFs>) -> std::io::Result<()> {
        let as_file = access & self.file;
        match sys::landlock_add_path_rule(self.ruleset, target.as_fd(), access.bits()) {
            // Refused as no directory: its file rights. List-only on such grants nothing.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && as_file != access => {
                if as_file.is_empty() {
                    return Ok(());
                }
                sys::landlock_add_path_rule(self.ruleset, target.as_fd(), as_file.bits())
            }
            done => done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;

    /// Runs `f` in a forked child (a ruleset restricts the whole process) and asserts that it
    /// returned Ok; an Err is the child's exit status, which says what failed (10 and up).
    fn in_child(f: impl FnOnce() -> Result<(), i32>) {
        let pid = sys::fork().unwrap();
        if pid == 0 {
            sys::exit_now(f().err().unwrap_or(0));
        }
        let (_, status) = sys::waitpid(pid, false).unwrap().unwrap();
        assert_eq!(
            status,
            sys::WaitStatus::Exited(0),
            "see the exit codes in the child"
        );
    }

    #[test]
    fn status_reads_as_before_and_decides_degraded_by_type() {
        let full = FenceStatus {
            enforcement: Enforcement::Full,
            kernel_abi: Some(7),
            error: None,
            nested: false,
        };
        assert_eq!(
            full.to_string(),
            "fully enforced (kernel ABI 7, requested ABI 6)"
        );
        let e = full.event();
        assert_eq!(e.action, Action::Apply);
        assert_eq!(
            e.reason,
            "Landlock fully enforced (kernel ABI 7, requested ABI 6)"
        );
        assert_eq!(e.detail["enforcement"], "full");
        assert_eq!(e.detail["kernel_abi"], 7);
        assert_eq!(e.detail["requested_abi"], 6);
        let partial = FenceStatus {
            enforcement: Enforcement::Partial,
            ..full.clone()
        };
        assert_eq!(partial.event().action, Action::Degraded);
        let none = FenceStatus {
            enforcement: Enforcement::None,
            kernel_abi: None,
            error: None,
            nested: false,
        };
        assert_eq!(
            none.to_string(),
            "not enforced (Landlock unavailable on this kernel)"
        );
        let failed = FenceStatus {
            error: Some("EINVAL".into()),
            ..none
        };
        assert_eq!(failed.to_string(), "not enforced: EINVAL");
        let e = failed.event();
        assert_eq!(e.action, Action::Degraded);
        assert_eq!(e.detail["error"], "EINVAL");
        assert!(!e.detail.contains_key("kernel_abi"));
        // Nested sandboxes: what is off comes first, and the event is degraded.
        let nested = FenceStatus {
            enforcement: Enforcement::Partial,
            kernel_abi: Some(7),
            error: None,
            nested: true,
        };
        assert_eq!(
            nested.to_string(),
            "partially enforced: filesystem rules off for nested sandboxes ([syscalls] \
             nested_userns; the kernel refuses mounts under them), the mount view still fences \
             files; abstract unix sockets and signals scoped (kernel ABI 7)"
        );
        // What the policy asked for: logged, not warned about.
        assert!(!nested.is_degraded());
        let e = nested.event();
        assert_eq!(e.action, Action::Apply);
        assert_eq!(e.detail["filesystem_rules"], "off for nested sandboxes");
        let unscoped = FenceStatus {
            enforcement: Enforcement::None,
            kernel_abi: Some(5),
            ..nested
        };
        assert!(unscoped.is_degraded());
        assert_eq!(unscoped.event().action, Action::Degraded);
        // It crosses the control channel as JSON and comes back the same.
        let json = serde_json::to_string(&failed).unwrap();
        assert_eq!(serde_json::from_str::<FenceStatus>(&json).unwrap(), failed);
    }

    /// [`in_child`] restricted to `rules` first (no_new_privs, then [`apply`], which must
    /// enforce fully), then `f`.
    fn in_fenced_child(rules: &LandlockRules, f: impl FnOnce() -> Result<(), i32>) {
        in_child(|| {
            sys::set_no_new_privs().map_err(|_| 10)?;
            let st = apply(rules).map_err(|_| 11)?;
            if st.enforcement != Enforcement::Full {
                return Err(12);
            }
            f()
        });
    }

    /// This kernel's Landlock ABI, or `None` to skip a test that needs it. In CI
    /// (CORDON_TEST_STRICT=1) a kernel without Landlock fails the suite rather than passing a
    /// test that tested nothing.
    fn landlock_or_skip() -> Option<i32> {
        let abi = sys::landlock_abi().ok();
        if abi.is_none() {
            assert!(
                std::env::var_os("CORDON_TEST_STRICT").is_none_or(|v| v != "1"),
                "CORDON_TEST_STRICT=1 and this kernel has no Landlock: the fence test cannot run"
            );
            eprintln!("skipped: no Landlock on this kernel");
        }
        abi
    }

    /// Landlock alone (no mounts): in a forked child, a carved hole is unreadable while its
    /// siblings stay readable and nothing outside the write set is writable.
    #[test]
    fn landlock_alone_denies_the_hole() {
        if landlock_or_skip().is_none() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("secret")).unwrap();
        std::fs::write(base.join("secret/key"), "k").unwrap();
        std::fs::write(base.join("public"), "p").unwrap();
        std::fs::create_dir_all(base.join("out")).unwrap();
        // A directory beside the file, and links to each (Landlock follows them: the rule is the
        // target's kind).
        std::fs::create_dir_all(base.join("docs")).unwrap();
        std::fs::write(base.join("docs/readme"), "r").unwrap();
        std::os::unix::fs::symlink(base.join("public"), base.join("to-public")).unwrap();
        std::os::unix::fs::symlink(base.join("docs"), base.join("to-docs")).unwrap();
        let plan = cordon_policy::FilesystemPlan {
            readable: vec![cordon_policy::PathRule::new(&base, "test")],
            writable: vec![],
            deny: vec![cordon_policy::PathRule::new(base.join("secret"), "test")],
            read_only: vec![],
            landlock: cordon_policy::LandlockMode::Required,
            ..Default::default()
        };
        let mut rules = crate::layout::prepare(&plan).landlock;
        rules.write = vec![base.join("out")];
        in_fenced_child(&rules, || {
            if std::fs::read(base.join("secret/key")).is_ok() {
                return Err(13);
            }
            if std::fs::read(base.join("public")).is_err() {
                return Err(14);
            }
            if std::fs::read(base.join("docs/readme")).is_err()
                || std::fs::read_dir(base.join("docs")).is_err()
            {
                return Err(17);
            }
            if std::fs::read(base.join("to-public")).is_err()
                || std::fs::read_dir(base.join("to-docs")).is_err()
            {
                return Err(18);
            }
            if std::fs::write(base.join("new"), "x").is_ok() {
                return Err(15);
            }
            if std::fs::write(base.join("out/new"), "x").is_err() {
                return Err(16);
            }
            Ok(())
        });
    }

    /// A rule of `read_files` is added with a file's rights: the file reads; a directory that
    /// stands at such a path by the time the rule is added (it was a file when the layout was
    /// made) gets no more, so what is in it reads but it does not list.
    #[test]
    fn a_file_rule_grants_a_files_rights_whatever_stands_there() {
        if landlock_or_skip().is_none() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        std::fs::write(base.join("file"), "f").unwrap();
        std::fs::create_dir_all(base.join("now-a-dir")).unwrap();
        std::fs::write(base.join("now-a-dir/inner"), "i").unwrap();
        std::fs::write(base.join("other"), "o").unwrap();
        let rules = LandlockRules {
            read_files: vec![base.join("file"), base.join("now-a-dir")],
            ..Default::default()
        };
        in_fenced_child(&rules, || {
            if std::fs::read(base.join("file")).is_err() {
                return Err(13);
            }
            if std::fs::read(base.join("now-a-dir/inner")).is_err() {
                return Err(14);
            }
            if std::fs::read_dir(base.join("now-a-dir")).is_ok() {
                return Err(15);
            }
            if std::fs::read(base.join("other")).is_ok() {
                return Err(16);
            }
            Ok(())
        });
    }

    /// A file given the directory rights gets its file rights (the kernel refuses the others),
    /// and list-only on a file adds nothing; a directory keeps what it was given.
    #[test]
    fn a_rule_gets_its_kinds_share_of_the_rights() {
        let Some(abi) = landlock_or_skip() else {
            return;
        };
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        std::fs::write(base.join("file"), "f").unwrap();
        std::fs::create_dir_all(base.join("dir")).unwrap();
        std::fs::write(base.join("dir/inner"), "i").unwrap();
        let handled = AccessFs::from_all(ABI::from(abi.min(TARGET as i32)));
        in_child(|| {
            sys::set_no_new_privs().map_err(|_| 10)?;
            let ruleset = Ruleset::default()
                .handle_access(AccessFs::from_all(TARGET))
                .map_err(|_| 11)?
                .create()
                .map_err(|_| 11)?;
            let fd: Option<OwnedFd> = ruleset.try_clone().map_err(|_| 11)?.into();
            let fd = fd.ok_or(11)?;
            let rules = Rules {
                ruleset: fd.as_fd(),
                file: AccessFs::from_file(TARGET) & handled,
            };
            let read = AccessFs::from_read(TARGET) & handled;
            let list = BitFlags::from(AccessFs::ReadDir) & handled;
            let file = open_path(&base.join("file")).map_err(|_| 12)?;
            let dir = open_path(&base.join("dir")).map_err(|_| 12)?;
            rules.add(&file, read).map_err(|_| 13)?;
            rules.add(&file, list).map_err(|_| 14)?;
            rules.add(&dir, list).map_err(|_| 15)?;
            ruleset.restrict_self().map_err(|_| 16)?;
            if std::fs::read(base.join("file")).is_err() {
                return Err(17);
            }
            // List-only on the directory: it lists, what is beneath it does not read.
            if std::fs::read_dir(base.join("dir")).is_err() {
                return Err(18);
            }
            if std::fs::read(base.join("dir/inner")).is_ok() {
                return Err(19);
            }
            Ok(())
        });
    }
}
