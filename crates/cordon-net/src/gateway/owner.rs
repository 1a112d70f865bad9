//! Which process inside the sandbox opened a flow: the socket's inode comes from the sandbox
//! network namespace's sock_diag (an exact lookup; reading `net/tcp` walks the kernel's whole
//! connection table, milliseconds per flow), then the descriptors of the processes in the
//! sandbox's process tree name its holder. Asked while the flow's SYN is held, so the socket
//! surely exists. The common case is answered on the spot ([`Lookups::quick`]: the descriptor
//! where the last flow's socket was found, and what is known of its process); the rest goes to
//! a thread of its own, beside the flow's host-side connect. Best effort: a process that
//! already closed the socket, or a kernel that hides the entry, gives no answer.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
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
/// Processes whose description is kept at most (each keeps one descriptor open); past it the
/// list starts again.
const KNOWN: usize = 64;
/// A command line is read up to this much, and cut at [`CMDLINE_CHARS`] characters.
const CMDLINE_BYTES: usize = 16 << 10;
const CMDLINE_CHARS: usize = 512;

/// The sandbox process that owns a socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    /// Its pid inside the sandbox.
    pub pid: i64,
    /// Its command line, arguments joined by spaces (cut at 512 characters).
    pub cmdline: String,
    /// Its pid on the host (what `/proc` is read by).
    pub host_pid: i32,
    /// The descriptor it holds the socket at, when found.
    pub fd: Option<u32>,
    /// The socket's inode, when found.
    pub inode: Option<u64>,
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

/// One flow's lookup: the sandbox side's socket (local, remote), its inode when
/// [`Lookups::quick`] already has it, and where the answer goes.
pub(crate) struct Request {
    pub local: std::net::SocketAddrV4,
    pub remote: std::net::SocketAddrV4,
    pub inode: Option<u64>,
    pub slot: Arc<OwnerSlot>,
}

/// What the lookups have learned, shared by the quick path and the thread.
#[derive(Default)]
struct Known {
    /// Where the last flow's socket was found: host pid and descriptor number. A client that
    /// opens one connection often opens the next, and a new socket takes the lowest free
    /// descriptor, which is often the one the last socket had.
    last: Option<(i32, u32)>,
    procs: HashMap<i32, Described>,
    /// Room for one command line, kept so a lookup neither allocates nor clears it.
    buf: Vec<u8>,
}

/// A process as last described. Its `/proc/PID/cmdline` stays open: that descriptor belongs
/// to this process and to no later one given the same pid (a read through it fails, or reads
/// nothing, once the process has exited), so a read through it that returns the command line
/// proves the process is the one described and its sandbox pid still holds. A pid reused by a
/// new process is described anew.
struct Described {
    cmdline: File,
    raw: Vec<u8>,
    owner: Owner,
}

impl Known {
    /// `pid`'s description (a command line may carry a secret, `curl -H 'authorization: …'`:
    /// what the events keep is redacted): from what is kept, when its command line still reads
    /// through the descriptor kept with it; else from `/proc` afresh.
    fn describe(&mut self, pid: i32, redact: &Redact) -> Owner {
        let Known { procs, buf, .. } = self;
        buf.resize(CMDLINE_BYTES, 0);
        if let Some(d) = procs.get_mut(&pid) {
            match read_at_most(&d.cmdline, buf) {
                [] => {
                    procs.remove(&pid);
                }
                raw if raw == d.raw.as_slice() => return d.owner.clone(),
                // The same process with another command line (it exec'd, or rewrote its
                // arguments): the sandbox pid is still its own.
                raw => {
                    d.owner.cmdline = redact(&join_args(raw));
                    d.raw = raw.to_vec();
                    return d.owner.clone();
                }
            }
        }
        let dir = Path::new("/proc").join(pid.to_string());
        let cmdline = File::open(dir.join("cmdline"));
        let raw = match &cmdline {
            Ok(f) => read_at_most(f, buf).to_vec(),
            Err(_) => Vec::new(),
        };
        let owner = Owner {
            pid: ns_pid(&dir).unwrap_or(i64::from(pid)),
            cmdline: redact(&join_args(&raw)),
            host_pid: pid,
            fd: None,
            inode: None,
        };
        // Kept only when the command line still reads after `status` was read by pid: the
        // process was alive throughout, so the pid was not reused in between and the NSpid is
        // its own. One with an empty command line cannot be told apart that way: it is
        // described afresh each time.
        if let Ok(f) = cmdline
            && !raw.is_empty()
            && !read_at_most(&f, buf).is_empty()
        {
            if procs.len() >= KNOWN {
                procs.clear();
            }
            let owner = owner.clone();
            procs.insert(
                pid,
                Described {
                    cmdline: f,
                    raw,
                    owner,
                },
            );
        }
        owner
    }
}

/// Every flow's lookup of one sandbox: on the caller's thread when the socket is where the
/// last one was ([`Lookups::quick`]), else by a thread that answers them in batches. One
/// thread woken through a channel instead of a blocking-pool task per flow: a burst of
/// connects costs one walk of the process tree per batch, not one per flow, and none is
/// dropped for being busy. It ends when the gateway (the sender) goes.
pub(crate) struct Lookups {
    tx: SyncSender<Request>,
    known: Arc<Mutex<Known>>,
    sockets: SocketLookup,
    redact: Redact,
}

/// What [`Lookups::quick`] could tell.
pub(crate) enum Quick {
    Found(Owner),
    /// Not at the last flow's descriptor; the socket's inode, for the thread to look for.
    Inode(u64),
    /// No such socket (yet, or any more).
    Unknown,
}

impl Lookups {
    pub(crate) fn start(init: i32, sockets: SocketLookup, redact: Redact) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let known = Arc::new(Mutex::new(Known::default()));
        let (k, s, r) = (known.clone(), sockets.clone(), redact.clone());
        std::thread::Builder::new()
            .name("cordon-owners".into())
            .spawn(move || serve(&rx, init, &s, &r, &k))?;
        Ok(Self {
            tx,
            known,
            sockets,
            redact,
        })
    }

    /// The holder of the socket from `local` to `remote` when it is where the last flow's
    /// socket was found: one sock_diag request, one `readlink` and one read of the holder's
    /// command line, on the caller's thread (tens of microseconds; a thread's wake-up and the
    /// answer's way back cost more than that). A hit is exact: the socket's inode is unique on
    /// the host. Anything else is left to the thread ([`Lookups::ask`]).
    pub(crate) fn quick(
        &self,
        local: std::net::SocketAddrV4,
        remote: std::net::SocketAddrV4,
    ) -> Quick {
        let Some(inode) = (self.sockets)(local, remote) else {
            return Quick::Unknown;
        };
        let mut known = lock(&self.known);
        let Some((pid, fd)) = known.last else {
            return Quick::Inode(inode);
        };
        let held = std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
            .is_ok_and(|t| t.as_os_str().as_encoded_bytes() == socket_link(inode).as_bytes());
        if held {
            let mut o = known.describe(pid, &self.redact);
            o.fd = Some(fd);
            o.inode = Some(inode);
            Quick::Found(o)
        } else {
            Quick::Inode(inode)
        }
    }

    /// Queues a lookup; the slot is answered "no process" when it cannot be.
    pub(crate) fn ask(&self, r: Request) {
        match self.tx.try_send(r) {
            Ok(()) => {}
            Err(TrySendError::Full(r) | TrySendError::Disconnected(r)) => r.slot.set(None),
        }
    }
}

fn lock(known: &Mutex<Known>) -> std::sync::MutexGuard<'_, Known> {
    known.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a descriptor holding socket `inode` links to.
fn socket_link(inode: u64) -> String {
    format!("socket:[{inode}]")
}

fn serve(
    rx: &Receiver<Request>,
    init: i32,
    sockets: &SocketLookup,
    redact: &Redact,
    known: &Mutex<Known>,
) {
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
            let answered = answer(&left, init, sockets, redact, known);
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

/// One try at `batch`: every socket's inode first (unless the quick path had it), while the
/// sockets surely exist (a flow's SYN is held until its host-side connect is done; the lookup
/// was asked for before that), then one walk for all of them.
fn answer(
    batch: &[&Request],
    init: i32,
    sockets: &SocketLookup,
    redact: &Redact,
    known: &Mutex<Known>,
) -> Vec<Option<Owner>> {
    let inodes: Vec<Option<u64>> = batch
        .iter()
        .map(|r| r.inode.or_else(|| sockets(r.local, r.remote)))
        .collect();
    let wanted: Vec<u64> = inodes.iter().flatten().copied().collect();
    let mut found = find_all(init, &wanted, known, redact).into_iter();
    inodes
        .iter()
        .map(|inode| inode.and_then(|_| found.next().flatten()))
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
    let known = Mutex::new(Known::default());
    let mut found = find_all(init, &[inode], &known, &tests::same());
    found.pop().flatten()
}

/// The holders of each of `inodes` (in their order), found in one walk: first among the
/// descriptors of the last flow's holder (a client that opens one connection often opens the
/// next), then in the sandbox's process tree for those still unknown. A holder found is the
/// holder: the socket's inode is unique on the host. The last one found is remembered, with
/// the descriptor it held the socket at, for [`Lookups::quick`].
fn find_all(
    init: i32,
    inodes: &[u64],
    known: &Mutex<Known>,
    redact: &Redact,
) -> Vec<Option<Owner>> {
    let want: Vec<String> = inodes.iter().map(|&i| socket_link(i)).collect();
    let mut out: Vec<Option<Owner>> = vec![None; inodes.len()];
    let mut left = inodes.len();
    let look = |pid: i32, out: &mut Vec<Option<Owner>>, left: &mut usize| {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
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
            let mut k = lock(known);
            let n = fd.file_name().to_str().and_then(|n| n.parse().ok());
            if let Some(n) = n {
                k.last = Some((pid, n));
            }
            let mut o = owner.get_or_insert_with(|| k.describe(pid, redact)).clone();
            o.fd = n;
            o.inode = Some(inodes[i]);
            out[i] = Some(o);
            *left -= 1;
            if *left == 0 {
                return;
            }
        }
    };
    let hint = lock(known).last.map(|(pid, _)| pid);
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

/// Every process under `init` (host pids) holding socket `inode`: a whole walk of the
/// sandbox's process tree and their descriptors.
pub(crate) fn holders(init: i32, inode: u64) -> Vec<i32> {
    let want = socket_link(inode);
    tree(init)
        .into_iter()
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    std::fs::read_link(fd.path()).is_ok_and(|t| t.as_os_str() == want.as_str())
                })
            })
        })
        .collect()
}

/// The first `max` bytes (or so) of a file under `/proc`, in page-sized reads. `std::fs::read`
/// asks for the size first (a `statx`; procfs says 0) and then reads in growing steps from 32
/// bytes: 5–6 reads and a `statx` per file where this takes two reads, for every flow's
/// lookup, on the same two cores as the flow itself.
fn read_proc(path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = File::open(path)?;
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

/// The file's bytes from its start, as many as fit in `buf`: positioned reads, so an open
/// `/proc/PID/cmdline` reads the command line as it is now (procfs fills a read as far as the
/// arguments go, so a short read is their end). Empty when it cannot be read.
fn read_at_most<'a>(f: &File, buf: &'a mut [u8]) -> &'a [u8] {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) if n + k < buf.len() => {
                n += k;
                break;
            }
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return &[],
        }
    }
    &buf[..n]
}

/// A command line as events show it: the arguments joined by spaces, cut at
/// [`CMDLINE_CHARS`] characters.
fn join_args(raw: &[u8]) -> String {
    let mut cmdline: String = String::from_utf8_lossy(raw)
        .split('\0')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if let Some((i, _)) = cmdline.char_indices().nth(CMDLINE_CHARS) {
        cmdline.truncate(i);
    }
    cmdline
}

/// The pid as the sandbox sees it, of the process whose `/proc` directory is `dir`: the last
/// entry of its `NSpid`.
pub(crate) fn ns_pid(dir: &Path) -> Option<i64> {
    let status = read_proc(&dir.join("status"), 16 << 10).ok()?;
    String::from_utf8_lossy(&status)
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|v| v.split_whitespace().last()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn finds_the_holder_of_a_socket_in_a_process_tree() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&l);
        let inode = ino(fd);
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
        use std::os::fd::AsRawFd;
        let me = std::process::id() as i32;
        let want = [ino(a.as_raw_fd()), u64::MAX, ino(b.as_raw_fd())];
        // A wrong hint (init, which is not this process) and none: the same answers.
        for hint in [Some(1), None, Some(me)] {
            let known = Mutex::new(Known {
                last: hint.map(|h| (h, 0)),
                ..Known::default()
            });
            let got = find_all(me, &want, &known, &same());
            assert_eq!(got.len(), 3);
            assert!(
                got[0]
                    .as_ref()
                    .is_some_and(|o| o.pid == i64::from(me) && o.cmdline.contains("cordon_net")),
                "{got:?}"
            );
            assert!(got[1].is_none(), "{got:?}");
            assert_eq!(
                got[2].as_ref().map(|o| o.pid),
                Some(i64::from(me)),
                "{got:?}"
            );
            // The last holder found is remembered with the descriptor it held it at: the walk
            // goes up the descriptor table, so that is the higher of the two. (Other tests'
            // threads open and close descriptors meanwhile, so `b` may get the lower one.)
            let last = lock(&known).last;
            let at = a.as_raw_fd().max(b.as_raw_fd()) as u32;
            assert_eq!(last, Some((me, at)), "{hint:?}");
        }
    }

    /// Leaves a command line as it is.
    pub(super) fn same() -> Redact {
        Arc::new(str::to_string)
    }

    /// The inode of this process's descriptor `fd`.
    fn ino(fd: i32) -> u64 {
        std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .unwrap()
            .ino()
    }

    // What is kept of a process follows it: a new command line after it execs (the same
    // sandbox pid), nothing once it is gone, and secrets redacted either way.
    #[test]
    fn a_kept_description_follows_exec_and_ends_with_the_process() {
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "read _; exec sh -c 'sleep 30' ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
            ])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let redact: Redact = Arc::new(|t: &str| t.replace("ghp_", "‹token›"));
        let mut known = Known::default();
        let describe_until = |known: &mut Known, start: &str| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let o = known.describe(pid, &redact);
                if o.cmdline.starts_with(start) || std::time::Instant::now() > deadline {
                    break o;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let first = describe_until(&mut known, "sh -c read _;");
        assert!(first.cmdline.starts_with("sh -c read _;"), "{first:?}");
        assert!(first.cmdline.contains("‹token›") && !first.cmdline.contains("ghp_"));
        assert!(known.procs.contains_key(&pid), "kept while it lives");
        assert_eq!(known.describe(pid, &redact), first);
        // Let it exec.
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let after = describe_until(&mut known, "sh -c sleep");
        assert_eq!(
            after.cmdline,
            "sh -c sleep 30 ‹token›0123456789abcdefghijklmnopqrstuvwxyzAB"
        );
        assert_eq!(after.pid, first.pid, "an exec keeps the pid");
        child.kill().unwrap();
        child.wait().unwrap();
        let gone = known.describe(pid, &redact);
        assert!(
            gone.cmdline.is_empty(),
            "nothing is said of a process that is gone: {gone:?}"
        );
        assert!(!known.procs.contains_key(&pid));
    }

    // The quick path answers when the socket is at the descriptor where the last one was
    // found, and leaves every other case (with the inode it learned) to the thread.
    #[test]
    fn the_quick_path_answers_only_at_the_last_holders_descriptor() {
        use std::os::fd::AsRawFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (a, b) = (
            std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap(),
            std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap(),
        );
        let (ia, ib) = (ino(a.as_raw_fd()), ino(b.as_raw_fd()));
        // Stands in for sock_diag (tested with the kernel in cordon-sandbox): the inode
        // of whichever stream's local address is asked.
        let (la, lb) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let sockets: SocketLookup = Arc::new(move |local, _remote| {
            let local = std::net::SocketAddr::V4(local);
            (local == la).then_some(ia).or((local == lb).then_some(ib))
        });
        let me = std::process::id() as i32;
        let lookups = Lookups::start(me, sockets, same()).unwrap();
        let v4 = |s: std::net::SocketAddr| match s {
            std::net::SocketAddr::V4(a) => a,
            _ => unreachable!(),
        };
        let remote = v4(l.local_addr().unwrap());
        let nobody = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 9);
        assert!(matches!(lookups.quick(nobody, remote), Quick::Unknown));
        // Nothing found yet: the thread finds a's holder, and remembers where.
        assert!(matches!(lookups.quick(v4(la), remote), Quick::Inode(i) if i == ia));
        let slot = Arc::new(OwnerSlot::new());
        lookups.ask(Request {
            local: v4(la),
            remote,
            inode: Some(ia),
            slot: slot.clone(),
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(slot.settled(Duration::from_secs(10)));
        assert_eq!(slot.get().map(|o| o.pid), Some(i64::from(me)));
        match lookups.quick(v4(la), remote) {
            Quick::Found(o) => assert!(o.pid == i64::from(me) && o.cmdline.contains("cordon_net")),
            _ => panic!("a's socket is where the last one was found"),
        }
        // b's socket is at another descriptor: left to the thread, with its inode.
        assert!(matches!(lookups.quick(v4(lb), remote), Quick::Inode(i) if i == ib));
    }
}
