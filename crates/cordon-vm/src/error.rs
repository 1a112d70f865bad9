//! The one error type of the microVM backend. Every message names the file or thing at fault
//! and what the user can do about it, because these errors reach the user of `cordon run
//! --backend vm` directly (usually as "the VM cannot start").

use std::io;
use std::path::PathBuf;

/// The fix shown whenever no usable guest kernel is found.
const KERNEL_FIX: &str =
    "install a kernel: apt-get install linux-image-amd64, or set [sandbox.vm] kernel = ...";

/// Why the microVM's boot files (kernel, modules, initramfs) cannot be prepared.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// No `vmlinuz-*` in the boot directory has its modules installed.
    #[error(
        "no guest kernel with modules found in {searched} (looked for vmlinuz-RELEASE with {modules}/RELEASE/modules.dep); {KERNEL_FIX}"
    )]
    NoKernel {
        /// The directory searched for kernel images (normally `/boot`).
        searched: PathBuf,
        /// The directory searched for module trees (normally `/lib/modules`).
        modules: PathBuf,
    },
    /// The configured kernel image does not exist or is not a regular file.
    #[error("guest kernel {path} is missing or not a file; {KERNEL_FIX}")]
    KernelMissing {
        /// The configured kernel path.
        path: PathBuf,
    },
    /// The kernel's release cannot be told from its file name or its bzImage header.
    #[error(
        "cannot tell the release of guest kernel {path} ({reason}): name it vmlinuz-RELEASE or use a bzImage kernel; {KERNEL_FIX}"
    )]
    KernelRelease {
        /// The kernel image.
        path: PathBuf,
        /// What was wrong with the header.
        reason: String,
    },
    /// A module the guest needs is neither a loadable module nor built into the kernel.
    #[error(
        "kernel module {name} is neither in {dep} nor built in ({builtin}): use a distribution kernel (apt-get install linux-image-amd64) or set [sandbox.vm] kernel = ... to one built with it"
    )]
    Module {
        /// The module's name as wanted.
        name: String,
        /// The `modules.dep` read.
        dep: PathBuf,
        /// The `modules.builtin` read.
        builtin: PathBuf,
    },
    /// The executable to run as the guest's init cannot be used (not ELF64 little-endian).
    #[error("{path} cannot be the guest's init: {reason}; run cordon from an x86-64 Linux build")]
    Executable {
        /// The executable.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// No QEMU to run the VM.
    #[error(
        "no qemu-system-x86_64 for the VM backend: apt-get install qemu-system-x86, or run with --backend namespace"
    )]
    NoQemu,
    /// KVM was asked for and cannot be had.
    #[error(
        "KVM is not usable: {0}; pass --accel tcg to emulate the guest (slow), or run with --backend namespace"
    )]
    NoKvm(String),
    /// A system call of the host side failed (the VM's sockets, the spec).
    #[error("cannot {what}: {source}")]
    Host {
        /// What it was doing.
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The namespace sandbox QEMU runs in could not run it.
    #[error(transparent)]
    Sandbox(#[from] cordon_sandbox::SandboxError),
    /// The guest's init said it could not run the command.
    #[error("the guest could not run the command: {0}")]
    Guest(String),
    /// The VM ended without the guest's init reporting the command's end.
    #[error(
        "the VM ended (QEMU's status {0}) before the guest reported the command's end; run with CORDON_VM_CONSOLE=1 to see the guest's console"
    )]
    GuestSilent(i32),
    /// Reading or writing a file failed.
    #[error("cannot {what} {path}: {source}{}", io_fix(source))]
    Io {
        /// The operation, as a verb phrase ("read", "create the cache directory").
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

impl VmError {
    /// An [`VmError::Io`] for `path`; a helper for `map_err`.
    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> VmError {
        let path = path.into();
        move |source| VmError::Io { what, path, source }
    }
}

/// The fix for an I/O error, by its kind: the common ones have an obvious remedy.
fn io_fix(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::PermissionDenied => {
            " (check the file's permissions, or run as a user who can read it)"
        }
        io::ErrorKind::NotFound => " (the file is missing: reinstall the package that provides it)",
        io::ErrorKind::StorageFull => " (the disk is full: free some space)",
        _ => "",
    }
}
