//! The writer: one per session, shared by every layer.
//!
//! A write that fails (the disk full, an I/O error) loses nothing it can keep: the event, and
//! every later one, is held in memory (up to [`MAX_HELD`]) and written, in order and chained,
//! before anything newer once a write succeeds again; a line the kernel took only part of is
//! finished first, so the file never keeps a torn line. While anything is held the log's
//! [`AuditHealth`] says so, and the layers that decide refuse what they would otherwise let
//! out: a decision nobody can audit is not made (as auditd's `disk_full_action` would halt).

use std::collections::VecDeque;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use crate::chain::{GENESIS_PREV, seal};
use crate::event::{Action, Event, EventError, Layer, NewEvent};
use crate::paths::is_valid_session_id;

/// The rule of the note an outage leaves in the log, and of what the layers refuse meanwhile.
pub const AUDIT_UNWRITABLE: &str = "audit.unwritable";

/// Events kept in memory while the log cannot be written (~1 KiB each); past it they are
/// counted as lost, and the count is logged when writing works again.
pub const MAX_HELD: usize = 10_000;

/// Whether a session's log is being written right now. Cheap to clone; every clone follows
/// the same log. The default (not tied to a log) is always writable.
#[derive(Clone, Debug)]
pub struct AuditHealth(Arc<AtomicBool>);

impl Default for AuditHealth {
    fn default() -> Self {
        Self(Arc::new(AtomicBool::new(true)))
    }
}

impl AuditHealth {
    /// A health tied to no log, fixed at `writable` (for tests of the layers that watch one).
    pub fn fixed(writable: bool) -> Self {
        Self(Arc::new(AtomicBool::new(writable)))
    }

    /// `false` from a failed write until everything held has been written.
    pub fn writable(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// The session's log. Cheap to clone (clones share the file), `Send + Sync`.
///
/// Emits are serialised by an internal mutex; each event is written as one `write(2)` of a
/// whole line to a file opened `O_APPEND`, with no user-space buffering, so a crash loses at
/// most the event being written. The first event should be `session`/`start` and the last
/// `session`/`stop` (see the crate docs); the sink does not add them itself.
#[derive(Clone, Debug)]
pub struct AuditLog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    session: String,
    health: AuditHealth,
    state: Mutex<State>,
}

/// Where the lines go: the log file, or a stand-in in tests.
pub(crate) trait LogFile: Write + Send + std::fmt::Debug {
    fn sync(&self) -> io::Result<()>;
}

impl LogFile for File {
    fn sync(&self) -> io::Result<()> {
        self.sync_data()
    }
}

#[derive(Debug)]
struct State {
    file: Box<dyn LogFile>,
    next_seq: u64,
    prev: String,
    /// The end of a line the kernel took only part of: written before anything else.
    tail: Vec<u8>,
    /// Stamped events not written yet, oldest first (seq and chain are given when written).
    held: VecDeque<Event>,
    /// The current outage, if any.
    outage: Option<Outage>,
    /// Where each written line is copied (`[audit] export`), if anywhere.
    export: Option<crate::export::Tap>,
}

#[derive(Debug)]
struct Outage {
    since: String,
    started: Instant,
    error: String,
    held: u64,
    lost: u64,
    /// Flows and requests refused because of the outage (rule [`AUDIT_UNWRITABLE`]).
    refused: u64,
}

impl AuditLog {
    /// Creates a new log at `path` (mode `0600`, missing parent directories `0700`). Fails if
    /// the file already exists: a log is never appended to by a second writer.
    pub fn create(path: &Path, session: &str) -> Result<Self, EventError> {
        if !is_valid_session_id(session) {
            return Err(EventError::InvalidSession(session.to_owned()));
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| EventError::io(parent, e))?;
        }
        // std opens with O_CLOEXEC, so the log's fd never leaks into the sandbox on exec.
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| EventError::io(path, e))?;
        Ok(Self::with_file(path, session, Box::new(file)))
    }

    pub(crate) fn with_file(path: &Path, session: &str, file: Box<dyn LogFile>) -> Self {
        Self {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                session: session.to_owned(),
                health: AuditHealth::default(),
                state: Mutex::new(State {
                    file,
                    next_seq: 0,
                    prev: GENESIS_PREV.to_owned(),
                    tail: Vec::new(),
                    held: VecDeque::new(),
                    outage: None,
                    export: None,
                }),
            }),
        }
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn session(&self) -> &str {
        &self.inner.session
    }

    /// Follows whether this log is being written (see the module docs).
    pub fn health(&self) -> AuditHealth {
        self.inner.health.clone()
    }

    /// Stamps `ev` (time, session, seq, chain) and appends it. Returns the event as written.
    /// When it cannot be written now it is held and written later, before anything newer:
    /// [`EventError::Io`] for the write that failed, [`EventError::Held`] while earlier events
    /// still wait.
    pub fn emit(&self, ev: NewEvent) -> Result<Event, EventError> {
        // A panic elsewhere while holding the lock leaves the state consistent (it only changes
        // after a write), so a poisoned mutex is safe to keep using.
        let mut state = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let event = self.stamp(ev);
        if state.outage.is_some() {
            if let Err(e) = state.flush() {
                // What the layers refuse because of the outage is counted, not held: the
                // memory is kept for the decisions made before it (answers still relayed).
                let outage_refusal = event.rule_id()
                    == Some(crate::RuleId::builtin(crate::Builtin::AuditUnwritable));
                if event.action == Action::Deny && outage_refusal {
                    if let Some(o) = state.outage.as_mut() {
                        o.refused += 1;
                    }
                    return Err(EventError::Held {
                        path: self.inner.path.clone(),
                        held: state.held.len(),
                        error: e.to_string(),
                    });
                }
                let held = state.hold(event);
                return Err(EventError::Held {
                    path: self.inner.path.clone(),
                    held,
                    error: e.to_string(),
                });
            }
            let o = state.outage.take().expect("checked above");
            let note = self.stamp(o.note(&self.inner.path));
            if let Err(e) = self.write_or_hold(&mut state, note) {
                state.hold(event);
                return Err(e);
            }
            self.inner.health.0.store(true, Ordering::SeqCst);
        }
        self.write_or_hold(&mut state, event)
    }

    fn stamp(&self, ev: NewEvent) -> Event {
        Event {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            session: self.inner.session.clone(),
            seq: 0,
            layer: ev.layer,
            action: ev.action,
            reason: ev.reason,
            rule: ev.rule,
            detail: ev.detail,
            prev: String::new(),
            hash: String::new(),
        }
    }

    /// Writes `event` now, or starts an outage: the log is unwritable until what is held
    /// has been written.
    fn write_or_hold(&self, state: &mut State, event: Event) -> Result<Event, EventError> {
        let path = &self.inner.path;
        match state.write(event) {
            Ok(e) => Ok(e),
            Err(Written::Io(e, unwritten)) => {
                self.inner.health.0.store(false, Ordering::SeqCst);
                state.outage = Some(Outage {
                    since: unwritten.time().to_owned(),
                    started: Instant::now(),
                    error: e.to_string(),
                    // A begun line is late too.
                    held: u64::from(matches!(unwritten, Unwritten::Begun(_))),
                    lost: 0,
                    refused: 0,
                });
                if let Unwritten::Whole(event) = unwritten {
                    state.hold(*event);
                }
                Err(EventError::io(path, e))
            }
        }
    }

    /// Copies every line written from now on to `tap`'s targets (see [`crate::export`]).
    pub fn export_to(&self, tap: crate::export::Tap) {
        self.lock().export = Some(tap);
    }

    /// Stops copying lines; the exporter's queues then close when it finishes.
    pub fn stop_export(&self) {
        self.lock().export = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Forces the written events to disk (`fsync`). Emits do not do this themselves.
    pub fn sync(&self) -> Result<(), EventError> {
        let state = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        state
            .file
            .sync()
            .map_err(|e| EventError::io(&self.inner.path, e))
    }
}

/// A write that did not go through.
enum Written {
    Io(io::Error, Unwritten),
}

/// The event a failed write was for: whole (nothing of it is in the file), or begun (part of
/// its line is, the rest is the state's `tail`).
enum Unwritten {
    Whole(Box<Event>),
    Begun(String),
}

impl Unwritten {
    /// When the event was emitted.
    fn time(&self) -> &str {
        match self {
            Unwritten::Whole(e) => &e.time,
            Unwritten::Begun(t) => t,
        }
    }
}

impl Outage {
    /// What the log says once writing works again, after what was held.
    fn note(&self, path: &Path) -> NewEvent {
        let secs = self.started.elapsed().as_secs_f64();
        NewEvent::new(
            Layer::Session,
            Action::Error,
            format!(
                "the audit log could not be written for {secs:.1} s ({}): {} events were held in memory and are written above, late; {} were lost; {} flows and requests were refused meanwhile, counted here",
                self.error, self.held, self.lost, self.refused
            ),
        )
        .rule(AUDIT_UNWRITABLE)
        .detail("since", self.since.clone())
        .detail("error", self.error.clone())
        .detail("held", self.held)
        .detail("lost", self.lost)
        .detail("refused", self.refused)
        .detail("path", path.display().to_string())
    }
}

impl State {
    /// Writes `event` as the next line: seq and chain given now, then the line; a line taken
    /// in part leaves its end as the tail (the event counts as written: its bytes have begun).
    fn write(&mut self, mut event: Event) -> Result<Event, Written> {
        event.seq = self.next_seq;
        event.prev.clone_from(&self.prev);
        let line = seal(&mut event);
        let (n, err) = write_some(&mut *self.file, line.as_bytes());
        if n > 0 {
            self.next_seq += 1;
            self.prev.clone_from(&event.hash);
            // Under the log's lock, so the copies go out in the chain's order.
            if let Some(tap) = &self.export {
                tap.send(&line);
            }
        }
        match err {
            None => Ok(event),
            Some(e) if n > 0 => {
                self.tail = line.as_bytes()[n..].to_vec();
                Err(Written::Io(e, Unwritten::Begun(event.time)))
            }
            Some(e) => Err(Written::Io(e, Unwritten::Whole(Box::new(event)))),
        }
    }

    /// Keeps `event` for later (or counts it lost past [`MAX_HELD`]); returns how many wait.
    fn hold(&mut self, event: Event) -> usize {
        if let Some(o) = self.outage.as_mut() {
            if self.held.len() < MAX_HELD {
                self.held.push_back(event);
                o.held += 1;
            } else {
                o.lost += 1;
            }
        }
        self.held.len()
    }

    /// Finishes a torn line, then writes what is held, in order; `Ok` when nothing waits.
    fn flush(&mut self) -> io::Result<()> {
        if !self.tail.is_empty() {
            let (n, err) = write_some(&mut *self.file, &self.tail);
            self.tail.drain(..n);
            if let Some(e) = err {
                return Err(e);
            }
        }
        while let Some(event) = self.held.pop_front() {
            match self.write(event) {
                Ok(_) => {}
                Err(Written::Io(e, unwritten)) => {
                    if let Unwritten::Whole(event) = unwritten {
                        self.held.push_front(*event);
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

/// Writes as much of `buf` as the file takes: (bytes written, the error that stopped it).
fn write_some(file: &mut dyn LogFile, buf: &[u8]) -> (usize, Option<io::Error>) {
    let mut n = 0;
    while n < buf.len() {
        match file.write(&buf[n..]) {
            Ok(0) => return (n, Some(io::ErrorKind::WriteZero.into())),
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (n, Some(e)),
        }
    }
    (n, None)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::event::{Action, Layer};
    use crate::read::{read_log, verify};

    fn assert_send_sync<T: Send + Sync + Clone>() {}

    #[test]
    fn audit_log_is_send_sync_clone() {
        assert_send_sync::<AuditLog>();
    }

    #[test]
    fn creates_private_file_and_dirs_and_refuses_existing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/s.jsonl");
        let log = AuditLog::create(&path, "s1").unwrap();
        assert_eq!(log.path(), path);
        assert_eq!(log.session(), "s1");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.path().join("a/b")), 0o700);
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        assert!(matches!(
            AuditLog::create(&path, "s1"),
            Err(EventError::Io { .. })
        ));
        assert!(matches!(
            AuditLog::create(&dir.path().join("x.jsonl"), "../x"),
            Err(EventError::InvalidSession(_))
        ));
    }

    #[test]
    fn emit_stamps_and_chains() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let log = AuditLog::create(&path, "s1").unwrap();
        let a = log
            .emit(NewEvent::new(Layer::Session, Action::Start, "started"))
            .unwrap();
        let b = log
            .emit(
                NewEvent::new(Layer::Filesystem, Action::Deny, "masked")
                    .rule("built-in")
                    .detail("path", "/home/u/.ssh"),
            )
            .unwrap();
        assert_eq!(a.seq, 0);
        assert_eq!(a.prev, GENESIS_PREV);
        assert_eq!(b.seq, 1);
        assert_eq!(b.prev, a.hash);
        assert_eq!(a.session, "s1");
        // 2026-11-29T08:30:12.345Z
        assert_eq!(a.time.len(), 24, "{}", a.time);
        assert!(a.time.ends_with('Z'));
        assert!(humantime::parse_rfc3339(&a.time).is_ok());
        log.sync().unwrap();
        assert_eq!(read_log(&path).unwrap(), vec![a, b]);
        // No stop event yet: the only problem is that the log is incomplete.
        let report = verify(&path).unwrap();
        assert_eq!(report.events, 2);
        assert!(!report.complete);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    }

    /// A disk that takes `room` bytes more, then says ENOSPC.
    #[derive(Debug, Clone, Default)]
    struct Disk(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Disk {
        fn room(&self, n: usize) {
            self.0.lock().unwrap().1 = n;
        }
    }

    impl Write for Disk {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let mut d = self.0.lock().unwrap();
            if d.1 == 0 {
                return Err(io::Error::from_raw_os_error(28));
            }
            let n = buf.len().min(d.1);
            d.0.extend_from_slice(&buf[..n]);
            d.1 -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl LogFile for Disk {
        fn sync(&self) -> io::Result<()> {
            Ok(())
        }
    }

    fn tick(i: u64) -> NewEvent {
        NewEvent::new(Layer::Network, Action::Allow, "flow").detail("i", i)
    }

    #[test]
    fn a_full_disk_holds_events_and_writes_them_whole_and_chained_when_room_returns() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::default();
        disk.room(usize::MAX);
        let log = AuditLog::with_file(&dir.path().join("s.jsonl"), "s1", Box::new(disk.clone()));
        let health = log.health();
        log.emit(NewEvent::new(Layer::Session, Action::Start, "started"))
            .unwrap();
        log.emit(tick(1)).unwrap();
        assert!(health.writable());
        // Room for part of a line: the kernel takes some bytes, then ENOSPC.
        disk.room(40);
        assert!(matches!(log.emit(tick(2)), Err(EventError::Io { .. })));
        assert!(!health.writable());
        assert!(!log.health().writable());
        for i in 3..6 {
            assert!(matches!(
                log.emit(tick(i)),
                Err(EventError::Held { held, .. }) if held == (i - 2) as usize
            ));
            // What the layers refuse for the outage is counted, not held.
            let refused =
                NewEvent::new(Layer::Http, Action::Deny, "refused").rule(AUDIT_UNWRITABLE);
            assert!(matches!(log.emit(refused), Err(EventError::Held { .. })));
        }
        assert!(!health.writable());
        disk.room(usize::MAX);
        let e = log.emit(tick(6)).unwrap();
        assert!(health.writable());
        log.emit(NewEvent::new(Layer::Session, Action::Stop, "stopped"))
            .unwrap();
        let path = dir.path().join("copy.jsonl");
        std::fs::write(&path, &disk.0.lock().unwrap().0).unwrap();
        let report = verify(&path).unwrap();
        assert!(report.ok(), "{:?}", report.problems);
        assert!(report.complete);
        let events = read_log(&path).unwrap();
        let is: Vec<Option<u64>> = events
            .iter()
            .map(|e| e.detail.get("i").and_then(|v| v.as_u64()))
            .collect();
        // Nothing lost, nothing reordered; the note comes after what was held, before the new.
        assert_eq!(
            is,
            vec![
                None,
                Some(1),
                Some(2),
                Some(3),
                Some(4),
                Some(5),
                None,
                Some(6),
                None
            ]
        );
        let note = &events[6];
        assert_eq!(note.rule.as_deref(), Some("audit.unwritable"));
        assert_eq!(note.action, Action::Error);
        assert_eq!(note.detail["held"], 4);
        assert_eq!(note.detail["lost"], 0);
        assert_eq!(note.detail["refused"], 3);
        assert!(note.reason.contains("No space left"), "{}", note.reason);
        assert_eq!(e.seq, 7);
    }

    #[test]
    fn past_the_memory_bound_events_are_counted_as_lost() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::default();
        disk.room(usize::MAX);
        let log = AuditLog::with_file(&dir.path().join("s.jsonl"), "s1", Box::new(disk.clone()));
        log.emit(NewEvent::new(Layer::Session, Action::Start, "started"))
            .unwrap();
        disk.room(0);
        for i in 0..(MAX_HELD as u64 + 5) {
            assert!(log.emit(tick(i)).is_err());
        }
        disk.room(usize::MAX);
        log.emit(NewEvent::new(Layer::Session, Action::Stop, "stopped"))
            .unwrap();
        let path = dir.path().join("copy.jsonl");
        std::fs::write(&path, &disk.0.lock().unwrap().0).unwrap();
        let events = read_log(&path).unwrap();
        assert_eq!(events.len(), 1 + MAX_HELD + 2);
        let note = &events[MAX_HELD + 1];
        assert_eq!(note.detail["held"], MAX_HELD as u64);
        assert_eq!(note.detail["lost"], 5);
        let report = verify(&path).unwrap();
        assert!(report.ok() && report.complete, "{:?}", report.problems);
    }

    #[test]
    fn concurrent_emits_keep_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let log = AuditLog::create(&path, "s1").unwrap();
        log.emit(NewEvent::new(Layer::Session, Action::Start, "started"))
            .unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        log.emit(
                            NewEvent::new(Layer::Process, Action::Log, "tick")
                                .detail("thread", t)
                                .detail("i", i),
                        )
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        log.emit(NewEvent::new(Layer::Session, Action::Stop, "stopped"))
            .unwrap();
        let events = read_log(&path).unwrap();
        assert_eq!(events.len(), 402);
        let ticks = events.iter().filter(|e| e.layer == Layer::Process).count();
        assert_eq!(ticks, 400);
        let mut seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs, (0..402).collect::<Vec<_>>());
        let report = verify(&path).unwrap();
        assert!(report.ok(), "{:?}", report.problems);
        assert!(report.complete);
        assert_eq!(report.events, 402);
    }
}
