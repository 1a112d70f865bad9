//! Which process inside the sandbox opened a flow: the socket's inode comes from the sandbox
//! network namespace's sock_diag (an exact lookup; reading `net/tcp` walks the kernel's whole
//! connection table, milliseconds per flow), then the descriptors of the processes in the
//! sandbox's process tree name its holder. Runs off the packet path, after the flow was
//! answered, so it never adds to a connect's latency. Best effort: a process that already closed the
//! socket, or a kernel that hides the entry, gives no answer.

use std::path::Path;

/// The sandbox process that owns a socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    /// Its pid inside the sandbox.
    pub pid: i64,
    /// Its command line, arguments joined by spaces (cut at 512 characters).
    pub cmdline: String,
}

/// The processes under `root` (itself included), found through each task's `children`
/// list: a walk of the sandbox's process tree, not a scan of every process on the host.
fn tree(root: i32) -> Vec<i32> {
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() && out.len() < 65536 {
        let pid = out[i];
        i += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(children) = std::fs::read_to_string(t.path().join("children")) else {
                continue;
            };
            out.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok()),
            );
        }
    }
    out
}

/// The process under the sandbox's init (host pid `init`) holding socket `inode`.
pub(crate) fn find(init: i32, inode: u64) -> Option<Owner> {
    let want = format!("socket:[{inode}]");
    // Children first: init itself holds no sandbox sockets.
    for pid in tree(init).into_iter().rev() {
        let dir = Path::new("/proc").join(pid.to_string());
        let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
            continue;
        };
        let holds = fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t.as_os_str() == want.as_str()));
        if !holds {
            continue;
        }
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let mut cmdline: String = String::from_utf8_lossy(&cmdline)
            .split('\0')
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        if let Some((i, _)) = cmdline.char_indices().nth(512) {
            cmdline.truncate(i);
        }
        // The pid as the sandbox sees it: the last entry of NSpid.
        let inner = std::fs::read_to_string(dir.join("status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("NSpid:"))
                    .and_then(|v| v.split_whitespace().last()?.parse().ok())
            })
            .unwrap_or(i64::from(pid));
        return Some(Owner {
            pid: inner,
            cmdline,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn finds_the_holder_of_a_socket_in_a_process_tree() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&l);
        let inode = std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .unwrap()
            .ino();
        let me = find(std::process::id() as i32, inode).expect("own listener");
        assert!(me.cmdline.contains("cordon_net"), "{me:?}");
        assert_eq!(find(std::process::id() as i32, u64::MAX), None);
        assert!(tree(std::process::id() as i32).contains(&(std::process::id() as i32)));
    }
}
