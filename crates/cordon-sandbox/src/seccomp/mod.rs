//! Layer 4's syscall filter: two seccomp-BPF programs, and the supervisor's side of the
//! user-notification listener.
//!
//! F1 is written directly (a few dozen instructions: seccompiler's would be ~1,800 and cost
//! ~1 ms to install at every start); F2 is compiled with seccompiler, then post-processed (see
//! [`program`]):
//! - seccompiler answers a foreign architecture (e.g. i386 syscalls through `int 0x80` on
//!   x86_64) with `SECCOMP_RET_KILL_PROCESS`; that instruction becomes `ERRNO(EPERM)`, so the
//!   filter never kills silently;
//! - seccompiler has no user-notification action, so F2 is compiled with a marker action,
//!   `SECCOMP_RET_TRACE | 0x0CD0`, and every `ret` of exactly that value becomes
//!   `SECCOMP_RET_USER_NOTIF`.
//!
//! Filters, in install order (the kernel runs both and takes the most restrictive action; of
//! equally restrictive ones, the most recently installed filter's value wins):
//! - **F1, allowlist**: every syscall of the native table is allowed unconditionally (so the
//!   kernel's per-syscall action cache makes them nearly free), except those answered ENOSYS:
//!   `clone3`, so glibc falls back to `clone`, whose flags F2 can inspect (clone3 passes them in
//!   memory, out of BPF's reach); as root, `openat2`, whose mode is in memory too (callers fall
//!   back to `openat`); and every number in [`rules::NEWER_SYSCALLS`] missing from the table:
//!   syscalls added to Linux after the table was generated. Programs probe new syscalls and fall
//!   back on ENOSYS, not on EPERM. Any other number, x32 numbers (`nr | 0x40000000`) included,
//!   fails with EPERM. (The ENOSYS answers were a second program until issue #18: one program
//!   fewer to install at every start.)
//! - **F2, notify**: the built-in denials and `[syscalls] deny`, `execve`/`execveat` when
//!   exec is supervised, and the argument-dependent denials (`unshare`/`clone` with
//!   `CLONE_NEWUSER` unless `nested_userns`, `ioctl` `TIOCSTI`/`TIOCLINUX`, `socket` outside
//!   AF_UNIX/AF_INET/AF_INET6/AF_NETLINK(route)), as root the calls that would give a file a
//!   set-id mode ([`rules::SET_ID_MODE_SETTERS`]: `chmod` family, `open`/`openat`/`creat` with
//!   `O_CREAT` or `O_TMPFILE`, `mknod`), and the xattr writes of a command that keeps
//!   `CAP_SETFCAP` ([`rules::FILE_CAPABILITY_WRITERS`]) go to the supervisor, which logs each
//!   denial (see [`rules::denial_rule`]) and answers EPERM, or decides an exec. If the listener
//!   is gone, the kernel fails them with ENOSYS: closed, not open.
//!
//! The files, after gVisor's `runsc/boot/filter/config/` (rules as data beside the installer):
//! - `rules`: what F2 catches, as data, and the rule a caught call is explained by;
//! - `program`: writing, compiling and patching the two programs;
//! - `install`: the `seccomp` syscall, sandbox side (its only `unsafe` with `listener`'s);
//! - `listener`: the supervisor's side of the notification descriptor (ioctls, `unsafe`);
//! - `kernel_tests`: the whole filter on the running kernel, in a forked child.

mod install;
mod listener;
mod program;
mod rules;

pub(crate) use install::install;
pub(crate) use listener::{Listener, Notification};
pub(crate) use program::build;
pub(crate) use rules::{denial_rule, is_exec, path_probe};

/// Why the filter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// No syscall table for this architecture.
    #[error("the syscall filter supports x86_64 and aarch64 only, not {0}")]
    UnsupportedArch(&'static str),
    /// seccompiler refused the rules (e.g. the program is too long).
    #[error("cannot compile the syscall filter: {0}")]
    Compile(#[from] seccompiler::BackendError),
    /// The allowlist (F1) cannot be written as a program.
    #[error("cannot write the syscall allowlist: {0}")]
    Allowlist(&'static str),
    /// The compiled program does not have the shape the post-processing expects.
    #[error("cannot post-process the syscall filter: {0}")]
    Patch(&'static str),
}

/// What the unit tests of the filter's files share.
#[cfg(test)]
mod testing {
    use cordon_policy::{NamedRule, syscall_table};

    pub(super) fn rule(name: &str, origin: &str) -> NamedRule {
        NamedRule {
            name: name.into(),
            origin: origin.into(),
        }
    }

    pub(super) fn nr(name: &str) -> i64 {
        syscall_table::nr(name).unwrap()
    }
}

#[cfg(test)]
mod kernel_tests;
