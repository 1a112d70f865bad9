//! "Allow always" and "allow for a while": the rule that allows a held question's subject
//! again, appended to the user's policy file (`~/.config/cordon/cordon.toml`). `cordon approve
//! --always` / `--for` and the dashboard's buttons both come here, so there is one way it is
//! written: shown as a diff first, written atomically, the policy loaded again after, and the
//! file put back as it was when the policy no longer loads or the new rule would not decide.
//!
//! Where the rule lands: exec and HTTP rules are first-match in merge order (built-in, then
//! the user's file, then the project's or `--policy` file, then the profile) and, in one file,
//! `[[exec.rule]]` tables before the `deny`/`ask`/`allow` lists. An appended `[[exec.rule]]`
//! therefore wins over the user's own `[exec] ask` lists and over every later file — the usual
//! places an `ask` comes from — but not over a rule table above it in the same file or a
//! built-in rule. Appending never moves what the user wrote, so that case is found by loading
//! the policy again and asking it, and refused with the rule that comes first.

use std::path::PathBuf;
use std::time::SystemTime;

use anyhow::{Result, anyhow, bail};
use cordon_approval::{Question, Subject};
use cordon_policy::remember::{self as text, Grant, Note};

use crate::cli::PolicyArgs;

/// How long a remembered allow lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    Always,
    /// Written with `until`.
    Until(SystemTime),
}

/// What an exec rule covers: the exact command line asked about, or everything the asking
/// rule's pattern matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Exact,
    Pattern,
}

/// How an allow is written: for how long, covering what, by whom, when.
#[derive(Debug, Clone, Copy)]
struct Written<'a> {
    keep: Keep,
    scope: Scope,
    by: &'a str,
    now: SystemTime,
}

/// A change to the user's policy file, made by [`Change::write`].
#[derive(Debug)]
pub(crate) struct Change {
    /// The user's policy file.
    pub file: PathBuf,
    before: Option<String>,
    after: String,
    /// The change as a unified diff.
    pub diff: String,
    subject: Subject,
    /// How the policy is loaded again to check it.
    opts: cordon_policy::LoadOptions,
}

/// Options for loading the policy as `cordon check` does from the home: the user's file
/// without a project (a project's rules come after it, so they cannot decide before it).
fn check_options() -> cordon_policy::LoadOptions {
    let home = crate::commands::home();
    let dir = home.canonicalize().unwrap_or(home);
    let args = PolicyArgs {
        project: None,
        profile: None,
    };
    let mut o = crate::commands::load_options(None, &args, dir);
    o.no_project = true;
    o
}

/// The rule for `subject`. Refused where the exact rule would allow more than was asked
/// (patterns have no escape: a `*` or `?` in a command line or path is a wildcard) or would
/// put what looks like a secret into the policy file.
fn grant(subject: &Subject, scope: Scope) -> Result<Grant> {
    let wild = |s: &str| s.contains(['*', '?']);
    Ok(match subject {
        Subject::Exec {
            program,
            args,
            pattern,
        } => match scope {
            Scope::Pattern => Grant::Exec {
                pattern: pattern.clone(),
            },
            Scope::Exact => {
                let line = Subject::command_line(program, args);
                if wild(&line) {
                    bail!(
                        "`{line}` holds `*` or `?`, which an exec pattern reads as a wildcard: \
                         the rule would allow more than this command; use --pattern for the \
                         asking rule's pattern, or write a rule by hand"
                    );
                }
                if cordon_http::dlp::redact(&line) != line {
                    bail!(
                        "the command line holds what looks like a secret, which is not written \
                         into a policy file; use --pattern, or write a rule by hand"
                    );
                }
                Grant::exact_exec(&line)
            }
        },
        Subject::Http {
            method,
            host,
            port,
            path,
        } => {
            if wild(path) {
                bail!(
                    "the path {path} holds `*` or `?`, which a rule's path reads as a wildcard: \
                     the rule would allow more than this request; write a rule by hand"
                );
            }
            Grant::Http {
                host: host.clone(),
                port: *port,
                method: method.clone(),
                path: path.clone(),
            }
        }
        Subject::Network { host, port } => Grant::Network {
            host: host.clone(),
            port: *port,
        },
    })
}

/// Gives `file` back the modification time `t` it had before cordon wrote it (best effort: a
/// file whose time cannot be set keeps the new one).
fn keep_time(file: &std::path::Path, t: Option<SystemTime>) {
    let (Some(t), Ok(real)) = (t, text::real_path(file)) else {
        return;
    };
    if let Ok(f) = std::fs::OpenOptions::new().write(true).open(real) {
        let _ = f.set_modified(t);
    }
}

/// `t` as RFC 3339 in UTC, to the second: `2026-12-06T15:04:05Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

impl Change {
    /// The change that allows `q` (of `session`) again, as `by` (`cordon approve`, `cordon
    /// ui`) writes it at `now` into the user's policy file, where `cordon run` reads it.
    pub(crate) fn new(
        session: &str,
        q: &Question,
        keep: Keep,
        scope: Scope,
        by: &str,
        now: SystemTime,
    ) -> Result<Change> {
        let how = Written {
            keep,
            scope,
            by,
            now,
        };
        Change::in_policy(check_options(), session, q, &how)
    }

    /// [`Change::new`] for the user's file of `opts`, loaded again with `opts`.
    fn in_policy(
        opts: cordon_policy::LoadOptions,
        session: &str,
        q: &Question,
        how: &Written<'_>,
    ) -> Result<Change> {
        let subject = q.subject.clone().ok_or_else(|| {
            anyhow!(
                "{session}#{} cannot be remembered in your policy: no rule allows `{}` again \
                 (answer it with --allow alone)",
                q.id,
                q.what
            )
        })?;
        let file = opts
            .user_config
            .clone()
            .ok_or_else(|| anyhow!("no user policy file: set HOME or XDG_CONFIG_HOME"))?;
        let before = text::read(&file)?;
        let stamp = rfc3339(how.now);
        let until = match how.keep {
            Keep::Always => None,
            Keep::Until(t) => Some(rfc3339(t)),
        };
        // The comment stays in the file: what looks like a secret is not written there.
        let what = cordon_http::dlp::redact(&q.what);
        let note = Note {
            by: how.by,
            date: stamp.get(..10).unwrap_or(&stamp),
            session,
            what: &what,
        };
        let block = text::block(&grant(&subject, how.scope)?, until.as_deref(), &note);
        let after = text::appended(before.as_deref(), &block);
        let diff = text::unified_diff(&file.display().to_string(), before.as_deref(), &after);
        Ok(Change {
            file,
            before,
            after,
            diff,
            subject,
            opts,
        })
    }

    /// Names this exact change (the file before and after): the dashboard shows the diff, and
    /// writes only while this is still the change it showed.
    pub(crate) fn digest(&self) -> String {
        let mut both = self.before.clone().unwrap_or_default().into_bytes();
        both.push(0);
        both.extend_from_slice(self.after.as_bytes());
        cordon_policy::sha256_hex(&both)
    }

    /// Writes the change, then loads the policy again: if it no longer loads, or the new rule
    /// would not decide what was asked, the file is put back as it was and the error says why.
    pub(crate) fn write(&self) -> Result<()> {
        let shown = self.file.display();
        if text::read(&self.file)? != self.before {
            bail!("{shown} changed since the diff was made: nothing written; look at it again");
        }
        // `for` counts from the file's last write: cordon's own append must not restart the
        // grants written there, so the file keeps its time.
        let written_at = text::real_path(&self.file)
            .ok()
            .and_then(|p| std::fs::metadata(p).ok())
            .and_then(|m| m.modified().ok());
        text::replace(&self.file, &self.after)?;
        keep_time(&self.file, written_at);
        let Err(why) = self.takes_effect() else {
            return Ok(());
        };
        let restored = match &self.before {
            Some(t) => text::replace(&self.file, t)
                .map(|()| keep_time(&self.file, written_at))
                .map_err(anyhow::Error::from),
            None => text::real_path(&self.file)
                .map_err(anyhow::Error::from)
                .and_then(|p| std::fs::remove_file(&p).map_err(Into::into)),
        };
        match restored {
            Ok(()) => Err(why.context(format!("not written ({shown} is as it was)"))),
            Err(e) => Err(why.context(format!(
                "and {shown} could not be put back ({e}): remove the block at its end by hand"
            ))),
        }
    }

    /// The policy, loaded again, allows what was asked.
    fn takes_effect(&self) -> Result<()> {
        let loaded = cordon_policy::load(&self.opts)
            .map_err(|e| anyhow!("the policy would no longer load:\n{e}"))?;
        // As a session starting now would see it: its session plan (rules that ended do not
        // decide; the local MCP servers' exec rules come first).
        let resolved = crate::session_plan::resolve(&loaded, false, SystemTime::now(), &|_| {});
        let plan = &resolved.plan;
        let (decided, by) = match &self.subject {
            Subject::Exec { program, args, .. } => {
                match cordon_sandbox::explain::decide_exec(&plan.exec, program, program, args) {
                    Some(r) if r.action != cordon_policy::ExecAction::Allow => (
                        false,
                        format!(
                            "exec rule \"{}\" ({}) from {}",
                            r.pattern, r.action, r.origin
                        ),
                    ),
                    _ => (true, String::new()),
                }
            }
            Subject::Http {
                method,
                host,
                port,
                path,
            } => {
                let d = cordon_http::explain::explain_request(
                    plan, method, host, *port, path, "", None,
                )
                .map_err(|why| anyhow!("the HTTP layer refuses this path outright: {why}"))?;
                let allowed = d.action == cordon_policy::HttpAction::Allow;
                (allowed, format!("HTTP rule `{}` ({})", d.rule, d.action))
            }
            Subject::Network { host, port } => {
                let v = cordon_net::explain_flow(plan, host, *port, false, None)?;
                (v.allow, v.rule.to_string())
            }
        };
        if !decided {
            bail!(
                "{by} decides first: the first matching rule decides, and a rule added at the \
                 end of {} comes after it. Put the new block above that rule yourself, or \
                 change that rule",
                self.file.display()
            );
        }
        Ok(())
    }
}

/// The dashboard's way to the same writing (`cordon ui`): it runs in the dashboard's process,
/// as the user.
#[derive(Debug)]
pub(crate) struct DashboardWriter;

fn keep(until: Option<SystemTime>) -> Keep {
    until.map_or(Keep::Always, Keep::Until)
}

impl cordon_ui::PolicyWriter for DashboardWriter {
    fn preview(
        &self,
        session: &str,
        q: &Question,
        until: Option<SystemTime>,
    ) -> Result<cordon_ui::Preview, String> {
        let c = Change::new(
            session,
            q,
            keep(until),
            Scope::Exact,
            "cordon ui",
            SystemTime::now(),
        )
        .map_err(|e| crate::output::chain(&e))?;
        Ok(cordon_ui::Preview {
            file: c.file.display().to_string(),
            diff: c.diff.clone(),
            digest: c.digest(),
        })
    }

    fn write(
        &self,
        session: &str,
        q: &Question,
        until: Option<SystemTime>,
        digest: &str,
    ) -> Result<String, String> {
        let now = SystemTime::now();
        let c = Change::new(session, q, keep(until), Scope::Exact, "cordon ui", now)
            .map_err(|e| crate::output::chain(&e))?;
        if c.digest() != digest {
            return Err(format!(
                "{} changed since the diff was shown: look at it again",
                c.file.display()
            ));
        }
        c.write().map_err(|e| crate::output::chain(&e))?;
        Ok(c.file.display().to_string())
    }
}

#[cfg(test)]
#[path = "remember_tests.rs"]
mod tests;
