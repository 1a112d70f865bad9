//! The filter on the real kernel: installed in a forked child, with a thread of the child's
//! answering its notifications.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cordon_policy::{SyscallsPlan, syscall_table};

use super::rules::{NETLINK_ROUTE, NEWER_SYSCALLS};
use super::testing::rule;
use super::{Listener, build, install, is_exec};
use crate::sys;

/// What the child's notification thread saw.
#[derive(Default)]
struct Seen {
    denials: AtomicUsize,
    execs: AtomicUsize,
}

/// Forks; the child sets no_new_privs, installs `build(plan, supervise_exec, root)`, starts a
/// thread that answers EPERM to denials and CONTINUE to execs, and runs `checks`. Returns
/// the child's exit code: 0 when every check passed, else the failed check's code.
fn in_filtered_child(
    plan: &SyscallsPlan,
    supervise_exec: bool,
    root: bool,
    checks: fn(&Seen) -> Result<(), i32>,
) -> sys::WaitStatus {
    let filters = build(plan, supervise_exec, false, root).unwrap();
    let pid = sys::fork().unwrap();
    if pid == 0 {
        let code = std::panic::catch_unwind(|| {
            // SAFETY: alarm takes an integer; SIGALRM's default action ends a child that
            // hangs on an unanswered notification.
            unsafe { libc::alarm(30) };
            sys::set_no_new_privs().map_err(|_| 2)?;
            let fd = install(&filters).map_err(|_| 3)?;
            let listener = Listener::new(fd);
            let seen = Arc::new(Seen::default());
            let s = seen.clone();
            // pthread_create: clone3 gets ENOSYS, glibc falls back to clone.
            std::thread::Builder::new()
                .spawn(move || {
                    loop {
                        let n = match listener.recv() {
                            Ok(n) => n,
                            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                            Err(_) => return,
                        };
                        if is_exec(n.nr) {
                            s.execs.fetch_add(1, Ordering::SeqCst);
                            let _ = listener.allow(n.id);
                        } else {
                            s.denials.fetch_add(1, Ordering::SeqCst);
                            let _ = listener.deny(n.id, libc::EPERM);
                        }
                    }
                })
                .map_err(|_| 4)?;
            checks(&seen)
        });
        sys::exit_now(match code {
            Ok(Ok(())) => 0,
            Ok(Err(c)) => c,
            Err(_) => 99,
        });
    }
    sys::waitpid(pid, false).unwrap().unwrap().1
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `r` must be -1 with `want`, and the notification thread must have seen `denials`
/// denials in all (so the EPERM came from the supervisor, not from missing privileges).
fn expect_denied(r: libc::c_long, seen: &Seen, denials: usize, code: i32) -> Result<(), i32> {
    let e = errno();
    if r != -1 || e != libc::EPERM || seen.denials.load(Ordering::SeqCst) != denials {
        return Err(code);
    }
    Ok(())
}

#[test]
fn the_filter_on_the_real_kernel() {
    let plan = SyscallsPlan {
        deny: vec![rule("chroot", "test:1")],
        ..Default::default()
    };
    let status = in_filtered_child(&plan, false, false, |seen| {
        // SAFETY (whole closure): raw syscalls with integer arguments, null pointers the
        // kernel checks, or pointers to live locals.
        unsafe {
            if libc::getpid() <= 0 {
                return Err(10);
            }
            match std::thread::spawn(|| 7).join() {
                Ok(7) => {}
                _ => return Err(11),
            }
            let null = std::ptr::null::<libc::c_char>();
            let r = libc::syscall(libc::SYS_mount, null, null, null, 0, null);
            expect_denied(r, seen, 1, 12)?;
            let r = libc::unshare(libc::CLONE_NEWUSER) as libc::c_long;
            expect_denied(r, seen, 2, 13)?;
            let r = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) as libc::c_long;
            expect_denied(r, seen, 3, 14)?;
            let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            if s < 0 {
                return Err(15);
            }
            libc::close(s);
            let s = libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, NETLINK_ROUTE as i32);
            if s < 0 {
                return Err(16);
            }
            libc::close(s);
            let r = libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, 15) as libc::c_long;
            expect_denied(r, seen, 4, 17)?;
            // A closed descriptor: without the filter, EBADF (and never a real TIOCSTI).
            let c: libc::c_char = b'x' as libc::c_char;
            let r = libc::ioctl(-1, libc::TIOCSTI, &c as *const libc::c_char) as libc::c_long;
            expect_denied(r, seen, 5, 18)?;
            let mut n: libc::c_int = 0;
            if libc::ioctl(-1, libc::FIONREAD, &mut n as *mut libc::c_int) != -1
                || errno() != libc::EBADF
            {
                return Err(19);
            }
            // Without CAP_SETFCAP kept, xattr writes are the kernel's to judge.
            let (path, name) = (c"/nonexistent-cordon-test", c"user.cordon");
            if libc::setxattr(path.as_ptr(), name.as_ptr(), null.cast(), 0, 0) != -1
                || errno() != libc::ENOENT
                || seen.denials.load(Ordering::SeqCst) != 5
            {
                return Err(27);
            }
            // Not root's sandbox: a set-id mode and openat2 are the kernel's to judge.
            let nowhere = c"/nonexistent-cordon-test";
            if libc::fchmodat(libc::AT_FDCWD, nowhere.as_ptr(), 0o4755, 0) != -1
                || errno() != libc::ENOENT
                || seen.denials.load(Ordering::SeqCst) != 5
            {
                return Err(28);
            }
            if let Some(openat2) = syscall_table::nr("openat2")
                && (libc::syscall(openat2, libc::AT_FDCWD, nowhere.as_ptr(), null, 24) != -1
                    || errno() != libc::EFAULT)
            {
                return Err(29);
            }
            #[cfg(target_arch = "x86_64")]
            {
                let r = libc::syscall(0x4000_0000 | libc::SYS_getpid);
                if r != -1 || errno() != libc::EPERM {
                    return Err(20);
                }
            }
            if libc::syscall(999) != -1 || errno() != libc::EPERM {
                return Err(21);
            }
            let r = libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0);
            if r != -1 || errno() != libc::ENOSYS {
                return Err(22);
            }
            let newer = NEWER_SYSCALLS
                .clone()
                .find(|n| syscall_table::name(*n).is_none());
            if let Some(newer) = newer
                && (libc::syscall(newer as libc::c_long) != -1 || errno() != libc::ENOSYS)
            {
                return Err(23);
            }
            let root = c"/nonexistent-cordon-test";
            let r = libc::chroot(root.as_ptr()) as libc::c_long;
            expect_denied(r, seen, 6, 24)?;
            let r = libc::ptrace(libc::PTRACE_CONT, libc::getppid(), 0, 0);
            expect_denied(r, seen, 7, 25)?;
            // Execs are not supervised here: no notification.
            let argv = [null];
            let r = libc::execve(root.as_ptr(), argv.as_ptr(), argv.as_ptr());
            if r != -1 || errno() != libc::ENOENT || seen.execs.load(Ordering::SeqCst) != 0 {
                return Err(26);
            }
        }
        Ok(())
    });
    assert_eq!(
        status,
        sys::WaitStatus::Exited(0),
        "the exit code names the failed check"
    );
}

#[test]
fn lifted_denials_and_supervised_exec_on_the_real_kernel() {
    let plan = SyscallsPlan {
        allow: vec![rule("ptrace", "test:1")],
        nested_userns: true,
        ..Default::default()
    };
    let status = in_filtered_child(&plan, true, true, |seen| {
        // SAFETY (whole closure): raw syscalls with integer arguments, null pointers the
        // kernel checks, or pointers to live locals.
        unsafe {
            // Not a tracer of the parent: ESRCH, from the kernel rather than the filter.
            let r = libc::ptrace(libc::PTRACE_CONT, libc::getppid(), 0, 0);
            if r != -1 || errno() != libc::ESRCH {
                return Err(30);
            }
            let r =
                libc::process_vm_readv(libc::getpid(), std::ptr::null(), 0, std::ptr::null(), 0, 0);
            if r != 0 {
                return Err(31);
            }
            // CLONE_NEWUSER is not sent to the supervisor (the kernel may still refuse).
            let _ = libc::unshare(libc::CLONE_NEWUSER);
            if seen.denials.load(Ordering::SeqCst) != 0 {
                return Err(32);
            }
            // A supervised exec: the supervisor lets it continue; the kernel says ENOENT.
            let path = c"/nonexistent-cordon-test";
            let argv = [std::ptr::null::<libc::c_char>()];
            let r = libc::execve(path.as_ptr(), argv.as_ptr(), argv.as_ptr());
            if r != -1 || errno() != libc::ENOENT || seen.execs.load(Ordering::SeqCst) != 1 {
                return Err(33);
            }
            // Lifted by nested_userns too: mount goes to the kernel (which decides by the
            // caller's capabilities in the mount namespace's owner).
            let null = std::ptr::null::<libc::c_char>();
            let _ = libc::syscall(libc::SYS_mount, null, null, null, 0, null);
            if seen.denials.load(Ordering::SeqCst) != 0 {
                return Err(34);
            }
            // Still denied: setns, which nested_userns does not lift.
            let r = libc::syscall(libc::SYS_setns, -1, 0);
            expect_denied(r, seen, 1, 35)?;
            // Holding CAP_SETFCAP: no xattr write reaches the kernel (which would say ENOENT,
            // EBADF); setxattrat, newer than the table, is ENOSYS.
            let (path, name) = (c"/nonexistent-cordon-test", c"security.capability");
            let r = libc::setxattr(path.as_ptr(), name.as_ptr(), null.cast(), 0, 0) as libc::c_long;
            expect_denied(r, seen, 2, 36)?;
            let r =
                libc::lsetxattr(path.as_ptr(), name.as_ptr(), null.cast(), 0, 0) as libc::c_long;
            expect_denied(r, seen, 3, 37)?;
            let r = libc::fsetxattr(-1, name.as_ptr(), null.cast(), 0, 0) as libc::c_long;
            expect_denied(r, seen, 4, 38)?;
            if syscall_table::name(463).is_none()
                && (libc::syscall(463, -1, path.as_ptr(), 0, name.as_ptr(), null, 0) != -1
                    || errno() != libc::ENOSYS)
            {
                return Err(39);
            }
            // Reading them is not writing: the kernel answers.
            let mut buf = [0u8; 8];
            let r = libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 8);
            if r != -1 || errno() != libc::ENOENT || seen.denials.load(Ordering::SeqCst) != 4 {
                return Err(40);
            }
        }
        Ok(())
    });
    assert_eq!(
        status,
        sys::WaitStatus::Exited(0),
        "the exit code names the failed check"
    );
}

#[test]
fn set_id_modes_as_root_on_the_real_kernel() {
    // Root without nested sandboxes: set-id modes denied, xattr writes the kernel's.
    let status = in_filtered_child(&SyscallsPlan::default(), false, true, |seen| {
        let dir = std::env::temp_dir().join(format!("cordon-setid-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|_| 50)?;
        let r = set_id_checks(&dir, seen);
        let _ = std::fs::remove_dir_all(&dir);
        r
    });
    assert_eq!(
        status,
        sys::WaitStatus::Exited(0),
        "the exit code names the failed check"
    );
}

/// What [`set_id_modes_as_root_on_the_real_kernel`] checks in `dir`, a fresh directory.
fn set_id_checks(dir: &std::path::Path, seen: &Seen) -> Result<(), i32> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let c = |name: &str| CString::new(dir.join(name).as_os_str().as_bytes()).unwrap();
    let mode = |name: &str| {
        std::fs::symlink_metadata(dir.join(name)).map_or(0, |m| m.permissions().mode() & 0o7777)
    };
    let (f, d) = (c("f"), CString::new(dir.as_os_str().as_bytes()).unwrap());
    let at = libc::AT_FDCWD;
    let wr = libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC;
    // SAFETY (whole block): raw syscalls with integer arguments, null pointers the kernel
    // checks, or pointers to live locals.
    unsafe {
        // Created with a set-id mode: denied, and nothing is created.
        let r = libc::syscall(libc::SYS_openat, at, f.as_ptr(), wr, 0o4755);
        expect_denied(r, seen, 1, 51)?;
        if dir.join("f").exists() {
            return Err(52);
        }
        let r = libc::syscall(
            libc::SYS_openat,
            at,
            d.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR,
            0o2755,
        );
        expect_denied(r, seen, 2, 53)?;
        let fd = libc::syscall(libc::SYS_openat, at, f.as_ptr(), wr, 0o755) as libc::c_int;
        if fd < 0 {
            return Err(54);
        }
        // Without O_CREAT the mode is unused: not sent.
        let rd = libc::syscall(libc::SYS_openat, at, f.as_ptr(), libc::O_RDONLY, 0o4755);
        if rd < 0 || seen.denials.load(Ordering::SeqCst) != 2 {
            return Err(55);
        }
        libc::close(rd as libc::c_int);
        // The chmod family, through each call, with either bit and the file type bits.
        let r = libc::fchmod(fd, libc::S_IFREG | 0o4755) as libc::c_long;
        expect_denied(r, seen, 3, 56)?;
        let r = libc::fchmod(fd, 0o2755) as libc::c_long;
        expect_denied(r, seen, 4, 57)?;
        let r = libc::fchmodat(at, f.as_ptr(), 0o6755, 0) as libc::c_long;
        expect_denied(r, seen, 5, 58)?;
        let mut denials = 5;
        if let Some(fchmodat2) = syscall_table::nr("fchmodat2") {
            let r = libc::syscall(fchmodat2, at, f.as_ptr(), 0o4755, 0);
            denials += 1;
            expect_denied(r, seen, denials, 59)?;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let r = libc::syscall(libc::SYS_chmod, f.as_ptr(), 0o4755);
            denials += 1;
            expect_denied(r, seen, denials, 60)?;
            let r = libc::syscall(libc::SYS_creat, c("g").as_ptr(), 0o4755);
            denials += 1;
            expect_denied(r, seen, denials, 61)?;
            let r = libc::syscall(libc::SYS_mknod, c("g").as_ptr(), libc::S_IFREG | 0o2755, 0);
            denials += 1;
            expect_denied(r, seen, denials, 62)?;
        }
        let r = libc::mknodat(at, c("h").as_ptr(), libc::S_IFREG | 0o4755, 0) as libc::c_long;
        denials += 1;
        expect_denied(r, seen, denials, 63)?;
        // Other modes pass: the sticky bit, plain permissions, a plain mknod.
        if libc::fchmod(fd, 0o1755) != 0 || mode("f") != 0o1755 {
            return Err(64);
        }
        if libc::fchmodat(at, f.as_ptr(), 0o700, 0) != 0 || mode("f") != 0o700 {
            return Err(65);
        }
        if libc::mknodat(at, c("h").as_ptr(), libc::S_IFREG | 0o644, 0) != 0 {
            return Err(66);
        }
        libc::close(fd);
        // openat2's mode is out of reach: ENOSYS, so callers fall back to openat.
        if let Some(openat2) = syscall_table::nr("openat2") {
            let how = [u64::from(wr as u32), 0o4755, 0];
            let r = libc::syscall(openat2, at, c("i").as_ptr(), how.as_ptr(), 24);
            if r != -1 || errno() != libc::ENOSYS || dir.join("i").exists() {
                return Err(67);
            }
        }
        // No CAP_SETFCAP kept without nested sandboxes: the kernel judges xattr writes.
        let name = c"user.cordon";
        let r = libc::setxattr(c("f").as_ptr(), name.as_ptr(), b"1".as_ptr().cast(), 1, 0);
        if (r != 0 && errno() == libc::EPERM) || seen.denials.load(Ordering::SeqCst) != denials {
            return Err(68);
        }
        if mode("f") & 0o6000 != 0 || mode("h") & 0o6000 != 0 {
            return Err(69);
        }
    }
    Ok(())
}
