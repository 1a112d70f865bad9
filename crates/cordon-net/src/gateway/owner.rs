//! Which process inside the sandbox opened a flow: the socket's inode comes from the sandbox
//! network namespace's sock_diag (an exact lookup; reading `net/tcp` walks the kernel's whole
//! connection table, milliseconds per flow), then the descriptors of the processes in the
//! sandbox's process tree name its holder. Runs on a thread of its own beside the flow's
//! host-side connect, so it never adds to a connect's latency. Best effort: a process that
//! already closed the socket, or a kernel that hides the entry, gives no answer.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::{Redact, SocketLookup};

/// Lookups queued at most; past it a flow's event names no process (more than the flows and
/// waiters one sandbox may have, so only a stalled thread reaches it).
const QUEUE: usize = 2048;
/// Lookups answered in one walk of the sandbox's process tree at most.
const BATCH: usize = 256;
/// Tries per lookup, [`RETRY`] apart: the kernel's `children` lists are not read atomically
/// (a process forking meanwhile may be missed), and a short flow's socket outlives the miss.
const TRIES: usize = 3;
const RETRY: Duration = Duration::from_millis(1);

/// The sandbox process that owns a socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    /// Its pid inside the sandbox.
    pub pid: i64,
    /// Its command line, arguments joined by spaces (cut at 512 characters).
    pub cmdline: String,
}

/// What a flow's event will name as its process: set once, by its lookup.
pub(crate) struct OwnerSlot {
    found: OnceLock<Option<Owner>>,
    done: tokio::sync::Notify,
    asked: AtomicBool,
}

impl OwnerSlot {
    pub(crate) fn new() -> Self {
        Self {
            found: OnceLock::new(),
            done: tokio::sync::Notify::new(),
            asked: AtomicBool::new(false),
        }
    }

    /// The process, once the lookup found one.
    pub(crate) fn get(&self) -> Option<&Owner> {
        self.found.get().and_then(Option::as_ref)
    }

    /// The lookup's answer (`None`: no process found); the first one counts.
    pub(crate) fn set(&self, o: Option<Owner>) {
        let _ = self.found.set(o);
        self.done.notify_waiters();
    }

    /// True for the first caller only: it starts the lookup, later ones need not.
    pub(crate) fn ask(&self) -> bool {
        !self.asked.swap(true, Ordering::AcqRel)
    }

    /// Waits (at most `max`) for the lookup's answer.
    pub(crate) async fn settled(&self, max: Duration) {
        let answered = self.done.notified();
        tokio::pin!(answered);
        answered.as_mut().enable();
        if self.found.get().is_some() {
            return;
        }
        let _ = tokio::time::timeout(max, answered).await;
    }
}

/// One flow's lookup: the sandbox side's socket (local, remote) and where the answer goes.
pub(crate) struct Request {
    pub local: std::net::SocketAddrV4,
    pub remote: std::net::SocketAddrV4,
    pub slot: Arc<OwnerSlot>,
}

/// The thread that answers every flow's lookup of one sandbox, in batches. One thread woken
/// through a channel instead of a blocking-pool task per flow: a burst of connects costs one
/// walk of the process tree per batch, not one per flow, and none is dropped for being busy.
/// It ends when the gateway (the sender) goes.
pub(crate) struct Lookups {
    tx: SyncSender<Request>,
}

impl Lookups {
    pub(crate) fn start(init: i32, sockets: SocketLookup, redact: Redact) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("cordon-owners".into())
            .spawn(move || serve(&rx, init, &sockets, &redact))?;
        Ok(Self { tx })
    }

    /// Queues a lookup; the slot is answered "no process" when it cannot be.
    pub(crate) fn ask(&self, r: Request) {
        match self.tx.try_send(r) {
            Ok(()) => {}
            Err(TrySendError::Full(r) | TrySendError::Disconnected(r)) => r.slot.set(None),
        }
    }
}

fn serve(rx: &Receiver<Request>, init: i32, sockets: &SocketLookup, redact: &Redact) {
    let mut hint = None;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let mut left: Vec<&Request> = batch.iter().collect();
        for attempt in 0..TRIES {
            if attempt > 0 {
                std::thread::sleep(RETRY);
            }
            let answered = answer(&left, init, sockets, redact, &mut hint);
            let last = attempt + 1 == TRIES;
            left = left
                .into_iter()
                .zip(answered)
                .filter_map(|(r, o)| match o {
                    Some(o) => {
                        r.slot.set(Some(o));
                        None
                    }
                    None if last => {
                        r.slot.set(None);
                        None
                    }
                    None => Some(r),
                })
                .collect();
            if left.is_empty() {
                break;
            }
        }
    }
}

/// One try at `batch`: every socket's inode first, while the sockets surely exist (a flow's
/// SYN is held until its host-side connect is done; the lookup was asked for before that),
/// then one walk for all of them.
fn answer(
    batch: &[&Request],
    init: i32,
    sockets: &SocketLookup,
    redact: &Redact,
    hint: &mut Option<i32>,
) -> Vec<Option<Owner>> {
    let inodes: Vec<Option<u64>> = batch.iter().map(|r| sockets(r.local, r.remote)).collect();
    let wanted: Vec<u64> = inodes.iter().flatten().copied().collect();
    let mut found = find_all(init, &wanted, *hint).into_iter();
    inodes
        .iter()
        .map(|inode| {
            let (mut o, pid) = inode.and_then(|_| found.next().flatten())?;
            *hint = Some(pid);
            // A command line may carry a secret (`curl -H 'authorization: …'`): what the
            // events keep is redacted.
            o.cmdline = redact(&o.cmdline);
            Some(o)
        })
        .collect()
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
            // Read whole: a list cut short could end in part of a pid, another process's.
            let Ok(children) = read_proc(&t.path().join("children"), usize::MAX) else {
                continue;
            };
            out.extend(
                String::from_utf8_lossy(&children)
                    .split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok()),
            );
        }
    }
    out
}

/// The process under the sandbox's init (host pid `init`) holding socket `inode`.
#[cfg(test)]
pub(crate) fn find(init: i32, inode: u64) -> Option<Owner> {
    let mut found = find_all(init, &[inode], None);
    found.pop().flatten().map(|(o, _)| o)
}

/// The holders of each of `inodes` (in their order, with the host pid), found in one walk:
/// first among the descriptors of `hint` (the last flow's holder: a client that opens one
/// connection often opens the next), then in the sandbox's process tree for those still
/// unknown. A holder found is the holder: the socket's inode is unique on the host.
pub(crate) fn find_all(init: i32, inodes: &[u64], hint: Option<i32>) -> Vec<Option<(Owner, i32)>> {
    let want: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    let mut out: Vec<Option<(Owner, i32)>> = vec![None; inodes.len()];
    let mut left = inodes.len();
    let look = |pid: i32, out: &mut Vec<Option<(Owner, i32)>>, left: &mut usize| {
        let dir = Path::new("/proc").join(pid.to_string());
        let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
            return;
        };
        let mut owner = None;
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let Some(i) = want.iter().position(|w| target.as_os_str() == w.as_str()) else {
                continue;
            };
            if out[i].is_some() {
                continue;
            }
            let o = owner.get_or_insert_with(|| describe(&dir, pid)).clone();
            out[i] = Some((o, pid));
            *left -= 1;
            if *left == 0 {
                return;
            }
        }
    };
    if let Some(h) = hint {
        look(h, &mut out, &mut left);
    }
    if left > 0 {
        // Children first: init itself holds no sandbox sockets.
        for pid in tree(init).into_iter().rev() {
            if Some(pid) == hint {
                continue;
            }
            look(pid, &mut out, &mut left);
            if left == 0 {
                break;
            }
        }
    }
    out
}

/// The first `max` bytes (or so) of a file under `/proc`, in page-sized reads. `std::fs::read`
/// asks for the size first (a `statx`; procfs says 0) and then reads in growing steps from 32
/// bytes: 5–6 reads and a `statx` per file where this takes two reads, for every flow's
/// lookup, on the same two cores as the flow itself.
fn read_proc(path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut out = Vec::new();
    let mut page = [0u8; 4096];
    while out.len() < max {
        match f.read(&mut page) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&page[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// The command line and sandbox pid of host pid `pid` (its `/proc` directory `dir`).
fn describe(dir: &Path, pid: i32) -> Owner {
    let cmdline = read_proc(&dir.join("cmdline"), 16 << 10).unwrap_or_default();
    let mut cmdline: String = String::from_utf8_lossy(&cmdline)
        .split('\0')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if let Some((i, _)) = cmdline.char_indices().nth(512) {
        cmdline.truncate(i);
    }
    // The pid as the sandbox sees it: the last entry of NSpid.
    let inner = read_proc(&dir.join("status"), 16 << 10)
        .ok()
        .and_then(|s| {
            String::from_utf8_lossy(&s)
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|v| v.split_whitespace().last()?.parse().ok())
        })
        .unwrap_or(i64::from(pid));
    Owner {
        pid: inner,
        cmdline,
    }
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

    #[test]
    fn proc_files_are_read_whole_up_to_the_cap() {
        let f = std::env::temp_dir().join(format!("cordon-read-proc-{}", std::process::id()));
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&f, &bytes).unwrap();
        assert_eq!(read_proc(&f, 16 << 10).unwrap(), bytes);
        // Past the cap it stops at the next page's end: the head, in page-sized reads.
        assert_eq!(read_proc(&f, 5000).unwrap(), bytes[..8192]);
        let status = read_proc(Path::new("/proc/self/status"), 16 << 10).unwrap();
        assert!(String::from_utf8_lossy(&status).contains("\nNSpid:"));
        std::fs::remove_file(&f).unwrap();
        assert!(read_proc(&f, 16 << 10).is_err(), "a file that is not there");
    }

    #[test]
    fn one_walk_finds_each_socket_whatever_the_hint() {
        let (a, b) = (
            std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
        );
        let ino = |fd: i32| {
            std::fs::metadata(format!("/proc/self/fd/{fd}"))
                .unwrap()
                .ino()
        };
        use std::os::fd::AsRawFd;
        let me = std::process::id() as i32;
        let want = [ino(a.as_raw_fd()), u64::MAX, ino(b.as_raw_fd())];
        // A wrong hint (init, which is not this process) and none: the same answers.
        for hint in [Some(1), None, Some(me)] {
            let got = find_all(me, &want, hint);
            assert_eq!(got.len(), 3);
            assert!(
                got[0]
                    .as_ref()
                    .is_some_and(|(o, p)| *p == me && o.cmdline.contains("cordon_net")),
                "{got:?}"
            );
            assert!(got[1].is_none(), "{got:?}");
            assert_eq!(got[2].as_ref().map(|(_, p)| *p), Some(me), "{got:?}");
        }
    }
}
