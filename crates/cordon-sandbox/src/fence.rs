//! Landlock: the second, independent filesystem fence (sandbox side, applied to the command).
//!
//! The mount view already hides and write-protects paths; Landlock restricts the same process
//! again with the kernel's path-based access control, so a mistake or escape in one layer is
//! caught by the other. It also scopes abstract unix sockets and signals to the sandbox (ABI 6).

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use crate::layout::LandlockRules;

/// The ABI whose rights we request. Newer kernels are asked for no more than this, so a right
/// added later cannot silently deny something the rules never granted.
const TARGET: ABI = ABI::V6;

/// What Landlock did, for the log and `doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceStatus {
    /// `fully enforced`, `partially enforced` or `not enforced`.
    pub state: &'static str,
    /// The kernel's ABI version, if Landlock exists.
    pub kernel_abi: Option<i32>,
}

impl std::fmt::Display for FenceStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kernel_abi {
            Some(abi) => write!(
                f,
                "{} (kernel ABI {abi}, requested ABI {})",
                self.state, TARGET as i32
            ),
            None => write!(f, "{} (Landlock unavailable on this kernel)", self.state),
        }
    }
}

/// Restrict the calling thread (and its future children) to `rules`.
pub(crate) fn apply(rules: &LandlockRules) -> Result<FenceStatus, landlock::RulesetError> {
    let read = AccessFs::from_read(TARGET);
    let list = BitFlags::from(AccessFs::ReadDir);
    let all = AccessFs::from_all(TARGET);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)?
        .scope(Scope::from_all(TARGET))?
        .create()?;
    let sets: [(&[std::path::PathBuf], BitFlags<AccessFs>); 3] = [
        (&rules.read, read),
        (&rules.list_only, list),
        (&rules.write, all),
    ];
    for (paths, access) in sets {
        for p in paths {
            // A path that vanished since the layout was made simply gets no rule (fail closed).
            let Ok(fd) = PathFd::new(p) else { continue };
            let access = if std::fs::metadata(p).map(|m| m.is_dir()).unwrap_or(false) {
                access
            } else {
                access & AccessFs::from_file(TARGET)
            };
            ruleset = ruleset.add_rule(PathBeneath::new(fd, access))?;
        }
    }
    // /proc: read everything visible, write only files (e.g. /proc/self/oom_score_adj);
    // kernel knobs are read-only mounts anyway.
    if let Ok(fd) = PathFd::new("/proc") {
        ruleset = ruleset.add_rule(PathBeneath::new(fd, read | AccessFs::WriteFile))?;
    }
    let status = ruleset.restrict_self()?;
    let state = match status.ruleset {
        RulesetStatus::FullyEnforced => "fully enforced",
        RulesetStatus::PartiallyEnforced => "partially enforced",
        RulesetStatus::NotEnforced => "not enforced",
    };
    Ok(FenceStatus {
        state,
        kernel_abi: crate::sys::landlock_abi().ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;

    /// Landlock alone (no mounts): in a forked child, a carved hole is unreadable while its
    /// siblings stay readable and nothing outside the write set is writable.
    #[test]
    fn landlock_alone_denies_the_hole() {
        if sys::landlock_abi().is_err() {
            eprintln!("skipped: no Landlock on this kernel");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("secret")).unwrap();
        std::fs::write(base.join("secret/key"), "k").unwrap();
        std::fs::write(base.join("public"), "p").unwrap();
        std::fs::create_dir_all(base.join("out")).unwrap();
        let plan = cordon_policy::FilesystemPlan {
            readable: vec![cordon_policy::PathRule::new(&base, "test")],
            writable: vec![],
            deny: vec![cordon_policy::PathRule::new(base.join("secret"), "test")],
            read_only: vec![],
            landlock: cordon_policy::LandlockMode::Required,
        };
        let mut rules = crate::layout::prepare(&plan).landlock;
        rules.write = vec![base.join("out")];
        let pid = sys::fork().unwrap();
        if pid == 0 {
            // Exit codes: 0 all as expected; 10+ which expectation failed.
            let code = (|| {
                sys::set_no_new_privs().map_err(|_| 10)?;
                let st = apply(&rules).map_err(|_| 11)?;
                if st.state != "fully enforced" {
                    return Err(12);
                }
                if std::fs::read(base.join("secret/key")).is_ok() {
                    return Err(13);
                }
                if std::fs::read(base.join("public")).is_err() {
                    return Err(14);
                }
                if std::fs::write(base.join("new"), "x").is_ok() {
                    return Err(15);
                }
                if std::fs::write(base.join("out/new"), "x").is_err() {
                    return Err(16);
                }
                Ok(())
            })();
            sys::exit_now(code.err().unwrap_or(0));
        }
        let (_, status) = sys::waitpid(pid, false).unwrap().unwrap();
        assert_eq!(
            status,
            sys::WaitStatus::Exited(0),
            "see the exit codes in the child"
        );
    }
}
