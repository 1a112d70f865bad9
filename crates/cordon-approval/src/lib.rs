//! cordon-approval: the approval broker — questions a layer cannot answer alone ("may this
//! `git push` run?") are held here until a person answers with `cordon approve` in another
//! terminal, or the timeout denies them.
//!
//! Host side only. The broker listens on a unix socket in a directory only the user can open
//! (mode 0700, socket 0600) which the sandbox never sees (cordon masks it), so the agent cannot
//! answer its own questions. [`Broker`] is the socket itself, non-blocking and thread-free;
//! [`Approvals`] runs one session's broker on a thread of its own and is what the layers
//! share — the exec supervisor through a [`Mailbox`] it polls, the HTTP layer through
//! callbacks — so a session has one socket and one list in `cordon approve`.
//! Because a sandbox runs with the user's uid, file modes are not the wall: the directory is
//! masked in every sandbox, and the broker drops any peer outside its own user namespace
//! (`SO_PEERCRED`; the `peer` module holds this crate's only `unsafe`).
//!
//! Wire protocol: one JSON request line per connection, one JSON reply line.
//! `{"op":"list"}` → `{"ok":true,"pending":[Question…]}` (each with its [`Subject`] when the
//! layer gave one);
//! `{"op":"answer","id":3,"allow":true,"remember":false}` → `{"ok":true}`.
//!
//! ```no_run
//! # fn demo() -> Result<(), cordon_approval::ApprovalError> {
//! use std::time::Duration;
//! let dir = std::path::Path::new("/run/user/1000/cordon");
//! let mut broker = cordon_approval::Broker::bind(dir, "SESSION")?;
//! let id = broker.ask("exec", "git push origin main", "cordon.toml:3", Duration::from_secs(60));
//! // … poll broker.as_raw_fd(), then:
//! for (qid, answer) in broker.serve() { assert_eq!(qid, id); let _ = answer; }
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

mod peer;
mod service;

pub use service::{Approvals, Mailbox};

/// Why the broker could not be set up or reached.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Protocol(String),
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ApprovalError {
    let path = path.to_path_buf();
    move |source| ApprovalError::Io { what, path, source }
}

/// A question waiting for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    pub id: u64,
    /// The layer asking, e.g. `exec` or `http`.
    pub layer: String,
    /// What would happen, e.g. `git push origin main`.
    pub what: String,
    /// The rule that asked.
    pub rule: String,
    /// Seconds left before it is denied.
    pub seconds_left: u64,
    /// What it is about, as rules match it: what a rule allowing it again is made of. `None`
    /// where no rule can answer it again (a secret found in a request) and from an older
    /// broker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Subject>,
}

/// What a question is about, in the terms a policy rule matches (not the words shown, which
/// are escaped and redacted): `cordon approve --always` and the dashboard write the rule that
/// allows it again from this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Subject {
    /// An exec: the program's name as exec rules match it, its arguments, and the pattern of
    /// the rule that asked.
    Exec {
        program: String,
        args: Vec<String>,
        pattern: String,
    },
    /// An HTTP request: its method, the host and port it was made to, and its path without
    /// the query (a segment that looks like a token is `*`, so no secret is carried on).
    Http {
        method: String,
        host: String,
        port: u16,
        path: String,
    },
    /// A connection to a host and port.
    Network { host: String, port: u16 },
}

impl Subject {
    /// An exec's command line as exec rules match it: the program and its arguments joined
    /// by single spaces.
    pub fn command_line(program: &str, args: &[String]) -> String {
        let mut line = program.to_string();
        for a in args {
            line.push(' ');
            line.push_str(a);
        }
        line
    }
}

/// A person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub allow: bool,
    /// Apply to every later question from the same rule in this session.
    pub remember: bool,
    /// The answer came from the timeout, not a person.
    #[serde(default)]
    pub timed_out: bool,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    List,
    Answer {
        id: u64,
        allow: bool,
        remember: bool,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct Reply {
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pending: Vec<Question>,
}

struct Held {
    q: Question,
    deadline: Instant,
}

/// The broker of one session.
pub struct Broker {
    listener: UnixListener,
    path: PathBuf,
    next: u64,
    held: BTreeMap<u64, Held>,
    answered: Vec<(u64, Answer)>,
}

/// The socket path of `session` in `dir`.
pub fn socket_path(dir: &Path, session: &str) -> PathBuf {
    dir.join(format!("{session}.sock"))
}

/// Where brokers live: `$XDG_RUNTIME_DIR/cordon`, else `$XDG_STATE_HOME/cordon/run`, else
/// `~/.local/state/cordon/run`.
pub fn default_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .map(|d| d.join("cordon"))
        .or_else(|| cordon_events::state_dir().map(|d| d.join("run")))
}

/// Create the brokers' directory (0700) or check an existing one: a real directory (not a
/// symlink), owned by us, closed to others.
pub fn ensure_dir(dir: &Path) -> Result<(), ApprovalError> {
    use std::os::unix::fs::MetadataExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io("create", dir))?;
    let meta = std::fs::symlink_metadata(dir).map_err(io("inspect", dir))?;
    let own = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .map_err(io("inspect", Path::new("/proc/self")))?;
    if !meta.is_dir() || meta.uid() != own {
        return Err(ApprovalError::Protocol(format!(
            "{} is not a directory owned by uid {own}; remove it and retry",
            dir.display()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io("restrict", dir))?;
    }
    Ok(())
}

impl Broker {
    /// Listen for `cordon approve` in `dir` (see [`ensure_dir`]).
    pub fn bind(dir: &Path, session: &str) -> Result<Broker, ApprovalError> {
        ensure_dir(dir)?;
        let path = socket_path(dir, session);
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).map_err(io("listen on", &path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(io("restrict", &path))?;
        listener
            .set_nonblocking(true)
            .map_err(io("configure", &path))?;
        Ok(Broker {
            listener,
            path,
            next: 1,
            held: BTreeMap::new(),
            answered: Vec::new(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hold a question; returns its id. The answer comes out of [`Broker::serve`] or
    /// [`Broker::expire`].
    pub fn ask(&mut self, layer: &str, what: &str, rule: &str, timeout: Duration) -> u64 {
        let id = self.next;
        let q = Question {
            id,
            layer: layer.into(),
            what: what.into(),
            rule: rule.into(),
            seconds_left: timeout.as_secs(),
            subject: None,
        };
        self.hold(q, timeout);
        id
    }

    /// Hold a question under the id the caller chose (unique in this session); its
    /// `seconds_left` is set from `timeout`.
    pub fn hold(&mut self, mut q: Question, timeout: Duration) {
        let id = q.id;
        self.next = self.next.max(id + 1);
        q.seconds_left = timeout.as_secs();
        self.held.insert(
            id,
            Held {
                q,
                deadline: Instant::now() + timeout,
            },
        );
    }

    /// Questions still waiting.
    pub fn pending(&self) -> Vec<Question> {
        let now = Instant::now();
        self.held
            .values()
            .map(|h| Question {
                seconds_left: h.deadline.saturating_duration_since(now).as_secs(),
                ..h.q.clone()
            })
            .collect()
    }

    /// Deny every question past its deadline.
    pub fn expire(&mut self) -> Vec<(u64, Answer)> {
        let now = Instant::now();
        let late: Vec<u64> = self
            .held
            .iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        late.into_iter()
            .map(|id| {
                self.held.remove(&id);
                (
                    id,
                    Answer {
                        allow: false,
                        remember: false,
                        timed_out: true,
                    },
                )
            })
            .collect()
    }

    /// When the next held question times out, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.held.values().map(|h| h.deadline).min()
    }

    /// A blocking twin of the listening socket, for a thread that waits on `accept` (it
    /// shares the socket's file: the broker's own [`Broker::serve`] then blocks too, so use one
    /// or the other).
    pub(crate) fn blocking_listener(&self) -> std::io::Result<UnixListener> {
        let l = self.listener.try_clone()?;
        l.set_nonblocking(false)?;
        Ok(l)
    }

    /// Answers one connection accepted elsewhere; returns the answers people gave.
    pub(crate) fn serve_one(&mut self, stream: UnixStream) -> Vec<(u64, Answer)> {
        let _ = self.handle(stream);
        std::mem::take(&mut self.answered)
    }

    /// Withdraw a question nobody needs answered any more (the asker went away).
    pub fn withdraw(&mut self, id: u64) {
        self.held.remove(&id);
    }

    /// Accept and answer every waiting connection; returns the answers people gave.
    pub fn serve(&mut self) -> Vec<(u64, Answer)> {
        while let Ok((stream, _)) = self.listener.accept() {
            let _ = self.handle(stream);
        }
        std::mem::take(&mut self.answered)
    }

    fn handle(&mut self, stream: UnixStream) -> std::io::Result<()> {
        // Only processes of our own user namespace may talk to us: a sandbox has the user's uid
        // but lives in a namespace of its own, and must never answer a question itself.
        if !peer::same_user_namespace(&stream) {
            return Ok(());
        }
        // A client that never writes must not stall the supervisor.
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        stream.set_write_timeout(Some(Duration::from_secs(1)))?;
        let mut line = String::new();
        BufReader::new(stream.try_clone()?)
            .take(64 * 1024)
            .read_line(&mut line)?;
        let reply = match serde_json::from_str::<Request>(&line) {
            Ok(Request::List) => Reply {
                ok: true,
                error: None,
                pending: self.pending(),
            },
            Ok(Request::Answer {
                id,
                allow,
                remember,
            }) => match self.held.remove(&id) {
                Some(_) => {
                    self.answered.push((
                        id,
                        Answer {
                            allow,
                            remember,
                            timed_out: false,
                        },
                    ));
                    Reply {
                        ok: true,
                        error: None,
                        pending: Vec::new(),
                    }
                }
                None => Reply {
                    ok: false,
                    error: Some(format!("no question {id} is waiting")),
                    pending: Vec::new(),
                },
            },
            Err(e) => Reply {
                ok: false,
                error: Some(format!("bad request: {e}")),
                pending: Vec::new(),
            },
        };
        let mut out = serde_json::to_string(&reply).unwrap_or_else(|_| "{\"ok\":false}".into());
        out.push('\n');
        (&stream).write_all(out.as_bytes())
    }
}

impl AsRawFd for Broker {
    fn as_raw_fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

use std::io::Read as _;

fn request(socket: &Path, req: &Request) -> Result<Reply, ApprovalError> {
    let stream = UnixStream::connect(socket).map_err(io("connect to", socket))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io("configure", socket))?;
    let mut line =
        serde_json::to_string(req).map_err(|e| ApprovalError::Protocol(e.to_string()))?;
    line.push('\n');
    (&stream)
        .write_all(line.as_bytes())
        .map_err(io("write to", socket))?;
    let mut resp = String::new();
    BufReader::new(&stream)
        .read_line(&mut resp)
        .map_err(io("read from", socket))?;
    let reply: Reply = serde_json::from_str(&resp)
        .map_err(|e| ApprovalError::Protocol(format!("bad reply: {e}")))?;
    if !reply.ok {
        return Err(ApprovalError::Protocol(
            reply.error.unwrap_or_else(|| "refused".into()),
        ));
    }
    Ok(reply)
}

/// Client: the questions waiting at one broker socket.
pub fn list(socket: &Path) -> Result<Vec<Question>, ApprovalError> {
    request(socket, &Request::List).map(|r| r.pending)
}

/// Client: answer question `id` at one broker socket.
pub fn answer(socket: &Path, id: u64, allow: bool, remember: bool) -> Result<(), ApprovalError> {
    request(
        socket,
        &Request::Answer {
            id,
            allow,
            remember,
        },
    )
    .map(drop)
}

/// Client: every broker socket in `dir` (one per running session).
pub fn sockets(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A desktop notification where `notify-send` exists and a display is set; never drawn over
/// the agent's terminal. Fire and forget.
pub fn desktop_notification(line: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("notify-send").is_file()))
        .unwrap_or(false);
    if found
        && std::env::var_os("DISPLAY")
            .or_else(|| std::env::var_os("WAYLAND_DISPLAY"))
            .is_some()
    {
        let _ = std::process::Command::new("notify-send")
            .arg("cordon: approval needed")
            .arg(format!("{line}\nRun `cordon approve` to answer."))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map(|mut c| std::thread::spawn(move || c.wait()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_answer_and_timeout() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("run");
        let mut b = Broker::bind(&dir, "s1").unwrap();
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(
            std::fs::metadata(b.path()).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let a = b.ask("exec", "git push origin", "test:1", Duration::from_secs(60));
        let short = b.ask("exec", "npm publish", "test:2", Duration::from_millis(10));
        let sock = b.path().to_path_buf();
        let client = std::thread::spawn(move || {
            let qs = list(&sock).unwrap();
            assert!(
                qs.iter()
                    .any(|q| q.what == "git push origin" && q.rule == "test:1")
            );
            answer(&sock, a, true, true).unwrap();
            assert!(
                answer(&sock, 999, true, false).is_err(),
                "unknown ids are refused"
            );
        });
        let mut got = Vec::new();
        let end = Instant::now() + Duration::from_secs(5);
        while !client.is_finished() && Instant::now() < end {
            got.extend(b.serve());
            std::thread::sleep(Duration::from_millis(5));
        }
        client.join().unwrap();
        assert_eq!(
            got,
            vec![(
                a,
                Answer {
                    allow: true,
                    remember: true,
                    timed_out: false
                }
            )]
        );
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            b.expire(),
            vec![(
                short,
                Answer {
                    allow: false,
                    remember: false,
                    timed_out: true
                }
            )]
        );
        assert!(b.pending().is_empty());
        assert_eq!(sockets(&dir), vec![b.path().to_path_buf()]);
    }

    #[test]
    fn a_question_from_an_older_broker_has_no_subject() {
        let old = r#"{"id":1,"layer":"exec","what":"git push","rule":"r","seconds_left":9}"#;
        let q: Question = serde_json::from_str(old).unwrap();
        assert_eq!(q.subject, None);
        // Without one, nothing extra is sent; with one, its kind says which.
        assert_eq!(serde_json::to_string(&q).unwrap(), old);
        let q = Question {
            subject: Some(Subject::Network {
                host: "db.example.com".into(),
                port: 5432,
            }),
            ..q
        };
        let text = serde_json::to_string(&q).unwrap();
        assert!(
            text.ends_with(r#""subject":{"kind":"network","host":"db.example.com","port":5432}}"#),
            "{text}"
        );
    }

    #[test]
    fn garbage_requests_get_an_error_not_a_panic() {
        let t = tempfile::tempdir().unwrap();
        let mut b = Broker::bind(t.path(), "s2").unwrap();
        let sock = b.path().to_path_buf();
        let client = std::thread::spawn(move || {
            let s = UnixStream::connect(&sock).unwrap();
            (&s).write_all(b"{not json\n").unwrap();
            let mut resp = String::new();
            BufReader::new(&s).read_line(&mut resp).unwrap();
            resp
        });
        let end = Instant::now() + Duration::from_secs(5);
        while !client.is_finished() && Instant::now() < end {
            b.serve();
            std::thread::sleep(Duration::from_millis(5));
        }
        let resp = client.join().unwrap();
        assert!(
            resp.contains("\"ok\":false") && resp.contains("bad request"),
            "{resp}"
        );
    }
}
