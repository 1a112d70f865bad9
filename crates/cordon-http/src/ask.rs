//! Asking a person: `ask` decisions hold the request while the approval broker (the same one
//! `cordon approve` talks to) waits for an answer; a timeout denies. "Always for this
//! session" answers are remembered for the rule *and* the method and host asked about, so one
//! "always" for an unmatched request never opens every host. At most a few questions wait at
//! once: a flood of them is denied rather than shown.

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use cordon_approval::{Answer, Broker};
use tokio::sync::oneshot;

struct Pending {
    what: String,
    rule: String,
    scope: String,
    reply: oneshot::Sender<Answer>,
}

/// Questions waiting at once; more are denied without asking.
const MAX_PENDING: usize = 16;

/// A broker on its own thread, answering the HTTP layer's questions.
#[derive(Debug)]
pub struct Asker {
    tx: mpsc::Sender<Pending>,
    socket: std::path::PathBuf,
}

impl Asker {
    /// Binds the broker for `session` in `dir` (the directory no sandbox sees) and starts its
    /// thread; questions time out (denied) after `timeout`.
    pub fn start(dir: &Path, session: &str, timeout: Duration) -> Result<Self, String> {
        let mut broker = Broker::bind(dir, session).map_err(|e| e.to_string())?;
        let socket = broker.path().to_path_buf();
        let (tx, rx) = mpsc::channel::<Pending>();
        std::thread::Builder::new()
            .name("cordon-http-ask".into())
            .spawn(move || {
                let mut waiting: HashMap<u64, (String, oneshot::Sender<Answer>)> = HashMap::new();
                let mut remembered: HashMap<String, bool> = HashMap::new();
                loop {
                    // New questions (or the layer went away: stop once nothing waits).
                    match rx.recv_timeout(Duration::from_millis(50)) {
                        Ok(p) => {
                            if let Some(allow) = remembered.get(&p.scope) {
                                let _ = p.reply.send(Answer {
                                    allow: *allow,
                                    remember: true,
                                    timed_out: false,
                                });
                            } else if waiting.len() >= MAX_PENDING {
                                let _ = p.reply.send(Answer {
                                    allow: false,
                                    remember: false,
                                    timed_out: false,
                                });
                            } else {
                                cordon_approval::desktop_notification(&p.what);
                                let id = broker.ask("http", &p.what, &p.rule, timeout);
                                waiting.insert(id, (p.scope, p.reply));
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) if waiting.is_empty() => return,
                        Err(mpsc::RecvTimeoutError::Disconnected) => {}
                    }
                    // A client that gave up takes its question with it.
                    let gone: Vec<u64> = waiting
                        .iter()
                        .filter(|(_, (_, r))| r.is_closed())
                        .map(|(id, _)| *id)
                        .collect();
                    for id in gone {
                        broker.withdraw(id);
                        waiting.remove(&id);
                    }
                    for (id, answer) in broker.serve().into_iter().chain(broker.expire()) {
                        if let Some((scope, reply)) = waiting.remove(&id) {
                            if answer.remember && !answer.timed_out {
                                remembered.insert(scope, answer.allow);
                            }
                            let _ = reply.send(answer);
                        }
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(Self { tx, socket })
    }

    /// The broker's socket (what `cordon approve` connects to).
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Holds until a person answers (or the timeout denies). `what` is shown to them; an
    /// "always" answer covers later questions with the same `scope`.
    pub async fn ask(&self, what: String, rule: String, scope: String) -> Answer {
        let (reply, rx) = oneshot::channel();
        if self
            .tx
            .send(Pending {
                what,
                rule,
                scope,
                reply,
            })
            .is_err()
        {
            return Answer {
                allow: false,
                remember: false,
                timed_out: true,
            };
        }
        rx.await.unwrap_or(Answer {
            allow: false,
            remember: false,
            timed_out: true,
        })
    }
}
