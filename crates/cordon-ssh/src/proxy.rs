//! The proxy's socket: a unix socket in a private host directory, which the sandbox sees
//! bound at one path inside; each client connection gets its own connection to the user's
//! agent and its own [`Session`], and only what [`Session::decide`] passes reaches the agent.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use cordon_events::{Action, Layer, NewEvent};

use crate::filter::{Decision, Refusal, Session, Trust, msg};
use crate::wire::frame;

/// Where the proxy reports what it refused and signed.
pub type Emit = Arc<dyn Fn(NewEvent) + Send + Sync>;

/// OpenSSH's own limit on an agent message (`AGENT_MAX_LEN`).
const MAX_MESSAGE: usize = 256 * 1024;
/// Connections served at once: each has a host-side thread, which the sandbox must not be
/// able to multiply without bound. ssh and git use one or two.
const MAX_CLIENTS: usize = 64;

/// Why the proxy cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProxyError {
    let what = what.into();
    move |source| ProxyError::Io { what, source }
}

/// A running proxy. Dropping it stops taking connections and removes its socket.
pub struct AgentProxy {
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    _dir: tempfile::TempDir,
}

impl AgentProxy {
    /// Listens on a new socket in a private directory under `runtime_dir`, forwarding what
    /// `trust` lets through to the agent at `upstream`.
    pub fn start(
        runtime_dir: &Path,
        upstream: &Path,
        trust: Trust,
        emit: Emit,
    ) -> Result<AgentProxy, ProxyError> {
        let dir = tempfile::Builder::new()
            .prefix("cordon-ssh-")
            .tempdir_in(runtime_dir)
            .map_err(io(format!(
                "a private directory in {}",
                runtime_dir.display()
            )))?;
        let socket = dir.path().join("agent.sock");
        let listener =
            UnixListener::bind(&socket).map_err(io(format!("listen on {}", socket.display())))?;
        // The directory (0700) keeps other host users out; inside, the sandbox's user may be
        // mapped to another uid than the socket's owner.
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666))
            .map_err(io(format!("chmod {}", socket.display())))?;
        let stop = Arc::new(AtomicBool::new(false));
        let trust = Arc::new(trust);
        let upstream = upstream.to_path_buf();
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("ssh-agent-proxy".into())
            .spawn(move || {
                let active = Arc::new(AtomicUsize::new(0));
                for client in listener.incoming() {
                    if stopped.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    if active.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
                        active.fetch_sub(1, Ordering::AcqRel);
                        emit(
                            NewEvent::new(
                                Layer::Credentials,
                                Action::Deny,
                                format!(
                                    "ssh agent: refused a connection: {MAX_CLIENTS} are open already"
                                ),
                            )
                            .rule("ssh.agent")
                            .detail("request", "connect")
                            .detail("host", ""),
                        );
                        continue;
                    }
                    let (trust, emit, upstream) = (trust.clone(), emit.clone(), upstream.clone());
                    let done = active.clone();
                    let spawned = std::thread::Builder::new()
                        .name("ssh-agent-client".into())
                        .spawn(move || {
                            serve(client, &upstream, &trust, &emit);
                            done.fetch_sub(1, Ordering::AcqRel);
                        });
                    if spawned.is_err() {
                        active.fetch_sub(1, Ordering::AcqRel);
                    }
                }
            })
            .map_err(io("start the proxy's thread"))?;
        Ok(AgentProxy {
            socket,
            stop,
            _dir: dir,
        })
    }

    /// The host path of the socket (bound into the sandbox).
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for AgentProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so it sees the flag.
        let _ = UnixStream::connect(&self.socket);
    }
}

/// Reads one framed message (`type || body`); `None` at a clean end or on a bad frame.
fn read_message(s: &mut UnixStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let n = u32::from_be_bytes(len) as usize;
    if n == 0 || n > MAX_MESSAGE {
        return None;
    }
    let mut m = vec![0u8; n];
    s.read_exact(&mut m).ok()?;
    Some(m)
}

fn write_message(s: &mut UnixStream, m: &[u8]) -> std::io::Result<()> {
    s.write_all(&frame(m[0], &m[1..]))
}

fn refused_event(r: &Refusal) -> NewEvent {
    let to = if r.host.is_empty() {
        String::new()
    } else {
        format!(" for {}", r.host)
    };
    NewEvent::new(
        Layer::Credentials,
        Action::Deny,
        format!("ssh agent: refused {}{to}: {}", r.request, r.reason),
    )
    .rule("ssh.agent")
    .detail("request", r.request.clone())
    .detail("host", r.host.clone())
}

/// Serves one client until it hangs up.
fn serve(mut client: UnixStream, upstream: &Path, trust: &Trust, emit: &Emit) {
    let mut session = Session::default();
    let mut agent: Option<UnixStream> = None;
    while let Some(m) = read_message(&mut client) {
        let decision = session.decide(&m, trust);
        if let Decision::Refuse(r) = &decision {
            emit(refused_event(r));
            if write_message(&mut client, &[msg::FAILURE]).is_err() {
                return;
            }
            continue;
        }
        if agent.is_none() {
            match UnixStream::connect(upstream) {
                Ok(a) => agent = Some(a),
                Err(e) => {
                    emit(
                        NewEvent::new(
                            Layer::Credentials,
                            Action::Error,
                            format!("ssh agent: cannot reach {}: {e}", upstream.display()),
                        )
                        .rule("ssh.agent"),
                    );
                    let _ = write_message(&mut client, &[msg::FAILURE]);
                    return;
                }
            }
        }
        let Some(a) = agent.as_mut() else { return };
        let Some(reply) = write_message(a, &m).ok().and_then(|()| read_message(a)) else {
            return;
        };
        if let Decision::Sign { host, rule } = &decision
            && reply[0] != msg::FAILURE
        {
            emit(
                NewEvent::new(
                    Layer::Credentials,
                    Action::Allow,
                    format!("ssh agent: signed a login to {host}"),
                )
                .rule(rule.clone())
                .detail("host", host.to_string()),
            );
        }
        if write_message(&mut client, &reply).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::HostPolicy;
    use crate::known_hosts::{Host, KnownHosts};
    use std::sync::Mutex;

    struct Nothing;
    impl HostPolicy for Nothing {
        fn allows(&self, _: &Host) -> Result<String, String> {
            Err("no".into())
        }
        fn candidates(&self) -> Vec<Host> {
            Vec::new()
        }
    }

    /// A stand-in agent that answers every message with SUCCESS and records what it got.
    fn fake_agent(dir: &Path) -> (PathBuf, Arc<Mutex<Vec<Vec<u8>>>>) {
        let path = dir.join("real.sock");
        let l = UnixListener::bind(&path).unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                let g = g.clone();
                std::thread::spawn(move || {
                    while let Some(m) = read_message(&mut c) {
                        g.lock().unwrap().push(m);
                        let _ = write_message(&mut c, &[6]);
                    }
                });
            }
        });
        (path, got)
    }

    #[test]
    fn only_what_the_filter_passes_reaches_the_agent() {
        let t = tempfile::tempdir().unwrap();
        let (real, got) = fake_agent(t.path());
        let events = Arc::new(Mutex::new(Vec::<NewEvent>::new()));
        let ev = events.clone();
        let trust = Trust {
            known_hosts: KnownHosts::default(),
            policy: Box::new(Nothing),
        };
        let p = AgentProxy::start(
            t.path(),
            &real,
            trust,
            Arc::new(move |e| ev.lock().unwrap().push(e)),
        )
        .unwrap();
        let mut c = UnixStream::connect(p.socket()).unwrap();
        write_message(&mut c, &[msg::REQUEST_IDENTITIES]).unwrap();
        assert_eq!(read_message(&mut c).unwrap(), [6]);
        write_message(&mut c, &[msg::REMOVE_ALL_IDENTITIES]).unwrap();
        assert_eq!(read_message(&mut c).unwrap(), [msg::FAILURE]);
        assert_eq!(*got.lock().unwrap(), vec![vec![msg::REQUEST_IDENTITIES]]);
        let e = events.lock().unwrap();
        assert_eq!(e.len(), 1);
        assert!(e[0].reason.contains("remove all identities"), "{:?}", e[0]);
        drop(e);
        // Past MAX_CLIENTS open connections, more are closed at once; closing one frees a place.
        let mut open: Vec<UnixStream> = (0..MAX_CLIENTS - 1)
            .map(|_| UnixStream::connect(p.socket()).unwrap())
            .collect();
        for s in &mut open {
            write_message(s, &[msg::REQUEST_IDENTITIES]).unwrap();
            assert_eq!(read_message(s).unwrap(), [6]);
        }
        let mut extra = UnixStream::connect(p.socket()).unwrap();
        let _ = write_message(&mut extra, &[msg::REQUEST_IDENTITIES]);
        assert!(
            read_message(&mut extra).is_none(),
            "one too many was served"
        );
        drop(open.pop());
        let start = std::time::Instant::now();
        loop {
            let mut again = UnixStream::connect(p.socket()).unwrap();
            let _ = write_message(&mut again, &[msg::REQUEST_IDENTITIES]);
            if read_message(&mut again).is_some() {
                break;
            }
            assert!(
                start.elapsed().as_secs() < 5,
                "the freed place never came back"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // A frame over the limit ends the connection rather than being buffered.
        c.write_all(&(MAX_MESSAGE as u32 + 1).to_be_bytes())
            .unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(c.read(&mut buf).unwrap(), 0);
    }
}
