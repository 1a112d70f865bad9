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
