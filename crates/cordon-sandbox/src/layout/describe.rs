//! The layout's steps and unseen paths in words: what a setup error says was being done and
//! what to do about it, and why a denied path needed no mask.

use super::{MountOp, UnseenWhy};

/// In words, what the step was doing: the start of a setup error's sentence.
impl std::fmt::Display for MountOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.path().display();
        match self {
            MountOp::Bind { writable, .. } => {
                let how = if *writable { "writable" } else { "read-only" };
                write!(f, "showing {p} {how}")
            }
            MountOp::Tmpfs { .. } => write!(f, "making the sandbox's private {p}"),
            MountOp::Dev { .. } => write!(f, "making the sandbox's {p}"),
            MountOp::Proc { .. } => write!(f, "mounting the sandbox's {p}"),
            MountOp::Overlay { upper, .. } => write!(
                f,
                "showing {p} copy-on-write (changes kept in {})",
                upper.display()
            ),
            MountOp::StagedFile { copy, .. } => write!(
                f,
                "showing {p} copy-on-write (working copy {})",
                copy.display()
            ),
            MountOp::Pin { .. } => write!(f, "pinning {p} so that it cannot be renamed"),
            MountOp::ReadOnly { .. } => write!(f, "making {p} read-only"),
            MountOp::MaskDir { rule, .. } => write!(f, "hiding the directory {p} ({rule})"),
            MountOp::MaskFile { rule, .. } => write!(f, "hiding {p} ({rule})"),
            MountOp::Content { .. } => write!(f, "placing cordon's {p}"),
            MountOp::File { host, .. } => {
                write!(f, "placing {} at {p}", host.display())
            }
            MountOp::Socket { .. } => write!(f, "placing the socket {p}"),
            MountOp::Program { .. } => write!(f, "placing cordon's own program at {p}"),
        }
    }
}

impl MountOp {
    /// What a user can do when this step fails: the end of a setup error's sentence.
    pub fn fix(&self) -> String {
        let p = self.path().display();
        match self {
            MountOp::MaskDir { rule, .. } | MountOp::MaskFile { rule, .. } => format!(
                "the path is denied by {rule}; if that is a rule of your policy, change or \
                 remove it (`cordon check` shows its line); otherwise `cordon doctor` checks \
                 this machine, and its output belongs in a bug report"
            ),
            MountOp::Bind { .. } | MountOp::ReadOnly { .. } | MountOp::Pin { .. } => format!(
                "`cordon explain {p}` names the rule that shows it; check that the path is \
                 still there and readable by you, or take it out of the policy"
            ),
            _ => "`cordon doctor` checks what this kernel and machine allow".into(),
        }
    }
}

impl std::fmt::Display for UnseenWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnseenWhy::HomeView => {
                f.write_str("not in the home's view: nothing there to read or list")
            }
            UnseenWhy::OwnFs(at) => write!(
                f,
                "under the sandbox's private {}: the host's files there are not visible",
                at.display()
            ),
            UnseenWhy::Outside => {
                f.write_str("outside every readable and writable path: not in the view at all")
            }
        }
    }
}
