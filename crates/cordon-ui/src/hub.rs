//! What the dashboard knows: every running session's recent events and numbers, the questions
//! held by brokers, the state reviews pending. One watcher thread follows the logs (through
//! `cordon_events::Follower`) and polls the brokers and the state store; every change is also
//! sent, framed, to each open event stream.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use cordon_events::{Event, Follower};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::sse;
use crate::stats::Fold;

/// Events kept per session for a page that opens later.
const RECENT: usize = 400;
/// How often the logs are read.
const TICK: Duration = Duration::from_millis(200);
/// How often the log directories are listed for new sessions.
const SCAN_EVERY: Duration = Duration::from_millis(600);
/// How often the brokers are asked what they hold.
const APPROVALS_EVERY: Duration = Duration::from_millis(400);
/// How often the state store is listed (it computes each pending session's changes).
const STATE_EVERY: Duration = Duration::from_secs(3);
/// Most events read from one log per tick, so one busy session cannot starve the rest.
const PER_TICK: usize = 2000;

/// Where the dashboard looks.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Directories of session logs (`*.jsonl`), e.g. `cordon_events::default_log_dir()`.
    pub log_dirs: Vec<PathBuf>,
    /// Single logs outside those (a session run with `--audit FILE`).
    pub log_files: Vec<PathBuf>,
    /// The brokers' directory (`cordon_approval::default_dir()`).
    pub approvals: Option<PathBuf>,
    /// The state store's root (`cordon_state::StateStore::default_root()`).
    pub state_root: Option<PathBuf>,
    /// Writes "allow always" answers into the user's policy; without it the page cannot.
    pub policy_writer: Option<Arc<dyn crate::policy::PolicyWriter>>,
}

impl Sources {
    pub(crate) fn writer(&self) -> Option<&dyn crate::policy::PolicyWriter> {
        self.policy_writer.as_deref()
    }
}

/// A question held by a session's broker.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Pending {
    pub session: String,
    pub id: u64,
    pub layer: String,
    pub what: String,
    pub rule: String,
    pub seconds_left: u64,
    /// A rule can allow it again: the page offers "allow always" and "allow for 1 h".
    pub rememberable: bool,
}

/// A session whose protected state waits for review.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StateRow {
    pub session: String,
    pub changed: Option<usize>,
    /// Not ended yet (see [`Hub::still_running`]): not to be accepted or discarded.
    pub running: bool,
    pub protected: Vec<String>,
}

struct View {
    log: PathBuf,
    ended: bool,
    start: Option<String>,
    last: Option<String>,
    recent: VecDeque<Value>,
    fold: Fold,
    dirty: bool,
}

impl View {
    fn summary(&self, id: &str) -> Value {
        json!({
            "id": id,
            "log": self.log.display().to_string(),
            "ended": self.ended,
            "start": self.start,
            "last": self.last,
            "stats": self.fold.stats(),
        })
    }
}

#[derive(Default)]
struct Inner {
    sessions: BTreeMap<String, View>,
    approvals: Vec<Pending>,
    state: Vec<StateRow>,
}

/// The dashboard's shared picture of all sessions.
pub struct Hub {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<str>>,
    pub(crate) sources: Sources,
}

impl Hub {
    pub fn new(sources: Sources) -> Arc<Hub> {
        let (tx, _) = broadcast::channel(4096);
        Arc::new(Hub {
            inner: Mutex::new(Inner::default()),
            tx,
            sources,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// New frames as they happen. Subscribe before taking the [`Hub::snapshot`], so nothing
    /// falls between the two (an event may then arrive twice: pages dedupe by session and seq).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.tx.subscribe()
    }

    fn send(&self, name: &str, data: &Value) {
        let _ = self.tx.send(Arc::from(sse::frame(name, &data.to_string())));
    }

    /// Everything known now, as the `snapshot` message's data.
    pub fn snapshot(&self) -> Value {
        let inner = self.lock();
        let sessions: Vec<Value> = inner
            .sessions
            .iter()
            .map(|(id, v)| {
                let mut s = v.summary(id);
                s["events"] = Value::Array(v.recent.iter().cloned().collect());
                s
            })
            .collect();
        json!({ "sessions": sessions, "approvals": inner.approvals, "state": inner.state })
    }

    /// Takes one event read from `log`.
    pub fn take(&self, log: &Path, e: Event) {
        let mut inner = self.lock();
        let v = inner
            .sessions
            .entry(e.session.clone())
            .or_insert_with(|| View {
                log: log.to_path_buf(),
                ended: false,
                start: None,
                last: None,
                recent: VecDeque::new(),
                fold: Fold::default(),
                dirty: true,
            });
        v.fold.take(&e);
        if v.start.is_none() {
            v.start = Some(e.time.clone());
        }
        v.last = Some(e.time.clone());
        v.ended |= e.is_session_stop();
        v.dirty = true;
        let value = serde_json::to_value(&e).unwrap_or(Value::Null);
        v.recent.push_back(value.clone());
        while v.recent.len() > RECENT {
            v.recent.pop_front();
        }
        drop(inner);
        self.send("event", &value);
    }

    /// Sends a `session` message for each session whose numbers changed since the last call.
    pub fn flush_sessions(&self) {
        let changed: Vec<Value> = {
            let mut inner = self.lock();
            inner
                .sessions
                .iter_mut()
                .filter(|(_, v)| v.dirty)
                .map(|(id, v)| {
                    v.dirty = false;
                    v.summary(id)
                })
                .collect()
        };
        for s in changed {
            self.send("session", &s);
        }
    }

    pub fn set_approvals(&self, now: Vec<Pending>) {
        let mut inner = self.lock();
        // Seconds left tick down every poll; resend only when the set of questions changed.
        let key = |v: &[Pending]| -> Vec<(String, u64)> {
            v.iter().map(|p| (p.session.clone(), p.id)).collect()
        };
        let changed = key(&inner.approvals) != key(&now);
        inner.approvals = now;
        if changed {
            let data = serde_json::to_value(&inner.approvals).unwrap_or(Value::Null);
            drop(inner);
            self.send("approvals", &data);
        }
    }

    /// Whether `session` has not ended, so its state may not be reviewed yet: its sandbox
    /// holds the session's lock, or its log has no end event. The lock alone is not enough:
    /// `cordon run` lets go of it once the sandbox is gone, before its own exit review (which
    /// accepts or discards too) and the log's end event.
    pub fn still_running(&self, session: &cordon_state::Session) -> bool {
        session.is_running() || self.log_open(&session.id)
    }

    /// Whether the session's log lacks its end event and was written lately: a session killed
    /// with -9 never writes one, and its log is taken for a dead one's once [`QUIET`].
    fn log_open(&self, id: &str) -> bool {
        let known = self.lock().sessions.get(id).map(|v| v.log.clone());
        let found = known.or_else(|| {
            self.sources
                .log_dirs
                .iter()
                .map(|d| d.join(format!("{id}.jsonl")))
                .find(|p| p.exists())
        });
        // Read again rather than trusted from the view: the watcher may be a tick behind.
        found.is_some_and(|log| {
            !ended_already(&log)
                && modified(&log).is_some_and(|t| t.elapsed().map_or(true, |age| age <= QUIET))
        })
    }

    pub fn set_state(&self, now: Vec<StateRow>) {
        let mut inner = self.lock();
        if inner.state != now {
            inner.state = now;
            let data = serde_json::to_value(&inner.state).unwrap_or(Value::Null);
            drop(inner);
            self.send("state", &data);
        }
    }
}

/// Whether the last complete line of the log at `path` is the session's stop event: a session
/// that ended before the dashboard started is not shown.
fn ended_already(path: &Path) -> bool {
    let Ok(mut f) = std::fs::File::open(path) else {
        return true;
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = len.saturating_sub(64 * 1024);
    let mut tail = Vec::new();
    if f.seek(SeekFrom::Start(from)).is_err() || f.read_to_end(&mut tail).is_err() {
        return true;
    }
    let text = String::from_utf8_lossy(&tail);
    text.trim_end()
        .rsplit('\n')
        .next()
        .and_then(|l| serde_json::from_str::<Event>(l).ok())
        .is_some_and(|e| e.is_session_stop())
}

/// The logs in the dashboard's sources right now.
fn logs(sources: &Sources) -> Vec<PathBuf> {
    let mut v = sources.log_files.clone();
    for dir in &sources.log_dirs {
        if let Ok(rd) = std::fs::read_dir(dir) {
            v.extend(
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "jsonl")),
            );
        }
    }
    v
}

fn poll_approvals(dir: &Path) -> Vec<Pending> {
    let mut out = Vec::new();
    for socket in cordon_approval::sockets(dir) {
        let session = socket
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        // A socket left by a session that ended refuses the connection: nothing held there.
        if let Ok(qs) = cordon_approval::list(&socket) {
            out.extend(qs.into_iter().map(|q| Pending {
                session: session.clone(),
                id: q.id,
                layer: q.layer,
                what: q.what,
                rule: q.rule,
                seconds_left: q.seconds_left,
                rememberable: q.subject.is_some(),
            }));
        }
    }
    out
}

fn poll_state(hub: &Hub, root: &Path) -> Vec<StateRow> {
    let store = cordon_state::StateStore::new(root);
    let Ok(list) = store.list() else {
        return Vec::new();
    };
    list.into_iter()
        .filter(|s| s.status == Some(cordon_state::Status::Pending) && s.changed != Some(0))
        .map(|s| StateRow {
            running: store.open(&s.id).is_ok_and(|o| hub.still_running(&o)),
            session: s.id,
            changed: s.changed,
            protected: s
                .protected
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
        })
        .collect()
}

/// What the watcher does with one log.
enum Slot {
    Following(Follower),
    /// Ended (its stop event seen), or unreadable: nothing more to show.
    Done,
    /// Incomplete but untouched for [`QUIET`] when first seen (a session killed with -9, most
    /// likely): not shown unless it grows again.
    Quiet(Option<SystemTime>),
}

/// How long an incomplete log must have been untouched to be taken for a dead session's.
const QUIET: Duration = Duration::from_secs(15 * 60);

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn first_sight(p: &Path) -> Slot {
    if ended_already(p) {
        return Slot::Done;
    }
    let mtime = modified(p);
    if mtime.is_some_and(|t| t.elapsed().is_ok_and(|age| age > QUIET)) {
        return Slot::Quiet(mtime);
    }
    Follower::open(p).map_or(Slot::Done, Slot::Following)
}

/// Reads what `f` has, up to [`PER_TICK`] events; the slot's next state.
fn drain(hub: &Hub, path: &Path, f: &mut Follower) -> Option<Slot> {
    for _ in 0..PER_TICK {
        match f.next_event(Duration::ZERO) {
            Ok(Some(e)) => {
                let stop_event = e.is_session_stop();
                hub.take(path, e);
                if stop_event {
                    return Some(Slot::Done);
                }
            }
            Ok(None) => break,
            // A malformed line is consumed: go on with the next.
            Err(cordon_events::EventError::Parse { .. }) => continue,
            Err(_) => return Some(Slot::Done),
        }
    }
    None
}

/// Follows the sources until `stop` is set.
pub fn watch(hub: Arc<Hub>, stop: Arc<AtomicBool>) {
    let mut followed: HashMap<PathBuf, Slot> = HashMap::new();
    for p in logs(&hub.sources) {
        let slot = first_sight(&p);
        followed.insert(p, slot);
    }
    let mut last_approvals = Instant::now() - APPROVALS_EVERY;
    let mut last_state = Instant::now() - STATE_EVERY;
    let mut last_scan = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        // The log directory may hold thousands of old sessions: list it less often than
        // the followed logs are read.
        let scan = last_scan.elapsed() >= SCAN_EVERY;
        if scan {
            last_scan = Instant::now();
            for p in logs(&hub.sources) {
                // A log that appears while the dashboard runs is a new session: follow it.
                followed
                    .entry(p.clone())
                    .or_insert_with(|| Follower::open(&p).map_or(Slot::Done, Slot::Following));
            }
        }
        for (path, slot) in followed.iter_mut() {
            let next = match slot {
                Slot::Following(f) => drain(&hub, path, f),
                Slot::Quiet(seen) if scan && modified(path) != *seen => {
                    Some(Follower::open(path).map_or(Slot::Done, Slot::Following))
                }
                Slot::Quiet(_) | Slot::Done => None,
            };
            if let Some(n) = next {
                *slot = n;
            }
        }
        hub.flush_sessions();
        if let Some(dir) = &hub.sources.approvals
            && last_approvals.elapsed() >= APPROVALS_EVERY
        {
            last_approvals = Instant::now();
            hub.set_approvals(poll_approvals(dir));
        }
        if let Some(root) = &hub.sources.state_root
            && last_state.elapsed() >= STATE_EVERY
        {
            last_state = Instant::now();
            hub.set_state(poll_state(&hub, root));
        }
        std::thread::sleep(TICK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_events::{Action, AuditLog, Layer, NewEvent};

    #[test]
    fn follows_running_logs_and_skips_ended_ones() {
        let dir = tempfile::tempdir().unwrap();
        let old = AuditLog::create(&dir.path().join("old.jsonl"), "old").unwrap();
        old.emit(NewEvent::new(Layer::Session, Action::Start, "s"))
            .unwrap();
        old.emit(NewEvent::new(Layer::Session, Action::Stop, "e"))
            .unwrap();
        let live = AuditLog::create(&dir.path().join("live.jsonl"), "live").unwrap();
        live.emit(NewEvent::new(Layer::Session, Action::Start, "s"))
            .unwrap();

        let hub = Hub::new(Sources {
            log_dirs: vec![dir.path().to_path_buf()],
            ..Sources::default()
        });
        let mut rx = hub.subscribe();
        let stop = Arc::new(AtomicBool::new(false));
        let t = {
            let (hub, stop) = (hub.clone(), stop.clone());
            std::thread::spawn(move || watch(hub, stop))
        };
        live.emit(
            NewEvent::new(
                Layer::Dns,
                Action::Deny,
                "<img src=x onerror=alert(1)>\nevent: x",
            )
            .rule("built-in"),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut frames = String::new();
        while !frames.contains("onerror") {
            assert!(Instant::now() < deadline, "{frames}");
            if let Ok(f) = rx.try_recv() {
                frames.push_str(&f);
            } else {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
        // The event's text travels as JSON, its newline escaped: one data line.
        assert!(frames.contains("\\nevent: x"), "{frames}");
        let snap = hub.snapshot();
        let ids: Vec<&str> = snap["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, vec!["live"]);
        assert_eq!(snap["sessions"][0]["stats"]["dns_deny"], 1);
    }

    #[test]
    fn a_dead_sessions_log_is_hidden_until_it_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("killed.jsonl");
        let log = AuditLog::create(&path, "killed").unwrap();
        log.emit(NewEvent::new(Layer::Session, Action::Start, "s"))
            .unwrap();
        let old = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let hub = Hub::new(Sources {
            log_dirs: vec![dir.path().to_path_buf()],
            ..Sources::default()
        });
        let stop = Arc::new(AtomicBool::new(false));
        let t = {
            let (hub, stop) = (hub.clone(), stop.clone());
            std::thread::spawn(move || watch(hub, stop))
        };
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(hub.snapshot()["sessions"], json!([]));
        log.emit(NewEvent::new(Layer::Dns, Action::Allow, "again"))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while hub.snapshot()["sessions"]
            .as_array()
            .is_none_or(|a| a.is_empty())
        {
            assert!(Instant::now() < deadline, "the grown log never showed");
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
        // Followed from its start: both events.
        assert_eq!(
            hub.snapshot()["sessions"][0]["events"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
    }

    #[test]
    fn approvals_are_resent_only_when_the_set_changes() {
        let hub = Hub::new(Sources::default());
        let mut rx = hub.subscribe();
        let p = |left| Pending {
            session: "s".into(),
            id: 1,
            layer: "http".into(),
            what: "GET http://a/".into(),
            rule: "r".into(),
            seconds_left: left,
            rememberable: true,
        };
        hub.set_approvals(vec![p(60)]);
        hub.set_approvals(vec![p(59)]);
        hub.set_approvals(vec![]);
        let a = rx.try_recv().unwrap();
        assert!(
            a.starts_with("event: approvals\n") && a.contains("GET http://a/"),
            "{a}"
        );
        assert_eq!(&*rx.try_recv().unwrap(), "event: approvals\ndata: []\n\n");
        assert!(rx.try_recv().is_err());
    }
}
