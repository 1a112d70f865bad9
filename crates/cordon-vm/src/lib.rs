//! cordon-vm: the microVM backend of layer 1 (`cordon run --backend vm`). The agent runs in a
//! guest kernel of its own, under QEMU's `microvm` machine, and inside that guest the namespace
//! sandbox runs as with the namespace backend (the matryoshka: VM outside; namespaces, Landlock
//! and seccomp inside).
//!
//! Trust boundary: the guest is untrusted like the sandbox. The host side builds the boot
//! files ([`boot`]) and the VMM's command line ([`vmm`]); QEMU itself runs inside the
//! namespace sandbox's view, so the guest's root (shared over 9p) is exactly that view and a
//! VMM escape lands in the namespace sandbox. Every crossing between guest and host is named:
//! the 9p share (the view), the Ethernet link to the gateway (`cordon_net`), and the control
//! port (`channel`: the command, its stdio or terminal, signals, events and the exit code).

pub mod boot;
pub mod channel;
mod error;
pub mod guest;
pub mod host;
mod sys;
pub mod vmm;

pub use error::VmError;
