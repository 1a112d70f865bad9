//! `tail -f` for a log: [`Follower`].

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::event::{Event, EventError};

/// How often [`Follower::next_event`] looks for new lines while waiting.
const POLL: Duration = Duration::from_millis(100);
/// The longest line a follower buffers while waiting for its newline.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Follows a log as it grows, yielding each complete line as an [`Event`]. A partially written
/// last line is held back until its newline arrives. Does not check the chain.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    file: File,
    /// Bytes read from the file so far.
    offset: u64,
    /// Read but not yet returned: complete lines and at most one partial line at the end.
    buf: Vec<u8>,
    /// Lines returned (or skipped) so far, for error messages.
    line: u64,
}

impl Follower {
    /// Follows `path` from its first line: existing events come first, then new ones.
    pub fn open(path: &Path) -> Result<Self, EventError> {
        let file = File::open(path).map_err(|e| EventError::io(path, e))?;
        Ok(Self {
            path: path.to_owned(),
            file,
            offset: 0,
            buf: Vec::new(),
            line: 0,
        })
    }

    /// Follows `path` from its current end: only events written from now on. A partially
    /// written last line is still returned once complete.
    pub fn open_at_end(path: &Path) -> Result<Self, EventError> {
        let mut f = Self::open(path)?;
        // Skip existing complete lines, counting them so line numbers stay true.
        while f.read_more()? > 0 {
            if let Some(last_nl) = f.buf.iter().rposition(|&b| b == b'\n') {
                f.line += f.buf[..=last_nl].iter().filter(|&&b| b == b'\n').count() as u64;
                f.buf.drain(..=last_nl);
            }
        }
        Ok(f)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next event, waiting up to `timeout` for one to be written (polling every 100 ms).
    /// `Ok(None)` when none arrived in time; call again to keep following. Blank lines are
    /// skipped. A malformed line is an [`EventError::Parse`] and is consumed, so the next call
    /// continues after it. A file that shrinks is an [`EventError::Truncated`].
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<Event>, EventError> {
        let deadline = Instant::now() + timeout;
        loop {
            while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
                let content: Vec<u8> = self.buf.drain(..=nl).collect();
                self.line += 1;
                let content = &content[..nl];
                if content.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return serde_json::from_slice(content).map(Some).map_err(|source| {
                    EventError::Parse {
                        path: self.path.clone(),
                        line: self.line,
                        source,
                    }
                });
            }
            if self.buf.len() > MAX_LINE {
                let line = self.line + 1;
                // Drop it so a caller that goes on is not stuck on it forever.
                self.buf.clear();
                return Err(EventError::LineTooLong {
                    path: self.path.clone(),
                    line,
                    max: MAX_LINE,
                });
            }
            if self.read_more()? > 0 {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            std::thread::sleep(POLL.min(deadline - now));
        }
    }

    /// Appends whatever the file has beyond `offset` to `buf`; returns how many bytes.
    fn read_more(&mut self) -> Result<usize, EventError> {
        let len = self
            .file
            .metadata()
            .map_err(|e| EventError::io(&self.path, e))?
            .len();
        if len < self.offset {
            return Err(EventError::Truncated {
                path: self.path.clone(),
                was: self.offset,
                now: len,
            });
        }
        if len == self.offset {
            return Ok(0);
        }
        self.file
            .seek(SeekFrom::Start(self.offset))
            .map_err(|e| EventError::io(&self.path, e))?;
        let mut chunk = Vec::new();
        let n = (&mut self.file)
            .take(1024 * 1024)
            .read_to_end(&mut chunk)
            .map_err(|e| EventError::io(&self.path, e))?;
        self.offset += n as u64;
        self.buf.extend_from_slice(&chunk);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::event::{Action, Layer, NewEvent};
    use crate::sink::AuditLog;

    #[test]
    fn sees_existing_then_appended_events() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let log = AuditLog::create(&path, "s1").unwrap();
        let start = log
            .emit(NewEvent::new(Layer::Session, Action::Start, "started"))
            .unwrap();
        let mut f = Follower::open(&path).unwrap();
        assert_eq!(f.next_event(Duration::ZERO).unwrap(), Some(start));
        assert_eq!(f.next_event(Duration::from_millis(50)).unwrap(), None);

        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            log.emit(NewEvent::new(Layer::Network, Action::Deny, "refused").rule("built-in"))
                .unwrap()
        });
        let got = f.next_event(Duration::from_secs(10)).unwrap();
        let sent = writer.join().unwrap();
        assert_eq!(got, Some(sent));
    }

    #[test]
    fn open_at_end_skips_existing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let log = AuditLog::create(&path, "s1").unwrap();
        log.emit(NewEvent::new(Layer::Session, Action::Start, "started"))
            .unwrap();
        let mut f = Follower::open_at_end(&path).unwrap();
        assert_eq!(f.next_event(Duration::ZERO).unwrap(), None);
        let ev = log
            .emit(NewEvent::new(Layer::Dns, Action::Allow, "answered"))
            .unwrap();
        assert_eq!(f.next_event(Duration::from_secs(5)).unwrap(), Some(ev));
    }

    #[test]
    fn holds_back_a_partial_line() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src.jsonl");
        let log = AuditLog::create(&src, "s1").unwrap();
        let ev = log
            .emit(NewEvent::new(Layer::Session, Action::Start, "started"))
            .unwrap();
        let line = std::fs::read(&src).unwrap();

        let path = dir.path().join("s.jsonl");
        let mut out = std::fs::File::create(&path).unwrap();
        out.write_all(&line[..10]).unwrap();
        let mut f = Follower::open(&path).unwrap();
        assert_eq!(f.next_event(Duration::from_millis(150)).unwrap(), None);
        out.write_all(&line[10..]).unwrap();
        assert_eq!(f.next_event(Duration::from_secs(5)).unwrap(), Some(ev));
    }

    #[test]
    fn malformed_line_errors_then_continues() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src.jsonl");
        let log = AuditLog::create(&src, "s1").unwrap();
        let ev = log
            .emit(NewEvent::new(Layer::Session, Action::Start, "started"))
            .unwrap();
        let line = std::fs::read(&src).unwrap();

        let path = dir.path().join("s.jsonl");
        let mut bytes = b"\n{oops\n".to_vec();
        bytes.extend_from_slice(&line);
        std::fs::write(&path, &bytes).unwrap();
        let mut f = Follower::open(&path).unwrap();
        let err = f.next_event(Duration::ZERO).unwrap_err();
        assert!(matches!(err, EventError::Parse { line: 2, .. }), "{err:?}");
        assert_eq!(f.next_event(Duration::ZERO).unwrap(), Some(ev));
    }

    #[test]
    fn shrinking_file_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let log = AuditLog::create(&path, "s1").unwrap();
        log.emit(NewEvent::new(Layer::Session, Action::Start, "started"))
            .unwrap();
        let mut f = Follower::open(&path).unwrap();
        assert!(f.next_event(Duration::ZERO).unwrap().is_some());
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(
            f.next_event(Duration::ZERO),
            Err(EventError::Truncated { now: 0, .. })
        ));
    }
}
