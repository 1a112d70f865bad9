//! Brokered logins: an agent renews its OAuth login (or first logs in) at its provider's token
//! endpoint (`[credentials.X] refresh`), and the tokens rotate. The sandbox holds only
//! placeholders, so cordon does the exchange's secret parts:
//!
//! - the request: the placeholder of the refresh token in its body (JSON or form) becomes
//!   the real one, for that endpoint only (`Logins::request_body`);
//! - the answer: its new tokens are written to the host's login file at once, before the
//!   agent hears anything (a rotated refresh token makes the old one dead: the host must
//!   never be left holding it), the credentials swapped at the wire from then on are the new
//!   ones, and the agent gets the answer with placeholders for them (`Logins::answer`).
//!
//! A placeholder handed out earlier in the session keeps working (it now stands for the new
//! value): the login file inside is a read-only copy taken at start, and a second process of
//! the agent reads it. Host side only.
//!
//! Only a refresh of the host's own login reaches the host's file: `grant_type=refresh_token`
//! with the refresh token cordon put in (the host file's, by its placeholder). The provider
//! answers that for the account that token belongs to, so it can only renew the same login;
//! a missing or empty token in the answer is never written, so the file keeps its refresh
//! token. Any other exchange (an `authorization_code` login, a refresh with a token the
//! session brought itself) may be another account's: its tokens work for this session, are
//! held in a copy of the login file in cordon's own state (never visible inside), and the
//! user is told; from then on the session's login is not the host's, and none of its later
//! exchanges is written to the host's file either.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use cordon_policy::{CredentialPlan, RefreshPlan};

use super::{PlaceholderKey, WireCredential, login_file, placeholder};

/// The session's brokered logins, and the credentials at the wire once one has changed.
pub struct Logins {
    key: PlaceholderKey,
    /// The credentials that name a token endpoint.
    plans: Vec<CredentialPlan>,
    /// The credentials swapped at the wire since the first exchange (`None`: the session's
    /// starting ones).
    live: RwLock<Option<Arc<Live>>>,
    /// One exchange's file writes and credential update at a time.
    writing: Mutex<()>,
    /// One exchange in flight at a time: a second refresh (another process of the agent, its
    /// file's stale placeholder) waits for the first's rotation and sends the new token, not
    /// the one the first just made dead.
    exchanging: tokio::sync::Mutex<()>,
    /// Where the tokens of an exchange not written to the host go (`None`: nowhere, they last
    /// the session only).
    held_dir: Option<PathBuf>,
    /// An exchange was held: the session's login is no longer the host's.
    diverged: AtomicBool,
}

impl std::fmt::Debug for Logins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.plans.iter().map(|p| p.name.as_str()).collect();
        f.debug_struct("Logins")
            .field("plans", &names)
            .finish_non_exhaustive()
    }
}

/// The credentials at the wire after an exchange, with what follows from them.
pub(crate) struct Live {
    /// Every credential; a rotated one also under each placeholder it had before.
    pub credentials: Vec<WireCredential>,
    /// Real values back to placeholders in answers.
    pub scrub: Option<crate::dlp::Scrubber>,
    /// (credential, placeholder), for bodies checked as they stream.
    pub placeholders: Arc<Vec<(String, String)>>,
}

/// What an exchange's answer became.
#[derive(Debug)]
pub(crate) struct Answered {
    /// The body the agent gets: every new real token replaced by its placeholder.
    pub body: Vec<u8>,
    /// The credentials that changed.
    pub renewed: Vec<String>,
    /// The login files written.
    pub written: Vec<PathBuf>,
    /// A login file that could not be written, and why (the new tokens then live in this
    /// session only).
    pub failed: Vec<(PathBuf, String)>,
    /// Why the host's login files were left alone, when they were (see the module docs).
    pub held_why: Option<String>,
    /// For each login file left alone: the copy that holds the new tokens, or why there is
    /// none (they then live in this session only).
    pub held: Vec<(PathBuf, Result<PathBuf, String>)>,
}

impl Logins {
    /// The brokered logins of `plans` (those with `refresh`); `None` when there are none.
    /// `key` makes the placeholders of new tokens, as at the start of a session.
    pub fn new(key: PlaceholderKey, plans: &[CredentialPlan]) -> Option<Self> {
        let plans: Vec<CredentialPlan> = plans
            .iter()
            .filter(|p| p.refresh.is_some() && p.source.login_file().is_some())
            .cloned()
            .collect();
        (!plans.is_empty()).then(|| Self {
            key,
            plans,
            live: RwLock::new(None),
            writing: Mutex::new(()),
            exchanging: tokio::sync::Mutex::new(()),
            held_dir: None,
            diverged: AtomicBool::new(false),
        })
    }

    /// Keep the tokens of exchanges not written to the host in `dir` (cordon's own state,
    /// never visible inside), one copy of each login file.
    pub fn with_held_dir(mut self, dir: PathBuf) -> Self {
        self.held_dir = Some(dir);
        self
    }

    /// Why an exchange whose request was `body` must not reach the host's login files, or
    /// `None` when it is a refresh of the host's own login: `grant_type=refresh_token` with a
    /// refresh token cordon put in for this endpoint (by a placeholder of `current`), and no
    /// exchange of the session held before.
    pub(crate) fn hold_reason(
        &self,
        current: &[WireCredential],
        to: (&str, u16, &str),
        json: bool,
        body: &[u8],
    ) -> Option<String> {
        let (host, port, path) = to;
        let (grant, refresh) = grant_and_refresh(json, body);
        if self.diverged.load(Ordering::SeqCst) {
            return Some(
                "an earlier exchange of this session was held: its login is not the host's".into(),
            );
        }
        if grant != "refresh_token" {
            return Some(format!(
                "a {} exchange is a new login, maybe another account's",
                if grant.is_empty() { "token" } else { &grant }
            ));
        }
        let ours = refresh.is_some_and(|v| {
            self.at(host, port, path)
                .filter(|(_, r)| r.token == "refresh_token")
                .any(|(p, _)| {
                    current
                        .iter()
                        .any(|c| c.name == p.name && c.placeholder == v)
                })
        });
        (!ours).then(|| {
            "a refresh with a token the session brought itself, not the host login's".into()
        })
    }

    /// Whether a request to `host:port` for `path` is a token exchange this session brokers.
    pub(crate) fn is_endpoint(&self, host: &str, port: u16, path: &str) -> bool {
        self.at(host, port, path).next().is_some()
    }

    fn at<'a>(
        &'a self,
        host: &'a str,
        port: u16,
        path: &'a str,
    ) -> impl Iterator<Item = (&'a CredentialPlan, &'a RefreshPlan)> + 'a {
        self.plans.iter().filter_map(move |p| {
            let r = p.refresh.as_ref()?;
            r.is_endpoint(host, port, path).then_some((p, r))
        })
    }

    /// Held for the whole of one exchange (see `exchanging`).
    pub(crate) async fn one_at_a_time(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.exchanging.lock().await
    }

    /// The credentials at the wire since the first exchange (`None`: the starting ones).
    pub(crate) fn live(&self) -> Option<Arc<Live>> {
        self.live.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The body to send the endpoint: the placeholder of a refresh token it takes, as the
    /// whole value of `refresh_token` (a JSON string or a form field), becomes the real one.
    /// Anything else is left for the wire's own check (a placeholder elsewhere is a leak).
    /// Also returns the grant type the body names, for events.
    pub(crate) fn request_body(
        &self,
        current: &[WireCredential],
        to: (&str, u16, &str),
        json: bool,
        body: &[u8],
    ) -> (Vec<u8>, String) {
        let (host, port, path) = to;
        let ours = |v: &str| {
            self.at(host, port, path)
                .filter(|(_, r)| r.token == "refresh_token")
                .find_map(|(p, _)| {
                    current
                        .iter()
                        .find(|c| c.name == p.name && c.placeholder == v)
                })
        };
        let text = String::from_utf8_lossy(body);
        if json {
            let Ok(serde_json::Value::Object(doc)) = serde_json::from_slice(body) else {
                return (body.to_vec(), String::new());
            };
            let grant = doc
                .get("grant_type")
                .and_then(|g| g.as_str())
                .unwrap_or_default()
                .to_string();
            let swapped = doc
                .get("refresh_token")
                .and_then(|v| v.as_str())
                .and_then(ours)
                .and_then(|c| {
                    login_file::set_field(
                        &text,
                        "refresh_token",
                        &serde_json::Value::String(c.real.clone()),
                    )
                    .ok()
                });
            return (swapped.map_or(body.to_vec(), String::into_bytes), grant);
        }
        let mut grant = String::new();
        let pairs: Vec<String> = text
            .split('&')
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                let value = form_decode(v);
                if k == "grant_type" {
                    grant.clone_from(&value);
                }
                match ours(&value).filter(|_| k == "refresh_token") {
                    Some(c) => {
                        format!("{k}={}", crate::encoding::percent_encode(c.real.as_bytes()))
                    }
                    None => kv.to_string(),
                }
            })
            .collect();
        (pairs.join("&").into_bytes(), grant)
    }

    /// Takes the endpoint's (successful, JSON) answer: its new tokens go to the host's login
    /// files at once, the credentials at the wire become the new ones, and the agent's copy
    /// holds placeholders. `None` when the answer carries no token this session brokers (it
    /// is then relayed as any other, scrubbed). `hold`: why the exchange must not reach the
    /// host's files ([`Logins::hold_reason`]); the tokens then go to held copies instead.
    pub(crate) fn answer(
        &self,
        current: &[WireCredential],
        to: (&str, u16, &str),
        body: &[u8],
        hold: Option<String>,
    ) -> Option<Answered> {
        let (host, port, path) = to;
        let doc: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body).ok()?;
        let expires_in = doc.get("expires_in").and_then(serde_json::Value::as_f64);
        let mut renewed: Vec<(&CredentialPlan, String)> = Vec::new();
        for (p, r) in self.at(host, port, path) {
            if let Some(v) = doc.get(&r.token).and_then(|v| v.as_str())
                && !v.is_empty()
            {
                renewed.push((p, v.to_string()));
            }
        }
        if renewed.is_empty() {
            return None;
        }
        let _one = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        // Checked again under the lock: an exchange held meanwhile holds this one too.
        let hold = hold.or_else(|| {
            self.diverged.load(Ordering::SeqCst).then(|| {
                "an earlier exchange of this session was held: its login is not the host's".into()
            })
        });
        if hold.is_some() {
            self.diverged.store(true, Ordering::SeqCst);
        }
        // The host first: should the file not take them, the tokens still work this session.
        let mut files: Vec<(PathBuf, Vec<(String, serde_json::Value)>)> = Vec::new();
        for (p, real) in &renewed {
            let cordon_policy::CredentialSource::Json { file, field } = &p.source else {
                continue;
            };
            let mut updates = vec![(field.clone(), serde_json::Value::String(real.clone()))];
            if let Some(r) = &p.refresh {
                if let (Some(f), Some(secs)) = (&r.expires_ms, expires_in) {
                    updates.push((f.clone(), serde_json::Value::from(expiry_ms(secs))));
                }
                if let Some(f) = &r.refreshed_at {
                    updates.push((f.clone(), serde_json::Value::String(now_rfc3339())));
                }
            }
            match files.iter_mut().find(|(f, _)| f == file) {
                Some((_, list)) => {
                    for u in updates {
                        if !list.iter().any(|(k, _)| *k == u.0) {
                            list.push(u);
                        }
                    }
                }
                None => files.push((file.clone(), updates)),
            }
        }
        let mut written = Vec::new();
        let mut failed = Vec::new();
        let mut held = Vec::new();
        for (file, updates) in files {
            if hold.is_some() {
                let copy = self.hold(&file, &updates);
                held.push((file, copy));
                continue;
            }
            match login_file::write_json_fields(&file, &updates) {
                Ok(()) => written.push(file),
                Err(e) => failed.push((file, e.to_string())),
            }
        }
        let credentials = self.renew(current, &renewed);
        // Every real value the answer holds (the new ones, or an old one it echoes) as the
        // agent knows it: by its newest placeholder.
        let mut out = body.to_vec();
        let mut seen: Vec<&str> = Vec::new();
        for c in &credentials {
            if !seen.contains(&c.real.as_str()) {
                seen.push(&c.real);
                out = replace_all(&out, c.real.as_bytes(), c.placeholder.as_bytes());
            }
        }
        self.set_live(credentials);
        Some(Answered {
            body: out,
            renewed: renewed.iter().map(|(p, _)| p.name.clone()).collect(),
            written,
            failed,
            held_why: hold,
            held,
        })
    }

    /// Write `updates` to the held copy of the login file `file` (made from the host's file,
    /// so it is a whole login the user can put in its place); its path.
    fn hold(
        &self,
        file: &Path,
        updates: &[(String, serde_json::Value)],
    ) -> Result<PathBuf, String> {
        let dir = self
            .held_dir
            .as_ref()
            .ok_or("no state directory to hold them in")?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let name: String = file
            .to_string_lossy()
            .trim_start_matches('/')
            .chars()
            .map(|c| if c == '/' { '_' } else { c })
            .collect();
        let copy = dir.join(name);
        if !copy.exists() {
            let seed = match std::fs::read(file) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => b"{}\n".to_vec(),
                Err(e) => return Err(format!("{}: {e}", file.display())),
            };
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&copy)
                .and_then(|mut f| std::io::Write::write_all(&mut f, &seed))
                .map_err(|e| format!("{}: {e}", copy.display()))?;
        }
        login_file::write_json_fields(&copy, updates).map_err(|e| e.to_string())?;
        Ok(copy)
    }

    /// `current` with each renewed credential's value replaced (under its new placeholder,
    /// and under every one it had before); a login made in the session (no credential yet)
    /// is added from its plan.
    fn renew(
        &self,
        current: &[WireCredential],
        renewed: &[(&CredentialPlan, String)],
    ) -> Vec<WireCredential> {
        let mut out: Vec<WireCredential> = Vec::new();
        for c in current {
            match renewed.iter().find(|(p, _)| p.name == c.name) {
                Some((_, real)) => {
                    // The earlier placeholders stand for the new value too; only the
                    // newest is injected.
                    out.push(WireCredential {
                        real: real.clone(),
                        inject: false,
                        ..c.clone()
                    });
                }
                None => out.push(c.clone()),
            }
        }
        for (p, real) in renewed {
            let ph = placeholder(&self.key, &p.name, real);
            out.retain(|c| !(c.name == p.name && c.placeholder == ph));
            let inject = current
                .iter()
                .find(|c| c.name == p.name)
                .map_or(p.inject, |c| c.inject);
            // The newest first: the answer and the scrubber name a value by it.
            out.insert(
                0,
                WireCredential {
                    name: p.name.clone(),
                    placeholder: ph,
                    real: real.clone(),
                    hosts: p.hosts.clone(),
                    programs: p.programs.clone(),
                    slot: p.slot.clone(),
                    inject,
                },
            );
        }
        out
    }

    fn set_live(&self, credentials: Vec<WireCredential>) {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for c in &credentials {
            if !pairs.iter().any(|(r, _)| *r == c.real) {
                pairs.push((c.real.clone(), c.placeholder.clone()));
            }
        }
        let live = Live {
            scrub: crate::dlp::Scrubber::new(&pairs),
            placeholders: Arc::new(
                credentials
                    .iter()
                    .map(|c| (c.name.clone(), c.placeholder.clone()))
                    .collect(),
            ),
            credentials,
        };
        *self.live.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(live));
    }
}

/// The grant type a token request names and the refresh token it carries, if any (a JSON
/// object's strings, or form fields).
fn grant_and_refresh(json: bool, body: &[u8]) -> (String, Option<String>) {
    if json {
        let Ok(serde_json::Value::Object(doc)) = serde_json::from_slice(body) else {
            return (String::new(), None);
        };
        let s = |k: &str| doc.get(k).and_then(|v| v.as_str()).map(str::to_string);
        return (s("grant_type").unwrap_or_default(), s("refresh_token"));
    }
    let (mut grant, mut refresh) = (String::new(), None);
    for kv in String::from_utf8_lossy(body).split('&') {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "grant_type" => grant = form_decode(v),
            "refresh_token" => refresh = Some(form_decode(v)),
            _ => {}
        }
    }
    (grant, refresh)
}

/// `data` with every `from` replaced by `to`.
pub(crate) fn replace_all(data: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    if from.is_empty() {
        return data.to_vec();
    }
    let mut out = Vec::with_capacity(data.len());
    let mut at = 0;
    for i in memchr::memmem::find_iter(data, from) {
        if i < at {
            continue;
        }
        out.extend_from_slice(&data[at..i]);
        out.extend_from_slice(to);
        at = i + from.len();
    }
    out.extend_from_slice(&data[at..]);
    out
}

fn now() -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// When a token valid for `secs` from now expires, in milliseconds since the epoch.
fn expiry_ms(secs: f64) -> u64 {
    let ms = u64::try_from(now().as_millis()).unwrap_or(u64::MAX);
    ms.saturating_add((secs.max(0.0) * 1000.0) as u64)
}

/// Now as RFC 3339 in UTC, with microseconds (`2026-12-01T17:30:38.123456Z`).
fn now_rfc3339() -> String {
    let n = now();
    let t = time::OffsetDateTime::from_unix_timestamp(i64::try_from(n.as_secs()).unwrap_or(0))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        n.subsec_micros()
    )
}

/// A form value decoded (`+` is a space, `%XX` a byte), as text.
fn form_decode(v: &str) -> String {
    String::from_utf8_lossy(&crate::encoding::form_decode(v.as_bytes())).into_owned()
}

#[cfg(test)]
#[path = "refresh_tests.rs"]
mod tests;
