//! The crate's only `unsafe`: reading the CPU's time-stamp counter.

/// The time-stamp counter of the CPU this thread runs on, or `None` on an architecture
/// without one the guest shares.
pub(crate) fn rdtsc() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86-64 CPU, takes no operands and touches no memory;
        // the intrinsic is `unsafe` only because it is a raw instruction.
        Some(unsafe { core::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}
