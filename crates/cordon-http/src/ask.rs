//! Asking a person: `ask` decisions hold the request while the session's approval broker (the
//! one the exec layer shares, the one `cordon approve` talks to) waits for an answer; a
//! timeout denies. "Always for this session" answers are remembered for the rule *and* the
//! method and host asked about, so one "always" for an unmatched request never opens every
//! host. At most a few questions wait at once: a flood of them is denied rather than shown.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cordon_approval::{Answer, Approvals};
use tokio::sync::oneshot;

/// Questions waiting at once; more are denied without asking.
const MAX_PENDING: usize = 16;

const DENIED: Answer = Answer {
    allow: false,
    remember: false,
    timed_out: false,
};

/// The HTTP layer's side of the session's approval broker.
#[derive(Debug)]
pub struct Asker {
    approvals: Approvals,
    timeout: Duration,
    remembered: Mutex<HashMap<String, bool>>,
    waiting: AtomicUsize,
}

/// Takes a question back when the request that asked it goes away unanswered.
struct Withdraw<'a> {
    approvals: &'a Approvals,
    id: u64,
    armed: bool,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.approvals.withdraw(self.id);
        }
    }
}

/// Counts a waiting question for as long as it waits.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Asker {
    /// Asks through `approvals`; questions time out (denied) after `timeout`.
    pub fn new(approvals: Approvals, timeout: Duration) -> Self {
        Self {
            approvals,
            timeout,
            remembered: Mutex::new(HashMap::new()),
            waiting: AtomicUsize::new(0),
        }
    }

    /// The broker's socket (what `cordon approve` connects to).
    pub fn socket(&self) -> &std::path::Path {
        self.approvals.socket()
    }

    fn remembered(&self, scope: &str) -> Option<bool> {
        self.remembered
            .lock()
            .ok()
            .and_then(|m| m.get(scope).copied())
    }

    /// Holds until a person answers (or the timeout denies). `what` is shown to them; an
    /// "always" answer covers later questions with the same `scope`; `subject` is what a rule
    /// allowing it again would match, when one could.
    pub async fn ask(
        &self,
        what: String,
        rule: String,
        scope: String,
        subject: Option<cordon_approval::Subject>,
    ) -> Answer {
        if let Some(allow) = self.remembered(&scope) {
            return Answer {
                allow,
                remember: true,
                timed_out: false,
            };
        }
        if self.waiting.fetch_add(1, Ordering::Relaxed) >= MAX_PENDING {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            return DENIED;
        }
        let _waiting = Waiting(&self.waiting);
        cordon_approval::desktop_notification(&what);
        let (reply, rx) = oneshot::channel();
        let id = self
            .approvals
            .ask("http", &what, &rule, subject, self.timeout, move |_, a| {
                let _ = reply.send(a);
            });
        let mut withdraw = Withdraw {
            approvals: &self.approvals,
            id,
            armed: true,
        };
        let answer = rx.await.unwrap_or(Answer {
            timed_out: true,
            ..DENIED
        });
        withdraw.armed = false;
        if answer.remember
            && !answer.timed_out
            && let Ok(mut m) = self.remembered.lock()
        {
            m.insert(scope, answer.allow);
        }
        answer
    }
}
