//! Resource limits and allocator tuning: the command's rlimits, and the supervisor's own
//! descriptor limit and malloc threshold.

use std::io;

use super::cvt;

/// Raise this process's soft descriptor limit to its hard limit: the gateway holds two or more
/// descriptors per sandbox flow, and the usual soft limit (1024) is below what
/// the gateway's flow cap needs.
pub fn raise_nofile_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 && lim.rlim_cur < lim.rlim_max
    {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads the struct we own; raising soft up to hard is always allowed.
        unsafe {
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Serve allocations of `from` bytes and more straight from the kernel (fresh, already-zero
/// pages) instead of letting glibc's threshold drift up and recycle them from the heap, where
/// `calloc` must clear them: the gateway allocates several zeroed windows per connection,
/// and clearing them dominated connection setup (~1 ms of memset per flow).
///
/// Only those: everything smaller stays on the heap and is reused. At 256 KiB, hyper's read
/// buffer for a large response (~412 KiB, replaced each time a body chunk still holds the
/// last one) was mapped, faulted in page by page and unmapped 13 times per 10 MiB, with a
/// TLB shootdown each time (issue #18). The trim threshold follows at twice `from`, as glibc's
/// own moving threshold sets it: fixing one fixes the other at 128 KiB, and a freed buffer at
/// the top of an arena would go back to the kernel and be faulted in again.
pub fn prefer_fresh_pages_for_large_allocations(from: usize) {
    let from = libc::c_int::try_from(from).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt only changes the allocator's tuning; any value is valid for these keys.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, from);
        libc::mallopt(libc::M_TRIM_THRESHOLD, from.saturating_mul(2));
    }
}

pub(crate) fn setrlimit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: lim is a valid rlimit.
    cvt(unsafe { libc::setrlimit(resource, &lim) }).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which allocations come mapped fresh is process-wide and counted process-wide
    /// (`mallinfo2`), so the check runs alone, in a child copy of this test binary.
    #[test]
    fn only_the_flow_window_size_and_up_comes_from_fresh_pages() {
        const NAME: &str =
            "sys::resources::tests::only_the_flow_window_size_and_up_comes_from_fresh_pages";
        if std::env::var_os("CORDON_TEST_MALLOPT_CHILD").is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, "--test-threads=1", "--nocapture"])
                .env("CORDON_TEST_MALLOPT_CHILD", "1")
                .output()
                .expect("run the test binary again");
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "the child failed:\n{said}");
            assert!(said.contains("1 passed"), "the child ran no test:\n{said}");
            return;
        }
        const WINDOW: usize = 1 << 20;
        prefer_fresh_pages_for_large_allocations(WINDOW);
        // SAFETY: mallinfo2 only reads the allocator's counters.
        let stats = || unsafe { libc::mallinfo2() };
        let mapped = stats().hblks;
        // hyper's read buffer for a large response, which was mapped, faulted in and unmapped
        // 13 times per 10 MiB at the old 256 KiB threshold.
        let buffer = vec![1u8; 412 << 10];
        assert_eq!(
            stats().hblks,
            mapped,
            "a buffer under the window size was mapped"
        );
        // Freed, it stays in the heap for the next one: at the 128 KiB trim threshold that
        // fixing the mmap threshold leaves, it went back to the kernel.
        let heap = stats().arena;
        drop(buffer);
        assert_eq!(
            stats().arena,
            heap,
            "the heap gave a freed buffer back to the kernel"
        );
        let window = vec![0u8; WINDOW];
        assert_eq!(
            stats().hblks,
            mapped + 1,
            "a flow's window did not come fresh"
        );
        assert!(window.iter().all(|&x| x == 0));
        drop(window);
        assert_eq!(stats().hblks, mapped, "a freed window stayed mapped");
    }
}
