//! Reading whole logs: [`read_log`], [`verify`], [`list_sessions`].

use std::path::{Path, PathBuf};

use crate::chain::{GENESIS_PREV, hash_event};
use crate::event::{Action, Event, EventError, Layer};

/// The lines of a log's bytes: `(line number from 1, content without '\n', ends with '\n')`.
/// A file ending in '\n' yields no empty last line.
fn lines(bytes: &[u8]) -> impl Iterator<Item = (u64, &[u8], bool)> {
    let mut rest = bytes;
    let mut n = 0u64;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        n += 1;
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let line = &rest[..i];
                rest = &rest[i + 1..];
                Some((n, line, true))
            }
            None => {
                let line = rest;
                rest = &[];
                Some((n, line, false))
            }
        }
    })
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, EventError> {
    std::fs::read(path).map_err(|e| EventError::io(path, e))
}

/// Every event in the log, in file order. Blank lines are skipped; anything else that is not an
/// event (including a partially written last line) is an [`EventError::Parse`] naming the file
/// and line. Does not check the chain: see [`verify`].
pub fn read_log(path: &Path) -> Result<Vec<Event>, EventError> {
    let bytes = read_bytes(path)?;
    let mut events = Vec::new();
    for (line, content, _) in lines(&bytes) {
        if is_blank(content) {
            continue;
        }
        let ev = serde_json::from_slice(content).map_err(|source| EventError::Parse {
            path: path.to_owned(),
            line,
            source,
        })?;
        events.push(ev);
    }
    Ok(events)
}

/// The result of [`verify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyReport {
    /// Lines that parsed as events.
    pub events: u64,
    /// The session id of the first event, if any parsed.
    pub session: Option<String>,
    /// The last line is a `session`/`stop` event.
    pub complete: bool,
    /// Everything wrong, in line order. Empty means the log is intact and complete.
    pub problems: Vec<VerifyProblem>,
}

impl VerifyReport {
    /// No problems: every line is an event, the chain is unbroken and the log is complete.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// One thing [`verify`] found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyProblem {
    /// The line it was found at, counting from 1 (0 for an empty file).
    pub line: u64,
    pub what: String,
}

/// Checks a log: every line an event, `hash` matches the content, `prev` matches the previous
/// line's `hash`, `seq` counts up from 0 by one, one session id throughout, and the log ends
/// with a `session`/`stop` event (see the crate docs for the exact hash). Problems are reported,
/// not returned as errors: only failing to read the file is an error.
///
/// A line whose content was edited is reported at that line ("hash mismatch"); a removed or
/// reordered line is reported at the line after the gap ("prev does not match", "seq jumps").
pub fn verify(path: &Path) -> Result<VerifyReport, EventError> {
    let bytes = read_bytes(path)?;
    Ok(verify_bytes(&bytes))
}

fn verify_bytes(bytes: &[u8]) -> VerifyReport {
    let mut report = VerifyReport {
        events: 0,
        session: None,
        complete: false,
        problems: Vec::new(),
    };
    let mut problem = |line: u64, what: String| report.problems.push(VerifyProblem { line, what });
    // The previous event: its line and stored hash (None after a line that did not parse, whose
    // hash is unknown) and its seq.
    let mut prev: Option<(u64, String)> = None;
    let mut prev_seq: Option<u64> = None;
    let mut first = true;
    let mut session: Option<String> = None;
    let mut events = 0u64;
    let mut last_line = 0u64;
    let mut last_is_stop = false;
    let mut stop_line: Option<u64> = None;

    for (line, content, terminated) in lines(bytes) {
        last_line = line;
        last_is_stop = false;
        if !terminated {
            problem(
                line,
                "last line is incomplete (no newline): a write was interrupted".into(),
            );
        }
        if is_blank(content) {
            problem(line, "blank line".into());
            continue;
        }
        let ev: Event = match serde_json::from_slice(content) {
            Ok(ev) => ev,
            Err(e) => {
                problem(line, format!("not a valid event: {e}"));
                first = false;
                prev = None;
                prev_seq = None;
                continue;
            }
        };
        events += 1;

        if let Some(stop) = stop_line {
            problem(
                line,
                format!("event after the session stop event at line {stop}"),
            );
        }
        match &session {
            None => session = Some(ev.session.clone()),
            Some(s) if *s != ev.session => {
                problem(
                    line,
                    format!("session changes from {s:?} to {:?}", ev.session),
                );
            }
            Some(_) => {}
        }
        if humantime::parse_rfc3339(&ev.time).is_err() {
            problem(
                line,
                format!("time {:?} is not an RFC 3339 UTC timestamp", ev.time),
            );
        }
        if hash_event(&ev) != ev.hash {
            problem(line, "hash mismatch: line edited".into());
        }
        if first {
            if ev.prev != GENESIS_PREV {
                problem(
                    line,
                    "first event's prev is not all zeros: lines before it were removed".into(),
                );
            }
            if ev.seq != 0 {
                problem(line, format!("seq starts at {}, not 0", ev.seq));
            }
        } else {
            if let Some((pline, phash)) = &prev
                && ev.prev != *phash
            {
                problem(
                    line,
                    format!(
                        "prev does not match line {pline}'s hash: a line was removed or reordered"
                    ),
                );
            }
            if let Some(ps) = prev_seq
                && ps.checked_add(1) != Some(ev.seq)
            {
                problem(line, format!("seq jumps from {ps} to {}", ev.seq));
            }
        }
        if ev.is_session_stop() {
            stop_line.get_or_insert(line);
            last_is_stop = true;
        }
        first = false;
        prev = Some((line, ev.hash));
        prev_seq = Some(ev.seq);
    }

    if last_line == 0 {
        problem(0, "empty log: no events".into());
    } else if !last_is_stop {
        problem(
            last_line,
            "log ends without a session stop event: truncated, or the session is still running/crashed"
                .into(),
        );
    }
    report.events = events;
    report.session = session;
    report.complete = last_is_stop;
    report
}

/// One session log, as [`list_sessions`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSummary {
    /// From the first event; the file name without `.jsonl` when no line parses.
    pub session: String,
    pub path: PathBuf,
    /// Time of the first event.
    pub start: Option<String>,
    /// Time of the last event.
    pub end: Option<String>,
    /// Lines that parse as events (malformed lines are not counted, nor reported: see [`verify`]).
    pub events: u64,
    /// Has a `session`/`stop` event.
    pub stopped: bool,
    /// `detail.code` of the `session`/`exit` event, if present and an integer.
    pub exit_code: Option<i64>,
}

/// Every `*.jsonl` log in `dir`, newest first (by start time, then session id). A missing `dir`
/// yields an empty list. Reads each file whole; does not verify the chain.
pub fn list_sessions(dir: &Path) -> Result<Vec<SessionSummary>, EventError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(EventError::io(dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| EventError::io(dir, e))?;
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            // Removed meanwhile, or a directory named *.jsonl: not a log.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::IsADirectory
                ) =>
            {
                continue;
            }
            Err(e) => return Err(EventError::io(&path, e)),
        };
        out.push(summarize(path, &bytes));
    }
    out.sort_by(|a, b| {
        // None (no parsable event) sorts last.
        b.start
            .cmp(&a.start)
            .then_with(|| b.session.cmp(&a.session))
    });
    Ok(out)
}

fn summarize(path: PathBuf, bytes: &[u8]) -> SessionSummary {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut s = SessionSummary {
        session: stem,
        path,
        start: None,
        end: None,
        events: 0,
        stopped: false,
        exit_code: None,
    };
    for (_, content, _) in lines(bytes) {
        let Ok(ev) = serde_json::from_slice::<Event>(content) else {
            continue;
        };
        if s.events == 0 {
            s.session.clone_from(&ev.session);
            s.start = Some(ev.time.clone());
        }
        s.events += 1;
        // The command's exit code: on its Exit event (process layer) or the session's stop.
        let code = ev.detail.get("code").and_then(|c| c.as_i64());
        match (ev.layer, ev.action) {
            (Layer::Session, Action::Stop) => {
                s.stopped = true;
                s.exit_code = code.or(s.exit_code);
            }
            (Layer::Session | Layer::Process, Action::Exit) => s.exit_code = code.or(s.exit_code),
            _ => {}
        }
        s.end = Some(ev.time);
    }
    s
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::event::NewEvent;
    use crate::sink::AuditLog;

    /// A complete log: start, three events, exit, stop. Returns its path and the lines.
    fn sample_log(dir: &Path, session: &str) -> (PathBuf, Vec<String>) {
        let path = dir.join(format!("{session}.jsonl"));
        let log = AuditLog::create(&path, session).unwrap();
        log.emit(NewEvent::new(
            Layer::Session,
            Action::Start,
            "session started",
        ))
        .unwrap();
        log.emit(
            NewEvent::new(Layer::Filesystem, Action::Deny, "masked by built-in deny")
                .rule("built-in")
                .detail("path", "/home/u/.ssh"),
        )
        .unwrap();
        log.emit(NewEvent::new(Layer::Network, Action::Allow, "allowed").detail("host", "a.b"))
            .unwrap();
        log.emit(
            NewEvent::new(Layer::Env, Action::Deny, "dropped")
                .rule("x:1")
                .detail("var", "T"),
        )
        .unwrap();
        log.emit(NewEvent::new(Layer::Session, Action::Exit, "agent exited").detail("code", 3))
            .unwrap();
        log.emit(NewEvent::new(
            Layer::Session,
            Action::Stop,
            "session stopped",
        ))
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        (path, text.lines().map(str::to_owned).collect())
    }

    fn write_lines(path: &Path, lines: &[String]) {
        let mut text = lines.join("\n");
        text.push('\n');
        std::fs::write(path, text).unwrap();
    }

    fn lines_of(report: &VerifyReport) -> Vec<u64> {
        report.problems.iter().map(|p| p.line).collect()
    }

    #[test]
    fn intact_log_reads_back_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let (path, lines) = sample_log(dir.path(), "s1");
        assert_eq!(lines.len(), 6);
        let events = read_log(&path).unwrap();
        assert_eq!(events.len(), 6);
        assert_eq!(events[1].rule.as_deref(), Some("built-in"));
        assert_eq!(events[1].detail_str("path"), Some("/home/u/.ssh"));
        // Absent rule and empty detail are left out of the line.
        assert!(!lines[0].contains("\"rule\"") && !lines[0].contains("\"detail\""));
        let report = verify(&path).unwrap();
        assert!(report.ok(), "{:?}", report.problems);
        assert!(report.complete);
        assert_eq!(report.events, 6);
        assert_eq!(report.session.as_deref(), Some("s1"));
    }

    #[test]
    fn edited_value_is_reported_at_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut lines) = sample_log(dir.path(), "s1");
        assert!(lines[1].contains("/home/u/.ssh"));
        lines[1] = lines[1].replace("/home/u/.ssh", "/home/u/.ssx");
        write_lines(&path, &lines);
        let report = verify(&path).unwrap();
        assert!(!report.ok());
        assert!(report.complete);
        assert_eq!(lines_of(&report), vec![2], "{:?}", report.problems);
        assert!(report.problems[0].what.contains("hash mismatch"));
    }

    #[test]
    fn awkward_values_survive_the_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let log = AuditLog::create(&path, "s1").unwrap();
        let floats = [
            0.1 + 0.2,
            1e-300,
            5e-324,
            1.7976931348623157e308,
            -0.0,
            2.0 / 3.0,
        ];
        for (i, f) in floats.into_iter().enumerate() {
            log.emit(
                NewEvent::new(Layer::Limits, Action::Apply, "cpu")
                    .detail("cpu", f)
                    .detail("i", i),
            )
            .unwrap();
        }
        log.emit(
            NewEvent::new(Layer::Exec, Action::Log, "weird \"text\"\n\u{0}\u{1b} é 😀")
                .detail("big", u64::MAX)
                .detail("neg", i64::MIN)
                .detail("nan", f64::NAN)
                .detail(
                    "nested",
                    serde_json::json!({"z": [1, {"b": 2, "a": 1}], "a": null}),
                ),
        )
        .unwrap();
        log.emit(NewEvent::new(Layer::Session, Action::Stop, "stopped"))
            .unwrap();
        let report = verify(&path).unwrap();
        assert!(report.ok(), "{:?}", report.problems);
    }

    #[test]
    fn reformatting_a_line_is_not_an_edit() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut lines) = sample_log(dir.path(), "s1");
        // Re-serialise line 2 with keys in a different order and spaces.
        let v: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        let obj = v.as_object().unwrap();
        let mut keys: Vec<_> = obj.keys().cloned().collect();
        keys.reverse();
        let parts: Vec<String> = keys
            .iter()
            .map(|k| format!("{:?} : {}", k, serde_json::to_string(&obj[k]).unwrap()))
            .collect();
        lines[1] = format!("{{ {} }}", parts.join(" , "));
        write_lines(&path, &lines);
        let report = verify(&path).unwrap();
        assert!(report.ok(), "{:?}", report.problems);
    }

    #[test]
    fn edit_with_recomputed_hash_breaks_the_next_line() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut lines) = sample_log(dir.path(), "s1");
        let mut ev: Event = serde_json::from_str(&lines[1]).unwrap();
        ev.reason = "nothing to see".into();
        ev.hash = hash_event(&ev);
        lines[1] = serde_json::to_string(&ev).unwrap();
        write_lines(&path, &lines);
        let report = verify(&path).unwrap();
        assert_eq!(lines_of(&report), vec![3], "{:?}", report.problems);
        assert!(
            report.problems[0]
                .what
                .contains("prev does not match line 2's hash")
        );
    }

    #[test]
    fn removed_middle_line_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut lines) = sample_log(dir.path(), "s1");
        lines.remove(2);
        write_lines(&path, &lines);
        let report = verify(&path).unwrap();
        assert!(!report.ok());
        assert_eq!(report.events, 5);
        assert_eq!(lines_of(&report), vec![3, 3], "{:?}", report.problems);
        let all: Vec<&str> = report.problems.iter().map(|p| p.what.as_str()).collect();
        assert!(
            all.iter()
                .any(|w| w.contains("prev does not match line 2's hash")),
            "{all:?}"
        );
        assert!(
            all.iter().any(|w| w.contains("seq jumps from 1 to 3")),
            "{all:?}"
        );
    }

    #[test]
    fn swapped_lines_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut lines) = sample_log(dir.path(), "s1");
        lines.swap(2, 3);
        write_lines(&path, &lines);
        let report = verify(&path).unwrap();
        assert!(!report.ok());
        assert!(report.problems.iter().any(|p| p.line == 3));
    }

    #[test]
    fn removed_first_line_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut lines) = sample_log(dir.path(), "s1");
        lines.remove(0);
        write_lines(&path, &lines);
        let report = verify(&path).unwrap();
        assert_eq!(lines_of(&report), vec![1, 1], "{:?}", report.problems);
    }

    #[test]
    fn truncated_stop_event_is_incomplete() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut lines) = sample_log(dir.path(), "s1");
        lines.pop();
        write_lines(&path, &lines);
        let report = verify(&path).unwrap();
        assert!(!report.complete);
        assert!(!report.ok());
        assert_eq!(lines_of(&report), vec![5]);
        assert!(
            report.problems[0]
                .what
                .contains("without a session stop event")
        );
    }

    #[test]
    fn partial_last_line_is_reported_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (path, lines) = sample_log(dir.path(), "s1");
        let mut text = lines[..5].join("\n");
        text.push('\n');
        text.push_str(&lines[5][..20]);
        std::fs::write(&path, text).unwrap();
        let report = verify(&path).unwrap();
        assert!(!report.complete);
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.line == 6 && p.what.contains("incomplete"))
        );
        assert!(matches!(
            read_log(&path),
            Err(EventError::Parse { line: 6, .. })
        ));
    }

    #[test]
    fn malformed_line_is_a_parse_error_with_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut lines) = sample_log(dir.path(), "s1");
        lines[2] = "{not json".into();
        write_lines(&path, &lines);
        let err = read_log(&path).unwrap_err();
        assert!(matches!(err, EventError::Parse { line: 3, .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("s1.jsonl:3:"), "{msg}");
        let report = verify(&path).unwrap();
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.line == 3 && p.what.contains("not a valid"))
        );
        // The line after the bad one cannot be checked against it, and is not blamed for it.
        assert_eq!(lines_of(&report), vec![3]);
        assert_eq!(report.events, 5);
    }

    #[test]
    fn unknown_top_level_field_is_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut lines) = sample_log(dir.path(), "s1");
        lines[1] = lines[1].replacen('{', "{\"approved\":true,", 1);
        write_lines(&path, &lines);
        assert!(matches!(
            read_log(&path),
            Err(EventError::Parse { line: 2, .. })
        ));
        assert!(!verify(&path).unwrap().ok());
    }

    #[test]
    fn garbage_and_empty_files_do_not_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.jsonl");
        std::fs::write(&path, b"").unwrap();
        assert_eq!(read_log(&path).unwrap(), vec![]);
        let report = verify(&path).unwrap();
        assert_eq!(report.events, 0);
        assert!(!report.ok() && !report.complete);

        let mut f = std::fs::File::create(&path).unwrap();
        let garbage: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        f.write_all(&garbage).unwrap();
        f.write_all(b"\n\n\xff\xfe{}\n[1,2]\nnull\n\"x\"\n")
            .unwrap();
        drop(f);
        assert!(matches!(read_log(&path), Err(EventError::Parse { .. })));
        let report = verify(&path).unwrap();
        assert_eq!(report.events, 0);
        assert!(!report.ok());

        let missing = dir.path().join("missing.jsonl");
        assert!(matches!(verify(&missing), Err(EventError::Io { .. })));
        assert!(matches!(read_log(&missing), Err(EventError::Io { .. })));
    }

    #[test]
    fn list_sessions_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let (_, _) = sample_log(dir.path(), "20260101T000000Z-00000001");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let path2 = dir.path().join("20260101T000001Z-00000002.jsonl");
        let log = AuditLog::create(&path2, "20260101T000001Z-00000002").unwrap();
        log.emit(NewEvent::new(Layer::Session, Action::Start, "started"))
            .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        std::fs::write(dir.path().join("junk.jsonl"), "garbage\n").unwrap();

        let list = list_sessions(dir.path()).unwrap();
        let ids: Vec<&str> = list.iter().map(|s| s.session.as_str()).collect();
        assert_eq!(
            ids,
            [
                "20260101T000001Z-00000002",
                "20260101T000000Z-00000001",
                "junk"
            ]
        );
        assert_eq!(list[0].events, 1);
        assert!(!list[0].stopped);
        assert_eq!(list[0].exit_code, None);
        assert_eq!(list[1].events, 6);
        assert!(list[1].stopped);
        assert_eq!(list[1].exit_code, Some(3));
        assert!(list[1].start.is_some() && list[1].end.is_some());
        assert_eq!(list[2].events, 0);
        assert_eq!(list[2].start, None);

        assert_eq!(list_sessions(&dir.path().join("nope")).unwrap(), vec![]);
    }
}
