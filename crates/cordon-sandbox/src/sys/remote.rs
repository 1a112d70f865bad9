//! Reading another process's memory: the exec supervisor's view of a trapped execve's path
//! and arguments.
//!
//! `process_vm_readv`, not `/proc/PID/mem`: a process that made itself non-dumpable (ssh-agent,
//! sandboxes such as Claude Code's apply-seccomp) has its /proc files owned by the root of its
//! user namespace, and the sandbox's maps no uid 0, so for a non-root supervisor they fall back
//! to the host's root and opening `mem` fails with EACCES. `process_vm_readv` asks only the
//! ptrace access check, which the supervisor passes as the owner of the sandbox's user
//! namespaces.

use std::io;

use super::cvt_long;

/// One process's memory, read through `process_vm_readv`.
pub(crate) struct RemoteMemory {
    pid: libc::pid_t,
}

impl RemoteMemory {
    pub(crate) fn new(pid: u32) -> RemoteMemory {
        RemoteMemory {
            pid: pid as libc::pid_t,
        }
    }

    /// Read into `buf` from `addr`; fewer bytes than asked when the range runs into an
    /// unmapped page, an error when `addr` itself is unmapped.
    pub(crate) fn read_at(&self, buf: &mut [u8], addr: u64) -> io::Result<usize> {
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `local` describes `buf`, which we borrow mutably for the call; the kernel
        // checks `remote` against the other process's mappings and writes only into `local`.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        cvt_long(n as libc::c_long).map(|n| n as usize)
    }

    /// Read exactly `buf.len()` bytes from `addr`.
    pub(crate) fn read_exact_at(&self, buf: &mut [u8], addr: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.read_at(&mut buf[done..], addr + done as u64)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "memory ended before the value",
                ));
            }
            done += n;
        }
        Ok(())
    }
}
