//! Review: what a session changed under each protected path (`plan`), each change described
//! with its flags and diff, and the summary a reviewer reads.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{Change, Planned, Session};
use crate::error::StateError;
use crate::flags::{self, Subject};
use crate::fsops;
use crate::manifest::{self, ChangeKind, Manifest, Node, NodeKind, diff_manifests, join_rel};
use crate::meta::{EntryKind, Status};
use crate::overlay;
use crate::textdiff;
use cordon_events::terminal;

/// Largest file (either side) shown as a diff.
const DIFF_MAX_BYTES: u64 = 64 * 1024;
/// Most diff lines shown per file.
const DIFF_MAX_LINES: usize = 200;
/// Largest file read to look for flags (e.g. `~/.claude.json` grows large).
const FLAG_MAX_BYTES: u64 = 16 * 1024 * 1024;

fn home_display(p: &Path) -> String {
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from)
        && home.is_absolute()
        && home != Path::new("/")
        && let Ok(rest) = p.strip_prefix(&home)
    {
        return if rest.as_os_str().is_empty() {
            "~".to_owned()
        } else {
            format!("~/{}", rest.display())
        };
    }
    p.display().to_string()
}

/// A mode worth showing for a new entry: setuid/setgid, world-writable, or an executable file.
fn unusual_mode(n: &Node) -> bool {
    n.kind != NodeKind::Symlink
        && (n.mode & 0o6002 != 0 || (n.kind == NodeKind::File && n.mode & 0o111 != 0))
}

/// Read a file as text for review: regular, at most `limit` bytes, hashing to `expect`, UTF-8
/// without NUL bytes; otherwise `None`.
fn read_text(path: &Path, expect: Option<&str>, limit: u64) -> Option<String> {
    let mut f = fsops::open_regular(path).ok()?;
    if f.metadata().ok()?.len() > limit {
        return None;
    }
    let mut buf = Vec::new();
    f.by_ref().take(limit + 1).read_to_end(&mut buf).ok()?;
    if buf.len() as u64 > limit {
        return None;
    }
    if let Some(want) = expect
        && blake3::hash(&buf).to_hex().as_str() != want
    {
        return None;
    }
    if buf.contains(&0) {
        return None;
    }
    String::from_utf8(buf).ok()
}

/// A directory added or removed with other changes below it: it says nothing those do not,
/// so review does not list it (it is applied with them).
fn implied(c: &Change, all: &[&Change]) -> bool {
    let is_dir = |n: &Option<Node>| n.as_ref().is_some_and(|n| n.kind == NodeKind::Dir);
    let dir = match c.kind {
        ChangeKind::Added => is_dir(&c.after),
        ChangeKind::Removed => is_dir(&c.before),
        _ => false,
    };
    dir && all
        .iter()
        .any(|o| o.protected == c.protected && o.rel != c.rel && o.rel.starts_with(&c.rel))
}

/// The changes review lists (and counts): all but [`implied`] directories.
pub fn listed(changes: &[Change]) -> Vec<&Change> {
    let all: Vec<&Change> = changes.iter().collect();
    all.iter().copied().filter(|c| !implied(c, &all)).collect()
}

/// One change as the summary lists it: sign, name (`/` for a directory), a symlink's target,
/// a mode change, and FLAGGED with its reasons.
fn change_line(c: &Change) -> String {
    let is_dir = |n: &Option<Node>| n.as_ref().is_some_and(|n| n.kind == NodeKind::Dir);
    let name = if c.rel.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        terminal::quoted(c.rel.as_os_str())
    };
    let slash = if is_dir(&c.after) || (c.after.is_none() && is_dir(&c.before)) {
        "/"
    } else {
        ""
    };
    let mode = match (&c.before, &c.after) {
        (Some(b), Some(a)) if b.kind == a.kind && b.mode != a.mode => {
            format!(" (mode {:o} -> {:o})", b.mode, a.mode)
        }
        (None, Some(a)) if unusual_mode(a) => format!(" (mode {:o})", a.mode),
        _ => String::new(),
    };
    let target = match (&c.after, &c.link_target) {
        (Some(a), Some(t)) if a.kind == NodeKind::Symlink => {
            format!(" -> {}", terminal::quoted(t.as_os_str()))
        }
        (Some(a), None) if a.kind == NodeKind::Symlink => {
            " -> (target changed since the review started)".to_owned()
        }
        _ => String::new(),
    };
    let line = format!("  {} {name}{slash}{target}{mode}", c.kind.sign());
    if c.flags.is_empty() {
        return line;
    }
    let flags: Vec<String> = c.flags.iter().map(|f| terminal::safe(f)).collect();
    format!("{line}  FLAGGED: {}", flags.join("; "))
}

impl Session {
    pub(super) fn plan(&self) -> Result<Vec<Planned>, StateError> {
        let meta = self.meta()?;
        if meta.status != Status::Pending {
            return Err(StateError::WrongStatus {
                id: self.id.clone(),
                status: meta.status.to_string(),
                msg: "its changes are no longer held".into(),
            });
        }
        let mut out = Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            let mut before = Manifest::load(&e.manifest)?;
            let (after, sources) = match e.kind {
                _ if e.embedded => crate::home::embedded_after(&before, &e.upper)?,
                EntryKind::Dir => {
                    // Git object stores are not in the snapshot: what the session touched
                    // there is compared with the host's copy (the overlay's lower layer).
                    let (after, sources) = overlay::merged(&before, &e.upper)?;
                    for (rel, node) in overlay::unscanned_lower(&before, &e.upper, &e.host)? {
                        before.entries.insert(rel, node);
                    }
                    (after, sources)
                }
                // A tree moved off the host at exit (`Session::quarantine`): all of it is new.
                EntryKind::Absent if fs::symlink_metadata(&e.upper).is_ok_and(|m| m.is_dir()) => {
                    let m = manifest::scan(&e.upper)?;
                    let s = m
                        .entries
                        .keys()
                        .map(|r| (r.clone(), join_rel(&e.upper, r)))
                        .collect();
                    (m, s)
                }
                EntryKind::File | EntryKind::Absent => {
                    let mut m = Manifest::default();
                    let mut s = BTreeMap::new();
                    if let Some(n) = manifest::node_of(&e.upper)? {
                        m.entries.insert(PathBuf::new(), n);
                        s.insert(PathBuf::new(), e.upper.clone());
                    }
                    (m, s)
                }
            };
            for c in diff_manifests(&before, &after) {
                out.push(Planned {
                    entry: i,
                    host_path: join_rel(&e.host, &c.path),
                    kind: c.kind,
                    before: before.entries.get(&c.path).cloned(),
                    after: after.entries.get(&c.path).cloned(),
                    source: sources.get(&c.path).cloned(),
                    rel: c.path,
                });
            }
        }
        Ok(out)
    }

    /// Every change the sandbox made to the protected paths that still waits (what an
    /// earlier partial accept applied is on the host already, and not asked about again), in
    /// path order, with flags and diffs. Only for pending sessions.
    pub fn changes(&self) -> Result<Vec<Change>, StateError> {
        let applied: std::collections::BTreeSet<PathBuf> =
            self.meta()?.applied.into_iter().collect();
        let plans = self.plan()?;
        Ok(plans
            .iter()
            .filter(|p| !applied.contains(&p.host_path))
            .map(|p| self.describe(p))
            .collect())
    }

    fn describe(&self, p: &Planned) -> Change {
        let e = &self.entries[p.entry];
        let file_hash = |n: &Option<Node>| -> Option<String> {
            n.as_ref()
                .filter(|n| n.kind == NodeKind::File)
                .and_then(|n| n.hash.clone())
        };
        let before_text = file_hash(&p.before)
            .and_then(|h| read_text(&join_rel(&e.snapshot, &p.rel), Some(&h), FLAG_MAX_BYTES));
        let before_file = file_hash(&p.before)
            .map(|_| join_rel(&e.snapshot, &p.rel))
            .filter(|f| f.is_file());
        let after_text = file_hash(&p.after)
            .and_then(|h| read_text(p.source.as_deref()?, Some(&h), FLAG_MAX_BYTES));
        // The symlink target, only if it is still what the manifest recorded.
        let link_target = p
            .after
            .as_ref()
            .filter(|a| a.kind == NodeKind::Symlink)
            .and_then(|a| {
                let t = fs::read_link(p.source.as_deref()?).ok()?;
                let h = blake3::hash(std::os::unix::ffi::OsStrExt::as_bytes(t.as_os_str()));
                (a.hash.as_deref() == Some(h.to_hex().as_str())).then_some(t)
            });
        let flags = flags::flags(&Subject {
            host_path: &p.host_path,
            rel: &p.rel,
            kind: p.kind,
            before: p.before.as_ref(),
            after: p.after.as_ref(),
            before_text: before_text.as_deref(),
            after_text: after_text.as_deref(),
            before_file: before_file.as_deref(),
            after_file: p
                .source
                .as_deref()
                .filter(|_| file_hash(&p.after).is_some()),
            link_target: link_target.as_deref(),
        })
        .iter()
        .map(|f| terminal::safe(f))
        .collect();
        let before_ok = match &p.before {
            None => true,
            Some(n) if n.kind == NodeKind::File => {
                n.size <= DIFF_MAX_BYTES && before_text.is_some()
            }
            Some(_) => p.kind == ChangeKind::TypeChanged,
        };
        let diff = match (&p.after, &after_text) {
            (Some(a), Some(t)) if a.size <= DIFF_MAX_BYTES && before_ok => {
                let label = if p.rel.as_os_str().is_empty() {
                    e.host.file_name().map(terminal::quoted).unwrap_or_default()
                } else {
                    terminal::quoted(p.rel.as_os_str())
                };
                let d = textdiff::unified(
                    before_text.as_deref().unwrap_or(""),
                    t,
                    &label,
                    DIFF_MAX_LINES,
                );
                (!d.is_empty()).then(|| terminal::lines(&d))
            }
            _ => None,
        };
        Change {
            host_path: p.host_path.clone(),
            kind: p.kind,
            flags,
            diff,
            protected: e.host.clone(),
            rel: p.rel.clone(),
            before: p.before.clone(),
            after: p.after.clone(),
            link_target,
        }
    }

    /// A compact, human summary: per protected path, `+` added, `-` removed, `~` changed, `!`
    /// type changed, flagged lines first, then unified diffs of small text files.
    pub fn summary(&self) -> Result<String, StateError> {
        self.summarise(false)
    }

    /// [`Session::summary`] as the exit review asks with it: the diffs of git's bookkeeping
    /// (refs, logs, objects), which say nothing a reviewer acts on, folded behind
    /// `cordon state diff`, which shows them.
    pub fn review_summary(&self) -> Result<String, StateError> {
        self.summarise(true)
    }

    fn summarise(&self, fold: bool) -> Result<String, StateError> {
        let all = self.changes()?;
        let changes = listed(&all);
        let flagged = changes.iter().filter(|c| !c.flags.is_empty()).count();
        let mut out = String::new();
        // The paths the listed changes are under (all of them when nothing changed).
        let paths = match changes.is_empty() {
            true => self.entries.len(),
            false => self
                .entries
                .iter()
                .filter(|e| changes.iter().any(|c| c.protected == e.host))
                .count(),
        };
        let _ = writeln!(
            out,
            "session {}: {} change{} under {} protected path{}{}",
            self.id,
            changes.len(),
            if changes.len() == 1 { "" } else { "s" },
            paths,
            if paths == 1 { "" } else { "s" },
            if flagged > 0 {
                format!(", {flagged} FLAGGED")
            } else {
                String::new()
            }
        );
        let (mut flagged_diffs, mut diffs, mut folded) = (String::new(), String::new(), 0usize);
        // What the reviewer must see comes first: protected paths with a FLAGGED change.
        let mut entries: Vec<_> = self.entries.iter().collect();
        entries.sort_by_key(|e| {
            !changes
                .iter()
                .any(|c| c.protected == e.host && !c.flags.is_empty())
        });
        for e in entries {
            let mine: Vec<&Change> = changes
                .iter()
                .copied()
                .filter(|c| c.protected == e.host)
                .collect();
            let kind = match e.kind {
                EntryKind::Dir => "dir",
                EntryKind::File => "file",
                EntryKind::Absent => "new",
            };
            let host_shown = terminal::quoted(OsStr::new(&home_display(&e.host)));
            if mine.is_empty() {
                // Among changes, a path without any is noise; alone, it is the answer.
                if changes.is_empty() {
                    let _ = writeln!(out, "{host_shown} ({kind}): unchanged");
                }
                continue;
            }
            let count = |k: ChangeKind| mine.iter().filter(|c| c.kind == k).count();
            let _ = writeln!(
                out,
                "{host_shown} ({kind}): +{} -{} ~{}{}",
                count(ChangeKind::Added),
                count(ChangeKind::Removed),
                count(ChangeKind::Modified),
                match count(ChangeKind::TypeChanged) {
                    0 => String::new(),
                    n => format!(" !{n} type changed"),
                }
            );
            let mut shown = mine;
            shown.sort_by_key(|c| c.flags.is_empty());
            for c in shown {
                let _ = writeln!(out, "{}", change_line(c));
                match &c.diff {
                    Some(_)
                        if fold
                            && c.flags.is_empty()
                            && crate::exit_fate(&c.host_path)
                                == crate::ExitFate::AppliedUnasked =>
                    {
                        folded += 1
                    }
                    Some(d) if c.flags.is_empty() => diffs.push_str(&terminal::lines(d)),
                    Some(d) => flagged_diffs.push_str(&terminal::lines(d)),
                    None => {}
                }
            }
        }
        for s in &self.skipped {
            let _ = writeln!(
                out,
                "not protected (did not exist): {}",
                terminal::quoted(OsStr::new(&home_display(s)))
            );
        }
        // FLAGGED diffs first, in the order their lines are listed.
        flagged_diffs.push_str(&diffs);
        if !flagged_diffs.is_empty() {
            out.push('\n');
            out.push_str(&flagged_diffs);
        }
        if folded > 0 {
            let _ = writeln!(
                out,
                "({folded} diff{} of git refs, logs and objects folded: `cordon state diff {}`)",
                if folded == 1 { "" } else { "s" },
                self.id
            );
        }
        Ok(out)
    }

    /// The manifest root hash of each protected path's result (snapshot with the session's
    /// changes), for the audit log. Only for pending sessions.
    pub fn after_hashes(&self) -> Result<Vec<(PathBuf, String)>, StateError> {
        let plans = self.plan()?;
        let mut out = Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            let mut m = Manifest::load(&e.manifest)?;
            for p in plans.iter().filter(|p| p.entry == i) {
                match &p.after {
                    Some(n) => {
                        m.entries.insert(p.rel.clone(), n.clone());
                    }
                    None => {
                        m.entries.remove(&p.rel);
                    }
                }
            }
            out.push((e.host.clone(), m.root_hash()));
        }
        Ok(out)
    }
}
