//! "Allow always" and "Allow for 1 h" on the page: the rule that allows a held question again,
//! written into the user's policy file. The page first asks for the change (`POST
//! /api/remember`) and shows its diff; the answer that follows (`POST /api/answer` with
//! `write`) carries the change's digest back, so what is written is what was shown — or
//! nothing, when the file changed in between.
//!
//! The writing itself is the binary's ([`PolicyWriter`]): it knows where the user's policy is
//! and how to load it again, and `cordon approve --always` goes the same way. It runs here,
//! in the dashboard's own process with the user's rights, never in a sandbox. The question is
//! read from its broker again for each request: the page names a question, never the rule.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::json;

use crate::routes::{Reply, valid};

/// The change a remembered answer makes, not yet made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// The policy file it changes.
    pub file: String,
    /// The change as a unified diff.
    pub diff: String,
    /// What [`PolicyWriter::write`] must be given back to make exactly this change.
    pub digest: String,
}

/// Writes a question's rule into the user's policy (given by the binary: see the module
/// docs). `until` is when the rule stops allowing; `None` is for good.
pub trait PolicyWriter: Send + Sync + std::fmt::Debug {
    /// The change, without making it.
    fn preview(
        &self,
        session: &str,
        q: &cordon_approval::Question,
        until: Option<SystemTime>,
    ) -> Result<Preview, String>;

    /// Makes the change [`preview`](Self::preview) gave `digest` for, and checks the policy
    /// still loads; refuses (writing nothing) when the change is no longer that one. Returns
    /// the file written.
    fn write(
        &self,
        session: &str,
        q: &cordon_approval::Question,
        until: Option<SystemTime>,
        digest: &str,
    ) -> Result<String, String>;
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PreviewReq {
    session: String,
    id: u64,
    /// How long the rule allows (`1h`); absent: always.
    #[serde(default, rename = "for")]
    for_: Option<String>,
}

/// The `write` of an answer: the preview's `until` and digest.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteReq {
    #[serde(default)]
    until: Option<String>,
    digest: String,
}

/// The question `id` that `session`'s broker holds now.
fn held(dir: Option<&Path>, session: &str, id: u64) -> Result<cordon_approval::Question, Reply> {
    valid(session)?;
    let dir = dir
        .ok_or_else(|| Reply::error(503, "no approvals directory: set XDG_RUNTIME_DIR or HOME"))?;
    let socket = cordon_approval::socket_path(dir, session);
    let qs = cordon_approval::list(&socket).map_err(|e| Reply::error(409, e))?;
    let q = qs
        .into_iter()
        .find(|q| q.id == id)
        .ok_or_else(|| Reply::error(409, format!("no question {session}#{id} is waiting")))?;
    if q.subject.is_none() {
        return Err(Reply::error(
            409,
            format!(
                "question {session}#{id} cannot be remembered in the policy: no rule allows it again"
            ),
        ));
    }
    Ok(q)
}

fn writer(w: Option<&dyn PolicyWriter>) -> Result<&dyn PolicyWriter, Reply> {
    w.ok_or_else(|| Reply::error(503, "this dashboard cannot write your policy"))
}

/// `POST /api/remember`: the change an "allow always" (or "for" a while) would make.
pub(crate) fn preview(w: Option<&dyn PolicyWriter>, dir: Option<&Path>, body: &[u8]) -> Reply {
    let req: PreviewReq = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return Reply::error(400, format!("bad request body: {e}")),
    };
    let until = match req.for_.as_deref().map(humantime::parse_duration) {
        None => None,
        // At most ten years: an end past year 9999 could not be written.
        Some(Ok(d)) if d > Duration::ZERO && d <= Duration::from_secs(10 * 366 * 24 * 3600) => {
            SystemTime::now().checked_add(d)
        }
        Some(_) => {
            return Reply::error(
                400,
                "`for` is a duration such as \"1h\" or \"30m\", at most ten years",
            );
        }
    };
    let (w, q) = match writer(w).and_then(|w| Ok((w, held(dir, &req.session, req.id)?))) {
        Ok(x) => x,
        Err(r) => return r,
    };
    match w.preview(&req.session, &q, until) {
        Ok(p) => Reply::ok(json!({
            "ok": true,
            "file": p.file,
            "diff": p.diff,
            "digest": p.digest,
            "until": until.map(|t| humantime::format_rfc3339_seconds(t).to_string()),
        })),
        Err(e) => Reply::error(409, e),
    }
}

/// The write an answer asks for, made before the question is answered (allowed); the file
/// written.
pub(crate) fn write(
    w: Option<&dyn PolicyWriter>,
    dir: Option<&Path>,
    session: &str,
    id: u64,
    req: &WriteReq,
) -> Result<String, Reply> {
    let until = match req.until.as_deref().map(humantime::parse_rfc3339) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => return Err(Reply::error(400, format!("bad `until`: {e}"))),
    };
    let w = writer(w)?;
    let q = held(dir, session, id)?;
    w.write(session, &q, until, &req.digest)
        .map_err(|e| Reply::error(409, format!("not written: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    /// Records what it was asked to write.
    #[derive(Debug, Default)]
    struct Fake {
        written: Mutex<Vec<(String, String, Option<SystemTime>)>>,
    }

    impl PolicyWriter for Fake {
        fn preview(
            &self,
            _: &str,
            q: &cordon_approval::Question,
            until: Option<SystemTime>,
        ) -> Result<Preview, String> {
            Ok(Preview {
                file: "/home/u/.config/cordon/cordon.toml".into(),
                diff: format!("+# {}", q.what),
                digest: format!("d{}", until.is_some()),
            })
        }

        fn write(
            &self,
            session: &str,
            q: &cordon_approval::Question,
            until: Option<SystemTime>,
            digest: &str,
        ) -> Result<String, String> {
            if digest != format!("d{}", until.is_some()) {
                return Err("the file changed since the diff was shown".into());
            }
            self.written
                .lock()
                .unwrap()
                .push((session.into(), q.what.clone(), until));
            Ok("/home/u/.config/cordon/cordon.toml".into())
        }
    }

    /// A broker holding one exec question with a subject and one without.
    fn broker(dir: &Path) -> cordon_approval::Approvals {
        let a = cordon_approval::Approvals::start(dir, "20261206T150405Z-0000beef").unwrap();
        let subject = cordon_approval::Subject::Exec {
            program: "git".into(),
            args: vec!["push".into()],
            pattern: "git push *".into(),
        };
        let long = Duration::from_secs(60);
        a.ask("exec", "git push", "r", Some(subject), long, |_, _| {});
        a.ask(
            "http",
            "POST x carries a secret",
            "dlp",
            None,
            long,
            |_, _| {},
        );
        for _ in 0..100 {
            if cordon_approval::list(a.socket()).unwrap().len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        a
    }

    #[test]
    fn a_preview_then_a_write_with_its_digest() {
        let t = tempfile::tempdir().unwrap();
        let _a = broker(t.path());
        let fake = Fake::default();
        let w: Option<&dyn PolicyWriter> = Some(&fake);
        let r = preview(
            w,
            Some(t.path()),
            br#"{"session":"20261206T150405Z-0000beef","id":1,"for":"1h"}"#,
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["diff"], "+# git push");
        let until = v["until"].as_str().unwrap().to_string();
        assert!(until.ends_with('Z') && until.len() == 20, "{until}");
        let ok = WriteReq {
            until: Some(until),
            digest: "dtrue".into(),
        };
        let s = "20261206T150405Z-0000beef";
        assert!(write(w, Some(t.path()), s, 1, &ok).is_ok());
        // A digest that is not the preview's writes nothing.
        let stale = WriteReq {
            until: None,
            digest: "dtrue".into(),
        };
        let r = write(w, Some(t.path()), s, 1, &stale).unwrap_err();
        assert_eq!(r.status, 409);
        assert!(r.body.contains("changed since"), "{}", r.body);
        assert_eq!(fake.written.lock().unwrap().len(), 1);
    }

    #[test]
    fn what_cannot_be_remembered_is_refused_with_why() {
        let t = tempfile::tempdir().unwrap();
        let _a = broker(t.path());
        let fake = Fake::default();
        let s = r#"{"session":"20261206T150405Z-0000beef","id":2}"#;
        let r = preview(Some(&fake), Some(t.path()), s.as_bytes());
        assert_eq!(r.status, 409);
        assert!(r.body.contains("no rule allows it again"), "{}", r.body);
        let r = preview(None, Some(t.path()), s.replace("2}", "1}").as_bytes());
        assert_eq!(r.status, 503, "{}", r.body);
        let r = preview(
            Some(&fake),
            Some(t.path()),
            br#"{"session":"20261206T150405Z-0000beef","id":1,"for":"soon"}"#,
        );
        assert_eq!(r.status, 400, "{}", r.body);
        let r = preview(
            Some(&fake),
            Some(t.path()),
            br#"{"session":"20261206T150405Z-0000beef","id":9}"#,
        );
        assert_eq!(r.status, 409, "{}", r.body);
        assert!(r.body.contains("no question"), "{}", r.body);
    }
}
