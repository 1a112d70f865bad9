//! Remembering a person's answer in the user's policy file: the block that allows again what a
//! held question asked about (`cordon approve --always` / `--for`, the dashboard's buttons),
//! the file with it appended, the change as a unified diff, and the atomic replacement.
//!
//! The user's file is only ever appended to, as text: every byte they wrote stays, in its
//! order, with its comments and formatting — a TOML round trip would lose all three. Where the
//! block lands decides whether it wins (rules are first-match); the caller loads the policy
//! again after writing and checks that it does.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::PolicyError;
use crate::explain::toml_string;

/// The rule that allows a question's subject again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// An `[[exec.rule]]` allowing a command-line pattern.
    Exec {
        /// The pattern (an exact command line, or the asking rule's pattern).
        pattern: String,
    },
    /// An `[[http.rule]]` allowing one method on one host, port and path.
    Http {
        /// The exact host.
        host: String,
        /// The port.
        port: u16,
        /// The method, e.g. `POST`.
        method: String,
        /// The path glob (`*` where the request's path had a token).
        path: String,
    },
    /// A `[[network.allow]]` for one host and port.
    Network {
        /// The exact host.
        host: String,
        /// The port.
        port: u16,
    },
}

impl Grant {
    /// An exec grant for exactly `line` (`PROGRAM ARGS…` joined by single spaces), as far as
    /// an exec pattern can say it. Patterns have no escape: a `*` or `?` in the line stays a
    /// wildcard. What the policy would refuse as a pattern becomes `?`, which matches it: a
    /// `[` that would read as a character class, whitespace at either end.
    pub fn exact_exec(line: &str) -> Grant {
        let chars: Vec<char> = line.chars().collect();
        let last = chars.len().saturating_sub(1);
        let lead = chars.iter().take_while(|c| c.is_whitespace()).count();
        let trail = chars.len() - chars.iter().rev().take_while(|c| c.is_whitespace()).count();
        let pattern = chars
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let class = c == '[' && i < last && !chars[i + 1].is_whitespace();
                if class || i < lead || i >= trail {
                    '?'
                } else {
                    c
                }
            })
            .collect();
        Grant::Exec { pattern }
    }
}

/// The comment above a remembered block: who wrote it, when, for which session and what.
#[derive(Debug, Clone, Copy)]
pub struct Note<'a> {
    /// `cordon approve` or `cordon ui`.
    pub by: &'a str,
    /// `YYYY-MM-DD`.
    pub date: &'a str,
    /// The session the question came from.
    pub session: &'a str,
    /// What was asked, as the person saw it.
    pub what: &'a str,
}

/// The TOML block for `grant`, commented with `note`; `until` (RFC 3339) makes it a grant that
/// expires. Every string is a TOML basic string escaped by [`toml_string`], and the comment
/// has its control characters escaped, so nothing in a command line or URL can end the comment
/// or add a line of its own.
pub fn block(grant: &Grant, until: Option<&str>, note: &Note<'_>) -> String {
    let mut out = format!(
        "# added by {} on {} for session {}: {}\n",
        note.by,
        note.date,
        comment_text(note.session),
        comment_text(note.what)
    );
    match grant {
        Grant::Exec { pattern } => {
            out.push_str("[[exec.rule]]\n");
            out.push_str(&format!("pattern = {}\n", toml_string(pattern)));
            out.push_str("action = \"allow\"\n");
        }
        Grant::Http {
            host,
            port,
            method,
            path,
        } => {
            out.push_str("[[http.rule]]\n");
            out.push_str(&format!("host = {}\n", toml_string(host)));
            out.push_str(&format!("port = {port}\n"));
            out.push_str(&format!("methods = [{}]\n", toml_string(method)));
            out.push_str(&format!("path = {}\n", toml_string(path)));
            out.push_str("action = \"allow\"\n");
        }
        Grant::Network { host, port } => {
            out.push_str("[[network.allow]]\n");
            out.push_str(&format!("host = {}\n", toml_string(host)));
            out.push_str(&format!("ports = [{port}]\n"));
        }
    }
    if let Some(until) = until {
        out.push_str(&format!("until = {}\n", toml_string(until)));
    }
    out
}

/// Text that stays inside one TOML comment: what is unsafe on a terminal (controls: TOML allows
/// none but tab in a comment, and a newline would start a line of policy; bidi overrides) is
/// written as `\u{…}`.
fn comment_text(s: &str) -> String {
    cordon_events::terminal::safe(s)
}

/// `before` (the file's text, `None` when there is none) with `block` appended after a blank
/// line; `before` is kept byte for byte (a missing last newline is added after it).
pub fn appended(before: Option<&str>, block: &str) -> String {
    let mut out = before.unwrap_or_default().to_string();
    if !out.is_empty() {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
    }
    out.push_str(block);
    out
}

/// Lines of context around a change, as `diff -u`.
const CONTEXT: usize = 3;

/// The change from `before` (`None`: no file) to `after` as a unified diff of one hunk, the
/// shape `diff -u` and `git apply` read. One hunk is exact here: a remembered block changes
/// one run of lines (it is appended), and anything else is still shown correctly, only with
/// the unchanged lines between two changes inside the hunk. Empty when nothing changes.
pub fn unified_diff(label: &str, before: Option<&str>, after: &str) -> String {
    let old: Vec<&str> = before.unwrap_or_default().split_inclusive('\n').collect();
    let new: Vec<&str> = after.split_inclusive('\n').collect();
    if before.is_some() && old == new {
        return String::new();
    }
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let start = prefix.saturating_sub(CONTEXT);
    let tail = suffix.min(CONTEXT);
    let (old_end, new_end) = (old.len() - suffix + tail, new.len() - suffix + tail);
    // A range of no lines is named by the line before it (`-0,0` for an empty file).
    let range = |end: usize| {
        let n = end - start;
        format!("{},{n}", if n == 0 { start } else { start + 1 })
    };
    let mut out = match before {
        Some(_) => format!("--- {label}\n+++ {label}\n"),
        None => format!("--- /dev/null\n+++ {label}\n"),
    };
    out.push_str(&format!("@@ -{} +{} @@\n", range(old_end), range(new_end)));
    let mut line = |mark: char, text: &str| {
        out.push(mark);
        out.push_str(text.strip_suffix('\n').unwrap_or(text));
        out.push('\n');
        if !text.ends_with('\n') {
            out.push_str("\\ No newline at end of file\n");
        }
    };
    for l in &old[start..prefix] {
        line(' ', l);
    }
    for l in &old[prefix..old.len() - suffix] {
        line('-', l);
    }
    for l in &new[prefix..new.len() - suffix] {
        line('+', l);
    }
    for l in &old[old.len() - suffix..old_end] {
        line(' ', l);
    }
    out
}

/// The file a write to `path` really changes: the target of a symlink (a policy kept in a
/// dotfiles repository and linked in stays a link), else `path` itself.
pub fn real_path(path: &Path) -> Result<PathBuf, PolicyError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(path).map_err(|e| PolicyError::io("follow the link", path, e))
        }
        _ => Ok(path.to_path_buf()),
    }
}

/// The text of the policy file at `path`, `None` when there is none.
pub fn read(path: &Path) -> Result<Option<String>, PolicyError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(PolicyError::io("read", path, e)),
    }
}

/// Replaces the file at `path` (through a symlink, see [`real_path`]) with `content`
/// atomically: a temporary file beside it with its mode (0600 for a new file) is written,
/// flushed and renamed over it, so a reader sees the old file or the new one, never half. A
/// missing directory is created 0700, as the user's own configuration.
pub fn replace(path: &Path, content: &str) -> Result<(), PolicyError> {
    let target = real_path(path)?;
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| PolicyError::io("create", &dir, e))?;
    let meta = std::fs::metadata(&target).ok();
    write_atomically(&target, content.as_bytes(), meta.as_ref())
        .map_err(|e| PolicyError::io("write", &target, e))
}

/// Writes `content` to a temporary file beside `target` (the mode and owner of `meta`, or
/// 0600 and ours), flushes it, renames it over `target` and flushes the directory: a reader
/// sees the old file or the new one, never half. Shared by every writer of a user's file
/// (the policy here, login files in cordon-http).
pub fn write_atomically(
    target: &Path,
    content: &[u8],
    meta: Option<&std::fs::Metadata>,
) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.cordon-{}-{n}.tmp", std::process::id()));
    let mode = meta.map_or(0o600, |m| m.mode() & 0o7777);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        // The umask may have narrowed the mode; the owner is kept where we may set it (root
        // writing a user's file), and otherwise is ours already.
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        if let Some(m) = meta
            && (m.uid(), m.gid()) != own_ids()
        {
            std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid()))?;
        }
        f.write_all(content)?;
        f.sync_all()
    })();
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, target)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    // The rename itself survives a crash once the directory is on disk.
    std::fs::File::open(dir)?.sync_all()
}

/// This process's effective ids (the owner of `/proc/self`): what a file it creates gets.
fn own_ids() -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or((u32::MAX, u32::MAX), |m| (m.uid(), m.gid()))
}

#[cfg(test)]
#[path = "remember_tests.rs"]
mod tests;
