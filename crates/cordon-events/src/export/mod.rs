//! Exporting the log as it is written: each line, once it is chained and in the file, is
//! copied to the system journal, syslog and/or an OpenTelemetry (OTLP/HTTP) logs endpoint.
//!
//! The file is the record; export is a copy, and never the reason a session waits or fails.
//! The writer hands each line to one bounded queue per target ([`QUEUE`] lines) without
//! blocking: a full queue drops the line *for that target only* and counts it. Each target has
//! a thread of its own that sends what is queued, in order, and retries a failed send with
//! backoff (at most [`RETRIES`] times); a line it gives up on is counted as failed. At the
//! session's end [`Exporter::finish`] gives the queues a bounded grace to empty. Why
//! fail-open: a collector being down must not stop the agent or the decisions the file
//! records (as the file itself being unwritable does, see [`crate::AuditLog`]); a collector
//! can tell what it missed from the chain (`seq` and `prev`), and the file has it all.

mod datagram;
mod otlp;
mod proto;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{
    Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError, sync_channel,
};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

pub use otlp::OtlpConfig;

/// Lines each target's queue holds (~1 KiB each) before it drops.
pub const QUEUE: usize = 8192;

/// Retries of one failed send (backoff 250 ms doubling, at most 4 s between tries).
pub const RETRIES: u32 = 5;

/// Where the log is exported, resolved (addresses filled in).
#[derive(Clone, Debug, Default)]
pub struct ExportConfig {
    /// The journal's native socket.
    pub journald: Option<PathBuf>,
    /// A syslog socket taking RFC 5424 datagrams.
    pub syslog: Option<PathBuf>,
    /// An OTLP/HTTP logs endpoint.
    pub otlp: Option<OtlpConfig>,
}

impl ExportConfig {
    pub fn is_empty(&self) -> bool {
        self.journald.is_none() && self.syslog.is_none() && self.otlp.is_none()
    }
}

/// What went wrong starting an exporter.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("OTLP endpoint {url:?}: {why}")]
    Endpoint { url: String, why: String },
    #[error("OTLP header {0:?}: not NAME=VALUE with a valid header name and value")]
    Header(String),
    #[error("cannot start the {target} exporter: {source}")]
    Start {
        target: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// One target's counts, for the session's end and its note in the log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExportReport {
    /// `journald`, `syslog` or `otlp`.
    pub target: &'static str,
    /// Lines the target accepted.
    pub sent: u64,
    /// Lines dropped because the queue was full.
    pub dropped: u64,
    /// Lines given up on after retries, or still queued when the grace ran out.
    pub failed: u64,
    /// The last error, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Default)]
struct Counts {
    sent: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    /// Handed to the queue and not yet sent or given up on.
    pending: AtomicU64,
    error: Mutex<Option<String>>,
}

/// What the writer holds: the queues' ends. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Tap {
    queues: Vec<(SyncSender<Arc<str>>, Arc<Counts>)>,
}

impl Tap {
    /// Hands a written line to every target, never waiting.
    pub(crate) fn send(&self, line: &str) {
        let line: Arc<str> = Arc::from(line.trim_end_matches('\n'));
        for (tx, counts) in &self.queues {
            counts.pending.fetch_add(1, Ordering::SeqCst);
            if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
                tx.try_send(line.clone())
            {
                counts.pending.fetch_sub(1, Ordering::SeqCst);
                counts.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The session's exporter: one thread per target.
#[derive(Debug)]
pub struct Exporter {
    tap: Option<Tap>,
    workers: Vec<(&'static str, Arc<Counts>, JoinHandle<()>)>,
    /// Set by [`Exporter::finish`]: retries stop waiting past it.
    deadline: Arc<Mutex<Option<Instant>>>,
    /// Set by [`Exporter::flush`]: a batch being gathered goes now.
    urgent: Arc<AtomicBool>,
}

/// One target's way of sending a batch of lines.
pub(crate) trait Target: Send + 'static {
    const NAME: &'static str;
    /// Lines sent in one go, at most.
    const BATCH: usize;
    /// How long a batch is gathered after its first line, at most (OpenTelemetry's batch
    /// processor waits too): one request for many lines, not one for each.
    const LINGER: Duration = Duration::ZERO;
    /// Sends `lines`, in order; `Err` with whether trying again may help.
    /// `until`: the session end's deadline once it is set (it can come while a send waits).
    fn send(
        &mut self,
        lines: &[Arc<str>],
        until: &dyn Fn() -> Option<Instant>,
    ) -> Result<(), Failure>;
}

/// A send that did not go through.
pub(crate) struct Failure {
    pub retry: bool,
    pub error: String,
}

impl Exporter {
    /// Starts a thread for each target `config` names; `session` and `version` label the
    /// OTLP resource.
    pub fn start(config: &ExportConfig, session: &str) -> Result<Exporter, ExportError> {
        let mut ex = Exporter {
            tap: Some(Tap { queues: Vec::new() }),
            workers: Vec::new(),
            deadline: Arc::new(Mutex::new(None)),
            urgent: Arc::new(AtomicBool::new(false)),
        };
        if let Some(path) = &config.journald {
            ex.spawn(datagram::Journald::new(path.clone()))?;
        }
        if let Some(path) = &config.syslog {
            ex.spawn(datagram::Syslog::new(path.clone()))?;
        }
        if let Some(otlp) = &config.otlp {
            ex.spawn(otlp::Otlp::new(otlp, session)?)?;
        }
        Ok(ex)
    }

    fn spawn<T: Target>(&mut self, target: T) -> Result<(), ExportError> {
        let (tx, rx) = sync_channel(QUEUE);
        let counts = Arc::new(Counts::default());
        let deadline = self.deadline.clone();
        let urgent = self.urgent.clone();
        let c = counts.clone();
        let handle = std::thread::Builder::new()
            .name(format!("export-{}", T::NAME))
            .spawn(move || work(target, &rx, &c, &deadline, &urgent))
            .map_err(|source| ExportError::Start {
                target: T::NAME,
                source,
            })?;
        if let Some(tap) = self.tap.as_mut() {
            tap.queues.push((tx, counts.clone()));
        }
        self.workers.push((T::NAME, counts, handle));
        Ok(())
    }

    /// The writer's end, for [`crate::AuditLog::export_to`].
    pub fn tap(&self) -> Option<Tap> {
        self.tap.clone()
    }

    /// Waits (at most `wait`) until every line handed over so far is sent or given up on.
    pub fn flush(&self, wait: Duration) {
        self.urgent.store(true, Ordering::SeqCst);
        let end = Instant::now() + wait;
        while Instant::now() < end
            && self
                .workers
                .iter()
                .any(|(_, c, _)| c.pending.load(Ordering::SeqCst) > 0)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The counts so far.
    pub fn reports(&self) -> Vec<ExportReport> {
        self.workers
            .iter()
            .map(|(target, c, _)| report(target, c))
            .collect()
    }

    /// Closes the queues and gives the threads `grace` to send what is queued: what is left
    /// then is counted as failed. Call after [`crate::AuditLog::stop_export`], which lets go
    /// of the writer's end.
    pub fn finish(mut self, grace: Duration) -> Vec<ExportReport> {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(Instant::now() + grace);
        self.urgent.store(true, Ordering::SeqCst);
        self.tap = None;
        let mut out = Vec::new();
        for (target, counts, handle) in std::mem::take(&mut self.workers) {
            // A thread that panicked has counted what it sent; the rest is failed below.
            let _ = handle.join();
            let left = counts.pending.swap(0, Ordering::SeqCst);
            counts.failed.fetch_add(left, Ordering::Relaxed);
            out.push(report(target, &counts));
        }
        out
    }
}

fn report(target: &'static str, c: &Counts) -> ExportReport {
    ExportReport {
        target,
        sent: c.sent.load(Ordering::Relaxed),
        dropped: c.dropped.load(Ordering::Relaxed),
        failed: c.failed.load(Ordering::Relaxed),
        error: c
            .error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone(),
    }
}

/// One target's thread: batches what is queued, sends it, retries with backoff.
fn work<T: Target>(
    mut target: T,
    rx: &Receiver<Arc<str>>,
    counts: &Counts,
    deadline: &Mutex<Option<Instant>>,
    urgent: &AtomicBool,
) {
    let deadline = || *deadline.lock().unwrap_or_else(PoisonError::into_inner);
    let mut batch: Vec<Arc<str>> = Vec::with_capacity(T::BATCH);
    loop {
        // Polled, not blocked on: a writer that still holds the queue's end at the finish
        // must not keep the thread (and the session's exit) waiting.
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(first) => batch.push(first),
            Err(RecvTimeoutError::Timeout) if deadline().is_none() => continue,
            Err(_) => break,
        }
        gather(&mut batch, rx, T::BATCH, T::LINGER, urgent);
        let n = batch.len() as u64;
        let mut delay = Duration::from_millis(250);
        let mut tries = 0;
        loop {
            let until = deadline();
            if until.is_some_and(|d| Instant::now() >= d) {
                counts.failed.fetch_add(n, Ordering::Relaxed);
                break;
            }
            match target.send(&batch, &deadline) {
                Ok(()) => {
                    counts.sent.fetch_add(n, Ordering::Relaxed);
                    break;
                }
                Err(f) => {
                    *counts.error.lock().unwrap_or_else(PoisonError::into_inner) = Some(f.error);
                    if !f.retry || tries >= RETRIES {
                        counts.failed.fetch_add(n, Ordering::Relaxed);
                        break;
                    }
                    tries += 1;
                    pause(delay, &deadline);
                    delay = (delay * 2).min(Duration::from_secs(4));
                }
            }
        }
        counts.pending.fetch_sub(n, Ordering::SeqCst);
        batch.clear();
    }
}

/// Fills `batch` up to `max` lines from `rx`: what is queued now, then what comes within
/// `linger` of now, unless a flush or the finish makes it `urgent`.
fn gather(
    batch: &mut Vec<Arc<str>>,
    rx: &Receiver<Arc<str>>,
    max: usize,
    linger: Duration,
    urgent: &AtomicBool,
) {
    let until = Instant::now() + linger;
    while batch.len() < max {
        match rx.try_recv() {
            Ok(line) => {
                batch.push(line);
                continue;
            }
            Err(TryRecvError::Disconnected) => return,
            Err(TryRecvError::Empty) => {}
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || urgent.load(Ordering::SeqCst) {
            return;
        }
        // In short steps, so a flush is not kept waiting for the whole linger.
        match rx.recv_timeout(left.min(Duration::from_millis(10))) {
            Ok(line) => batch.push(line),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Sleeps `d`, or less when the deadline comes first.
fn pause(d: Duration, deadline: &dyn Fn() -> Option<Instant>) {
    let end = Instant::now() + d;
    while Instant::now() < end && deadline().is_none_or(|x| Instant::now() < x) {
        std::thread::sleep(Duration::from_millis(20).min(end - Instant::now()));
    }
}

/// Syslog's severity for an event's action: `error` 3, `deny` and `degraded` 4 (warning),
/// everything else 6 (informational). The journal's `PRIORITY` is the same number.
pub(crate) fn severity(action: crate::Action) -> u8 {
    use crate::Action;
    match action {
        Action::Error => 3,
        Action::Deny | Action::Degraded => 4,
        _ => 6,
    }
}

/// The event a written line holds (`None` would be a bug: the writer made the line from one).
pub(crate) fn parse(line: &str) -> Option<crate::Event> {
    serde_json::from_str(line).ok()
}
