//! Which process inside the sandbox opened a flow: its TCP socket is looked up in the
//! sandbox's own `/proc` view (the network namespace's `net/tcp`, then the descriptors of the
//! processes in the sandbox's PID namespace). Best effort: a process that already closed the
//! socket, or a kernel that hides the entry, gives no answer.

use std::net::SocketAddrV4;
use std::path::Path;

/// The sandbox process that owns a socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    /// Its pid inside the sandbox.
    pub pid: i64,
    /// Its command line, arguments joined by spaces (cut at 512 characters).
    pub cmdline: String,
}

/// `/proc/net/tcp`'s rendering of an IPv4 socket address: the address as the kernel's
/// little-endian word in hex, then the port.
fn proc_addr(a: SocketAddrV4) -> String {
    format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(a.ip().octets()),
        a.port()
    )
}

/// The inode of the socket whose local address is `local`, from a `net/tcp` table.
fn inode_in(table: &str, local: SocketAddrV4) -> Option<u64> {
    let want = proc_addr(local);
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&want.as_str()))
            .then(|| f.get(9)?.parse().ok())
            .flatten()
            .filter(|i| *i != 0)
    })
}

/// The sandbox process holding the TCP socket bound to `local`, seen from the sandbox's init
/// (host pid `init`).
pub(crate) fn find(init: i32, local: SocketAddrV4) -> Option<Owner> {
    let base = Path::new("/proc").join(init.to_string());
    let table = std::fs::read_to_string(base.join("net/tcp")).ok()?;
    let inode = inode_in(&table, local)?;
    let want = format!("socket:[{inode}]");
    let pidns = std::fs::read_link(base.join("ns/pid")).ok()?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let dir = entry.path();
        if std::fs::read_link(dir.join("ns/pid")).ok().as_ref() != Some(&pidns) {
            continue;
        }
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
            .unwrap_or_else(|| pid.parse().unwrap_or(0));
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

    #[test]
    fn finds_the_inode_of_a_local_address() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:46A0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 762235 1 0 100 0 0 10 0\n\
   1: 6402000A:9C40 0200120C6:0050 01 00000000:00000000 00:00000000 00000000  1000        0 991 1 0 20 4 30 10 -1\n";
        assert_eq!(
            inode_in(table, "127.0.0.1:18080".parse().unwrap()),
            Some(762235)
        );
        assert_eq!(
            inode_in(table, "10.0.2.100:40000".parse().unwrap()),
            Some(991)
        );
        assert_eq!(inode_in(table, "10.0.2.100:40001".parse().unwrap()), None);
        assert_eq!(inode_in("garbage", "10.0.2.100:1".parse().unwrap()), None);
    }

    #[test]
    fn finds_our_own_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(a) = l.local_addr().unwrap() else {
            unreachable!()
        };
        let me = find(std::process::id() as i32, a).expect("own listener");
        assert!(me.cmdline.contains("cordon_net"), "{me:?}");
    }
}
