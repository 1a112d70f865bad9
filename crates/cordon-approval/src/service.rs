//! One session's broker on a thread of its own, shared by every layer that asks: the exec
//! supervisor and the HTTP layer put their questions to the same [`Approvals`], so a session
//! has one socket and `cordon approve` one list.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use crate::{Answer, ApprovalError, Broker, Question, Subject};

type Reply = Box<dyn FnOnce(u64, Answer) + Send>;

enum Msg {
    Ask {
        q: Question,
        timeout: Duration,
        reply: Reply,
    },
    Withdraw(u64),
    /// `cordon approve` connected (from the accepting thread).
    Conn(UnixStream),
    /// The last handle is gone: no more questions can come.
    Closed,
}

/// Says [`Msg::Closed`] when the last clone of an [`Approvals`] goes (the accepting thread
/// keeps the channel itself open).
struct Alive(mpsc::Sender<Msg>);

impl Drop for Alive {
    fn drop(&mut self) {
        let _ = self.0.send(Msg::Closed);
    }
}

/// The answer nobody gave: the broker is gone, so the question is denied.
const GONE: Answer = Answer {
    allow: false,
    remember: false,
    timed_out: true,
};

/// A session's approval broker, running on its own thread until every handle is dropped and
/// no question waits. Clone it to share it between layers.
#[derive(Clone)]
pub struct Approvals {
    tx: mpsc::Sender<Msg>,
    socket: Arc<PathBuf>,
    next: Arc<AtomicU64>,
    _alive: Arc<Alive>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl Approvals {
    /// Binds the broker for `session` in `dir` (see [`crate::ensure_dir`]) and starts its
    /// thread.
    pub fn start(dir: &Path, session: &str) -> Result<Self, ApprovalError> {
        let mut broker = Broker::bind(dir, session)?;
        let socket = Arc::new(broker.path().to_path_buf());
        let (tx, rx) = mpsc::channel::<Msg>();
        let err = |source| ApprovalError::Io {
            what: "start the broker for",
            path: socket.to_path_buf(),
            source,
        };
        // Connections are waited for on a thread of their own, blocked in accept, so the
        // broker's thread sleeps until a message, a connection or the next deadline: no tick
        // between a person's answer and the held request going on.
        let listener = broker.blocking_listener().map_err(err)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (conns, stopped) = (tx.clone(), stop.clone());
        std::thread::Builder::new()
            .name("cordon-approvals-accept".into())
            .spawn(move || accept(&listener, &conns, &stopped))
            .map_err(err)?;
        std::thread::Builder::new()
            .name("cordon-approvals".into())
            .spawn(move || serve(&mut broker, &rx, &stop))
            .map_err(err)?;
        Ok(Self {
            tx: tx.clone(),
            socket,
            next: Arc::new(AtomicU64::new(1)),
            _alive: Arc::new(Alive(tx)),
        })
    }

    /// The socket `cordon approve` connects to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The session this broker serves, as `cordon approve` names it (`SESSION#N`).
    pub fn session(&self) -> String {
        self.socket
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Puts a question to a person; `reply` gets its id and the answer (a person's, or the
    /// timeout's denial). Returns the id at once. `subject` is what it is about as a rule
    /// would match it, when a rule could answer it again (see [`Subject`]).
    pub fn ask(
        &self,
        layer: &str,
        what: &str,
        rule: &str,
        subject: Option<Subject>,
        timeout: Duration,
        reply: impl FnOnce(u64, Answer) + Send + 'static,
    ) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let q = Question {
            id,
            layer: layer.into(),
            what: what.into(),
            rule: rule.into(),
            seconds_left: timeout.as_secs(),
            subject,
        };
        let msg = Msg::Ask {
            q,
            timeout,
            reply: Box::new(reply),
        };
        if let Err(mpsc::SendError(Msg::Ask { reply, .. })) = self.tx.send(msg) {
            reply(id, GONE);
        }
        id
    }

    /// Takes back a question nobody needs answered any more (its asker went away).
    pub fn withdraw(&self, id: u64) {
        let _ = self.tx.send(Msg::Withdraw(id));
    }
}

/// Hands each connection to the broker's thread until it says stop.
fn accept(
    listener: &std::os::unix::net::UnixListener,
    conns: &mpsc::Sender<Msg>,
    stop: &AtomicBool,
) {
    loop {
        let conn = listener.accept();
        if stop.load(Ordering::SeqCst) {
            return;
        }
        match conn {
            Ok((stream, _)) => {
                if conns.send(Msg::Conn(stream)).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // Out of descriptors or memory: back off rather than spin.
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn serve(broker: &mut Broker, rx: &mpsc::Receiver<Msg>, stop: &AtomicBool) {
    let mut waiting: HashMap<u64, Reply> = HashMap::new();
    let mut open = true;
    loop {
        if !open && waiting.is_empty() {
            // Every handle is gone and nothing waits: the socket goes with the broker, and
            // the accepting thread is woken to see it.
            stop.store(true, Ordering::SeqCst);
            let _ = UnixStream::connect(broker.path());
            return;
        }
        let deadline = broker.next_deadline();
        let msg = match deadline {
            Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                Ok(m) => Some(m),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // Nothing can arrive any more; the waiting ones still time out.
                    open = false;
                    std::thread::sleep(d.saturating_duration_since(Instant::now()));
                    None
                }
            },
            None => match rx.recv() {
                Ok(m) => Some(m),
                Err(_) => {
                    open = false;
                    None
                }
            },
        };
        let mut answers = Vec::new();
        match msg {
            Some(Msg::Ask { q, timeout, reply }) => {
                waiting.insert(q.id, reply);
                broker.hold(q, timeout);
            }
            Some(Msg::Withdraw(id)) => {
                broker.withdraw(id);
                waiting.remove(&id);
            }
            Some(Msg::Conn(stream)) => answers = broker.serve_one(stream),
            Some(Msg::Closed) => open = false,
            None => {}
        }
        for (id, answer) in answers.into_iter().chain(broker.expire()) {
            if let Some(reply) = waiting.remove(&id) {
                reply(id, answer);
            }
        }
    }
}

/// Where answers land for a poll loop: [`Mailbox::sender`] is the `reply` to give
/// [`Approvals::ask`]; the mailbox's descriptor becomes readable when an answer arrives, and
/// [`Mailbox::take`] collects them.
#[derive(Debug)]
pub struct Mailbox {
    tx: mpsc::Sender<(u64, Answer)>,
    rx: mpsc::Receiver<(u64, Answer)>,
    wake: Arc<UnixStream>,
    woken: UnixStream,
}

impl Mailbox {
    /// An empty mailbox.
    pub fn new() -> std::io::Result<Self> {
        let (wake, woken) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        woken.set_nonblocking(true)?;
        let (tx, rx) = mpsc::channel();
        Ok(Self {
            tx,
            rx,
            wake: Arc::new(wake),
            woken,
        })
    }

    /// A reply that delivers here.
    pub fn sender(&self) -> impl FnOnce(u64, Answer) + Send + 'static {
        let (tx, wake) = (self.tx.clone(), self.wake.clone());
        move |id, answer| {
            if tx.send((id, answer)).is_ok() {
                // Full means a wake-up is already pending: enough.
                let _ = (&*wake).write(&[1]);
            }
        }
    }

    /// The answers that arrived since the last call.
    pub fn take(&self) -> Vec<(u64, Answer)> {
        let mut buf = [0u8; 64];
        while matches!((&self.woken).read(&mut buf), Ok(n) if n > 0) {}
        self.rx.try_iter().collect()
    }
}

impl AsRawFd for Mailbox {
    fn as_raw_fd(&self) -> RawFd {
        self.woken.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_broker_answers_both_kinds_of_asker() {
        let dir = tempfile::tempdir().unwrap();
        let approvals = Approvals::start(dir.path(), "s").unwrap();
        let mailbox = Mailbox::new().unwrap();
        let subject = Subject::Exec {
            program: "git".into(),
            args: vec!["push".into()],
            pattern: "git push *".into(),
        };
        let exec = approvals.ask(
            "exec",
            "git push",
            "r1",
            Some(subject.clone()),
            Duration::from_secs(30),
            mailbox.sender(),
        );
        let (tx, rx) = mpsc::channel();
        let http = approvals.ask(
            "http",
            "POST x",
            "r2",
            None,
            Duration::from_secs(30),
            move |id, a| {
                let _ = tx.send((id, a));
            },
        );
        assert_ne!(exec, http);
        // Both questions wait on the one socket.
        let mut listed = Vec::new();
        for _ in 0..100 {
            listed = crate::list(approvals.socket()).unwrap();
            if listed.len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut layers: Vec<_> = listed.iter().map(|q| q.layer.as_str()).collect();
        layers.sort_unstable();
        assert_eq!(layers, ["exec", "http"]);
        // The subject crosses the socket as the layer gave it, for `cordon approve --always`.
        let asked = listed.iter().find(|q| q.id == exec).unwrap();
        assert_eq!(asked.subject, Some(subject));
        assert_eq!(listed.iter().find(|q| q.id == http).unwrap().subject, None);
        crate::answer(approvals.socket(), exec, true, false).unwrap();
        crate::answer(approvals.socket(), http, false, true).unwrap();
        let (id, a) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!((id, a.allow, a.remember), (http, false, true));
        let mut got = Vec::new();
        for _ in 0..100 {
            got.extend(mailbox.take());
            if !got.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0, got[0].1.allow), (exec, true));
    }

    #[test]
    fn a_timeout_denies_and_the_socket_goes_with_the_last_handle() {
        let dir = tempfile::tempdir().unwrap();
        let approvals = Approvals::start(dir.path(), "t").unwrap();
        let socket = approvals.socket().to_path_buf();
        let (tx, rx) = mpsc::channel();
        approvals.ask(
            "exec",
            "x",
            "r",
            None,
            Duration::from_millis(100),
            move |_, a| {
                let _ = tx.send(a);
            },
        );
        drop(approvals);
        let a = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(!a.allow && a.timed_out);
        for _ in 0..100 {
            if !socket.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{} outlived its broker", socket.display());
    }
}
