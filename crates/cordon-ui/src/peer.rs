//! Who is on the other end of a loopback connection. A sandbox has its own network namespace,
//! so it can reach the host's 127.0.0.1 only through its session's gateway, which connects from
//! a `cordon` process (for `host.cordon.internal` or a `[dns] hosts` entry pointing at
//! loopback, on ports a rule names). The dashboard refuses every connection whose other end is
//! held by a cordon process: no policy rule can open the dashboard to a sandbox, whichever port
//! it names.
//!
//! Read from `/proc`: the connection's peer socket in `/proc/net/tcp{,6}`, then the processes
//! holding that socket. Processes the dashboard's user cannot inspect (another user's) are not
//! cordon processes of this user's sessions; the token still stands in their way.

use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The `/proc/net/tcp` spelling of an address: IPv4 as one little-endian word, IPv6 as four.
fn proc_hex(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(v4) => format!("{:08X}", u32::from_le_bytes(v4.octets())),
        IpAddr::V6(v6) => v6
            .octets()
            .chunks(4)
            .map(|w| format!("{:08X}", u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
            .collect(),
    };
    format!("{ip}:{:04X}", addr.port())
}

/// The owner's uid and the inode of the socket whose local end is `peer` and remote end
/// `ours`, from the text of `/proc/net/tcp` or `/proc/net/tcp6`.
fn socket_row(table: &str, peer: SocketAddr, ours: SocketAddr) -> Option<(u32, u64)> {
    let (want_local, want_remote) = (proc_hex(peer), proc_hex(ours));
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 9 && f[1] == want_local && f[2] == want_remote {
            Some((f[7].parse().ok()?, f[9].parse().ok()?))
        } else {
            None
        }
    })
}

/// Whether `exe` (a `/proc/PID/exe`) is a cordon binary: this very file, or one named `cordon`.
fn is_cordon_exe(exe: &Path, own: Option<(u64, u64)>) -> bool {
    if let (Some(own), Ok(m)) = (own, std::fs::metadata(exe))
        && (m.dev(), m.ino()) == own
    {
        return true;
    }
    std::fs::read_link(exe).is_ok_and(|target| {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // A binary replaced while it runs reads `cordon (deleted)`.
        name == "cordon" || name.starts_with("cordon ")
    })
}

/// The device and inode of an executable, to recognise it in `/proc/PID/exe`.
pub fn exe_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Whether a process running cordon holds the socket `inode`.
fn held_by_cordon(inode: u64, own: Option<(u64, u64)>) -> bool {
    let want = format!("socket:[{inode}]");
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    for p in procs.flatten() {
        if !p
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let dir = p.path();
        if !is_cordon_exe(&dir.join("exe"), own) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t.as_os_str() == want.as_str()))
        {
            return true;
        }
    }
    false
}

/// Who is at the other end of a connection, as far as the dashboard cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// A process of the dashboard's own user that is not cordon: a browser, curl.
    Welcome,
    /// A cordon process (a session's gateway or HTTP layer): a sandbox's connection.
    Cordon,
    /// A socket of another user: the dashboard is one user's.
    OtherUser(u32),
    /// The connection is not in `/proc/net` (already gone): nobody to serve.
    Unknown,
}

/// The dashboard's own (effective) uid: the owner of `/proc/self`.
fn own_uid() -> Option<u32> {
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// Who connected from `peer` to our `ours`. `cordon` is the running cordon binary's
/// [`exe_id`] (whatever its name); any executable named `cordon` counts too.
pub fn who(peer: SocketAddr, ours: SocketAddr, cordon: Option<(u64, u64)>) -> Peer {
    let table = match peer.ip() {
        IpAddr::V4(_) => "/proc/net/tcp",
        IpAddr::V6(_) => "/proc/net/tcp6",
    };
    // The table is read a page at a time while connections come and go, so a row can be
    // missed in one reading: look again before calling the connection unknown.
    let row = (0..5).find_map(|attempt| {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::fs::read_to_string(table)
            .ok()
            .and_then(|text| socket_row(&text, peer, ours))
    });
    let Some((uid, inode)) = row else {
        return Peer::Unknown;
    };
    if own_uid().is_some_and(|me| me != uid) {
        return Peer::OtherUser(uid);
    }
    if held_by_cordon(inode, cordon) {
        Peer::Cordon
    } else {
        Peer::Welcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_spelling() {
        assert_eq!(proc_hex("127.0.0.1:8080".parse().unwrap()), "0100007F:1F90");
        assert_eq!(
            proc_hex("[::1]:22".parse().unwrap()),
            "00000000000000000000000001000000:0016"
        );
    }

    #[test]
    fn finds_the_inode_of_a_connection() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0 100 0 0 10 0\n\
   1: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 222 1 0 20 4 30 10 -1\n";
        let ours = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(
            socket_row(table, "127.0.0.1:50000".parse().unwrap(), ours),
            Some((1000, 222))
        );
        assert_eq!(
            socket_row(table, "127.0.0.1:50001".parse().unwrap(), ours),
            None
        );
    }

    #[test]
    fn a_connection_from_this_test_process_is_not_cordon() {
        // The test binary is not named cordon: its own connection is let through.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = l.local_addr().unwrap();
        let c = std::net::TcpStream::connect(ours).unwrap();
        let (_s, peer) = l.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
        let (uid, inode) =
            socket_row(&table, peer, ours).expect("the connection is in /proc/net/tcp");
        assert!(inode > 0);
        assert_eq!(Some(uid), own_uid());
        assert_eq!(who(peer, ours, None), Peer::Welcome);
        // Named as the running cordon binary, the same process is refused.
        assert_eq!(
            who(peer, ours, exe_id(Path::new("/proc/self/exe"))),
            Peer::Cordon
        );
        // A connection that is gone is nobody's.
        let gone = "127.0.0.1:1".parse().unwrap();
        assert_eq!(who(gone, ours, None), Peer::Unknown);
    }

    #[test]
    fn a_connection_from_a_program_named_cordon_is() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("cordon");
        std::fs::copy("/bin/bash", &fake).unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = l.local_addr().unwrap();
        let mut child = std::process::Command::new(&fake)
            .arg("-c")
            .arg(format!(
                "exec 3<>/dev/tcp/127.0.0.1/{}; read -t 20 <&3",
                ours.port()
            ))
            .spawn()
            .unwrap();
        let (s, peer) = l.accept().unwrap();
        assert_eq!(who(peer, ours, None), Peer::Cordon);
        drop(s);
        let _ = child.wait();
    }
}

#[cfg(test)]
mod other_user {
    use super::*;

    /// As root, a connection from another user (`nobody`, via setpriv) is that user's.
    #[test]
    fn a_connection_from_another_user_is_theirs() {
        if own_uid() != Some(0) {
            eprintln!("skipped: needs root to connect as another user");
            return;
        }
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = l.local_addr().unwrap();
        let mut child = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args(["bash", "-c"])
            .arg(format!(
                "exec 3<>/dev/tcp/127.0.0.1/{}; read -t 20 <&3",
                ours.port()
            ))
            .spawn()
            .unwrap();
        let (s, peer) = l.accept().unwrap();
        assert_eq!(who(peer, ours, None), Peer::OtherUser(65534));
        drop(s);
        let _ = child.wait();
    }
}
