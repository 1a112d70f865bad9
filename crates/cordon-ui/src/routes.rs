//! The dashboard's URLs and what each answers, apart from the event stream (see `server`).
//! Handlers here are plain functions of the request, so routing and answers are tested
//! without a socket.

use std::path::Path;

use serde::Deserialize;
use serde_json::json;

use crate::hub::Hub;

pub const INDEX_HTML: &str = include_str!("assets/index.html");
pub const APP_JS: &str = include_str!("assets/app.js");
pub const APP_CSS: &str = include_str!("assets/app.css");

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Index,
    Script,
    Style,
    /// `GET /events`: the SSE stream.
    Events,
    /// `GET /api/snapshot`: everything known, once.
    Snapshot,
    /// `GET /api/state?session=ID`: a session's state review.
    StateDiff,
    /// `POST /api/answer`: answer a held question.
    Answer,
    /// `POST /api/remember`: the policy change an "allow always" would make.
    Remember,
    /// `POST /api/state/accept` / `discard`.
    StateAccept,
    StateDiscard,
    NotFound,
    /// The path exists, with another method.
    WrongMethod,
}

pub fn route(method: &str, path: &str) -> Route {
    let (get, post) = (method == "GET" || method == "HEAD", method == "POST");
    let (r, wants_post) = match path {
        "/" | "/index.html" => (Route::Index, false),
        "/app.js" => (Route::Script, false),
        "/app.css" => (Route::Style, false),
        "/events" => (Route::Events, false),
        "/api/snapshot" => (Route::Snapshot, false),
        "/api/state" => (Route::StateDiff, false),
        "/api/answer" => (Route::Answer, true),
        "/api/remember" => (Route::Remember, true),
        "/api/state/accept" => (Route::StateAccept, true),
        "/api/state/discard" => (Route::StateDiscard, true),
        _ => return Route::NotFound,
    };
    match (wants_post, get, post) {
        (false, true, _) | (true, _, true) => r,
        _ => Route::WrongMethod,
    }
}

/// An answer: status, content type, body.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Reply {
    fn json(status: u16, v: serde_json::Value) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body: v.to_string(),
        }
    }

    pub fn error(status: u16, msg: impl std::fmt::Display) -> Reply {
        Reply::json(status, json!({ "ok": false, "error": msg.to_string() }))
    }

    pub(crate) fn ok(v: serde_json::Value) -> Reply {
        Reply::json(200, v)
    }
}

/// The page, with the token for its own requests. The token is 64 hex digits (checked at
/// start), so it needs no escaping in the attribute it goes into.
pub fn index(token: &str) -> Reply {
    Reply {
        status: 200,
        content_type: "text/html; charset=utf-8",
        body: INDEX_HTML.replace("{{TOKEN}}", token),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerReq {
    session: String,
    id: u64,
    allow: bool,
    #[serde(default)]
    remember: bool,
    /// Also write the rule that allows it again into the user's policy (see `policy`).
    #[serde(default)]
    write: Option<crate::policy::WriteReq>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionReq {
    session: String,
}

pub(crate) fn valid(session: &str) -> Result<(), Reply> {
    if cordon_events::is_valid_session_id(session) {
        Ok(())
    } else {
        Err(Reply::error(400, format!("invalid session id {session:?}")))
    }
}

/// `POST /api/answer`, through the same broker client `cordon approve` uses. With `write`, the
/// rule is written first (through `writer`, as `cordon approve --always`), and the question is
/// answered only once it is.
pub fn answer(
    writer: Option<&dyn crate::policy::PolicyWriter>,
    dir: Option<&Path>,
    body: &[u8],
) -> Reply {
    let req: AnswerReq = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return Reply::error(400, format!("bad request body: {e}")),
    };
    if let Err(r) = valid(&req.session) {
        return r;
    }
    let Some(dir) = dir else {
        return Reply::error(503, "no approvals directory: set XDG_RUNTIME_DIR or HOME");
    };
    let written = match &req.write {
        Some(_) if !req.allow => {
            return Reply::error(400, "only an allow is written into the policy");
        }
        Some(w) => match crate::policy::write(writer, Some(dir), &req.session, req.id, w) {
            Ok(file) => Some(file),
            Err(r) => return r,
        },
        None => None,
    };
    let socket = cordon_approval::socket_path(dir, &req.session);
    match (
        cordon_approval::answer(&socket, req.id, req.allow, req.remember),
        written,
    ) {
        (Ok(()), w) => Reply::ok(json!({ "ok": true, "written": w })),
        (Err(e), Some(file)) => Reply::error(
            409,
            format!("the rule is in {file}, but the question was not answered: {e}"),
        ),
        (Err(e), None) => Reply::error(409, format!("not answered: {e}")),
    }
}

fn open_state(root: Option<&Path>, session: &str) -> Result<cordon_state::Session, Reply> {
    valid(session)?;
    let root = root.ok_or_else(|| Reply::error(503, "no state directory: set HOME"))?;
    cordon_state::StateStore::new(root)
        .open(session)
        .map_err(|e| Reply::error(404, e))
}

/// `GET /api/state?session=ID`: the review `cordon state diff` prints, and each change.
pub fn state_diff(hub: &Hub, session: &str) -> Reply {
    let s = match open_state(hub.sources.state_root.as_deref(), session) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let summary = match s.summary() {
        Ok(t) => t,
        Err(e) => return Reply::error(500, e),
    };
    let all = s.changes().unwrap_or_default();
    // What waits, as the review lists it (a new directory comes with its files).
    let changes: Vec<serde_json::Value> = cordon_state::listed(&all)
        .iter()
        .map(|c| {
            json!({
                "path": c.host_path.display().to_string(),
                "kind": format!("{:?}", c.kind).to_lowercase(),
                "flags": c.flags,
            })
        })
        .collect();
    Reply::ok(json!({
        "session": session,
        "running": hub.still_running(&s),
        "summary": summary,
        "changes": changes,
    }))
}

/// `POST /api/state/accept` and `/discard`: what `cordon state accept SESSION` (every
/// protected change) and `cordon state discard SESSION` do. Refused until the session ended
/// (see [`Hub::still_running`]): its changes are not complete, and its own exit review may
/// still decide them.
pub fn state_change(hub: &Hub, body: &[u8], accept: bool) -> Reply {
    let req: SessionReq = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return Reply::error(400, format!("bad request body: {e}")),
    };
    let s = match open_state(hub.sources.state_root.as_deref(), &req.session) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if hub.still_running(&s) {
        let verb = if accept { "accepted" } else { "discarded" };
        return Reply::error(
            409,
            format!(
                "session {} is still running: its changes can be {verb} once it has ended (and after its own exit review)",
                req.session
            ),
        );
    }
    if accept {
        match s.accept(&[]) {
            Ok(r) => Reply::ok(json!({
                "ok": r.conflicts.is_empty(),
                "accepted": r.accepted,
                "applied": r.applied.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                "conflicts": r.conflicts.iter().map(|c| format!("{}: {}", c.path.display(), c.why)).collect::<Vec<_>>(),
            })),
            Err(e) => Reply::error(500, e),
        }
    } else {
        match s.discard().and_then(|()| s.discard_home()) {
            Ok(()) => Reply::ok(json!({ "ok": true })),
            Err(e) => Reply::error(500, e),
        }
    }
}

/// `GET /api/snapshot`.
pub fn snapshot(hub: &Hub) -> Reply {
    Reply::ok(hub.snapshot())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing() {
        assert_eq!(route("GET", "/"), Route::Index);
        assert_eq!(route("GET", "/app.js"), Route::Script);
        assert_eq!(route("GET", "/events"), Route::Events);
        assert_eq!(route("POST", "/api/answer"), Route::Answer);
        assert_eq!(route("POST", "/api/remember"), Route::Remember);
        assert_eq!(route("GET", "/api/remember"), Route::WrongMethod);
        assert_eq!(route("GET", "/api/answer"), Route::WrongMethod);
        assert_eq!(route("POST", "/"), Route::WrongMethod);
        assert_eq!(route("POST", "/api/state/discard"), Route::StateDiscard);
        assert_eq!(route("DELETE", "/api/state/accept"), Route::WrongMethod);
        assert_eq!(route("GET", "/../etc/passwd"), Route::NotFound);
        assert_eq!(route("GET", "/api/answer/"), Route::NotFound);
    }

    #[test]
    fn bad_bodies_and_ids_are_clear_errors() {
        let r = answer(None, Some(Path::new("/nonexistent")), b"{");
        assert_eq!(r.status, 400);
        assert!(r.body.contains("bad request body"), "{}", r.body);
        let r = answer(
            None,
            Some(Path::new("/nonexistent")),
            br#"{"session":"../x","id":1,"allow":true}"#,
        );
        assert_eq!(r.status, 400);
        assert!(r.body.contains("invalid session id"), "{}", r.body);
        let r = answer(
            None,
            Some(Path::new("/nonexistent")),
            br#"{"session":"S","id":1,"allow":true}"#,
        );
        assert_eq!(r.status, 409);
        assert!(r.body.contains("not answered"), "{}", r.body);
        let hub = Hub::new(crate::hub::Sources {
            state_root: Some("/nonexistent".into()),
            ..Default::default()
        });
        let r = state_change(&hub, br#"{"session":"S"}"#, true);
        assert_eq!(r.status, 404, "{}", r.body);
    }

    #[test]
    fn a_session_is_reviewed_only_once_it_has_ended() {
        use cordon_events::{Action, AuditLog, Layer, NewEvent};
        let dir = tempfile::tempdir().unwrap();
        let (root, logs) = (dir.path().join("state"), dir.path().join("logs"));
        std::fs::create_dir_all(&logs).unwrap();
        let id = "20261201T000000Z-0000beef";
        let s = cordon_state::StateStore::new(&root).begin(id, &[]).unwrap();
        let log = AuditLog::create(&logs.join(format!("{id}.jsonl")), id).unwrap();
        log.emit(NewEvent::new(Layer::Session, Action::Start, "s"))
            .unwrap();
        let hub = Hub::new(crate::hub::Sources {
            log_dirs: vec![logs],
            state_root: Some(root),
            ..Default::default()
        });
        let body = format!("{{\"session\":\"{id}\"}}");
        let refused = |accept: bool| {
            let r = state_change(&hub, body.as_bytes(), accept);
            assert_eq!(r.status, 409, "{}", r.body);
            assert!(
                r.body.contains("still running") && r.body.contains("once it has ended"),
                "{}",
                r.body
            );
        };
        // The sandbox runs.
        let sandbox = s.hold_running().unwrap();
        refused(true);
        refused(false);
        drop(sandbox);
        // The sandbox is gone, the log not ended: `cordon run`'s own exit review may be asking.
        refused(true);
        let diff: serde_json::Value = serde_json::from_str(&state_diff(&hub, id).body).unwrap();
        assert_eq!(diff["running"], true, "{diff}");
        log.emit(NewEvent::new(Layer::Session, Action::Stop, "e"))
            .unwrap();
        let diff: serde_json::Value = serde_json::from_str(&state_diff(&hub, id).body).unwrap();
        assert_eq!(diff["running"], false, "{diff}");
        let r = state_change(&hub, body.as_bytes(), false);
        assert_eq!(r.status, 200, "{}", r.body);
    }

    #[test]
    fn the_page_gets_its_token_and_never_builds_html_from_data() {
        let page = index("abc123").body;
        assert!(page.contains("abc123") && !page.contains("{{TOKEN}}"));
        // No inline script or style: the CSP allows only our own files.
        assert!(
            !page.contains("<script>") && !page.contains("style="),
            "{page}"
        );
        assert!(
            page.contains("<script src=\"/app.js?token=abc123\""),
            "{page}"
        );
        // Event text comes from the sandbox: the script only ever sets text, never markup.
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "setAttribute('on",
        ] {
            assert!(!APP_JS.contains(sink), "app.js uses {sink}");
        }
        assert!(APP_JS.contains("textContent"));
    }
}
