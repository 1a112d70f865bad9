//! The events of a sandbox's setup, as it happens: the limits the host side applies or
//! cannot, the filesystem view, the command's start, and the seccomp filter.

use std::io::{self, Write};

use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::Plan;

use super::Command;
use super::handover::StartReport;
use crate::cgroup::Cgroup;
use crate::layout::{self, MountOp};
use crate::limits::{self, Limit};

/// The events of a started command: how Landlock is enforced (a warning on the terminal too
/// when less than fully), the rlimits, and the start itself.
pub(super) fn report_started(started: &StartReport, cmd: &Command, emit: &dyn Fn(NewEvent)) {
    let StartReport {
        pid,
        landlock,
        limits,
        overlays_ahead,
        pty,
    } = started;
    emit(landlock.event());
    if landlock.is_degraded() {
        let _ = writeln!(io::stderr(), "cordon: warning: Landlock {landlock}");
    }
    for l in limits {
        emit(l.event());
    }
    emit(
        NewEvent::new(Layer::Process, Action::Start, "command started")
            .detail("pid_in_sandbox", *pid)
            .detail(
                "command",
                cmd.argv
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect::<Vec<_>>(),
            )
            .detail(
                "terminal",
                if *pty {
                    "pty"
                } else {
                    "inherited, new session"
                },
            )
            .detail("overlays_mounted_ahead", *overlays_ahead),
    );
}

/// The filter is installed and its listener supervised: say so, with the exec rules.
pub(super) fn report_seccomp(plan: &Plan, emit: &dyn Fn(NewEvent)) {
    emit(
        NewEvent::new(
            Layer::Syscall,
            Action::Apply,
            "seccomp filter installed; denied syscalls return EPERM",
        )
        .detail(
            "exec_rules",
            plan.exec
                .rules
                .iter()
                .map(|r| format!("{:?} {} ({})", r.action, r.pattern, r.origin))
                .collect::<Vec<_>>(),
        ),
    );
}

/// The limits events of the host side: what the cgroups carry, and the limits nothing will
/// enforce (the command's rlimits are reported when it starts), with a warning for each.
pub(super) fn report_limits(plan: &Plan, cgroup: &Cgroup, uid: u32, emit: &dyn Fn(NewEvent)) {
    for l in &cgroup.applied {
        emit(l.event());
    }
    let mut missing = Vec::new();
    if let Some(c) = plan.limits.cpu
        && !cgroup.cpu
    {
        missing.push((
            Limit::Cpu(c),
            "needs a delegated cgroup; there is no rlimit for it",
        ));
    }
    if let Some(p) = plan.limits.pids
        && !cgroup.pids
        && uid == 0
    {
        missing.push((
            Limit::Pids(p),
            "the kernel exempts host root from RLIMIT_NPROC; needs a cgroup",
        ));
    }
    for (limit, why) in missing {
        emit(limits::unenforced(limit, why));
        let _ = writeln!(
            io::stderr(),
            "cordon: warning: [limits] {} ({why}) is not enforced",
            limit.name()
        );
    }
}

pub(super) fn report_layout(layout: &layout::Layout, emit: &dyn Fn(NewEvent)) {
    let mut writable = Vec::new();
    let mut read_only = Vec::new();
    let mut staged = Vec::new();
    for m in &layout.mounts {
        match m {
            MountOp::Bind {
                path,
                writable: true,
            } => writable.push(path.display().to_string()),
            MountOp::ReadOnly { path } => read_only.push(path.display().to_string()),
            MountOp::Overlay { path, .. } | MountOp::StagedFile { path, .. } => {
                staged.push(path.display().to_string())
            }
            _ => {}
        }
    }
    emit(
        NewEvent::new(
            Layer::Filesystem,
            Action::Apply,
            "read-only root, private /tmp, minimal /dev, fresh /proc",
        )
        .detail("writable", writable)
        .detail("read_only", read_only),
    );
    for (path, rule) in layout.masks() {
        emit(
            NewEvent::new(
                Layer::Filesystem,
                Action::Deny,
                "masked: reads fail, no content visible",
            )
            .rule(rule.to_string())
            .detail("path", path.display().to_string()),
        );
    }
    for u in &layout.unseen {
        emit(
            NewEvent::new(Layer::Filesystem, Action::Deny, u.why.to_string())
                .rule(u.rule.clone())
                .detail("path", u.path.display().to_string()),
        );
    }
    for s in &layout.skipped {
        emit(NewEvent::new(Layer::Filesystem, Action::Log, s.clone()));
    }
}
