//! The writer: one per session, shared by every layer.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use crate::chain::{GENESIS_PREV, hash_event};
use crate::event::{Event, EventError, NewEvent};
use crate::paths::is_valid_session_id;

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
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    file: File,
    next_seq: u64,
    prev: String,
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
        Ok(Self {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                session: session.to_owned(),
                state: Mutex::new(State {
                    file,
                    next_seq: 0,
                    prev: GENESIS_PREV.to_owned(),
                }),
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn session(&self) -> &str {
        &self.inner.session
    }

    /// Stamps `ev` (time, session, seq, chain) and appends it. Returns the event as written.
    /// On error nothing is counted: the next event reuses the seq and prev.
    pub fn emit(&self, ev: NewEvent) -> Result<Event, EventError> {
        let path = &self.inner.path;
        // A panic elsewhere while holding the lock leaves the state consistent (it only changes
        // after a successful write), so a poisoned mutex is safe to keep using.
        let mut state = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut event = Event {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            session: self.inner.session.clone(),
            seq: state.next_seq,
            layer: ev.layer,
            action: ev.action,
            reason: ev.reason,
            rule: ev.rule,
            detail: ev.detail,
            prev: state.prev.clone(),
            hash: String::new(),
        };
        event.hash = hash_event(&event);
        let mut line = serde_json::to_string(&event).map_err(|source| EventError::Encode {
            path: path.clone(),
            source,
        })?;
        line.push('\n');
        state
            .file
            .write_all(line.as_bytes())
            .map_err(|e| EventError::io(path, e))?;
        state.next_seq += 1;
        state.prev.clone_from(&event.hash);
        Ok(event)
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
            .sync_data()
            .map_err(|e| EventError::io(&self.inner.path, e))
    }
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
